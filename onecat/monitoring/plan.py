"""Everything the monitoring host's files need, from the inventory and each node's state.

The monitoring_config module (library/) hands its parameters here and returns the result:
prometheus.yml, the rule file, alertmanager.yml, the key files to write, the daemons' flags
and where to reach them. Raises ValueError naming the value and the fix; writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .. import validate
from ..repair.floor import count as floor_count
from ..timespan import timespan_seconds
from .alertmanager import AlertmanagerSettings, has_receiver, render_alertmanager
from .rules import RuleSettings, render_rules
from .rules import problems as rule_problems
from .scrape import KEY_DIR_DEFAULT, Gateway, Node, ScrapeSettings, key_file
from .scrape import render as render_scrape
from .service import alertmanager_args, prometheus_args, url

LOOPBACK = ("127.0.0.1", "::1", "[::1]", "localhost")
THRESHOLDS = 'a mapping of served model name to seconds, e.g. {"qwen25-7b-nvfp4": 4}'


def _int(settings: Mapping[str, Any], name: str, default: int) -> int:
    value = settings.get(name, default)
    number = validate.as_int(value)
    if number is None:
        raise ValueError(f"monitoring_{name} {validate.shown(value)} is refused: a whole number")
    return number


def _number(settings: Mapping[str, Any], name: str, default: float) -> float:
    value = settings.get(name, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"monitoring_{name} {validate.shown(value)} is refused: a number") \
            from None


def _mapping(settings: Mapping[str, Any], name: str, must: str) -> dict[str, Any]:
    value = settings.get(name) or {}
    if not isinstance(value, Mapping):
        raise ValueError(f"monitoring_{name} {validate.shown(value)} is refused: set it to {must}")
    return dict(value)


def _watch_interval(settings: Mapping[str, Any]) -> int:
    value = str(settings.get("watch_interval") or "60s")
    try:
        seconds = timespan_seconds(value)
    except ValueError:
        seconds = math.nan
    # A span of 400 digits is a float's infinity: round() would raise OverflowError.
    if not math.isfinite(seconds):
        raise ValueError(f"monitoring_watch_interval {validate.shown(value)} is refused: a "
                         "systemd time span above zero like 60s, 5min or 1h (the watch's "
                         "onecat_watch_interval)")
    return max(1, round(seconds))


def _own_host(address: str) -> str:
    """The host part of where the monitoring host reaches a daemon listening at `address`."""
    problem = validate.bind_address(address)
    if problem:
        raise ValueError(f"monitoring listen address {validate.shown(address)} is refused: "
                         f"{problem}")
    return url(address, 1).removeprefix("http://").rsplit(":", 1)[0].strip("[]")


def _keyed(value: Any) -> bool:
    """The key's length (or a bool): whether the engine's /metrics needs a key."""
    number = validate.as_int(value)
    return bool(number) if number is not None else value is True


def _nodes(names: Sequence[str], states: Sequence[Any], keyed: Sequence[Any]) -> list[Node]:
    if not len(names) == len(states) == len(keyed):
        raise ValueError("node_names, node_states and node_keyed differ in length")
    nodes = []
    for name, state, key in zip(names, states, keyed, strict=True):
        if not isinstance(state, Mapping):
            # Not reached in this run (the play ran before, or the host is down): its
            # exporter is still a target, at its inventory name, so the alert says it is down.
            nodes.append(Node(name, name))
            continue
        nodes.append(Node(
            name, str(state.get("address") or name),
            exporter_port=validate.as_int(state.get("exporter_port")) or 9100,
            engine_port=validate.as_int(state.get("engine_port")) or 0,
            model=str(state.get("model") or ""), engine_key=_keyed(key)))
    return nodes


def _gateways(monitor: str, names: Sequence[str], addresses: Sequence[str],
              binds: Sequence[str], port: int) -> list[Gateway]:
    gateways = []
    for i, name in enumerate(names):
        bind = str(binds[i] if i < len(binds) else "127.0.0.1").strip() or "127.0.0.1"
        # str(name): a name that is no text is refused by the scrape config, not here.
        address = str(addresses[i] if i < len(addresses) else "").strip() or str(name)
        if name == monitor:
            # Its own gateway: over loopback when the exporter binds it or every address.
            target = "127.0.0.1" if bind in (*LOOPBACK, *validate.WILDCARD_BIND) else bind
        elif bind in LOOPBACK:
            raise ValueError(
                f"gateway {validate.shown(name)}'s HAProxy exporter listens on {bind} only, which "
                f"the monitoring host {validate.shown(monitor)} cannot reach: set "
                "onecat_gateway_admin_bind_address on that gateway to an address the monitoring "
                "host reaches (guard the port in its firewall), or put the gateway in group "
                "monitoring")
        else:
            target = address if bind in validate.WILDCARD_BIND else bind
        gateways.append(Gateway(name, validate.bare_address(target), port))
    return gateways


def plan(*, monitor: str, node_names: Sequence[str], node_states: Sequence[Any],
         node_keyed: Sequence[Any], gateway_names: Sequence[str] = (),
         gateway_addresses: Sequence[str] = (), gateway_admin_binds: Sequence[str] = (),
         gateway_admin_port: int = 8404, settings: Mapping[str, Any]) -> dict[str, Any]:
    nodes = _nodes(node_names, node_states, node_keyed)
    gateways = _gateways(monitor, gateway_names, gateway_addresses, gateway_admin_binds,
                         gateway_admin_port)
    prometheus_port = _int(settings, "prometheus_port", 9090)
    alertmanager_port = _int(settings, "alertmanager_port", 9093)
    rules_file = str(settings.get("rules_file") or "/etc/prometheus/onecat.rules.yml")
    prometheus_address = str(settings.get("prometheus_listen_address") or "127.0.0.1")
    alertmanager_address = str(settings.get("alertmanager_listen_address") or "127.0.0.1")
    scrape_settings = ScrapeSettings(
        scrape_interval=str(settings.get("scrape_interval") or "15s"),
        evaluation_interval=str(settings.get("evaluation_interval") or "15s"),
        prometheus_port=prometheus_port, alertmanager_port=alertmanager_port,
        prometheus_host=_own_host(prometheus_address),
        alertmanager_host=_own_host(alertmanager_address),
        rule_files=(rules_file,), key_dir=str(settings.get("key_dir") or KEY_DIR_DEFAULT),
        monitor=monitor)
    prometheus_config = render_scrape(nodes, gateways, scrape_settings)
    floor_spec = str(settings.get("fleet_min_in_rotation", "1"))
    problem = validate.floor(floor_spec)
    if problem:
        raise ValueError(f"monitoring_fleet_min_in_rotation {validate.shown(floor_spec)} is "
                         f"refused: {problem}")
    rule_settings = RuleSettings(
        models=tuple(sorted({node.model for node in nodes if node.engine_port and node.model})),
        ttft_p99_seconds=_mapping(settings, "ttft_p99_seconds", THRESHOLDS),
        queue_time_p99_seconds=_mapping(settings, "queue_time_p99_seconds", THRESHOLDS),
        ttft_p99_default_seconds=_number(settings, "ttft_p99_default_seconds", 10.0),
        queue_time_p99_default_seconds=_number(settings, "queue_time_p99_default_seconds", 30.0),
        fleet_min_in_rotation=floor_count(floor_spec, len(nodes)),
        fleet_nodes_expected=len(nodes),
        out_of_rotation_for=str(settings.get("out_of_rotation_for") or "15m"),
        watch_interval_s=_watch_interval(settings),
        gateway_5xx_ratio=_number(settings, "gateway_5xx_ratio", 0.05),
        kv_cache_full=_number(settings, "kv_cache_full", 0.95))
    found = rule_problems(rule_settings)
    if found:
        raise ValueError("; ".join(found))
    urls = settings.get("webhook_urls") or ()
    if isinstance(urls, (str, bytes)) or not isinstance(urls, Sequence):
        raise ValueError(f"monitoring_webhook_urls {validate.shown(urls)} is refused: set it to "
                         'a list of URLs, e.g. ["https://chat.example.com/hooks/onecat"] (with '
                         "-e, as JSON: -e '{\"monitoring_webhook_urls\": [\"https://...\"]}')")
    routes = AlertmanagerSettings(
        webhook_urls=tuple(str(u) for u in urls),
        email=_mapping(settings, "email", "a mapping of its settings, or {} for none"),
        slack=_mapping(settings, "slack", "a mapping of its settings, or {} for none"),
        group_wait=str(settings.get("group_wait") or "30s"),
        group_interval=str(settings.get("group_interval") or "5m"),
        repeat_interval=str(settings.get("repeat_interval") or "4h"))
    return {
        "prometheus_config": prometheus_config,
        "rules": render_rules(rule_settings),
        "alertmanager_config": render_alertmanager(routes),
        "receiver": has_receiver(routes),
        "key_files": {node.name: key_file(scrape_settings, node)
                      for node in nodes if node.engine_port and node.engine_key},
        "prometheus_args": prometheus_args(
            prometheus_address, prometheus_port, str(settings.get("retention_time") or "15d"),
            str(settings.get("retention_size") or "10GB")),
        "alertmanager_args": alertmanager_args(alertmanager_address, alertmanager_port),
        "prometheus_url": url(prometheus_address, prometheus_port),
        "alertmanager_url": url(alertmanager_address, alertmanager_port),
    }
