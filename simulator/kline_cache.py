"""The closed klines a market has built, kept by interval: they can no longer change, so they are priced once.

A closed kline is a pure function of the seed and the trades before its close (trades are always
posted "now"), so keeping it is only a saving, never a change.  The records live in numpy blocks
of :data:`BLOCK` consecutive open times, with the kline's own fields (``RECORD``) and its
``x`` (closed) flag False where nothing is kept.  A REST window of a thousand klines is found
and kept with a slice per block: a dict entry and a bytes object per kline cost as much as
pricing it (issue 41), and nothing here is an object the garbage collector walks.  One kline at
a time (the streams' clock advances) goes through :meth:`ClosedKlines.get` / :meth:`ClosedKlines.keep`.
"""

from __future__ import annotations

import numpy as np

RECORD = np.dtype([("t0", "<i8"), ("t1", "<i8")] + [(name, "<f8") for name in "ohlcv"] + [("n", "<i8"), ("x", "?")])
"""A kline's fields in Kline's order: open and close time, OHLC, volume, trades, closed."""
BLOCK = 128
"""Open times per block: a 1,000-kline window touches 8 or 9 blocks; a block is 8 KiB."""
_RAW = np.dtype((np.void, RECORD.itemsize))
"""A record as opaque bytes: numpy copies these as memory, a structured record field by field (8× slower)."""


class ClosedKlines:
    """One market's closed klines of one interval, by open time (the interval's grid: ``offset + k·step``)."""

    __slots__ = ("_blocks", "_offset", "_step")

    def __init__(self, step: int, offset: int = 0) -> None:
        self._step, self._offset = step, offset
        self._blocks: dict[int, np.ndarray] = {}

    def _index(self, open_time: int) -> int | None:
        k, off_grid = divmod(open_time - self._offset, self._step)
        return None if off_grid else k  # an open time off the grid is never kept

    def run(self, first: int, count: int) -> np.ndarray:
        """The records of ``count`` consecutive open times from ``first``; ``x`` is False where none is kept."""
        out = np.zeros(count, dtype=RECORD)
        k0 = self._index(first)
        if k0 is None:
            return out
        raw = out.view(_RAW)
        for at, (block, i, take) in self._spans(k0, count):
            found = self._blocks.get(block)
            if found is not None:
                raw[at : at + take] = found[i : i + take].view(_RAW)
        return out

    def keep_run(self, first: int, records: np.ndarray) -> None:
        """Keep the records of consecutive open times from ``first``, every one of them closed."""
        k0 = self._index(first)
        if k0 is None:
            return
        raw = np.ascontiguousarray(records).view(_RAW)
        for at, (block, i, take) in self._spans(k0, len(records)):
            dst = self._blocks.get(block)
            if dst is None:
                dst = self._blocks[block] = np.zeros(BLOCK, dtype=RECORD)
            dst[i : i + take].view(_RAW)[:] = raw[at : at + take]

    def get(self, open_time: int) -> tuple[int, int, float, float, float, float, float, int, bool] | None:
        """The kept kline opening at ``open_time`` as a tuple of its fields, or None."""
        k = self._index(open_time)
        found = None if k is None else self._blocks.get(k // BLOCK)
        if k is None or found is None:
            return None
        record = found[k % BLOCK]
        fields: tuple[int, int, float, float, float, float, float, int, bool] = record.item()
        return fields if record["x"] else None

    def keep(self, fields: tuple[int, int, float, float, float, float, float, int, bool]) -> None:
        """Keep one closed kline, given as its fields (``x`` True)."""
        k = self._index(fields[0])
        if k is None:
            return
        block = self._blocks.get(k // BLOCK)
        if block is None:
            block = self._blocks[k // BLOCK] = np.zeros(BLOCK, dtype=RECORD)
        block[k % BLOCK] = fields

    def _spans(self, k0: int, count: int) -> list[tuple[int, tuple[int, int, int]]]:
        """``(position, (block, index in block, length))`` of each block the run ``k0 … k0+count-1`` touches."""
        out, at = [], 0
        while at < count:
            block, i = divmod(k0 + at, BLOCK)
            take = min(BLOCK - i, count - at)
            out.append((at, (block, i, take)))
            at += take
        return out
