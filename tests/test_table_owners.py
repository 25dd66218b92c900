"""One writer per table: every statement that writes a table of the index is in the one
module of ``ocrwatch/store/`` that owns it, and no module outside ``store/`` runs SQL.

The package's source is parsed (``ast``), so a statement counts wherever it is written:
in a call, a constant or an f-string. The schema itself (``store/migrations.py``: tables,
triggers and the one-off steps of an upgrade) is where tables are made, not written.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import ocrwatch
from ocrwatch.store.db import Database

PACKAGE = Path(ocrwatch.__file__).parent
SCHEMA = "store/migrations.py"

# Each table of the index and the one module that writes it.
OWNERS = {
    "jobs": "store/jobs.py",  # the queue and its file bookkeeping
    "moves": "store/jobs.py",  # the journal of originals being archived
    "job_outputs": "store/jobs.py",  # each job's outputs by name (md, txt, pdf, hocr...)
    "pages": "store/index.py",
    "pages_fts": "store/index.py",  # kept by triggers; rebuilt by `ocrwatch reindex`
    "pages_tri": "store/index.py",
    "jobs_fts": "store/index.py",
    "settings": "store/db.py",
    "_migrations": "store/db.py",
}

# A statement that writes: the table named after it, or nothing there when the name is
# put in at run time (which the test refuses: the writer could not be known).
WRITE = re.compile(
    r"\b(?:INSERT(?:\s+OR\s+[A-Z]+)?\s+INTO|REPLACE\s+INTO|(?<!DO )UPDATE(?:\s+OR\s+[A-Z]+)?"
    r"|DELETE\s+FROM)(?:\s+[\"'`\[]?(?P<table>\w+)|(?P<other>\s*(?:\{\}|$)))")
NOT_TABLES = {"SET", "OF", "ON"}  # UPDATE SET (an upsert), AFTER UPDATE OF/ON (a trigger)
SQL_START = re.compile(r"^\s*(?:SELECT|INSERT|UPDATE|DELETE|REPLACE|PRAGMA|WITH|CREATE|DROP"
                       r"|ALTER|BEGIN|COMMIT|ROLLBACK|VACUUM)\s")
RUNS_SQL = {"execute", "executemany", "executescript"}
# sqlite-utils' writing methods on a table (``db["jobs"].insert(...)``).
TABLE_WRITES = {"insert", "insert_all", "upsert", "upsert_all", "update", "delete",
                "delete_where"}


def modules(root: Path = PACKAGE) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path.relative_to(root).as_posix(), ast.parse(path.read_text(), str(path))


def strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string in the code, an f-string with ``{}`` where its values go."""
    in_fstring = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                  for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in in_fstring:
                yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(
                str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)


def writes(tree: ast.AST) -> Iterator[tuple[int, str | None]]:
    """(line, table) of each write in the module; table None: named at run time."""
    for line, text in strings(tree):
        for m in WRITE.finditer(text):
            if m["table"] is not None and m["table"].upper() not in NOT_TABLES:
                yield line, m["table"]
            elif m["other"] is not None:
                yield line, None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in TABLE_WRITES
                and isinstance(node.func.value, ast.Subscript)):
            key = node.func.value.slice
            yield node.lineno, (key.value if isinstance(key, ast.Constant)
                                and isinstance(key.value, str) else None)


def writers(root: Path = PACKAGE) -> dict[str | None, set[str]]:
    found: dict[str | None, set[str]] = {}
    for name, tree in modules(root):
        if name != SCHEMA:
            for line, table in writes(tree):
                found.setdefault(table, set()).add(f"{name}:{line}" if table is None
                                                   else name)
    return found


def schema_tables(tmp_path: Path) -> set[str]:
    """The tables a new index has, less the FTS5 tables' own shadow tables."""
    db = Database(tmp_path / "index.sqlite3")
    try:
        rows = db.query("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
    finally:
        db.close()
    virtual = {r["name"] for r in rows if "VIRTUAL TABLE" in (r["sql"] or "").upper()}
    shadows = {f"{v}_{s}" for v in virtual for s in ("data", "idx", "content", "docsize",
                                                       "config")}
    return {r["name"] for r in rows} - shadows - {"sqlite_sequence", "sqlite_stat1"}


def test_every_table_has_one_named_owner(tmp_path: Path) -> None:
    assert schema_tables(tmp_path) == set(OWNERS)


def test_each_table_is_written_by_its_owner_alone() -> None:
    found = writers()
    assert None not in found, f"writes to a table named at run time: {sorted(found[None])}"
    assert set(found) <= set(OWNERS), f"writes to tables no module owns: {found}"
    assert {t: sorted(m) for t, m in found.items()} == {t: [m] for t, m in OWNERS.items()}


def test_no_sql_outside_the_store() -> None:
    ran: list[str] = []
    for name, tree in modules():
        if name.startswith("store/"):
            continue
        ran += [f"{name}:{node.lineno} .{node.func.attr}(" for node in ast.walk(tree)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in RUNS_SQL]
        ran += [f"{name}:{line} {text[:50]!r}" for line, text in strings(tree)
                if SQL_START.match(text)]
    assert ran == []


def test_a_second_writer_is_found(tmp_path: Path) -> None:
    """The checks above see a write added outside its owner, in each form it may take."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "jobs.py").write_text(
        'SQL = "UPDATE jobs SET state = ? WHERE id = ?"\n')
    (tmp_path / "store" / "other.py").write_text(
        'def f(conn, t):\n'
        '    conn.execute("DELETE FROM moves WHERE job_id = ?", (1,))\n'
        '    conn.execute(f"INSERT INTO {t}({t}) VALUES (\'delete-all\')")\n'
        '    conn.execute("INSERT OR REPLACE INTO settings(key) VALUES (1) "\n'
        '                 "ON CONFLICT(key) DO UPDATE SET key = 2")\n'
        '    db["pages"].insert({"id": 1})\n')
    assert writers(tmp_path) == {"jobs": {"store/jobs.py"}, "moves": {"store/other.py"},
                                 None: {"store/other.py:3"}, "settings": {"store/other.py"},
                                 "pages": {"store/other.py"}}
