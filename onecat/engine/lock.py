"""Make, reuse and check an engine lock: the wheel, its requirements, the base image's digest.

`make` resolves everything (the wheel is fetched into the cache and verified, its
requirements are resolved with uv, the base digest read from the registry) and writes the
file; `ensure` reuses a lock whose inputs are the ones asked for and never resolves again;
`check` compares a lock with the wheel and the registry as they are now.
"""

from __future__ import annotations

import datetime
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from onecat import __version__ as onecat_version
from onecat.serve.image_ref import torch_variant as variant
from onecat.text import one_line

from . import lockfile, registry, resolve, simple, verify, wheel
from .defaults import ENGINE
from .errors import EngineLockError
from .indexes import Layout
from .target import IMAGE, Target


@dataclass(frozen=True)
class Inputs:
    """What a lock is made from (recorded in it; a lock that pins other things is remade)."""

    engine_version: str
    wheel: str
    wheel_sha256: str
    base: str
    torch: str
    index_url: str
    extra_index_urls: tuple[str, ...]
    registry_mirror: str = ""
    cache_dir: Path = Path(".cache/engine")

    def differences(self, lock: dict[str, Any]) -> list[str]:
        """The inputs in which `lock` was made differently, one phrase each.

        What is pinned, not where it came from: the wheel's URL and the indexes may be mirrors
        (an air-gapped fleet points them elsewhere) and the hashes still hold."""
        requirements = lock["requirements"]
        recorded = {
            "engine_version": lock["engine_version"], "wheel_sha256": lock["wheel"]["sha256"],
            "base": lock["base"]["image"], "torch": requirements["torch"],
            # The torch index's build variant (cu128, cu126, cpu) is what torch is built for,
            # not where it is mirrored: another variant is another lock.
            "torch_variant": requirements.get(
                "torch_variant", variant(Layout.of(requirements["index_url"],
                                                   requirements["extra_index_urls"]).torch_index)),
        }
        mine = {key: getattr(self, key) for key in recorded if key != "torch_variant"}
        mine["wheel_sha256"] = self.wheel_sha256.lower()
        mine["torch_variant"] = self.torch_variant
        found = [f"{key}: the lock has {recorded[key]!r}, asked for {mine[key]!r}"
                 for key in recorded if recorded[key] != mine[key]]
        if "config_digest" not in lock["base"]:  # a tarball base is pinned by it
            found.append("base: the lock has no config digest (made by an older onecat)")
        if requirements.get("policy") != lockfile.POLICY:
            found.append(f"requirements: resolved under other rules than {lockfile.POLICY!r} "
                         "(made by an older onecat)")
        return found

    @property
    def layout(self) -> Layout:
        return Layout.of(self.index_url, self.extra_index_urls)

    @property
    def torch_variant(self) -> str:
        return variant(self.layout.torch_index)


@dataclass
class Stats:
    wheel_seconds: float = 0.0
    wheel_bytes: int = 0
    resolve_seconds: float = 0.0
    resolver_runs: int = 0
    registry_seconds: float = 0.0
    registry_requests: int = 0
    registry_bytes: int = 0


@dataclass
class Outcome:
    action: str  # created, updated, reused, checked
    path: Path
    lock: dict[str, Any]
    stats: Stats = field(default_factory=Stats)
    reasons: list[str] = field(default_factory=list)  # why it was remade / what drifted

    def as_json(self) -> dict[str, Any]:
        return {"action": self.action, "path": str(self.path), "reasons": self.reasons,
                "stats": asdict(self.stats), "lock": self.lock}


def _wheel_requirements(inputs: Inputs, target: Target, stats: Stats,
                        cache_dir: Path) -> tuple[wheel.FetchedWheel, list[str]]:
    wheel.check_tags(wheel.filename(inputs.wheel), target)
    fetched = wheel.fetch(inputs.wheel, inputs.wheel_sha256, cache_dir)
    stats.wheel_seconds += fetched.seconds
    stats.wheel_bytes += fetched.downloaded_bytes
    return fetched, wheel.applicable(wheel.requires_dist(fetched.path), target)


def _base(inputs: Inputs, image: str, stats: Stats) -> registry.Resolved:
    started = time.monotonic()
    try:
        resolved, client = registry.resolve(image, inputs.registry_mirror)
    finally:
        stats.registry_seconds += time.monotonic() - started
    stats.registry_requests += client.requests
    stats.registry_bytes += client.bytes
    return resolved


def torch_requirement(spec: str) -> str:
    """`--torch` as the one requirement it must be (PEP 508, the project torch): it is written
    into uv's requirements file, where a line such as `-r /etc/passwd` or `--index-url ...`
    would be read as an option."""
    text = spec.strip()
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        requirement = None
    if requirement is None or canonicalize_name(requirement.name) != "torch" \
            or "\n" in text or not text.isprintable():
        raise EngineLockError(f"--torch {one_line(spec)[:120]!r} is not one requirement on "
                              "torch: give it as torch==2.8.0 (or '' for none)")
    return text


def make(inputs: Inputs, target: Target = IMAGE) -> tuple[dict[str, Any], Stats]:
    """A new lock for `inputs` (nothing is written)."""
    if not lockfile.HEX64.match(inputs.wheel_sha256.lower()):
        raise EngineLockError(f"no SHA256 is known for the {ENGINE} {inputs.engine_version} wheel "
                              f"({inputs.wheel}): verify the release and pass --wheel-sha256 "
                              "(onecat never locks an unverified engine)")
    stats = Stats()
    registry.parse_ref(inputs.base)  # a malformed reference stops before any download
    torch = torch_requirement(inputs.torch) if inputs.torch.strip() else ""
    fetched, requirements = _wheel_requirements(inputs, target, stats,
                                                inputs.cache_dir / "wheels")
    wanted = ([torch] if torch else []) + requirements
    resolved = resolve.resolve(wanted, target, inputs.layout, simple.hosts,
                               inputs.cache_dir / "uv", torch_spec=torch)
    stats.resolve_seconds, stats.resolver_runs = resolved.seconds, resolved.runs
    lockfile.check_torch_pin(resolved.text, "the new lock", torch, inputs.torch_variant)
    base = _base(inputs, inputs.base, stats)
    # uv writes nothing for nothing to install; the lock says so, so that it is never empty.
    text = resolved.text or "# nothing to install besides the wheel: it requires nothing\n"
    now = datetime.datetime.now(datetime.UTC)
    lock = {
        "schema": lockfile.SCHEMA, "engine": ENGINE, "engine_version": inputs.engine_version,
        "created_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wheel": {"url": inputs.wheel, "filename": fetched.path.name, "sha256": fetched.sha256,
                  "size": fetched.size, "requires_dist": requirements},
        "base": {"image": inputs.base, "registry": base.registry, "digest": base.digest,
                 "index_digest": base.index_digest, "manifest_digest": base.manifest_digest,
                 "media_type": base.media_type, "platform": base.platform,
                 "config_digest": base.config_digest,
                 # The distribution's archive as it was when the lock was made (Ubuntu's and
                 # Debian's snapshot services): the Python a base without one gets is pinned.
                 "apt_snapshot": now.strftime(lockfile.SNAPSHOT_FORMAT)},
        "requirements": {"python_version": target.python, "python_platform": target.uv_platform,
                         "torch": inputs.torch, "index_url": inputs.index_url,
                         "extra_index_urls": list(inputs.extra_index_urls),
                         "lock": text, "sha256": lockfile.text_sha256(text),
                         "policy": lockfile.POLICY, "torch_variant": inputs.torch_variant,
                         "torch_family": list(resolved.routed),
                         "index_of": dict(sorted(resolved.index_of.items()))},
        "tools": {"uv": resolved.uv_version, "onecat": onecat_version},
    }
    return lockfile.validate(lock, "the new lock"), stats


def ensure(inputs: Inputs, path: Path, target: Target = IMAGE) -> Outcome:
    """The lock at `path`: reused when made from `inputs`, else made (again) and written."""
    reasons: list[str] = []
    if path.exists():
        existing = lockfile.load(path)
        reasons = inputs.differences(existing)
        if not reasons:
            return Outcome("reused", path, existing)
    lock, stats = make(inputs, target)
    lockfile.write(path, lock)
    return Outcome("updated" if reasons else "created", path, lock, stats, reasons)


def frozen(inputs: Inputs, path: Path) -> Outcome:
    """The lock at `path` as it is; missing or made from other inputs is an error."""
    if not path.exists():
        raise EngineLockError(f"there is no engine lock {path} (--frozen never makes one): "
                              "run onecat engine lock")
    lock = lockfile.load(path)
    differences = inputs.differences(lock)
    if differences:
        raise EngineLockError(f"the engine lock {path} was made from other inputs "
                              f"({'; '.join(differences)}); --frozen never remakes it")
    return Outcome("reused", path, lock)


def check(inputs: Inputs, path: Path, given: set[str], target: Target = IMAGE) -> Outcome:
    """What drifted between the lock at `path` and the wheel and registry now.

    The wheel is downloaded again (not the cached copy), its requirements compared, the base
    tag's digests read again, every locked file looked up again on the index it came from (a
    file the index no longer serves fails the build with a 404); `given` names the inputs asked
    for explicitly, compared too, and the torch index's variant always is.
    """
    lock = lockfile.load(path)
    drift = [d for d in inputs.differences(lock)
             if d.split(":", 1)[0] in given | {"torch_variant", "requirements"}]
    stats = Stats()
    recorded = Inputs(lock["engine_version"], lock["wheel"]["url"], "", lock["base"]["image"],
                      lock["requirements"]["torch"], lock["requirements"]["index_url"],
                      tuple(lock["requirements"]["extra_index_urls"]),
                      inputs.registry_mirror, inputs.cache_dir)
    with tempfile.TemporaryDirectory(prefix="onecat-engine-check-") as fresh:
        fetched, requirements = _wheel_requirements(
            recorded, target, stats, Path(fresh) if wheel.is_url(lock["wheel"]["url"])
            else inputs.cache_dir / "wheels")
        if fetched.sha256 != lock["wheel"]["sha256"]:
            drift.append(f"wheel: {lock['wheel']['url']} now has sha256 {fetched.sha256}, "
                         f"the lock pins {lock['wheel']['sha256']}")
    if requirements != lock["wheel"]["requires_dist"]:
        drift.append(f"wheel: its requirements are now {requirements}, the lock has "
                     f"{lock['wheel']['requires_dist']}")
    pinned = {canonicalize_name(line.split("==", 1)[0].split("[", 1)[0].strip())
              for line in lock["requirements"]["lock"].splitlines()
              if "==" in line and not line.startswith((" ", "#", "-"))}
    for requirement in requirements:
        name = canonicalize_name(Requirement(requirement).name)
        if name not in pinned:
            drift.append(f"requirements: {requirement} is not in the lock")
    base = _base(recorded, lock["base"]["image"], stats)
    for key in ("digest", "manifest_digest", "config_digest"):
        if key in lock["base"] and getattr(base, key) != lock["base"][key]:
            drift.append(f"base: {lock['base']['image']} {key} is now {getattr(base, key)} "
                         f"at {base.registry}, the lock pins {lock['base'][key]}")
    drift += verify.locked_files(lock)
    return Outcome("checked", path, lock, stats, drift)
