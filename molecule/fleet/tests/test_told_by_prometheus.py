"""Told, not asked (issue 52), last in the scenario: after every rollout, repair and drain the
fleet went through, the real Prometheus and Alertmanager on the gateway host (the monitoring
stage's, Debian's own packages) scrape every target, answer every query of the dashboard, and
have fleet-c's uncorrectable ECC error firing.
"""

from __future__ import annotations

import json
import re
import time

from conftest import PROJECT
from prometheus_api import firing, query, targets
from test_rollout import start_load, wait_until

DASHBOARD = PROJECT / "dashboards" / "onecat-fleet.json"
# What a person picks in the dashboard's variables: everything.
VARIABLES = {"$gateway": ".*", "$node": ".*", "$model": ".*", "${datasource}": "",
             "$__rate_interval": "1m", "$__interval": "30s", "$__range": "6h"}
# A panel's trailing filter ("> 0", "== 1") shows only what is wrong now: the query without it
# must return series (the metric is there), whatever the fleet's state.
FILTER = re.compile(r"\s*(?:==|>|<|>=|<=)\s*[0-9.]+\s*$")


def dashboard_queries() -> list[tuple[str, str]]:
    document = json.loads(DASHBOARD.read_text())
    found = []
    for panel in document["panels"]:
        for target in panel.get("targets") or []:
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            found.append((panel["title"], FILTER.sub("", expr)))
    assert found, "the dashboard has no queries"
    return found


def test_every_target_is_up_and_every_dashboard_query_has_series() -> None:
    def down() -> list[str]:
        return [f"{t['labels'].get('job')} {t['scrapeUrl']}: {t.get('lastError')}"
                for t in targets() if t["health"] != "up"]

    assert wait_until(lambda: not down(), timeout=60, interval=2), down()
    jobs = {(t["labels"]["job"], t["labels"].get("node") or t["labels"].get("gateway") or "")
            for t in targets()}
    assert {("onecat_node", n) for n in ("fleet-a", "fleet-b", "fleet-c")} <= jobs, jobs
    # fleet-c is held out at health every rollout: it never serves, so no engine to scrape.
    assert {("onecat_engine", "fleet-a"), ("onecat_engine", "fleet-b"),
            ("onecat_gateway", "fleet-b"), ("prometheus", ""), ("alertmanager", "")} <= jobs
    assert ("onecat_engine", "fleet-c") not in jobs

    # The engines' rates need traffic within their window: 20 s of clients through the gateway.
    load = start_load()
    time.sleep(20)
    load.stop()
    time.sleep(6)  # one more scrape
    empty = [f"{title}: {expr}" for title, expr in dashboard_queries() if not query(expr)]
    assert not empty, "\n".join(empty)


def test_fleet_c_uncorrectable_ecc_error_fires_and_the_alerts_carry_runbooks() -> None:
    alerts = wait_until(lambda: firing("OnecatGpuUncorrectableEcc", node="fleet-c"),
                        timeout=90, interval=2)
    assert alerts, query("onecat_gpu_ecc_uncorrected_volatile_total or "
                         "onecat_health_gpu_ecc_uncorrected_volatile")
    # fleet-c's GPU 1 (ecc_uncorrected_since_boot.scenario), by its dcgm-exporter labels.
    assert {a["labels"].get("gpu") for a in alerts} == {"1"}, alerts
    assert all(a["annotations"].get("runbook") for a in alerts), alerts
    # The healthy nodes' cards have none.
    assert not firing("OnecatGpuUncorrectableEcc", node="fleet-a")
    assert not firing("OnecatGpuUncorrectableEcc", node="fleet-b")
