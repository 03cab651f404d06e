"""JUnit XML, as CI systems (GitHub, GitLab, Jenkins, Buildkite) read it.

``<testsuites><testsuite name tests failures errors skipped time><testcase classname name
time><failure message>first divergences</failure></testcase>...``. Same cases, same bytes.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from detaudit.ci.cases import Case
from detaudit.fileio import write_atomic


def junit_xml(suite_name: str, cases: list[Case]) -> str:
    failures = sum(1 for c in cases if c.status == "failed")
    errors = sum(1 for c in cases if c.status == "error")
    skipped = sum(1 for c in cases if c.status == "skipped")
    total = sum(c.time_s for c in cases)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": str(errors), "skipped": str(skipped),
              "time": f"{total:.3f}"}
    root = ET.Element("testsuites", {"name": "detaudit", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": suite_name, **counts})
    for case in cases:
        node = ET.SubElement(suite, "testcase", {"classname": case.classname, "name": case.name, "time": f"{case.time_s:.3f}"})
        if case.status in ("failed", "error"):
            child = ET.SubElement(node, "failure" if case.status == "failed" else "error",
                                  {"message": case.message, "type": case.status})
            child.text = case.text or case.message
        elif case.status == "skipped":
            ET.SubElement(node, "skipped", {"message": case.message})
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: str | Path, suite_name: str, cases: list[Case]) -> None:
    """Write (replacing: a report, not a standard) atomically."""
    write_atomic(path, junit_xml(suite_name, cases), overwrite=True)
