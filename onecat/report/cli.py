"""`onecat report results/<run-id>`: the fleet table, the seed reference, outliers, plots."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from onecat.report.analysis import DEFAULT_THRESHOLD, failures, find_outliers, fleet_medians
from onecat.report.burnin import burnin_markdown, load_burnins, write_burnin_plot
from onecat.report.gateway import gateway_json, gateway_markdown
from onecat.report.load import ReportError, read_run
from onecat.report.render import build_json, build_markdown
from onecat.report.stages import stages_markdown


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
        description="Reads RUN_DIR/<host>/bench-c<N>.json (and <host>/health.json when present), "
                    "runs through the gateway (a folder with gateway-share.json) and "
                    "RUN_DIR/rollout.json, and writes report.md, report.json and PNG plots.")
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
    run = read_run(run_dir)
    nodes, warnings = run.nodes, run.warnings
    medians = fleet_medians(nodes)
    outliers = find_outliers(nodes, medians, threshold)
    failed = failures(nodes + run.gateways)
    out.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    if plots and nodes:
        try:
            from onecat.report.plots import write_plots
        except ImportError:  # pragma: no cover - matplotlib is a dependency
            warnings.append("matplotlib is not installed: no plots (pip install matplotlib)")
        else:
            written = write_plots(nodes, out)
    before = [stages_markdown(run.stages)] if run.stages else []
    after = [gateway_markdown(run.gateways, nodes)] if run.gateways else []
    burnins = load_burnins(run_dir, warnings)
    if burnins:
        plot = write_burnin_plot(burnins, out) if plots and written else None
        after.append(burnin_markdown(burnins, plot))
    run_id = run_dir.resolve().name
    args = (run_id, nodes, medians, outliers, failed, threshold, warnings, written)
    document = build_json(*args)
    markdown = build_markdown(*args, gateway_runs=len(run.gateways), sections=(before, after))
    if run.stages:
        document["stages"] = run.stages
    if run.gateways:
        document["gateway_runs"] = gateway_json(run.gateways)
        document["gateway_share"] = {g.host: g.share for g in run.gateways}
    if burnins:
        document["burnin"] = {host: {k: v for k, v in data.items() if k != "series"}
                              for host, data in burnins.items()}
    (out / "report.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    (out / "report.md").write_text(markdown)
    return document


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
    nodes = len(document["nodes"])
    through = len(document.get("gateway_runs", {}))
    print(f"onecat report: wrote {out / 'report.md'} ({nodes} node{'s' if nodes != 1 else ''} "
          f"benchmarked on {'their' if nodes != 1 else 'its'} own, {through} run(s) through "
          f"the gateway, {flagged} outlier(s))", file=sys.stderr)
    return 0
