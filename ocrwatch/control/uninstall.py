"""``ocrwatch uninstall``: undo what installing and running ocrwatch added outside its
own package, and say what user data stays and where.

What it removes: the running daemon (stopped), the autostart entries
(:mod:`~ocrwatch.control.autostart`), the link ``make run`` puts in ``~/.local/bin``
(or ``LINK_DIR``) and the PATH block ``tools/ensure-path.sh`` adds to ``~/.bashrc`` and
``~/.zshrc``, and the man page and completion scripts the README's commands write (when
they are as written). A link belongs to ocrwatch's Makefile when it points into a virtual
environment carrying the Makefile's ``.base`` stamp, or points at an ``ocrwatch`` that
is gone (``make clean`` before this existed); a link pipx or uv made is theirs, removed by
``pipx uninstall`` or ``uv tool uninstall``, which it names. A PATH block is removed only
when its two lines are exactly what the script writes.

What it never touches: the config file, the index, the thumbnails, the log, the
sidecars, the archive: the user's data, each named with its place.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ocrwatch.config.schema import Config
from ocrwatch.control import autostart

MARK = "# ocrwatch: its program is in "  # tools/ensure-path.sh's first line, then the folder
RC_FILES = (".bashrc", ".zshrc", ".profile", ".bash_profile")
STAMP = ".base"  # the Makefile's stamp in the venv it made (Makefile: $(VENV)/.base)
# Where the README's examples put `ocrwatch manpage` and `ocrwatch completion SHELL`, and
# what the first 4 KiB of such a file holds when it was made so.
MADE = (
    (".local/share/man/man1/ocrwatch.1", ".TH OCRWATCH "),
    (".local/share/bash-completion/completions/ocrwatch", "_shtab_ocrwatch"),
    (".zfunc/_ocrwatch", "_shtab_ocrwatch"),
    (".config/fish/completions/ocrwatch.fish", "_shtab_ocrwatch"),
)


def _case_line(directory: str) -> str:
    """The line tools/ensure-path.sh writes under its mark."""
    return f'case ":$PATH:" in *":{directory}:"*) ;; *) export PATH="{directory}:$PATH";; esac'


@dataclass(frozen=True)
class PathBlock:
    """The PATH lines ensure-path.sh added to one startup file."""

    rc: Path
    directory: str
    first: int  # index of the first line removed (the blank line before the mark, if any)
    end: int  # index after the last line removed


@dataclass
class Plan:
    """What uninstalling does here, and what it leaves."""

    daemon_pid: int | None = None
    autostart: list[Path] = field(default_factory=list)
    links: list[tuple[Path, str]] = field(default_factory=list)  # (link, its target)
    made: list[Path] = field(default_factory=list)  # a man page, completion scripts
    blocks: list[PathBlock] = field(default_factory=list)
    package: str = ""  # how the program itself is removed
    kept: list[tuple[str, Path]] = field(default_factory=list)  # user data left: (what, where)

    @property
    def empty(self) -> bool:
        return not (self.daemon_pid or self.autostart or self.links or self.blocks
                    or self.made)


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ["HOME"]) if environ.get("HOME") else Path.home()


def path_blocks(home: Path) -> list[PathBlock]:
    """The PATH blocks of ensure-path.sh in the user's shell startup files."""
    out = []
    for name in RC_FILES:
        rc = home / name
        try:
            lines = rc.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError):
            continue
        for i, line in enumerate(lines[:-1]):
            if not line.startswith(MARK):
                continue
            directory = line[len(MARK):]
            if lines[i + 1] != _case_line(directory):
                continue  # edited by hand: not ours to judge
            first = i - 1 if i > 0 and lines[i - 1] == "" else i
            out.append(PathBlock(rc, directory, first, i + 2))
    return out


def made_files(home: Path) -> list[Path]:
    """The man page and completion scripts the README's commands wrote, as written."""
    out = []
    for where, mark in MADE:
        path = home / where
        try:
            with path.open("rb") as fh:
                head = fh.read(4096).decode("utf-8", "replace")
        except OSError:
            continue
        if mark in head and not path.is_symlink():
            out.append(path)
    return out


def _ours(link: Path) -> str | None:
    """The target of ``link`` when it is the Makefile's link to its venv's program (or a
    link to an ocrwatch that is gone); None for anything else."""
    if not link.is_symlink():
        return None
    target = os.readlink(link)
    resolved = link.parent / target
    if resolved.name != "ocrwatch":
        return None
    if (resolved.parent.parent / STAMP).exists():
        return target  # a venv the Makefile made
    if not os.path.lexists(resolved):
        return target  # dangling: of use to nobody
    return None


def _package(prefix: Path) -> str:
    """How the program itself is removed, from where this Python lives."""
    parts = prefix.parts
    if "pipx" in parts and "venvs" in parts:
        return "pipx uninstall ocrwatch"
    if "uv" in parts and "tools" in parts:
        return "uv tool uninstall ocrwatch"
    if (prefix / STAMP).exists() and (prefix.parent / "Makefile").exists():
        return f"make -C {prefix.parent} clean   (removes {prefix}; the checkout stays)"
    return f"{Path(sys.executable).name} -m pip uninstall ocrwatch"


def _data(config: Config, config_file: Path) -> list[tuple[str, Path]]:
    """The user's data ocrwatch made or reads, that exists: never removed here."""
    from ocrwatch.fs import paths

    found: list[tuple[str, Path]] = []

    def add(what: str, where: Path | None) -> None:
        if where is not None and where.exists() and all(where != p for _, p in found):
            found.append((what, where))

    add("the config file", config_file)
    add("the index (the text of every page read; also its -wal, -shm and .lock files)",
        config.database)
    add("page thumbnails (made again when needed)", config.cache_dir)
    add("the log", paths.log_dir())
    if config.output_dir is not None:
        add("the sidecars (.md, .txt)", config.output_dir)
    else:
        for inbox in config.inbox:
            add("your files and, beside each, its sidecars (.md, .txt)", inbox)
    add("the archived originals (on_success = \"archive\")", config.archive_dir)
    add("the files that failed (failed_dir)", config.failed_dir)
    return found


def plan(config: Config, config_file: Path, *,
         environ: Mapping[str, str] | None = None,
         running: int | None = None) -> Plan:
    """What ``uninstall`` would do for this user (``running``: the daemon's PID)."""
    env = os.environ if environ is None else environ
    home = _home(env)
    out = Plan(daemon_pid=running, autostart=autostart.installed(env),
               blocks=path_blocks(home), made=made_files(home),
               package=_package(Path(sys.prefix)),
               kept=_data(config, config_file))
    folders = [home / ".local" / "bin", *(Path(b.directory) for b in out.blocks)]
    for folder in dict.fromkeys(folders):
        link = folder / "ocrwatch"
        target = _ours(link)
        if target is not None:
            out.links.append((link, target))
    return out


def remove_block(block: PathBlock) -> None:
    """Take ``block``'s lines out of its file, in place (the file's mode kept; through a
    link, the file it points to), written whole before it replaces the old one."""
    rc = block.rc.resolve()
    lines = rc.read_text(encoding="utf-8").split("\n")
    # Looked for again: the file may have changed since the plan was made.
    again = [b for b in path_blocks(block.rc.parent)
             if b.rc == block.rc and b.directory == block.directory]
    if not again:
        return
    b = again[0]
    kept = lines[:b.first] + lines[b.end:]
    tmp = rc.with_name(f".{rc.name}.ocrwatch-tmp")  # ours alone: one left by a crash goes
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    mode = rc.stat().st_mode & 0o7777
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(kept))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, rc)
