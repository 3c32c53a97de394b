"""Read a run directory: results/<run-id>/<host>/bench-c<N>.json and optional health.json."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

LEVEL_FILE = re.compile(r"^bench-c(\d+)\.json$")


class ReportError(Exception):
    """The run directory cannot be reported on (one actionable line)."""


@dataclass
class NodeResult:
    host: str
    levels: dict[int, dict] = field(default_factory=dict)  # concurrency -> bench-c<N>.json
    health: dict | None = None  # the gpu_health facts, when the role saved them


def _read_json(path: Path, warnings: list[str]) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        warnings.append(f"skipped {path}: {exc}")
        return None
    if not isinstance(data, dict):
        warnings.append(f"skipped {path}: not a JSON object")
        return None
    return data


def load_run(run_dir: Path) -> tuple[list[NodeResult], list[str]]:
    """Nodes sorted by host name, and warnings about files that could not be used."""
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a directory; pass results/<run-id> "
                          "as written by the benchmark role")
    warnings: list[str] = []
    nodes: list[NodeResult] = []
    for host_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        node = NodeResult(host_dir.name)
        for path in sorted(host_dir.iterdir()):
            match = LEVEL_FILE.match(path.name)
            if match and (data := _read_json(path, warnings)) is not None:
                node.levels[int(match.group(1))] = data
        health_path = host_dir / "health.json"
        if health_path.is_file() and (health := _read_json(health_path, warnings)) is not None:
            # Accept the facts as saved, or wrapped as ansible_facts.gpu_health.
            node.health = health.get("gpu_health", health) if "gpus" not in health else health
        if node.levels:
            nodes.append(node)
        # Not hosts: plots, ansible-runner's artifacts, the health stage's reports.
        elif host_dir.name not in ("plots", "runner", "health"):
            warnings.append(f"{host_dir.name}: no bench-c<N>.json files")
    if not nodes:
        raise ReportError(f"no {run_dir}/<host>/bench-c<N>.json files found; run the benchmark "
                          "first (ansible-playbook site.yml --tags bench)")
    return nodes, warnings
