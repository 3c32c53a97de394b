"""The fleet's Prometheus rules, as one rule file: constants, recording rules and alerts.

Prometheus is told what onecat already did, never asked to decide it: the watch drains, repairs
and holds the floor on each node, and these alerts say when that is not enough for a person to
stay away. Every alert carries `severity` (page, ticket or warning) and two annotations:
`summary` and `runbook`, three sentences each: what it means, what onecat already did, what a
person does next.

Settings reach the rules only as numbers, checked durations, checked HAProxy proxy names, or
label values under a rule's literal `labels:`: Prometheus copies a recording rule's labels as
they are (no template, no PromQL), so a model name with `"`, `$1` or `{{` stays inert.

Scrape jobs the rules rely on (the monitoring stage's scrape config makes them): onecat_node
(node_exporter with the watch's textfile metrics, onecat/watch/metrics.py; label node),
onecat_engine (vLLM's /metrics; labels node, model, and vLLM's model_name), onecat_gateway
(HAProxy's Prometheus exporter; label gateway).

Docs: https://prometheus.io/docs/prometheus/latest/configuration/recording_rules/ and
https://prometheus.io/docs/prometheus/latest/configuration/alerting_rules/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import validate

# JSON, which YAML reads as it is: no value can add a key, a line or a document.
HEADER = "# Written by onecat's monitoring stage (roles/monitoring): edits are replaced.\n"

# Prometheus' duration syntax (common/model.ParseDuration): units largest first, each once.
DURATION = re.compile(r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?"
                      r"(?:[0-9]+s)?(?:[0-9]+ms)?")
DURATION_TERM = re.compile(r"([0-9]+)(ms|y|w|d|h|m|s)")
DURATION_UNIT_MS = {"y": 365 * 86_400_000, "w": 7 * 86_400_000, "d": 86_400_000,
                    "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
# Prometheus and Alertmanager hold a duration as int64 nanoseconds: a longer one (past about
# 292 years) is "duration out of range" to promtool, amtool and both daemons.
DURATION_MAX_NS = 2**63 - 1
# An haproxy.cfg proxy name (letters, digits, - _ . :): nothing that ends a PromQL string.
PROXY_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
MODEL_NAME_MAX = 256
THRESHOLD_MAX_S = 3600.0
FLEET_MAX = 10_000
# TTFT percentiles recorded per model; the alert reads p99.
TTFT_QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class RuleSettings:
    """What the rules know of the fleet; the defaults are a fresh one-gateway fleet's."""

    # Served model names (vLLM's model_name label) that get the default latency thresholds;
    # models named in the two threshold maps get theirs. A model in neither still alerts, at
    # the default (see _latency_alert).
    models: tuple[str, ...] = ()
    ttft_p99_seconds: Mapping[str, float] = field(default_factory=dict)
    queue_time_p99_seconds: Mapping[str, float] = field(default_factory=dict)
    ttft_p99_default_seconds: float = 5.0
    queue_time_p99_default_seconds: float = 2.0
    # The gateway's floor (gateway_fleet_min_in_rotation) and the nodes it should have.
    fleet_min_in_rotation: int = 1
    fleet_nodes_expected: int = 1
    # How long a node may stay out of rotation before a person hears of it: the repair
    # ladder's reset and burn-in fit in the default.
    out_of_rotation_for: str = "15m"
    # The watch's timer period (onecat-watch.timer), for its staleness alert.
    watch_interval_s: int = 60
    gateway_5xx_ratio: float = 0.05
    # Below this many requests per second a gateway's 5xx ratio says nothing (an idle
    # gateway's one failed request would be 100%).
    gateway_min_requests_per_s: float = 0.1
    kv_cache_full: float = 0.95
    # The gateway's client front end and its node back end in haproxy.cfg
    # (roles/gateway/templates/haproxy.cfg.j2); the monitoring stage passes the role's names.
    gateway_frontend: str = "onecat"
    gateway_backend: str = "onecat_nodes"


def refused(name: str, value: object, must: str) -> str:
    """One problem, worded as onecat.validate words them: the setting, its value, the fix."""
    return f"{name} {validate.shown(value)} is refused: set it to {must}"


def duration_fits(value: str) -> bool:
    """Whether a duration (a text DURATION matches) fits Prometheus's int64 nanoseconds."""
    terms = DURATION_TERM.findall(value)
    # More than 20 digits is out of range anyway (and int() refuses over 4300).
    return all(len(number) <= 20 for number, _ in terms) and sum(
        int(number) * DURATION_UNIT_MS[unit] for number, unit in terms) * 10**6 <= DURATION_MAX_NS


def duration_problem(name: str, value: object) -> str | None:
    """A positive Prometheus duration (15m, 1h30m, 90s), else what it must be."""
    if (isinstance(value, str) and value and DURATION.fullmatch(value)
            and any(ch in "123456789" for ch in value) and duration_fits(value)):
        return None
    return refused(name, value, "a Prometheus duration above zero like 90s, 15m or 1h30m "
                                "(at most 292 years)")


def model_problem(name: str, value: object) -> str | None:
    """A served model name: printable text. Quotes, `$` and braces are fine (they only ever
    land in a rule's literal labels); a newline or other control character is refused, since
    no vLLM model_name label can hold one and it would only hide a typo."""
    if (isinstance(value, str) and 0 < len(value) <= MODEL_NAME_MAX and value.isprintable()):
        return None
    return refused(name, value, f"a served model name of 1 to {MODEL_NAME_MAX} printable "
                                "characters (no newline or other control character)")


def _threshold_problems(name: str, thresholds: object) -> list[str]:
    if not isinstance(thresholds, Mapping):
        return [refused(name, thresholds, "a mapping of model name to seconds")]
    found: list[str] = []
    for model, seconds in thresholds.items():
        found += [p for p in [model_problem(f"{name} key", model)] if p]
        found += validate.problems(
            {f"{name}[{validate.shown(model)}]": ["number", seconds, 0.0, THRESHOLD_MAX_S]})
    return found


def problems(settings: RuleSettings) -> list[str]:
    """Every bad setting, one message each (empty when all are good)."""
    found = validate.problems({
        "fleet_min_in_rotation": ["count", settings.fleet_min_in_rotation, 0, FLEET_MAX],
        "fleet_nodes_expected": ["count", settings.fleet_nodes_expected, 1, FLEET_MAX],
        "watch_interval_s": ["count", settings.watch_interval_s, 1, 86_400],
        "gateway_5xx_ratio": ["number", settings.gateway_5xx_ratio, 0.0, 1.0],
        "gateway_min_requests_per_s": ["number", settings.gateway_min_requests_per_s, 0.0, 1e6],
        "kv_cache_full": ["number", settings.kv_cache_full, 0.0, 1.0],
        "ttft_p99_default_seconds":
            ["number", settings.ttft_p99_default_seconds, 0.0, THRESHOLD_MAX_S],
        "queue_time_p99_default_seconds":
            ["number", settings.queue_time_p99_default_seconds, 0.0, THRESHOLD_MAX_S],
    })
    found += [p for p in [duration_problem("out_of_rotation_for", settings.out_of_rotation_for)]
              if p]
    for name in ("gateway_frontend", "gateway_backend"):
        value = getattr(settings, name)
        if not (isinstance(value, str) and PROXY_NAME.fullmatch(value)):
            found.append(refused(name, value, "an haproxy.cfg proxy name: 1 to 64 letters, "
                                              "digits and - _ . :"))
    if isinstance(settings.models, str) or not isinstance(settings.models, Iterable):
        found.append(refused("models", settings.models, "a list of served model names"))
    else:
        found += [p for p in (model_problem("models", m) for m in settings.models) if p]
    found += _threshold_problems("ttft_p99_seconds", settings.ttft_p99_seconds)
    found += _threshold_problems("queue_time_p99_seconds", settings.queue_time_p99_seconds)
    low, high = (validate.as_int(settings.fleet_min_in_rotation),
                 validate.as_int(settings.fleet_nodes_expected))
    if low is not None and high is not None and low > high:
        found.append(refused("fleet_nodes_expected", settings.fleet_nodes_expected,
                             f"at least fleet_min_in_rotation ({low})"))
    return found


def _number(value: object) -> str:
    """A checked number as a PromQL literal: an int as it is, else a float's repr (0.05, 2.5,
    1e-07; PromQL reads all three)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return repr(float(value))  # type: ignore[arg-type]


def _count(value: object) -> int:
    number = validate.as_int(value)
    assert number is not None  # checked by problems()
    return number


def _models(settings: RuleSettings) -> list[str]:
    return sorted({*settings.models, *settings.ttft_p99_seconds,
                   *settings.queue_time_p99_seconds})


def _constant(record: str, value: object, labels: dict[str, str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"record": record, "expr": f"vector({_number(value)})"}
    if labels:
        rule["labels"] = labels
    return rule


def _constants(settings: RuleSettings) -> list[dict[str, Any]]:
    """Settings as series, so alerts compare with a join and a user's string never enters an
    expression: it is a literal label value of a recording rule."""
    rules = [_constant("onecat:fleet_min_in_rotation", _count(settings.fleet_min_in_rotation)),
             _constant("onecat:fleet_nodes_expected", _count(settings.fleet_nodes_expected))]
    for model in _models(settings):
        ttft = settings.ttft_p99_seconds.get(model, settings.ttft_p99_default_seconds)
        queue = settings.queue_time_p99_seconds.get(model, settings.queue_time_p99_default_seconds)
        rules += [_constant("onecat:ttft_p99_threshold_seconds", ttft, {"model_name": model}),
                  _constant("onecat:queue_time_p99_threshold_seconds", queue,
                            {"model_name": model})]
    return rules


def _quantile(record: str, quantile: float, bucket: str) -> dict[str, str]:
    # histogram_quantile over the fleet's summed bucket rates, `le` kept for it:
    # https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile
    # No traffic in 5m gives NaN, and NaN > threshold is false: an idle model stays silent.
    return {"record": record, "expr": f"histogram_quantile({quantile}, sum by (model_name, le) "
                                      f"(rate({bucket}[5m])))"}


def _gateway_recordings(settings: RuleSettings) -> list[dict[str, str]]:
    up = f'haproxy_server_status{{proxy="{settings.gateway_backend}",state="UP"}}'
    responses = f'haproxy_frontend_http_responses_total{{proxy="{settings.gateway_frontend}"'
    return [
        # HAProxy's exporter writes one series per state, 1 for the server's current one; the
        # server name is the inventory name, copied to `node` to join the watch's series.
        {"record": "onecat:node_up_at_gateway",
         "expr": f'label_replace(max by (gateway, server) ({up}), "node", "$1", "server", '
                 '"(.*)")'},
        # A sum, not count(... == 1): a gateway whose nodes are all down gives 0, not nothing.
        {"record": "onecat:nodes_up_at_gateway",
         "expr": "sum by (gateway) (onecat:node_up_at_gateway)"},
        {"record": "onecat:gateway_responses:rate5m",
         "expr": f"sum by (gateway) (rate({responses}}}[5m]))"},
        {"record": "onecat:gateway_5xx_ratio:rate5m",
         "expr": f'sum by (gateway) (rate({responses},code="5xx"}}[5m])) '
                 "/ onecat:gateway_responses:rate5m"},
    ]


def _engine_recordings() -> list[dict[str, str]]:
    rules = [
        # rate() over 1m needs two scrapes in it: the engine job's interval is 15s.
        {"record": "onecat:generation_tokens:rate1m",
         "expr": "sum by (model_name) (rate(vllm:generation_tokens_total[1m]))"},
        {"record": "onecat:fleet_generation_tokens:rate1m",
         "expr": "sum(rate(vllm:generation_tokens_total[1m]))"},
    ]
    rules += [_quantile(f"onecat:ttft_p{round(q * 100)}_seconds", q,
                        "vllm:time_to_first_token_seconds_bucket") for q in TTFT_QUANTILES]
    rules += [_quantile("onecat:queue_time_p99_seconds", 0.99,
                        "vllm:request_queue_time_seconds_bucket"),
              {"record": "onecat:prefix_cache_hit_ratio",
               "expr": "sum by (model_name) (rate(vllm:prefix_cache_hits_total[5m])) "
                       "/ sum by (model_name) (rate(vllm:prefix_cache_queries_total[5m]))"}]
    return rules


def _alert(name: str, expr: str, severity: str, summary: str, runbook: Iterable[str],
           for_: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity, **(labels or {})}
    rule["annotations"] = {"summary": summary, "runbook": " ".join(runbook)}
    return rule


def _node_alerts(settings: RuleSettings) -> list[dict[str, Any]]:
    """Alerts on a node's own series (the watch's, vLLM's, the scrape's): no recorded series."""
    return [
        _alert(
            "OnecatFloorHeld", "onecat_node_floor_held == 1", "warning",
            "{{ $labels.node }} serves with a fault: the fleet's floor keeps it in",
            ["The watch on {{ $labels.node }} would drain it, but fewer nodes than the floor "
             "would be left.",
             "onecat keeps it serving and repairs it once another node is back.",
             "Run `onecat status -i INVENTORY` and bring the held-out nodes back, or take it "
             "out anyway with `onecat repair -i INVENTORY --limit {{ $labels.node }} --all`."],
            for_="5m"),
        *_watch_alerts(settings),
        *_gpu_alerts(),
        *_engine_alerts(settings),
    ]


def _watch_alerts(settings: RuleSettings) -> list[dict[str, Any]]:
    # Three missed looks and a minute of slack: one slow look never fires it. Two rules, one
    # name: each cause has its own wait, and `reason` keeps them two alerts, not one merged.
    stale_s = 3 * _count(settings.watch_interval_s) + 60
    actions = ("Run `systemctl status onecat-watch.timer onecat-watch.service` and "
               "`journalctl -u onecat-watch.service` on {{ $labels.node }}, then "
               "`onecat status -i INVENTORY`.")
    return [
        _alert(
            "OnecatWatchStopped",
            f"time() - onecat_watch_last_success_timestamp_seconds > {stale_s}", "warning",
            "The watch on {{ $labels.node }} last completed a look "
            "{{ $value | humanizeDuration }} ago",
            ["Nobody looks at the GPUs of {{ $labels.node }}: a fault there is neither drained "
             "nor repaired.",
             "onecat did nothing, since the watch is what acts.", actions],
            for_="5m", labels={"reason": "stale"}),
        _alert(
            "OnecatWatchStopped", "onecat_watch_up == 0", "warning",
            "The watch on {{ $labels.node }} cannot read its node",
            ["The watch on {{ $labels.node }} runs but its looks fail, so it judges nothing.",
             "onecat leaves the node's rotation as it was.", actions],
            for_="10m", labels={"reason": "cannot_look"}),
    ]


def _gpu_alerts() -> list[dict[str, Any]]:
    return [
        _alert(
            "OnecatServiceRequired", "onecat_gpu_service_required == 1", "ticket",
            "GPU {{ $labels.gpu }} of {{ $labels.node }} (serial {{ $labels.serial }}) "
            "needs a person",
            ["The repair ladder could not bring GPU {{ $labels.gpu }} ({{ $labels.modelName }}, "
             "PCI {{ $labels.pci_bus_id }}) of {{ $labels.node }} back to health.",
             "onecat holds the node out of rotation and repairs it no more.",
             "Swap the card with serial {{ $labels.serial }}, then run "
             "`onecat repair -i INVENTORY --limit {{ $labels.node }} --release`."]),
        _alert(
            # The volatile count is since the driver loaded: a reset clears it, the
            # aggregate (lifetime) count would page forever.
            # A node the health stage held out has no watch: its check's reading stands in
            # (onecat/health/metrics.py) while no watch reports the node.
            "OnecatGpuUncorrectableEcc",
            "onecat_gpu_ecc_uncorrected_volatile_total > 0 or "
            "(onecat_health_gpu_ecc_uncorrected_volatile > 0 unless on(node) onecat_watch_up)",
            "page",
            "GPU {{ $labels.gpu }} of {{ $labels.node }} has had {{ $value }} uncorrectable ECC "
            "error(s) since the driver loaded",
            ["Answers computed on GPU {{ $labels.gpu }} ({{ $labels.UUID }}) of "
             "{{ $labels.node }} may be corrupt.",
             "The watch drains the node and the repair ladder resets the GPU to retire the bad "
             "page; a node the rollout's health check found so was never admitted.",
             "Follow it with `onecat status -i INVENTORY`; if the errors come back after the "
             "reset, swap the card."]),
        _alert(
            "OnecatGpuLost",
            "onecat_gpu_lost == 1 or (onecat_health_gpu_lost == 1 unless on(node) onecat_watch_up)",
            "page",
            "GPU {{ $labels.gpu }} of {{ $labels.node }} has fallen off the bus",
            ["The driver counts GPU {{ $labels.gpu }} (PCI {{ $labels.pci_bus_id }}) of "
             "{{ $labels.node }} but cannot reach it (Xid 79).",
             "The watch drains the node and the repair ladder tries a reset, then a reboot; a "
             "node the rollout's health check found so was never admitted.",
             "If `onecat status -i INVENTORY` still shows it lost, reseat or swap the card and "
             "run `onecat repair -i INVENTORY --limit {{ $labels.node }} --release`."]),
        _alert(
            # No watch on the node (the later stages skip a node the health stage held out):
            # nothing else would say why it never serves.
            "OnecatNodeHeldAtHealth", "onecat_health_verdict == 2 unless on(node) onecat_watch_up",
            "ticket",
            "{{ $labels.node }} failed the rollout's GPU health check and serves nothing",
            ["The health stage found an error on a GPU of {{ $labels.node }} (the rollout's "
             "summary and results/health/{{ $labels.node }}.json say which).",
             "onecat held the node out of the rollout: no engine, no watch, no traffic.",
             "Fix or swap the card, then run the rollout again; the node joins once its check "
             "passes."]),
    ]


def _fleet_alerts(settings: RuleSettings) -> list[dict[str, Any]]:
    """Alerts on the gateways' recorded series and the fleet's constants."""
    held_for = settings.out_of_rotation_for
    expected = _count(settings.fleet_nodes_expected)
    status = "Run `onecat status -i INVENTORY`"
    return [
        _alert(
            "OnecatNodeOutOfRotation",
            # A deploy drains a node on purpose (onecat_node_deploy_drain); that is no fault.
            "onecat:node_up_at_gateway == 0 unless on(node) onecat_node_deploy_drain == 1",
            "warning",
            f"{{{{ $labels.node }}}} has been out of rotation at gateway "
            f"{{{{ $labels.gateway }}}} for {held_for}",
            ["The gateway sends {{ $labels.node }} no requests and no deploy holds it out.",
             "The watch or the gateway's health check took it out; the repair ladder may be "
             "working on it.",
             "Run `onecat status -i INVENTORY`; if no repair is under way, run "
             "`onecat repair -i INVENTORY --limit {{ $labels.node }}`."],
            for_=held_for),
        _alert(
            # on() group_left: every gateway's count against the one constant series.
            "OnecatFleetAtFloor",
            "onecat:nodes_up_at_gateway <= on() group_left onecat:fleet_min_in_rotation", "page",
            "Gateway {{ $labels.gateway }} is down to {{ $value }} serving node(s), the "
            "fleet's floor",
            ["One node more out and gateway {{ $labels.gateway }} cannot serve its clients.",
             "onecat now keeps the remaining nodes in, faults and all, and refuses drains below "
             "the floor.",
             f"{status} and bring the held-out nodes back with "
             "`onecat repair -i INVENTORY --limit NODE`, or add nodes."],
            for_="2m"),
        _alert(
            "OnecatGatewayEmpty", "onecat:nodes_up_at_gateway == 0", "page",
            "Gateway {{ $labels.gateway }} has no node in rotation: its clients get 503",
            ["Every request to gateway {{ $labels.gateway }} fails.",
             "onecat keeps the floor's nodes in unless their answers would be wrong, so every "
             "node is down or unsafe.",
             f"{status} now and repair the nodes it names with "
             "`onecat repair -i INVENTORY --limit NODE`."],
            for_="1m"),
        _alert(
            "OnecatFewerServingNodes",
            "onecat:nodes_up_at_gateway < on() group_left onecat:fleet_nodes_expected", "ticket",
            f"Gateway {{{{ $labels.gateway }}}} has {{{{ $value }}}} of {expected} nodes in "
            "rotation",
            ["The fleet has served below its expected size for 30 minutes.",
             "The watches and the repair ladder have had their time with the missing nodes.",
             f"{status} and repair or replace the nodes it shows out."],
            for_="30m"),
        _alert(
            "OnecatGateway5xxRatio",
            f"onecat:gateway_5xx_ratio:rate5m > {_number(settings.gateway_5xx_ratio)} "
            "and on(gateway) onecat:gateway_responses:rate5m > "
            f"{_number(settings.gateway_min_requests_per_s)}",
            "warning",
            "Gateway {{ $labels.gateway }} answers {{ $value | humanizePercentage }} of "
            "requests with 5xx",
            ["Clients of gateway {{ $labels.gateway }} get server errors: nodes fail requests "
             "or none is free.",
             "The watches drain nodes whose engines fail their looks; errors from nodes that "
             "pass them go on.",
             f"{status} and read the gateway's log (`journalctl -u haproxy`) for the failing "
             "node."],
            for_="5m"),
    ]


def _latency_alert(name: str, record: str, default: object, what: str) -> dict[str, Any]:
    threshold = f"{record.removesuffix('_seconds')}_threshold_seconds"
    # A model without a threshold series falls back to the default: "unless" keeps the p99
    # series that have no threshold of their own. Parentheses for the reader (comparisons
    # bind before unless, unless before or:
    # https://prometheus.io/docs/prometheus/latest/querying/operators/#binary-operator-precedence).
    expr = (f"({record} > on(model_name) group_left {threshold}) or "
            f"({record} > {_number(default)} unless on(model_name) {threshold})")
    return _alert(
        name, expr, "warning",
        f"Model {{{{ $labels.model_name }}}} {what} {{{{ $value | humanizeDuration }}}} at p99",
        ["One request in a hundred to {{ $labels.model_name }} waits past its threshold.",
         "onecat does nothing about load: it drains only unhealthy nodes.",
         "Run `onecat status -i INVENTORY` for nodes out of rotation, then add nodes or lower "
         "the load (`onecat bench` measures a node's capacity)."],
        for_="10m")


def _engine_alerts(settings: RuleSettings) -> list[dict[str, Any]]:
    return [
        _alert(
            "OnecatKvCacheNearFull",
            f"vllm:kv_cache_usage_perc > {_number(settings.kv_cache_full)}", "warning",
            "The KV cache of {{ $labels.model_name }} on {{ $labels.node }} is "
            "{{ $value | humanizePercentage }} full",
            ["The engine on {{ $labels.node }} has no room for more sequences and queues or "
             "preempts requests.",
             "onecat does not change an engine's memory while it serves.",
             "Check the model's fit with `onecat plan`, then lower the concurrency per node or "
             "add nodes."],
            for_="10m"),
        _alert(
            "OnecatScrapeTargetDown", "up == 0", "warning",
            "Prometheus cannot scrape {{ $labels.job }} at {{ $labels.instance }}",
            ["No metrics come from {{ $labels.instance }} ({{ $labels.job }}), so alerts on "
             "them cannot fire.",
             "onecat does not act on scrapes; Alertmanager holds back a node's other alerts "
             "while its node_exporter is down.",
             "Check that the host is up and its exporter runs, then run "
             "`onecat status -i INVENTORY`."],
            for_="5m"),
    ]


def render_rules(settings: RuleSettings) -> str:
    """The rule file's YAML text; InputError (a ValueError) naming every bad setting."""
    found = problems(settings)
    if found:
        raise validate.InputError("; ".join(found))
    latency = [
        _latency_alert("OnecatTtftP99High", "onecat:ttft_p99_seconds",
                       settings.ttft_p99_default_seconds, "takes to a first token:"),
        _latency_alert("OnecatQueueTimeP99High", "onecat:queue_time_p99_seconds",
                       settings.queue_time_p99_default_seconds, "waits in the queue:")]
    # Rules in a group run in order at one evaluation time, groups side by side: the alerts
    # that read constants and recorded series sit after them in their group, so they never
    # see the previous evaluation's values (a lag of one interval, differing run to run).
    # https://prometheus.io/docs/prometheus/latest/configuration/recording_rules/
    groups = [
        {"name": "onecat_fleet",
         "rules": _constants(settings) + _gateway_recordings(settings) + _engine_recordings()
         + _fleet_alerts(settings) + latency},
        {"name": "onecat_nodes", "rules": _node_alerts(settings)},
    ]
    return HEADER + json.dumps({"groups": groups}, indent=2, ensure_ascii=False) + "\n"
