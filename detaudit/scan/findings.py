"""Findings: each draw of the tree, the processes that run it, and its verdict.

Three verdicts (docs/scan-rng.md, "Verdicts"), each with a one-line reason in ``note``:

- **error** (exit 1): a pipeline process runs the draw without seeding its RNG family first, and
  no call in that process that the scan could not resolve could have seeded it; or the draw is
  wrong in any process (DA202, DA302, DA303).
- **unproven** (exit 0 unless ``--fail-on unproven``, or new against a baseline): the scan cannot
  tell: no entry point is seen to run the draw while a pipeline process loads its module and code
  other than tests names its function (fail closed, ``unknown_process`` "loaded"), only test
  scripts run pipeline code, or the process's seeding rests on a call the scan could not resolve.
- **warning**: every process that runs it seeds the family, its own function seeds right before
  it, its value is shown to reach only a port, a sleep, a log line or a name, only tests run it
  (unless ``tests_as_pipeline``), or nothing outside tests can run it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from detaudit.scan.analysis import Program, display_name
from detaudit.scan.evidence import Naming, loaded_modules
from detaudit.scan.modes import Modes
from detaudit.scan.processes import Process, entry_guards, switched_off
from detaudit.scan.rules import FAMILY
from detaudit.scan.schema import MAIN_BLOCK, MODULE_BODY, DrawFacts

ERROR, UNPROVEN, WARNING = "error", "unproven", "warning"
# Verdicts from the mildest; --fail-on names the lowest that makes the exit code 1.
VERDICTS = (WARNING, UNPROVEN, ERROR)
VERDICT_RANK = {v: i + 1 for i, v in enumerate(VERDICTS)}

# reached_only_when is an intersection over processes: over more than this many tests it is left
# empty (an under-statement, which the field allows) rather than computed for each.
MAX_GUARD_PROCESSES = 16


@dataclass
class Finding:
    path: str
    line: int
    col: int
    rule: str
    severity: str
    message: str
    code: str
    function: str
    guards: list[str]
    processes: list[dict[str, Any]]
    note: str = ""
    end_line: int = 0
    via: list[str] = field(default_factory=list)
    # `if` conditions at call sites on every path from the process's entry to the draw
    reached_only_when: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "line": self.line, "col": self.col, "rule": self.rule, "severity": self.severity,
            "message": self.message, "code": self.code, "function": self.function, "guards": self.guards,
            "processes": self.processes, "note": self.note, "via": self.via,
            "reached_only_when": self.reached_only_when,
        }


class Unreached:
    """For a draw no pipeline process is seen to run: why it is at most a warning, or '' (an error).
    See evidence.py; with ``unknown_process`` "error" or "warning" the answer is that, always, and
    an error without ``naming`` (the scan does not hold whole projects)."""

    def __init__(self, program: Program, processes: list[Process], unknown_process: str,
                 naming: Naming | None, imported: dict[str, list[str]], tests_as_pipeline: bool = False) -> None:
        self.program = program
        self.pipeline = [p for p in processes if tests_as_pipeline or not p.is_test]
        self.unknown_process = unknown_process
        self.naming = naming
        self.imported = imported
        self._loaded: set[str] | None = None
        self._dispatched = False

    def severity(self, function: str) -> tuple[str, str]:
        """(verdict, why it is a warning: '' for unproven, or when unknown_process is "error" or "warning")."""
        if self.unknown_process != UNKNOWN_LOADED:
            return self.unknown_process, ""
        if self.naming is None:  # not a whole project: what calls the code may lie outside the scan
            return UNPROVEN, ""
        program = self.program
        module = program.module_of.get(function, "")
        if self._loaded is None:
            running = {program.module_of[f] for p in self.pipeline for f in p.reach if f in program.module_of}
            self._loaded = loaded_modules(program, running, self.imported)
        if module not in self._loaded and not self._dispatched:
            # A loader may take a dotted path from any string or config file of the tree (a path given
            # on a launch script's command line too): the modules those name may be loaded as well.
            self._dispatched = True
            named = {program.module_key(m, None) for m in self.naming.dotted_names()} if self.naming else set()
            self._loaded = loaded_modules(program, self._loaded | {m for m in named if m}, self.imported)
        if module not in self._loaded:
            return "warning", f"no process of the scanned tree imports {display_name(module)}"
        if self.naming is not None and self.naming.unnamed(function):
            return "warning", self.naming.reason(function)
        return UNPROVEN, ""


UNKNOWN_LOADED = "loaded"  # the default of unknown_process


def findings_for(program: Program, processes: list[Process], rel: Callable[[str], str],
                 unknown_process: str = UNKNOWN_LOADED, tests_as_pipeline: bool = False,
                 test_code: Callable[[str], bool] | None = None, naming: Naming | None = None,
                 imported: dict[str, list[str]] | None = None) -> list[Finding]:
    """Every draw's finding; ``test_code(path)``: the file is test code (see entries.is_test_path);
    ``naming`` and ``imported`` (the import lists of files set aside): see ``Unreached``."""
    findings: list[Finding] = []
    unreached = Unreached(program, processes, unknown_process, naming, imported or {}, tests_as_pipeline)
    modes = Modes(program)
    if program.load_mentioning is not None:  # one pass over the skipped files for every generator=None guard
        program.load_mentioning({d["function"].rpartition(".")[2] for f in list(program.modules.values())
                                 for d in f["draws"] if d.get("param")})
    drawing = {d["function"] for f in program.modules.values() for d in f["draws"]}
    running: dict[str, list[Process]] = {}  # function with draws -> the processes that reach it
    for process in processes:
        for function in drawing & process.reach if len(drawing) < len(process.reach) else process.reach & drawing:
            running.setdefault(function, []).append(process)
    for module, facts in sorted(program.modules.items(), key=lambda mf: program.paths[mf[0]]):
        path = rel(program.paths[module])
        suppress = facts["suppress"]
        for draw in facts["draws"]:
            marks = suppress.get(draw["line"]) or suppress.get(draw["end_line"]) or []
            if "*" in marks or draw["rule"] in marks:
                continue
            in_tests = test_code is not None and test_code(program.paths[module])
            finding = _finding(program, running.get(draw["function"], []), draw, path, rel, unreached, modes,
                               tests_as_pipeline, in_tests)
            if finding is not None:
                findings.append(finding)
    findings.sort(key=lambda f: (f.path, f.line, f.col, f.rule))
    return findings


def _not_drawing(program: Program, mine: list[Process], draw: DrawFacts, modes: Modes) -> dict[str, str]:
    """The processes (by name) of ``mine`` that run the draw's function but not the draw, and why:
    their calls pass arguments that switch it off, or every instance of the module whose training
    mode gates it is in eval mode there (modes.py)."""
    off_why: dict[str, str] = {}
    for p in mine:
        if draw.get("switch") is not None and switched_off(program, p, draw):
            off_why[p.name] = f"every call that reaches it passes arguments that make `{' and '.join(draw['guards'])}` false"
        elif draw.get("mode_class"):
            why = modes.eval_only(draw["mode_class"], p)
            if why:
                off_why[p.name] = f"{why}: it draws nothing"
    return off_why


def _finding(program: Program, mine: list[Process], draw: DrawFacts, path: str,
             rel: Callable[[str], str], unreached: Unreached, modes: Modes, tests_as_pipeline: bool,
             in_tests: bool) -> Finding | None:
    """The finding for one draw; ``mine``: the processes that reach its function."""
    family = FAMILY[draw["rule"]]
    function = draw["function"]
    callee = draw.get("callee")
    if callee and program.canonical(callee, root=program.root(function)) in program.functions:
        return None  # a library draw whose callee the tree defines: the tree's own code is scanned
    extra = ""
    if draw.get("param"):
        # generator=None: a guard only where the caller passes a generator.
        sites = program.unguarded_sites(function, draw["param"])
        roots = [p for p in mine if function in p.roots]
        if not sites and not roots:
            return None
        callers = {caller for caller, _ in sites}
        mine = [p for p in mine if p in roots or callers & p.reach]
        shown = []
        located = sorted({(rel(program.paths[program.module_of[c]]), line, c) for c, line in sites})
        for where, line, caller in located:
            names = [p.name for p in mine if caller in p.reach]
            shown.append(f"{where}:{line}" + (f" ({_names(names)})" if names else " (no known process)"))
        extra = (f"{draw['param']}=None by default and not passed at: " + "; ".join(shown)) if shown else \
            f"{draw['param']}=None by default: an entry point itself"
    off_why = _not_drawing(program, mine, draw, modes)
    off = [p for p in mine if p.name in off_why]
    if off:
        mine = [p for p in mine if p not in off]
    pipeline = [p for p in mine if tests_as_pipeline or not p.is_test]
    tests = [p for p in mine if p.is_test and not tests_as_pipeline]
    test_code = not tests_as_pipeline and in_tests
    # Code of a self-test block or stand-alone tool (outside.py) that only such processes run: judged as test code.
    holder = program.module_of.get(function)
    tool_code = bool(tests) and not pipeline and not test_code and all(
        p.outside and program.module_of.get(p.target) == holder for p in tests)
    if tool_code:
        test_code = True
    local = program.seeded_before(draw) if family else set()
    seeded = {p.name: p.seeded_at(function, family) or family in local for p in mine + off} if family else {}
    only_tests = "runs only in tests, which are not the pipeline (--tests-as-pipeline: an error)"
    if tool_code:
        only_tests = (f"runs only outside the pipeline: {'; '.join(sorted({p.outside for p in tests}))} "
                      f"(--tests-as-pipeline: an error)")
    if not family:
        severity, note = ERROR, "nondeterministic in any process"
        if not pipeline and test_code:
            severity, note = WARNING, f"{note}; {only_tests}"
    elif family in local:
        severity = WARNING
        note = (f"its function seeds the {family} RNG before it; reproducible only while the seed and the "
                f"call order stay fixed")
    elif pipeline:
        severity, note = _pipeline_verdict(program, pipeline, seeded, family, rel)
    elif test_code:
        severity = WARNING
        unseeded = [p.name for p in tests if not seeded[p.name]]
        note = (f"{only_tests}; unseeded in {_names(unseeded)}" if unseeded else
                f"{only_tests}; every test that runs it seeds the {family} RNG" if tests else only_tests)
    else:
        where = "module level" if function.endswith(MODULE_BODY) or function in program.classes else "no known process"
        severity, why = unreached.severity(function)
        note = f"{where}: cannot show that a seeded process runs it (no entry point found that runs it)"
        if tests:  # pipeline code that only a test script is seen to run: the pipeline's entry is not known
            note = ("no pipeline process: cannot show that a seeded process runs it (only tests run it; no entry "
                    "point of the pipeline found that runs it)")
        if why:
            note = f"{'no pipeline process (only tests run it)' if tests else where}: {why}"
    if off and not mine:
        severity = WARNING
        note = f"not run in {_names([p.name for p in off])}: {off_why[off[0].name]}"
        mine = off
    if draw.get("impact") and family and severity != WARNING:
        severity = WARNING
        note += f"; at most a warning: {draw['impact']}"
    elif draw.get("impact_by_name") and family and severity == ERROR:
        severity = UNPROVEN  # a value named like a port that flows on: not shown to matter, nor not to
        note += f"; unproven: {draw['impact_by_name']}"
    if extra:
        note = f"{note}; {extra}"
    via = sorted({p.via[function] for p in mine if function in p.via})
    judged = pipeline or tests
    reached_only_when: list[tuple[str, str, int]] = []
    if len(judged) <= MAX_GUARD_PROCESSES:
        for index, process in enumerate(judged):  # conditions that hold in every process that runs it
            guards = entry_guards(program, process, function)
            reached_only_when = guards if index == 0 else [g for g in reached_only_when if g in guards]
    return Finding(
        path=path, line=draw["line"], col=draw["col"], rule=draw["rule"], severity=severity,
        message=draw["message"], code=draw["code"], function=display_name(function.replace(f".{MAIN_BLOCK}", ".__main__")),
        guards=draw["guards"],
        processes=[{"entry": p.name, "kind": p.kind, "target": display_name(p.target),
                    "seeded": seeded.get(p.name) if family else None} for p in mine],
        note=note, end_line=draw["end_line"], via=via,
        reached_only_when=[{"condition": condition, "caller": display_name(caller.replace(f".{MAIN_BLOCK}", ".__main__")),
                            "line": line,
                            "path": rel(program.paths[program.module_of[caller]]) if caller in program.module_of else ""}
                           for condition, caller, line in reached_only_when],
    )


def _pipeline_verdict(program: Program, pipeline: list[Process], seeded: dict[str, bool], family: str,
                      rel: Callable[[str], str]) -> tuple[str, str]:
    """(verdict, why) of a draw that pipeline processes run: a warning when each seeds ``family``
    (naming the seed), else an error naming the unseeded processes, or unproven when each unseeded
    one makes a seed-like call that the scan cannot resolve (naming it)."""
    unseeded = [p for p in pipeline if not seeded[p.name]]
    if not unseeded:
        first = pipeline[0]
        source = program.seed_call(first.roots, family)
        how = f" ({first.name}: {_seed_text(program, source, rel)})" if source else ""
        return WARNING, (f"every process that runs it seeds the {family} RNG{how}; reproducible only while the "
                         f"call order stays fixed")
    open_calls = [program.unresolved_seeding(p.reach, family) for p in unseeded]
    if all(open_calls):
        call = open_calls[0]
        assert call is not None
        return UNPROVEN, (f"{_names([p.name for p in unseeded])} seeds the {family} RNG only if "
                          f"{_seed_text(program, call, rel)} does: a call the scan cannot resolve")
    names = _names([p.name for p, call in zip(unseeded, open_calls, strict=True) if not call])
    return ERROR, f"runs in {names}, which does not seed the {family} RNG before it"


def _seed_text(program: Program, call: tuple[str, str, int], rel: Callable[[str], str]) -> str:
    """``transformers.set_seed() in Strategy.setup, pkg/strategy.py:12``: a call and where it is made."""
    written, function, line = call
    path = program.paths.get(program.module_of.get(function, ""), "")
    return f"{written}() in {_short(program, function)}, {rel(path) if path else '?'}:{line}"


def _short(program: Program, function: str) -> str:
    """``Cls.method`` or ``function`` of a qualified name, as a reader finds it in its file."""
    module = program.module_of.get(function, "")
    local = function[len(module) + 1:] if module and function.startswith(module + ".") else function
    return local.replace(MAIN_BLOCK, "__main__").replace(MODULE_BODY, "<module>")


def _names(names: list[str], shown: int = 5) -> str:
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f" and {len(names) - shown} more"
