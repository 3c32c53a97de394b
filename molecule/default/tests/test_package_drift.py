"""A package removed or unheld by hand is repaired by a re-run, although the stages now ask dpkg
before apt (apt is only called when a wanted package is missing or at another version) and skip
a node whose stage stamp matches (roles/stage_stamp: the package's dpkg state is in its
fingerprint)."""

from __future__ import annotations

import json
import subprocess

import pytest

NODE = "onecat-node2"
TOOLKIT = "nvidia-container-toolkit"
STAGES = """
- ansible.builtin.import_playbook: @PROJECT@/playbooks/runtime.yml
"""


def _sh(cmd: str) -> str:
    return subprocess.run(["docker", "exec", NODE, "bash", "-c", cmd], check=True,
                          capture_output=True, text=True, timeout=300).stdout


def test_removed_and_unheld_packages_are_reinstalled_and_held_again(host, run_playbook):
    if host.backend.hostname != NODE:
        pytest.skip("drifts one node")
    version = _sh(f"dpkg-query -W -f='${{Version}}' {TOOLKIT}")
    # Converge and idempotence left the runtime stage's stamp; a failed run since (the refused
    # drop-in of test_existing_host) removed it, so converge the node again first.
    if "yes" not in _sh("test -e /var/lib/onecat/stamps/runtime.json && echo yes || true"):
        again = run_playbook(STAGES, "--limit", NODE)
        assert again.rc == 0, again.output[-3000:]
    stamp = json.loads(_sh("cat /var/lib/onecat/stamps/runtime.json"))
    assert stamp["fingerprint"][f"package:{TOOLKIT}"] == f"hi {version}", stamp
    # Drift: the operator removes the toolkit's CLI package and unholds the toolkit.
    _sh(f"apt-mark unhold {TOOLKIT} && dpkg --remove --force-depends {TOOLKIT}")
    assert "ii" not in _sh(f"dpkg-query -W -f='${{db:Status-Abbrev}}' {TOOLKIT} || true")

    repaired = run_playbook(STAGES, "--limit", NODE)
    assert repaired.rc == 0, repaired.output[-3000:]
    assert repaired.recap(NODE)["changed"] >= 1, repaired.output[-3000:]
    # The runtime stage's stamp saw the drift (dpkg state of a package it manages) ...
    said = " ".join(repaired.output.split())
    drift = f"{NODE}: the runtime stage runs: drift on the node: package:{TOOLKIT}: hi {version} ->"
    assert drift in said, repaired.output[-3000:]
    # Back at the pinned version, and held.
    state = _sh(f"dpkg-query -W -f='${{db:Status-Abbrev}} ${{Version}}' {TOOLKIT}")
    assert state == f"hi  {version}"

    # An unrelated repository and its keyring added to the host meanwhile (a monitoring agent's,
    # say): no entry the stage reuses, so its stamp does not cover it (before, every file of
    # sources.list.d and the keyrings did: the stage ran again, and its apt update failed).
    _sh("printf 'deb [signed-by=/usr/share/keyrings/example.gpg] http://example.invalid/apt "
        "stable main\\n' > /etc/apt/sources.list.d/example.list && "
        "printf 'key' > /usr/share/keyrings/example.gpg")
    try:
        again = run_playbook(STAGES, "--limit", NODE)
    finally:
        _sh("rm -f /etc/apt/sources.list.d/example.list /usr/share/keyrings/example.gpg")
    assert again.rc == 0, again.output[-3000:]
    assert again.recap(NODE)["changed"] == 0, again.output[-3000:]
    # ... and the run after the repair skips the stage: its stamp matches again.
    said = " ".join(again.output.split())
    assert f"{NODE}: the runtime stage is skipped: unchanged" in said, again.output[-3000:]
