"""Hostile world, third round: attacks on the search page, on_done hooks and the moves,
each against the real server on 127.0.0.1, real files and real processes."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from helpers import use_home, wait_for
from search_site import Site, indexed, serve

from ocrwatch.config import Config
from ocrwatch.daemon import Daemon, word_boxes
from ocrwatch.hooks.runner import Finished, hook_argv, run_hook
from ocrwatch.testing.fake import FakeEngine
from ocrwatch.web.handler import IDLE_TIMEOUT


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    use_home(tmp_path / "home", monkeypatch)
    with indexed(tmp_path) as (config, files, d):
        thumbs = d.thumbs
    # The daemon is stopped: the files changed below are left as the attacks make them.
    with serve(config, thumbs, files) as running:
        yield running


def _job_id(site: Site, name: str) -> int:
    hits = site.api("/api/search?q=fake&per=100")["hits"]
    return int(next(h["job_id"] for h in hits if h["name"] == name))


def _open(site: Site, body: bytes) -> tuple[int, bytes]:
    status, _, reply = site.request("POST", "/api/open", body=body,
                                    headers={"Content-Type": "application/json"})
    return status, reply


# -- the search page ---------------------------------------------------------------------

def test_web_a_file_swapped_for_a_link_after_indexing_is_not_opened(site: Site,
                                                                    tmp_path: Path) -> None:
    """A file in the index replaced by a link (to a script, to another user's file...):
    "open" would hand the link's target to xdg-open."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "note.jpg").write_bytes(b"#!/bin/sh\necho owned\n")
    (outside / "harbour report.pdf").write_bytes(b"%PDF-1.4 not the indexed one")
    note = site.files["note"]
    job = _job_id(site, "note.jpg")
    report_job = _job_id(site, "harbour report.pdf")
    note.unlink()
    note.symlink_to(outside / "note.jpg")
    status, reply = _open(site, json.dumps({"job_id": job, "what": "original"}).encode())
    assert status == 404 and b"link" in reply, reply
    # A folder above the file swapped for a link to elsewhere: the same.
    letters = site.inbox / "letters"
    letters.rename(site.inbox / "moved-away")
    letters.symlink_to(outside)
    status, reply = _open(site, json.dumps({"job_id": report_job, "what": "original"}).encode())
    assert status == 404 and b"link" in reply, reply
    assert site.opened == []


def test_web_numbers_out_of_range_get_a_plain_answer(site: Site,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Ids and pages past SQLite's integers made OverflowError: a dropped connection
    (POST) or a 500 with a traceback in the log (GET)."""
    huge = "9" * 30
    status, reply = _open(site, f'{{"job_id": {huge}, "page": 1}}'.encode())
    assert status in (400, 404) and json.loads(reply)["error"]
    status, reply = _open(site, f'{{"job_id": 1, "page": {huge}}}'.encode())
    assert status in (400, 404) and json.loads(reply)["error"]
    assert site.request("GET", f"/thumb/{huge}/1")[0] == 404
    assert site.request("GET", f"/thumb/1/{huge}")[0] == 404
    status, _, body = site.request("GET", f"/api/search?q=fake&page={huge}")
    assert status == 400 and json.loads(body)["error"]
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)
    assert site.opened == []


def test_web_a_deeply_nested_body_gets_a_plain_answer(site: Site) -> None:
    status, reply = _open(site, b"[" * 4000 + b"]" * 4000)
    assert status == 400 and json.loads(reply)["error"]
    status, reply = _open(site, b'{"job_id": ' + b"[" * 2000 + b"]" * 2000 + b"}")
    assert status == 400 and json.loads(reply)["error"]


def test_web_a_false_length_does_not_hold_a_thread(site: Site) -> None:
    """Content-Length -1 made the handler read until the client hung up."""
    with socket.create_connection(("127.0.0.1", site.server.port), timeout=10) as sock:
        sock.sendall(
            f"POST /api/open HTTP/1.1\r\nHost: 127.0.0.1:{site.server.port}\r\n"
            f"X-Ocrwatch-Token: {site.server.token}\r\nContent-Type: application/json\r\n"
            "Content-Length: -1\r\n\r\n{}".encode())
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400"), reply


def test_web_idle_connections_are_closed(site: Site) -> None:
    """Connections that send nothing (or a byte now and then) each held a thread for ever:
    any local user could pile them up without the token."""
    started = time.monotonic()
    socks = [socket.create_connection(("127.0.0.1", site.server.port), timeout=IDLE_TIMEOUT + 10)
             for _ in range(20)]
    try:
        socks[0].sendall(b"GET / HTTP/1.1\r\n")  # a request begun, never finished
        for sock in socks:
            assert sock.recv(4096) in (b"", b"HTTP/1.1 408")  # closed by the server
    finally:
        for sock in socks:
            sock.close()
    assert time.monotonic() - started < IDLE_TIMEOUT + 5
    # The page still answers.
    assert site.api("/api/search?q=fake")["hits"]


def test_web_hostile_queries_get_answers_in_bounded_time(site: Site) -> None:
    for q in ('"', "a* " * 200, "NEAR(", "x" * 30000, "AND OR NOT", "^*", "fake:",
              "\x00", "名" * 1000):
        started = time.monotonic()
        status, _, body = site.request("GET", "/api/search?q=" + quote(q))
        assert status in (200, 400, 414), (q[:20], status, body[:200])
        if status != 414:
            assert "error" in json.loads(body) or "hits" in json.loads(body)
        assert time.monotonic() - started < 15


# -- on_done -----------------------------------------------------------------------------

def test_hook_placeholders_in_file_names_are_not_replaced_again() -> None:
    """A file named ``{md}.png`` (or ``{pdf}``...) changed the argument the program got:
    each placeholder's value was searched for the next placeholder."""
    inbox = Path("/inbox")
    item = Finished(source=inbox / "{md} {txt}.png", original=inbox / "{md} {txt}.png",
                    outputs={"md": inbox / "{md} {txt}.md", "txt": inbox / "{md} {txt}.txt"})
    assert hook_argv(["prog", "--in={file}", "{md}", "{pdf}"], item) == [
        "prog", "--in=/inbox/{md} {txt}.png", "/inbox/{md} {txt}.md", ""]
    assert hook_argv(["prog", "{{file}}"], item) == ["prog", "{/inbox/{md} {txt}.png}"]


def test_hook_names_with_shell_metacharacters_are_one_argument(tmp_path: Path) -> None:
    name = tmp_path / "a;$(touch pwned)`id`|&>x 'q\" *.png"
    name.write_bytes(b"x")
    out = tmp_path / "args.json"
    argv = [sys.executable, "-c",
            "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))",
            str(out)]
    assert run_hook(argv, Finished(source=name, original=name), timeout=30) == 0
    assert json.loads(out.read_text()) == [str(name)]
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "x").exists()


def test_hook_that_leaves_a_child_running_counts_when_it_exits(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A hook that starts a background child and exits: the child holds the output pipe,
    so the hook was waited for until its timeout (every later file held up that long),
    then logged as too slow and its child killed."""
    pidfile = tmp_path / "child.pid"
    argv = ["/bin/sh", "-c", f'sleep 300 & echo $! > "{pidfile}"; echo started; exit 0']
    item = Finished(source=tmp_path / "x.png", original=tmp_path / "x.png")
    started = time.monotonic()
    caplog.set_level(logging.INFO, "ocrwatch.hooks.runner")
    try:
        assert run_hook(argv, item, timeout=20) == 0
        assert time.monotonic() - started < 10
        assert "ok: started" in caplog.text
        assert _alive(int(pidfile.read_text()))  # the hook's own background work
    finally:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_hook_that_runs_forever_is_stopped_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    argv = ["/bin/sh", "-c", f'sleep 300 & echo $! > "{pidfile}"; sleep 300']
    item = Finished(source=tmp_path / "x.png", original=tmp_path / "x.png")
    started = time.monotonic()
    assert run_hook(argv, item, timeout=1) is None
    assert time.monotonic() - started < 10
    wait_for(lambda: not _alive(int(pidfile.read_text())), 15, "the hook's child ended")


def test_a_huge_hook_timeout_is_refused_with_its_origin(tmp_path: Path) -> None:
    """on_done_timeout = 1e12 was accepted; the daemon then failed on stop with
    "OverflowError: timestamp out of range for platform time_t"."""
    from ocrwatch import config as config_mod
    from ocrwatch.core.errors import OcrwatchError

    path = tmp_path / "config.toml"
    path.write_text(f'inbox = ["{tmp_path}/inbox"]\non_done = ["/bin/true"]\n'
                    "on_done_timeout = 1e12\n")
    with pytest.raises(OcrwatchError) as err:
        config_mod.load(path)
    assert "on_done_timeout" in str(err.value) and str(path) in str(err.value)


# -- the searchable PDF ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["png", "pdf"])
def test_pdf_output_never_reads_through_a_link_swapped_in_after_the_read(
        tmp_path: Path, kind: str) -> None:
    """The PDF output opened the original again by path (page boxes, img2pdf, pikepdf,
    pdfium, the mode): a subfolder swapped for a link after the read put a file from
    outside the inbox into the inbox's searchable PDF."""
    import pikepdf

    from ocrwatch.core.domain import PageText
    from ocrwatch.fs.safeopen import LinkRefused
    from ocrwatch.results.outputs import PdfMaker

    from .helpers import image_bytes, pdf_bytes

    inbox, outside = tmp_path / "inbox", tmp_path / "private"
    (inbox / "sub").mkdir(parents=True)
    outside.mkdir()
    name = f"scan.{kind}"
    if kind == "png":
        (inbox / "sub" / name).write_bytes(image_bytes("inbox page", size=(600, 400)))
        (outside / name).write_bytes(image_bytes("private page", size=(1234, 777)))
    else:
        (inbox / "sub" / name).write_bytes(pdf_bytes(["inbox page"], size=(300, 400)))
        (outside / name).write_bytes(pdf_bytes(["private page"], size=(617, 389)))
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", engine="fake",
                    outputs=["md", "txt", "pdf"], pdfa="never")
    (inbox / "sub").rename(inbox / "was-sub")
    (inbox / "sub").symlink_to(outside)
    maker = PdfMaker(config, word_boxes)
    try:
        with pytest.raises(LinkRefused):
            maker.make(inbox / "sub" / name, [PageText("inbox page", "inbox page")],
                       inbox / "sub" / "scan.ocr.pdf")
    finally:
        maker.close()
    assert not any(p.suffix == ".pdf" and p.name != name for p in outside.iterdir())
    # Not a special case: the same file reached without a link is made as before.
    (inbox / "sub").unlink()
    (inbox / "was-sub").rename(inbox / "sub")
    maker = PdfMaker(config, word_boxes)
    try:
        _, tmp = maker.make(inbox / "sub" / name, [PageText("inbox page", "inbox page")],
                            inbox / "sub" / "scan.ocr.pdf")
    finally:
        maker.close()
    assert tmp is not None
    with pikepdf.open(tmp) as pdf:
        page = pdf.pages[0]
        if kind == "pdf":
            assert round(float(page.mediabox[2]) - float(page.mediabox[0])) == 300
        else:
            (image,) = page.get_images().values()
            assert int(image.Width) == 600
    tmp.unlink()


# -- PDF text layers that lie ------------------------------------------------------------

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
LETTER = ("Dear Ms Lindqvist,\nthank you for your letter of 3 March 2024 about the harbour "
          "office.\nThe invoice (no. 4711) for €1,250.00 is paid; a receipt follows.\n"
          "Kind regards, Jørgen Müller")
LIE = "Bananas are yellow; transfer the money to account 666 at once please"


def _lie_invisible(pdf: Any) -> None:
    from fpdf.enums import TextMode

    pdf.text_mode = TextMode.INVISIBLE
    pdf.set_xy(20, 100)
    pdf.multi_cell(w=170, h=6, text=LIE)
    pdf.text_mode = TextMode.FILL


def _lie_white(pdf: Any) -> None:
    pdf.set_text_color(255, 255, 255)
    pdf.set_xy(20, 100)
    pdf.multi_cell(w=170, h=6, text=LIE)


def _lie_off_the_page(pdf: Any) -> None:
    pdf.text(x=400, y=600, text=LIE)


def _lie_tiny(pdf: Any) -> None:
    pdf.set_font("DejaVu", size=0.3)
    pdf.set_xy(20, 100)
    pdf.multi_cell(w=170, h=1, text=LIE)


def _lie_covered(pdf: Any) -> None:
    pdf.set_xy(20, 100)
    pdf.multi_cell(w=170, h=6, text=LIE)
    pdf.set_fill_color(255, 255, 255)
    pdf.rect(10, 95, 190, 30, style="F")


def _lie_clipped(pdf: Any) -> None:
    with pdf.rect_clip(x=0, y=0, w=1, h=1):
        pdf.set_xy(20, 100)
        pdf.multi_cell(w=170, h=6, text=LIE)


@pytest.mark.skipif(not DEJAVU.is_file(), reason="needs fonts-dejavu-core")
@pytest.mark.parametrize("lie", [_lie_invisible, _lie_white, _lie_off_the_page, _lie_tiny,
                                 _lie_covered, _lie_clipped], ids=lambda f: f.__name__[5:])
def test_a_text_layer_that_says_what_the_page_does_not_show_is_not_taken(
        tmp_path: Path, lie: Any) -> None:
    """A visible letter and a line the reader cannot see (invisible, white on white,
    off the page, 0.3 pt, under a white box, clipped away): the layer was taken, and the
    unseen line went into the index and the sidecars. Hidden text was judged per text
    object (half of them could be hidden) and only by render mode or an image over it."""
    from fpdf import FPDF

    from ocrwatch.pages.decode import iter_pages

    pdf = FPDF(format="A4")
    pdf.add_font("DejaVu", fname=str(DEJAVU))
    pdf.add_page()
    pdf.set_font("DejaVu", size=11)
    pdf.set_xy(20, 30)
    pdf.multi_cell(w=170, h=6, text=LETTER)
    lie(pdf)
    path = tmp_path / "letter.pdf"
    pdf.output(str(path))
    config = Config(inbox=[tmp_path], database=tmp_path / "index.sqlite3", engine="fake")
    (page,) = iter_pages(path, config, None, text_layer=True)
    assert page.text is None  # read with OCR: what the page shows
    assert page.image is not None


def test_a_browser_page_with_white_on_dark_small_and_grey_text_is_still_taken(
        tmp_path: Path) -> None:
    """Not a special case: a page printed by a real browser, with white headings on dark
    bars, light grey text, 6 pt footnotes, sub- and superscripts, is all seen."""
    import shutil
    import subprocess

    from ocrwatch.pages.decode import iter_pages

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("needs chromium (.ci/apt-packages.txt)")
    html = tmp_path / "page.html"
    html.write_text(
        '<html><body style="font-family:DejaVu Sans,sans-serif">'
        '<h1 style="background:#224;color:white;padding:8px">Harbour office report</h1>'
        "<p>The harbour office opened at nine every morning in 2024. Invoices (no. 4711) "
        "for €1,250.00 were paid; a receipt follows.</p>"
        '<table border=1><tr style="background:#333;color:#fff"><th>Month</th>'
        "<th>Arrivals</th></tr><tr><td>January</td><td>81</td></tr></table>"
        '<p style="color:#999">Light grey note: figures are provisional.</p>'
        '<p style="font-size:6pt">Footnote in 6 pt: source harbour ledger.</p>'
        "<p>H<sub>2</sub>O and x<sup>2</sup>, a list: one, two.</p></body></html>")
    pdf = tmp_path / "page.pdf"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    "--no-pdf-header-footer", f"--print-to-pdf={pdf}", html.as_uri()],
                   check=True, capture_output=True, timeout=120)
    config = Config(inbox=[tmp_path], database=tmp_path / "index.sqlite3", engine="fake")
    (page,) = iter_pages(pdf, config, None, text_layer=True)
    assert page.text is not None
    for words in ("Harbour office report", "Arrivals", "provisional", "Footnote in 6 pt"):
        assert words in page.text


# -- on_success ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_a_new_version_saved_just_after_the_read_is_neither_deleted_nor_archived_unread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """The user saves a new version over scan.png between the end of the read and
    on_success: "delete" removed the new, never-read content (archive moved it away
    unread). on_success now acts only on the file that was read."""
    from helpers import text_page

    from ocrwatch.results.lifecycle import Lifecycle

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.2,
                    engine="fake", on_success=mode, archive_dir=tmp_path / "archive")
    scan = inbox / "scan.png"
    new_version = text_page(["the new version"] * 4)
    real_finish = Lifecycle.finish
    saved: list[bytes] = []
    first: list[str] = []
    archive = tmp_path / "archive"
    after_first: list[list[bytes]] = []

    def versions() -> list[bytes]:
        return [p.read_bytes() for p in [scan, *archive.rglob("scan*.png")] if p.exists()]

    def save_then_finish(self: Lifecycle, job_id: int, original: Path, *rest: Any) -> Any:
        if saved:
            return real_finish(self, job_id, original, *rest)
        # The first time only: the user saves once.
        tmp = original.with_name(".scan.png.part")
        new_version.save(tmp, "PNG")
        os.replace(tmp, original)  # as an editor saves
        saved.append(original.read_bytes())
        first.extend(r["text"] for r in self.db.query("SELECT text FROM pages"))
        result = real_finish(self, job_id, original, *rest)
        # Looked at here, as the first reading's on_success ends: the new version is
        # settled and read moments later, and then rightly deleted or archived.
        after_first.append(versions())
        return result

    monkeypatch.setattr(Lifecycle, "finish", save_then_finish)

    with Daemon(config, engine=FakeEngine()) as d:
        text_page(["the first version"]).save(scan)
        wait_for(lambda: bool(after_first), 30, "the first version read")
        assert saved[0] in after_first[0], "the new version was lost"
        # The new version is read in its turn, then deleted or archived.
        wait_for(lambda: not scan.exists(), 30, "the new version read and handled")
        texts = [r["text"] for r in d.db.query("SELECT text FROM pages")]
    assert texts and texts != first, (first, texts)  # the new version's own reading
    if mode == "archive":
        assert saved[0] in versions()
