"""Every path a command writes (a report, a standard, a baseline, the step summary) is checked with
its inputs before anything runs: never an input of the same command, another output of it, a
directory, a device, a FIFO, a folder it cannot write in, or a path under a regular file; the
files it refuses stay as they were, and no report of the refusal is written over them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from conftest import run_cli, write_card
from detaudit.errors import UsageError
from detaudit.fileio import OutputPaths, OutputRefused

UNWRITABLE = Path("/proc/1")  # a folder no user, root included, may create files in


def metrics_and_standard(tmp_path: Path) -> tuple[Path, Path]:
    metrics = tmp_path / "run.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "loss": 1.0 + s}) + "\n" for s in range(3)))
    standard = tmp_path / "std.json"
    standard.write_text(json.dumps({"metrics": {"loss": [[s, 1.0 + s] for s in range(3)]}}))
    return metrics, standard


def null_device(tmp_path: Path) -> Path:
    """A character device to refuse. As root, a node of its own (major 1, minor 3, as /dev/null) in
    ``tmp_path``: if the check ever let it through, the machine's /dev/null would be replaced by a
    regular file for everyone; as another user, /dev/null itself, which that user cannot replace."""
    if os.geteuid() != 0:
        return Path("/dev/null")
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return device


def _refused(result: object, path: Path, why: str) -> None:
    code, err = result.code, result.err  # type: ignore[attr-defined]
    assert code == 2, result
    assert err.startswith(f"detaudit: error: {path}: ") and why in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_report_is_never_written_over_what_the_command_reads(tmp_path: Path) -> None:
    metrics, standard = metrics_and_standard(tmp_path)
    before = {p: p.read_bytes() for p in (metrics, standard)}
    verify = ("verify", "--metrics", str(metrics), "--standard", str(standard))
    for option, target in (("--junit-xml", standard), ("--html", standard), ("--junit-xml", metrics),
                           ("--html", metrics)):
        result = run_cli(*verify, option, str(target), "--overwrite-html" if option == "--html" else "--json")
        _refused(result, target, "which this command reads")
        assert {p: p.read_bytes() for p in before} == before  # nor the JUnit report of this error
    link = tmp_path / "link.xml"
    link.symlink_to(standard)  # another name for the same file
    _refused(run_cli(*verify, "--junit-xml", str(link)), link, "which this command reads")
    hard = tmp_path / "hard.xml"
    os.link(standard, hard)
    _refused(run_cli(*verify, "--junit-xml", str(hard)), hard, "which this command reads")
    # the step summary too: GITHUB_STEP_SUMMARY naming the standard
    result = run_cli(*verify, env={"GITHUB_STEP_SUMMARY": str(standard)})
    _refused(result, standard, "which this command reads")
    assert {p: p.read_bytes() for p in before} == before
    # diff, standard diff, standard convert
    _refused(run_cli("diff", str(metrics), str(metrics), "--html", str(metrics), "--overwrite-html"), metrics,
             "a metrics file it compares")
    _refused(run_cli("standard", "diff", str(standard), str(standard), "--html", str(standard), "--overwrite-html"),
             standard, "OLD")
    _refused(run_cli("standard", "convert", str(standard), str(standard), "--format", "detaudit", "--overwrite"),
             standard, "SOURCE")
    assert {p: p.read_bytes() for p in before} == before


def test_two_outputs_of_one_command_never_share_a_file(tmp_path: Path) -> None:
    metrics, standard = metrics_and_standard(tmp_path)
    report = tmp_path / "report"
    result = run_cli("verify", "--metrics", str(metrics), "--standard", str(standard), "--junit-xml", str(report),
                     "--html", str(report))
    _refused(result, report, "--html and --junit-xml name the same file")
    assert not report.exists()
    summary = tmp_path / "summary.md"
    result = run_cli("verify", "--metrics", str(metrics), "--standard", str(standard), "--junit-xml", str(summary),
                     env={"GITHUB_STEP_SUMMARY": str(summary)})
    _refused(result, summary, "name the same file")


def test_devices_fifos_folders_and_paths_under_a_file_are_refused(tmp_path: Path) -> None:
    metrics, standard = metrics_and_standard(tmp_path)
    verify = ("verify", "--metrics", str(metrics), "--standard", str(standard))
    device = null_device(tmp_path)
    before = os.stat(device)
    _refused(run_cli(*verify, "--junit-xml", str(device)), device, "is a device, not a regular file")
    _refused(run_cli(*verify, "--html", str(device), "--overwrite-html"), device, "is a device")
    _refused(run_cli(*verify, env={"GITHUB_STEP_SUMMARY": str(device)}), device, "is a device")
    after = os.stat(device)  # still the device (run as root, a rename would have replaced it)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _refused(run_cli(*verify, "--junit-xml", str(fifo)), fifo, "is a FIFO, not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    folder = run_cli(*verify, "--junit-xml", str(tmp_path))  # click's own check of the option says it first
    assert folder.code == 2 and "is a directory" in folder.err and folder.err.count("\n") == 1, folder.text
    _refused(run_cli(*verify, env={"GITHUB_STEP_SUMMARY": str(tmp_path)}), tmp_path, "is a directory")
    under = standard / "report.xml"
    _refused(run_cli(*verify, "--junit-xml", str(under)), under, "a part of its path is a file")
    deeper = standard / "a" / "b.html"
    _refused(run_cli(*verify, "--html", str(deeper)), deeper, "a part of its path is a file")
    unwritable = UNWRITABLE / "report.xml"
    _refused(run_cli(*verify, "--junit-xml", str(unwritable)), unwritable, "no permission to create files in")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "null") == ["fifo", "run.jsonl", "std.json"]
    assert not any(p.name.endswith((".tmp", ".xml", ".html")) for p in tmp_path.iterdir())


def test_the_checks_in_the_library() -> None:
    """OutputPaths on its own: each refusal names every path it concerns (none of them is written)."""
    paths = OutputPaths()
    paths.reads("/etc/hostname", "the card")
    paths.writes("/etc/hostname", "--junit-xml")
    with pytest.raises(OutputRefused) as caught:
        paths.check()
    assert caught.value.refused == (Path("/etc/hostname"), Path("/etc/hostname"))
    assert isinstance(caught.value, UsageError)  # one line, exit 2
    ok = OutputPaths()
    ok.writes("/etc/hostname", "--out", replace_flag="--update")
    with pytest.raises(OutputRefused, match="exists; pass --update to replace it"):
        ok.check()
    ok = OutputPaths()
    ok.writes("/etc/hostname", "--out", replace_flag="--update", overwrite=True)
    ok.check()  # an existing regular file in a writable folder, with the flag that replaces it


@pytest.mark.slow
def test_record_checks_every_path_before_its_first_run(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    standard = tmp_path / "standards" / "toy.cpu-test.json"
    # the default standard's path as a report: refused before any run (no run dir, nothing written)
    standard.parent.mkdir()
    for args in (("--junit-xml", str(standard)), ("--html", str(standard)),
                 ("--out", str(tmp_path / "x.json"), "--junit-xml", str(tmp_path / "x.json")),
                 ("--html", str(UNWRITABLE / "page.html")), ("--junit-xml", str(null_device(tmp_path)))):
        result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--workdir", str(tmp_path / "runs"), *args)
        assert result.code == 2 and result.err.count("\n") == 1, result.text
        assert not (tmp_path / "runs").exists() and not standard.exists() and not (tmp_path / "x.json").exists()
    result = run_cli("record", str(card), "--runs", "2", "--junit-xml", str(card))
    _refused(result, card, "the card")
    assert card.read_text().startswith('name = "toy"')
    # and a usage error found while parsing the options writes no JUnit report over the card either
    result = run_cli("record", str(card), "--junit-xml", str(card), "--runs", "1")
    assert result.code == 2 and card.read_text().startswith('name = "toy"'), result.text


@pytest.mark.slow
def test_no_report_over_a_standard_of_the_card_of_any_runner_class(tmp_path: Path) -> None:
    """The card's standard for another runner class is not this run's input, but a report over it
    would still destroy it: record and verify refuse it (verify with no standard for this class too)."""
    card = write_card(tmp_path / "toy.toml", extra='suite = "s"\n')
    assert run_cli("record", str(card), "--runs", "2", "--no-doctor").code == 0
    standard = tmp_path / "standards" / "toy.cpu-test.json"
    kept = standard.read_bytes()
    _refused(run_cli("verify", "--suite", "s", "--cards", str(tmp_path), "--junit-xml", str(standard)), standard,
             "a standard of card toy")  # a suite: every card's standards, before the first card runs
    assert standard.read_bytes() == kept
    card.write_text(card.read_text().replace('runner = ["cpu", "test"]', 'runner = ["cpu", "other"]'))
    for args in (("verify", str(card)), ("record", str(card), "--runs", "2", "--no-doctor"),
                 ("record", str(card), "--runs", "2", "--no-write")):
        result = run_cli(*args, "--junit-xml", str(standard))
        _refused(result, standard, "a standard of the card")
        assert standard.read_bytes() == kept
    # the standard a record replaces (--update) is its output, not an input: that is allowed
    card.write_text(card.read_text().replace('runner = ["cpu", "other"]', 'runner = ["cpu", "test"]'))
    assert run_cli("record", str(card), "--runs", "2", "--no-doctor", "--update").code == 0, standard


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_scan_reports_are_never_written_over_what_the_scan_reads(tmp_path: Path) -> None:
    """scan-rng's --junit-xml and --write-baseline: not a file it scans (named, or a Python or config
    file below a named folder), not each other, not a device or a FIFO; a baseline an earlier scan
    wrote beside the sources is still fine."""
    src = tmp_path / "src"
    src.mkdir()
    source = src / "train.py"
    source.write_text("import torch\n\ndef f():\n    return torch.randperm(3)\n")
    kept = source.read_bytes()
    for args in (("--junit-xml", str(source)), ("--write-baseline", str(source))):
        _refused(run_cli("scan-rng", str(src), *args), source, f"a file the scan of {src} reads")
        _refused(run_cli("scan-rng", str(source), *args), source, "a path it scans")
        _refused(run_cli("scan-rng", str(tmp_path), *args), source, f"a file the scan of {tmp_path} reads")
    link = tmp_path / "link.xml"
    link.symlink_to(source)
    _refused(run_cli("scan-rng", str(src), "--junit-xml", str(link)), link, "reads")
    assert source.read_bytes() == kept
    device = null_device(tmp_path)
    _refused(run_cli("scan-rng", str(src), "--junit-xml", str(device)), device, "is a device, not a regular file")
    assert stat.S_ISCHR(os.stat(device).st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _refused(run_cli("scan-rng", str(src), "--junit-xml", str(fifo)), fifo, "is a FIFO")
    both = tmp_path / "both.json"
    _refused(run_cli("scan-rng", str(src), "--write-baseline", str(both), "--junit-xml", str(both)), both,
             "name the same file")
    assert not both.exists()
    baseline, report = src / "baseline.json", src / "report.xml"
    for _ in range(2):  # written, then replaced: an output of the previous scan is not a source
        result = run_cli("scan-rng", str(src), "--write-baseline", str(baseline), "--junit-xml", str(report))
        assert result.code == 0 and baseline.exists() and report.read_text().startswith("<?xml"), result.text
    # The config files the scan reads for names (a Hydra target, a launch script) are inputs too,
    # a JSON one included: only a baseline an earlier scan wrote may be written over.
    for name in ("config.yaml", "launch.sh", "setup.cfg", "pyproject.toml", "targets.json"):
        config = src / name
        config.write_text("target: train.f\n" if name != "targets.json" else '{"_target_": "train.f"}\n')
        for option in ("--junit-xml", "--write-baseline"):
            _refused(run_cli("scan-rng", str(src), option, str(config)), config, f"a file the scan of {src} reads")
        assert config.read_text().endswith("train.f\n") or "_target_" in config.read_text()


def test_init_never_writes_its_card_over_a_file_its_command_names(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('{}')\n")
    config = tmp_path / "config.yaml"
    config.write_text("lr: 1\n")
    kept = {p: p.read_bytes() for p in (script, config)}
    hard = tmp_path / "hard.py"
    os.link(script, hard)
    for target in (script, config, hard):
        result = run_cli("init", "--out", str(target), "--force", "--", "python", str(script), "--config", str(config),
                         cwd=tmp_path)
        _refused(result, target, "a file the command names")
    assert {p: p.read_bytes() for p in kept} == kept
    device = null_device(tmp_path)
    _refused(run_cli("init", "--out", str(device), "--force", "--", "python", str(script), cwd=tmp_path), device,
             "is a device")
    assert stat.S_ISCHR(os.stat(device).st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _refused(run_cli("init", "--out", str(fifo), "--force", "--", "python", str(script), cwd=tmp_path), fifo,
             "is a FIFO")
    card = tmp_path / "detaudit.toml"
    assert run_cli("init", "--", "python", str(script), cwd=tmp_path).code == 0 and card.exists()
    assert run_cli("init", "--force", "--", "python", str(script), cwd=tmp_path).code == 0  # its own card: replaced


def test_health_never_plots_over_its_metrics_a_device_or_a_fifo(tmp_path: Path) -> None:
    metrics, _ = metrics_and_standard(tmp_path)
    kept = metrics.read_bytes()
    hard = tmp_path / "hard.png"
    os.link(metrics, hard)
    for target in (metrics, hard):
        _refused(run_cli("health", str(metrics), "--metric", "loss", "--png", str(target)), target, "METRICS")
    assert metrics.read_bytes() == kept
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _refused(run_cli("health", str(metrics), "--metric", "loss", "--png", str(fifo)), fifo, "is a FIFO")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_no_report_over_a_file_the_cards_command_names(tmp_path: Path) -> None:
    """The card's script and a config its command names are inputs of every run: record, verify
    and verify --suite refuse a report over them before anything runs."""
    from conftest import TOY

    script = tmp_path / "train.py"
    script.write_bytes(TOY.read_bytes())
    config = tmp_path / "cfg.yaml"
    config.write_text("lr: 1\n")
    card = write_card(tmp_path / "toy.toml", recipe=script, args=["--config", str(config)], extra='suite = "s"\n')
    kept = {p: p.read_bytes() for p in (script, config)}
    for command in (("verify", str(card)), ("record", str(card), "--runs", "2", "--no-doctor"),
                    ("verify", "--suite", "s", "--cards", str(tmp_path))):
        for target in (script, config):
            _refused(run_cli(*command, "--junit-xml", str(target)), target, "command names")
        _refused(run_cli(*command, "--html", str(script), "--overwrite-html"), script, "command names")
    assert {p: p.read_bytes() for p in kept} == kept
    assert not (tmp_path / "standards").exists()


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_a_dangling_link_is_an_existing_name_before_any_run(tmp_path: Path) -> None:
    """A symbolic link to a missing file: the standard's write would find the name taken (after
    every run); refused before the first run unless the flag that replaces it is given."""
    card = write_card(tmp_path / "toy.toml")
    link = tmp_path / "std.json"
    link.symlink_to(tmp_path / "gone" / "std.json")
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--workdir", str(tmp_path / "runs"),
                     "--out", str(link))
    _refused(result, link, "a symbolic link to")
    assert "--update" in result.err and not (tmp_path / "runs").exists() and not (tmp_path / "gone").exists()
    page = OutputPaths()
    page.writes(link, "--html", replace_flag="--overwrite-html")
    with pytest.raises(OutputRefused, match="pass --overwrite-html"):
        page.check()
    replaced = OutputPaths()
    replaced.writes(link, "--html", replace_flag="--overwrite-html", overwrite=True)
    replaced.check()
