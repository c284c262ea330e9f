"""Volume-profile overlays: structure, POC/VAH/VAL on known data, value-area property, sessions."""

from __future__ import annotations

import numpy as np
import pytest

from engine.bars import Bars
from engine.indicators.base import ComputeContext, IndicatorDef
from engine.indicators.model import PanelResult
from engine.indicators.params import IndicatorParamError
from engine.indicators.profiles.binning import build_profiles, value_area
from engine.indicators.profiles.hvn_lvn import HVN_LVN
from engine.indicators.profiles.naked_poc import NAKED_POC
from engine.indicators.profiles.session_vp import SESSION_VP
from engine.indicators.profiles.tpo import TPO
from engine.indicators.profiles.volume_profile import VOLUME_PROFILE
from engine.sample_data import sample_bars

ALL = (VOLUME_PROFILE, SESSION_VP, HVN_LVN, NAKED_POC, TPO)
DAY = 86_400
HOUR = 3600
MONDAY_2024_01_01 = 1_704_067_200  # 2024-01-01 00:00 UTC was a Monday


def run(d: IndicatorDef, bars: Bars, **params: object) -> PanelResult:
    return d.compute(bars, d.configure(params), ComputeContext())


def ladder(volumes: list[float]) -> Bars:
    """Bar j spans exactly [j, j+1] with volume volumes[j]: with len(volumes) bins, bar j fills bin j."""
    rows = [(j + 0.5, j + 1.0, float(j), j + 0.5, v) for j, v in enumerate(volumes)]
    return Bars.from_rows(rows)


def random_walk(n: int, seed: int = 7, start: int | None = None, step: int = HOUR) -> Bars:
    rng = np.random.default_rng(seed)
    close = 100 + np.cumsum(rng.normal(0, 1, n))
    open_ = np.concatenate(([100.0], close[:-1]))[:n]
    high = np.maximum(open_, close) + rng.uniform(0, 1, n)
    low = np.minimum(open_, close) - rng.uniform(0, 1, n)
    volume = rng.uniform(100, 1000, n)
    times = None if start is None else start + step * np.arange(n)
    return Bars(open_, high, low, close, volume, times=times)


def greedy_value_area(weights: list[float]) -> tuple[int, int, int]:
    """Textbook value area by hand: POC (most central of equal maxima), then the larger neighbour until ≥ 70 %."""
    top = max(weights)
    poc = min((i for i, w in enumerate(weights) if w == top), key=lambda i: (abs(i - (len(weights) - 1) / 2), i))
    lo = hi = poc
    acc, target = weights[poc], 0.7 * sum(weights)
    while acc < target and (lo > 0 or hi < len(weights) - 1):
        up = weights[hi + 1] if hi < len(weights) - 1 else -1.0
        down = weights[lo - 1] if lo > 0 else -1.0
        if up >= down:
            hi += 1
            acc += up
        else:
            lo -= 1
            acc += down
    return poc, lo, hi


def test_profile_indicators_declare_the_contract_names_aliases_and_defaults() -> None:
    """Names, aliases, kind and default parameters follow contract §3.4 rows 12-16."""
    expected = {
        "volume_profile": (
            ("vp", "vpvr"),
            {
                "bins": 24,
                "side": "left",
                "range_bars": None,
                "split_up_down": False,
                "color_up": "#26a69a",
                "color_down": "#ef5350",
                "opacity": 0.35,
            },
        ),
        "session_vp": (
            ("svp", "session_volume_profile"),
            {"bins": 24, "session": "daily", "bars_per_session": None, "show_value_area": True},
        ),
        "hvn_lvn": (
            ("vp_nodes", "volume_nodes"),
            {
                "bins": 48,
                "range_bars": None,
                "neighborhood": 2,
                "min_prominence": 0.10,
                "top_n": None,
                "show_hvn": True,
                "show_lvn": True,
            },
        ),
        "naked_poc": (
            ("npoc",),
            {"bins": 24, "session": "daily", "bars_per_session": None, "max_sessions": 20, "include_current": True},
        ),
        "tpo": (("market_profile",), {"bins": 32, "side": "right", "range_bars": None, "opacity": 0.35}),
    }
    for d in ALL:
        aliases, defaults = expected[d.name]
        assert d.kind == "overlay" and d.is_overlay
        assert d.aliases == aliases
        assert d.configure(None) == defaults
        assert [p.name for p in d.params] == list(defaults)
        assert "Formula" in d.description


def test_volume_profile_finds_the_hand_computed_poc_and_value_area() -> None:
    """Bins holding 1,1,2,5,10,6,3,1,1,0: POC bin 4 (4.5), value area bins 3-5 (VAL 3, VAH 6)."""
    bars = ladder([1, 1, 2, 5, 10, 6, 3, 1, 1, 0])
    r = run(VOLUME_PROFILE, bars, bins=10)
    assert r.label == "VPVR" and r.is_overlay
    assert [h.y for h in r.hlines] == pytest.approx([4.5, 6.0, 3.0])
    assert len(r.hbars) == 9  # the empty top bin has no bar
    assert [b.y for b in r.hbars] == pytest.approx([j + 0.5 for j in range(9)])
    assert all(b.height == pytest.approx(0.9) and b.left and b.offset == 0 for b in r.hbars)
    assert r.hbars[4].width == pytest.approx(0.25)
    assert r.hbars[3].width == pytest.approx(0.125)


def test_volume_is_spread_across_bins_by_range_overlap() -> None:
    """A bar over [0,4] with volume 8 gives 2 to each unit bin; a bar over [3,4] adds all 4 to the top bin."""
    bars = Bars.from_rows([(0, 4, 0, 4, 8), (3, 4, 3, 4, 4)])
    p = build_profiles(bars.low, bars.high, bars.volume, np.array([0]), 4)
    np.testing.assert_allclose(p.weight[0], [2, 2, 2, 6])
    r = run(VOLUME_PROFILE, bars, bins=4, side="right")
    np.testing.assert_allclose([b.width for b in r.hbars], [2 / 6 * 0.25] * 3 + [0.25])
    assert not any(b.left for b in r.hbars)


def test_split_mode_draws_an_up_and_a_down_bar_per_bin_with_the_down_bar_offset() -> None:
    """split_up_down: two bars per non-empty bin, the down bar starting where the up bar ends."""
    bars = Bars.from_rows([(0, 1, 0, 1, 3), (1, 1, 0, 0, 1)])  # up bar vol 3, down bar vol 1, same range
    r = run(VOLUME_PROFILE, bars, bins=1, split_up_down=True, color_up="#00ff00", color_down="#ff0000")
    up, down = r.hbars
    assert (up.color, down.color) == ("#00ff00", "#ff0000")
    assert up.width == pytest.approx(0.25 * 0.75) and down.width == pytest.approx(0.25 * 0.25)
    assert down.offset == pytest.approx(up.width)
    assert len(r.hlines) == 3


def test_value_area_matches_a_hand_written_greedy_and_holds_seventy_percent() -> None:
    """On random profiles the vectorised value area equals the textbook loop and is a minimal ≥70 % run."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        bins = int(rng.integers(1, 40))
        weights = rng.integers(0, 20, bins).astype(float)
        weights[rng.integers(0, bins)] += 1  # never all zero
        bars = ladder(list(weights))
        p = build_profiles(bars.low, bars.high, bars.volume, np.array([0]), bins)
        np.testing.assert_allclose(p.weight[0], weights, atol=1e-9)
        area = value_area(p)
        poc, lo, hi = greedy_value_area(list(weights))
        assert (area.poc_bin[0], area.low_bin[0], area.high_bin[0]) == (poc, lo, hi)
        inside = weights[lo : hi + 1].sum()
        assert inside >= 0.7 * weights.sum() - 1e-9
        ends = [b for b in (lo, hi) if b != poc]
        if ends:
            assert min(inside - weights[b] for b in ends) < 0.7 * weights.sum()


def test_hlines_are_poc_then_vah_then_val_on_real_looking_data() -> None:
    """POC lies inside [VAL, VAH], and those sit inside the chart's price range."""
    bars = random_walk(500)
    for d in (VOLUME_PROFILE, TPO):
        poc, vah, val = (h.y for h in run(d, bars).hlines)
        assert bars.low.min() <= val <= poc <= vah <= bars.high.max()


def test_range_bars_profiles_only_the_newest_bars() -> None:
    """range_bars=1 profiles the last bar alone: POC inside that bar's range."""
    bars = random_walk(300)
    poc, vah, val = (h.y for h in run(VOLUME_PROFILE, bars, range_bars=1, bins=4).hlines)
    assert bars.low[-1] <= val <= poc <= vah <= bars.high[-1]


def test_tpo_weighs_every_bar_once_regardless_of_volume() -> None:
    """Three bars at price ~2 outweigh one huge-volume bar at ~0: TPO's POC is the busy price."""
    rows = [(0.5, 1, 0, 0.5, 1e9)] + [(2.5, 3, 2, 2.5, 1.0)] * 3
    bars = Bars.from_rows(rows)
    r = run(TPO, bars, bins=3)
    assert r.label == "TPO"
    assert r.hlines[0].y == pytest.approx(2.5)
    assert run(VOLUME_PROFILE, bars, bins=3).hlines[0].y == pytest.approx(0.5)
    assert not any(b.left for b in r.hbars)  # default side is right


def test_session_vp_resets_at_each_utc_midnight() -> None:
    """Hourly bars over three days around 100, 200 and 300: each day's POC line sits at its own level."""
    n = 72
    level = np.repeat([100.0, 200.0, 300.0], 24) + np.tile(np.linspace(-1, 1, 24), 3)
    rows = [(c, c + 0.5, c - 0.5, c, 10.0) for c in level]
    bars = Bars.from_rows(rows, times=list(MONDAY_2024_01_01 + HOUR * np.arange(n)))
    r = run(SESSION_VP, bars)
    assert r.label == "SVP" and [ln.label for ln in r.lines] == ["POC", "VAH", "VAL"]
    poc = r.lines[0].y
    for day, centre in enumerate((100, 200, 300)):
        seg = poc[24 * day : 24 * (day + 1)]
        assert np.all(seg == seg[0]) and abs(seg[0] - centre) < 1.5
    assert np.all(r.lines[2].y <= poc) and np.all(poc <= r.lines[1].y)
    assert [ln.label for ln in run(SESSION_VP, bars, show_value_area=False).lines] == ["POC"]


def test_weekly_sessions_start_on_monday_and_hourly_sessions_every_hour() -> None:
    """A Sunday→Monday series splits at Monday 00:00 UTC; hourly sessions split every 60 one-minute bars."""
    start = MONDAY_2024_01_01 - 2 * DAY  # Saturday
    level = np.where(np.arange(96) < 48, 100.0, 200.0)
    bars = Bars.from_rows([(c, c + 1, c - 1, c, 5.0) for c in level], times=list(start + HOUR * np.arange(96)))
    poc = run(SESSION_VP, bars, session="week").lines[0].y
    assert np.all(poc[:48] < 150) and np.all(poc[48:] > 150)

    minutes = random_walk(180, start=MONDAY_2024_01_01, step=60)
    poc = run(SESSION_VP, minutes, session="1h").lines[0].y
    assert len({poc[0], poc[60], poc[120]}) == 3
    assert np.all(poc[:60] == poc[0]) and np.all(poc[60:120] == poc[60])


def test_sample_data_without_times_is_one_session_unless_bars_per_session_is_set() -> None:
    """No times → one flat POC line; bars_per_session=50 → a new level every 50 bars."""
    bars = sample_bars(200)
    poc = run(SESSION_VP, bars).lines[0].y
    assert np.all(poc == poc[0])
    poc = run(SESSION_VP, bars, bars_per_session=50).lines[0].y
    assert len(np.unique(poc)) == 4 and np.all(poc[:50] == poc[0])


def daily_sessions(levels: list[tuple[float, float]]) -> Bars:
    """One day of 24 hourly bars per (low, high) level, every bar spanning that range."""
    rows = []
    for low, high in levels:
        mid = (low + high) / 2
        rows += [(mid, high, low, mid, 10.0)] * 24
    return Bars.from_rows(rows, times=list(MONDAY_2024_01_01 + HOUR * np.arange(len(rows))))


def test_naked_poc_keeps_untouched_past_pocs_and_drops_touched_ones() -> None:
    """Day POCs ~100 and ~120 stay naked when later days trade 125-135; a later revisit of 120 fills it."""
    r = run(NAKED_POC, daily_sessions([(99, 101), (119, 121), (125, 135)]))
    assert r.label == "nPOC"
    assert [ln.label for ln in r.lines] == ["nPOC", "nPOC", "dPOC"]
    first, second, current = (ln.y for ln in r.lines)
    assert np.all(np.isnan(first[:23])) and np.all(np.abs(first[23:] - 100) < 0.2)
    assert np.all(np.isnan(second[:47])) and np.all(np.abs(second[47:] - 120) < 0.2)
    assert np.all(np.isnan(current[:48])) and np.all(np.abs(current[48:] - 130) < 0.5)

    filled = run(NAKED_POC, daily_sessions([(99, 101), (119, 121), (115, 135)]))
    assert [ln.label for ln in filled.lines] == ["nPOC", "dPOC"]
    assert run(NAKED_POC, daily_sessions([(99, 101), (119, 121), (125, 135)]), max_sessions=1).lines[0].y[-1] == (
        pytest.approx(120, abs=0.2)
    )
    assert [ln.label for ln in run(NAKED_POC, daily_sessions([(99, 101)] * 2), include_current=False).lines] == []


def test_hvn_lvn_finds_the_two_modes_and_the_gap_between_them() -> None:
    """A smooth bimodal profile (modes at bins 5 and 15, trough at 10) yields HVNs 5, 15 then LVN 10."""
    b = np.arange(21)
    weights = list(40 * np.exp(-(((b - 5) / 2) ** 2) / 2) + 30 * np.exp(-(((b - 15) / 2) ** 2) / 2) + 0.5)
    r = run(HVN_LVN, ladder(weights), bins=21)
    assert r.label == "HVN/LVN" and not r.lines and not r.hbars
    assert [h.y for h in r.hlines] == pytest.approx([5.5, 15.5, 10.5])
    assert [h.y for h in run(HVN_LVN, ladder(weights), bins=21, show_hvn=False).hlines] == pytest.approx([10.5])
    assert [h.y for h in run(HVN_LVN, ladder(weights), bins=21, top_n=1, show_lvn=False).hlines] == pytest.approx([5.5])


@pytest.mark.parametrize("n", [0, 1, 2, 5, 200, 5000])
@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_profiles_survive_any_length_and_flat_data_without_infinities(d: IndicatorDef, n: int) -> None:
    """0-5000 bars of sample, timed and flat zero-volume data: no exception, no ±inf, arrays 1:1 with bars."""
    flat = Bars.from_rows([(5.0, 5.0, 5.0, 5.0, 0.0)] * n, times=list(MONDAY_2024_01_01 + HOUR * np.arange(n)))
    flat_vol = Bars.from_rows([(5.0, 5.0, 5.0, 5.0, 3.0)] * n)
    for bars in (sample_bars(n), random_walk(n, start=MONDAY_2024_01_01), flat, flat_vol):
        r = run(d, bars)
        for ln in r.lines:
            assert len(ln.y) == n and not np.isinf(ln.y).any()
        assert all(np.isfinite(h.y) for h in r.hlines)
        assert all(np.isfinite([b.y, b.height, b.width, b.offset]).all() and b.height > 0 for b in r.hbars)
        assert len(r.hlines) in (0, 3) or d is HVN_LVN


def test_flat_zero_volume_profile_has_no_levels_but_flat_priced_volume_has_them_at_the_price() -> None:
    """All-zero volume → nothing to show; volume at one price → POC/VAH/VAL around that price."""
    assert run(VOLUME_PROFILE, Bars.from_rows([(5.0, 5.0, 5.0, 5.0, 0.0)] * 10)).hlines == []
    poc, vah, val = (h.y for h in run(VOLUME_PROFILE, Bars.from_rows([(5.0, 5.0, 5.0, 5.0, 1.0)] * 10)).hlines)
    assert val <= 5.0 <= vah and poc == pytest.approx(5.0, abs=1e-5)


@pytest.mark.parametrize(
    ("d", "params", "field"),
    [
        (VOLUME_PROFILE, {"bins": 0}, "bins"),
        (TPO, {"side": "top"}, "side"),
        (SESSION_VP, {"session": "monthly"}, "session"),
        (HVN_LVN, {"bins": 2}, "bins"),
        (HVN_LVN, {"min_prominence": 1.5}, "min_prominence"),
        (NAKED_POC, {"max_sessions": 0}, "max_sessions"),
        (VOLUME_PROFILE, {"range_bars": 0}, "range_bars"),
    ],
)
def test_bad_parameters_are_rejected_naming_the_parameter(d: IndicatorDef, params: dict, field: str) -> None:
    """Out-of-range or unknown-choice values raise IndicatorParamError that names the parameter."""
    with pytest.raises(IndicatorParamError, match=f"'{field}'"):
        d.configure(params)
