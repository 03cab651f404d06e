"""Entry points outside the pipeline: a module's self-test block and a stand-alone tool.

A ``__main__`` block starts a pipeline process unless the tree shows otherwise. It shows otherwise,
and the process is judged like a test (its unseeded draws are warnings, errors with
``--tests-as-pipeline``), when no launch file of the tree names the script (a shell script, a
YAML/JSON/TOML/INI config, Markdown or reST docs, a Makefile or Dockerfile holding its file name
``rewards.py``, its dotted name ``pkg.rewards`` or ``folder.rewards``, or ``-m rewards``) and either:

- **self-test**: other non-test code of the tree imports the module. The pipeline uses it as a
  library; its ``__main__`` block is the module's own demo or self-test (flow_grpo's
  ``flow_grpo/rewards.py``, which the training scripts import, ends in one); or
- **stand-alone tool**: the script imports no module of the scanned tree and no training,
  rollout or array framework (``FRAMEWORKS``), so it cannot run the pipeline's code: a
  data-preparation or maintenance script whose output a run reads (flow_grpo's
  ``dataset/merge_genevaltask.py``, which built a committed data file).

A launch file that names the script puts it back in the pipeline: a run that regenerates its data
with ``python dataset/prep.py`` before training is seen to run it. A package's ``__main__.py`` is
always an entry (``python -m pkg`` runs it). Ray tasks, actors and multiprocessing targets defined
inside such a block share its verdict.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from detaudit.scan.analysis import Program, display_name

# Import heads that make a script able to train, roll out or compute on arrays: a script that
# imports one of them may be (a part of) the pipeline even when it imports nothing of the tree.
FRAMEWORKS = frozenset({
    "torch", "torchvision", "torchaudio", "numpy", "jax", "jaxlib", "flax", "optax", "tensorflow", "keras", "ray",
    "transformers", "diffusers", "accelerate", "deepspeed", "peft", "trl", "vllm", "sglang", "megatron",
    "lightning", "pytorch_lightning", "apex", "xformers", "flash_attn", "triton", "cupy", "sklearn", "scipy",
    "pandas", "gymnasium", "gym",
})
# Files beside the code that may launch a script (besides the config files scan-rng reads).
LAUNCH_SUFFIXES = (".md", ".rst")
LAUNCH_NAMES = frozenset({"Makefile", "makefile", "GNUmakefile", "Dockerfile", "Procfile", "justfile"})


class Outside:
    """Which modules' ``__main__`` blocks lie outside the pipeline, and why (see the module doc).

    ``launched(words)``: which of ``words`` a launch file of the tree holds as a word;
    ``imported``: the import lists of the files that did not join the analysis; ``test_modules``:
    module keys of test code (their imports make no module a library of the pipeline).
    """

    def __init__(self, program: Program, launched: Callable[[set[str]], set[str]] | None,
                 imported: dict[str, list[str]], rel: Callable[[str], str] | None = None) -> None:
        self.program = program
        self.launched = launched
        self.imported = imported
        self.rel = rel
        self._reasons: dict[str, str] = {}
        self._importers: dict[str, str] | None = None  # set once the import lists below are gathered
        self._lists: list[tuple[str, Any]] = []  # (module key, the names its imports name) of every file

    def reason(self, module: str) -> str:
        """Why the ``__main__`` block of module key ``module`` is not a pipeline entry, or ''."""
        known = self._reasons.get(module)
        if known is None:
            known = self._reasons[module] = self._reason(module)
        return known

    def _reason(self, module: str) -> str:
        program = self.program
        name = program.dotted_name(module)
        path = program.paths.get(module, "")
        if self.launched is None or not path or name.rpartition(".")[2] == "__main__":
            return ""
        file_name = os.path.basename(path)
        # `python x/rewards.py`, `python -m pkg.rewards`; a bare module name alone ("rewards") would
        # match any config word, so a dotted form is searched: the name, or folder.stem
        stem = file_name[:-3] if file_name.endswith(".py") else file_name
        folder = os.path.basename(os.path.dirname(path))
        words = {file_name, f"-m {name}", f"{folder}.{stem}"} | ({name} if "." in name else set())
        if self.launched(words):
            return ""
        shown = self.rel(path) if self.rel else file_name
        importer = self._importer_of(module)
        if importer:
            by = program.paths.get(importer, "")
            return (f"the self-test block of {shown}, which {self.rel(by) if self.rel and by else display_name(importer)} "
                    f"imports; no launch file names {file_name}")
        names = program.modules.get(module, {}).get("imported", [])
        root = program.root_of.get(module)
        for imported in names:
            head = imported.partition(".")[0]
            if head in FRAMEWORKS:
                return ""
            if program.may_name_module(imported):
                parts = imported.split(".")
                for end in range(1, len(parts) + 1):
                    key = program.module_key(".".join(parts[:end]), root)
                    if key is not None and key != module:
                        return ""
        return (f"a stand-alone tool: {shown} imports no module of the tree and no framework that could run "
                f"the pipeline, and no launch file names it")

    def _importer_of(self, module: str) -> str:
        """A non-test module other than ``module`` whose imports name it (or a name in it), or ''.

        Only imported names whose last or second-last part is the module's own last name are
        resolved (``import pkg.rewards``, ``from pkg.rewards import f``, ``from pkg import rewards``),
        each from the importing file's root (namespace packages and shared names included)."""
        program = self.program
        if self._importers is None:
            self._importers = {}
            self._lists = [(m, facts.get("imported", ())) for m, facts in program.modules.items()]
            self._lists += sorted(self.imported.items())
        short = program.dotted_name(module).rpartition(".")[2]
        for importer, names in self._lists:
            if importer == module or importer in program.test_modules:
                continue
            root = program.root_of.get(importer)
            for imported in names:
                parts = imported.split(".")
                if short not in parts[-2:] or not program.may_name_module(imported):
                    continue
                for end in (len(parts), len(parts) - 1):
                    if end and program.module_key(".".join(parts[:end]), root) == module:
                        return importer
        return ""
