"""Which files in the inbox are candidates, and whether one looks completely written."""

from __future__ import annotations

import fnmatch
import logging
import mmap
import os
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from ocrwatch.core import naming
from ocrwatch.pages.decode import SUFFIXES

log = logging.getLogger(__name__)

IGNORED_SUFFIXES = frozenset({".part", ".crdownload", ".tmp", ".partial", ".download", ".swp"})


def is_ignored_name(name: str) -> bool:
    """Temporary, partial, hidden and lock files are never read."""
    return (
        name.startswith((".", "~$", "~lock."))
        or Path(name).suffix.lower() in IGNORED_SUFFIXES
        or name.endswith("~")
        or name.lower().endswith(".ocr.pdf")  # ocrwatch's own searchable PDFs
    )


class Ignore:
    """The user's ``ignore`` patterns: shell globs on file names (``*.tmp``, ``~$*``,
    ``scan-draft-*.pdf``), case ignored, kept out besides the fixed names above. Each
    pattern that keeps a file out is logged once, with the first file it matched (a
    folder of 10,000 drafts is one line); ``counts`` says how many each kept out.

    ``patterns`` may be replaced while it is used (the config reloaded)."""

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        self.patterns: tuple[str, ...] = tuple(patterns)
        self.counts: dict[str, int] = {}
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def match(self, name: str) -> str | None:
        """The first pattern ``name`` matches, or None."""
        low = name.lower()
        for pattern in self.patterns:
            if fnmatch.fnmatchcase(low, pattern.lower()):
                return pattern
        return None

    def __call__(self, path: Path) -> bool:
        """Whether ``path`` is kept out by a pattern (said in the log once per pattern)."""
        pattern = self.match(path.name)
        if pattern is None:
            return False
        with self._lock:
            self.counts[pattern] = self.counts.get(pattern, 0) + 1
            first = pattern not in self._said
            self._said.add(pattern)
        if first:
            log.info("not read: %s, and every file matching the ignore pattern %r (`ignore` "
                     "in the config)", path, pattern)
        return True


def wanted(path: Path, roots: list[Path], ignore: Ignore | None = None) -> bool:
    """Whether ``path`` is a file the daemon should read, judged by its name alone."""
    if path.suffix.lower() not in SUFFIXES or is_ignored_name(path.name):
        return False
    if ignore is not None and ignore(path):
        return False
    return _in_view(path, roots)


def _in_view(path: Path, roots: list[Path]) -> bool:
    """Under a watched folder, and in no hidden folder (.git, .Trash-1000, our own
    temporary files) of it."""
    for root in roots:
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        return not any(part.startswith(".") for part in rel.parts[:-1])
    return False


NO_SUFFIX = "(no suffix)"


def other_kind(path: Path, roots: list[Path]) -> str | None:
    """The suffix (``.docx``) of a file in a watched folder that is no image or PDF the
    daemon reads, or None: for files it reads, its own outputs (``.md``, ``.txt``,
    ``.hocr``, ``.alto.xml``, ``.ocr.pdf``: the user's notes beside scans among them),
    temporary, hidden and lock files."""
    name = path.name.lower()
    suffix = path.suffix.lower()
    if suffix in SUFFIXES or is_ignored_name(path.name):
        return None
    if name.endswith(tuple(naming.SUFFIXES.values())) or not _in_view(path, roots):
        return None
    return suffix or NO_SUFFIX


class OtherKinds:
    """Files in the watched folders that are no image or PDF (``report.docx``,
    ``mail.eml``, ``photos.zip``): left alone, and said. Each suffix is logged once, with
    its first file; ``counts`` says how many files of each were met since the start, for
    ``status``. Files the user's ``ignore`` patterns name are theirs to keep quiet."""

    REMEMBERED = 10_000  # files remembered so that one saved twice is counted once

    def __init__(self, ignore: Ignore | None = None) -> None:
        self.ignore = ignore
        self.counts: dict[str, int] = {}
        self._met: set[Path] = set()
        self._lock = threading.Lock()

    def __call__(self, path: Path, roots: list[Path]) -> None:
        kind = other_kind(path, roots)
        if kind is None or (self.ignore is not None and self.ignore.match(path.name)):
            return
        with self._lock:
            if path in self._met:
                return
            if len(self._met) < self.REMEMBERED:
                self._met.add(path)
            first = kind not in self.counts
            self.counts[kind] = self.counts.get(kind, 0) + 1
        if first:
            log.info("not read: %s, and every %s file in the watched folders: ocrwatch reads "
                     "images and PDFs (save or print it as a PDF into the inbox to have it "
                     "read)", path, "suffix-less" if kind == NO_SUFFIX else kind)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


def looks_complete(path: Path) -> bool:
    """Cheap check that a writer has finished: the format's end marker is present."""
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 2048))
            tail = fh.read()
    except OSError:
        return True  # let the reader report the real problem
    if size == 0:
        return False
    tail = tail.rstrip(b"\x00\r\n\t ")
    if head.startswith(b"\xff\xd8"):
        # Phones append trailers and motion-photo videos after the end marker.
        return tail.endswith(b"\xff\xd9") or _jpeg_ends(path)
    if head.startswith(b"\x89PNG"):
        return b"IEND" in tail[-16:]
    if head.startswith(b"%PDF"):
        return b"%%EOF" in tail
    if head[:2] == b"BM" or head[:4] == b"RIFF":
        # BMP and WebP state their whole length in the header.
        declared = (int.from_bytes(head[2:6], "little") if head[:2] == b"BM"
                    else int.from_bytes(head[4:8], "little") + 8)
        return size >= declared
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return _tiff_complete(path, size, "<" if head[:2] == b"II" else ">")
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return tail.endswith(b";")  # the GIF trailer
    if head[4:8] == b"ftyp":
        return _boxes_complete(path, size)
    return True


# In a JPEG's compressed data an FF byte is followed by 00 (stuffing) or a restart
# marker (D0-D7); any other byte after FF is the next marker.
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def _jpeg_ends(path: Path) -> bool:
    """Whether a JPEG's own end marker (FF D9) is in the file, bytes after it or not.

    Its segments are walked by their lengths, so the end marker of the EXIF thumbnail
    (inside an APP1 segment) is not taken for the image's."""
    try:
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            where, size = 2, len(data)
            for _ in range(100_000):
                if where + 2 > size or data[where] != 0xFF:
                    return False
                marker = data[where + 1]
                if marker == 0xD9:
                    return True
                if marker == 0xFF:  # fill byte before a marker
                    where += 1
                    continue
                if 0xD0 <= marker <= 0xD7 or marker == 0x01:
                    where += 2  # no length
                    continue
                if where + 4 > size:
                    return False
                where += 2 + int.from_bytes(data[where + 2:where + 4], "big")
                if marker == 0xDA:  # a scan: its compressed data runs to the next marker
                    found = _NEXT_MARKER.search(data, where)  # type: ignore[call-overload]
                    if found is None:
                        return False
                    where = found.start()
    except (OSError, ValueError):
        return True  # let the reader report the real problem
    return False


def _boxes_complete(path: Path, size: int) -> bool:
    """Whether an ISO base media file (HEIC, AVIF) is all there: its top-level boxes,
    each stating its length, reach exactly its end."""
    try:
        with path.open("rb") as fh:
            where = 0
            for _ in range(10_000):
                if where == size:
                    return True
                fh.seek(where)
                header = fh.read(16)
                if len(header) < 8:
                    return False
                length = int.from_bytes(header[:4], "big")
                if length == 1 and len(header) == 16:
                    length = int.from_bytes(header[8:16], "big")
                elif length == 0:
                    return True  # the last box runs to the end of the file
                if length < 8 or where + length > size:
                    return False
                where += length
    except OSError:
        return True  # let the reader report the real problem
    return True


def _tiff_complete(path: Path, size: int, order: str) -> bool:
    """Whether a TIFF's first page is all there: its directory and every strip or tile
    lie inside the file. Writers such as libtiff put the directory last."""
    import struct

    try:
        with path.open("rb") as fh:
            fh.seek(4)
            (ifd,) = struct.unpack(order + "I", fh.read(4))
            if ifd == 0:
                return True  # no directory yet, or none at all: the settle time decides
            if ifd + 2 > size:
                return False  # the directory is not written yet
            fh.seek(ifd)
            (count,) = struct.unpack(order + "H", fh.read(2))
            if ifd + 2 + 12 * count + 4 > size:
                return False
            entries = fh.read(12 * count)
            values: dict[int, list[int]] = {}
            for i in range(count):
                tag, kind, n, raw = struct.unpack(order + "HHI4s", entries[12 * i:12 * i + 12])
                if tag not in (273, 279, 324, 325) or kind not in (3, 4):
                    continue  # only strip and tile offsets and byte counts matter
                item = "H" if kind == 3 else "I"
                width = 2 if kind == 3 else 4
                if n * width <= 4:
                    data = raw[:n * width]
                else:
                    (where,) = struct.unpack(order + "I", raw)
                    if where + n * width > size:
                        return False
                    fh.seek(where)
                    data = fh.read(n * width)
                values[tag] = list(struct.unpack(order + item * n, data))
    except (OSError, struct.error):
        return True  # not a TIFF we understand: let the reader judge it
    for offsets_tag, counts_tag in ((273, 279), (324, 325)):
        offsets, counts = values.get(offsets_tag, []), values.get(counts_tag, [])
        if any(o + c > size for o, c in zip(offsets, counts, strict=False)):
            return False
    return True


def walk(roots: list[Path], ignore: Ignore | None = None,
         others: OtherKinds | None = None) -> Iterator[Path]:
    """Every candidate file under the roots, hidden folders skipped, links not followed;
    the files of other kinds are told to ``others``."""
    for root in roots:
        for folder, dirs, files in os.walk(root, followlinks=False, onerror=None):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            base = Path(folder)
            for name in files:
                path = base / name
                if wanted(path, roots, ignore):
                    yield path
                elif others is not None:
                    others(path, roots)
