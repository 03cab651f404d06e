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
from detaudit.cli.base import OneLineErrors
from detaudit.cli.diff import diff
from detaudit.cli.env import doctor, env_command, plan
from detaudit.cli.health import health
from detaudit.cli.init import init
from detaudit.cli.runs import record, trace, verify
from detaudit.cli.scan import scan_rng
from detaudit.cli.standards import standard_group


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


for command in (init, diff, record, verify, plan, doctor, standard_group, env_command, health, scan_rng, trace):
    main.add_command(command)

__all__ = ["main"]
