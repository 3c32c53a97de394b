"""Engine image references: pinned, CUDA 12.x, never latest."""

from __future__ import annotations

import pytest

from onecat.serve.image_ref import check_image_env, check_image_ref, cuda_major_of_tag, split_ref


def test_split_ref():
    assert split_ref("registry:5000/vllm/vllm-openai:v0.9.2@sha256:ab") == (
        "registry:5000/vllm/vllm-openai", "v0.9.2", "sha256:ab")
    assert split_ref("registry:5000/vllm/vllm-openai") == ("registry:5000/vllm/vllm-openai", "",
                                                           "")


@pytest.mark.parametrize(("repo", "tag", "major"), [
    ("nvidia/cuda", "12.8.1-runtime-ubuntu24.04", 12),
    ("nvidia/cuda", "13.0.0-runtime-ubuntu24.04", 13),
    ("vllm/vllm-openai", "v0.9.2-cu128", 12),
    ("vllm/vllm-openai", "v0.12.0-cu130", 13),
    ("vllm/vllm-openai", "v0.9.2", None),
    ("onecat/engine-base", "72088359e4ee", None),
])
def test_cuda_major_of_tag(repo, tag, major):
    assert cuda_major_of_tag(repo, tag) == major


@pytest.mark.parametrize(("ref", "start"), [
    ("vllm/vllm-openai:latest", "engine image 'vllm/vllm-openai:latest' uses the moving tag"),
    ("vllm/vllm-openai", "engine image 'vllm/vllm-openai' has no tag"),
    ("vllm/vllm-openai:v0.12.0-cu130", "engine image 'vllm/vllm-openai:v0.12.0-cu130' is built "
                                       "on CUDA 13"),
    ("", "engine image is empty"),
])
def test_refused_refs(ref, start):
    problems = check_image_ref(ref, "engine image")
    assert len(problems) == 1 and problems[0].startswith(start)


@pytest.mark.parametrize("ref", ["vllm/vllm-openai:v0.9.2",
                                 "nvidia/cuda:12.8.1-runtime-ubuntu24.04",
                                 "vllm/vllm-openai@sha256:0123"])
def test_pinned_refs_pass(ref):
    assert check_image_ref(ref, "engine image") == []


def test_image_env():
    assert check_image_env(["PATH=/bin", "CUDA_VERSION=12.8.1"], "img", True) == []
    assert check_image_env(["CUDA_VERSION=13.0.1"], "img", False) == [
        "img is built on CUDA 13.0.1; V100 needs CUDA 12.x (CUDA 13 removed sm_70)"]
    assert check_image_env([], "img", False) == []
    assert check_image_env([], "img", True)[0].startswith("img declares no CUDA_VERSION")
