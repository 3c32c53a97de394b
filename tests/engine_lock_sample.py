"""A valid engine lock, as `onecat engine lock` writes one: the seed of the lock file's rule
tests (tests/unit/test_engine_lock_rules.py) and of its fuzzer (tests/fuzz)."""

from __future__ import annotations

import hashlib

from onecat.engine import lockfile, registry


def valid_lock() -> dict:
    """A new copy each call: the tests edit it."""
    text = ("alpha==1.1 \\\n    --hash=sha256:" + "a" * 64 + "\n"
            "torch==2.10.0 \\\n    --hash=sha256:" + "b" * 64 + "\n")
    digest = "sha256:" + "c" * 64
    return {
        "schema": 1, "engine": "1cat-vllm", "engine_version": "1.5.0",
        "created_at": "2026-12-04T20:00:00Z",
        "wheel": {"url": "https://x/1cat_vllm-1.5.0-cp312-cp312-linux_x86_64.whl",
                  "filename": "1cat_vllm-1.5.0-cp312-cp312-linux_x86_64.whl", "sha256": "d" * 64,
                  "size": 1, "requires_dist": ["alpha>=1"]},
        "base": {"image": "nvidia/cuda:12.8.1-runtime-ubuntu24.04", "registry": "https://r",
                 "digest": digest, "index_digest": digest, "manifest_digest": "sha256:" + "e" * 64,
                 "media_type": registry.OCI_INDEX, "platform": "linux/amd64",
                 "config_digest": "sha256:" + "f" * 64, "apt_snapshot": "20261204T200000Z"},
        "requirements": {"python_version": "3.12", "python_platform": "x86_64-manylinux_2_28",
                         "torch": "torch==2.10.0", "index_url": "https://i",
                         "extra_index_urls": [], "lock": text,
                         "sha256": hashlib.sha256(text.encode()).hexdigest(),
                         "policy": lockfile.POLICY, "torch_variant": "", "torch_family": ["torch"],
                         "index_of": {"alpha": "https://i", "torch": "https://i"}},
        "tools": {"uv": "0.13.9", "onecat": "0.1.0"},
    }
