"""Compile the NVML test double into a directory as `libnvidia-ml.so.1`.

Used by the pytest fixture (session-scoped, into a temporary directory) and by
hand to put the double on a molecule node (Debian 12, same glibc as the CI
machine: compile here, copy the file in, point LD_LIBRARY_PATH at it):

    python3 tests/nvml_double/build_double.py OUT_DIR [--hide nvmlDeviceGetRemappedRows ...]

`--hide` leaves a function out of the export table, which is exactly how an
older driver that lacks it looks to pynvml (NVML_ERROR_FUNCTION_NOT_FOUND).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "nvml_double.c"
SCENARIOS = HERE / "scenarios"
LIBRARY_NAME = "libnvidia-ml.so.1"
SCENARIO_ENV = "ONECAT_NVML_DOUBLE_SCENARIO"
# The node's boot (Unix seconds) as the double sees it; unset: the start of PID 1.
BOOT_ENV = "ONECAT_NVML_DOUBLE_BOOT"
# Where nvidia-smi -r records resets ($RUN/gpu-reset/<i>); a reboot empties it (a tmpfs).
RUN_DIR_ENV = "ONECAT_TEST_RUN_DIR"

# What a driver from before the R535 renames and the _v3 process calls lacks.
LEGACY_DRIVER_HIDDEN = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetRemappedRows",
)


def build(out_dir: Path, hide: Sequence[str] = ()) -> Path:
    """Compile the double into out_dir and return the library path."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("no C compiler found: install gcc (apt-get install gcc)")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    command = [
        compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
        "-Wno-unused-parameter", f"-Wl,-soname,{LIBRARY_NAME}", "-o", str(target), str(SOURCE),
    ]
    if hide:
        # A version script with exact `local:` names beats the `global: *;` wildcard.
        script = out_dir / "exports.map"
        script.write_text("{ global: *; local: " + " ".join(f"{s};" for s in hide) + " };\n")
        command.append(f"-Wl,--version-script={script}")
    subprocess.run(command, check=True)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--hide", action="append", default=[], metavar="SYMBOL")
    parser.add_argument("--legacy", action="store_true", help="hide what old drivers lack")
    args = parser.parse_args(argv)
    hide = list(args.hide) + (list(LEGACY_DRIVER_HIDDEN) if args.legacy else [])
    try:
        print(build(args.out_dir, hide))
    except (RuntimeError, subprocess.CalledProcessError) as error:
        print(f"build_double.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
