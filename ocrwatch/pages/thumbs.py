"""Small thumbnails of read pages, for the search page, in the cache folder.

One WebP per page, at most :data:`MAX_BYTES`, named by the file's SHA-256 and the page
number: identical copies share them and a move or rename leaves them where they are.
They are removed with the last index row of that content.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import secrets
import shutil
from pathlib import Path

from PIL import Image

log = logging.getLogger(__name__)

MAX_BYTES = 30_000
MAX_SIDE = 320  # pixels: a hit's picture on the page is 120-160 px wide, sharp on HiDPI
_SHA = re.compile(r"[0-9a-f]{64}")


def encode(image: Image.Image) -> bytes:
    """The page as a WebP of at most MAX_BYTES."""
    # Shrunk first, then made RGB: a full-size RGB copy of a grey or 1-bit page would be
    # three or twenty-four times its own memory. A 1-bit page is shrunk in grey (Pillow
    # shrinks 1-bit pixels by dropping them).
    source = image.convert("L") if image.mode == "1" else image
    scale = min(1.0, MAX_SIDE / max(source.size))
    size = (max(1, round(source.width * scale)), max(1, round(source.height * scale)))
    thumb = source.resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0).convert("RGB")
    quality = 60
    while True:
        buf = io.BytesIO()
        thumb.save(buf, "WEBP", quality=quality, method=4)
        data = buf.getvalue()
        if len(data) <= MAX_BYTES:
            return data
        if quality > 20:
            quality -= 15
        else:  # busy pages: smaller still
            thumb.thumbnail((thumb.width * 3 // 4, thumb.height * 3 // 4))


class Thumbnails:
    """The thumbnail folder: ``ROOT/ab/abcdef…/N.webp``, readable by the user alone."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, sha256: str) -> Path:
        if not _SHA.fullmatch(sha256):
            raise ValueError(f"not a SHA-256: {sha256!r}")
        return self.root / sha256[:2] / sha256

    def path(self, sha256: str, page: int) -> Path:
        """Where page ``page`` (1-based) of this content has its thumbnail."""
        return self.folder(sha256) / f"{int(page)}.webp"

    def save(self, sha256: str, page: int, image: Image.Image, *, again: bool = False) -> None:
        """Make the thumbnail (``again``: in place of the one made, a page turned once its
        reading showed it was not upright); a failure costs the picture only, never the
        page."""
        target = self.path(sha256, page)
        try:
            if target.exists() and not again:
                return
            data = encode(image)
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.root, 0o700)
            # Unique per call: preparer threads of one process may write at the same time.
            tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except (OSError, ValueError) as exc:
            log.warning("no thumbnail for page %d of %s: %s", page, sha256[:12], exc)

    def remove(self, sha256: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            shutil.rmtree(self.folder(sha256))

    def sweep(self, keep: set[str]) -> int:
        """Remove the thumbnails of content no longer in the index; returns how many sets."""
        removed = 0
        if not self.root.is_dir():
            return 0
        for bucket in self.root.iterdir():
            if not bucket.is_dir():
                continue
            for folder in bucket.iterdir():
                if folder.name not in keep and _SHA.fullmatch(folder.name):
                    shutil.rmtree(folder, ignore_errors=True)
                    removed += 1
        return removed
