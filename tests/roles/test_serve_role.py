"""vllm_serve: what reaches the unit, the environment file and the image recipe, checked.

The role's own tasks (validate.yml, recipe.yml, command.yml) run against localhost and render
the unit, the environment file, the Dockerfile and the requirements (tests/roles/ansible/
serve_render.yml); the unit goes through `systemd-analyze verify`, the requirements through
pip's hash-checking mode with the stand-in engine's wheel.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .ansible_run import REPO, host_outcome, run_playbook

STANDIN_LOCK = str(REPO / "tests" / "standin_engine" / "requirements.lock")
DIGEST = "sha256:" + "ab" * 32
IMAGE = "sha256:" + "cd" * 32
KEY = "k" * 32


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(["sh", str(REPO / "tests" / "standin_engine" / "build_wheel.sh"), str(out)],
                   check=True, capture_output=True, env={**os.environ, "PYTHON": sys.executable})
    return next(out.glob("*.whl"))


def _host(tmp: Path, wheel: Path, **overrides) -> dict:
    """Variables of a node as the role sees them after planning and shipping the image."""
    return {
        "vllm_serve_model_dir": "qwen25-7b-nvfp4",
        "vllm_serve_wheel_url": str(wheel),
        "vllm_serve_wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "vllm_serve_image_base_digest": DIGEST,
        "vllm_serve_image_requirements_lock": STANDIN_LOCK,
        "vllm_serve_image_torch_spec": "",
        "vllm_serve_env_file": str(tmp / "vllm.env"),
        "__vllm_serve_image_id": IMAGE,
        "__vllm_serve_image_tag": "onecat/engine:1cat-vllm-1.5.0-0123456789ab",
        "__vllm_serve_planned_args": {"--dtype": "half", "--tensor-parallel-size": 2,
                                      "--max-num-seqs": 40},
        "__vllm_serve_container_env": {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "HF_HUB_OFFLINE": "1"},
        **overrides,
    }


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, wheel) -> Path:
    tmp = tmp_path_factory.mktemp("rendered")
    hosts = {}
    for name, overrides in {
        "loopback": {},
        "open": {"vllm_serve_bind_address": "0.0.0.0"},
        "keyed": {"vllm_serve_api_key": KEY, "vllm_serve_served_model_name": "qwen 7b %i"},
        "v6": {"vllm_serve_bind_address": "::"},
        "underscores": {"vllm_serve_args": {"--max_num_seqs": 8},
                        "vllm_serve_extra_args": ["--enable_prefix_caching"]},
        "kept": {"vllm_serve_bind_address": "0.0.0.0"},
        "rotated": {"vllm_serve_bind_address": "0.0.0.0", "vllm_serve_rotate_keys": True},
    }.items():
        (tmp / name).mkdir()
        hosts[name] = _host(tmp / name, wheel, **overrides)
        if name in ("kept", "rotated"):
            (tmp / name / "vllm.env").write_text(f"# old\nVLLM_API_KEY={KEY}\n"
                                                 f"ONECAT_METRICS_KEY={'q' * 32}\n")
    data = run_playbook("serve_render.yml", hosts, tmp, check=False)
    for name in hosts:
        assert host_outcome(data, name)["failed_task"] is None, host_outcome(data, name)
    return tmp


def _read(rendered: Path, host: str, what: str) -> str:
    return (rendered / f"{host}.{what}").read_text()


def _facts(rendered: Path, host: str) -> dict:
    return json.loads(_read(rendered, host, "facts.json"))


def test_default_publishes_on_loopback_without_key_or_guard(rendered):
    unit = _read(rendered, "loopback", "service")
    assert "    --publish 127.0.0.1:8000:8000 \\" in unit.splitlines()
    assert "--middleware" not in unit and "onecat/guard" not in unit
    assert "VLLM_API_KEY" not in _read(rendered, "loopback", "env")
    assert _facts(rendered, "loopback")["exposed"] is False


def test_open_address_gets_generated_keys_in_the_env_file_only(rendered):
    facts = _facts(rendered, "open")
    assert facts["exposed"] is True and facts["url"] == "http://127.0.0.1:8000"
    assert facts["generated"] == ["VLLM_API_KEY", "ONECAT_METRICS_KEY"]
    env = dict(line.split("=", 1) for line in _read(rendered, "open", "env").splitlines()
               if line and not line.startswith("#"))
    assert len(env["VLLM_API_KEY"]) >= 32 and len(env["ONECAT_METRICS_KEY"]) >= 32
    assert env["VLLM_API_KEY"] != env["ONECAT_METRICS_KEY"]
    unit = _read(rendered, "open", "service")
    assert env["VLLM_API_KEY"] not in unit and env["ONECAT_METRICS_KEY"] not in unit
    assert "    --publish 0.0.0.0:8000:8000 \\" in unit.splitlines()
    assert "    --middleware onecat_guard.Guard \\" in unit.splitlines()
    assert "    --env PYTHONPATH=/opt/onecat/guard \\" in unit.splitlines()


def test_keys_in_the_env_file_are_kept_until_rotated(rendered):
    kept = _read(rendered, "kept", "env")
    assert f"VLLM_API_KEY={KEY}\n" in kept and f"ONECAT_METRICS_KEY={'q' * 32}\n" in kept
    assert _facts(rendered, "kept")["generated"] == []
    rotated = _read(rendered, "rotated", "env")
    assert KEY not in rotated and "q" * 32 not in rotated
    assert _facts(rendered, "rotated")["generated"] == ["VLLM_API_KEY", "ONECAT_METRICS_KEY"]


def test_ipv6_any_is_published_in_brackets_and_probed_on_loopback(rendered):
    facts = _facts(rendered, "v6")
    assert facts["publish"] == "[::]:8000:8000" and facts["url"] == "http://[::1]:8000"


def test_given_key_closes_even_loopback_and_percent_is_escaped(rendered):
    unit = _read(rendered, "keyed", "service")
    assert KEY not in unit
    assert "    --middleware onecat_guard.Guard \\" in unit.splitlines()
    assert "Description=vLLM OpenAI server: qwen 7b %%i (1cat-vllm 1.5.0)" in unit
    assert f"VLLM_API_KEY={KEY}" in _read(rendered, "keyed", "env")


def test_flag_names_are_written_as_vllm_reads_them(rendered):
    unit = _read(rendered, "underscores", "service")
    assert "    --max-num-seqs 8 \\" in unit.splitlines()
    assert "    --enable-prefix-caching" in unit.splitlines()
    assert "_" not in "".join(line for line in unit.splitlines() if line.startswith("    --m"))


@pytest.mark.parametrize("host", ["loopback", "open", "keyed", "v6", "underscores"])
def test_rendered_unit_passes_systemd_analyze_verify(rendered, host, tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (scripts/bootstrap.sh installs systemd)")
    unit = tmp_path / "vllm.service"
    # verify checks that ExecStart's program exists: point it at one that does here.
    unit.write_text(_read(rendered, host, "service").replace("/usr/bin/docker", "/bin/true"))
    proc = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "unit" not in proc.stderr.lower(), proc.stderr  # no "Unknown key", no bad lines


def test_dockerfile_pins_the_base_by_digest_and_installs_by_hash(rendered):
    dockerfile = _read(rendered, "loopback", "Dockerfile")
    assert f"FROM nvidia/cuda:12.8.1-runtime-ubuntu24.04@{DIGEST}\n" in dockerfile
    assert " && pip install --require-hashes " in dockerfile
    installs = [line for line in dockerfile.splitlines()
                if "pip install" in line and not line.startswith("#")]
    assert len(installs) == 1, installs  # no unhashed torch install any more
    assert "COPY requirements.txt onecat_standin_vllm-" in dockerfile


def test_pip_takes_wheels_only(rendered):
    # An sdist would be built in the image with unpinned, unhashed build tools.
    assert "--only-binary=:all:" in _facts(rendered, "loopback")["pip"].split()


def _python_step(dockerfile: str) -> str:
    """The Dockerfile's RUN that installs Python when the base has none."""
    lines = dockerfile.splitlines()
    start = lines.index("RUN set -eu; \\")
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
    return "\n".join(lines[start:end + 1])[len("RUN "):]


def test_python_comes_from_the_locked_apt_snapshot_or_the_build_stops(rendered, wheel, tmp_path):
    # The recipe is decided once per play (run_once): this node plays alone.
    (tmp_path / "snapshot").mkdir()
    host = _host(tmp_path / "snapshot", wheel, vllm_serve_image_apt_snapshot="20261201T000000Z")
    data = run_playbook("serve_render.yml", {"snapshot": host}, tmp_path, check=False)
    assert host_outcome(data, "snapshot")["failed_task"] is None, host_outcome(data, "snapshot")
    pinned = (tmp_path / "snapshot.Dockerfile").read_text()
    step = _python_step(pinned)
    assert "--snapshot 20261201T000000Z" in step
    assert "-o Dir::Etc::SourceParts=/tmp/onecat-apt" in step
    # Without a snapshot in the lock (hand-set pins here) apt reads the archive as it is.
    assert "--snapshot" not in _python_step(_read(rendered, "loopback", "Dockerfile"))
    # This machine's apt (Debian 12, apt 2.6) has no --snapshot: the step must stop with the
    # reason, not install an unpinned Python. The base has no Python: python3 fails here.
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool, body in {"python3": "exit 1",
                       "apt-get": f'echo "$@" >> {tmp_path}/apt.log'}.items():
        (fake / tool).write_text(f"#!/bin/sh\n{body}\n")
        (fake / tool).chmod(0o755)
    if shutil.which("dpkg-query") is None:
        pytest.skip("dpkg-query is not installed")
    proc = subprocess.run(["bash", "-c", step], capture_output=True, text=True, check=False,
                          env={"PATH": f"{fake}:/usr/bin:/bin"}, timeout=60)
    apt = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "apt"], capture_output=True,
                         text=True, check=False).stdout
    if subprocess.run(["dpkg", "--compare-versions", apt, "ge", "2.7"]).returncode == 0:
        pytest.skip(f"apt {apt} here knows --snapshot")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "pins apt snapshot 20261201T000000Z, but this base's apt cannot use it" in proc.stderr
    assert not (tmp_path / "apt.log").exists()


def _pip(requirements: str, wheel: Path, tmp: Path, command: str) -> subprocess.CompletedProcess:
    work = tmp / "context"
    work.mkdir()
    shutil.copy(wheel, work / wheel.name)
    (work / "requirements.txt").write_text(requirements)
    argv = command.split()
    assert argv[:3] == ["pip", "install", "--require-hashes"], argv
    argv = [a for a in argv if not a.startswith("http")]
    argv = [a for a in argv if a not in ("--index-url", "--extra-index-url")]
    # As in the Dockerfile (cd into the context, same command), offline, into a scratch dir.
    return subprocess.run([sys.executable, "-m", *argv, "--no-index", "--target",
                           str(tmp / "site")], cwd=work, capture_output=True, text=True,
                          check=False, timeout=120)


def test_pip_installs_the_wheel_by_its_hash(rendered, wheel, tmp_path):
    proc = _pip(_read(rendered, "loopback", "requirements.txt"), wheel, tmp_path,
                _facts(rendered, "loopback")["pip"])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "site" / "standin_vllm").is_dir()


def test_pip_refuses_a_wheel_whose_hash_differs(rendered, wheel, tmp_path):
    requirements = _read(rendered, "loopback", "requirements.txt")
    good = hashlib.sha256(wheel.read_bytes()).hexdigest()
    proc = _pip(requirements.replace(good, "0" * 64), wheel, tmp_path,
                _facts(rendered, "loopback")["pip"])
    assert proc.returncode != 0
    assert "DO NOT MATCH THE HASHES" in proc.stderr
    assert not (tmp_path / "site" / "standin_vllm").exists()


def test_pip_refuses_a_requirement_without_hash(rendered, wheel, tmp_path):
    requirements = _read(rendered, "loopback", "requirements.txt")
    unhashed = "\n".join(line.split(" --hash=")[0] for line in requirements.splitlines())
    proc = _pip(unhashed, wheel, tmp_path, _facts(rendered, "loopback")["pip"])
    assert proc.returncode != 0
    assert "Hashes are required in --require-hashes mode" in proc.stderr


REFUSALS = {
    # A crafted version used to add a line to the unit that systemd-analyze verify accepted.
    "version_newline": ({"vllm_serve_engine_version": "1.5.0\nExecStartPre=/bin/touch /pwned"},
                        "vllm_serve_engine_version '1.5.0\\nExecStartPre=/bin/touch /pwned' "
                        "is not a release like 1.5.0"),
    "arg_newline": ({"vllm_serve_args": {"seed": "1\nExecStartPre=/bin/sh"}},
                    "vllm_serve_args.seed contains the control character '\\n'"),
    "name_newline": ({"vllm_serve_served_model_name": "q\nExecStartPre=/bin/sh"},
                     "vllm_serve_served_model_name contains the control character '\\n'"),
    "sha_newline": ({"vllm_serve_wheel_sha256": "ab" * 32 + "\n"}, "no SHA256 is known"),
    "digest_short": ({"vllm_serve_image_base_digest": "sha256:abc"},
                     "vllm_serve_image_base_digest 'sha256:abc' is not empty or sha256:<64 hex>"),
    "api_key_underscore": ({"vllm_serve_extra_args": ["--api_key", "s3cret-s3cret-s3cret"]},
                           "--api-key is set by the role: use vllm_serve_api_key"),
    "api_key_abbrev": ({"vllm_serve_extra_args": ["--api-k=s3cret"]},
                       "--api-k (read as --api-key) is set by the role"),
    "api_key_args": ({"vllm_serve_args": {"--api_key": "s3cret"}},
                     "--api-key is set by the role"),
    "env_api_key": ({"vllm_serve_env": {"VLLM_API_KEY": ""}},
                    "vllm_serve_env.VLLM_API_KEY is set by the role: use vllm_serve_api_key"),
    "env_token": ({"vllm_serve_env": {"HF_TOKEN": "hf_x"}},
                  "vllm_serve_env.HF_TOKEN looks like a secret: put it in vllm_serve_secret_env"),
    "baked_key": ({"vllm_serve_image_env": {"VLLM_API_KEY": "x"}},
                  "vllm_serve_image_env.VLLM_API_KEY is set by the role"),
    "bind_name": ({"vllm_serve_bind_address": "gateway.example"},
                  "vllm_serve_bind_address 'gateway.example' is not an IP address"),
    "weak_key": ({"vllm_serve_api_key": "abc"},
                 "vllm_serve_api_key must be 16 to 512 letters, digits or . _ ~ + / = -"),
    # A '$' passed the serve role and HAProxy expanded it: every node answered 401.
    "dollar_key": ({"vllm_serve_api_key": "0123456789abcdef$HOME"},
                   "vllm_serve_api_key must be 16 to 512 letters, digits or . _ ~ + / = -"),
    "quote_key": ({"vllm_serve_api_key": '0123456789abcdef"x'},
                  "vllm_serve_api_key must be 16 to 512 letters, digits or . _ ~ + / = -"),
    "open_no_key": ({"vllm_serve_bind_address": "10.0.0.5", "vllm_serve_api_key_generate": False},
                    "would publish the API on 10.0.0.5:8000 without an API key"),
    "unpinned": ({"vllm_serve_image_base_digest": "", "vllm_serve_image_requirements_lock": ""},
                 "image recipe of unpinned is not pinned: vllm_serve_image_base_digest is empty"),
    "snapshot_shell": ({"vllm_serve_image_apt_snapshot": "20261201T000000Z; touch /x"},
                       "vllm_serve_image_apt_snapshot \"20261201T000000Z; touch /x\" on "
                       "snapshot_shell is not auto"),
    "lock_unhashed": ({"vllm_serve_image_requirements_lock": "LOCK"},
                      "'six==1.16.0' has no --hash=sha256:..."),
}


@pytest.fixture(scope="module")
def refused(tmp_path_factory, wheel) -> dict:
    tmp = tmp_path_factory.mktemp("refused")
    lock = tmp / "unhashed.lock"
    lock.write_text("six==1.16.0\n")
    hosts = {}
    for name, (overrides, _) in REFUSALS.items():
        (tmp / name).mkdir()
        values = {k: (str(lock) if v == "LOCK" else v) for k, v in overrides.items()}
        hosts[name] = _host(tmp / name, wheel, **values)
    # The recipe is decided once per play (run_once), so a host with its own lock plays alone.
    alone = {"lock_unhashed": hosts.pop("lock_unhashed")}
    outcomes = {}
    for group in (hosts, alone):
        data = run_playbook("serve_render.yml", group, tmp, check=False)
        outcomes.update({name: host_outcome(data, name) for name in group})
    return outcomes


@pytest.mark.parametrize("host", sorted(REFUSALS))
def test_unsafe_input_is_refused_before_anything_is_written(refused, host, tmp_path_factory):
    outcome = refused[host]
    assert outcome["failed_task"] is not None, f"{host} was not refused"
    assert REFUSALS[host][1] in " ".join(outcome["msg"].split()), outcome["msg"]
    assert outcome["changed"] == []
    assert "s3cret" not in outcome["msg"] or host.startswith("api_key")


@pytest.mark.parametrize(("mode", "rotate", "expected"), [
    (0o644, False, "mode 0644: its group or anyone on the controller can read the key"),
    (0o600, True, "vllm_serve_rotate_keys rotates each node's own keys, but this fleet shares"),
    (0o600, False, None),
])
def test_a_readable_fleet_key_or_a_rotation_that_would_keep_it_is_refused(
        tmp_path, wheel, mode, rotate, expected):
    key_file = tmp_path / "secrets" / "engine-api-key"
    key_file.parent.mkdir(mode=0o700)
    key_file.write_text("A" * 43 + "\n")
    key_file.chmod(mode)
    host = _host(tmp_path, wheel, vllm_serve_bind_address="0.0.0.0",
                 vllm_serve_fleet_key_file=str(key_file), vllm_serve_rotate_keys=rotate)
    data = run_playbook("serve_render.yml", {"n1": host}, tmp_path, check=False,
                        groups={"gateway": ["n1"]})
    outcome = host_outcome(data, "n1")
    leaks = [(task["task"]["name"], json.dumps(result)[:300]) for play in data["plays"]
             for task in play["tasks"] for result in task["hosts"].values()
             if "A" * 43 in json.dumps(result)
             and task["task"]["name"] != "Write the rendered files."]  # the test's own output
    assert not leaks, leaks
    if expected is None:  # owner-only, no rotation: the node gets the fleet key
        assert outcome["failed_task"] is None, outcome
        assert "VLLM_API_KEY=" + "A" * 43 in (tmp_path / "n1.env").read_text()
        return
    assert outcome["failed_task"] and expected in outcome["msg"], outcome
    assert not (tmp_path / "n1.env").exists()
