"""`python3 -m onecat.burnin`: burn this node in under load (exit 0 admitted, 1 refused,
2 could not run); roles/burnin runs it on each node before the gateway sends it users."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from onecat.answers.likelihood import FIRST_MAX_NLL, REL_TOLERANCE
from onecat.answers.prompts import read as read_prompts
from onecat.files import write_json
from onecat.health.nvml import NvmlUnavailable, unavailable_line
from onecat.serve.gate import key_from_env_file

EXIT_ADMITTED, EXIT_REFUSED, EXIT_CANNOT_RUN = 0, 1, 2


def _positive(kind: type) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m onecat.burnin", description=__doc__)
    parser.add_argument("--url", required=True, help="the node's own server")
    parser.add_argument("--model", required=True, help="its served model name")
    parser.add_argument(
        "--api-key-file", type=Path, help="environment file with VLLM_API_KEY (the server's key)"
    )
    parser.add_argument(
        "--seconds",
        type=_positive(float),
        default=600,
        help="how long the load lasts (default %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive(int),
        default=32,
        help="streaming clients, closed loop (default %(default)s)",
    )
    parser.add_argument(
        "--max-tokens",
        type=_positive(int),
        default=256,
        help="tokens per load request (default %(default)s)",
    )
    parser.add_argument(
        "--prompts",
        type=Path,
        required=True,
        help="fixed prompts, one per line (# comments), asked greedy; `PROMPT => ANSWER | "
        "ANSWER`: a right answer contains one; `score: TEXT`: a reference text to score",
    )
    parser.add_argument(
        "--references",
        type=Path,
        help="JSON {\"likelihood\": {text: NLL}}: the canary's likelihoods for the same image, "
        "model revision and engine arguments, which the node's idle ones must keep",
    )
    parser.add_argument(
        "--likelihood-tolerance",
        type=float,
        default=REL_TOLERANCE,
        metavar="SHARE",
        help="how far a likelihood (NLL) may move from its reference, relative "
        "(default %(default)s; 0 scores nothing: the likelihood check off)",
    )
    parser.add_argument(
        "--first-max-nll",
        type=float,
        default=FIRST_MAX_NLL,
        metavar="NATS",
        help="with no canary reference, the most an idle likelihood may be (it becomes the "
        "fleet's reference; default %(default)s: a perplexity of 403)",
    )
    parser.add_argument(
        "--ask-every",
        type=_positive(float),
        default=10.0,
        metavar="SECONDS",
        help="ask the prompts again under load this often (default %(default)s)",
    )
    parser.add_argument("--kernel-log", help="kernel log for Xid events (default: journalctl -k)")
    parser.add_argument("--out", type=Path, required=True, help="where burnin.json goes")
    args = parser.parse_args(argv)
    try:
        prompts = read_prompts(args.prompts)
        references = json.loads(args.references.read_text()) if args.references else None
        key = key_from_env_file(args.api_key_file.read_text()) if args.api_key_file else ""
    except (OSError, ValueError) as error:
        print(
            f"onecat burnin: cannot read the inputs on {platform.node()}: {error}", file=sys.stderr
        )
        return EXIT_CANNOT_RUN
    if not prompts.prompts:
        print(f"onecat burnin: {args.prompts} holds no prompt", file=sys.stderr)
        return EXIT_CANNOT_RUN
    try:
        import pynvml
    except ImportError:
        print(
            "onecat burnin: pynvml is missing; install nvidia-ml-py or python3-pynvml",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    try:
        # The load's HTTP client (onecat.bench.httpclient); without it: cannot run, not refused.
        from .run import Plan, burn_in
    except ImportError as error:
        print(f"onecat burnin: {error.name or 'a module'} is missing on {platform.node()}; "
              "install aiohttp into burnin_python's environment (roles/burnin does)",
              file=sys.stderr)
        return EXIT_CANNOT_RUN
    plan = Plan(
        args.url.rstrip("/"),
        args.model,
        key,
        args.seconds,
        args.concurrency,
        args.max_tokens,
        prompts,
        references if isinstance(references, dict) else None,
        ask_every_s=args.ask_every,
        kernel_log_path=args.kernel_log,
        tolerance=args.likelihood_tolerance,
        first_max_nll=args.first_max_nll,
    )
    try:
        document = burn_in(pynvml, plan)
    except NvmlUnavailable as error:
        print(f"onecat burnin: {unavailable_line(error, platform.node())}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except pynvml.NVMLError as error:
        print(f"onecat burnin: NVML failed on {platform.node()}: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    document["host"] = platform.node()
    write_json(args.out, document)
    load = document["load"]
    print(
        f"{platform.node()}: burn-in {document['verdict']} "
        f"({'admitted' if document['admitted'] else 'refused'}) after "
        f"{document['seconds']:.0f} s at concurrency {plan.concurrency}: "
        f"{load['completed']} requests, {load['failed']} failed, "
        f"{load['output_tokens_per_s']} output tokens/s"
    )
    for finding in document["findings"]:
        print(f"  {finding['severity'].upper():9} {finding['message']}")
    return EXIT_ADMITTED if document["admitted"] else EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
