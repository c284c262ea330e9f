"""What the agent-tool benches share: percentiles, the machine line, quiet logging."""

from __future__ import annotations

import logging
import os
import platform

import structlog


def pct(samples: list[float], q: float) -> float:
    """The ``q`` quantile of ``samples`` (nearest rank, no interpolation)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor() or platform.machine()


def print_machine() -> None:
    print(f"machine: {platform.platform()}, {cpu()}, {os.cpu_count()} CPUs")
    print(f"python {platform.python_version()}")


def quiet_logs() -> None:
    """Only warnings: the per-call audit log line (stdout here) is not part of the tools' figures."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
