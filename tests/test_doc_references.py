"""References from code and docs into docs/ resolve inside the repository.

- every "design.md §N" / "design §N" cites a heading numbered N in docs/design.md, and every
  "contract §N" / "chartgen-contract.md §N" one in docs/chartgen-contract.md (ranges such as
  "§2.9-2.15" and lists such as "§2.9-2.15, §5.9" check each number);
- every "docs/NAME.md" named in README.md or the code exists;
- nothing outside tests/ points at files a clone does not have (working notes, seeds, shared
  reference folders, absolute paths of the machine the project was written on).
"""

from __future__ import annotations

import fnmatch
import os
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
THIS = Path(__file__).resolve()
SKIP_DIRS = {".venv", "node_modules", ".git", "__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist"}

NUM = r"[0-9]+(?:\.[0-9]+)*"
SPAN = rf"{NUM}(?:\s*[-–]\s*{NUM})?"
CITATION = re.compile(
    rf"\b(?P<doc>design(?:\.md)?|(?:chartgen-)?contract(?:\.md)?)\s?§\s?(?P<spans>{SPAN}(?:\s*,\s*§\s?{SPAN})*)"
)
DOC_PATH = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)\b")
FOREIGN = ("ecosystem-notes", "style.md", "../shared", "seeds/")
"""Names of files the repository does not contain (the product documents kept outside it)."""


@cache
def _tree() -> tuple[Path, ...]:
    """Every file under the repository (SKIP_DIRS pruned, this file left out), walked once per run:
    the tests below read the same tree, which they do not change."""
    found = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(names):
            path = Path(top) / name
            if path.resolve() != THIS:
                found.append(path)
    return tuple(found)


def _files(*patterns: str) -> list[Path]:
    """Files under the repository matching any of ``patterns``."""
    return [path for path in _tree() if any(fnmatch.fnmatch(path.name, p) for p in patterns)]


@cache
def _lines(path: Path) -> tuple[str, ...]:
    """A file's lines, read once per run."""
    return tuple(path.read_text(encoding="utf-8").splitlines())


def _numbered_headings(doc: Path) -> set[str]:
    """The numbers of a Markdown file's headings: "## 5. Title" → "5", "### 5.9 Title" → "5.9"."""
    numbers: set[str] = set()
    in_code = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code or not line.startswith("#"):
            continue
        words = line.lstrip("#").split()
        if words and re.fullmatch(rf"{NUM}\.?", words[0]):
            numbers.add(words[0].rstrip("."))
    return numbers


def _target(doc: str) -> Path:
    return DOCS / ("design.md" if doc.startswith("design") else "chartgen-contract.md")


def _citations() -> list[tuple[str, Path, str]]:
    """(where, docs file, section number) for every citation in the repository's .py and .md files."""
    out = []
    for path in _files("*.py", "*.md"):
        for lineno, line in enumerate(_lines(path), 1):
            for m in CITATION.finditer(line):
                for number in re.findall(NUM, m.group("spans")):
                    out.append((f"{path.relative_to(ROOT)}:{lineno}: {m.group(0)}", _target(m.group("doc")), number))
    return out


def test_citation_pattern_reads_ranges_and_lists() -> None:
    text = "see contract §2.9-2.15, §5.9 and design.md §8. Also chartgen-contract.md §10."
    found = [(m.group("doc"), re.findall(NUM, m.group("spans"))) for m in CITATION.finditer(text)]
    assert found == [("contract", ["2.9", "2.15", "5.9"]), ("design.md", ["8"]), ("chartgen-contract.md", ["10"])]


def test_docs_have_numbered_headings() -> None:
    for name in ("design.md", "chartgen-contract.md"):
        assert (DOCS / name).is_file(), f"docs/{name} is missing"
        assert _numbered_headings(DOCS / name), f"docs/{name} has no numbered headings"


def test_every_cited_section_exists() -> None:
    citations = _citations()
    assert citations, "no design/contract citations found: the pattern or the file walk is broken"
    headings = {doc: _numbered_headings(doc) for doc in {t for _, t, _ in citations}}
    missing = [
        f"{where} → no heading {number} in docs/{doc.name}"
        for where, doc, number in citations
        if number not in headings[doc]
    ]
    assert not missing, "citations of sections that do not exist:\n" + "\n".join(missing)


def test_every_named_docs_file_exists() -> None:
    sources = [ROOT / "README.md", *_files("*.py", "*.md")]
    missing = []
    for path in dict.fromkeys(sources):
        for lineno, line in enumerate(_lines(path), 1):
            for name in DOC_PATH.findall(line):
                if not (DOCS / name).is_file():
                    missing.append(f"{path.relative_to(ROOT)}:{lineno}: docs/{name}")
    assert not missing, "references to docs/ files that do not exist:\n" + "\n".join(missing)


def test_nothing_points_outside_the_repository() -> None:
    checked = [
        p
        for p in _files("*.py", "*.md", "*.toml", "Makefile", "*.service", "run")
        if p.relative_to(ROOT).parts[0] != "tests"
    ]
    offenders = []
    for path in checked:
        for lineno, line in enumerate(_lines(path), 1):
            hits = [word for word in FOREIGN if word in line]
            if hits:
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {hits}: {line.strip()[:160]}")
    assert not offenders, "references to files a clone of the repository does not have:\n" + "\n".join(offenders)


TOP_DIRS = ("config", "daemon", "engine", "alerts", "brokers", "mcp_bridge", "dashboard", "cluster", "tests", "bench")
TOP_DIRS += ("deploy", "systemd", "docs")
REPO_PATH = re.compile(rf"(?<![\w/.-])((?:{'|'.join(TOP_DIRS)})/[A-Za-z0-9_./*<>{{}},-]*)")
GENERATED = {"bench/results/latest.json"}
"""Paths the code names that a run writes (gitignored), not files of the repository."""


def test_every_named_repository_path_exists() -> None:
    """A path such as ``simulator/book.py`` in a docstring, comment or doc names a file or folder
    of the repository that exists (a glob, ``{a,b}`` or ``<placeholder>`` is checked up to where it starts)."""
    missing = []
    for path in _files("*.py", "*.md"):
        for lineno, line in enumerate(_lines(path), 1):
            for m in REPO_PATH.finditer(line):
                named = m.group(1)
                cut = min((named.index(c) for c in "*<{" if c in named), default=None)
                if cut is not None:  # a pattern: its folder must exist
                    named = named[:cut].rsplit("/", 1)[0]
                named = named.rstrip("./-,")
                if named in GENERATED or (ROOT / named).exists() or (ROOT / f"{named}.py").exists():
                    continue
                missing.append(f"{path.relative_to(ROOT)}:{lineno}: {named}")
    assert not missing, "paths to files that do not exist:\n" + "\n".join(missing)
