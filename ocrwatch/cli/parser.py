"""The command line's options: one parser, a subcommand each, with examples."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ocrwatch.config import schema
from ocrwatch.store.index import MAX_HITS, QUERY_SECONDS


def _engine(value: str) -> str:
    # Test-only engines are accepted where the testing switch is set, never offered;
    # the names are the config's, so parsing imports no engine.
    if value not in schema.engine_names():
        offered = ", ".join(schema.engine_names(public_only=True))
        raise argparse.ArgumentTypeError(f"{value!r} is not an engine; choose {offered}")
    return value


N = TypeVar("N", int, float)


def _in_range(parse: Callable[[str], N], low: N, high: N, what: str,
              unit: str = "") -> Callable[[str], N]:
    """An option type: ``parse`` the value and keep it within ``low`` to ``high``."""

    def check(value: str) -> N:
        try:
            number = parse(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
        if not low <= number <= high:  # also refuses nan and inf
            raise argparse.ArgumentTypeError(
                f"{value} is out of range: use {low} to {high}{unit}")
        return number

    return check


_limit = _in_range(int, 1, MAX_HITS, "a whole number")
_seconds = _in_range(float, 0.01, 3600, "a number of seconds", " seconds")


class _Version(argparse.Action):
    """``--version``: the version and the build it comes from (git is asked only here)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from ocrwatch.core.version import describe

        print(describe())  # on stdout, as argparse's own version action does
        parser.exit()


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="config file (default: the platform's config folder, "
                        "or $OCRWATCH_CONFIG)")


def _overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", type=_engine, metavar="ENGINE",
                   help=f"OCR engine: {', '.join(schema.engine_names(public_only=True))}")
    p.add_argument("--inbox", action="append", type=Path, metavar="DIR",
                   help="folder to watch (repeat for several; replaces the configured ones)")
    p.add_argument("--output-dir", type=Path, metavar="DIR",
                   help="write sidecars under DIR instead of beside the originals")
    p.add_argument("--database", type=Path, metavar="FILE", help="index and queue file")
    p.add_argument("--languages", metavar="LANGS",
                   help="Tesseract languages: eng+deu+fra or eng,deu,fra")
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.add_argument("--jobs", type=_in_range(int, 1, 256, "a whole number"), metavar="N",
                   help="pages read at once, for this run only: the CPU engine's workers "
                        "and the remote engine's requests in flight (remote.concurrency); "
                        "the vllm engine sizes its own batches")


def _sub(sub: Any, name: str, text: str, *examples: str,
         options: str = "") -> argparse.ArgumentParser:
    """A subcommand; ``options`` "config" adds --config, "reading" also the reading
    overrides (engine, inbox, languages...)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=text, description=text[0].upper() + text[1:] + ".",
        epilog=_examples(*examples), formatter_class=argparse.RawDescriptionHelpFormatter)
    if options in ("config", "reading"):
        _common(parser)
    if options == "reading":
        _overrides(parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ocrwatch",
        description="Watch a folder, read every page of every scan and PDF, write .md and "
                    ".txt beside each, and search them.",
        epilog=_examples("ocrwatch run                     # watch ~/OCR-Inbox",
                         "ocrwatch search invoice 2024     # find pages",
                         "ocrwatch status                  # what it is doing",
                         "ocrwatch COMMAND --help          # more on one command"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version,
                        help="show the version and the build (git commit) it comes from")
    # Not required: a bare `ocrwatch` prints this help (cli.main) instead of an error.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Boilerplate: every command below is declared in the same shape (_sub, the shared
    # options, its own), so that its help reads alike; alike by design, not copied logic.

    p = _sub(sub, "run", "run the daemon in the foreground (with a tray icon when there is "
                         "a display)",
             "ocrwatch run", "ocrwatch run --no-tray --inbox ~/Scans --languages eng,deu",
             options="reading")
    p.add_argument("--no-tray", action="store_true", help="never show a tray icon")

    p = _sub(sub, "start", "run the daemon in the background, as at login, and say whether "
                           "it started (and why not: its status is then that of `run`)",
             "ocrwatch start", "ocrwatch start --no-tray --wait 120", options="reading")
    p.add_argument("--no-tray", action="store_true", help="never show a tray icon")
    p.add_argument("--wait", type=_in_range(float, 1.0, 3600.0, "a number of seconds", " seconds"),
                   default=60.0, metavar="SECONDS",
                   help="how long to wait for it to answer (default 60); a daemon still "
                        "loading its engine then is left starting, and says so")

    p = _sub(sub, "add", "read files or folders once, with a progress bar, then exit",
             "ocrwatch add ~/Downloads/letter.pdf", "ocrwatch add --engine tesseract ~/Scans",
             "ocrwatch add --on-success archive ~/OCR-Inbox/old",
             "ocrwatch add --force --jobs 2 ~/Scans/letter.pdf   # read again, 2 pages at once",
             options="reading")
    p.add_argument("--on-success", choices=("keep", "archive", "delete"), default="keep",
                   help="what becomes of each file once it is completely read: kept where "
                        "it is (the default: the configured on_success is not applied to "
                        "the files named here), archived to archive_dir, or deleted")
    p.add_argument("--force", action="store_true",
                   help="read the files again even when they were read before (say their "
                        "sidecars were deleted); a corrected sidecar is kept, the new "
                        "reading goes beside it")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")

    p = _sub(sub, "reread", "read again, with a progress bar, the files read with other "
                            "languages (or another engine) than now",
             "ocrwatch reread", "ocrwatch reread --languages eng,deu",
             "ocrwatch reread --all", "ocrwatch reread --outputs    # after adding \"pdf\"",
             options="reading")
    p.add_argument("--all", action="store_true",
                   help="every file read so far, also those read as they would be now")
    p.add_argument("--outputs", action="store_true",
                   help="only write the outputs asked for since files were read (say "
                        "\"pdf\" added to `outputs`), from the stored text: no page is "
                        "read again")
    # With a daemon running, it queues the files again itself (`ocrwatch status` shows them).

    p = _sub(sub, "search", "search the text of every page read so far",
             'ocrwatch search invoice "March 2024"',
             "ocrwatch search 'pay* OR remittance NOT draft' --limit 5",
             "ocrwatch search --json -- -42     # after --, a query may begin with -",
             "ocrwatch search --name tax --type pdf --after 2024-01-01 receipt",
             "ocrwatch search --web            # the search page in the browser", options="config")
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("query", nargs="*", help='words, "phrases", AND/OR/NOT, prefix*')
    p.add_argument("--name", metavar="WORDS",
                   help="only files whose file or folder names hold these words (alone: "
                        "list those files)")
    p.add_argument("--folder", type=Path, metavar="DIR", help="only files in DIR or below")
    p.add_argument("--type", action="append", metavar="EXT", dest="types",
                   help="only files ending in .EXT (repeat for several), e.g. pdf")
    p.add_argument("--after", metavar="YYYY-MM-DD", help="only files modified on or after")
    p.add_argument("--before", metavar="YYYY-MM-DD", help="only files modified before")
    p.add_argument("--page", type=int, default=1, metavar="N",
                   help="the Nth page of --limit hits (default 1)")
    p.add_argument("--web", action="store_true",
                   help="open the search page in the browser (from the running daemon, or "
                        "served here until Ctrl-C when none runs)")
    p.add_argument("--no-open", action="store_true",
                   help="with --web: only print the page's address, token included")
    p.add_argument("--limit", type=_limit, default=20, metavar="N",
                   help=f"at most N hits, 1 to {MAX_HITS} (default 20)")
    p.add_argument("--time-limit", type=_seconds, default=QUERY_SECONDS, metavar="SECONDS",
                   help=f"stop a query that takes longer (default {QUERY_SECONDS:g})")
    p.add_argument("--json", action="store_true", help="print hits as JSON")

    p = _sub(sub, "reindex", "rebuild the full-text index from the stored page text, or from "
                             "the sidecars when the database is lost",
             "ocrwatch reindex", "ocrwatch reindex --from-sidecars", options="config")
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("--from-sidecars", action="store_true",
                   help="rebuild the index from the .md/.txt sidecars of the files in the "
                        "watched folders (stop the daemon first)")

    p = _sub(sub, "status", "what the daemon is doing, counts by state, failures",
             "ocrwatch status", "ocrwatch status --json", options="config")
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("--json", action="store_true", help="print as JSON")

    for name, text in (("pause", "stop reading new files (they are still queued)"),
                       ("resume", "read queued files again"),
                       ("stop", "stop the running daemon"),
                       ("rescan", "look through the watched folders for missed files now")):
        _sub(sub, name, text, f"ocrwatch {name}")

    p = _sub(sub, "restart", "stop the running daemon and start it again the way it was "
                             "started (its options, config file and display; by systemd when "
                             "its unit runs it)",
             "ocrwatch restart", "ocrwatch restart --wait 120   # after changing languages")
    p.add_argument("--wait", type=_in_range(float, 1.0, 3600.0, "a number of seconds", " seconds"),
                   default=60.0, metavar="SECONDS",
                   help="how long to wait for the new daemon to answer (default 60)")

    p = _sub(sub, "reload", "make the running daemon read its config file again (also on "
                            "SIGHUP and when the file is saved); names what waits for a restart",
             "ocrwatch reload", "kill -HUP $(pgrep -f 'ocrwatch run')", options="config")

    p = _sub(sub, "retry", "read failed files again",
             "ocrwatch retry ~/OCR-Inbox/scan.pdf", "ocrwatch retry --all-failed", options="config")
    p.add_argument("--database", type=Path, metavar="FILE", help="index file")
    p.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    p.add_argument("--all-failed", action="store_true", help="every failed file")

    p = _sub(sub, "doctor", "check what the daemon needs and say how to fix gaps",
             "ocrwatch doctor", "ocrwatch doctor --engine vllm --languages eng+ita",
             "ocrwatch doctor --json | jq '.[] | select(.ok | not)'", options="reading")
    p.add_argument("--json", action="store_true",
                   help="print the checks as JSON: a list of {name, ok, detail, fix}")

    p = _sub(sub, "init", "write the example configuration, every key with its default and "
                          "what it does, to the config file",
             "ocrwatch init", "ocrwatch init --print > my-config.toml",
             "ocrwatch init --config ~/ocrwatch.toml", options="config")
    p.add_argument("--print", action="store_true", dest="print_only",
                   help="print it instead of writing a file")
    p.add_argument("--force", action="store_true",
                   help="replace an existing config file (it is kept as FILE.bak)")

    p = _sub(sub, "completion", "print a shell completion script for bash, zsh, fish or tcsh",
             "ocrwatch completion bash > ~/.local/share/bash-completion/completions/ocrwatch",
             "ocrwatch completion zsh > ~/.zfunc/_ocrwatch",
             "ocrwatch completion fish > ~/.config/fish/completions/ocrwatch.fish")
    p.add_argument("shell", choices=("bash", "zsh", "fish", "tcsh"))

    _sub(sub, "manpage", "print the manual page (roff), made from these options",
         "ocrwatch manpage > ~/.local/share/man/man1/ocrwatch.1", "man <(ocrwatch manpage)")

    p = _sub(sub, "uninstall", "stop the daemon and remove what installing it added: the "
                               "autostart entries, the link `make run` made and its PATH lines; "
                               "says what data stays and where (it removes none)",
             "ocrwatch uninstall              # what it would do (asks at a terminal)",
             "ocrwatch uninstall --yes        # do it, then: pipx uninstall ocrwatch",
             options="config")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--yes", "-y", action="store_true", help="do it without asking")
    mode.add_argument("--dry-run", "-n", action="store_true",
                      help="only say what it would do, even at a terminal")

    p = _sub(sub, "autostart", "start the daemon at login (or stop doing so)",
             "ocrwatch autostart enable --now", "ocrwatch autostart disable")
    p.add_argument("action", choices=("enable", "disable"))
    p.add_argument("--kind", choices=("systemd", "xdg", "launchd"),
                   help="how to start it (default: what this platform and session use)")
    p.add_argument("--exec", type=Path, metavar="PATH", dest="executable",
                   help="the ocrwatch program to start (default: this one)")
    p.add_argument("--now", action="store_true", help="with enable: also start it now")
    return parser
