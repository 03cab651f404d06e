"""One cluster run, on the node Ray put it on: run the card's command, then print its results.

``detaudit.run.cluster`` submits ``python -m detaudit.run.cluster_job SPEC`` as a Ray job whose
working dir is the project. This module runs the recipe exactly as a local record does
(``detaudit.run.local``: its own run dir as cwd, its own log, a process group killed on
timeout), in a node-local temp dir, and detects the runner class on this node in the run's
environment. There is no shared filesystem: the results (metrics JSONL bytes, the files of the
folders the spec asks back such as ``trace/``, log tail, environment, runner class) go back in
the job's log as one framed, compressed, bounded block, which the client reads with
``get_job_logs``. The recipe's own output goes to the node-local log, never to the job log, so
that log stays small.

The run's command and the variables it sets (``RunSpec.argv`` and ``RunSpec.overlay``: the
card's ``env``, the metrics variables, trace variables, extra arguments) come in the spec as
*portable* text: every place where the client wrote one of its own paths (the run dir, the
metrics file, its Python, the project, this package) is a named anchor, which this node fills
in with its own path (``portable`` / ``expand``). The overlay goes on top of this node's
environment, never the client's.

Standard library and lower detaudit layers only: nothing heavy, no ray.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import detaudit
from detaudit.data.card import command_python, load_card, run_env
from detaudit.env.provenance import card_runner_class, detect_environment
from detaudit.run.local import Interrupted, log_tail, run_batch
from detaudit.run.spec import RunSpec
from detaudit.runner_class import check_plain_name

FRAME_BEGIN = "DETAUDIT-RESULT-BEGIN"
FRAME_END = "DETAUDIT-RESULT-END"
MAX_RESULT_BYTES = 32 * 1024 * 1024  # compressed; metrics beyond this fail the run, by name
LOG_TAIL_LINES = 200
LINE_WIDTH = 76


PACKAGE_DIR = Path(detaudit.__file__).resolve().parent
# A path ends where one of these follows it (or the text ends): "/x", ":next" in PYTHONPATH, "--a=/p b".
_AFTER = "/" + os.pathsep + ";, \t\n'\"="
_BEFORE = os.pathsep + ";, \t\n'\"="
Portable = list  # [[text, anchor name or ""], ...]: a string with some of its paths named
# Anchors that stand only for themselves, never for what is under them: the folder holding this
# package holds other things that a node does not have (it gets the package alone).
WHOLE_PATH_ANCHORS = frozenset({"metrics", "python", "detaudit_parent"})


class ResultTooLarge(ValueError):
    """The run's results do not fit in the bound the client set."""


def anchors_here(run_dir: Path, metrics: Path, project: Path) -> dict[str, str]:
    """The paths this machine fills in for each anchor name: the run dir and metrics file of this
    run, this Python, the project folder (the job's working dir on a node), this detaudit package
    and the folder holding it (the trace bootstrap is imported from there)."""
    return {"workdir": str(run_dir), "metrics": str(metrics), "python": sys.executable,
            "project": str(project), "detaudit": str(PACKAGE_DIR), "detaudit_parent": str(PACKAGE_DIR.parent)}


def portable(text: str, anchors: dict[str, str]) -> Portable:
    """``text`` with every whole path of ``anchors`` in it named: ``[[piece, ""], ["", name], ...]``.

    Longer anchors win (the metrics file inside the run dir); an anchor matches only where a
    path starts and ends (``/proj`` is not a prefix of ``/project2``), and one in
    ``WHOLE_PATH_ANCHORS`` only as a whole path.
    """
    names = sorted((a for a in anchors.items() if a[1]), key=lambda a: -len(a[1]))
    if not names:
        return [[text, ""]]

    def alternative(name: str, path: str) -> str:
        after = _AFTER.replace("/", "") if name in WHOLE_PATH_ANCHORS else _AFTER
        return f"(?:(?<=[{re.escape(_BEFORE)}])|^)({re.escape(path)})(?=[{re.escape(after)}]|$)"

    pattern = re.compile("|".join(alternative(name, path) for name, path in names))
    out: Portable = []
    at = 0
    for match in pattern.finditer(text):
        index = next(i for i, group in enumerate(match.groups()) if group is not None)
        if match.start() > at:
            out.append([text[at:match.start()], ""])
        out.append(["", names[index][0]])
        at = match.end()
    if at < len(text) or not out:
        out.append([text[at:], ""])
    return out


def expand(pieces: Portable, anchors: dict[str, str]) -> str:
    """The text of ``portable`` output with this machine's path for each anchor."""
    parts = []
    for piece in pieces:
        if not (isinstance(piece, list) and len(piece) == 2 and all(isinstance(x, str) for x in piece)):
            raise ValueError(f"not a portable text piece: {piece!r:.80}")
        text, name = piece
        if name and name not in anchors:
            raise ValueError(f"unknown path anchor {name!r}")
        parts.append(anchors[name] if name else text)
    return "".join(parts)


def apply_overlay(base: dict[str, str], overlay: dict[str, str]) -> dict[str, str]:
    """``base`` with the run's variables set on top; ``PYTHONPATH`` entries go first, before base's."""
    env = dict(base)
    for name, value in overlay.items():
        if name == "PYTHONPATH":
            env[name] = os.pathsep.join(p for p in (value, base.get(name, "")) if p)
        else:
            env[name] = value
    return env


def collected_files(run_dir: Path, folders: Sequence[str]) -> dict[str, Path]:
    """``folder/name`` -> path for the plain files directly in each folder of the run dir (no links)."""
    found: dict[str, Path] = {}
    for folder in folders:
        check_plain_name(folder, "collected folder")
        directory = run_dir / folder
        if not directory.is_dir() or directory.is_symlink():
            continue
        for path in sorted(directory.iterdir()):
            if path.is_file() and not path.is_symlink():
                found[f"{folder}/{path.name}"] = path
    return found


def encode_spec(spec: dict[str, Any]) -> str:
    """The job's one argument: JSON as URL-safe base64 (no shell quoting issues)."""
    return base64.urlsafe_b64encode(json.dumps(spec, sort_keys=True).encode()).decode()


def decode_spec(text: str) -> dict[str, Any]:
    return json.loads(base64.urlsafe_b64decode(text.encode()))


def encode_result(result: dict[str, Any], nonce: str, max_bytes: int = MAX_RESULT_BYTES) -> str:
    """``result`` as a framed block of base64 lines; ``ResultTooLarge`` past ``max_bytes``."""
    packed = zlib.compress(json.dumps(result, sort_keys=True).encode(), 6)
    if len(packed) > max_bytes:
        raise ResultTooLarge(f"results are {len(packed)} bytes compressed, over the {max_bytes}-byte bound")
    text = base64.b64encode(packed).decode()
    body = "\n".join(text[i : i + LINE_WIDTH] for i in range(0, len(text), LINE_WIDTH))
    digest = hashlib.sha256(packed).hexdigest()
    return f"{FRAME_BEGIN} {nonce}\n{body}\n{FRAME_END} {nonce} {digest}\n"


def decode_result(log: str, nonce: str, max_bytes: int = MAX_RESULT_BYTES) -> dict[str, Any] | None:
    """The result block with this ``nonce`` in a job log; None if there is none.

    ``ValueError`` when a block is there but torn, corrupt or over the bound.
    """
    begin = f"{FRAME_BEGIN} {nonce}\n"
    start = log.rfind(begin)
    if start < 0:
        return None
    rest = log[start + len(begin) :]
    end_at = rest.find(f"{FRAME_END} {nonce} ")
    if end_at < 0:
        raise ValueError("the result block in the job log has no end (the job was cut off)")
    digest = rest[end_at:].split("\n", 1)[0].split()[-1]
    body = "".join(rest[:end_at].split())
    if len(body) > (max_bytes * 4) // 3 + 4:
        raise ValueError(f"the result block is over the {max_bytes}-byte bound")
    packed = base64.b64decode(body, validate=True)
    if hashlib.sha256(packed).hexdigest() != digest:
        raise ValueError("the result block in the job log is corrupt (checksum differs)")
    return json.loads(zlib.decompress(packed))


def _terminate(signum: int, frame: Any) -> None:
    # `ray job stop` sends SIGTERM: run_batch turns the interrupt into killing the run's group.
    raise Interrupted(signum)


def run_on_node(spec: dict[str, Any], project: Path | None = None) -> tuple[dict[str, Any], int]:
    """Run one run of the card on this node; the result dict and the job's exit code.

    ``project``: the project folder on this node (the job's working dir: the cwd Ray gives it).
    """
    card = load_card(spec["card"])
    index = int(spec["index"])
    run_dir = Path(tempfile.mkdtemp(prefix=f"detaudit-{card.name}-run{index + 1}-"))
    try:
        metrics = run_dir / "metrics.jsonl"
        # The runner class of *this* node, seen by the recipe's interpreter in the card's env
        # (resolved here), without the run's trace variables: the probe is not part of the run.
        env = run_env(card, run_dir, metrics, index)
        info = detect_environment(python=command_python(card, env), env=env)
        cls = card_runner_class(card, info).to_json()
        if spec.get("probe"):  # only where a run of this card would run, and on what
            probe = {"status": "ok", "returncode": 0, "runner_class": cls, "environment": info,
                     "node": platform.node(), "log_tail": "", "metrics_b64": None}
            return probe, 0
        anchors = anchors_here(run_dir, metrics, project or Path.cwd())
        overlay = {str(name): expand(value, anchors) for name, value in spec["env"].items()}
        run = RunSpec(
            index=index,
            argv=[expand(part, anchors) for part in spec["argv"]],
            env=apply_overlay(dict(os.environ), overlay),
            workdir=run_dir,
            log_path=run_dir / "run.log",
            metrics_path=metrics,
            timeout_s=float(spec.get("timeout_s", card.timeout_s)),
            cwd=card.run_cwd,  # the card's folder in the project the job carries, as a local run starts
        )
        state = run_batch([run])[0]
        result: dict[str, Any] = {
            "status": state.status,
            "returncode": state.returncode,
            "elapsed_s": round(state.elapsed, 3),
            "runner_class": cls,
            "environment": info,
            "node": platform.node(),
            "log_tail": log_tail(run.log_path, LOG_TAIL_LINES),
            "metrics_b64": None,
            "files": {},
        }
        files = collected_files(run_dir, spec.get("collect", ()))
        max_bytes = int(spec.get("max_bytes", MAX_RESULT_BYTES))
        size = sum(p.stat().st_size for p in [metrics] + list(files.values()) if p.exists())
        if size > 8 * max_bytes:  # even well-compressed, it cannot fit: do not read it
            result["status"] = "failed"
            result["error"] = (f"metrics and collected files ({', '.join(spec.get('collect', ())) or 'none'}) are "
                               f"{size} bytes, too large to send back (bound {max_bytes} compressed)")
            return result, 1
        if metrics.exists():
            result["metrics_b64"] = base64.b64encode(metrics.read_bytes()).decode()
        result["files"] = {name: base64.b64encode(path.read_bytes()).decode() for name, path in files.items()}
        return result, 0 if result["status"] == "ok" else 1
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m detaudit.run.cluster_job SPEC", file=sys.stderr)
        return 2
    spec = decode_spec(args[0])
    signal.signal(signal.SIGTERM, _terminate)
    max_bytes = int(spec.get("max_bytes", MAX_RESULT_BYTES))
    result, code = run_on_node(spec, Path.cwd())
    try:
        block = encode_result(result, spec["nonce"], max_bytes)
    except ResultTooLarge as exc:
        result.update(status="failed", metrics_b64=None, files={}, error=str(exc))
        block, code = encode_result(result, spec["nonce"], max_bytes), 1
    sys.stdout.write(block)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
