"""The demo's closing sentences, computed from rollout.json and the results (never canned).

    python3 scripts/demo_summary.py RUN_DIR GATEWAY_URL SECONDS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def names(hosts: list[str]) -> str:
    return " and ".join([", ".join(hosts[:-1]), hosts[-1]] if len(hosts) > 1 else hosts) or "none"


def main(run_dir: Path, gateway: str, seconds: int) -> int:
    rollout = json.loads((run_dir / "rollout.json").read_text())
    rows = rollout["hosts"]
    serving = [r["host"] for r in rows if r["serving"]]
    rotation = [r["host"] for r in rows if r.get("in_rotation")]
    print("\n== what happened")
    print(f"The rollout {rollout['run_id']} reached {len(rows)} node(s); "
          f"{names(serving)} serve{'s' if len(serving) == 1 else ''}, and the gateway at "
          f"{gateway} sends traffic to {names(rotation)}.")
    for row in rows:
        if row["status"] != "ok":
            reasons = "; ".join(row["reasons"]) or "no reason recorded"
            print(f"{row['host']} is {row['status']}: {reasons}")
    completion = json.loads((run_dir / "completion.json").read_text())
    text = completion["choices"][0]["text"]
    tokens = completion.get("usage", {}).get("completion_tokens")
    print(f"One completion through the gateway returned {tokens} token(s) of the stand-in "
          f"engine's filler words (no model runs here): {text!r}.")
    summary = json.loads((run_dir / "gateway" / "summary.json").read_text())
    levels = summary.get("levels", summary) if isinstance(summary, dict) else summary
    for level in levels if isinstance(levels, list) else []:
        print(f"Through the gateway at concurrency {level.get('max_concurrency')}: "
              f"{level.get('completed')} completed, {level.get('failed')} failed, "
              f"{level.get('output_throughput', 0):.1f} output tok/s, "
              f"median TTFT {level.get('median_ttft_ms', 0):.0f} ms.")
    share_path = run_dir / "gateway" / "gateway-share.json"
    if share_path.exists():
        share = json.loads(share_path.read_text())
        parts = ", ".join(f"{name} {row['requests']} ({row['share']:.0%})"
                          for name, row in sorted(share["servers"].items()))
        timed = share.get("timed_requests", share["total"])
        if timed == share["total"]:
            print(f"HAProxy spread the benchmark's {timed} timed requests: {parts}.")
        else:
            print(f"HAProxy counted {share['total']} requests to the nodes for the benchmark's "
                  f"{timed} timed ones (retries, or other clients): {parts}.")
    print(f"The report is {run_dir / 'report.md'}; the demo took {seconds} s.")
    return 0 if rotation else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
