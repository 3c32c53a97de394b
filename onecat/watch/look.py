"""One look at this node: read NVML, compare with the previous look, write the verdict.

`python3 -m onecat.watch --once` runs one look (the watch's systemd timer runs it every
interval). With a probe (the node's server URL and a prompts file), it also asks the server
each fixed prompt, greedy, and compares the answers with the references recorded when the
node passed its gate (`--record-references` records them); a failed probe is `unhealthy`.

The previous readings live in the state folder (after a reboot the volatile counters start
again at 0, which the rules read as a reload, not as errors). The verdict file says what the
node's gateway agent and `onecat status` read: verdict, findings, when. Metrics go to
node_exporter's textfile folder when it exists. Exit status: 0 healthy, 1 degraded or
unhealthy, 2 NVML could not be read.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onecat.health.nvml import gather

from .deltas import UNHEALTHY, Finding, Limits, compare, verdict
from .metrics import render
from .probe import ProbeResult, probe

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


@dataclass(frozen=True)
class Probe:
    """The quality probe: the node's own server and the fixed prompts it is asked."""

    url: str
    model: str
    prompts: list[str]
    references_file: Path
    api_key: str = ""
    record: bool = False


def run_probe(config: Probe) -> tuple[list[ProbeResult], list[Finding]]:
    """Ask every prompt; record the answers as references, or judge them against them."""
    stored = _read_json(config.references_file) or {}
    references = {} if config.record else stored.get("answers") or {}
    results = [probe(config.url, config.model, prompt, references.get(prompt),
                     api_key=config.api_key) for prompt in config.prompts]
    findings = [Finding(UNHEALTHY, "quality", None,
                        f"the quality probe {result.prompt[:40]!r} failed: {result.reason}")
                for result in results if not result.ok]
    if config.record and not findings:
        document = {"model": config.model, "answers": {r.prompt: r.answer for r in results}}
        _write_atomic(config.references_file, json.dumps(document, indent=2, sort_keys=True) + "\n")
    return results, findings


def look(nvml: Any, state_dir: Path, verdict_file: Path, metrics_file: Path | None,
         kernel_log_path: str | None = None, limits: Limits | None = None,
         now: float | None = None, quality: Probe | None = None) -> tuple[str, list[Finding]]:
    """One look: gather, compare with the previous look, probe, record.

    Raises what gather raises (NVML cannot be read)."""
    readings = gather(nvml, check_xid=True, kernel_log_path=kernel_log_path)
    previous = _read_json(state_dir / STATE_FILE)
    findings = compare(previous, readings, limits)
    results: list[ProbeResult] = []
    if quality is not None:
        results, failed = run_probe(quality)
        findings += failed
    result = verdict(findings)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    document = {"verdict": result, "at": stamp, "first_look": previous is None,
                "gpus": len(readings.get("gpus") or []),
                "findings": [finding.as_dict() for finding in findings],
                "probe": [{"prompt": r.prompt, "ok": r.ok, "reason": r.reason,
                           "seconds": round(r.seconds, 3)} for r in results] or None}
    _write_atomic(verdict_file, json.dumps(document, indent=2, sort_keys=True) + "\n")
    _write_atomic(state_dir / STATE_FILE, json.dumps(readings, sort_keys=True) + "\n", 0o600)
    if metrics_file is not None and metrics_file.parent.is_dir():
        _write_atomic(metrics_file, render(
            readings, result, findings,
            probe_ok=all(r.ok for r in results) if results else None,
            probe_seconds=sum(r.seconds for r in results) if results else None))
    return result, findings
