"""scan-rng: a static scanner for global-RNG draws and the processes that run them unseeded.

    from detaudit.scan import scan, ScanConfig
    result = scan(["recipes", "detaudit"], ScanConfig.load())
    for finding in result.findings: ...

Files are parsed with ``ast`` and never imported. Per-file facts are cached by content
hash under ``$XDG_CACHE_HOME/detaudit``, whole results by the files' stats and the settings;
a file whose text holds none of the words a draw, seed, entry point or loader needs joins the
analysis only when a call path leads into it.

Modules, one job each (no import circle among them):

- settings and input: ``config`` (``[tool.detaudit]``), ``files`` (which files, their module
  names and text), ``entries`` (what starts a process), ``rules`` (the rule registry: one ``Rule``
  record per rule; ``completion_order``: DA401's matcher, too large for a record), ``seeds`` (the
  seeding calls), ``conditions`` (conditions over parameters);
- one file: ``schema`` (the facts' shape, markers and version), ``facts`` (``file_facts``,
  assembled from the layers ``facts_base``, ``facts_calls``, ``facts_seeding``, ``facts_draws``,
  ``facts_walk``), ``impact`` (where a drawn value goes), ``cache``;
- the whole tree: ``analysis.Program`` (composed of ``program_names``, ``program_dispatch``,
  ``program_calls``, ``program_seeding``), ``processes``, ``outside`` (self-tests and stand-alone
  tools), ``evidence`` and ``modes`` (draws no process is seen to make), ``findings`` (verdicts);
- ``scanner`` (orchestration), ``baseline``. Its outputs (text, JSON, SARIF, GitHub, CI cases) are
  rendered with every other output, in ``detaudit.render.scan``.
"""

from __future__ import annotations

from detaudit.scan.baseline import apply_baseline, write_baseline
from detaudit.scan.config import ScanConfig
from detaudit.scan.files import Skipped
from detaudit.scan.rules import RULES
from detaudit.scan.scanner import ScanResult, scan

__all__ = ["RULES", "ScanConfig", "ScanResult", "Skipped", "apply_baseline", "scan", "write_baseline"]
