"""Start the stand-in engine as a subprocess on loopback (for tests and benchmarks/).

Not part of the wheel. Usage:

    with standin(tmp_path, env={"STANDIN_DECODE_MS": "5"}) as server:
        server.url  # http://127.0.0.1:PORT
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

# A config.json shaped like a Qwen2.5-14B compressed-tensors NVFP4 checkpoint.
MODEL_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "num_hidden_layers": 48,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
    "vocab_size": 152064,
    "quantization_config": {"quant_method": "compressed-tensors",
                            "format": "nvfp4-pack-quantized"},
}

# Fast defaults for tests: no startup wait, short gaps, no periodic stats line.
FAST_ENV = {
    "STANDIN_STARTUP_S": "0",
    "STANDIN_PREFILL_MS": "5",
    "STANDIN_PREFILL_MS_PER_TOKEN": "0.01",
    "STANDIN_DECODE_MS": "2",
    "STANDIN_DECODE_MS_PER_SEQ": "0",
    "STANDIN_LOG_STATS_S": "3600",
}


@dataclass
class Standin:
    url: str
    process: subprocess.Popen
    log: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_model(directory: Path, config: dict | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config or MODEL_CONFIG))
    return directory


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "standin_vllm", *args]


def environment(env: dict[str, str] | None = None) -> dict[str, str]:
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), full.get("PYTHONPATH")]))
    full.update(FAST_ENV)
    full.update(env or {})
    return full


@contextlib.contextmanager
def standin(workdir: Path, env: dict[str, str] | None = None, args: list[str] | None = None,
            name: str = "standin-model", ready_s: float = 20.0,
            ready_key: str = "") -> Iterator[Standin]:
    model = write_model(workdir / "model")
    port = free_port()
    log = workdir / f"standin-{port}.log"
    argv = command("serve", str(model), "--host", "127.0.0.1", "--port", str(port),
                   "--served-model-name", name, "--dtype", "half",
                   "--disable-uvicorn-access-log", *(args or []))
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                env=environment(env))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"stand-in exited {proc.returncode}: {log.read_text()}")
            probe = urllib.request.Request(url + "/health", headers={
                "authorization": f"Bearer {ready_key}"} if ready_key else {})
            try:
                with urllib.request.urlopen(probe, timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"stand-in not ready: {log.read_text()}") from None
                time.sleep(0.05)
        yield Standin(url, proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
