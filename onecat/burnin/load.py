"""Sustained load on one server: `concurrency` streaming clients, closed loop, until a deadline."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from onecat.bench.httpclient import Endpoint
from onecat.bench.runner import LiveCounters, Target, run_level


@dataclass
class LoadTally:
    """What the load did (filled in while it runs; read after stop)."""

    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class Load:
    """The load in a thread of its own, so that the caller can sample and probe meanwhile."""

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str,
        concurrency: int,
        max_tokens: int,
        prompt: str,
        timeout_s: float = 300,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.target = Target(Endpoint.parse(url), model, False, headers, timeout_s)
        self.concurrency, self.max_tokens, self.prompt = concurrency, max_tokens, prompt
        self.tally = LoadTally()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="burnin-load", daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 330) -> LoadTally:
        self._stop.set()
        self._thread.join(timeout_s)
        return self.tally

    def _run(self) -> None:
        began = time.monotonic()
        try:
            asyncio.run(self._loop())
        finally:
            self.tally.seconds = time.monotonic() - began

    async def _loop(self) -> None:
        # Rounds of `concurrency` x 2 requests: short enough to stop soon after asked to.
        live, round_no = LiveCounters(), 0
        while not self._stop.is_set():
            prompts = [f"{self.prompt} ({round_no}.{i})" for i in range(self.concurrency * 2)]
            level = await run_level(self.target, prompts, self.concurrency, self.max_tokens, live)
            round_no += 1
            for result in level.results:
                if result.ok:
                    self.tally.completed += 1
                    self.tally.output_tokens += result.output_tokens
                else:
                    self.tally.failed += 1
                    reason = result.error or "failed"
                    self.tally.errors[reason] = self.tally.errors.get(reason, 0) + 1
