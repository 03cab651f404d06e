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


def _not_installed(exc: BaseException) -> None:
    """Never break the traced program; say why, on stderr and in the trace dir (the compare
    then reads this run's trace as incomplete). Written without detaudit: it may be what failed."""
    message = f"detaudit trace: not installed in pid {os.getpid()}: {exc!r}"
    print(message, file=sys.stderr)
    trace_dir = os.environ.get("DETAUDIT_TRACE_DIR")
    if trace_dir:
        try:
            os.makedirs(trace_dir, exist_ok=True)
            with open(os.path.join(trace_dir, f"error.{os.getpid()}.txt"), "a", encoding="utf-8") as fh:
                fh.write(message + "\n")
        except OSError:
            pass


def _load_detaudit() -> None:
    """Import the detaudit this file belongs to (``<root>/detaudit/trace/site/``) by its path:
    its root never goes on ``sys.path``, where it would shadow the run's own packages."""
    import importlib.machinery
    import importlib.util

    if "detaudit" in sys.modules:
        return
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    spec = importlib.machinery.PathFinder.find_spec("detaudit", [root])
    if spec is None or spec.loader is None:
        raise ImportError(f"no detaudit package in {root}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["detaudit"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["detaudit"]
        raise


if os.environ.get("DETAUDIT_TRACE") or os.environ.get("DETAUDIT_PERTURB"):
    try:
        _load_detaudit()
        from detaudit.trace import bootstrap

        bootstrap.install()
    except Exception as exc:
        _not_installed(exc)
_chain()
