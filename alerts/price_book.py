"""Price alerts in sorted per-market structures: a tick costs O(log n) however many alerts exist.

For each market key (a symbol for ``touch`` alerts, ``SYMBOL interval`` for ``close``
alerts) the book keeps two sides, each a pair of parallel lists sorted by threshold:
``above`` alerts fire when the price is at or over their threshold, ``below`` alerts when
it is at or under.  When nothing fires a tick is two comparisons; when alerts fire, the
crossed ones are a slice, taken out of the book at once (so a second tick cannot take them
again while the first firing is being written) and returned in the order the price passed
them: ascending thresholds for a rise, descending for a fall.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field


@dataclass(slots=True)
class _Side:
    thresholds: list[float] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def add(self, threshold: float, alert_id: str) -> None:
        i = bisect_right(self.thresholds, threshold)
        self.thresholds.insert(i, threshold)
        self.ids.insert(i, alert_id)

    def remove(self, threshold: float, alert_id: str) -> bool:
        i = bisect_left(self.thresholds, threshold)
        n = len(self.thresholds)
        while i < n and self.thresholds[i] == threshold:
            if self.ids[i] == alert_id:
                del self.thresholds[i]
                del self.ids[i]
                return True
            i += 1
        return False

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(slots=True)
class _Market:
    above: _Side = field(default_factory=_Side)
    below: _Side = field(default_factory=_Side)


@dataclass(frozen=True, slots=True)
class Crossed:
    """An alert taken out of the book by a price: its id, side and threshold (to put it back)."""

    alert_id: str
    above: bool
    threshold: float


class PriceBook:
    """Price alerts of many markets."""

    def __init__(self) -> None:
        self._markets: dict[str, _Market] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def markets(self) -> list[str]:
        return list(self._markets)

    def add(self, market: str, above: bool, threshold: float, alert_id: str) -> None:
        m = self._markets.get(market)
        if m is None:
            m = self._markets[market] = _Market()
        (m.above if above else m.below).add(threshold, alert_id)
        self._count += 1

    def bulk_load(self, entries: list[tuple[str, bool, float, str]]) -> None:
        """Add many alerts at once (start-up): one sort per side instead of n insertions."""
        grouped: dict[tuple[str, bool], list[tuple[float, str]]] = {}
        for market, above, threshold, alert_id in entries:
            grouped.setdefault((market, above), []).append((threshold, alert_id))
        for (market, above), items in grouped.items():
            m = self._markets.get(market)
            if m is None:
                m = self._markets[market] = _Market()
            side = m.above if above else m.below
            merged = sorted([*zip(side.thresholds, side.ids, strict=True), *items], key=lambda t: t[0])
            side.thresholds = [t for t, _ in merged]
            side.ids = [a for _, a in merged]
            self._count += len(items)

    def remove(self, market: str, above: bool, threshold: float, alert_id: str) -> bool:
        m = self._markets.get(market)
        if m is None:
            return False
        side = m.above if above else m.below
        if not side.remove(threshold, alert_id):
            return False
        self._count -= 1
        if not m.above and not m.below:
            del self._markets[market]
        return True

    def take_crossed(self, market: str, price: float) -> list[Crossed]:
        """Remove and return the alerts ``price`` reaches, in the order the price passed them."""
        m = self._markets.get(market)
        if m is None:
            return []
        out: list[Crossed] = []
        above = m.above
        if above.thresholds and price >= above.thresholds[0]:
            i = bisect_right(above.thresholds, price)
            out.extend(Crossed(a, True, t) for t, a in zip(above.thresholds[:i], above.ids[:i], strict=True))
            del above.thresholds[:i]
            del above.ids[:i]
        below = m.below
        if below.thresholds and price <= below.thresholds[-1]:
            j = bisect_left(below.thresholds, price)
            taken = list(zip(below.thresholds[j:], below.ids[j:], strict=True))
            out.extend(Crossed(a, False, t) for t, a in reversed(taken))
            del below.thresholds[j:]
            del below.ids[j:]
        if out:
            self._count -= len(out)
            if not above and not below:
                del self._markets[market]
        return out

    def put_back(self, market: str, crossed: list[Crossed]) -> None:
        """Return alerts taken by :meth:`take_crossed` whose firing could not be written."""
        for c in crossed:
            self.add(market, c.above, c.threshold, c.alert_id)
