"""Shared helpers: machine label, timing, peak-memory sampling, tables."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def machine_label() -> dict[str, Any]:
    import torch

    from tiermem.models.specs import cpu_count

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cores": cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        # other processes competing for the cores make every absolute figure slower; ratios suffer less
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def machine_line(m: dict[str, Any]) -> str:
    gpu = f", gpu {m['gpu']}" if m.get("gpu") else ", no GPU"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return (f"machine: {m['platform']} ({m['processor']}), {m['cores']} cores, torch {m['torch']} "
            f"with {m['torch_threads']} threads{gpu}; load average now {load:.1f}"
            + (" (busy: other processes share the cores)" if load and load > m["cores"] else ""))


def rss_mb() -> float:
    """Current resident set size of this process (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE / 2**20
    except OSError:
        return 0.0


def max_rss_mb() -> float:
    """Peak RSS of the process so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PeakRSS:
    """Samples RSS in a background thread; `.peak_mb - .start_mb` is the extra memory a block needed.

    ru_maxrss is a process-wide high-water mark and cannot attribute memory to one block, and
    tracemalloc does not see tensor storage (torch allocates outside Python's allocator), so we sample.
    """

    def __init__(self, interval_s: float = 0.005):
        self.interval_s = interval_s
        self.start_mb = self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, rss_mb())
            time.sleep(self.interval_s)

    def __enter__(self) -> PeakRSS:
        self.start_mb = self.peak_mb = rss_mb()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.peak_mb = max(self.peak_mb, rss_mb())

    @property
    def extra_mb(self) -> float:
        return self.peak_mb - self.start_mb


@dataclass
class Timing:
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def time_call(fn: Callable[[], Any], repeats: int = 1, warmup: int = 0) -> tuple[Timing, Any]:
    result = None
    for _ in range(warmup):
        fn()
    secs = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        secs.append(time.perf_counter() - start)
    return Timing(secs), result


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return "n/a" if value is None else str(value)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
