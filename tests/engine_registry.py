"""Debian's docker-registry (distribution 2.8) on loopback, and a push over its HTTP API v2.

`Registry.start()` runs /usr/bin/docker-registry with a temp config (filesystem storage,
127.0.0.1:PORT); `push_image` uploads a config and a layer blob (POST + PUT ?digest=) and
PUTs the manifest; `push_index` PUTs an OCI index over pushed manifests. No Docker daemon.

With `token_auth=True` the registry runs with distribution's `auth: token` and a token
service here answers its `WWW-Authenticate: Bearer realm=...` challenge with ES256 JWTs
(signed with a key whose self-signed certificate is the registry's rootcertbundle, sent
in the x5c header), anonymous pull and the pusher's push alike.
"""

from __future__ import annotations

import base64
import datetime
import gzip
import hashlib
import http.server
import io
import json
import re
import shutil
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID
from engine_index import free_port

BINARY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(content: bytes) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("etc/onecat-test")
        info.size, info.mtime = len(content), 0
        tar.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue(), mtime=0)


SERVICE = "onecat-test-registry"
ISSUER = "onecat-test-issuer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService:
    """The registry's token realm: GET /token?service=&scope= -> {"token": JWT}."""

    def __init__(self, root: Path) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=1))
                     .sign(self.key, hashes.SHA256()))
        self.bundle = root / "token-root.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.port = free_port()
        self.issued: list[str] = []  # the scopes asked for
        self.server: http.server.ThreadingHTTPServer | None = None

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def token(self, scope: str) -> str:
        access = []
        match = re.fullmatch(r"repository:([^:]+):([a-z,*]+)", scope or "")
        if match:
            access = [{"type": "repository", "name": match.group(1),
                       "actions": match.group(2).split(",")}]
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256",
                  "x5c": [base64.b64encode(self.cert.public_bytes(
                      serialization.Encoding.DER)).decode()]}
        claims = {"iss": ISSUER, "sub": "", "aud": SERVICE, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        r, s_ = decode_dss_signature(self.key.sign(signing_input.encode(),
                                                   ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s_.to_bytes(32, 'big'))}"

    def start(self) -> None:
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                scope = (query.get("scope") or [""])[0]
                service.issued.append(scope)
                body = json.dumps({"token": service.token(scope)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class Registry:
    def __init__(self, root: Path, token_auth: bool = False) -> None:
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.root.mkdir(parents=True, exist_ok=True)
        self.tokens = TokenService(root) if token_auth else None
        self._auth: dict[str, str] = {}

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def start(self) -> Registry:
        config = self.root / "config.yml"
        settings: dict = {
            "version": 0.1, "log": {"level": "error"},
            "storage": {"filesystem": {"rootdirectory": str(self.root / "data")},
                        "delete": {"enabled": True}},
            "http": {"addr": self.host},
        }
        if self.tokens is not None:
            self.tokens.start()
            settings["auth"] = {"token": {"realm": self.tokens.realm, "service": SERVICE,
                                          "issuer": ISSUER,
                                          "rootcertbundle": str(self.tokens.bundle)}}
        config.write_text(json.dumps(settings))
        self.proc = subprocess.Popen([BINARY, "serve", str(config)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/v2/", timeout=2).close()
                return self
            except urllib.error.HTTPError as err:
                if err.code == 401:  # up, and asking for a token
                    return self
                time.sleep(0.1)
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry did not start on {self.url}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None
        if self.tokens is not None:
            self.tokens.stop()

    def _send(self, method: str, url: str, data: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
        """One request as the pusher; a Bearer challenge is answered with a push token."""
        url = url if url.startswith("http") else self.url + url
        repo = re.search(r"/v2/(.+?)/(?:blobs|manifests)/", urllib.parse.urlsplit(url).path)
        scope = f"repository:{repo.group(1)}:pull,push" if repo else ""
        for _ in range(2):
            sent = {**(headers or {})}
            if scope in self._auth:
                sent["Authorization"] = f"Bearer {self._auth[scope]}"
            req = urllib.request.Request(url, data=data, method=method, headers=sent)
            try:
                with urllib.request.urlopen(req, timeout=10) as response:
                    return response.status, dict(response.headers.items())
            except urllib.error.HTTPError as err:
                if err.code != 401 or self.tokens is None or scope in self._auth:
                    raise
                self._auth[scope] = self.tokens.token(scope)
        raise RuntimeError(f"{method} {url}: no token accepted")

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = digest_of(data)
        _, headers = self._send("POST", f"/v2/{repo}/blobs/uploads/", b"")
        location = headers["Location"]
        if not location.startswith("http"):
            location = self.url + location
        sep = "&" if "?" in location else "?"
        self._send("PUT", f"{location}{sep}digest={urllib.parse.quote(digest)}", data,
                   {"Content-Type": "application/octet-stream"})
        return digest

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        _, headers = self._send("PUT", f"/v2/{repo}/manifests/{reference}", body,
                                {"Content-Type": media_type})
        return headers.get("Docker-Content-Digest", digest_of(body))

    def push_image(self, repo: str, tag: str, *, arch: str = "amd64",
                   content: bytes = b"v1") -> str:
        """A one-layer OCI image; returns its manifest digest."""
        layer = _layer(content)
        config = json.dumps({"architecture": arch, "os": "linux",
                             "rootfs": {"type": "layers",
                                        "diff_ids": [digest_of(gzip.decompress(layer))]},
                             "config": {"Env": ["CUDA_VERSION=12.8.1"]}}).encode()
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": self.push_blob(repo, config), "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": self.push_blob(repo, layer), "size": len(layer)}],
        }).encode()
        return self.put_manifest(repo, tag, manifest, OCI_MANIFEST)

    def push_index(self, repo: str, tag: str, content: bytes = b"v1",
                   arches: tuple[str, ...] = ("amd64", "arm64")) -> tuple[str, dict[str, str]]:
        """A multi-arch OCI index under `tag`; returns its digest and arch -> manifest digest."""
        manifests = {}
        entries = []
        for arch in arches:
            digest = self.push_image(repo, f"build-{arch}", arch=arch,
                                     content=content + arch.encode())
            body = self.manifest_bytes(repo, digest)
            manifests[arch] = digest
            entries.append({"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body),
                            "platform": {"architecture": arch, "os": "linux"}})
        index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                            "manifests": entries}).encode()
        return self.put_manifest(repo, tag, index, OCI_INDEX), manifests

    def manifest_bytes(self, repo: str, digest: str) -> bytes:
        scope = f"repository:{repo}:pull,push"
        headers = {"Accept": OCI_MANIFEST}
        if self.tokens is not None:
            self._auth.setdefault(scope, self.tokens.token(scope))
            headers["Authorization"] = f"Bearer {self._auth[scope]}"
        req = urllib.request.Request(f"{self.url}/v2/{repo}/manifests/{digest}", headers=headers)
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.read()
