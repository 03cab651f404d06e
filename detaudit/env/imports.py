"""Which packages a card's own code imports: the ones (besides torch, CUDA and numpy) whose
versions can change its bits, so an environment difference names them first.

Read statically (``ast``, nothing is imported): the script the command runs (``python train.py``)
or the module it runs with ``-m`` (a package: its files, at most ``MAX_FILES``), found from the
run's folder and the card's ``pythonpath``. Only top-level names of absolute imports are kept;
the card's own modules are left out by the caller's comparison with installed packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

from detaudit.data.card import Card

MAX_FILES = 400
MAX_FILE_BYTES = 2 << 20


def card_imports(card: Card) -> set[str]:
    """Top-level module names the card's script or ``-m`` module imports (empty when not found)."""
    names: set[str] = set()
    for path in _sources(card):
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _sources(card: Card) -> list[Path]:
    """The files of the code the command runs: a ``.py`` argument, or the ``-m`` module's file(s)."""
    roots = [card.run_cwd, *((card.card_dir / p).resolve() for p in card.pythonpath)]
    words = list(card.command)
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words):
            parts = words[i + 1].split(".")
            for root in roots:
                package = root.joinpath(*parts)
                if package.is_dir():
                    return sorted(package.rglob("*.py"))[:MAX_FILES]
                module = package.with_suffix(".py")
                if module.is_file():
                    return [module]
            return []
        if word.endswith(".py"):
            script = Path(word)
            script = script if script.is_absolute() else card.run_cwd / script
            return [script] if script.is_file() else []
    return []
