"""``detaudit env`` and ``detaudit doctor``: the environment a run sees and the determinism preflight."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from detaudit.render.console import PREFIX
from detaudit.render.jsonout import dump_json
from detaudit.runner_class import RunnerClass


def print_doctor(rows: list[Any], console: Console, *, only_failing: bool = False) -> None:
    """The preflight table: per process and check, the value seen, and a fix for each failing row."""
    shown = [r for r in rows if not r.ok] if only_failing else rows
    table = Table(title="detaudit doctor", title_justify="left", header_style="bold")
    for col in ("process", "check", "", "seen", "fix"):
        table.add_column(col, overflow="fold")
    for r in shown:
        table.add_row(escape(r.process), escape(r.check), "[green]ok[/green]" if r.ok else "[red]FAIL[/red]",
                      escape(r.value), escape(r.fix))
    if shown:
        console.print(table)
    failing = sum(1 for r in rows if not r.ok)
    style = "green" if not failing else "red"
    console.print(f"[{style}]{PREFIX} doctor: {len(rows) - failing} of {len(rows)} checks pass"
                  + (f", {failing} fail" if failing else "") + f"[/{style}]")


def environment_json(cls: RunnerClass, info: dict[str, Any]) -> str:
    """``detaudit env --json``: the runner class and the whole probe, keys sorted."""
    return dump_json({"runner_class": cls, "environment": info})


def print_environment(cls: RunnerClass, info: dict[str, Any], console: Console) -> None:
    """``detaudit env``: the runner class, then the fields that change bits, one per line."""
    cpu = info.get("cpu") or {}
    threads = ", ".join(f"{k}={v}" for k, v in sorted((info.get("threads") or {}).items()))
    gpu = info.get("gpu")
    rows = [
        ("runner class", str(cls)),
        ("cpu", f"{cpu.get('vendor', '?')} {cpu.get('model_name', '')} (family {cpu.get('family', '?')}, "
                f"model {cpu.get('model', '?')}, stepping {cpu.get('stepping', '?')})"),
        ("cpu flags", " ".join(cpu.get("flags") or [])),
        ("cpu capability", str(info.get("cpu_capability", "?"))),
        ("threads", threads or "?"),
        ("torch", f"{info.get('torch', 'absent')} "
                  + " ".join(f"{k}={v}" for k, v in sorted((info.get("torch_config") or {}).items()))),
        ("python", f"{info.get('python', '?')} ({(info.get('platform') or {}).get('libc', '?')})"),
        ("gpu", f"{gpu['count']} x {gpu['name']}, driver {info.get('driver')}, CUDA {info.get('cuda')}, "
                f"cuDNN {info.get('cudnn')}, NCCL {info.get('nccl')}" if gpu else "none visible"),
        ("packages", f"{len(info.get('packages') or {})} installed (see --json)"),
    ]
    for key, value in rows:
        console.print(f"{key:>15}: {escape(value)}")



def environment_diff_document(standard: str, cls: RunnerClass, standard_class: Any, fields: list[str],
                              bit_packages: list[str], other_packages: list[str]) -> dict[str, Any]:
    """``detaudit env --diff STANDARD --json``."""
    return {"standard": standard, "runner_class": cls, "standard_runner_class": standard_class,
            "fields": fields, "bit_packages": bit_packages, "other_packages": other_packages}


def print_environment_diff(doc: dict[str, Any], console: Console) -> None:
    """``detaudit env --diff STANDARD``: every field and package that differs from the standard's
    environment, the packages that can change bits (torch, CUDA, numpy, the card's imports) first."""
    console.print(f"{PREFIX} this environment against {escape(doc['standard'])} (runner class here "
                  f"{escape(str(doc['runner_class']))}, standard's {escape(str(doc['standard_runner_class']))})")
    sections = (("fields", doc["fields"]), ("packages that can change bits", doc["bit_packages"]),
                ("other packages", doc["other_packages"]))
    for title, lines in sections:
        console.print(f"{title}: {len(lines) or 'none differ'}")
        for line in lines:
            console.print("  " + escape(line))
