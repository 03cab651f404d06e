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
    "Case": "detaudit.render.ci.cases", "cases_from_record": "detaudit.render.ci.cases", "cases_from_suite": "detaudit.render.ci.cases", "cases_from_verify": "detaudit.render.ci.cases", "ci_report": "detaudit.render.ci.cases", "error_case": "detaudit.render.ci.cases",
    "CI_VARIABLES": "detaudit.render.ci.environment", "ci_variable": "detaudit.render.ci.environment",
    "junit_xml": "detaudit.render.ci.junit", "write_junit": "detaudit.render.ci.junit", "xml_text": "detaudit.render.ci.junit",
    "claim_ci_paths": "detaudit.render.ci.reports", "emit_ci": "detaudit.render.ci.reports", "write_ci_reports": "detaudit.render.ci.reports", "write_error_reports": "detaudit.render.ci.reports",
    "append_step_summary": "detaudit.render.ci.summary", "md_code": "detaudit.render.ci.summary", "step_summary_path": "detaudit.render.ci.summary", "summary_markdown": "detaudit.render.ci.summary",
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
