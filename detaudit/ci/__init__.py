"""Report renderers for CI systems: JUnit XML (``junit``) and GitHub job summaries (``summary``).

Both read the same ``Case`` rows, built from verify, suite and record results by ``cases``.
"""

from detaudit.ci.cases import (
    Case,
    cases_from_record,
    cases_from_suite,
    cases_from_verify,
)
from detaudit.ci.junit import junit_xml, write_junit
from detaudit.ci.summary import append_step_summary, summary_markdown

__all__ = [
    "Case",
    "append_step_summary",
    "cases_from_record",
    "cases_from_suite",
    "cases_from_verify",
    "junit_xml",
    "summary_markdown",
    "write_junit",
]
