"""Config files that hold a secret (``remote.api_key``) and that other users can read.

The key gives use of a paid or private OCR server; a config file is often made with the
umask's 0644. ``doctor`` fails this check and the daemon logs a warning at every start;
the fix is ``chmod 600`` (or the key in ``OCRWATCH_REMOTE_API_KEY`` instead).
"""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

from ocrwatch.config import Config

SECRET_KEYS = ("remote.api_key",)
_FILE = "the file "


def exposed_secrets(config: Config) -> list[str]:
    """One warning per config file holding a secret that group or others may read or
    write; none when the secrets come from the environment or no file is readable."""
    warnings = []
    for key in SECRET_KEYS:
        section, name = key.split(".")
        if not getattr(getattr(config, section), name):
            continue
        origin = config.origins.get(key, "")
        if not origin.startswith(_FILE):
            continue  # the environment or the command line: no file to protect
        path = Path(origin[len(_FILE):])
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            continue
        if mode & 0o066:
            who = " and ".join(w for w, bits in (("its group", 0o060), ("other users", 0o006))
                               if mode & bits)
            warnings.append(f"{path} holds {key} and {who} can read or change it (mode "
                            f"{mode:04o}): run `chmod 600 {shlex.quote(str(path))}`, or put "
                            "the key in OCRWATCH_REMOTE_API_KEY instead")
    return warnings
