"""The driver and runtime stages stop after a batch they held out, as serve stops after its canary.

A driver that does not install or load on the first batch does not on the next: each batch
tried would take its nodes out of the gateway for the same cause, down to the fleet's floor
(issue 46). The real playbooks/driver.yml runs in check mode against four local hosts of group
v100 in batches of one; the role refuses each before any change (a value its argument spec
refuses, the same on every host, as a fleet-wide cause is).
"""

from __future__ import annotations

from .ansible_run import run_playbook

VOLTA = {"volta": True, "secure_boot": False, "nouveau_loaded": False, "gpus": []}
HOSTS = ["node-1", "node-2", "node-3", "node-4"]
REFUSAL = "Validating arguments against arg spec 'main'"
UNTOUCHED = "Say that the host was left untouched."


def _run(tmp_path, max_fail: int) -> dict[str, dict]:
    """Per host: whether the role refused it, and why the stage left it untouched (or None)."""
    hosts = {name: {"onecat_preflight": VOLTA, "nvidia_driver_reboot_module_timeout": "soon",
                    "onecat_driver_batch": 1, "onecat_driver_max_fail_percentage": max_fail,
                    "onecat_stamps": False, "onecat_report_follows": True,
                    "ansible_become": False} for name in HOSTS}
    data = run_playbook("driver_batches.yml", hosts, tmp_path, check=True,
                        groups={"v100": HOSTS})
    seen: dict[str, dict] = {name: {"refused": False, "skip": None} for name in HOSTS}
    for play in data["plays"]:
        for task in play["tasks"]:
            name = task["task"]["name"].split(" : ", 1)[-1]
            for host, result in task["hosts"].items():
                if name.startswith(REFUSAL) and result.get("failed"):
                    seen[host]["refused"] = True
                if name == UNTOUCHED and not result.get("skipped"):
                    seen[host]["skip"] = result["msg"]
    return seen


def test_a_held_out_first_batch_leaves_every_later_batch_untouched(tmp_path) -> None:
    seen = _run(tmp_path, max_fail=0)
    assert seen["node-1"] == {"refused": True, "skip": None}, seen
    for name in HOSTS[1:]:
        assert seen[name]["refused"] is False, seen
        assert "driver rollout stopped before this batch: 1 of 1 host(s)" in seen[name]["skip"]
        assert "(onecat_driver_max_fail_percentage 0)" in seen[name]["skip"]
        assert "this host was not changed" in seen[name]["skip"]

