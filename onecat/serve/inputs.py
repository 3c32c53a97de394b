"""Values that reach a node's systemd unit, environment file and command lines, checked whole.

Stdlib only: ships to nodes as ``ansible.module_utils.onecat.serve.inputs`` (used by
library/vllm_serve_command.py). Every check matches the whole value (``fullmatch``: a ``$``
anchor still lets a trailing newline through), and no value may carry a control character: a
newline in a unit file ends the line and starts a new directive (``ExecStartPre=...``), and one
in an environment file adds a variable.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from ..validate import KEY

CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A key goes into an environment file, an Authorization header and the gateway's haproxy.cfg
# (inside "Bearer ..."): one character set for every key (a '"', '$' or '%' broke the gateway).
KEY_RE = KEY
PATH_RE = re.compile(r"/[A-Za-z0-9_./-]*")
# Names matched whole: variable -> (pattern, what it must look like).
NAME_RULES: dict[str, tuple[str, str]] = {
    "vllm_serve_engine_version": (r"\d+\.\d+(?:\.\d+)?(?:[.-][0-9A-Za-z]+)*",
                                  "a release like 1.5.0"),
    "vllm_serve_unit_name": (r"[A-Za-z0-9:_.@-]+\.service", "a unit name like vllm.service"),
    "vllm_serve_container_name": (r"[A-Za-z0-9][A-Za-z0-9_.-]*",
                                  "a container name like vllm"),
    "vllm_serve_env_file": (r"/[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+",
                            "an absolute path like /etc/onecat/vllm.env"),
    "vllm_serve_image_repository": (r"[a-z0-9]+(?:[._/:-][a-z0-9]+)*",
                                    "an image repository like onecat/engine"),
    "vllm_serve_image_base_digest": (r"(?:sha256:[0-9a-f]{64})?", "empty or sha256:<64 hex>"),
    "vllm_serve_wheel_sha256": (r"(?:[0-9A-Fa-f]{64})?", "empty or 64 hex digits"),
    "image_id": (r"(?:sha256:[0-9a-f]{64})?", "sha256:<64 hex> (docker image inspect's Id)"),
}
# Environment the role itself sets: variable -> the role variable to use instead.
ROLE_ENV: dict[str, str] = {
    "VLLM_API_KEY": "vllm_serve_api_key (the key lives only in the root-only environment file)",
    "ONECAT_METRICS_KEY": "vllm_serve_metrics_key",
    "ONECAT_GUARD_OPEN_PATHS": "vllm_serve_open_paths",
    "PYTHONPATH": "nothing: the role sets it to load its key guard",
}
SECRET_RE = re.compile(r"API_?KEY|TOKEN|SECRET|PASSW(?:OR)?D|CREDENTIAL|PRIVATE_KEY", re.IGNORECASE)


def control_problems(name: str, value: Any) -> list[str]:
    """One problem per string (or dict key) under `value` that carries a control character."""
    problems: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            problems += control_problems(f"{name}.{key}", key)
            problems += control_problems(f"{name}.{key}", item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problems += control_problems(f"{name}[{index}]", item)
    elif isinstance(value, str):
        bad = CONTROL_RE.search(value)
        if bad:
            problems.append(f"{name} contains the control character {bad.group()!r} at position "
                            f"{bad.start()}; values that reach the unit, the environment file or a "
                            "command line must be one line of printable text")
    return problems


def name_problems(names: dict[str, Any]) -> list[str]:
    """Names and digests matched whole against their rule (unknown names: control characters)."""
    problems: list[str] = []
    for name, value in names.items():
        text = "" if value is None else str(value)
        rule = NAME_RULES.get(name)
        if rule is None:
            problems += control_problems(name, text)
        elif not re.fullmatch(rule[0], text):
            problems.append(f"{name} {text[:60]!r} is not {rule[1]}")
    return problems


def env_problems(where: str, env: dict[str, Any], secrets: bool = False) -> list[str]:
    """Container environment: valid names, no role-owned variable, no secret outside the file.

    `secrets` is True for the variable that fills the root-only environment file."""
    problems: list[str] = []
    for key in env:
        name = str(key)
        if not ENV_KEY_RE.fullmatch(name):
            problems.append(f"{where}: {name[:40]!r} is not an environment variable name")
        elif name.upper() in ROLE_ENV:
            problems.append(f"{where}.{name} is set by the role: use {ROLE_ENV[name.upper()]}")
        elif not secrets and SECRET_RE.search(name):
            problems.append(f"{where}.{name} looks like a secret: put it in vllm_serve_secret_env "
                            "(written only to the root-only environment file), never on the "
                            "unit's command line or in the image")
    return problems


def key_problems(keys: dict[str, Any]) -> list[str]:
    """API and scraper keys: empty, or 16-512 characters of onecat.validate.KEY."""
    return [f"{name} must be 16 to 512 letters, digits or . _ ~ + / = - characters (it goes "
            "into an environment file, an Authorization header and the gateway's haproxy.cfg)"
            for name, value in keys.items() if value and not KEY_RE.fullmatch(str(value))]


def open_path_problems(paths: list[Any]) -> list[str]:
    return [f"vllm_serve_open_paths: {str(path)[:40]!r} is not a URL path like /health"
            for path in paths if not PATH_RE.fullmatch(str(path))]


def exposure(bind_address: str, port: Any) -> tuple[dict[str, Any], list[str]]:
    """Where the API is published: {'publish', 'url', 'exposed'} for docker run and the gate."""
    try:
        address = ipaddress.ip_address(str(bind_address).strip("[]"))
    except ValueError:
        return {}, [f"vllm_serve_bind_address {str(bind_address)[:60]!r} is not an IP address: "
                    "publish on 127.0.0.1 (a gateway on the node) or on the node's own address"]
    number = int(str(port)) if re.fullmatch(r"[0-9]{1,5}", str(port)) else 0
    if not 1 <= number <= 65535:
        return {}, [f"vllm_serve_port {str(port)[:20]!r} is not a TCP port (1-65535)"]
    host = f"[{address}]" if address.version == 6 else str(address)
    unspecified = "[::1]" if address.version == 6 else "127.0.0.1"
    probe = unspecified if address.is_unspecified else host
    return {"publish": f"{host}:{number}:8000", "url": f"http://{probe}:{number}",
            "exposed": not address.is_loopback}, []
