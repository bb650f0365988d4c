"""Build small real Outlook .msg files for the tests: an MS-CFB v3 container with MAPI streams.

No library writes .msg files, so this writes the two published formats
directly ([MS-CFB] compound file, [MS-OXMSG] property streams), just enough
for a top-level message with string properties, transport headers, a submit
time and attachments by value. Every stream is below the 4096-byte cutoff, so
all of them live in the mini stream.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime

SECTOR = 512
MINI_SECTOR = 64
MINI_CUTOFF = 4096
FREE, END_OF_CHAIN, FAT_SECTOR, NO_STREAM = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF
PT_LONG, PT_UNICODE, PT_SYSTIME = 0x0003, 0x001F, 0x0040
ATTACH_BY_VALUE = 1
_FILETIME_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)


def build_msg(
    *, subject: str, body: str, sender: str, to: str, sent: datetime, html: str | None = None,
    attachments: tuple[tuple[str, bytes], ...] = (),
) -> bytes:
    """A .msg holding one sent e-mail (message class IPM.Note), with (file name, bytes) attachments."""
    headers = f"From: {sender}\r\nTo: {to}\r\nSubject: {subject}\r\nDate: {sent:%a, %d %b %Y %H:%M:%S %z}\r\n\r\n"
    strings = {0x001A: "IPM.Note", 0x0037: subject, 0x007D: headers, 0x0C1A: sender, 0x0E04: to}
    if body:
        strings[0x1000] = body
    streams = {f"__substg1.0_{prop:04X}{PT_UNICODE:04X}": _utf16(value) for prop, value in strings.items()}
    if html is not None:
        streams["__substg1.0_10130102"] = html.encode("utf-8")  # PR_HTML, binary
    streams["__properties_version1.0"] = _property_stream(strings, sent)
    if attachments:
        # Attachments read the named-property map; an empty one is valid.
        for stream in ("00020102", "00030102", "00040102"):
            streams[f"__nameid_version1.0/__substg1.0_{stream}"] = b""
    for number, (filename, data) in enumerate(attachments):
        folder = f"__attach_version1.0_#{number:08X}"
        streams[f"{folder}/__substg1.0_3707{PT_UNICODE:04X}"] = _utf16(filename)
        streams[f"{folder}/__substg1.0_37010102"] = data
        # Attachment property stream: 8 reserved bytes, then PR_ATTACH_METHOD.
        streams[f"{folder}/__properties_version1.0"] = bytes(8) + struct.pack("<IIII", 0x3705 << 16 | PT_LONG, 0x6, ATTACH_BY_VALUE, 0)
    return build_compound_file(streams)


def _utf16(value: str) -> bytes:
    return value.encode("utf-16-le") + b"\x00\x00"


def _property_stream(strings: dict[int, str], sent: datetime) -> bytes:
    """Top-level message header (32 bytes) and one 16-byte entry per property."""
    out = bytearray(8) + struct.pack("<IIII", 0, 0, 0, 0) + bytearray(8)
    for prop, value in strings.items():
        out += struct.pack("<IIII", prop << 16 | PT_UNICODE, 0x6, len(_utf16(value)), 0)
    filetime = int((sent - _FILETIME_EPOCH).total_seconds() * 10_000_000)
    out += struct.pack("<IIQ", 0x0039 << 16 | PT_SYSTIME, 0x6, filetime)
    return bytes(out)


def build_compound_file(streams: dict[str, bytes]) -> bytes:
    """A CFB v3 file whose root storage holds `streams` (all smaller than the mini stream cutoff).

    A name "folder/stream" puts the stream into the storage "folder" (one level deep).
    """
    names = sorted(streams, key=lambda name: (len(name), name.upper()))
    mini_stream, starts = bytearray(), {}
    for name in names:
        if len(streams[name]) >= MINI_CUTOFF:
            raise ValueError(f"{name}: only mini streams are supported")
        if not streams[name]:
            starts[name] = END_OF_CHAIN  # an empty stream owns no sector
            continue
        starts[name] = len(mini_stream) // MINI_SECTOR
        mini_stream += _pad(streams[name], MINI_SECTOR)
    minifat = _mini_fat(names, streams, starts)
    directory_sectors = -(-(len(names) + len({n.split("/")[0] for n in names if "/" in n}) + 1) * 128 // SECTOR)
    minifat_sectors = -(-len(minifat) // SECTOR)
    ministream_sectors = -(-len(mini_stream) // SECTOR)
    first_dir, first_minifat = 1, 1 + directory_sectors
    first_ministream = first_minifat + minifat_sectors
    total = first_ministream + ministream_sectors
    if total > SECTOR // 4:
        raise ValueError("too much data for one FAT sector")
    fat = [FAT_SECTOR]
    for start, count in ((first_dir, directory_sectors), (first_minifat, minifat_sectors), (first_ministream, ministream_sectors)):
        fat += [start + i + 1 for i in range(count - 1)] + [END_OF_CHAIN]
    fat += [FREE] * (SECTOR // 4 - len(fat))
    entries = _directory(names, streams, starts, first_ministream if mini_stream else END_OF_CHAIN, len(mini_stream))
    directory = _pad(b"".join(entries), SECTOR, filler=_empty_dir_entry())
    header = _header(first_dir, first_minifat if minifat else END_OF_CHAIN, minifat_sectors)
    body = struct.pack(f"<{len(fat)}I", *fat) + directory + _pad(minifat, SECTOR) + _pad(bytes(mini_stream), SECTOR)
    return header + body


def _directory(names: list[str], streams: dict[str, bytes], starts: dict[str, int], root_start: int, root_size: int) -> list[bytes]:
    """Root entry, then each level's children as one chain of right siblings (a valid, if lopsided, tree)."""
    levels: dict[str, list[str]] = {"": []}
    for name in names:
        folder, _, leaf = name.rpartition("/")
        if folder and folder not in levels:
            levels[folder] = []
            levels[""].append(folder)
        levels[folder].append(name)
    order = [*levels[""], *(n for folder, members in levels.items() if folder for n in members)]
    ids = {name: index + 1 for index, name in enumerate(order)}

    def chain(members: list[str]) -> dict[str, int]:
        return {m: ids[members[i + 1]] if i + 1 < len(members) else NO_STREAM for i, m in enumerate(members)}

    right = {k: v for members in levels.values() for k, v in chain(members).items()}
    child = lambda members: ids[members[0]] if members else NO_STREAM  # noqa: E731
    entries = [_dir_entry("Root Entry", 5, child=child(levels[""]), start=root_start, size=root_size)]
    for name in order:
        if name in levels:
            entries.append(_dir_entry(name, 1, right=right[name], child=child(levels[name]), start=0, size=0))
        else:
            entries.append(_dir_entry(name.rpartition("/")[2], 2, right=right[name], start=starts[name], size=len(streams[name])))
    return entries


def _mini_fat(names: list[str], streams: dict[str, bytes], starts: dict[str, int]) -> bytes:
    chain: list[int] = []
    for name in (n for n in names if streams[n]):
        count = -(-len(streams[name]) // MINI_SECTOR)
        first = starts[name]
        chain += [first + i + 1 for i in range(count - 1)] + [END_OF_CHAIN]
    if not chain:
        return b""
    chain += [FREE] * (-len(chain) % (SECTOR // 4))
    return struct.pack(f"<{len(chain)}I", *chain)


def _header(first_dir: int, first_minifat: int, minifat_sectors: int) -> bytes:
    difat = [0] + [FREE] * 108  # the single FAT sector is sector 0
    return struct.pack(
        "<8s16sHHHHH6sIIIIIIIII109I",
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", bytes(16), 0x3E, 3, 0xFFFE, 9, 6, bytes(6),
        0, 1, first_dir, 0, MINI_CUTOFF, first_minifat, minifat_sectors, END_OF_CHAIN, 0, *difat,
    )  # fmt: skip


def _dir_entry(name: str, kind: int, *, child: int = NO_STREAM, right: int = NO_STREAM, start: int, size: int) -> bytes:
    encoded = name.encode("utf-16-le") + b"\x00\x00"
    return struct.pack(
        "<64sHBBIII16sIQQIQ",
        encoded, len(encoded), kind, 1, NO_STREAM, right, child, bytes(16), 0, 0, 0, start, size,
    )  # fmt: skip


def _empty_dir_entry() -> bytes:
    return struct.pack("<64sHBBIII16sIQQIQ", bytes(64), 0, 0, 0, NO_STREAM, NO_STREAM, NO_STREAM, bytes(16), 0, 0, 0, 0, 0)


def _pad(data: bytes, unit: int, filler: bytes = b"\x00") -> bytes:
    missing = -len(data) % unit
    return data + (filler * (missing // len(filler) + 1))[:missing]
