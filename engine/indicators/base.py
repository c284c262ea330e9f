"""What an indicator *is* to the rest of the system: :class:`IndicatorDef`, its context, and a request for one.

An indicator is a pure function from bars and validated parameters to a
:class:`~engine.indicators.model.PanelResult`.  External indicators (funding, open
interest, ...) additionally declare an async ``fetch`` that runs *before* compute, outside
any lock, and whose result (or failure reason) reaches compute through
:class:`ComputeContext`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from engine.bars import Bars
from engine.indicators.model import PanelResult
from engine.indicators.params import Param, Params, configure

if TYPE_CHECKING:
    from engine.indicators.external.sources import ExternalSources
    from engine.indicators.incremental import Incremental
    from engine.indicators.newest import Newest

Kind = Literal["overlay", "panel", "external"]


@dataclass(frozen=True, slots=True)
class ExternalUnavailable:
    """Why an external indicator has no data (shown as ``LABEL (no data: reason)``)."""

    reason: str


@dataclass(frozen=True, slots=True)
class ComputeContext:
    """What compute may know besides the bars: the market and any pre-fetched data."""

    symbol: str | None = None
    interval: str = "4h"
    external: Any = None


ComputeFn = Callable[[Bars, Params, ComputeContext], PanelResult]
FetchFn = Callable[["ExternalSources", Bars, Params, ComputeContext], Awaitable[Any]]
WarmupFn = Callable[[Params, str], int]
"""Bars of history an indicator needs before the first shown bar, from its params and the interval."""
NewestFn = Callable[[Bars, Params], "Newest"]
"""The newest bar's line values and confirmed signals, equal to the full computation's (engine.indicators.newest)."""
IncrementalFn = Callable[[Params], "Incremental"]
"""A per-bar state advanced by each closed bar (engine.indicators.incremental)."""


@dataclass(frozen=True, slots=True)
class IndicatorDef:
    """One catalogue entry: identity, documentation, parameters, signals and the math.

    ``signals`` lists every label this indicator can emit (see engine.signals).
    ``fetch`` is set only for external indicators.  ``warmup`` says how many bars of history
    before the first shown bar make every value on the shown bars defined and settled
    (engine.indicators.warmup); None means none (the indicator describes the shown bars).
    ``newest`` is the per-bar path (engine.indicators.newest); None means the engine reads the
    newest bar off the full computation.  ``incremental`` makes a state that the engine advances
    by each closed bar instead (engine.indicators.incremental).
    """

    name: str
    kind: Kind
    description: str
    compute: ComputeFn
    params: tuple[Param, ...] = ()
    aliases: tuple[str, ...] = ()
    signals: tuple[str, ...] = ()
    fetch: FetchFn | None = field(default=None)
    warmup: WarmupFn | None = field(default=None)
    newest: NewestFn | None = field(default=None)
    incremental: IncrementalFn | None = field(default=None)

    @property
    def is_overlay(self) -> bool:
        return self.kind == "overlay"

    def warmup_bars(self, params: Params, interval: str) -> int:
        """Bars of history needed before the first shown bar (0 when the indicator declares none)."""
        return 0 if self.warmup is None else max(0, int(self.warmup(params, interval)))

    def configure(self, raw: Params | None) -> dict[str, Any]:
        """Validated parameters (defaults merged in); raises IndicatorParamError."""
        return configure(self.name, self.params, raw)

    def describe(self) -> dict[str, Any]:
        """This indicator's entry in the list_indicators payload."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "type": self.kind,
            "overlay": self.is_overlay,
        }
        if self.aliases:
            out["aliases"] = list(self.aliases)
        if self.params:
            out["configurable_params"] = [p.describe() for p in self.params]
        if self.signals:
            out["signals"] = list(self.signals)
        return out


@dataclass(frozen=True, slots=True)
class IndicatorRequest:
    """One requested indicator: the key it was asked by, its definition, validated params
    (engine.indicators.registry.parse_requests makes them from a tool's ``indicators`` list)."""

    key: str
    definition: IndicatorDef
    params: Params
