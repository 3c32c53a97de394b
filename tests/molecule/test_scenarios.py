"""Run each molecule scenario end to end: create, converge, idempotence, verify, destroy.

The scenarios converge real Debian 12 systemd nodes in Docker; their own
verify steps (testinfra, under molecule/<scenario>/tests) hold the assertions.
Here a scenario passes only when molecule's whole test sequence exits 0.
Deselect with `-m "not molecule"` for a quick run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert shutil.which("docker"), "docker CLI missing: run scripts/bootstrap.sh"
    docker = subprocess.run(["docker", "info"], capture_output=True, check=False)
    assert docker.returncode == 0, "Docker daemon not reachable: run scripts/bootstrap.sh"
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "NO_COLOR": "1"}
    # Stream molecule's own log: when a scenario fails in CI, this is what explains it.
    with capsys.disabled():
        print(f"\n===== molecule test -s {scenario}", flush=True)
        result = subprocess.run(
            [f"{bindir}/molecule", "test", "-s", scenario], cwd=REPO, env=env, check=False
        )
    assert result.returncode == 0, f"molecule scenario {scenario} failed (log above)"
