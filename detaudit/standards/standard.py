"""Standard files: the model, reading and writing detaudit's and miles' own, and the lock.

The model (``Standard``) and the reading of a file's text live in ``model``; each file format
is one module of ``formats`` (detaudit's and miles' included). This module is what the rest of
detaudit imports: ``load_standard`` and ``render_standard`` for the two formats detaudit
records into by default, and ``standard_lock`` for ``record``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from detaudit.errors import InputError, UsageError
from detaudit.fileio import make_parents, os_error, remove_empty
from detaudit.standards.formats.detaudit import SCHEMA, series_document
from detaudit.standards.formats.registry import load_any, render_as
from detaudit.standards.model import MAX_STANDARD_BYTES, Standard, parse_json_document, read_standard_text

__all__ = [
    "MAX_STANDARD_BYTES", "SCHEMA", "Standard", "load_standard", "parse_json_document", "read_standard_text",
    "render_standard", "series_document", "standard_lock",
]
# The formats a card's standard is read and written in by load_standard/render_standard (record's own).
CARD_STANDARD_FORMATS = ("detaudit", "miles")


def render_standard(standard: Standard) -> str:
    """The file text of a detaudit or miles standard, in its format; the same input gives the same bytes."""
    return render_as(standard, standard.format if standard.format in CARD_STANDARD_FORMATS else "detaudit")


def load_standard(path: str | Path) -> Standard:
    """Read a detaudit or miles standard; ``InputError`` names the file on any problem (another format too)."""
    std = load_any(path)
    if std.format not in CARD_STANDARD_FORMATS:
        raise InputError(path, f'not a detaudit or miles standard (a {std.format} file): expected "schema" '
                               '(detaudit) or "metrics" (miles) at the top level')
    return std


# --- the lock ----------------------------------------------------------------------------


@contextmanager
def standard_lock(path: str | Path) -> Iterator[Path]:
    """Hold ``PATH.lock`` while recording, so two records of one standard cannot race.

    A lock left by a process that no longer exists is taken over. Dirs created for the
    lock are removed again if nothing was written into them.
    """
    path = Path(path)
    lock = Path(str(path) + ".lock")
    created = make_parents(lock)
    try:
        for _ in range(4):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _lock_holder(lock)
                if holder is not None and _alive(holder):
                    raise UsageError(
                        f"another 'detaudit record' of this standard is running (pid {holder}; lock {lock})", path
                    ) from None
                try:
                    lock.unlink()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise os_error(lock, exc, "remove a stale lock") from None
                continue
            except FileNotFoundError:
                # A concurrent writer that failed removed the then-empty folder: make it again.
                created.extend(make_parents(lock))
                continue
            except OSError as exc:
                raise os_error(lock, exc, "create the lock") from None
            try:
                with os.fdopen(fd, "w") as fh:
                    fh.write(f"{os.getpid()}\n")
            except OSError as exc:  # a full disk (or a file-size limit): no lock, and no empty .lock left
                lock.unlink(missing_ok=True)
                raise os_error(lock, exc, "write the lock") from None
            break
        else:
            raise UsageError(f"could not take the lock {lock}", path)
    except BaseException:
        remove_empty(created)
        raise
    try:
        yield lock
    finally:
        try:
            if _lock_holder(lock) == os.getpid():
                lock.unlink()
        except FileNotFoundError:
            pass
        remove_empty(created)


def _lock_holder(lock: Path) -> int | None:
    try:
        return int(lock.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True
