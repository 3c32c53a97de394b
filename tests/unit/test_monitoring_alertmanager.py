"""The fleet's alertmanager.yml (issue 52, onecat/monitoring/alertmanager.py): every receiver
variant passes Debian 12's own `amtool check-config` (0.25), secrets go only by file, hostile
values are refused by name, and one dead node makes one notification, not twelve."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_tools import tool

from onecat.monitoring.alertmanager import (
    AlertmanagerSettings,
    has_receiver,
    render_alertmanager,
)
from onecat.monitoring.rules import RuleSettings, render_rules

EMAIL = {"to": "ops@example.com, oncall@example.com", "from": "onecat@example.com",
         "smarthost": "smtp.example.com:587", "auth_username": "onecat",
         "auth_password_file": "/etc/prometheus/alertmanager-smtp-password"}
SLACK = {"api_url_file": "/etc/prometheus/alertmanager-slack-url", "channel": "#onecat-alerts"}
VARIANTS = {
    "none": AlertmanagerSettings(),
    "webhook": AlertmanagerSettings(webhook_urls=("https://hooks.example.com/onecat?team=gpu",
                                                  "http://10.0.0.5:5001/alerts")),
    "email": AlertmanagerSettings(email=EMAIL),
    "email-no-auth": AlertmanagerSettings(email={k: EMAIL[k] for k in ("to", "from",
                                                                      "smarthost")}),
    "slack": AlertmanagerSettings(slack=SLACK),
    "all": AlertmanagerSettings(webhook_urls=("https://hooks.example.com/x",), email=EMAIL,
                                slack=SLACK, group_wait="10s", group_interval="2m",
                                repeat_interval="12h"),
}


def _check_config(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "alertmanager.yml"
    path.write_text(text)
    return subprocess.run([tool("amtool"), "check-config", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_passes_amtool(tmp_path: Path, name: str) -> None:
    result = _check_config(tmp_path, render_alertmanager(VARIANTS[name]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_no_receiver_is_one_receiver_with_no_configs() -> None:
    config = yaml.safe_load(render_alertmanager(VARIANTS["none"]))
    assert config["receivers"] == [{"name": "nobody"}]
    assert config["route"]["receiver"] == "nobody"
    assert not has_receiver(VARIANTS["none"])
    # An inventory's placeholders are no receiver either.
    assert not has_receiver(AlertmanagerSettings(email={"to": "", "from": ""}, slack={}))
    assert all(has_receiver(VARIANTS[name]) for name in VARIANTS if name != "none")


def test_secrets_are_written_as_file_paths_only() -> None:
    receiver = yaml.safe_load(render_alertmanager(VARIANTS["all"]))["receivers"][0]
    assert receiver["email_configs"][0]["auth_password_file"] == EMAIL["auth_password_file"]
    assert "auth_password" not in receiver["email_configs"][0]
    assert receiver["slack_configs"][0] == {**SLACK, "send_resolved": True}


def test_alertmanager_025_has_no_webhook_url_file(tmp_path: Path) -> None:
    # Why webhook URLs are written inline: Debian 12's Alertmanager cannot read them from a
    # file. When Debian ships one that can, this fails and the module should switch.
    config = {"route": {"receiver": "r"},
              "receivers": [{"name": "r", "webhook_configs": [{"url_file": "/etc/x"}]}]}
    result = _check_config(tmp_path, yaml.safe_dump(config))
    assert result.returncode != 0
    assert "url_file" in result.stdout + result.stderr


@pytest.mark.parametrize("url", [
    "", "ftp://hooks.example.com/x", "javascript:alert(1)", "http://", "http:///path",
    "hooks.example.com/x", "https://hooks.example.com/a b", "https://hooks.example.com/\nx",
    "https://hooks.example.com/x\r", "https://hooks.example.com/\tx",
    "https://hooks.example.com\x00/x", "https://hooks.example.com:99999/x",
    "https://hooks.example.com:port/x", "https://hooks.example.com/\u2028x",
])
def test_hostile_webhook_urls_are_refused_by_name(url: str) -> None:
    settings = AlertmanagerSettings(webhook_urls=("https://ok.example.com/", url))
    with pytest.raises(ValueError, match=r"^webhook_urls\[1\] .* is refused: set it to an "
                                         r"http:// or https:// URL"):
        render_alertmanager(settings)


@pytest.mark.parametrize(("settings", "named", "fix"), [
    (AlertmanagerSettings(email={**EMAIL, "auth_password": "hunter2"}), "email.auth_password",
     "email.auth_password_file"),
    (AlertmanagerSettings(slack={**SLACK, "api_url": "https://hooks.slack.com/s"}),
     "slack.api_url", "slack.api_url_file"),
])
def test_inline_secrets_are_refused_and_not_shown(settings: AlertmanagerSettings, named: str,
                                                  fix: str) -> None:
    with pytest.raises(ValueError) as refused:
        render_alertmanager(settings)
    message = str(refused.value)
    assert message.startswith(f"{named} (the value is not shown) is refused"), message
    assert fix in message
    assert "hunter2" not in message and "hooks.slack.com" not in message


@pytest.mark.parametrize(("settings", "named"), [
    (AlertmanagerSettings(email={**EMAIL, "url_file": "/etc/x"}), "email.url_file"),
    (AlertmanagerSettings(email={**EMAIL, "to": '{{ template "x" . }}@example.com'}),
     "email.to"),
    (AlertmanagerSettings(email={**EMAIL, "from": "onecat@example.com\nBcc: x@evil.com"}),
     "email.from"),
    (AlertmanagerSettings(email={**EMAIL, "smarthost": "smtp.example.com"}), "email.smarthost"),
    (AlertmanagerSettings(email={**EMAIL, "smarthost": "smtp example:25"}), "email.smarthost"),
    (AlertmanagerSettings(email={**EMAIL, "auth_password_file": "secrets/pw"}),
     "email.auth_password_file"),
    (AlertmanagerSettings(email={k: v for k, v in EMAIL.items() if k != "auth_password_file"}),
     "email.auth_password_file"),
    (AlertmanagerSettings(email={k: v for k, v in EMAIL.items() if k != "smarthost"}),
     "email.smarthost"),
    (AlertmanagerSettings(slack={**SLACK, "channel": "#{{ .Status }}"}), "slack.channel"),
    (AlertmanagerSettings(slack={"channel": "#x"}), "slack.api_url_file"),
    (AlertmanagerSettings(webhook_urls="https://hooks.example.com/x"),  # type: ignore[arg-type]
     "webhook_urls"),
    (AlertmanagerSettings(group_wait="30 s"), "group_wait"),
    (AlertmanagerSettings(repeat_interval="0h"), "repeat_interval"),
])
def test_bad_settings_are_refused_by_name(settings: AlertmanagerSettings, named: str) -> None:
    with pytest.raises(ValueError, match=r"is (refused|missing)") as refused:
        render_alertmanager(settings)
    assert str(refused.value).startswith(named + " "), refused.value


# Alertmanager's routing and inhibition, reduced to what this config uses, to judge its
# structure without a daemon (https://prometheus.io/docs/alerting/latest/configuration/).
def _matches(matcher: str, labels: dict[str, str]) -> bool:
    found = re.fullmatch(r'(\w+)(=~|!=|=)"(.*)"', matcher)
    assert found, matcher
    name, op, value = found.groups()
    got = labels.get(name, "")
    if op == "=~":
        return re.fullmatch(value, got) is not None
    return (got == value) == (op == "=")


def _all(matchers: list[str], labels: dict[str, str]) -> bool:
    return all(_matches(m, labels) for m in matchers)


def _inhibited(rules: list[dict[str, Any]], target: dict[str, str],
               alerts: list[dict[str, str]]) -> bool:
    for rule in rules:
        if not _all(rule["target_matchers"], target):
            continue
        # An alert matching both sides is never muted by one that also does (itself included).
        both = _all(rule["source_matchers"], target)
        for source in alerts:
            if (_all(rule["source_matchers"], source)
                    and not (both and _all(rule["target_matchers"], source))
                    and all(source.get(k, "") == target.get(k, "") for k in rule["equal"])):
                return True
    return False


def _notifications(alerts: list[dict[str, str]]) -> dict[tuple[Any, ...], list[str]]:
    """Notification group -> alert names it carries, after inhibition."""
    config = yaml.safe_load(render_alertmanager(VARIANTS["webhook"]))
    groups: dict[tuple[Any, ...], list[str]] = {}
    for alert in alerts:
        if _inhibited(config["inhibit_rules"], alert, alerts):
            continue
        route = next((r for r in config["route"]["routes"] if _all(r["matchers"], alert)),
                     config["route"])
        key = (id(route), *(alert.get(label, "") for label in route["group_by"]))
        groups.setdefault(key, []).append(alert["alertname"])
    return groups


def test_one_dead_node_is_one_notification() -> None:
    dead = [
        {"alertname": "OnecatScrapeTargetDown", "job": "onecat_node", "node": "n1",
         "instance": "n1:9100"},
        {"alertname": "OnecatScrapeTargetDown", "job": "onecat_engine", "node": "n1",
         "instance": "n1:8000"},
        {"alertname": "OnecatNodeOutOfRotation", "gateway": "gw1", "node": "n1", "server": "n1"},
        {"alertname": "OnecatNodeOutOfRotation", "gateway": "gw2", "node": "n1", "server": "n1"},
    ]
    assert list(_notifications(dead).values()) == [["OnecatScrapeTargetDown"]]
    # Another node's alerts are not muted by it: two nodes, two notifications.
    other = {"alertname": "OnecatNodeOutOfRotation", "gateway": "gw1", "node": "n2"}
    assert sorted(_notifications([*dead, other]).values()) == [
        ["OnecatNodeOutOfRotation"], ["OnecatScrapeTargetDown"]]


def test_a_node_with_several_findings_is_one_notification() -> None:
    node = [{"alertname": name, "node": "n3", "gpu": "0", "severity": "page"}
            for name in ("OnecatGpuUncorrectableEcc", "OnecatServiceRequired",
                         "OnecatFloorHeld", "OnecatKvCacheNearFull")]
    out = [{"alertname": "OnecatNodeOutOfRotation", "node": "n3", "gateway": gateway}
           for gateway in ("gw1", "gw2")]
    assert len(_notifications(node + out)) == 1
    # Each node its own notification, though neither names a gateway.
    other = {"alertname": "OnecatGpuUncorrectableEcc", "node": "n4", "gpu": "0"}
    assert len(_notifications([*node, other])) == 2


def test_a_lost_gpu_hides_its_nodes_ecc_and_rotation_alerts() -> None:
    alerts = [{"alertname": "OnecatGpuLost", "node": "n2", "gpu": "1"},
              {"alertname": "OnecatGpuUncorrectableEcc", "node": "n2", "gpu": "0"},
              {"alertname": "OnecatNodeOutOfRotation", "node": "n2", "gateway": "gw1"},
              {"alertname": "OnecatGpuUncorrectableEcc", "node": "n4", "gpu": "0"}]
    assert sorted(_notifications(alerts).values()) == [["OnecatGpuLost"],
                                                        ["OnecatGpuUncorrectableEcc"]]


def test_an_empty_gateway_hides_its_floor_and_size_alerts_only() -> None:
    fleet = [{"alertname": name, "gateway": gateway}
             for gateway in ("gw1", "gw2")
             for name in ("OnecatFleetAtFloor", "OnecatFewerServingNodes")]
    alerts = [{"alertname": "OnecatGatewayEmpty", "gateway": "gw1"}, *fleet,
              {"alertname": "OnecatGateway5xxRatio", "gateway": "gw1"}]
    assert sorted(_notifications(alerts).values()) == [
        ["OnecatFleetAtFloor", "OnecatFewerServingNodes"],  # gw2's
        ["OnecatGatewayEmpty", "OnecatGateway5xxRatio"]]


def test_fleet_alerts_without_a_gateway_share_one_group() -> None:
    alerts = [{"alertname": "OnecatTtftP99High", "model_name": "big"},
              {"alertname": "OnecatQueueTimeP99High", "model_name": "small"},
              {"alertname": "OnecatScrapeTargetDown", "job": "prometheus",
               "instance": "localhost:9090"}]
    assert len(_notifications(alerts)) == 1


def test_inhibit_rules_name_only_alerts_the_rules_define() -> None:
    groups = yaml.safe_load(render_rules(RuleSettings()))["groups"]
    defined = {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}
    config = yaml.safe_load(render_alertmanager(AlertmanagerSettings()))
    named: set[str] = set()
    for rule in config["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            if matcher.startswith("alertname"):
                named |= set(matcher.split('"')[1].split("|"))
    assert named and named <= defined
