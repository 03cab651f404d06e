"""How much of the benchmark tree a demand-driven (segment-level) scan-rng would still have to parse.

Issue #15 asks for a cold scan <= 5x `ruff check --select NPY002,S311`. Parsing whole files is
already ~5x ruff on 2 cores, so a faster design must parse less text. This script measures how
much less, before anyone builds it:

1. oracle: one real scan (in this process, 2 workers) records which functions' facts the
   analysis reads (calls, seeds, guards; membership tests excluded), which functions hold draws,
   and which functions call a function whose ``generator=None`` call sites are searched. Their
   source segments (whole top-level functions and methods; module- and class-body statements
   only when that body is read; every import statement) are the least a segment-level design
   must parse with ``ast``, knowing the answer in advance.
2. phase 1 of a sound design: units (top-level functions, methods, module- and class-body
   statements) whose text has a call whose last name part could be a draw, a seed or an entry
   point, a set that is known from the text before the analysis runs.
3. index floors: one pass over the whole tree with the regexes a sound index needs (string
   literals and comments located, so that headers inside strings are told apart; call names; the
   def/class headers alone, which a string-blind index would use).

    PYTHONPATH=$PWD python benchmarks/scan_estimate.py
"""

from __future__ import annotations

import ast
import gc
import re
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from scan_bench import package_dirs  # the same tree as the benchmark (this folder is on sys.path)

REPO = Path(__file__).resolve().parent.parent

# Index regexes. TOKENS locates every string literal (prefixes, triple quotes) and comment, and the
# def/class/import lines: what an index must see to know a header is code and not text.
TOKENS = re.compile(rb'''(?x)
    (?P<string>[rRbBuUfF]{0,2}(?:"""(?:[^"\\]|\\.|"(?!""))*"""|\'\'\'(?:[^'\\]|\\.|'(?!''))*\'\'\'
                              |"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'))
  | (?P<comment>\#[^\n]*)
  | (?P<header>^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+\w+|^[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import\b)
''', re.MULTILINE | re.DOTALL)
CALL_NAMES = re.compile(rb"\b(\w+)\s*\(")
HEADERS = re.compile(rb"^\s*(async\s+)?(def|class)\s+(\w+)", re.MULTILINE)
ENTRY_WORDS = re.compile(rb"worker_init_fn|target\s*=|worker_process_setup_hook|ray\.remote|@remote|__main__")


def parse_with_line_offsets(source: bytes) -> tuple[ast.Module, list[int]] | None:
    """The module's AST and the byte offset of each line's start (None: not Python this interpreter parses)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    offsets = [0]
    for line in source.split(b"\n"):
        offsets.append(offsets[-1] + len(line) + 1)
    return tree, offsets


class _ReadLog(dict):
    """Program.functions that records whose facts are read (get / []), not mere membership."""

    read: ClassVar[set[str]] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        _ReadLog.read.add(key)
        return dict.get(self, key, default)

    def __getitem__(self, key: Any) -> Any:
        _ReadLog.read.add(key)
        return dict.__getitem__(self, key)


def needed_functions(dirs: list[Path]) -> tuple[dict[str, str], set[str], dict[str, str]]:
    """(module -> path of every module the analysis loaded, functions whose facts matter, their kind)."""
    from detaudit.scan import ScanConfig, analysis, scan, scanner

    programs: list[analysis.Program] = []
    shorts: set[str] = set()

    class Recording(analysis.Program):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            programs.append(self)
            object.__setattr__(self, "functions", _ReadLog())
            super().__init__(*args, **kwargs)

        def __setattr__(self, name: str, value: Any) -> None:
            if name != "functions" or "functions" not in self.__dict__:  # keep the recording dict
                object.__setattr__(self, name, value)

        def callers(self, function: str) -> list[tuple[str, tuple[Any, ...]]]:
            shorts.add(function.rpartition(".")[2])
            return super().callers(function)

    real = scanner.Program
    scanner.Program = Recording  # type: ignore[misc]
    try:
        started = time.perf_counter()
        result = scan(list(dirs), ScanConfig.load(), use_cache=False, jobs=2)
        print(f"scan (2 workers, in process): {time.perf_counter() - started:.2f} s, {len(result.findings)} findings")
    finally:
        scanner.Program = real  # type: ignore[misc]
    program = programs[0]
    functions = dict(program.functions)
    kind: dict[str, str] = {}
    for facts in program.modules.values():
        for draw in facts["draws"]:
            kind[draw["function"]] = "draw"
    for name, info in functions.items():
        if name not in kind and any(c.rpartition(".")[2] in shorts for c in info["calls"]):
            kind[name] = "caller"
    for name in _ReadLog.read & functions.keys():
        kind.setdefault(name, "reached")
    print(f"modules loaded {len(program.modules)}; functions {len(functions):,}; facts read {len(_ReadLog.read & functions.keys()):,};"
          f" with draws {sum(k == 'draw' for k in kind.values()):,}; callers searched for generator=None"
          f" ({len(shorts)} names) {sum(k == 'caller' for k in kind.values()):,}")
    return program.paths, set(kind), kind


def _union(spans: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


class _Unit:
    """One module being cut into segments: its needed local qualnames, line offsets, and the spans found."""

    def __init__(self, module: str, quals: set[str], offsets: list[int], kind: dict[str, str],
                 spans: list[tuple[int, int, str]]) -> None:
        self.module, self.quals, self.offsets, self.kind, self.spans = module, quals, offsets, kind, spans

    def span(self, node: ast.stmt) -> tuple[int, int]:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return self.offsets[start - 1], self.offsets[node.end_lineno or node.lineno]


def _segments(stmts: list[ast.stmt], prefix: str, body_read: bool, unit: _Unit) -> None:
    """Add to ``unit.spans`` the needed functions (whole), imports, and the statements of bodies the analysis reads
    (module body, also `if __name__ == "__main__"`; class bodies)."""
    for stmt in stmts:
        if isinstance(stmt, ast.ClassDef):
            _segments(stmt.body, f"{prefix}{stmt.name}.", f"{prefix}{stmt.name}" in unit.quals, unit)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            qual = f"{prefix}{stmt.name}"
            if qual in unit.quals:
                unit.spans.append((*unit.span(stmt), unit.kind[f"{unit.module}.{qual}"]))
            else:
                _segments(stmt.body, f"{qual}.", False, unit)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            unit.spans.append((*unit.span(stmt), "import"))
        elif body_read:
            unit.spans.append((*unit.span(stmt), "body"))
        else:  # a compound statement may hold defs and imports
            for field in ("body", "orelse", "finalbody"):
                _segments(getattr(stmt, field, None) or [], prefix, False, unit)
            for handler in getattr(stmt, "handlers", None) or []:
                _segments(handler.body, prefix, False, unit)


def oracle(paths: dict[str, str], needed: set[str], kind: dict[str, str]) -> None:
    by_module: dict[str, set[str]] = {}
    for name in needed:
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:i])
            if module in paths:
                by_module.setdefault(module, set()).add(name[len(module) + 1:])
                break
    spans_by_kind: dict[str, int] = {}
    total = 0
    texts: list[bytes] = []
    wholes: list[bytes] = []
    for module, path in paths.items():
        source = Path(path).read_bytes()
        wholes.append(source)
        parsed = parse_with_line_offsets(source)
        if parsed is None:
            continue
        tree, offsets = parsed
        spans: list[tuple[int, int, str]] = []
        quals = by_module.get(module, set())
        # <main>: the statements of `if __name__ == "__main__"`, which are module-body statements
        _segments(tree.body, "", "<module>" in quals or "<main>" in quals, _Unit(module, quals, offsets, kind, spans))
        for label in {s[2] for s in spans}:
            spans_by_kind[label] = spans_by_kind.get(label, 0) + _union([(a, b) for a, b, k in spans if k == label])
        total += _union([(a, b) for a, b, _ in spans])
        end = -1
        for start, stop, _ in sorted(spans):
            if start >= end:  # an indented segment parses as the body of `if 1:` (same lines, same columns)
                text = source[start:stop]
                texts.append(b"if 1:\n" + text if text[:1] in (b" ", b"\t") else text)
                end = stop
    size = sum(map(len, wholes))
    print(f"oracle: {total / 1e6:.1f} MB of the loaded modules' {size / 1e6:.1f} MB must be parsed"
          f" ({', '.join(f'{k} {v / 1e6:.1f} MB' for k, v in sorted(spans_by_kind.items()))}; categories overlap)")
    started = time.perf_counter()
    failed = 0
    for text in texts:
        try:
            ast.parse(text)
        except SyntaxError:
            failed += 1
    segments = time.perf_counter() - started
    started = time.perf_counter()
    for source in wholes:
        try:
            ast.parse(source)
        except SyntaxError:
            pass
    print(f"ast.parse, one core: the {len(texts):,} oracle segments {segments:.2f} s ({failed} failed);"
          f" the same modules whole {time.perf_counter() - started:.2f} s")


def phase_one(sources: list[bytes]) -> None:
    from detaudit.scan.entries import CALL_NAMES
    from detaudit.scan.rules import LAST_NAMES

    names = sorted(LAST_NAMES | CALL_NAMES | {"Process"})  # what a rule, a seed or an entry call ends in
    calls = re.compile(rb"\b(?:" + b"|".join(n.encode() for n in names) + rb")\s*\(")
    total = needed = units = 0
    for source in sources:
        total += len(source)
        parsed = parse_with_line_offsets(source)
        if parsed is None:
            continue
        tree, offsets = parsed
        stack = list(tree.body)
        while stack:
            stmt = stack.pop()
            if isinstance(stmt, ast.ClassDef):
                stack.extend(stmt.body)
                continue
            units += 1
            start = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
            text = source[offsets[start - 1]:offsets[stmt.end_lineno or stmt.lineno]]
            if calls.search(text) or ENTRY_WORDS.search(text):
                needed += len(text)
    print(f"phase 1 of a sound design (units whose text calls a draw, seed or entry name): {needed / 1e6:.1f} MB"
          f" of {total / 1e6:.1f} MB ({needed / total:.1%}; {units:,} units)")


def index_floors(sources: list[bytes]) -> None:
    for label, pattern, finder in (
            ("strings, comments and headers located (sound)", TOKENS, "iter"),
            ("call names", CALL_NAMES, "all"),
            ("def/class headers only (blind to strings)", HEADERS, "all")):
        started = time.perf_counter()
        hits = 0
        for source in sources:
            if finder == "iter":
                for _ in pattern.finditer(source):
                    hits += 1
            else:
                hits += len(pattern.findall(source))
        print(f"index pass, one core, {label}: {time.perf_counter() - started:.2f} s ({hits:,} hits)")


def main() -> None:
    sys.path.insert(0, str(REPO))
    gc.disable()  # as the scanner runs
    dirs = package_dirs()
    sources = [p.read_bytes() for d in dirs for p in sorted(d.rglob("*.py"))]
    print(f"tree: {len(sources)} files, {sum(map(len, sources)) / 1e6:.1f} MB")
    paths, needed, kind = needed_functions(dirs)
    oracle(paths, needed, kind)
    phase_one(sources)
    index_floors(sources)


if __name__ == "__main__":
    main()
