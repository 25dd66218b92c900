"""What adding an output format costs: modules and lines to touch, and what the format
then gets from the rest of ocrwatch, at two versions of the code (default: ``main`` and
``HEAD``).

For each version, its tree is exported (``git archive``) to a scratch folder, a throwaway
format ``words`` (``NAME.words``: one word a line, rendered from the text, verified as the
.md is) is added with the least each version needs for it to be written, verified, kept
off a user's file of that name and offered to ``on_done``, and the edit is counted
(modules, lines added or changed, blank lines left out). Then the same behaviour checks
run against each tree (a real daemon, inotify, SQLite, the fake engine): the format is
written; it follows a rename (with and without a ``.md`` among the outputs); it is
archived with the original; ``on_done`` gets ``{words}``; it follows a rename after
``reindex --from-sidecars``; a deleted original's entry is named by its ``.md``, not by
the new output. Nothing in the repository is changed.

    python benchmarks/trial_format.py                     # main against HEAD
    python benchmarks/trial_format.py --revs 7046b7a HEAD --out /tmp/t.txt
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, save

REPO = Path(__file__).resolve().parent.parent
# The behaviour checks, run by pytest against each scratch tree (its tests/helpers.py).
CHECKS = '''"""What a new output format ("words", added by add_trial.py) gets from the rest of
ocrwatch, by behaviour only (the same checks for main's code and the branch's)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import make_config, text_page, wait_for

from ocrwatch.daemon import Daemon
from ocrwatch.reindex import from_sidecars
from ocrwatch.store.db import Database
from ocrwatch.testing.fake import FakeEngine

SETS = [["md", "txt", "words"], ["txt", "words"]]


def drop(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text_page(["harbour office"]).save(folder / name)
    return folder / name


def done(d: Daemon, path: Path) -> bool:
    job = d.jobs.known(path)
    return job is not None and job.state.value == "done"


@pytest.mark.parametrize("outputs", SETS)
def test_written_and_follows_a_rename(tmp_path: Path, outputs: list[str]) -> None:
    config = make_config(tmp_path, outputs=outputs)
    inbox = config.inbox[0]
    with Daemon(config, engine=FakeEngine()) as d:
        scan = drop(inbox, "scan.png")
        wait_for(lambda: done(d, scan) and (inbox / "scan.words").exists(), 30, "written")
        scan.rename(inbox / "moved.png")
        wait_for(lambda: (inbox / "moved.txt").exists(), 30, "the .txt follows")
        wait_for(lambda: (inbox / "moved.words").exists(), 5, "the .words follows")


@pytest.mark.parametrize("outputs", SETS)
def test_archived_with_the_original(tmp_path: Path, outputs: list[str]) -> None:
    archive = tmp_path / "archive"
    config = make_config(tmp_path, outputs=outputs, on_success="archive", archive_dir=archive)
    with Daemon(config, engine=FakeEngine()):
        drop(config.inbox[0], "scan.png")
        wait_for(lambda: (archive / "inbox" / "scan.png").exists(), 30, "archived")
    assert (archive / "inbox" / "scan.words").exists()


def test_on_done_gets_its_placeholder(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    code = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"
    config = make_config(tmp_path, outputs=["txt", "words"],
                         on_done=[sys.executable, "-c", code, str(record), "{words}"])
    with Daemon(config, engine=FakeEngine()):
        drop(config.inbox[0], "scan.png")
        wait_for(record.exists, 30, "on_done")
    assert json.loads(record.read_text()) == [str(config.inbox[0] / "scan.words")]


@pytest.mark.parametrize("outputs", SETS)
def test_follows_after_reindex_from_sidecars(tmp_path: Path, outputs: list[str]) -> None:
    config = make_config(tmp_path, outputs=outputs)
    inbox = config.inbox[0]
    with Daemon(config, engine=FakeEngine()) as d:
        scan = drop(inbox, "scan.png")
        wait_for(lambda: done(d, scan) and (inbox / "scan.words").exists(), 30, "written")
    for name in ("index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    db = Database(config.database)
    try:
        assert from_sidecars(config, db).files == 1
    finally:
        db.close()
    with Daemon(config, engine=FakeEngine()):
        scan.rename(inbox / "moved.png")
        wait_for(lambda: (inbox / "moved.txt").exists(), 30, "the .txt follows")
        wait_for(lambda: (inbox / "moved.words").exists(), 5, "the .words follows")


def test_a_deleted_originals_entry_is_named_by_its_md(tmp_path: Path) -> None:
    config = make_config(tmp_path, outputs=["md", "txt", "words"], on_success="delete")
    inbox = config.inbox[0]
    with Daemon(config, engine=FakeEngine()) as d:
        scan = drop(inbox, "scan.png")
        wait_for(lambda: not scan.exists(), 30, "deleted")
        wait_for(lambda: d.db.query("SELECT 1 FROM jobs WHERE retire IS NULL "
                                    "AND original_gone = 1"), 10, "entry renamed")
        (row,) = d.db.query("SELECT path FROM jobs")
        assert os.fsdecode(row["path"]) == str(inbox / "scan.md")
'''


def add_trial(root: Path) -> None:
    """The format ``words`` added to the tree at ``root``, in its version's layout."""
    naming = root / "ocrwatch/core/naming.py"
    formats = root / "ocrwatch/results/formats.py"
    n = naming.read_text()
    f = formats.read_text()
    render = ('\n\ndef _words(pages: list[PageText]) -> str:\n'
              '    return "\\f".join("\\n".join(p.text.split()) for p in pages) + "\\n"\n')
    if "SUFFIXES: dict[str, str]" in n:  # the branch: one table of names and suffixes
        n = n.replace('"hocr": HOCR_SUFFIX, "alto": ALTO_SUFFIX}',
                      '"hocr": HOCR_SUFFIX, "alto": ALTO_SUFFIX, "words": ".words"}')
        f = f.replace("\n\nregister(Output(\"md\"", render + "\n\nregister(Output(\"md\"", 1)
        f = f.replace('register(Output("alto", alto.render, _xml_pages("Page"), boxes=True))',
                      'register(Output("alto", alto.render, _xml_pages("Page"), boxes=True))\n'
                      'register(Output("words", lambda pages, _name: _words(pages), '
                      '_same_text(_words)))')
    else:  # main
        n = n.replace('ALTO_SUFFIX = ".alto.xml"\n',
                      'ALTO_SUFFIX = ".alto.xml"\nWORDS_SUFFIX = ".words"\n')
        n = n.replace("_LONG_SUFFIXES = (PDF_SUFFIX, HOCR_SUFFIX, ALTO_SUFFIX)",
                      "_LONG_SUFFIXES = (PDF_SUFFIX, HOCR_SUFFIX, ALTO_SUFFIX, WORDS_SUFFIX)")
        n = n.replace('OUTPUT_NAMES = ("md", "txt", "pdf", "hocr", "alto")',
                      'OUTPUT_NAMES = ("md", "txt", "pdf", "hocr", "alto", "words")')
        f = f.replace("    TXT_SUFFIX,\n", "    TXT_SUFFIX,\n    WORDS_SUFFIX,\n")
        f = f.replace("\n\nregister(Output(\"md\"", render + "\n\nregister(Output(\"md\"", 1)
        alto = ('register(Output("alto", ALTO_SUFFIX, alto.render, _xml_pages("Page"), '
                'boxes=True))')
        f = f.replace(alto, alto + '\n'
                      'register(Output("words", WORDS_SUFFIX, lambda pages, _name: _words(pages), '
                      '_same_text(_words)))')
    assert '"words"' in n and 'Output("words"' in f
    naming.write_text(n)
    formats.write_text(f)


def changed_lines(before: str, after: str) -> int:
    """Lines added or changed (not blank)."""
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return sum(1 for line in diff if line.startswith("+") and not line.startswith("+++")
               and line[1:].strip())


def trial(rev: str, scratch: Path) -> tuple[dict[str, int], str]:
    """The lines changed per module to add the format at ``rev``, and pytest's summary
    of the checks against it."""
    root = scratch / re.sub(r"[^\w.-]", "_", rev)
    root.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    ocrwatch_files = sorted(p for p in (root / "ocrwatch").rglob("*.py"))
    before = {p: p.read_text(encoding="utf-8") for p in ocrwatch_files}
    add_trial(root)
    counts = {str(p.relative_to(root)): n for p in ocrwatch_files
               if (n := changed_lines(before[p], p.read_text(encoding="utf-8")))}
    check = root / "trial_checks.py"
    check.write_text(CHECKS, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf",
         "--rootdir", str(root), "-c", str(root / "pyproject.toml"), str(check)],
        cwd=root, capture_output=True, text=True, timeout=900,
        env={**__import__("os").environ, "PYTHONPATH": f"{root}:{root / 'tests'}"})
    lines = result.stdout.strip().splitlines()
    summary = [line for line in lines if line.startswith("FAILED")] + lines[-1:]
    return counts, "\n".join(summary)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revs", nargs="+", default=["main", "HEAD"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = header("Adding an output format: modules and lines touched, behaviour it gets",
                 ["trial format: words (NAME.words), added and checked in scratch copies"])
    with tempfile.TemporaryDirectory(prefix="ocrwatch-trial-") as tmp:
        for rev in args.revs:
            sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev],
                                 check=True, capture_output=True, text=True).stdout.strip()
            counts, summary = trial(rev, Path(tmp))
            out.append(f"{rev} ({sha}): {len(counts)} modules, "
                       f"{sum(counts.values())} lines added or changed")
            out += [f"  {path}: {n}" for path, n in counts.items()]
            out += [f"  checks: {line}" for line in summary.splitlines()]
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n".join(out))
    path = save("trial_format.txt", out, args.out)
    print(f"saved to {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
