"""The engine lock's real parts on loopback, together: a package index and a registry.

The index holds small wheels built here (alpha 1.0 and 1.1, beta 2.0 requiring alpha, a
`torch` 2.10.0) and serves engine "releases" (wheels whose METADATA requires alpha and
beta, plus requirements whose markers exclude them on CPython 3.12 / Linux); the registry
(Debian's docker-registry) holds nvidia/cuda:12.8.1-runtime-ubuntu24.04 as a two-arch index.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from engine_index import Index, build_wheel
from engine_registry import Registry

BASE_REPO = "nvidia/cuda"
BASE_TAG = "12.8.1-runtime-ubuntu24.04"
ENGINE_REQUIRES = ["alpha>=1.0", 'beta==2.0; python_version >= "3.12"',
                   'gamma; sys_platform == "win32"', 'delta; extra == "dev"',
                   'epsilon; python_version < "3.12"']


class Parts:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.index = Index(root / "index")
        self.registry = Registry(root / "registry")
        self.releases = self.index.root / "releases"

    def release(self, name: str, requires: list[str], tag: str = "cp312-cp312-linux_x86_64",
                payload: bytes = b"engine") -> tuple[str, str]:
        """An engine wheel served at a release URL; returns (url, sha256)."""
        wheel = build_wheel(self.root / "built" / name, "onecat_test_engine", "1.5.0",
                            requires, tag=tag, payload=payload)
        (self.releases / name).mkdir(parents=True, exist_ok=True)
        target = self.releases / name / wheel.name
        target.write_bytes(wheel.read_bytes())
        url = f"http://127.0.0.1:{self.index.port}/releases/{name}/{wheel.name}"
        return url, hashlib.sha256(target.read_bytes()).hexdigest()

    def start(self) -> Parts:
        """Dependencies in the index, the base image in the registry, the engine released."""
        built = self.root / "built" / "deps"
        for name, version, requires in [("alpha", "1.0", []), ("alpha", "1.1", []),
                                        ("beta", "2.0", ["alpha>=1.0"]),
                                        ("torch", "2.10.0", [])]:
            self.index.add(build_wheel(built, name, version, requires))
        self.index.start()
        self.registry.start()
        self.index_digest, self.manifests = self.registry.push_index(BASE_REPO, BASE_TAG)
        self.url, self.sha256 = self.release("good", ENGINE_REQUIRES)
        return self

    def stop(self) -> None:
        self.index.stop()
        self.registry.stop()
