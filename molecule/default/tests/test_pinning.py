"""A newer driver and toolkit point release is published while the fleet runs: nothing upgrades,
the lock holds, a re-run changes nothing."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import PROJECT, read_lock

NODES = ["onecat-node1", "onecat-node2"]
KEY = "Debian-12/distro/535/proprietary"
INSTALLED = "dpkg-query -W -f='${Package} ${Version}\\n' 'nvidia-*' 'libnvidia-*' libcuda1 | sort"
STAGES = """
- ansible.builtin.import_playbook: @PROJECT@/playbooks/driver.yml
- ansible.builtin.import_playbook: @PROJECT@/playbooks/runtime.yml
"""


def _sh(node: str, cmd: str) -> str:
    return subprocess.run(["docker", "exec", node, "bash", "-c", cmd], check=True,
                          capture_output=True, text=True, timeout=300).stdout


def _newer(version: str) -> str:
    upstream = version.split("-")[0].split(".")
    upstream[-1] = f"{int(upstream[-1]) + 1:0{len(upstream[-1])}d}"
    return ".".join(upstream) + "-1"


def test_newer_point_release_published_mid_test_installs_nothing(host, run_playbook):
    if host.backend.hostname != "onecat-node1":
        pytest.skip("publishes once, checks both nodes")
    lock_before = read_lock()
    locked = lock_before["nvidia_driver"][KEY]
    newer = _newer(locked["version"])
    installed_before = {node: _sh(node, INSTALLED) for node in NODES}
    repo = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "apt"
    for option, version in [("--publish-driver", newer), ("--publish-toolkit", "1.17.10-1")]:
        subprocess.run(["bash", str(PROJECT / "tests/apt_repo/build.sh"), str(repo), option,
                        version], check=True, capture_output=True, timeout=300)
    for node in NODES:
        subprocess.run(["docker", "cp", f"{repo}/.", f"{node}:/opt/onecat-test/apt/"], check=True,
                       capture_output=True, timeout=120)
        _sh(node, "apt-get update -qq")
        policy = _sh(node, "apt-cache policy nvidia-smi libcuda1 nvidia-container-toolkit")
        assert newer in policy, policy  # the archive offers it ...
        # ... and the pin keeps the locked build the candidate, for this host and the next one.
        candidates = dict(re.findall(r"(?m)^(\S+):\n\s+Installed: .*\n\s+Candidate: (\S+)", policy))
        assert candidates["nvidia-smi"] == locked["packages"]["nvidia-smi"], policy
        assert candidates["libcuda1"] == locked["packages"]["libcuda1"], policy
    # Stamps off: the roles themselves must see the newer release and leave it alone (with stamps,
    # nothing the stages manage changed, so they would skip the nodes without asking apt).
    run = run_playbook(STAGES, "-e", "onecat_stamps=false")
    assert run.rc == 0, run.output[-3000:]
    for node in NODES:
        assert run.recap(node)["changed"] == 0, run.output[-4000:]
        assert _sh(node, INSTALLED) == installed_before[node]
        assert _sh(node, "dpkg-query -W -f='${Version}' nvidia-container-toolkit") == "1.17.8-1"
    assert read_lock() == lock_before
