"""`python3 -m onecat.watch --once` against the NVML double (the real pynvml loads it).

Looks in sequence, as the timer would take them: a healthy baseline, then the same GPUs with
an uncorrectable error since the driver loaded, then one GPU gone, then no driver at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import nvml_double_harness as double
from gateway_agent import agent_command
from standin_harness import standin


def _look(libdir: Path, scenario: str | Path, tmp_path: Path, *extra: str,
          env: dict[str, str] | None = None) -> tuple[int, str, dict | None]:
    (tmp_path / "textfile").mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "onecat.watch", "--once", "--state-dir", str(tmp_path / "state"),
         "--verdict-file", str(tmp_path / "run" / "verdict.json"),
         "--metrics-file", str(tmp_path / "textfile" / "onecat.prom"),
         "--kernel-log", str(double.kernel_log(scenario)), *extra],
        env={**double.double_env(libdir, scenario), **(env or {})}, capture_output=True,
        text=True, check=False,
        cwd=double.REPO, timeout=120)
    verdict_file = tmp_path / "run" / "verdict.json"
    verdict = json.loads(verdict_file.read_text()) if verdict_file.exists() else None
    return done.returncode, done.stdout + done.stderr, verdict


def test_looks_in_sequence(libdir: Path, tmp_path: Path) -> None:
    rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path)
    assert rc == 0, out
    assert verdict is not None
    assert (verdict["verdict"], verdict["first_look"], verdict["gpus"]) == ("healthy", True, 2)
    assert "onecat_node_verdict 0" in (tmp_path / "textfile" / "onecat.prom").read_text()

    rc, out, verdict = _look(libdir, "ecc_uncorrected_since_boot", tmp_path)
    assert rc == 1, out
    assert verdict is not None and verdict["verdict"] == "unhealthy"
    assert verdict["state_verdict"] == "unhealthy"
    assert verdict["ecc_since_driver_load"]["uncorrected"] == 1
    codes = [f["code"] for f in verdict["findings"]]
    assert codes == ["ecc_volatile_uncorrected", "pages_retired_double_bit"]
    assert "GPU 1 (00000000:5E:00.0, serial 0323117011202) has 1 uncorrectable ECC error " \
        "since the driver loaded (3 in its lifetime)" in out
    assert "onecat_node_verdict 2" in (tmp_path / "textfile" / "onecat.prom").read_text()

    # The same counters again: nothing new arrived, but the condition lasts until the driver
    # reloads (the health stage's own rule, on every look).
    rc, out, verdict = _look(libdir, "ecc_uncorrected_since_boot", tmp_path)
    assert rc == 1, out
    assert verdict is not None
    assert [f["code"] for f in verdict["findings"]] == ["ecc_volatile_uncorrected"]

    rc, out, verdict = _look(libdir, "one_gpu_visible", tmp_path)
    assert rc == 1, out
    assert verdict is not None and "gpu_count" in [f["code"] for f in verdict["findings"]]


def test_a_look_that_cannot_complete_fails_closed_and_the_node_comes_back(
        libdir: Path, tmp_path: Path) -> None:
    """No driver (NVML cannot start): exit 2, a verdict that says "cannot look", the agent
    answers drain, the metrics say the watch is down with its last success; the next complete
    look that finds nothing puts the node back (blindness alone never holds it)."""
    agent = tmp_path / "agent"
    acting = ["--act", "--agent-file", str(agent), "--interval", "60s"]
    assert _look(libdir, "healthy_pcie_pair", tmp_path, *acting)[0] == 0
    assert agent.read_text() == "up\n"
    rc, out, verdict = _look(libdir, "driver_not_loaded", tmp_path, *acting)
    assert rc == 2, out
    assert "cannot look at" in out and "NVIDIA driver not loaded" in out
    assert verdict is not None and verdict["verdict"] == "unhealthy"
    assert verdict["cannot_look"].startswith("NVIDIA driver not loaded: NVML error 9")
    assert verdict["mode"] == "draining" and verdict["last_success"]
    assert verdict["stale_after"] > verdict["at"]  # --interval 60s: three minutes on
    assert agent.read_text().startswith("drain #onecat-watch: the watch cannot look: NVIDIA")
    metrics = (tmp_path / "textfile" / "onecat.prom").read_text()
    assert "onecat_watch_up 0" in metrics and "onecat_node_verdict 2" in metrics
    assert "onecat_watch_last_success_timestamp_seconds 0" not in metrics
    # Still blind: still drained, never held for it.
    rc, _, verdict = _look(libdir, "driver_not_loaded", tmp_path, *acting)
    assert rc == 2 and verdict is not None and verdict["mode"] == "draining"
    rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *acting)
    assert rc == 0, out
    assert verdict is not None and verdict["mode"] == "in"
    assert "draining -> in: the watch can look again and finds nothing wrong" in out
    assert agent.read_text() == "up\n"
    assert "onecat_watch_up 1" in (tmp_path / "textfile" / "onecat.prom").read_text()


def test_a_lost_gpu_still_counted_keeps_the_node_out_on_every_look(
        libdir: Path, tmp_path: Path) -> None:
    """Xid 79: the driver still counts GPU 1 but NVML answers GPU_IS_LOST for it. Every look
    says so (a condition, not an event), and the look does not crash."""
    assert _look(libdir, "healthy_pcie_pair", tmp_path)[0] == 0
    for _ in range(2):
        rc, out, verdict = _look(libdir, "gpu_lost", tmp_path)
        assert rc == 1, out
        assert verdict is not None and verdict["verdict"] == "unhealthy"
        lost = [f for f in verdict["findings"] if f["code"] == "gpu_lost"]
        assert len(lost) == 1, verdict
        assert "is lost: the driver still counts it" in lost[0]["message"], verdict


def test_a_pending_retirement_is_reported_while_it_lasts(libdir: Path, tmp_path: Path) -> None:
    """NVIDIA: a page stays pending until the GPU is reset; DCGM reports it on every check."""
    for _ in range(2):
        rc, out, verdict = _look(libdir, "retired_page_pending", tmp_path)
        assert rc == 1, out
        assert verdict is not None
        assert [f["code"] for f in verdict["findings"]] == ["retired_pages_pending"], verdict


def test_the_quality_probe_catches_a_card_that_starts_answering_garbage(
        libdir: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    # The extended syntax (a known answer) and a plain prompt, in one file.
    prompts.write_text("# fixed prompts, greedy\nThe capital of France is => Paris\n"
                       "Two plus two is\n")
    bad = tmp_path / "bad"
    env = {"STANDIN_BAD_FILE": str(bad), "STANDIN_BAD_MODE": "wrong"}
    with standin(tmp_path / "engine", env=env) as server:
        probe = ["--probe-url", server.url, "--probe-model", "standin-model",
                 "--probe-prompts", str(prompts), "--references", str(tmp_path / "refs.json")]
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *probe,
                                 "--record-references")
        assert rc == 0, out
        references = json.loads((tmp_path / "refs.json").read_text())
        assert sorted(references["answers"]) == ["The capital of France is", "Two plus two is"]
        assert len(references["likelihood"]) == 2  # the built-in reference texts

        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *probe)
        assert rc == 0, out
        assert verdict is not None and [p["ok"] for p in verdict["probe"]] == [True] * 4

        bad.touch()  # the card starts answering differently
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *probe)
    assert rc == 1, out
    assert verdict is not None and verdict["verdict"] == "unhealthy"
    # The known answer is missing, both likelihoods fell; the plain prompt's answer still
    # reads as text (its words are never compared with the recorded ones).
    assert [f["code"] for f in verdict["findings"]] == ["quality"] * 3
    messages = [f["message"] for f in verdict["findings"]]
    assert "does not contain 'Paris'" in messages[0]
    assert all("the model finds plain text unlikely" in m for m in messages[1:])
    prom = (tmp_path / "textfile" / "onecat.prom").read_text()
    assert "onecat_quality_probe_ok 0" in prom


def test_a_driver_update_waiting_for_its_reboot_keeps_the_node_in(libdir: Path,
                                                                     tmp_path: Path) -> None:
    """Issue 46: NVML's "Driver/library version mismatch" (error 18) while the driver stage's
    reboot marker exists is a driver update with reboots off: the engine serves on the
    libraries it loaded, so the node stays in with a warning, on every node at once. The same
    error with no marker is a blind watch like any other (it drains); the marker appearing
    later brings a drained node back."""
    agent = tmp_path / "gateway" / "watch-state"
    marker = tmp_path / "run" / "nvidia-driver-reboot-pending"
    acting = ["--act", "--agent-file", str(agent), "--interval", "60s",
              "--reboot-marker", str(marker)]
    assert _look(libdir, "healthy_pcie_pair", tmp_path, *acting)[0] == 0
    rc, out, verdict = _look(libdir, "driver_library_mismatch", tmp_path, *acting)
    assert rc == 2 and verdict is not None and verdict["mode"] == "draining", out
    assert verdict["cannot_look"].startswith("Driver/library version mismatch: NVML error 18")
    assert agent.read_text().startswith("drain #onecat-watch: the watch cannot look")

    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("installed=2.0.0\nloaded=1.0.0\nnouveau_loaded=false\n")
    rc, out, verdict = _look(libdir, "driver_library_mismatch", tmp_path, *acting)
    assert rc == 2 and verdict is not None, out
    assert (verdict["mode"], verdict["verdict"], verdict["reboot_pending"]) == (
        "in", "degraded", True)
    assert "draining -> in: a driver reboot is pending" in out
    assert agent.read_text() == "up\n"
    [finding] = verdict["findings"]
    assert finding["severity"] == "warning" and str(marker) in finding["message"]
    metrics = (tmp_path / "textfile" / "onecat.prom").read_text()
    assert "onecat_node_in_rotation 1" in metrics and "onecat_watch_up 0" in metrics
    rc, out, verdict = _look(libdir, "driver_library_mismatch", tmp_path, *acting)
    assert verdict is not None and verdict["mode"] == "in" and " -> " not in out, out
    # The reboot: the marker goes with /run, the new module loads, NVML reads again.
    marker.unlink()
    rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *acting)
    assert rc == 0 and verdict is not None and verdict["mode"] == "in", out


def test_acting_drains_then_holds_a_node_whose_engine_cannot_restart(
        libdir: Path, tmp_path: Path) -> None:
    """--act: the agent's answer goes drain, then out; a restart that fails holds it out;
    --release puts it back, and the node's agent answers `ready up` on every check."""
    agent = tmp_path / "gateway" / "watch-state"
    acting = ["--act", "--agent-file", str(agent),
              "--engine-unit", "onecat-no-such-engine.service"]
    assert _look(libdir, "healthy_pcie_pair", tmp_path, *acting)[0] == 0
    assert agent.read_text() == "up\n"

    # A new fatal Xid (48) and nothing else: an event an engine restart may clear.
    xid48 = ["--kernel-log", str(double.SCENARIOS / "kernel-xid48-xid13.log")]
    ecc = "healthy_pcie_pair"
    rc, out, verdict = _look(libdir, ecc, tmp_path, *acting, *xid48)
    assert rc == 1 and verdict is not None and verdict["mode"] == "draining", out
    assert agent.read_text().startswith("drain #onecat-watch: the kernel logged Xid 48")
    assert "watch: in -> draining: the kernel logged Xid 48" in out

    # The next look asks for the restart; systemctl cannot restart a unit that does not exist.
    rc, out, verdict = _look(libdir, ecc, tmp_path, *acting, *xid48)
    assert verdict is not None and verdict["mode"] == "held", out
    assert verdict["reason"].startswith("the engine restart failed")
    assert agent.read_text().startswith("maint down #onecat-watch held: the engine restart failed")
    metrics = (tmp_path / "textfile" / "onecat.prom").read_text()
    assert "onecat_node_in_rotation 0" in metrics and "onecat_watch_mode 3" in metrics

    rc, out, _ = _look(libdir, ecc, tmp_path, *acting, *xid48)
    assert agent.read_text().startswith("maint down #onecat-watch held"), out

    # The release writes the watch's `up` once; the node's agent answers `ready up` (which
    # lifts the gateway's maint) on every check from then on, not for a few seconds only.
    done = subprocess.run(
        [sys.executable, "-m", "onecat.watch", "--release", "--state-dir",
         str(tmp_path / "state"), "--agent-file", str(agent)],
        capture_output=True, text=True, cwd=double.REPO, timeout=60, check=False)
    assert done.returncode == 0 and "held -> in: released by an operator" in done.stdout
    assert agent.read_text() == "up\n"
    ask = agent_command(tmp_path, agent.parent)
    assert [ask() for _ in range(3)] == ["ready up"] * 3


def test_the_probe_follows_the_serving_record(libdir: Path, tmp_path: Path) -> None:
    """Without --probe-url the watch probes what serving.json records; references recorded
    for other bits are replaced at the first look on new bits, then judged against (the
    likelihoods of the reference texts: answers are never compared)."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The capital of France is\n")
    record, refs, bad = tmp_path / "serving.json", tmp_path / "refs.json", tmp_path / "bad"
    with standin(tmp_path / "engine", env={"STANDIN_BAD_FILE": str(bad),
                                           "STANDIN_BAD_MODE": "wrong"}) as server:
        args = ["--probe-prompts", str(prompts), "--references", str(refs),
                "--serving-record", str(record)]
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args)
        assert rc == 0 and verdict is not None and verdict["probe"] is None, out  # not serving

        serving = {"url": server.url, "served_model_name": "standin-model", "image_id": "sha256:1"}
        record.write_text(json.dumps(serving))
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args)
        assert rc == 0 and verdict is not None and verdict["probe"][0]["ok"], out
        assert json.loads(refs.read_text())["identity"].startswith("sha256:1|")

        bad.touch()
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args)
        assert rc == 1 and "the model finds plain text unlikely" in out, out

        # New bits: their likelihoods become the references only once they pass the checks
        # (a bad engine's never become anyone's).
        record.write_text(json.dumps({**serving, "image_id": "sha256:2"}))
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args)
        assert rc == 1 and "the model finds plain text unlikely" in out, out
        assert json.loads(refs.read_text())["identity"].startswith("sha256:1|")
        bad.unlink()
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args)
        assert rc == 0, out
        assert json.loads(refs.read_text())["identity"].startswith("sha256:2|")


def test_a_stuck_engine_is_out_within_two_looks_then_restarted(libdir: Path,
                                                                tmp_path: Path) -> None:
    """An engine core stuck in a collective (the stand-in's STANDIN_HANG_FILE): /health and
    /metrics answer, requests are taken and never answered, no token is generated. The first
    look that meets it drains the node (a fault, not the `probe_unreachable` warning of an
    engine that is down), ends its probe at the first unanswered question, and the second
    restarts the engine; a clean look after the restart readmits it."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The capital of France is => Paris\nTwo plus two is\n")
    hang, agent = tmp_path / "hang", tmp_path / "gateway" / "watch-state"
    # systemctl's stand-in: records the restart and clears the hang, as a fresh container does.
    bin_dir, restarts = tmp_path / "bin", tmp_path / "restarts"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> {restarts}\nrm -f {hang}\n')
    (bin_dir / "systemctl").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    with standin(tmp_path / "engine", env={"STANDIN_HANG_FILE": str(hang)}) as server:
        args = ["--probe-url", server.url, "--probe-model", "standin-model",
                "--probe-prompts", str(prompts), "--references", str(tmp_path / "refs.json"),
                "--probe-timeout", "3", "--probe-deadline", "20", "--act", "--agent-file",
                str(agent), "--engine-unit", "vllm.service", "--interval", "60s"]
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args, env=env)
        assert rc == 0 and verdict is not None and verdict["mode"] == "in", out

        hang.touch()
        started = time.monotonic()
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args, env=env)
        took = time.monotonic() - started
        assert rc == 1 and verdict is not None and verdict["mode"] == "draining", out
        assert [f["code"] for f in verdict["findings"]] == ["engine_hung"], verdict
        assert "generated no token (1 request(s) running" in verdict["findings"][0]["message"]
        assert len(verdict["probe"]) == 1, verdict["probe"]  # the first unanswered one ends it
        assert took < 15, took  # one question's timeout, not one per question
        assert agent.read_text().startswith("drain #onecat-watch: ")
        assert not restarts.exists()

        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args, env=env)
        assert verdict is not None and verdict["mode"] == "restarted", out
        assert restarts.read_text().split() == ["restart", "--no-block", "vllm.service"]

        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args, env=env)
        assert rc == 0 and verdict is not None and verdict["mode"] == "in", out
        assert agent.read_text() == "up\n"


def test_a_look_that_probes_a_slow_engine_is_no_stopped_watch(libdir: Path,
                                                               tmp_path: Path) -> None:
    """While the look probes (here 4 s on a slow engine), the agent's expiry is already past
    the probe's deadline: the agent never answers "the watch stopped" for a watch that is
    only slow; the end of the look writes the usual three intervals."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Two plus two is\n")
    agent = tmp_path / "gateway" / "watch-state"
    expires = agent.with_name("watch-expires")
    agent.parent.mkdir()
    agent.write_text("up\n")
    expires.write_text(f"{time.time() + 3:.0f}\n")  # about to expire: three seconds left
    with standin(tmp_path / "engine", env={"STANDIN_DECODE_MS": "1500"}) as server:
        look = subprocess.Popen(
            [sys.executable, "-m", "onecat.watch", "--once", "--state-dir",
             str(tmp_path / "state"), "--verdict-file", str(tmp_path / "verdict.json"),
             "--kernel-log", str(double.kernel_log("healthy_pcie_pair")),
             "--probe-url", server.url, "--probe-model", "standin-model",
             "--probe-prompts", str(prompts), "--references", str(tmp_path / "refs.json"),
             "--probe-timeout", "4", "--probe-deadline", "20", "--act", "--agent-file",
             str(agent), "--interval", "60s"],
            env=double.double_env(libdir, "healthy_pcie_pair"), cwd=double.REPO,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started = time.time()
        while look.poll() is None and float(expires.read_text()) < started + 150:
            time.sleep(0.1)
        during = float(expires.read_text())
        out, _ = look.communicate(timeout=60)
    assert during >= started + 180 + 20 - 2, (during - started, out)
    assert time.time() - started >= 4, out  # the probe's question was still waiting then
    assert abs(float(expires.read_text()) - (time.time() + 180)) < 10, out
    assert agent.read_text() == "up\n", out


def test_a_slow_engine_that_still_makes_tokens_is_not_stuck(libdir: Path,
                                                            tmp_path: Path) -> None:
    """The same unanswered question on an engine that generates (slowly: 1.5 s a token, a
    node under load) is no fault: its generation counter moves, the look warns and the node
    stays in."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Two plus two is\n")
    agent = tmp_path / "gateway" / "watch-state"
    with standin(tmp_path / "engine", env={"STANDIN_DECODE_MS": "1500"}) as server:
        rc, out, verdict = _look(
            libdir, "healthy_pcie_pair", tmp_path, "--probe-url", server.url, "--probe-model",
            "standin-model", "--probe-prompts", str(prompts), "--references",
            str(tmp_path / "refs.json"), "--probe-timeout", "4", "--probe-deadline", "20",
            "--act", "--agent-file", str(agent), "--interval", "60s")
    assert rc == 1 and verdict is not None and verdict["mode"] == "in", out  # degraded
    assert [f["code"] for f in verdict["findings"]] == ["probe_unreachable"], verdict
    assert "no answer in time" in verdict["findings"][0]["message"], verdict
    assert agent.read_text() == "up\n"


def test_a_probe_that_runs_out_of_its_deadline_says_so(libdir: Path, tmp_path: Path) -> None:
    """Each answer takes ~2 s (60 ms a token): a 3 s deadline ends the probe early; the look
    says which questions were left, and ends in time."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Two plus two is\nThe capital of France is\n")
    with standin(tmp_path / "engine", env={"STANDIN_DECODE_MS": "60"}) as server:
        started = time.monotonic()
        rc, out, verdict = _look(
            libdir, "healthy_pcie_pair", tmp_path, "--probe-url", server.url, "--probe-model",
            "standin-model", "--probe-prompts", str(prompts), "--references",
            str(tmp_path / "refs.json"), "--probe-timeout", "3", "--probe-deadline", "3")
        took = time.monotonic() - started
    assert rc == 1 and verdict is not None, out
    assert "probe_deadline" in [f["code"] for f in verdict["findings"]], verdict
    assert "engine_hung" not in [f["code"] for f in verdict["findings"]], verdict
    assert "the probe's deadline (3 s) ended it after" in out, out
    assert took < 15, took


def test_an_engine_broken_from_its_first_look_never_becomes_the_reference(
        libdir: Path, tmp_path: Path) -> None:
    """The stand-in's `unlikely` mode: filler answers that read as text, plain text at ~9 nats
    a token (under the 10-nat ceiling). With no reference yet the look holds it to the first
    reference's bound (6 nats): a fault, and nothing recorded; the healthy engine's first
    look records its own."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Two plus two is\n")
    bad, refs = tmp_path / "bad", tmp_path / "refs.json"
    bad.touch()
    with standin(tmp_path / "engine", env={"STANDIN_BAD_FILE": str(bad),
                                           "STANDIN_BAD_MODE": "unlikely"}) as server:
        probe = ["--probe-url", server.url, "--probe-model", "standin-model",
                 "--probe-prompts", str(prompts), "--references", str(refs)]
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *probe,
                                 "--record-references")
        assert rc == 1 and verdict is not None and verdict["verdict"] == "unhealthy", out
        assert [f["code"] for f in verdict["findings"]] == ["quality"] * 2, verdict
        nlls = [p["nll"] for p in verdict["probe"] if "nll" in p]
        assert len(nlls) == 2 and all(7.5 < v < 10 for v in nlls), nlls  # under the ceiling
        assert "the most a first reference may be" in out, out
        assert not refs.exists()

        bad.unlink()
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *probe)
        assert rc == 0, out
        assert all(v < 4 for v in json.loads(refs.read_text())["likelihood"].values())


# ---- each fault class drains the node within two intervals and stays out while it lasts ----

ACTING = ("--act", "--interval", "60s",
          "--engine-unit", "onecat-no-such-engine.service")


def _answers(libdir: Path, tmp_path: Path, looks: list[tuple[str | Path, tuple[str, ...]]],
             env: dict[str, str] | None = None) -> list[str]:
    """The agent's answer after each look (acting, as the timer runs it)."""
    agent = tmp_path / "gateway" / "watch-state"
    answers = []
    for scenario, extra in looks:
        rc, out, _ = _look(libdir, scenario, tmp_path, *ACTING, "--agent-file", str(agent),
                           *extra, env=env)
        assert rc in (0, 1), out
        answers.append(agent.read_text().strip())
    return answers


def _out(answer: str) -> bool:
    return answer.startswith(("drain", "maint down"))


@pytest.mark.parametrize(("fault", "kernel_log"), [
    ("gpu_lost", "kernel-xid79.log"),              # Xid 79: the GPU fell off the bus, still counted
    ("retired_page_pending", "kernel-clean.log"),
    ("ecc_uncorrected_since_boot", "kernel-clean.log"),
])
def test_a_fault_class_drains_within_two_looks_and_stays_out_while_it_lasts(
        libdir: Path, tmp_path: Path, fault: str, kernel_log: str) -> None:
    log = ("--kernel-log", str(double.SCENARIOS / kernel_log))
    answers = _answers(libdir, tmp_path, [("healthy_pcie_pair", ())] + [(fault, log)] * 4)
    assert answers[0] == "up"
    assert _out(answers[1]) and all(_out(a) for a in answers[1:]), answers
    assert answers[-1].startswith("maint down #onecat-watch held: a restart cannot clear it")


def test_an_uncorrectable_error_already_there_at_the_first_look_drains(
        libdir: Path, tmp_path: Path) -> None:
    """The first look never takes a fault as its baseline (seen on the demo fleet before)."""
    answers = _answers(libdir, tmp_path, [("ecc_uncorrected_since_boot", ())] * 3)
    assert answers[0].startswith("drain #onecat-watch: GPU 1 (00000000:5E:00.0, serial")
    assert all(_out(a) for a in answers), answers
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["first_look"] is False and verdict["mode"] == "held"


def test_xid_79_alone_in_the_log_drains_on_the_first_look(libdir: Path, tmp_path: Path) -> None:
    log = ("--kernel-log", str(double.SCENARIOS / "kernel-xid79.log"))
    answers = _answers(libdir, tmp_path, [("healthy_pcie_pair", log)] * 2)
    assert answers[0].startswith("drain #onecat-watch: the kernel logged Xid 79"), answers


def test_xid_63_alone_and_a_one_sample_thermal_slowdown_do_not_drain(
        libdir: Path, tmp_path: Path) -> None:
    """NVIDIA's catalog: 63 (a page-retirement record) is ignored alone. One sample of
    thermal slowdown on the hardware's timeline (a real card's clock: every look is a new
    process) warns; the node stays in."""
    xid63 = tmp_path / "kernel-xid63.log"
    xid63.write_text("[ 7320.560927] NVRM: Xid (PCI:0000:5e:00): 63, pid='<unknown>', "
                     "name=<unknown>, Dynamic Page Retirement: New page retired, reboot to "
                     "activate (0x00000000000123a1).\n")
    log = ("--kernel-log", str(xid63))
    now = time.time()
    looks: list[tuple[str | Path, tuple[str, ...]]] = [("healthy_pcie_pair", ()),
                                                        ("healthy_pcie_pair", log)]
    assert _answers(libdir, tmp_path, looks) == ["up", "up"]
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["verdict"] == "degraded" and verdict["findings"][0]["code"] == "xid"
    # 25 s into the blip's timeline the card is at 88 C and throttles; 35 s in it has cooled.
    for elapsed, expected in ((25, "degraded"), (35, "healthy")):
        env = {"ONECAT_NVML_DOUBLE_START": f"{now - elapsed:.3f}"}
        assert _answers(libdir, tmp_path, [("thermal_blip", log)], env=env) == ["up"]
        verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
        assert verdict["verdict"] == expected, verdict
    metrics = (tmp_path / "textfile" / "onecat.prom").read_text()
    assert 'onecat_gpu_slowdown_looks_total{gpu="1",UUID="GPU-9a8b7c6d-5e4f-4a3b-9c2d-' \
        '1e0f9a8b7c60",pci_bus_id="00000000:5E:00.0",modelName="Tesla V100-PCIE-16GB",' \
        'cause="thermal"} 1' in metrics


def test_a_power_brake_that_lasts_six_of_ten_minutes_drains(libdir: Path, tmp_path: Path) -> None:
    """gpud's rule, with the history the watch keeps in its state folder: five earlier minutes
    braked (as earlier looks recorded them) and this look's sixth fail the node; the cause is
    named."""
    rc, out, verdict = _look(libdir, "power_brake", tmp_path)
    assert rc == 1 and verdict is not None and verdict["verdict"] == "degraded", out
    assert [f["code"] for f in verdict["findings"]] == ["throttle"]
    history_file = tmp_path / "state" / "throttle-history.json"
    history = json.loads(history_file.read_text())
    (key, by_cause), = history["minutes"].items()
    minute = by_cause["power_brake"][0]
    by_cause["power_brake"] = [minute - 5, minute - 4, minute - 3, minute - 2, minute - 1]
    history_file.write_text(json.dumps(history))
    rc, out, verdict = _look(libdir, "power_brake", tmp_path)
    assert rc == 1 and verdict is not None and verdict["verdict"] == "unhealthy", out
    sustained = [f for f in verdict["findings"] if f["code"] == "throttle_sustained"]
    assert len(sustained) == 1 and "power brake in 6 of the last 10 minutes" in \
        sustained[0]["message"] and key.startswith("GPU-")


def test_a_node_out_for_a_power_brake_comes_back_by_itself_once_quiet(
        libdir: Path, tmp_path: Path) -> None:
    """Issue 46: the watch as the timer runs it (--act), with the history it keeps: six braked
    minutes drain the node, the next look holds it out until the brake clears by itself, and
    a look after five quiet minutes readmits it, with no `--release`."""
    agent = tmp_path / "gateway" / "watch-state"
    acting = ["--act", "--agent-file", str(agent), "--interval", "60s"]
    history_file = tmp_path / "state" / "throttle-history.json"

    def braked_minutes_ago(*ago: int) -> None:
        # The look that follows must fall in the same minute (the watch counts whole minutes).
        while time.time() % 60 > 45:
            time.sleep(0.5)
        history = json.loads(history_file.read_text())
        (_, by_cause), = history["minutes"].items()
        now = int(time.time() // 60)
        by_cause["power_brake"] = [now - a for a in ago]
        history_file.write_text(json.dumps(history))

    assert _look(libdir, "power_brake", tmp_path, *acting)[0] == 1
    braked_minutes_ago(5, 4, 3, 2, 1)
    rc, out, verdict = _look(libdir, "power_brake", tmp_path, *acting)
    assert verdict is not None and verdict["mode"] == "draining", out
    rc, out, verdict = _look(libdir, "power_brake", tmp_path, *acting)
    assert verdict is not None and verdict["mode"] == "held", out
    assert agent.read_text().startswith("maint down #onecat-watch held: out until it clears by "
                                        "itself: GPU 0")
    # Cool now, below gpud's rate, the last braked minute four minutes ago: still out.
    braked_minutes_ago(8, 7, 6, 5, 4)
    rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *acting)
    assert verdict is not None and verdict["mode"] == "held", out
    assert "out until 5 minutes pass without it" in verdict["findings"][0]["message"]
    braked_minutes_ago(9, 8, 7, 6, 5)
    rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *acting)
    assert rc == 0 and verdict is not None and verdict["mode"] == "in", out
    assert "held -> in: the condition cleared by itself" in out
    assert agent.read_text() == "up\n"


def test_new_xids_are_reported_after_older_lines_left_the_log(libdir: Path,
                                                               tmp_path: Path) -> None:
    """Issue 47: three Xid 74 lines, then a log whose old lines were rotated away (journal
    vacuuming, a ring wrap) holding two new ones: the watch counts the lines after its
    previous look's cursor, so the two are reported (a count since boot fell to 2 of 3)."""
    def log(name: str, *times: float) -> str:
        path = tmp_path / name
        path.write_text("".join(f"[{at:12.6f}] NVRM: Xid (PCI:0000:3b:00): 74, pid=1, name=x, "
                                "NVLink: fatal error detected on link 0\n" for at in times))
        return str(path)

    _, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, "--kernel-log",
                            log("before.log", 100.0, 200.0, 300.0))
    assert verdict is not None and any("Xid 74" in f["message"] for f in verdict["findings"])
    _, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, "--kernel-log",
                            log("rotated.log", 400.0, 500.0))
    assert verdict is not None, out
    xids = [f for f in verdict["findings"] if f["code"] == "xid"]
    assert len(xids) == 1 and "Xid 74" in xids[0]["message"] and "2 more time(s)" in \
        xids[0]["message"], verdict["findings"]
    _, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, "--kernel-log",
                            log("same.log", 400.0, 500.0))
    assert verdict is not None and not [f for f in verdict["findings"] if f["code"] == "xid"]


def test_a_new_xid_the_log_lost_is_reported_from_nvmls_events(libdir: Path,
                                                                tmp_path: Path) -> None:
    """Issue 47: the previous look saw three Xid 74 lines; since then the log was rotated (the
    old lines gone) and lost the new Xid 79's line too (a ring wrap, Storage=volatile), while
    the listener (onecat-xid-events) wrote NVML's event for it: the watch reports the new fatal
    Xid once, from NVML's events, and the verdict says which Xid sources it read."""
    boot = tmp_path / "boot_id"
    boot.write_text("3f6b1e2a-0000-4000-8000-000000000001\n")
    events = tmp_path / "state" / "xid-events.jsonl"
    events.parent.mkdir(parents=True)
    common = ("--boot-id-file", str(boot), "--xid-events-file", str(events))

    def log(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    old = "".join(f"[{at:12.6f}] NVRM: Xid (PCI:0000:3b:00): 74, pid=1, name=x, NVLink: fatal "
                  "error detected on link 0\n" for at in (100.0, 200.0, 300.0))
    _, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *common, "--kernel-log",
                            log("before.log", old))
    assert verdict is not None and any("Xid 74" in f["message"] for f in verdict["findings"])
    assert verdict["xid_sources"]["nvml_events"]["state"] == "not running", verdict
    event = {"kind": "xid", "source": "nvml-event", "time": time.time(), "uptime": 350.0,
             "boot_id": "3f6b1e2a-0000-4000-8000-000000000001",
             "pci_bus_id": "00000000:5E:00.0", "gpu": 1, "uuid": "GPU-x", "xid": 79}
    events.write_text(json.dumps(event) + "\n")
    _, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *common, "--kernel-log",
                            log("rotated.log", "[  400.000000] usb 1-1: new device\n"))
    assert verdict is not None, out
    xids = [f for f in verdict["findings"] if f["code"] == "xid"]
    assert [(f["xid"], f["severity"], f["gpu"]) for f in xids] == [
        (79, "error", "00000000:5E:00.0")], verdict["findings"]
    assert xids[0]["message"].startswith("NVML reported Xid 79 (GPU has fallen off the bus) 1 "
                                         "more time(s)"), xids[0]
    assert verdict["verdict"] == "unhealthy"
    assert verdict["xid_sources"]["kernel_log"] == str(tmp_path / "rotated.log")
    # The next look: nothing new in either source.
    _, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *common, "--kernel-log",
                            log("rotated.log", "[  400.000000] usb 1-1: new device\n"))
    assert verdict is not None and not [f for f in verdict["findings"] if f["code"] == "xid"]


def test_a_fault_that_recurs_after_a_reboot_is_reported(libdir: Path, tmp_path: Path) -> None:
    """Baselines carry the boot id: the same Xid count in a new boot is a new fault."""
    boot = tmp_path / "boot_id"
    log = ("--kernel-log", str(double.SCENARIOS / "kernel-xid48-xid13.log"),
           "--boot-id-file", str(boot))
    boot.write_text("3f6b1e2a-0000-4000-8000-000000000001\n")
    verdicts = []
    for new_boot in (False, False, True):
        if new_boot:
            boot.write_text("3f6b1e2a-0000-4000-8000-000000000002\n")
        _, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *log)
        assert verdict is not None, out
        verdicts.append(verdict)
    assert [v["verdict"] for v in verdicts] == ["unhealthy", "healthy", "unhealthy"]
    assert verdicts[2]["boot_id"].endswith("0002")
    assert any("Xid 48" in f["message"] for f in verdicts[2]["findings"]), verdicts[2]


def test_the_agent_drains_a_node_whose_watch_stopped(libdir: Path, tmp_path: Path) -> None:
    """The gateway agent's own sh command (the unit's ExecStart, no systemd) answers drain once
    the watch's answer is three intervals old, and the watch's next look lifts it (`ready up`,
    on every check while the watch and the deploy want the node in)."""
    folder = tmp_path / "gateway"
    answers = _answers(libdir, tmp_path, [("healthy_pcie_pair", ())])
    assert answers == ["up"]
    expires = folder / "watch-expires"
    assert abs(int(expires.read_text()) - (time.time() + 180)) < 30
    agent = agent_command(tmp_path, folder)
    assert agent() == "ready up"
    expires.write_text(f"{int(time.time()) - 1}\n")
    assert agent() == "drain #onecat-watch: no look for three intervals (the watch stopped)"
    expires.write_text("garbage\n")
    assert agent().startswith("drain #")
    expires.write_text(f"{int(time.time()) - 1}\n")
    rc, out, _ = _look(libdir, "healthy_pcie_pair", tmp_path, *ACTING, "--agent-file",
                       str(folder / "watch-state"))
    assert rc == 0 and "the watch looks again after its answer expired" in out, out
    assert agent() == "ready up"
    expires.unlink()  # no watch installed: nothing to expire
    assert agent() == "ready up"
