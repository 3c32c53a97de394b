"""`vllm serve MODEL [flags]`: the same flags, errors and log lines as the real engine.

Rejections mirror real vLLM: an unknown flag (for example the removed
`--swap-space`) is an argparse error with exit status 2; a bad value found
while building the engine config (`--quantization nvfp4`, bfloat16 on a
V100, a missing config.json, max-model-len above the model's limit) is a
ValueError with a traceback and exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from standin_vllm import settings as settings_mod
from standin_vllm.engine import Engine
from standin_vllm.kvcache import PrefixCache
from standin_vllm.server import App, ServeConfig
from standin_vllm.server import serve as serve_http

# Upstream's list (vllm/model_executor/layers/quantization/__init__.py); "nvfp4" is not in it.
QUANTIZATION_METHODS = [
    "awq", "deepspeedfp", "tpu_int8", "fp8", "ptpc_fp8", "fbgemm_fp8", "modelopt",
    "modelopt_fp4", "bitblas", "gguf", "gptq_marlin_24", "gptq_marlin", "gptq_bitblas",
    "awq_marlin", "gptq", "compressed-tensors", "bitsandbytes", "hqq", "experts_int8",
    "ipex", "quark", "moe_wna16", "torchao", "auto-round", "rtn", "inc", "mxfp4", "petit_nvfp4",
]
ATTENTION_BACKENDS = [
    "FLASH_ATTN", "FLASH_ATTN_V100", "TRITON_ATTN", "FLASHINFER", "FLEX_ATTENTION",
    "TORCH_SDPA", "XFORMERS", "TREE_ATTN", "FLASHMLA", "TRITON_MLA", "CUTLASS_MLA",
]
DTYPES = ["auto", "half", "float16", "bfloat16", "float", "float32"]
KV_CACHE_DTYPES = ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"]


class EngineConfigError(ValueError):
    """A value rejected while building the engine config (exit 1 with a traceback)."""


def _bool_pair(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=None)


def _int_with_suffix(value: str) -> int:
    """vLLM accepts --max-model-len 32k (x1000) / 32K (x1024) / 1m / 1M."""
    text = value.strip()
    scale = {"k": 1000, "m": 1000**2, "K": 1024, "M": 1024**2}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm", description="vLLM CLI (onecat stand-in)")
    parser.add_argument("-v", "--version", action="store_true", help="show the version")
    sub = parser.add_subparsers(dest="subcommand")
    serve = sub.add_parser("serve", usage="vllm serve [model_tag] [options]",
                           help="Start the vLLM OpenAI Compatible API server.")
    serve.add_argument("model_tag", nargs="?", help="The model tag to serve.")
    add = serve.add_argument
    # Frontend.
    add("--host", default=None)
    add("--port", type=int, default=8000)
    add("--uds", default=None)
    # The fork's `api_key: list[str] | None`, "the server will require one of these keys"
    # (1Cat-vLLM vllm/entrypoints/openai/cli_args.py:267-269): one flag, several values.
    add("--api-key", nargs="+", default=None)
    add("--middleware", action="append", default=[],
        help="Additional ASGI middleware to apply to the app (an import path; repeatable).")
    add("--served-model-name", nargs="+", default=None)
    add("--root-path", default=None)
    add("--allowed-origins", default=None)
    add("--ssl-keyfile", default=None)
    add("--ssl-certfile", default=None)
    add("--uvicorn-log-level", default="info",
        choices=["critical", "error", "warning", "info", "debug", "trace"])
    add("--disable-uvicorn-access-log", action="store_true")
    add("--enable-request-id-headers", action="store_true")
    add("--disable-log-stats", action="store_true")
    add("--enable-log-requests", action="store_true")
    add("--disable-log-requests", action="store_true")
    add("--chat-template", default=None)
    add("--enable-auto-tool-choice", action="store_true")
    add("--tool-call-parser", default=None)
    add("--reasoning-parser", default=None)
    add("--max-log-len", type=int, default=None)
    # Model.
    add("--model", default=None)
    add("--tokenizer", default=None)
    add("--tokenizer-mode", default="auto")
    add("--revision", default=None)
    add("--trust-remote-code", action="store_true")
    add("--dtype", default="auto", choices=DTYPES)
    add("--seed", type=int, default=None)
    add("--max-model-len", type=_int_with_suffix, default=None)
    add("-q", "--quantization", default=None)
    add("--enforce-eager", action="store_true")
    add("--max-logprobs", type=int, default=20)
    add("--generation-config", default="auto")
    add("--override-generation-config", default=None)
    add("--hf-overrides", default=None)
    add("--load-format", default="auto")
    add("--download-dir", default=None)
    # Parallelism.
    add("-tp", "--tensor-parallel-size", type=int, default=1)
    add("-pp", "--pipeline-parallel-size", type=int, default=1)
    add("-dp", "--data-parallel-size", type=int, default=1)
    add("--distributed-executor-backend", default=None, choices=["ray", "mp", "uni",
                                                                 "external_launcher"])
    add("--disable-custom-all-reduce", action="store_true")
    add("--enable-expert-parallel", action="store_true")
    # Cache and scheduler.
    add("--gpu-memory-utilization", type=float, default=0.9)
    add("--kv-cache-memory-bytes", type=int, default=None)
    add("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    add("--block-size", type=int, default=None, choices=[1, 8, 16, 32, 64, 128])
    add("--cpu-offload-gb", type=float, default=0)
    add("--max-num-seqs", type=int, default=None)
    add("--max-num-batched-tokens", type=int, default=None)
    add("--max-num-partial-prefills", type=int, default=1)
    add("--attention-backend", default=None)
    add("-O", "--compilation-config", default=None)
    add("--limit-mm-per-prompt", default=None)
    # Multimodal checkpoints served as text (the vision tower neither loaded nor profiled;
    # 1Cat-vLLM vllm/config/multimodal.py language_model_only).
    add("--language-model-only", action="store_true")
    _bool_pair(serve, "enable-prefix-caching")
    _bool_pair(serve, "enable-chunked-prefill")
    return parser


def _log(msg: str, where: str = "api_server.py:1000", level: str = "INFO") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    sys.stdout.write(f"{level} {stamp} [{where}] {msg}\n")
    sys.stdout.flush()


def _read_model_config(model: str) -> dict:
    path = Path(model) / "config.json"
    if not path.is_file():
        raise EngineConfigError(
            f"Invalid repository ID or local directory specified: '{model}'.\n"
            "Please verify the following requirements:\n"
            "1. Provide a valid Hugging Face repository ID.\n"
            "2. Specify a local directory that contains a recognized configuration file.\n"
            "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
            "   - For Mistral models: ensure the presence of a 'params.json'.")
    try:
        config = json.loads(path.read_text())
    except ValueError as exc:
        raise EngineConfigError(f"Failed to parse {path}: {exc}") from None
    if not isinstance(config, dict):
        raise EngineConfigError(f"{path} is not a JSON object")
    return config


def resolve(args: argparse.Namespace, knobs: settings_mod.Settings) -> dict:
    """Validate the flags against the model and the simulated GPUs, like EngineArgs does."""
    model = args.model_tag or args.model
    if not model:
        raise EngineConfigError("No model specified: pass it as `vllm serve MODEL`.")
    config = _read_model_config(model)
    if args.quantization is not None and args.quantization not in QUANTIZATION_METHODS:
        raise EngineConfigError(f"Unknown quantization method: {args.quantization}. "
                                f"Must be one of {QUANTIZATION_METHODS}.")
    quant_cfg = config.get("quantization_config") or {}
    detected = quant_cfg.get("quant_method") if isinstance(quant_cfg, dict) else None
    if args.quantization and detected and args.quantization != detected:
        raise EngineConfigError(
            f"Quantization method specified in the model config ({detected}) does not match "
            f"the quantization method specified in the `quantization` argument "
            f"({args.quantization}).")
    torch_dtype = str(config.get("torch_dtype") or config.get("dtype") or "float16")
    dtype = args.dtype
    if dtype == "auto":
        dtype = torch_dtype if torch_dtype in ("float16", "bfloat16", "float32") else "float16"
        if dtype == "bfloat16" and knobs.gpu_capability < 8.0:
            _log("Your device does not support bfloat16. Falling back to float16.",
                 "config.py:3500", "WARNING")
            dtype = "float16"
    dtype = {"half": "float16", "float": "float32"}.get(dtype, dtype)
    if dtype == "bfloat16" and knobs.gpu_capability < 8.0:
        raise EngineConfigError(
            "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
            f"Your Tesla V100-PCIE-16GB GPU has compute capability {knobs.gpu_capability}. "
            "You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
            "for example: --dtype=half.")
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    if world > knobs.num_gpus:
        raise EngineConfigError(
            f"World size ({world}) is larger than the number of available GPUs "
            f"({knobs.num_gpus}) in this node.")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise EngineConfigError("GPU memory utilization must be within (0, 1]. Got "
                                f"{args.gpu_memory_utilization}.")
    if args.attention_backend and args.attention_backend not in ATTENTION_BACKENDS:
        raise EngineConfigError(f"Invalid attention backend: '{args.attention_backend}'. "
                                f"Valid backends are: {ATTENTION_BACKENDS}")
    # vLLM reads the text model's dimensions from text_config when the checkpoint wraps one
    # (get_hf_text_config: Qwen3.5's Qwen3_5ForConditionalGeneration, Llava-style wrappers).
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    heads = text.get("num_attention_heads")
    head_dim = text.get("head_dim") or (text.get("hidden_size", 0) // heads if heads else None)
    # Gated DeltaNet layers split their heads across the tensor-parallel ranks with divide(),
    # an assertion (vllm/model_executor/layers/mamba/mamba_utils.py, "x is not divisible by y").
    for field in ("linear_num_key_heads", "linear_num_value_heads"):
        value = text.get(field)
        if isinstance(value, int) and value % args.tensor_parallel_size:
            raise EngineConfigError(f"{value} is not divisible by {args.tensor_parallel_size}")
    if args.attention_backend == "FLASH_ATTN_V100" and head_dim and head_dim not in (64, 128, 256):
        raise EngineConfigError(f"FLASH_ATTN_V100 supports head sizes [64, 128, 256], "
                                f"but the model has head size {head_dim}.")
    derived = int(text.get("max_position_embeddings") or 2048)
    max_len = args.max_model_len or derived
    if max_len > derived:
        raise EngineConfigError(
            f"User-specified max_model_len ({max_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} in model's config.json). "
            "To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")
    kv_tokens = knobs.kv_cache_tokens
    if max_len > kv_tokens:
        raise EngineConfigError(
            f"The model's max seq len ({max_len}) is larger than the maximum number of tokens "
            f"that can be stored in KV cache ({kv_tokens}). Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing "
            "the engine.")
    return {
        "model": model,
        "config": config,
        "text_config": text,
        "dtype": dtype,
        "detected_quantization": detected,
        "max_model_len": max_len,
        "kv_tokens": kv_tokens,
        "max_num_seqs": args.max_num_seqs or 256,
        # vLLM's default block size is 16; num_gpu_blocks = KV cache tokens // block size.
        "block_size": args.block_size or 16,
        # On by default for generative models (1Cat-vLLM vllm/engine/arg_utils.py:2623-2624);
        # --no-enable-prefix-caching turns it off.
        "prefix_caching": args.enable_prefix_caching is not False,
        "served_names": args.served_model_name or [model],
        # "Ensure --api-key option from CLI takes precedence over VLLM_API_KEY", then empty
        # keys dropped (1Cat-vLLM vllm/entrypoints/openai/api_server.py:264-265).
        "api_keys": [key for key in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if key],
    }


async def _stats_logger(engine: Engine, period: float, cache: PrefixCache) -> None:
    last_p, last_g, last_t = 0, 0, time.monotonic()
    last_q, last_h = 0, 0
    while True:
        await asyncio.sleep(period)
        now = time.monotonic()
        p, g = engine.prompt_tokens_total, engine.generation_tokens_total
        span = max(now - last_t, 1e-9)
        queries, hits = cache.queries - last_q, cache.hits - last_h
        last_q, last_h = cache.queries, cache.hits
        _log(f"Engine 000: Avg prompt throughput: {(p - last_p) / span:.1f} tokens/s, "
             f"Avg generation throughput: {(g - last_g) / span:.1f} tokens/s, "
             f"Running: {engine.running} reqs, Waiting: {engine.waiting} reqs, "
             f"GPU KV cache usage: {engine.kv_usage() * 100:.1f}%, "
             f"Prefix cache hit rate: {100 * hits / queries if queries else 0.0:.1f}%",
             "loggers.py:123")
        last_p, last_g, last_t = p, g, now


async def _run_server(args: argparse.Namespace, knobs: settings_mod.Settings,
                      resolved: dict) -> None:
    engine = Engine(knobs, resolved["max_num_seqs"], resolved["kv_tokens"])
    vocab = int(resolved["text_config"].get("vocab_size") or 32000)
    block = resolved["block_size"]
    cache = PrefixCache(resolved["kv_tokens"] // block, block, resolved["prefix_caching"])
    app = App(ServeConfig(resolved["served_names"], resolved["model"],
                          resolved["max_model_len"], vocab, resolved["api_keys"],
                          not args.disable_uvicorn_access_log,
                          load_middleware(args.middleware), cache), engine)
    host = args.host or "0.0.0.0"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_term() -> None:
        _log("Shutting down FastAPI HTTP server.", "launcher.py:101")
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_term)

    def listening(port: int) -> None:
        _log(f"Starting vLLM API server 0 on http://{host}:{port}", "api_server.py:1971")
        sys.stdout.write(f"INFO:     Started server process [{os.getpid()}]\n"
                         "INFO:     Waiting for application startup.\n"
                         "INFO:     Application startup complete.\n")
        sys.stdout.flush()

    stats = None
    if not args.disable_log_stats:
        stats = asyncio.ensure_future(_stats_logger(engine, knobs.log_stats_s, cache))
    try:
        await serve_http(host, args.port, app, stop, listening)
    finally:
        if stats is not None:
            stats.cancel()


# The GPU device files the engine holds open until it exits (module-level: never closed).
_held_devices: list[int] = []


def hold_gpu_devices(dev_dir: str) -> list[str]:
    """Open every DEV_DIR/nvidia<N> as CUDA opens /dev/nvidiaN, and keep it open until exit.

    A GPU reset (nvidia-smi -r) is refused while any process holds the GPU's device file: the
    real engine holds both GPUs of its pair from CUDA's start to its exit. Those that cannot be
    opened (none there, a directory, no permission) are skipped: no GPU, nothing held.
    """
    held = []
    for path in sorted(Path(dev_dir).glob("nvidia[0-9]*")):
        if not path.name[len("nvidia"):].isdigit() or path.is_dir():
            continue
        for flags in (os.O_RDWR, os.O_RDONLY):
            try:
                _held_devices.append(os.open(path, flags | os.O_CLOEXEC))
            except OSError:
                continue
            held.append(str(path))
            break
    return held


def serve(args: argparse.Namespace, knobs: settings_mod.Settings) -> int:
    defaults = vars(build_parser().parse_args(["serve"]))
    non_default = {k: v for k, v in vars(args).items() if v != defaults.get(k)}
    _log(f"vLLM API server version {knobs.version}", "api_server.py:1896")
    _log(f"non-default args: {non_default}", "utils.py:233")
    resolved = resolve(args, knobs)
    config = resolved["config"]
    arch = (config.get("architectures") or ["UnknownForCausalLM"])[0]
    _log(f"Resolved architecture: {arch}", "model.py:547")
    layer_types = resolved["text_config"].get("layer_types") or []
    if "linear_num_value_heads" in resolved["text_config"] or "linear_attention" in layer_types:
        # What vLLM prints for a hybrid (attention + Gated DeltaNet): one page size for both.
        _log("Setting attention block size to a multiple of 16 tokens to ensure that attention "
             "page size is >= mamba page size.", "interface.py:641")
    _log(f"Using max model len {resolved['max_model_len']}", "model.py:1510")
    if resolved["detected_quantization"]:
        _log(f"Detected quantization method: {resolved['detected_quantization']}",
             "model.py:1100")
    if args.attention_backend:
        _log(f"Using {args.attention_backend} backend.", "cuda.py:300")
    hold_gpu_devices(knobs.dev_dir)  # CUDA's initialisation: from here until exit
    _log(f"Loading model from {resolved['model']} (dtype={resolved['dtype']}, "
         f"tensor_parallel_size={args.tensor_parallel_size})", "gpu_model_runner.py:2338")
    time.sleep(max(knobs.startup_s, 0.0))
    if knobs.startup_fail:
        raise RuntimeError(knobs.startup_fail)
    _log(f"Model loading took 10.12 GiB and {knobs.startup_s:.2f} seconds",
         "gpu_model_runner.py:2602")
    _log(f"GPU KV cache size: {resolved['kv_tokens']:,} tokens", "kv_cache_utils.py:1087")
    _log(f"Maximum concurrency for {resolved['max_model_len']:,} tokens per request: "
         f"{resolved['kv_tokens'] / resolved['max_model_len']:.2f}x", "kv_cache_utils.py:1091")
    asyncio.run(_run_server(args, knobs, resolved))
    sys.stdout.write("INFO:     Shutting down\nINFO:     Finished server process "
                     f"[{os.getpid()}]\n")
    sys.stdout.flush()
    return 0


def _dashes(arg: str) -> str:
    if not arg.startswith("--"):
        return arg
    name, sep, value = arg.partition("=")
    return "--" + name[2:].replace("_", "-") + sep + value


def load_middleware(paths: Sequence[str]) -> list:
    """vLLM's --middleware: import `module.Object` (a class is added as ASGI middleware)."""
    loaded = []
    for path in paths:
        module_path, _, name = path.rpartition(".")
        loaded.append(getattr(importlib.import_module(module_path), name))
    return loaded


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Real vLLM takes --help=all / --help=<group>; the stand-in shows everything.
    argv = ["--help" if a.startswith("--help=") else a for a in argv]
    # vLLM's FlexibleArgumentParser reads --api_key as --api-key (the name part only).
    argv = [_dashes(a) for a in argv]
    parser = build_parser()
    args = parser.parse_args(argv)
    knobs = settings_mod.from_env()
    if args.version:
        print(knobs.version)
        return 0
    if args.subcommand != "serve":
        parser.print_help(sys.stderr)
        return 2
    try:
        return serve(args, knobs)
    except (EngineConfigError, RuntimeError, OSError) as exc:
        kind = "ValueError" if isinstance(exc, EngineConfigError) else type(exc).__name__
        sys.stderr.write("Traceback (most recent call last):\n"
                         '  File "/usr/local/bin/vllm", line 8, in <module>\n'
                         "    sys.exit(main())\n"
                         f"{kind}: {exc}\n")
        sys.stderr.flush()
        return 1
