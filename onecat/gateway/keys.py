"""Client keys of the gateway: parse and validate the key file, render HAProxy's key map.

The key file is owner-only (0600) and has one key per line:

    # name   key                                   [requests per minute]
    alice    sk-3f9a0c1e2b7d4a5f8e6c9b0a1d2e3f40  120
    batch    sk-0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a

Names appear in HAProxy's log; keys never leave the file: HAProxy gets a map from the
SHA-256 of each key to its name, and compares the hash of the presented bearer token.
A malformed file is refused as a whole, with every problem and its line number.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass

from ..validate import KEY

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# A client key is a bearer token of the shared key kind (onecat.validate.KEY: 16 to 512 RFC 6750
# b64token characters, '=' anywhere, as the serve role's fleet key).
TOKEN = KEY
MIN_KEY_LENGTH = 16
MAX_KEY_LENGTH = 512
# Requests per minute: ASCII digits only (str.isdigit() takes '²', which int() refuses), and
# at most HAProxy's 32-bit counters can hold.
RATE = re.compile(r"^[0-9]{1,10}$")
MAX_RATE_PER_MINUTE = 2**31 - 1
# A key file of a thousand keys is about 70 KiB.
MAX_KEY_FILE_BYTES = 1024 * 1024


class KeyFileError(ValueError):
    """The key file is malformed; the message lists every problem."""


@dataclass(frozen=True)
class ClientKey:
    name: str
    key: str
    rate_per_minute: int = 0  # 0: no limit

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.key.encode("ascii")).hexdigest()


def parse_keys(text: str, source: str = "the key file") -> list[ClientKey]:
    """Every key of the file, or KeyFileError naming each bad line (never the key itself)."""
    keys: list[ClientKey] = []
    problems: list[str] = []
    names: dict[str, int] = {}
    hashes: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        where = f"{source} line {number}"
        if len(fields) not in (2, 3):
            problems.append(f"{where}: expected 'NAME KEY [REQUESTS_PER_MINUTE]', "
                            f"found {len(fields)} field(s)")
            continue
        name, key = fields[0], fields[1]
        if not NAME.match(name):
            problems.append(f"{where}: name {name!r} must be 1-64 letters, digits, '_', '.' "
                            "or '-', starting with a letter or digit")
        if not TOKEN.fullmatch(key):
            problems.append(f"{where}: the key of {name!r} must be at least {MIN_KEY_LENGTH} "
                            f"and at most {MAX_KEY_LENGTH} bearer-token characters (letters, "
                            "digits, . _ ~ + / = -)")
        rate = 0
        if len(fields) == 3:
            if not RATE.match(fields[2]) or not 0 < int(fields[2]) <= MAX_RATE_PER_MINUTE:
                problems.append(f"{where}: the rate of {name!r} must be a whole number of "
                                f"requests per minute from 1 to {MAX_RATE_PER_MINUTE}, "
                                f"not {fields[2][:20]!r}")
            else:
                rate = int(fields[2])
        if name in names:
            problems.append(f"{where}: name {name!r} already used on line {names[name]}")
        names.setdefault(name, number)
        digest = hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()
        if digest in hashes:
            problems.append(f"{where}: the key of {name!r} is the same as on line "
                            f"{hashes[digest]}")
        hashes.setdefault(digest, number)
        keys.append(ClientKey(name, key, rate))
    if problems:
        raise KeyFileError("; ".join(problems))
    if not keys:
        raise KeyFileError(f"{source} holds no key: add a line 'NAME KEY', or leave the "
                           "key file unset to run the gateway without client keys")
    return keys


def check_mode_bits(mode: int, source: str = "the key file") -> None:
    """Refuse a key file that others than its owner can read or write."""
    if stat.S_IMODE(mode) & 0o077:
        raise KeyFileError(f"{source} is readable or writable by others "
                           f"(mode {stat.S_IMODE(mode):04o}): chmod 600 it")


def read_key_file(path: str) -> list[ClientKey]:
    """The keys of an owner-only regular file (not a FIFO or a device: those would hang or
    never end); OSError when it cannot be opened, KeyFileError for anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"{path} is not a regular file: give the path of the key file")
        check_mode_bits(info.st_mode, path)
        data = handle.read(MAX_KEY_FILE_BYTES + 1)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"{path} is over {MAX_KEY_FILE_BYTES} bytes: not a key file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise KeyFileError(f"{path} is not UTF-8 text ({error.reason} at byte "
                           f"{error.start})") from None
    return parse_keys(text, path)


def render_key_map(keys: list[ClientKey]) -> str:
    """HAProxy map: SHA-256 of the key (hex) -> key name, sorted so the file is stable."""
    return "".join(f"{k.sha256} {k.name}\n" for k in sorted(keys, key=lambda k: k.name))


def rate_limits(keys: list[ClientKey]) -> dict[str, int]:
    """Key name -> requests per minute, for the keys that have a limit."""
    return {k.name: k.rate_per_minute for k in keys if k.rate_per_minute}
