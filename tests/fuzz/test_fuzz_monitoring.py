"""Fuzz what reaches the monitoring host's three files: the inventory's node, gateway and
monitoring-host names, each node's state (node.json's address, ports and model: written on the
nodes, untrusted here), the gateways' addresses and admin binds, and the monitoring_* settings.

Contract of onecat.monitoring.plan.plan, for any such input (hostile names with newlines,
quotes, `{{ $labels.node }}`, `$1`, U+2028 or U+0085, lone surrogates, very long strings; a
list, a dict, None, a bool, NaN or a huge int where a string or a number belongs; Prometheus
durations past its ~292 years, webhook URLs Go's url.Parse refuses, floor specs, listen
addresses):
- it raises ValueError, whose message is one printable line (no newline) under 2000
  characters, and never another exception (TypeError, KeyError, OverflowError...); or
- it returns files that the real tools read (Debian's promtool and amtool, the builds the
  monitoring stage installs): `promtool check config` on prometheus.yml with the rule file and
  every key file it names written, `promtool check rules` on the rule file, `amtool
  check-config` on alertmanager.yml; and every node, gateway, monitoring-host and model name
  that went in comes out as data only: YAML reads each file as the JSON it is, each job's
  labels are exactly the names that went in (`node` and `gateway` after HAProxy's server-name
  rewrite), the models reach the rules only as the `model_name` label of their threshold
  records (the rest of the rule file is what a placeholder model gives), and the daemons'
  flags are single shell-free words.

The top-level containers follow the monitoring_config module's argument_spec (lists and a
settings dict); what is inside them can be anything. key_dir and rules_file point into a
temporary folder (so promtool can read what they name) and are not fuzzed.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzzkit import JSON, examples, fuzz, mutated
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_tools import tool

from onecat import validate
from onecat.monitoring.plan import plan

# Values --------------------------------------------------------------------------------------

HOSTILE = [
    "a\nb", "a\r\nb", 'a"b', "a'b", "{{ $labels.node }}", "{{ .Status }}", "$1", "${1}",
    "a\u2028b", "a\u0085b", "a\u2029b", "\ufeffa", "a\u200bb", "a\xa0b", "\ud800", "x\udfff",
    "\U0001f999-7b", "é", "\x1b[2J", "a\0b", "a\tb", " ", "", "a b", "a/b", "..", "-",
    "# c", "a: b", "- x", "&a", "*a", "!!python/object:os.system", "}}", "\\", "a" * 251,
    "a" * 252, "a" * 256, "a" * 257, "x" * 3000,
]
# Names and models Prometheus takes as label values: they must come out as data, unchanged.
DATA = st.sampled_from(["fleet-a", "fleet-b", "gpu-node-03", "node_1", "fleet.a", "fleet:a",
                        "qwen25-7b-nvfp4", "meta-llama/Llama-3.1-8B-Instruct",
                        "{{ $labels.node }}", "{{ .Status }}", "$1", "${1}", 'a"b', "a'b",
                        "a b", "a/b", "..", "-", "# c", "a: b", "- x", "&a", "*a", "}}", "\\",
                        "!!python/object:os.system", "\U0001f999-7b", "é", "a" * 251])
NAME = DATA | DATA | DATA | st.sampled_from(HOSTILE) | st.text(max_size=12) | JSON
MODEL = NAME
ADDRESS = (st.sampled_from(["10.0.0.11", "172.29.86.12", "::1", "[::1]", "fe80::1%eth0",
                            "fleet-a", "fleet-a.example.com", "", "a b", "10.0.0.1:80",
                            "1.2.3.4.5", "[10.0.0.1]", "a\nb", "-a", "a" * 254])
           | st.text(max_size=12) | JSON)
PORT = (st.sampled_from([9100, 8000, "8000", 0, 1, 65535, 65536, -1, "08000", "", "nan",
                         2**70, True, None, 1.5, "9100\n"])
        | st.integers() | JSON)
BIND = (st.sampled_from(["127.0.0.1", "::1", "[::1]", "localhost", "*", "0.0.0.0", "::",
                         "[::]", "10.0.0.5", "fe80::1", "[fe80::1]", "fe80::1%eth0", "",
                         " 10.0.0.5", "10.0.0.5:80", "a b", "10.0.0.5\n"])
        | st.text(max_size=8) | JSON)
KEYED = st.sampled_from([0, 43, True, False, None, "43", "0", "x", 1.5, 2**70]) | JSON
UNITS = st.sampled_from(["y", "w", "d", "h", "m", "s", "ms", "", "S", "us", "min"])
DURATION = (st.sampled_from(["15s", "1m", "1h30m", "5ms", "30s", "0s", "0", "", "15", "15S",
                             "1m1m", " 15s", "15s\n", "-1s", "1.5s", "292y", "293y",
                             "999999y", "9" * 30 + "s", "106751d", "106752d",
                             "9223372036854ms", "9223372036855ms", "1y1w1d1h1m1s1ms"])
            | st.lists(st.tuples(st.integers(0, 10**15) | st.sampled_from([0, 1, 10**20]),
                                 UNITS), min_size=1, max_size=3)
            .map(lambda parts: "".join(f"{n}{u}" for n, u in parts))
            | JSON)
SPAN = (st.sampled_from(["60s", "1h", "5min", "1h 30min", "0", "0s", "9" * 400, "9" * 400 + "s",
                         "1e3", "-1s", "86400", "86401", "0.1us", "1 2 3", "\n"]) | JSON)
FLOOR = (st.sampled_from(["1", "0", "2", "50%", "100%", "100.5%", "25.5%", "0%", " 2 ", "-1",
                          "1e3", "999999", "1000000", "%", 2, 0, -1, 2**70])
         | JSON)
NUMBER = (st.sampled_from([0, 0.5, 1, 10, 3600, 3601, -1, "2.5", "1e3", float("nan"),
                           float("inf"), 1e-300, 2**70, True, None, "x", "0.95"])
          | st.floats() | JSON)
URL = (st.sampled_from([
    "http://127.0.0.1:9099/onecat", "https://chat.example.com/hooks/onecat?x=1&y=%20#top",
    "https://user:p%40ss@hooks.example.com:8443/a/b", "http://[::1]:9099/x", "http://[fe80::1%25eth0]/",
    "http://a/%zz", "http://a/%", "http://a^b/", "http://a\\b/", "http://a^b@a/",
    "http://\U0001f999.com/", "http://a/\U0001f999", "http://a:+1/", "http://a:1_0/",
    "http://a:99999/", "http://a:/", "http://a:0/", "http://[zz]/", "http://[1.2.3.4]/",
    "http://a[b]/", "http://a b/", "http://a/\n", "ftp://a/", "http:///a", "http:a", "//a/",
    "HTTP://A/", "http://a/{{ .Status }}", "http://a/?%zz", "http://a/#%zz", "<secret>",
    "http://a" + "/x" * 1100])
    | st.builds(lambda scheme, rest: scheme + rest,
                st.sampled_from(["http://", "https://", "http://a/", "http://u@", "http://[::1]"]),
                st.text(max_size=12) | st.text(st.characters(codec="ascii"), max_size=12))
    | JSON)
GOOD_EMAIL = {"to": "ops@example.com", "from": "onecat@example.com",
              "smarthost": "smtp.example.com:587", "auth_username": "onecat",
              "auth_password_file": "/etc/prometheus/smtp.pass"}
GOOD_SLACK = {"api_url_file": "/etc/prometheus/slack.url", "channel": "#onecat-alerts"}
SMARTHOST = (st.sampled_from(["smtp.example.com:587", "::1:25", "[::1]:25", "10.0.0.1:25",
                             "[10.0.0.1]:25", "[a]:25", "a:", ":25", "a:b:25", "a:0",
                             "a:99999", "a: 25", "[::1]", "a"])
             | st.text(st.characters(codec="ascii"), max_size=10).map(lambda h: f"{h}:25"))
EMAIL = (st.just(GOOD_EMAIL) | mutated(GOOD_EMAIL, max_edits=2)
         | st.builds(lambda host: {**GOOD_EMAIL, "smarthost": host}, SMARTHOST)
         | st.sampled_from([{}, {"to": ""}, {"auth_password": "x"}]) | JSON)
SLACK = (st.just(GOOD_SLACK) | mutated(GOOD_SLACK, max_edits=2)
         | st.sampled_from([{}, {"api_url": "https://hooks.slack.com/x"}]) | JSON)
THRESHOLDS = (st.dictionaries(MODEL.filter(lambda m: isinstance(m, str)), NUMBER, max_size=3)
              | JSON)
SETTING = {
    "scrape_interval": DURATION, "evaluation_interval": DURATION,
    "out_of_rotation_for": DURATION, "group_wait": DURATION, "group_interval": DURATION,
    "repeat_interval": DURATION, "retention_time": DURATION,
    "retention_size": st.sampled_from(["10GB", "500MB", "0B", "999999999EB", "10gb", "10 GB",
                                       ""]) | JSON,
    "watch_interval": SPAN, "prometheus_port": PORT, "alertmanager_port": PORT,
    "prometheus_listen_address": BIND, "alertmanager_listen_address": BIND,
    "fleet_min_in_rotation": FLOOR, "ttft_p99_seconds": THRESHOLDS,
    "queue_time_p99_seconds": THRESHOLDS, "ttft_p99_default_seconds": NUMBER,
    "queue_time_p99_default_seconds": NUMBER, "gateway_5xx_ratio": NUMBER,
    "kv_cache_full": NUMBER, "webhook_urls": st.lists(URL, max_size=3) | URL | JSON,
    "email": EMAIL, "slack": SLACK,
}
GOOD_SETTINGS = {"watch_interval": "1h", "webhook_urls": ["http://127.0.0.1:9099/onecat"],
                 "fleet_min_in_rotation": "50%", "ttft_p99_seconds": {"qwen25-7b-nvfp4": 4},
                 "email": GOOD_EMAIL, "slack": GOOD_SLACK}
SETTINGS = (st.dictionaries(st.sampled_from(sorted(SETTING)), st.none(), max_size=4)
            .flatmap(lambda keys: st.fixed_dictionaries(
                {**{k: st.just(v) for k, v in GOOD_SETTINGS.items()},
                 **{k: SETTING[k] for k in keys}}))
            | mutated(GOOD_SETTINGS, max_edits=3) | st.dictionaries(st.text(max_size=8), JSON))
GOOD_STATE = {"address": "172.29.86.11", "exporter_port": 9100, "engine_port": 8000,
              "model": "qwen25-7b-nvfp4"}
STATE = (st.fixed_dictionaries({"address": ADDRESS, "exporter_port": PORT,
                                 "engine_port": PORT, "model": MODEL})
         | st.fixed_dictionaries({"address": st.sampled_from(["10.0.0.11", "::1", "fleet-a"]),
                                  "engine_port": st.sampled_from([8000, 0]), "model": MODEL})
         | mutated(GOOD_STATE, max_edits=2) | st.none() | JSON)
# A node the monitoring host reaches, serving a hostile model name or none.
REACHABLE = st.fixed_dictionaries({
    "address": st.sampled_from(["10.0.0.11", "172.29.86.12", "::1", "fe80::1", "node-1"]),
    "exporter_port": st.sampled_from([9100, "9100", None]),
    "engine_port": st.sampled_from([8000, "8001", 0, None]),
    "model": DATA | st.sampled_from(["", None])})


@st.composite
def FLEET(draw: st.DrawFn, hostile: bool) -> dict[str, Any]:
    """plan's keyword arguments. Not hostile: lists of one length, names and models that are
    label values, addresses the monitoring host reaches (so every name reaches the files).
    Hostile: anything in the lists, which may differ in length."""
    name = NAME if hostile else DATA
    size = draw(st.integers(1, 4) | st.just(0)) if hostile else draw(st.integers(1, 4))
    names = draw(st.lists(name, min_size=size, max_size=size) if hostile else
                 st.lists(name, min_size=size, max_size=size, unique_by=server_name))
    state = REACHABLE | STATE if hostile else REACHABLE
    states = draw(st.lists(state, min_size=size, max_size=size))
    keyed = draw(st.lists(KEYED if hostile else st.sampled_from([43, True, 0, None]),
                          min_size=size, max_size=size))
    if hostile and draw(st.sampled_from(["same", "same", "other"])) == "other":
        which = draw(st.sampled_from([names, states, keyed]))
        which.append(draw(JSON))
    gateways = draw(st.lists(st.tuples(name | st.sampled_from(names or ["fleet-a"]),
                                       st.sampled_from(["10.0.0.9", "gw-1", "::1"])
                                       | (ADDRESS if hostile else st.nothing()),
                                       st.sampled_from(["*", "0.0.0.0", "10.0.0.9"])
                                       | (BIND if hostile else st.nothing())),
                             max_size=3, unique_by=None if hostile else lambda g: g[0]))
    addresses = [address for _, address, _ in gateways]
    binds = [bind for _, _, bind in gateways]
    if hostile and draw(st.booleans()):
        del addresses[draw(st.integers(0, len(addresses))):]
        del binds[draw(st.integers(0, len(binds))):]
    monitor = st.sampled_from([gateway for gateway, _, _ in gateways] or ["fleet-b"])
    return {"monitor": draw(monitor | name if hostile else monitor), "node_names": names,
            "node_states": states, "node_keyed": keyed,
            "gateway_names": [gateway for gateway, _, _ in gateways],
            "gateway_addresses": addresses, "gateway_admin_binds": binds,
            "gateway_admin_port": draw(st.just(8404) | PORT if hostile else st.just(8404))}


# The contract's checks -----------------------------------------------------------------------

SERVER_NAME_REFUSED = re.compile(r"[^A-Za-z0-9_.:-]")  # roles/gateway's server names
TARGET = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}")
# A daemon's flag: one word for systemd's ARGS= line (no space, quote, $, % or \).
FLAG = re.compile(r"--[a-z.-]+=[A-Za-z0-9_.:\[\]-]*")
PLACEHOLDER = "placeholder-model"


def server_name(name: str) -> str:
    return SERVER_NAME_REFUSED.sub("_", name)


@pytest.fixture(scope="module")
def monitoring_host():
    tools = {"promtool": tool("promtool"), "amtool": tool("amtool")}
    with tempfile.TemporaryDirectory(prefix="onecat-fuzz-monitoring-") as folder:
        root = Path(folder)
        (root / "keys").mkdir()
        yield root, tools


def _parsed(text: str) -> Any:
    """The document YAML reads, which must be the JSON after the header comment."""
    header, _, body = text.partition("\n")
    assert header.startswith("# ") and not body.lstrip().startswith("#"), text[:200]
    document = yaml.safe_load(text)
    assert document == json.loads(body)
    return document


def _engine(state: object) -> tuple[bool, str]:
    """Whether plan scrapes this node's engine, and the model it labels it with."""
    if not isinstance(state, Mapping):
        return False, ""
    return bool(validate.as_int(state.get("engine_port"))), str(state.get("model") or "")


def _check_prometheus(params: dict[str, Any], result: dict[str, Any], root: Path) -> None:
    document = _parsed(result["prometheus_config"])
    assert set(document) == {"global", "alerting", "rule_files", "scrape_configs"}
    assert document["global"]["external_labels"] == {"monitor": params["monitor"]}
    assert document["rule_files"] == [str(root / "onecat.rules.yml")]
    jobs = {job["job_name"]: job for job in document["scrape_configs"]}
    assert len(jobs) == len(document["scrape_configs"])
    names, states, keyed = params["node_names"], params["node_states"], params["node_keyed"]
    assert [group["labels"] for group in jobs["onecat_node"]["static_configs"]] == \
        [{"node": server_name(name)} for name in names]
    assert [group["labels"] for group in jobs["onecat_gateway"]["static_configs"]] == \
        [{"gateway": server_name(name)} for name in params["gateway_names"]]
    engines, keys = set(), {}
    for name, state in zip(names, states, strict=True):
        scraped, model = _engine(state)
        if not scraped:
            continue
        job = jobs[f"onecat_engine_{server_name(name)}"]
        engines.add(job["job_name"])
        assert job["static_configs"][0]["labels"] == {"node": server_name(name),
                                                      "model": model or "unknown"}
        assert job["relabel_configs"] == [{"target_label": "job", "replacement": "onecat_engine"}]
        if "authorization" in job:
            keys[name] = job["authorization"]["credentials_file"]
            assert keys[name] == f"{root}/keys/{server_name(name)}.key"
    assert set(jobs) == {"prometheus", "alertmanager", "onecat_node", "onecat_gateway", *engines}
    assert result["key_files"] == keys
    assert set(keys) == {name for name, state, key in zip(names, states, keyed, strict=True)
                         if _engine(state)[0] and (validate.as_int(key) or key is True)}
    for job in jobs.values():
        for group in job["static_configs"]:
            assert all(TARGET.fullmatch(target) for target in group["targets"]), group


def _models(params: dict[str, Any]) -> list[str]:
    settings_ = params["settings"]
    models = {model for state in params["node_states"]
              for scraped, model in [_engine(state)] if scraped and model}
    for name in ("ttft_p99_seconds", "queue_time_p99_seconds"):
        models |= set(settings_.get(name) or {})
    return sorted(models)


def _without_models(params: dict[str, Any]) -> dict[str, Any]:
    """The same input with every model name replaced by one placeholder."""
    states = [{**state, "model": PLACEHOLDER} if _engine(state)[1] else state
              for state in params["node_states"]]
    settings_ = dict(params["settings"])
    for name in ("ttft_p99_seconds", "queue_time_p99_seconds"):
        if settings_.get(name):
            settings_[name] = {PLACEHOLDER: list(settings_[name].values())[-1]}
    return {**params, "node_states": states, "settings": settings_}


def _check_rules(params: dict[str, Any], result: dict[str, Any]) -> None:
    rules = [rule for group in _parsed(result["rules"])["groups"] for rule in group["rules"]]
    labelled = [rule for rule in rules if "record" in rule and "labels" in rule]
    assert [(rule["record"], rule["labels"]) for rule in labelled] == [
        (record, {"model_name": model}) for model in _models(params)
        for record in ("onecat:ttft_p99_threshold_seconds",
                       "onecat:queue_time_p99_threshold_seconds")]
    assert all(re.fullmatch(r"vector\([0-9.e+-]+\)", rule["expr"]) for rule in labelled)
    # Everything else is what a placeholder model gives: no name reached an expression, an
    # alert's labels or a template.
    placeholder = plan(**_without_models(params))["rules"]
    others = [rule for group in _parsed(placeholder)["groups"] for rule in group["rules"]
              if not ("record" in rule and "labels" in rule)]
    assert [rule for rule in rules if rule not in labelled] == others


def _check_alertmanager(params: dict[str, Any], result: dict[str, Any]) -> None:
    document = _parsed(result["alertmanager_config"])
    (receiver,) = document["receivers"]
    urls = params["settings"].get("webhook_urls") or ()
    assert [hook["url"] for hook in receiver.get("webhook_configs", [])] == [str(u) for u in urls]
    assert result["receiver"] == (receiver["name"] == "onecat")


def _tools(root: Path, tools: dict[str, str]) -> None:
    """The three checks, side by side (each is a Go binary's start: ~50 ms)."""
    commands = [[tools["promtool"], "check", "config", str(root / "prometheus.yml")],
                [tools["promtool"], "check", "rules", str(root / "onecat.rules.yml")],
                [tools["amtool"], "check-config", str(root / "alertmanager.yml")]]
    running = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for command in commands]
    failed = []
    for command, process in zip(commands, running, strict=True):
        output, _ = process.communicate(timeout=30)
        if process.returncode != 0:
            failed.append(f"{' '.join(command[1:])}: {output.strip()}")
    assert not failed, "\n".join(failed)


def _write(root: Path, result: dict[str, Any]) -> None:
    # Strict UTF-8, as Ansible's copy writes: a lone surrogate in a file is a failure here.
    (root / "prometheus.yml").write_text(result["prometheus_config"], encoding="utf-8")
    (root / "onecat.rules.yml").write_text(result["rules"], encoding="utf-8")
    (root / "alertmanager.yml").write_text(result["alertmanager_config"], encoding="utf-8")
    for path in result["key_files"].values():
        Path(path).write_text("k" * 43 + "\n")  # a name too long for a file fails here


GOOD_FLEET = {"monitor": "fleet-b", "node_names": ["fleet-a", "fleet-b", "fleet-c"],
              "node_states": [GOOD_STATE, {**GOOD_STATE, "address": "::1", "engine_port": "8001"},
                              None],
              "node_keyed": [43, True, 0], "gateway_names": ["fleet-b"],
              "gateway_addresses": [""], "gateway_admin_binds": ["127.0.0.1"],
              "gateway_admin_port": 8404}


LONG = "x" * 2100  # a message that shows it whole is over 2000 characters


def _hostile_states(*models: object) -> list[object]:
    return [{**GOOD_STATE, "model": model} for model in models]


@settings(max_examples=examples(60))
@given(params=st.just(GOOD_FLEET) | FLEET(hostile=False) | FLEET(hostile=True),
       settings_=st.just(GOOD_SETTINGS) | SETTINGS)
# Names and models that could end a string or add a key or a template: data, unchanged.
@example(params={**GOOD_FLEET, "node_names": ['a"b: - c', "{{ $labels.node }}", "$1"],
                 "node_states": _hostile_states('m"} - x', "{{ $labels.node }}", "$1 ${x}"),
                 "node_keyed": [43, 43, 43], "gateway_names": ["fleet-b", "{{ .Status }}"],
                 "gateway_addresses": ["", "10.0.0.9"], "gateway_admin_binds": ["*", "*"]},
         settings_={**GOOD_SETTINGS, "ttft_p99_seconds": {"{{ $value }}": 2, 'q"': 3}})
# Line breaks to YAML, a lone surrogate, characters JSON escapes as surrogate pairs.
@example(params={**GOOD_FLEET, "node_states": _hostile_states("a\u2028b", "a\u0085b", "\ud800")},
         settings_=GOOD_SETTINGS)
@example(params={**GOOD_FLEET, "node_names": ["fleet-a\n", "fleet-b", "fleet-c"]},
         settings_=GOOD_SETTINGS)
@example(params={**GOOD_FLEET, "node_states": _hostile_states("\U0001f999-7b", "é", "m"),
                 "monitor": "fleet-b"}, settings_=GOOD_SETTINGS)
@example(params={**GOOD_FLEET, "monitor": "fleet-\U0001f999", "gateway_names": []},
         settings_=GOOD_SETTINGS)
# Wrong types: a name that is a number, maps that are lists or numbers.
@example(params={**GOOD_FLEET, "node_names": [1, None, ["x"]]}, settings_=GOOD_SETTINGS)
@example(params={**GOOD_FLEET, "gateway_names": ["fleet-b", None, 5], "gateway_addresses": [],
                 "gateway_admin_binds": ["*", "*", "*"]}, settings_=GOOD_SETTINGS)
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "ttft_p99_seconds": [1, 2]})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "queue_time_p99_seconds": "ab"})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "email": 5, "slack": [1]})
# Durations past Prometheus's int64 nanoseconds (~292 years); a span that is infinite.
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "scrape_interval": "300y"})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "out_of_rotation_for": "9" * 30 + "m"})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "group_wait": "106752d"})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "watch_interval": "9" * 400})
# Go's url.Parse and net.SplitHostPort refuse what Python's urlsplit and rsplit take.
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "webhook_urls": ["http://a/%zz"]})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "webhook_urls": ["http://a^b/"]})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "webhook_urls": ["http://a^b@a/"]})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS,
                                      "email": {**GOOD_EMAIL, "smarthost": "::1:25"}})
# A name too long for its key file, the same name twice, names too long to show whole.
@example(params={**GOOD_FLEET, "node_names": ["a" * 256, "fleet-b", "fleet-c"]},
         settings_=GOOD_SETTINGS)
@example(params={**GOOD_FLEET, "node_names": ["fleet-a", "fleet-a", "fleet-c"]},
         settings_=GOOD_SETTINGS)
@example(params={**GOOD_FLEET, "node_names": [LONG, "fleet-b", "fleet-c"]},
         settings_=GOOD_SETTINGS)
@example(params={**GOOD_FLEET, "gateway_names": ["fleet-b", LONG]}, settings_=GOOD_SETTINGS)
@example(params={**GOOD_FLEET, "node_states": [{**GOOD_STATE, "address": LONG}, None, None]},
         settings_=GOOD_SETTINGS)
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "scrape_interval": "1" * 2100})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "retention_time": LONG})
@example(params=GOOD_FLEET, settings_={**GOOD_SETTINGS, "watch_interval": LONG})
@fuzz("monitoring: plan's prometheus.yml, rules and alertmanager.yml")
def test_fuzz_monitoring_plan(monitoring_host: tuple[Path, dict[str, str]],
                              params: dict[str, Any], settings_: dict[str, Any]) -> None:
    root, tools = monitoring_host
    params = {**params, "settings": {**settings_, "key_dir": str(root / "keys"),
                                     "rules_file": str(root / "onecat.rules.yml")}}
    try:
        result = plan(**params)
    except ValueError as error:
        message = str(error)
        assert message.isprintable() and len(message) < 2000, message
        return
    _write(root, result)
    _tools(root, tools)
    _check_prometheus(params, result, root)
    _check_rules(params, result)
    _check_alertmanager(params, result)
    for flag in (*result["prometheus_args"], *result["alertmanager_args"]):
        assert FLAG.fullmatch(flag), flag
