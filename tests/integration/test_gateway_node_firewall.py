"""The node's stage opens the agent port in a real ufw to the gateway hosts only (issue 28, item 3).

The gateway role's node firewall tasks run (real ansible-playbook, local connection) in a
network and mount namespace of the test's own: a real ufw, enabled there (its rules in that
namespace's netfilter, its files on a private copy of /etc/ufw), guards the node; a second
network namespace joined by a veth pair is the gateway, with its own address and a stranger's.
Nothing of this machine's firewall or /etc/ufw changes. firewalld needs D-Bus and its daemon:
its commands are checked against a stand-in that records them (test_firewalld_...).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway_harness import free_port

REPO = Path(__file__).resolve().parents[2]
GATEWAY, STRANGER, NODE = "10.203.0.1", "10.203.0.3", "10.203.0.2"
PLAYBOOK = """- hosts: node
  gather_facts: false
  tasks:
    - name: Open the node's firewall for the gateway's agent check.
      ansible.builtin.include_role:
        name: gateway
        tasks_from: {tasks}
"""

# $1 the work folder, $2 the agent port; then the runs of ansible-playbook, one per line of
# $1/runs (a check-mode run, a run, a second run), each followed by what reaches the agent.
NAMESPACES = r"""set -e
work="$1"; port="$2"
mount --make-rprivate /
cp -a /etc/ufw "$work/etc-ufw"; cp /etc/default/ufw "$work/default-ufw"
mount --bind "$work/etc-ufw" /etc/ufw
mount --bind "$work/default-ufw" /etc/default/ufw
ip link set lo up
unshare --net sleep 600 &
gw=$!
sleep 0.3
ip link add vnode type veth peer name vgw netns "$gw"
ip addr add NODE/24 dev vnode
ip link set vnode up
inside() { nsenter --net=/proc/$gw/ns/net "$@"; }
inside ip link set lo up
inside ip addr add GATEWAY/24 dev vgw
inside ip addr add STRANGER/24 dev vgw
inside ip link set vgw up
ufw --force enable >/dev/null
python3 "$work/listener.py" NODE "$port" &
listener=$!
sleep 0.5
reach() {
  echo "reach $1 $(inside python3 "$work/probe.py" GATEWAY NODE "$port")" \
       "$(inside python3 "$work/probe.py" STRANGER NODE "$port")"
}
reach before
n=0
while IFS= read -r run; do
  n=$((n + 1))
  sh -c "$run" >"$work/run$n.json" 2>"$work/run$n.err" || echo "rc$n=$?"
  reach "run$n"
done <"$work/runs"
ufw show added
kill "$listener" "$gw"
""".replace("GATEWAY", GATEWAY).replace("STRANGER", STRANGER).replace("NODE", NODE)
LISTENER = """import socket, sys, time
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
while True:
    c, _ = s.accept()
    c.close()
"""
PROBE = """import socket, sys
s = socket.socket()
s.settimeout(1)
s.bind((sys.argv[1], 0))
try:
    s.connect((sys.argv[2], int(sys.argv[3])))
    print("open")
except OSError:
    print("closed")
"""


def _inventory(tmp: Path, **node_vars) -> Path:
    inventory = {"all": {"children": {
        "v100": {"hosts": {"node": {"ansible_connection": "local",
                                    "ansible_python_interpreter": sys.executable, **node_vars}}},
        # Never connected to: the node's stage reads its address from the inventory.
        "gateway": {"hosts": {"gw": {"ansible_host": GATEWAY}}},
    }}}
    path = tmp / "inv.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def _command(tmp: Path, inventory: Path, tasks: str, *extra: str) -> list[str]:
    play = tmp / f"{tasks}.play.yml"
    play.write_text(PLAYBOOK.format(tasks=tasks))
    return [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
            str(play), *extra]


ENV = {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}


def _changed(result_file: Path) -> list[str]:
    data = json.loads(result_file.read_text())
    return [task["task"]["name"].split(" : ", 1)[-1] for play in data["plays"]
            for task in play["tasks"]
            if any(r.get("changed") for r in task["hosts"].values())]


def _failed(stdout: str) -> tuple[str, str]:
    """The failed task's name (without the role's) and its message."""
    for play in json.loads(stdout)["plays"]:
        for task in play["tasks"]:
            for result in task["hosts"].values():
                if result.get("failed"):
                    return task["task"]["name"].split(" : ", 1)[-1], result.get("msg", "")
    return "", ""


def _netns_ok() -> str | None:
    missing = [t for t in ("ufw", "unshare", "nsenter", "ip", "iptables") if not shutil.which(t)]
    if missing:
        return f"needs {', '.join(missing)} (Debian: apt-get install ufw iproute2 util-linux)"
    probe = subprocess.run(["unshare", "--net", "--mount", "iptables", "-L"],
                           capture_output=True, check=False)
    if probe.returncode != 0:
        return f"no network and mount namespace with netfilter here: {probe.stderr[-200:]!r}"
    return None


def test_ufw_opens_the_agent_port_to_the_gateway_only_check_mode_changes_nothing(tmp_path):
    reason = _netns_ok()
    if reason:
        pytest.skip(reason)
    port = free_port()
    host_ufw = Path("/etc/ufw/user.rules").read_text()
    inventory = _inventory(tmp_path, gateway_agent_port=port)
    play = " ".join(_command(tmp_path, inventory, "node_firewall"))
    (tmp_path / "runs").write_text(f"{play} --check\n{play}\n{play}\n")
    for name, text in (("ns.sh", NAMESPACES), ("listener.py", LISTENER), ("probe.py", PROBE)):
        (tmp_path / name).write_text(text)
    proc = subprocess.run(["unshare", "--net", "--mount", "sh", str(tmp_path / "ns.sh"),
                           str(tmp_path), str(port)], capture_output=True, text=True, cwd=REPO,
                          check=False, timeout=600, env={**os.environ, **ENV})
    out = proc.stdout
    assert proc.returncode == 0 and not re.search(r"(?m)^rc[0-9]+=", out), (
        out + proc.stderr + "".join(p.read_text() for p in tmp_path.glob("run*.err")))
    # ufw drops the port for everyone until the stage runs; check mode (ufw's dry run) too.
    assert "reach before closed closed" in out
    assert "reach run1 closed closed" in out
    assert _changed(tmp_path / "run1.json") == [
        "Open the agent port in ufw to the gateway hosts (check mode - ufw's dry run)."]
    # The run opens it to the gateway's address, not to another one on the same network.
    assert "reach run2 open closed" in out
    assert _changed(tmp_path / "run2.json") == [
        "Open the agent port in ufw to the gateway hosts (check mode - ufw's dry run)."]
    # Once: the second run changes nothing, ufw holds one rule.
    assert _changed(tmp_path / "run3.json") == []
    assert "reach run3 open closed" in out
    rule = f"ufw allow from {GATEWAY} to any port {port} proto tcp comment 'onecat-agent'"
    assert out.count("ufw allow ") == 1 and rule in out, out
    # This machine's own ufw is as it was.
    assert Path("/etc/ufw/user.rules").read_text() == host_ufw


FIREWALL_CMD = """#!/bin/sh
# Stand-in for firewall-cmd: running; knows the rules in $RULES (one per line, "permanent"
# or "runtime" then the rule); records every call.
echo "$*" >>"$CALLS"
case "$1" in --state) echo running; exit 0;; esac
where=runtime
if [ "$1" = --permanent ]; then where=permanent; shift; fi
case "$1" in
  --query-rich-rule=*) grep -qxF "$where ${1#--query-rich-rule=}" "$RULES" && { echo yes; exit 0; }
                       echo no; exit 1;;
  --add-rich-rule=*) echo "$where ${1#--add-rich-rule=}" >>"$RULES"; echo success;;
esac
"""


def _firewalld_run(tmp: Path, *extra: str, node_vars: dict | None = None):
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "firewall-cmd").write_text(FIREWALL_CMD)
    (bin_dir / "firewall-cmd").chmod(0o755)
    (bin_dir / "ufw").write_text("#!/bin/sh\necho 'ufw: not here' >&2\nexit 127\n")
    (bin_dir / "ufw").chmod(0o755)
    (tmp / "rules").touch()
    inventory = _inventory(tmp, gateway_agent_port=8003, **(node_vars or {}))
    env = {**os.environ, **ENV, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "RULES": str(tmp / "rules"), "CALLS": str(tmp / "calls")}
    proc = subprocess.run(_command(tmp, inventory, "node_firewall", *extra), capture_output=True,
                          text=True, cwd=REPO, check=False, timeout=300, env=env)
    return proc


def test_firewalld_gets_the_rich_rule_permanent_and_runtime_once(tmp_path):
    rule = (f'rule family="ipv4" source address="{GATEWAY}" port port="8003" protocol="tcp" '
            "accept")
    checked = _firewalld_run(tmp_path, "--check")
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert "--add-rich-rule" not in (tmp_path / "calls").read_text()  # check mode: asked only
    assert (tmp_path / "rules").read_text() == ""
    first = _firewalld_run(tmp_path)
    assert first.returncode == 0, first.stdout[-3000:]
    assert sorted((tmp_path / "rules").read_text().splitlines()) == [
        f"permanent {rule}", f"runtime {rule}"]
    calls = (tmp_path / "calls").read_text()
    assert "--reload" not in calls  # other runtime-only rules stay
    (tmp_path / "calls").write_text("")
    again = _firewalld_run(tmp_path)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "--add-rich-rule" not in (tmp_path / "calls").read_text()
    assert len((tmp_path / "rules").read_text().splitlines()) == 2


def test_a_gateway_source_that_is_not_an_address_is_refused_before_any_change(tmp_path):
    proc = _firewalld_run(tmp_path, node_vars={
        "gateway_node_firewall_sources": ["10.0.0.1", "gw.example; ufw disable"]})
    assert proc.returncode != 0
    failed = _failed(proc.stdout)
    assert failed[0] == "Refuse a gateway source that is not an IP address.", failed
    assert ('gateway_node_firewall_sources[1] "gw.example; ufw disable" is refused: set it to an '
            "IPv4 or IPv6 address") in failed[1]
    assert "gateway_node_firewall_sources[0]" not in failed[1]
    assert not (tmp_path / "calls").exists() or "--add" not in (tmp_path / "calls").read_text()


def test_a_switch_that_is_not_a_bool_is_refused_at_the_node_entry_point(tmp_path):
    # gateway_node_open_firewall is checked by the role's argument specs (entry point node)
    # before any task of the node's stage runs.
    # (No agent port and the state in tmp_path: the stage could write nothing else here.)
    inventory = _inventory(tmp_path, gateway_agent_port=0, gateway_node_open_firewall="maybe",
                           gateway_node_state_dir=str(tmp_path / "state"),
                           gateway_node_admitted_file=str(tmp_path / "admitted"),
                           gateway_node_unit_file=str(tmp_path / "vllm.service"),
                           gateway_node_address="127.0.0.1", gateway_node_port=8000)
    proc = subprocess.run(_command(tmp_path, inventory, "node"), capture_output=True, text=True,
                          cwd=REPO, check=False, timeout=300, env={**os.environ, **ENV})
    assert proc.returncode != 0
    failed = _failed(proc.stdout)
    assert "gateway_node_open_firewall" in failed[1] and "bool" in failed[1], failed
