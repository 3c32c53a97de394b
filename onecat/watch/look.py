"""One look at this node: read NVML, compare with the previous look, write the verdict.

`python3 -m onecat.watch --once` runs one look (the watch's systemd timer runs it every
interval). The previous readings live in the state folder (a node keeps them across
restarts of the watch, not across reboots: after a reboot the volatile counters start again
at 0 and the first look sets the baseline). The verdict file says what the node's gateway
agent and `onecat status` read: verdict, findings, when. Metrics go to node_exporter's
textfile folder when it exists. Exit status: 0 healthy, 1 degraded or unhealthy, 2 NVML
could not be read.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from onecat.health.nvml import gather

from .deltas import Finding, Limits, compare, verdict
from .metrics import render

EXIT_HEALTHY, EXIT_FINDINGS, EXIT_CANNOT_READ = 0, 1, 2
STATE_FILE = "last-readings.json"


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def look(nvml: Any, state_dir: Path, verdict_file: Path, metrics_file: Path | None,
         kernel_log_path: str | None = None, limits: Limits | None = None,
         now: float | None = None) -> tuple[str, list[Finding]]:
    """One look: gather, compare with the previous look, record. Raises what gather raises."""
    readings = gather(nvml, check_xid=True, kernel_log_path=kernel_log_path)
    previous = _read_json(state_dir / STATE_FILE)
    findings = compare(previous, readings, limits)
    result = verdict(findings)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    document = {"verdict": result, "at": stamp, "first_look": previous is None,
                "gpus": len(readings.get("gpus") or []),
                "findings": [finding.as_dict() for finding in findings]}
    _write_atomic(verdict_file, json.dumps(document, indent=2, sort_keys=True) + "\n")
    _write_atomic(state_dir / STATE_FILE, json.dumps(readings, sort_keys=True) + "\n", 0o600)
    if metrics_file is not None and metrics_file.parent.is_dir():
        _write_atomic(metrics_file, render(readings, result, findings))
    return result, findings
