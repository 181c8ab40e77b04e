"""The store's journal: where a batch becomes durable, ahead of its DuckDB transaction.

A DuckDB transaction costs a few milliseconds whatever its size (measured on these machines: an
empty ``BEGIN``/``COMMIT`` ~0.3 ms, one small insert and its commit ~2.5 ms, a batch's two inserts
and commit 4-7 ms, while its ``fdatasync`` takes ~50 µs). A write answered only after its own
transaction therefore waits for that, and with a few dozen clients durable writes stop at about
a thousand a second. So, when the store runs with a journal, a batch is made durable by appending
it here (one record, one ``write`` and one ``fdatasync``), answered, and put into the DuckDB
tables and change log afterwards, many batches to a transaction (:class:`~storage.duckdb.store.DuckDBStore`).

The journal is a sequence of **segment** files next to the database,
``<database>.journal.<number>`` (six digits and more, in order), each starting with
:data:`MAGIC`. A segment holds **records**, each one batch: a 4-byte length, the CRC-32 of the
payload, then the payload (JSON: ``[batch, [[seq, table, id, doc or null, existed], ...]]``,
``existed`` whether the key was in its table before the batch). A record is durable once
:meth:`Journal.append` returns.

Reading (:meth:`Journal.records`) goes through the segments in order and, within one, stops at
the first record that is cut short or fails its checksum: what a crash in the middle of an append
leaves at the end of the segment being written. After a failed append the journal cuts the
segment back to its last whole record and goes on in a new segment, so a damaged record only
ever ends a segment. Segments whose records are all in the database are deleted
(:meth:`Journal.release`); a new segment is started past :data:`SEGMENT_BYTES`. A journal that
does not continue its database is not replayed past the gap, and its segments are set aside
(:func:`set_aside`, :func:`storage.duckdb.store.replay_journal`).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson

from engine.logs import Outage

__all__ = [
    "MAGIC",
    "SEGMENT_BYTES",
    "Entry",
    "Journal",
    "JournalError",
    "Record",
    "discard",
    "read_records",
    "segments",
    "set_aside",
]

log = logging.getLogger(__name__)

MAGIC = b"TRELLIS-JOURNAL-1\n"
#: A segment is closed and a new one started once it is this large.
SEGMENT_BYTES = 16 * 1024 * 1024
_HEAD = struct.Struct("!II")
#: A record longer than this is damage, not a batch (a batch is bounded well below it).
_MAX_RECORD = 1 << 31

#: One change of a batch: (seq, table, id, the document or None for a delete, whether the key
#: was in its table before the batch).
Entry = tuple[int, str, str, str | None, bool]
#: One batch: (its number, the last seq of it; its entries in order).
Record = tuple[int, list[Entry]]


class JournalError(OSError):
    """The journal could not take a record (the batch is refused)."""


def segments(database: Path) -> list[tuple[int, Path]]:
    """The journal segments of ``database`` that exist, by number."""
    prefix = database.name + ".journal."
    found: list[tuple[int, Path]] = []
    if not database.parent.is_dir():
        return found
    for path in database.parent.iterdir():
        suffix = path.name[len(prefix) :] if path.name.startswith(prefix) else ""
        if suffix.isdigit():
            found.append((int(suffix), path))
    return sorted(found)


def read_records(database: Path) -> Iterator[Record]:
    """Every whole record of ``database``'s segments, oldest first (see the module on damaged
    records)."""
    for _, path in segments(database):
        yield from _read_segment(path)


def discard(database: Path) -> None:
    """Delete every segment of ``database`` (everything in them is in the database)."""
    for _, path in segments(database):
        path.unlink(missing_ok=True)


def set_aside(database: Path) -> list[Path]:
    """Rename every segment of ``database`` to ``<segment>.orphaned`` (``.orphaned.2`` and on if
    taken): no longer read as the journal, kept for inspection. The new paths, in order."""
    kept: list[Path] = []
    for _, path in segments(database):
        target = path.with_name(path.name + ".orphaned")
        n = 1
        while target.exists():
            n += 1
            target = path.with_name(f"{path.name}.orphaned.{n}")
        path.rename(target)
        kept.append(target)
    if kept:
        _fsync_directory(database.parent)
    return kept


def _segment_path(database: Path, number: int) -> Path:
    return database.with_name(f"{database.name}.journal.{number:06d}")


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_segment(path: Path) -> Iterator[Record]:
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        if data:
            log.warning("journal segment %s does not start with the journal's mark: skipped", path)
        return
    offset = len(MAGIC)
    while offset + _HEAD.size <= len(data):
        size, crc = _HEAD.unpack_from(data, offset)
        start = offset + _HEAD.size
        payload = data[start : start + size]
        if size > _MAX_RECORD or len(payload) < size or zlib.crc32(payload) != crc:
            break
        try:
            batch, raw = orjson.loads(payload)
            entries = [
                (int(s), str(t), str(i), None if d is None else str(d), bool(e)) for s, t, i, d, e in raw
            ]
        except (orjson.JSONDecodeError, TypeError, ValueError):
            break
        yield int(batch), entries
        offset = start + size
    if offset < len(data):
        log.warning("journal segment %s ends in %d bytes of an incomplete record", path, len(data) - offset)


class Journal:
    """The segments of one database, appended to by one thread at a time (see the module)."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        #: Segments that could not be cut back after a failed append (a failing disk fails every
        #: append): reported once as it starts, counted, and once appends work again.
        self._cut_backs = Outage(log, "journal_cut_back", unit="failures")
        #: number -> the last seq of its records (None: none yet), for the segments on disk
        self._segments: dict[int, int | None] = {}
        for number, path in segments(database):
            self._segments[number] = max((batch for batch, _ in _read_segment(path)), default=None)
        #: The number of the last segment started: the next one is numbered after it, even once
        #: every segment is released (a released segment may not be unlinked yet).
        self._number = max(self._segments, default=0)

    def records(self) -> Iterator[Record]:
        """Every whole record on disk, oldest first (:func:`read_records`)."""
        return read_records(self.database)

    def append(self, batch: int, entries: list[Entry]) -> None:
        """Write one record and make it durable; :class:`JournalError` if that fails (nothing of
        it is left behind when the journal can help it)."""
        payload = orjson.dumps([batch, entries])
        record = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        with self._lock:
            fd = self._current()
            try:
                written = os.write(fd, record)
                while written < len(record):
                    written += os.write(fd, record[written:])
                os.fdatasync(fd)
            except OSError as ex:
                self._abandon(fd)
                raise JournalError(ex.errno, f"the journal could not take the batch: {ex.strerror}") from ex
            self._size += len(record)
            self._cut_backs.succeeded()
            self._segments[max(self._segments)] = batch
            if self._size >= SEGMENT_BYTES:
                self._close_current()

    def release(self, through: int) -> None:
        """Delete the segments every record of which has a batch number at most ``through``
        (they are in the database), but the one being written."""
        done: list[int] = []
        with self._lock:
            current = max(self._segments) if self._fd is not None else None
            for number, last in sorted(self._segments.items()):
                if number == current or (last is not None and last > through):
                    break
                done.append(number)
                del self._segments[number]
        # Unlinked without the lock: deleting a full segment took 14-20 ms here, and the next
        # append (the committer, with every writer of its batch waiting) must not wait for that.
        for number in done:
            _segment_path(self.database, number).unlink(missing_ok=True)

    def clear(self) -> None:
        """Delete every segment (everything in them is in the database)."""
        with self._lock:
            self._close_current()
            discard(self.database)
            self._segments.clear()

    def close(self) -> None:
        with self._lock:
            self._close_current()

    @property
    def size(self) -> int:
        """Bytes in the segment being written."""
        return self._size

    # -- under the lock --------------------------------------------------------------------------
    def _current(self) -> int:
        if self._fd is None:
            number = self._number + 1
            path = _segment_path(self.database, number)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
            try:
                os.write(fd, MAGIC)
                os.fsync(fd)
                _fsync_directory(path.parent)
            except OSError as ex:
                os.close(fd)
                path.unlink(missing_ok=True)
                raise JournalError(ex.errno, f"the journal could not start a segment: {ex.strerror}") from ex
            self._fd, self._size = fd, len(MAGIC)
            self._segments[number] = None
            self._number = number
        return self._fd

    def _abandon(self, fd: int) -> None:
        """After a failed append: cut the segment back to its last whole record and go on in a new
        one (a damaged record must only ever end a segment)."""
        try:
            os.ftruncate(fd, self._size)
            os.fsync(fd)
        except OSError as ex:  # the damaged tail ends the segment: replay stops there (and says so)
            self._cut_backs.failed(ex)
        self._close_current()

    def _close_current(self) -> None:
        fd, self._fd = self._fd, None
        self._size = 0
        if fd is not None:
            try:
                os.close(fd)
            except OSError as ex:
                log.warning("closing a journal segment: %s", ex)
