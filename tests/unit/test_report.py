"""`onecat report`: the fleet table, the seed reference, outliers with health facts, plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onecat.cli import main as onecat_main
from onecat.report import reference
from onecat.report.analysis import health_explanations
from onecat.report.cli import make_report
from onecat.report.load import ReportError, load_run

# Output tok/s per level for each node; node3 is 30 % slow at c=8 only.
THROUGHPUT = {
    "node1": {1: 40.0, 8: 160.0},
    "node2": {1: 38.0, 8: 150.0},
    "node3": {1: 39.0, 8: 105.0},
}

HEALTHY_GPU = {"pcie": {"gen": 3, "max_gen": 3, "width": 16, "max_width": 16},
               "throttle_reasons": []}


def _level(c: int, out_tps: float) -> dict:
    return {
        "max_concurrency": c, "completed": 16, "failed": 0, "errors": {},
        "model": "qwen14b", "input_len": 500, "output_len": 256,
        "output_throughput": out_tps, "total_token_throughput": out_tps * 3,
        "median_ttft_ms": 300.0 * c, "p99_ttft_ms": 450.0 * c, "median_tpot_ms": 25.0 + c,
        "gpu_memory_used_mib": [10752, 10790], "kv_cache_usage_perc_max": 0.1 * c,
    }


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "results" / "20261202T1500-abc123"
    for host, levels in THROUGHPUT.items():
        (run / host).mkdir(parents=True)
        for c, tps in levels.items():
            (run / host / f"bench-c{c}.json").write_text(json.dumps(_level(c, tps)))
    health = {"verdict": "degraded", "summary": "degraded (2 GPUs)",
              "gpus": [{"index": 0, "pcie": {"gen": 2, "max_gen": 3, "width": 8,
                                              "max_width": 16},
                        "throttle_reasons": []},
                       {"index": 1, **HEALTHY_GPU,
                        "throttle_reasons": ["sw_thermal_slowdown"]}],
              "pairs": [{"gpus": [0, 1], "p2p_read": "CHIPSET_NOT_SUPPORTED"}]}
    (run / "node3" / "health.json").write_text(json.dumps(health))
    (run / "node1" / "health.json").write_text(json.dumps(
        {"verdict": "healthy", "gpus": [{"index": 0, **HEALTHY_GPU}],
         "pairs": [{"gpus": [0, 1], "p2p_read": "OK"}]}))
    return run


def test_report_files_table_and_outlier(run_dir):
    document = make_report(run_dir, run_dir)
    for name in ("report.md", "report.json", "throughput_vs_concurrency.png",
                 "ttft_vs_concurrency.png"):
        assert (run_dir / name).is_file(), name
    for png in ("throughput_vs_concurrency.png", "ttft_vs_concurrency.png"):
        data = (run_dir / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert json.loads((run_dir / "report.json").read_text()) == document
    # Fleet median at c=8 is 150; node3 (105) is 30 % below, the others are not flagged.
    (outlier,) = document["outliers"]
    assert (outlier["host"], outlier["concurrency"]) == ("node3", 8)
    assert outlier["fleet_median_output_throughput"] == 150.0
    assert outlier["below_median"] == pytest.approx(0.30)
    assert document["fleet_median"]["1"]["output_throughput"] == 39.0
    md = (run_dir / "report.md").read_text()
    assert "| node1 | 8 | 160.0 | 480.0 | 2400.0 | 3600.0 | 33.0 | 10752 / 10790 | 0 |  |" in md
    assert "| node3 | 8 | 105.0 | 315.0 |" in md and "30 % below median |" in md
    assert "- **node3**: c=8: 105.0 tok/s (30 % below 150.0). Health: GPU 0 PCIe" in md
    assert "GPU 0 PCIe link downtrained: Gen2 x8 (card supports Gen3 x16)" in md
    assert "GPU 1 throttling: sw_thermal_slowdown" in md
    assert "GPUs 0-1 P2P off (read: CHIPSET_NOT_SUPPORTED)" in md
    # The seed's reference row next to the fleet median at c=8.
    assert "| 8 | 3 | 150.0 | 450.0 | 2.40 | 33.0 | 140-180 | 1.2-2 | ~11.8 GB |" in md
    assert "![throughput vs concurrency](throughput_vs_concurrency.png)" in md


def test_threshold_decides_what_is_an_outlier(run_dir, tmp_path):
    loose = make_report(run_dir, tmp_path / "loose", threshold=0.35, plots=False)
    assert loose["outliers"] == []
    assert "No node is more than 35 % below" in (tmp_path / "loose" / "report.md").read_text()
    strict = make_report(run_dir, tmp_path / "strict", threshold=0.02, plots=False)
    flagged = {(o["host"], o["concurrency"]) for o in strict["outliers"]}
    assert flagged == {("node2", 1), ("node3", 8)}  # 38 < 0.98 x 39; node2 at c=8 is the median
    node2 = next(o for o in strict["outliers"] if o["host"] == "node2")
    assert node2["explanations"] == [] and not node2["health_known"]
    assert "no health.json for this node" in (tmp_path / "strict" / "report.md").read_text()
    assert not (tmp_path / "strict" / "throughput_vs_concurrency.png").exists()


def test_health_explanations():
    assert health_explanations(None) == []
    assert health_explanations({"verdict": "healthy", "gpus": [{"index": 0, **HEALTHY_GPU}],
                                "pairs": [{"gpus": [0, 1], "p2p_read": "OK"}]}) == []
    idle = {"gpus": [{"index": 1, "pcie": {"gen": 1, "max_gen": 3, "width": 16,
                                           "max_width": 16},
                      "throttle_reasons": ["gpu_idle", "sw_power_cap"]}]}
    assert health_explanations(idle) == [
        "GPU 1 PCIe link downtrained: Gen1 x16 (card supports Gen3 x16, read while idle: "
        "recheck under load)",
        "GPU 1 throttling: sw_power_cap",
    ]
    assert health_explanations({"verdict": "unhealthy", "summary": "unhealthy (1 GPUs)"}) == [
        "health verdict unhealthy: unhealthy (1 GPUs)"]


def test_failed_requests_and_bad_files_are_reported(run_dir, tmp_path):
    bad = _level(1, 40.0) | {"failed": 2, "errors": {"http_500": 2}}
    (run_dir / "node1" / "bench-c1.json").write_text(json.dumps(bad))
    (run_dir / "node2" / "bench-c8.json").write_text("{not json")
    (run_dir / "empty-host").mkdir()
    document = make_report(run_dir, tmp_path / "r", plots=False)
    assert document["failures"] == [{"host": "node1", "concurrency": 1, "failed": 2,
                                     "errors": {"http_500": 2}}]
    assert any("bench-c8.json" in w for w in document["warnings"])
    assert "empty-host: no bench-c<N>.json files" in document["warnings"]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "- node1 at c=1: 2 failed: http_500 (2)" in md


def test_load_errors_name_the_fix(tmp_path):
    with pytest.raises(ReportError, match="is not a directory"):
        load_run(tmp_path / "missing")
    (tmp_path / "run" / "host").mkdir(parents=True)
    with pytest.raises(ReportError, match="run the benchmark first"):
        load_run(tmp_path / "run")


def test_cli_report(run_dir, tmp_path, capsys):
    assert onecat_main(["report", str(run_dir), "--out", str(tmp_path / "o"),
                        "--no-plots"]) == 0
    assert "1 outlier(s)" in capsys.readouterr().err
    assert onecat_main(["report", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a directory" in err[0]


def test_seed_reference_is_encoded_as_in_section_4_1():
    assert sorted(reference.SEED_LEVELS) == [1, 8, 16, 32]
    assert reference.SEED_LEVELS[1] == {"throughput_tok_s": (30, 40), "ttft_s": (0.3, 0.5),
                                        "memory_per_card_gb": 10.5}
    assert reference.SEED_LEVELS[32]["throughput_tok_s"] == (210, 240)
    assert reference.SEED_LEVELS[16]["ttft_s"] == (2.5, 4.0)
    assert reference.SEED_LEVELS[8]["memory_per_card_gb"] == 11.8


def _burnin(verdict: str, temps: list[int], uncorrected: list[int]) -> dict:
    series = [{"t": float(i), "gpus": [{"index": 0, "temperature_c": t, "power_draw_w": 200.0 + i,
                                        "ecc_uncorrected": u}]}
              for i, (t, u) in enumerate(zip(temps, uncorrected, strict=True))]
    findings = [] if verdict == "healthy" else [
        {"severity": "unhealthy", "code": "ecc_uncorrected", "gpu": "GPU 0",
         "message": "GPU 0: 1 new uncorrectable ECC error(s)"}]
    return {"verdict": verdict, "admitted": verdict != "unhealthy", "seconds": 600.0,
            "load": {"completed": 900, "failed": 0, "output_tokens_per_s": 512.5},
            "findings": findings, "series": series,
            "answers": {"idle": {}, "under_load": [{"ok": True}, {"ok": verdict == "healthy"}]}}


def test_the_burn_in_section_and_its_plot(run_dir):
    (run_dir / "node1" / "burnin.json").write_text(json.dumps(_burnin("healthy", [60, 71, 75],
                                                                      [0, 0, 0])))
    (run_dir / "node2" / "burnin.json").write_text(json.dumps(_burnin("unhealthy", [60, 80, 84],
                                                                      [0, 0, 1])))
    (run_dir / "node3" / "burnin.json").write_text("{not json")
    document = make_report(run_dir, run_dir)
    md = (run_dir / "report.md").read_text()
    assert "| node1 | healthy | yes | 600.0 | 900 (0) | 512.5 | 75 | 202.0 | 0 | 2/2 ok | - |" \
        in md
    assert "| node2 | unhealthy | no | 600.0 | 900 (0) | 512.5 | 84 | 202.0 | 1 | 1/2 ok | " \
        "GPU 0: 1 new uncorrectable ECC error(s) |" in md
    assert "![GPU temperature during the burn-in](burnin_temperature.png)" in md
    assert (run_dir / "burnin_temperature.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(document["burnin"]) == ["node1", "node2"]
    assert "series" not in document["burnin"]["node1"]
    assert any("node3/burnin.json" in w for w in document["warnings"])


def test_burnin_files_of_the_wrong_shape_never_break_the_report(run_dir):
    """burnin.json is written on the node: on the controller it is untrusted input."""
    good = _burnin("healthy", [60, 71], [0, 0])
    shapes = {
        "n1": {**good, "series": [5, "x", {"t": "soon", "gpus": "many"}]},
        "n2": {**good, "series": []},
        "n3": {**good, "load": [1], "answers": "all same", "findings": 7},
        "n4": {**good, "findings": [{"message": "GPU 0 | hot\n\x1b[31mred"}, "x"]},
        "n5": {**good, "series": [{"t": 0, "gpus": [{"index": [0], "temperature_c": "hot",
                                                     "ecc_uncorrected": None}]}]},
        "n6": {**good, "seconds": "long", "verdict": ["healthy"]},
        "n7": [good],
    }
    for host, data in shapes.items():
        (run_dir / host).mkdir(exist_ok=True)
        (run_dir / host / "burnin.json").write_text(json.dumps(data))
    document = make_report(run_dir, run_dir)
    md = (run_dir / "report.md").read_text()
    assert sorted(document["burnin"]) == ["n1", "n2", "n3", "n4", "n5", "n6"]
    assert "GPU 0 / hot [31mred" in md and "\x1b" not in md
    assert any("n7/burnin.json" in w for w in document["warnings"])


# ---- runs through the gateway, and runs without the benchmark stage --------------------

def _rollout(run: Path, rows: dict[str, dict]) -> None:
    hosts = [{"host": host, "stage": "serve", "status": "ok", "serving": True,
              "in_rotation": True, "reasons": [], **row} for host, row in rows.items()]
    (run / "rollout.json").write_text(json.dumps({"run_id": run.name, "hosts": hosts}))


def _gateway_run(run: Path, servers: dict[str, int], timed: int | None) -> None:
    (run / "gateway").mkdir(parents=True)
    for c, tps in ((1, 30.0), (4, 90.0)):
        (run / "gateway" / f"bench-c{c}.json").write_text(json.dumps(
            _level(c, tps) | {"completed": 8, "url": "http://172.18.0.3:8000"}))
    total = sum(servers.values())
    share = {"backend": "onecat_nodes", "total": total,
             "servers": {name: {"requests": n, "share": round(n / total, 4), "status": "UP"}
                         for name, n in servers.items()}}
    if timed is not None:
        share["timed_requests"] = timed
    (run / "gateway" / "gateway-share.json").write_text(json.dumps(share))


def test_a_deploy_without_the_benchmark_stage_says_which_stages_ran(tmp_path):
    """The demo's run: the deploy stops at serve (no benchmark stage), one node is held at
    health, and the fleet is measured through the gateway only."""
    run = tmp_path / "results" / "20261204T1400-demo"
    for host in ("fleet-a", "fleet-b", "fleet-c"):
        (run / host).mkdir(parents=True)
        (run / host / "health.json").write_text(json.dumps({"verdict": "healthy"}))
    held = {"stage": "health", "status": "held at health", "serving": None,
            "in_rotation": None, "reasons": ["GPU 1 has 1 uncorrectable ECC error"]}
    _rollout(run, {"fleet-a": {}, "fleet-b": {}, "fleet-c": held})
    _gateway_run(run, {"fleet-a": 8, "fleet-b": 8, "fleet-c": 0}, timed=16)
    document = make_report(run, run, plots=False)
    md = (run / "report.md").read_text()
    assert document["nodes"] == {} and document["outliers"] == []
    assert not any("no bench-c<N>.json" in w for w in document["warnings"]), document
    assert "No node was benchmarked on its own in this run" in md
    assert "## Results per node" not in md and "seed's reference" not in md
    assert "| fleet-c | health | held at health | - | - | GPU 1 has 1 uncorrectable ECC " in md
    assert "The benchmark stage did not run on any host in this run" in md
    assert "HAProxy counted the 16 timed request(s)" in md
    assert "| fleet-a | 8 | 50.0% | UP | - |" in md
    assert document["gateway_runs"]["gateway"]["levels"]["4"]["output_throughput"] == 90.0
    assert document["stages"]["fleet-c"]["status"] == "held at health"


def test_node_runs_and_a_gateway_run_are_kept_apart(run_dir, capsys):
    _gateway_run(run_dir, {"node1": 7, "node2": 6, "node3": 5}, timed=16)
    document = make_report(run_dir, run_dir, plots=False)
    md = (run_dir / "report.md").read_text()
    assert sorted(document["nodes"]) == ["node1", "node2", "node3"]
    assert document["fleet_median"]["1"]["nodes"] == 3  # the gateway is not a fourth node
    assert md.count("| gateway |") == 0
    assert "3 nodes benchmarked on their own" in md and "1 run(s) through the gateway" in md
    # Each node's share next to its own best result; the retries explain 18 for 16 sent.
    assert "| node1 | 7 | 38.9% | UP | 160.0 |" in md
    assert "HAProxy counted 18 request(s) to the nodes for 16 timed request(s)" in md
    assert onecat_main(["report", str(run_dir), "--no-plots"]) == 0
    assert "(3 nodes benchmarked on their own, 1 run(s) through the gateway, 1 outlier(s))" \
        in capsys.readouterr().err


def test_a_host_the_benchmark_stage_reached_without_results_is_still_a_warning(run_dir):
    (run_dir / "node4").mkdir()
    (run_dir / "node5").mkdir()
    _rollout(run_dir, {"node4": {"stage": "benchmark", "status": "held at benchmark"},
                       "node5": {"stage": "health", "status": "held at health"}})
    document = make_report(run_dir, run_dir, plots=False)
    assert [w for w in document["warnings"] if w.startswith(("node4", "node5"))] == [
        "node4: the benchmark stage ran but wrote no bench-c<N>.json files; see this run's log"]
    md = (run_dir / "report.md").read_text()
    assert "The benchmark stage ran on node4." in md


def test_a_share_file_of_the_wrong_shape_is_refused_or_skipped(run_dir):
    _gateway_run(run_dir, {"node1": 1}, timed=1)
    share = run_dir / "gateway" / "gateway-share.json"
    share.write_text(json.dumps({"total": -3, "servers": {}}))
    with pytest.raises(ReportError, match=r"gateway-share.json: total is -3, expected a count"):
        make_report(run_dir, run_dir, plots=False)
    share.write_text(json.dumps({"total": 3, "servers": ["node1"]}))
    document = make_report(run_dir, run_dir, plots=False)
    # Without a readable share it is an ordinary folder of results (named in the warnings).
    assert any("gateway-share.json: no object of servers" in w for w in document["warnings"])
