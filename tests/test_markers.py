"""The marker guard: a test that starts a process declares it, so ``make test-fast`` stays fast.

``make test-fast`` runs ``-m "not slow and not servers and not process"`` and ``make test``
``-m "not slow and not servers"``; the lanes only hold while each test that starts a process
carries the marker that keeps it out.  Markers are declared in the test files themselves
(``pytestmark``, a test's decorator, or ``pytest.param(..., marks=...)``), so this guard reads
every test file and fails on a test that can reach

- a process start (the daemon, nginx, Chromium, node, systemd-analyze, a process pool …)
  without a ``process``, ``servers`` or ``slow`` marker, or
- PostgreSQL or nats-server (testkit/postgres.py, testkit/nats.py) without a
  ``servers`` or ``slow`` marker.

"Can reach" is followed statically, on the ``ast`` of the test file, its conftest files and
testkit: from a test through the module-level functions and classes it names, the names it
imports from ``tests``, and the fixtures it asks for (parameters, ``request.getfixturevalue("…")``,
``usefixtures``), down to one of :data:`STARTS_PROCESS` or :data:`STARTS_SERVER`.  A fixture whose
params carry the marker (the "postgres" storage param) covers its own path.  In-process loopback
servers (the exchange simulator, aiohttp and uvicorn test servers) start no process and are not
followed.  Whatever is only reached through a variable, ``getattr`` or a callable passed around is
not seen: the guard catches the ordinary ways of starting a process, not every one.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

STARTS_PROCESS = (
    "subprocess.run",
    "subprocess.Popen",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "subprocess.getoutput",
    "subprocess.getstatusoutput",
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.system",
    "os.popen",
    "os.spawn",
    "os.exec",
    "pty.spawn",
    "pty.fork",
    "multiprocessing.",
    "concurrent.futures.ProcessPoolExecutor",
    "engine.charts.pool.ProcessPoolRenderer",
    "selenium.webdriver.Chrome",
    "selenium.webdriver.Firefox",
    "selenium.webdriver.Remote",
    "mcp.client.stdio.stdio_client",
    "mcp.client.stdio.StdioServerParameters",
)
"""Dotted names (prefixes) whose use starts a process; ``mcp.client.stdio.StdioServerParameters``
counts because the SDK client spawns the command it describes."""

STARTS_SERVER = (
    "testkit.postgres.postgres_server",
    "testkit.nats.running_nats",
    "testkit.nats.NatsServer",
)
"""The helpers that start PostgreSQL or nats-server (the session's ``postgres`` fixture uses the first)."""


@dataclass(frozen=True)
class Rule:
    """What a test must not reach (``roots``) unless it carries one of ``markers``."""

    roots: tuple[str, ...]
    markers: frozenset[str]


PROCESS = Rule(STARTS_PROCESS + STARTS_SERVER, frozenset({"process", "servers", "slow"}))
SERVERS = Rule(STARTS_SERVER, frozenset({"servers", "slow"}))


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _mentions(node: ast.AST | None, markers: frozenset[str]) -> bool:
    """Whether ``node`` mentions ``pytest.mark.<one of markers>`` (or ``mark.…``)."""
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in markers:
            owner = _dotted(sub.value)
            if owner is not None and owner.split(".")[-1] == "mark":
                return True
    return False


def _is_fixture(node: ast.AST) -> bool:
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if _dotted(target) in {"pytest.fixture", "fixture", "pytest_asyncio.fixture"}:
            return True
    return False


def _arguments(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = fn.args
    return [arg.arg for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]]


@dataclass(frozen=True)
class Uses:
    """What one module-level definition names, read once: dotted names, imports made inside it, the
    fixtures it asks for (a test's or a fixture's), and its fixture decorator's arguments."""

    names: tuple[str, ...]
    local: dict[str, str]
    fixtures: tuple[str, ...]
    fixture_call: ast.Call | None

    @classmethod
    def of(cls, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> Uses:
        """Read in one walk of ``node``: the dotted names; the ``from x import y`` names bound inside it
        (fixtures import lazily); the fixtures it asks for by parameter or by
        ``request.getfixturevalue("…")`` / ``usefixtures("…")``."""
        names: dict[str, None] = {}
        local: dict[str, str] = {}
        asked: list[str] = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name | ast.Attribute):
                if dotted := _dotted(sub):
                    names[dotted] = None
            elif isinstance(sub, ast.ImportFrom) and sub.module is not None:
                for alias in sub.names:
                    local[alias.asname or alias.name] = f"{sub.module}.{alias.name}"
            elif (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and sub.func.attr in {"getfixturevalue", "usefixtures"}
            ):
                asked += [a.value for a in sub.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        fixture = _is_fixture(node)
        call = next((d for d in node.decorator_list if isinstance(d, ast.Call)), None) if fixture else None
        fixtures: tuple[str, ...] = ()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (node.name.startswith("test") or fixture):
            fixtures = tuple(dict.fromkeys([*_arguments(node), *asked]))
        return cls(tuple(names), local, fixtures, call)


@dataclass
class Module:
    """One parsed file: its imports, its module-level definitions and assignments."""

    path: Path
    name: str
    imports: dict[str, str] = field(default_factory=dict)
    defs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = field(default_factory=dict)
    assigns: dict[str, ast.expr] = field(default_factory=dict)
    uses: dict[str, Uses] = field(default_factory=dict, repr=False)
    chains: dict[tuple[object, ...], list[str] | None] = field(default_factory=dict, repr=False)
    """What :class:`Reach` found from each definition, per rule and fixture scope (every test file
    follows the same support helpers: found once)."""

    @classmethod
    def parse(cls, path: Path, source: str | None = None) -> Module:
        text = path.read_text(encoding="utf-8") if source is None else source
        tree = ast.parse(text, filename=str(path))
        module = cls(path, ".".join(path.relative_to(ROOT).with_suffix("").parts))
        for node in tree.body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    module.imports[bound] = alias.name if alias.asname else bound
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                module.defs[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        module.assigns[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                module.assigns[node.target.id] = node.value
        return module

    def uses_of(self, name: str) -> Uses:
        if name not in self.uses:
            self.uses[name] = Uses.of(self.defs[name])
        return self.uses[name]

    def resolve(self, dotted: str, local: dict[str, str]) -> str:
        """``dotted`` with its first name replaced by what it was imported as (``local``: imports inside
        the function being followed), or by this module's own name for its definitions."""
        head, _, rest = dotted.partition(".")
        base = local.get(head) or self.imports.get(head)
        if base is None:
            if head not in self.defs:
                return dotted
            base = f"{self.name}.{head}"
        return f"{base}.{rest}" if rest else base

    def marks(self, node: ast.AST, markers: frozenset[str]) -> bool:
        """One of ``markers`` in ``node`` or in a module-level constant it names (``params=STORAGES``)."""
        if _mentions(node, markers):
            return True
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        return any(_mentions(self.assigns.get(name), markers) for name in names)

    def file_marked(self, markers: frozenset[str]) -> bool:
        return "pytestmark" in self.assigns and self.marks(self.assigns["pytestmark"], markers)


@cache
def _module(path: Path) -> Module:
    return Module.parse(path)


@cache
def _module_named(dotted: str) -> tuple[Module, str] | None:
    """The tests/… or testkit/… module holding ``dotted`` (a module path plus a definition name), if any."""
    if not dotted.startswith(("tests.", "testkit.")):
        return None
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        path = ROOT.joinpath(*parts[:cut]).with_suffix(".py")
        if path.is_file():
            return _module(path), parts[cut]
    return None


def _conftests(test_file: Path) -> list[Module]:
    """The conftest modules that supply fixtures to ``test_file``, nearest first."""
    found = []
    folder = test_file.parent
    while folder.is_relative_to(TESTS):
        if (folder / "conftest.py").is_file():
            found.append(_module(folder / "conftest.py"))
        folder = folder.parent
    return found


@dataclass
class Reach:
    """Follows names from a test down to one of ``rule.roots``; the chain found names the path."""

    rule: Rule
    fixture_modules: list[Module]
    seen: set[tuple[str, str]] = field(default_factory=set)

    def definition(self, module: Module, name: str) -> list[str] | None:
        """The chain from ``module``'s definition ``name`` to a root, or None."""
        key = (self.rule, name, tuple(m.name for m in self.fixture_modules))
        if key not in module.chains:
            if (module.name, name) in self.seen:
                return None  # a cycle: the first visit follows it
            self.seen.add((module.name, name))
            module.chains[key] = self._definition(module, name)
        return module.chains[key]

    def _definition(self, module: Module, name: str) -> list[str] | None:
        uses = module.uses_of(name)
        # a fixture whose params carry the marker (pytest.param(..., marks=...)) covers its own path
        if uses.fixture_call is not None and module.marks(uses.fixture_call, self.rule.markers):
            return None
        for dotted in uses.names:
            chain = self.name(module, dotted, uses.local)
            if chain is not None:
                return [f"{module.name}.{name}", *chain]
        for fixture in uses.fixtures:
            chain = self.fixture(fixture, exclude=(module.name, name))
            if chain is not None:
                return [f"{module.name}.{name}", *chain]
        return None

    def name(self, module: Module, dotted: str, local: dict[str, str]) -> list[str] | None:
        resolved = module.resolve(dotted, local)
        if resolved.startswith(self.rule.roots):
            return [resolved]
        head = dotted.partition(".")[0]
        if head in module.defs and head not in module.imports and head not in local:
            return self.definition(module, head)
        target = _module_named(resolved)
        if target is not None and target[1] in target[0].defs:
            return self.definition(*target)
        return None

    def fixture(self, name: str, exclude: tuple[str, str]) -> list[str] | None:
        for module in self.fixture_modules:
            node = module.defs.get(name)
            if node is not None and (module.name, name) != exclude and _is_fixture(node):
                return self.definition(module, name)
        return None


def unmarked(test_file: Path, rule: Rule = PROCESS, source: str | None = None) -> list[tuple[str, list[str]]]:
    """(test name, chain to a root) for each test of the file that reaches one of ``rule.roots``
    without one of ``rule.markers``; ``source`` stands in for the file's text (the guard's own checks)."""
    module = _module(test_file) if source is None else Module.parse(test_file, source)
    if module.file_marked(rule.markers):
        return []
    found = []
    for name, node in module.defs.items():
        if not name.startswith("test") or not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if any(module.marks(dec, rule.markers) for dec in node.decorator_list):
            continue
        chain = Reach(rule, [module, *_conftests(test_file)]).definition(module, name)
        if chain is not None:
            found.append((name, chain))
    return found


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def _report(unmarked: list[tuple[str, list[str]]]) -> str:
    return "\n".join(f"  {name}: {' -> '.join(chain)}" for name, chain in unmarked)


@pytest.mark.parametrize("path", _test_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_test_that_starts_a_process_carries_a_lane_marker(path: Path) -> None:
    """A test reaching a process start is marked process, servers or slow; one reaching PostgreSQL or
    nats-server, servers or slow."""
    starts_process = unmarked(path, PROCESS)
    assert not starts_process, (
        "these tests start a process but carry no `process`, `servers` or `slow` marker, so they would run in "
        "`make test-fast`: declare `pytestmark = pytest.mark.process` (or mark the tests)\n" + _report(starts_process)
    )
    starts_server = unmarked(path, SERVERS)
    assert not starts_server, (
        "these tests start PostgreSQL or nats-server but carry no `servers` or `slow` marker, so they would run in "
        "`make test`: declare `pytestmark = [pytest.mark.servers, pytest.mark.process]`\n" + _report(starts_server)
    )


PROBE = """
import pytest
from testkit.daemon_proc import start_daemon

async def test_starts_the_daemon(tmp_path):
    await start_daemon(tmp_path, [])

async def test_starts_nothing():
    assert True

@pytest.mark.process
async def test_marked(tmp_path):
    await start_daemon(tmp_path, [])
"""


def test_the_guard_follows_support_helpers_to_the_process_they_start() -> None:
    """Unmarked, the daemon test is flagged through start_daemon; a file-level marker clears it."""
    probe = TESTS / "daemon" / "test_probe.py"
    found = unmarked(probe, PROCESS, PROBE)
    assert [name for name, _ in found] == ["test_starts_the_daemon"]
    assert "testkit.daemon_proc.start_daemon" in found[0][1]
    assert found[0][1][-1] == "asyncio.create_subprocess_exec"
    assert unmarked(probe, PROCESS, PROBE + "\npytestmark = pytest.mark.process\n") == []


STORE = """
import pytest

@pytest.fixture(params=KINDS)
def store(request):
    return request.getfixturevalue("postgres") if request.param == "pg" else None

async def test_stores(store):
    assert store
"""


@pytest.mark.parametrize(
    ("kinds", "process_flagged", "servers_flagged"),
    [
        ("('sqlite', 'pg')", True, True),
        ("('sqlite', pytest.param('pg', marks=pytest.mark.process))", False, True),
        ("('sqlite', pytest.param('pg', marks=[pytest.mark.servers, pytest.mark.process]))", False, False),
    ],
)
def test_the_guard_follows_a_fixture_to_postgresql_unless_its_param_carries_servers(
    kinds: str, process_flagged: bool, servers_flagged: bool
) -> None:
    """The session's ``postgres`` fixture, asked for by name, is PostgreSQL: ``servers``, not only ``process``."""
    probe = TESTS / "alerts" / "test_probe.py"
    source = f"KINDS = {kinds}\n{STORE}"
    as_process, as_server = unmarked(probe, PROCESS, source), unmarked(probe, SERVERS, source)
    assert bool(as_process) is process_flagged and bool(as_server) is servers_flagged
    for found in (as_process, as_server):
        if found:
            assert found[0][1][-2:] == ["tests.conftest.postgres", "testkit.postgres.postgres_server"]
