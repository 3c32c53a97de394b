"""The gateway role refuses bad input before it writes anything (real ansible-playbook, local).

The refusals happen on the controller, before HAProxy's files are touched: a running
gateway keeps its configuration. The rest of the role (package, service, reload) needs a
systemd host and is exercised by the molecule `fleet` scenario.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway_harness import free_port

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = "- hosts: gateway\n  gather_facts: false\n  roles: [gateway]\n"


def run_role(tmp_path: Path, nodes: dict, *extra: str,
             wrap: list[str] | None = None) -> subprocess.CompletedProcess:
    inventory = {"all": {"children": {
        "v100": {"hosts": {name: ({"onecat_gateway_node": state} if state else {})
                           for name, state in nodes.items()}},
        "gateway": {"hosts": {"gw": {"ansible_connection": "local",
                                     "ansible_python_interpreter": sys.executable}}},
    }}}
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    config = tmp_path / "haproxy.cfg"
    return subprocess.run(
        [*(wrap or []),
         str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inv.yml"),
         str(tmp_path / "play.yml"), "-e", f"gateway_config_file={config}",
         "-e", f"gateway_files_dir={tmp_path / 'files'}", *extra],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"})


SERVING = {"serving": True, "in_rotation": True, "address": "127.0.0.1", "port": 8000,
           "max_num_seqs": 64}


@pytest.mark.parametrize("content", ["alice sk-alice-0123456789abcdef\nbob short\n",
                                     "alice sk-alice-0123456789abcdef 0\n"])
def test_a_malformed_key_file_is_refused_before_anything_is_written(tmp_path, content):
    (tmp_path / "haproxy.cfg").write_text("# the running configuration\n")
    keys = tmp_path / "keys"
    keys.write_text(content)
    keys.chmod(0o600)
    proc = run_role(tmp_path, {"n1": SERVING}, "-e", f"onecat_gateway_keys_file={keys}")
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert "gw: the client key file is refused" in output and "line" in output
    assert "the gateway keeps its current configuration" in output
    assert "sk-alice" not in output
    assert (tmp_path / "haproxy.cfg").read_text() == "# the running configuration\n"
    assert not (tmp_path / "files").exists()


def test_a_key_file_others_can_read_is_refused(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("alice sk-alice-0123456789abcdef\n")
    keys.chmod(0o644)
    proc = run_role(tmp_path, {"n1": SERVING}, "-e", f"onecat_gateway_keys_file={keys}")
    assert proc.returncode != 0 and "chmod 600" in proc.stdout + proc.stderr


def test_a_gateway_without_a_serving_node_is_refused(tmp_path):
    proc = run_role(tmp_path, {"n1": None, "n2": {**SERVING, "in_rotation": False,
                                                  "reason": "gate failed"}})
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert "gw has no serving back end, so it would answer every request with 503" in output
    assert "n1: no serving state on the node" in output and "n2: gate failed" in output
    assert not (tmp_path / "haproxy.cfg").exists()


def test_a_gateway_on_a_node_needs_its_own_port(tmp_path):
    inventory_vars = ("-e", '{"onecat_gateway_port": 8000}')
    proc = run_role(tmp_path, {"n1": SERVING}, *inventory_vars, "-l", "gw",
                    "-e", "gateway_nodes_group=gateway")
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "needs a port other than the node's server" in output


def test_without_a_key_file_one_client_key_is_generated_once_and_required(tmp_path):
    # Closed by default: the first run makes an owner-only key file on the controller (the
    # run then stops here: no node serves), the next run keeps it.
    generated = tmp_path / "secrets" / "gateway-client-keys"
    first = run_role(tmp_path, {"n1": None})
    assert "gw has no serving back end" in first.stdout + first.stderr
    line = generated.read_text()
    name, key = line.split()
    assert name == "onecat" and len(key) == 43 and key.isalnum()
    assert generated.stat().st_mode & 0o777 == 0o600
    assert generated.parent.stat().st_mode & 0o777 == 0o700
    assert key not in first.stdout + first.stderr
    said = " ".join(first.stdout.split())
    assert "client key into" in said and str(generated) in said
    run_role(tmp_path, {"n1": None})
    assert generated.read_text() == line


def test_an_open_gateway_is_asked_for_and_said(tmp_path):
    proc = run_role(tmp_path, {"n1": None}, "-e", "onecat_gateway_open=true")
    output = " ".join((proc.stdout + proc.stderr).split())
    assert "the gateway on gw is OPEN: anyone who reaches 0.0.0.0:8000" in output
    assert not (tmp_path / "secrets").exists()


def test_a_node_agent_the_gateway_cannot_reach_is_refused(tmp_path):
    # HAProxy ignores an agent it cannot reach: a firewalled agent port would drop every drain
    # and hold without a word. Nothing listens on this port.
    port = free_port()
    node = {**SERVING, "agent_port": port}
    (tmp_path / "haproxy.cfg").write_text("# the running configuration\n")
    proc = run_role(tmp_path, {"n1": node}, "-e", "gateway_agent_reach_timeout=1")
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert f"the node agent of n1 (127.0.0.1:{port}) does not answer from here" in output, \
        output[-2000:]
    assert "ufw allow from GATEWAY_IP to any port 8003 proto tcp" in output
    assert (tmp_path / "haproxy.cfg").read_text() == "# the running configuration\n"


FIREWALL = """set -e
ip link set lo up
# A host firewall that drops the agent port (iptables-nft: nftables underneath on Debian 12),
# the way ufw's default policy does: the SYN is dropped, the gateway's connect just hangs.
iptables -A INPUT -p tcp --dport "$1" -j DROP
"$2" "$3" "$1" >/dev/null 2>&1 &
listener=$!
sleep 0.5
shift 3
rc=0
"$@" || rc=$?
kill "$listener"
exit "$rc"
"""
LISTENER = """import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
time.sleep(600)
"""
NETNS_TOOLS = ("iptables", "unshare", "ip")


@pytest.mark.skipif(not all(map(shutil.which, NETNS_TOOLS)), reason="needs iptables, unshare, ip")
def test_a_node_agent_behind_a_host_firewall_is_refused_naming_it(tmp_path):
    # A real netfilter rule in a network namespace of the test's own: the agent listens, but
    # the host firewall drops its port, as on a node with ufw active and no rule for it.
    probe = subprocess.run(["unshare", "--net", "iptables", "-L"], capture_output=True,
                           check=False)
    if probe.returncode != 0:
        pytest.skip(f"no network namespace with netfilter here: {probe.stderr[-200:]!r}")
    port = free_port()
    (tmp_path / "firewall.sh").write_text(FIREWALL)
    (tmp_path / "listener.py").write_text(LISTENER)
    (tmp_path / "haproxy.cfg").write_text("# the running configuration\n")
    proc = run_role(tmp_path, {"n1": {**SERVING, "agent_port": port}},
                    "-e", "gateway_agent_reach_timeout=2",
                    wrap=["unshare", "--net", "sh", str(tmp_path / "firewall.sh"), str(port),
                          sys.executable, str(tmp_path / "listener.py")])
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, output[-2000:]
    assert f"the node agent of n1 (127.0.0.1:{port}) does not answer from here" in output, \
        output[-2000:]
    assert "ufw allow from GATEWAY_IP to any port" in output and "firewall-cmd" in output
    assert (tmp_path / "haproxy.cfg").read_text() == "# the running configuration\n"
