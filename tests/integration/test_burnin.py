"""`python3 -m onecat.burnin` against the stand-in engine and the NVML double: a healthy node
is admitted; one whose ECC counters rise under load (a timeline), or whose answers go bad
under load, is refused with the evidence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml_double"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
import nvml_double_harness as double
from standin_harness import standin

from onecat.answers.prompts import SCORE_TEXTS

PROMPTS = "The capital of France is => Paris\nCount from one to ten: one, two, three,\n"


def _burnin(libdir: Path, scenario: str, tmp_path: Path, url: str, seconds: float,
            *extra: str) -> tuple[int, str, dict | None]:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPTS)
    out = tmp_path / "burnin.json"
    done = subprocess.run(
        [sys.executable, "-m", "onecat.burnin", "--url", url, "--model", "standin-model",
         "--seconds", str(seconds), "--concurrency", "4", "--max-tokens", "16",
         "--ask-every", "1", "--prompts", str(prompts), "--out", str(out),
         "--kernel-log", str(double.kernel_log(scenario)), *extra],
        env=double.double_env(libdir, scenario), capture_output=True, text=True, check=False,
        cwd=double.REPO, timeout=120)
    document = json.loads(out.read_text()) if out.exists() else None
    return done.returncode, done.stdout + done.stderr, document


def test_a_healthy_node_is_admitted_and_its_answers_become_references(
        libdir: Path, tmp_path: Path) -> None:
    with standin(tmp_path / "engine") as server:
        rc, out, doc = _burnin(libdir, "healthy_pcie_pair", tmp_path, server.url, 3)
    assert rc == 0, out
    assert doc is not None and doc["verdict"] == "healthy" and doc["admitted"]
    assert doc["load"]["completed"] > 10 and doc["load"]["failed"] == 0
    assert len(doc["series"]) >= 3 and doc["series"][0]["gpus"][1]["ecc_uncorrected"] == 0
    # Judged on their own (known answer, degeneracy, likelihood against the idle one), never
    # against the idle answers: the stand-in, like a V100, is not batch-invariant.
    assert doc["answers"]["under_load"] and all(a["ok"] for a in doc["answers"]["under_load"])
    # What the role records as the fleet's references when this node is the canary.
    assert doc["references"]["likelihood"].keys() == set(SCORE_TEXTS)
    assert "burn-in healthy (admitted)" in out


def test_ecc_rising_under_load_refuses_the_node(libdir: Path, tmp_path: Path) -> None:
    with standin(tmp_path / "engine") as server:
        rc, out, doc = _burnin(libdir, "ecc_rises_under_load", tmp_path, server.url, 8)
    assert rc == 1, out
    assert doc is not None and doc["verdict"] == "unhealthy" and not doc["admitted"]
    codes = sorted({f["code"] for f in doc["findings"]})
    # The watch's rules: the state (the health judge's, one finding per condition) and changes.
    assert codes == ["ecc_corrected", "ecc_volatile_uncorrected", "retired_pages_pending"], \
        doc["findings"]
    # The evidence: the time series shows when the counter rose.
    rose = [row["t"] for row in doc["series"] if row["gpus"][1]["ecc_uncorrected"]]
    assert rose and 5 <= rose[0] <= 8, doc["series"]
    assert "has 1 uncorrectable ECC error since the driver loaded" in out


def test_answers_that_go_bad_under_load_refuse_the_node(libdir: Path, tmp_path: Path) -> None:
    env = {"STANDIN_BAD_AFTER": "30", "STANDIN_BAD_MODE": "wrong"}
    with standin(tmp_path / "engine", env=env) as server:
        rc, out, doc = _burnin(libdir, "healthy_pcie_pair", tmp_path, server.url, 3)
    assert rc == 1, out
    assert doc is not None and [f["code"] for f in doc["findings"]] == ["answers"]
    assert "answers and likelihoods under load failed" in doc["findings"][0]["message"]
    assert not all(a["ok"] for a in doc["answers"]["under_load"])


def test_idle_likelihoods_must_match_the_canary(libdir: Path, tmp_path: Path) -> None:
    """The canary's likelihoods (recorded by the role from the first admitted node): one 30 %
    away from this node's is outside the tolerance."""
    with standin(tmp_path / "canary") as server:
        rc, out, doc = _burnin(libdir, "healthy_pcie_pair", tmp_path, server.url, 1)
    assert rc == 0 and doc is not None, out
    canary = doc["references"]["likelihood"]
    refs = tmp_path / "canary.json"
    refs.write_text(json.dumps({"likelihood": canary}))
    with standin(tmp_path / "engine") as server:
        rc, out, doc = _burnin(libdir, "healthy_pcie_pair", tmp_path, server.url, 1,
                               "--references", str(refs))
    assert rc == 0, out  # the same bits: within the tolerance
    refs.write_text(json.dumps({"likelihood": {k: v * 1.3 for k, v in canary.items()}}))
    with standin(tmp_path / "engine2") as server:
        rc, out, doc = _burnin(libdir, "healthy_pcie_pair", tmp_path, server.url, 2,
                               "--references", str(refs))
    assert rc == 1, out
    assert doc is not None and "likelihood moved" in doc["findings"][0]["message"]


def test_a_server_that_does_not_answer_cannot_be_admitted(libdir: Path, tmp_path: Path) -> None:
    rc, out, doc = _burnin(libdir, "healthy_pcie_pair", tmp_path, "http://127.0.0.1:9", 2)
    assert rc == 1, out
    assert doc is not None and any(f["code"] == "load" for f in doc["findings"])
