"""Process entry points: the names and shapes that start a process (or a pytest test) in scanned code.

A file's walker (``facts``) asks these tables which calls and decorators declare an entry point;
the analysis turns each into a process (``analysis.build_processes``).
"""

from __future__ import annotations

KIND_LABEL = {
    "ray-actor": "Ray actor",
    "ray-task": "Ray task",
    "main": "__main__",
    "script": "console script",
    "cli": "command-line entry",
    "multiprocessing": "multiprocessing target",
    "pool": "process-pool worker",
    "worker-init": "DataLoader worker_init_fn",
    "test": "pytest test",
}

RAY_REMOTE = "ray.remote"
MP_SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})
MP_MODULES = ("multiprocessing", "torch.multiprocessing")
# Process pools: `pool.map(fn, items)`, `executor.submit(fn, x)` run `fn` in a worker process
# (a thread pool's `submit`/`map` run it in this process: a call). A pool is what these make,
# or `X.Pool(...)` of a multiprocessing context.
PROCESS_POOLS = frozenset({
    "multiprocessing.Pool", "multiprocessing.pool.Pool", "torch.multiprocessing.Pool",
    "concurrent.futures.ProcessPoolExecutor", "concurrent.futures.process.ProcessPoolExecutor",
    "loky.get_reusable_executor", "joblib.externals.loky.get_reusable_executor",
})
THREAD_POOLS = frozenset({
    "concurrent.futures.ThreadPoolExecutor", "concurrent.futures.thread.ThreadPoolExecutor",
    "multiprocessing.pool.ThreadPool", "multiprocessing.dummy.Pool",
})
POOL_METHODS = frozenset({"map", "imap", "imap_unordered", "starmap", "map_async", "starmap_async", "apply",
                          "apply_async", "submit"})
# Calls that run their first argument as the program: absl's app.run(main), fire.Fire(obj),
# accelerate's notebook_launcher(fn).
RUNNERS = frozenset({"absl.app.run", "fire.Fire", "accelerate.notebook_launcher",
                     "accelerate.launchers.notebook_launcher"})
# Decorators that make a function a command-line entry (click, typer); `X.command()` on a
# click group or a typer app is recognised in a module that imports click or typer.
CLI_DECORATOR_MODULES = ("click", "typer")
CLI_DECORATOR_METHODS = frozenset({"command", "group", "callback"})
# The last name of every call that can declare an entry point without keywords (the walker
# checks only these calls, calls with keywords, and calls of a call's result).
CALL_NAMES = frozenset({"remote", "spawn", "start_processes", "run", "Fire", "notebook_launcher"})

PYTEST_FIXTURES = frozenset({"pytest.fixture", "_pytest.fixtures.fixture", "pytest_asyncio.fixture"})
# Methods and module functions pytest (and unittest) run before a test's body.
CLASS_SETUPS = ("setup_class", "setUpClass", "setup_method", "setUp", "setup")
MODULE_SETUPS = ("setup_module", "setUpModule", "setup_function")


TEST_FOLDERS = frozenset({"tests", "test", "testing", "unittest", "unittests", "unit_tests"})


def is_test_path(relative: str) -> bool:
    """Test code, not the pipeline: test_*.py, *_test.py, conftest.py, or a file in a folder named
    tests (test, testing, unittest) below the path that was scanned (``relative`` is relative to it)."""
    parts = relative.replace("\\", "/").split("/")
    name = parts[-1]
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or any(part in TEST_FOLDERS for part in parts[:-1]))


def is_test_module(name: str) -> bool:
    """A module pytest collects tests from: test_*.py or *_test.py (its last dotted part)."""
    last = name.rpartition(".")[2].partition("#")[0]
    return last.startswith("test_") or last.endswith("_test")


def is_conftest(name: str) -> bool:
    return name.rpartition(".")[2].partition("#")[0] == "conftest"


def is_test_function(name: str) -> bool:
    return name.startswith("test")


def is_test_class(name: str, bases: list[str]) -> bool:
    return name.startswith("Test") or any(b.rpartition(".")[2] in ("TestCase", "IsolatedAsyncioTestCase") for b in bases)
