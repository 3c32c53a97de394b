"""A closed-loop streaming load client for the gateway tests (integration and molecule).

Each worker thread sends streaming completions with `ignore_eos` one after another and
records, per request: HTTP status, time to the first token, tokens received, and whether
the stream ended with `data: [DONE]`. A stream that stops early (no [DONE], fewer tokens
than asked for) is truncated; any non-200 or connection error is failed.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Outcome:
    status: int
    ttft_s: float | None
    tokens: int
    done: bool
    error: str = ""
    started: float = 0.0
    ended: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status != 200 or bool(self.error)


def stream_completion(url: str, model: str, max_tokens: int = 16, key: str = "",
                      timeout: float = 60.0, prompt: str = "The capital of France is",
                      headers: dict[str, str] | None = None) -> Outcome:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    headers = {"Content-Type": "application/json", **(headers or {})}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True, "temperature": 0})
    started = time.monotonic()
    tokens, done, ttft = 0, False, None
    try:
        conn.request("POST", "/v1/completions", body=body, headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            text = response.read().decode("utf-8", "replace")
            return Outcome(response.status, None, 0, False, text[:200], started,
                           time.monotonic())
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            event = json.loads(data)
            if event.get("choices"):
                tokens += 1
                if ttft is None:
                    ttft = time.monotonic() - started
        return Outcome(200, ttft, tokens, done, "", started, time.monotonic())
    except (OSError, http.client.HTTPException, ValueError) as error:
        return Outcome(0, ttft, tokens, done, f"{type(error).__name__}: {error}", started,
                       time.monotonic())
    finally:
        conn.close()


@dataclass
class LoadClient:
    """`workers` closed-loop streams until stop(), at most `max_requests` in all."""

    url: str
    model: str
    workers: int = 4
    max_tokens: int = 16
    key: str = ""
    max_requests: int = 100_000
    max_seconds: float = 1200.0
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._deadline = 0.0

    def _work(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            with self._lock:
                if len(self.outcomes) >= self.max_requests:
                    return
            outcome = stream_completion(self.url, self.model, self.max_tokens, self.key)
            with self._lock:
                self.outcomes.append(outcome)

    def start(self) -> LoadClient:
        self._deadline = time.monotonic() + self.max_seconds
        for _ in range(self.workers):
            thread = threading.Thread(target=self._work, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> list[Outcome]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)
        return self.outcomes

    def between(self, start: float, end: float) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if start <= o.started < end]


def failed(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.failed]


def truncated(outcomes: list[Outcome], max_tokens: int) -> list[Outcome]:
    return [o for o in outcomes if not o.failed and (not o.done or o.tokens != max_tokens)]


def ttft_ms(outcomes: list[Outcome]) -> dict[str, float]:
    """p50/p99 TTFT in milliseconds of the requests that got a first token."""
    values = sorted(o.ttft_s * 1000 for o in outcomes if o.ttft_s is not None)
    if not values:
        return {"n": 0, "p50": float("nan"), "p99": float("nan")}
    p99 = values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]
    return {"n": len(values), "p50": statistics.median(values), "p99": p99}
