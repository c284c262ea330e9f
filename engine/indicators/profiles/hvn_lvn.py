"""HVN_LVN: high and low volume nodes of the visible-range volume profile, as levels.

A bin is a high-volume node when it holds more volume than every bin within
``neighborhood`` bins below it and at least as much as those above (so a plateau yields
one node), and a low-volume node in the mirror sense; low nodes also need a full
neighbourhood on both sides, so the thin tails of the profile do not count.  Prominence is
the bin's distance from the mean of its neighbours, as a fraction of the fullest bin.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engine.bars import Bars, FloatArray
from engine.indicators import colors
from engine.indicators.base import ComputeContext, IndicatorDef, Params
from engine.indicators.model import HLine, PanelResult
from engine.indicators.params import Param
from engine.indicators.profiles.binning import build_profiles
from engine.indicators.profiles.sessions import RANGE_BARS_PARAM, bins_param, range_slice

LABEL = "HVN/LVN"


def find_nodes(volume: FloatArray, k: int, min_prominence: float) -> tuple[list[int], list[int], FloatArray]:
    """(HVN bins, LVN bins, prominence per bin); each node list sorted by prominence, largest first."""
    bins = len(volume)
    peak = float(volume.max()) if bins else 0.0
    if peak <= 0:
        return [], [], np.zeros(bins)
    hi_pad = np.pad(volume, k, constant_values=-np.inf)
    lo_pad = np.pad(volume, k, constant_values=np.inf)
    val_pad = np.pad(np.ones(bins), k)
    sum_win = sliding_window_view(np.pad(volume, k), 2 * k + 1)
    cnt_win = sliding_window_view(val_pad, 2 * k + 1)
    hi_win = sliding_window_view(hi_pad, 2 * k + 1)
    lo_win = sliding_window_view(lo_pad, 2 * k + 1)
    neighbours = cnt_win.sum(axis=1) - 1
    mean = (sum_win.sum(axis=1) - volume) / np.maximum(neighbours, 1)

    is_hvn = (volume > hi_win[:, :k].max(axis=1)) & (volume >= hi_win[:, k + 1 :].max(axis=1))
    is_lvn = (volume < lo_win[:, :k].min(axis=1)) & (volume <= lo_win[:, k + 1 :].min(axis=1))
    full = np.zeros(bins, dtype=bool)
    full[k : bins - k] = True
    is_lvn &= full
    prominence = np.abs(volume - mean) / peak
    strong = (prominence >= min_prominence) & (prominence > 0)
    hvn = np.flatnonzero(is_hvn & strong)
    lvn = np.flatnonzero(is_lvn & strong)
    hvn = hvn[np.argsort(-prominence[hvn], kind="stable")]
    lvn = lvn[np.argsort(-prominence[lvn], kind="stable")]
    return hvn.tolist(), lvn.tolist(), prominence


def _compute(bars: Bars, params: Params, ctx: ComputeContext) -> PanelResult:
    result = PanelResult(label=LABEL, is_overlay=True)
    window = range_slice(bars, params["range_bars"])
    low, high = bars.low[window], bars.high[window]
    if len(low) == 0:
        return result
    profiles = build_profiles(
        low, high, bars.volume[window], np.zeros(1, dtype=np.int64), params["bins"], price=bars.close[window]
    )
    hvn, lvn, _ = find_nodes(profiles.weight[0], params["neighborhood"], params["min_prominence"])
    top_n = params["top_n"]
    if top_n is not None:
        hvn, lvn = hvn[:top_n], lvn[:top_n]
    centers = profiles.centers(0)
    if params["show_hvn"]:
        result.hlines.extend(HLine(float(centers[b]), colors.ORANGE, dashed=False) for b in hvn)
    if params["show_lvn"]:
        result.hlines.extend(HLine(float(centers[b]), colors.PURPLE, dashed=True) for b in lvn)
    return result


HVN_LVN = IndicatorDef(
    name="hvn_lvn",
    kind="overlay",
    description=(
        "High/Low Volume Nodes — auto-detected support/resistance from the volume profile. "
        "Formula: volume spread over price bins by range overlap; HVN = bin above every bin within "
        "±neighborhood (LVN = below), prominence = |bin − mean of neighbours| / fullest bin ≥ min_prominence. "
        "Levels at bin centres: HVNs then LVNs, each by prominence (largest first), at most top_n of each."
    ),
    compute=_compute,
    params=(
        bins_param(48, minimum=3),
        RANGE_BARS_PARAM,
        Param("neighborhood", "integer", 2, "Bins on each side a node must stand out from", minimum=1, maximum=100),
        Param("min_prominence", "number", 0.10, "Minimum prominence (0-1 of fullest bin)", minimum=0.0, maximum=1.0),
        Param("top_n", "integer", None, "Keep only the N most prominent nodes of each kind", minimum=1, nullable=True),
        Param("show_hvn", "boolean", True, "Draw high-volume nodes"),
        Param("show_lvn", "boolean", True, "Draw low-volume nodes"),
    ),
    aliases=("vp_nodes", "volume_nodes"),
)
