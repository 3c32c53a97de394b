"""What a node tells the gateway: its serving state (node.json) and its agent's answer.

The gateway's configuration is built from every node's node.json (backends.py); HAProxy's agent
check reads the answer (``up``, or ``maint down #reason`` after a failed gate) from the node's
agent port. Both are written by the ``gateway_node`` module in one round trip.
"""

from __future__ import annotations

import json
import re

# The server's concurrency cap, from its unit's command line: it sizes the node's maxconn.
_MAX_NUM_SEQS = re.compile(r"--max-num-seqs[ =]+(\d+)")
# HAProxy shows the agent's text in the stats page (last_agt); keep it short and printable.
AGENT_REASON_CHARS = 200


def one_line(text: str) -> str:
    """Whitespace (newlines included) collapsed to single spaces."""
    return " ".join(text.split())


def max_num_seqs(unit_text: str) -> str | None:
    """The unit's ``--max-num-seqs`` as written there, or None when it sets none."""
    match = _MAX_NUM_SEQS.search(unit_text)
    return match.group(1) if match else None


def node_state(
    *,
    serving: bool,
    in_rotation: bool,
    reason: str,
    address: str,
    port: int,
    agent_port: int,
    unit_text: str,
) -> dict[str, object]:
    """node.json's content; the reason is kept only for a node out of rotation."""
    return {
        "serving": serving,
        "in_rotation": in_rotation,
        "reason": "" if in_rotation else one_line(reason),
        "address": address.strip(),
        "port": port,
        "agent_port": agent_port,
        "max_num_seqs": max_num_seqs(unit_text),
    }


def render_state(state: dict[str, object]) -> str:
    """node.json's text: the layout Ansible's to_nice_json wrote before, so nothing churns."""
    return json.dumps(state, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def agent_answer(in_rotation: bool, reason: str) -> str:
    """The agent's reply; HAProxy ignores an answer without its newline."""
    if in_rotation:
        return "up\n"
    printable = re.sub(r"[^ -~]", " ", reason)
    return f"maint down #{one_line(printable)[:AGENT_REASON_CHARS]}\n"
