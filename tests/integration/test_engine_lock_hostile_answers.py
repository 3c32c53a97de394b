"""The engine lock against a registry, a token service and an index that answer with hostile
content (issue 49 item 3): each is one EngineLockError line, nothing is read from a file or an
FTP server, nothing unbounded is kept, no URL places a file outside the cache.

The registry here is a small HTTP server on loopback that answers what each test gives it
(tests/engine_registry.py runs Debian's real docker-registry for the honest paths).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from onecat.cli import main as onecat_main
from onecat.engine import net, registry, wheel
from onecat.engine.errors import EngineLockError
from onecat.engine.lock import torch_requirement

INDEX = "application/vnd.oci.image.index.v1+json"

Answer = tuple[int, dict[str, str], bytes]


@contextmanager
def answering(answer: Callable[[str, str], Answer]) -> Iterator[str]:
    """host:port of a server whose every request (method, path) gets answer(method, path)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self) -> None:
            status, headers, body = answer(self.command, self.path)
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = _reply

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def refused(host: str) -> str:
    with pytest.raises(EngineLockError) as raised:
        registry.resolve(f"{host}/test/base:1.0")
    return str(raised.value)


@pytest.mark.parametrize(("realm", "said"), [
    ("file:///etc/passwd", "file scheme"),
    ("ftp://127.0.0.1/token", "ftp scheme"),
    ("http://10.9.8.7/token", "plain http off loopback"),
])
def test_a_token_realm_that_is_no_https_service_is_refused(realm: str, said: str) -> None:
    """The realm is the registry's word: a file: realm was read (a FIFO there hung the
    command), an http one off loopback answered by anyone on the path."""
    challenge = {"WWW-Authenticate": f'Bearer realm="{realm}",service="reg"'}
    with answering(lambda method, path: (401, challenge, b"")) as host:
        line = refused(host)
    assert "realm it refuses" in line and said in line, line
    assert "\n" not in line


def body_answer(body: bytes, media_type: str = INDEX) -> Callable[[str, str], Answer]:
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    return lambda method, path: (200, {"Content-Type": media_type,
                                       "Docker-Content-Digest": digest}, body)


def test_a_manifest_bigger_than_any_registry_sends_is_refused_not_kept() -> None:
    with answering(body_answer(b"{" + b" " * (net.MAX_ANSWER + 10) + b"}")) as host:
        line = refused(host)
    assert f"more than {net.MAX_ANSWER} bytes" in line, line


@pytest.mark.parametrize("body", [b"[1, 2]", b'"text"', b'{"manifests": 5}',
                                  b'{"manifests": [1, "x", {"platform": "linux"}]}'])
def test_an_index_of_the_wrong_shape_is_one_line(body: bytes) -> None:
    with answering(body_answer(body)) as host:
        line = refused(host)
    assert ("is not a JSON object" in line or "has no linux/amd64 manifest" in line), line


def test_a_redirect_to_ftp_is_not_followed() -> None:
    """urllib follows a redirect to ftp: (file: it refuses itself); the lock has no FTP."""
    with answering(lambda method, path: (302, {"Location": "ftp://127.0.0.1/x"}, b"")) as host:
        line = refused(host)
    assert "only http and https are followed" in line, line


def test_a_plain_http_mirror_or_index_off_loopback_is_refused(capsys) -> None:
    for flag, url in (("--registry-mirror", "http://10.1.2.3:5000"),
                      ("--index-url", "http://pypi.example.internal/simple")):
        assert onecat_main(["engine", "lock", flag, url, "--out", "/nonexistent/x.json"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"onecat engine lock: {flag}:") and "plain http" in err, err
        assert len(err.splitlines()) == 1


@pytest.mark.parametrize("spec", ["-r /etc/passwd", "--index-url http://evil/simple",
                                  "numpy==2.0", "torch==2.8.0\n-r /etc/passwd", "torch>="])
def test_torch_is_one_requirement_on_torch(spec: str) -> None:
    """--torch went raw into uv's requirements file: `-r /etc/passwd` was read as an option."""
    with pytest.raises(EngineLockError, match="is not one requirement on torch"):
        torch_requirement(spec)
    assert torch_requirement(" torch==2.10.0 ") == "torch==2.10.0"
    assert torch_requirement("torch>=2.8,<2.11") == "torch>=2.8,<2.11"


@pytest.mark.parametrize("url", [
    "https://h/dl/1cat_vllm-1.5.0-1%2F..%2F..%2Fevil-cp312-cp312-linux_x86_64.whl",
    "https://h/dl/..%2Fevil.whl", "https://h/dl/.hidden.whl", "https://h/dl/a%00b.whl",
    "https://h/dl/",
])
def test_a_wheel_url_whose_name_is_not_its_own_base_name_is_refused(url: str) -> None:
    """`%2F` in a wheel's build tag decoded into `/../` after the name was taken: the download
    landed outside the cache folder."""
    with pytest.raises(EngineLockError, match="has no plain file name"):
        wheel.filename(url)
    assert wheel.filename("https://h/dl/1cat_vllm-1.5.0%2Bcu126-cp312-cp312-linux_x86_64.whl") \
        == "1cat_vllm-1.5.0+cu126-cp312-cp312-linux_x86_64.whl"


def test_the_limits_keep_every_honest_answer() -> None:
    """A real manifest, index or config blob is kilobytes: the bound is far above them."""
    assert net.MAX_ANSWER >= 16 * 1024 * 1024
    assert net.plain_http_refused("http://127.0.0.1:5000/v2/") == ""
    assert net.plain_http_refused("http://[::1]:5000/v2/") == ""
    assert net.plain_http_refused("https://registry-1.docker.io/v2/") == ""
    assert json.dumps(net.SCHEMES) == '["http", "https"]'
