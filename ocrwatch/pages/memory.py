"""Give freed memory back to the system after a big page.

glibc keeps freed heap memory for reuse, so after one 100-megapixel page the process
would hold its peak for as long as it runs; ``malloc_trim`` returns it. Each thread
keeps its own heap, too: without a trim after each page Tesseract reads at its own size,
every reader's largest page stays resident while the others read theirs (a 4-page
scanned PDF on two readers peaked at 266 MB, trimmed at 253-261 MB).
"""

from __future__ import annotations

import ctypes
import functools
import gc
from typing import Any

# After a page this large, freed memory goes back: after every page Tesseract reads at
# 200 dpi or more (Letter at 200 dpi is 3.7 megapixels), never after a page fitted for
# the model (at most 1540 px square, 2.4 megapixels), which come several a second.
BIG_PAGE_PIXELS = 3_000_000


def big(size: tuple[int, int]) -> bool:
    return size[0] * size[1] > BIG_PAGE_PIXELS


@functools.cache
def _libc() -> Any:
    # The C library already loaded, found without ctypes.util.find_library, which runs
    # ``ldconfig -p``: a child forked (vfork) in the middle of reading a page.
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def give_back() -> None:
    """Collect garbage and return free heap pages to the system (glibc only; else no-op)."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
