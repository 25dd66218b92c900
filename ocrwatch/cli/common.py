"""What every command shares: printing, the config from the options, the database."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from ocrwatch import config as config_mod
from ocrwatch.cli.termsafe import safe_lines

log = logging.getLogger("ocrwatch")

EXIT_BROKEN_PIPE = 141  # what a shell reports for a program ended by SIGPIPE


def echo(text: str = "", *, err: bool = False) -> None:
    """Print a report: control characters from names and page text are shown escaped."""
    print(safe_lines(text), file=sys.stderr if err else sys.stdout)


def load_config(args: argparse.Namespace) -> config_mod.Config:
    overrides: dict[str, Any] = {}
    for key in ("engine", "output_dir", "database", "languages", "log_level"):
        value = getattr(args, key, None)
        if value is not None:
            overrides[key] = str(value)
    if getattr(args, "inbox", None):
        overrides["inbox"] = [str(p) for p in args.inbox]
    jobs = getattr(args, "jobs", None)
    if jobs is not None:  # one knob for what each engine calls its concurrency
        overrides["workers"] = overrides["remote.concurrency"] = str(jobs)
    config = config_mod.load(getattr(args, "config", None), overrides=overrides)
    if jobs is not None:
        for key in ("workers", "remote.concurrency"):
            config.origins[key] = "the command-line flag --jobs"
    return config


def database_arg(args: argparse.Namespace) -> tuple[Path, str]:
    """The index file the command names, and where that name came from."""
    if getattr(args, "database", None):
        return Path(args.database).expanduser(), "the command-line flag --database"
    config = config_mod.load(getattr(args, "config", None))
    return config.database, config.origin("database")


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
