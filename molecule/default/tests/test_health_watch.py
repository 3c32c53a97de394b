"""The watch after converge: its timer runs, its first look judged the node and recorded the
probe's references (likelihoods of fixed texts) for what serves."""

from __future__ import annotations

import json


def test_the_watch_looked_and_recorded_references(host):
    timer = host.service("onecat-watch.timer")
    assert timer.is_enabled and timer.is_running
    # Take a look now (the timer's next one is an hour away in this scenario).
    look = host.run("systemctl start onecat-watch.service")
    assert look.rc == 0, look.stderr
    verdict = json.loads(host.file("/run/onecat/verdict.json").content_string)
    assert verdict["verdict"] == "healthy", verdict
    assert verdict["mode"] == "in" and verdict["gpus"] == 2
    assert verdict["probe"] and all(p["ok"] for p in verdict["probe"]), verdict["probe"]
    serving = json.loads(host.file("/var/lib/onecat/serve/serving.json").content_string)
    refs = json.loads(host.file("/var/lib/onecat/watch/references.json").content_string)
    assert refs["identity"].startswith(serving["image_id"] + "|")
    # Keyed by the engine's arguments too (the serve stage records their digest).
    assert refs["identity"].endswith("|" + serving["engine_args_sha256"])
    # The answers are kept for the record, never compared (not batch-invariant); the
    # likelihoods of the reference texts are what later looks must keep.
    assert len(refs["answers"]) == 3 and all(refs["answers"].values())
    assert refs["likelihood"] and all(0 < v < 10 for v in refs["likelihood"].values())
    assert len(verdict["probe"]) == 3 + len(refs["likelihood"])
    assert host.file("/var/lib/onecat-gateway/watch-state").content_string == "up\n"
    status = host.run("onecat-watch; echo rc=$?")
    assert "rc=0" in status.stdout and ": healthy" in status.stdout, status.stdout
