"""The repair ladder's decisions: which rung clears what, the watch's modes around a repair,
the runner's order of steps, the recurrence window (issue 31)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from onecat.health.judge import ERROR, WARNING
from onecat.repair import history, remedies
from onecat.repair.run import FAILED, READMITTED, REBOOTING, SERVICE_REQUIRED, Ladder, new_progress
from onecat.watch import act
from onecat.watch.deltas import Finding

ECC = Finding(ERROR, "ecc_volatile_uncorrected", "GPU 1 (00000000:5E:00.0)",
              "GPU 1 has 1 uncorrectable ECC error since the driver loaded")
PENDING = Finding(ERROR, "retired_pages_pending", "GPU 1 (00000000:5E:00.0)",
                  "GPU 1 has a page pending retirement")
XID48 = Finding(ERROR, "xid", "PCI:0000:5e:00", "the kernel logged Xid 48", xid=48)
XID79 = Finding(ERROR, "xid", "PCI:0000:5e:00", "the kernel logged Xid 79", xid=79)
GARBAGE = Finding(ERROR, "quality", None, "the quality probe 'x' failed: collapsed")
MISSING = Finding(ERROR, "gpu_count", None, "1 GPU, 2 expected")
HOT = Finding(ERROR, "temperature", "GPU 0 (00000000:3B:00.0)", "GPU 0 at 95 C")
WORN = Finding(ERROR, "retired_pages", "GPU 1 (00000000:5E:00.0)", "GPU 1 retired 64 pages")
SLOW = Finding(WARNING, "temperature", "GPU 0", "GPU 0 at 85 C")
READINGS = {"gpus": [
    {"index": 0, "serial": "0323117011201", "uuid": "GPU-a", "pci_bus_id": "00000000:3B:00.0"},
    {"index": 1, "serial": "0323117011202", "uuid": "GPU-b", "pci_bus_id": "00000000:5E:00.0"}]}
REPAIR = act.Policy(restart=True, flap_window_s=3600, repair=True)
SERVING = act.Repair(serving=True)


def _plan(*findings: Finding) -> remedies.Plan:
    return remedies.plan((f.code, f.xid) for f in findings)


@pytest.mark.parametrize(("findings", "rungs"), [
    ((GARBAGE,), ("restart", "reset", "reboot")),
    ((XID48,), ("restart", "reset", "reboot")),
    ((ECC,), ("reset", "reboot")),
    ((ECC, GARBAGE), ("reset", "reboot")),
    ((XID79,), ("reset", "reboot")),
    ((MISSING, ECC), ("reboot",)),
])
def test_the_ladder_starts_at_the_lowest_rung_every_fault_allows(findings, rungs) -> None:
    plan = _plan(*findings)
    assert plan.rungs == rungs and plan.repairable


def test_heat_is_an_operators_and_a_worn_card_needs_service_at_once() -> None:
    assert _plan(HOT, ECC).held_by == ("temperature",) and not _plan(HOT, ECC).repairable
    assert _plan(WORN).service == ("retired_pages",)
    assert _plan(ECC, WORN).service and not _plan(ECC, WORN).repairable


def _looks(looks: list[tuple[float, list[Finding], act.Repair]], policy: act.Policy = REPAIR
           ) -> list[act.Action]:
    state, actions = None, []
    for now, findings, repair in looks:
        action = act.step(state, findings, now, policy, repair=repair)
        state = action.state
        actions.append(action)
    return actions


def test_a_reset_clearable_fault_drains_then_orders_a_reset_not_a_hold() -> None:
    drain, order = _looks([(0, [ECC], SERVING), (60, [ECC], SERVING)])
    assert drain.answer.startswith("drain #onecat-watch: GPU 1 has 1 uncorrectable")
    assert not drain.restart_engine and drain.start_repair is None
    assert order.state["mode"] == act.REPAIRING and not order.restart_engine
    assert order.start_repair["rungs"] == ["reset"] and order.start_repair["id"] == "60"
    assert order.answer.startswith("maint down #onecat-watch repairing: GPU 1 has 1")
    assert order.start_repair["faults"][0]["code"] == "ecc_volatile_uncorrected"


def test_the_reboot_rung_is_ordered_only_when_allowed() -> None:
    policy = act.Policy(repair=True, reboot=True)
    *_, order = _looks([(0, [ECC], SERVING), (60, [ECC], SERVING)], policy)
    assert order.start_repair["rungs"] == ["reset", "reboot"]
    *_, held = _looks([(0, [MISSING], SERVING), (60, [MISSING], SERVING)])
    assert held.state["mode"] == act.HELD and "onecat_repair_reboot is off" in held.answer
    *_, order = _looks([(0, [MISSING], SERVING), (60, [MISSING], SERVING)], policy)
    assert order.start_repair["rungs"] == ["reboot"]


def test_without_the_ladder_or_a_server_the_node_is_held_as_before() -> None:
    *_, held = _looks([(0, [ECC], act.Repair()), (60, [ECC], act.Repair())])
    assert held.state["mode"] == act.HELD and held.start_repair is None
    *_, held = _looks([(0, [ECC], SERVING), (60, [ECC], SERVING)], act.Policy(repair=False))
    assert held.state["mode"] == act.HELD and "a restart cannot clear it" in held.answer
    *_, held = _looks([(0, [ECC, HOT], SERVING), (60, [ECC, HOT], SERVING)])
    assert held.state["mode"] == act.HELD


def test_a_fault_after_the_restart_climbs_to_the_reset() -> None:
    looks = [(0, [XID48], SERVING), (60, [], SERVING), (120, [GARBAGE], SERVING)]
    _drain, restarted, climbed = _looks(looks)
    assert restarted.restart_engine and restarted.state["mode"] == act.RESTARTED
    assert climbed.state["mode"] == act.REPAIRING
    assert climbed.start_repair["rungs"] == ["reset"]
    assert "faulty again after the restart" not in climbed.answer  # the order says the fault
    # Without the ladder the same looks hold the node, as before.
    *_, held = _looks(looks, act.Policy(restart=True))
    assert held.state["mode"] == act.HELD and "faulty again after the restart" in held.answer


def test_the_watch_readmits_on_the_runners_word_for_its_own_order_only() -> None:
    *_, order = _looks([(0, [ECC], SERVING), (60, [ECC], SERVING)])
    state = order.state
    stale = act.step(state, [ECC], 120, REPAIR, repair=act.Repair(
        serving=True, runner_active=True, progress={"order": "1", "step": READMITTED}))
    assert stale.state["mode"] == act.REPAIRING and stale.answer.startswith("maint down")
    running = act.step(state, [ECC], 120, REPAIR, repair=act.Repair(
        serving=True, runner_active=True, progress={"order": "60", "step": "resetting"}))
    assert running.state["mode"] == act.REPAIRING and running.start_repair is None
    done = act.step(state, [], 180, REPAIR, repair=act.Repair(
        serving=True, progress={"order": "60", "step": READMITTED, "rung": "reset"}))
    assert done.state["mode"] == act.IN and done.answer == "up"
    assert done.transitions == ["repairing -> in: repaired (reset), gated and burned in"]


def test_a_readmitting_look_that_finds_a_fault_keeps_the_node_out() -> None:
    """Issue 47: the runner says readmitted, but the look that would readmit the node fails
    its probe: the node stays out (held, with the fault), not in on the runner's word."""
    *_, order = _looks([(0, [ECC], SERVING), (60, [ECC], SERVING)])
    garbage = Finding(ERROR, "quality", None, "the quality probe 'x' failed: collapsed")
    kept = act.step(order.state, [garbage], 180, REPAIR, repair=act.Repair(
        serving=True, progress={"order": "60", "step": READMITTED, "rung": "reset"}))
    assert kept.state["mode"] == act.HELD and kept.answer.startswith(
        "maint down #onecat-watch held: faulty at the look after its repair: the quality probe")
    assert kept.start_repair is None and kept.transitions == [
        "repairing -> held: faulty at the look after its repair: the quality probe 'x' failed: "
        "collapsed"]


def test_a_runner_that_stopped_midway_is_started_again_to_resume() -> None:
    *_, order = _looks([(0, [ECC], SERVING), (60, [ECC], SERVING)])
    resumed = act.step(order.state, [], 120, REPAIR, repair=act.Repair(
        serving=True, runner_active=False, progress={"order": "60", "step": "gating"}))
    assert resumed.start_repair == {"id": "60", "resume": True}
    assert resumed.state["mode"] == act.REPAIRING


def test_the_runners_end_decides_service_or_hold() -> None:
    *_, order = _looks([(0, [ECC], SERVING), (60, [ECC], SERVING)])
    service = act.step(order.state, [ECC], 120, REPAIR, repair=act.Repair(serving=True, progress={
        "order": "60", "step": SERVICE_REQUIRED, "reason": "service required: GPU 1 serial X"}))
    assert service.state["mode"] == act.SERVICE
    assert service.answer == "maint down #onecat-watch service required: service required: " \
                             "GPU 1 serial X"
    failed = act.step(order.state, [ECC], 120, REPAIR, repair=act.Repair(serving=True, progress={
        "order": "60", "step": FAILED, "reason": "the gate failed"}))
    assert failed.state["mode"] == act.HELD
    assert "the repair failed: the gate failed" in failed.answer
    released = act.release(service.state, 200)
    assert released.state["mode"] == act.IN and released.answer == "up"


def test_a_fault_back_within_the_window_of_a_repair_needs_service() -> None:
    earlier = {"at": 0, "rung": "reset", "outcome": "readmitted", "cards": []}
    back = act.Repair(serving=True, recurred=earlier)
    *_, ended = _looks([(86400, [ECC], back), (86460, [ECC], back)])
    assert ended.state["mode"] == act.SERVICE and ended.service_report
    assert "back after its reset repair of 1970-01-01 00:00" in ended.answer
    # A card past its retirement limit needs no ladder at all.
    *_, worn = _looks([(0, [WORN], SERVING), (60, [WORN], SERVING)])
    assert worn.state["mode"] == act.SERVICE and worn.service_report


def test_history_finds_the_card_a_fault_names_and_the_window_bounds_it() -> None:
    cards = history.cards_of([ECC.as_dict()], READINGS)
    assert [c["serial"] for c in cards] == ["0323117011202"]
    assert [c["serial"] for c in history.cards_of([XID79.as_dict()], READINGS)] == \
        ["0323117011202"]
    # A fault that names no card (bad answers) is about every GPU the engine uses.
    assert len(history.cards_of([GARBAGE.as_dict()], READINGS)) == 2
    past = history.record(history.empty(), at=1000, cards=cards, fault="ecc",
                          tried=[{"rung": "reset", "at": 1000, "outcome": "cleared"}],
                          outcome=history.READMITTED)
    assert history.recurred(past, cards, 1000 + 6 * 86400, 7 * 86400)["rung"] == "reset"
    assert history.recurred(past, cards, 1000 + 8 * 86400, 7 * 86400) is None
    other = history.cards_of([HOT.as_dict()], READINGS)
    assert history.recurred(past, other, 2000, 7 * 86400) is None
    # A swapped card (another serial) starts clean; --release forgets the named one.
    assert history.recurred(history.forget(past, {"0323117011202"}), cards, 2000, 1e9) is None
    assert past["counts"]["readmitted"] == 1
    assert history.load("garbage") == history.empty()
    assert history.load({"repairs": "x", "counts": {"failed": -3}}) == history.empty()


class Node:
    """The node as the ladder sees it, scripted: what each call answers, and the calls made."""

    def __init__(self, *, reset_ok: bool = True, clears: tuple[str, ...] = ("reset",),
                 lease: list[bool] | None = None, burn_in: tuple[bool, list] = (True, []),
                 refusals: int = 0, driver_after_s: float = 0.0) -> None:
        self.calls: list[str] = []
        self.reset_ok, self.clears, self.burn = reset_ok, clears, burn_in
        self.leases = list(lease or [True])
        self.cleared_by: str | None = None
        self.boot = "boot-1"
        # A foreign process holds the GPUs for this many resets (then its owner stops it).
        self.refusals = refusals
        # After a boot, the driver can read the GPUs this many seconds later (DKMS, udev).
        self.driver_after_s = driver_after_s

    def take_lease(self, reason: str) -> tuple[bool, str]:
        self.calls.append("lease")
        granted = self.leases.pop(0) if len(self.leases) > 1 else self.leases[0]
        return granted, "granted" if granted else "1 of 1 repairs run: fleet-b (ecc)"

    def release_lease(self) -> None:
        self.calls.append("release")

    def take_out(self, reason: str) -> None:
        self.calls.append("take-out")

    def wait_idle(self) -> str | None:
        self.calls.append("idle")
        return None

    def stop_engine(self) -> str | None:
        self.calls.append("stop")
        return None

    def start_engine(self) -> str | None:
        self.calls.append("start")
        return None

    def reset_gpus(self, indices: list[int]) -> tuple[bool, str]:
        self.calls.append(f"reset {indices}")
        if self.refusals > 0:
            self.refusals -= 1
            # nvidia-smi's words when another client holds the GPU (NVSentinel #1690).
            return False, ("Unable to reset GPU 00000000:5E:00.0 because it's being used by "
                           "some other process (held by GPU 1: pid 4242 (nv-hostengine))")
        if self.reset_ok and "reset" in self.clears:
            self.cleared_by = "reset"
        return self.reset_ok, "ok" if self.reset_ok else "Unable to reset GPU 1: GPU is lost"

    def look(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.calls.append("look")
        return READINGS, [] if self.cleared_by else [ECC.as_dict()]

    def gate(self) -> tuple[bool, str]:
        self.calls.append("gate")
        return True, "ready"

    def burn_in(self) -> tuple[bool, str, list[dict[str, Any]]]:
        self.calls.append("burn-in")
        passed, faults = self.burn
        return passed, "passed" if passed else "GPU 1: 1 new uncorrectable ECC error", faults

    def reboot(self) -> str | None:
        self.calls.append("reboot")
        return None

    def admit(self) -> None:
        self.calls.append("admit")

    def boot_id(self) -> str | None:
        return self.boot

    def wait_driver(self, timeout_s: float) -> str | None:
        self.calls.append("wait-driver")
        if self.driver_after_s <= timeout_s:
            return None
        return "NVML error 9: Driver Not Loaded"


def _work(node: Node) -> list[str]:
    """The calls that change the node (the lease's renewals left out)."""
    return [call for call in node.calls if call != "lease"]


def _ladder(node: Node, rungs: list[str], saved: list[dict[str, Any]]) -> Ladder:
    order = {"id": "60", "rungs": rungs, "reason": "GPU 1 ECC", "faults": [ECC.as_dict()]}
    progress = new_progress(order, READINGS, 60)
    reports: list[dict[str, Any]] = []
    ladder = Ladder(node, progress, lambda p: saved.append(dict(p)), lambda _line: None,
                    node="fleet-a", clock=lambda: 100.0, sleep=lambda _s: None,
                    report=reports.append)
    ladder.reports = reports  # type: ignore[attr-defined]
    return ladder


def test_the_reset_path_stops_resets_the_pair_judges_starts_gates_burns_in_in_order() -> None:
    node, saved = Node(), []
    ladder = _ladder(node, ["reset"], saved)
    assert ladder.run() == READMITTED
    assert node.calls[0] == "lease" and node.calls.count("lease") > 3  # renewed at each step
    assert _work(node) == ["take-out", "idle", "stop", "reset [0, 1]", "look", "start", "gate",
                           "burn-in", "admit", "release"]
    steps = [p["step"] for p in saved]
    assert steps.index("stopping the engine") < steps.index("resetting") < steps.index("gating")
    assert saved[-1]["step"] == READMITTED
    assert ladder.history["counts"]["readmitted"] == 1
    assert ladder.history["repairs"][-1]["cards"][0]["serial"] == "0323117011202"


def test_no_lease_no_touch_the_node_waits_out_of_rotation() -> None:
    node, saved = Node(lease=[False, False, True]), []
    assert _ladder(node, ["reset"], saved).run() == READMITTED
    assert node.calls[:3] == ["lease", "lease", "lease"] and node.calls.index("idle") >= 3
    assert saved[0]["step"] == "waiting for the lease"
    assert "fleet-b (ecc)" in saved[0]["detail"]


def test_no_lease_no_drain_the_runner_takes_the_node_out_only_once_leased() -> None:
    """Issue 46: an operator's order keeps the node in rotation while the runner waits for the
    fleet's lease; the runner drains it (the agent's repair drain) once granted, before it
    waits for the requests in flight."""
    node, saved = Node(lease=[False, False, True]), []
    assert _ladder(node, ["reset"], saved).run() == READMITTED
    assert node.calls[:4] == ["lease", "lease", "lease", "take-out"]
    assert _work(node)[:2] == ["take-out", "idle"]


def test_an_operators_order_keeps_the_node_in_until_its_lease_then_the_watch_takes_it_out(
) -> None:
    ordered = act.request_repair(None, 60, REPAIR)
    assert ordered.state["mode"] == act.REPAIRING and ordered.answer == "up"
    assert ordered.start_repair is not None
    assert ordered.transitions == [
        "in -> repairing: requested by an operator, in rotation until its repair lease"]
    again = act.request_repair(ordered.state, 70, REPAIR)
    assert again.answer == "up" and again.transitions == ["already repairing: the order stands"]
    waiting = act.step(ordered.state, [], 90, REPAIR, repair=act.Repair(
        serving=True, runner_active=True,
        progress={"order": "60", "step": "waiting for the lease"}))
    assert waiting.state["mode"] == act.REPAIRING and waiting.answer == "up"
    leased = act.step(waiting.state, [], 120, REPAIR, repair=act.Repair(
        serving=True, runner_active=True,
        progress={"order": "60", "step": "waiting for requests in flight"}))
    assert leased.answer.startswith("maint down #onecat-watch repairing")
    done = act.step(leased.state, [], 180, REPAIR, repair=act.Repair(
        serving=True, progress={"order": "60", "step": READMITTED, "rung": "reset"}))
    assert done.state["mode"] == act.IN and done.answer == "up"


def test_an_order_for_a_node_already_out_or_the_watchs_own_order_keeps_it_out() -> None:
    held = {**act.initial_state(), "mode": act.HELD, "reason": "GPU 1 ECC"}
    ordered = act.request_repair(held, 60, REPAIR)
    assert ordered.answer.startswith("maint down") and not ordered.state["by_operator"]
    *_, own = _looks([(0, [ECC], SERVING), (60, [ECC], SERVING)])
    assert own.state["mode"] == act.REPAIRING and own.answer.startswith("maint down")
    waiting = act.step(own.state, [ECC], 90, REPAIR, repair=act.Repair(
        serving=True, runner_active=True,
        progress={"order": "60", "step": "waiting for the lease"}))
    assert waiting.answer.startswith("maint down")


def test_a_failed_reset_reboots_when_allowed_and_goes_on_after_the_boot() -> None:
    node, saved = Node(reset_ok=False, clears=("reboot",)), []
    ladder = _ladder(node, ["reset", "reboot"], saved)
    assert ladder.run() == REBOOTING
    assert _work(node)[-1] == "reboot" and "start" not in node.calls
    assert ladder.run() == REBOOTING  # the same boot: the reboot is under way
    node.boot, node.cleared_by = "boot-2", "reboot"
    assert ladder.run() == READMITTED
    assert _work(node)[-7:] == ["wait-driver", "look", "start", "gate", "burn-in", "admit",
                                "release"]
    # A lost GPU does not come back by waiting: no second reset, the reboot at once.
    assert [t["rung"] for t in ladder.progress["tried"]] == ["reset", "reboot", "reboot"]


def test_a_failed_reset_without_the_reboot_rung_holds_the_node() -> None:
    node, saved = Node(reset_ok=False), []
    ladder = _ladder(node, ["reset"], saved)
    assert ladder.run() == FAILED
    assert "a reboot may clear it (onecat_repair_reboot is off)" in saved[-1]["reason"]
    assert "start" not in node.calls and node.calls[-1] == "release"


def test_a_fault_that_survives_every_rung_or_returns_under_load_needs_service() -> None:
    node, saved = Node(clears=()), []
    ladder = _ladder(node, ["reset", "reboot"], saved)
    assert ladder.run() == REBOOTING
    node.boot = "boot-2"
    assert ladder.run() == SERVICE_REQUIRED
    report = ladder.reports[-1]
    assert report["cards"][0]["serial"] == "0323117011202"
    assert [t["rung"] for t in report["tried"]] == ["reset", "reboot", "reboot"]
    assert report["summary"].startswith("service required: GPU 1 serial 0323117011202")
    node, saved = Node(burn_in=(False, [ECC.as_dict()])), []
    ladder = _ladder(node, ["reset"], saved)
    assert ladder.run() == SERVICE_REQUIRED
    assert "returned under load after the reset" in saved[-1]["reason"]
    assert "admit" not in node.calls


def test_the_metrics_count_repairs_by_outcome() -> None:
    from onecat.watch.metrics import render

    past = history.record(history.empty(), at=1, cards=[], fault="ecc", tried=[],
                          outcome=history.READMITTED)
    text = render({"gpus": []}, "healthy", [], mode="in", repairs=past["counts"])
    assert "# TYPE onecat_repairs_total counter" in text
    assert 'onecat_repairs_total{outcome="readmitted"} 1' in text
    assert 'onecat_repairs_total{outcome="service_required"} 0' in text
    assert "onecat_repairs_total" not in render({"gpus": []}, "healthy", [], mode="in")


def test_a_lost_gpu_is_named_by_its_index_and_its_serial_from_another_look() -> None:
    lost = Finding(ERROR, "gpu_lost", "GPU 1 (bus unknown, serial unknown)", "GPU 1 is lost")
    now = {"gpus": [READINGS["gpus"][0], {"index": 1, "serial": None, "uuid": None,
                                          "pci_bus_id": None, "lost": True}]}
    cards = history.cards_of([lost.as_dict()], now)
    assert [c["index"] for c in cards] == [1] and cards[0]["serial"] is None
    # Not the whole node: a repair of GPU 1 must not count against GPU 0's history.
    filled = history.fill_ids(cards, None, READINGS)
    assert filled[0]["serial"] == "0323117011202" and filled[0]["uuid"] == "GPU-b"
    assert history.fill_ids(cards, {"gpus": []})[0]["serial"] is None


def test_the_runner_names_a_card_lost_at_the_order_once_it_is_back() -> None:
    node, saved = Node(), []
    ladder = _ladder(node, ["reset"], saved)
    ladder.progress["cards"] = [{"index": 1, "serial": None, "uuid": None, "pci_bus_id": None}]
    assert ladder.run() == READMITTED
    assert ladder.history["repairs"][-1]["cards"][0]["serial"] == "0323117011202"


def _readings() -> dict[str, Any]:
    return {"gpus": [{"index": i, "pci_bus_id": f"00000000:{bus}:00.0", "serial": f"S{i}",
                      "uuid": f"GPU-{i}"} for i, bus in ((0, "3B"), (1, "5E"))]}


def _ladder_view(tmp_path, findings: list[Finding], earlier_cards: list[dict[str, Any]],
                 days_ago: float = 2.0) -> act.Repair | None:
    """The watch's view of the ladder (look._repair_view) with one earlier repair that
    readmitted the node `days_ago` days ago, of `earlier_cards`."""
    from onecat.files import write_json
    from onecat.repair import files as repair_files
    from onecat.watch import look

    now = 1_800_000_000.0
    past = history.record(history.empty(), at=now - days_ago * 86400, cards=earlier_cards,
                          fault="x", tried=[{"rung": "reset"}], outcome=history.READMITTED)
    write_json(tmp_path / repair_files.HISTORY_FILE, past)
    ladder = look.Ladder(tmp_path, lambda: None, lambda: False, tmp_path / "serving.json")
    return look._repair_view(ladder, findings, _readings(), now)


def test_only_an_uncorrectable_fault_on_the_repaired_card_is_a_recurrence(tmp_path) -> None:
    """Issue 47: a second single-bit page retirement two days after a reset of the same card
    is another reset, not "service required"; bad answers are no card's recurrence; an
    uncorrectable error back on the repaired card is."""
    card1 = history.card(_readings()["gpus"][1])
    garbage = Finding(ERROR, "quality", None, "the quality probe 'x' failed: collapsed")
    assert _ladder_view(tmp_path, [PENDING], [card1]).recurred is None
    assert _ladder_view(tmp_path, [garbage], [card1]).recurred is None
    assert _ladder_view(tmp_path, [ECC], [card1]).recurred is not None
    assert _ladder_view(tmp_path, [ECC], [history.card(_readings()["gpus"][0])]).recurred \
        is None  # the other card


def test_a_repair_for_bad_answers_names_no_card() -> None:
    """The order for a fault that names no card carries no card: no later fault of either
    card counts as its recurrence (the runner still resets every GPU the engine holds)."""
    from onecat.repair.run import new_progress

    garbage = Finding(ERROR, "quality", None, "the quality probe 'x' failed: collapsed")
    progress = new_progress({"id": "1", "rungs": ["reset"], "faults": [garbage.as_dict()],
                             "cards": []}, _readings(), 0.0)
    assert progress["cards"] == [] and len(progress["reset_cards"]) == 2
    # An order from an older watch (no "cards") is about every GPU, as before.
    older = new_progress({"id": "1", "rungs": ["reset"], "faults": [garbage.as_dict()]},
                         _readings(), 0.0)
    assert len(older["cards"]) == 2


def test_a_reset_refused_by_a_foreign_process_succeeds_on_retry_after_it_stopped() -> None:
    """The first reset meets a monitor holding the GPU (nv-hostengine); the runner waits out
    the backoff and tries again: the card is reset and readmitted, no reboot, no service."""
    node, saved = Node(refusals=1), []
    waits: list[float] = []
    ladder = _ladder(node, ["reset", "reboot"], saved)
    ladder.sleep = waits.append
    assert ladder.run() == READMITTED
    assert _work(node).count("reset [0, 1]") == 2 and "reboot" not in node.calls
    assert waits == [15.0]
    tried = ladder.progress["tried"]
    assert tried[0]["outcome"].startswith("refused: Unable to reset GPU") and "again in 15 s" \
        in tried[0]["outcome"]
    assert tried[-1] == {**tried[-1], "rung": "reset", "outcome": "cleared"}


def test_a_boot_whose_driver_loads_late_is_waited_for_and_one_that_never_loads_is_no_card_fault(
        ) -> None:
    """After the reboot rung the runner waits for the driver before it judges: a module that
    loads 30 s late is judged and readmitted; one that never loads (a kernel without its module)
    ends the repair as failed, never as 'service required', and counts against no card."""
    node, saved = Node(reset_ok=False, clears=("reboot",), driver_after_s=30.0), []
    ladder = _ladder(node, ["reset", "reboot"], saved)
    assert ladder.run() == REBOOTING
    node.boot, node.cleared_by = "boot-2", "reboot"
    assert ladder.run() == READMITTED
    assert "waiting for the driver after the boot" in [p.get("detail") for p in saved]

    node, saved = Node(reset_ok=False, clears=("reboot",), driver_after_s=1e9), []
    ladder = _ladder(node, ["reset", "reboot"], saved)
    assert ladder.run() == REBOOTING
    node.boot = "boot-2"
    assert ladder.run() == FAILED
    assert "the driver did not come back within 600 s" in saved[-1]["reason"]
    assert "no service asked" in saved[-1]["reason"] and not ladder.reports
    assert ladder.history["counts"]["service_required"] == 0


def test_a_look_that_finds_no_driver_after_a_reset_is_the_nodes_not_the_cards() -> None:
    class NoDriver(Node):
        def look(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
            self.calls.append("look")
            return {}, [{"severity": "error", "code": "driver_unavailable", "gpu": None,
                         "message": "the NVIDIA driver is not there: NVML error 9"}]

    node, saved = NoDriver(), []
    ladder = _ladder(node, ["reset", "reboot"], saved)
    assert ladder.run() == FAILED
    assert "reboot" not in node.calls and not ladder.reports
    assert "the node's, not the card's" in saved[-1]["reason"]


def test_the_repairs_burn_in_judges_by_the_watchs_references_for_what_serves(
        tmp_path: Path) -> None:
    """The watch's references for the bits that serve (issue 47 item 5): a repaired card is
    held to them, not only to the ceiling; references of other bits, or none, are not used."""
    import json

    from onecat.answers.probe import references_identity
    from onecat.repair.__main__ import burnin_references

    record = {"image_id": "sha256:1", "model_revision": "r1", "served_model_name": "m"}
    path = tmp_path / "references.json"
    assert burnin_references(record, path) is None  # the watch recorded none yet
    path.write_text(json.dumps({"identity": references_identity(record),
                                "likelihood": {"The capital": 2.7}}))
    assert burnin_references(record, path) == path
    assert burnin_references({**record, "image_id": "sha256:2"}, path) is None  # other bits
    path.write_text(json.dumps({"identity": references_identity(record), "likelihood": {}}))
    assert burnin_references(record, path) is None
    assert burnin_references(record, None) is None


def test_the_watch_removes_the_runners_drain_once_the_node_leaves_repairing(tmp_path) -> None:
    from onecat.repair.files import REPAIR_DRAIN_FILE
    from onecat.watch.look import answer_agent

    agent, drain = tmp_path / "watch-state", tmp_path / REPAIR_DRAIN_FILE
    drain.write_text("drain #onecat-repair: requested by an operator\n")
    answer_agent(agent, "maint down #onecat-watch repairing: x", {"mode": act.REPAIRING})
    assert drain.exists()
    answer_agent(agent, "up", {"mode": act.IN})
    assert not drain.exists() and agent.read_text() == "up\n"


def test_the_real_hosts_drain_is_one_readable_line_for_the_agent(tmp_path) -> None:
    import argparse

    from onecat.repair.__main__ import NodeHost

    drain = tmp_path / "gateway" / "repair-drain"
    host = NodeHost(argparse.Namespace(
        node="node-a", api_key_file=tmp_path / "none.env", serving_record=tmp_path / "none",
        lease_token_file=None, agent_drain_file=drain))
    host.take_out("repairing: requested\nby an operator")
    assert drain.read_text() == "drain #onecat-repair: repairing: requested by an operator\n"
    assert oct(drain.stat().st_mode & 0o777) == "0o644"  # the agent runs as nobody
