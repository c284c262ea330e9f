"""The simulator's clock: manual (moves only when told) or real (wall clock × speed)."""

from __future__ import annotations

import time
from typing import Literal

ClockMode = Literal["manual", "real"]

# 2026-01-01T00:00:00Z: a round start for the manual clock
DEFAULT_START_MS = 1_767_225_600_000


class SimClock:
    """Exchange time in milliseconds."""

    def __init__(self, mode: ClockMode = "manual", *, start_ms: int | None = None, speed: float = 1.0) -> None:
        if mode not in ("manual", "real"):
            raise ValueError(f"clock must be 'manual' or 'real', got {mode!r}")
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.mode: ClockMode = mode
        self.speed = speed
        if mode == "manual":
            self._manual_ms = DEFAULT_START_MS if start_ms is None else start_ms
        else:
            self._real_origin = time.time()
            self._sim_origin_ms = int(time.time() * 1000) if start_ms is None else start_ms

    def now_ms(self) -> int:
        if self.mode == "manual":
            return self._manual_ms
        elapsed = (time.time() - self._real_origin) * self.speed
        return self._sim_origin_ms + int(elapsed * 1000)

    def advance(self, seconds: float) -> int:
        """Move the clock forward (manual) or shift it (real); returns the new time."""
        if seconds < 0:
            raise ValueError("seconds must be ≥ 0")
        if self.mode == "manual":
            self._manual_ms += round(seconds * 1000)
        else:
            self._sim_origin_ms += round(seconds * 1000)
        return self.now_ms()
