"""Which lane runs the tests: ``make test-fast`` (the quick lane) sets ``CHARTGEN_QUICK_LANE=1``.

The quick lane runs every test that starts no process, and must answer in about a minute on two
cores (issue 37).  The few tests whose point is a long stretch of data (an indicator's per-bar
path equal to the full computation at every one of 10,000 bars, the recorded signals of 5,000
bars) run a shorter stretch there — the same code paths, fewer bars; ``make test`` and CI run
them whole, as the hypothesis profile does for property tests (tests/conftest.py).
"""

from __future__ import annotations

import os

QUICK_LANE = os.environ.get("CHARTGEN_QUICK_LANE") == "1"


def stretch(full: int, quick: int) -> int:
    """``full`` in the full lanes, ``quick`` in the quick one."""
    return quick if QUICK_LANE else full
