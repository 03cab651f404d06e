"""The ``detaudit`` command: a thin layer over the library.

Each module holds the commands of one job and only parses options, calls a use case
(``detaudit.flows``), renders its result (``detaudit.render``) and exits.

Exit codes, everywhere: 0 success (identical, written, passed, skipped), 1 the audit
failed (series differ, a run failed, a finding reached --fail-on), 2 usage or input errors
(one line on stderr naming the file and line).
"""

from __future__ import annotations

import click

from detaudit import __version__
from detaudit.cli.base import LazyCommands, OneLineErrors

# Each command's module is imported when that command runs (or a help lists it).
COMMANDS = {
    "init": "detaudit.cli.init:init",
    "diff": "detaudit.cli.diff:diff",
    "record": "detaudit.cli.runs:record",
    "verify": "detaudit.cli.runs:verify",
    "trace": "detaudit.cli.runs:trace",
    "plan": "detaudit.cli.env:plan",
    "doctor": "detaudit.cli.env:doctor",
    "env": "detaudit.cli.env:env_command",
    "health": "detaudit.cli.health:health",
    "scan-rng": "detaudit.cli.scan:scan_rng",
    "standard": "detaudit.cli.standards:standard_group",
}


@click.group(cls=OneLineErrors, commands=LazyCommands(COMMANDS),
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="detaudit")
def main() -> None:
    """Audit ML training runs for bitwise determinism, and record and verify e2e standards.

    \b
    Gate your own training job:
      detaudit init -- python train.py --steps 20    # writes a card beside train.py
      detaudit record detaudit.toml --runs 3         # the standard, only if 3 fresh runs agree
      detaudit verify detaudit.toml                  # in CI: one run against it, exactly
      detaudit COMMAND --help                        # each command's options and examples
    """


__all__ = ["main"]
