"""Prometheus's scrape configuration for a fleet, from the inventory and each node's state.

One job per kind of exporter, each target with the labels a person filters by:

- ``onecat_node``: node_exporter on every node (the watch's verdicts and GPU readings arrive
  through its textfile collector, onecat/watch/metrics.py); label ``node``.
- ``onecat_engine``: the engine's own ``/metrics`` (vLLM's TTFT, queue, KV use, prefix cache)
  on the address and port the gateway uses, with the node's scrapers' key read from a file
  (``credentials_file``: never in the configuration, never on a command line); labels
  ``node`` and ``model``.
- ``onecat_gateway``: HAProxy's built-in exporter on each gateway host; label ``gateway``.
- ``prometheus`` and ``alertmanager``: the monitoring host's own.

``node`` is the node's name as HAProxy's server is named (roles/gateway: every character
outside ``[A-Za-z0-9_.:-]`` becomes ``_``), so a node's series join the gateway's
``haproxy_server_status{server=...}`` on one value. Every value is checked whole
(onecat/validate.py) and the file is written as JSON, which YAML reads as it is: no value can
add a key, a line or a document, and a ``{{`` stays text (Prometheus templates no label of a
scrape configuration).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import validate
from .rules import duration_problem

SERVER_NAME_REFUSED = re.compile(r"[^A-Za-z0-9_.:-]")
LABEL_VALUE_MAX = 256
# A node's key file is named after its server name plus ".key": a file name has 255 bytes.
KEY_NAME_MAX = 255 - len(".key")
KEY_DIR_DEFAULT = "/etc/prometheus/onecat-keys"


@dataclass(frozen=True)
class Node:
    """A node to scrape: its inventory name, the address the monitoring host reaches it at,
    node_exporter's port, and its engine (port 0: not scraped, e.g. not serving yet)."""

    name: str
    address: str
    exporter_port: int = 9100
    engine_port: int = 0
    model: str = ""
    # The engine's /metrics needs the scrapers' key: True when the node has one.
    engine_key: bool = False


@dataclass(frozen=True)
class Gateway:
    name: str
    address: str
    port: int = 8404


@dataclass(frozen=True)
class ScrapeSettings:
    scrape_interval: str = "15s"
    evaluation_interval: str = "15s"
    prometheus_port: int = 9090
    alertmanager_port: int = 9093
    # Where the monitoring host reaches its own two daemons (their listen address; loopback for
    # a wildcard): "" is localhost at the port above.
    prometheus_host: str = ""
    alertmanager_host: str = ""
    rule_files: tuple[str, ...] = ("/etc/prometheus/onecat.rules.yml",)
    key_dir: str = KEY_DIR_DEFAULT
    # The monitoring host's name: an external label on every alert it sends.
    monitor: str = "onecat"
    extra_labels: Mapping[str, str] = field(default_factory=dict)


def server_name(name: str) -> str:
    """The node's name as roles/gateway names its HAProxy server."""
    return SERVER_NAME_REFUSED.sub("_", name)


def key_file(settings: ScrapeSettings, node: Node) -> str:
    """Where the monitoring host keeps the node's scrapers' key (one file per node)."""
    return f"{settings.key_dir}/{server_name(node.name)}.key"


def _label_value(what: str, value: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} is empty: give every node and gateway a name")
    # Printable: no control character (a newline would split the alert's text), no line
    # separator YAML reads as a break (U+0085, U+2028), no lone surrogate.
    if not value.isprintable() or len(value) > LABEL_VALUE_MAX:
        raise ValueError(f"{what} {validate.shown(value)} is refused: a label value is "
                         f"printable text (no newline or other control character) of at most "
                         f"{LABEL_VALUE_MAX} characters; rename it in the inventory")
    return value


def _target(what: str, address: str, port: int) -> str:
    problem = validate.address(address) or validate.port(port)
    if problem:
        raise ValueError(f"{what}: {validate.shown(address)}:{validate.shown(port)} is refused: "
                         f"{problem}; set ansible_host (or onecat_monitoring_address) to the "
                         "address the monitoring host reaches it at")
    bare = validate.bare_address(address)
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"


def _check(settings: ScrapeSettings) -> None:
    for name in ("scrape_interval", "evaluation_interval"):
        problem = duration_problem(f"monitoring_{name}", getattr(settings, name))
        if problem:
            raise ValueError(problem)
    for name in ("prometheus_port", "alertmanager_port"):
        problem = validate.port(getattr(settings, name))
        if problem:
            raise ValueError(f"monitoring {name}: {problem}")
    for path in (*settings.rule_files, settings.key_dir):
        problem = validate.absolute_path(path)
        if problem:
            raise ValueError(f"monitoring path {validate.shown(path)} is refused: {problem}")
    for name, value in settings.extra_labels.items():
        if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]{0,127}", str(name)) or name.startswith("__"):
            raise ValueError(f"monitoring label name {validate.shown(name)} is refused: letters, "
                             "digits and _, not starting with a digit or __")
        _label_value(f"monitoring label {name}", str(value))


def _unique(kind: str, names: Sequence[str]) -> None:
    seen: dict[str, str] = {}
    for name in names:
        label = server_name(name)
        if seen.get(label) == name:
            # Twice the same engine job (one per node): Prometheus refuses the file.
            raise ValueError(f"{kind} {json.dumps(name)} is listed twice: list each {kind} once")
        if label in seen:
            raise ValueError(f"{kind}s {json.dumps(seen[label])} and {json.dumps(name)} would "
                             f"both be labelled {json.dumps(label)} (HAProxy's server name): "
                             "rename one in the inventory")
        seen[label] = name


def _own(host: str, port: int) -> str:
    return _target("the monitoring host", host, port) if host else f"localhost:{port}"


def scrape_config(nodes: Sequence[Node], gateways: Sequence[Gateway],
                  settings: ScrapeSettings | None = None) -> dict[str, Any]:
    """The prometheus.yml document. Raises ValueError naming the host and the value."""
    settings = settings or ScrapeSettings()
    _check(settings)
    # Each name checked before its server name is made (a name that is no text is refused).
    _unique("node", [_label_value("node name", node.name) for node in nodes])
    _unique("gateway", [_label_value("gateway name", gateway.name) for gateway in gateways])
    node_targets, engine_targets, gateway_targets = [], [], []
    for node in nodes:
        name = _label_value("node name", node.name)
        node_targets.append({
            "targets": [_target(f"node {name}", node.address, node.exporter_port)],
            "labels": {"node": server_name(name)}})
        if node.engine_port and node.engine_key and len(server_name(name)) > KEY_NAME_MAX:
            raise ValueError(f"node name {validate.shown(name)} is refused: its scrapers' key "
                             f"file is named after it, and a file name has at most "
                             f"{KEY_NAME_MAX} characters before .key; rename it in the inventory")
        if node.engine_port:
            model = _label_value(f"node {name}'s model", node.model or "unknown")
            engine_targets.append({
                "targets": [_target(f"node {name}'s engine", node.address, node.engine_port)],
                "labels": {"node": server_name(name), "model": model}})
    for gateway in gateways:
        name = _label_value("gateway name", gateway.name)
        gateway_targets.append({
            "targets": [_target(f"gateway {name}", gateway.address, gateway.port)],
            "labels": {"gateway": server_name(name)}})
    jobs: list[dict[str, Any]] = [
        {"job_name": "prometheus",
         "static_configs": [{"targets": [_own(settings.prometheus_host,
                                               settings.prometheus_port)]}]},
        {"job_name": "alertmanager",
         "static_configs": [{"targets": [_own(settings.alertmanager_host,
                                               settings.alertmanager_port)]}]},
        {"job_name": "onecat_node", "static_configs": node_targets},
        {"job_name": "onecat_gateway", "static_configs": gateway_targets},
    ]
    # One job per engine: each node's key is its own file (a job has one authorization).
    for node, group in zip([n for n in nodes if n.engine_port], engine_targets, strict=True):
        job: dict[str, Any] = {"job_name": f"onecat_engine_{server_name(node.name)}",
                               "static_configs": [group],
                               "relabel_configs": [{"target_label": "job",
                                                    "replacement": "onecat_engine"}]}
        if node.engine_key:
            job["authorization"] = {"type": "Bearer",
                                    "credentials_file": key_file(settings, node)}
        jobs.append(job)
    labels = {"monitor": _label_value("monitoring host name", settings.monitor),
              **{str(k): str(v) for k, v in settings.extra_labels.items()}}
    return {
        "global": {"scrape_interval": settings.scrape_interval,
                   "evaluation_interval": settings.evaluation_interval,
                   "external_labels": labels},
        "alerting": {"alertmanagers": [{"static_configs": [
            {"targets": [_own(settings.alertmanager_host, settings.alertmanager_port)]}]}]},
        "rule_files": list(settings.rule_files),
        "scrape_configs": jobs,
    }


def render(nodes: Sequence[Node], gateways: Sequence[Gateway],
           settings: ScrapeSettings | None = None) -> str:
    """prometheus.yml's text: JSON (YAML 1.2 reads it as it is), with a header comment."""
    document = scrape_config(nodes, gateways, settings)
    # ensure_ascii=False: JSON escapes a character past U+FFFF as two surrogates, which YAML
    # (Go's yaml.v2) refuses; every label value is printable, so the text is plain UTF-8.
    return ("# Written by onecat's monitoring stage (roles/monitoring): edits are replaced.\n"
            + json.dumps(document, indent=2, ensure_ascii=False) + "\n")
