"""Timing and failure-injection knobs, read from STANDIN_* environment variables.

The defaults reproduce the shape of the seed's 2xV100 table (section 4.1):
TPOT(c) = 25 + 3.5 * (c - 1) ms gives ~40 tok/s at c=1 and ~240 tok/s at c=32.
A test sets the variables it cares about and knows the truth exactly:

  TTFT = queue wait + earlier prefills still running (STANDIN_PREFILL_SERIAL=1)
         + STANDIN_PREFILL_MS + STANDIN_PREFILL_MS_PER_TOKEN * uncached prompt tokens
  (the prompt's leading full blocks already in the prefix cache are not computed again)
  gap between tokens = STANDIN_DECODE_MS + STANDIN_DECODE_MS_PER_SEQ * (running - 1)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from standin_vllm.answers import BAD_MODES


@dataclass(frozen=True)
class Settings:
    startup_s: float = 1.0  # STANDIN_STARTUP_S: simulated model load before the port opens
    prefill_ms: float = 10.0  # STANDIN_PREFILL_MS: fixed cost of a prefill
    # STANDIN_PREFILL_MS_PER_TOKEN, per prompt token not already in the prefix cache: 10 + 0.6 x
    # 512 = 317 ms, the c=1 TTFT measured on 2xV100 TP2 at 512 tokens in (323 ms, field notes),
    # inside the seed's 0.3-0.5 s for ~500 tokens (section 4.1).
    prefill_ms_per_token: float = 0.6
    prefill_serial: bool = True  # STANDIN_PREFILL_SERIAL: one prefill at a time, like a GPU
    decode_ms: float = 25.0  # STANDIN_DECODE_MS: token gap with one sequence running
    decode_ms_per_seq: float = 3.5  # STANDIN_DECODE_MS_PER_SEQ: extra gap per other sequence
    kv_cache_tokens: int = 131072  # STANDIN_KV_CACHE_TOKENS: simulated KV cache capacity
    num_gpus: int = 2  # STANDIN_NUM_GPUS: GPUs the "node" has
    gpu_capability: float = 7.0  # STANDIN_GPU_CAPABILITY: 7.0 = V100 (no bfloat16)
    fail_percent: float = 0.0  # STANDIN_FAIL_PERCENT: share of generation requests -> HTTP 500
    stall_percent: float = 0.0  # STANDIN_STALL_PERCENT: share of streams that stall
    stall_after_tokens: int = 8  # STANDIN_STALL_AFTER_TOKENS: tokens sent before the stall
    stall_s: float = 600.0  # STANDIN_STALL_S: stall length, then the connection is dropped
    no_tokenize: bool = False  # STANDIN_NO_TOKENIZE=1: POST /tokenize answers 404
    broken: bool = False  # STANDIN_BROKEN=1: every generated token is "!" (NaN symptom)
    # A card going bad while it serves (the seed's pitfall 5.5): after STANDIN_BAD_AFTER
    # generation requests (0: never), or while the file STANDIN_BAD_FILE exists, answers are
    # STANDIN_BAD_MODE: "repeat" (collapses into one word), "wrong" (other words than the
    # same prompt gave before), "broken" ("!" forever), and the seed's symptoms (answers.py):
    # "collapse" (" Paris!!!!!!!!"), "cjk_loop" ("...摄氏度度度度"), "cut_loop" ("巴黎巴黎巴"),
    # "soup" (random tokens of many scripts). Its logprobs fall by orders of magnitude.
    bad_after: int = 0
    bad_file: str = ""
    bad_mode: str = "repeat"
    # A stuck engine core (an NCCL or custom all-reduce that never returns): while the file
    # STANDIN_HANG_FILE exists, no engine step runs. Requests are still accepted and counted
    # as running; none gets a token (generation_tokens_total stands still); /health and
    # /metrics still answer, as vLLM's API server process does while its engine core is stuck
    # (vllm-project/vllm PR #36451, issue #39863). A restart (a fresh container) clears it.
    hang_file: str = ""
    # STANDIN_BATCH_INVARIANT=1: greedy tokens do not depend on the batch (vLLM's batch-invariant
    # mode, compute capability >= 8.0); by default, as on a V100, tokens after the first few
    # and logprobs (by STANDIN_LOGPROB_NOISE, relative) depend on the requests in flight.
    batch_invariant: bool = False
    logprob_noise: float = 0.01
    startup_fail: str = ""  # STANDIN_STARTUP_FAIL=msg: die after loading, like a CUDA error
    trace_file: str = ""  # STANDIN_TRACE_FILE=path: one JSON line per request (monotonic times)
    log_stats_s: float = 10.0  # STANDIN_LOG_STATS_S: period of the throughput log line
    version: str = "0.11.0+standin"  # STANDIN_VERSION: what `vllm --version` prints
    # STANDIN_EMPTY_TEXT_EVERY=N: every Nth generated token streams with empty text, as vLLM
    # does for special tokens and bytes held back until a UTF-8 character is complete.
    empty_text_every: int = 0
    # STANDIN_DEV_DIR: where the GPU device files are (nvidia0, nvidia1, ...). While it serves the
    # engine holds every one open, as CUDA holds /dev/nvidiaN: a GPU reset is refused until it
    # exits (the simulated node bind-mounts regular files there; nvidia-smi's double checks).
    dev_dir: str = "/dev"


def _convert(kind: type, raw: str) -> object:
    if kind is bool:
        return raw.strip().lower() in ("1", "true", "yes", "on")
    return kind(raw)


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Build Settings from STANDIN_<FIELD> variables; unknown values fail loudly."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    for field in fields(Settings):
        name = "STANDIN_" + field.name.upper()
        if name in env:
            kind = {"float": float, "int": int, "bool": bool, "str": str}[str(field.type)]
            try:
                values[field.name] = _convert(kind, env[name])
            except ValueError:
                raise SystemExit(
                    f"stand-in: {name}={env[name]!r} is not a valid {kind.__name__}") from None
    if values.get("bad_mode", "repeat") not in BAD_MODES:
        raise SystemExit(f"stand-in: STANDIN_BAD_MODE={values['bad_mode']!r} is not one of "
                         + ", ".join(BAD_MODES))
    return Settings(**values)  # type: ignore[arg-type]


def hits(ordinal: int, percent: float) -> bool:
    """True for exactly `percent` % of ordinals 1, 2, 3, ... spread evenly (10 % -> 10, 20, ...)."""
    if percent <= 0:
        return False
    return int(ordinal * percent / 100.0) > int((ordinal - 1) * percent / 100.0)
