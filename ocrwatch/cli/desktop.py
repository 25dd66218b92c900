"""Commands that fit ocrwatch into a desktop: ``init`` (the example configuration from the
package), ``completion`` (shtab) and ``manpage`` (argparse-manpage), both made from the
one parser so that they never drift from the options.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from pathlib import Path

from ocrwatch.cli.common import echo
from ocrwatch.cli.termsafe import safe
from ocrwatch.core.errors import UsageError
from ocrwatch.fs import paths


def example_config() -> str:
    """``config.example.toml`` as shipped inside the package (every key, its default)."""
    return resources.files("ocrwatch").joinpath("data", "config.example.toml").read_text(
        encoding="utf-8")


def config_target(args: argparse.Namespace) -> Path:
    if getattr(args, "config", None) is not None:
        return Path(args.config).expanduser()
    if os.environ.get("OCRWATCH_CONFIG"):
        return Path(os.environ["OCRWATCH_CONFIG"]).expanduser()
    return paths.config_file()


def cmd_init(args: argparse.Namespace) -> int:
    text = example_config()
    if args.print_only:
        sys.stdout.write(text)
        return 0
    target = config_target(args)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and not args.force:
        raise UsageError(f"{safe(target)} already exists; edit it, or run `ocrwatch init "
                            "--force` to replace it (the old one is kept as .bak)")
    if target.exists():
        backup = target.with_name(target.name + ".bak")
        os.replace(target, backup)
        echo(f"kept the old file as {safe(backup)}", err=True)
    # 0600: the file may later hold a server's api_key. O_EXCL: never write through a
    # file that appeared meanwhile.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    echo(f"wrote {safe(target)}: every key is commented with its default; the daemon "
         "takes changes as you save them")
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    from ocrwatch.cli.parser import build_parser

    sys.stdout.write(shtab.complete(build_parser(), shell=args.shell))
    return 0


def cmd_manpage(args: argparse.Namespace) -> int:
    from argparse_manpage.manpage import Manpage

    from ocrwatch.cli.parser import build_parser
    from ocrwatch.core.version import __version__

    parser = build_parser()
    parser.man_short_description = "watch a folder, read every page, search them"  # type: ignore[attr-defined]
    page = Manpage(parser, _data={"project_name": "ocrwatch", "version": __version__,
                                  "manual_title": "ocrwatch manual"})
    sys.stdout.write(str(page))
    return 0
