"""scan-rng output: grouped text, JSON, SARIF 2.1.0, GitHub workflow annotations, and the CI cases
(JUnit, step summary). Every format carries each finding's verdict (error, unproven, warning) and
the count of each."""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Console
from rich.text import Text

from detaudit import __version__
from detaudit.render.escapes import one_line
from detaudit.scan.analysis import MAX_CANDIDATES_SHOWN
from detaudit.scan.findings import ERROR, UNPROVEN, VERDICTS, Finding
from detaudit.scan.rules import RULE_BY_CODE, RULE_LIST, RULES, Rule
from detaudit.scan.scanner import ScanResult

MAX_PROCESSES_SHOWN = 6  # in text output; JSON and SARIF carry every process
STYLE = {ERROR: "red", UNPROVEN: "magenta"}  # a warning: yellow
# SARIF has no level between error and warning: an unproven finding is a warning there, with its
# verdict in the result's properties.
SARIF_LEVEL = {ERROR: "error", UNPROVEN: "warning"}


def counts(findings: list[Finding]) -> dict[str, int]:
    """How many findings of each verdict (every verdict named, most severe first)."""
    return {v: sum(f.severity == v for f in findings) for v in reversed(VERDICTS)}


def counts_text(findings: list[Finding]) -> str:
    """``2 errors, 1 unproven, 5 warnings``."""
    n = counts(findings)
    return f"{n[ERROR]} errors, {n[UNPROVEN]} unproven, {n['warning']} warnings"


def _processes_text(f: Finding, shown: int | None = None) -> str:
    """The processes a finding runs in (the first ``shown`` of them), or why none is known."""
    if not f.processes:
        return f.note
    parts = []
    for p in f.processes[:shown]:
        seeded = "" if p["seeded"] is None else (" seeded" if p["seeded"] else " UNSEEDED")
        parts.append(f"{p['entry']}{seeded}")
    more = len(f.processes) - len(parts)
    return "runs in: " + ", ".join(parts) + (f" and {more} more" if more else "")


def _why(f: Finding) -> str:
    """Where a finding runs and why it has its verdict, in one line."""
    text = _processes_text(f, MAX_PROCESSES_SHOWN)
    return f"{text}; {f.note}" if f.processes and f.note else text


def _via_text(via: str) -> str:
    """A dispatch path with at most MAX_CANDIDATES_SHOWN candidates named (text output only)."""
    head, sep, candidates = via.partition(": candidates ")
    names = candidates.split(", ") if sep else []
    if len(names) <= MAX_CANDIDATES_SHOWN:
        return via
    return f"{head}{sep}{', '.join(names[:MAX_CANDIDATES_SHOWN])} and {len(names) - MAX_CANDIDATES_SHOWN} more"


def _reached_text(f: Finding) -> str:
    """'reached only when `a == 1` (the call at pkg/m.py:12 in f)', or ''."""
    parts = [f"`{g['condition']}` (the call at {g['path']}:{g['line']} in {g['caller'].rpartition('.')[2]})"
             for g in f.reached_only_when]
    return "reached only when " + " and ".join(parts) if parts else ""


Styled = tuple[tuple[str, str], ...]  # one line of the text format: (text, rich style) pieces


def text_lines(result: ScanResult) -> list[Styled]:
    """The text format, a line at a time: findings grouped by file, each with its verdict, code,
    processes and why; then skipped files, notes and the counts."""
    lines: list[Styled] = []
    current = None
    for f in result.findings:
        if f.path != current:
            current = f.path
            lines.append(((f.path, "bold"),))
        lines.append(((f"  {f.line}:{f.col} ", ""), (f.severity, STYLE.get(f.severity, "yellow")),
                      (f" {f.rule} {f.message}", "")))
        lines.append(((f"      {f.code}", "dim"),))
        lines.append(((f"      {_processes_text(f, MAX_PROCESSES_SHOWN)}", ""),))
        if f.processes and f.note:
            lines.append(((f"      {f.note}", "dim"),))
        lines.extend(((f"      {_via_text(via)}", "dim"),) for via in f.via)
        lines.extend(((f"      only when `{guard}`", "dim"),) for guard in f.guards)
        if f.reached_only_when:
            lines.append(((f"      {_reached_text(f)}", "dim"),))
    lines.extend(((f"skipped {s.path}: {s.reason}", "yellow"),) for s in result.skipped)
    lines.extend(((f"note: {note}", "yellow"),) for note in result.notes)
    lines.append(((f"{result.files} files ({result.parsed} parsed), {len(result.processes)} processes: "
                   f"{counts_text(result.findings)}, {len(result.skipped)} skipped", ""),))
    return lines


def print_text(result: ScanResult, console: Console) -> None:
    """The text format on ``console``, every piece escaped to one line (``one_line``). Without colour
    (a pipe, a CI log) the lines are written as they are: rich's cost per line made printing a scan
    of torch, diffusers and transformers (20,000 lines) take 6x the whole cached rescan."""
    lines = text_lines(result)
    if console.color_system is None:
        console.file.write("".join("".join(one_line(text) for text, _ in parts) + "\n" for parts in lines))
        return
    console.print(Text("\n").join(Text.assemble(*((one_line(text), style) for text, style in parts))
                                   for parts in lines))


def notices(result: ScanResult) -> list[str]:
    """What the reader must know besides the findings (skipped files, shared module names), one line
    each: the text format prints them; for the others the CLI writes them to stderr."""
    return ([f"detaudit: skipped {s.path}: {s.reason}" for s in result.skipped]
            + [f"detaudit: note: {note}" for note in result.notes])


def _dumps(doc: Any) -> str:
    """``doc`` as indented JSON with sorted keys (orjson: a tenth of json.dumps's time with indent,
    which runs json's pure-Python encoder; a rescan of a large tree spent a third of its time here)."""
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode("utf-8")


def as_json(result: ScanResult) -> str:
    """``{"counts": {"error": n, "unproven": n, "warning": n}, "findings": [...]}``."""
    doc = {"counts": counts(result.findings), "findings": [f.as_dict() for f in result.findings]}
    return _dumps(doc)


def as_sarif(result: ScanResult) -> str:
    rules = sorted({f.rule for f in result.findings} | set(RULES))
    doc: dict[str, Any] = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "detaudit scan-rng",
                "version": __version__,
                "informationUri": "https://github.com/detaudit/detaudit",
                "rules": [_sarif_rule(RULE_BY_CODE[r]) for r in rules],
            }},
            "invocations": [{
                "executionSuccessful": True,
                "toolExecutionNotifications": [{"level": "warning", "message": {"text": f"skipped {s.path}: {s.reason}"}}
                                               for s in result.skipped]
                + [{"level": "note", "message": {"text": note}} for note in result.notes],
            }],
            "properties": {"verdictCounts": counts(result.findings)},
            "results": [{
                "ruleId": f.rule,
                "level": SARIF_LEVEL.get(f.severity, "warning"),
                "message": {"text": f"{f.message}. {_processes_text(f)}" + (f"; {f.note}" if f.processes and f.note else "")
                            + "".join(f"; {via}" for via in f.via)
                            + (f"; {_reached_text(f)}" if f.reached_only_when else "")},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": f.path},
                    "region": {"startLine": f.line, "startColumn": f.col},
                }}],
                "properties": {"verdict": f.severity, "processes": f.processes, "via": f.via, "note": f.note},
            } for f in result.findings],
        }],
    }
    return _dumps(doc)


def _sarif_rule(rule: Rule) -> dict[str, Any]:
    return {"id": rule.code, "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.why},
            "help": {"text": explain(rule.code), "markdown": explain_markdown(rule)},
            "properties": {"rngFamily": rule.family or "any"}}


def explain(code: str) -> str:
    """``scan-rng --explain CODE``: the rule's record as plain text."""
    rule = RULE_BY_CODE[code]
    family = f"the process-global {rule.family} RNG" if rule.family else "none (wrong in any process)"
    return (f"{rule.code}: {rule.summary}\n\nRNG family: {family}\n\nWhy it breaks reproducibility:\n  {rule.why}\n\n"
            f"Fix:\n  {rule.fix}\n\nExample:\n  {rule.example}\n")


def explain_markdown(rule: Rule) -> str:
    return f"**{rule.summary}**\n\n{rule.why}\n\nFix: {rule.fix}\n\nExample: `{rule.example}`"


def rules_table() -> str:
    """The Markdown table of docs/scan-rng.md, from the rule registry."""
    lines = ["| rule | finds | RNG family | example |", "|---|---|---|---|"]
    for rule in RULE_LIST:
        lines.append(f"| {rule.code} | {rule.summary} | {rule.family or 'any process'} | `{rule.example}` |")
    return "\n".join(lines) + "\n"


def as_github(result: ScanResult) -> str:
    def clean(text: str) -> str:  # GitHub's escapes for a message; other control characters made visible
        text = "".join(c if c.isprintable() or c in "\r\n" else c.encode("unicode_escape", "backslashreplace").decode()
                       for c in text)
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(text: str) -> str:  # a property value (a file name): its ':' and ',' would end it
        return clean(text).replace(":", "%3A").replace(",", "%2C")

    lines = []
    for f in result.findings:
        level = "error" if f.severity == ERROR else "warning"
        title = f.rule if f.severity != UNPROVEN else f"{f.rule} (unproven)"
        lines.append(f"::{level} file={prop(f.path)},line={f.line},col={f.col},title={prop(title)}::"
                     f"{clean(f.message + '. ' + _why(f) + ('; ' + _reached_text(f) if f.reached_only_when else ''))}")
    lines.append(f"::notice title=scan-rng::{counts_text(result.findings)}")
    return "\n".join(lines)
