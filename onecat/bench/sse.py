"""Server-sent events out of a stream's body: each `data:` payload, with the arrival time of the
piece of the body that completed its event.

Hand-written on purpose: aiohttp parses the HTTP framing (onecat.bench.httpclient) but has no
SSE reader, and `vllm bench serve` splits events itself too
(vllm/benchmarks/lib/endpoint_request_func.py). Events end with a blank line ("\\n\\n"), as
vLLM's OpenAI server writes them; an event left at the end of the body counts when the body
ends.
"""

from __future__ import annotations

from collections.abc import Callable

OnEvent = Callable[[bytes, float], None]  # (data payload, arrival time) -> None; may raise


class SseSplitter:
    """Feed it the body as it arrives; it calls on_event for each `data:` line of each event
    (what on_event raises comes out of feed and end)."""

    def __init__(self, on_event: OnEvent) -> None:
        self.on_event = on_event
        self.pending = bytearray()

    def feed(self, data: bytes, now: float) -> None:
        self.pending += data
        while (end := self.pending.find(b"\n\n")) >= 0:
            event = bytes(self.pending[:end])
            del self.pending[:end + 2]
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self.on_event(line[5:].strip(), now)

    def end(self, now: float) -> None:
        """The body ended: an event without its closing blank line still counts."""
        if self.pending.strip():
            self.feed(b"\n\n", now)
