"""The signal registry: the 25 alert-matchable labels and where each signal happened.

A signal is a labelled dot of an indicator result (contract §3.5).  This module knows the
closed set of labels and turns a result into :class:`Signal` records carrying the bar index
and the bar open time.  The alert engine asks one question of it: which signals are on the
newest closed bar.  Which indicator emits which label is a question over the catalogue, so
it is answered there (engine.indicators.registry.emitters): the indicators import this module
(their newest-bar path reads signals), and it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.bars import Bars
from engine.indicators.model import PanelResult

SIGNAL_LABELS: tuple[str, ...] = (
    "buy",
    "sell",
    "rsi_oversold",
    "rsi_overbought",
    "buy_small",
    "sell_small",
    "wt_bull_div",
    "wt_bear_div",
    "rsi_bull_div",
    "rsi_bear_div",
    "stoch_bull_div",
    "stoch_bear_div",
    "any_bull_div",
    "any_bear_div",
    "gold_buy",
    "stoch_oversold",
    "stoch_overbought",
    "cross_up_os",
    "cross_down_ob",
    "cross_up",
    "cross_down",
    "flip_up",
    "flip_down",
    "buy_oversold",
    "sell_overbought",
)


@dataclass(frozen=True, slots=True)
class Signal:
    """One emitted signal.

    ``index`` is the bar it is drawn at; ``confirmed_index`` the bar on which it became
    known (later than ``index`` for fractal-based signals); ``time``/``confirmed_time`` are
    those bars' open times in unix seconds (None for sample data).
    """

    label: str
    index: int
    time: int | None
    confirmed_index: int
    confirmed_time: int | None
    value: float


def extract(result: PanelResult, bars: Bars) -> list[Signal]:
    """Every signal of ``result`` in emission order."""
    out = []
    for d in result.signals():
        ci = d.confirmed_index
        out.append(
            Signal(
                label=d.label or "",
                index=d.x,
                time=bars.time_of(d.x) if 0 <= d.x < len(bars) else None,
                confirmed_index=ci,
                confirmed_time=bars.time_of(ci) if 0 <= ci < len(bars) else None,
                value=float(d.y),
            )
        )
    return out


def on_newest_bar(result: PanelResult, bars: Bars) -> list[Signal]:
    """Signals confirmed on the newest bar of ``bars`` (pass only closed bars)."""
    if len(bars) == 0:
        return []
    newest = len(bars) - 1
    return [s for s in extract(result, bars) if s.confirmed_index == newest]
