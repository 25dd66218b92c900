"""The optional ``failed/`` folder: failed originals moved out of the inbox with a note."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.fs.fsmove import create_unique, move_unique
from ocrwatch.fs.safeopen import open_dir_beneath

log = logging.getLogger(__name__)


def move_failed(path: Path, reason: str, config: Config) -> Path | None:
    """Move ``path`` into ``failed_dir`` (mirroring the inbox tree) with ``NAME.error.txt``.

    Returns the new path, or None when the file could not be moved (it then stays put).
    A file already in ``failed_dir`` is never replaced: a second ``bad.pdf`` becomes
    ``bad.2.pdf`` (the move itself refuses to replace, so no race loses one).
    """
    assert config.failed_dir is not None
    rel: Path = Path(path.name)
    for inbox in config.inbox:
        if path.is_relative_to(inbox):
            rel = path.relative_to(inbox)
            break
    if not os.path.lexists(path):
        return None  # deleted meanwhile: nothing to keep
    try:
        # No link followed below failed_dir, nor failed_dir itself once swapped for one.
        os.close(open_dir_beneath(config.failed_dir, (config.failed_dir / rel).parent,
                                  create=True))
        dest = move_unique(path, config.failed_dir / rel)
    except Exception as exc:
        log.warning("could not move %s to %s: %s", path, config.failed_dir, exc)
        return None
    try:
        create_unique(dest.with_name(dest.name + ".error.txt"),
                      f"{path}\nfailed: {reason}\nwhen: {time.ctime()}\n"
                      "Fix the file and drop it into the inbox again.\n".encode())
    except Exception as exc:
        log.warning("moved %s to %s but could not write its note: %s", path, dest, exc)
    log.info("moved %s to %s", path, dest)
    return dest
