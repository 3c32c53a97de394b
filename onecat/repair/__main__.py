"""`python3 -m onecat.repair`: the repair ladder on this node (onecat-repair.service).

    onecat-repair             climb from where the progress file says (the watch starts it with
                              an order; after a reboot the boot starts it again)
    onecat-repair --release   after a card swap (or an operator's fix): forget the cards'
                              repair history, clear "service required"; the watch's --release
                              then puts the node back through its looks

Exit status: 0 the ladder ended (readmitted, service required or failed: the progress file says
which) or waits for a reboot; 2 it could not run (no order, unreadable files).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onecat import httpsync
from onecat.answers.hung import RUNNING, WAITING, samples
from onecat.answers.probe import references_identity
from onecat.files import read_json, write_atomic, write_json
from onecat.health import gpu_lock
from onecat.serve.gate import key_from_env_file, smoke, wait_ready

from . import history, lease_client
from .files import HISTORY_FILE, ORDER_FILE, PROGRESS_FILE, REPORT_FILE
from .run import DRIVER_UNAVAILABLE, REBOOTING, TERMINAL, Ladder, new_progress

# Monitors that hold the GPUs' device files open and make `nvidia-smi -r` fail "In use by
# another client" (NVSentinel #1690, #1691, #1243; microsoft/lisa #4716): stopped for the
# reset when active, started again after (the datacenter-gpu-manager package's unit, its older
# name, dcgm-exporter installed as a host service).
MONITOR_UNITS = ("nvidia-dcgm.service", "dcgm.service", "dcgm-exporter.service",
                 "nvidia-dcgm-exporter.service")
# NVML errors that say the driver is not there, not that a card failed: NVML_ERROR_
# DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, LIB_RM_VERSION_MISMATCH (nvml.h).
DRIVER_ERRORS = (9, 12, 18)


def _run(argv: list[str], timeout: float, env: dict[str, str] | None = None,
         raw: bool = False) -> tuple[int, str]:
    """The exit status and what the program said: stdout and stderr squashed into one line
    of at most 400 characters (a message), or with `raw` its stdout as written (output to
    parse). A program that cannot run or runs past the timeout: 255 and why."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 255, str(error)
    if raw:
        return done.returncode, done.stdout
    return done.returncode, " ".join((done.stdout + " " + done.stderr).split())[:400]


class NodeHost:
    """The real node: systemd, nvidia-smi, NVML, the gateway host's lease, the burn-in."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.node = args.node or platform.node()
        env = args.api_key_file.read_text() if args.api_key_file.exists() else ""
        self.api_key = key_from_env_file(env)
        self.metrics_key = key_from_env_file(env, "ONECAT_METRICS_KEY")
        self.record = read_json(args.serving_record) or {}
        token = args.lease_token_file.read_text().strip() \
            if args.lease_token_file and args.lease_token_file.exists() else ""
        self.token = token

    def take_lease(self, reason: str) -> tuple[bool, str]:
        if not self.args.lease_url:
            return True, "no lease server configured (a fleet of one)"
        answer = lease_client.take(self.args.lease_url, self.node, self.token, reason,
                                   self.args.lease_ttl)
        if answer.granted:
            return True, "granted"
        if answer.error:
            return False, f"the lease server cannot be asked: {answer.error}"
        held = ", ".join(f"{h.get('node')} ({h.get('reason')})" for h in answer.holders)
        return False, f"{len(answer.holders)} of {answer.max_parallel} repairs run: {held}"

    def release_lease(self) -> None:
        if self.args.lease_url:
            lease_client.release(self.args.lease_url, self.node, self.token)

    def wait_idle(self) -> str | None:
        """Until the engine runs and queues no request (its /metrics), at most the drain
        timeout: the gateway sends nothing new, the streams in flight end."""
        url = str(self.record.get("url") or "").rstrip("/")
        deadline = time.monotonic() + self.args.drain_timeout
        busy = -1.0
        while url:
            try:
                answer = httpsync.request(f"{url}/metrics", headers={
                    "Authorization": f"Bearer {self.metrics_key}"}, timeout=10, limit=4_000_000)
                refused = "" if answer.status == 200 else f"HTTP {answer.status}"
            except httpsync.BadAnswer as error:
                refused = f"a malformed answer ({error})"
            except (OSError, ValueError):
                return None  # nothing answers: nothing in flight to wait for
            if refused:
                # It answers but will not say: wait the whole drain timeout, to be safe.
                time.sleep(max(deadline - time.monotonic(), 0))
                return (f"the engine's /metrics answered {refused}: waited the drain "
                        f"timeout ({self.args.drain_timeout:.0f} s) for requests in flight")
            text = answer.text()
            busy = sum(samples(text, RUNNING)) + sum(samples(text, WAITING))
            if busy <= 0:
                return None
            if time.monotonic() >= deadline:
                break
            time.sleep(1.0)
        return None if busy <= 0 else (
            f"{busy:.0f} request(s) still in flight after {self.args.drain_timeout:.0f} s: "
            "stopping anyway")

    def stop_engine(self) -> str | None:
        rc, out = _run(["systemctl", "stop", self.args.engine_unit], 600)
        return None if rc == 0 else out or f"rc {rc}"

    def start_engine(self) -> str | None:
        rc, out = _run(["systemctl", "start", "--no-block", self.args.engine_unit], 120)
        return None if rc == 0 else out or f"rc {rc}"

    def _persistent(self, indices: list[int]) -> list[str]:
        """The GPUs (of `indices`) in persistence mode, asked one by one: a GPU that cannot
        be asked (lost) must not keep its healthy peer's persistence on, which would make the
        pair's reset fail."""
        found = []
        for index in indices:
            rc, out = _run([self.args.nvidia_smi, "--query-gpu=index,persistence_mode",
                            "--format=csv,noheader", "-i", str(index)], 60, raw=True)
            if rc == 0 and any(line.split(",")[-1].strip() == "Enabled"
                               for line in out.splitlines()):
                found.append(str(index))
        return found

    def _active_monitors(self) -> list[str]:
        return [unit for unit in self.args.monitor_units
                if _run(["systemctl", "is-active", "--quiet", unit], 30)[0] == 0]

    def reset_gpus(self, indices: list[int]) -> tuple[bool, str]:
        """`nvidia-smi -r` of the GPUs. Persistence mode (nvidia-persistenced, which the driver
        stage enables) and GPU monitors (DCGM, dcgm-exporter) hold the device and make the
        reset fail "In use by another client" (NVIDIA/NVSentinel#1690, gpu-operator#118): they
        are lifted first and restored after, on the failure path too."""
        with gpu_lock.held(self.args.state_dir):  # the watch reads no NVML meanwhile
            return self._reset(indices)

    def _reset(self, indices: list[int]) -> tuple[bool, str]:
        ids = ",".join(str(i) for i in indices)
        monitors = self._active_monitors()
        for unit in monitors:
            _run(["systemctl", "stop", unit], 120)
        persistent = self._persistent(indices)
        try:
            if persistent:
                rc, out = _run([self.args.nvidia_smi, "-pm", "0", "-i", ",".join(persistent)],
                               60)
                if rc != 0:
                    return False, f"persistence mode could not be disabled: {out or f'rc {rc}'}"
            argv = [self.args.nvidia_smi, "-r", *(["-i", ids] if ids else [])]
            rc, out = _run(argv, 300)
        finally:
            if persistent:
                _run([self.args.nvidia_smi, "-pm", "1", "-i", ",".join(persistent)], 60)
            for unit in monitors:
                _run(["systemctl", "start", "--no-block", unit], 60)
        if rc != 0:
            # nvidia-smi names no process; the operator needs to know which one holds the GPU.
            held = holders(self.args.device_dir, indices)
            if held:
                out = f"{out} (held by {', '.join(held)})"
        return rc == 0, out or f"rc {rc}"

    def wait_driver(self, timeout_s: float) -> str | None:
        """After a boot: until NVML starts (the module loaded; DKMS may build it first) and
        nvidia-persistenced runs where it is enabled, at most `timeout_s`. Why not, or None."""
        deadline = time.monotonic() + timeout_s
        while True:
            why = self._driver_missing()
            if not why or time.monotonic() >= deadline:
                return why or None
            time.sleep(5.0)

    def _driver_missing(self) -> str:
        try:
            import pynvml

            from onecat.health.nvml import gather
            gather(pynvml, check_xid=False)
        except Exception as error:  # a card's own fault is the look's, after this wait
            if getattr(error, "code", None) in DRIVER_ERRORS:  # NvmlUnavailable
                return f"NVML error {error.code}: {error}"
        if _run(["systemctl", "is-enabled", "--quiet", "nvidia-persistenced.service"], 30)[0] \
                == 0 and _run(["systemctl", "is-active", "--quiet",
                               "nvidia-persistenced.service"], 30)[0] != 0:
            return "nvidia-persistenced is enabled and not running yet"
        return ""

    def look(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The GPUs' state as the watch judges it (a reset is judged before anything starts)."""
        try:
            import pynvml

            from onecat.health.nvml import gather
            from onecat.watch.deltas import state_findings, watch_thresholds
            readings = gather(pynvml, check_xid=False)
            findings = state_findings(readings, watch_thresholds(self.args.expected_gpus))
        except Exception as error:  # NVML gone after a failed reset: a fault, not a crash
            if getattr(error, "code", None) in DRIVER_ERRORS:  # NvmlUnavailable: the node's
                return {}, [{"severity": "error", "code": DRIVER_UNAVAILABLE, "gpu": None,
                             "message": f"the NVIDIA driver is not there: NVML error "
                                        f"{error.code}: {error}"}]
            return {}, [{"severity": "error", "code": "nvml_read", "gpu": None,
                         "message": f"NVML cannot be read: {type(error).__name__}: {error}"}]
        return readings, [f.as_dict() for f in findings]

    def gate(self) -> tuple[bool, str]:
        url = str(self.record.get("url") or "").rstrip("/")
        name = str(self.record.get("served_model_name") or "")
        if not url or not name:
            return False, f"{self.args.serving_record} records no server to gate"
        ready, why = wait_ready(url, name, self.args.gate_timeout, self.api_key)
        if not ready:
            return False, why
        passed, why, _text = smoke(url, name, "The capital of France is", 16, self.api_key)
        return passed, why

    def burn_in(self) -> tuple[bool, str, list[dict[str, Any]]]:
        if self.args.burnin_seconds <= 0 or not self.args.burnin_path.is_dir():
            return True, "no burn-in (none installed, or 0 seconds)", []
        out = self.args.state_dir / "burnin.json"
        argv = [self.args.burnin_python, "-m", "onecat.burnin",
                "--url", str(self.record.get("url")),
                "--model", str(self.record.get("served_model_name")),
                "--api-key-file", str(self.args.api_key_file),
                "--seconds", str(self.args.burnin_seconds),
                "--concurrency", str(self.args.burnin_concurrency), "--max-tokens", "64",
                "--prompts", str(self.args.prompts), "--out", str(out)]
        if self.args.kernel_log:
            argv += ["--kernel-log", self.args.kernel_log]
        references = burnin_references(self.record, self.args.references)
        if references is not None:
            argv += ["--references", str(references)]
        env = {"PYTHONPATH": str(self.args.burnin_path),
               "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        env.update({k: v for k, v in os.environ.items()
                    if k.startswith(("ONECAT_NVML", "LD_LIBRARY_PATH"))})
        rc, text = _run(argv, self.args.burnin_seconds + 600, env)
        document = read_json(out) or {}
        findings = [f for f in document.get("findings") or [] if isinstance(f, dict)]
        card = [f for f in findings if f.get("severity") == "error" and f.get("gpu")]
        if rc == 0:
            return True, "passed", []
        why = "; ".join(str(f.get("message")) for f in findings[:3]) or text
        return False, why, card

    def reboot(self) -> str | None:
        rc, out = _run(["systemctl", "reboot"], 60)
        return None if rc == 0 else out or f"rc {rc}"

    def take_out(self, reason: str) -> None:
        """The drain the gateway agent answers while the watch's own answer is still `up` (an
        operator's order, kept in rotation until its lease: onecat/repair/files.py)."""
        if self.args.agent_drain_file is None:
            return
        text = "drain #onecat-repair: " + " ".join(reason.split())[:180]
        try:
            write_atomic(self.args.agent_drain_file, text + "\n", 0o644)
        except OSError as error:
            print(f"repair: cannot write {self.args.agent_drain_file}: {error}", file=sys.stderr)

    def admit(self) -> None:
        """The marker the gateway agent wants after a boot (roles/gateway): gate and burn-in
        passed, as the serve stage's admission."""
        if self.args.admitted_file:
            self.args.admitted_file.parent.mkdir(parents=True, exist_ok=True)
            self.args.admitted_file.write_text(f"{time.time():.0f} repaired\n")

    def boot_id(self) -> str | None:
        """This boot's token: a random id kept in /run, which every boot empties (a tmpfs).
        The kernel's boot_id would do on bare metal, but not in a container, whose restart
        is a boot of its own with the host's boot_id."""
        token = self.args.boot_token
        try:
            if not token.exists():
                token.parent.mkdir(parents=True, exist_ok=True)
                token.write_text(uuid.uuid4().hex + "\n")
            return token.read_text().strip() or None
        except OSError:
            return None


def burnin_references(record: dict[str, Any], path: Path | None) -> Path | None:
    """The references the repair's burn-in judges the node's idle likelihoods by: the ones the
    watch recorded for what serves (its first clean look on these bits, held to the first
    reference's bound), so a repaired card that scores text differently from before is refused
    (issue 47); None when the watch recorded none for these bits (the burn-in then holds its own
    to that bound)."""
    if path is None:
        return None
    stored = read_json(path)
    if not isinstance(stored, dict) or not isinstance(stored.get("likelihood"), dict):
        return None
    if not stored["likelihood"] or stored.get("identity") != references_identity(record):
        return None
    return path


def holders(device_dir: Path, indices: list[int], proc: Path = Path("/proc")) -> list[str]:
    """The processes that hold the GPUs' device files open (`fuser -v /dev/nvidiaN`):
    "GPU 1: pid 4242 (python3)". A file is the same when its device and inode are (a
    container sees it under another path)."""
    files = {}
    for index in indices:
        try:
            st = (device_dir / f"nvidia{index}").stat()
        except OSError:
            continue
        files[(st.st_dev, st.st_ino, st.st_rdev)] = index
    found: set[str] = set()
    if not files:
        return []
    for pid in (p for p in proc.iterdir() if p.name.isdigit()):
        try:
            fds = list((pid / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                st = fd.stat()
            except OSError:
                continue
            index = files.get((st.st_dev, st.st_ino, st.st_rdev))
            if index is None:
                continue
            try:
                name = (pid / "comm").read_text().strip()
            except OSError:
                name = "?"
            found.add(f"GPU {index}: pid {pid.name} ({name})")
    return sorted(found)


def _kick_watch(unit: str) -> None:
    """Let the watch look now: it readmits the node on the runner's "readmitted"."""
    if unit:
        _run(["systemctl", "start", "--no-block", unit], 30)


def _release(args: argparse.Namespace) -> int:
    state = args.state_dir
    past = history.load(read_json(state / HISTORY_FILE))
    report = read_json(state / REPORT_FILE) or {}
    serials = {str(c.get(k)) for c in report.get("cards") or [] if isinstance(c, dict)
               for k in ("serial", "uuid") if c.get(k)}
    write_json(state / HISTORY_FILE, history.forget(past, serials or None), 0o600)
    for name in (REPORT_FILE, ORDER_FILE, PROGRESS_FILE):
        (state / name).unlink(missing_ok=True)
    print(f"{platform.node()}: repair: released: the repair history of "
          f"{', '.join(sorted(serials)) or 'every card'} is forgotten")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m onecat.repair", description=__doc__)
    parser.add_argument("--release", action="store_true",
                        help="forget the repair history of the cards in the service report")
    parser.add_argument("--state-dir", type=Path, default=Path("/var/lib/onecat/repair"))
    parser.add_argument("--node", default="", help="this node's inventory name (the lease's)")
    parser.add_argument("--engine-unit", default="vllm.service")
    parser.add_argument("--watch-unit", default="onecat-watch.service")
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--monitor-unit", dest="monitor_units", action="append",
                        help="a unit that holds the GPUs open, stopped for a reset when active "
                             "(repeat; default: " + ", ".join(MONITOR_UNITS) + ")")
    parser.add_argument("--driver-wait", type=float, default=600.0,
                        help="seconds to wait after a boot for the driver to read the GPUs")
    parser.add_argument("--device-dir", type=Path, default=Path("/dev"),
                        help="where the GPUs' device files are (nvidia0, nvidia1, ...)")
    parser.add_argument("--serving-record", type=Path,
                        default=Path("/var/lib/onecat/serve/serving.json"))
    parser.add_argument("--api-key-file", type=Path, default=Path("/etc/onecat/vllm.env"))
    parser.add_argument("--lease-url", default="", help="the gateway host's lease server")
    parser.add_argument("--lease-token-file", type=Path)
    parser.add_argument("--lease-ttl", type=float, default=7200.0,
                        help="seconds a lease lasts without renewal (a reboot fits in it)")
    parser.add_argument("--lease-poll", type=float, default=30.0)
    parser.add_argument("--drain-timeout", type=float, default=300.0)
    parser.add_argument("--gate-timeout", type=float, default=1800.0)
    parser.add_argument("--expected-gpus", type=int)
    parser.add_argument("--admitted-file", type=Path)
    parser.add_argument("--agent-drain-file", type=Path,
                        help="the gateway agent's repair drain (roles/gateway), written once "
                             "the lease is granted")
    parser.add_argument("--burnin-python", default=sys.executable)
    parser.add_argument("--burnin-path", type=Path, default=Path("/opt/onecat/burnin"))
    parser.add_argument("--burnin-seconds", type=float, default=600.0)
    parser.add_argument("--burnin-concurrency", type=int, default=8)
    parser.add_argument("--references", type=Path,
                        default=Path("/var/lib/onecat/watch/references.json"),
                        help="the watch's references for what serves: the repair's burn-in "
                             "judges the node's likelihoods by them")
    parser.add_argument("--prompts", type=Path, default=Path("/opt/onecat/watch/probe-prompts.txt"))
    parser.add_argument("--kernel-log", default="")
    parser.add_argument("--boot-token", type=Path, default=Path("/run/onecat-repair/boot"),
                        help="this boot's token (in /run: a boot empties it)")
    args = parser.parse_args(argv)
    args.monitor_units = args.monitor_units or list(MONITOR_UNITS)
    if args.release:
        return _release(args)
    state = args.state_dir
    order = read_json(state / ORDER_FILE)
    progress = read_json(state / PROGRESS_FILE)
    if order is None:
        print("onecat repair: no repair order (the watch writes one)", file=sys.stderr)
        return 2
    host = NodeHost(args)
    if progress is None or progress.get("order") != order.get("id"):
        progress = new_progress(order, host.look()[0], time.time())
    if progress.get("step") in TERMINAL:
        return 0

    def say(line: str) -> None:
        print(f"{host.node}: {line}", flush=True)

    ladder = Ladder(host, progress, lambda p: write_json(state / PROGRESS_FILE, p), say,
                    node=host.node, lease_poll_s=args.lease_poll,
                    history=history.load(read_json(state / HISTORY_FILE)),
                    save_history=lambda h: write_json(state / HISTORY_FILE, h, 0o600),
                    report=lambda r: write_json(state / REPORT_FILE, r),
                    driver_wait_s=args.driver_wait)
    ended = ladder.run()
    if ended != REBOOTING:
        _kick_watch(args.watch_unit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
