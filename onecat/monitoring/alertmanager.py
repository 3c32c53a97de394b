"""The fleet's alertmanager.yml: who hears of the rules' alerts, in how many notifications.

One dead node is one notification, not twelve: alerts that name a node are grouped by node;
fleet alerts (no node) by gateway, the latency ones sharing the gateway-less group. And a cause
silences its consequences (inhibit_rules): a node whose node_exporter cannot be scraped hides
that node's other alerts, an empty gateway hides its "at the floor" and "fewer nodes" alerts,
a lost GPU hides its node's ECC and out-of-rotation alerts.

Secrets only by file: Debian 12's Alertmanager (0.25, checked with its amtool) reads email's
`auth_password_file` and Slack's `api_url_file`, so inline `auth_password`/`api_url` are
refused here. It has no `url_file` for webhooks ("field url_file not found"), so webhook URLs
are written in the file itself, which the monitoring stage keeps readable by Alertmanager only.

Docs: https://prometheus.io/docs/alerting/latest/configuration/ (route, inhibit_rule, receivers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .. import validate
from .rules import HEADER, duration_problem, refused

EMAIL_KEYS = ("to", "from", "smarthost", "auth_username", "auth_password_file")
SLACK_KEYS = ("api_url_file", "channel")
# What Alertmanager 0.25 would take inline, and where the secret goes instead.
INLINE_SECRETS = {
    "email": {"auth_password": "auth_password_file", "auth_secret": "auth_password_file"},
    "slack": {"api_url": "api_url_file"},
}
# A mailbox, no display name: the email config's to/from are Go templates in Alertmanager, so
# braces (and anything else an address does not need) stay out.
MAILBOX = r"[A-Za-z0-9._%+'-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*"
ONE_MAILBOX = re.compile(MAILBOX)
MAILBOXES = re.compile(rf"{MAILBOX}(?:, ?{MAILBOX}){{0,19}}")
USER_NAME = re.compile(r"[A-Za-z0-9._%+@'-]{1,256}")
# Slack's channel is a template too: #name, @user or a channel id.
SLACK_CHANNEL = re.compile(r"[#@]?[A-Za-z0-9._-]{1,80}")
URL_MAX = 2048
# What Go's url.Parse (Alertmanager's) reads as Python's urlsplit does: RFC 3986 characters,
# "%" only in a %HH escape, userinfo of its own characters, then a host name or a bracketed
# IPv6 literal and an optional port.
URL_TEXT = re.compile(r"(?:[A-Za-z0-9._~!$&'()*+,;=:@/?#\[\]-]|%[0-9A-Fa-f]{2})+")
USERINFO = re.compile(r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*")
HOST_PORT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::[0-9]{0,5})?")
NODE_SCOPED = 'node=~".+"'


@dataclass(frozen=True)
class AlertmanagerSettings:
    """Receivers (none, any or all of webhook, email, Slack) and the notification pace."""

    webhook_urls: tuple[str, ...] = ()
    # to, from, smarthost (host:port), auth_username, auth_password_file; {} for no email.
    email: Mapping[str, str] = field(default_factory=dict)
    # api_url_file (a file holding the incoming-webhook URL), channel; {} for no Slack.
    slack: Mapping[str, str] = field(default_factory=dict)
    # Alertmanager's own defaults would be 30s, 5m, 4h as well.
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"


def _given(settings: Mapping[str, str]) -> dict[str, str]:
    """The keys that hold a value: an inventory's `{to: "", ...}` placeholder is no email."""
    return {key: value for key, value in settings.items() if value not in (None, "")}


def has_receiver(settings: AlertmanagerSettings) -> bool:
    """Whether anyone hears of an alert (else the config routes every alert to "nobody")."""
    return bool(settings.webhook_urls or _given(settings.email) or _given(settings.slack))


def webhook_problem(name: str, value: object) -> str | None:
    """An http(s) URL with a host and a valid port that Go's url.Parse (Alertmanager's) reads
    as urlsplit does: no whitespace, control character or bad %-escape."""
    must = ("an http:// or https:// URL with a host name or IP address, of RFC 3986 "
            "characters (no spaces, quotes, braces or non-ASCII letters; %HH escapes)")
    if not isinstance(value, str) or not 0 < len(value) <= URL_MAX:
        return refused(name, value, must)
    if not URL_TEXT.fullmatch(value):
        return refused(name, value, must)
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError:
        return refused(name, value, must)
    userinfo, _, host_port = parts.netloc.rpartition("@")
    if (parts.scheme not in ("http", "https") or not parts.hostname
            or validate.address(parts.hostname) or not USERINFO.fullmatch(userinfo)
            or not HOST_PORT.fullmatch(host_port)):
        return refused(name, value, must)
    return None


def _setting(name: str, key: object) -> str:
    """email.KEY, or email["KEY"] (as JSON) for a key that may hold a newline or a control
    character: the message stays one line."""
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_]{1,64}", key):
        return f"{name}.{key}"
    return f"{name}[{validate.shown(key)}]"


def _keys_problems(name: str, given: Mapping[str, str], known: tuple[str, ...]) -> list[str]:
    found = [f"{name}.{key} (the value is not shown) is refused: put the secret in a file "
             f"only Alertmanager reads and set {name}.{instead} to its path"
             for key, instead in INLINE_SECRETS[name].items() if key in given]
    found += [refused(_setting(name, key), given[key], f"one of {', '.join(known)} instead")
              for key in given if key not in known and key not in INLINE_SECRETS[name]]
    return found


def _smarthost_problem(value: object) -> str | None:
    must = "host:port of the mail relay, like smtp.example.com:587"
    if not isinstance(value, str) or ":" not in value:
        return refused("email.smarthost", value, must)
    host, port = value.rsplit(":", 1)
    bracketed = host.startswith("[") and host.endswith("]")
    bare = host[1:-1] if bracketed else host
    # An IPv6 host needs its brackets: Go's net.SplitHostPort refuses "::1:25".
    if validate.address(bare) or validate.port(port) or (":" in bare and not bracketed):
        return refused("email.smarthost", value, must)
    return None


def _email_problems(email: Mapping[str, str]) -> list[str]:
    if not email:
        return []
    found = _keys_problems("email", email, EMAIL_KEYS)
    for key, pattern, must in (
            ("to", MAILBOXES, "an address like ops@example.com, or several split by commas"),
            ("from", ONE_MAILBOX, "an address like onecat@example.com")):
        if not (isinstance(email.get(key), str) and pattern.fullmatch(email[key])):
            found.append(refused(f"email.{key}", email.get(key), must))
    found += [p for p in [_smarthost_problem(email.get("smarthost"))] if p]
    user, secret = email.get("auth_username"), email.get("auth_password_file")
    if user is not None and not (isinstance(user, str) and USER_NAME.fullmatch(user)):
        found.append(refused("email.auth_username", user, "the relay's login name (letters, "
                                                          "digits and . _ % + @ ' -)"))
    if secret is not None:
        found += validate.problems({"email.auth_password_file": ["path", secret]})
    if (user is None) != (secret is None):
        missing = "email.auth_password_file" if secret is None else "email.auth_username"
        found.append(f"{missing} is missing: set both email.auth_username and "
                     "email.auth_password_file, or neither")
    return found


def _slack_problems(slack: Mapping[str, str]) -> list[str]:
    if not slack:
        return []
    found = _keys_problems("slack", slack, SLACK_KEYS)
    found += validate.problems({"slack.api_url_file": ["path", slack.get("api_url_file")]})
    channel = slack.get("channel")
    if not (isinstance(channel, str) and SLACK_CHANNEL.fullmatch(channel)):
        found.append(refused("slack.channel", channel, "a channel like #onecat-alerts (letters, "
                                                       "digits and . _ -)"))
    return found


def problems(settings: AlertmanagerSettings) -> list[str]:
    """Every bad setting, one message each (empty when all are good)."""
    found: list[str] = []
    if isinstance(settings.webhook_urls, str):
        found.append(refused("webhook_urls", settings.webhook_urls, "a list of URLs"))
    else:
        found += [p for i, url in enumerate(settings.webhook_urls)
                  if (p := webhook_problem(f"webhook_urls[{i}]", url))]
    for name, value in (("email", settings.email), ("slack", settings.slack)):
        if not isinstance(value, Mapping):
            found.append(refused(name, value, "a mapping of its settings, or {} for none"))
    if found:
        return found
    found += _email_problems(_given(settings.email)) + _slack_problems(_given(settings.slack))
    found += [p for name in ("group_wait", "group_interval", "repeat_interval")
              if (p := duration_problem(name, getattr(settings, name)))]
    return found


def _receiver(settings: AlertmanagerSettings) -> dict[str, Any]:
    if not has_receiver(settings):
        # A receiver with no configs is valid and drops what reaches it: alerts still show
        # in Alertmanager's UI and `amtool alert`.
        return {"name": "nobody"}
    receiver: dict[str, Any] = {"name": "onecat"}
    if settings.webhook_urls:
        receiver["webhook_configs"] = [{"url": url, "send_resolved": True}
                                       for url in settings.webhook_urls]
    email, slack = _given(settings.email), _given(settings.slack)
    if email:
        receiver["email_configs"] = [{**{k: email[k] for k in EMAIL_KEYS if k in email},
                                      "send_resolved": True}]
    if slack:
        receiver["slack_configs"] = [{**{k: slack[k] for k in SLACK_KEYS},
                                      "send_resolved": True}]
    return receiver


def route(settings: AlertmanagerSettings, receiver: str) -> dict[str, Any]:
    """The routing tree: node alerts grouped per node, the rest per gateway."""
    return {
        "receiver": receiver,
        # Fleet alerts carry no node: one group per gateway; the per-model latency and the
        # monitoring's own scrape alerts, with no gateway either, share one group.
        "group_by": ["gateway"],
        "group_wait": settings.group_wait,
        "group_interval": settings.group_interval,
        "repeat_interval": settings.repeat_interval,
        # A child route inherits receiver and timing; the first match wins, so an alert naming
        # both a node and a gateway (OnecatNodeOutOfRotation) goes with its node.
        "routes": [{"matchers": [NODE_SCOPED], "group_by": ["node"]}],
    }


def inhibit_rules() -> list[dict[str, Any]]:
    """Causes that hide their consequences, on the same node or gateway."""
    return [
        # The node's exporter is gone, so its watch series are too: what still fires for it
        # (out of rotation at the gateway, its engine's scrape) follows from that. The source
        # matches the target side as well; Alertmanager never lets an alert inhibit itself
        # (https://prometheus.io/docs/alerting/latest/configuration/#inhibit_rule).
        {"source_matchers": ['alertname="OnecatScrapeTargetDown"', 'job="onecat_node"'],
         "target_matchers": [NODE_SCOPED], "equal": ["node"]},
        {"source_matchers": ['alertname="OnecatGatewayEmpty"'],
         "target_matchers": ['alertname=~"OnecatFleetAtFloor|OnecatFewerServingNodes"'],
         "equal": ["gateway"]},
        {"source_matchers": ['alertname="OnecatGpuLost"'],
         "target_matchers": ['alertname=~"OnecatGpuUncorrectableEcc|OnecatNodeOutOfRotation"'],
         "equal": ["node"]},
    ]


def render_alertmanager(settings: AlertmanagerSettings) -> str:
    """alertmanager.yml's text; InputError (a ValueError) naming every bad setting."""
    found = problems(settings)
    if found:
        raise validate.InputError("; ".join(found))
    receiver = _receiver(settings)
    document = {"route": route(settings, receiver["name"]), "inhibit_rules": inhibit_rules(),
                "receivers": [receiver]}
    return HEADER + json.dumps(document, indent=2, ensure_ascii=False) + "\n"
