"""The simulated engine: admission (max-num-seqs, FIFO waiting queue, KV cache), timing, metrics.

Everything runs on one asyncio loop, like vLLM's API server: no threads, no
GIL convoy when 128 sequences all owe a token at the same moment. Each request
waits for a slot, "prefills" (one prefill at a time unless
STANDIN_PREFILL_SERIAL=0, as a GPU would), then emits tokens
on absolute deadlines so that scheduling jitter never accumulates: token k is
due at first_token + the sum of the gaps before it, each gap computed from the
number of sequences running at that moment.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable

from standin_vllm.settings import Settings

BLOCK = 16  # KV cache block size in tokens, as vLLM's default


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK) * BLOCK


class Histogram:
    """A Prometheus histogram with vLLM-like buckets (seconds)."""

    BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
               2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)

    def __init__(self) -> None:
        self.counts = [0] * len(self.BUCKETS)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, bound in enumerate(self.BUCKETS):
            if value <= bound:
                self.counts[i] += 1


class Engine:
    def __init__(self, settings: Settings, max_num_seqs: int, kv_tokens: int) -> None:
        self.settings = settings
        self.max_num_seqs = max_num_seqs
        self.kv_tokens = kv_tokens
        self.running = 0
        self._waiting: deque[tuple[asyncio.Future, int]] = deque()
        self.kv_used = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.success: dict[str, int] = {}
        self.ttft = Histogram()
        self.itl = Histogram()
        self.e2e = Histogram()
        # vLLM V1's vllm:request_queue_time_seconds: the time a request waited before it was
        # scheduled, observed when it finishes (vllm/v1/metrics/loggers.py, stats.py queued_time).
        self.queue = Histogram()
        self._ordinals: dict[str, int] = {}
        self._prefill_free_at = 0.0  # when the (serial) prefill lane is free again

    # --- failure injection -------------------------------------------------
    def next_ordinal(self, kind: str) -> int:
        self._ordinals[kind] = self._ordinals.get(kind, 0) + 1
        return self._ordinals[kind]

    async def step_gate(self) -> None:
        """Wait while the engine core is stuck (STANDIN_HANG_FILE exists): no step runs."""
        hang = self.settings.hang_file
        while hang and os.path.exists(hang):
            await asyncio.sleep(0.2)

    # --- admission ---------------------------------------------------------
    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _fits(self, tokens: int) -> bool:
        return self.running < self.max_num_seqs and self.kv_used + _blocks(tokens) <= self.kv_tokens

    async def admit(self, prompt_tokens: int) -> bool:
        """Wait until this request may run (FIFO behind earlier waiters); True if it waited."""
        if not self._waiting and self._fits(prompt_tokens):
            self.running += 1
            self.kv_used += _blocks(prompt_tokens)
            return False
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((future, prompt_tokens))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(_blocks(prompt_tokens))  # admitted, then abandoned
            else:
                self._waiting.remove((future, prompt_tokens))
            raise
        return True

    def release(self, kv_held: int) -> None:
        self.running -= 1
        self.kv_used = max(0, self.kv_used - kv_held)
        while self._waiting and self._fits(self._waiting[0][1]):
            future, tokens = self._waiting.popleft()
            self.running += 1
            self.kv_used += _blocks(tokens)
            future.set_result(None)

    def grow(self, old_len: int, new_len: int) -> int:
        """Account one more token of a sequence; returns the KV tokens it now holds."""
        extra = _blocks(new_len) - _blocks(old_len)
        if extra:
            self.kv_used = min(self.kv_tokens, self.kv_used + extra)
        return _blocks(new_len)

    # --- timing ------------------------------------------------------------
    def prefill_s(self, prompt_tokens: int) -> float:
        s = self.settings
        return (s.prefill_ms + s.prefill_ms_per_token * prompt_tokens) / 1000.0

    def gap_s(self) -> float:
        s = self.settings
        return (s.decode_ms + s.decode_ms_per_seq * max(self.running - 1, 0)) / 1000.0

    # --- one request -------------------------------------------------------
    async def run(
        self,
        prompt_tokens: int,
        count: int,
        emit: Callable[[int], None],
        arrived: float | None = None,
        stall_after: int | None = None,
        stall_wait: Callable[[], Awaitable[None]] | None = None,
        trace: dict | None = None,
        cached: Callable[[], int] | None = None,
    ) -> bool:
        """Simulate one request; `emit(index)` sends token `index`. False if it stalled.

        `arrived` is when the request's first bytes came in: the prefill clock
        starts there (or when a queued request is admitted), so the time spent
        parsing and tokenizing is part of the prefill, not added to it.
        emit may raise OSError when the client went away: the slot is still released.
        `trace` (a dict) receives arrived/first_token/last_token (time.monotonic()).
        `cached()` is asked once the request is admitted (the prefix cache, kvcache.py): the
        prompt tokens already in the KV cache, which the prefill skips.
        """
        arrived = time.monotonic() if arrived is None else arrived
        trace = {} if trace is None else trace
        trace["arrived"] = arrived
        waited = await self.admit(prompt_tokens)
        admitted = time.monotonic()
        uncached = prompt_tokens - (cached() if cached else 0)
        held = _blocks(prompt_tokens)
        try:
            start = time.monotonic() if waited else arrived
            if self.settings.prefill_serial:
                # Prefill is compute-bound: requests that arrive together prefill one after another.
                start = max(start, self._prefill_free_at)
                self._prefill_free_at = start + self.prefill_s(uncached)
            due = start + self.prefill_s(uncached)
            last = first = 0.0
            for i in range(count):
                if i:
                    due += self.gap_s()
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if stall_after is not None and i == stall_after and stall_wait:
                    await stall_wait()
                    return False
                await self.step_gate()
                emit(i)
                now = time.monotonic()
                self.generation_tokens_total += 1
                trace["last_token"] = now
                if i == 0:
                    first = trace["first_token"] = now
                    self.prompt_tokens_total += prompt_tokens
                    self.ttft.observe(first - arrived)
                else:
                    self.itl.observe(now - last)
                last = now
                held = self.grow(prompt_tokens + i, prompt_tokens + i + 1)
            self.e2e.observe(time.monotonic() - arrived)
            self.queue.observe(max(0.0, admitted - arrived) if waited else 0.0)
            return True
        finally:
            self.release(held)

    def finished(self, reason: str) -> None:
        self.success[reason] = self.success.get(reason, 0) + 1

    def kv_usage(self) -> float:
        return min(1.0, self.kv_used / self.kv_tokens) if self.kv_tokens else 0.0
