"""`python3 -m onecat.watch --once` against the NVML double (the real pynvml loads it).

Looks in sequence, as the timer would take them: a healthy baseline, then the same GPUs with
an uncorrectable error since the driver loaded, then one GPU gone, then no driver at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import nvml_double_harness as double
from gateway_harness import wait_until
from standin_harness import standin


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nvml-double")
    double.build(out)
    return out


def _look(libdir: Path, scenario: str | Path, tmp_path: Path, *extra: str
          ) -> tuple[int, str, dict | None]:
    (tmp_path / "textfile").mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "onecat.watch", "--once", "--state-dir", str(tmp_path / "state"),
         "--verdict-file", str(tmp_path / "run" / "verdict.json"),
         "--metrics-file", str(tmp_path / "textfile" / "onecat.prom"),
         "--kernel-log", str(double.kernel_log(scenario)), *extra],
        env=double.double_env(libdir, scenario), capture_output=True, text=True, check=False,
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
    assert verdict["ecc_since_driver_load"]["uncorrected"] == 1
    codes = [f["code"] for f in verdict["findings"]]
    assert codes == ["ecc_uncorrected", "pages_retired_double_bit"]
    assert "GPU 1 (00000000:5E:00.0): 1 new uncorrectable ECC error(s)" in out
    assert "onecat_node_verdict 2" in (tmp_path / "textfile" / "onecat.prom").read_text()

    # The same counters again: nothing new arrived, the node is healthy to the watch.
    rc, out, verdict = _look(libdir, "ecc_uncorrected_since_boot", tmp_path)
    assert rc == 0, out
    assert verdict is not None and verdict["findings"] == []

    rc, out, verdict = _look(libdir, "one_gpu_visible", tmp_path)
    assert rc == 1, out
    assert verdict is not None and "gpu_lost" in [f["code"] for f in verdict["findings"]]


def test_a_look_that_cannot_complete_fails_closed_and_the_node_comes_back(
        libdir: Path, tmp_path: Path) -> None:
    """No driver (NVML cannot start): exit 2, a verdict that says "cannot look", the agent
    answers drain, the metrics say the watch is down with its last success; the next complete
    look that finds nothing puts the node back (blindness alone never holds it)."""
    agent = tmp_path / "agent"
    acting = ["--act", "--agent-file", str(agent), "--ready-hold", "0", "--interval", "60s"]
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
        assert len(lost) == 1 and "is lost: the driver counts it" in lost[0]["message"], verdict


def test_a_pending_retirement_is_reported_while_it_lasts(libdir: Path, tmp_path: Path) -> None:
    """NVIDIA: a page stays pending until the GPU is reset; DCGM reports it on every check."""
    for _ in range(2):
        rc, out, verdict = _look(libdir, "retired_page_pending", tmp_path)
        assert rc == 1, out
        assert verdict is not None
        assert [f["code"] for f in verdict["findings"]] == ["retirement_pending"], verdict


def test_the_quality_probe_catches_a_card_that_starts_answering_garbage(
        libdir: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# fixed prompts, greedy\nThe capital of France is\nTwo plus two is\n")
    bad = tmp_path / "bad"
    env = {"STANDIN_BAD_FILE": str(bad), "STANDIN_BAD_MODE": "wrong"}
    with standin(tmp_path / "engine", env=env) as server:
        probe = ["--probe-url", server.url, "--probe-model", "standin-model",
                 "--probe-prompts", str(prompts), "--references", str(tmp_path / "refs.json")]
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *probe,
                                 "--record-references")
        assert rc == 0, out
        references = json.loads((tmp_path / "refs.json").read_text())["answers"]
        assert sorted(references) == ["The capital of France is", "Two plus two is"]

        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *probe)
        assert rc == 0, out
        assert verdict is not None and [p["ok"] for p in verdict["probe"]] == [True, True]

        bad.touch()  # the card starts answering differently
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *probe)
    assert rc == 1, out
    assert verdict is not None and verdict["verdict"] == "unhealthy"
    assert [f["code"] for f in verdict["findings"]] == ["quality", "quality"]
    assert "differs from the reference answer" in verdict["findings"][0]["message"]
    prom = (tmp_path / "textfile" / "onecat.prom").read_text()
    assert "onecat_quality_probe_ok 0" in prom


def test_acting_drains_then_holds_a_node_whose_engine_cannot_restart(
        libdir: Path, tmp_path: Path) -> None:
    """--act: the agent's answer goes drain, then out; a restart that fails holds it out;
    --release puts it back with `ready`."""
    agent = tmp_path / "gateway" / "watch-state"
    acting = ["--act", "--agent-file", str(agent),
              "--engine-unit", "onecat-no-such-engine.service"]
    assert _look(libdir, "healthy_pcie_pair", tmp_path, *acting)[0] == 0
    assert agent.read_text() == "up\n"

    # One new uncorrectable error and nothing else: a fault an engine restart may clear.
    ecc = tmp_path / "ecc.scenario"
    ecc.write_text(f"include = {double.scenario_path('healthy_pcie_pair')}\n"
                   "gpu.1.ecc.volatile.uncorrected = 1\ngpu.1.ecc.aggregate.uncorrected = 1\n")
    rc, out, verdict = _look(libdir, ecc, tmp_path, *acting)
    assert rc == 1 and verdict is not None and verdict["mode"] == "draining", out
    assert agent.read_text().startswith("drain #onecat-watch: GPU 1")
    assert "watch: in -> draining: GPU 1" in out

    # The next look asks for the restart; systemctl cannot restart a unit that does not exist.
    rc, out, verdict = _look(libdir, ecc, tmp_path, *acting)
    assert verdict is not None and verdict["mode"] == "held", out
    assert agent.read_text().startswith("maint down #onecat-watch held: the engine restart failed")
    assert "onecat_node_in_rotation{mode=\"held\"} 0" in (
        tmp_path / "textfile" / "onecat.prom").read_text()

    rc, out, _ = _look(libdir, ecc, tmp_path, *acting)
    assert agent.read_text().startswith("maint down #onecat-watch held"), out

    release = subprocess.Popen(
        [sys.executable, "-m", "onecat.watch", "--release", "--state-dir",
         str(tmp_path / "state"), "--agent-file", str(agent), "--ready-hold", "3"],
        stdout=subprocess.PIPE, text=True, cwd=double.REPO)
    # `ready` (which cancels the gateway's maint) is answered for a few agent checks only.
    assert wait_until(lambda: agent.read_text() == "ready up\n", timeout=2.5, interval=0.05)
    out, _ = release.communicate(timeout=60)
    assert release.returncode == 0 and "held -> in: released by an operator" in out
    assert agent.read_text() == "up\n"


def test_the_probe_follows_the_serving_record(libdir: Path, tmp_path: Path) -> None:
    """Without --probe-url the watch probes what serving.json records; references recorded
    for other bits are replaced at the first look on new bits, then judged against."""
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
        assert rc == 1 and "differs from the reference" in out, out

        # New bits passed their gate: their answers become the references.
        record.write_text(json.dumps({**serving, "image_id": "sha256:2"}))
        rc, out, verdict = _look(libdir, "healthy_pcie_pair", tmp_path, *args)
        assert rc == 0, out
        assert json.loads(refs.read_text())["identity"].startswith("sha256:2|")
