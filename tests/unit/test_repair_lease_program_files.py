"""roles/gateway ships exactly the onecat modules the repair lease server imports, and documents
every repair lease variable it defaults."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from imports_harness import onecat_imports

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "gateway"


def test_the_gateway_role_ships_what_the_lease_server_imports(tmp_path: Path) -> None:
    imported = onecat_imports("onecat.repair.lease_server", tmp_path)
    shipped = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert sorted(shipped["__gateway_repair_lease_program_files"]) == imported
    folders = {str(Path(path).parent) for path in imported} - {"onecat"}
    tasks = (ROLE / "tasks" / "repair_lease.yml").read_text()
    assert all(f"{{{{ gateway_repair_lease_install_dir }}}}/{folder}" in tasks
               for folder in folders)


def test_every_repair_lease_default_is_in_the_argument_specs() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    documented = set(specs["main"]["options"]) | set(specs["repair_lease_token"]["options"])
    ours = {name for name in defaults if name.startswith("gateway_repair_lease")}
    assert len(ours) >= 8
    assert ours <= documented


def test_the_lease_port_is_none_of_the_gateways_other_ports() -> None:
    defaults = (ROLE / "defaults" / "main.yml").read_text()

    def port(name: str) -> int:
        found = re.search(rf"^{name}: .*?(\d+)\)?\s*\}}*\"?$", defaults, re.MULTILINE)
        assert found, name
        return int(found.group(1))

    others = {port("gateway_port"), port("gateway_agent_port"), port("gateway_admin_port")}
    assert port("gateway_repair_lease_port") == 8043 and 8043 not in others


def test_main_includes_the_lease_tasks_when_enabled_on_the_first_gateway_after_haproxy() -> None:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    names = [task.get("ansible.builtin.include_tasks") for task in tasks]
    assert "repair_lease.yml" in names
    include = tasks[names.index("repair_lease.yml")]
    assert include["when"].startswith("gateway_repair_lease | bool and inventory_hostname == ")
    assert "groups['gateway']" in include["when"] and include["when"].endswith("| first")
    # After HAProxy is written and started: a refused gateway writes nothing at all.
    starts = [i for i, task in enumerate(tasks) if "ansible.builtin.systemd_service" in task]
    assert starts and names.index("repair_lease.yml") > max(starts)
