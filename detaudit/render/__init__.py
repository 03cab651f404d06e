"""Outputs: results in, every report out. ``emit`` is the one step that writes a command's
outcome (CI reports from ``ci/``, the text or ``--json`` on stdout from ``stdout`` and the
per-command modules, the ``--html`` page from ``html/``), fed by the result objects alone;
``escapes`` keeps every name one line in every one of them. Nothing here runs anything or decides
a verdict. The same result renders to the same bytes."""
