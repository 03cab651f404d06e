"""Report renderers for CI systems: JUnit XML (``junit``) and GitHub job summaries (``summary``),
written together by ``reports``; and whether this is a CI run at all (``environment``).

Both reports read the same ``Case`` rows, built from verify, suite and record results by ``cases``
(``ci_report``: a result's rows, verdict and detail).
"""

from typing import TYPE_CHECKING

from detaudit.lazy import lazy_attributes

if TYPE_CHECKING:
    from detaudit.render.ci.cases import (
        Case,
        cases_from_record,
        cases_from_suite,
        cases_from_verify,
        ci_report,
        error_case,
    )
    from detaudit.render.ci.environment import CI_VARIABLES, ci_variable
    from detaudit.render.ci.junit import junit_xml, write_junit, xml_text
    from detaudit.render.ci.reports import claim_ci_paths, emit_ci, write_ci_reports, write_error_reports
    from detaudit.render.ci.summary import append_step_summary, md_code, step_summary_path, summary_markdown

# Imported on first use: a command that writes no CI report does not import the renderers.
__getattr__ = lazy_attributes(__name__, {
    "detaudit.render.ci.cases": ("Case", "cases_from_record", "cases_from_suite", "cases_from_verify", "ci_report",
                                 "error_case"),
    "detaudit.render.ci.environment": ("CI_VARIABLES", "ci_variable"),
    "detaudit.render.ci.junit": ("junit_xml", "write_junit", "xml_text"),
    "detaudit.render.ci.reports": ("claim_ci_paths", "emit_ci", "write_ci_reports", "write_error_reports"),
    "detaudit.render.ci.summary": ("append_step_summary", "md_code", "step_summary_path", "summary_markdown"),
})

__all__ = [
    "CI_VARIABLES",
    "Case",
    "append_step_summary",
    "cases_from_record",
    "cases_from_suite",
    "cases_from_verify",
    "ci_report",
    "ci_variable",
    "claim_ci_paths",
    "emit_ci",
    "error_case",
    "junit_xml",
    "md_code",
    "step_summary_path",
    "summary_markdown",
    "write_ci_reports",
    "write_error_reports",
    "write_junit",
    "xml_text",
]
