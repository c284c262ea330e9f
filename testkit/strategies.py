"""Hypothesis strategies shared by the fuzz tests: arbitrary JSON values."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_scalars(*, finite: bool) -> st.SearchStrategy[Any]:
    """null, booleans, big integers, floats (NaN/±inf unless ``finite``: a JSON body cannot carry
    them, an in-process call can) and short text."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=not finite, allow_infinity=not finite),
        st.text(max_size=30),
    )


def json_values(*, finite: bool, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars nested in short lists and objects."""
    return st.recursive(
        json_scalars(finite=finite),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
        max_leaves=max_leaves,
    )
