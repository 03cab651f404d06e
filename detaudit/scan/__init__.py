"""scan-rng: a static scanner for global-RNG draws and the processes that run them unseeded.

    from detaudit.scan import scan, ScanConfig
    result = scan(["recipes", "detaudit"], ScanConfig.load())
    for finding in result.findings: ...

Files are parsed with ``ast`` and never imported. Per-file facts are cached by content
hash under ``$XDG_CACHE_HOME/detaudit``, whole results by the files' stats and the settings;
a file whose text holds none of the words a draw, seed, entry point or loader needs joins the
analysis only when a call path leads into it.

Modules, one job each: ``config`` (settings), ``files`` (which files, their text),
``facts`` (one file's facts), ``cache``, ``analysis`` (processes and findings),
``scanner`` (orchestration), ``baseline``, ``rules`` (the rule registry), ``output``.
"""

from __future__ import annotations

from detaudit.scan.baseline import apply_baseline, write_baseline
from detaudit.scan.config import ScanConfig
from detaudit.scan.files import Skipped
from detaudit.scan.rules import RULES
from detaudit.scan.scanner import ScanResult, scan

__all__ = ["RULES", "ScanConfig", "ScanResult", "Skipped", "apply_baseline", "scan", "write_baseline"]
