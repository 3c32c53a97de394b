"""`python3 -m onecat.watch --once`: one look at this node's GPUs (exit 0 healthy, 1 findings,
2 the look could not complete: then the verdict says "cannot look" and, with --act, the node
drains), for the watch's timer or any other monitoring system."""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from onecat.answers.likelihood import FIRST_MAX_NLL, REL_TOLERANCE
from onecat.answers.prompts import read as read_prompts
from onecat.files import read_json, write_atomic
from onecat.health import gpu_lock
from onecat.health.judge import ERROR
from onecat.health.nvml import LIB_RM_VERSION_MISMATCH, NvmlUnavailable
from onecat.repair import floor, lease_client
from onecat.serve.gate import key_from_env_file
from onecat.timespan import timespan_seconds

from . import act, action_lock, agent_check
from .deltas import watch_thresholds
from .look import (
    ACTION_FILE,
    BOOT_ID_FILE,
    EXIT_CANNOT_READ,
    EXIT_FINDINGS,
    EXIT_HEALTHY,
    Acting,
    Ladder,
    Probe,
    answer_agent,
    cannot_look,
    look,
    order_repair,
    probe_due,
    serving_probe,
)


def _probe(args: argparse.Namespace) -> Probe | None:
    if not args.probe_prompts or not probe_due(args.state_dir, args.probe_every):
        return None
    prompts = read_prompts(args.probe_prompts)
    env = args.api_key_file.read_text() \
        if args.api_key_file and args.api_key_file.exists() else ""
    key, metrics_key = key_from_env_file(env), key_from_env_file(env, "ONECAT_METRICS_KEY")
    if not args.probe_url:
        probe = serving_probe(args.serving_record, prompts, args.references, key,
                              tolerance=args.likelihood_tolerance)
    else:
        probe = Probe(args.probe_url.rstrip("/"), args.probe_model, prompts, args.references,
                      key, args.record_references, tolerance=args.likelihood_tolerance)
    return None if probe is None else replace(
        probe, metrics_key=metrics_key, timeout_s=args.probe_timeout,
        deadline_s=args.probe_deadline, first_max_nll=args.first_max_nll)


def _systemctl(verb: str, unit: str) -> Callable[[], str | None]:
    """`systemctl VERB --no-block UNIT` as a callable: None when systemd took the job, else
    why not (the engine's restart, the repair runner's start)."""
    def call() -> str | None:
        try:
            done = subprocess.run(["systemctl", verb, "--no-block", unit],
                                  capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            return str(error)
        return None if done.returncode == 0 else (done.stderr.strip() or f"rc {done.returncode}")
    return call


def _active(unit: str) -> Callable[[], bool]:
    def active() -> bool:
        try:
            done = subprocess.run(["systemctl", "is-active", "--quiet", unit],
                                  capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return True  # unknown: do not start a second runner
        return done.returncode == 0
    return active


def _acting(args: argparse.Namespace) -> Acting | None:
    if not args.act:
        return None
    policy = act.Policy(restart=bool(args.engine_unit), flap_window_s=args.flap_window,
                        restart_grace_s=args.restart_grace, repair=bool(args.repair_unit),
                        reboot=args.repair_reboot)
    ladder = Ladder(args.repair_dir, _systemctl("start", args.repair_unit),
                    _active(args.repair_unit), args.serving_record,
                    args.recurrence_window) if args.repair_unit else None
    return Acting(args.agent_file, _systemctl("restart", args.engine_unit), policy, ladder,
                  _floor(args))


def _floor(args: argparse.Namespace) -> Callable[[str], tuple[bool, str]] | None:
    """The fleet's floor on the gateway host (--floor-url), asked as this node (--node, with
    its lease token); None without one (no gateway: nothing to keep)."""
    if not args.floor_url:
        return None
    try:
        token = args.floor_token_file.read_text().strip() if args.floor_token_file else ""
    except OSError:
        token = ""  # the server refuses it (401): the node stays in and says why
    node = args.node or platform.node()

    def ask(reason: str) -> tuple[bool, str]:
        return lease_client.out(args.floor_url, node, token, reason)
    return ask


def _agent_heard(args: argparse.Namespace, findings: list | None = None) -> list[str]:
    """Ask the node's gateway agent as HAProxy does; fail closed when it cannot be heard
    (agent_check.py), within the fleet's floor unless this look's faults make the node's
    answers wrong. Nothing without --act, --agent-node-file and --guard-hold-file, or when
    node.json names no agent."""
    if not (args.act and args.agent_node_file and args.guard_hold_file):
        return []
    where = agent_check.target(args.agent_node_file)
    if where is None:
        return []
    urgent = findings is not None and floor.wrong_answers(
        f.code for f in findings if f.severity == ERROR)
    ask = None if urgent else _floor(args)
    may_hold = None if ask is None else (
        lambda why: ask(f"the gateway cannot hear its agent: {why}"))
    def restart() -> bool:  # waited for: the agent is asked again right after
        try:
            return subprocess.run(["systemctl", "restart", args.agent_socket_unit],
                                  capture_output=True, timeout=30, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
    return agent_check.keep_heard(lambda: agent_check.answers(*where), restart,
                                  args.guard_hold_file, may_hold)


def _say_agent_heard(args: argparse.Namespace, findings: list | None = None) -> None:
    for line in _agent_heard(args, findings):
        print(f"{platform.node()}: watch: {line}")


def _release(args: argparse.Namespace) -> int:
    path = args.state_dir / ACTION_FILE
    try:
        # From the read to the last write: a look deciding meanwhile would write its older
        # state over this one (action_lock.py).
        with action_lock.held(args.state_dir):
            decided = act.release(read_json(path), time.time())
            write_atomic(path, json.dumps(decided.state, sort_keys=True) + "\n", 0o600)
            if args.agent_file is not None:
                answer_agent(args.agent_file, decided.answer, decided.state)
    except OSError as error:
        print(f"onecat watch: cannot release {platform.node()}: {error}", file=sys.stderr)
        return EXIT_CANNOT_READ
    for line in decided.transitions or ["already in: nothing to release"]:
        print(f"{platform.node()}: {line}")
    return EXIT_HEALTHY


def _request_repair(args: argparse.Namespace) -> int:
    acting = _acting(args)
    if acting is None or acting.ladder is None:
        print(f"onecat watch: {platform.node()} has no repair ladder (the watch runs without "
              "--act or --repair-unit: set watch_repair: true)", file=sys.stderr)
        return EXIT_CANNOT_READ
    try:
        # The floor's answer and the order go with the state they were decided from: a look
        # writing meanwhile waits (action_lock.py).
        with action_lock.held(args.state_dir):
            return _order_repair_held(args, acting, acting.ladder)
    except OSError as error:  # ActionBusy, or a state folder it cannot write
        print(f"onecat watch: cannot order a repair on {platform.node()}: {error}",
              file=sys.stderr)
        return EXIT_CANNOT_READ


def _order_repair_held(args: argparse.Namespace, acting: Acting, ladder: Ladder) -> int:
    path = args.state_dir / ACTION_FILE
    saved = read_json(path)
    mode = act.saved_mode(saved)
    if acting.floor is not None and mode == act.IN and not args.ignore_floor:
        granted, why = acting.floor("a repair ordered by an operator")
        if not granted:
            print(f"onecat watch: the repair of {platform.node()} is refused: {why}. Repair "
                  "it once another node is back in rotation, or order it with --all (onecat "
                  "repair --all) to take it out anyway", file=sys.stderr)
            return EXIT_FINDINGS
    now = time.time()
    decided = act.request_repair(saved, now, acting.policy)
    try:
        if decided.start_repair is not None:
            decided = order_repair(ladder, decided, now)
        write_atomic(path, json.dumps(decided.state, sort_keys=True) + "\n", 0o600)
        if args.agent_file is not None:
            answer_agent(args.agent_file, decided.answer, decided.state)
    except OSError as error:
        print(f"onecat watch: cannot order a repair on {platform.node()}: {error}",
              file=sys.stderr)
        return EXIT_CANNOT_READ
    for line in decided.transitions:
        print(f"{platform.node()}: watch: {line}")
    return EXIT_HEALTHY


# The driver stage's marker of a pending reboot (roles/nvidia_driver, nvidia_driver_reboot_marker).
REBOOT_MARKER = Path("/run/onecat/nvidia-driver-reboot-pending")

def _reboot_pending(args: argparse.Namespace, error: NvmlUnavailable) -> str:
    """The reboot marker's path when NVML's "Driver/library version mismatch" (error 18,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH) is the driver update the driver stage installed and
    marked, else "" (a mismatch nobody marked is a blind watch like any other)."""
    marker = args.reboot_marker
    return str(marker) if error.code == LIB_RM_VERSION_MISMATCH and marker.is_file() else ""


def _blind(args: argparse.Namespace, why: str, reboot_pending: str = "") -> int:
    """The look could not complete: say why, and fail closed (cannot_look drains the node),
    unless a driver reboot the driver stage marked explains it (the node stays in)."""
    print(f"onecat watch: cannot look at {platform.node()}: {why}", file=sys.stderr)
    try:
        for line in cannot_look(why, args.state_dir, args.verdict_file, args.metrics_file,
                                acting=_acting(args), stale_after_s=args.stale_after_s,
                                reboot_pending=reboot_pending):
            print(f"{platform.node()}: watch: {line}")
    except OSError as error:
        print(f"onecat watch: cannot record that it cannot look: {error}", file=sys.stderr)
    _say_agent_heard(args)
    return EXIT_CANNOT_READ


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m onecat.watch", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true",
                      help="one look, then exit (the timer calls it every interval)")
    mode.add_argument("--release", action="store_true",
                      help="put a node the watch holds out back in (after an operator's fix)")
    mode.add_argument("--repair", action="store_true",
                      help="start the repair ladder now (drain, reset, gate, burn in, readmit)")
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
                        help="file of fixed prompts, one per line (# comments; `PROMPT => "
                             "ANSWER | ANSWER` a right answer contains one; `score: TEXT` a "
                             "reference text to score); "
                             "without it, no probe")
    parser.add_argument("--references", type=Path,
                        default=Path("/var/lib/onecat/watch/references.json"),
                        help="the likelihoods (and answers, for the record) recorded at the "
                             "first passing look after the node's gate")
    parser.add_argument("--record-references", action="store_true",
                        help="record this look's likelihoods (and answers, for the record) "
                             "as the references (after a gate)")
    parser.add_argument("--likelihood-tolerance", type=float, default=REL_TOLERANCE,
                        metavar="SHARE",
                        help="how far a reference text's NLL may move from the recorded one, "
                             "relative (default %(default)s: ~16x the measured batch noise; "
                             "0 scores nothing, the likelihood check off)")
    parser.add_argument("--first-max-nll", type=float, default=FIRST_MAX_NLL, metavar="NATS",
                        help="the most a reference text's NLL may be when it becomes the "
                             "node's first reference (default %(default)s: a perplexity of "
                             "403; a trained model scores the texts at 1.5-3)")
    parser.add_argument("--serving-record", type=Path,
                        default=Path("/var/lib/onecat/serve/serving.json"),
                        help="without --probe-url: probe what the serve stage recorded here "
                             "(its URL and served name; new bits get new references)")
    parser.add_argument("--probe-every", type=int, default=1, metavar="N",
                        help="probe on every Nth look (and on every look while the node is "
                             "out; default %(default)s)")
    parser.add_argument("--probe-timeout", type=float, default=60.0, metavar="S",
                        help="seconds one probe question waits for its answer; one the engine "
                             "took and never answered while it generated no token is a stuck "
                             "engine, a fault (default %(default)s)")
    parser.add_argument("--probe-deadline", type=float, default=180.0, metavar="S",
                        help="seconds the whole probe may take: questions left are not asked "
                             "(default %(default)s; keep it under the unit's TimeoutStartSec)")
    parser.add_argument("--api-key-file", type=Path,
                        help="environment file with VLLM_API_KEY (the server's key) and "
                             "ONECAT_METRICS_KEY (its /metrics' key)")
    parser.add_argument("--act", action="store_true",
                        help="act on the verdict: answer the gateway agent (drain, then out), "
                             "restart the engine once, hold a flapping node out")
    parser.add_argument("--agent-file", type=Path,
                        help="where the gateway agent reads the watch's answer")
    parser.add_argument("--agent-node-file", type=Path,
                        help="the gateway's node.json (its agent's address and port): asked "
                             "on every look as HAProxy asks it")
    parser.add_argument("--agent-socket-unit", default="onecat-gateway-agent.socket",
                        help="restarted once when the agent does not answer "
                             "(default: %(default)s)")
    parser.add_argument("--guard-hold-file", type=Path,
                        help="the engine's key guard's hold file: written while the agent "
                             "cannot be heard (the gateway's health check then gets 503)")
    parser.add_argument("--engine-unit", default="",
                        help="systemd unit of the engine to restart once after a fault "
                             "(empty: never restart, hold out)")
    parser.add_argument("--flap-window", type=float, default=act.Policy.flap_window_s,
                        metavar="SECONDS", help="a second fault this soon after a restart holds "
                                                "the node out (default %(default)s)")
    parser.add_argument("--restart-grace", type=float, default=act.Policy.restart_grace_s,
                        metavar="SECONDS", help="how long a restarted engine may take to answer "
                                                "(default %(default)s)")
    parser.add_argument("--repair-unit", default="",
                        help="the repair ladder's unit (onecat-repair.service), started with an "
                             "order when a GPU reset or a reboot can clear a fault; empty: "
                             "such a node is held for an operator")
    parser.add_argument("--repair-dir", type=Path, default=Path("/var/lib/onecat/repair"),
                        help="the ladder's order, progress, history and service report")
    parser.add_argument("--repair-reboot", action="store_true",
                        help="the ladder may reboot the node when a reset cannot clear a fault")
    parser.add_argument("--recurrence-window", type=timespan_seconds, default=7 * 86400.0,
                        metavar="TIMESPAN",
                        help="a card whose fault returns this soon after its repair needs "
                             "service (systemd time span, e.g. 7d; default 7 days)")
    parser.add_argument("--interval", metavar="TIMESPAN",
                        help="the timer's interval (systemd time span: 60s, 5min, 1h): the "
                             "verdict says it is stale after three of them without a look")
    parser.add_argument("--expected-gpus", type=int, metavar="N",
                        help="GPUs the node must have, as the health stage's check "
                             "(onecat_expected_gpus; default: the health check's, 2)")
    parser.add_argument("--floor-url", default="",
                        help="the gateway host's lease server: asked before a drain for a "
                             "cause that does not make answers wrong (the fleet's floor); "
                             "empty: no floor")
    parser.add_argument("--floor-token-file", type=Path,
                        help="this node's lease token (roles/gateway repair_lease_token)")
    parser.add_argument("--ignore-floor", action="store_true",
                        help="with --repair: order it even below the fleet's floor")
    parser.add_argument("--node", default="",
                        help="this node's inventory name, the token's (default: the host name)")
    parser.add_argument("--reboot-marker", type=Path, default=REBOOT_MARKER,
                        help="the driver stage's marker of a pending reboot: NVML's "
                             "Driver/library version mismatch while it exists keeps the node "
                             "in, with a warning (default: %(default)s)")
    parser.add_argument("--xid-events-file", type=Path,
                        help="NVML's Xid events, written by onecat-xid-events.service "
                             "(python3 -m onecat.health.xid_events): a second Xid source "
                             "beside the kernel log (default: none, the kernel log alone)")
    parser.add_argument("--boot-id-file", type=Path, default=BOOT_ID_FILE,
                        help="the kernel's boot id, kept with the readings so the previous "
                             "boot's counters are no baseline (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        args.stale_after_s = 3 * timespan_seconds(args.interval) if args.interval else None
    except ValueError as error:
        parser.error(f"--interval: {error}")
    if args.release:
        return _release(args)
    if args.repair:
        return _request_repair(args)
    if args.probe_url and not (args.probe_model and args.probe_prompts):
        parser.error("--probe-url needs --probe-model and --probe-prompts")
    if not 1 <= args.probe_timeout <= args.probe_deadline:
        parser.error(f"--probe-timeout {args.probe_timeout:g} and --probe-deadline "
                     f"{args.probe_deadline:g}: the timeout must be at least 1 s and at most "
                     "the deadline (e.g. 60 and 180)")
    if args.probe_prompts and not args.probe_prompts.is_file():
        parser.error(f"--probe-prompts {args.probe_prompts}: no such file; give a file of "
                     "fixed prompts, one per line")
    if gpu_lock.busy(args.repair_dir):
        # The repair runner resets the GPUs (the node is out, in its hands): an NVML read now
        # would be one more client on the devices, and no verdict. The next look judges.
        print(f"{platform.node()}: the repair runner is resetting the GPUs: this look is "
              "skipped")
        _say_agent_heard(args)
        return EXIT_HEALTHY
    try:
        import pynvml
    except ImportError:
        return _blind(args, "pynvml is missing; install nvidia-ml-py or python3-pynvml")
    try:
        result, findings, transitions = look(
            pynvml, args.state_dir, args.verdict_file, args.metrics_file, args.kernel_log,
            quality=_probe(args), acting=_acting(args), stale_after_s=args.stale_after_s,
            thresholds=watch_thresholds(args.expected_gpus), boot_id_file=args.boot_id_file,
            xid_events_file=args.xid_events_file)
    except NvmlUnavailable as error:
        if error.code == LIB_RM_VERSION_MISMATCH:
            return _blind(args, f"Driver/library version mismatch: NVML error {error.code}: "
                                f"{error.text}", _reboot_pending(args, error))
        return _blind(args, f"NVIDIA driver not loaded: NVML error {error.code}: {error.text}")
    except pynvml.NVMLError as error:
        return _blind(args, f"NVML failed: {error}")
    except Exception as error:  # any failure of the look fails closed
        return _blind(args, f"the look failed: {type(error).__name__}: {error}")
    print(f"{platform.node()}: {result}")
    for finding in findings:
        print(f"  {finding.severity.upper():9} {finding.message}")
    # The journal keeps every transition with its evidence (the findings above).
    for line in transitions:
        print(f"{platform.node()}: watch: {line}")
    _say_agent_heard(args, findings)
    return EXIT_HEALTHY if not findings else EXIT_FINDINGS


if __name__ == "__main__":
    sys.exit(main())
