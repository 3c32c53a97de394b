"""The fleet's Grafana dashboard (issue 52): dashboards/onecat-fleet.json imports as is into
Grafana 9/10, is what dashboards/build.py writes, and every query in it is PromQL that the real
promtool accepts, over series that exist (the watch's, vLLM's, HAProxy's, the recording rules')."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_tools import tool

from onecat.watch.act import MODES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "onecat-fleet.json"
BUILD = ROOT / "dashboards" / "build.py"
METRICS_PY = ROOT / "onecat" / "watch" / "metrics.py"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# The watch's series that are being added (issue 52) and may not be in metrics.py yet.
WATCH_PENDING = ["onecat_gpu_service_required", "onecat_node_deploy_drain"]
# vLLM V1's /metrics (job="onecat_engine"); histograms are named without _bucket/_sum/_count.
ENGINE = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
          "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
          "vllm:request_success_total"]
ENGINE_HISTOGRAMS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                     "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"]
# HAProxy 2.6's built-in exporter (job="onecat_gateway").
GATEWAY = ["haproxy_server_status", "haproxy_backend_current_queue",
           "haproxy_server_current_queue", "haproxy_frontend_http_responses_total",
           "haproxy_backend_active_servers"]
# The monitoring stage's recording rules (names fixed).
RECORDING = ["onecat:node_up_at_gateway", "onecat:nodes_up_at_gateway",
             "onecat:fleet_min_in_rotation", "onecat:fleet_nodes_expected",
             "onecat:generation_tokens:rate1m"]
# What each template variable stands for when promtool checks an expression.
VARIABLES = {"gateway": "gw1", "node": "node1", "model": "model-a",
             "__rate_interval": "1m", "__interval": "30s", "__range": "6h"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "atan2", "inf", "nan"}


def watch_metrics() -> set[str]:
    return set(re.findall(r"\bonecat_[a-z0-9_]+\b", METRICS_PY.read_text(encoding="utf-8")))


def known_metrics() -> set[str]:
    histograms = {f"{name}{suffix}" for name in ENGINE_HISTOGRAMS
                  for suffix in ("_bucket", "_sum", "_count")}
    return (watch_metrics() | set(WATCH_PENDING) | set(ENGINE) | histograms | set(GATEWAY)
            | set(RECORDING))


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers outside strings, label matchers,
    ranges and grouping clauses that are neither functions nor keywords."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    bare = re.sub(r"\{[^}]*\}", "", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    names = set()
    for match in re.finditer(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?", bare):
        if match.group(2) is None and match.group(1).lower() not in KEYWORDS:
            names.add(match.group(1))
    return names


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found += panel.get("panels", [])  # a collapsed row's
    return found


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expression) of every target, and the selector of every label_values variable."""
    found = [(f"panel {panel['id']} {panel['title']!r} target {target['refId']}", target["expr"])
             for panel in panels(dashboard) for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            selector = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["query"])
            assert selector, variable["query"]
            found.append((f"variable {variable['name']}", selector.group(1)))
    return found


def substitute(expr: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in VARIABLES, f"unknown variable ${name} in {expr!r}"
        return VARIABLES[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def walk(node: Any, path: str = ""):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}[{index}]")


def test_the_dashboard_imports_as_is_into_grafana() -> None:
    dashboard = load()
    assert dashboard["id"] is None
    assert dashboard["uid"] == "onecat-fleet"
    assert dashboard["schemaVersion"] >= 36
    assert "__inputs" not in dashboard and "${DS_" not in DASHBOARD.read_text(encoding="utf-8")
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("gateway", "node", "model"):
        variable = variables[name]
        assert variable["type"] == "query", name
        assert variable["query"].startswith("label_values("), name
        assert variable["multi"] is True and variable["includeAll"] is True, name
        assert variable["datasource"] == DATASOURCE, name
        assert any(f"${name}" in expr for _, expr in queries(dashboard)), f"${name} is unused"


def test_every_panel_and_target_queries_the_chosen_datasource() -> None:
    dashboard = load()
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, (panel["title"], target["refId"])


def test_no_datasource_uid_is_hard_coded_anywhere() -> None:
    for path, node in walk(load()):
        if path.endswith(".datasource") and not isinstance(node, str):
            assert node == DATASOURCE, path
        if path.endswith(".datasource") and isinstance(node, str):
            pytest.fail(f"{path}: a datasource named by a string ({node!r})")
        if path.endswith(".uid") and path != ".uid":
            assert node == "${datasource}", f"{path}: {node!r}"


def test_panel_ids_are_unique_and_consecutive() -> None:
    ids = [panel["id"] for panel in panels(load())]
    assert ids == list(range(1, len(ids) + 1))


def test_the_json_is_what_build_py_writes() -> None:
    result = subprocess.run([sys.executable, str(BUILD), "--check"], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_the_watch_mode_mapping_follows_the_watch() -> None:
    panel = next(p for p in panels(load()) if p["title"] == "Watch mode")
    options = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert {int(k): v["text"] for k, v in options.items() if k != "-1"} == dict(enumerate(MODES))


def test_every_query_selects_known_series() -> None:
    known = known_metrics()
    assert {"onecat_watch_up", "onecat_node_verdict", "onecat_watch_mode"} <= known
    for where, expr in queries(load()):
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        assert names <= known, f"{where}: unknown {sorted(names - known)} in {expr!r}"


def test_metric_names_finds_metrics_not_functions_labels_or_keywords() -> None:
    expr = ('histogram_quantile(0.9, sum by (model, le) (rate(vllm:x_bucket{node=~"$node",'
            'a="b(c)"}[$__rate_interval]))) / on() group_left max(onecat:y) > bool 0 or up')
    assert metric_names(expr) == {"vllm:x_bucket", "onecat:y", "up"}


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    rules = [{"record": f"dashboard:query_{number}", "expr": substitute(expr)}
             for number, (_, expr) in enumerate(queries(load()))]
    path = tmp_path / "dashboard-rules.yml"
    # JSON is YAML: no quoting questions for PromQL's quotes, braces and colons.
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}),
                    encoding="utf-8")
    result = subprocess.run([tool("promtool"), "check", "rules", str(path)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout, result.stdout
