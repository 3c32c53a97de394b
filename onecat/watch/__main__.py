"""`python3 -m onecat.watch --once`: one look at this node's GPUs (exit 0 healthy, 1 findings,
2 NVML could not be read), for the watch's timer or any other monitoring system."""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from onecat.health.nvml import NvmlUnavailable
from onecat.serve.gate import key_from_env_file

from .look import EXIT_CANNOT_READ, EXIT_FINDINGS, EXIT_HEALTHY, Probe, look


def _probe(args: argparse.Namespace) -> Probe | None:
    if not args.probe_url:
        return None
    prompts = [line.strip() for line in args.probe_prompts.read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    key = key_from_env_file(args.api_key_file.read_text()) if args.api_key_file else ""
    return Probe(args.probe_url.rstrip("/"), args.probe_model, prompts, args.references,
                 key, args.record_references)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m onecat.watch", description=__doc__)
    parser.add_argument("--once", action="store_true", required=True,
                        help="one look, then exit (the timer calls it every interval)")
    parser.add_argument("--state-dir", type=Path, default=Path("/var/lib/onecat/watch"),
                        help="the previous look's readings (default: /var/lib/onecat/watch)")
    parser.add_argument("--verdict-file", type=Path, default=Path("/run/onecat/verdict.json"),
                        help="where the verdict goes (default: /run/onecat/verdict.json)")
    parser.add_argument("--metrics-file", type=Path,
                        default=Path("/var/lib/prometheus/node-exporter/onecat.prom"),
                        help="node_exporter textfile (written when its folder exists)")
    parser.add_argument("--kernel-log", help="kernel log to read Xid events from "
                                             "(default: journalctl -k, then dmesg)")
    parser.add_argument("--probe-url", help="the node's own server (e.g. http://127.0.0.1:8000): "
                                            "ask it the probe prompts")
    parser.add_argument("--probe-model", default="", help="served model name for the probe")
    parser.add_argument("--probe-prompts", type=Path,
                        help="file of fixed prompts, one per line (# comments)")
    parser.add_argument("--references", type=Path,
                        default=Path("/var/lib/onecat/watch/references.json"),
                        help="the answers recorded when the node passed its gate")
    parser.add_argument("--record-references", action="store_true",
                        help="record this look's answers as the references (after a gate)")
    parser.add_argument("--api-key-file", type=Path,
                        help="environment file with VLLM_API_KEY (the server's key)")
    args = parser.parse_args(argv)
    if args.probe_url and not (args.probe_model and args.probe_prompts):
        parser.error("--probe-url needs --probe-model and --probe-prompts")
    try:
        import pynvml
    except ImportError:
        print("onecat watch: pynvml is missing; install nvidia-ml-py or python3-pynvml",
              file=sys.stderr)
        return EXIT_CANNOT_READ
    try:
        result, findings = look(pynvml, args.state_dir, args.verdict_file, args.metrics_file,
                                args.kernel_log, quality=_probe(args))
    except NvmlUnavailable as error:
        print(f"onecat watch: NVIDIA driver not loaded on {platform.node()}: NVML error "
              f"{error.code}: {error.text}", file=sys.stderr)
        return EXIT_CANNOT_READ
    except pynvml.NVMLError as error:
        print(f"onecat watch: NVML failed on {platform.node()}: {error}", file=sys.stderr)
        return EXIT_CANNOT_READ
    except OSError as error:
        print(f"onecat watch: cannot record the look: {error}", file=sys.stderr)
        return EXIT_CANNOT_READ
    print(f"{platform.node()}: {result}")
    for finding in findings:
        print(f"  {finding.severity.upper():9} {finding.message}")
    return EXIT_HEALTHY if not findings else EXIT_FINDINGS


if __name__ == "__main__":
    sys.exit(main())
