"""The reset's environment in hand (issue 47 item 4): the watch reads no NVML while the repair
runner resets, and persistence is lifted GPU by GPU, so a lost GPU that cannot be asked does
not keep its healthy peer's on (the pair's reset would be refused)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from onecat.health import gpu_lock
from onecat.repair.__main__ import NodeHost

REPO = Path(__file__).resolve().parents[2]


def test_the_lock_is_busy_only_while_held_and_a_crash_drops_it(tmp_path: Path) -> None:
    assert not gpu_lock.busy(tmp_path)  # no runner ever reset here
    with gpu_lock.held(tmp_path):
        assert gpu_lock.busy(tmp_path)
    assert not gpu_lock.busy(tmp_path)
    # A runner killed while it holds the lock: the kernel drops it with the process.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from onecat.health import gpu_lock\nwith gpu_lock.held(Path(sys.argv[1])):\n"
         "    print('held', flush=True); time.sleep(60)", str(tmp_path)],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    assert gpu_lock.busy(tmp_path)
    holder.kill()
    holder.wait(10)
    assert not gpu_lock.busy(tmp_path)


def test_the_watch_skips_its_look_while_a_reset_holds_the_gpus(tmp_path: Path) -> None:
    verdict = tmp_path / "verdict.json"
    argv = [sys.executable, "-m", "onecat.watch", "--once", "--state-dir", str(tmp_path / "s"),
            "--verdict-file", str(verdict), "--repair-dir", str(tmp_path / "repair")]
    with gpu_lock.held(tmp_path / "repair"):
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60,
                              check=False)
    assert done.returncode == 0, done.stderr
    assert "the repair runner is resetting the GPUs: this look is skipped" in done.stdout
    assert not verdict.exists() and not (tmp_path / "s").exists()


def test_persistence_is_asked_and_lifted_per_gpu(tmp_path: Path) -> None:
    """nvidia-smi fails a whole query that names a lost GPU (rc 15, 'GPU is lost'): asked one
    by one, the healthy GPU 0's persistence is still found, so the reset can lift it."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$*" in\n'
                   '  *"-i 1"*) echo "Unable to determine the device handle for GPU1: '
                   '0000:5E:00.0: GPU is lost"; exit 15 ;;\n'
                   '  *"-i 0,1"*) echo "GPU is lost"; exit 15 ;;\n'
                   '  *"-i 0"*) echo "0, Enabled" ;;\nesac\n')
    smi.chmod(0o755)
    host = NodeHost(argparse.Namespace(node="n", api_key_file=Path("/nonexistent"),
                                       serving_record=Path("/nonexistent"),
                                       lease_token_file=None, nvidia_smi=str(smi)))
    assert host._persistent([0, 1]) == ["0"]
