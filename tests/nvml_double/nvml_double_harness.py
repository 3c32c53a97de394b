"""Run code against the real pynvml loaded on the NVML test double, in a child process.

The double is picked the way production picks the real library (the dynamic
loader's search path), so every run is a fresh process with LD_LIBRARY_PATH
and ONECAT_NVML_DOUBLE_SCENARIO set; nothing in onecat knows about the double.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from build_double import (
    BOOT_ENV,
    LEGACY_DRIVER_HIDDEN,
    RUN_DIR_ENV,
    SCENARIO_ENV,
    SCENARIOS,
    build,
)

REPO = Path(__file__).resolve().parents[2]

__all__ = ["BOOT_ENV", "LEGACY_DRIVER_HIDDEN", "REPO", "RUN_DIR_ENV", "SCENARIOS", "build",
           "double_env", "kernel_log", "run_facts", "run_health", "scenario_path"]


def scenario_path(scenario: str | Path) -> Path:
    """A scenario by name (scenarios/<name>.scenario) or by path."""
    return scenario if isinstance(scenario, Path) else SCENARIOS / f"{scenario}.scenario"


def kernel_log(scenario: str | Path) -> Path:
    """The kernel log a scenario names with `kernel_log =` (includes followed, last one wins)."""
    return _kernel_log_key(scenario_path(scenario)) or SCENARIOS / "kernel-clean.log"


def _kernel_log_key(path: Path) -> Path | None:
    found = None
    for line in path.read_text().splitlines():
        key, _, value = line.partition("#")[0].partition("=")
        if key.strip() == "include":
            found = _kernel_log_key(path.parent / value.strip()) or found
        elif key.strip() == "kernel_log":
            found = path.parent / value.strip()
    return found


def double_env(libdir: Path, scenario: str | Path) -> dict[str, str]:
    """The environment of a run on the double. Unless the caller's environment says otherwise,
    the node booted at Unix time 0 (ONECAT_NVML_DOUBLE_BOOT): a scenario's `!reset`/`!reboot`
    faults hold however long ago this machine booted or the checkout was written."""
    return {
        BOOT_ENV: "0",
        **os.environ,
        "LD_LIBRARY_PATH": str(libdir),
        SCENARIO_ENV: str(scenario_path(scenario)),
        "PYTHONPATH": str(REPO),
    }


def run_health(libdir: Path, scenario: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m onecat.health ARGS` on the double with the scenario's kernel log."""
    command = [sys.executable, "-m", "onecat.health", "--kernel-log", str(kernel_log(scenario)),
               *args]
    return subprocess.run(command, env=double_env(libdir, scenario), capture_output=True,
                          text=True, check=False, cwd=REPO, timeout=60)


def run_facts(libdir: Path, scenario: str | Path, prelude: str = "") -> dict[str, Any]:
    """gather + judge (onecat.health.check_local) with default thresholds, as a dict.

    `prelude` runs first with `pynvml` imported (e.g. to remove a wrapper an old
    pynvml release lacks).
    """
    code = (
        "import json, sys, pynvml\n"
        f"{prelude}\n"
        "from onecat.health.local import check_local\n"
        "from onecat.health.judge import Thresholds\n"
        "facts = check_local(pynvml, Thresholds(), sys.argv[1])\n"
        "print(json.dumps(facts))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(kernel_log(scenario))],
                          env=double_env(libdir, scenario), capture_output=True, text=True,
                          check=False, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
