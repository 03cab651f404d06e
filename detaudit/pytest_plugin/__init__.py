"""pytest plugin (``pytest11`` entry point ``detaudit``): check determinism standards inside tests.

Two ways in::

    def test_training_reproduces(detaudit, tmp_path):
        metrics = train(tmp_path)                   # writes a metrics JSONL
        detaudit.verify_metrics(metrics)            # against the standard beside this test file

    @pytest.mark.detaudit(card="recipes/tiny.toml")  # runs the card, verifies it
    def test_tiny_recipe():
        pass

Where standards live, as syrupy and pytest-regressions keep snapshots: beside the test file,
``<test folder>/standards/<test module>/<test name>.json`` (the folder name is the ini option
``detaudit_standards_dir``; ``detaudit.standards.store`` names every path). ``verify_metrics(metrics,
"name.json")`` names one explicitly: a relative path is taken from the test file's folder, never
from the current directory. A card path is taken from the project root (pytest's rootdir); a
metrics path, which the test wrote, as the test gave it.

The marker takes ``card``, ``metrics``, ``standard`` and ``step_key`` (keywords only; anything else
fails the test): ``card`` runs the card; ``metrics`` checks the file the test wrote, against
``standard`` or the test's default standard, or with ``card`` against the card's standard.

Options:

``--detaudit-update``        write the standards that are missing, whose check failed, or whose
                             run has series the standard lacks
``--detaudit-update-all``    re-record every standard a test checks
``--detaudit-runs N``        agreeing runs a standard is recorded from (default 2): a card's runs,
                             or the test itself run again in fresh pytest processes
``--detaudit-remove-unused`` delete the standards no test checked (listed in the summary)
``--detaudit-force-update``  allow updates and removals on a CI system (refused there otherwise: a CI
                             job must not rewrite its own gate); CI is any of ``ci.CI_VARIABLES`` set
``--detaudit-html``          a failed check also writes its HTML page beside the standard

A recorded standard goes through the record flow (``detaudit.flows.record``): written only when
every run agrees, with this machine's runner class and provenance; checked against it later (a
standard of another class is NOT VERIFIED). Paths in a written standard are relative to the
project, or left out; an update that changes no value leaves the file's bytes. A failed check
writes what it obtained beside the standard: ``<standard>.obtained.jsonl`` (and the page). Within
one session a standard belongs to one test under an update option (also across ``pytest -n``
workers). Updates, new series, obtained files and unused standards are listed in the summary.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from detaudit.pytest_plugin.checker import DetauditChecker, fail, update_mode
from detaudit.pytest_plugin.session import (
    COLLECT_OPTION,
    STANDARDS_DIR_INI,
    STATE,
    SessionState,
    module_folders,
    remove_file,
    selection_is_partial,
)
from detaudit.render.ci.environment import ci_variable

_CLAIMS_KEY = "detaudit_claims"  # workerinput: the session's claims folder, shared by xdist workers
_EVENTS_KEY = "detaudit_events"  # workeroutput: what a worker updated, checked and found
MARKER_ARGS = ("card", "metrics", "standard", "step_key")

__all__ = ["DetauditChecker", "detaudit"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("detaudit", "determinism standards (detaudit)")
    group.addoption("--detaudit-update", action="store_true",
                    help="Write the standards that are missing, failed, or lack series the run has.")
    group.addoption("--detaudit-update-all", action="store_true", help="Re-record every standard a test checks.")
    group.addoption("--detaudit-runs", type=int, default=2,
                    help="Agreeing runs a standard is recorded from (a card's, or the test run again; default 2).")
    group.addoption("--detaudit-remove-unused", action="store_true",
                    help="Delete the standards that no collected test checks (listed in the summary).")
    group.addoption("--detaudit-force-update", action="store_true",
                    help="Allow updates and removals on a CI system (refused where a CI variable is set).")
    group.addoption("--detaudit-html", action="store_true",
                    help="A failed check also writes its HTML page beside the standard (<standard>.obtained.html).")
    group.addoption(COLLECT_OPTION, default=None, help=argparse_suppress())
    parser.addini(STANDARDS_DIR_INI, "Folder of the standards, beside each test file (default: standards).",
                  default="standards")


def argparse_suppress() -> str:
    import argparse

    return argparse.SUPPRESS


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "detaudit(card=None, metrics=None, standard=None, step_key=None): verify a card, or a metrics file "
        "the test wrote, against its detaudit standard after the test body",
    )
    if config.getoption("--detaudit-runs") < 1:
        raise pytest.UsageError("detaudit: --detaudit-runs must be at least 1")
    state = SessionState(partial=selection_is_partial(config))
    config.stash[STATE] = state
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: report to the controller, share its claims
        config.workeroutput[_EVENTS_KEY] = state.events  # type: ignore[attr-defined]
        claims = workerinput.get(_CLAIMS_KEY)
        state.claims = Path(claims) if claims else None
        return
    writes = update_mode(config) is not None or config.getoption("--detaudit-remove-unused")
    if not writes or config.getoption(COLLECT_OPTION):
        return
    variable = ci_variable()
    if variable and not config.getoption("--detaudit-force-update"):
        raise pytest.UsageError(
            f"detaudit: refusing to update standards on a CI system ({variable} is set): a gate must not rewrite "
            "itself; pass --detaudit-force-update to do it anyway"
        )
    if update_mode(config) is not None:
        state.claims, state.own_claims = Path(tempfile.mkdtemp(prefix="detaudit-claims-")), True


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: each worker claims standards in the controller's folder."""
    state = node.config.stash.get(STATE, None)
    if state is not None and state.claims is not None:
        node.workerinput[_CLAIMS_KEY] = str(state.claims)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist: collect what the worker updated, checked and found, for the summary."""
    state = node.config.stash.get(STATE, None)
    if state is not None:
        state.events.extend(getattr(node, "workeroutput", {}).get(_EVENTS_KEY, []))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default standards of the collected tests, and their folders: what "unused" is judged against."""
    state = config.stash.get(STATE, None)
    if state is None or state.partial or config.getoption(COLLECT_OPTION):
        return
    folders, owners = module_folders(items, config.getini(STANDARDS_DIR_INI))
    for folder in sorted(folders):
        if folder.is_dir():
            state.events.append({"kind": "folder", "standard": "", "path": str(folder), "test": "", "detail": ""})
            state.events.extend({"kind": "owner", "standard": "", "path": str(p), "test": "", "detail": ""}
                                for p in sorted(owners) if p.parent == folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    state = config.stash.get(STATE, None)
    if state is not None and state.own_claims and state.claims is not None:
        shutil.rmtree(state.claims, ignore_errors=True)


@pytest.fixture
def detaudit(request: pytest.FixtureRequest) -> DetauditChecker:
    """Verify metrics files or cards against their standards inside a test."""
    return DetauditChecker(request.node)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A ``@pytest.mark.detaudit`` test: after its body passed, check its card or metrics file."""
    result = yield  # the body's own failure propagates first
    marker = item.get_closest_marker("detaudit")
    if marker is not None:
        unknown = sorted(set(marker.kwargs) - set(MARKER_ARGS))
        if marker.args or unknown:
            given = ", ".join([repr(a) for a in marker.args] + [f"{k}=" for k in unknown])
            fail(f"@pytest.mark.detaudit takes {', '.join(f'{k}=' for k in MARKER_ARGS)} only (keywords); "
                 f"it does not take {given}")
        card, metrics, standard, step_key = (marker.kwargs.get(k) for k in MARKER_ARGS)
        checker = DetauditChecker(item)
        if metrics is not None:
            checker.verify_metrics(metrics, standard, step_key=step_key, card=card)
        elif card is not None:
            checker.verify_card(card, standard=standard, step_key=step_key)
        else:
            fail("@pytest.mark.detaudit needs card=... or metrics=... (standard=... and step_key=... optional)")
    return result


_SUMMARY = {"updated": "re-recorded", "unchanged": "unchanged (same bytes, not rewritten)",
            "new-series": "new series, not in the standard, unchecked",
            "obtained": "obtained (beside its standard)", "obtained-failed": "could not write"}


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or hasattr(config, "workerinput") or config.getoption(COLLECT_OPTION):
        return
    unused = _unused(state)
    shown = [e for e in state.events if e["kind"] in _SUMMARY]
    if not shown and not unused:
        return
    events = sorted(shown, key=lambda e: (e["kind"] != "updated", e["kind"], e["standard"], e["test"]))
    updated = any(e["kind"] == "updated" for e in events)
    terminalreporter.section("detaudit standards updated" if updated else "detaudit standards")
    for e in events:
        detail = f" ({e['detail']})" if e["detail"] else ""
        if e["kind"] == "new-series":
            terminalreporter.write_line(f"{_SUMMARY['new-series']}: {e['standard']}: {e['detail']} [{e['test']}]")
        else:
            terminalreporter.write_line(f"{_SUMMARY[e['kind']]} {e['standard']}{detail}")
    if not unused:
        return
    remove = config.getoption("--detaudit-remove-unused")
    collection_errors = bool(terminalreporter.stats.get("error"))
    root = Path(config.rootpath).resolve()
    for path in unused:
        shown_path = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        if remove and not collection_errors:
            why = remove_file(path)
            terminalreporter.write_line(f"removed unused standard {shown_path}" + (f" (failed: {why})" if why else ""))
        else:
            terminalreporter.write_line(f"unused standard (no test checks it): {shown_path}")
    if remove and collection_errors:
        terminalreporter.write_line("unused standards not removed: tests failed to collect, so which are unused "
                                    "is not known")
    elif not remove:
        terminalreporter.write_line(f"{len(unused)} unused standard(s): pytest --detaudit-remove-unused deletes them")


def _unused(state: SessionState) -> list[Path]:
    from detaudit.standards.store import unused_standards

    if state.partial:
        return []
    folders = {Path(e["path"]) for e in state.events if e["kind"] == "folder"}
    owners = {Path(e["path"]) for e in state.events if e["kind"] == "owner"}
    used = {Path(e["path"]) for e in state.events if e["kind"] in ("checked", "updated", "unchanged")}
    return [p.resolve() for p in unused_standards(folders, used, owners)]
