"""Text from other people's files (series names, paths, messages) shown as one line and as text
in every report: every control character and every lone surrogate is written as its Python
escape, so that a name can neither drive a terminal (ESC, CR, BEL), nor start a line of its own
(``\\n``: a FAILED verify printing a line that begins ``[detaudit] PASSED``), nor stop a writer
that encodes UTF-8 (a lone surrogate: what Python makes of a file name that is not UTF-8).

Escapes are Python's (``\\x1b``, ``\\n``, ``\\u2028``, ``\\udcff``): what ``repr`` shows, and
unambiguous to read back.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, the Unicode line and paragraph separators, lone surrogates.
_NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# The same, but for a text of several lines (a run's log tail): newlines and tabs are kept.
_NOT_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def one_line(text: str) -> str:
    """``text`` with every control character (newline and tab included) and lone surrogate escaped."""
    return _NOT_ONE_LINE.sub(_escape, text)


def visible_lines(text: str) -> str:
    """``text`` with its control characters and lone surrogates escaped, its newlines and tabs kept."""
    return _NOT_TEXT.sub(_escape, text)
