"""A market that does nothing: the engine as the alert evaluator sees it, for tests and benches of the
evaluator alone (follow / unfollow are bookkeeping only, no prices)."""

from __future__ import annotations

from typing import Any


class NullMarket:
    """The engine seen by the evaluator, without an engine (follow/unfollow are bookkeeping only)."""

    def follow(self, symbol: str, interval: str, *, priority: bool = False) -> None:
        return None

    def unfollow(self, symbol: str, interval: str, *, priority: bool = False) -> None:
        return None

    def register_indicator(self, symbol: str, interval: str, request: Any) -> Any:
        return (request.definition.name, ())

    def subscribe(self, kinds: Any = None, *, symbols: Any = None, maxsize: int | None = None) -> Any:
        raise NotImplementedError

    def last_price(self, symbol: str) -> float | None:
        return None

    def exchange_time_ms(self, symbol: str) -> int | None:
        return None
