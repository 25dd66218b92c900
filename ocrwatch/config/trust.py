"""A config file another local user could have written is not read, as ssh refuses such files.

The config names programs to run (``on_done``) and folders to move and delete files in,
so whoever can change it runs code as the owner. It is refused when another user can
write it or put another file in its place: the file (or a link to it) owned by someone
other than the user or root, or writable by group or others; or a folder on the way to
it (the path as given and the path links resolve to) owned by someone else, or writable
by others without the sticky bit (``/tmp``'s sticky bit lets no one replace a file they
do not own). Group write is allowed only for a private group (the user's own, with no
other member), as Debian's ssh allows. A FAT or NTFS mount shows every file 0777 and is
refused too: mount it with ``fmask=0133,dmask=0022`` or keep the config elsewhere.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

from ocrwatch.core.errors import ConfigError


@dataclass(frozen=True)
class Untrusted:
    """Why another user could change the config file, and the command that fixes it."""

    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.why}; fix: {self.fix}"


class UntrustedConfig(ConfigError):
    """The config file could have been written by another local user."""


def _owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _private_group(gid: int, uid: int) -> bool:
    """True when no user but ``uid`` belongs to group ``gid``."""
    try:
        group = grp.getgrgid(gid)
        me = pwd.getpwuid(uid)
    except KeyError:
        return False
    if any(member != me.pw_name for member in group.gr_mem):
        return False
    return all(entry.pw_uid == uid for entry in pwd.getpwall() if entry.pw_gid == gid)


def _judge(path: Path, st: os.stat_result, uid: int, *, is_file: bool) -> Untrusted | None:
    quoted = shlex.quote(str(path))
    if st.st_uid not in (uid, 0):
        owner = _owner_name(st.st_uid)
        return Untrusted(f"{path} is owned by {owner}, who could change what ocrwatch runs",
                         f"keep the config in a folder of your own (cp it to "
                         f"~/.config/ocrwatch/config.toml), or `sudo chown "
                         f"{_owner_name(uid)} {quoted}`")
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return None  # a link's own mode means nothing; its folder and target are checked
    sticky = bool(mode & stat.S_ISVTX) and not is_file
    if mode & 0o002 and not sticky:
        return Untrusted(f"{path} can be changed by every user (mode {mode:04o})",
                         f"chmod o-w {quoted}")
    if mode & 0o020 and not sticky and not _private_group(st.st_gid, uid):
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = f"gid {st.st_gid}"
        return Untrusted(f"{path} can be changed by the group {group} (mode {mode:04o})",
                         f"chmod g-w {quoted}")
    return None


def untrusted(path: Path, opened: os.stat_result | None = None,
              uid: int | None = None) -> Untrusted | None:
    """Why another user could change ``path`` (None when none could). ``opened`` is the
    fstat of the file as it was opened, so the file judged is the file read."""
    uid = os.geteuid() if uid is None else uid
    absolute = Path(os.path.abspath(path))
    try:
        real = absolute.resolve(strict=True)
        first = opened if opened is not None else os.stat(real)
    except OSError:
        return None  # what cannot be read is said by the reader
    found = _judge(real, first, uid, is_file=True)
    if found is not None:
        return found
    seen = {real}
    # The path as written (links included) and the path links lead to, up to /.
    for start in (absolute, real):
        for item in (start, *start.parents):
            if item in seen:
                continue
            seen.add(item)
            try:
                st = os.lstat(item)
            except OSError:
                continue
            found = _judge(item, st, uid, is_file=item == absolute)
            if found is not None:
                return found
    return None


def refuse(path: Path, opened: os.stat_result | None = None) -> None:
    """Raise :class:`UntrustedConfig` when another user could have written ``path``."""
    found = untrusted(path, opened)
    if found is not None:
        raise UntrustedConfig(f"{path}: not read: {found.why}, and the config says which "
                              f"programs ocrwatch runs as you. Fix: {found.fix}")
