"""A test-only recipe: writes a miles-style metrics JSONL, deterministically or not.

Not a mock of anything we ship: it stands in for a user's training command. Flags:
  --unseeded       draw the "data" from an unseeded global RNG (the bug detaudit catches)
  --reorder        sum the same numbers in another order, one whose sum differs in its last bits
                   (a ~1e-16 ULP-kind difference; chosen deterministically, so never by chance the same)
  --fail           exit 3 after writing some lines
  --fail-index I   the same, only in the run whose DETAUDIT_RUN_INDEX is I
  --sleep S        sleep S seconds before finishing (for timeouts and Ctrl-C)
  --spawn-child    leave a sleeping child process in the run's process group
  --steps N        rollouts (default 3)
  --no-metrics     write no metrics file at all (a recipe that ignores DETAUDIT_METRICS_JSONL)
  --ignore-term    ignore SIGTERM (so only SIGKILL ends the run's process group)
  --only-perf      write only wall-clock perf/* series
"""

import argparse
import itertools
import json
import math
import os
import random
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--unseeded", action="store_true")
parser.add_argument("--reorder", action="store_true")
parser.add_argument("--fail", action="store_true")
parser.add_argument("--fail-index", type=int)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--spawn-child", action="store_true")
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--no-metrics", action="store_true")
parser.add_argument("--ignore-term", action="store_true")
parser.add_argument("--only-perf", action="store_true")
args = parser.parse_args()
if args.fail_index is not None and os.environ.get("DETAUDIT_RUN_INDEX") == str(args.fail_index):
    args.fail, args.sleep = True, 0.0
if args.ignore_term:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child below



def reordered_sum(values: list[float]) -> float:
    """The sum in the first order (reversed, then every permutation) whose bits differ from the
    in-order sum. A random order was the same sum now and then (many orders round alike), and a
    test that needs a difference then passed by chance."""
    plain = sum(values)
    for order in itertools.chain([range(len(values) - 1, -1, -1)], itertools.permutations(range(len(values)))):
        total = sum(values[i] for i in order)
        if total != plain:
            return total
    return plain


path = os.devnull if args.no_metrics else os.environ["DETAUDIT_METRICS_JSONL"]
started = time.time()
rng = random.Random() if args.unseeded else random.Random(1234)
if args.spawn_child:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.path.join(os.environ["DETAUDIT_WORKDIR"], "child.pid"), "w") as fh:
        fh.write(str(child.pid))

with open(path, "w") as out:
    for step in range(args.steps):
        rewards = [rng.random() for _ in range(8)]
        mean = (reordered_sum(rewards) if args.reorder else sum(rewards)) / 8
        if args.only_perf:
            out.write(json.dumps({"step_key": "rollout/step", "rollout/step": step, "perf/rollout_time": time.time()}) + "\n")
            continue
        out.write(json.dumps({"step_key": "rollout/step", "rollout/step": step,
                              "rollout/reward/raw_mean": mean,
                              "rollout/reward/raw_num_samples": 8,
                              "perf/rollout_time": time.time()}) + "\n")
        grad_norm = math.nan if step == 0 else mean * 2  # fp16 scaler skips step 0: NaN, deterministically
        out.write(json.dumps({"step_key": "train/step", "train/step": float(step),
                              "train/loss": mean * 0.5, "train/grad_norm": grad_norm,
                              "perf/step_time": time.time()}) + "\n")
        out.flush()
        if args.fail and step == 1:
            print("toy recipe: failing on purpose", file=sys.stderr)
            sys.exit(3)
print("toy recipe: wrote", path, flush=True)
if args.sleep:
    time.sleep(args.sleep)
with open(os.path.join(os.environ["DETAUDIT_WORKDIR"], "info.json"), "w") as fh:
    json.dump({"start": started, "end": time.time(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}, fh)
