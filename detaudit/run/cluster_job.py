"""One cluster run, on the node Ray put it on: run the card's command, then print its results.

``detaudit.run.cluster`` submits ``python -m detaudit.run.cluster_job SPEC`` as a Ray job whose
working dir is the project. This module runs the recipe exactly as a local record does
(``detaudit.run.local``: its own run dir as cwd, its own log, a process group killed on
timeout), in a node-local temp dir, and detects the runner class on this node in the run's
environment. There is no shared filesystem: the results (metrics JSONL bytes, log tail,
environment, runner class) go back in the job's log as one framed, compressed, bounded
block, which the client reads with ``get_job_logs``. The recipe's own output goes to the
node-local log, never to the job log, so that log stays small.

Standard library and lower detaudit layers only: nothing heavy, no ray.
"""

from __future__ import annotations

import base64
import hashlib
import json
import platform
import shutil
import signal
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

from detaudit.data.card import load_card, run_argv, run_env
from detaudit.env.provenance import card_runner_class, detect_environment
from detaudit.run.local import Interrupted, log_tail, run_batch
from detaudit.run.spec import RunSpec

FRAME_BEGIN = "DETAUDIT-RESULT-BEGIN"
FRAME_END = "DETAUDIT-RESULT-END"
MAX_RESULT_BYTES = 32 * 1024 * 1024  # compressed; metrics beyond this fail the run, by name
LOG_TAIL_LINES = 200
LINE_WIDTH = 76


class ResultTooLarge(ValueError):
    """The run's results do not fit in the bound the client set."""


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


def run_on_node(spec: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Run one run of the card on this node; the result dict and the job's exit code."""
    card = load_card(spec["card"])
    index = int(spec["index"])
    run_dir = Path(tempfile.mkdtemp(prefix=f"detaudit-{card.name}-run{index + 1}-"))
    try:
        metrics = run_dir / "metrics.jsonl"
        env = run_env(card, run_dir, metrics, index)
        # The runner class of *this* node, seen by the recipe's interpreter in the run's env.
        info = detect_environment(env=env)
        cls = card_runner_class(card, info).to_json()
        if spec.get("probe"):  # only where a run of this card would run, and on what
            probe = {"status": "ok", "returncode": 0, "runner_class": cls, "environment": info,
                     "node": platform.node(), "log_tail": "", "metrics_b64": None}
            return probe, 0
        run = RunSpec(
            index=index,
            argv=run_argv(card, run_dir, metrics, tuple(spec.get("extra_args", ()))),
            env=env,
            workdir=run_dir,
            log_path=run_dir / "run.log",
            metrics_path=metrics,
            timeout_s=float(spec.get("timeout_s", card.timeout_s)),
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
        }
        if metrics.exists():
            max_bytes = int(spec.get("max_bytes", MAX_RESULT_BYTES))
            size = metrics.stat().st_size
            if size > 8 * max_bytes:  # even well-compressed, it cannot fit: do not read it
                result["status"] = "failed"
                result["error"] = f"metrics are {size} bytes, too large to send back (bound {max_bytes} compressed)"
            else:
                result["metrics_b64"] = base64.b64encode(metrics.read_bytes()).decode()
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
    result, code = run_on_node(spec)
    try:
        block = encode_result(result, spec["nonce"], max_bytes)
    except ResultTooLarge as exc:
        result.update(status="failed", metrics_b64=None, error=str(exc))
        block, code = encode_result(result, spec["nonce"], max_bytes), 1
    sys.stdout.write(block)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
