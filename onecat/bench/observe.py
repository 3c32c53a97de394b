"""What the client watches besides its own requests: GPU memory (NVML) and the server's /metrics.

vLLM reserves gpu_memory_utilization of each card at start, so NVML's
memory.used shows the reservation; kv_cache_usage_perc from /metrics shows
the load. Both are peaks over the level.

Both watchers run in their own threads with blocking I/O: nothing they do (a /metrics
round trip, parsing a few kB of Prometheus text) runs on the event loop that timestamps
the stream chunks. benchmarks/bench_client_accuracy.py measures the client with the
scraper on and off.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from onecat.httpsync import Connection

MemoryReader = Callable[[], list[float]]  # MiB used per GPU, in index order

# Gauges scraped from /metrics (older vLLM names after the newer ones).
GAUGES = {
    "kv_cache_usage_perc_max": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_requests_running_max": ("vllm:num_requests_running",),
    "num_requests_waiting_max": ("vllm:num_requests_waiting",),
}


def nvml_memory_reader() -> MemoryReader | None:
    """A reader over every GPU of this machine, or None when NVML is not usable here."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError:
        return None
    if not handles:
        return None
    return lambda: [pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20 for h in handles]


class MemorySampler:
    """Samples a MemoryReader in a thread; peak() is the per-GPU maximum in MiB."""

    def __init__(self, read: MemoryReader | None, interval: float = 0.2) -> None:
        self._read = read
        self._interval = interval
        self._peak: list[float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        try:
            values = self._read() if self._read else None
        except Exception:  # a flaky NVML read must not end the benchmark
            return
        if not values:
            return
        if self._peak is None or len(self._peak) != len(values):
            self._peak = list(values)
        else:
            self._peak = [max(a, b) for a, b in zip(self._peak, values, strict=True)]

    def _loop(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self._interval):
                return

    def start(self) -> None:
        if self._read is None:
            return
        self._stop.clear()
        self._peak = None
        self._thread = threading.Thread(target=self._loop, name="gpu-memory", daemon=True)
        self._thread.start()

    def stop(self) -> list[int] | None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._sample()
            self._thread = None
        return None if self._peak is None else [round(v) for v in self._peak]


def parse_gauges(text: str) -> dict[str, float]:
    """Max value per metric name (over label sets) from Prometheus text."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name_labels, _, rest = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            value = float(rest)
        except ValueError:
            continue
        values[name] = max(value, values.get(name, value))
    return values


# Blocking: the /metrics text, None when the server has none.
MetricsFetch = Callable[[], "str | None"]
MAX_METRICS_BYTES = 8 << 20  # vLLM's page is a few hundred kB at most


def http_metrics_fetch(host: str, port: int, tls: bool, base_path: str = "",
                       headers: dict[str, str] | None = None,
                       timeout: float = 10.0) -> MetricsFetch:
    """A blocking GET of /metrics over one kept-alive connection (reopened after an error).
    A failed scrape raises OSError (no answer, not a 200) or BadAnswer (a malformed answer)."""
    name = f"[{host}]" if ":" in host else host
    conn = Connection(f"{'https' if tls else 'http'}://{name}:{port}{base_path}", headers,
                      timeout)

    def fetch() -> str | None:
        answer = conn.request("GET", "/metrics", limit=MAX_METRICS_BYTES)
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise OSError(f"/metrics answered HTTP {answer.status}")
        return answer.text()

    fetch.close = conn.close  # type: ignore[attr-defined]
    return fetch


class MetricsScraper:
    """Polls /metrics in a thread during a level; keeps the maximum of each gauge in GAUGES."""

    def __init__(self, fetch: MetricsFetch, interval: float = 0.5) -> None:
        self._fetch = fetch
        self._interval = interval
        self.peaks: dict[str, float | None] = dict.fromkeys(GAUGES)
        self.available = True
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _once(self) -> None:
        try:
            text = self._fetch()
        except Exception:  # one failed scrape is a missing sample, not a failed benchmark
            return
        if text is None:
            self.available = False
            return
        self.scrapes += 1
        gauges = parse_gauges(text)
        for key, names in GAUGES.items():
            for name in names:
                if name in gauges:
                    old = self.peaks[key]
                    self.peaks[key] = gauges[name] if old is None else max(old, gauges[name])
                    break

    def _loop(self) -> None:
        while self.available:
            self._once()
            if self._stop.wait(self._interval):
                break
        if self.available:
            self._once()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
