"""JUnit XML, as CI systems (GitHub, GitLab, Jenkins, Buildkite) read it.

``<testsuites name tests failures errors time><testsuite name tests failures errors skipped
time><testcase classname name time><failure message type>first divergences</failure>
</testcase>...``: the shape of the common JUnit schema (Jenkins' junit-10.xsd), which allows
``skipped`` on a ``testsuite`` but not on the root. An approximate pass is a passing case
whose ``<system-out>`` says it passed within tolerance. Same cases, same bytes.

XML 1.0 cannot carry most control characters, not even escaped: each one in a name or
message is written as its Python escape (``\\x1b``), and the names that held one are returned
so that the caller can say so. Names and messages are one line (a newline in a series name is
written ``\\n``), like every report's (``render.escapes``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from detaudit.fileio import write_atomic
from detaudit.render.ci.cases import Case
from detaudit.render.escapes import one_line, visible_lines

# Characters outside XML 1.0's Char production (tab, LF and CR are allowed).
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """``text`` with every character XML 1.0 cannot hold written as its escape (``\\x1b``); its
    newlines and tabs kept (a failure's text has lines)."""
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), visible_lines(text))


def xml_line(text: str) -> str:
    """``text`` as one line XML can carry: a name, a message (``render.escapes.one_line``)."""
    return xml_text(one_line(text))


def names_not_xml_safe(cases: list[Case]) -> list[str]:
    """Names of the cases (and classes) that hold a character XML cannot carry, as written."""
    found = {xml_line(c.name) for c in cases if _NOT_XML.search(c.name)}
    found |= {xml_line(c.classname) for c in cases if _NOT_XML.search(c.classname)}
    return sorted(found)


def junit_xml(suite_name: str, cases: list[Case]) -> str:
    failures = sum(1 for c in cases if c.status == "failed")
    errors = sum(1 for c in cases if c.status == "error")
    skipped = sum(1 for c in cases if c.status == "skipped")
    total = f"{sum(c.time_s for c in cases):.3f}"
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": str(errors)}
    root = ET.Element("testsuites", {"name": "detaudit", **counts, "time": total})
    suite = ET.SubElement(root, "testsuite", {"name": xml_line(suite_name), **counts, "skipped": str(skipped),
                                              "time": total})
    for case in cases:
        node = ET.SubElement(suite, "testcase", {"classname": xml_line(case.classname), "name": xml_line(case.name),
                                                 "time": f"{case.time_s:.3f}"})
        message = xml_line(case.message)
        if case.status in ("failed", "error"):
            child = ET.SubElement(node, "failure" if case.status == "failed" else "error",
                                  {"message": message, "type": case.status})
            child.text = xml_text(case.text) or message
        elif case.status == "skipped":
            ET.SubElement(node, "skipped", {"message": message})
        elif case.approximate:
            ET.SubElement(node, "system-out").text = message or "passed within tolerance (approximate)"
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: str | Path, suite_name: str, cases: list[Case]) -> list[str]:
    """Write (replacing: a report, not a standard) atomically; returns one warning per name
    that held characters XML cannot carry."""
    write_atomic(path, junit_xml(suite_name, cases), overwrite=True)
    return [f'{path}: name "{name}" holds characters XML cannot carry; written with them escaped'
            for name in names_not_xml_safe(cases)]
