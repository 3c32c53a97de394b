"""The command-line flags of the monitoring host's two daemons, and where to reach them.

Debian's units run ``/usr/bin/prometheus $ARGS`` and ``/usr/bin/prometheus-alertmanager
$ARGS`` with ARGS from /etc/default (EnvironmentFile=): only checked values reach that line
(systemd splits it on spaces and reads quotes and ``$``), so each flag is one word.
"""

from __future__ import annotations

import re

from .. import validate
from .rules import duration_problem

# Prometheus's --storage.tsdb.retention.size (units.Base2Bytes: B, KB, MB, GB, TB, PB, EB).
SIZE = re.compile(r"[0-9]{1,9}(?:B|KB|MB|GB|TB|PB|EB)")
WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "::1", "*": "127.0.0.1", "[::]": "::1"}


def _listen(what: str, address: str, port: int) -> str:
    problem = validate.bind_address(address) or validate.port(port)
    if problem:
        raise ValueError(f"monitoring {what} listen address {validate.shown(address)}:"
                         f"{validate.shown(port)} is refused: {problem}")
    bare = "" if address in ("*", "0.0.0.0") else validate.bare_address(address)
    if bare == "::" or address == "[::]":
        return f"[::]:{port}"
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"


def url(address: str, port: int) -> str:
    """Where the monitoring host itself reaches a daemon listening there."""
    bare = WILDCARD.get(address, validate.bare_address(address) if address else "127.0.0.1")
    return f"http://[{bare}]:{port}" if ":" in bare else f"http://{bare}:{port}"


def prometheus_args(address: str, port: int, retention_time: str, retention_size: str) -> list[str]:
    problem = duration_problem("monitoring_retention_time", retention_time)
    if problem:
        raise ValueError(problem)
    if not SIZE.fullmatch(retention_size):
        raise ValueError(f"monitoring_retention_size {validate.shown(retention_size)} is refused: "
                         "a size such as 10GB or 500MB (B, KB, MB, GB, TB, PB, EB)")
    return [f"--web.listen-address={_listen('Prometheus', address, port)}",
            f"--storage.tsdb.retention.time={retention_time}",
            f"--storage.tsdb.retention.size={retention_size}"]


def alertmanager_args(address: str, port: int) -> list[str]:
    # An empty --cluster.listen-address turns off the gossip port (9094): one Alertmanager.
    return [f"--web.listen-address={_listen('Alertmanager', address, port)}",
            "--cluster.listen-address="]
