"""The optional ``failed/`` folder: failed originals moved out of the inbox with a note."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.sidecar import write_atomic

log = logging.getLogger(__name__)


def move_failed(path: Path, reason: str, config: Config) -> Path | None:
    """Move ``path`` into ``failed_dir`` (mirroring the inbox tree) with ``NAME.error.txt``.

    Returns the new path, or None when the file could not be moved (it then stays put).
    """
    assert config.failed_dir is not None
    rel: Path = Path(path.name)
    for inbox in config.inbox:
        if path.is_relative_to(inbox):
            rel = path.relative_to(inbox)
            break
    dest = config.failed_dir / rel
    if dest.exists():
        dest = dest.with_name(f"{dest.stem}.{time.strftime('%Y%m%d-%H%M%S')}{dest.suffix}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(dest))
        write_atomic(dest.with_name(dest.name + ".error.txt"),
                     f"{path}\nfailed: {reason}\nwhen: {time.ctime()}\n"
                     "Fix the file and drop it into the inbox again.\n")
    except Exception as exc:
        log.warning("could not move %s to %s: %s", path, config.failed_dir, exc)
        return None
    log.info("moved %s to %s", path, dest)
    return dest
