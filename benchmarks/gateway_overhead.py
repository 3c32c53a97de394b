"""What one HAProxy gateway costs per streamed token, and the latency it adds.

Three stand-in engines on loopback, the gateway role's configuration in front of them
(tests/gateway_harness.py), a closed-loop streaming load first straight to one engine and
then through the gateway. Prints HAProxy's CPU time per relayed token (from /proc) and the
TTFT each way, the numbers docs/scale.md sizes a gateway with.

    .venv/bin/python benchmarks/gateway_overhead.py [--seconds 15] [--workers 12]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "standin_engine"), str(REPO)]

from gateway_harness import Engine, base_vars, haproxy, wait_until  # noqa: E402
from gateway_load import LoadClient, failed, truncated, ttft_ms  # noqa: E402

from onecat.gateway import backends  # noqa: E402
from onecat.gateway.runtime import Runtime, servers  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its reaped children... plus its live children."""
    total = 0.0
    for task in Path("/proc").iterdir():
        if not task.name.isdigit():
            continue
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid = int(fields[1])
        if int(task.name) == pid or ppid == pid:
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def load(urls: list[str], seconds: float, workers: int, tokens: int) -> tuple[list, float]:
    """`workers` closed-loop clients spread evenly over `urls`, for `seconds`."""
    clients = [LoadClient(url, "standin-model", workers=workers // len(urls), max_tokens=tokens,
                          max_seconds=seconds).start() for url in urls]
    time.sleep(seconds)
    return [o for client in clients for o in client.stop()], seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    env = {"STANDIN_DECODE_MS": "5", "STANDIN_PREFILL_MS": "5"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        engines = [Engine(work, f"node-{i}", env=env).start() for i in range(3)]
        try:
            states = {e.name: {"serving": True, "address": "127.0.0.1", "port": e.port,
                               "max_num_seqs": 256} for e in engines}
            variables = base_vars(work)
            variables["gateway_servers"] = [s.as_dict()
                                            for s in backends.select(states).servers]
            direct, _ = load([e.url for e in engines], args.seconds, args.workers, args.tokens)
            with haproxy(work, variables) as gw:
                runtime = Runtime(gw.socket)
                wait_until(lambda: all(s.status.startswith("UP")
                                       for s in servers(runtime.stat(), "onecat_nodes")))
                cpu_before = cpu_seconds(gw.process.pid)
                through, seconds = load([gw.url], args.seconds, args.workers, args.tokens)
                cpu = cpu_seconds(gw.process.pid) - cpu_before
        finally:
            for engine in engines:
                engine.stop()
    relayed = sum(o.tokens for o in through)
    print(f"through the gateway: {len(through)} streams, {relayed} tokens in {seconds:.0f} s "
          f"({relayed / seconds:.0f} tokens/s), {len(failed(through))} failed, "
          f"{len(truncated(through, args.tokens))} truncated")
    print(f"HAProxy CPU: {cpu:.2f} s = {cpu / max(relayed, 1) * 1e6:.1f} us per relayed token "
          f"({cpu / seconds:.1%} of one core)")
    d, g = ttft_ms(direct), ttft_ms(through)
    print(f"TTFT with {args.workers} clients, straight to the 3 engines: p50 {d['p50']:.1f} ms, "
          f"p99 {d['p99']:.1f} ms; through the gateway: p50 {g['p50']:.1f} ms, "
          f"p99 {g['p99']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
