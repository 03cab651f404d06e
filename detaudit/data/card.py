"""Recipe cards: TOML files that say how to run one recipe and where its standard lives.

Example (``recipes/sd3_pickscore_nft.toml``)::

    name = "sd3_pickscore_nft"
    command = ["{python}", "-m", "recipes.diffusion_nft", "--preset", "tiny", "--rollouts", "3"]
    pythonpath = [".."]          # relative to the card's folder
    timeout_s = 900
    runner = "auto"

Placeholders in ``command`` and ``env`` values: ``{python}`` (the card's ``python``, else the
interpreter running detaudit), ``{card_dir}`` (the card's folder, absolute), ``{workdir}`` (the
run's own work dir, where its outputs go), ``{metrics}`` (the metrics JSONL path the run must
write). A run starts in the card's folder, or in the folder its ``cwd`` names (relative to the
card), so ``command = ["python", "train.py"]`` beside ``train.py`` works as typed.

The environment a standard records (runner class, torch, packages) is probed in the Python the
command starts (``command_python``): ``{python}``, a Python interpreter named first, or the
interpreter of a script's ``#!`` line. A command that starts no Python it can name (``bash
run.sh``, ``uv run ...``) needs the card's ``python`` key; without it the card is refused, since
detaudit's own interpreter is not the run's.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.data.portable import PROFILES, PortableProfile
from detaudit.errors import InputError
from detaudit.fileio import read_bounded_text
from detaudit.runner_class import RunnerClass, check_plain_name

DEFAULT_METRICS_ENV = "DETAUDIT_METRICS_JSONL"
MAX_CARD_BYTES = 1 << 20  # a card is a few lines; anything this big is not one
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
PROJECT_MARKERS = ("pyproject.toml", ".git")


@dataclass(frozen=True)
class Card:
    path: Path
    name: str
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    metrics_env: str = DEFAULT_METRICS_ENV
    timeout_s: float = 3600.0
    exclude: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    step_key: str | None = None
    runner: RunnerClass | None = None  # None: detect ("auto")
    gpus_per_run: int = 0
    cpus_per_run: float = 1  # what a cluster job asks Ray for (--cluster)
    est_time: float | None = None  # seconds, for CI planning
    suite: str | None = None
    description: str = ""
    pythonpath: tuple[str, ...] = ()
    standards_dir: str = "standards"
    # runner class ("h100-1gpu") -> {"against": class, series glob -> {rtol, atol, max_ulps}}; see data/approximate.py
    approximate: dict[str, Any] = field(default_factory=dict)
    portable: PortableProfile | None = None  # a portable CPU profile: its settings in every run, its class
    # run series -> standard series: verify compares the run's series under the standard's name
    rename: dict[str, str] = field(default_factory=dict)
    python: str | None = None  # the interpreter of the run (``{python}``); relative to the card's folder
    cwd: str | None = None  # the folder runs start in, relative to the card's folder (default: that folder)
    # `trace --modules` compares these two processes' module calls (labels: "RolloutEngine", "TrainActor")
    parity: tuple[str, str] | None = None

    @property
    def card_dir(self) -> Path:
        return self.path.parent.resolve()

    @property
    def run_cwd(self) -> Path:
        """The folder every run starts in: ``cwd`` from the card's folder, else the card's folder."""
        return (self.card_dir / self.cwd).resolve() if self.cwd else self.card_dir

    @property
    def python_path(self) -> str:
        """What ``{python}`` stands for: the card's ``python`` (from its folder), else detaudit's interpreter."""
        if self.python is None:
            return sys.executable
        given = Path(self.python).expanduser()
        # Not resolved: a virtual environment's python is a symbolic link, and its target is not the venv.
        return str(given if given.is_absolute() else self.card_dir / given) if os.sep in self.python else self.python

    @property
    def project_root(self) -> Path:
        """The nearest folder upward from the card holding pyproject.toml or .git (else the card's folder)."""
        for folder in (self.card_dir, *self.card_dir.parents):
            if any((folder / marker).exists() for marker in PROJECT_MARKERS):
                return folder
        return self.card_dir

    @property
    def standards_path(self) -> Path:
        """``standards_dir``; a relative one is resolved against the project root, never the cwd."""
        return self.project_root / self.standards_dir


# key -> (accepted python types, description used in error messages)
_SCHEMA: dict[str, tuple[tuple[type, ...], str]] = {
    "name": ((str,), "a string"),
    "command": ((list,), "a list of strings"),
    "env": ((dict,), "a table of strings"),
    "metrics_env": ((str,), "a string"),
    "timeout_s": ((int, float), "a number of seconds"),
    "exclude": ((list,), "a list of glob strings"),
    "include": ((list,), "a list of glob strings"),
    "step_key": ((str,), "a string"),
    "runner": ((list, str), 'a list of strings or "auto"'),
    "gpus_per_run": ((int,), "an integer"),
    "cpus_per_run": ((int, float), "a number of CPUs"),
    "est_time": ((int, float), "a number of seconds"),
    "suite": ((str,), "a string"),
    "description": ((str,), "a string"),
    "pythonpath": ((list,), "a list of paths"),
    "standards_dir": ((str,), "a path"),
    "approximate": ((dict,), "a table of runner classes, each with tolerances per series glob"),
    "portable": ((str,), f"a portable CPU profile ({', '.join(sorted(PROFILES))})"),
    "rename": ((dict,), 'a table of run series names to standard series names ({"loss_metrics/global_avg_loss" = "loss"})'),
    "python": ((str,), "a path to the Python interpreter the run uses"),
    "cwd": ((str,), "a folder, relative to the card"),
    "parity": ((str,), 'two process labels, "A:B" (trace --modules compares their module calls)'),
}
_REQUIRED = ("name", "command")


def check_rename(path: str | Path | None, where: str, value: Any, line: int | None = None) -> dict[str, str]:
    """A rename map (run series -> standard series), as a card or a detaudit standard holds it:
    non-empty strings, nothing renamed to itself, no two run series onto one standard series."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and k and isinstance(v, str) and v
                                              for k, v in value.items()):
        raise InputError(path, f"{where} must be a table of non-empty series names to series names", line)
    targets: dict[str, str] = {}
    for source, target in value.items():
        if source == target:
            raise InputError(path, f"{where}: {source!r} is renamed to itself", line)
        if target in targets:
            raise InputError(path, f"{where}: {targets[target]!r} and {source!r} are both renamed to {target!r}", line)
        targets[target] = source
    return dict(value)


def _key_line(text: str, key: str) -> int | None:
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if stripped.startswith(key) and stripped[len(key):].lstrip().startswith("="):
            return number
    return None


def load_card(path: str | Path) -> Card:
    """Parse and validate a card; ``InputError`` names the file, line and key on any problem."""
    path = Path(path)
    text = read_bounded_text(path, "recipe card", MAX_CARD_BYTES)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        line = None
        if "(at line " in message:
            head, _, where = message.rpartition(" (at line ")
            try:
                line = int(where.split(",")[0])
                message = head
            except ValueError:
                pass
        elif message.endswith("(at end of document)"):
            message = message[: -len(" (at end of document)")] + " at end of file"
            line = max(1, len(text.splitlines()))
        raise InputError(path, f"invalid TOML: {message}", line) from None

    def fail(key: str, message: str) -> InputError:
        return InputError(path, f"{key}: {message}", _key_line(text, key))

    for key in data:
        if key not in _SCHEMA:
            known = ", ".join(sorted(_SCHEMA))
            raise fail(key, f"unknown key (known keys: {known})")
    for key in _REQUIRED:
        if key not in data:
            raise InputError(path, f"missing required key {key!r}")
    for key, value in data.items():
        types, what = _SCHEMA[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise fail(key, f"must be {what}, got {type(value).__name__} {value!r}")

    def str_list(key: str) -> tuple[str, ...]:
        value = data.get(key, [])
        if not all(isinstance(v, str) for v in value):
            raise fail(key, f"must be {_SCHEMA[key][1]}")
        return tuple(value)

    name = data["name"]
    try:
        check_plain_name(name, "name")
    except InputError as exc:
        raise fail("name", exc.message.removeprefix("name ")) from None
    command = str_list("command")
    if not command:
        raise fail("command", "must not be empty")
    if any("\0" in part for part in command):
        raise fail("command", "must not contain a NUL byte")
    env = data.get("env", {})
    for k, v in env.items():
        if not isinstance(v, str):
            raise fail("env", f"value of {k!r} must be a string, got {type(v).__name__}")
        if not _ENV_NAME.match(k) or "\0" in v:
            raise fail("env", f"{k!r} is not a valid environment variable (name: letters, digits, _; no NUL)")
    metrics_env = data.get("metrics_env", DEFAULT_METRICS_ENV)
    if not _ENV_NAME.match(metrics_env):
        raise fail("metrics_env", f"must be an environment variable name (letters, digits, _), got {metrics_env!r}")
    for key in ("pythonpath", "standards_dir", "step_key", "python", "cwd"):
        values = data.get(key, ())
        if any("\0" in v for v in ([values] if isinstance(values, str) else values)):
            raise fail(key, "must not contain a NUL byte")
    runner_value = data.get("runner", "auto")
    if isinstance(runner_value, str):
        if runner_value != "auto":
            raise fail("runner", f'must be a list of strings or "auto", got {runner_value!r}')
        runner = None
    else:
        try:
            runner = RunnerClass.of(str_list("runner"), what="runner")
        except InputError as exc:
            raise fail("runner", exc.message.removeprefix("runner: ")) from None
    gpus = data.get("gpus_per_run", 0)
    if gpus < 0:
        raise fail("gpus_per_run", "must be 0 or more")
    portable = None
    if "portable" in data:
        portable = PROFILES.get(data["portable"])
        if portable is None:
            raise fail("portable", f"unknown profile {data['portable']!r} (known: {', '.join(sorted(PROFILES))})")
        if gpus > 0:
            raise fail("portable", "is a CPU profile: a card with gpus_per_run > 0 cannot be portable")
        if runner is not None:
            raise fail("portable", "the card also names a runner class (runner): give one of them")
        for key, value in portable.env.items():
            if key in env and env[key] != value:
                raise fail("env", f"{key}={env[key]!r} contradicts portable profile {portable.name} ({key}={value!r})")
    cpus = data.get("cpus_per_run", 1)
    if not 0 < cpus <= 1_000_000:
        raise fail("cpus_per_run", f"must be a positive number of CPUs, got {cpus!r}")
    try:
        timeout = float(data.get("timeout_s", 3600))
    except OverflowError:
        timeout = math.inf
    if not math.isfinite(timeout) or timeout <= 0:
        raise fail("timeout_s", f"must be a positive, finite number of seconds, got {data.get('timeout_s')!r}")
    if data.get("python") == "" or "{" in data.get("python", ""):
        raise fail("python", "must be a path to a Python interpreter (no placeholders)")
    est_time = data.get("est_time")
    if est_time is not None and (abs(est_time) > 1e300 or not math.isfinite(est_time) or est_time < 0):
        raise fail("est_time", f"must be a finite number of seconds, got {est_time!r}")
    return Card(
        path=path,
        name=name,
        command=command,
        env=dict(env),
        metrics_env=metrics_env,
        timeout_s=timeout,
        exclude=str_list("exclude"),
        include=str_list("include"),
        step_key=data.get("step_key"),
        runner=runner,
        gpus_per_run=gpus,
        cpus_per_run=cpus,
        est_time=float(data["est_time"]) if "est_time" in data else None,
        suite=data.get("suite"),
        description=data.get("description", ""),
        pythonpath=str_list("pythonpath"),
        standards_dir=data.get("standards_dir", "standards"),
        approximate=dict(data.get("approximate", {})),
        portable=portable,
        rename=check_rename(path, "rename", data.get("rename", {}), _key_line(text, "rename")),
        python=data.get("python"),
        cwd=data.get("cwd"),
        parity=_parity(data.get("parity"), fail),
    )


def as_card(card: Card | str | Path) -> Card:
    """``card`` itself when it is parsed already (a command parses its card once), else the card at that path."""
    return card if isinstance(card, Card) else load_card(card)


def _parity(value: str | None, fail: Callable[[str, str], InputError]) -> tuple[str, str] | None:
    if value is None:
        return None
    parts = [part.strip() for part in value.split(":")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise fail("parity", f"must be two different process labels, \"A:B\", got {value!r}")
    return parts[0], parts[1]


def _expand(text: str, values: dict[str, str]) -> str:
    # Plain replacement, not str.format: commands may contain other braces.
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def run_argv(card: Card, workdir: Path, metrics: Path, extra_args: tuple[str, ...] = (), python: str | None = None) -> list[str]:
    """The command of one run, placeholders filled, ``extra_args`` appended."""
    values = _placeholders(card, workdir, metrics, python or card.python_path)
    return [_expand(part, values) for part in card.command] + list(extra_args)


def run_env(card: Card, workdir: Path, metrics: Path, index: int, base: dict[str, str] | None = None, python: str | None = None) -> dict[str, str]:
    """The environment of one run: ours, the card's ``env``, metrics path variables, PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    values = _placeholders(card, workdir, metrics, python or card.python_path)
    env.update({k: _expand(v, values) for k, v in card.env.items()})
    if card.portable is not None:  # in every process of the run, and in the probe that names its class
        env.update(card.portable.env)
    env[DEFAULT_METRICS_ENV] = str(metrics)
    env[card.metrics_env] = str(metrics)
    env["DETAUDIT_RUN_INDEX"] = str(index)
    env["DETAUDIT_WORKDIR"] = str(workdir)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if card.pythonpath:
        paths = [str((card.card_dir / p).resolve()) for p in card.pythonpath]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def probe_env(card: Card, gpus: list[str] | None = None, python: str | None = None) -> dict[str, str]:
    """The environment a run of ``card`` gets, without per-run paths: what the runner probe sees.

    ``gpus`` is the CUDA_VISIBLE_DEVICES set one run would get, so the probe counts the GPUs
    a run sees, not the host's.
    """
    env = run_env(card, Path(os.devnull).parent, Path(os.devnull), 0, python=python)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return env


def command_files(card: Card) -> list[Path]:
    """The existing files the card's command names (its script, a config; from the run's folder):
    inputs of every run, so no report of a command that runs the card may be written over them."""
    values = {"python": card.python_path, "card_dir": str(card.card_dir)}
    found = []
    for word in card.command:
        if "{workdir}" in word or "{metrics}" in word or not word:
            continue
        path = Path(_expand(word, values)).expanduser()
        path = path if path.is_absolute() else card.run_cwd / path
        if path.is_file():
            found.append(path)
    return found


def _placeholders(card: Card, workdir: Path, metrics: Path, python: str) -> dict[str, str]:
    return {"python": python, "card_dir": str(card.card_dir), "workdir": str(workdir), "metrics": str(metrics)}


# A file name that is a Python interpreter: python, python3, python3.12, pypy3, python3.13t.
_PYTHON_NAME = re.compile(r"(python|pypy)(\d+(\.\d+)?t?)?\Z")


def command_python(card: Card, env: dict[str, str]) -> str:
    """The Python interpreter a run of ``card`` starts, as a path or a name on ``env``'s PATH.

    ``{python}`` (the card's ``python``, else detaudit's); else the card's ``python`` key; else the
    command's first word when it is a Python interpreter; else the interpreter on the ``#!`` line of
    the script it names (``torchrun``, a console script). ``InputError`` (with the fix) otherwise:
    the probe must not describe an interpreter the run never uses.
    """
    if card.command[0] == "{python}" or card.python is not None:
        return card.python_path
    # The first word as the run gets it: "{card_dir}/venv/bin/python" is that file, not a missing one.
    first = _expand(card.command[0], {"python": card.python_path, "card_dir": str(card.card_dir)})
    program = _on_path(first, card, env)
    if program is None:
        raise InputError(card.path, f"command: {first!r} is not found (from {card.run_cwd}, on the run's PATH), so "
                                    "the Python it starts cannot be probed")
    if _PYTHON_NAME.match(Path(first).name):
        return program
    shebang = _shebang_python(program)
    if shebang is not None:
        resolved = _on_path(shebang, card, env)
        if resolved is not None:
            return resolved
    raise InputError(card.path, f"command: cannot tell which Python {first!r} starts, so the environment a standard "
                                "records (runner class, torch, packages) could be another interpreter's; begin the "
                                'command with "{python}" or a Python interpreter, or name it: python = "PATH"')


def _on_path(program: str, card: Card, env: dict[str, str]) -> str | None:
    """``program`` as a run would find it: a path from the run's folder, or a name on its PATH."""
    if os.sep in program:
        candidate = Path(program).expanduser()
        candidate = candidate if candidate.is_absolute() else card.run_cwd / candidate
        return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None
    return shutil.which(program, path=env.get("PATH", os.defpath))


def _shebang_python(program: str) -> str | None:
    """The Python interpreter a script's ``#!`` line names (directly or through ``env``), else None."""
    try:
        with open(program, "rb") as fh:
            head = fh.read(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]  # env -S python3 -u
    if words and _PYTHON_NAME.match(Path(words[0]).name):
        return words[0]
    return None
