"""haproxy.service saves the servers' states itself (issue 46): the role's drop-in, rendered as
the role renders it, restates the distribution's own reload around the save (compared with the
unit the haproxy package installed here), passes `systemd-analyze verify` beside that unit, and
its save command, run as systemd runs it, writes the state a real HAProxy on loopback has,
which the next process loads."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin_engine"))
from gateway_harness import Engine, gateway_vars, haproxy, wait_until
from imports_harness import onecat_imports

from onecat.gateway.runtime import Runtime, servers

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "gateway"
DISTRO_UNIT = Path("/lib/systemd/system/haproxy.service")


def render(admin_socket: str, state_file: str) -> str:
    """The drop-in with the role's own vars (vars/main.yml), the way Ansible templates it."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    values = {"gateway_state_saver_dir": str(REPO), "gateway_repair_lease_python": sys.executable,
              "gateway_admin_socket": admin_socket, "gateway_server_state_file": state_file}
    for name in ("__gateway_state_saver", "__gateway_reload_check", "__gateway_reload_signal"):
        values[name] = env.from_string(role_vars[name]).render(**values).strip()
    text = (ROLE / "templates" / "haproxy-server-state.conf.j2").read_text()
    return env.from_string(text).render(**values)


def lines(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]


def test_the_drop_in_restates_the_distributions_reload_around_the_save() -> None:
    dropin = render("/run/haproxy/admin.sock", "/var/lib/haproxy/onecat-server-state")
    reload = lines(dropin, "ExecReload")
    assert reload[0] == ""  # the distribution's list reset, else ours would run after USR2
    assert reload[2].startswith("-/usr/bin/env PYTHONPATH=") and "onecat.gateway.save_state" \
        in reload[2]
    assert lines(dropin, "ExecStop") == [reload[2]]
    if not DISTRO_UNIT.exists():
        pytest.skip("the haproxy package is not installed (bootstrap.sh installs it)")
    assert [reload[1], reload[3]] == lines(DISTRO_UNIT.read_text(), "ExecReload")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None or not DISTRO_UNIT.exists(),
                    reason="systemd-analyze or the haproxy package is missing")
def test_the_drop_in_passes_systemd_analyze_verify_beside_the_unit(tmp_path: Path) -> None:
    unit_dir = tmp_path / "units"
    (unit_dir / "haproxy.service.d").mkdir(parents=True)
    shutil.copy(DISTRO_UNIT, unit_dir / "haproxy.service")
    (unit_dir / "haproxy.service.d" / "onecat-server-state.conf").write_text(
        render("/run/haproxy/admin.sock", "/var/lib/haproxy/onecat-server-state"))
    done = subprocess.run(["systemd-analyze", "verify", str(unit_dir / "haproxy.service")],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "SYSTEMD_UNIT_PATH": f"{unit_dir}:"})
    problems = [line for line in done.stderr.splitlines()
                if "haproxy.service" in line and "onecat" in line]
    assert not problems, done.stderr


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_the_units_save_command_hands_a_drained_node_to_the_next_process(tmp_path: Path) -> None:
    engines = [Engine(tmp_path, name).start() for name in ("node-a", "node-b")]
    try:
        variables = gateway_vars(tmp_path, engines)
        state_file = variables["gateway_server_state_file"]
        with haproxy(tmp_path, variables) as gw:
            runtime = Runtime(gw.socket)
            assert wait_until(lambda: all(s.status.startswith("UP") for s in servers(
                runtime.stat(), "onecat_nodes")))
            runtime.set_state("onecat_nodes", "node-a", "drain")
            save = lines(render(gw.socket, state_file), "ExecStop")[0].removeprefix("-")
            done = subprocess.run(shlex.split(save), capture_output=True, text=True,
                                  check=False, cwd="/")
            assert done.returncode == 0 and "saved the state of 2 server(s)" in done.stdout, done
            gw.reload()
            states = {s.server: s.admin for s in servers(Runtime(gw.socket).stat(),
                                                          "onecat_nodes")}
            assert states == {"node-a": "drain", "node-b": "ready"}, states
        # HAProxy stopped: the command says so in one line, and the unit ignores it ('-').
        done = subprocess.run(shlex.split(save), capture_output=True, text=True, check=False)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done
        assert done.stderr.startswith("onecat: the servers' state was not saved: HAProxy's admin")
    finally:
        for engine in engines:
            engine.stop()


def test_the_role_ships_what_the_saver_imports(tmp_path: Path) -> None:
    shipped = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert sorted(shipped["__gateway_state_saver_files"]) == onecat_imports(
        "onecat.gateway.save_state", tmp_path)
