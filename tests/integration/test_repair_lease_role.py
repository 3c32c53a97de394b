"""roles/gateway's repair lease tasks with the real ansible-playbook (local connection).

The node side (tasks_from: repair_lease_token) runs for real against a gateway host whose
state folder is a temporary one: the node's token is the HMAC of the secret there, installed
owner-only, never shown, and a second run changes nothing. The gateway side
(tasks/repair_lease.yml) installs a systemd unit, which needs a systemd host (the molecule
`fleet` scenario): here it runs in check mode, which must write nothing, and its refusals.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SECRET = "gateway-secret-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
UNIT = Path("/etc/systemd/system/onecat-repair-lease.service")


def run(tmp_path: Path, play: str, *extra: str, gateway: bool = True,
        other_gateways: dict | None = None) -> subprocess.CompletedProcess:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    groups = {"v100": {"hosts": {"node-1": local, "node-2": local, "node-3": local}}}
    if gateway:
        groups["gateway"] = {"hosts": {"gw": local, **(other_gateways or {})}}
    inventory = {"all": {"children": groups}}
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(play)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inv.yml"),
         str(tmp_path / "play.yml"),
         "-e", f"gateway_repair_lease_state_dir={tmp_path / 'state'}",
         "-e", f"gateway_repair_lease_install_dir={tmp_path / 'opt'}",
         "-e", f"gateway_repair_lease_python={sys.executable}",
         "-e", f"gateway_repair_lease_token_file={tmp_path / 'etc' / 'repair-lease.token'}",
         *extra],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1",
             "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    return proc


def changed(proc: subprocess.CompletedProcess) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", proc.stdout))


def said(proc: subprocess.CompletedProcess) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


NODE_PLAY = """
- hosts: node-1
  gather_facts: false
  tasks:
    - name: Get the node's repair lease token.
      ansible.builtin.include_role:
        name: gateway
        tasks_from: repair_lease_token
    - name: Show the URL.
      ansible.builtin.debug:
        msg: "url={{ gateway_repair_lease_url }}"
"""


def gateway_host_ready(tmp_path: Path) -> None:
    """What tasks/repair_lease.yml leaves on the gateway host: code, secret, URL file."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "secret").write_text(SECRET + "\n")
    (state / "secret").chmod(0o600)
    (state / "url").write_text("http://192.0.2.10:8043\n")
    (tmp_path / "opt").symlink_to(REPO)


def test_a_node_gets_its_own_token_owner_only_and_the_url(tmp_path) -> None:
    gateway_host_ready(tmp_path)
    first = run(tmp_path, NODE_PLAY)
    assert first.returncode == 0, said(first)[-3000:]
    token_file = tmp_path / "etc" / "repair-lease.token"
    expected = hmac.new(SECRET.encode(), b"node-1", hashlib.sha256).hexdigest()
    assert token_file.read_text() == expected + "\n"
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert "url=http://192.0.2.10:8043" in first.stdout
    assert expected not in first.stdout + first.stderr
    assert SECRET not in first.stdout + first.stderr
    again = run(tmp_path, NODE_PLAY)
    assert again.returncode == 0 and changed(again) == 0, said(again)[-3000:]
    checked = run(tmp_path, NODE_PLAY, "--check")
    assert checked.returncode == 0 and changed(checked) == 0, said(checked)[-3000:]


def test_a_node_before_the_gateway_stage_is_told_and_check_mode_passes(tmp_path) -> None:
    refused = run(tmp_path, NODE_PLAY)
    assert refused.returncode != 0
    assert "gw has no repair lease server" in said(refused)
    assert "run the gateway stage first" in said(refused)
    checked = run(tmp_path, NODE_PLAY, "--check")
    assert checked.returncode == 0, said(checked)[-3000:]
    assert "url=" in checked.stdout and "no fleet-wide bound" in said(checked)
    assert not (tmp_path / "etc").exists()


def test_without_the_lease_server_the_url_is_empty_and_no_token_installed(tmp_path) -> None:
    proc = run(tmp_path, NODE_PLAY, "-e", "onecat_repair_lease=false")
    assert proc.returncode == 0, said(proc)[-3000:]
    assert "msg: url=" in proc.stdout and "url=http" not in proc.stdout
    assert "no fleet-wide bound" in said(proc) and changed(proc) == 0
    assert not (tmp_path / "etc").exists()


def test_a_node_name_the_lease_server_refuses_is_refused_first(tmp_path) -> None:
    gateway_host_ready(tmp_path)
    proc = run(tmp_path, NODE_PLAY, "-e", "gateway_repair_lease_node='a b'")
    assert proc.returncode != 0 and "must be 1 to 253 letters" in said(proc)
    assert not (tmp_path / "etc").exists()


GATEWAY_PLAY = """
- hosts: gateway
  gather_facts: false
  tasks:
    - name: Run the repair lease tasks.
      ansible.builtin.include_role:
        name: gateway
        tasks_from: repair_lease
"""


def test_the_gateway_side_in_check_mode_writes_nothing(tmp_path) -> None:
    existed = UNIT.exists()
    proc = run(tmp_path, GATEWAY_PLAY, "--check", "--diff",
               "-e", "onecat_repair_lease_address=192.0.2.10")
    assert proc.returncode == 0, said(proc)[-3000:]
    output = said(proc)
    # The unit it would install: bound to the gateway's address, 10 % of the 3 nodes.
    assert "--listen 192.0.2.10:8043" in output
    assert "--max-parallel 0 --fleet-size 3" in output
    assert "+http://192.0.2.10:8043" in output
    assert not (tmp_path / "state").exists() and not (tmp_path / "opt").exists()
    assert UNIT.exists() == existed


FIRST_GATEWAY_PLAY = GATEWAY_PLAY.replace("- hosts: gateway", "- hosts: gw")


def test_the_floor_reads_each_other_gateway_whose_admin_page_it_can_reach(tmp_path) -> None:
    """Issue 46: the floor holds at every gateway. The lease server (on the first gateway host)
    is given each other gateway's stats page, where that gateway binds its admin port to more
    than loopback; one whose admin address could reach the unit's command line is refused."""
    others = {"gw-2": {"ansible_host": "192.0.2.11",
                       "onecat_gateway_admin_bind_address": "0.0.0.0"},
              "gw-3": {"ansible_host": "192.0.2.12"},  # admin on loopback: not readable
              "gw-4": {"onecat_gateway_admin_bind_address": "198.51.100.4",
                       "onecat_gateway_admin_port": 9404},
              "gw-5": {"onecat_gateway_admin_bind_address": "[::1]"},  # loopback too
              "gw-6": {"ansible_host": "192.0.2.16", "onecat_gateway_admin_bind_address": "*"},
              "gw-7": {"onecat_gateway_admin_bind_address": "[2001:db8::7]"}}
    proc = run(tmp_path, FIRST_GATEWAY_PLAY, "--check", "--diff",
               "-e", "onecat_repair_lease_address=192.0.2.10", other_gateways=others)
    assert proc.returncode == 0, said(proc)[-3000:]
    output = said(proc)
    urls = re.findall(r"--other-gateway-stats (\S+)", output)
    assert urls == ["http://192.0.2.11:8404/stats", "http://198.51.100.4:9404/stats",
                    "http://192.0.2.16:8404/stats", "http://[2001:db8::7]:8404/stats"], urls
    assert "192.0.2.12" not in output and "::1" not in output
    hostile = {"gw-2": {"ansible_host": "192.0.2.11 --min-in-rotation 0",
                        "onecat_gateway_admin_bind_address": "0.0.0.0"}}
    proc = run(tmp_path, FIRST_GATEWAY_PLAY, "--check",
               "-e", "onecat_repair_lease_address=192.0.2.10", other_gateways=hostile)
    assert proc.returncode != 0
    assert "gw-2 has an admin address" in said(proc) and "nothing was written" in said(proc)


def test_check_mode_on_an_earlier_releases_gateway_host_passes_before_its_user_exists(
        tmp_path) -> None:
    # An earlier release left the folder, secret and book owned by root; the lease server's
    # user (issue 49) is made by the real run. Check mode must not ask for an owner that is
    # not there yet, and must leave the root-owned files as they are.
    gateway_host_ready(tmp_path)
    (tmp_path / "state" / "leases.json").write_text('{"leases": []}\n')
    before = {path.name: path.stat() for path in (tmp_path / "state").iterdir()}
    proc = run(tmp_path, GATEWAY_PLAY, "--check",
               "-e", "onecat_repair_lease_address=192.0.2.10",
               "-e", "gateway_repair_lease_user=onecat-lease-absent-user")
    assert proc.returncode == 0, said(proc)[-3000:]
    after = {path.name: path.stat() for path in (tmp_path / "state").iterdir()}
    assert {name: (st.st_uid, st.st_mode) for name, st in after.items()} == {
        name: (st.st_uid, st.st_mode) for name, st in before.items()}


def test_a_lease_port_the_gateway_already_uses_is_refused(tmp_path) -> None:
    load = ["-e", "onecat_gateway_balance=affinity", "-e", "onecat_gateway_affinity_placement=load"]
    for port, extra in (("8000", []), ("8404", []), ("70000", []), ("8405", load)):
        proc = run(tmp_path, GATEWAY_PLAY, "-e", f"onecat_repair_lease_port={port}", *extra)
        assert proc.returncode != 0, port
        assert "gateway_repair_lease_port" in said(proc) and "nothing was written" in said(proc)
    assert not (tmp_path / "state").exists()


def test_an_inventory_without_a_gateway_host_gets_an_empty_url(tmp_path) -> None:
    proc = run(tmp_path, NODE_PLAY, gateway=False)
    assert proc.returncode == 0, said(proc)[-3000:]
    assert "msg: url=" in proc.stdout and "url=http" not in proc.stdout
    assert "no fleet-wide bound" in said(proc) and changed(proc) == 0
    assert not (tmp_path / "etc").exists()
