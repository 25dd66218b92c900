"""Commands for the daemon's life as an installed program: ``restart`` and ``uninstall``."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ocrwatch.cli.common import echo, load_config
from ocrwatch.cli.termsafe import safe

if TYPE_CHECKING:  # for the type only: the command imports it when it runs
    from ocrwatch.control.uninstall import Plan


def cmd_restart(args: argparse.Namespace) -> int:
    from ocrwatch.control import restart

    done = restart.restart(wait=args.wait)
    echo(f"ocrwatch: {done}", err=done.started.failed)
    return (done.started.exit_code or 1) if done.started.failed else 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    from ocrwatch.cli.desktop import config_target
    from ocrwatch.config.schema import Config
    from ocrwatch.control import launch, uninstall
    from ocrwatch.core.errors import ConfigError

    try:
        config = load_config(args)
        note = ""
    except ConfigError as exc:
        config = Config()
        note = (f"(the config file does not load: {safe(exc)}; the places named are the "
                "defaults')")
    plan = uninstall.plan(config, config_target(args), running=launch.already_running())
    steps = _steps(plan)
    failed = False
    if plan.empty:
        echo("ocrwatch: nothing to remove: no daemon runs, and no autostart entry, link or "
             "PATH line of ocrwatch's is here")
    elif args.yes:
        failed = not _carry_out(plan)
    elif not args.dry_run and sys.stdin.isatty() and sys.stdout.isatty():
        if _agreed(steps):
            failed = not _carry_out(plan)
        else:
            echo("Nothing was changed.")
    else:
        echo("ocrwatch uninstall would:")
        for step in steps:
            echo(f"  {step}")
        echo("Nothing was changed; `ocrwatch uninstall --yes` does it.")
    if plan.kept:
        echo("Your data stays (remove by hand what you no longer want):" +
             (f" {note}" if note else ""))
        for what, where in plan.kept:
            echo(f"  {safe(where)}: {what}")
    echo(f"The program itself: {plan.package}")
    return 1 if failed else 0


def _steps(plan: Plan) -> list[str]:
    steps = []
    if plan.daemon_pid is not None:
        which = f" (PID {plan.daemon_pid})" if plan.daemon_pid else ""
        steps.append(f"stop the daemon{which}")
    steps += [f"remove the autostart entry {safe(p)}" for p in plan.autostart]
    steps += [f"remove the link {safe(link)} (to {safe(target)})" for link, target in plan.links]
    steps += [f"remove {safe(p)} (written by `ocrwatch manpage` or `ocrwatch completion`)"
              for p in plan.made]
    steps += [f"remove from {safe(b.rc)} the lines that put {safe(b.directory)} on PATH"
              for b in plan.blocks]
    return steps


def _agreed(steps: list[str]) -> bool:
    """Whether the person at the terminal says yes to ``steps``."""
    echo("ocrwatch uninstall will:")
    for step in steps:
        echo(f"  {step}")
    try:
        answer = input("Go ahead? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _carry_out(plan: Plan) -> bool:
    """Each step, said as it is done; a step that fails is said and the others go on."""
    from ocrwatch.control import autostart, uninstall
    from ocrwatch.control.client import stop_daemon
    from ocrwatch.core.errors import DaemonNotRunning, OcrwatchError

    ok = True

    def failed(what: str, exc: BaseException) -> None:
        nonlocal ok
        ok = False
        echo(f"ocrwatch: could not {what}: {safe(exc)}", err=True)

    if plan.autostart:  # first: a systemd unit is stopped with it, and cannot start it again
        try:
            echo(str(autostart.disable()))
        except OcrwatchError as exc:
            failed("remove the autostart entries", exc)
    if plan.daemon_pid is not None:
        try:
            echo(f"stopped the daemon (PID {stop_daemon()})")
        except DaemonNotRunning:
            echo("the daemon has stopped")
        except OcrwatchError as exc:
            failed("stop the daemon", exc)
    for link, target in plan.links:
        try:
            link.unlink()
            echo(f"removed the link {safe(link)} (to {safe(target)})")
        except OSError as exc:
            failed(f"remove {safe(link)}", exc)
    for path in plan.made:
        try:
            path.unlink()
            echo(f"removed {safe(path)}")
        except OSError as exc:
            failed(f"remove {safe(path)}", exc)
    for block in plan.blocks:
        try:
            uninstall.remove_block(block)
            echo(f"removed from {safe(block.rc)} the lines that put {safe(block.directory)} "
                 "on PATH (for new shells; if other programs of yours live there, add "
                 f"`export PATH=\"{safe(block.directory)}:$PATH\"` back)")
        except (OSError, UnicodeDecodeError) as exc:
            failed(f"edit {safe(block.rc)}", exc)
    return ok
