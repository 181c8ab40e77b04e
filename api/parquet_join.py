"""Row groups encoded apart, joined into one Parquet file.

pyarrow's Parquet writer encodes on the thread that calls it, one row group after another. To
encode several row groups at once (``api/advice_parquet.py``: one a block, on threads), each is
written as a Parquet file of its own, and :class:`Joined` makes one file of them:

- the file starts with ``PAR1``;
- each part's column chunks (the bytes between its ``PAR1`` and its footer) follow the previous
  part's, unchanged;
- the footer is the template's (an empty file of the same schema and writer: its schema and
  key-value metadata, the Arrow schema among them) with the parts' row groups, each byte offset
  in them moved by where the part's chunks now start, each row group's ordinal renumbered, and
  the row count summed.

The footer is Thrift's compact protocol (the Parquet format's ``FileMetaData``); :func:`decode`
and :func:`encode` read and write it as nested ``{field id: (type, value)}`` structs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["MAGIC", "Joined", "decode", "encode"]

MAGIC = b"PAR1"

# Thrift compact protocol types
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

#: A Thrift struct: field id -> (compact type, value). A list or set is (element type, items); a
#: map (key type, value type, [(key, value)]).
Struct = dict[int, tuple[int, Any]]

# FileMetaData: row count, row groups; RowGroup: column chunks, file offset, ordinal; ColumnChunk:
# file offset, metadata, offset and column index offsets; ColumnMetaData: page offsets, bloom filter
_FILE_ROWS, _FILE_GROUPS = 3, 4
_GROUP_COLUMNS, _GROUP_OFFSET, _GROUP_ORDINAL = 1, 5, 7
_CHUNK_OFFSET, _CHUNK_META, _CHUNK_OFFSET_INDEX, _CHUNK_COLUMN_INDEX = 2, 3, 4, 6
_META_OFFSETS = (9, 10, 11, 14)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def byte(self) -> int:
        value = self.data[self.at]
        self.at += 1
        return value

    def varint(self) -> int:
        shift = value = 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def integer(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def struct(self) -> Struct:
        fields: Struct = {}
        last = 0
        while True:
            header = self.byte()
            if header == 0:
                return fields
            kind, delta = header & 0x0F, header >> 4
            last = last + delta if delta else self.integer()
            fields[last] = (kind, self.value(kind, in_field=True))

    def value(self, kind: int, *, in_field: bool = False) -> Any:
        if kind in (_TRUE, _FALSE):
            # a struct field's bool is its type; a list's is a byte of its own (1 true)
            return kind == _TRUE if in_field else self.byte() == _TRUE
        if kind == _BYTE:
            value = self.byte()
            return value - 256 if value > 127 else value
        if kind in (_I16, _I32, _I64):
            return self.integer()
        if kind == _DOUBLE:
            self.at += 8
            return self.data[self.at - 8 : self.at]
        if kind == _BINARY:
            size = self.varint()
            self.at += size
            return self.data[self.at - size : self.at]
        if kind in (_LIST, _SET):
            header = self.byte()
            size, element = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            return element, [self.value(element) for _ in range(size)]
        if kind == _MAP:
            size = self.varint()
            if not size:
                return 0, 0, []
            types = self.byte()
            pairs = [(self.value(types >> 4), self.value(types & 0x0F)) for _ in range(size)]
            return types >> 4, types & 0x0F, pairs
        if kind == _STRUCT:
            return self.struct()
        raise ValueError(f"not a Thrift compact type: {kind}")


def decode(data: bytes) -> Struct:
    """A Thrift compact struct (a Parquet footer's ``FileMetaData``)."""
    return _Reader(data).struct()


def _varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _integer(out: bytearray, value: int) -> None:
    _varint(out, (value << 1) ^ (value >> 63))


def _struct(out: bytearray, fields: Struct) -> None:
    last = 0
    for field, (kind, value) in fields.items():
        if kind in (_TRUE, _FALSE):
            kind = _TRUE if value else _FALSE
        delta = field - last
        if 0 < delta <= 15:
            out.append(delta << 4 | kind)
        else:
            out.append(kind)
            _integer(out, field)
        last = field
        if kind not in (_TRUE, _FALSE):
            _value(out, kind, value)
    out.append(0)


def _value(out: bytearray, kind: int, value: Any) -> None:
    if kind in (_TRUE, _FALSE):
        out.append(_TRUE if value else _FALSE)
    elif kind == _BYTE:
        out.append(value & 0xFF)
    elif kind in (_I16, _I32, _I64):
        _integer(out, value)
    elif kind == _DOUBLE:
        out += value
    elif kind == _BINARY:
        _varint(out, len(value))
        out += value
    elif kind in (_LIST, _SET):
        element, items = value
        if len(items) < 15:
            out.append(len(items) << 4 | element)
        else:
            out.append(0xF0 | element)
            _varint(out, len(items))
        for item in items:
            _value(out, element, item)
    elif kind == _MAP:
        key, kept, pairs = value
        _varint(out, len(pairs))
        if pairs:
            out.append(key << 4 | kept)
            for k, v in pairs:
                _value(out, key, k)
                _value(out, kept, v)
    elif kind == _STRUCT:
        _struct(out, value)
    else:
        raise ValueError(f"not a Thrift compact type: {kind}")


def encode(fields: Struct) -> bytes:
    """A struct in Thrift's compact protocol."""
    out = bytearray()
    _struct(out, fields)
    return bytes(out)


def _footer(data: bytes | memoryview) -> tuple[Struct, int]:
    """A Parquet file's footer and where it starts."""
    if len(data) < 12 or bytes(data[:4]) != MAGIC or bytes(data[-4:]) != MAGIC:
        raise ValueError("not a Parquet file")
    size = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - size
    return decode(bytes(data[start:-8])), start


def _moved(fields: Struct, names: tuple[int, ...], delta: int) -> Struct:
    out = dict(fields)
    for name in names:
        if name in out and out[name][1] > 0:
            kind, value = out[name]
            out[name] = (kind, value + delta)
    return out


def _row_group(group: Struct, delta: int, ordinal: int) -> Struct:
    """A row group of a part whose chunks moved by ``delta`` bytes."""
    out = _moved(group, (_GROUP_OFFSET,), delta)
    element, chunks = out[_GROUP_COLUMNS][1]
    moved = []
    for chunk in chunks:
        chunk = _moved(chunk, (_CHUNK_OFFSET, _CHUNK_OFFSET_INDEX, _CHUNK_COLUMN_INDEX), delta)
        if _CHUNK_META in chunk:
            kind, meta = chunk[_CHUNK_META]
            chunk[_CHUNK_META] = (kind, _moved(meta, _META_OFFSETS, delta))
        moved.append(chunk)
    out[_GROUP_COLUMNS] = (out[_GROUP_COLUMNS][0], (element, moved))
    if _GROUP_ORDINAL in out:
        out[_GROUP_ORDINAL] = (out[_GROUP_ORDINAL][0], ordinal)
    return out


class Joined:
    """One Parquet file from parts (each a whole Parquet file of the same schema and writer),
    as its bytes in order: :meth:`start`, then :meth:`add` for each part, then :meth:`end`."""

    def __init__(self, template: bytes | memoryview) -> None:
        """``template``: a Parquet file (typically with no row group) of the schema and writer
        options the parts have; its footer is the joined file's but for the row groups."""
        self.meta, _ = _footer(template)
        self.groups: list[Struct] = []
        self.rows = 0
        self.position = len(MAGIC)

    def start(self) -> bytes:
        return MAGIC

    def add(self, part: bytes | memoryview) -> memoryview:
        """The bytes of ``part``'s row groups in the joined file (written after those before), a
        view of ``part``'s."""
        part = memoryview(part)
        meta, end = _footer(part)
        delta = self.position - len(MAGIC)
        for group in meta[_FILE_GROUPS][1][1]:
            self.groups.append(_row_group(group, delta, len(self.groups)))
        self.rows += meta[_FILE_ROWS][1]
        chunks = part[len(MAGIC) : end]
        self.position += len(chunks)
        return chunks

    def end(self) -> bytes:
        """The footer, its length and the closing ``PAR1``."""
        meta = dict(self.meta)
        meta[_FILE_ROWS] = (meta[_FILE_ROWS][0], self.rows)
        meta[_FILE_GROUPS] = (meta[_FILE_GROUPS][0], (_STRUCT, self.groups))
        footer = encode(meta)
        return footer + len(footer).to_bytes(4, "little") + MAGIC

    def all(self, parts: Iterator[bytes | memoryview]) -> Iterator[bytes | memoryview]:
        """The joined file's bytes, a part at a time."""
        yield self.start()
        for part in parts:
            yield self.add(part)
        yield self.end()
