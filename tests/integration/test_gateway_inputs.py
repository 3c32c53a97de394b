"""The gateway role refuses hostile values before they reach haproxy.cfg or the agent's unit.

Each value below used to go raw into a file: the role's template, rendered with it and given
to the real `haproxy -c`, shows what it did (an extra `server` that receives every prompt and
the engines' key, an extra `frontend`). The real role (ansible-playbook, local, the harness of
test_gateway_role.py) now refuses it before anything is written, naming the host, the variable
and the value. The node agent's state folder is the argument of its `sh -c` script, quoted:
even a folder that skipped the check runs no command.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_harness import base_vars, render  # noqa: E402
from test_gateway_role import SERVING, run_role  # noqa: E402

from onecat.validate import shown  # noqa: E402

EVIL_SERVER = "\n    server evil 10.6.6.6:80\nfrontend stolen\n    bind *:9999"

# variable -> a hostile value that the argument spec's type lets through.
HOSTILE = {
    "gateway_check_path": "/health" + EVIL_SERVER,
    "gateway_timeout_client": "10m" + EVIL_SERVER,
    "gateway_hard_stop_after": "15m\n    insecure-fork-wanted",
    "gateway_check_interval": "2s rise 1 fall 99",
    "gateway_slowstart": "10s" + EVIL_SERVER,
    "gateway_agent_interval": "2s; touch /tmp/pwned",
    "gateway_bind_address": "0.0.0.0:8000 ssl crt /etc/ssl/private/other.pem\n#",
    "gateway_admin_bind_address": "0.0.0.0",  # a good value (the other checks show alone)
    "gateway_admin_socket": "/run/haproxy/admin.sock mode 666 level admin\n#",
    "gateway_files_dir": "{tmp}/files,alice",  # under the test's folder, should it pass
    "gateway_user": "root\n    insecure-setuid-wanted",
    "gateway_chroot": "/var/lib/haproxy\n    insecure-fork-wanted",
    "gateway_port": 70000,
    "gateway_maxconn_factor": "nan",
}


def output_of(proc: subprocess.CompletedProcess) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def said(proc: subprocess.CompletedProcess, text: str) -> bool:
    """Whether the run's output holds `text` (runs of spaces count as one, as Ansible folds)."""
    return " ".join(text.split()) in output_of(proc)


# What each value added, accepted by `haproxy -c` (the lines after it still parse).
BEFORE = {
    # (` #`: what the template adds after the path, the check's headers, becomes a comment)
    "gateway_check_path": ("/health\n    server evil 10.6.6.6:80 #", "server evil"),
    "gateway_slowstart": ("10s\n    server evil 10.6.6.6:80", "server evil"),
    "gateway_timeout_client": ("10m\nfrontend stolen\n    bind 127.0.0.1:9999\n"
                               "    default_backend onecat_nodes\ndefaults\n    mode http\n"
                               "    timeout client 10m", "frontend stolen"),
}


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
@pytest.mark.parametrize("variable", sorted(BEFORE))
def test_before_the_check_a_newline_added_directives_that_haproxy_accepted(tmp_path, variable):
    """Why the role checks: the template takes the value raw and `haproxy -c` is satisfied."""
    value, added = BEFORE[variable]
    variables = base_vars(tmp_path)
    variables["gateway_servers"] = [{"name": "n1", "address": "127.0.0.1", "port": 8000,
                                     "maxconn": 8, "enabled": True, "reason": ""}]
    variables[variable] = value
    config = tmp_path / "haproxy.cfg"
    config.write_text(render(variables))
    checked = subprocess.run(["haproxy", "-c", "-f", str(config)], capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    assert f"\n{added}" in config.read_text() or f"\n    {added}" in config.read_text()
    # The role refuses it.
    proc = run_role(tmp_path, {"n1": SERVING}, "-e", json.dumps({variable: value}))
    assert proc.returncode != 0
    assert said(proc, f"{variable} {shown(value)} is refused"), output_of(proc)


@pytest.mark.parametrize("variable", [v for v in HOSTILE if v != "gateway_admin_bind_address"])
def test_the_role_refuses_a_hostile_value_naming_host_variable_and_value(tmp_path, variable):
    (tmp_path / "haproxy.cfg").write_text("# the running configuration\n")
    value = HOSTILE[variable]
    value = value.format(tmp=tmp_path) if isinstance(value, str) else value
    proc = run_role(tmp_path, {"n1": SERVING}, "-e", json.dumps({variable: value}))
    output = output_of(proc)
    assert proc.returncode != 0, output
    assert "gateway on gw:" in output and "nothing was written" in output, output
    assert said(proc, f"{variable} {shown(value)} is refused: set it to"), output
    assert "Traceback" not in output
    assert (tmp_path / "haproxy.cfg").read_text() == "# the running configuration\n"
    assert not (tmp_path / "files").exists() and not (tmp_path / "files,alice").exists()


def test_every_bad_value_is_named_in_one_message(tmp_path):
    bad = {"gateway_check_path": "/health check", "gateway_retries": "²",
           "gateway_timeout_queue": "2 m"}
    proc = run_role(tmp_path, {"n1": SERVING}, "-e", json.dumps(bad))
    output = output_of(proc)
    assert proc.returncode != 0
    # The argument spec takes "²" for no int: Ansible's own refusal names it first.
    assert "gateway_retries" in output and "Traceback" not in output
    proc = run_role(tmp_path, {"n1": SERVING}, "-e", json.dumps({**bad, "gateway_retries": 101}))
    output = output_of(proc)
    assert ('gateway_check_path "/health check" is refused' in output
            and "gateway_retries 101 is refused: set it to a whole number from 0 to 100" in output
            and 'gateway_timeout_queue "2 m" is refused' in output), output


def test_an_engine_key_that_would_break_its_quotes_is_refused_without_showing_it(tmp_path):
    key = 'sk-0123456789abcdef" hdr X-Evil yes'
    proc = run_role(tmp_path, {"n1": SERVING}, "-e", json.dumps({"onecat_api_key": key}))
    output = output_of(proc)
    assert proc.returncode != 0
    assert "gateway on gw: the engines' key (gateway_engine_api_key" in output, output
    assert "sk-0123456789abcdef" not in output
    assert not (tmp_path / "haproxy.cfg").exists()


def test_ipv6_and_wildcard_bind_addresses_pass_the_check(tmp_path):
    # They pass validate.yml and get as far as the back ends (none serve here).
    for address in ("[::1]", "::", "*"):
        proc = run_role(tmp_path, {"n1": None}, "-e",
                        json.dumps({"gateway_bind_address": address}))
        output = output_of(proc)
        assert "gw has no serving back end" in output, output


NODE_PLAYBOOK = """- hosts: n1
  gather_facts: false
  tasks:
    - name: Record the node for the gateway.
      ansible.builtin.include_role:
        name: gateway
        tasks_from: node
"""


def run_node(tmp_path: Path, extra: dict) -> subprocess.CompletedProcess:
    """The node side on this machine, in check mode: should a value ever pass the check, the
    module and the unit templates still write nothing here (the state folder, the address and
    the units would otherwise go to /var/lib and /etc/systemd/system)."""
    inventory = {"all": {"children": {"v100": {"hosts": {"n1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "node.yml").write_text(NODE_PLAYBOOK)
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inv.yml"),
         str(tmp_path / "node.yml"), "--check",
         "-e", json.dumps({"gateway_node_state_dir": str(tmp_path / "state"), **extra})],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"})


@pytest.mark.parametrize(("variable", "value"), [
    ("gateway_node_state_dir", "/var/lib/onecat-gateway'; touch /tmp/pwned; '"),
    ("gateway_node_state_dir", "/var/lib/onecat-gateway/../../etc"),
    ("gateway_node_address", "10.0.0.12" + EVIL_SERVER),
    ("gateway_node_address", "fe80::1%x" + EVIL_SERVER),
    ("gateway_agent_port", 70000),
    ("gateway_node_admitted_file", "/run/x'; touch /tmp/pwned; '"),
    ("gateway_node_admitted_file", "run/onecat-gateway/admitted"),
])
def test_the_node_side_refuses_a_hostile_value(tmp_path, variable, value):
    proc = run_node(tmp_path, {"gateway_node_address": "10.0.0.11", variable: value})
    output = output_of(proc)
    assert proc.returncode != 0, output
    assert "gateway node n1:" in output and "nothing was written" in output, output
    value = value.strip() if isinstance(value, str) else value
    assert said(proc, f"{variable} {shown(value)} is refused"), output


def render_template(tmp_path: Path, name: str, variables: dict) -> str:
    """One of the role's templates as its template task renders it (Ansible's own filters)."""
    dest = tmp_path / name.removesuffix(".j2")
    playbook = tmp_path / f"{name}.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.template": {"src": str(REPO / "roles/gateway/templates" / name),
                                      "dest": str(dest)}}]}]))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(playbook), "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", json.dumps(variables)],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dest.read_text()


def render_agent_unit(tmp_path: Path, state_dir: str,
                      admitted: str = "/run/onecat-gateway/admitted") -> str:
    """The agent's unit as the role renders it."""
    return render_template(tmp_path, "onecat-gateway-agent@.service.j2",
                           {"gateway_node_state_dir": state_dir,
                            "gateway_node_admitted_file": admitted})


def exec_start(unit_text: str) -> list[str]:
    """ExecStart's words the way systemd splits them ($$ is a literal $, %% a literal %)."""
    line = next(x for x in unit_text.splitlines() if x.startswith("ExecStart="))
    return [word.replace("$$", "$").replace("%%", "%")
            for word in shlex.split(line[len("ExecStart="):])]


@pytest.mark.parametrize("name", ["onecat-gateway", "x'; touch PWNED; '", "x$(touch PWNED)"])
def test_the_agent_reads_its_folder_as_an_argument_never_as_script(tmp_path, name):
    """Even a folder (or a marker) that skipped validate.yml is one argument of the script, not
    its text."""
    folder = tmp_path / name
    folder.mkdir()
    admitted = folder / f"{name}-admitted"
    (folder / "agent-state").write_text("maint down #gate failed\n")
    argv = exec_start(render_agent_unit(tmp_path, str(folder), str(admitted)))
    assert argv[:2] == ["/bin/sh", "-c"] and argv[-2:] == [str(folder), str(admitted)], argv
    answer = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert answer.stdout.startswith("maint down #booted since it was admitted"), answer
    admitted.write_text("admitted\n")
    answer = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert answer.stdout == "maint down #gate failed\n", answer
    assert not (tmp_path / "PWNED").exists()
    (folder / "agent-state").write_text("up\n")
    (folder / "watch-state").write_text("drain\n")
    answer = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert answer.stdout == "drain\n"
    (folder / "watch-state").unlink()
    answer = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert answer.stdout == "ready up\n"


def test_the_rendered_agent_unit_passes_systemd_analyze_verify(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (scripts/bootstrap.sh installs systemd)")
    text = render_agent_unit(tmp_path, "/var/lib/onecat-gateway")
    unit = tmp_path / "onecat-gateway-agent@1.service"
    # Alone (without its socket) a unit cannot read from a socket: verify the rest.
    unit.write_text(text.replace("StandardInput=socket", "StandardInput=null")
                    .replace("StandardOutput=socket", "StandardOutput=journal"))
    proc = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "ExecStart" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(("args", "said_text"), [
    ({"state_dir": "{tmp}/x'; touch PWNED; '", "address": "10.0.0.5", "port": 8000},
     "x'; touch PWNED; '\" is refused"),
    ({"address": "fe80::1%x\n    server evil 10.6.6.6:80", "port": 8000},
     'address "fe80::1%x\\n    server evil 10.6.6.6:80" is refused'),
    ({"address": "10.0.0.5", "port": 8000, "agent_port": 70000},
     "agent_port 70000 is refused: set it to a port from 1 to 65535, or 0 to turn it off"),
])
def test_the_gateway_node_module_refuses_what_the_role_would(tmp_path, args, said_text):
    from adhoc_module import run_module

    args = {"state_dir": str(tmp_path / "state"), **args}
    args["state_dir"] = args["state_dir"].format(tmp=tmp_path)
    # In check mode: should the check ever let a value through, nothing is written anyway.
    result = run_module("gateway_node", args, check=True)
    assert result.get("failed") is True, result
    assert result["msg"].startswith("gateway_node: ") and said_text in result["msg"], result
    assert "nothing was written" in result["msg"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("factor", ["nan", "inf", "-1", "0"])
def test_the_gateway_config_module_refuses_a_maxconn_factor_that_is_no_number(factor):
    from adhoc_module import run_module

    nodes = {"n1": {"serving": True, "address": "10.0.0.5", "port": 8000, "max_num_seqs": 8}}
    result = run_module("gateway_config", {"nodes": nodes, "maxconn_factor": factor,
                                           "gateway": "gw"})
    assert result.get("failed") is True, result
    assert result["msg"].startswith("gw: maxconn_factor "), result
    assert "Traceback" not in json.dumps(result)


@pytest.mark.parametrize(("address", "listen"), [
    ("10.0.0.11", "ListenStream=10.0.0.11:8003"),
    ("fd00::11", "ListenStream=[fd00::11]:8003"),
    ("gpu-node-01.example", "ListenStream=8003"),
])
def test_the_agent_listens_only_on_the_address_the_gateway_uses(tmp_path, address, listen):
    """Hold reasons are not served on the node's other networks; a host name binds everywhere."""
    lines = render_template(tmp_path, "onecat-gateway-agent.socket.j2", {
        "gateway_node_address": address, "gateway_agent_port": 8003}).splitlines()
    assert [x for x in lines if x.startswith("ListenStream=")] == [listen]
    assert ("FreeBind=yes" in lines) == (listen != "ListenStream=8003")


def test_a_flood_cannot_put_the_agent_socket_into_its_failure_state(tmp_path):
    """systemd fails an Accept=yes socket triggered more than 200 times in 2 s by default, and
    it stays unconnectable until restarted: HAProxy would keep the node's last word through
    every later drain (issue 49). The role's socket has no trigger limit and bounds each source
    instead; systemd-analyze accepts the unit."""
    text = render_template(tmp_path, "onecat-gateway-agent.socket.j2", {
        "gateway_node_address": "10.0.0.11", "gateway_agent_port": 8003})
    lines = text.splitlines()
    assert "TriggerLimitIntervalSec=0" in lines
    assert "MaxConnectionsPerSource=4" in lines and "MaxConnections=16" in lines
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (scripts/bootstrap.sh installs systemd)")
    socket = tmp_path / "onecat-gateway-agent.socket"
    socket.write_text(text)
    (tmp_path / "onecat-gateway-agent@.service").write_text(
        render_agent_unit(tmp_path, "/var/lib/onecat-gateway")
        .replace("StandardInput=socket", "StandardInput=null")
        .replace("StandardOutput=socket", "StandardOutput=journal"))
    proc = subprocess.run([tool, "verify", str(socket)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Unknown key" not in proc.stderr, proc.stderr
