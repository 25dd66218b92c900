"""The command line: parse, configure logging, call the core, map errors to exit codes.

One module per group of commands: :mod:`~ocrwatch.cli.running`,
:mod:`~ocrwatch.cli.results`, :mod:`~ocrwatch.cli.steering`, :mod:`~ocrwatch.cli.desktop`,
:mod:`~ocrwatch.cli.lifecycle`;
the options are in
:mod:`~ocrwatch.cli.parser`, what they share in :mod:`~ocrwatch.cli.common`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from ocrwatch.cli import desktop, lifecycle, results, running, steering
from ocrwatch.cli.common import EXIT_BROKEN_PIPE, echo, log
from ocrwatch.cli.parser import build_parser
from ocrwatch.cli.termsafe import safe
from ocrwatch.core.errors import ArgumentError, OcrwatchError


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "search" and all(re.fullmatch(r"-[^-].*", e) for e in extra):
        # "ocrwatch search -42": words that begin with one "-" are words, not options.
        args.query = [*args.query, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    if args.command is None:  # a bare `ocrwatch`: what it can do, as `--help` says it
        parser.print_help()
        return 0
    handler = _command(args.command)
    try:
        code = int(handler(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe is met while we can still say so
        return code
    except KeyboardInterrupt:
        echo("ocrwatch: interrupted", err=True)
        return 130
    except ArgumentError as exc:
        # As the parser says it: the command's usage line, the message, exit status 2.
        sub = next(a for a in parser._actions if a.dest == "command")
        command: argparse.ArgumentParser = sub.choices[args.command]  # type: ignore[index]
        command.error(str(safe(exc)))
    except BrokenPipeError:
        # `ocrwatch status | head -1`: the reader has gone; the rest is not wanted.
        # Point stdout at /dev/null so that Python's flush at exit does not complain.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except OcrwatchError as exc:
        echo(f"ocrwatch: {safe(exc)}", err=True)
        return exc.exit_code
    except Exception as exc:  # the last line of defence: a message, the details on request
        if os.environ.get("OCRWATCH_DEBUG"):
            raise
        log.debug("unexpected error in `ocrwatch %s`", args.command, exc_info=True)
        echo(f"ocrwatch: unexpected error in `{args.command}`: {safe(repr(exc))}. Run it "
             "again with OCRWATCH_DEBUG=1 to see where, and report that.", err=True)
        return 1


def _command(name: str) -> Any:
    """The function that carries out ``ocrwatch NAME``."""
    for module in (running, results, steering, desktop, lifecycle):
        handler = getattr(module, f"cmd_{name}", None)
        if handler is not None:
            return handler
    raise ArgumentError(f"no such command: {name}")
