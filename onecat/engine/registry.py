"""The base image's digests, read over the registry's HTTP API v2 (no Docker needed).

`HEAD /v2/<repo>/manifests/<tag>` with the Accept headers of the OCI index, the Docker
manifest list and both single-manifest types gives `Docker-Content-Digest`; an index is then
read (and its bytes checked against that digest) for its linux/amd64 manifest, and that manifest
for its config digest: the image ID Docker gives the image once pulled or loaded into its
classic store (a base carried in as a tarball is checked against it). A 401 with a
`WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge is answered with an
anonymous token from the realm, as `docker pull` does.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from dataclasses import dataclass, field

from onecat.text import one_line

from .errors import EngineLockError
from .net import TIMEOUT, plain_http_refused, request

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "https://registry-1.docker.io"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class ImageRef:
    registry: str  # host[:port], docker.io for Docker Hub
    repository: str  # library/ubuntu, nvidia/cuda
    tag: str
    digest: str

    @property
    def reference(self) -> str:
        return self.tag or self.digest


def parse_ref(ref: str) -> ImageRef:
    """Docker's reading of an image reference: registry, repository, tag, digest."""
    text = ref.strip()
    digest = ""
    if "@" in text:
        text, digest = text.split("@", 1)
        if not DIGEST.match(digest):
            raise EngineLockError(f"the image reference {ref!r} has a malformed digest "
                                  f"{digest!r} (want sha256:<64 hex>)")
    first, _, rest = text.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, text
    tag = ""
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*", path) \
            or (not tag and not digest):
        raise EngineLockError(f"{ref!r} is not a pinned image reference (want "
                              "[REGISTRY/]REPOSITORY:TAG[@sha256:...])")
    return ImageRef(registry, path, tag, digest)


def api_base(ref: ImageRef, mirror: str = "") -> str:
    if mirror:
        return mirror.rstrip("/")
    if ref.registry == DOCKER_HUB:
        return DOCKER_HUB_API
    # Plain http where net.plain_http_refused allows it (loopback, "[::1]:5000" included).
    plain = f"http://{ref.registry}"
    return plain if not plain_http_refused(plain) else f"https://{ref.registry}"


def _challenge(header: str) -> dict[str, str]:
    if not header.lower().startswith("bearer "):
        return {}
    return dict(re.findall(r'(\w+)="([^"]*)"', header[len("bearer "):]))


@dataclass
class Resolved:
    image: str
    registry: str
    digest: str  # what FROM pins: the index when the tag names one, else the manifest
    index_digest: str
    manifest_digest: str
    media_type: str
    platform: str
    config_digest: str = ""  # the platform manifest's config blob: the classic store's image ID


def _field(value: object, key: str) -> str:
    """`value[key]` when value is a JSON object and that field a string, else "" (a registry's
    answer is checked for shape, never trusted to have it)."""
    got = value.get(key) if isinstance(value, dict) else None
    return got if isinstance(got, str) else ""


def _json_object(body: bytes, what: str) -> dict:
    """The body as a JSON object, or one EngineLockError line naming `what`."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise EngineLockError(f"{what} is not a JSON object")
    return data


def config_of(manifest: dict, where: str) -> str:
    config = _field(manifest.get("config") if isinstance(manifest, dict) else None, "digest")
    if not DIGEST.match(config):
        raise EngineLockError(f"the manifest {where} names no config digest (sha256:<64 hex>)")
    return config


@dataclass
class Registry:
    """A registry client for one lock run; counts its requests and bytes."""

    base: str
    timeout: float = TIMEOUT
    requests: int = 0
    bytes: int = 0
    _tokens: dict[str, str] = field(default_factory=dict)

    def _call(self, path: str, repository: str, method: str = "GET",
              accept: str = ACCEPT) -> tuple[int, dict[str, str], bytes]:
        url = f"{self.base}/v2/{repository}/{path}"
        what = f"the registry {self.base}"
        for attempt in range(2):
            headers = {"Accept": accept}
            if repository in self._tokens:
                headers["Authorization"] = f"Bearer {self._tokens[repository]}"
            self.requests += 1
            with request(url, what=what, method=method, headers=headers,
                         timeout=self.timeout, ok=(200, 401, 404)) as response:
                body = response.read() if method == "GET" else b""
                self.bytes += len(body)
                status, got = response.status, {k.lower(): v for k, v in response.headers.items()}
            if status == 401 and attempt == 0:
                self._tokens[repository] = self._token(got.get("www-authenticate", ""),
                                                       repository, url)
                continue
            if status == 401:
                raise EngineLockError(f"{what} refused the anonymous token for {repository} "
                                      f"(HTTP 401 on {url}): a private image needs a mirror "
                                      "that serves it")
            return status, got, body
        raise AssertionError("unreachable")

    def _token(self, header: str, repository: str, url: str) -> str:
        params = _challenge(header)
        if "realm" not in params:
            raise EngineLockError(f"the registry {self.base} wants authentication onecat cannot "
                                  f"give ({header or 'no WWW-Authenticate challenge'}) for {url}")
        refused = plain_http_refused(params["realm"])
        if refused:
            # The realm is the registry's word: a file: or ftp: one would be read, an http one
            # off loopback answered by anyone on the path.
            raise EngineLockError(f"the registry {self.base} sends onecat for a token to a "
                                  f"realm it refuses: {refused}")
        query = {"service": params.get("service", ""),
                 "scope": params.get("scope") or f"repository:{repository}:pull"}
        token_url = params["realm"] + "?" + urllib.parse.urlencode(
            {k: v for k, v in query.items() if v})
        self.requests += 1
        with request(token_url, what=f"the token service of {self.base}",
                     timeout=self.timeout) as response:
            body = response.read()
        self.bytes += len(body)
        try:
            data = json.loads(body)
            token = data.get("token") or data["access_token"]
        except (ValueError, KeyError, AttributeError):
            token = None
        if not isinstance(token, str) or not token or not token.isprintable() \
                or len(token) > 8192:
            raise EngineLockError(f"the token service {params['realm'][:200]} answered no token")
        return token

    def head_manifest(self, repository: str, reference: str) -> tuple[str, str]:
        status, headers, _ = self._call(f"manifests/{reference}", repository, method="HEAD")
        if status == 404:
            raise EngineLockError(f"the registry {self.base} has no manifest "
                                  f"{repository}:{reference}")
        digest = headers.get("docker-content-digest", "")
        media_type = headers.get("content-type", "").split(";")[0].strip()
        if not DIGEST.match(digest):  # a registry that omits it on HEAD: hash the body
            _, media_type, body = self.get_manifest(repository, reference, "")
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
        return digest, media_type

    def get_manifest(self, repository: str, reference: str, digest: str,
                     accept: str = ACCEPT) -> tuple[dict, str, bytes]:
        status, headers, body = self._call(f"manifests/{reference}", repository, accept=accept)
        if status == 404:
            raise EngineLockError(f"the registry {self.base} has no manifest "
                                  f"{repository}@{reference}")
        got = "sha256:" + hashlib.sha256(body).hexdigest()
        if digest and got != digest:
            raise EngineLockError(f"the registry {self.base} served {repository}@{digest} "
                                  f"with content {got}: the manifest does not match its digest")
        data = _json_object(body, f"the manifest {repository}@{reference}")
        media_type = headers.get("content-type", "").split(";")[0].strip()
        declared = data.get("mediaType")
        return data, declared if isinstance(declared, str) and declared else media_type, body

    def platform_of(self, repository: str, manifest: dict) -> str:
        config = _field(manifest.get("config"), "digest")
        if not DIGEST.match(config):
            return ""
        status, _, body = self._call(f"blobs/{config}", repository, accept="*/*")
        if status != 200 or "sha256:" + hashlib.sha256(body).hexdigest() != config:
            raise EngineLockError(f"the registry {self.base} served a config blob {config} "
                                  "that does not match its digest")
        data = _json_object(body, f"the config blob {config}")
        return f"{_field(data, 'os')}/{_field(data, 'architecture')}"


def resolve(image: str, mirror: str = "", timeout: float = TIMEOUT,
            os_arch: str = "linux/amd64") -> tuple[Resolved, Registry]:
    """The digests of `image` (and its `os_arch` manifest) and the client that read them."""
    ref = parse_ref(image)
    client = Registry(api_base(ref, mirror), timeout)
    digest, media_type = client.head_manifest(ref.repository, ref.reference)
    if ref.digest and digest != ref.digest:
        raise EngineLockError(
            f"the base image {image}: the registry {client.base} has {digest} for tag "
            f"{ref.tag}, not the digest the reference pins ({ref.digest})")
    if media_type in INDEX_TYPES:
        index, _, _ = client.get_manifest(ref.repository, digest, digest)
        listed = index.get("manifests")
        entries = [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []

        def platform(m: dict) -> str:
            return f"{_field(m.get('platform'), 'os')}/{_field(m.get('platform'), 'architecture')}"

        chosen = [m for m in entries if platform(m) == os_arch]
        if not chosen or not DIGEST.match(_field(chosen[0], "digest")):
            platforms = sorted({one_line(platform(m))[:60] for m in entries})[:20]
            raise EngineLockError(f"the base image {image} has no {os_arch} manifest "
                                  f"(it has {', '.join(platforms) or 'none'})")
        chosen_digest = chosen[0]["digest"]
        manifest, _, _ = client.get_manifest(ref.repository, chosen_digest, chosen_digest,
                                             accept=", ".join(MANIFEST_TYPES))
        return Resolved(image, client.base, digest, digest, chosen_digest, media_type,
                        os_arch, config_of(manifest, f"{ref.repository}@{chosen_digest}")), client
    manifest, media_type, _ = client.get_manifest(ref.repository, digest, digest)
    platform = client.platform_of(ref.repository, manifest)
    if platform and platform != os_arch:
        raise EngineLockError(f"the base image {image} is {platform}, the image needs {os_arch}")
    return Resolved(image, client.base, digest, "", digest, media_type,
                    platform or os_arch, config_of(manifest, f"{ref.repository}@{digest}")), client
