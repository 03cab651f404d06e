"""A compile-worker-like pool, as Inductor runs one (``torch._inductor.compile_worker``): the
program starts a sidecar subprocess, the sidecar a fork pool whose worker draws, then ends that
worker at once (``Process.kill``); the program exits without stopping the sidecar, which
ignores SIGTERM, so the run's clean-up ends it with SIGKILL. Neither closes its ledger.

    python compile_pool.py            # the program
    python compile_pool.py sidecar    # what it starts
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import random
import signal
import subprocess
import sys
import time

DRAWS = 40  # at one call site: past the kept records and past the last chain checkpoint


def job(seed: int) -> float:
    random.seed(seed)
    return sum(random.random() for _ in range(DRAWS))


def sidecar() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the run's SIGKILL ends it
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    pool.submit(job, 1).result()
    for worker in list(pool._processes.values()):  # type: ignore[attr-defined]
        worker.kill()
        worker.join()
    print("ready", flush=True)
    time.sleep(600)


def main() -> None:
    random.seed(0)
    side = subprocess.Popen([sys.executable, __file__, "sidecar"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert side.stdout is not None and side.stdout.readline().strip() == b"ready"
    # exits without ending the sidecar, as a Ray actor stopped at shutdown leaves its compile workers


if __name__ == "__main__":
    sidecar() if sys.argv[1:] == ["sidecar"] else main()
