"""`onecat engine lock` against real parts on loopback.

A PEP 503 index (a folder of wheels built here, `python -m http.server`), Debian's
docker-registry with images pushed over its HTTP API, and the real uv: the lock is written,
reused, checked; every bad input ends in one line on stderr and exit status 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import bad_http
import pytest
from engine_index import free_port
from engine_parts import BASE_REPO, BASE_TAG, Parts
from engine_registry import BINARY, Registry

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not Path(BINARY).exists(),
                                reason="docker-registry (Debian package) is not installed")


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    parts = Parts(tmp_path_factory.mktemp("engine-lock")).start()
    yield parts
    parts.stop()


def lock(parts: Parts, tmp: Path, *extra: str, out: Path | None = None,
         base: str | None = None, url: str | None = None, sha: str | None = None,
         cache: Path | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "onecat", "engine", "lock",
            "--wheel", url or parts.url, "--wheel-sha256", sha or parts.sha256,
            "--torch", "torch==2.10.0", "--index-url", parts.index.url,
            "--base", base or f"{parts.registry.host}/{BASE_REPO}:{BASE_TAG}",
            "--out", str(out or tmp / "engine" / "1cat-vllm-1.5.0.lock.json"),
            "--cache-dir", str(cache or tmp / "cache"), *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, cwd=tmp)


def one_line_exit_2(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_lock_is_written_then_reused(parts, tmp_path):
    first = lock(parts, tmp_path, "--json")
    assert first.returncode == 0, first.stderr
    outcome = json.loads(first.stdout)
    assert outcome["action"] == "created"
    path = tmp_path / "engine" / "1cat-vllm-1.5.0.lock.json"
    data = json.loads(path.read_text())
    assert data == outcome["lock"]
    assert data["wheel"]["sha256"] == parts.sha256
    # Markers were evaluated for CPython 3.12 on x86_64 Linux without extras.
    assert data["wheel"]["requires_dist"] == ["alpha>=1.0", "beta==2.0"]
    text = data["requirements"]["lock"]
    for pin in ("alpha==1.1", "beta==2.0", "torch==2.10.0"):
        assert pin in text
    assert "gamma" not in text and "delta" not in text and "epsilon" not in text
    assert text.count("--hash=sha256:") == 3
    assert data["base"]["digest"] == data["base"]["index_digest"] == parts.index_digest
    assert data["base"]["manifest_digest"] == parts.manifests["amd64"]
    # The amd64 manifest's config blob: the image ID a classic Docker store gives the base.
    amd64 = json.loads(parts.registry.manifest_bytes(BASE_REPO, parts.manifests["amd64"]))
    assert data["base"]["config_digest"] == amd64["config"]["digest"]
    assert data["base"]["platform"] == "linux/amd64"
    assert data["tools"]["uv"]
    assert outcome["stats"]["resolver_runs"] == 1 and outcome["stats"]["wheel_bytes"] > 0
    assert outcome["stats"]["registry_requests"] >= 2

    before = path.read_bytes()
    second = lock(parts, tmp_path, "--json")
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["action"] == "reused" and again["stats"]["resolver_runs"] == 0
    assert again["stats"]["registry_requests"] == 0 and again["stats"]["wheel_bytes"] == 0
    assert path.read_bytes() == before

    plain = lock(parts, tmp_path)
    assert plain.returncode == 0 and "up to date" in plain.stdout

    # Other inputs remake it and say why.
    other = lock(parts, tmp_path, "--json", "--torch", "")
    assert other.returncode == 0, other.stderr
    changed = json.loads(other.stdout)
    assert changed["action"] == "updated" and "torch" in changed["reasons"][0]
    assert "torch==" not in changed["lock"]["requirements"]["lock"]


def test_cached_wheel_is_reused_and_downloaded_again_when_deleted(parts, tmp_path):
    cache = tmp_path / "cache"
    runs = []
    for n in range(3):
        if n == 2:
            (cache / "wheels" / Path(parts.url).name).unlink()
        proc = lock(parts, tmp_path, "--json", out=tmp_path / f"{n}.lock.json", cache=cache)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout)["stats"]["wheel_bytes"])
    size = (cache / "wheels" / Path(parts.url).name).stat().st_size
    assert runs == [size, 0, size]


def test_registry_mirror_serves_a_docker_hub_name(parts, tmp_path):
    proc = lock(parts, tmp_path, "--json", "--registry-mirror", parts.registry.url,
                base=f"{BASE_REPO}:{BASE_TAG}")
    assert proc.returncode == 0, proc.stderr
    base = json.loads(proc.stdout)["lock"]["base"]
    assert base["image"] == f"{BASE_REPO}:{BASE_TAG}" and base["digest"] == parts.index_digest


def test_check_reports_an_image_pushed_again_under_the_same_tag(parts, tmp_path):
    base = f"{parts.registry.host}/test/moving:1.0"
    parts.registry.push_image("test/moving", "1.0", content=b"first")
    assert lock(parts, tmp_path, base=base).returncode == 0
    clean = lock(parts, tmp_path, "--check", base=base)
    assert clean.returncode == 0, clean.stderr
    assert "matches the wheel and the registry" in clean.stdout
    first = json.loads((tmp_path / "engine" / "1cat-vllm-1.5.0.lock.json").read_text())["base"]
    pushed = json.loads(parts.registry.manifest_bytes("test/moving", first["manifest_digest"]))
    assert first["config_digest"] == pushed["config"]["digest"]  # a single manifest's own config
    moved = parts.registry.push_image("test/moving", "1.0", content=b"second")
    drifted = lock(parts, tmp_path, "--check", base=base)
    assert drifted.returncode == 1, drifted.stderr
    assert f"base: {base} digest is now {moved}" in drifted.stderr
    assert f"base: {base} config_digest is now" in drifted.stderr
    assert "drifted" in drifted.stdout


def test_check_reports_a_release_wheel_that_changed(parts, tmp_path):
    url, sha = parts.release("changing", ["alpha>=1.0"], payload=b"one")
    assert lock(parts, tmp_path, url=url, sha=sha).returncode == 0
    _, new_sha = parts.release("changing", ["alpha>=1.0", "beta==2.0"], payload=b"two")
    drifted = lock(parts, tmp_path, "--check", url=url, sha=sha)
    assert drifted.returncode == 1
    assert f"now has sha256 {new_sha}, the lock pins {sha}" in drifted.stderr
    assert "requirements: beta==2.0 is not in the lock" in drifted.stderr


def test_wrong_sha256_names_both_sums(parts, tmp_path):
    line = one_line_exit_2(lock(parts, tmp_path, sha="0" * 64))
    assert parts.sha256 in line and "0" * 64 in line
    assert not (tmp_path / "engine").exists()


def test_wheel_for_another_python_is_refused(parts, tmp_path):
    url, sha = parts.release("py311", ["alpha"], tag="cp311-cp311-linux_x86_64")
    line = one_line_exit_2(lock(parts, tmp_path, url=url, sha=sha))
    assert "cp311-cp311-linux_x86_64" in line and "CPython 3.12" in line


def test_unresolvable_requirement_names_package_and_constraint(parts, tmp_path):
    url, sha = parts.release("conflict", ["beta==3.0"])
    line = one_line_exit_2(lock(parts, tmp_path, url=url, sha=sha))
    assert "beta==3.0" in line and "cannot be resolved" in line


def test_unreachable_index_is_named(parts, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/simple"
    line = one_line_exit_2(lock(parts, tmp_path, "--index-url", dead))
    assert f"the package index {dead} is unreachable" in line


def test_unreachable_registry_is_named(parts, tmp_path):
    port = free_port()
    line = one_line_exit_2(lock(parts, tmp_path, base=f"127.0.0.1:{port}/{BASE_REPO}:{BASE_TAG}"))
    assert f"the registry http://127.0.0.1:{port} is unreachable" in line


def test_digest_that_does_not_match_the_reference(parts, tmp_path):
    pinned = "sha256:" + "1" * 64
    line = one_line_exit_2(lock(
        parts, tmp_path, base=f"{parts.registry.host}/{BASE_REPO}:{BASE_TAG}@{pinned}"))
    assert parts.index_digest in line and pinned in line


@pytest.mark.parametrize("edit, expect", [
    (lambda text: text[:-20], "is not valid JSON"),
    (lambda text: '"sha256": "x'.join(text.rsplit('"sha256": "', 1)),  # the wheel's
     "wheel.sha256 'x"),
    ("drop-hashes", "has no --hash=sha256"),
    ("edit-lock", "requirements.lock was edited"),
])
def test_a_lock_edited_by_hand_is_refused(parts, tmp_path, edit, expect):
    assert lock(parts, tmp_path).returncode == 0
    path = tmp_path / "engine" / "1cat-vllm-1.5.0.lock.json"
    if callable(edit):
        path.write_text(edit(path.read_text()))
    else:
        data = json.loads(path.read_text())
        text = data["requirements"]["lock"]
        if edit == "drop-hashes":
            text = "alpha==1.1\nbeta==2.0\ntorch==2.10.0\n"
            data["requirements"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
        else:
            text = text.replace("alpha==1.1", "alpha==1.0")
        data["requirements"]["lock"] = text
        path.write_text(json.dumps(data))
    for extra in ((), ("--check",)):
        assert expect in one_line_exit_2(lock(parts, tmp_path, *extra))


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory):
    registry = Registry(tmp_path_factory.mktemp("token-registry"), token_auth=True).start()
    yield registry
    registry.stop()


def test_bearer_token_challenge_is_answered(parts, token_registry, tmp_path):
    index_digest, manifests = token_registry.push_index(BASE_REPO, BASE_TAG)
    proc = lock(parts, tmp_path, "--json", base=f"{token_registry.host}/{BASE_REPO}:{BASE_TAG}")
    assert proc.returncode == 0, proc.stderr
    base = json.loads(proc.stdout)["lock"]["base"]
    assert (base["digest"], base["manifest_digest"]) == (index_digest, manifests["amd64"])
    # The anonymous token asked for exactly pull access to the base's repository.
    assert token_registry.tokens.issued[-1] == f"repository:{BASE_REPO}:pull"


def test_a_redirect_to_another_host_does_not_carry_the_token():
    import http.server
    import threading

    from onecat.engine.net import request

    seen: dict[str, str | None] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen[self.path] = self.headers.get("Authorization")
            if self.path == "/blob":
                self.send_response(307)
                self.send_header("Location", f"http://localhost:{port}/cdn")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with request(f"http://127.0.0.1:{port}/blob", what="test",
                     headers={"Authorization": "Bearer secret"}) as response:
            assert response.read() == b"ok"
    finally:
        server.shutdown()
        server.server_close()
    assert seen == {"/blob": "Bearer secret", "/cdn": None}


@pytest.mark.parametrize("shape", sorted(bad_http.ANSWERS))
def test_a_registry_or_wheel_server_answering_malformed_http_gives_one_line(parts, tmp_path,
                                                                           shape):
    """urllib lets http.client's own errors through (BadStatusLine, LineTooLong, IncompleteRead):
    each is one line naming the server and the URL, exit 2, nothing written."""
    for name in ("registry", "wheel"):
        (tmp_path / name).mkdir()
    with bad_http.serving(bad_http.ANSWERS[shape]) as url:
        host = url.removeprefix("http://")
        line = one_line_exit_2(lock(parts, tmp_path / "registry", base=f"{host}/test/base:1.0"))
        assert "gave a malformed HTTP answer" in line and host in line, line
        wheel = f"{url}/1cat_vllm-1.5.0-cp312-cp312-linux_x86_64.whl"
        line = one_line_exit_2(lock(parts, tmp_path / "wheel", url=wheel, sha="a" * 64))
        assert "malformed HTTP answer" in line and host in line, line
    assert not (tmp_path / "registry" / "engine").exists()
    assert not (tmp_path / "wheel" / "engine").exists()
