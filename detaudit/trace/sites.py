"""Where a traced call was made: ``file:line function`` of the first frame outside the libraries
(torch, numpy, the standard library, site-packages, the tracer), with paths relative to their
``sys.path`` entry, so that the same code gives the same site on every machine."""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType


def _library_roots() -> tuple[str, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path) + os.sep)
    for path in sys.path:
        if path and os.path.basename(path.rstrip(os.sep)) in ("site-packages", "dist-packages"):
            roots.add(os.path.realpath(path) + os.sep)
    for path in sys.path:
        real = os.path.realpath(path or os.curdir) + os.sep
        if not real.startswith(tuple(roots)):
            roots.update(_installed_into(real))
    roots.add(os.path.dirname(os.path.realpath(__file__)) + os.sep)  # the tracer itself
    return tuple(sorted(roots))


def _installed_into(folder: str) -> set[str]:
    """The packages and modules an installer put into a folder on ``sys.path`` other than
    site-packages (``pip install --target DIR``, then ``PYTHONPATH=DIR``): what each ``*.dist-info``
    there lists in its RECORD (an editable install's RECORD lists its path hook, not the code)."""
    out: set[str] = set()
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".dist-info"):
            continue
        info = os.path.join(folder, name)
        try:
            with open(os.path.join(info, "RECORD"), encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            head, slash, _ = line.split(",", 1)[0].partition("/")  # a package folder, or a module file
            if head and not head.startswith("..") and head != "__pycache__" \
                    and not head.endswith((".dist-info", ".data")):
                out.add(folder + head + (os.sep if slash else ""))
    return out


class CallSites:
    """``file:line function`` of the first frame outside the libraries (torch, numpy,
    random, the standard library, site-packages); paths relative to their ``sys.path`` entry
    so that the same code gives the same site on every machine."""

    def __init__(self) -> None:
        self.roots = _library_roots()
        self._is_lib: dict[str, bool] = {}
        self._short: dict[str, str] = {}

    def is_library(self, filename: str) -> bool:
        known = self._is_lib.get(filename)
        if known is None:
            if filename.startswith("<"):
                known = filename.startswith("<frozen")
            else:
                real = os.path.realpath(filename)
                known = real.startswith(self.roots)
            self._is_lib[filename] = known
        return known

    def short(self, filename: str) -> str:
        known = self._short.get(filename)
        if known is None:
            real = os.path.realpath(filename) if not filename.startswith("<") else filename
            best = ""
            for entry in sys.path:
                base = os.path.realpath(entry or os.curdir) + os.sep
                if real.startswith(base) and len(base) > len(best):
                    best = base
            known = real[len(best):] if best else real
            self._short[filename] = known
        return known

    def where(self, frame: FrameType) -> str:
        """``file:line function`` of a frame. A comprehension, lambda or generator expression is
        named by the function around it: Python 3.12 runs list, dict and set comprehensions in
        their function's own frame (PEP 709), 3.11 in a frame of their own, and one trace must
        name a line alike on both."""
        filename = frame.f_code.co_filename
        name = frame.f_code.co_name
        if name.startswith("<") and name != "<module>" and frame.f_back is not None \
                and frame.f_back.f_code.co_filename == filename:
            name = frame.f_back.f_code.co_name
        return f"{self.short(filename)}:{frame.f_lineno} {name}"

    def site(self, depth: int = 2) -> tuple[str, bool]:
        """(site, library): the first user frame; else the innermost library frame that is
        not the tracer, with ``library`` true."""
        frame: FrameType | None = sys._getframe(depth)
        innermost = frame
        while frame is not None:
            if not self.is_library(frame.f_code.co_filename):
                return self.where(frame), False
            frame = frame.f_back
        if innermost is None:
            return "?", True
        return self.where(innermost), True
