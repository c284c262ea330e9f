"""Which lane runs the tests: ``make test-fast`` (the quick lane) sets ``CHARTGEN_QUICK_LANE=1``.

The quick lane runs every test that starts no process, and must answer in about a minute on two
cores (issue 37).  The few tests whose point is a long stretch of data (an indicator's per-bar
path equal to the full computation at every one of 10,000 bars, the recorded signals of 5,000
bars) run a shorter stretch there — the same code paths, fewer bars; ``make test`` and CI run
them whole, as the hypothesis profile does for property tests (tests/conftest.py).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

QUICK_LANE = os.environ.get("CHARTGEN_QUICK_LANE") == "1"


def stretch(full: int, quick: int) -> int:
    """``full`` in the full lanes, ``quick`` in the quick one."""
    return quick if QUICK_LANE else full


_PYTESTMARK = re.compile(r"^pytestmark\s*=", re.MULTILINE)
_DESELECT_ONLY = re.compile(r"^\s*not\s+\w+(\s+and\s+not\s+\w+)*\s*$")


def module_marks(path: Path) -> set[str]:
    """The marker names of a test file's module-level ``pytestmark`` (``pytest.mark.NAME``), read from
    its text without importing it (empty when it declares none)."""
    text = path.read_text(encoding="utf-8")
    found = _PYTESTMARK.search(text)
    if found is None:
        return set()
    lines = text[found.start() :].splitlines()
    for end in range(1, len(lines) + 1):  # the statement may span lines: the shortest prefix that parses
        try:
            tree = ast.parse("\n".join(lines[:end]))
        except SyntaxError:
            continue
        return {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
        }
    return set()


def excluded_whole(path: Path, markexpr: str) -> bool:
    """True when ``-m markexpr`` deselects every test of ``path`` whatever its tests' own markers: the
    expression only leaves markers out (``not a and not b``) and the file's ``pytestmark`` has one of
    them.  Markers on a test only add to its module's, so no test of such a file can be selected."""
    if not _DESELECT_ONLY.match(markexpr):
        return False
    left_out = set(re.findall(r"not\s+(\w+)", markexpr))
    return bool(module_marks(path) & left_out)
