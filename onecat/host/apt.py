"""apt sources and OpenPGP key fingerprints, read without apt or gpg (stdlib only).

A host set up from NVIDIA's or Docker's own instructions already lists their repository,
signed by a keyring at another path. Writing a second entry for the same URI with another
Signed-By makes apt refuse to run at all ("Conflicting values set for option Signed-By"), so
the roles look for such entries first (find_entries) and check the key behind them
(fingerprints).
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import re
from dataclasses import asdict, dataclass, field


@dataclass
class Entry:
    """One repository line (one-line format) or stanza (deb822) of an apt sources file."""

    file: str
    format: str  # "list" or "deb822"
    types: list[str]
    uri: str
    suites: list[str]
    components: list[str] = field(default_factory=list)
    signed_by: str = ""  # a keyring path, an inline key block, or "" (apt's trusted keys)
    trusted: bool = False
    enabled: bool = True

    def as_dict(self) -> dict:
        return asdict(self)


def normalize_uri(uri: str) -> str:
    """Compare URIs the way a human would: no trailing slash, lower-case scheme and host."""
    uri = uri.strip().rstrip("/")
    match = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)([^/]*)(.*)$", uri)
    if match:
        uri = match.group(1).lower() + match.group(2).lower() + match.group(3)
    return uri


def _options(text: str) -> dict[str, str]:
    opts: dict[str, str] = {}
    for item in text.split():
        key, _, value = item.partition("=")
        opts[key.strip().lower()] = value.strip()
    return opts


def parse_one_line(path: str, text: str) -> list[Entry]:
    """Entries of a one-line-format file (sources.list, *.list)."""
    entries: list[Entry] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.match(r"^(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)$", line)
        if not match:
            continue
        opts = _options(match.group(2) or "")
        entries.append(Entry(
            file=path, format="list", types=[match.group(1)], uri=match.group(3),
            suites=[match.group(4)], components=match.group(5).split(),
            signed_by=opts.get("signed-by", ""), trusted=opts.get("trusted", "") == "yes"))
    return entries


def _stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = ""
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if current:
                stanzas.append(current)
            current, key = {}, ""
            continue
        if raw[0] in " \t" and key:
            # Continuation line; " ." stands for an empty line inside a value (inline keys).
            cont = raw.strip()
            current[key] += "\n" + ("" if cont == "." else cont)
            continue
        name, _, value = raw.partition(":")
        key = name.strip().lower()
        current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def parse_deb822(path: str, text: str) -> list[Entry]:
    """Entries of a deb822 file (*.sources): one per URI of each stanza."""
    entries: list[Entry] = []
    for stanza in _stanzas(text):
        for uri in stanza.get("uris", "").split():
            entries.append(Entry(
                file=path, format="deb822", types=stanza.get("types", "deb").split(), uri=uri,
                suites=stanza.get("suites", "").split(),
                components=stanza.get("components", "").split(),
                signed_by=stanza.get("signed-by", "").strip(),
                trusted=stanza.get("trusted", "").lower() == "yes",
                enabled=stanza.get("enabled", "yes").lower() != "no"))
    return entries


def read_sources(root: str = "/etc/apt") -> list[Entry]:
    """Every entry apt reads: sources.list, sources.list.d/*.list and *.sources."""
    entries: list[Entry] = []
    files = [os.path.join(root, "sources.list")]
    files += sorted(glob.glob(os.path.join(root, "sources.list.d", "*.list")))
    files += sorted(glob.glob(os.path.join(root, "sources.list.d", "*.sources")))
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        parse = parse_deb822 if path.endswith(".sources") else parse_one_line
        entries.extend(parse(path, text))
    return entries


def find_entries(entries: list[Entry], uris: list[str], exclude: list[str]) -> list[Entry]:
    """Enabled entries for any of `uris` that live outside the files in `exclude`."""
    wanted = {normalize_uri(uri) for uri in uris}
    excluded = {os.path.normpath(path) for path in exclude}
    return [e for e in entries
            if e.enabled and normalize_uri(e.uri) in wanted
            and os.path.normpath(e.file) not in excluded]


def _dearmor(data: bytes) -> bytes:
    text = data.decode("ascii", errors="replace")
    blocks = re.findall(
        r"-----BEGIN PGP PUBLIC KEY BLOCK-----(.*?)-----END PGP PUBLIC KEY BLOCK-----", text, re.S)
    raw = b""
    for block in blocks:
        lines = block.strip().splitlines()
        # Armor headers end at the first empty line (when there are any).
        if any(":" in line for line in lines[:1]) and "" in [line.strip() for line in lines]:
            lines = lines[[line.strip() for line in lines].index("") + 1:]
        body = "".join(line.strip() for line in lines
                       if line.strip() and not line.strip().startswith("="))
        raw += base64.b64decode(body)
    return raw


def _packets(data: bytes):
    """(tag, body) of each OpenPGP packet (RFC 4880 section 4.2, old and new formats)."""
    pos = 0
    while pos < len(data):
        head = data[pos]
        pos += 1
        if not head & 0x80:
            raise ValueError("not an OpenPGP packet stream")
        if head & 0x40:  # new format
            tag = head & 0x3F
            first = data[pos]
            if first < 192:
                length, pos = first, pos + 1
            elif first < 224:
                length, pos = ((first - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif first == 255:
                length, pos = int.from_bytes(data[pos + 1:pos + 5], "big"), pos + 5
            else:
                raise ValueError("partial body lengths are not used in keys")
        else:  # old format
            tag = (head >> 2) & 0x0F
            kind = head & 0x03
            size = {0: 1, 1: 2, 2: 4}.get(kind)
            if size is None:
                length, size = len(data) - pos, 0
            else:
                length = int.from_bytes(data[pos:pos + size], "big")
            pos += size
        yield tag, data[pos:pos + length]
        pos += length


def fingerprints(data: bytes) -> list[str]:
    """Fingerprints of the primary keys in an armored or binary OpenPGP key(ring), upper hex."""
    if b"-----BEGIN PGP" in data:
        data = _dearmor(data)
    found: list[str] = []
    for tag, body in _packets(data):
        if tag != 6 or not body:  # primary public key
            continue
        version = body[0]
        if version == 4:
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest()
        elif version == 5:
            digest = hashlib.sha256(b"\x9a" + len(body).to_bytes(4, "big") + body).hexdigest()
        elif version == 6:
            digest = hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest()
        else:
            continue
        found.append(digest.upper())
    return found


def file_fingerprints(path: str) -> list[str]:
    """Fingerprints of a key file, or of an inline deb822 Signed-By key block."""
    if path.lstrip().startswith("-----BEGIN PGP"):
        return fingerprints(path.encode())
    with open(path, "rb") as handle:
        return fingerprints(handle.read())


def normalize_fingerprint(value: str) -> str:
    return re.sub(r"\s+", "", value).upper()
