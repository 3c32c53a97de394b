"""What the driver family's apt pin costs every apt call on a node: a /regex/ against globs.

apt matches a preferences pattern against every package name in its cache each time it
builds its policy (apt-get, apt-mark, apt-cache policy, python-apt, unattended-upgrades).
With Debian's main archive in the lists (~120,000 names) the choice of pattern decides how
long every one of those calls takes. This times `apt-cache policy` on this machine's own
lists under no pin, under the pattern roles/nvidia_driver used before (one /regex/), and
under the globs it writes now (roles/nvidia_driver/vars/main.yml), and checks that both
patterns pin the same installed packages.

    python benchmarks/apt_pin.py            # needs a Debian/Ubuntu host with apt lists
    python benchmarks/apt_pin.py --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# The pattern roles/nvidia_driver wrote until the globs replaced it.
OLD_REGEX = ("^(nvidia-|libnvidia-|libcuda|libnvcuvid|libnvoptix|firmware-nvidia-|"
             "xserver-xorg-video-nvidia|cuda-drivers)")


def _globs() -> list[str]:
    role_vars = yaml.safe_load((REPO / "roles/nvidia_driver/vars/main.yml").read_text())
    return list(role_vars["__nvidia_driver_pin_globs"])


def _policy(parts: Path, package: str = "apt") -> tuple[float, str]:
    command = ["apt-cache", "-o", f"Dir::Etc::PreferencesParts={parts}",
               "-o", "Dir::Etc::Preferences=/dev/null", "policy", package]
    started = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - started, out


def _pinned(parts: Path, names: list[str]) -> list[str]:
    """The names whose policy shows the pin's priority (1001) on some version."""
    return [name for name in names if " 1001\n" in _policy(parts, name)[1]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per pattern")
    args = parser.parse_args()
    try:
        subprocess.run(["apt-cache", "stats"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        print("apt_pin.py: needs apt and its package lists (a Debian or Ubuntu host)",
              file=sys.stderr)
        return 2
    names = subprocess.run(["apt-cache", "pkgnames"], check=True, capture_output=True,
                           text=True).stdout.split()
    globs = _globs()
    # A sample of the family this host's lists carry, named by the globs' prefixes.
    family = sorted(n for n in names if n.startswith(tuple(g.rstrip("*") for g in globs)))[:8]
    patterns = {"no pin": None, "one /regex/ (before)": f"/{OLD_REGEX}/",
                "globs (now)": " ".join(globs)}
    print(f"{len(names)} package names in this host's lists; {args.runs} runs each\n")
    print(f"{'pattern':<22} {'apt-cache policy, median s':>28}")
    pinned: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, pattern in patterns.items():
            parts = Path(tmp) / label.replace(" ", "_").replace("/", "")
            parts.mkdir()
            if pattern:
                # A version no archive has: the pin changes no candidate, only costs its match.
                (parts / "onecat").write_text(
                    f"Package: {pattern}\nPin: version 0.0-bench\nPin-Priority: 1001\n")
            times = [_policy(parts)[0] for _ in range(args.runs)]
            print(f"{label:<22} {statistics.median(times):>28.3f}")
            if pattern:
                (parts / "onecat").write_text(
                    f"Package: {pattern}\nPin: version *\nPin-Priority: 1001\n")
                pinned[label] = _pinned(parts, family)
    same = len(set(map(tuple, pinned.values()))) == 1
    print(f"\nsample of the family ({len(family)} names): both patterns pin the same ones: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
