"""The fleet rollout, in order: first rollout, a broken upgrade, a re-run with nothing changed.

fleet-a (healthy PCIe pair) is the canary, fleet-b (healthy NVLink pair) the next batch,
fleet-c (uncorrectable ECC on GPU 1) is held out by the health stage every time.
The tests depend on each other's order, as the rollouts of a real fleet do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import testinfra
from conftest import read_lock

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
SITE = "- ansible.builtin.import_playbook: @PROJECT@/site.yml"
BROKEN = json.dumps({"vllm_serve_upgrade": True,
                     "vllm_serve_image_env": {"STANDIN_BROKEN": "1"}})
PROBE_LOG = "/var/tmp/onecat-probe.log"
# A bounded probe: one /health request every 0.5 s for at most 20 minutes.
PROBE = (
    "nohup sh -c 'for i in $(seq 1 2400); do "
    "if curl -fsS -m 2 -o /dev/null http://127.0.0.1:8000/health; "
    "then echo ok; else echo FAIL; fi "
    f">> {PROBE_LOG}; [ -e /var/tmp/onecat-probe.stop ] && break; sleep 0.5; done' "
    ">/dev/null 2>&1 &"
)


def rollout(results: str) -> dict:
    summary = json.loads((EPHEMERAL / "results" / results / "rollout.json").read_text())
    return {row["host"]: row for row in summary["hosts"]}


def node(name: str):
    """A testinfra handle on one node (these tests run once, not once per host)."""
    return testinfra.get_host(
        f"ansible://{name}", ansible_inventory=os.environ["MOLECULE_INVENTORY_FILE"]
    )


def test_first_rollout_holds_out_the_ecc_node_and_serves_the_others(run_playbook):
    results = str(EPHEMERAL / "results" / "first")
    run = run_playbook(SITE, "--tags", "all,bench", "-e", f"onecat_results_dir={results}")
    print(f"\nfirst rollout, 3 nodes (one held), with benchmark: {run.seconds:.0f} s")
    assert run.rc == 2, run.output[-4000:]
    assert run.recap("fleet-c")["failed"] == 1
    assert run.recap("fleet-a")["failed"] == 0
    assert run.recap("fleet-b")["failed"] == 0
    rows = rollout("first")
    assert rows["fleet-c"]["status"] == "held at health"
    assert any("uncorrectable ECC" in reason for reason in rows["fleet-c"]["reasons"]), rows
    assert rows["fleet-a"]["status"] == rows["fleet-b"]["status"] == "ok"
    assert rows["fleet-a"]["serving"] and rows["fleet-b"]["serving"]
    locked = read_lock()["engine_image"]["image_id"]
    assert rows["fleet-a"]["image"] == rows["fleet-b"]["image"] == locked
    # The benchmark ran on the serving nodes and the fleet report covers them.
    for name in ("fleet-a", "fleet-b"):
        level = json.loads((Path(results) / name / "bench-c4.json").read_text())
        assert level["completed"] == 8 and level["failed"] == 0
        assert level["output_throughput"] > 0
    assert not (Path(results) / "fleet-c").exists()
    report = (Path(results) / "report.md").read_text()
    assert "fleet-a" in report and "fleet-b" in report


def test_broken_upgrade_rolls_the_canary_back_and_never_touches_b(run_playbook):
    b = node("fleet-b")
    b.run(f"rm -f {PROBE_LOG} /var/tmp/onecat-probe.stop")
    unit_b = b.file("/etc/systemd/system/vllm.service").content_string
    lock_before = read_lock()
    b.run(PROBE)
    results = str(EPHEMERAL / "results" / "upgrade")
    run = run_playbook(SITE, "-e", BROKEN, "-e", f"onecat_results_dir={results}")
    print(f"\nbroken upgrade, canary rolled back: {run.seconds:.0f} s")
    b.run("touch /var/tmp/onecat-probe.stop")
    assert run.rc == 2, run.output[-4000:]
    flat = " ".join(run.output.split())
    assert "the smoke completion is one token repeated" in flat
    rows = rollout("upgrade")
    assert rows["fleet-a"]["rolled_back"] is True
    assert rows["fleet-a"]["serving"] is True
    assert rows["fleet-b"]["status"] == "untouched at serve"
    assert "rollout stopped before this batch" in rows["fleet-b"]["reasons"][0]
    assert read_lock() == lock_before
    # fleet-b kept serving throughout: every probe answered, and its unit was not touched.
    samples = b.file(PROBE_LOG).content_string.split()
    assert len(samples) >= 10, samples
    assert "FAIL" not in samples
    assert b.file("/etc/systemd/system/vllm.service").content_string == unit_b
    # The canary serves the old image again.
    assert node("fleet-a").run("curl -fsS http://127.0.0.1:8000/health").rc == 0


def test_rerun_with_nothing_changed_changes_nothing(run_playbook):
    results = str(EPHEMERAL / "results" / "rerun")
    run = run_playbook(SITE, "-e", f"onecat_results_dir={results}")
    print(f"\nre-run with nothing changed, 3 nodes: {run.seconds:.0f} s")
    assert run.rc == 2, run.output[-4000:]  # fleet-c is still held out
    for name in ("fleet-a", "fleet-b", "fleet-c"):
        assert run.recap(name)["changed"] == 0, run.output[-4000:]
    rows = rollout("rerun")
    assert rows["fleet-a"]["serving"] and rows["fleet-b"]["serving"]
