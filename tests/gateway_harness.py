"""A real HAProxy on loopback in front of stand-in engines, for the gateway's integration tests.

The configuration is the gateway role's own template (roles/gateway/templates/haproxy.cfg.j2)
rendered with Jinja2 the way Ansible's template module renders it (trim_blocks). Each
stand-in gets a node agent that answers HAProxy's agent check with the content of its
state file, as the systemd socket the role installs on a node does (`cat FILE || echo up`).
"""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import socket
import socketserver
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import jinja2

from onecat.gateway.runtime import RuntimeApiError, execute, proc_pids

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "roles" / "gateway" / "templates"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def render(variables: dict) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("haproxy.cfg.j2").render(**variables)


def base_vars(workdir: Path) -> dict:
    """The role's defaults, with loopback ports and no user switch (tests run unprivileged)."""
    return {
        "gateway_user": "", "gateway_group": "", "gateway_maxconn": 2000,
        "gateway_admin_socket": str(workdir / "admin.sock"),
        "gateway_read_socket": str(workdir / "read.sock"),
        "gateway_hard_stop_after": "2m", "gateway_timeout_connect": "2s",
        "gateway_timeout_client": "10m", "gateway_timeout_server": "10m",
        "gateway_timeout_queue": "60s", "gateway_check_timeout": "2s",
        "gateway_bind_address": "127.0.0.1", "gateway_port": free_port(),
        "gateway_tls_pem_path": "", "gateway_key_map_path": "", "gateway_rate_limits": {},
        "gateway_retries": 3, "gateway_check_path": "/health", "gateway_engine_api_key": "",
        "gateway_check_interval": "200ms", "gateway_check_fall": 2, "gateway_check_rise": 2,
        "gateway_slowstart": "0s", "gateway_agent_port": 0, "gateway_agent_interval": "300ms",
        "gateway_servers": [], "gateway_admin_bind_address": "127.0.0.1",
        "gateway_admin_port": free_port(),
        "gateway_server_state_file": str(workdir / "server-state"),
        # No jail: chroot needs root (the chroot test sets one).
        "gateway_chroot": "",
        "gateway_balance": "leastconn", "gateway_hash_balance_factor": 125,
        "gateway_affinity_placement": "hash", "gateway_affinity_idle": "30m",
        "gateway_affinity_peer_port": free_port(),
        "gateway_max_connections_per_source": 256,
    }


class Agent:
    """A node agent on loopback: answers each connection with its state file (or 'up'), or
    with what `answer` returns (the role's own agent command: tests/gateway_agent.py)."""

    def __init__(self, state_file: Path, answer: Callable[[], str] | None = None) -> None:
        self.state_file = state_file
        agent = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                if answer is not None:
                    self.request.sendall((answer() + "\n").encode())
                    return
                try:
                    text = agent.state_file.read_text()
                except OSError:
                    text = "up\n"
                self.request.sendall(text.encode())

        socketserver.TCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def say(self, text: str) -> None:
        self.state_file.write_text(text + "\n")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Haproxy:
    def __init__(self, workdir: Path, variables: dict) -> None:
        self.workdir = workdir
        self.vars = variables
        self.config = workdir / "haproxy.cfg"
        self.process: subprocess.Popen | None = None
        self.log = workdir / "haproxy.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.vars['gateway_port']}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.vars['gateway_admin_port']}"

    @property
    def socket(self) -> str:
        return self.vars["gateway_admin_socket"]

    @property
    def master(self) -> str:
        return str(self.workdir / "master.sock")

    def check(self, text: str) -> subprocess.CompletedProcess:
        candidate = self.workdir / "candidate.cfg"
        candidate.write_text(text)
        return subprocess.run(["haproxy", "-c", "-f", str(candidate)],
                              capture_output=True, text=True, check=False)

    def start(self) -> Haproxy:
        self.config.write_text(render(self.vars))
        sink = self.log.open("ab")
        # -W: master-worker, and -S: its master CLI, as Debian's unit runs it (EXTRAOPTS), so
        # SIGUSR2 is a hitless reload and old workers can be asked for their sessions.
        self.process = subprocess.Popen(["haproxy", "-W", "-db", "-S", self.master,
                                         "-f", str(self.config)],
                                        stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        # The socket's file appears when it is bound, before HAProxy listens on it: a command
        # sent in between is refused (seen on a loaded two-core machine). Wait for a connect.
        while not _accepts(self.socket):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"haproxy did not start: {self.log.read_text()}")
            time.sleep(0.05)
        return self

    def reload(self, timeout: float = 30.0) -> None:
        """SIGUSR2 to the master, as the unit's reload sends it, then wait for the new worker.

        The master re-executes itself and parses the configuration before it forks the new
        worker. On two cores busy with other tests that once took more than the 10 s a test
        then waited for the new worker's answers (HAProxy's log ended at "path to executable":
        no new worker yet), and the test read the old worker's states instead."""
        assert self.process is not None
        before = self._workers()
        self.process.send_signal(signal.SIGUSR2)
        if not wait_until(lambda: self._workers() - before, timeout=timeout, interval=0.05):
            raise RuntimeError(f"haproxy forked no new worker within {timeout:.0f} s of the "
                               f"reload; its log:\n{self.log.read_text()}")

    def _workers(self) -> set[int]:
        """The PIDs the master CLI lists under "# workers" (none while it re-executes)."""
        return set(proc_pids(master_answer(self.master, "show proc"), "workers"))

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def master_answer(master: str, command: str) -> str:
    """The master CLI's answer, or "" while it re-executes after a reload (it refuses or
    resets connections for a moment)."""
    try:
        return execute(master, command)
    except RuntimeApiError:
        return ""


@contextlib.contextmanager
def haproxy(workdir: Path, variables: dict) -> Iterator[Haproxy]:
    proxy = Haproxy(workdir, variables)
    try:
        yield proxy.start()
    finally:
        proxy.stop()


def _accepts(path: str) -> bool:
    """Whether a unix socket at `path` takes a connection now."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def env_without_proxy() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}


class Engine:
    """A stand-in engine on a fixed loopback port, so that it can restart where it was."""

    def __init__(self, workdir: Path, name: str, env: dict[str, str] | None = None,
                 args: list[str] | None = None, model: str = "standin-model") -> None:
        from standin_harness import write_model

        self.workdir = workdir
        self.name = name
        self.port = free_port()
        self.env = env or {}
        self.args = args or []
        self.model_name = model
        self.model_dir = write_model(workdir / f"model-{name}")
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, env: dict[str, str] | None = None) -> Engine:
        from standin_harness import command, environment

        argv = command("serve", str(self.model_dir), "--host", "127.0.0.1", "--port",
                       str(self.port), "--served-model-name", self.model_name, "--dtype", "half",
                       "--disable-uvicorn-access-log", *self.args)
        sink = (self.workdir / f"engine-{self.name}.log").open("ab")
        self.process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                        env=environment({**self.env, **(env or {})}))
        import urllib.request

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    return resp.status == 200
            except OSError:
                return False

        if not wait_until(healthy, timeout=20, interval=0.05):
            raise RuntimeError(f"engine {self.name} did not start")
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def node_states(engines: list[Engine], agents: list[Agent] | None = None,
                max_num_seqs: int = 8) -> dict[str, dict]:
    """Each engine's node.json as the serve stage writes it (serving, in rotation)."""
    return {e.name: {"serving": True, "in_rotation": True, "address": "127.0.0.1",
                     "port": e.port, "max_num_seqs": max_num_seqs,
                     "agent_port": agents[i].port if agents else 0}
            for i, e in enumerate(engines)}


def gateway_vars(tmp_path: Path, engines: list[Engine], agents: list[Agent] | None = None,
                 **extra: object) -> dict:
    """The gateway role's variables with these engines as its servers (backends.select)."""
    from onecat.gateway import backends

    variables = base_vars(tmp_path)
    selection = backends.select(node_states(engines, agents))
    variables["gateway_servers"] = [s.as_dict() for s in selection.servers]
    if agents:
        variables["gateway_agent_port"] = agents[0].port
    variables.update(extra)
    return variables


class Recorder:
    """A node that answers 200 to everything and keeps each request's X-Onecat-Route."""

    def __init__(self) -> None:
        self.routes: list[str | None] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                if self.path != "/health":
                    recorder.routes.append(self.headers.get("x-onecat-route"))
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
