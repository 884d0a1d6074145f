"""MariaDB's compressed binlog events (`log_bin_compress=ON`), made plain again (pure; no I/O).

With `log_bin_compress` MariaDB writes a Query event or a rows event longer than `log_bin_compress_min_len` as
its compressed twin: `QUERY_COMPRESSED_EVENT` (165), whose statement text is compressed, and
`WRITE|UPDATE|DELETE_ROWS_COMPRESSED_EVENT[_V1]` (166-171), whose row images (everything after the column
bitmaps) are. python-mysql-replication knows neither, so they read as unknown events: a reader that passed over
them would lose those rows and statements without a word. `plain_packet` rebuilds the plain event (types 2,
23-25, 30-32) from a compressed one, with the same position, so every path reads it as if it had never been
compressed.

The compressed part: one header byte `1000 0LLL` (high bit set, algorithm 0 = zlib in bits 4-6, L = how many
bytes the uncompressed length takes), that length big-endian, then the zlib stream.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

from cdc_core.model.errors import SourceError

QUERY_EVENT = 0x02
QUERY_COMPRESSED_EVENT = 165
# compressed type -> plain type: the _V1 ones are v1 rows events (MariaDB's own), the others v2
ROWS_COMPRESSED_EVENTS = {166: 0x17, 167: 0x18, 168: 0x19, 169: 0x1E, 170: 0x1F, 171: 0x20}
COMPRESSED_EVENTS = frozenset({QUERY_COMPRESSED_EVENT, *ROWS_COMPRESSED_EVENTS})

_HEADER = struct.Struct("<IBIIIH")  # after the OK byte: timestamp, type, server_id, event_size, log_pos, flags
_BODY = 20  # where an event's body starts in a packet (the OK byte and the 19-byte header before it)


def decompress(buf: bytes) -> bytes:
    """The bytes a compressed part holds (its header, length and zlib stream)."""
    if not buf or buf[0] & 0x80 == 0 or (buf[0] & 0x70) >> 4 != 0:
        raise ValueError(f"not a zlib-compressed part (header byte {buf[:1].hex() or 'missing'})")
    width = buf[0] & 0x07
    length = int.from_bytes(buf[1 : 1 + width], "big")
    out = zlib.decompress(buf[1 + width :])
    if len(out) != length:
        raise ValueError(f"it holds {len(out)} bytes, its header says {length}")
    return out


def plain_packet(data: bytes, post_header_len: Callable[[int, int], int], checksum: bool, where: str) -> bytes:
    """The plain event packet of a compressed one (`data`: the OK byte, the header, the body and, with
    `checksum`, a CRC32 that the plain packet carries as zeros). `post_header_len(type, default)`: the lengths the
    file's Format_description gives. `where` names the event in errors."""
    ts, etype, server, _size, log_pos, flags = _HEADER.unpack_from(data, 1)
    end = len(data) - (4 if checksum else 0)
    if etype == QUERY_COMPRESSED_EVENT:
        fixed = post_header_len(etype, 13)
        db_len = data[_BODY + 8]
        status_len = int.from_bytes(data[_BODY + 11 : _BODY + 13], "little")
        cut, plain = _BODY + fixed + status_len + db_len + 1, QUERY_EVENT
    else:
        plain = ROWS_COMPRESSED_EVENTS[etype]
        cut = -1
    try:
        if cut < 0:
            cut = _rows_data_offset(data, post_header_len(etype, 8), plain >= 0x1E, update=plain in (0x18, 0x1F))
        body = data[_BODY:cut] + decompress(data[cut:end])
    except (ValueError, zlib.error) as e:
        raise SourceError(f"the compressed binlog event at {where} cannot be read ({e}); it may be damaged") from None
    size = 19 + len(body) + (4 if checksum else 0)
    return b"\x00" + _HEADER.pack(ts, plain, server, size, log_pos, flags) + body + (b"\x00" * 4 if checksum else b"")


def rows_columns(data: bytes, fixed: int, v2: bool) -> tuple[int, int]:
    """A rows event's column count, and where its column bitmap(s) start: after the post-header (`fixed` bytes)
    and a v2 event's extra data. The count is a length-encoded integer (three bytes over 250 columns)."""
    pos = _BODY + fixed
    if v2:
        pos += max(0, int.from_bytes(data[_BODY + fixed - 2 : _BODY + fixed], "little") - 2)
    first = data[pos]
    if first < 251:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
    if width is None:
        raise ValueError(f"a column count cannot start with byte {first:#x}")
    return int.from_bytes(data[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def _rows_data_offset(data: bytes, fixed: int, v2: bool, *, update: bool) -> int:
    """Where a rows event's row images start: after its column bitmap(s)."""
    ncols, pos = rows_columns(data, fixed, v2)
    return pos + (ncols + 7) // 8 * (2 if update else 1)
