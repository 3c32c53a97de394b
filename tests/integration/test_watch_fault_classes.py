"""Issue 26, "Done when": each fault class drains the node within two looks and stays out while
it lasts, followed past its first bad look (test_watch_look.py and test_watch_answers.py stop
at the drain for the answer faults and for Xid 79 alone), and malformed HTTP from the engine.

`python3 -m onecat.watch --once --act` as the timer runs it, on the NVML double and the
stand-in engine; the gateway agent's answer after each look is what HAProxy would apply.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
import nvml_double_harness as double
from standin_harness import standin

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bad_http import ANSWERS, serving

from onecat.answers.prompts import DEFAULT_FILE

SCENARIO = "healthy_pcie_pair"
# Acting as the role does, with an engine unit that cannot restart (the restart fails, so the
# node is held): no systemd here.
ACTING = ("--act", "--interval", "60s",
          "--engine-unit", "onecat-no-such-engine.service")


def _look(libdir: Path, tmp_path: Path, *extra: str,
          log: Path | None = None) -> tuple[int, str, str, dict]:
    """(exit status, agent's answer, output, verdict) of one acting look."""
    agent = tmp_path / "gateway" / "watch-state"
    agent.parent.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "onecat.watch", "--once", "--state-dir", str(tmp_path / "state"),
         "--verdict-file", str(tmp_path / "verdict.json"), "--metrics-file",
         str(tmp_path / "none" / "onecat.prom"), "--kernel-log",
         str(log or double.kernel_log(SCENARIO)), *ACTING, "--agent-file", str(agent), *extra],
        env=double.double_env(libdir, SCENARIO), capture_output=True, text=True, check=False,
        cwd=double.REPO, timeout=120)
    return (done.returncode, agent.read_text().strip(), done.stdout + done.stderr,
            json.loads((tmp_path / "verdict.json").read_text()))


def _out(answer: str) -> bool:
    return answer.startswith(("drain", "maint down"))


def _probe(url: str, tmp_path: Path) -> tuple[str, ...]:
    return ("--probe-url", url, "--probe-model", "standin-model", "--probe-prompts",
            str(DEFAULT_FILE), "--references", str(tmp_path / "refs.json"))


@pytest.mark.parametrize("mode", ["collapse", "cjk_loop", "cut_loop", "soup"])
def test_the_seeds_garbage_drains_at_once_and_stays_out_while_it_lasts(
        libdir: Path, tmp_path: Path, mode: str) -> None:
    """Partial collapse, a CJK loop, a loop cut mid-repeat, random tokens: drained at the
    first look that sees them, out on every look after while the engine keeps answering so
    (the probe asks on every look while the node is out: look.probe_due)."""
    bad = tmp_path / "bad"
    env = {"STANDIN_BAD_FILE": str(bad), "STANDIN_BAD_MODE": mode}
    with standin(tmp_path / "engine", env=env) as server:
        probe = _probe(server.url, tmp_path)
        rc, agent, out, _ = _look(libdir, tmp_path, *probe, "--record-references")
        assert rc == 0 and agent == "up", out
        bad.touch()
        looks = [_look(libdir, tmp_path, *probe) for _ in range(4)]
    answers = [agent for _, agent, _, _ in looks]
    assert answers[0].startswith("drain #onecat-watch: "), answers
    assert all(_out(a) for a in answers), answers
    assert answers[-1].startswith("maint down #onecat-watch held"), answers
    # Every look while it lasts judged the answers again and failed them.
    for rc, _, out, verdict in looks:
        assert rc == 1, out
        assert verdict["probe"] and not any(p["ok"] for p in verdict["probe"]), verdict


def test_xid_79_alone_drains_at_once_and_stays_out(libdir: Path, tmp_path: Path) -> None:
    """A fatal Xid in the kernel log (the GPU fell off the bus) with NVML still answering:
    drained at the first look of the boot, never back in on the looks after."""
    log = double.SCENARIOS / "kernel-xid79.log"
    answers = [_look(libdir, tmp_path, log=log)[1] for _ in range(4)]
    assert answers[0].startswith("drain #onecat-watch: the kernel logged Xid 79"), answers
    assert all(_out(a) for a in answers), answers


# What a misbehaving engine sends back, whatever it was asked (as test_malformed_http.py).
MALFORMED = {name: ANSWERS[name] for name in ("bad-chunk", "long-header", "not-http")}


@pytest.fixture(params=sorted(MALFORMED))
def malformed_engine(request) -> Iterator[str]:
    with serving(MALFORMED[request.param]) as url:
        yield url


def test_malformed_http_from_the_engine_drains_at_once_and_stays_out(
        libdir: Path, tmp_path: Path, malformed_engine: str) -> None:
    """An engine that answers malformed HTTP (a bad chunk, an over-long header line, bytes
    that are not HTTP) was reached and answers wrong: drained at the first look, out while it
    lasts; a verdict every time, never http.client's traceback (issue 26)."""
    with standin(tmp_path / "engine") as server:
        rc, agent, out, _ = _look(libdir, tmp_path, *_probe(server.url, tmp_path),
                                  "--record-references")
    assert rc == 0 and agent == "up", out
    looks = [_look(libdir, tmp_path, *_probe(malformed_engine, tmp_path)) for _ in range(3)]
    answers = [agent for _, agent, _, _ in looks]
    assert answers[0].startswith("drain #onecat-watch: the quality probe"), answers
    assert "malformed HTTP answer" in answers[0], answers
    assert all(_out(a) for a in answers), answers
    for rc, _, out, verdict in looks:
        assert rc == 1 and "Traceback" not in out, out
        assert verdict["probe"] and all("malformed HTTP answer" in p["reason"]
                                        for p in verdict["probe"]), verdict
        assert {f["code"] for f in verdict["findings"]} == {"quality"}, verdict
