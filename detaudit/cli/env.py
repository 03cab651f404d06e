"""``detaudit env``, ``doctor`` and ``plan``: the environment, the determinism preflight, CI planning."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import click

from detaudit.cli.base import EXIT_FAIL, EXIT_OK, card_or_demo, exit_with, handle_errors
from detaudit.cli.options import FiniteFloatRange
from detaudit.render.console import console


@click.command("env")
@click.argument("card", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--diff", "standard", type=click.Path(dir_okay=False, path_type=Path), metavar="STANDARD",
              help="List every field and package version that differs from STANDARD's environment (bit-relevant first).")
@click.option("--json", "as_json", is_flag=True, help="Print the probe and the runner class as one JSON object.")
@handle_errors
def env_command(card: Path | None, standard: Path | None, as_json: bool) -> None:
    """Show the runner class and the environment a run of CARD would record.

    The probe runs in the Python the card's command starts, with the card's environment,
    exactly as record and verify do. Without CARD: the bundled demo recipe, where detaudit's
    repository and its recipe extra are installed (else an error). --diff STANDARD lists what
    differs from the environment the standard was recorded in: the packages that can change
    bits (torch, CUDA/cuDNN, numpy, the card's own imports) first.

    \b
    Examples:
      detaudit env train/detaudit.toml
      detaudit env train/detaudit.toml --json
      detaudit env train/detaudit.toml --diff standards/train.cpu-intel-6.207-avx512.json
    """
    from detaudit.render.environment import (
        environment_diff_document,
        environment_json,
        print_environment,
        print_environment_diff,
    )
    from detaudit.render.jsonout import dump_json
    from detaudit.run.plan import environment_for, resolve_runner

    loaded = card_or_demo(card)
    if standard is not None:
        from detaudit.standards.formats import load_any

        recorded = load_any(standard)  # before the probe: a bad file is one line, at once
    info = environment_for(loaded)
    cls = resolve_runner(loaded, info)
    if standard is None:
        if as_json:
            click.echo(environment_json(cls, info))
        else:
            print_environment(cls, info, console())
        return
    from detaudit.env.imports import card_imports
    from detaudit.env.provenance import bit_packages, package_differences, provenance_differences

    packages = package_differences(recorded.runner, info)
    first, rest = bit_packages(packages, card_imports(loaded))
    doc = environment_diff_document(str(standard), cls, recorded.runner_class,
                                    provenance_differences(recorded.runner, info) if recorded.runner else [], first, rest)
    if as_json:
        click.echo(dump_json(doc))
    else:
        print_environment_diff(doc, console())


@click.command()
@click.argument("card", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--seed", default=1234, show_default=True, type=int, help="Seed the probe expects each process to be seeded with.")
@click.option("--no-ray", is_flag=True, help="Skip the Ray worker probe.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--trace", "trace_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also check a run's trace (runN/trace, or a saved trace): fail when samples of one step got the same seed.")
@handle_errors
def doctor(card: Path | None, seed: int, no_ray: bool, as_json: bool, trace_dir: Path | None) -> None:
    """Determinism preflight for each process of CARD's run, Ray workers included.

    Checks deterministic algorithms, CUBLAS_WORKSPACE_CONFIG, cuDNN flags, TF32, NCCL_ALGO,
    PYTHONHASHSEED, the allowed SDPA backends and per-process seeds, in the process as the
    card's environment starts it, in the driver after determinism.enable(seed), and in a Ray
    worker started through determinism.ray_runtime_env(seed). Exit 0 all pass, 1 any fails.

    \b
    Examples:
      detaudit doctor recipes/sd3_pickscore_nft.toml
      detaudit doctor recipes/sd3_pickscore_nft.toml --no-ray --json
      detaudit doctor recipes/sd3_pickscore_nft.toml --no-ray --trace runs/run1/trace
    """
    from detaudit.env.doctor import run_doctor
    from detaudit.render.environment import print_doctor
    from detaudit.render.jsonout import dump_json

    rows = run_doctor(card_or_demo(card), seed=seed, ray=not no_ray)
    if trace_dir is not None:
        from detaudit.flows.doctor_trace import seed_rows

        rows += seed_rows(trace_dir)
    if as_json:
        click.echo(dump_json([asdict(r) for r in rows]))
    else:
        print_doctor(rows, console())
    exit_with(all(r.ok for r in rows))


@click.command("plan")
@click.option("--suite", metavar="NAME", help="Only the cards of this suite (default: every card).")
@click.option("--cards", type=click.Path(file_okay=False, path_type=Path), default=Path("recipes"), show_default=True,
              help="Folder of cards (*.toml).")
@click.option("--budget", type=FiniteFloatRange(min=0), metavar="SECONDS",
              help="Exit 1 when the suite's total est_time exceeds SECONDS (or a card has no est_time).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@handle_errors
def plan(suite: str | None, cards: Path, budget: float | None, as_json: bool) -> None:
    """List cards with est_time, GPUs and the suite total; check it against a CI time budget.

    Exit 0 within the budget (or without one), 1 over it, 2 on bad input.

    \b
    Examples:
      detaudit plan --suite cpu --budget 3000         # CI job of 50 minutes
      detaudit plan --cards recipes --json
    """
    from detaudit.flows.suite import plan_suite
    from detaudit.render.jsonout import dump_json
    from detaudit.render.suite import plan_document, print_plan

    result = plan_suite(cards, suite, budget)
    if as_json:
        click.echo(dump_json(plan_document(result)))
    else:
        print_plan(result, console())
    sys.exit(EXIT_FAIL if result.fits is False else EXIT_OK)
