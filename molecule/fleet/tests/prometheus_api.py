"""The fleet's Prometheus and Alertmanager as a person (or a pager) meets them.

The monitoring stage runs them on the gateway host, fleet-b, listening on every address of its
container; the tests ask them from inside fleet-b (curl against loopback), as an operator on
the monitoring host would. The webhook receiver is a real HTTP server on fleet-b's loopback
(the address fleet-b's host_vars give Alertmanager): every notification Alertmanager POSTs is
one line of /var/tmp/onecat-hook.jsonl.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from typing import Any

import testinfra

PROMETHEUS = "http://127.0.0.1:9090"
HOOK_LOG = "/var/tmp/onecat-hook.jsonl"
# A webhook receiver as small as a chat bridge: answers 200 to each POST and keeps its body.
RECEIVER = f"""
import http.server, json
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open({HOOK_LOG!r}, "a") as log:
            log.write(json.dumps(json.loads(body)) + "\\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 9099), Hook).serve_forever()
"""


def monitor():
    return testinfra.get_host("ansible://fleet-b",
                              ansible_inventory=os.environ["MOLECULE_INVENTORY_FILE"])


def _get(path: str, **params: str) -> Any:
    args = " ".join(f"--data-urlencode {shlex.quote(f'{k}={v}')}" for k, v in params.items())
    get = "-G " if params else ""
    out = monitor().check_output(f"curl -fsS -m 10 {get}{args} {PROMETHEUS}{path}")
    answer = json.loads(out)
    assert answer.get("status") == "success", answer
    return answer["data"]


def query(expr: str) -> list[dict[str, Any]]:
    """An instant query's series (vector results; a scalar is one series)."""
    data = _get("/api/v1/query", query=expr)
    if data["resultType"] == "vector":
        return data["result"]
    return [{"metric": {}, "value": data["result"]}] if data["result"] else []


def targets() -> list[dict[str, Any]]:
    return _get("/api/v1/targets", state="active")["activeTargets"]


def firing(alertname: str, **labels: str) -> list[dict[str, Any]]:
    """The alerts of that name (and labels) Prometheus has firing now."""
    return [a for a in _get("/api/v1/alerts")["alerts"]
            if a["labels"].get("alertname") == alertname and a["state"] == "firing"
            and all(a["labels"].get(k) == v for k, v in labels.items())]


def start_receiver() -> None:
    """The webhook receiver, once (it keeps running in fleet-b until the container stops)."""
    host = monitor()
    if host.run("curl -s -m 2 -o /dev/null -X POST -d '{}' http://127.0.0.1:9099/").rc == 0:
        return
    host.check_output(f"rm -f {HOOK_LOG}; nohup python3 -c {shlex.quote(RECEIVER)} "
                      ">/var/tmp/onecat-hook.out 2>&1 &")
    deadline = time.monotonic() + 15
    while host.run("curl -s -m 2 -o /dev/null http://127.0.0.1:9099/").rc != 0:
        assert time.monotonic() < deadline, host.run("cat /var/tmp/onecat-hook.out").stdout
        time.sleep(0.5)


def notifications() -> list[dict[str, Any]]:
    """Every notification the receiver got, oldest first (Alertmanager's webhook payload)."""
    text = monitor().run(f"cat {HOOK_LOG}").stdout
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def notified(alertname: str, since: float, **labels: str) -> list[dict[str, Any]]:
    """Notifications since `since` (Unix time, by the alerts' startsAt) that carry the alert
    firing with those labels."""
    found = []
    for note in notifications():
        for alert in note.get("alerts") or []:
            if (alert.get("status") == "firing"
                    and alert["labels"].get("alertname") == alertname
                    and all(alert["labels"].get(k) == v for k, v in labels.items())
                    and _unix(alert.get("startsAt", "")) >= since):
                found.append(note)
                break
    return found


def _unix(stamp: str) -> float:
    """RFC 3339 from Alertmanager ("2026-12-07T08:40:12.345678901Z") in Unix seconds."""
    if not stamp:
        return 0.0
    whole = stamp.split(".")[0].rstrip("Z")
    return time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) - time.timezone
