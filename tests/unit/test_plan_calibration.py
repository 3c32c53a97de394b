"""benchmarks/calibrate_from_log.py on a synthetic log built from the engine's own formats."""
# ruff: noqa: UP031 -- the lines are built with the engine's own %-format strings

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("calibrate_from_log",
                                              ROOT / "benchmarks" / "calibrate_from_log.py")
assert spec and spec.loader
cal = importlib.util.module_from_spec(spec)
sys.modules["calibrate_from_log"] = cal
spec.loader.exec_module(cal)

from onecat.model import calibration  # noqa: E402

GIB = 1024**3


def format_gib(b: int) -> str:  # vllm/utils/mem_utils.py:27-28
    return f"{round(b / GIB, 2)}"


def rank_lines(rank: int, non_torch_init: int, peak: int, non_torch: int, graphs: float) -> list:
    prefix = f"(Worker_TP{rank} pid={100 + rank}) "
    snapshot = (f"torch_peak={format_gib(0)}GiB, free_memory={format_gib(15 * GIB)}GiB, "
                f"total_memory={format_gib(16160 * 2**20)}GiB, cuda_memory="
                f"{format_gib(non_torch_init)}GiB, torch_memory={format_gib(0)}GiB, "
                f"non_torch_memory={format_gib(non_torch_init)}GiB, timestamp=1764867000.0, "
                "auto_measure=True")  # MemorySnapshot.__repr__, mem_utils.py:147-157
    profile = ("Memory profiling takes %.2f seconds. Total non KV cache memory: %sGiB; torch "
               "peak memory increase: %sGiB; non-torch forward increase memory: %sGiB; weights "
               "memory: %sGiB." % (3.5, format_gib(peak + non_torch + 5 * GIB), format_gib(peak),
                                   format_gib(non_torch), format_gib(5 * GIB)))
    return [
        prefix + "DEBUG 12-04 10:00:01 [gpu_worker.py:309] worker init memory snapshot: "
        + snapshot,
        prefix + "INFO 12-04 10:00:30 [gpu_model_runner.py:9799] Model loading took %s GiB "
        "memory and %.6f seconds" % (format_gib(5 * GIB + 9 * 2**20), 25.5),
        prefix + "DEBUG 12-04 10:00:40 [gpu_worker.py:474] " + profile,
        prefix + "INFO 12-04 10:00:40 [gpu_worker.py:475] Available KV cache memory: %s GiB"
        % format_gib(int(8.4 * GIB) - rank * 2**27),
        prefix + "INFO 12-04 10:01:10 [gpu_model_runner.py:11293] Graph capturing finished in "
        "%.0f secs, took %.2f GiB" % (12.0, graphs),
    ]


def synthetic_log() -> str:
    lines = ["INFO 12-04 09:59:59 [api_server.py:1] vLLM API server version 1.5.0"]
    lines += rank_lines(0, int(0.55 * GIB), int(0.41 * GIB), int(0.12 * GIB), 0.21)
    lines += rank_lines(1, int(0.58 * GIB), int(0.40 * GIB), int(0.13 * GIB), 0.24)
    lines += ["(EngineCore pid=99) INFO 12-04 10:00:41 [kv_cache_utils.py:1733] GPU KV cache "
              "size: %s tokens" % f"{91104:,}",
              "(EngineCore pid=99) INFO 12-04 10:00:41 [kv_cache_utils.py:1735] Maximum "
              "concurrency for %s tokens per request: %.2fx" % (f"{8192:,}", 11.12)]
    return "\n".join(lines) + "\n"


def test_log_values_are_parsed_worst_rank_first():
    values = cal.parse_log(synthetic_log())
    assert values["ranks"] == 2
    assert values["cuda_context_nccl_gib"] == 0.58
    assert values["activation_peak_gib"] == 0.41
    assert values["non_torch_increase_gib"] == 0.13
    assert values["cuda_graph_gib"] == 0.24
    assert values["weights_gib"] == 5.01
    assert values["kv_cache_gib"] == 8.27  # the smaller rank decides (8.4 GiB - 128 MiB)
    assert values["kv_cache_tokens"] == 91104
    assert values["max_model_len"] == 8192
    assert math.isclose(values["max_concurrency"], 11.12)


def test_cli_prints_measured_values_and_plan_comparison(tmp_path, capsys):
    log = tmp_path / "engine.log"
    log.write_text(synthetic_log())
    plan = {"memory_per_gpu": {"cuda_context_bytes": int(0.6 * GIB),
                               "non_torch_bytes": int(0.15 * GIB), "activation_bytes": 0,
                               "cuda_graph_bytes": int(0.3 * GIB), "weights_bytes": 5 * GIB,
                               "rotary_cache_bytes": 8 * 2**20, "kv_budget_bytes": 8 * GIB}}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert cal.main([str(log), "--plan", str(tmp_path / "plan.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["against_plan"]["cuda_context_nccl_gib"] == {"measured": 0.58, "planned": 0.6}
    assert out["against_plan"]["weights_gib"] == {"measured": 5.01, "planned": 5.01}


def test_a_log_without_profiling_lines_is_refused(tmp_path, capsys):
    log = tmp_path / "info.log"
    log.write_text("INFO 12-04 10:00:40 [gpu_worker.py:475] something else\n")
    assert cal.main([str(log)]) == 1
    assert "VLLM_LOGGING_LEVEL=DEBUG" in capsys.readouterr().err


def test_calibration_table_names_its_status_and_source():
    for name, constant in calibration.TABLE.items():
        assert constant.status in ("estimated", "from code"), name
        assert constant.source, name
    assert calibration.value("turbomind_workspace_bytes") == 34 * 2**20 + 4
    assert all(c.status != "calibrated" for c in calibration.TABLE.values())
