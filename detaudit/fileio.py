"""Files written whole or not at all: atomic writes that honour the user's umask and never replace
a file without being told to. Every file the tool writes (standards, reports, baselines) goes
through here."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from detaudit.errors import InputError, UsageError


def _new_file_mode(path: Path) -> int:
    """The mode a replaced file keeps, else what the user's umask gives a new file."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def os_error(path: Path, exc: OSError, doing: str) -> InputError:
    return InputError(path, f"cannot {doing}: {exc.strerror or exc}")


def write_atomic(path: str | Path, text: str, *, overwrite: bool, replace_flag: str = "--update") -> None:
    """Write ``text`` to ``path`` via a temporary file and a rename: readers never see half.

    Without ``overwrite`` an existing file is never replaced (``UsageError`` naming
    ``replace_flag``, the option that would replace it), also when
    another process created it in the meantime (the final step is a hard link, which
    fails if the name exists). A replaced symlink's target is written, not the link; a
    replaced file keeps its mode, a new one gets the user's umask. Any OS error (read-only
    dir, full disk, a parent that is a file) is an ``InputError`` and leaves the old file
    as it was.
    """
    path = Path(path)
    if overwrite and path.is_symlink():
        path = Path(os.path.realpath(path))
    created = make_parents(path)
    tmp = None
    try:
        try:
            fd, tmp = _temporary_beside(path, created)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
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
