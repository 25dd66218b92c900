"""No user file is overwritten or lost, whatever the folder does: a sidecar the user
corrected, a removable inbox that comes back empty, two originals with one stem, links in
the inbox. Real ``ocrwatch run`` and ``ocrwatch add`` processes, real files."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from .helpers import (
    DaemonProcess,
    Home,
    drop,
    ended,
    image_bytes,
    job,
    jobs,
    ocrwatch_cli,
    pdf_bytes,
    sidecars,
    states,
    wait_for,
)

Start = Callable[..., DaemonProcess]
CORRECTED = "Dear Ms Lund,\n\nthe harbour office opens at nine (corrected by hand).\n"


def _read(home: Home, path: Path, timeout: float = 60) -> None:
    wait_for(lambda: ended(home.database, path, "done") is not None
             and all(p.exists() for p in sidecars(path)), timeout, f"{path.name} read")


def _edit(path: Path, how: str) -> None:
    """The user's correction, saved as editors save: in place (the inode and its
    extended attributes stay) or atomically (a new file renamed over the old)."""
    if how == "in place":
        with path.open("r+", encoding="utf-8") as fh:
            fh.write(CORRECTED)
            fh.truncate()
    else:
        tmp = path.with_name(f".{path.name}.swp")
        tmp.write_text(CORRECTED, encoding="utf-8")
        os.replace(tmp, path)


# -- item: a user's corrections to a sidecar ------------------------------------------------
@pytest.mark.parametrize("how", ["in place", "atomically"])
@pytest.mark.parametrize("then", ["reread --all", "a new scan saved over it"])
def test_a_corrected_sidecar_is_never_overwritten(home: Home, daemon_process: Start,
                                                  how: str, then: str) -> None:
    """The user corrects ``letter.md``, then the file is read again: the correction stays
    as the user saved it, the new reading goes to ``letter.png.md`` beside it and the log
    says where (before: overwritten without a word)."""
    daemon = daemon_process().start()
    daemon.wait_ready()
    letter = drop(home.inbox / "letter.png", image_bytes("harbour office"))
    _read(home, letter)
    md, txt = sidecars(letter)
    first_id = job(home.database, letter)["id"]
    _edit(md, how)
    if then == "reread --all":
        done = ocrwatch_cli(home, "reread", "--all", "--database", str(home.database))
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        drop(letter, image_bytes("harbour office, second scan"))
    beside = home.inbox / "letter.png.md"
    wait_for(lambda: beside.exists() and ended(home.database, letter, "done") is not None
             and os.fsdecode(job(home.database, letter)["md_path"]) == str(beside),
             60, "the new reading beside the corrected sidecar")
    assert md.read_text(encoding="utf-8") == CORRECTED
    assert "fake text of letter.png" in beside.read_text(encoding="utf-8")
    assert job(home.database, letter)["id"] == first_id
    log = daemon.output()
    assert f"{md} was changed since ocrwatch wrote it" in log, log[-3000:]
    assert str(beside) in log
    assert "Traceback" not in log
    # Read once more: the new reading stays where it went, the correction is untouched.
    third = image_bytes("harbour office, third scan")
    drop(letter, third)
    wait_for(lambda: (row := ended(home.database, letter, "done")) is not None
             and row["sha256"] == hashlib.sha256(third).hexdigest(), 60, "the third scan read")
    assert daemon.stop() == 0
    assert md.read_text(encoding="utf-8") == CORRECTED
    assert txt.exists()  # ocrwatch's own, unchanged: the new .txt went beside it with the .md
    assert not list(home.inbox.glob("letter.png.*.md")), sorted(home.inbox.iterdir())


def test_a_corrected_sidecar_survives_a_language_change_and_reread(
        home: Home, daemon_process: Start) -> None:
    """A language change, the daemon started again and ``ocrwatch reread`` (no daemon
    running): the corrected ``letter.md`` stays, the new reading goes beside it."""
    daemon = daemon_process().start()
    daemon.wait_ready()
    letter = drop(home.inbox / "letter.png", image_bytes("harbour office"))
    _read(home, letter)
    md, _txt = sidecars(letter)
    _edit(md, "in place")
    assert daemon.stop() == 0
    done = ocrwatch_cli(home, "reread", "--all", "--languages", "eng+deu", "--engine", "fake",
                        "--inbox", str(home.inbox), "--database", str(home.database),
                        timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert md.read_text(encoding="utf-8") == CORRECTED
    beside = home.inbox / "letter.png.md"
    assert "fake text of letter.png" in beside.read_text(encoding="utf-8")
    assert str(beside) in done.stdout + done.stderr


# -- item: a removable inbox that comes back empty -------------------------------------------
def _mount_tmpfs(where: Path) -> None:
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
                              capture_output=True, text=True, timeout=30)
    except OSError as exc:
        pytest.skip(f"cannot run mount: {exc}")
    if done.returncode != 0:
        reason = f"mounting a tmpfs was refused ({done.stderr.strip()}); run as root"
        print(reason)
        pytest.skip(reason)


def _outputs(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_ino for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("how", ["renamed away, made again empty", "another disk mounted over it",
                                 "renamed away while stopped"])
def test_an_inbox_that_comes_back_empty_deletes_nothing(home: Home, daemon_process: Start,
                                                        tmp_path: Path, how: str) -> None:
    """The inbox's disk goes away and an empty folder (or another file system) appears at
    its path: before, the rescan dropped every entry and deleted every sidecar in
    ``output_dir``, and every file was read again once the disk was back. Now the entries
    and sidecars stay, the log says why, and nothing is read again when the files are back."""
    out = tmp_path / "out"
    daemon = daemon_process("--output-dir", str(out), OCRWATCH_RESCAN_MINUTES="0.1",
                            OCRWATCH_LOG_LEVEL="DEBUG").start()
    daemon.wait_ready()
    files = [drop(home.inbox / "a.png", image_bytes("alpha")),
             drop(home.inbox / "sub" / "b.png", image_bytes("beta")),
             drop(home.inbox / "c.png", image_bytes("gamma"))]
    wait_for(lambda: all(ended(home.database, f, "done") for f in files), 60, "files read")
    ids = {f: job(home.database, f)["id"] for f in files}
    results = _outputs(out)
    assert len(results) == 6
    away = tmp_path / "inbox-away"
    if how == "renamed away while stopped":
        assert daemon.stop() == 0
    if how == "another disk mounted over it":
        _mount_tmpfs(home.inbox)
    else:
        home.inbox.rename(away)
        home.inbox.mkdir()
    try:
        if how == "renamed away while stopped":
            daemon.start()
            daemon.wait_ready()
        # A file dropped into the empty folder meanwhile is read, and changes nothing.
        meanwhile = drop(home.inbox / "meanwhile.png", image_bytes("meanwhile"))
        wait_for(lambda: ended(home.database, meanwhile, "done"), 60, "the new file read")
        # Three rescans (one every 6 s) that found them, or (before) them dropped.
        wait_for(lambda: daemon.logs[-1].read_text().count(" still out of reach") >= 3
                 or any(job(home.database, f) is None for f in files), 90, "three rescans")
        assert {f: (job(home.database, f) or {"id": None})["id"] for f in files} == ids
        assert all(p.exists() for p in results), "a sidecar was deleted"
        assert "3 known files of" in daemon.logs[-1].read_text()
    finally:
        if how == "another disk mounted over it":
            subprocess.run(["umount", "-l", str(home.inbox)], check=False, timeout=30)
        else:
            for p in sorted(home.inbox.rglob("*"), reverse=True):
                p.unlink() if p.is_file() else p.rmdir()
            home.inbox.rmdir()
            away.rename(home.inbox)
    wait_for(lambda: "within reach again" in daemon.logs[-1].read_text(), 60,
             "the files back")
    log = daemon.output()
    for f in files:
        assert log.count(f"queued {f} ") == 1, f"{f.name} read again"
        assert job(home.database, f)["id"] == ids[f] and job(home.database, f)["state"] == "done"
    assert {p: i for p, i in _outputs(out).items() if p in results} == results
    assert "Traceback" not in log
    assert daemon.stop() == 0


# -- attack classes: one stem for two originals, the user's own sidecar name ---------------
@pytest.mark.parametrize("on_success", ["keep", "delete", "archive"])
def test_one_stem_for_two_originals_and_the_users_own_md_keep_every_file(
        home: Home, daemon_process: Start, tmp_path: Path, on_success: str) -> None:
    """``letter.jpg`` + ``letter.pdf``, ``a.JPG`` + ``a.jpg`` and a user's own
    ``notes.md`` beside ``notes.png``: every original gets a pair of its own, nothing of
    the user's is overwritten, moved or deleted, whatever ``on_success`` does."""
    archive = tmp_path / "archive"
    daemon = daemon_process(OCRWATCH_ON_SUCCESS=on_success,
                            OCRWATCH_ARCHIVE_DIR=str(archive)).start()
    daemon.wait_ready()
    own = home.inbox / "notes.md"
    own.write_text("my own notes\n", encoding="utf-8")
    own_txt = home.inbox / "letter.txt"
    own_txt.write_text("my own letter text\n", encoding="utf-8")
    originals = [drop(home.inbox / "notes.png", image_bytes("notes")),
                 drop(home.inbox / "letter.jpg", image_bytes("letter photo", "JPEG")),
                 drop(home.inbox / "letter.pdf", pdf_bytes(["letter pdf"])),
                 drop(home.inbox / "a.JPG", image_bytes("upper", "JPEG")),
                 drop(home.inbox / "a.jpg", image_bytes("lower", "JPEG"))]
    if on_success == "keep":
        wait_for(lambda: all(ended(home.database, f, "done") for f in originals), 90,
                 "all read")
    else:  # each entry then names the archived original, or its result
        # Retired means nothing owed any more: an original moved to its private name
        # has left the inbox before its sidecars' moves are recorded.
        wait_for(lambda: not any(f.exists() for f in originals)
                 and states(home.database) == {"done": 5}
                 and all(r["retire"] is None for r in jobs(home.database).values()),
                 90, "originals retired")
    assert own.read_text(encoding="utf-8") == "my own notes\n"
    assert own_txt.read_text(encoding="utf-8") == "my own letter text\n"
    mds = {os.fsdecode(r["md_path"]) for r in jobs(home.database).values() if r["md_path"]}
    assert len(mds) == 5, mds
    texts = {Path(m).read_text(encoding="utf-8") for m in mds if Path(m).exists()}
    assert len(texts) == len(mds), "one sidecar was written over another"
    assert str(own) not in mds and str(own_txt.with_suffix(".md")) not in mds
    log = daemon.output()
    assert "Traceback" not in log
    assert daemon.stop() == 0


# -- attack class: the output folder swapped for a link mid-run ------------------------------
def test_an_output_folder_swapped_for_a_link_mid_run_is_not_written_through(
        home: Home, daemon_process: Start, tmp_path: Path) -> None:
    """``output_dir`` renamed away and a link to another folder (a shared or another
    user's folder) put in its place while the daemon runs: the next file's text is not
    written there; it fails with the reason, and the first file's sidecars are where
    they were (before: the text went through the link)."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    daemon = daemon_process("--output-dir", str(out)).start()
    daemon.wait_ready()
    first = drop(home.inbox / "first.png", image_bytes("first"))
    wait_for(lambda: ended(home.database, first, "done"), 60, "the first file read")
    out.rename(tmp_path / "out-kept")
    out.symlink_to(elsewhere)
    second = drop(home.inbox / "second.png", image_bytes("second, private"))
    row = wait_for(lambda: ended(home.database, second), 60, "the second file to end")
    assert row["state"] == "failed", dict(row)
    assert "replaced by a symbolic link" in row["reason"], row["reason"]
    assert list(elsewhere.iterdir()) == []
    kept = sorted(p.name for p in (tmp_path / "out-kept").rglob("*") if p.is_file())
    assert kept == ["first.md", "first.txt"]
    assert "Traceback" not in daemon.output()
    assert daemon.stop() == 0


# -- attack class: the archive or failed folder swapped for a link mid-run --------------------
@pytest.mark.parametrize("key", ["archive_dir", "failed_dir"])
def test_an_archive_or_failed_folder_swapped_for_a_link_is_not_moved_through(
        home: Home, daemon_process: Start, tmp_path: Path, key: str) -> None:
    """``archive_dir`` (``on_success = "archive"``) or ``failed_dir``, a real folder when
    the daemon starts, renamed away and a link to another folder put in its place before
    the first file: the original is kept in the inbox, and nothing is moved through the
    link (before: the scan moved into the linked folder, out of the user's reach)."""
    folder, elsewhere = tmp_path / "kept", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    config = home.root / "config.toml"
    mode = "archive" if key == "archive_dir" else "keep"
    config.write_text(f'on_success = "{mode}"\n{key} = "{folder}"\n', encoding="utf-8")
    daemon = daemon_process("--config", str(config))
    daemon.start().wait_ready()
    folder.rename(tmp_path / "renamed-away")
    folder.symlink_to(elsewhere)
    good = image_bytes("a private letter")
    name = home.inbox / "letter.png"
    drop(name, good if key == "archive_dir" else b"not an image at all")
    wait_for(lambda: not name.exists() or "could not" in daemon.output(), 60,
             "the file to be moved, or the move refused")
    assert name.exists(), f"moved through the link: {sorted(elsewhere.rglob('*'))}"
    if key == "archive_dir":
        row = wait_for(lambda: job(home.database, name), 10, "the job")
        assert (row["state"], row["retire"]) == ("done", "failed"), dict(row)
        assert "symbolic link" in row["retire_reason"], row["retire_reason"]
    else:
        assert ended(home.database, name, "failed") is not None
    assert name.read_bytes() == (good if key == "archive_dir" else b"not an image at all")
    assert list(elsewhere.iterdir()) == [], list(elsewhere.rglob("*"))
    assert "Traceback" not in daemon.output()
    assert daemon.stop() == 0


# -- attack class: links to another user's or another group's file ----------------------------
def _results_keep_their_text_from_others(inbox: Path, stem: str, gid: int | None) -> None:
    """``stem``'s .md, .txt and searchable PDF: no bits for others, and group bits only
    for the original's own group."""
    for side in (inbox / f"{stem}.md", inbox / f"{stem}.txt", inbox / f"{stem}.ocr.pdf"):
        st = side.stat()
        assert st.st_mode & 0o070 == 0 or st.st_gid == gid, f"{side.name}: {oct(st.st_mode)}"
        assert st.st_mode & 0o007 == 0, f"{side.name}: {oct(st.st_mode)}"


def test_a_hard_link_to_another_groups_file_gives_no_group_its_text(
        home: Home, daemon_process: Start, tmp_path: Path) -> None:
    """A hard link in the inbox to a file readable by another group (0640, that group):
    its sidecars and searchable PDF are ours, with our group, so they keep no group bits
    (before: 0640 for our group, whose members could not read the original; the PDF
    kept 0640 after the sidecars were fixed)."""
    if os.geteuid() != 0:
        pytest.skip("making a second group and its file needs root")
    group = f"owg{os.getpid() % 100000}"
    made = subprocess.run(["groupadd", group], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        pytest.skip(f"groupadd refused: {made.stderr.strip()}")
    try:
        import grp

        gid = grp.getgrnam(group).gr_gid
        theirs = tmp_path / "theirs.png"
        theirs.write_bytes(image_bytes("their payslip"))
        os.chown(theirs, 65534, gid)
        theirs.chmod(0o640)
        config = home.root / "config.toml"
        config.write_text('outputs = ["md", "txt", "pdf"]\n', encoding="utf-8")
        daemon = daemon_process("--config", str(config)).start()
        daemon.wait_ready()
        link = home.inbox / "linked.png"
        os.link(theirs, link)
        wait_for(lambda: ended(home.database, link, "done"), 60, "the hard link read")
        _results_keep_their_text_from_others(home.inbox, "linked", gid)
        assert daemon.stop() == 0
    finally:
        subprocess.run(["groupdel", group], capture_output=True, timeout=30)


def test_a_followed_link_to_another_users_private_file_keeps_its_text_private(
        home: Home, daemon_process: Start, tmp_path: Path) -> None:
    """``follow_symlinks = true``; links in the inbox to a 0600 file of the user's own and,
    as root, to a 0600 file of another user (``nobody``): the results take the mode of
    the file read, never the link's own 0777, so others cannot read them."""
    mine = tmp_path / "mine.png"
    mine.write_bytes(image_bytes("my own private letter"))
    mine.chmod(0o600)
    targets = {"to-mine": mine}
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs.png"
        theirs.write_bytes(image_bytes("their private letter"))
        os.chown(theirs, 65534, 65534)
        theirs.chmod(0o600)
        targets["to-theirs"] = theirs
    config = home.root / "config.toml"
    config.write_text('follow_symlinks = true\noutputs = ["md", "txt", "pdf"]\n',
                      encoding="utf-8")
    daemon = daemon_process("--config", str(config)).start()
    daemon.wait_ready()
    for stem, target in targets.items():
        (home.inbox / f"{stem}.png").symlink_to(target)
    for stem in targets:
        wait_for(lambda s=stem: ended(home.database, home.inbox / f"{s}.png", "done"), 60,
                 f"{stem}.png read")
        _results_keep_their_text_from_others(home.inbox, stem, None)
    assert daemon.stop() == 0
    if os.geteuid() != 0:
        pytest.skip("the other user's half needs root (to make a file of another uid); "
                    "the user's own 0600 file was checked")


def test_links_to_another_users_unreadable_files_fail_saying_whose_they_are(
        home: Home, daemon_process: Start, without_dac: list[str], tmp_path: Path) -> None:
    """``follow_symlinks = true``; a symbolic link and a hard link in the inbox to 0600
    files of another user (``nobody``), read by a daemon without root's file
    capabilities (as an ordinary user is): each fails with whose file it is and what to
    do (before: "make it readable (chmod u+r)", which only their owner can); their files
    are untouched, no sidecar is made, and the next file is read."""
    if os.geteuid() != 0:
        pytest.skip("making another user's file needs root")
    theirs = {name: tmp_path / f"{name}-of-nobody.png" for name in ("payslip", "contract")}
    for name, path in theirs.items():
        path.write_bytes(image_bytes(f"their {name}"))
        os.chown(path, 65534, 65534)
        path.chmod(0o600)
    before = {path: (path.read_bytes(), path.stat()) for path in theirs.values()}
    config = home.root / "config.toml"
    config.write_text("follow_symlinks = true\n", encoding="utf-8")
    daemon = daemon_process("--config", str(config))
    daemon.prefix = without_dac
    daemon.start().wait_ready()
    link, hard = home.inbox / "link.png", home.inbox / "hard.png"
    link.symlink_to(theirs["payslip"])
    os.link(theirs["contract"], hard)
    good = drop(home.inbox / "mine.png", image_bytes("my letter"))
    for path, what in ((link, str(theirs["payslip"])), (hard, "a hard link")):
        row = wait_for(lambda p=path: ended(home.database, p), 30, f"{path.name} to end")
        assert row["state"] == "failed", dict(row)
        assert "belongs to another user (nobody)" in row["reason"] and what in row["reason"] \
            and "chmod" not in row["reason"], row["reason"]
        assert not any(p.exists() for p in sidecars(path))
    wait_for(lambda: ended(home.database, good, "done"), 30, "the next file read")
    for path, (data, st) in before.items():
        now = path.stat()
        assert path.read_bytes() == data
        assert (now.st_uid, now.st_mode, now.st_mtime_ns) == (st.st_uid, st.st_mode,
                                                               st.st_mtime_ns)
    assert "Traceback" not in daemon.output()
    assert daemon.stop() == 0
