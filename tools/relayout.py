#!/usr/bin/env python3
"""Move ocrwatch's flat top-level modules into subpackages, and rewrite every reference.

Run from anywhere, on a clean checkout (the result is meant to be one commit)::

    python tools/relayout.py [REPO]        # REPO defaults to the checkout holding this file
    python tools/relayout.py --check REPO  # only say what would move and what is unmapped

What it does, in order:

1. Refuses to start when ``ocrwatch/`` holds a top-level module that :data:`MOVES` does not
   place and :data:`STAY` does not keep, listing every such module (add each to the table
   and run again), when a target already exists, or when the tree has uncommitted changes.
   A module named in the table but absent is reported and skipped.
2. ``git mv`` of each module to its new place; each new subpackage gets an ``__init__.py``
   with the docstring in :data:`PACKAGES`.
3. Rewrites, in every tracked Python file of ``ocrwatch/``, ``tests/``, ``benchmarks/`` and
   ``tools/``:

   - ``from ocrwatch import a, b as c`` (and relative imports inside ``ocrwatch/``): each
     name that moved is imported from its new package under its old name
     (``from ocrwatch.pages import decode as pages``), so no code below the imports changes;
   - ``from ocrwatch import a`` in strings (programs run with ``python -c``) the same way;
   - every dotted name ``ocrwatch.<old>`` anywhere in the text: ``import`` and ``from``
     lines, ``mock``/``monkeypatch`` target strings, ``-m ocrwatch.x`` subprocess
     arguments, logger names (modules log as ``__name__``) and ``:mod:`` references;

   and in ``pyproject.toml``, ``Makefile``, ``README.md``, ``docs/*.md``, ``.ci/*`` and the
   shell scripts: dotted names as above and paths ``ocrwatch/<old>.py``.
   Then ``ruff check --select I --fix`` re-sorts the import blocks it touched.
4. Prints what is left for a person: bare module names (``jobs.py``) in the docs, which
   say nothing about their folder and are left as they are, and moved modules that use
   ``__file__`` (a path built from it is one folder off after the move; none today).

Why the standard library's ``ast`` plus exact-name rewriting, not rope: rope's
``MoveModule`` was tried on this tree (``memory.py`` to ``core/``). It moved a statement
that must run before an import (``os.environ.setdefault("OMP_THREAD_LIMIT", "1")`` in
``engines/tesseract.py``) below the import block, which changes behaviour; it appends
imports unsorted; it leaves strings alone (``monkeypatch.setattr("ocrwatch.jobs.X")``,
``-m ocrwatch.x``, logger names), and docs, ``pyproject.toml`` and the Makefile; and a rename
(``web.py`` to ``web/server.py``, where the package takes the module's name) is a second
refactoring per module. Here every reference to a module is one of two forms, a dotted
name or a ``from ocrwatch import name`` statement: the first is rewritten textually by
exact name (word boundaries, longest name first, one pass, so nothing is rewritten twice),
the second through ``ast``, which knows where each import statement starts and ends.
Nothing else in a file changes; the moved tree is a pure move.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

# old top-level module -> new dotted path below ``ocrwatch``.
MOVES: dict[str, str] = {
    # store/: the SQLite file, its schema, the job queue and the index (the code that runs SQL)
    "db": "store.db",
    "migrations": "store.migrations",
    "jobs": "store.jobs",
    "jobfiles": "store.jobfiles",
    "index": "store.index",
    "status_facts": "store.status_facts",
    # intake/: noticing files, deciding when they are finished, following moves
    "watch": "intake.watch",
    "settle": "intake.settle",
    "inbox_files": "intake.inbox_files",
    "follow": "intake.follow",
    # pages/: a file made into pages
    "pages": "pages.decode",
    "pdfpages": "pages.pdfpages",
    "pdftext": "pages.pdftext",
    "pdfium_lock": "pages.pdfium_lock",
    "thumbs": "pages.thumbs",
    "memory": "pages.memory",
    "pdfdraw": "pages.pdfdraw",
    "budget": "pages.budget",
    # scan/: pages as scanners deliver them (turned, skewed, blank), before any engine
    "scanprep": "scan.prepare",
    "orient": "scan.orient",
    "deskew": "scan.deskew",
    "inkcover": "scan.inkcover",
    # engines/: as before, plus the two modules only engines and their checks use
    "gpu": "engines.gpu",
    "model": "engines.model",
    # results/: what is written for a finished file and what becomes of the original
    "sidecar": "results.sidecar",
    "pdfout": "results.pdfout",
    "outputs": "results.outputs",
    "align": "results.align",
    "lifecycle": "results.lifecycle",
    "failed": "results.failed",
    "retire": "results.retire",
    # hooks/: the user's programs run for each finished file, and desktop notifications
    "hooks": "hooks.runner",
    "hookqueue": "hooks.queue",
    # (config checks hook commands with it when the file is read, so it sits below config)
    "hookshell": "core.hookshell",
    "notify": "hooks.notify",
    # web/: the search page
    "web": "web.server",
    "web_handler": "web.handler",
    "web_params": "web.params",
    "opener": "web.opener",
    "web_server": "web.listener",
    # doctor/: `ocrwatch doctor`
    "doctor": "doctor.checks",
    "doctor_check": "doctor.check",
    "doctor_desktop": "doctor.desktop",
    "doctor_gpu": "doctor.gpu",
    # core/: what every layer may use: the shared types, errors, threads
    "domain": "core.domain",
    "layout": "core.layout",
    "status": "core.status",
    "errors": "core.errors",
    "threads": "core.threads",
    # fs/: the file system, safely: paths, modes, opening without links, moving
    "paths": "fs.paths",
    "private": "fs.private",
    "safeopen": "fs.safeopen",
    "fsmove": "fs.fsmove",
    "textutil": "core.textutil",
    "progress": "core.progress",
    # existing packages
    "languages": "config.languages",
    "secrets_check": "config.secrets_check",
    "autostart": "control.autostart",
    "logs": "cli.logs",
    "native_stderr": "cli.native_stderr",
    "termsafe": "cli.termsafe",
}

# Top-level modules that stay where they are: the entry points and the running layer
# (daemon > scheduler/pipeline/outcome; reindex is an operation of the same level).
STAY = {"__init__", "__main__", "api", "daemon", "scheduler", "pipeline", "outcome", "batching",
        "reindex", "rewrite", "indexhealth"}

# Packages that exist before the move, and the ones the move creates (with their docstring).
EXISTING_PACKAGES = {"cli", "config", "control", "engines", "tray", "data"}
PACKAGES: dict[str, str] = {
    "store": (
        "The store: the SQLite file, its schema, the durable job queue and the full-text "
        "index. ``db`` is the connection, its lock and transactions, ``migrations`` the "
        "schema one named step at a time, ``jobs`` (with ``jobfiles``) the queue's rows and "
        "their states, ``index`` the page rows and searches. The SQL belongs here; "
        "``results.lifecycle``, ``intake.follow``, ``reindex`` and ``web.server`` still run "
        "some of their own. Of the layers, only ``config`` and ``core`` are below it."
    ),
    "intake": (
        "Intake: noticing files in the watched folders and saying when one is finished. "
        "``watch`` turns watchdog's events into the settler's, ``settle`` decides when a file "
        "is finished or gone, ``inbox_files`` says which files are candidates, and ``follow`` "
        "applies moves, renames and deletions to the index, the sidecars and the thumbnails."
    ),
    "pages": (
        "Pages: a file made into pages. ``decode`` sniffs a file's type, checks its limits "
        "and decodes images; ``pdfpages`` opens PDFs with PDFium and ``pdftext`` takes their "
        "own text layers; ``pdfium_lock`` is the one lock around PDFium; ``thumbs`` keeps the "
        "search page's thumbnails and ``memory`` gives freed memory back after a big page."
    ),
    "results": (
        "Results: what is written for a finished file, and what becomes of its original. "
        "``sidecar`` writes the .md/.txt pair, ``outputs`` (with ``pdfout`` and ``align``) the "
        "searchable PDF, ``retire`` says whether an original may go (every page read, every "
        "output verified), ``lifecycle`` keeps, archives or deletes it, and ``failed`` "
        "moves failed ones aside."
    ),
    "web": (
        "The search page: ``server`` is the HTTP server on 127.0.0.1 and its answers, "
        "``handler`` one request (token, Host check, routes, static files), ``params`` its "
        "parameters read strictly, and ``opener`` opens a hit with the desktop's programs."
    ),
    "scan": (
        "Pages as scanners deliver them, put right before any engine reads them: "
        "``prepare`` runs the steps in order, ``orient`` finds a page turned by 90, 180 or "
        "270 degrees (Tesseract's orientation detection), ``deskew`` straightens small "
        "angles and ``inkcover`` measures the ink that tells a blank back from a page."
    ),
    "hooks": (
        "What runs for each finished file: ``runner`` starts the user's ``on_done`` "
        "programs with their time limit and ends their whole process tree, ``queue`` keeps "
        "the hooks still to run on disk so a crash loses none (``core.hookshell`` quotes file "
        "names for a shell's command string), and ``notify`` sends the desktop notifications."
    ),
    "doctor": (
        "``ocrwatch doctor``: ``checks`` runs the checks and writes the report, ``gpu`` "
        "checks the card, vLLM and the model, ``desktop`` the tray, opening files and "
        "notifications, and ``check`` is one finding."
    ),
    "core": (
        "The core every layer may use, which imports no other part of ocrwatch: the shared "
        "types (``domain``, ``layout``, ``status``), the exception tree (``errors``), the "
        "daemon's threads (``threads``), text helpers (``textutil``), quoting for a shell's "
        "command string (``hookshell``) and the status's progress figures (``progress``)."
    ),
    "fs": (
        "The file system, handled safely: where ocrwatch's own files live (``paths``), modes "
        "that keep them private (``private``), opening a file beneath a folder without "
        "following links (``safeopen``) and moving without ever replacing (``fsmove``)."
    ),
}

# Text files (other than Python) whose dotted names and ``ocrwatch/x.py`` paths are rewritten.
TEXT_GLOBS = ["pyproject.toml", "Makefile", "README.md", "docs/*.md", ".ci/*",
              "benchmarks/*.sh", "tests/**/*.sh", "config.example.toml"]
PY_ROOTS = ["ocrwatch", "tests", "benchmarks", "tools"]
SELF = Path(__file__).resolve()


def fail(lines: list[str]) -> None:
    print("relayout: NOT applied:", file=sys.stderr)
    for line in lines:
        print(f"  - {line}", file=sys.stderr)
    raise SystemExit(2)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def survey(repo: Path) -> tuple[dict[str, str], list[str]]:
    """The moves that apply to this tree, and the modules of the table that are absent."""
    pkg = repo / "ocrwatch"
    if not (pkg / "__init__.py").is_file():
        fail([f"{pkg} is not the ocrwatch package"])
    modules = {p.stem for p in pkg.glob("*.py")}
    packages = {p.name for p in pkg.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
                and p.name != "__pycache__"}
    problems = []
    unmapped = sorted(modules - set(MOVES) - STAY)
    if unmapped:
        problems.append("top-level modules that the table does not place (add each to MOVES "
                        "in tools/relayout.py, or to STAY): " + ", ".join(f"ocrwatch/{m}.py"
                                                                           for m in unmapped))
    new_packages = sorted(packages - EXISTING_PACKAGES - set(PACKAGES))
    if new_packages:
        print("relayout: packages the table does not know (left where they are; place them in "
              "the import-linter layers): " + ", ".join(new_packages), file=sys.stderr)
    moves = {old: new for old, new in MOVES.items() if old in modules}
    absent = sorted(set(MOVES) - modules)
    if not moves:
        fail(["none of the table's modules is at the top of ocrwatch/: the move has been "
              "applied already (run it on a checkout from before the move)"])
    for old, new in moves.items():
        target = pkg / (new.replace(".", "/") + ".py")
        if target.exists():
            problems.append(f"ocrwatch/{old}.py: its target {target.relative_to(repo)} "
                            "already exists (has the move been applied?)")
    if problems:
        fail(problems)
    return moves, absent


def dotted_pattern(moves: dict[str, str]) -> re.Pattern[str]:
    names = "|".join(sorted((re.escape(m) for m in moves), key=len, reverse=True))
    return re.compile(rf"(?<![\w.-])ocrwatch\.({names})(?![\w])")


def path_pattern(moves: dict[str, str]) -> re.Pattern[str]:
    names = "|".join(sorted((re.escape(m) for m in moves), key=len, reverse=True))
    return re.compile(rf"(?<![\w.-])ocrwatch/({names})\.py(?![\w])")


def module_of(repo: Path, file: Path) -> tuple[str, bool] | None:
    """The dotted name of a file below ``ocrwatch/`` (before the move), and whether it is a
    package's ``__init__``; None for files outside the package."""
    rel = file.relative_to(repo)
    if rel.parts[0] != "ocrwatch":
        return None
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def moved_name(absolute: str, moves: dict[str, str]) -> str:
    """``ocrwatch.jobs.X`` -> ``ocrwatch.store.jobs.X``; other names as they are."""
    parts = absolute.split(".")
    if len(parts) > 1 and parts[0] == "ocrwatch" and parts[1] in moves:
        return ".".join(["ocrwatch", moves[parts[1]], *parts[2:]])
    return absolute


def rewrite_import_from(node: ast.ImportFrom, current: tuple[str, bool] | None,
                        moves: dict[str, str], indent: str) -> list[str] | None:
    """New lines for one ``from ... import`` statement, or None when it stays as it is.

    Relative imports inside ``ocrwatch/`` become absolute ones (the file or its target may
    move to another folder); ``from ocrwatch import a, b`` is split by where a and b go.
    """
    def names(aliases: list[ast.alias]) -> str:
        return ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in aliases)

    if node.level:
        if current is None:
            return None  # the tests' own relative imports (``from .helpers import``)
        name, is_package = current
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        absolute = ".".join(base + ([node.module] if node.module else []))
    else:
        absolute = node.module or ""
    if absolute != "ocrwatch":
        if node.level:
            return [f"{indent}from {moved_name(absolute, moves)} import {names(node.names)}"]
        return None  # dotted names are rewritten as text
    if not node.level and not any(a.name in moves for a in node.names):
        return None
    stay = [a for a in node.names if a.name not in moves]
    lines = [f"{indent}from ocrwatch import {names(stay)}"] if stay else []
    for alias in node.names:
        if alias.name in moves:
            package, _, leaf = ("ocrwatch." + moves[alias.name]).rpartition(".")
            bound = alias.asname or alias.name
            lines.append(f"{indent}from {package} import {leaf}"
                         + ("" if bound == leaf else f" as {bound}"))
    return lines


def rewrite_python(repo: Path, file: Path, text: str, moves: dict[str, str],
                   dotted: re.Pattern[str], paths: re.Pattern[str]) -> str:
    # Dotted names and paths first (as text), then the ``from ocrwatch import`` statements,
    # whose new lines must not pass through the dotted rewrite again.
    text = rewrite_text(text, moves, dotted, paths)
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        fail([f"{file.relative_to(repo)} does not parse: {exc}"])
    current = module_of(repo, file)
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        indent = lines[node.lineno - 1][: node.col_offset]
        new = rewrite_import_from(node, current, moves, indent)
        if new is None:
            continue
        assert node.end_lineno is not None and node.end_col_offset is not None
        tail = lines[node.end_lineno - 1][node.end_col_offset:]  # a comment, the newline
        edits.append((node.lineno - 1, node.end_lineno, new, tail))
    for start, end, new, tail in sorted(edits, reverse=True):
        lines[start:end] = ["\n".join(new) + (tail or "\n")]
    return rewrite_quoted_imports("".join(lines), moves)


def rewrite_text(text: str, moves: dict[str, str], dotted: re.Pattern[str],
                 paths: re.Pattern[str]) -> str:
    text = dotted.sub(lambda m: "ocrwatch." + moves[m.group(1)], text)
    return paths.sub(lambda m: "ocrwatch/" + moves[m.group(1)].replace(".", "/") + ".py", text)


FROM_OCRWATCH = re.compile(r"(?m)(^[ \t]*)?from ocrwatch import (\w+(?: as \w+)?"
                           r"(?:, *\w+(?: as \w+)?)*)([ \t]*$)?")


def rewrite_quoted_imports(text: str, moves: dict[str, str]) -> str:
    """``from ocrwatch import a, b`` that ast did not see: code in strings (``-c`` programs)
    and in the docs. A statement on a line of its own becomes one line per import at its
    indent, one inside a line becomes ``; ``-joined statements."""
    def split(m: re.Match[str]) -> str:
        aliases = [ast.alias(name=n.split(" as ")[0].strip(),
                             asname=(n.split(" as ")[1].strip() if " as " in n else None))
                   for n in m.group(2).split(",")]
        if not any(a.name in moves for a in aliases):
            return m.group(0)
        node = ast.ImportFrom(module="ocrwatch", names=aliases, level=0)
        whole_line = m.group(1) is not None and m.group(3) is not None
        indent = m.group(1) or ""
        lines = rewrite_import_from(node, None, moves, indent if whole_line else "")
        assert lines is not None
        if whole_line:
            return "\n".join(lines) + m.group(3)
        return indent + "; ".join(lines) + (m.group(3) or "")
    return FROM_OCRWATCH.sub(split, text)


def tracked(repo: Path) -> set[Path]:
    return {repo / line for line in git(repo, "ls-files").splitlines()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", nargs="?", type=Path, default=SELF.parent.parent)
    parser.add_argument("--check", action="store_true", help="only survey; change nothing")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="run on a tree with uncommitted changes")
    args = parser.parse_args()
    repo = args.repo.resolve()
    moves, absent = survey(repo)
    if absent:
        print("relayout: in the table but not in this tree (skipped): "
              + ", ".join(absent), file=sys.stderr)
    if args.check:
        for old, new in moves.items():
            print(f"ocrwatch/{old}.py -> ocrwatch/{new.replace('.', '/')}.py")
        return
    if not args.allow_dirty and git(repo, "status", "--porcelain", "--untracked-files=no"):
        fail(["the tree has uncommitted changes; commit or stash them first"])
    ruff = find_ruff(repo)

    files = tracked(repo)
    py_files = sorted(f for f in files if f.suffix == ".py" and f.resolve() != SELF
                      and f.relative_to(repo).parts[0] in PY_ROOTS)
    text_files = sorted({f for pattern in TEXT_GLOBS for f in repo.glob(pattern)
                         if f in files and f.is_file()} - set(py_files))
    dotted, paths = dotted_pattern(moves), path_pattern(moves)

    # Rewrite first (module names are read from the old places), then move.
    changed_py = []
    for file in py_files:
        old = file.read_text(encoding="utf-8")
        new = rewrite_python(repo, file, old, moves, dotted, paths)
        if new != old:
            file.write_text(new, encoding="utf-8")
            changed_py.append(file)
    for file in text_files:
        try:
            old = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite_quoted_imports(rewrite_text(old, moves, dotted, paths), moves)
        if new != old:
            file.write_text(new, encoding="utf-8")

    pkg = repo / "ocrwatch"
    for name in sorted({new.split(".")[0] for new in moves.values()}):
        folder = pkg / name
        folder.mkdir(exist_ok=True)
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text(f'"""{wrap(PACKAGES[name])}"""\n', encoding="utf-8")
            git(repo, "add", str(init))
    where = {}
    for old, new in moves.items():
        target = pkg / (new.replace(".", "/") + ".py")
        git(repo, "mv", str(pkg / f"{old}.py"), str(target))
        where[pkg / f"{old}.py"] = target
    changed_py = [where.get(f, f) for f in changed_py]

    subprocess.run([ruff, "check", "--select", "I", "--fix", "--quiet", *map(str, changed_py)],
                   cwd=repo, check=False)
    git(repo, "add", "-u")

    left = []
    # A module that finds files beside itself (``Path(__file__).parent``) needs its path
    # adjusted by hand once it sits one folder deeper; resources.files("ocrwatch") does not.
    for target in sorted(where.values()):
        if "__file__" in target.read_text(encoding="utf-8"):
            left.append(f"{target.relative_to(repo)}: uses __file__; check the paths it builds")
    bare = re.compile(rf"(?<![\w/.-])({'|'.join(map(re.escape, moves))})\.py(?![\w])")
    for file in [*sorted(repo.glob("docs/*.md")), repo / "README.md"]:
        if file.exists():
            hits = sorted({m.group(1) for m in bare.finditer(file.read_text(encoding="utf-8"))})
            if hits:
                left.append(f"{file.relative_to(repo)}: {', '.join(h + '.py' for h in hits)}")
    print(f"relayout: moved {len(moves)} modules into "
          f"{len({n.split('.')[0] for n in moves.values()})} packages; rewrote "
          f"{len(changed_py)} Python files. Staged; nothing committed.")
    if left:
        print("relayout: left for a person (bare module names in the docs name no folder; "
              "edit by hand):")
        for line in left:
            print(f"  {line}")


def find_ruff(repo: Path) -> str:
    """ruff re-sorts the rewritten import blocks; found before anything is changed."""
    for candidate in (repo / ".venv" / "bin" / "ruff", Path(sys.executable).parent / "ruff"):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("ruff")
    if found is None:
        fail(["ruff is not installed: run this with the project's venv "
              "(.venv/bin/python tools/relayout.py) or install ruff first"])
    return str(found)


def wrap(text: str, width: int = 92) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
