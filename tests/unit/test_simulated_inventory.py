"""The demo's inventory simulates the same fleet as molecule/fleet (whose verify proves it)."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _simulated_hosts() -> dict[str, dict]:
    inventory = yaml.safe_load((REPO / "inventory" / "simulated.yml").read_text())
    return inventory["all"]["children"]["simulated"]["hosts"]


def test_each_demo_node_has_the_hardware_of_its_fleet_scenario_twin():
    hosts = _simulated_hosts()
    for name, host in hosts.items():
        twin_file = REPO / "molecule" / "fleet" / "host_vars" / f"{name}.yml"
        twin = yaml.safe_load(twin_file.read_text())
        for key in ("preflight_sysfs_root", "gpu_health_environment", "onecat_serve_port"):
            assert host.get(key) == twin.get(key), (name, key)


def test_demo_nodes_use_the_checkpoint_on_the_node_not_the_hub_placeholder():
    # inventory/group_vars/v100.yml names an hf: placeholder; host vars outrank it.
    assert all(host.get("onecat_model") == "" for host in _simulated_hosts().values())
