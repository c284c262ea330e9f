"""JSON text exactly as chartgen writes it: 2-space indent, sorted keys, non-finite → null."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


def finite_or_none(x: float | None) -> float | None:
    """A float, or None when missing or not finite."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def values(arr: np.ndarray) -> list[float | None]:
    """A per-bar array as a JSON list with null for NaN/±inf."""
    out: list[float | None] = arr.astype(np.float64).tolist()
    if not np.isfinite(arr).all():
        bad = np.flatnonzero(~np.isfinite(arr))
        for i in bad.tolist():
            out[i] = None
    return out


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.floating):
        return _clean(float(obj))
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def pretty(obj: Any) -> str:
    """Pretty JSON with sorted keys, byte-compatible with chartgen's serde output."""
    return json.dumps(_clean(obj), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
