"""Commands for the daemon's life as an installed program: ``restart`` and ``uninstall``."""

from __future__ import annotations

import argparse

from ocrwatch.cli.common import echo


def cmd_restart(args: argparse.Namespace) -> int:
    from ocrwatch.control import restart

    done = restart.restart(wait=args.wait)
    echo(f"ocrwatch: {done}", err=done.started.failed)
    return (done.started.exit_code or 1) if done.started.failed else 0
