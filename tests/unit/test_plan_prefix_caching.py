"""The planner says whether the engine caches prefixes (what affinity routing pays off on) and
why, from the pinned fork's code; it never passes a flag for it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import model_fixtures as mf

from onecat.model.plan import plan_model, prefix_caching


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"14b": mf.build_model(root, mf.QWEN25_14B, "nvfp4-ct", shards=3),
            "hybrid": mf.build_model(root, mf.QWEN35_27B, "nvfp4-ct", shards=4, name="q35")}


def test_the_fork_on_v100_caches_prefixes_and_the_plan_says_where_that_is_read(models):
    plan = plan_model(str(models["14b"]))
    assert plan["prefix_caching"] is True
    note = [n for n in plan["serve_notes"] if n.startswith("prefix caching")]
    assert len(note) == 1, plan["serve_notes"]
    assert "arg_utils.py" in note[0] and "flash_attn_v100.py:1598" in note[0]
    assert "affinity" in note[0]
    # On by default: nothing is added to the command line.
    assert not any("prefix" in flag for flag in plan["serve_args"])


def test_a_hybrid_says_it_once_in_its_own_note(models):
    plan = plan_model(str(models["hybrid"]))
    assert plan["prefix_caching"] is True
    said = [n for n in plan["serve_notes"] if "prefix caching" in n]
    assert len(said) == 1 and said[0].startswith("hybrid"), plan["serve_notes"]


def test_upstream_on_sm70_names_the_open_bug_and_the_way_out():
    answer = prefix_caching("vllm", "TRITON_ATTN", hybrid=False)
    assert "vllm #13738" in answer["note"] and "--no-enable-prefix-caching" in answer["note"]
    other = prefix_caching("1cat-vllm", "TRITON_ATTN", hybrid=False)
    assert other["enabled"] and "only FLASH_ATTN_V100" in other["note"]
