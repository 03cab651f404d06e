"""Files written whole or not at all: atomic writes that honour the user's umask and never replace
a file without being told to; and the output paths of one command (``OutputPaths``), checked
before anything runs. Every file the tool writes (standards, reports, baselines) goes through here."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detaudit.errors import InputError, UsageError

# tempfile (with random) and shutil (~4 ms) are imported where a file is written: every command
# imports this module, and the ones that only read (diff, verify --metrics, standard show) write nothing.


def umask() -> int:
    """The user's umask (POSIX can read it only by setting it: it is set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _new_file_mode(path: Path) -> int:
    """The mode a replaced file keeps, else what the user's umask gives a new file."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~umask()


def os_error(path: Path, exc: OSError, doing: str) -> InputError:
    return InputError(path, f"cannot {doing}: {exc.strerror or exc}")


def write_atomic(path: str | Path, text: str | bytes, *, overwrite: bool, replace_flag: str = "--update") -> None:
    """Write ``text`` (UTF-8) or bytes to ``path`` via a temporary file and a rename: readers never see half.

    Without ``overwrite`` an existing file is never replaced (``UsageError`` naming
    ``replace_flag``, the option that would replace it), also when
    another process created it in the meantime (the final step is a hard link, which
    fails if the name exists). A replaced symlink's target is written, not the link; a
    replaced file keeps its mode, a new one gets the user's umask. Any OS error (read-only
    dir, full disk, a parent that is a file) is an ``InputError`` and leaves the old file
    as it was.
    """
    path = Path(path)
    if isinstance(text, str):
        try:
            text = text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate (a name from a file that is not UTF-8)
            bad = exc.object[exc.start:exc.end].encode("unicode_escape").decode("ascii")
            raise InputError(path, f"cannot write the file: its text holds {bad}, which UTF-8 cannot carry") from None
    if overwrite and path.is_symlink():
        path = Path(os.path.realpath(path))
    created = make_parents(path)
    tmp = None
    try:
        try:
            fd, tmp = _temporary_beside(path, created)
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), _new_file_mode(path))
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            if overwrite:
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise UsageError(f"exists; pass {replace_flag} to replace it", path) from None
                os.unlink(tmp)
        except OSError as exc:
            raise os_error(path, exc, "write the file") from None
    except BaseException:
        remove_empty(created)
        raise
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _temporary_beside(path: Path, created: list[Path]) -> tuple[int, str]:
    """A temporary file in ``path``'s folder. A concurrent writer that failed may have removed
    the (then empty) folder between our ``make_parents`` and here: make it again, a few times."""
    import tempfile

    for _ in range(3):  # then once more, letting the error through
        try:
            return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        except FileNotFoundError:
            created.extend(make_parents(path))
    return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)


def make_parents(path: Path) -> list[Path]:
    """Create the missing parent dirs of ``path``; return those created (deepest last)."""
    missing = []
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    missing.reverse()
    created: list[Path] = []
    try:
        for folder in missing:
            try:
                folder.mkdir()
            except FileExistsError:
                # Another writer (a pytest-xdist worker, a second record) made it between our
                # check and our mkdir: a folder is what we wanted, and it is not ours to remove.
                if not folder.is_dir():
                    raise
                continue
            created.append(folder)
    except FileExistsError as exc:
        remove_empty(created)
        raise InputError(path, f"cannot create {exc.filename}: a file is in the way") from None
    except OSError as exc:
        remove_empty(created)
        raise os_error(path, exc, f"create {exc.filename or path.parent}") from None
    return created


def replace_folder(staged: Path | None, destination: Path) -> None:
    """Put the complete folder ``staged`` at ``destination`` (with None: only remove what is there),
    retiring the old folder first. Renames only, so ``destination`` is never half old and half new;
    ``staged`` must be on the same file system (made beside ``destination``)."""
    import shutil
    import tempfile

    retired = Path(tempfile.mkdtemp(prefix=f".{destination.name}.old.", dir=destination.parent))
    try:
        if destination.exists():
            os.rename(destination, retired / destination.name)
        if staged is not None:
            os.rename(staged, destination)
    finally:
        shutil.rmtree(retired, ignore_errors=True)


def remove_empty(folders: list[Path]) -> None:
    """Remove dirs we created if they are still empty (deepest first)."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            return


# --- reading ------------------------------------------------------------------------------


def _size_text(limit: int) -> str:
    return f"{limit >> 30} GiB" if limit >= 1 << 30 and not limit % (1 << 30) else (
        f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes")


def read_bounded(path: str | Path, what: str, limit: int, *, missing: str | None = None) -> bytes:
    """The bytes of a file that holds at most ``limit`` of them (a card, a standard, a report).

    ``InputError`` naming ``what`` when it cannot be read (``missing``: the message for a file
    that does not exist), is a directory, or holds more: reading stops after ``limit + 1``
    bytes, so a device such as /dev/zero or a huge file never takes more memory than that.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError as exc:
        raise InputError(path, missing or f"cannot read {what}: {exc.strerror or exc}") from None
    except IsADirectoryError:
        raise InputError(path, f"is a directory, not a {what} file") from None
    except OSError as exc:
        raise InputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(path, f"{what} is larger than {_size_text(limit)}; not a {what}")
    return data


def read_bounded_text(path: str | Path, what: str, limit: int, *, missing: str | None = None) -> str:
    """``read_bounded``, decoded as UTF-8 (``InputError`` naming the first byte that is not)."""
    data = read_bounded(path, what, limit, missing=missing)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"{what} is not UTF-8 (byte {exc.start})") from None
# --- the output paths of one command -----------------------------------------------------------


class OutputRefused(UsageError):
    """An output path that must not be written (the one-line error names it and why).
    ``refused``: every path the refusal concerns; the command writes none of them, not even the
    report of its own error."""

    def __init__(self, message: str, path: Path, refused: tuple[Path, ...] = ()) -> None:
        super().__init__(message, path)
        self.refused = refused or (path,)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return (OutputRefused, (self.message, Path(self.path or ""), self.refused))


@dataclass
class _Output:
    path: Path
    what: str  # how the user named it: "--junit-xml", "DEST", "the standard (--out)", ...
    replace_flag: str | None  # the option that lets it replace an existing file (None: replaced freely)
    append: bool  # appended to (the GitHub step summary), not replaced


def _identity(path: Path) -> tuple[str, tuple[int, int] | None]:
    """What makes two names the same file: the real path, and (device, inode) when it exists
    (a hard link has another real path)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return real, None
    return real, (st.st_dev, st.st_ino)


def _same(a: tuple[str, tuple[int, int] | None], b: tuple[str, tuple[int, int] | None]) -> bool:
    return a[0] == b[0] or (a[1] is not None and a[1] == b[1])


class OutputPaths:
    """The files one command reads and the files it writes, checked together before anything
    runs (``check``): every output is refused when it is an input of the same command, another
    output of it, a directory, a device, a FIFO or a socket, under a regular file, in a folder
    this user cannot write, or an existing file without the flag that replaces it. Every command
    that writes a file (a standard, a report, a baseline) states its paths here.

    Writes then go through ``write_atomic`` (regular files, renamed into place) or, for an
    appended file (the step summary), an append; the check cannot stop another process from
    changing a path afterwards, and ``write_atomic`` still refuses to replace a file unasked."""

    def __init__(self) -> None:
        self.inputs: list[tuple[Path, str]] = []
        self.trees: list[tuple[Path, str, tuple[str, ...], Callable[[str], bool] | None]] = []
        self.outputs: list[_Output] = []

    def reads(self, path: str | Path | None, what: str) -> None:
        if path is not None:
            self.inputs.append((Path(path), what))

    def reads_below(self, folder: str | Path, what: str, suffixes: tuple[str, ...],
                    written_here: Callable[[str], bool] | None = None) -> None:
        """Every existing file below ``folder`` whose name ends in one of ``suffixes`` is an input
        too (the sources a scan of the folder reads), without listing the tree up front; except a
        file ``written_here`` says this command wrote before (a baseline kept beside the sources)."""
        self.trees.append((Path(folder), what, suffixes, written_here))

    def writes(self, path: str | Path | None, what: str, *, replace_flag: str | None = None,
               overwrite: bool = False, append: bool = False) -> None:
        """An output. ``replace_flag``: the option that allows replacing an existing file (given:
        ``overwrite``); None: the file is a report, replaced freely."""
        if path is not None:
            self.outputs.append(_Output(Path(path), what, None if overwrite else replace_flag, append))

    def check(self) -> None:
        """``OutputRefused`` for the first output that must not be written (see the class doc)."""
        inputs = [(p, what, _identity(p)) for p, what in self.inputs]
        seen: list[tuple[_Output, tuple[str, tuple[int, int] | None]]] = []
        for out in self.outputs:
            ident = _identity(out.path)
            for path, what, other in inputs:
                if _same(ident, other):
                    raise OutputRefused(f"{out.what} would write over {what} ({path}), which this command reads; "
                                        "give another path", out.path, (out.path, path))
            below = self._read_below(ident[0])
            if below is not None:
                raise OutputRefused(f"{out.what} would write over {ident[0]}, a file {below} reads; give another path",
                                    out.path)
            for earlier, other in seen:
                if _same(ident, other):
                    raise OutputRefused(f"{out.what} and {earlier.what} name the same file; give each its own path",
                                        out.path, (out.path, earlier.path))
            _check_writable(out)
            seen.append((out, ident))

    def _read_below(self, real: str) -> str | None:
        """What reads the existing file ``real`` (a real path) as a file below one of ``trees``."""
        if not os.path.isfile(real):
            return None
        for folder, what, suffixes, written_here in self.trees:
            top = os.path.realpath(folder)
            if real.endswith(suffixes) and os.path.isdir(top) and real.startswith(top.rstrip(os.sep) + os.sep):
                if written_here is None or not written_here(real):
                    return what
        return None


def _check_writable(out: _Output) -> None:
    path = out.path
    try:
        st = os.stat(path)  # follows a symbolic link: what would be written is its target
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a component that is a file (ENOTDIR), a loop, a name too long, no access
        raise _refused(out, _os_reason(out, exc)) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise _refused(out, f"is a directory; {out.what} takes a file name")
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device"
            raise _refused(out, f"is {kind}, not a regular file; {out.what} writes a file (give a file name)")
        if out.append:
            if not os.access(path, os.W_OK):
                raise _refused(out, f"cannot write {out.what}: permission denied")
            return
        if out.replace_flag is not None:
            raise _refused(out, f"exists; pass {out.replace_flag} to replace it")
    elif out.replace_flag is not None and os.path.islink(path):  # the write would find the name taken, after the runs
        raise _refused(out, f"exists (a symbolic link to {os.readlink(path)}, which does not exist); pass "
                            f"{out.replace_flag} to write there")
    folder = _existing_parent(out)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _refused(out, f"cannot write {out.what}: no permission to create files in {folder}")


def _existing_parent(out: _Output) -> Path:
    """The nearest folder above the path that exists (``make_parents`` creates the rest); refused
    when what exists there is not a folder."""
    parent = Path(os.path.realpath(out.path)).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise _refused(out, f"cannot write {out.what}: {parent} is a file, not a folder")
    return parent


def _os_reason(out: _Output, exc: OSError) -> str:
    if exc.errno == errno.ENOTDIR:
        return f"cannot write {out.what}: a part of its path is a file, not a folder"
    return f"cannot write {out.what}: {exc.strerror or exc}"


def _refused(out: _Output, why: str) -> OutputRefused:
    return OutputRefused(why, out.path)


def user_cache_dir() -> Path:
    """detaudit's folder in the user's cache: ``$XDG_CACHE_HOME/detaudit`` (``~/.cache`` when unset)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "detaudit"
