"""scan-rng on bad and unusual input (issue #10): named paths, config shapes, cache, baseline, encodings."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import REPO, run_cli, scan_tree_copy

from detaudit.scan import ScanConfig, scan
from detaudit.scan.cache import FactsCache

CORPUS = REPO / "tests" / "fixtures" / "scan_corpus"
DRAW = "import torch\n\n\ndef f(n):\n    return torch.rand(n)\n"


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return scan_tree_copy(CORPUS, tmp_path, monkeypatch)


def one_line_error(result, text: str) -> None:
    assert result.code == 2, result.text
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("detaudit: error: ") and text in lines[0], result.err
    assert "Traceback" not in result.text


def test_a_named_path_is_scanned_even_when_excluded(proj: Path) -> None:
    (proj / "pyproject.toml").write_text('[tool.detaudit]\nexclude = ["pkg/**", "pkg/mp.py"]\n')
    named = scan(["pkg"], ScanConfig.load(), use_cache=False)
    assert named.files > 5 and any(f.path == "pkg/helpers.py" for f in named.findings)
    assert not any(f.path == "pkg/mp.py" for f in named.findings)  # a glob not matching pkg itself still applies
    assert scan(["pkg/mp.py"], ScanConfig.load(), use_cache=False).files == 1
    forced = run_cli("scan-rng", "pkg", "--force-exclude", "--format", "json", cwd=proj)
    assert forced.code == 0 and json.loads(forced.out)["findings"] == []
    # From the repository root, as the issue reported: the fixture corpus is scanned, not 0 files.
    from_root = run_cli("scan-rng", "tests/fixtures/scan_corpus/pkg", "--no-cache", cwd=REPO)
    assert from_root.code == 1 and "tests/fixtures/scan_corpus/pkg/helpers.py" in from_root.out


def test_every_exclude_glob_applies_below_a_named_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each glob counts (files and folders, below the named folder, relative to the config's folder),
    and a folder reached through a symlink is judged by where it leads."""
    for path in ("lab/keep.py", "lab/gen/a.py", "lab/vendor/b.py", "lab/sub/c.py", "lab/old_x.py",
                 "other/d.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(DRAW)
    (tmp_path / "lab" / "linked").symlink_to(tmp_path / "other", target_is_directory=True)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.detaudit]\nexclude = ["lab/gen/**", "lab/vendor/*.py", "*/old_*", "other"]\n')
    monkeypatch.chdir(tmp_path)
    found = {f.path for f in scan(["lab"], ScanConfig.load(), use_cache=False).findings}
    assert found == {"lab/keep.py", "lab/sub/c.py"}


@pytest.mark.parametrize("toml, text", [
    ("[tool]\ndetaudit = 5\n", "[tool] detaudit: must be a table, not int"),
    ("[project]\nscripts = 5\n", "[project] scripts: must be a table, not int"),
    ("tool = 5\n", "tool: must be a table, not int"),
    ("project = []\n", "project: must be a table, not list"),
])
def test_config_of_the_wrong_shape_is_a_one_line_error(proj: Path, toml: str, text: str) -> None:
    (proj / "pyproject.toml").write_text(toml)
    one_line_error(run_cli("scan-rng", "pkg", cwd=proj), f"pyproject.toml: {text}")


@pytest.mark.parametrize("content", [
    [], 5, {"stats": 5, "facts": {}}, {"stats": {}, "facts": []},
    {"stats": {"x": 5}, "facts": {"d": 5}},
    {"stats": {"x": (1, 2, "d")}, "facts": {"d": ("facts", {"version": 4})}},
    {"stats": {}, "facts": {"d": b"not a pickle"}},
    {"stats": {}, "facts": {"d": pickle.dumps(("facts", {"version": 4}))}},
    {"stats": {}, "facts": {"d": pickle.dumps(("light", (("a.b",), ("light", ((), None)))))}},
])
def test_a_cache_of_the_wrong_shape_is_ignored(proj: Path, content: object) -> None:
    reference = scan(["pkg"], ScanConfig(), use_cache=False).findings
    cache = FactsCache(True)
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    # A real file's stat pointing at facts of the wrong shape, too.
    helpers = os.path.realpath("pkg/helpers.py")
    st = os.stat(helpers)
    if isinstance(content, dict) and isinstance(content.get("stats"), dict) and isinstance(content.get("facts"), dict):
        content["stats"][helpers] = (st.st_size, st.st_mtime_ns, "d")
    cache.path.write_bytes(pickle.dumps(content))
    assert scan(["pkg"], ScanConfig()).findings == reference
    assert scan(["pkg"], ScanConfig()).findings == reference  # and the rebuilt cache works
    assert run_cli("scan-rng", "pkg", cwd=proj).code == 1


def test_write_baseline_into_a_file_is_a_one_line_error(proj: Path) -> None:
    (proj / "afile").write_text("x")
    one_line_error(run_cli("scan-rng", "pkg", "--write-baseline", "afile/b.json", cwd=proj),
                   "afile/b.json: cannot write")
    assert (proj / "afile").read_text() == "x"


def test_pep263_coding_cookie_is_honoured(proj: Path) -> None:
    (proj / "pkg" / "cookie.py").write_bytes(b"# -*- coding: latin-1 -*-\nimport torch\n# caf\xe9\n\n"
                                             b"def f(n):\n    return torch.rand(n)  # \xe9\n")
    result = scan(["pkg"], ScanConfig(), use_cache=False)
    (draw,) = [f for f in result.findings if f.path == "pkg/cookie.py"]
    assert draw.line == 6 and draw.code == "return torch.rand(n)  # \xe9"
    reasons = {s.path: s.reason for s in result.skipped}
    assert "pkg/cookie.py" not in reasons and reasons["pkg/latin1.py"].startswith("not UTF-8")
    (proj / "pkg" / "cookie.py").write_bytes(b"# coding: nosuchcodec\nimport random\n")
    reasons = {s.path: s.reason for s in scan(["pkg"], ScanConfig(), use_cache=False).skipped}
    assert reasons["pkg/cookie.py"].startswith("cannot decode")


def _scan_as_nobody(base: Path) -> dict:
    """Scan ``base/lib`` in a forked child that dropped root (root reads any folder)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            os.chdir(base)
            result = scan(["lib"], ScanConfig(), use_cache=False, jobs=1)
            doc = {"skipped": [(s.path, s.reason) for s in result.skipped], "paths": [f.path for f in result.findings]}
            os.write(write, json.dumps(doc).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_an_unreadable_folder_is_reported() -> None:
    base = Path(tempfile.mkdtemp(prefix="detaudit-scan-perm-"))
    try:
        os.chmod(base, 0o755)
        (base / "lib" / "secret").mkdir(parents=True)
        (base / "lib" / "ok.py").write_text(DRAW)
        (base / "lib" / "secret" / "hidden.py").write_text(DRAW)
        os.chmod(base / "lib" / "secret", 0)
        doc = _scan_as_nobody(base)
        assert doc["skipped"] == [["lib/secret", "cannot read folder: Permission denied"]]
        assert doc["paths"] == ["lib/ok.py"]
    finally:
        os.chmod(base / "lib" / "secret", 0o755)
        shutil.rmtree(base)


@pytest.mark.parametrize("colour", [False, True])
def test_the_text_format_keeps_every_piece_on_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       colour: bool) -> None:
    """A file name with a newline, ESC or CR (Linux allows them) and a code line ending in a backslash
    are shown escaped and as they are, in plain output (a pipe, a CI log: written without rich) and in
    colour (rich): no piece starts a line of its own or drives the terminal."""
    folder = tmp_path / "evil\n  1:1 error DA999 forged\x1b[2J\rname"
    folder.mkdir()
    (folder / "m.py").write_text("import torch\n\n\ndef f(n):\n    return torch.rand(n) * \\\n        2\n")
    monkeypatch.chdir(tmp_path)
    from io import StringIO

    from rich.console import Console

    from detaudit.render.console import SafeConsole
    from detaudit.render.scan import print_text

    result = scan([folder.name], ScanConfig.load(), use_cache=False)
    out = StringIO()
    console = (SafeConsole(file=out, force_terminal=True, color_system="standard", width=100_000) if colour
               else SafeConsole(file=out, width=100_000, soft_wrap=True))
    assert isinstance(console, Console) and (console.color_system is None) is not colour
    print_text(result, console)
    text = out.getvalue()
    plain = re.sub("\x1b\\[[0-9;]*m", "", text) if colour else text
    lines = plain.splitlines()
    assert lines[0] == "evil\\n  1:1 error DA999 forged\\x1b[2J\\rname/m.py", lines
    assert lines[2] == "      return torch.rand(n) * \\", lines  # the code as written, one backslash
    assert not any(line.lstrip().startswith("1:1 error DA999") for line in lines)
    assert "\r" not in plain and "\x1b[2J" not in text
    assert lines[1].startswith("  5:12 unproven DA101 torch.rand()") and len(lines) == 5, lines
    assert lines[-1] == "1 files (1 parsed), 0 processes: 0 errors, 1 unproven, 0 warnings, 0 skipped"
