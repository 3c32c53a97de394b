"""Text that came from a node or a server, made safe to print or to write into a file."""

from __future__ import annotations

from typing import Any


def one_line(value: Any) -> str:
    """One line of printable characters: controls (NUL, ESC and OSC sequences' bytes, CR, LF)
    become spaces and runs of whitespace one space, so the text can add no line to a config
    file and no escape sequence to a terminal."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in str(value)).split())
