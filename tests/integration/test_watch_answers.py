"""`python3 -m onecat.watch --once --act` on a stand-in engine that, like vLLM on a V100, is
not batch-invariant: under a closed-loop load of 32 streams its answers change and the node
stays in; each of the seed's garbage modes drains it at the first look (the shipped prompts
file, extended syntax included, as the watch role writes it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
import nvml_double_harness as double
from standin_harness import standin

from onecat.answers.prompts import DEFAULT_FILE
from onecat.burnin.load import Load

SCENARIO = "healthy_pcie_pair"


def _look(libdir: Path, tmp_path: Path, url: str, *extra: str) -> tuple[int, str, dict]:
    agent = tmp_path / "agent"
    done = subprocess.run(
        [sys.executable, "-m", "onecat.watch", "--once", "--state-dir", str(tmp_path / "state"),
         "--verdict-file", str(tmp_path / "verdict.json"), "--metrics-file",
         str(tmp_path / "none" / "onecat.prom"), "--kernel-log",
         str(double.kernel_log(SCENARIO)), "--probe-url", url, "--probe-model", "standin-model",
         "--probe-prompts", str(DEFAULT_FILE), "--references", str(tmp_path / "refs.json"),
         "--act", "--agent-file", str(agent), *extra],
        env=double.double_env(libdir, SCENARIO), capture_output=True, text=True, check=False,
        cwd=double.REPO, timeout=120)
    return done.returncode, agent.read_text().strip(), json.loads(
        (tmp_path / "verdict.json").read_text())


def test_a_healthy_engine_that_is_not_batch_invariant_stays_in_under_load(
        libdir: Path, tmp_path: Path) -> None:
    with standin(tmp_path / "engine") as server:
        rc, agent, verdict = _look(libdir, tmp_path, server.url, "--record-references")
        assert rc == 0 and agent == "up", verdict
        idle = json.loads((tmp_path / "refs.json").read_text())
        load = Load(server.url, "standin-model", "", 32, 64, "Write a long story").start()
        try:
            answers = []
            for _ in range(4):
                rc, agent, verdict = _look(libdir, tmp_path, server.url)
                assert rc == 0 and agent == "up", verdict["probe"]
                answers.append(verdict["probe"][0])
        finally:
            tally = load.stop()
    assert tally.completed > 32 and tally.failed == 0
    # The references were not replaced: the same bits, judged against the first look's.
    assert json.loads((tmp_path / "refs.json").read_text()) == idle
    assert all(a["ok"] and a["reason"] == "contains the right answer" for a in answers)


@pytest.mark.parametrize("mode", ["collapse", "cjk_loop", "cut_loop", "soup"])
def test_the_seeds_garbage_drains_the_node_at_the_first_look(
        libdir: Path, tmp_path: Path, mode: str) -> None:
    bad = tmp_path / "bad"
    env = {"STANDIN_BAD_FILE": str(bad), "STANDIN_BAD_MODE": mode}
    with standin(tmp_path / "engine", env=env) as server:
        rc, agent, _ = _look(libdir, tmp_path, server.url, "--record-references")
        assert rc == 0 and agent == "up"
        bad.touch()
        rc, agent, verdict = _look(libdir, tmp_path, server.url)
    assert rc == 1 and agent.startswith("drain"), verdict
    assert verdict["mode"] == "draining"
    failed = [p for p in verdict["probe"] if not p["ok"]]
    # Every prompt's answer and every reference text's likelihood fail: two checks, each alone
    # enough.
    assert len(failed) == len(verdict["probe"]) == 5
    assert all("unlikely" in p["reason"] for p in failed if p["prompt"].startswith("score: "))
