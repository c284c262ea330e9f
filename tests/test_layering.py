"""The one-way package arrows of design.md §1, checked by walking every import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"config", "storage", "daemon", "engine", "alerts", "brokers", "mcp_bridge", "dashboard", "cluster", "simulator"}
ALLOWED = {
    "config": set(),
    "storage": {"config"},
    "engine": {"config", "storage"},
    "alerts": {"config", "storage", "engine"},
    "brokers": {"config", "storage", "engine"},
    "mcp_bridge": {"config", "storage", "engine", "alerts", "brokers"},
    "dashboard": {"config", "storage", "engine", "alerts", "brokers", "mcp_bridge"},
    "cluster": {"config", "storage", "engine", "brokers"},
    "daemon": {"config", "storage", "engine", "alerts", "brokers", "mcp_bridge", "dashboard", "cluster", "simulator"},
    # the exchange double: Binance's stop / take-profit / trailing trigger rules are the one thing it
    # shares with the paper broker (brokers/trigger_rules.py); nothing of ours imports it but the daemon
    "simulator": {"brokers"},
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


DRIVERS = {"sqlite3", "aiosqlite", "asyncpg"}


def test_config_imports_no_database_driver() -> None:
    """Settings are settings: the database engines live in storage/ (issue 37)."""
    bad = []
    for path in sorted((ROOT / "config").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            bad += [f"{path.relative_to(ROOT)} imports {n}" for n in names if n.split(".")[0] in DRIVERS]
    assert not bad, "\n".join(bad)


def _public_surface(package: str) -> set[str] | None:
    """The names a package's ``__init__`` lists in ``__all__``; None when it declares none yet."""
    tree = ast.parse((ROOT / package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            value = ast.literal_eval(node.value)
            return set(value)
    return None


SURFACED = sorted(p for p in OURS if _public_surface(p) is not None)


def test_some_packages_declare_a_public_surface() -> None:
    assert "storage" in SURFACED


@pytest.mark.parametrize("package", SURFACED)
def test_other_code_imports_only_a_packages_public_surface(package: str) -> None:
    """A package with ``__all__`` is imported from outside only as ``from package import name`` with a
    listed name — never from its modules — by the other packages, bench/ and tests/ (a package's own
    tests, tests/<package>/, may reach its internals)."""
    public = _public_surface(package) or set()
    bad = []
    for top in [*sorted(OURS - {package}), "bench", "tests"]:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("tests", package) or "node_modules" in rel.parts:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    if node.module.startswith(f"{package}."):
                        bad.append(f"{rel}:{node.lineno} imports {node.module} (use: from {package} import …)")
                    elif node.module == package:
                        bad += [f"{rel}:{node.lineno} imports {package}.{a.name}, not in its __all__"
                                for a in node.names if a.name not in public]  # fmt: skip
                elif isinstance(node, ast.Import):
                    bad += [f"{rel}:{node.lineno} imports {a.name}" for a in node.names
                            if a.name.startswith(f"{package}.")]  # fmt: skip
    assert not bad, "\n".join(bad)


def test_every_package_is_installed() -> None:
    """pyproject's package list names every package (a missing one imports from a checkout, not an install)."""
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(p for p in OURS if f"{p}*" not in include) == []


def _top_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(
    ("side", "forbidden"), [("tests", {"bench"}), ("bench", {"tests"}), ("testkit", {"tests", "bench"})]
)
def test_tests_and_benches_share_only_the_test_kit(side: str, forbidden: set[str]) -> None:
    """tests/ and bench/ both import testkit/ (daemons, databases, doubles, oracles), never each other."""
    bad = [
        f"{path.relative_to(ROOT)} imports {dep}"
        for path in sorted((ROOT / side).rglob("*.py"))
        if "node_modules" not in path.parts
        for dep in sorted(_top_imports(path) & forbidden)
    ]
    assert not bad, "\n".join(bad)
