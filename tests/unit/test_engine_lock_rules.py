"""The engine lock's pure logic: markers, wheel tags, image references, the lock file's rules."""

from __future__ import annotations

import copy
import hashlib
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from onecat.cli import build_parser
from onecat.engine import defaults, indexes, lockfile, registry, resolve, wheel
from onecat.engine.errors import EngineLockError
from onecat.engine.indexes import Layout
from onecat.engine.lock import Inputs
from onecat.engine.target import IMAGE
from onecat.serve.image_ref import torch_pin_problem, torch_variant

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine_lock_sample import valid_lock


def test_markers_are_evaluated_for_the_image_not_the_controller():
    kept = wheel.applicable([
        "torch==2.10.0", 'numpy>=1.26; python_version >= "3.12"',
        'tomli; python_version < "3.11"', 'pywin32; sys_platform == "win32"',
        'nvidia-nccl-cu12; platform_machine == "x86_64" and platform_system == "Linux"',
        'pytest; extra == "test"', "Requests[socks]>=2", 'numpy>=1.26 ; python_version >= "3.12"',
    ], IMAGE)
    assert kept == ["numpy>=1.26", "nvidia-nccl-cu12", "Requests[socks]>=2", "torch==2.10.0"]


@pytest.mark.parametrize("name, ok", [
    ("1cat_vllm-1.5.0-cp312-cp312-linux_x86_64.whl", True),
    ("x-1-py3-none-any.whl", True),
    ("x-1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
    ("x-1-cp39-abi3-manylinux_2_28_x86_64.whl", True),
    ("x-1-cp311-cp311-linux_x86_64.whl", False),
    ("x-1-cp312-cp312-linux_aarch64.whl", False),
    ("x-1-cp312-cp312-manylinux_2_34_x86_64.whl", False),
    ("x-1-cp312-cp312-win_amd64.whl", False),
])
def test_wheel_tags_must_install_on_the_image(name, ok):
    if ok:
        wheel.check_tags(name, IMAGE)
    else:
        with pytest.raises(EngineLockError, match=r"not for the image's CPython 3\.12"):
            wheel.check_tags(name, IMAGE)


def test_not_a_wheel_name():
    with pytest.raises(EngineLockError, match="is not a wheel file name"):
        wheel.check_tags("engine.tar.gz", IMAGE)


@pytest.mark.parametrize("ref, want", [
    ("nvidia/cuda:12.8.1-runtime-ubuntu24.04",
     ("docker.io", "nvidia/cuda", "12.8.1-runtime-ubuntu24.04", "")),
    ("ubuntu:24.04", ("docker.io", "library/ubuntu", "24.04", "")),
    ("127.0.0.1:5000/a/b:1", ("127.0.0.1:5000", "a/b", "1", "")),
    ("registry.example/cuda:12@sha256:" + "a" * 64,
     ("registry.example", "cuda", "12", "sha256:" + "a" * 64)),
    ("localhost/x@sha256:" + "b" * 64, ("localhost", "x", "", "sha256:" + "b" * 64)),
])
def test_image_references_are_read_as_docker_reads_them(ref, want):
    parsed = registry.parse_ref(ref)
    assert (parsed.registry, parsed.repository, parsed.tag, parsed.digest) == want


@pytest.mark.parametrize("ref", ["nvidia/cuda", "Nvidia/cuda:1", "x:1@sha256:abc", ""])
def test_unpinned_or_malformed_references_are_refused(ref):
    with pytest.raises(EngineLockError):
        registry.parse_ref(ref)


def test_api_base_follows_the_registry_and_the_mirror():
    assert registry.api_base(registry.parse_ref("nvidia/cuda:1")) == "https://registry-1.docker.io"
    assert registry.api_base(registry.parse_ref("127.0.0.1:5000/x:1")) == "http://127.0.0.1:5000"
    # A registry on IPv6 loopback is asked over http too, as every other loopback one: the
    # bracketed host is ::1 (it was asked over https, which a plain local registry refuses).
    assert registry.api_base(registry.parse_ref("[::1]:5000/x:1")) == "http://[::1]:5000"
    assert registry.api_base(registry.parse_ref("localhost:5000/x:1")) == "http://localhost:5000"
    assert registry.api_base(registry.parse_ref("[2001:db8::1]:5000/x:1")) == \
        "https://[2001:db8::1]:5000"
    assert registry.api_base(registry.parse_ref("reg.example:443/x:1")) == "https://reg.example:443"
    assert registry.api_base(registry.parse_ref("nvidia/cuda:1"), "http://m:5000/") == "http://m:5000"


def test_a_valid_lock_passes():
    assert lockfile.validate(valid_lock(), "lock") == valid_lock()


def _edit(path: str, value: object) -> dict:
    data = copy.deepcopy(valid_lock())
    *parents, key = path.split(".")
    target = data
    for part in parents:
        target = target[part]
    if value is KeyError:
        del target[key]
    else:
        target[key] = value
    return data


@pytest.mark.parametrize("path, value, message", [
    ("schema", 2, "schema 2 is not 1"),
    ("wheel", KeyError, "'wheel' is missing"),
    ("wheel.sha256", "D" * 64, "wheel.sha256"),
    ("base.digest", "sha256:" + "f" * 64, "neither the index nor the manifest digest"),
    ("base.manifest_digest", "sha256:12", "base.manifest_digest"),
    ("base.config_digest", "sha256:12", "base.config_digest"),
    ("base.config_digest", 7, "base.config_digest"),
    ("requirements.lock", "alpha==1.1\n", "requirements.lock was edited"),
    ("tools.uv", 13, "tools.uv is missing or not a str"),
])
def test_a_lock_edited_by_hand_is_refused_with_the_field(path, value, message):
    with pytest.raises(EngineLockError, match=message):
        lockfile.validate(_edit(path, value), "lock")


def test_a_lock_made_before_config_digests_parses_and_is_made_again():
    old = lockfile.validate(_edit("base.config_digest", KeyError), "lock")
    asked = Inputs("1.5.0", old["wheel"]["url"], "D" * 64, old["base"]["image"],
                   "torch==2.10.0", "https://i", ())
    assert asked.differences(old) == ["base: the lock has no config digest (made by an older "
                                      "onecat)"]


def test_a_lock_without_hashes_is_refused_even_with_a_matching_sum():
    text = "alpha==1.1\ntorch==2.10.0\n"
    data = _edit("requirements.lock", text)
    data["requirements"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    with pytest.raises(EngineLockError, match=r"'alpha==1\.1' has no --hash=sha256"):
        lockfile.validate(data, "lock")


def test_inputs_name_what_differs_from_the_lock():
    lock = valid_lock()
    same = Inputs("1.5.0", lock["wheel"]["url"], "D" * 64, lock["base"]["image"],
                  "torch==2.10.0", "https://i", ())
    assert same.differences(lock) == []
    other = Inputs("1.5.0", "file:///carried/1cat.whl", "d" * 64, "nvidia/cuda:12.9",
                   "torch==2.10.0", "https://mirror", ("https://pypi.org/simple",))
    # Mirrors (another wheel URL or index) pin the same things: not a difference.
    assert [d.split(":", 1)[0] for d in other.differences(lock)] == ["base"]


# What uv 0.13 printed for these failures (see tests/integration/test_engine_lock.py).
UV_CONFLICT = """error: No solution found when resolving dependencies
  cause: Because there is no version of beta==3.0 and you require beta==3.0, we can conclude \
that your requirements are unsatisfiable.
"""
UV_UNREACHABLE = """error: Request failed after 3 retries in 6.5s
  cause: Failed to fetch: http://127.0.0.1:9/simple/alpha/
  cause: error sending request for url (http://127.0.0.1:9/simple/alpha/)
  cause: tcp connect error
  cause: Connection refused (os error 111)
"""


def test_uv_failures_become_one_line():
    assert resolve.explain(UV_CONFLICT, ["http://i/simple"]) == (
        "the engine's requirements cannot be resolved: there is no version of beta==3.0 and "
        "you require beta==3.0")
    assert resolve.explain(UV_UNREACHABLE, ["http://127.0.0.1:9/simple"]) == (
        "the package index http://127.0.0.1:9/simple is unreachable (fetching "
        "http://127.0.0.1:9/simple/alpha/: Connection refused (os error 111))")


def test_uv_is_asked_for_the_image_platform_with_hashes_wheels_and_first_index():
    layout = Layout.of("https://download.pytorch.org/whl/cu128", ["https://m", "https://p"])
    command = resolve.compile_command("uv", IMAGE, layout, None)
    text = " ".join(command)
    assert "--generate-hashes" in command and "--no-python-downloads" in command
    assert "--no-build" in command and "--emit-index-annotation" in command
    assert "--python-version 3.12 --python-platform x86_64-manylinux_2_28" in text
    # uv ranks --index above --default-index; the torch index is in the input, explicit.
    assert "--index-strategy first-index --resolution highest" in text
    assert "--index https://m --default-index https://p" in text
    assert "--index-url" not in text and "--extra-index-url" not in text
    assert "cu128" not in text


def test_the_generated_input_pins_the_torch_family_to_an_explicit_torch_index():
    layout = Layout.of("https://download.pytorch.org/whl/cu128", ["https://pypi.org/simple"])
    text = layout.pyproject(["torch==2.10.0", "alpha>=1.0"], {"torch", "nvidia_nccl_cu12"})
    data = tomllib.loads(text)
    assert data["project"]["dependencies"] == ["torch==2.10.0", "alpha>=1.0", "nvidia-nccl-cu12"]
    assert data["tool"]["uv"]["index"] == [{"name": "torch", "explicit": True,
                                            "url": "https://download.pytorch.org/whl/cu128"}]
    assert data["tool"]["uv"]["sources"] == {"nvidia-nccl-cu12": {"index": "torch"},
                                             "torch": {"index": "torch"}}
    # One index serves everything: nothing explicit, nothing routed.
    alone = tomllib.loads(Layout.of("https://mirror/simple", []).pyproject(["torch"], {"torch"}))
    assert "tool" not in alone


@pytest.mark.parametrize(("name", "family"), [
    ("torch", True), ("torchvision", True), ("torchaudio", True), ("pytorch-triton", True),
    ("pytorch_triton_rocm", True), ("triton", True), ("nvidia-nccl-cu12", True),
    ("nvidia_cudnn_cu12", True), ("numpy", False), ("setuptools", False), ("jinja2", False),
    ("triton-windows", False), ("pytorch", False)])
def test_the_torch_family_is_what_pytorch_publishes(name, family):
    assert indexes.is_family(name) is family


def test_uv_runs_without_any_uv_setting_of_the_caller():
    env = indexes.clean_environment({"UV_TORCH_BACKEND": "cpu", "UV_RESOLUTION": "lowest",
                                     "UV_INDEX_STRATEGY": "unsafe-best-match",
                                     "UV_NATIVE_TLS": "1", "HTTPS_PROXY": "http://proxy:3128",
                                     "SSL_CERT_FILE": "/etc/ca.pem", "HOME": "/root",
                                     "NETRC": "/root/.netrc"})
    assert env == {"UV_NATIVE_TLS": "1", "HTTPS_PROXY": "http://proxy:3128",
                   "SSL_CERT_FILE": "/etc/ca.pem", "HOME": "/root", "NETRC": "/root/.netrc"}


def test_uv_annotations_become_the_record_of_each_packages_index():
    text = ("alpha==1.1 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via beta\n"
            "    # from https://user:token@mirror.example/simple\n"
            "torch==2.10.0+cu128 \\\n    --hash=sha256:" + "b" * 64 + "\n"
            "    # from https://download.pytorch.org/whl/cu128\n")
    lock, index_of = resolve.annotations(text)
    assert "# from" not in lock and "# via beta" in lock and lock.count("--hash") == 2
    assert index_of == {"alpha": "https://mirror.example/simple",
                        "torch": "https://download.pytorch.org/whl/cu128"}


def test_an_sdist_only_requirement_is_named():
    stderr = ("error: No solution found when resolving dependencies\n  cause: Because gamma==1.0 "
              "has no usable wheels and only gamma==1.0 is available, we can conclude that all "
              "versions of gamma cannot be used.\n\nhint: Wheels are required for `gamma` "
              "because building from source is disabled for all packages (i.e., with "
              "`--no-build`)\n")
    line = resolve.explain(stderr, ["https://p"])
    assert line.startswith("the engine's requirements need gamma, which has no wheel")
    assert "builds nothing from source" in line


@pytest.mark.parametrize(("pinned", "spec", "index", "problem"), [
    ("2.10.0+cu128", "torch==2.10.0", "https://download.pytorch.org/whl/cu128", ""),
    ("2.10.0", "torch==2.10", "", ""),
    ("2.10.0+cpu", "torch==2.10.0", "https://download.pytorch.org/whl/cu128", "the +cu128 build"),
    ("2.10.0", "torch==2.10.0", "https://mirror/pytorch/whl/cu128/", "no local label"),
    ("2.10.0", "torch==2.1", "", "not 'torch==2.1'"),
    ("2.1.0", "torch==2.10.0", "", "not 'torch==2.10.0'"),
    ("2.10.0rc1", "torch==2.10.0", "", "not 'torch==2.10.0'"),
    ("2.10.0+cu126", "torch==2.10.0+cu128", "", "not 'torch==2.10.0+cu128'"),
])
def test_torch_is_compared_as_a_version_with_the_variant_its_index_implies(pinned, spec, index,
                                                                          problem):
    found = torch_pin_problem(pinned, spec, torch_variant(index))
    assert (problem in found) if problem else found == "", found


def test_a_lock_for_another_torch_variant_is_made_again():
    lock = valid_lock()
    lock["requirements"].update(index_url="https://download.pytorch.org/whl/cu128",
                                extra_index_urls=["https://pypi.org/simple"],
                                torch_variant="cu128")
    lock["requirements"]["lock"] = lock["requirements"]["lock"].replace("2.10.0", "2.10.0+cu128")
    same = Inputs("1.5.0", lock["wheel"]["url"], "d" * 64, lock["base"]["image"],
                  "torch==2.10.0", "https://mirror.example/pytorch/whl/cu128",
                  ("https://pypi.org/simple",))
    assert same.differences(lock) == []
    moved = Inputs("1.5.0", lock["wheel"]["url"], "d" * 64, lock["base"]["image"],
                   "torch==2.10.0", "https://download.pytorch.org/whl/cu126",
                   ("https://pypi.org/simple",))
    assert moved.differences(lock) == [
        "torch_variant: the lock has 'cu128', asked for 'cu126'"]


def test_a_lock_resolved_under_older_rules_is_made_again():
    lock = valid_lock()
    del lock["requirements"]["policy"]
    asked = Inputs("1.5.0", lock["wheel"]["url"], "d" * 64, lock["base"]["image"],
                   "torch==2.10.0", "https://i", ())
    assert [d.split(":", 1)[0] for d in asked.differences(lockfile.validate(lock, "l"))] == [
        "requirements"]


def test_defaults_are_the_serve_roles_own():
    role = yaml.safe_load(defaults.ROLE_DEFAULTS.read_text())
    read = defaults.read()
    assert read.wheel_sha256s == role["vllm_serve_wheel_sha256s"]
    assert read.engine_version in role["vllm_serve_engine_version"]
    assert read.base == role["vllm_serve_image_base"]
    assert read.wheel_url(read.engine_version).endswith(
        f"/1cat_vllm-{read.engine_version}-cp312-cp312-linux_x86_64.whl")
    assert defaults.lock_path("1.5.0").parts[-3:] == ("inventory", "engine",
                                                       "1cat-vllm-1.5.0.lock.json")


def test_the_command_is_registered():
    args = build_parser().parse_args(["engine", "lock", "--check", "--extra-index-url", "a",
                                      "--extra-index-url", "b"])
    assert args.check and args.extra_index_url == ["a", "b"] and args.func
