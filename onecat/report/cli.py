"""`onecat report results/<run-id>`: the fleet table, the seed reference, outliers, plots."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from onecat.report.analysis import DEFAULT_THRESHOLD, failures, find_outliers, fleet_medians
from onecat.report.burnin import burnin_markdown, load_burnins, write_burnin_plot
from onecat.report.load import ReportError, load_run
from onecat.report.render import build_json, build_markdown


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a fraction between 0 and 1, e.g. 0.15")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="render a fleet benchmark run (results/<run-id>) as markdown, JSON, PNG",
        description="Reads RUN_DIR/<host>/bench-c<N>.json (and <host>/health.json when present) "
                    "and writes report.md, report.json and PNG plots.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="results/<run-id>")
    parser.add_argument("--out", type=Path, help="where to write the report (default: RUN_DIR)")
    parser.add_argument("--threshold", type=_fraction, default=DEFAULT_THRESHOLD,
                        help="flag nodes this fraction below the fleet median output tok/s "
                             f"(default: {DEFAULT_THRESHOLD})")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.set_defaults(func=main)


def make_report(run_dir: Path, out: Path, threshold: float = DEFAULT_THRESHOLD,
                plots: bool = True) -> dict:
    """Write report.md, report.json (and the plots) into `out`; returns the JSON document."""
    nodes, warnings = load_run(run_dir)
    medians = fleet_medians(nodes)
    outliers = find_outliers(nodes, medians, threshold)
    failed = failures(nodes)
    out.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    if plots:
        try:
            from onecat.report.plots import write_plots
        except ImportError:  # pragma: no cover - matplotlib is a dependency
            warnings.append("matplotlib is not installed: no plots (pip install matplotlib)")
        else:
            written = write_plots(nodes, out)
    run_id = run_dir.resolve().name
    args = (run_id, nodes, medians, outliers, failed, threshold, warnings, written)
    document = build_json(*args)
    shares = load_shares(run_dir, warnings)
    markdown = build_markdown(*args)
    if shares:
        document["gateway_share"] = shares
        markdown = markdown.rstrip("\n") + "\n\n" + share_markdown(shares, nodes) + "\n"
    burnins = load_burnins(run_dir, warnings)
    if burnins:
        plot = write_burnin_plot(burnins, out) if plots and written else None
        document["burnin"] = {host: {k: v for k, v in data.items() if k != "series"}
                              for host, data in burnins.items()}
        markdown = markdown.rstrip("\n") + "\n\n" + burnin_markdown(burnins, plot) + "\n"
    (out / "report.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    (out / "report.md").write_text(markdown)
    return document


def load_shares(run_dir: Path, warnings: list[str]) -> dict[str, dict]:
    """gateway-share.json files (written by `onecat bench --gateway-stats`), by folder name."""
    shares: dict[str, dict] = {}
    for path in sorted(run_dir.glob("*/gateway-share.json")):
        try:
            data = json.loads(path.read_text())
            if not isinstance(data.get("servers"), dict):
                raise ValueError("no servers")
        except (OSError, ValueError, AttributeError) as exc:
            warnings.append(f"skipped {path}: {exc}")
            continue
        shares[path.parent.name] = data
    return shares


def share_markdown(shares: dict[str, dict], nodes: list) -> str:
    """Each node's share of the requests through the gateway, next to its own best result."""
    best = {node.host: max((lvl.get("output_throughput") or 0.0)
                           for lvl in node.levels.values()) for node in nodes}
    lines = ["## Requests per node through the gateway", "",
             "From HAProxy's stats (sessions per server during the run through the gateway).", ""]
    for run, data in shares.items():
        lines += [f"Run `{run}`: {data.get('total', 0)} requests.", "",
                  "| node | requests | share | gateway status | node's own best output tok/s |",
                  "|---|---|---|---|---|"]
        for name, row in sorted(data["servers"].items()):
            own = f"{best[name]:.1f}" if name in best else "-"
            lines.append(f"| {name} | {row.get('requests', 0)} | {row.get('share', 0):.1%} | "
                         f"{row.get('status', '')} | {own} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def main(args: argparse.Namespace) -> int:
    out = args.out or args.run_dir
    try:
        document = make_report(args.run_dir, out, args.threshold, not args.no_plots)
    except ReportError as exc:
        print(f"onecat report: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"onecat report: cannot write the report into {out}: {exc.strerror}",
              file=sys.stderr)
        return 1
    flagged = len(document["outliers"])
    print(f"onecat report: wrote {out / 'report.md'} ({len(document['nodes'])} nodes, "
          f"{flagged} outlier(s))", file=sys.stderr)
    return 0
