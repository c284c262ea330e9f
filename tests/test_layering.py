"""The one-way package arrows of design.md §1, checked by walking every import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"config", "daemon", "engine", "alerts", "brokers", "mcp_bridge", "dashboard", "cluster"}
ALLOWED = {
    "config": set(),
    "engine": {"config"},
    "alerts": {"config", "engine"},
    "brokers": {"config", "engine"},
    "mcp_bridge": {"config", "engine", "alerts", "brokers"},
    "dashboard": {"config", "engine", "alerts", "brokers", "mcp_bridge"},
    "cluster": {"config", "engine", "brokers"},
    "daemon": {"config", "engine", "alerts", "brokers", "mcp_bridge", "dashboard", "cluster"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_design_allows(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for dep in _imports(path) - ALLOWED[package] - {package}:
            bad.append(f"{path.relative_to(ROOT)} imports {dep}")
    assert not bad, "\n".join(bad)
