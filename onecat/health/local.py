"""Check this node's GPUs without Ansible: gather NVML readings, judge them, print a verdict.

For triage on a node (3 a.m.): `python3 -m onecat.health` (or `onecat health
--local`). Exit status 0 when the verdict passes `--fail-on` (default: error),
1 when it does not, 2 when the check cannot run (no pynvml, no driver).
"""

from __future__ import annotations

from typing import Any

from onecat.health.judge import Thresholds, judge, summary
from onecat.health.nvml import gather


def check_local(nvml: Any, thresholds: Thresholds, kernel_log_path: str | None = None
                ) -> dict[str, Any]:
    """Readings plus verdict, problems and recommendations: the gpu_health facts."""
    readings = gather(nvml, check_xid=thresholds.check_xid, kernel_log_path=kernel_log_path)
    return with_judgement(readings, thresholds)


def with_judgement(readings: dict[str, Any], thresholds: Thresholds) -> dict[str, Any]:
    """The readings with verdict, problems, recommendations and the one-line summary."""
    facts = {**readings, **judge(readings, thresholds)}
    facts["summary"] = summary(facts)
    return facts


def format_report(facts: dict[str, Any]) -> str:
    """The verdict line, one line per problem, then what serving should do."""
    lines = [f"{facts.get('host') or 'this host'}: {facts['summary']}"]
    for problem in facts["problems"]:
        lines.append(f"  {problem['severity'].upper():7} {problem['check']}: {problem['message']}")
    recommendations = facts["recommendations"]
    flags = [name for name in ("nccl_p2p_disable", "disable_custom_all_reduce")
             if recommendations[name]]
    lines.append(f"  serve: parallelism {recommendations['preferred_parallelism']}"
                 f"{'; ' + ', '.join(flags) if flags else ''}")
    return "\n".join(lines)

