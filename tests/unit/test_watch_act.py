"""The watch's actions: drain, then out; restart once; hold a flapping node out."""

from __future__ import annotations

from onecat.health.judge import ERROR, WARNING
from onecat.watch import act
from onecat.watch.deltas import Finding

# A fatal Xid: an event an engine restart can clear (the driver reset the channel).
XID = Finding(ERROR, "xid", "00000000:3C:00.0", "the kernel logged Xid 48 (double-bit ECC error) "
              "1 more time(s) on the GPU at 00000000:3C:00.0 since the last look")
# Uncorrectable errors since the driver loaded: a condition, on every look until a reset.
ECC = Finding(ERROR, "ecc_volatile_uncorrected", "GPU 1", "GPU 1 has 1 uncorrectable ECC error "
              "since the driver loaded")
LOST = Finding(ERROR, "gpu_lost", "GPU 1", "GPU 1 fell off the bus")
GARBAGE = Finding(ERROR, "quality", None, "the quality probe 'x' failed: collapsed")
DOWN = Finding(WARNING, "probe_unreachable", None, "the quality probe 'x' failed: HTTP 503")
HOT = Finding(WARNING, "temperature", "GPU 0", "GPU 0 at 88 C")
POLICY = act.Policy(restart=True, flap_window_s=3600, restart_grace_s=300)


def _run(looks: list[tuple[float, list[Finding]]], policy: act.Policy = POLICY,
         unreachable_at: tuple[float, ...] = ()) -> list[act.Action]:
    state, actions = None, []
    for now, findings in looks:
        action = act.step(state, findings, now, policy, probe_unreachable=now in unreachable_at)
        state = action.state
        actions.append(action)
    return actions


def test_clean_looks_keep_the_node_in() -> None:
    actions = _run([(0, []), (60, [HOT]), (120, [])])
    assert [a.answer for a in actions] == ["up", "up", "up"]
    assert not any(a.restart_engine or a.transitions for a in actions)


def test_a_fatal_xid_drains_then_restarts_once_then_readmits() -> None:
    drain, restart, back, after = _run([(0, [XID]), (60, []), (120, []), (180, [])])
    assert drain.answer.startswith("drain #onecat-watch: the kernel logged Xid 48")
    assert not drain.restart_engine
    assert restart.restart_engine and restart.answer.startswith("maint down #")
    assert back.answer == "up" and back.state["mode"] == act.IN
    assert after.answer == "up"
    assert back.transitions == ["restarted -> in: clean after the restart"]


def test_a_second_fault_within_the_flap_window_holds_the_node_out() -> None:
    actions = _run([(0, [XID]), (60, []), (120, []), (600, [GARBAGE]), (660, []), (720, [])])
    assert [a.state["mode"] for a in actions] == [
        act.DRAINING, act.RESTARTED, act.IN, act.DRAINING, act.HELD, act.HELD]
    assert [a.restart_engine for a in actions].count(True) == 1
    assert "second fault within the flap window" in actions[4].transitions[0]
    assert actions[5].answer.startswith(
        "maint down #onecat-watch held: a second fault within the flap window: the quality probe")


def test_a_fault_after_the_flap_window_gets_another_restart() -> None:
    actions = _run([(0, [XID]), (60, []), (120, []), (5000, [XID]), (5060, []), (5120, [])])
    assert [a.restart_engine for a in actions] == [False, True, False, False, True, False]
    assert actions[-1].answer == "up"


def test_a_fault_a_restart_cannot_clear_holds_without_restarting() -> None:
    actions = _run([(0, [LOST, ECC]), (60, []), (120, [])])
    assert [a.state["mode"] for a in actions] == [act.DRAINING, act.HELD, act.HELD]
    assert not any(a.restart_engine for a in actions)
    assert "a restart cannot clear it" in actions[1].transitions[0]


def test_a_condition_that_lasts_keeps_the_node_out_until_it_ends_and_is_released() -> None:
    """Uncorrectable errors since the driver loaded (or a pending page, a lost GPU): drained
    within two looks, held without a restart (the GPU's state outlives the engine), and a
    release while it lasts only drains it again on the next look."""
    actions = _run([(0, [ECC]), (60, [ECC]), (120, [ECC])])
    assert [a.state["mode"] for a in actions] == [act.DRAINING, act.HELD, act.HELD]
    assert not any(a.restart_engine for a in actions)
    assert actions[1].answer.startswith("maint down #onecat-watch held: a restart cannot clear")
    released = act.release(actions[-1].state, 150)
    again = act.step(released.state, [ECC], 180, POLICY)
    assert again.state["mode"] == act.DRAINING and again.answer.startswith("drain #")


def test_no_engine_unit_means_hold_instead_of_restart() -> None:
    actions = _run([(0, [XID]), (60, [])], policy=act.Policy(restart=False))
    assert actions[1].state["mode"] == act.HELD and not actions[1].restart_engine


def test_an_engine_still_loading_is_waited_for_within_the_grace() -> None:
    looks = [(0, [GARBAGE]), (60, []), (120, [DOWN]), (180, [DOWN]), (240, [])]
    actions = _run(looks, unreachable_at=(120, 180))
    assert [a.state["mode"] for a in actions] == [
        act.DRAINING, act.RESTARTED, act.RESTARTED, act.RESTARTED, act.IN]


def test_an_engine_that_never_answers_is_held_after_the_grace() -> None:
    looks = [(0, [GARBAGE]), (60, []), (200, [DOWN]), (400, [DOWN])]
    actions = _run(looks, unreachable_at=(200, 400))
    assert actions[-1].state["mode"] == act.HELD
    assert "did not answer within 300 s" in actions[-1].state["reason"]


def test_a_server_that_does_not_answer_while_in_is_left_to_the_gateway() -> None:
    actions = _run([(0, [DOWN]), (60, [DOWN]), (120, [])], unreachable_at=(0, 60))
    assert [a.answer for a in actions] == ["up", "up", "up"]


def test_garbage_again_after_the_restart_holds_the_node_out() -> None:
    actions = _run([(0, [GARBAGE]), (60, []), (120, [GARBAGE])])
    assert actions[-1].state["mode"] == act.HELD
    assert "faulty again after the restart" in actions[-1].transitions[0]


def test_release_puts_a_held_node_back_with_ready() -> None:
    held = _run([(0, [LOST]), (60, [])])[-1]
    released = act.release(held.state, 100)
    assert released.state["mode"] == act.IN and released.answer == "up"
    assert released.transitions == ["held -> in: released by an operator"]
    again = act.release(released.state, 200)
    assert again.transitions == [] and again.answer == "up"


def test_the_answer_is_one_printable_line() -> None:
    nasty = Finding(ERROR, "xid", "x", "Xid 79\non GPU 1\x00 " + "z" * 400)
    answer = _run([(0, [nasty])])[0].answer
    assert "\n" not in answer and "\x00" not in answer and len(answer) < 230


def test_a_corrupt_state_file_starts_over() -> None:
    action = act.step({"mode": "sideways"}, [], 0)
    assert action.state["mode"] == act.IN and action.answer == "up"


def test_a_failed_restart_holds_the_node_out() -> None:
    asked = _run([(0, [XID]), (60, [])])[-1]
    held = act.restart_failed(asked, "Unit vllm.service not found.", 61)
    assert held.state["mode"] == act.HELD and not held.restart_engine
    assert held.answer == "maint down #onecat-watch held: the engine restart failed: " \
                          "Unit vllm.service not found."


BLIND = Finding(ERROR, act.CANNOT_LOOK, None, "the watch cannot look: NVML failed")


def test_a_watch_that_cannot_look_drains_and_stays_drained_but_never_holds_for_it() -> None:
    actions = _run([(0, [BLIND]), (60, [BLIND]), (120, [BLIND]), (180, []), (240, [])])
    assert [a.state["mode"] for a in actions] == [
        act.DRAINING, act.DRAINING, act.DRAINING, act.IN, act.IN]
    assert actions[0].answer.startswith("drain #onecat-watch: the watch cannot look")
    assert not any(a.restart_engine for a in actions)
    assert actions[3].answer == "up"
    assert actions[3].transitions == ["draining -> in: the watch can look again and finds "
                                      "nothing wrong"]


def test_a_blind_node_that_sees_a_fault_again_is_judged_like_any_fault() -> None:
    _blind, seen, restarted, back = _run([(0, [BLIND]), (60, [XID]), (120, []), (180, [])])
    assert seen.state["mode"] == act.DRAINING and seen.state["restartable"]
    assert seen.transitions == [f"draining -> draining: {XID.message}"]
    assert restarted.restart_engine and back.state["mode"] == act.IN
    held = _run([(0, [BLIND]), (60, [LOST]), (120, [LOST])])
    assert [a.state["mode"] for a in held] == [act.DRAINING, act.DRAINING, act.HELD]


# Sustained hardware slowdown (throttle.py): it ends by itself when the room cools.
SLOW = Finding(ERROR, "throttle_sustained", "GPU 0", "GPU 0: clocks cut by thermal in 6 of the "
               "last 10 minutes")


def test_a_slowdown_holds_the_node_while_it_lasts_and_readmits_it_by_itself() -> None:
    """Issue 46: heat or the power brake no rung clears and no operator needs to: drained, out
    while it lasts, back in at the first look without it (throttle.py's quiet stretch decides
    when that is), with no restart and no `--release`."""
    actions = _run([(0, [SLOW]), (60, [SLOW]), (120, [SLOW, HOT]), (1200, [SLOW]), (1260, [])])
    assert [a.state["mode"] for a in actions] == [
        act.DRAINING, act.HELD, act.HELD, act.HELD, act.IN]
    assert not any(a.restart_engine or a.start_repair for a in actions)
    assert actions[1].answer.startswith("maint down #onecat-watch held: out until it clears by "
                                        "itself: GPU 0: clocks cut by thermal")
    assert actions[2].transitions == [] and actions[3].transitions == []
    assert actions[4].transitions == ["held -> in: the condition cleared by itself"]
    assert actions[4].answer == "up" and actions[4].state["faults"] == []


def test_a_fault_while_out_for_a_slowdown_is_judged_as_any_other() -> None:
    """A lost GPU while the node is out for heat: held for it (no ladder here), and no longer
    readmitted by a cool look."""
    actions = _run([(0, [SLOW]), (60, [SLOW]), (120, [SLOW, LOST]), (180, [])])
    assert [a.state["mode"] for a in actions] == [act.DRAINING, act.HELD, act.HELD, act.HELD]
    assert "GPU 1 fell off the bus" in actions[2].state["reason"]
    assert actions[3].state["mode"] == act.HELD and not actions[3].state["clearing"]


def test_a_fault_no_rung_clears_still_waits_for_an_operator() -> None:
    """Only what ends by itself readmits itself: a foreign process on a GPU (an operator's)
    stays held after a clean look, until `--release`."""
    foreign = Finding(ERROR, "foreign_process", "GPU 0", "GPU 0 is used by another process")
    actions = _run([(0, [foreign]), (60, [foreign]), (120, [])])
    assert [a.state["mode"] for a in actions] == [act.DRAINING, act.HELD, act.HELD]
    released = act.release(actions[-1].state, 180)
    assert released.state["mode"] == act.IN


def test_the_floor_keeps_a_node_in_and_says_so_on_every_look() -> None:
    """Issue 46: the floor refused (look.py asked it): the node stays in, serving, its answer
    `up`, and every look says why; once the floor lets it go, it drains as usual."""
    refused = "the fleet's floor keeps n1 in: 0 other node(s) in rotation (none), the floor is 1"
    first = act.step(None, [SLOW], 0, POLICY, floor_refused=refused)
    second = act.step(first.state, [SLOW], 60, POLICY, floor_refused=refused)
    for action in (first, second):
        assert action.state["mode"] == act.IN and action.answer == "up"
        assert action.transitions == [f"in -> in: kept in: {refused}; its fault: "
                                      "GPU 0: clocks cut by thermal in 6 of the last 10 minutes"]
    let_go = act.step(second.state, [SLOW], 120, POLICY)
    assert let_go.state["mode"] == act.DRAINING and let_go.state["floor"] == ""
