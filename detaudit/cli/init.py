"""``detaudit init -- COMMAND...``: write a card for one's own training job, beside its script."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import click

from detaudit.cli.base import handle_errors

CARD_FILE = "detaudit.toml"


@click.command("init", context_settings={"ignore_unknown_options": True})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help=f"The card to write (default: {CARD_FILE} beside the script COMMAND runs, else in this folder).")
@click.option("--name", help="The card's name, which names its standards (default: the script's or module's name).")
@click.option("--metrics-env", metavar="VAR",
              help="A variable of your own that the command reads its metrics path from (DETAUDIT_METRICS_JSONL is always set).")
@click.option("--step-key", help="The field holding each line's step, for lines that do not say (step_key).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=3600, show_default=True,
              help="Seconds one run may take.")
@click.option("--force", is_flag=True, help="Replace an existing card.")
@handle_errors
def init(command: tuple[str, ...], out: Path | None, name: str | None, metrics_env: str | None,
         step_key: str | None, timeout_s: float, force: bool) -> None:
    """Write a card (a TOML file saying how to run your training job) beside its script.

    COMMAND (after --) is the job as you run it here, short: a few steps are enough. It must
    write its metrics as JSON lines (one object per step, e.g. {"step": 3, "loss": 0.25}) to the
    file named by $DETAUDIT_METRICS_JSONL, or to {metrics} where the command names it. Runs start
    in the folder you run init from (the card's `cwd`); their outputs go to their own run dirs.
    Then `detaudit record CARD` writes the standard from runs that agree, and `detaudit verify
    CARD` checks one run against it, exactly.

    \b
    Examples:
      detaudit init -- python train.py --steps 20
      detaudit init --name tiny -- python -m mypkg.train --steps 20 --metrics-out {metrics}
    """
    from detaudit.data.card import load_card
    from detaudit.errors import InputError, UsageError
    from detaudit.fileio import write_atomic
    from detaudit.runner_class import check_plain_name

    words = list(command)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise click.UsageError("give the command after --, e.g. detaudit init -- python train.py")
    here = Path.cwd()
    script = _script(words, here)
    card_path = out if out is not None else (script.parent if script is not None else here) / CARD_FILE
    card_path = card_path if card_path.is_absolute() else here / card_path
    name = name or _default_name(words, script)
    check_plain_name(name, "--name")
    if card_path.exists() and not force:
        raise UsageError("exists; pass --force to replace it (or --out another file)", card_path)
    _check_card_path(card_path, words, here, force)
    cwd = os.path.relpath(here, card_path.parent.resolve())
    lines = [
        "# A detaudit card: how to run this job, and where its standards live (detaudit init wrote it).",
        "# `detaudit record CARD` runs it N times in fresh processes and writes a standard only if all agree;",
        "# `detaudit verify CARD` (in CI) runs it once and compares every metric exactly.",
        f"name = {_toml(name)}",
        "command = [" + ", ".join(_toml(w) for w in words) + "]",
        *([f"cwd = {_toml(cwd)}                      # runs start here (from the card's folder)"] if cwd != "." else []),
        f"timeout_s = {timeout_s:g}",
        'runner = "auto"                  # the runner class is detected: CPU model and torch ISA, or GPU model and count',
        '# standards_dir = "standards"    # where standards go, from the project root (pyproject.toml or .git)',
        *([f"metrics_env = {_toml(metrics_env)}"] if metrics_env else []),
        *([f"step_key = {_toml(step_key)}"] if step_key else []),
        "",
        "[env]                            # set in every run's processes before they start (the doctor checks these)",
        'PYTHONHASHSEED = "0"             # str hashing (set order, dict of str keys) the same in every run',
        'CUBLAS_WORKSPACE_CONFIG = ":4096:8"  # deterministic cuBLAS on GPU (ignored on CPU)',
    ]
    text = "\n".join(lines) + "\n"
    with tempfile.TemporaryDirectory(prefix="detaudit-init-") as tmp:  # a card, checked before it is written
        (Path(tmp) / card_path.name).write_text(text, encoding="utf-8")
        try:
            load_card(Path(tmp) / card_path.name)
        except InputError as exc:
            raise InputError(card_path, exc.message, exc.line) from None
    write_atomic(card_path, text, overwrite=force, replace_flag="--force")
    shown = _shown(card_path, here)
    click.echo(f"[detaudit] wrote {shown}: card {name!r} runs `{' '.join(words)}`")
    click.echo("next:")
    click.echo(f"  detaudit record {shown} --runs 3     # 3 fresh runs; the standard is written only if they agree")
    click.echo(f"  detaudit verify {shown}              # in CI: one run against the standard, exactly")
    variable = f"${metrics_env} or $DETAUDIT_METRICS_JSONL" if metrics_env else "$DETAUDIT_METRICS_JSONL"
    click.echo(f"the command must write one JSON object per step to the file in {variable}, "
               'e.g. {"step": 3, "loss": 0.25}')


def _check_card_path(card_path: Path, words: list[str], here: Path, force: bool) -> None:
    """The card is never written over a file its command names (the script, a config), a
    device, a FIFO or a folder (``OutputRefused``), even with --force."""
    from detaudit.fileio import OutputPaths

    paths = OutputPaths()
    for word in words:
        named = Path(word) if Path(word).is_absolute() else here / word
        if word and named.exists():
            paths.reads(named, "a file the command names")
    paths.writes(card_path, "the card (--out)", replace_flag="--force", overwrite=force)
    paths.check()


def _script(words: list[str], here: Path) -> Path | None:
    """The script the command runs (the first argument ending in .py that exists), else None."""
    for word in words:
        if word.endswith(".py"):
            path = Path(word)
            path = path if path.is_absolute() else here / path
            if path.is_file():
                return path.resolve()
    return None


def _default_name(words: list[str], script: Path | None) -> str:
    if script is not None:
        stem = script.stem
    elif "-m" in words[:-1]:
        stem = words[words.index("-m") + 1].rsplit(".", 1)[-1]
    else:
        stem = Path(words[0]).name
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._") or "job"


def _toml(text: str) -> str:
    """A TOML basic string."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if c.isprintable() else f"\\U{ord(c):08x}" for c in escaped)
    return f'"{escaped}"'


def _shown(path: Path, here: Path) -> str:
    try:
        return path.resolve().relative_to(here.resolve()).as_posix()
    except ValueError:
        return str(path)
