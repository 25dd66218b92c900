"""The one error boundary: every exception class in the tree with a kind, no bare base
class raised, OS and SQLite errors read in one place each, out of memory known by type,
and import contracts that hold without exceptions."""

from __future__ import annotations

import ast
import builtins
import errno
import sqlite3
import tomllib
from pathlib import Path

import pytest

from ocrwatch.core import errors
from ocrwatch.core.errors import (
    Doing,
    InputError,
    Kind,
    OcrwatchError,
    TransientError,
    is_out_of_memory,
    os_reason,
)
from ocrwatch.store.db import SqliteProblem, is_damage, is_disk_full, sqlite_problem

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ocrwatch"


def _classes() -> dict[str, tuple[str, list[str]]]:
    """Every class defined in ocrwatch/: name -> (where, the last part of each base)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                found[node.name] = (f"{path.relative_to(ROOT)}:{node.lineno}", bases)
    return found


def _builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def test_every_exception_class_is_in_the_tree() -> None:
    classes = _classes()

    def chain(name: str) -> list[str]:
        seen = [name]
        while name in classes and classes[name][1]:
            name = classes[name][1][0]
            seen.append(name)
        return seen

    outside = [f"{where} {name}({', '.join(bases)})"
               for name, (where, bases) in classes.items()
               if name != "OcrwatchError" and _builtin_exception(chain(name)[-1])
               and "OcrwatchError" not in chain(name)]
    assert outside == []


def test_every_error_carries_a_kind() -> None:
    tree = [c for c in vars(errors).values()
            if isinstance(c, type) and issubclass(c, OcrwatchError)]
    assert len(tree) > 10
    assert all(isinstance(c.kind, Kind) for c in tree)
    assert errors.InputError.kind is Kind.INPUT and errors.OverBudget.kind is Kind.INPUT
    assert errors.EngineUnavailable.kind is Kind.MACHINE  # its own, not EngineError's
    assert errors.EngineUnavailable.exit_code == 3


def test_no_raise_of_the_bare_base_class() -> None:
    bare = [f"{path.relative_to(ROOT)}:{node.lineno}"
            for path in sorted(PACKAGE.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
            and ast.unparse(node.exc.func).rsplit(".", 1)[-1] == "OcrwatchError"]
    assert bare == []


def test_the_import_contracts_have_no_exceptions() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    assert len(contracts) >= 2
    assert [c["name"] for c in contracts if c.get("ignore_imports")] == []


@pytest.mark.parametrize(("code", "doing", "kind", "text"), [
    (errno.ENOSPC, Doing.WRITE, TransientError, "the disk is full: could not write a.md"),
    (errno.EROFS, Doing.WRITE, InputError, "cannot write /x/a.md: Read-only file system; "),
    (errno.ENAMETOOLONG, Doing.WRITE, InputError, "is too long for the file system"),
    (errno.EIO, Doing.WRITE, TransientError, "could not write a.md: Input/output error"),
    (errno.ENOSPC, Doing.MOVE, TransientError, "the disk is full; free some space"),
    (errno.EXDEV, Doing.MOVE, InputError, "Invalid cross-device link (/x/a.md)"),
    (errno.ENOENT, Doing.OPEN, InputError, "the file was deleted before it could be read"),
    (errno.EACCES, Doing.OPEN, InputError, "permission denied: ocrwatch cannot read"),
    (errno.EMFILE, Doing.OPEN, TransientError, "cannot open a.md now: Too many open files"),
    (errno.ELOOP, Doing.OPEN, InputError, "cannot open the file: Too many levels"),
    (errno.EISDIR, Doing.READ, InputError, "this is a folder, not a file"),
    (errno.EBUSY, Doing.READ, TransientError, "could not read the file: Device or resource"),
    (errno.EIO, Doing.DECODE, TransientError, "could not open the file: Input/output error"),
    (errno.EINVAL, Doing.DECODE, InputError, "could not open the file: Invalid argument"),
])
def test_os_errors_map_to_one_reason_each(code: int, doing: Doing, kind: type,
                                          text: str) -> None:
    import os

    exc = OSError(code, os.strerror(code), "/x/a.md")  # the subclass for its errno, as raised
    reason = os_reason(exc, doing, name="a.md", path=Path("/x/a.md"), verb="open")
    assert type(reason) is kind and text in str(reason), str(reason)


def test_sqlite_errors_are_read_by_their_result_code(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite3"
    writer = sqlite3.connect(path, timeout=0)
    writer.execute("CREATE TABLE t (v BLOB)")
    writer.commit()
    writer.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0)
    with pytest.raises(sqlite3.OperationalError) as busy:
        other.execute("BEGIN IMMEDIATE")
    writer.rollback()
    assert busy.value.sqlite_errorcode == sqlite3.SQLITE_BUSY
    assert sqlite_problem(busy.value) is SqliteProblem.BUSY
    # A full database, for real: a page limit below what the rows need.
    writer.execute("PRAGMA max_page_count = 8")
    with pytest.raises(sqlite3.OperationalError) as full, writer:
        writer.executemany("INSERT INTO t VALUES (?)", [(b"x" * 4000,)] * 50)
    assert sqlite_problem(full.value) is SqliteProblem.FULL and is_disk_full(full.value)
    with pytest.raises(sqlite3.OperationalError) as query:
        writer.execute("CREATE VIRTUAL TABLE f USING fts5(a)")
        writer.execute("SELECT * FROM f WHERE f MATCH 'a AND'")
    assert sqlite_problem(query.value) is SqliteProblem.QUERY
    writer.close()
    other.close()
    # The code decides, not words in the message that happen to match another problem.
    coded = sqlite3.OperationalError("a table named 'disk is full' is malformed")
    coded.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
    assert sqlite_problem(coded) is SqliteProblem.BUSY and not is_damage(coded)
    # An error made by hand (no code) is read by SQLite's own words.
    assert sqlite_problem(sqlite3.OperationalError("database or disk is full")) \
        is SqliteProblem.FULL
    assert sqlite_problem(ValueError("database is locked")) is None


def test_out_of_memory_is_known_by_its_type() -> None:
    class OutOfMemoryError(RuntimeError):  # torch.cuda's, by name: torch is not here
        pass

    assert is_out_of_memory(OutOfMemoryError("Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(MemoryError())
    assert not is_out_of_memory(ValueError("the page holds the words out of memory"))
    assert not is_out_of_memory(RuntimeError("CUDA error: an illegal memory access"))
