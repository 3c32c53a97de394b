"""Read a run directory: results/<run-id>/<host>/bench-c<N>.json and optional health.json.

A folder with a gateway-share.json is a run through the gateway (`onecat bench --url GATEWAY
--gateway-stats ...`): the fleet as one endpoint, not a node. rollout.json, when the run has
one, says which stages ran on each host, so a host the benchmark stage never reached is not
a missing file.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onecat.fleet.rollout import rows_by_host

LEVEL_FILE = re.compile(r"^bench-c(\d+)\.json$")


class ReportError(Exception):
    """The run directory cannot be reported on (one actionable line)."""


@dataclass
class NodeResult:
    host: str
    levels: dict[int, dict] = field(default_factory=dict)  # concurrency -> bench-c<N>.json
    health: dict | None = None  # the gpu_health facts, when the role saved them
    share: dict | None = None  # gateway-share.json: this is a run through the gateway


@dataclass
class Run:
    nodes: list[NodeResult]  # each node benchmarked on its own, by host name
    gateways: list[NodeResult]  # runs through the gateway (their `share` is set)
    stages: dict[str, dict]  # rollout.json's row per host ({} without rollout.json)
    warnings: list[str]


# Keys of bench-c<N>.json the report computes with, and what each must hold.
LEVEL_NUMBERS = ("output_throughput", "total_token_throughput", "median_ttft_ms", "p99_ttft_ms",
                 "median_tpot_ms", "kv_cache_usage_perc_max")
LEVEL_COUNTS = ("completed", "failed")
PCIE_NUMBERS = ("gen", "max_gen", "width", "max_width")
MAX_FILE_BYTES = 64 * 1024 * 1024  # a level file is kilobytes; --save-detailed a few MiB


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _refuse(path: Path, key: str, value: Any, expected: str) -> ReportError:
    shown = json.dumps(value, default=str)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return ReportError(f"{path}: {key} is {shown}, expected {expected}: regenerate the file "
                       "(onecat bench, or the health stage) or remove it")


def check_level(path: Path, data: dict) -> None:
    """Refuse a bench-c<N>.json whose numbers are not numbers (the report would lie or crash)."""
    for key in LEVEL_NUMBERS:
        if data.get(key) is not None and not _number(data[key]):
            raise _refuse(path, key, data[key], "a finite number or null")
    for key in LEVEL_COUNTS:
        if data.get(key) is not None and not _count(data[key]):
            raise _refuse(path, key, data[key], "a count (an integer >= 0)")
    errors = data.get("errors")
    if errors is not None and not (isinstance(errors, dict)
                                   and all(_count(n) for n in errors.values())):
        raise _refuse(path, "errors", errors, "an object of reason: count")
    memory = data.get("gpu_memory_used_mib")
    if memory is not None and not (isinstance(memory, list) and all(map(_number, memory))):
        raise _refuse(path, "gpu_memory_used_mib", memory, "a list of MiB per GPU")


def check_health(path: Path, health: Any) -> dict:
    """The gpu_health facts of health.json (bare or wrapped), shapes checked."""
    if isinstance(health, dict) and "gpus" not in health and "gpu_health" in health:
        health = health["gpu_health"]
    if not isinstance(health, dict):
        raise _refuse(path, "gpu_health", health, "the gpu_health facts object")
    for key, item_check, expected in (("gpus", dict, "a list of GPU objects"),
                                      ("pairs", dict, "a list of GPU pair objects")):
        items = health.get(key)
        if items is not None and not (isinstance(items, list)
                                      and all(isinstance(i, item_check) for i in items)):
            raise _refuse(path, key, items, expected)
    for gpu in health.get("gpus") or []:
        pcie = gpu.get("pcie")
        if pcie is not None and not (isinstance(pcie, dict) and all(
                pcie.get(k) is None or _number(pcie[k]) for k in PCIE_NUMBERS)):
            raise _refuse(path, "gpus[].pcie", pcie, "{gen, max_gen, width, max_width} numbers")
        reasons = gpu.get("throttle_reasons")
        if reasons is not None and not (isinstance(reasons, list)
                                        and all(isinstance(r, str) for r in reasons)):
            raise _refuse(path, "gpus[].throttle_reasons", reasons, "a list of names")
    for pair in health.get("pairs") or []:
        if pair.get("gpus") is not None and not isinstance(pair["gpus"], list):
            raise _refuse(path, "pairs[].gpus", pair["gpus"], "a list of GPU indexes")
    return health


def _read_json(path: Path, warnings: list[str]) -> dict | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES or not path.is_file():
            raise ValueError("not a regular file of at most 64 MiB")
        data = json.loads(path.read_text())
    except RecursionError:
        warnings.append(f"skipped {path}: JSON nested too deeply")
        return None
    except (OSError, ValueError) as exc:
        warnings.append(f"skipped {path}: {' '.join(str(exc).split())}")
        return None
    if not isinstance(data, dict):
        warnings.append(f"skipped {path}: not a JSON object")
        return None
    return data


def _rollout_rows(run_dir: Path, warnings: list[str]) -> dict[str, dict]:
    """rollout.json's rows by host; {} when the run has none (a bench run by hand)."""
    path = run_dir / "rollout.json"
    if not path.is_file():
        return {}
    data = _read_json(path, warnings)
    if data is not None and not isinstance(data.get("hosts"), list):
        warnings.append(f"skipped {path}: no list of hosts")
    return rows_by_host(data)


def _share(path: Path, warnings: list[str]) -> dict | None:
    data = _read_json(path, warnings) if path.is_file() else None
    if data is None:
        return None
    servers = data.get("servers")
    if not isinstance(servers, dict) or not all(isinstance(row, dict)
                                                for row in servers.values()):
        warnings.append(f"skipped {path}: no object of servers")
        return None
    for key in ("total", "timed_requests"):
        if data.get(key) is not None and not _count(data[key]):
            raise _refuse(path, key, data[key], "a count (an integer >= 0)")
    for name, row in servers.items():
        if not _count(row.get("requests", 0)) or not _number(row.get("share", 0)):
            raise _refuse(path, f"servers.{name}", row, "{requests: count, share: fraction}")
    return data


def _not_benched(host: str, row: dict | None) -> str | None:
    """Why a host folder holds no benchmark (a warning), or None when none was meant to be."""
    if row is None:
        return f"{host}: no bench-c<N>.json files"
    stage = row.get("stage")
    if stage == "benchmark":
        return (f"{host}: the benchmark stage ran but wrote no bench-c<N>.json files; "
                "see this run's log")
    return None  # the rollout stopped before the benchmark, or it was not in this run


def read_run(run_dir: Path) -> Run:
    """The run's node results, gateway runs and stages, and warnings about unusable files."""
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a directory; pass results/<run-id> "
                          "as written by the benchmark role")
    warnings: list[str] = []
    stages = _rollout_rows(run_dir, warnings)
    run = Run([], [], stages, warnings)
    for host_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        node = NodeResult(host_dir.name)
        for path in sorted(host_dir.iterdir()):
            match = LEVEL_FILE.match(path.name)
            if match and (data := _read_json(path, warnings)) is not None:
                check_level(path, data)
                node.levels[int(match.group(1))] = data
        health_path = host_dir / "health.json"
        if health_path.is_file() and (health := _read_json(health_path, warnings)) is not None:
            # Accept the facts as saved, or wrapped as ansible_facts.gpu_health.
            node.health = check_health(health_path, health)
        if node.levels:
            node.share = _share(host_dir / "gateway-share.json", warnings)
            (run.gateways if node.share is not None else run.nodes).append(node)
        # Not hosts: plots, ansible-runner's artifacts, the health stage's reports.
        elif host_dir.name not in ("plots", "runner", "health"):
            warning = _not_benched(host_dir.name, stages.get(host_dir.name))
            if warning:
                warnings.append(warning)
    if not run.nodes and not run.gateways:
        raise ReportError(f"no {run_dir}/<host>/bench-c<N>.json files found; run the benchmark "
                          "first (ansible-playbook site.yml --tags bench, or onecat bench "
                          "--url GATEWAY --out RUN_DIR/gateway --gateway-stats ...)")
    return run


def load_run(run_dir: Path) -> tuple[list[NodeResult], list[str]]:
    """Nodes benchmarked on their own, by host name, and the warnings (see read_run)."""
    run = read_run(run_dir)
    return run.nodes, run.warnings
