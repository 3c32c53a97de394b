"""The watch after converge: its timer runs, its first look judged the node and recorded the
probe's reference answers for what serves."""

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
    assert len(refs["answers"]) == 3 and all(refs["answers"].values())
    assert host.file("/var/lib/onecat-gateway/watch-state").content_string == "up\n"
    status = host.run("onecat-watch; echo rc=$?")
    assert "rc=0" in status.stdout and ": healthy" in status.stdout, status.stdout
