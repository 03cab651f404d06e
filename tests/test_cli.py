"""The command as a whole: help, version, examples, a start-up that never imports torch, hints
that name real flags, output that survives any stdout, strict JSON from every --json, and a
README whose CLI reference lists every option."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import click
import pytest

import detaudit
from detaudit.cli import main
from detaudit.render.jsonout import dump_json

from conftest import REPO, run_cli, strict_json, write_card, write_jsonl

PROBE = """
import sys
import detaudit, detaudit.cli, detaudit.data.compare, detaudit.data.metrics, detaudit.flows.record, detaudit.flows.verify
import detaudit.scan, detaudit.render.scan, detaudit.data.health, detaudit.env.determinism
print(sorted(m for m in ("torch", "numpy", "ray", "diffusers", "transformers") if m in sys.modules))
"""
PACKAGE = Path(detaudit.__file__).resolve().parent


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command and group under ``detaudit``, with its path of names."""
    for name in sorted(group.commands):
        command = group.commands[name]
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def long_options(command: click.Command) -> list[str]:
    return sorted({opt for p in command.params if isinstance(p, click.Option) and not p.hidden
                   for opt in p.opts + p.secondary_opts if opt.startswith("--") and opt != "--help"})


SCAN_START = """
import sys
from detaudit.cli import main
try:
    main(["scan-rng", sys.argv[1]])
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.startswith(("detaudit.cli.", "detaudit.render.ci.", "detaudit.flows", "xml"))))
"""


def test_a_scan_imports_only_its_own_command_and_no_report_it_does_not_write(tmp_path: Path) -> None:
    """Start-up is much of a cold scan of a small tree (issue #37): each command's module is imported
    when it runs, the CI renderers only when a report is asked for."""
    out = subprocess.run([sys.executable, "-c", SCAN_START, str(tmp_path)], capture_output=True, text=True,
                         check=True, env={k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}).stdout
    loaded = ast.literal_eval(out.strip().splitlines()[-1])
    assert loaded == ["detaudit.cli.base", "detaudit.cli.options", "detaudit.cli.scan", "detaudit.render.ci.summary"], loaded
    assert sorted(main.commands) == ["diff", "doctor", "env", "health", "init", "plan", "record", "scan-rng",
                                     "standard", "trace", "verify"]
    assert all(main.commands[name].name == name for name in main.commands)  # type: ignore[union-attr]


COMMAND_START = """
import sys
from detaudit.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m in ("detaudit.data.card", "detaudit.run.spec", "detaudit.run.card_runs",
                                             "detaudit.standards.compile_cache", "rich.live", "rich.table",
                                             "xml.etree.ElementTree", "tempfile") or m.startswith("detaudit.trace.")))
"""


def test_commands_that_read_no_card_import_no_card_runs_traces_or_report_writers(tmp_path: Path) -> None:
    """Most CLI calls in CI are `verify --metrics`, `diff` and `standard show` (the fast set runs
    ~330): they import no card parser, run or trace machinery, live table, XML writer or temp-file
    module (docs/testing.md: ~60 ms of each start-up). The same calls with a card or --junit-xml load them."""
    standard = tmp_path / "std.json"
    standard.write_text(json.dumps({"meta": {}, "metrics": {"loss": [[0, 1.0], [1, 2.0]]}}))
    run = write_jsonl(tmp_path / "run.jsonl", [json.dumps({"step": s, "loss": v}) for s, v in ((0, 1.0), (1, 2.0))])
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}

    def loaded(*args: str) -> list[str]:
        proc = subprocess.run([sys.executable, "-c", COMMAND_START, *args], capture_output=True, text=True,
                              check=True, env=env, cwd=tmp_path)
        return ast.literal_eval(proc.stdout.strip().splitlines()[-1])

    assert loaded("verify", "--metrics", str(run), "--standard", str(standard)) == []
    assert loaded("diff", str(run), str(run)) == []
    assert loaded("standard", "show", str(standard)) == ["rich.table"]  # the one thing it draws
    # the control: a JUnit report loads the XML writer, and writing it a temporary file beside it
    assert loaded("verify", "--metrics", str(run), "--standard", str(standard), "--junit-xml",
                  str(tmp_path / "j.xml")) == ["tempfile", "xml.etree.ElementTree"]


def test_the_package_names_are_there_when_read_and_not_imported_before() -> None:
    """`import detaudit` imports none of its public names' modules; each is there when read, a
    submodule (`determinism`, the seeding API pipelines call) included."""
    code = ("import sys, detaudit; before = 'detaudit.data.compare' in sys.modules or 'detaudit.env.determinism' in "
            "sys.modules; from detaudit import determinism, diff_runs; print(before, determinism.__name__, "
            "diff_runs.__module__, sorted(n for n in detaudit.__all__ if not hasattr(detaudit, n)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "detaudit.env.determinism", "detaudit.data.compare", "[]"], out


def test_tool_imports_no_heavy_dependency() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow
def test_help_lists_every_command() -> None:
    result = run_cli("--help")
    assert result.code == 0
    for command in ("diff", "record", "verify", "scan-rng", "health"):
        assert command in result.out
        assert run_cli(command, "--help").code == 0


def test_no_arguments_prints_the_help_not_an_error_line() -> None:
    for args, listed in (((), "Commands:"), (("standard",), "convert")):
        result = run_cli(*args)
        assert result.code == 2 and "detaudit: error" not in result.text  # click's own behaviour: usage, exit 2
        assert result.text.count("\n") > 5 and "Usage:" in result.text and listed in result.text


@pytest.mark.slow
def test_usage_errors_exit_2() -> None:
    assert run_cli("diff").code == 2
    assert run_cli("record", "--runs", "1").code == 2
    assert run_cli("verify", "--metrics", "x.jsonl").code == 2  # no standard named
    assert run_cli("nope").code == 2


def _examples(command: click.Command, path: tuple[str, ...]) -> list[str]:
    with click.Context(command, info_name=" ".join(("detaudit", *path))) as ctx:
        text = command.get_help(ctx)
    return [line.strip() for line in text.splitlines() if line.strip().startswith("detaudit ")]


def test_every_help_has_an_example_that_parses() -> None:
    missing = []
    for path, command in [((), main), *commands()]:
        examples = _examples(command, path)
        if not examples:
            missing.append(" ".join(("detaudit", *path)))
        for line in examples:
            args = shlex.split(line, comments=True)[1:]
            if "COMMAND" in args:
                continue  # `detaudit COMMAND --help`
            sub: click.Command = main
            while isinstance(sub, click.Group):  # the command the example names, then its options parse
                name, args = args[0], args[1:]
                assert name in sub.commands, line
                sub = sub.commands[name]
            sub.make_context(name, list(args)).close()
    assert not missing, f"--help without an example: {missing}"


# -- every hint names a real flag ------------------------------------------------------------

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# Calls whose text reaches the user as an error or warning (the exception types and reporters).
MESSAGE_CALLS = {"InputError", "UsageError", "BadParameter", "ClickException", "fail", "_fail", "warn", "echo"}


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _strings(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def flags_in_messages() -> dict[str, set[str]]:
    """Each ``--flag`` written in an error, usage or warning message of the package, with where."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if "probes" in path.parts or "site" in path.parts:
            continue  # scripts run inside recipe processes: they print no detaudit message
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                texts = list(_strings(node.exc))
            elif isinstance(node, ast.Call) and _call_name(node) in MESSAGE_CALLS:
                texts = list(_strings(node))
            elif isinstance(node, ast.Call) and any(k.arg == "replace_flag" for k in node.keywords):
                texts = [s for k in node.keywords if k.arg == "replace_flag" for s in _strings(k.value)]
            else:
                continue
            for text in texts:
                for flag in FLAG.findall(text):
                    found.setdefault(flag, set()).add(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def plugin_flags() -> set[str]:
    tree = ast.parse((PACKAGE / "pytest_plugin" / "__init__.py").read_text())
    return {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and _call_name(n) == "addoption"
            and isinstance(n.args[0], ast.Constant)}


def test_every_flag_named_in_a_message_exists() -> None:
    known = {opt for _, command in commands() for opt in long_options(command)} | plugin_flags()
    found = flags_in_messages()
    assert "--overwrite" in found and "--update" in found and "--detaudit-force-update" in found  # the scan sees them
    unknown = {flag: sorted(where) for flag, where in found.items() if flag not in known}
    assert not unknown, f"messages name flags no command has: {unknown}"


# -- output on any stdout -----------------------------------------------------------------------

@pytest.mark.slow
def test_an_ascii_stdout_gets_escapes_not_a_traceback(tmp_path: Path) -> None:
    standard = tmp_path / "std.json"
    standard.write_text(json.dumps({"metrics": {"loss·μ": [[0, 1.0]], "reward—raw": [[0, 2.0]]}}))
    for args in (("standard", "show", str(standard)), ("diff", str(tmp_path / "nö.jsonl"), str(tmp_path / "x.jsonl"))):
        result = run_cli(*args, env={"PYTHONIOENCODING": "ascii"})
        assert "Traceback" not in result.err and "UnicodeEncodeError" not in result.err, result.err
        assert result.code == (0 if args[0] == "standard" else 2), result.text
    shown = run_cli("standard", "show", str(standard), env={"PYTHONIOENCODING": "ascii"})
    assert "loss\\xb7\\u03bc" in shown.out
    missing = run_cli("diff", str(tmp_path / "nö.jsonl"), str(tmp_path / "x.jsonl"), env={"PYTHONIOENCODING": "ascii"})
    assert missing.err.startswith("detaudit: error: ") and missing.err.count("\n") == 1
    assert "nö.jsonl: cannot read metrics file" in missing.err or "n\\xf6.jsonl: cannot read" in missing.err


# -- strict JSON ----------------------------------------------------------------------------------

def test_dump_json_never_writes_a_nan_or_infinity_literal() -> None:
    doc = {"budget_s": float("nan"), "rows": [float("inf"), (1.5, -float("inf"))], "ok": 1.0}
    assert strict_json(dump_json(doc)) == {"budget_s": {"float": "NaN"}, "ok": 1.0,
                                           "rows": [{"float": "Infinity"}, [1.5, {"float": "-Infinity"}]]}


@pytest.mark.parametrize("budget", ["nan", "inf", "-inf", "1e400"])
def test_plan_budget_must_be_a_finite_number(budget: str) -> None:
    result = run_cli("plan", "--cards", str(REPO / "recipes"), "--budget", budget, "--json")
    assert result.code == 2 and f"'{budget}' is not a finite number" in result.err and result.out == ""


@pytest.mark.slow
def test_every_json_output_is_strict(tmp_path: Path) -> None:
    """Each command with --json, run for real on inputs holding NaN and infinity where it reads values."""
    card = write_card(tmp_path / "toy.toml")
    nan_lines = [json.dumps({"step": i, "a": v, "b": 1.0 * i}) for i, v in enumerate([0.5, float("nan"), 1.5, 2.0])]
    inf_lines = [json.dumps({"step": i, "a": v, "b": 1.0 * i}) for i, v in enumerate([0.5, float("inf"), 1.5, 2.0])]
    one, two = write_jsonl(tmp_path / "one.jsonl", nan_lines), write_jsonl(tmp_path / "two.jsonl", inf_lines)
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text('{"metrics": {"a": [[0, 0.5], [1, NaN]]}}')
    new.write_text('{"metrics": {"a": [[0, 0.5], [1, Infinity]]}}')
    trace_dir = tmp_path / "trace"
    runs = {
        ("diff",): ["diff", str(one), str(two)],
        ("health",): ["health", str(one), "--metric", "b", "--window", "1", "--no-png"],
        ("plan",): ["plan", "--cards", str(tmp_path), "--budget", "10"],
        ("env",): ["env", str(card)],
        ("doctor",): ["doctor", str(card), "--no-ray"],
        ("standard", "diff"): ["standard", "diff", str(old), str(new)],
        ("standard", "show"): ["standard", "show", str(old)],
        ("record",): ["record", str(card), "--runs", "2"],
        ("verify",): ["verify", str(card)],
        ("trace",): ["trace", str(card), "--save", str(trace_dir)],
    }
    with_json = {path for path, command in commands() if "--json" in long_options(command)}
    assert with_json == set(runs), "a command with --json this test does not run"
    for path, args in runs.items():
        result = run_cli(*args, "--json")
        assert result.code in (0, 1), (path, result.text)
        assert isinstance(strict_json(result.out), (dict, list)), path


# -- README ---------------------------------------------------------------------------------------

def readme_reference() -> dict[str, str]:
    """README's CLI reference: the text of each ``### `detaudit COMMAND ...` `` subsection."""
    text = (REPO / "README.md").read_text()
    start = text.index("\n## CLI reference")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end != -1 else None]
    parts = re.split(r"\n### `detaudit ([a-z-]+(?: [a-z-]+)?)", section)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_readme_cli_reference_lists_every_option() -> None:
    reference = readme_reference()
    missing = []
    for path, command in commands():
        if isinstance(command, click.Group):
            continue
        name = " ".join(path)
        body = reference.get(name)
        if body is None:
            missing.append(f"detaudit {name}: no subsection")
            continue
        missing += [f"detaudit {name} {opt}" for opt in long_options(command)
                    if not re.search(rf"`{re.escape(opt)}(?![\w-])", body)]
    assert not missing, "README.md's CLI reference lacks:\n" + "\n".join(missing)


def test_convert_onto_an_existing_file_names_its_own_flag(tmp_path: Path) -> None:
    source, dest = tmp_path / "s.json", tmp_path / "d.json"
    source.write_text(json.dumps({"metrics": {"loss": [[0, 1.0]]}}))
    assert run_cli("standard", "convert", str(source), str(dest), "--format", "detaudit").code == 0
    again = run_cli("standard", "convert", str(source), str(dest), "--format", "detaudit")
    assert again.code == 2 and again.err == f"detaudit: error: {dest}: exists; pass --overwrite to replace it\n"
    convert = main.commands["standard"].commands["convert"]  # type: ignore[attr-defined]
    assert "--overwrite" in long_options(convert)
    assert run_cli("standard", "convert", str(source), str(dest), "--format", "detaudit", "--overwrite").code == 0
