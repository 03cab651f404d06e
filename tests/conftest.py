"""Shared helpers: run the detaudit CLI in a subprocess, write cards (toy and trace recipes), read
strict JSON, start and stop a real Ray head for the cluster tests; and the check that no test starts
Ray in the pytest process.

Ray (and gloo) started inside the pytest process leave native threads behind after shutdown
(gRPC's timer and event-engine threads, the GCS client's I/O thread); a full run was seen to
pass every test and then segfault at interpreter exit. Tests start Ray in subprocesses; after
each test this file looks for such threads, and the session fails naming the first test that
left them (or a torch.distributed group still initialised).
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

# A shell without job control starts background commands with SIGINT ignored, and children inherit
# that: the CLI under test would then never see the Ctrl-C the interrupt tests send (CI was seen to
# fail 4 of them when `.ci/run` ran as `cmd &` in a script). A Python handler is not inherited
# across exec, so with one here every process the tests start gets SIGINT's default again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]
# One temporary folder for the session, made by the process that loads this file first and removed at
# its end (xdist's workers, nested pytest sessions and every subprocess inherit it as TMPDIR): the
# workdirs that failing runs keep on purpose, Ray's session folders and every other temporary file of
# the tool and of Ray go there, so that a run of the suite leaves nothing in /tmp (it left ~40 workdirs
# and ~37 Ray sessions there). Short and under /tmp: Ray's socket paths are bounded (107 bytes).
# Inductor's cache stays where it was (its default under the old temporary folder), so that a
# developer's compiled kernels are kept between sessions as before.
_SUITE_TMP_MADE_HERE = "DETAUDIT_SUITE_TMP" not in os.environ
if _SUITE_TMP_MADE_HERE:
    import getpass

    try:  # as torch._inductor.runtime.cache_dir_utils.default_cache_dir names it (without importing torch)
        _user = getpass.getuser()
    except (KeyError, OSError):
        _user = f"uid_{os.getuid()}"
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "torchinductor_" + _user))
    os.environ["DETAUDIT_SUITE_TMP"] = os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="dts-", dir="/tmp")
    # Others may pass through, as through /tmp (a test scans a folder as user nobody), but not list it.
    os.chmod(os.environ["TMPDIR"], 0o711)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
# One environment-probe cache for the session (detaudit/env/probes/probe_cache.py), made by the
# process that loads this file first (xdist's workers and every subprocess inherit it): the
# probe's torch import is then paid once per environment, not once per CLI call, and nothing is
# read from or written to the user's own cache. A value already set (e.g. "off") is kept.
_PROBE_CACHE_MADE_HERE = "DETAUDIT_PROBE_CACHE" not in os.environ
if _PROBE_CACHE_MADE_HERE:
    os.environ["DETAUDIT_PROBE_CACHE"] = tempfile.mkdtemp(prefix="detaudit-probe-cache-")
TOY = REPO / "tests" / "recipes" / "toy_recipe.py"
TRACE_RECIPE = REPO / "tests" / "recipes" / "trace_recipe.py"
RAY = Path(sys.executable).parent / "ray"
# Thread names (/proc/self/task/*/comm, 15 characters at most) that Ray's core worker leaves.
RAY_THREAD_PREFIXES = ("grpc_global_tim", "gcs_client_io_s", "event_engine", "ray_")
_LEFT_IN_PROCESS: list[str] = []
_WORKER_KEY = "detaudit_left_in_process"  # an xdist worker's findings, in the workeroutput it sends back


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600,
            env: dict[str, str | None] | None = None) -> Result:
    """Run `python -m detaudit ARGS` (the installed package) and capture everything; ``env`` values
    of None remove that variable."""
    full_env = dict(os.environ, COLUMNS="200")
    for name, value in (env or {}).items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    proc = subprocess.run(
        [sys.executable, "-m", "detaudit", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def write_card(path: Path, *, name: str = "toy", args: list[str] | None = None, extra: str = "",
               recipe: Path = TOY, timeout_s: int = 60) -> Path:
    """A card at ``path`` running ``{python} RECIPE ARGS`` on class cpu-test, its standards next to it."""
    path.write_text(card_text(path, name=name, args=args, extra=extra, recipe=recipe, timeout_s=timeout_s))
    return path


def card_text(path: Path, *, name: str = "toy", args: list[str] | None = None, extra: str = "",
              recipe: Path = TOY, timeout_s: int = 60) -> str:
    """What ``write_card`` writes at ``path``."""
    command = json.dumps(["{python}", str(recipe), *(args or [])])
    return (f'name = "{name}"\ncommand = {command}\ntimeout_s = {timeout_s}\nrunner = ["cpu", "test"]\n'
            f'standards_dir = "{path.parent / "standards"}"\n{extra}')


def trace_card(folder: Path, *args: str, name: str = "tracetoy", file: str | None = None,
               env: dict[str, str] | None = None) -> Path:
    """A card for tests/recipes/trace_recipe.py at FOLDER/FILE.toml (FILE defaults to the card name),
    with ``env`` as its [env] table."""
    table = "".join(f"{k} = {json.dumps(v)}\n" for k, v in (env or {}).items())
    return write_card(folder / f"{file or name}.toml", name=name, args=list(args), recipe=TRACE_RECIPE,
                      timeout_s=600, extra=f"[env]\n{table}" if table else "")


def strict_json(text: str) -> object:
    """``json.loads`` that fails the test on a NaN or Infinity literal (detaudit writes strict JSON)."""
    def refuse(literal: str) -> None:
        raise AssertionError(f"JSON holds the literal {literal}")

    return json.loads(text, parse_constant=refuse)


def standard_of(card: Path) -> Path:
    """Where `record` writes the toy card's standard (class cpu-test)."""
    return card.parent / "standards" / "toy.cpu-test.json"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie no one reaped yet counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def run_traced(tmp_path: Path, source: str, mode: str = "rng", keep: int | None = None,
               extra_env: dict[str, str] | None = None, name: str = "t",
               pythonpath: list[Path] | None = None) -> tuple[Path, str]:
    """Run ``source`` as a script with tracing on, the way a traced run starts it (``pythonpath``:
    folders after the repository on its PYTHONPATH)."""
    from detaudit.trace import trace_env

    (tmp_path / name).mkdir()
    script = tmp_path / name / "t.py"  # one script name: call sites are comparable across runs
    script.write_text(source)
    trace_dir = tmp_path / name / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETAUDIT_TRACE")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [REPO, *(pythonpath or [])])
    env = trace_env(mode, trace_dir, env, keep)
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path / name)
    assert proc.returncode == 0, proc.stderr
    return trace_dir, proc.stdout


def scan_tree_copy(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of a scan fixture tree as the cwd, with its own scan cache: tests may edit it."""
    shutil.copytree(source, tmp_path / "proj")
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "proj"


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.fixture
def toy_card(tmp_path: Path) -> Path:
    return write_card(tmp_path / "toy.toml")


def made_once(request: pytest.FixtureRequest, name: str, make: Callable[[Path], None]) -> Path:
    """A folder that ``make(folder)`` fills once per pytest session, in whichever xdist worker asks
    first; a worker that asks meanwhile waits, then reads the same folder. Tests read it and copy
    what they change. When ``make`` failed, every later ask fails with its error (not a second try)."""
    root = request.getfixturevalue("tmp_path_factory").getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker (not the environment: a nested pytest inherits it)
        root = root.parent  # the session's own folder, above each worker's
    folder, failed = root / f"once-{name}", root / f"once-{name}.failed"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if failed.exists():
            pytest.fail(f"{name}, made once for the session by an earlier test, failed there: {failed.read_text()}")
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException as exc:  # pytest's failures are BaseExceptions
                failed.write_text(f"{type(exc).__name__}: {exc}"[-3000:])
                raise
            (folder / ".made").write_text("")
    return folder


@pytest.fixture(scope="session")
def toy_standard(request: pytest.FixtureRequest) -> Path:
    """The toy card's standard, recorded once per session from 2 agreeing runs (read only: copy it)."""
    def record(folder: Path) -> None:
        card = write_card(folder / "toy.toml")
        result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--workdir", str(folder / "runs"))
        assert result.code == 0, result.text

    return standard_of(made_once(request, "toy-standard", record) / "toy.toml")


def given_toy_standard(card: Path, toy_standard: Path) -> None:
    """Leave what `detaudit record CARD --runs 2` leaves for the toy card ``card`` (``write_card``'s
    defaults): its standard, a copy of the session's one recording ``toy_standard`` (the toy
    recipe's series do not depend on where its card lies). Tests whose claim is about record itself
    run it; a test that only needs a recorded standard to start from uses this."""
    assert card.read_text() == card_text(card), f"{card}: not the default toy card; record it"
    standard_of(card).parent.mkdir(exist_ok=True)
    shutil.copy2(toy_standard, standard_of(card))


NFT_CARD = REPO / "recipes" / "sd3_pickscore_nft.toml"


@dataclass(frozen=True)
class Recording:
    """A `detaudit record` made once for the session (read only)."""

    result: Result  # what the command returned and printed
    standard: Path  # the standard it wrote (--out), if the runs agreed
    workdir: Path  # its run dirs, run1 ... runN


@pytest.fixture(scope="session")
def nft_traced_recording(request: pytest.FixtureRequest) -> Recording:
    """`detaudit record recipes/sd3_pickscore_nft.toml --runs 3 --parallel 2 --trace`: the tiny NFT
    card's three traced runs, once for the session. tests/test_pipeline.py checks the recording
    itself; tests/test_cluster.py takes its run 1 as the local run the cluster's runs must equal."""
    def record(folder: Path) -> None:
        result = run_cli("record", str(NFT_CARD), "--runs", "3", "--no-doctor", "--parallel", "2",
                         "--out", str(folder / "standard.json"), "--trace", "--workdir", str(folder / "runs"), cwd=REPO)
        (folder / "result.json").write_text(json.dumps(result.__dict__))

    folder = made_once(request, "nft-traced-recording", record)
    return Recording(Result(**json.loads((folder / "result.json").read_text())), folder / "standard.json",
                     folder / "runs")


@contextmanager
def foreign_ray_head() -> Iterator[tuple[str, Path]]:
    """Someone else's Ray on this machine: a `ray start --head` of its own port and temp dir.
    Yields (its address, its temp dir); stopped after by ending only the processes it started.
    Not ``ray_head``: no dashboard or job server (nothing submits to it), so it is up in seconds."""
    temp = Path(tempfile.mkdtemp(prefix="rayf", dir="/tmp"))  # short: Ray's socket paths are bounded
    address = f"127.0.0.1:{free_port()}"
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    argv = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
            "--port", address.split(":")[1], "--num-cpus", "1", "--num-gpus", "0", "--include-dashboard", "false",
            "--temp-dir", str(temp), "--disable-usage-stats"]
    with open(temp / "head.log", "wb") as head_log:
        head = subprocess.Popen(argv, env=env, stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 180
        while "Ray runtime started" not in (temp / "head.log").read_text(errors="replace"):
            if head.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the Ray head did not start: {(temp / 'head.log').read_text()[-3000:]}")
            time.sleep(1)
        yield address, temp
    finally:
        stop_ray_head(head, temp)


def drivers_of(head_temp: Path) -> list[str]:
    """The drivers that joined the Ray head of temp dir HEAD_TEMP (their core-worker logs)."""
    return sorted(p.name for p in head_temp.glob("session_*/logs/python-core-driver-*"))


@dataclass(frozen=True)
class SuiteVerification:
    """`detaudit verify --suite cpu` made once for the session (read only)."""

    result: Result  # what the command returned and printed
    runs: Path  # its --workdir: each card's run in runs/<card file stem>/run1
    head_drivers: list[str]  # drivers that joined the foreign Ray head it ran beside (none, if it is right)

    def row(self, card: str) -> str:
        """The suite table's row of CARD (a file stem), in one line."""
        (line,) = [line for line in self.result.out.splitlines() if f" {card} " in line]
        return " ".join(line.split())


@pytest.fixture(scope="session")
def cpu_suite_verification(request: pytest.FixtureRequest) -> SuiteVerification:
    """`detaudit verify --suite cpu --workdir W` with someone else's Ray head up on this machine and
    RAY_ADDRESS naming it (issue #25: each card's run must start a Ray of its own): one run of each CPU
    card, once for the session. tests/test_flow_grpo.py checks the suite; tests/test_pipeline.py takes
    the NFT card's run as the verify of its committed standard, and the unseeded-manager test the
    Flow-GRPO card's run as the seeded one."""
    def verify(folder: Path) -> None:
        with foreign_ray_head() as (address, head_temp):
            result = run_cli("verify", "--suite", "cpu", "--workdir", str(folder / "runs"), cwd=REPO,
                             env={"RAY_ADDRESS": address})
            drivers = drivers_of(head_temp)
        (folder / "result.json").write_text(json.dumps({**result.__dict__, "head_drivers": drivers}))

    folder = made_once(request, "cpu-suite-verification", verify)
    saved = json.loads((folder / "result.json").read_text())
    drivers = saved.pop("head_drivers")
    return SuiteVerification(Result(**saved), folder / "runs", drivers)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_under(marker: str) -> list[int]:
    """Pids whose command line names ``marker`` (a Ray head's own temp dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


@dataclass(frozen=True)
class RayHead:
    dashboard: str  # http://127.0.0.1:PORT, the job server
    gcs: str  # 127.0.0.1:PORT, what RAY_ADDRESS names
    temp: Path
    headers: dict[str, str]  # what a client in this process sends (token authentication)

    def client(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.dashboard, headers=dict(self.headers))


@contextmanager
def ray_head(token: str | None = None) -> Iterator[RayHead]:
    """A real `ray start --head` on 127.0.0.1 with its job server, own ports and own temp dir.

    ``token``: the head uses Ray's token authentication with this token (``RAY_AUTH_TOKEN`` in its
    own environment, which wins over any ~/.ray/auth_token); without it, token authentication is
    off even if this machine has a ~/.ray/auth_token. Stopped after by ending the processes it started,
    never with a broad `ray stop`. A head whose job server takes no job is stopped and one other is
    started, with a warning that says why (under a full suite's load, once on 2026-12-07, a head's
    job server took no job for 240 s: the module's twelve tests failed at setup).
    """
    for attempt in (1, 2):
        head, info = _start_ray_head(token)
        try:
            _wait_for_its_job_server(head, info)
            break
        except RuntimeError as exc:
            stop_ray_head(head, info.temp)
            if attempt == 2:
                raise
            warnings.warn(f"a Ray head did not come up; starting another: {exc}", stacklevel=3)
    try:
        yield info
    finally:
        stop_ray_head(head, info.temp)


def _start_ray_head(token: str | None) -> tuple[subprocess.Popen, RayHead]:
    temp = Path(tempfile.mkdtemp(prefix="rayt", dir="/tmp"))  # short: Ray's socket paths are bounded
    dash, gcs = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token} if token else {"RAY_AUTH_MODE": "disabled"})
    argv = [str(RAY), "start", "--head", "--block", "--port", str(gcs), "--dashboard-port", str(dash),
            "--dashboard-host", "127.0.0.1", "--include-dashboard", "true", "--num-cpus", "2", "--num-gpus", "0",
            "--temp-dir", str(temp), "--ray-client-server-port", str(free_port()),
            "--dashboard-agent-listen-port", str(free_port()), "--disable-usage-stats"]
    with open(temp / "head.log", "wb") as head_log:
        head = subprocess.Popen(argv, env=env, stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True)
    return head, RayHead(f"http://127.0.0.1:{dash}", f"127.0.0.1:{gcs}", temp,
                         {"Authorization": f"Bearer {token}"} if token else {})


def _wait_for_its_job_server(head: subprocess.Popen, info: RayHead) -> None:
    """Until the head's job server has run a trivial job; RuntimeError naming what it last answered,
    with the tails of the head's and its dashboard agent's logs, if it has not in 240 s."""
    deadline, answer = time.time() + 240, "nothing"
    while True:
        try:  # up when it takes a job (its agent starts after the HTTP server)
            ready = info.client().submit_job(entrypoint="true", entrypoint_num_cpus=0)
            break
        except Exception as exc:  # whatever the client raises while the head comes up
            answer = f"{type(exc).__name__}: {exc}"
            if head.poll() is not None or time.time() > deadline:
                agent = "".join(p.read_text(errors="replace")[-1500:]
                                for p in info.temp.glob("session_*/logs/dashboard_agent.log"))
                raise RuntimeError(f"the Ray head did not start (its job server last answered {answer[-1000:]}); "
                                   f"its log: {(info.temp / 'head.log').read_text()[-1500:]} its dashboard "
                                   f"agent's log: {agent or 'none'}") from None
            time.sleep(1)
    while str(info.client().get_job_status(ready)) not in ("SUCCEEDED", "FAILED"):
        if time.time() > deadline:
            raise RuntimeError("the Ray head's job server does not finish a trivial job")
        time.sleep(1)


def stop_ray_head(head: subprocess.Popen, temp: Path) -> None:
    """Stop a `ray start --head --block` started with ``--temp-dir TEMP``: end it, then kill only the
    processes naming TEMP that are left (never a broad `ray stop`), and remove TEMP."""
    head.send_signal(signal.SIGTERM)  # --block: ends every Ray process it started
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        head.kill()
    for _ in range(50):
        left = processes_under(str(temp))
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    shutil.rmtree(temp, ignore_errors=True)


def ray_threads_here() -> list[str]:
    """Names of this process's threads that Ray left (none unless Ray was started in it)."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        if name.startswith(RAY_THREAD_PREFIXES):
            names.append(name)
    return sorted(names)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests that run the recipe or start Ray first, then the other slow ones (each part in
    file order), the fast ones last, the files with the most fast tests first: under xdist the last
    tests to start are short ones, in files of one to three tests, so that no worker idles at the end
    while the other still runs a recipe or a file of a dozen tests (the fast set's tail was ~5 s)."""
    def part(item: pytest.Item) -> int:
        marks = {mark.name for mark in item.iter_markers()}
        return 2 if "slow" not in marks else 0 if marks & {"recipe", "ray"} else 1

    parts = {item: part(item) for item in items}
    fast_in_file = collections.Counter(item.path for item in items if parts[item] == 2)
    items.sort(key=lambda item: (parts[item], -fast_in_file[item.path] if parts[item] == 2 else 0))


@pytest.fixture(autouse=True)
def _no_ray_in_the_test_process(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not _LEFT_IN_PROCESS:
        threads = ray_threads_here()
        if threads:
            _LEFT_IN_PROCESS.append(f"{request.node.nodeid} started Ray in the pytest process "
                                    f"(threads left: {', '.join(sorted(set(threads)))})")


# DETAUDIT_SUITE_TIMELINE=FILE: every test's xdist worker, start and end (seconds since the epoch) and
# node id, one tab-separated line each, appended to FILE: which worker waited or idled when, under the
# suite's own xdist options (docs/testing.md). benchmarks/suite_census.py measures CPU instead.
_TIMELINE = os.environ.get("DETAUDIT_SUITE_TIMELINE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    started = time.time()
    yield
    if _TIMELINE:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
        with open(_TIMELINE, "a", encoding="utf-8") as timeline:
            timeline.write(f"{worker}\t{started:.3f}\t{time.time():.3f}\t{item.nodeid}\n")


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook
def pytest_testnodedown(node, error) -> None:  # node: xdist's WorkerController
    """Under pytest-xdist, in the controller: what a worker's own check found (see pytest_sessionfinish)."""
    _LEFT_IN_PROCESS.extend(getattr(node, "workeroutput", {}).get(_WORKER_KEY, []))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when a test started Ray (or left torch.distributed initialised) in this process.

    An xdist worker's exit status does not fail the session, so a worker hands what it found to the
    controller (its ``workeroutput``, sent once this hook returns), which reports it and fails.
    """
    problems = list(_LEFT_IN_PROCESS)
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        problems.append("a torch.distributed process group is still initialised in the pytest process")
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "a worker")
        worker_output[_WORKER_KEY] = [f"{problem} (xdist worker {worker})" for problem in problems]
        return
    if not problems:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for problem in problems:
        message = f"in-process Ray/gloo check: {problem}; start it in a subprocess"
        if reporter is not None:
            reporter.write_line(message, red=True)
            reporter.flush()  # out before the interpreter exits (which is where such threads crash)
        else:
            print(message, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PROBE_CACHE_MADE_HERE:
        shutil.rmtree(os.environ["DETAUDIT_PROBE_CACHE"], ignore_errors=True)
    if _SUITE_TMP_MADE_HERE:
        shutil.rmtree(os.environ["DETAUDIT_SUITE_TMP"], ignore_errors=True)
