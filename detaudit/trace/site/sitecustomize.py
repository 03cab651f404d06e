"""Installed first on a traced run's PYTHONPATH: starts detaudit's trace in this process,
then runs the sitecustomize this one shadows (if any), so the environment's own stays in effect."""

import os
import sys


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("DETAUDIT_TRACE"):
    try:
        from detaudit.trace import bootstrap

        bootstrap.install()
    except Exception as exc:  # never break the traced program; say why once
        print(f"detaudit trace: not installed in pid {os.getpid()}: {exc!r}", file=sys.stderr)
_chain()
