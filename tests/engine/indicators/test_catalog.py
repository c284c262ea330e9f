"""The catalogue as clients see it: 38 indicators, every alias, signals declared, any length computes."""

from __future__ import annotations

import numpy as np
import pytest

from engine.indicators.registry import all_indicators, emitters, list_indicators_payload, lookup, parse_requests
from engine.indicators.runner import compute_requests
from engine.sample_data import sample_bars
from engine.signals import SIGNAL_LABELS

ALIASES = {
    "ema": "ema_stack",
    "bollinger": "bbands",
    "bb": "bbands",
    "kc": "keltner",
    "dc": "donchian",
    "st": "supertrend",
    "parabolic_sar": "sar",
    "psar": "sar",
    "ichi": "ichimoku",
    "ha": "heikin_ashi",
    "pivot_points": "pivot",
    "vp": "volume_profile",
    "vpvr": "volume_profile",
    "svp": "session_vp",
    "session_volume_profile": "session_vp",
    "vp_nodes": "hvn_lvn",
    "volume_nodes": "hvn_lvn",
    "npoc": "naked_poc",
    "market_profile": "tpo",
    "stochastic": "stoch",
    "willr": "williams_r",
    "ad_line": "ad",
    "hv": "histvol",
    "kalman": "kalman_volume",
    "kvf": "kalman_volume",
    "rsi_combo": "rsi_mfi_stoch",
    "combo": "rsi_mfi_stoch",
    "funding_rate": "funding",
    "open_interest": "oi",
    "ls_ratio": "long_short",
    "fng": "fear_greed",
    "wt": "wavetrend",
    "cipher": "cipher_b",
    "cb": "cipher_b",
}


def test_list_indicators_has_the_38_in_chartgens_order_with_formulas() -> None:
    """Total 38, overlays first, each description states a formula."""
    payload = list_indicators_payload()
    names = [d["name"] for d in payload["indicators"]]
    assert payload["total"] == 38 == len(set(names))
    assert names[:3] == ["ema_stack", "bbands", "keltner"] and names[-1] == "fear_greed"
    for entry in payload["indicators"]:
        assert entry["overlay"] == (entry["type"] == "overlay")
        if entry["type"] != "external":
            assert "Formula" in entry["description"] or "=" in entry["description"], entry["name"]


@pytest.mark.parametrize(("alias", "name"), sorted(ALIASES.items()))
def test_every_alias_resolves_including_the_readme_ones(alias: str, name: str) -> None:
    """chartgen's aliases and the README-only ones it never resolved."""
    d = lookup(alias)
    assert d is not None and d.name == name


def test_the_signal_registry_covers_the_25_labels() -> None:
    """Every label but the four disabled divergence ones has an emitter; emitters declare only known labels."""
    table = emitters()
    assert len(SIGNAL_LABELS) == 25
    silent = {label for label, names in table.items() if not names}
    assert silent == {"rsi_bull_div", "rsi_bear_div", "stoch_bull_div", "stoch_bear_div"}
    assert set(table["flip_up"]) == {"supertrend", "sar", "heikin_ashi"}
    assert "rsi" not in {n for names in table.values() for n in names}


@pytest.mark.parametrize("n", [0, 1, 5, 200, 5000])
async def test_every_indicator_computes_on_any_length_without_infinities(n: int) -> None:
    """All 38 at once (external ones degrade to a labelled no-data result offline)."""
    requests = parse_requests([d.name for d in all_indicators()])
    results = await compute_requests(requests, sample_bars(n), symbol=None, interval="4h", sources=None)
    assert len(results) == 38
    for req, r in results:
        arrays = [ln.y for ln in r.lines] + [h.y for h in r.histograms] + [f.y1 for f in r.fills]
        for arr in arrays:
            assert len(arr) == n and not np.isinf(arr).any(), req.key
        assert all(np.isfinite(d.y) for d in r.dots), req.key
        assert {s.label for s in r.signals()} <= set(req.definition.signals), req.key
        if req.definition.fetch is not None:
            assert "(no data:" in r.label
