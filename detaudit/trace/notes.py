"""What the tracer leaves in a trace dir besides ledgers: a note that a process's trace is
incomplete (``error.<pid>.txt``: the compare then fails closed), and the marker of a process
left out on purpose (``skipped.<pid>.jsonl``: one of Ray's own daemons)."""

from __future__ import annotations

import json
import os
import sys

from detaudit.trace import DIR_ENV
from detaudit.trace.identity import short_argv


def note_failure(message: str) -> None:
    """The trace of this process is incomplete: say so in the trace dir (compare fails closed)."""
    print(f"detaudit trace: pid {os.getpid()}: {message}", file=sys.stderr)
    trace_dir = os.environ.get(DIR_ENV)
    if trace_dir:
        try:
            os.makedirs(trace_dir, exist_ok=True)
            with open(os.path.join(trace_dir, f"error.{os.getpid()}.txt"), "a", encoding="utf-8") as fh:
                fh.write(message + "\n")
        except OSError:
            pass


def write_skip(trace_dir: str, why: str) -> None:
    """A process the tracer leaves out on purpose (Ray's own daemons) says so: its parent's
    record of it is then accounted for."""
    try:
        os.makedirs(trace_dir, exist_ok=True)
        record = {"type": "skip", "pid": os.getpid(), "why": why, "argv": short_argv(sys.argv)}
        with open(os.path.join(trace_dir, f"skipped.{os.getpid()}.jsonl"), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n")
    except OSError:
        pass
