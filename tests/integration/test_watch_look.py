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
import nvml_double_harness as double
from standin_harness import standin


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nvml-double")
    double.build(out)
    return out


def _look(libdir: Path, scenario: str, tmp_path: Path, *extra: str
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


def test_no_driver_exits_2_and_keeps_the_last_verdict(libdir: Path, tmp_path: Path) -> None:
    assert _look(libdir, "healthy_pcie_pair", tmp_path)[0] == 0
    rc, out, verdict = _look(libdir, "driver_not_loaded", tmp_path)
    assert rc == 2, out
    assert "NVIDIA driver not loaded" in out
    assert verdict is not None and verdict["verdict"] == "healthy"


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
