"""The engine lock's supply chain against two real indexes on loopback and the real uv.

A torch index laid out as download.pytorch.org's (`/whl/cu128`: torch 2.10.0+cu128, the
pytorch-triton and nvidia wheels it requires, and an old setuptools it mirrors) and a
PyPI-like default index on which an attacker planted higher versions of the torch index's
own names (the torchtriton attack). Issue 50 items 1 to 4: the plant never reaches the lock,
uv's environment changes nothing, an sdist-only requirement is refused by name, `--check`
fails when a locked file is gone from its index or the torch index names another variant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from adhoc_module import run_module
from engine_index import Index, build_wheel
from engine_parts import BASE_REPO, BASE_TAG, Parts
from engine_registry import BINARY

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not Path(BINARY).exists(),
                                reason="docker-registry (Debian package) is not installed")

TORCH_REQUIRES = ["pytorch-triton==3.5.0", "nvidia-nccl-cu12",
                  'setuptools; python_version >= "3.12"']
ENGINE_REQUIRES = ["alpha>=1.0", "setuptools>=77"]


class Chain:
    """The registry and release server of Parts, a torch index and a PyPI-like index."""

    def __init__(self, root: Path) -> None:
        self.parts = Parts(root / "parts")
        self.torch = Index(root / "torch", prefix="whl/cu128")
        self.pypi = Index(root / "pypi")

    def start(self) -> Chain:
        self.parts.start()
        built = self.parts.root / "built" / "chain"
        for name, version, requires in [("torch", "2.10.0+cu128", TORCH_REQUIRES),
                                        ("pytorch-triton", "3.5.0", []),
                                        ("nvidia-nccl-cu12", "2.27.3", []),
                                        ("setuptools", "70.2.0", [])]:
            self.torch.add(build_wheel(built / "torch", name, version, requires))
        for name, version in [("alpha", "1.0"), ("alpha", "1.1"), ("setuptools", "80.9.0"),
                              # planted: the torch index's own names, higher versions
                              ("pytorch-triton", "99.0.0"), ("nvidia-nccl-cu12", "99.0.0"),
                              ("torch", "99.0.0")]:
            self.pypi.add(build_wheel(built / "pypi", name, version, payload=b"planted"))
        self.torch.start()
        self.pypi.start()
        self.url, self.sha256 = self.parts.release("chain", ENGINE_REQUIRES)
        return self

    def stop(self) -> None:
        self.parts.stop()
        self.torch.stop()
        self.pypi.stop()


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    chain = Chain(tmp_path_factory.mktemp("engine-chain")).start()
    yield chain
    chain.stop()


def lock(chain: Chain, tmp: Path, *extra: str, url: str | None = None, sha: str | None = None,
         env: dict[str, str] | None = None, torch_index: str | None = None,
         out: Path | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "onecat", "engine", "lock",
            "--wheel", url or chain.url, "--wheel-sha256", sha or chain.sha256,
            "--torch", "torch==2.10.0", "--index-url", torch_index or chain.torch.url,
            "--extra-index-url", chain.pypi.url,
            "--base", f"{chain.parts.registry.host}/{BASE_REPO}:{BASE_TAG}",
            "--out", str(out or tmp / "engine.lock.json"), "--cache-dir", str(tmp / "cache"),
            *extra]
    environ = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(args, capture_output=True, text=True, env=environ, timeout=300,
                          cwd=tmp)


def pins(path: Path) -> dict[str, str]:
    text = json.loads(path.read_text())["requirements"]["lock"]
    return dict(line.split(" ")[0].split("==") for line in text.splitlines()
                if "==" in line and not line.startswith((" ", "#")))


def test_a_planted_higher_version_never_reaches_the_lock(chain, tmp_path):
    proc = lock(chain, tmp_path)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "engine.lock.json"
    assert pins(path) == {"alpha": "1.1", "nvidia-nccl-cu12": "2.27.3", "pytorch-triton": "3.5.0",
                          "setuptools": "80.9.0", "torch": "2.10.0+cu128"}
    data = json.loads(path.read_text())["requirements"]
    # The torch family came from the torch index; the names it only mirrors from PyPI
    # (setuptools, at an old version) came from the default index, where vLLM's >=77 is.
    assert data["torch_family"] == ["nvidia-nccl-cu12", "pytorch-triton", "torch"]
    assert data["index_of"] == {"alpha": chain.pypi.url, "nvidia-nccl-cu12": chain.torch.url,
                                "pytorch-triton": chain.torch.url, "setuptools": chain.pypi.url,
                                "torch": chain.torch.url}
    assert data["torch_variant"] == "cu128"
    assert "99.0.0" not in data["lock"]


def test_uv_settings_in_the_environment_change_nothing(chain, tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "leaky").mkdir()
    plain = lock(chain, tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    leaky = lock(chain, tmp_path / "leaky", env={
        "UV_TORCH_BACKEND": "cpu", "UV_RESOLUTION": "lowest",
        "UV_INDEX_STRATEGY": "unsafe-best-match", "UV_PRERELEASE": "allow",
        "UV_EXTRA_INDEX_URL": "http://127.0.0.1:9/simple", "UV_NO_BUILD": "0"})
    assert leaky.returncode == 0, leaky.stderr
    first = json.loads((tmp_path / "plain" / "engine.lock.json").read_text())["requirements"]
    second = json.loads((tmp_path / "leaky" / "engine.lock.json").read_text())["requirements"]
    assert second["lock"] == first["lock"]
    assert pins(tmp_path / "leaky" / "engine.lock.json")["alpha"] == "1.1"


def test_an_sdist_only_requirement_is_refused_by_name(chain, tmp_path):
    chain.pypi.add_sdist("gamma", "1.0")
    url, sha = chain.parts.release("needs-gamma", [*ENGINE_REQUIRES, "gamma"])
    proc = lock(chain, tmp_path, url=url, sha=sha)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "need gamma, which has no wheel" in proc.stderr
    assert not (tmp_path / "engine.lock.json").exists()


def test_check_fails_when_a_locked_file_is_gone_from_its_index(chain, tmp_path):
    assert lock(chain, tmp_path).returncode == 0
    clean = lock(chain, tmp_path, "--check")
    assert clean.returncode == 0, clean.stderr
    assert "matches" in clean.stdout
    chain.pypi.remove("alpha-1.1-py3-none-any.whl")
    try:
        gone = lock(chain, tmp_path, "--check")
    finally:
        chain.pypi.add(build_wheel(chain.parts.root / "built" / "chain" / "pypi", "alpha", "1.1",
                                   payload=b"planted"))
    assert gone.returncode == 1, (gone.stdout, gone.stderr)
    drift = [line for line in gone.stderr.splitlines() if "drift:" in line]
    assert len(drift) == 1 and "alpha==1.1" in drift[0] and chain.pypi.url in drift[0], drift


def test_check_reports_a_torch_index_of_another_variant(chain, tmp_path):
    assert lock(chain, tmp_path).returncode == 0
    moved = chain.torch.url.replace("/whl/cu128", "/whl/cu126")
    proc = lock(chain, tmp_path, "--check", torch_index=moved)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "drift: torch_variant: the lock has 'cu128', asked for 'cu126'" in proc.stderr


def test_the_serve_role_refuses_a_hand_set_lock_of_another_torch_build():
    # The role's own check of a lock set by hand (vllm_serve_image_requirements_lock): torch
    # must be the build its index serves (+cu128 from .../cu128), compared as a version.
    lock = "torch==2.10.0+cpu \\\n    --hash=sha256:" + "a" * 64 + "\n"
    result = run_module("vllm_serve_command", {
        "engine": "1cat-vllm", "requirements_lock": lock, "requirements_lock_name": "lock.txt",
        "torch_spec": "torch==2.10.0",
        "torch_index_url": "https://download.pytorch.org/whl/cu128"})
    assert result.get("failed"), result
    assert "lock.txt pins torch==2.10.0+cpu (+cpu), not the +cu128 build" in result["msg"]
    good = run_module("vllm_serve_command", {
        "engine": "1cat-vllm", "requirements_lock": lock.replace("+cpu", "+cu128"),
        "requirements_lock_name": "lock.txt", "torch_spec": "torch==2.10.0",
        "torch_index_url": "https://download.pytorch.org/whl/cu128"})
    assert not good.get("failed"), good
