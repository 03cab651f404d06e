"""Report renderers for CI systems: JUnit XML (``junit``) and GitHub job summaries (``summary``),
written together by ``reports``; and whether this is a CI run at all (``environment``).

Both reports read the same ``Case`` rows, built from verify, suite and record results by ``cases``.
"""

from detaudit.ci.cases import (
    Case,
    cases_from_record,
    cases_from_suite,
    cases_from_verify,
    error_case,
)
from detaudit.ci.environment import CI_VARIABLES, ci_variable
from detaudit.ci.junit import junit_xml, write_junit, xml_text
from detaudit.ci.reports import write_ci_reports, write_error_reports
from detaudit.ci.summary import append_step_summary, md_code, summary_markdown

__all__ = [
    "CI_VARIABLES",
    "Case",
    "append_step_summary",
    "cases_from_record",
    "cases_from_suite",
    "cases_from_verify",
    "ci_variable",
    "error_case",
    "junit_xml",
    "md_code",
    "summary_markdown",
    "write_ci_reports",
    "write_error_reports",
    "write_junit",
    "xml_text",
]
