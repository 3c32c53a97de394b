"""README.md and docs/plan.md carry the seed table as the planner computes it, not by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("seed_plan_table",
                                                  ROOT / "benchmarks" / "seed_plan_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_tables_and_worked_example_are_the_planners_output():
    generator = _generator()
    assert generator.stale(generator.blocks()) == [], (
        "run .venv/bin/python benchmarks/seed_plan_table.py --write")


def test_seed_acceptance_figures():
    """The seed's table, re-derived: what each checkpoint gives on 2x V100-16GB at 8192."""
    generator = _generator()
    text = generator.blocks()["readme"]
    assert "| Qwen2.5-7B NVFP4 | 2.72 → 2.91 GiB | 47 | fits |" in text
    assert "| Qwen2.5-14B NVFP4 | 4.91 → 5.30 GiB | 11 | fits |" in text
    assert "| Qwen2.5-32B NVFP4 | 9.63 → 10.53 GiB | 3 | fits, with advice |" in text
    assert "| Qwen2.5-14B FP16 | 13.76 → 13.76 GiB | 0 | does not fit at 8192 |" in text
    assert ("| Llama-3.1-70B NVFP4 | 19.89 → 21.88 GiB | 0 | does not fit: not recommended on "
            "this hardware |") in text
