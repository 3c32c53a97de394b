"""Writes dashboards/onecat-fleet.json, the fleet's Grafana dashboard (issue 52).

The dashboard is written here, as Python, and the JSON is generated: panel ids and grid
positions are assigned in order by this script, never by hand. Edit this file, then run

    python dashboards/build.py           # rewrites dashboards/onecat-fleet.json
    python dashboards/build.py --check   # exits 1 when the JSON differs from what it would write

The JSON imports as is into Grafana 9 and 10: no fixed datasource (a `datasource` variable of
type prometheus picks one), a fixed uid, id null. The series come from three scrape jobs:
job="onecat_node" (node_exporter, with the watch's textfile metrics, label node),
job="onecat_engine" (vLLM's /metrics, labels node and model) and job="onecat_gateway"
(HAProxy's built-in exporter, label gateway; its servers are named after the nodes).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = Path(__file__).resolve().with_name("onecat-fleet.json")

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
NODE = 'job="onecat_node",node=~"$node"'
ENGINE = 'job="onecat_engine",node=~"$node",model=~"$model"'
GATEWAY = 'job="onecat_gateway",gateway=~"$gateway"'
# The gateway's backends (onecat_keyless exists with affinity balancing) and its frontend.
BACKENDS = 'proxy=~"onecat_nodes|onecat_keyless"'
FRONTEND = 'proxy="onecat"'
# HAProxy's server states (its exporter sets the state label that holds to 1), as one number
# for a state timeline: the highest is the best.
SERVER_STATES = (("UP", 4, "green"), ("NOLB", 3, "yellow"), ("DRAIN", 2, "orange"),
                 ("MAINT", 1, "blue"), ("DOWN", 0, "red"))
VERDICT_COLORS = {"healthy": "green", "degraded": "yellow", "unhealthy": "red"}
MODE_COLORS = {"in": "green", "draining": "orange", "restarted": "yellow", "held": "red",
               "repairing": "purple", "service": "dark-red"}
QUANTILES = (0.5, 0.9, 0.99)


def watch_names() -> tuple[tuple[str, ...], dict[str, int]]:
    """The watch's modes (in the order onecat_watch_mode numbers them) and verdict ranks, from
    the watch's own code so the dashboard's value mappings follow it."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    modes = importlib.import_module("onecat.watch.act").MODES
    ranks = importlib.import_module("onecat.watch.deltas").RANK
    return tuple(modes), dict(ranks)


def target(expr: str, legend: str = "", table: bool = False) -> dict[str, Any]:
    """One Prometheus query; `table` for an instant query shown as a table."""
    return {"datasource": DATASOURCE, "editorMode": "code", "expr": expr,
            "format": "table" if table else "time_series", "instant": table,
            "legendFormat": legend, "range": not table}


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute",
            "steps": [{"color": color, "value": value} for value, color in steps]}


def mapping(values: dict[int, tuple[str, str]]) -> list[dict[str, Any]]:
    """A value mapping: number -> (text, color)."""
    return [{"type": "value", "options": {
        str(value): {"color": color, "index": index, "text": text}
        for index, (value, (text, color)) in enumerate(values.items())}}]

DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {
    "timeseries": {
        "legend": {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    },
    "stat": {
        "colorMode": "background", "graphMode": "none", "justifyMode": "auto",
        "orientation": "auto", "textMode": "auto",
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
    },
    "state-timeline": {
        "alignValue": "left", "mergeValues": True, "rowHeight": 0.9, "showValue": "never",
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "single", "sort": "none"},
    },
    "table": {
        "cellHeight": "sm", "showHeader": True,
        "footer": {"countRows": False, "fields": "", "reducer": ["sum"], "show": False},
    },
}


def panel(kind: str, title: str, targets: list[dict[str, Any]], w: int, h: int,
          description: str = "", unit: str = "", decimals: int | None = None,
          minimum: float | None = None, maximum: float | None = None,
          steps: dict[str, Any] | None = None, mappings: list[dict[str, Any]] | None = None,
          options: dict[str, Any] | None = None, overrides: list[dict[str, Any]] | None = None,
          transformations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "color": {"mode": "palette-classic" if kind == "timeseries" else "thresholds"},
        "mappings": mappings or [],
        "thresholds": steps or thresholds((None, "green")),
    }
    if unit:
        defaults["unit"] = unit
    if decimals is not None:
        defaults["decimals"] = decimals
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    if kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                              "showPoints": "never", "spanNulls": False}
    elif kind == "state-timeline":
        defaults["custom"] = {"fillOpacity": 80, "lineWidth": 0}
    elif kind == "table":
        defaults["custom"] = {"align": "auto", "displayMode": "auto"}
    return {
        "type": kind, "title": title, "description": description, "datasource": DATASOURCE,
        "gridPos": {"h": h, "w": w, "x": 0, "y": 0},
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {**DEFAULT_OPTIONS[kind], **(options or {})},
        "targets": [{**t, "refId": chr(ord("A") + i)} for i, t in enumerate(targets)],
        **({"transformations": transformations} if transformations else {}),
    }




def quantiles(metric: str, by: str) -> list[dict[str, Any]]:
    return [target(f"histogram_quantile({q}, sum by ({by}, le) "
                   f"(rate({metric}_bucket{{{ENGINE}}}[$__rate_interval])))",
                   f"{{{{{by}}}}} p{round(q * 100)}") for q in QUANTILES]


def rate_ratio(part: str, whole: str, by: str) -> str:
    return (f"sum by ({by}) (rate({part}[$__rate_interval]))\n/\n"
            f"sum by ({by}) (rate({whole}[$__rate_interval]))")


def rows() -> list[tuple[str, list[dict[str, Any]]]]:
    modes, ranks = watch_names()
    up_at_gateway = (f'sum by (gateway) (haproxy_server_status{{{GATEWAY},proxy="onecat_nodes",'
                     f'state="UP"}})')
    server_state = "max by (gateway, server) (\n  " + "\n  or ".join(
        f'haproxy_server_status{{{GATEWAY},proxy="onecat_nodes",server=~"$node",'
        f'state="{state}"}} * {code}' for state, code, _ in SERVER_STATES) + "\n)"
    responses = f"haproxy_frontend_http_responses_total{{{GATEWAY},{FRONTEND}}}"
    responses_5xx = f'haproxy_frontend_http_responses_total{{{GATEWAY},{FRONTEND},code="5xx"}}'
    floor_line = [{"matcher": {"id": "byName", "options": "floor"}, "properties": [
        {"id": "color", "value": {"fixedColor": "red", "mode": "fixed"}},
        {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
        {"id": "custom.fillOpacity", "value": 0}]}]
    yes_no = mapping({0: ("no", "transparent"), 1: ("yes", "orange")})
    return [
        ("Fleet", [
            panel("timeseries", "Nodes in rotation vs the floor", [
                target(up_at_gateway, "in rotation at {{gateway}}"),
                target("sum(onecat_node_in_rotation{job=\"onecat_node\"})", "in by their watch"),
                target("max(onecat:fleet_min_in_rotation)", "floor"),
                target("max(onecat:fleet_nodes_expected)", "expected"),
            ], 12, 8, "Nodes UP in onecat_nodes at each gateway, the nodes whose watch keeps "
               "them in, and the fleet's floor (gateway_fleet_min_in_rotation; the floor and "
               "expected lines need the onecat recording rules).",
               decimals=0, minimum=0, overrides=floor_line),
            panel("stat", "Headroom over the floor", [
                target(f"{up_at_gateway}\n- on() group_left\nmax(onecat:fleet_min_in_rotation)",
                       "{{gateway}}"),
            ], 4, 8, "Nodes in rotation at each gateway less the floor: at 0 the next drain "
               "for a fault that does not make answers wrong is refused.", decimals=0,
               steps=thresholds((None, "red"), (0, "orange"), (1, "green"))),
            panel("stat", "Lost GPUs", [
                target(f"sum(onecat_gpu_lost{{{NODE}}})", "lost"),
            ], 4, 8, "Cards the driver counts but NVML cannot reach (Xid 79).", decimals=0,
               steps=thresholds((None, "green"), (1, "red"))),
            panel("stat", "Cards that need service", [
                target(f"sum(onecat_gpu_service_required{{{NODE}}})", "service required"),
            ], 4, 8, "Cards whose repair ended in service required (table below).",
               decimals=0, steps=thresholds((None, "green"), (1, "red"))),
            panel("timeseries", "Fleet tokens/s by model", [
                target(f"sum by (model) (rate(vllm:generation_tokens_total{{{ENGINE}}}"
                       "[$__rate_interval]))", "{{model}} generated"),
                target(f"sum by (model) (rate(vllm:prompt_tokens_total{{{ENGINE}}}"
                       "[$__rate_interval]))", "{{model}} prompt"),
            ], 12, 8, "Tokens generated and prompt tokens processed per second, all nodes.",
               unit="short", minimum=0),
            panel("timeseries", "Time to first token p50/p90/p99 by model",
                  quantiles("vllm:time_to_first_token_seconds", "model"), 12, 8,
                  "From the engines' histograms (queue time and prefill included).",
                  unit="s", minimum=0),
            panel("timeseries", "Inter-token latency p50/p90/p99 by model",
                  quantiles("vllm:inter_token_latency_seconds", "model"), 12, 8,
                  unit="s", minimum=0),
            panel("timeseries", "Requests running and waiting by model", [
                target(f"sum by (model) (vllm:num_requests_running{{{ENGINE}}})",
                       "{{model}} running"),
                target(f"sum by (model) (vllm:num_requests_waiting{{{ENGINE}}})",
                       "{{model}} waiting"),
            ], 12, 8, "In the engines' own schedulers (the gateway's queue is below).",
               decimals=0, minimum=0),
        ]),
        ("Serving state and the watch", [
            panel("state-timeline", "Serving state at each gateway", [
                target(server_state, "{{gateway}} {{server}}"),
            ], 24, 8, "Each node's server state in onecat_nodes at each gateway.",
               mappings=mapping({code: (state, color) for state, code, color in SERVER_STATES})),
            panel("state-timeline", "Watch verdict", [
                target(f"max by (node) (onecat_node_verdict{{{NODE}}})", "{{node}}"),
            ], 12, 8, "The watch's verdict on the node's last look.",
               mappings=mapping({rank: (name, VERDICT_COLORS.get(name, "red"))
                                 for name, rank in sorted(ranks.items(), key=lambda i: i[1])})),
            panel("state-timeline", "Watch mode", [
                target(f"max by (node) (onecat_watch_mode{{{NODE}}})", "{{node}}"),
            ], 12, 8, "What the watch does with the node (onecat/watch/act.py).",
               mappings=mapping({-1: ("unknown", "text"), **{
                   index: (mode, MODE_COLORS.get(mode, "red"))
                   for index, mode in enumerate(modes)}})),
            panel("state-timeline", "Held in by the floor, drained for a deploy", [
                target(f"max by (node) (onecat_node_floor_held{{{NODE}}})",
                       "{{node}} held in by the floor"),
                target(f"max by (node) (onecat_node_deploy_drain{{{NODE}}})",
                       "{{node}} drained for a deploy"),
            ], 12, 8, "Floor held: the node serves with a fault because the fleet's floor "
               "keeps it in.", mappings=yes_no),
            panel("stat", "Since the watch's last complete look", [
                target(f"time() - max by (node) "
                       f"(onecat_watch_last_success_timestamp_seconds{{{NODE}}})", "{{node}}"),
            ], 12, 8, "The watch looks every minute: minutes here mean it is blind or stopped.",
               unit="s", steps=thresholds((None, "green"), (180, "orange"), (300, "red"))),
        ]),
        ("GPUs", [
            panel("timeseries", "GPU temperature per card", [
                target(f"max by (node, gpu) (onecat_gpu_temperature_celsius{{{NODE}}})",
                       "{{node}} GPU {{gpu}}"),
            ], 12, 8, unit="celsius",
               steps=thresholds((None, "green"), (80, "orange"), (85, "red"))),
            panel("stat", "Uncorrectable ECC errors per card", [
                target(f"max by (node, gpu) "
                       f"(onecat_gpu_ecc_uncorrected_volatile_total{{{NODE}}})",
                       "{{node}} GPU {{gpu}}"),
            ], 12, 8, "Double-bit errors since the driver loaded: any makes answers suspect.",
               decimals=0, steps=thresholds((None, "green"), (1, "red"))),
            panel("state-timeline", "Throttle reasons active per card", [
                target(f"max by (node, gpu, reason) (onecat_gpu_throttle_active{{{NODE}}}) > 0",
                       "{{node}} GPU {{gpu}} {{reason}}"),
            ], 12, 8, "Clock-event reasons active at the watch's looks (only those seen).",
               mappings=mapping({1: ("active", "orange")})),
            panel("table", "Xid errors in the range", [
                target(f"sum by (node, gpu, xid) "
                       f"(increase(onecat_gpu_xid_errors_total{{{NODE}}}[$__range])) > 0",
                       table=True),
            ], 12, 8, "Xid events the kernel logged in the dashboard's time range.",
               decimals=0, transformations=[{"id": "organize", "options": {
                   "excludeByName": {"Time": True},
                   "indexByName": {"node": 0, "gpu": 1, "xid": 2, "Value": 3},
                   "renameByName": {"Value": "events"}}}]),
            panel("table", "Cards that need service", [
                target("max by (node, gpu, serial, modelName, UUID, pci_bus_id) "
                       f"(onecat_gpu_service_required{{{NODE}}}) == 1", table=True),
            ], 24, 8, "Cards to replace: their repair ended in service required.",
               transformations=[{"id": "organize", "options": {
                   "excludeByName": {"Time": True, "Value": True},
                   "indexByName": {"node": 0, "gpu": 1, "serial": 2, "modelName": 3,
                                   "UUID": 4, "pci_bus_id": 5},
                   "renameByName": {}}}]),
        ]),
        ("Gateway", [
            panel("timeseries", "Gateway queue", [
                target(f"sum by (gateway, proxy) (haproxy_backend_current_queue{{{GATEWAY},"
                       f"{BACKENDS}}})", "{{gateway}} {{proxy}}"),
                target(f"sum by (gateway, server) (haproxy_server_current_queue{{{GATEWAY},"
                       f'{BACKENDS},server=~"$node"}})', "{{gateway}} {{server}}"),
            ], 12, 8, "Requests waiting at the gateway for a free slot on a node.",
               decimals=0, minimum=0),
            panel("timeseries", "5xx ratio at each gateway", [
                target(rate_ratio(responses_5xx, responses, "gateway"), "{{gateway}}"),
            ], 12, 8, "Share of the client frontend's responses that were 5xx.",
               unit="percentunit", minimum=0,
               steps=thresholds((None, "green"), (0.01, "orange"), (0.05, "red"))),
            panel("timeseries", "Responses/s by class", [
                target(f"sum by (gateway, code) (rate({responses}[$__rate_interval]))",
                       "{{gateway}} {{code}}"),
            ], 24, 8, unit="reqps", minimum=0),
        ]),
        ("Engine caches", [
            panel("timeseries", "KV cache use per node", [
                target(f"max by (node, model) (vllm:kv_cache_usage_perc{{{ENGINE}}})",
                       "{{node}} {{model}}"),
            ], 12, 8, "Share of the engine's KV-cache blocks in use.",
               unit="percentunit", minimum=0, maximum=1),
            panel("timeseries", "Prefix-cache hit rate by model", [
                target(rate_ratio(f"vllm:prefix_cache_hits_total{{{ENGINE}}}",
                                  f"vllm:prefix_cache_queries_total{{{ENGINE}}}", "model"),
                       "{{model}}"),
            ], 12, 8, "Prompt tokens found in the prefix cache over prompt tokens looked up.",
               unit="percentunit", minimum=0, maximum=1),
        ]),
    ]


def variable(name: str, label: str, metric: str, text: str) -> dict[str, Any]:
    query = f"label_values({metric}, {text})"
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "definition": query, "query": query, "refresh": 2, "regex": "", "sort": 1,
            "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [], "hide": 0, "skipUrlSync": False}


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for title, members in rows():
        panels.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        y += 1
        x, height = 0, 0
        for member in members:
            grid = member["gridPos"]
            if x + grid["w"] > 24:
                x, y, height = 0, y + height, 0
            grid.update(x=x, y=y)
            x, height = x + grid["w"], max(height, grid["h"])
        y += height
        panels += members
    for number, member in enumerate(panels, start=1):
        member["id"] = number
    return {
        "id": None,
        "uid": "onecat-fleet",
        "title": "onecat fleet",
        "description": "The onecat fleet: engines, nodes and their watch, GPUs, gateways "
                       "(generated by dashboards/build.py; do not edit by hand).",
        "tags": ["onecat"],
        "editable": True,
        "graphTooltip": 1,
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "refresh": "1m",
        "schemaVersion": 36,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "links": [],
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "regex": "", "refresh": 1, "hide": 0,
             "current": {}, "options": [], "skipUrlSync": False},
            variable("gateway", "Gateway", 'haproxy_server_status{job="onecat_gateway"}',
                     "gateway"),
            variable("node", "Node", 'onecat_watch_up{job="onecat_node"}', "node"),
            variable("model", "Model", 'vllm:num_requests_running{job="onecat_engine"}',
                     "model"),
        ]},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the JSON differs from what this script writes")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run python dashboards/build.py",
                  file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
