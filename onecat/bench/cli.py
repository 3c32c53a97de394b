"""`onecat bench`: benchmark one server (--url) or, later, the fleet (-i INVENTORY)."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from pathlib import Path

from onecat.bench.metrics import parse_goodput
from onecat.bench.observe import nvml_memory_reader
from onecat.bench.session import LIMITS, BenchError, BenchOptions, load_problem, run_bench
from onecat.serve.gate import key_from_env_file


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--concurrency {text!r}: give comma-separated integers, e.g. 1,8,16,32") from None
    if not levels or min(levels) < 1 or max(levels) > LIMITS["concurrency"]:
        raise argparse.ArgumentTypeError(f"--concurrency {text!r}: levels must be between 1 and "
                                         f"{LIMITS['concurrency']}")
    return levels


def _bounded(kind: type, limit: str, low: float = 0, low_open: bool = True) -> object:
    """An argparse type: a finite `kind` above `low` (or at least it) and at most LIMITS[limit]."""
    high = LIMITS[limit]

    def parse(text: str) -> object:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not "
                                             f"{'an integer' if kind is int else 'a number'}"
                                             ) from None
        if not math.isfinite(value) or value < low or (low_open and value == low) \
                or value > high:
            bound = f"> {low:g}" if low_open else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"{text!r} must be {bound} and at most {high:g}")
        return value
    return parse


DESCRIPTION = ("Closed-loop streaming benchmark: at each concurrency level c, exactly c clients "
               "send requests back to back. Writes DIR/bench-c<N>.json per level and "
               "DIR/summary.{json,csv,md}.")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark a vLLM server like `vllm bench serve` (closed loop, streaming)",
        description=DESCRIPTION,
    )
    add_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="server base URL, e.g. http://10.0.0.5:8000")
    where.add_argument("-i", "--inventory", help="fleet mode: benchmark every node of INVENTORY")
    parser.add_argument("--model", help="served model name (default: the first of /v1/models)")
    parser.add_argument("--api-key-file", type=Path,
                        help="file holding the server's API key, alone or as a VLLM_API_KEY= "
                             "line (sent as a Bearer token)")
    # Load-shape defaults are applied in main(): in fleet mode an option the user did not give
    # must not override the inventory's benchmark_* variables.
    parser.add_argument("--concurrency", type=_levels, default=None,
                        help="comma-separated concurrency levels (default: 1,8,16,32; multiturn: "
                             "one level, the number of clients, default 16)")
    parser.add_argument("--input-len", type=_bounded(int, "tokens"), default=None,
                        help="prompt length in tokens (default: 500)")
    parser.add_argument("--output-len", type=_bounded(int, "tokens"), default=None,
                        help="output tokens per request, EOS ignored (default: 256; "
                             "multiturn: 100)")
    parser.add_argument("--requests-per-level", type=_bounded(int, "requests_per_level"),
                        default=None, help="requests per level (default: max(4 x concurrency, 16))")
    parser.add_argument("--warmup", type=_bounded(int, "warmup", low_open=False),
                        default=None,
                        help="unmeasured requests before the first level (default: 2)")
    parser.add_argument("--seed", type=int, default=None, help="prompt seed (default: 0)")
    parser.add_argument("--timeout", type=_bounded(float, "timeout_s"), default=None,
                        help="per-request timeout in seconds (default: 600)")
    parser.add_argument("--workload", choices=("random", "multiturn"), default="random",
                        help="random: distinct prompts, a concurrency sweep (default); "
                             "multiturn: conversations whose every turn resends the "
                             "conversation so far (chat API), for prefix caching and the "
                             "gateway's affinity routing: DIR/multiturn.json")
    multiturn = parser.add_argument_group("--workload multiturn")
    multiturn.add_argument("--conversations", type=_bounded(int, "requests_per_level"),
                           default=64, help="conversations (default: 64)")
    multiturn.add_argument("--turns", type=_bounded(int, "requests_per_level"), default=8,
                           help="turns per conversation (default: 8)")
    multiturn.add_argument("--system-len", type=_bounded(int, "tokens"), default=2048,
                           help="shared system prompt, in words ~ tokens (default: 2048)")
    multiturn.add_argument("--tenants", type=_bounded(int, "requests_per_level"), default=1,
                           help="distinct system prompts, one per tenant; conversation n has "
                                "tenant n mod K's (default: 1, one prompt for all)")
    multiturn.add_argument("--turn-len", type=_bounded(int, "tokens"), default=300,
                           help="each user turn, in words ~ tokens (default: 300)")
    multiturn.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                           help="a node's base URL whose /metrics has vLLM's prefix-cache "
                                "counters, read before and after (repeat for each node behind "
                                "a gateway; default: --url itself unless --gateway-stats)")
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                        help="OpenAI endpoint to load (default: completions)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature to send (default: none, the server's "
                             "default, as vllm bench serve; 0 = greedy, which 1Cat serves "
                             "through a top-1 shortcut: its TPOT is not comparable)")
    parser.add_argument("--goodput", nargs="+", metavar="KEY:MS", default=None,
                        help="service level objectives for request_goodput, as vllm bench "
                             "serve: ttft:MS tpot:MS e2el:MS (a request is good when it meets "
                             "every one)")
    parser.add_argument("--out", type=Path, help="directory for the result files (required)")
    parser.add_argument("--save-detailed", action="store_true",
                        help="also write every request (id, TTFT, TPOT, E2E, tokens, error) "
                             "into bench-c<N>.json")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--gateway-stats", metavar="URL",
                        help="with --url at an onecat gateway: its stats page (e.g. "
                             "http://127.0.0.1:8404/stats), read before and after the run; "
                             "each node's share of the requests goes into gateway-share.json")
    # Fleet mode (-i) also takes ansible-playbook's --limit/--check/-e/--tags. Imported here so
    # that `python -m onecat.bench` on a node needs nothing beyond this package.
    from onecat.fleet.deploy import add_run_options

    add_run_options(parser, inventory=False)
    parser.set_defaults(func=main)


def run_fleet(args: argparse.Namespace) -> int:
    """Fleet mode: the benchmark playbook runs this client on every node against its own server."""
    import json

    if args.temperature is not None or args.goodput:
        print("onecat bench: --temperature and --goodput work with --url only (one server); "
              "fleet mode measures with the server's default sampling", file=sys.stderr)
        return 2

    from onecat.fleet.deploy import run_fleet_command

    given = {
        "benchmark_concurrency": args.concurrency,
        "benchmark_input_len": args.input_len,
        "benchmark_output_len": args.output_len,
        "benchmark_warmup": args.warmup,
        "benchmark_seed": args.seed,
        "benchmark_timeout_s": None if args.timeout is None else int(args.timeout),
        "benchmark_requests_per_level": args.requests_per_level,
        "benchmark_model": args.model,
    }
    # Only what the user gave: the rest comes from the inventory's benchmark_* variables.
    load = {name: value for name, value in given.items() if value is not None}
    return run_fleet_command(args, "playbooks/benchmark.yml", extra_vars=[json.dumps(load)])


def _read_key(path: Path) -> str | None:
    """The key alone, or the VLLM_API_KEY= line of an environment file (the serve role's).

    An environment file without a key (VLLM_API_KEY= empty or absent) means the server has none.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise BenchError(f"cannot read --api-key-file {path}: {exc.strerror}") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and not lines[0].startswith(("VLLM_API_KEY=", "export ")):
        return lines[0]  # the key alone (it may itself contain "=")
    if not lines:
        raise BenchError(f"--api-key-file {path} is empty; put the server's API key in it")
    return key_from_env_file(text) or None


def _read_metrics_key(path: Path | None) -> str | None:
    """The ONECAT_METRICS_KEY= line of the serve role's environment file, None without one.

    The node's key guard (roles/vllm_serve/files/onecat_guard.py) answers /metrics to the
    scrapers' key only, not to the API key: with the serve role's file as --api-key-file (what
    the benchmark role passes) the KV-cache peaks and the prefix-cache counters are read with
    it. A key file without that line sends the API key, as an unguarded vLLM needs."""
    if path is None:
        return None
    try:
        text = path.read_text()
    except OSError:
        return None  # _read_key names the unreadable file
    return key_from_env_file(text, "ONECAT_METRICS_KEY") or None


def _write_share(args: argparse.Namespace, before: str, levels: list[dict]) -> None:
    import json

    from onecat.gateway.runtime import RuntimeApiError
    from onecat.gateway.share import fetch_stats, share

    try:
        document = share(before, fetch_stats(args.gateway_stats))
    except (OSError, ValueError, RuntimeApiError) as exc:
        print(f"onecat bench: --gateway-stats: no per-node share ({exc})", file=sys.stderr)
        return
    # What the benchmark sent while timing: HAProxy's count can only exceed it by retries
    # (or by other clients of the gateway).
    document["timed_requests"] = sum((level.get("completed") or 0) + (level.get("failed") or 0)
                                     for level in levels)
    (args.out / "gateway-share.json").write_text(json.dumps(document, indent=2) + "\n")
    parts = ", ".join(f"{name} {row['requests']} ({row['share']:.0%})"
                      for name, row in document["servers"].items())
    if not args.quiet:
        print(f"onecat bench: timed requests per node through the gateway: {parts}",
              file=sys.stderr)


# The single-server defaults (the seed's section 4.1 shape).
SINGLE_SERVER_DEFAULTS = {"concurrency": [1, 8, 16, 32], "input_len": 500, "output_len": 256,
                          "warmup": 2, "seed": 0, "timeout": 600.0}


def run_multiturn(args: argparse.Namespace) -> int:
    """--workload multiturn: one closed-loop run of conversations (onecat/bench/multiturn.py)."""
    from onecat.bench.multiturn import MultiturnOptions
    from onecat.bench.multiturn import main as multiturn_main

    if args.out is None:
        print("onecat bench: --out DIR is required (where the result files go)", file=sys.stderr)
        return 2
    levels = args.concurrency or [16]
    if len(levels) != 1:
        print("onecat bench: --workload multiturn runs one --concurrency level (clients), "
              f"not {len(levels)}", file=sys.stderr)
        return 2
    try:
        key = _read_key(args.api_key_file) if args.api_key_file else None
    except BenchError as exc:
        print(f"onecat bench: {exc}", file=sys.stderr)
        return 1
    metrics = args.metrics_url or ([] if args.gateway_stats else [args.url])
    options = MultiturnOptions(
        url=args.url, out=args.out, model=args.model, api_key=key,
        metrics_key=_read_metrics_key(args.api_key_file),
        conversations=args.conversations, turns=args.turns, system_len=args.system_len,
        tenants=args.tenants, turn_len=args.turn_len, output_len=args.output_len or 100,
        concurrency=levels[0],
        seed=args.seed or 0, timeout=args.timeout or 600.0, metrics_urls=metrics,
        quiet=args.quiet)
    try:
        return multiturn_main(options, args.gateway_stats)
    except ValueError as exc:  # a malformed --url
        print(f"onecat bench: --url: {exc}", file=sys.stderr)
        return 2


def main(args: argparse.Namespace) -> int:
    if args.inventory:
        if args.workload != "random":
            print("onecat bench: --workload multiturn works with --url only", file=sys.stderr)
            return 2
        return run_fleet(args)
    if args.workload == "multiturn":
        return run_multiturn(args)
    for name, value in SINGLE_SERVER_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.out is None:
        print("onecat bench: --out DIR is required (where the result files go)", file=sys.stderr)
        return 2
    problem = load_problem(args.concurrency, args.requests_per_level, args.warmup,
                           args.input_len)
    if problem:
        print(f"onecat bench: {problem}", file=sys.stderr)
        return 2
    # The gateway's stats: read once now (a wrong URL stops the run before any load), and again
    # after the prompts (/tokenize) and the warm-up, so the share counts the timed requests only.
    stats_before: list[str] = []
    if args.gateway_stats:
        from onecat.gateway.share import fetch_stats

        try:
            stats_before.append(fetch_stats(args.gateway_stats))
        except (OSError, ValueError) as exc:
            print(f"onecat bench: --gateway-stats {args.gateway_stats}: cannot read the "
                  f"gateway's stats ({exc})", file=sys.stderr)
            return 2

        def before_timed() -> None:
            try:
                stats_before[:] = [fetch_stats(args.gateway_stats)]
            except (OSError, ValueError):
                stats_before.clear()  # no share rather than one that counts the prompts
    try:
        goodput = parse_goodput(args.goodput) if args.goodput else None
    except ValueError as exc:
        print(f"onecat bench: {exc}", file=sys.stderr)
        return 2
    try:
        options = BenchOptions(
            url=args.url, out=args.out, model=args.model,
            api_key=_read_key(args.api_key_file) if args.api_key_file else None,
            metrics_key=_read_metrics_key(args.api_key_file),
            concurrency=args.concurrency, input_len=args.input_len,
            output_len=args.output_len, requests_per_level=args.requests_per_level,
            warmup=args.warmup, seed=args.seed, timeout=args.timeout,
            chat=args.endpoint == "chat", quiet=args.quiet, detailed=args.save_detailed,
            temperature=args.temperature, goodput=goodput,
            # Through a gateway /metrics is one node's at a time, and each scrape would be
            # counted as a request to that node.
            scrape_metrics=not args.gateway_stats,
            before_timed=before_timed if args.gateway_stats else None,
        )
        levels = asyncio.run(run_bench(options, nvml_memory_reader()))
    except BenchError as exc:
        print(f"onecat bench: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a malformed --url
        print(f"onecat bench: --url: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"onecat bench: cannot write results to {args.out}: {exc.strerror}",
              file=sys.stderr)
        return 1
    if stats_before:
        _write_share(args, stats_before[0], levels)
    elif args.gateway_stats:
        print("onecat bench: --gateway-stats: the gateway's stats could not be read before the "
              "timed requests: no per-node share", file=sys.stderr)
    if not any(level["completed"] for level in levels):
        errors: dict[str, int] = {}
        for level in levels:
            for reason, count in level["errors"].items():
                errors[reason] = errors.get(reason, 0) + count
        print(f"onecat bench: every request failed ({errors}); see {args.out}/summary.md",
              file=sys.stderr)
        return 1
    return 0
