"""The post-import hook (``PostImportFinder``) that lets the tracer patch torch, numpy and the
rest only once the program imports them: nothing heavy is imported to trace a process."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from typing import Any

from detaudit.trace.notes import note_failure


class _PostImportLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, callback: Callable[[Any], None]) -> None:
        self.loader = loader
        self.callback = callback

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        try:
            self.callback(module)
        except Exception as exc:  # the program must run on; the trace says it is incomplete
            note_failure(f"after import of {module.__name__}: {exc!r}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` right after ``name`` is first imported."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[Any], None]]] = {}
        self.busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        callbacks = self.callbacks.get(fullname)
        if not callbacks or fullname in self.busy:
            return None
        self.busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self.busy.discard(fullname)
        if spec.loader is not None:
            def run_callbacks(module: Any) -> None:
                for callback in callbacks:
                    callback(module)
            spec.loader = _PostImportLoader(spec.loader, run_callbacks)
        return spec

    def when_imported(self, name: str, callback: Callable[[Any], None]) -> None:
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
        else:
            self.callbacks.setdefault(name, []).append(callback)
