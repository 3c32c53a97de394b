"""The report's "Stages in this run": how far the rollout took each host (from rollout.json).

It says which stages ran instead of warning about files a stage that never ran would have
written (a deploy without the benchmark stage has no bench-c<N>.json per node).
"""

from __future__ import annotations

from onecat.fleet.rollout import yes_no
from onecat.text import one_line


def _names(hosts: list[str]) -> str:
    return ", ".join(hosts) or "none"


def stages_markdown(stages: dict[str, dict]) -> str:
    lines = ["## Stages in this run", "",
             "From rollout.json: the last stage each host entered, and why it stopped there.", "",
             "| host | stage | status | serving | in rotation | why |",
             "|---|---|---|---|---|---|"]
    for host, row in sorted(stages.items()):
        reasons = row.get("reasons") if isinstance(row.get("reasons"), list) else []
        lines.append(f"| {one_line(host)} | {one_line(row.get('stage', '-'))} "
                     f"| {one_line(row.get('status', '-'))} | {yes_no(row.get('serving'))} "
                     f"| {yes_no(row.get('in_rotation'))} "
                     f"| {one_line('; '.join(map(str, reasons))) or '-'} |")
    benched = sorted(host for host, row in stages.items() if row.get("stage") == "benchmark")
    lines.append("")
    if benched:
        lines.append(f"The benchmark stage ran on {_names(benched)}.")
    else:
        lines.append("The benchmark stage did not run on any host in this run (it runs only "
                     "when asked: `onecat deploy -i INVENTORY --tags bench`), so no node has "
                     "results of its own here.")
    return "\n".join(lines)
