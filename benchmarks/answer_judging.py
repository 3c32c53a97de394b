"""Answer judging on a non-batch-invariant engine: false refusals, false drains, detection.

Against the stand-in engine (tests/standin_engine), which is not batch-invariant like vLLM on a
V100 (greedy tokens after the first few depend on the requests in flight, logprobs move by
about a percent with the batch), on the NVML double's healthy PCIe pair:

1. `--burnins` (20) burn-ins at `--concurrency` (32) of `--seconds` (6) each, scaled down from
   the role's 10 minutes (the prompts are asked every second instead of every 10 s, so each
   burn-in still judges ~5 rounds of answers under load; the stand-in decodes in 2 ms a token
   instead of 25 + 3.5 per sequence). The first is the canary: its likelihoods become the
   references of the others, as roles/burnin records them. Prints refusals, how many answers
   under load differed from the idle ones (what exact matching refused on), and the largest
   relative move of a likelihood (NLL per token) under load.
2. `--looks` (200) watch looks (onecat.watch.look, acting: the gateway agent's answer) on the
   same engine under a closed-loop load of `--concurrency` streams, the references recorded at
   the first look. Prints drains and the likelihoods' largest move.
3. Each bad mode of the stand-in (STANDIN_BAD_MODE: the seed's partial collapse, CJK loop, loop
   cut mid-repeat, random tokens; and repeat, wrong, broken): looks until the watch drains the
   node, its first reason, and whether a burn-in (3 s) refuses it.

    .venv/bin/python benchmarks/answer_judging.py [--burnins 20] [--looks 200] [--seconds 6]

Loopback only; every loop is bounded. The NVML double is built into a temporary folder and
this script re-runs itself with the dynamic loader pointed at it (as the tests do).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "standin_engine"))
sys.path.insert(0, str(ROOT / "tests" / "nvml_double"))
sys.path.insert(0, str(ROOT))

import nvml_double_harness as double  # noqa: E402
from standin_harness import standin  # noqa: E402

from onecat.answers.probe import SCORE_PREFIX  # noqa: E402
from onecat.answers.prompts import DEFAULT_FILE, read  # noqa: E402

CHILD = "ONECAT_ANSWER_JUDGING_CHILD"
SCENARIO = "healthy_pcie_pair"
MODEL = "standin-model"
MODES = ("collapse", "cjk_loop", "cut_loop", "soup", "repeat", "wrong", "broken")


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--burnins", type=int, default=20)
    parser.add_argument("--looks", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=6.0, help="load per burn-in")
    parser.add_argument("--concurrency", type=int, default=32)
    return parser.parse_args(argv)


def _plan(url: str, seconds: float, concurrency: int, references: dict | None) -> Any:
    from onecat.burnin.run import Plan

    return Plan(url, MODEL, "", seconds, concurrency, 64, read(DEFAULT_FILE), references,
                ask_every_s=1.0, sample_every_s=0.5,
                kernel_log_path=str(double.kernel_log(SCENARIO)))


def _moves(idle: dict[str, float], entries: list[dict[str, Any]]) -> list[float]:
    """Relative moves of the likelihoods under load from the idle ones."""
    moves = []
    for entry in entries:
        text = entry["prompt"].removeprefix(SCORE_PREFIX)
        if entry["prompt"].startswith(SCORE_PREFIX) and entry["answer"] and text in idle:
            moves.append(abs(float(entry["answer"]) - idle[text]) / idle[text])
    return moves


def burnins(args: argparse.Namespace, work: Path) -> None:
    import pynvml

    from onecat.burnin.run import burn_in

    refused, differed, answered, moves = 0, 0, 0, []
    references: dict | None = None
    with standin(work / "burnin-engine") as server:
        for i in range(args.burnins):
            doc = burn_in(pynvml, _plan(server.url, args.seconds, args.concurrency, references))
            if i == 0 and doc["admitted"]:
                references = doc["references"]  # the canary's, as roles/burnin records them
            if not doc["admitted"]:
                refused += 1
                print(f"  burn-in {i + 1} REFUSED: {[f['message'] for f in doc['findings']]}")
            idle = doc["answers"]["idle"]
            under = doc["answers"]["under_load"]
            for entry in under:
                if not entry["prompt"].startswith(SCORE_PREFIX):
                    answered += 1
                    differed += entry["answer"] != idle.get(entry["prompt"])
            moves += _moves(doc["likelihood"]["idle"], under)
    print(f"burn-ins at c={args.concurrency}, {args.seconds:g} s each (scaled down from 10 min): "
          f"{args.burnins} run, {refused} refused")
    print(f"  answers under load that differ from the node's idle answer: {differed} of "
          f"{answered} (each one a refusal under exact matching)")
    print(f"  likelihood (NLL/token) under load vs idle: {len(moves)} scorings, largest move "
          f"{max(moves, default=0):.2%}, tolerance 10%")


def _probe(url: str, refs: Path, record: bool = False) -> Any:
    from onecat.watch.look import Probe

    return Probe(url, MODEL, read(DEFAULT_FILE), refs, record=record)


def _acting(agent: Path) -> Any:
    from onecat.watch.look import Acting

    return Acting(agent, lambda: None)


def _look(state: Path, url: str, record: bool = False) -> tuple[str, str, list[Any]]:
    """One look (acting); (verdict, the agent's answer, the probe's results' reasons)."""
    import json

    import pynvml

    from onecat.watch.look import look

    result, findings, _ = look(pynvml, state, state / "verdict.json", None,
                               str(double.kernel_log(SCENARIO)),
                               quality=_probe(url, state / "refs.json", record),
                               acting=_acting(state / "agent"))
    verdict = json.loads((state / "verdict.json").read_text())
    return result, (state / "agent").read_text().strip(), [
        p for p in verdict.get("probe") or [] if not p["ok"]] or [f.message for f in findings]


def looks(args: argparse.Namespace, work: Path) -> None:
    import json

    from onecat.burnin.load import Load

    state = work / "watch"
    state.mkdir()
    drains, unhealthy, moves = 0, 0, []
    with standin(work / "watch-engine") as server:
        _look(state, server.url, record=True)
        refs = json.loads((state / "refs.json").read_text())["likelihood"]
        load = Load(server.url, MODEL, "", args.concurrency, 64, "Write a long story").start()
        try:
            time.sleep(1.0)
            for _ in range(args.looks):
                verdict, answer, failed = _look(state, server.url)
                if verdict != "healthy":
                    unhealthy += 1
                    print(f"  look not healthy: {failed}")
                if answer.startswith(("drain", "maint")):
                    drains += 1
                doc = json.loads((state / "verdict.json").read_text())
                moves += _moves(refs, [{"prompt": p["prompt"], "answer": p.get("nll", "")}
                                       for p in doc["probe"] or []])
        finally:
            tally = load.stop()
    print(f"watch looks under load (c={args.concurrency}, {tally.completed} load requests): "
          f"{args.looks} looks, {unhealthy} not healthy, {drains} drains")
    if moves:
        print(f"  likelihood vs the recorded reference: largest move {max(moves):.2%}")


def detection(work: Path) -> None:
    import json

    import pynvml

    from onecat.burnin.run import burn_in

    print("bad modes (STANDIN_BAD_MODE): looks until drained / the first reason / burn-in")
    for mode in MODES:
        bad = work / f"bad-{mode}"
        state = work / f"state-{mode}"
        state.mkdir()
        with standin(work / f"engine-{mode}", env={"STANDIN_BAD_FILE": str(bad),
                                                   "STANDIN_BAD_MODE": mode}) as server:
            _look(state, server.url, record=True)
            canary = burn_in(pynvml, _plan(server.url, 1.0, 4, None))["references"]
            bad.touch()
            drained_after, reason, scores = None, "", []
            for n in range(1, 3):
                _, answer, failed = _look(state, server.url)
                reason = reason or (failed[0]["reason"] if failed and isinstance(failed[0], dict)
                                    else str(failed[:1]))
                scores = scores or [p for p in json.loads((state / "verdict.json").read_text())
                                    ["probe"] or [] if p["prompt"].startswith(SCORE_PREFIX)]
                if answer.startswith(("drain", "maint")):
                    drained_after = n
                    break
            doc = burn_in(pynvml, _plan(server.url, 3.0, 8, canary))
        verdict = "refused" if not doc["admitted"] else "ADMITTED"
        caught = sum(not p["ok"] for p in scores)
        nll = ", ".join(f"{canary['likelihood'][p['prompt'].removeprefix(SCORE_PREFIX)]:.1f} -> "
                        f"{p.get('nll', float('nan')):.1f}" for p in scores)
        print(f"  {mode:9} drained after {drained_after} look(s): {reason[:72]!r}; the "
              f"likelihood alone fails {caught}/{len(scores)} texts (NLL {nll}); burn-in "
              f"{verdict}")


def child(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="answer-judging-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        burnins(args, work)
        looks(args, work)
        detection(work)
        print(f"({time.monotonic() - started:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if os.environ.get(CHILD):
        return child(args)
    with tempfile.TemporaryDirectory(prefix="nvml-double-") as libdir:
        double.build(Path(libdir))
        env = {**double.double_env(Path(libdir), SCENARIO), CHILD: "1"}
        return subprocess.run([sys.executable, __file__, *(argv or sys.argv[1:])], env=env,
                              check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
