"""Entry points outside the pipeline: a module's self-test block and a stand-alone tool.

A ``__main__`` block starts a pipeline process unless the tree shows otherwise. It shows otherwise,
and the process is judged like a test (its unseeded draws are warnings, errors with
``--tests-as-pipeline``), only when nothing of the tree launches the script (no launch file holds
its file name ``rewards.py``, its dotted name ``pkg.rewards`` or ``folder.rewards``, or
``-m rewards``; no string of the code does: ``subprocess.run(["python", "pkg/rewards.py"])``,
``runpy.run_module("pkg.rewards")``) and either:

- **self-test**: a *launched* entry's process loads the module (an entry a launch file names, or
  a console script): the pipeline uses it as a library, and its own ``__main__`` block is a demo or
  self-test that no launch runs (flow_grpo's ``flow_grpo/rewards.py``, which the launched training
  scripts import, ends in one). Without a launched entry in the tree nothing is a self-test; or
- **stand-alone tool**: the script imports nothing but the standard library and data or
  command-line libraries (``TOOL_LIBRARIES``: HF datasets, PIL, tqdm, requests, ...), none of the
  tree's modules, and loads no code by name (``__import__``, ``importlib``, ``runpy``, ``exec``):
  it cannot run a model or the pipeline's code. A data-preparation script whose output a run reads
  (flow_grpo's ``dataset/merge_genevaltask.py``). Any other import keeps it an entry.

Launch files: shell and batch scripts (``.sh``, ``.bash``, ``.slurm``, ``.sbatch``, ``.sub``,
``.pbs``, ``.job``, executable files without a suffix), config files (YAML, JSON, TOML, INI,
CFG), docs (Markdown, reST, ``.txt``), notebooks, Makefile, Dockerfile, Procfile, justfile,
Jenkinsfile; files under ``[tool.detaudit] exclude`` are not read. A package's ``__main__.py`` is
always an entry. Ray tasks, actors and classes defined inside such a block share its verdict.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from detaudit.scan.analysis import Program
from detaudit.scan.evidence import loaded_modules

if TYPE_CHECKING:
    from detaudit.scan.processes import Process

# Libraries a stand-alone tool may import besides the standard library: data, I/O and command-line
# libraries, none of which can build or run a model. Anything else (torch, mlx, paddle, a package
# of the tree installed under another name, ...) keeps the script an entry.
TOOL_LIBRARIES = frozenset({
    "datasets", "PIL", "tqdm", "requests", "yaml", "pyarrow", "jsonlines", "orjson", "ujson", "simplejson",
    "huggingface_hub", "fire", "click", "typer", "rich", "tabulate", "inflect", "dotenv",
})
_STDLIB = frozenset(sys.stdlib_module_names) - {"importlib", "runpy", "code", "imp", "pkgutil", "zipimport"}
# Text that loads code by name: a script holding it may run the pipeline's code.
_LOADS_BY_NAME = (b"__import__", b"import_module", b"runpy", b"exec(", b"eval(", b"spec_from_file_location")

LAUNCH_SUFFIXES = (".md", ".rst", ".txt", ".ipynb", ".bash", ".zsh", ".slurm", ".sbatch", ".sub", ".pbs", ".job",
                   ".qsub", ".lsf")
LAUNCH_NAMES = frozenset({"Makefile", "makefile", "GNUmakefile", "Dockerfile", "Containerfile", "Procfile",
                          "justfile", "Jenkinsfile"})


def is_launch_file(name: str, path: str) -> bool:
    """A file (besides the config files scan-rng reads) that may launch a script: see the module doc."""
    if name.endswith(LAUNCH_SUFFIXES) or name in LAUNCH_NAMES:
        return True
    return "." not in name and os.access(path, os.X_OK) and os.path.isfile(path)


class Outside:
    """Which ``__main__`` blocks lie outside the pipeline, and why (see the module doc).

    ``launched(words)``: which of ``words`` a launch file or a string of the tree's non-test code
    holds as a word; ``imported``: the import lists of the files that did not join the analysis.
    """

    def __init__(self, program: Program, launched: Callable[[set[str]], set[str]], imported: dict[str, list[str]],
                 rel: Callable[[str], str] | None = None) -> None:
        self.program = program
        self.launched = launched
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
            elif program.functions.get(process.target, {}).get("in_main") or \
                    program.classes.get(process.target, {}).get("in_main"):
                by_module.setdefault(program.module_of.get(process.target, ""), []).append(process)
        mains = {m for m, ps in by_module.items() if any(p.kind == "main" for p in ps)}
        launched = {m for m in mains if self._launched(m)}
        anchors = [p for m in sorted(launched) for p in by_module[m] if p.kind == "main"]
        anchors += [p for p in processes if p.kind == "script" and not p.is_test]
        loads = loaded_modules(program, {program.module_of[f] for p in anchors for f in p.reach
                                         if f in program.module_of}, self.imported) if anchors else set()
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

    def _launched(self, module: str) -> bool:
        """Something of the tree launches the script of module key ``module`` (see the module doc)."""
        program = self.program
        name = program.dotted_name(module)
        path = program.paths.get(module, "")
        if not path or name.rpartition(".")[2] == "__main__":
            return True  # `python -m pkg` runs a package's __main__.py
        file_name = os.path.basename(path)
        # a bare module name alone ("rewards") would match any word, so dotted forms are searched
        stem = file_name[:-3] if file_name.endswith(".py") else file_name
        folder = os.path.basename(os.path.dirname(path))
        words = {file_name, f"-m {name}", f"{folder}.{stem}"} | ({name} if "." in name else set())
        return bool(self.launched(words))

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
                return ""  # a stdlib-named module of the tree (a local `data.py`)
        try:
            with open(path, "rb") as file:
                text = file.read()
        except OSError:
            return ""
        if any(word in text for word in _LOADS_BY_NAME):
            return ""
        return (f"a stand-alone tool: {self.rel(path)} imports only the standard library and data libraries, "
                f"nothing of the tree, and nothing launches it")
