"""Commands that steer a running daemon (``pause``, ``resume``, ``stop``, ``rescan``,
``retry``) and set things up (``doctor``, ``autostart``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

from ocrwatch.cli.common import database_arg, echo, load_config, plural
from ocrwatch.cli.termsafe import safe
from ocrwatch.core.errors import (
    ArgumentError,
    ConfigError,
    DaemonNotRunning,
    IndexUnavailable,
    UsageError,
)


def _control(cmd: str, said: str) -> int:
    """Send a command that answers nothing but "done", and say what it did."""
    from ocrwatch.control.client import request

    request(cmd)
    echo(said)
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    return _control("pause", "paused: new files are queued but not read until `ocrwatch resume`")


def cmd_resume(args: argparse.Namespace) -> int:
    return _control("resume", "resumed")


def cmd_stop(args: argparse.Namespace) -> int:
    from ocrwatch.control.client import stop_daemon

    pid = stop_daemon()
    echo(f"stopped the daemon (PID {pid})")
    return 0


def cmd_rescan(args: argparse.Namespace) -> int:
    return _control("rescan", "rescanning the watched folders")


def cmd_reload(args: argparse.Namespace) -> int:
    from ocrwatch.control.client import request

    load_config(args)  # a file that does not load: said here, with its key (status 2)
    answer = request("reload")
    applied, later = answer.get("applied") or [], answer.get("restart_needed") or []
    echo("configuration reloaded: " + (", ".join(applied) + " now in effect" if applied
                                       else "nothing to change now"))
    if later:
        echo(f"changed but waiting for a restart (`ocrwatch restart`): "
             f"{', '.join(later)}")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    from ocrwatch.control.client import request

    if not args.paths and not args.all_failed:
        raise ArgumentError("name the files to retry, or use --all-failed")
    given = [p.expanduser().absolute() for p in args.paths]
    missing = [p for p in given if not p.exists()]
    if missing:
        raise UsageError(f"{safe(missing[0])} does not exist; name a file that failed "
                            "(`ocrwatch status` lists them) or use --all-failed")
    paths = [str(p) for p in given]
    try:
        count = int(request("retry", paths=paths or None, all_failed=args.all_failed))
        where = "the daemon will read {} again"
    except DaemonNotRunning:
        from ocrwatch.store.db import Database
        from ocrwatch.store.jobs import JobQueue

        path, origin = database_arg(args)
        if not path.exists():
            raise IndexUnavailable(f"no index at {safe(path)} (set by {origin}): nothing has been "
                                "read there, so there is nothing to retry") from None
        db = Database(path, origin=origin)
        try:
            count = JobQueue(db).retry(None if args.all_failed else given)
        finally:
            db.close()
        where = "{} will be read when the daemon next runs"
    if count == 0:
        if args.all_failed:
            echo("nothing to retry: no file has failed")
            return 0
        raise UsageError(
            f"{'this file has' if len(given) == 1 else 'these files have'} not been read yet, "
            "so there is nothing to retry; the daemon reads files in its inbox by itself, and "
            f"`ocrwatch add {safe(given[0])}` reads one now")
    pronoun = ("it" if count == 1 else "them") if where.startswith("the daemon") else (
        "it" if count == 1 else "they")
    echo(f"{plural(count, 'file')} queued again; " + where.format(pronoun))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ocrwatch.doctor import checks as doctor

    refused: ConfigError | None = None
    try:
        config = load_config(args)
    except ConfigError as exc:
        # The config is what the other checks read: say why it is refused, and how to fix.
        refused = exc
        checks = [doctor.config_check(exc)]
    else:
        checks = doctor.run_checks(config)
    if args.json:
        print(json.dumps([dataclasses.asdict(c) for c in checks], ensure_ascii=False, indent=2))
    else:
        echo(doctor.format_report(checks))
    if refused is not None:  # a configuration that does not load: status 2, as everywhere
        echo(f"ocrwatch: {refused}", err=True)
        return refused.exit_code
    return 0 if all(c.ok for c in checks) else 1


def cmd_autostart(args: argparse.Namespace) -> int:
    from ocrwatch.control import autostart

    exe = args.executable
    if exe is not None and not (exe.is_file() and os.access(exe, os.X_OK)):
        raise UsageError(f"{safe(exe)} is not a program that can be run; give the path of "
                            "the installed `ocrwatch` with --exec, or leave --exec out")
    result = (autostart.enable(kind=args.kind, executable=exe, start=args.now)
              if args.action == "enable" else autostart.disable())
    echo(str(result), err=result.exit_code != 0)
    return result.exit_code
