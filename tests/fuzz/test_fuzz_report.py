"""Fuzz what `onecat report` reads: every host's bench-c<N>.json and health.json.

Contract: the report is written from valid files, or the run is refused with one line naming
the file and the key, exit 1, and nothing written (no report.md, report.json or plots).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from fuzzkit import JSON, dumps, examples, fuzz, mutated
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.report.cli import make_report
from onecat.report.load import ReportError

LEVEL = {
    "max_concurrency": 8, "completed": 16, "failed": 1, "errors": {"timeout": 1},
    "model": "qwen14b", "input_len": 500, "output_len": 256, "num_requests": 17,
    "output_throughput": 150.0, "total_token_throughput": 450.0, "median_ttft_ms": 300.0,
    "p99_ttft_ms": 450.0, "median_tpot_ms": 25.0, "gpu_memory_used_mib": [10752, 10790],
    "kv_cache_usage_perc_max": 0.4,
}
HEALTH = {"verdict": "degraded", "summary": "degraded (2 GPUs)",
          "gpus": [{"index": 0, "pcie": {"gen": 2, "max_gen": 3, "width": 8, "max_width": 16},
                    "throttle_reasons": ["gpu_idle"]},
                   {"index": 1, "pcie": {"gen": 3, "max_gen": 3, "width": 16, "max_width": 16},
                    "throttle_reasons": ["sw_thermal_slowdown"]}],
          "pairs": [{"gpus": [0, 1], "p2p_read": "CHIPSET_NOT_SUPPORTED"}]}


def _report_or_refusal(run: Path, out: Path) -> str | None:
    """The contract: report.md (returned) with a report.json equal to what make_report
    returned, or one ReportError line and nothing written (None)."""
    try:
        document = make_report(run, out, plots=False)
    except ReportError as error:
        assert "\n" not in str(error)
        assert not out.exists() or not any(out.iterdir()), "half-written report"
        return None
    assert json.loads((out / "report.json").read_text()) == document
    return (out / "report.md").read_text()


@st.composite
def run_files(draw: st.DrawFn) -> dict[str, dict[str, str]]:
    """host -> file name -> text: two or three hosts, valid and mutated levels and health."""
    hosts = {}
    for host in ("node1", "node2", "node3")[:draw(st.integers(2, 3))]:
        files = {}
        for c in draw(st.sets(st.sampled_from((1, 8, 16)), min_size=1)):
            level = {**LEVEL, "max_concurrency": c,
                     "output_throughput": draw(st.floats(1, 500))}
            doc = draw(st.just(level) | mutated(level, max_edits=2) | JSON)
            files[f"bench-c{c}.json"] = dumps(doc)
        health = draw(st.none() | st.just(HEALTH) | mutated(HEALTH, max_edits=3)
                      | mutated({"gpu_health": HEALTH}, max_edits=2) | JSON)
        if health is not None:
            files["health.json"] = dumps(health)
        hosts[host] = files
    return hosts


@settings(max_examples=examples(120))
@given(files=run_files())
@example(files={"node1": {"bench-c1.json": dumps({**LEVEL, "output_throughput": "fast"})},
                "node2": {"bench-c1.json": dumps(LEVEL)}})
@example(files={"node1": {"bench-c1.json": dumps(LEVEL), "health.json": '{"gpu_health": 5}'},
                "node2": {"bench-c1.json": dumps({**LEVEL, "output_throughput": 10.0})}})
@example(files={"node1": {"bench-c1.json": dumps(LEVEL),
                          "health.json": dumps({**HEALTH, "gpus": ["x"]})},
                "node2": {"bench-c1.json": dumps({**LEVEL, "output_throughput": 10.0})}})
@example(files={"node1": {"bench-c1.json": dumps(LEVEL)},  # found by benchmarks/fuzz.py
                "node2": {"bench-c1.json": dumps({**LEVEL, "errors": None})}})
@fuzz("report: bench-c<N>.json and health.json")
def test_fuzz_report_inputs(files: dict[str, dict[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "results" / "20261203T000000Z-abc1234"
        for host, named in files.items():
            (run / host).mkdir(parents=True)
            for name, text in named.items():
                (run / host / name).write_text(text)
        markdown = _report_or_refusal(run, Path(tmp) / "report")
        assert markdown is None or markdown.startswith("# Fleet benchmark")


# The report's newer inputs: rollout.json (the hosts' stages and reasons, node-derived text)
# and a run through the gateway (gateway-share.json, from HAProxy's stats page).
ROLLOUT = {"run_id": "20261203T000000Z-abc1234", "hosts": [
    {"host": "node1", "stage": "serve", "status": "ok", "serving": True, "in_rotation": True,
     "reasons": []},
    {"host": "node3", "stage": "health", "status": "held at health", "serving": None,
     "in_rotation": None, "reasons": ["GPU 1 has 1 uncorrectable ECC error"]}]}
SHARE = {"backend": "onecat_nodes", "total": 16, "timed_requests": 16, "servers": {
    "node1": {"requests": 8, "share": 0.5, "status": "UP"},
    "node3": {"requests": 8, "share": 0.5, "status": "MAINT"}}}


@settings(max_examples=examples(80))
@given(rollout=st.just(ROLLOUT) | mutated(ROLLOUT, max_edits=3) | JSON,
       share=st.just(SHARE) | mutated(SHARE, max_edits=3) | JSON,
       url=st.text(max_size=30))
@example(rollout={"hosts": [{"host": "node3", "stage": "\x1b[2Jx\n| evil |", "reasons": [5]}]},
         share={"total": 1, "servers": {"node1\n## x": {"requests": 1, "share": 1.0,
                                                       "status": "\x07UP"}}}, url="\x1b]0;t\x07")
@fuzz("report: rollout.json and a run through the gateway")
def test_fuzz_report_stages_and_gateway_run(rollout: object, share: object, url: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "results" / "20261203T000000Z-abc1234"
        for host in ("node1", "node3", "gateway"):
            (run / host).mkdir(parents=True)
        (run / "node1" / "bench-c1.json").write_text(dumps(LEVEL))
        (run / "gateway" / "bench-c1.json").write_text(dumps({**LEVEL, "url": url}))
        (run / "gateway" / "gateway-share.json").write_text(dumps(share))
        (run / "rollout.json").write_text(dumps(rollout))
        markdown = _report_or_refusal(run, Path(tmp) / "report") or ""
        # Node- and server-written text is one printable line wherever it lands.
        assert all(ch.isprintable() or ch == "\n" for ch in markdown), markdown
