"""Probing a node from another node: which ports listen, and what answers without a key."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess

import testinfra

PATHS = ("/", "/health", "/v1/models", "/metrics", "/version", "/tokenize")

# Listening TCP sockets of a node, from /proc/net/tcp{,6} (state 0A is LISTEN).
_LISTENERS = r"""
import json, socket, struct
out = []
for name, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
    try:
        lines = open(name).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        fields = line.split()
        if fields[3] != "0A":
            continue
        addr, port = fields[1].split(":")
        raw = bytes.fromhex(addr)
        if size == 4:
            text = socket.inet_ntop(socket.AF_INET, raw[::-1])
        else:
            words = struct.unpack("<4I", raw)
            text = socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))
        out.append([text, int(port, 16)])
print(json.dumps(out))
"""


def node(name: str):
    """A testinfra handle on one node of the scenario."""
    return testinfra.get_host(f"ansible://{name}",
                              ansible_inventory=os.environ["MOLECULE_INVENTORY_FILE"])


def node_address(name: str) -> str:
    """The node's address on the scenario's Docker network (what the other node reaches)."""
    return subprocess.run(
        ["docker", "inspect", "--format",
         "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name],
        capture_output=True, text=True, check=True).stdout.split()[0]


def listeners(host) -> list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    pairs = json.loads(host.check_output(f"python3 -c '{_LISTENERS}'"))
    return sorted({(ipaddress.ip_address(a), p) for a, p in pairs}, key=lambda x: (str(x[0]), x[1]))


def status(probe, url: str, key: str = "") -> int:
    """HTTP status of a GET from `probe` (0: nothing answered)."""
    auth = f"-H 'Authorization: Bearer {key}' " if key else ""
    out = probe.run(f"curl -s -o /dev/null -m 5 -w '%{{http_code}}' {auth}{url}").stdout.strip()
    return int(out or 0)


def answers_without_key(probe, address: str, port: int) -> list[str]:
    """The paths of http://address:port that answer anything but 401/403 without a key."""
    answered = []
    for path in PATHS:
        code = status(probe, f"http://{address}:{port}{path}")
        if code not in (0, 401, 403):
            answered.append(f"{path} -> {code}")
    return answered
