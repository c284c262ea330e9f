"""Price-profile math shared by the profile indicators: binning, POC and value area.

A *profile* spreads a weight per bar (its volume, or 1 for a TPO count) over equal-width
price bins between the lowest low and the highest high of a run of bars.  Each bar's
weight goes to the bins its ``[low, high]`` range overlaps, in proportion to the overlap; a
bar with no range (high == low) puts all of it into the bin holding its price.

Several runs of bars (sessions) are profiled at once: each session gets its own bins, and
the whole computation is one broadcast over ``bars × bins`` followed by a per-session sum.

The value area is the standard one: start at the point of control (the bin with the most
weight; among equal maxima the one nearest the middle of the range, then the lower) and
repeatedly add the larger of the two bins adjacent to the area (the upper one on ties)
until it holds at least 70 % of the weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.bars import FloatArray, IntArray
from engine.indicators import colors
from engine.indicators.model import HBar, HLine

VALUE_AREA_FRACTION = 0.70
_FLAT_PAD_REL = 1e-6
_FLAT_PAD_ABS = 1e-9


@dataclass(frozen=True, slots=True)
class Profiles:
    """One price profile per session.

    ``starts``/``ends`` delimit each session's bars (``ends`` exclusive); ``bottom`` is the
    lowest bin edge and ``size`` the bin width of each session; ``weight`` has shape
    ``(sessions, bins)`` and ``up`` the part of it from up bars (close ≥ open), or ``None``.
    """

    starts: IntArray
    ends: IntArray
    bottom: FloatArray
    size: FloatArray
    weight: FloatArray
    up: FloatArray | None

    @property
    def bins(self) -> int:
        return int(self.weight.shape[1])

    def __len__(self) -> int:
        return int(self.weight.shape[0])

    def centers(self, s: int) -> FloatArray:
        """Bin centre prices of session ``s``."""
        return self.bottom[s] + (np.arange(self.bins) + 0.5) * self.size[s]


@dataclass(frozen=True, slots=True)
class ValueArea:
    """Per-session POC bin, value-area bin range (inclusive) and their prices.

    ``ok`` is false for a session with no weight at all; its other fields are then NaN or 0.
    POC is the centre of its bin; VAH and VAL are the outer edges of the value area.
    """

    poc_bin: IntArray
    low_bin: IntArray
    high_bin: IntArray
    ok: np.ndarray
    poc: FloatArray
    vah: FloatArray
    val: FloatArray


def session_starts(ids: IntArray) -> IntArray:
    """Indices where a new session begins in a per-bar session-id array (bars in time order)."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    return np.concatenate(([0], change)).astype(np.int64)


def build_profiles(
    low: FloatArray,
    high: FloatArray,
    weight: FloatArray,
    starts: IntArray,
    bins: int,
    *,
    up: np.ndarray | None = None,
    price: FloatArray | None = None,
) -> Profiles:
    """Profile the bars split into sessions at ``starts`` (first entry must be 0).

    ``up`` (bool per bar) additionally accumulates the weight of up bars; ``price`` is
    where a zero-range bar is placed (its low when omitted).  Non-finite bars weigh nothing.
    """
    n = len(low)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.append(starts[1:], n).astype(np.int64)
    s_count = len(starts)
    if n == 0 or s_count == 0:
        z = np.zeros(0)
        return Profiles(starts, ends, z, z, np.zeros((0, bins)), None if up is None else np.zeros((0, bins)))

    lo = np.minimum(low, high)
    hi = np.maximum(low, high)
    w = np.asarray(weight, dtype=np.float64)
    valid = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(w)
    lo = np.where(valid, lo, 0.0)
    hi = np.where(valid, hi, 0.0)
    w = np.where(valid, np.abs(w), 0.0)

    seg_lo = np.minimum.reduceat(np.where(valid, lo, np.inf), starts)
    seg_hi = np.maximum.reduceat(np.where(valid, hi, -np.inf), starts)
    empty = ~np.isfinite(seg_lo)
    seg_lo = np.where(empty, 0.0, seg_lo)
    seg_hi = np.where(empty, 1.0, seg_hi)
    span = seg_hi - seg_lo
    pad = np.where(span > 0, 0.0, np.maximum(np.abs(seg_lo) * _FLAT_PAD_REL, _FLAT_PAD_ABS))
    bottom = seg_lo - pad / 2
    size = (span + pad) / bins

    sid = np.repeat(np.arange(s_count), ends - starts)
    steps = np.arange(bins)
    if s_count == 1:  # one set of edges for every bar: broadcast a row instead of an n × bins grid
        b_lo = bottom[0] + steps * size[0]
        b_hi = b_lo + size[0]
    else:
        b_lo = bottom[sid][:, None] + steps * size[sid][:, None]
        b_hi = b_lo + size[sid][:, None]
    contrib = np.minimum(hi[:, None], b_hi)
    contrib -= np.maximum(lo[:, None], b_lo)
    np.clip(contrib, 0.0, None, out=contrib)

    # scale each bar's overlaps to sum to its weight (exact even where float edges fall short)
    total = contrib.sum(axis=1)
    spread = total > 0
    scale = np.zeros(n)
    np.divide(w, total, out=scale, where=spread)
    contrib *= scale[:, None]
    point = valid & ~spread
    if point.any():
        p = lo if price is None else np.where(np.isfinite(price), price, lo)
        idx = np.floor((p[point] - bottom[sid[point]]) / size[sid[point]]).astype(np.int64)
        contrib[np.flatnonzero(point), np.clip(idx, 0, bins - 1)] = w[point]

    weights = np.add.reduceat(contrib, starts, axis=0)
    ups = None
    if up is not None:
        up_rows = np.asarray(up, dtype=bool)
        ups = np.add.reduceat(np.where(up_rows[:, None], contrib, 0.0), starts, axis=0)
    return Profiles(starts, ends, bottom, size, weights, ups)


def _poc_bins(weight: FloatArray) -> IntArray:
    """Fullest bin per row; equal maxima (within 1e-9 relative) resolve to the most central, then lowest."""
    s_count, bins = weight.shape
    if bins == 0 or s_count == 0:
        return np.zeros(s_count, dtype=np.int64)
    peak = weight.max(axis=1, keepdims=True)
    is_max = weight >= peak * (1 - 1e-9)
    distance = np.abs(np.arange(bins) - (bins - 1) / 2)
    return np.argmin(np.where(is_max, distance, np.inf), axis=1).astype(np.int64)


def value_area(profiles: Profiles, fraction: float = VALUE_AREA_FRACTION) -> ValueArea:
    """POC and value area of every session at once (one vector step per added bin)."""
    weight = profiles.weight
    s_count, bins = weight.shape
    rows = np.arange(s_count)
    totals = weight.sum(axis=1)
    ok = totals > 0
    poc = _poc_bins(weight)
    low_bin = poc.copy()
    high_bin = poc.copy()
    target = totals * fraction
    acc = weight[rows, poc] if s_count else np.zeros(0)
    for _ in range(bins - 1):
        active = ok & (acc < target)
        if not active.any():
            break
        can_up = high_bin + 1 < bins
        can_down = low_bin > 0
        above = np.where(can_up, weight[rows, np.minimum(high_bin + 1, bins - 1)], -1.0)
        below = np.where(can_down, weight[rows, np.maximum(low_bin - 1, 0)], -1.0)
        go_up = active & can_up & (above >= below)
        go_down = active & can_down & ~go_up
        high_bin = high_bin + go_up
        low_bin = low_bin - go_down
        acc = acc + np.where(go_up, above, 0.0) + np.where(go_down, below, 0.0)

    nan = np.full(s_count, np.nan)
    poc_price = np.where(ok, profiles.bottom + (poc + 0.5) * profiles.size, nan)
    vah = np.where(ok, profiles.bottom + (high_bin + 1) * profiles.size, nan)
    val = np.where(ok, profiles.bottom + low_bin * profiles.size, nan)
    return ValueArea(poc, low_bin, high_bin, ok, poc_price, vah, val)


def profile_hbars(
    profiles: Profiles,
    area: ValueArea,
    *,
    left: bool,
    alpha: float,
    inside_color: str,
    outside_color: str,
    split_colors: tuple[str, str] | None = None,
    max_width: float = 0.25,
) -> list[HBar]:
    """Horizontal bars of session 0: one per non-empty bin, or an up and a down bar per bin.

    Width is the bin's weight over the largest bin's weight times ``max_width``; height is
    90 % of the bin.  Unsplit bars take ``inside_color`` inside the value area and
    ``outside_color`` outside; split bars take ``split_colors`` = (up, down), the down bar
    starting where the up bar ends.
    """
    if len(profiles) == 0 or not area.ok[0]:
        return []
    weight = profiles.weight[0]
    peak = float(weight.max())
    centers = profiles.centers(0)
    height = 0.9 * float(profiles.size[0])
    out: list[HBar] = []
    for b in np.flatnonzero(weight > 0):
        y = float(centers[b])
        if split_colors is not None and profiles.up is not None:
            up_w = float(profiles.up[0, b]) / peak * max_width
            down_w = max(float(weight[b]) / peak * max_width - up_w, 0.0)
            out.append(HBar(y, height, up_w, 0.0, split_colors[0], left=left, alpha=alpha))
            out.append(HBar(y, height, down_w, up_w, split_colors[1], left=left, alpha=alpha))
        else:
            inside = area.low_bin[0] <= b <= area.high_bin[0]
            color = inside_color if inside else outside_color
            out.append(HBar(y, height, float(weight[b]) / peak * max_width, 0.0, color, left=left, alpha=alpha))
    return out


def level_hlines(area: ValueArea, s: int = 0) -> list[HLine]:
    """Session ``s``'s levels in wire order: POC (solid), VAH, VAL (dashed); none without weight."""
    if len(area.ok) <= s or not area.ok[s]:
        return []
    return [
        HLine(float(area.poc[s]), colors.GOLD, dashed=False),
        HLine(float(area.vah[s]), colors.LIGHT_BLUE, dashed=True),
        HLine(float(area.val[s]), colors.LIGHT_BLUE, dashed=True),
    ]
