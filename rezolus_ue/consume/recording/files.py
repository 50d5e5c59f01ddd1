"""Recordings in every format behind one reader and one writer: the package's interface.

* ``read_records``, ``read_meta``, ``read_tables``, ``to_pandas`` read a native file
  (``native``), a ring directory of native segments (``ring``), a Parquet file (ours or
  Rezolus's, ``parquet``) or a directory of the previous Parquet form;
* ``open_writer(path, fmt, meta)`` is the one writer ``record`` and ``dump`` use: a native
  file written in place (a kill leaves it readable), or a Parquet file written from a
  native journal beside it when closed (a killed recorder leaves the journal, which the
  readers and ``dump --from`` read); ``write_recording`` writes records at once.

The output guards live here too: what may be replaced, and writing beside then renaming.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from ...errors import os_error_text
from ..records import Record
from .blocks import (
    NATIVE_SUFFIX,
    PARQUET_SUFFIX,
    PART_SUFFIX,
    RecordingError,
    ScanStats,
    _not_a_file,
    recording_meta,
)
from .native import NativeWriter, read_file, read_native_meta, recording_files, write_native
from .native import read_tables as read_native_tables
from .parquet import _pyarrow, parquet_meta, read_parquet, write_parquet, write_parquet_from

FORMATS = ("native", "parquet")


def format_of(path: Path, fmt: str | None) -> str:
    """Return the format to write ``path`` in: ``fmt``, else parquet for ``*.parquet``."""
    return fmt or ("parquet" if path.suffix == PARQUET_SUFFIX else "native")


# --- reading --------------------------------------------------------------------------------


def check_input(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` as a Path if it is a file or directory to read a recording from;
    else raise RecordingError saying why (missing, unreadable, a pipe or device...)."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise RecordingError(f"{p}: no such file or directory") from None
    except (OSError, ValueError) as e:
        raise RecordingError(os_error_text(e, p, "read")) from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        # Sizes, mmap and the two passes some readers make need a file.
        raise RecordingError(_not_a_file(p, mode))
    return p


def _is_parquet(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def parquet_files(path: Path) -> list[Path]:
    """Return the Parquet files to read for ``path`` (none: read it as native): itself,
    or a directory's ``*.parquet`` (the previous form) unless it holds a native journal,
    which a recorder killed before converting left: that is the whole truth and wins."""
    if not path.is_dir():
        return [path] if _is_parquet(path) else []
    if recording_files(path):
        return []
    try:
        entries = list(path.iterdir())
    except OSError as e:
        raise RecordingError(os_error_text(e, path, "read")) from None
    return sorted(p for p in entries if p.is_file() and p.suffix == PARQUET_SUFFIX)


def read_records(path: str | os.PathLike[str], events: Iterable[str] | None = None,
                 stats: ScanStats | None = None) -> Iterator[Record]:
    """Yield the records of a recording, oldest first.

    ``path`` is a native file, a directory of native files (a ring: its segments in
    order), a Parquet file (ours, or one Rezolus wrote), or a directory of the previous
    Parquet form. ``events`` keeps only those event names. Damage loses only itself: bytes
    that are not valid blocks and blocks (or Parquet row groups) that cannot be decoded are
    skipped, counted in ``stats`` and reported in one warning per file. Raise
    RecordingError if ``path`` cannot be read at all, or is a file with no valid block.
    """
    p = check_input(path)
    st = stats if stats is not None else ScanStats()
    if pq_files := parquet_files(p):
        yield from read_parquet(pq_files, events, st)
        return
    for f in recording_files(p):
        yield from read_file(f, events, st, alone=f == p)


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the recording's metadata (its first readable metadata block; {} if none)."""
    p = check_input(path)
    if pq_files := parquet_files(p):
        return parquet_meta(pq_files[0])
    return read_native_meta(recording_files(p))


def read_tables(path: str | os.PathLike[str],
                events: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """Return a recording in any format as one table per event: {event: {column:
    values}}, as ``native.read_tables`` describes."""
    p = check_input(path)
    if not parquet_files(p):
        return read_native_tables(p, events)
    from .tables import to_tables

    out: dict[str, dict[str, Any]] = {}
    for t in to_tables(read_records(p, events)):
        key, k = t.event, 1
        while key in out:
            k += 1
            key = f"{t.event}#{k}"
        out[key] = dict(t.columns)
    return out


def to_pandas(path: str | os.PathLike[str], events: Iterable[str] | None = None) -> dict:
    """Return {event: pandas.DataFrame} for any recording (needs pandas)."""
    try:
        import pandas as pd
    except ImportError:
        raise RecordingError("to_pandas needs pandas: pip install pandas") from None
    return {e: pd.DataFrame(cols) for e, cols in read_tables(path, events).items()}


# --- output files -----------------------------------------------------------------------


def _kind_of(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode)
            else "a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")


def check_output(out: Path, fmt: str, overwrite: bool) -> None:
    """Refuse to write ``out`` unless it is new or (with ``overwrite``) a regular file.

    Nothing else is ever replaced: not a directory (a Parquet recording is one file now;
    the directory of event files an earlier version wrote is only read), a device, a pipe
    or a symbolic link (which would be replaced, not followed)."""
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        return
    except (OSError, ValueError) as e:
        raise RecordingError(os_error_text(e, out, "write")) from None
    if not stat.S_ISREG(mode):
        hint = f" (a {fmt} recording is one file: name one)" if stat.S_ISDIR(mode) else ""
        raise RecordingError(f"{out} is {_kind_of(mode)}: refusing to replace it; choose a"
                             f" new file name{hint}")
    if not overwrite:
        raise RecordingError(f"{out} exists: use --force to overwrite it")


def new_temp(out: Path) -> Path:
    """Create and return a new file beside ``out`` to write it in, under a name no one
    else uses: nothing that exists is ever truncated or removed."""
    for _ in range(100):
        tmp = out.with_name(f".{out.name[:200]}.{secrets.token_hex(4)}{PART_SUFFIX}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
            return tmp
        except FileExistsError:
            continue
        except (OSError, ValueError) as e:
            raise RecordingError(os_error_text(e, out, "write")) from None
    raise RecordingError(f"cannot create a temporary file beside {out}")


def discard_temp(tmp: Path) -> None:
    """Remove a file ``new_temp`` made."""
    with contextlib.suppress(OSError):
        tmp.unlink()


def replace_output(tmp: Path, out: Path) -> None:
    """Move the complete ``tmp`` to ``out``, which ``check_output`` accepted."""
    try:
        os.replace(tmp, out)
    except OSError as e:
        raise RecordingError(os_error_text(e, out, "write")) from None


def write_recording(records: Iterable[Record], out: Path, fmt: str,
                    meta: dict[str, Any] | None = None, *, overwrite: bool = False) -> int:
    """Write ``records`` to ``out`` as ``fmt`` ("native" or "parquet"); return how many.

    The output appears whole or not at all: it is written beside under a new name first,
    then renamed (see ``check_output`` for what may be replaced).
    """
    check_output(out, fmt, overwrite)
    if fmt == "parquet":
        _pyarrow()
    tmp = new_temp(out)
    try:
        if fmt == "parquet":
            n = write_parquet(records, tmp, meta)
        else:
            n = write_native(records, tmp, meta, overwrite=True)
        replace_output(tmp, out)
    except OSError as e:  # from pyarrow's writer
        discard_temp(tmp)
        raise RecordingError(os_error_text(e, out, "write")) from None
    except BaseException:
        discard_temp(tmp)
        raise
    return n


# --- the writer interface -------------------------------------------------------------------


class Writer(Protocol):
    """Where records go, in any format: ``write`` as they come, ``close`` when done."""

    path: Path

    def write(self, records: list[Record]) -> None: ...

    def close(self) -> None: ...


class NativeFileWriter:
    """A native recording at ``path``, written in place (a kill leaves it readable)."""

    def __init__(self, path: Path, meta: dict[str, Any], *, overwrite: bool = False) -> None:
        check_output(path, "native", overwrite)
        self.path = path
        self.writer = NativeWriter.create(path, meta, overwrite=overwrite)

    def write(self, records: list[Record]) -> None:
        """Append the records as one block."""
        self.writer.write_records(records)

    def close(self) -> None:
        """Flush and close the file."""
        self.writer.close()


def journal_of(path: Path) -> Path:
    """Return the native journal a Parquet recording at ``path`` is written through."""
    return path.with_name(f"{path.name}.journal{NATIVE_SUFFIX}")


class ParquetFileWriter:
    """A Parquet recording at ``path``: records go to a native journal beside it
    (``journal_of``), converted to ``path`` on close and then deleted. A killed recorder
    leaves the journal: ``dump --from JOURNAL --format parquet`` converts it."""

    def __init__(self, path: Path, meta: dict[str, Any], *, overwrite: bool = False) -> None:
        _pyarrow()
        check_output(path, "parquet", overwrite)
        self.path = path
        self.meta = meta
        self.overwrite = overwrite
        self.journal = NativeFileWriter(journal_of(path), meta, overwrite=True)

    def write(self, records: list[Record]) -> None:
        """Append the records to the journal."""
        self.journal.write(records)

    def close(self) -> None:
        """Convert the journal to the Parquet file, then delete it."""
        self.journal.close()
        jp = self.journal.path
        check_output(self.path, "parquet", self.overwrite)
        tmp = new_temp(self.path)
        try:
            write_parquet_from(jp, tmp, self.meta)
            replace_output(tmp, self.path)
        except OSError as e:  # the journal stays: `dump --from JOURNAL` converts it later
            discard_temp(tmp)
            raise RecordingError(os_error_text(e, self.path, "write")) from None
        except BaseException:
            discard_temp(tmp)
            raise
        jp.unlink(missing_ok=True)


def open_writer(path: Path, fmt: str, meta: dict[str, Any] | None = None, *,
                overwrite: bool = False) -> Writer:
    """Return a writer of ``fmt`` ("native" or "parquet") for a new recording at ``path``
    (refused as ``check_output`` says) that starts with ``meta``."""
    cls = ParquetFileWriter if fmt == "parquet" else NativeFileWriter
    return cls(path, meta or recording_meta(), overwrite=overwrite)
