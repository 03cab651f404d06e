"""Entry points outside the pipeline: a module's self-test block and a stand-alone tool.

A ``__main__`` block starts a pipeline process unless the tree shows otherwise. It shows otherwise,
and the process is judged like a test (its unseeded draws are warnings, errors with
``--tests-as-pipeline``), only when the tree has a launched entry, nothing of the tree launches
the script (no launch file holds its file name ``rewards.py``, its dotted name ``pkg.rewards`` or
``folder.rewards``, or ``-m rewards``; no string of the code does, tests' and docstrings included,
anywhere in the string: ``subprocess.run("torchrun -m pkg.rewards --cfg a.yaml", shell=True)``,
``runpy.run_module("pkg.rewards")``, ``["python", "-m", "rewards"]``, an f-string as a template),
and either:

- **self-test**: a *launched* entry's process loads the module (an entry something launches, or a
  console script): the pipeline uses it as a library, and its own ``__main__`` block is a demo or
  self-test that no launch runs (flow_grpo's ``flow_grpo/rewards.py``, which the launched training
  scripts import, ends in one); or
- **stand-alone tool**: the script imports nothing but the standard library and data or
  command-line libraries (``TOOL_LIBRARIES``: HF datasets, PIL, tqdm, requests, ...), none of the
  tree's modules, loads no code by name (``__import__``, ``importlib``, ``runpy``, ``exec``,
  ``pickle`` and its kin) and starts no program (``subprocess``, ``os.system``,
  ``multiprocessing``): it cannot run a model or the pipeline's code, nor pick a run's seed. A
  data-preparation script whose output a run reads (flow_grpo's ``dataset/merge_genevaltask.py``).
  Any other import keeps it an entry.

Launch files are every file of the scanned folders that is not Python (excluded folders and
``build``/``dist`` folders included): a regular file with no NUL byte in its first 8 KiB (UTF-16/32
text with its byte-order mark is read as text), at most ``MAX_LAUNCH_BYTES`` (1 MiB; larger
text is data; a notebook up to 16 MiB), and not a data or lock file (``DATA_SUFFIXES``: ``.csv``,
``.jsonl``, ``uv.lock``, images, weights), read one at a time. Besides the words above, ``-m`` or
``--module`` followed by the name across spaces, quotes, commas or a line continuation (or
nothing: ``-mpkg.train``) counts, and a script path or module name built from a variable
(``python scripts/train_${ALGO}.py``, ``$(SCRIPT).py``, ``-m $(PKG).train``) launches every
script or module its pattern matches. The code's command-line strings are searched the same way. A package's ``__main__.py`` is always an entry. Ray tasks, actors and classes
defined inside such a block share its verdict.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Sequence

from detaudit.scan.analysis import Program
from detaudit.scan.evidence import loaded_modules
from detaudit.scan.processes import Process
from detaudit.scan.rules import FAMILY
from detaudit.scan.schema import NO_CLASS, NO_FUNCTION

# Libraries a stand-alone tool may import besides the standard library: data, I/O and command-line
# libraries, none of which can build or run a model. Anything else (torch, mlx, paddle, a package
# of the tree installed under another name, ...) keeps the script an entry.
TOOL_LIBRARIES = frozenset({
    "datasets", "PIL", "tqdm", "requests", "yaml", "pyarrow", "jsonlines", "orjson", "ujson", "simplejson",
    "huggingface_hub", "fire", "click", "typer", "rich", "tabulate", "inflect", "dotenv",
})
_STDLIB = frozenset(sys.stdlib_module_names) - {"importlib", "runpy", "code", "imp", "pkgutil", "zipimport"}
# Text that loads code by name or starts a program: a script holding it may run the pipeline's code
# or choose what a run does (`subprocess.run(["python", "train.py", f"--seed={random.randint(...)}"])`).
_LOADS_BY_NAME = (b"__import__", b"import_module", b"runpy", b"exec(", b"eval(", b"spec_from_file_location",
                  b"subprocess", b"os.system", b"os.exec", b"os.spawn", b"os.popen", b"multiprocessing", b"pickle",
                  b"shelve", b"marshal", b"dill", b"joblib")

MAX_LAUNCH_BYTES = 1024 * 1024  # a larger text file is data (prompt lists, captions), not a launch
MAX_NOTEBOOK_BYTES = 16 * 1024 * 1024  # a notebook's outputs (images) make it large
# Files that hold data or pinned dependencies, never a command line: not read.
DATA_SUFFIXES = (".lock", ".csv", ".tsv", ".jsonl", ".parquet", ".arrow", ".npy", ".npz", ".pt", ".pth", ".bin",
                 ".safetensors", ".ckpt", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg", ".mp4", ".wav", ".sig",
                 ".pem", ".pkl", ".gz", ".zip", ".tar", ".so", ".pyd", ".dll", ".dylib", ".o", ".a", ".pyc", ".lib")
# -m NAME across spaces, quotes, commas, brackets, YAML list dashes or a line continuation, or none
# (`python3 -mpkg.train`). Not preceded by a letter, digit, `_` or `-`: that test comes after the
# leading "-" (a look-behind over it), so the pattern starts with a literal and the regex engine
# skips to each "-" at C speed instead of trying the look-behind at every byte (~15x on launch files).
_MODULE_FLAG = rb"-(?<![A-Za-z0-9_-]-)(?:m|-module)(?:\s|[\"',\[\]]|\s-\s|\\\n)*"
# -m with a module name built from a variable: `python -m $(PKG).train`, `-m "$MODULE"`
_MODULE_TEMPLATE = re.compile(_MODULE_FLAG + rb"([A-Za-z0-9_.-]*\$[A-Za-z0-9_.${}()-]*)")
# a script name built from a shell or make variable: train_${ALGO}.py, $(SCRIPT).py (the part after
# the last `/`; what precedes the `$` in the name is taken back from the text)
_TEMPLATE = re.compile(rb"\$[{(]?[A-Za-z_][A-Za-z0-9_]*[})]?[A-Za-z0-9_.${}()-]*?\.py(?![A-Za-z0-9_])")
_VARIABLE = re.compile(r"\$[{(]?[A-Za-z_][A-Za-z0-9_]*[})]?")
# Words, file names and dotted names: the runs of letters, digits, `_` and `.`, less leading dots.
# Found by mapping every other byte to a space and splitting (C speed; twice a regex's).
_TOKEN_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_."
_NOT_TOKEN = bytes(b for b in range(256) if b not in _TOKEN_BYTES)
_TOKENS_APART = bytes.maketrans(_NOT_TOKEN, b" " * len(_NOT_TOKEN))
_WIDE_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # the UTF-32 marks start with these too
_WORD_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_NAME_BYTES = _WORD_BYTES | frozenset(b".-")


def launch_file_stats(paths: list[str]) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of the regular files of ``paths`` that may hold a launch (no FIFO,
    device or folder; at most MAX_LAUNCH_BYTES; no data file, by its suffix, which is told before
    a stat is spent on it); whether they are text is checked when read."""
    out = []
    for path in dict.fromkeys(paths):
        if path.endswith(DATA_SUFFIXES):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        limit = MAX_NOTEBOOK_BYTES if path.endswith(".ipynb") else MAX_LAUNCH_BYTES
        if stat.S_ISREG(st.st_mode) and st.st_size <= limit:
            out.append((path, st.st_size, st.st_mtime_ns))
    return out


class Launches:
    """What the launch files and the code's strings launch: one pass over the files (one at a time,
    so memory stays bounded by the largest) for every script asked about at once."""

    def __init__(self, files: list[tuple[str, int, int]], code_strings: set[str]) -> None:
        self.files = [path for path, _, _ in files]
        self.code_strings = code_strings
        # only these can hold a command line
        self.script_strings = sorted(s for s in code_strings if ".py" in s or "-m" in s)

    def launched(self, scripts: dict[str, tuple[str, str, str]]) -> set[str]:
        """Which of ``scripts`` (module key -> (file name, dotted name, folder)) something launches."""
        words: dict[bytes, set[str]] = {}  # a word that launches -> the modules it launches
        flags: dict[str, set[str]] = {}  # a module name after -m -> its modules
        found: set[str] = set()
        for module, (file_name, name, folder) in sorted(scripts.items()):
            stem = file_name[:-3] if file_name.endswith(".py") else file_name
            # a bare module name alone ("rewards") would match any word: dotted forms are searched
            for text in {file_name, f"{folder}.{stem}"} | ({name} if "." in name else set()):
                words.setdefault(text.encode(), set()).add(module)
            flags.setdefault(name, set()).add(module)
            # the code's own strings: runpy.run_module("pkg.train"), ["python", "-m", "train"], "pkg.train"
            if ({f"-m {name}", file_name} | ({name} if "." in name else set())) & self.code_strings:
                found.add(module)
        stems = {w.rpartition(b".")[0] if w.endswith(b".py") else w.rpartition(b".")[2] for w in words}
        word_set = set(words)
        flag_names = b"|".join(re.escape(n.encode()) for n in sorted(flags, key=len, reverse=True))
        flag_pattern = re.compile(_MODULE_FLAG + rb"(" + flag_names + rb")(?![A-Za-z0-9_])") if flags else None
        templates: set[str] = set()
        module_templates: set[str] = set()
        # The code's command lines (a launcher's subprocess string, a docstring's "Usage: python -m
        # pkg.train", an f-string with ${_} for what it formats) are searched like one more launch file.
        code_text = "\n".join(self.script_strings).encode("utf-8", "replace")
        for data in self._texts(code_text):
            for word in _tokens(data, stems) & word_set:
                found |= words[word]
            if b"-m" in data or b"--module" in data:
                if flag_pattern is not None:
                    for match in flag_pattern.finditer(data):
                        found |= flags.get(match.group(1).decode(), set())
                if b"$" in data:
                    module_templates.update(m.group(1).decode("utf-8", "replace") for m in _MODULE_TEMPLATE.finditer(data))
            if b"$" in data and b".py" in data:
                for match in _TEMPLATE.finditer(data):
                    start = match.start()
                    while start > 0 and data[start - 1] in _NAME_BYTES:
                        start -= 1
                    templates.add(data[start:match.end()].decode("utf-8", "replace"))
        for template in sorted(templates):  # train_${ALGO}.py launches every train_*.py
            pattern = _pattern(template)
            found |= {module for module, (file_name, _, _) in scripts.items() if pattern.fullmatch(file_name)}
        for template in sorted(module_templates):  # -m $(PKG).train launches every *.train
            pattern = _pattern(template)
            found |= {module for module, (file_name, name, folder) in scripts.items()
                      if pattern.fullmatch(name) or pattern.fullmatch(f"{folder}.{file_name[:-3]}")}
        return found

    def _texts(self, code_text: bytes) -> Iterator[bytes]:
        """The code's command lines, then each launch file's text, one at a time."""
        if code_text:
            yield code_text
        for path in self.files:
            data = _text(path)
            if data:
                yield data


def _pattern(template: str) -> re.Pattern[str]:
    """A template with variables (``train_${ALGO}.py``, ``$(PKG).train``) as a regex: a variable matches anything."""
    return re.compile(".*".join(re.escape(part) for part in _VARIABLE.split(template)))


def _tokens(data: bytes, stems: set[bytes]) -> set[bytes]:
    """The words of a text as a launch names a script: ``train.py`` in ``scripts/train.py``,
    ``pkg.train`` in ``-m pkg.train``; a dotted word with one of ``stems`` among its parts adds its
    dot-separated prefixes and suffixes (``pkg.train.main`` holds ``pkg.train``, ``x.train.py``
    holds ``train.py``)."""
    tokens = set(data.translate(_TOKENS_APART).split())
    dotted = []
    for token in [t for t in tokens if b"." in t]:
        if token[0] == 46:  # a run that starts with ".": its word starts at its first letter, digit or `_`
            tokens.discard(token)
            token = token.lstrip(b".")
            if not token:
                continue
            tokens.add(token)
            if b"." not in token:
                continue
        dotted.append(token)
    if stems.isdisjoint(b".".join(dotted).split(b".")):
        return tokens  # no dotted word has a script's name among its parts (the common file)
    for token in dotted:
        parts = token.strip(b".").split(b".")
        if stems.isdisjoint(parts):
            continue  # `actor.optim.lr`: no script's name in it
        for end in range(1, len(parts)):
            tokens.add(b".".join(parts[:end]))
            tokens.add(b".".join(parts[end:]))
    return tokens


def _text(path: str) -> bytes:
    """A launch file's bytes (UTF-16/32 text with its byte-order mark as UTF-8), or b"" for one that
    is not text (a NUL byte in its first 8 KiB and no such mark), not
    a regular file (a FIFO, a device behind a symlink), too large, or unreadable."""
    limit = MAX_NOTEBOOK_BYTES if path.endswith(".ipynb") else MAX_LAUNCH_BYTES
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the scan
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        with os.fdopen(fd, "rb", closefd=False) as file:
            head = file.read(8192)
            wide = head.startswith(_WIDE_BOMS)  # UTF-16/32 text (PowerShell's default): NUL bytes, yet text
            if b"\0" in head and not wide:
                return b""  # a binary: weights, an archive, an image
            data = head + file.read(limit + 1 - len(head))
    except OSError:
        return b""
    finally:
        os.close(fd)
    if len(data) > limit:
        return b""
    if wide:
        encoding = "utf-32" if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)) else "utf-16"
        return data.decode(encoding, "replace").encode("utf-8")
    return data


def holds_word(data: bytes, word: bytes) -> bool:
    """``word`` occurs in ``data`` with no letter, digit or underscore right before or after it."""
    start = data.find(word)
    while start >= 0:
        end = start + len(word)
        if (start == 0 or data[start - 1] not in _WORD_BYTES) and (end == len(data) or data[end] not in _WORD_BYTES):
            return True
        start = data.find(word, start + 1)
    return False


class Outside:
    """Which ``__main__`` blocks lie outside the pipeline, and why (see the module doc).

    ``launches``: what the tree launches; ``imported``: the import lists of the files that did not
    join the analysis.
    """

    def __init__(self, program: Program, launches: Launches, imported: dict[str, list[str]],
                 rel: Callable[[str], str] | None = None) -> None:
        self.program = program
        self.launches = launches
        self.imported = imported
        self.rel = rel or os.path.basename

    def judge(self, processes: Sequence[Process]) -> None:
        """Marks the processes of ``__main__`` blocks outside the pipeline (and those defined inside
        them): ``outside`` says why, and they count as tests."""
        program = self.program
        by_module: dict[str, list[Process]] = {}
        for process in processes:
            if process.is_test:
                continue
            if process.kind == "main":
                by_module.setdefault(process.target.rsplit(".", 1)[0], []).append(process)
            elif program.functions.get(process.target, NO_FUNCTION).get("in_main") or \
                    program.classes.get(process.target, NO_CLASS).get("in_main"):
                by_module.setdefault(program.module_of.get(process.target, ""), []).append(process)
        mains = {m for m, ps in by_module.items() if any(p.kind == "main" for p in ps)}
        drawn: dict[str, set[str]] = {}  # function -> the RNG families its draws take from
        for facts in program.modules.values():
            for draw in facts["draws"]:
                drawn.setdefault(draw["function"], set()).add(FAMILY.get(draw["rule"]) or "")
        if not any(families - (p.seeded or set()) for m in mains for p in by_module[m]
                   for function in p.reach & drawn.keys() for families in [drawn[function]]):
            return  # no __main__ runs a draw of a family it leaves unseeded: where it stands changes no finding
        scripts = {}
        launched = set()
        for module in mains:
            name, path = program.dotted_name(module), program.paths.get(module, "")
            if not path or name.rpartition(".")[2] == "__main__":
                launched.add(module)  # `python -m pkg` runs a package's __main__.py
            else:
                scripts[module] = (os.path.basename(path), name, os.path.basename(os.path.dirname(path)))
        if scripts:
            launched |= self.launches.launched(scripts)
        anchors = [p for m in sorted(launched) for p in by_module[m] if p.kind == "main"]
        anchors += [p for p in processes if p.kind == "script" and not p.is_test]
        if not anchors:
            return  # nothing shows what the pipeline is: every __main__ stays an entry
        loads = loaded_modules(program, {program.module_of[f] for p in anchors for f in p.reach
                                         if f in program.module_of}, self.imported)
        for module in sorted(mains - launched):
            if module in loads:
                shown = ", ".join(sorted(p.name for p in anchors)[:2]) + (" ..." if len(anchors) > 2 else "")
                why = (f"the self-test block of {self.rel(program.paths.get(module, module))}, a module the "
                       f"launched entries ({shown}) load; nothing launches it")
            else:
                why = self._tool(module)
            for process in by_module[module] if why else ():
                process.outside = why
                process.is_test = True

    def _tool(self, module: str) -> str:
        """Why module key ``module``'s script is a stand-alone tool, or ''."""
        program = self.program
        facts = program.modules.get(module)
        path = program.paths.get(module, "")
        if facts is None or not path:
            return ""
        root = program.root_of.get(module)
        for imported in facts.get("imported", ()):
            head = imported.partition(".")[0]
            if head not in _STDLIB and head not in TOOL_LIBRARIES:
                return ""
            if program.may_name_module(imported) and program.module_key(head, root) not in (None, module):
                return ""  # a stdlib-named module of the tree (a local `trace.py`)
        try:
            with open(path, "rb") as file:
                text = file.read()
        except OSError:
            return ""
        if any(word in text for word in _LOADS_BY_NAME):
            return ""
        return (f"a stand-alone tool: {self.rel(path)} imports only the standard library and data libraries, "
                f"nothing of the tree, starts no program, and nothing launches it")
