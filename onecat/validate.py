"""One rule per kind of value that reaches a configuration file or a command line.

Roles call these through their filter plugin (plugins/filter/onecat_inputs.py, linked into
each role that uses it), Ansible modules as ``ansible.module_utils.onecat.validate``, the
package's own code directly: one copy of each rule. Stdlib only, no relative imports, so it
ships to nodes as it is.

Every rule matches the whole value (``fullmatch``: a ``$`` anchor still lets a trailing
newline through) and allows only what the kind needs, listed rather than excluded: a value
that passes can add no line (newline, NUL), no word (space), no quoting (``'``, ``"``, ``\\``),
no comment (``#``), no expansion (``$``, systemd's ``%``) and no command (``;``, ``|``) to an
haproxy.cfg, a systemd unit or a ``sh -c`` script. Each checker returns None for a good value,
else what the value must look like; :func:`problems` turns those into one message that names
the variable, its value (as JSON) and the fix.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# RFC 1123 host names, plus "_", which inventories and /etc/hosts use and libc resolves.
HOST_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}\Z){HOST_LABEL}(?:\.{HOST_LABEL})*\.?")
# A bearer token (RFC 6750 b64token characters, '=' anywhere): the serve role's fleet-key check
# (roles/vllm_serve/tasks/secrets.yml) and the gateway's client keys. 16 at least (a shorter
# key is guessable), 512 at most (it rides in every request's Authorization header).
KEY = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")
# One path component: letters, digits and . _ ~ + @ - (none of them is special to HAProxy, to
# systemd or to sh); "." and ".." are refused separately.
PATH_COMPONENT = re.compile(r"[A-Za-z0-9._~+@-]{1,255}")
PATH_MAX = 4096
# An HTTP check's request target: "/" then RFC 3986 path and query characters, without "'"
# (HAProxy's quote) and "$"; "%" only as a %HH escape. No "#", space or control character.
HTTP_PATH = re.compile(r"/(?:[A-Za-z0-9._~!&()*+,;=:@/?-]|%[0-9A-Fa-f]{2}){0,1023}")
HTTP_PATH_MAX = 1024
# HAProxy's time format: an integer and an optional unit (no unit: milliseconds).
HAPROXY_DURATION = re.compile(r"([0-9]{1,15})(us|ms|s|m|h|d)?")
HAPROXY_UNIT_MS = {"us": 0.001, "ms": 1, "": 1, "s": 1000, "m": 60_000, "h": 3_600_000,
                   "d": 86_400_000}
# HAProxy keeps times in a signed 32-bit count of milliseconds (about 24.8 days).
HAPROXY_MAX_MS = 2**31 - 1
# systemd.time(7) spans: numbers with units, spaces between (as roles/watch/vars/main.yml).
SYSTEMD_UNIT = r"(?:us|ms|s|sec|seconds?|m|min|minutes?|h|hr|hours?|d|days?|w|weeks?)"
SYSTEMD_TIMESPAN = re.compile(
    rf"[0-9]{{1,9}}(?:\.[0-9]{{1,9}})?{SYSTEMD_UNIT}?(?: {{1,8}}[0-9]{{1,9}}(?:\.[0-9]{{1,9}})?"
    rf"{SYSTEMD_UNIT}?){{0,7}}")
# A user or group name as useradd/adduser create them (no trailing '$' of machine accounts).
USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
# Integers arrive as text from templated defaults: ASCII digits only ("²".isdigit() is True).
DIGITS = re.compile(r"[0-9]{1,10}")
DECIMAL = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?")
WILDCARD_BIND = ("*", "0.0.0.0", "::", "[::]")

Checker = Callable[..., "str | None"]


def as_int(value: object) -> int | None:
    """The value as an int when it is one (bools are not), or ASCII digits; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and DIGITS.fullmatch(value):
        return int(value)
    return None


def ip_literal(value: object) -> str | None:
    """The address of an IPv4 or IPv6 literal (no zone index: Python accepts any text after
    "%", a newline included), or None."""
    if not isinstance(value, str) or "%" in value:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def address(value: object) -> str | None:
    """An IP literal or a host name (RFC 1123 labels, '_' allowed)."""
    if ip_literal(value) is not None or (isinstance(value, str) and HOST_NAME.fullmatch(value)):
        return None
    return "an IP address or a host name (letters, digits, '-', '_' and dots)"


def ip_address(value: object) -> str | None:
    """An IPv4 or IPv6 literal (a firewall rule's source: no host names, no networks)."""
    if ip_literal(value) is not None:
        return None
    return "an IPv4 or IPv6 address"


def bind_address(value: object) -> str | None:
    """What HAProxy's `bind ADDRESS:PORT` takes: an IP literal (IPv6 bare or in brackets, both
    valid there) or '*' for every address."""
    if isinstance(value, str):
        if value in WILDCARD_BIND:
            return None
        bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
        literal = ip_literal(bare)
        if literal is not None and (bare == value or ":" in bare):
            return None
    return ("an IP address to listen on (IPv6 bare or in brackets), or '*' or 0.0.0.0 for "
            "every address")


def bare_address(value: str) -> str:
    """A bind address without the brackets of an IPv6 literal (for a client to connect to)."""
    return value[1:-1] if value.startswith("[") and value.endswith("]") else value


def port(value: object, allow_zero: bool = False) -> str | None:
    """A TCP port 1-65535 (0 too with allow_zero, where a role documents 0 as off)."""
    number = as_int(value)
    low = 0 if allow_zero else 1
    if number is not None and low <= number <= 65535:
        return None
    return ("a port from 1 to 65535, or 0 to turn it off" if allow_zero
            else "a port from 1 to 65535")


def count(value: object, low: int = 1, high: int = 2**31 - 1) -> str | None:
    """A whole number from low to high (ASCII digits, no sign, no fraction)."""
    number = as_int(value)
    if number is not None and low <= number <= high:
        return None
    return f"a whole number from {low} to {high}"


def number(value: object, low: float = 0.0, high: float = 1e6) -> str | None:
    """A finite number greater than low and at most high (an int, a float or decimal text)."""
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    text = isinstance(value, str) and DECIMAL.fullmatch(value) is not None
    parsed = float(value) if numeric or text else math.nan  # type: ignore[arg-type]
    if math.isfinite(parsed) and low < parsed <= high:
        return None
    return f"a number greater than {low:g} and at most {high:g}"


def absolute_path(value: object) -> str | None:
    """A normalized absolute path below "/" of letters, digits and . _ ~ + @ - only."""
    if isinstance(value, str) and value.startswith("/") and len(value) <= PATH_MAX:
        parts = value[1:].split("/")
        if all(PATH_COMPONENT.fullmatch(p) and p not in (".", "..") for p in parts):
            return None
    return ("an absolute path like /var/lib/onecat-gateway: '/' then names of letters, "
            "digits and . _ ~ + @ -, no '..', no empty or trailing '/', nothing else")


def http_path(value: object) -> str | None:
    """The path (and query) of an HTTP request: '/' then RFC 3986 path and query characters."""
    if isinstance(value, str) and len(value) <= HTTP_PATH_MAX and HTTP_PATH.fullmatch(value):
        return None
    return ("a URL path like /health: '/' then letters, digits and the characters "
            "- . _ ~ ! & ( ) * + , ; = : @ / ? or %HH escapes (no spaces, quotes, '#' or '$')")


def haproxy_ms(value: object) -> int | None:
    """Milliseconds of an HAProxy time ("5s", "200ms", "2m", "100": ms), or None."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str):
        return None
    match = HAPROXY_DURATION.fullmatch(text)
    if not match:
        return None
    return math.ceil(int(match.group(1)) * HAPROXY_UNIT_MS[match.group(2) or ""])


def haproxy_duration(value: object, allow_zero: bool = False) -> str | None:
    """An HAProxy time: an integer and an optional unit us, ms, s, m, h or d (none: ms)."""
    ms = haproxy_ms(value)
    low = 0 if allow_zero else 1
    if ms is not None and low <= ms <= HAPROXY_MAX_MS:
        return None
    least = "0 or more" if allow_zero else "more than 0"
    return (f"an HAProxy time like 5s, 200ms or 10m (a whole number and one of us, ms, s, m, "
            f"h, d), {least} and at most 24d")


def systemd_timespan(value: object) -> str | None:
    """A systemd time span (systemd.time(7)) like 60s, 5min or 1h 30min."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return None
    if isinstance(value, str) and SYSTEMD_TIMESPAN.fullmatch(value):
        return None
    return "a systemd time span like 60s, 5min or 1h 30min"


def user_name(value: object, allow_empty: bool = False) -> str | None:
    """A user or group name: a letter or '_', then letters, digits, '_', '.', '-' (32 at most)."""
    if allow_empty and value == "":
        return None
    if isinstance(value, str) and USER_NAME.fullmatch(value):
        return None
    return ("a user or group name (a letter or '_', then up to 31 letters, digits, '_', '.' "
            "or '-')" + (", or empty" if allow_empty else ""))


def key(value: object, allow_empty: bool = False) -> str | None:
    """An API key: 16 to 512 of letters, digits and . _ ~ + / = -."""
    if allow_empty and value == "":
        return None
    if isinstance(value, str) and KEY.fullmatch(value):
        return None
    return ("a key of 16 to 512 letters, digits or . _ ~ + / = - characters"
            + (", or empty" if allow_empty else ""))


# The fleet's floor (onecat/repair/floor.py): a count of nodes or a share of the fleet.
# 100% at most: "100.5%" is no share (onecat/repair/floor.py refuses it too).
FLOOR = re.compile(r"[0-9]{1,6}|100(?:\.0{1,3})?%|[0-9]{1,2}(?:\.[0-9]{1,3})?%")


def floor(value: object) -> str | None:
    """The fleet's floor: a count of nodes (0 to 999999) or a share of the fleet (0% to 100%)."""
    if isinstance(value, (str, int)) and not isinstance(value, bool) and FLOOR.fullmatch(
            str(value).strip()):
        return None
    return "a count of nodes (1) or a share of the fleet (25%)"


KINDS: dict[str, Checker] = {
    "address": address,
    "ip": ip_address,
    "bind_address": bind_address,
    "port": port,
    "count": count,
    "number": number,
    "path": absolute_path,
    "http_path": http_path,
    "haproxy_duration": haproxy_duration,
    "systemd_timespan": systemd_timespan,
    "user": user_name,
    "key": key,
    "floor": floor,
}
# Kinds whose value is never shown in a message.
SECRET_KINDS = frozenset({"key"})
SHOWN_CHARS = 120


def shown(value: object) -> str:
    """The value as JSON (what Ansible's to_json writes), cut to SHOWN_CHARS: every control
    character escaped, so the message stays one line."""
    text = json.dumps(value, default=str)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...(cut)"


def problem(kind: str, value: object, *args: Any) -> str | None:
    """What `value` must look like when it is not a good `kind` (None when it is)."""
    try:
        checker = KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown kind of input {kind!r}: one of {sorted(KINDS)}") from None
    return checker(value, *args)


def problems(specs: Mapping[str, Sequence[Any]]) -> list[str]:
    """One message per bad variable, in the order given. `specs` maps each variable's name to
    [kind, value, *arguments of the kind's checker] (e.g. ["count", 3, 0, 100])."""
    found: list[str] = []
    for name, spec in specs.items():
        kind, value, *args = spec
        must = problem(kind, value, *args)
        if must is None:
            continue
        what = "(the value is not shown)" if kind in SECRET_KINDS else shown(value)
        found.append(f"{name} {what} is refused: set it to {must}")
    return found


class InputError(ValueError):
    """A value of the wrong kind; the message names it and says what it must be."""


def require(kind: str, value: object, name: str, *args: Any) -> None:
    """Raise InputError naming `name` when `value` is not a good `kind`."""
    found = problems({name: [kind, value, *args]})
    if found:
        raise InputError(found[0])
