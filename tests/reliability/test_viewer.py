"""What a viewer shows is what ocrwatch reads: words outside a PDF page's text layer end
up in the sidecar and the index, or the original is kept with the reason recorded.

Each class with a real daemon, a real inbox and a real SQLite index, with ``on_success``
"delete" and "archive"; real Tesseract where the words must be read, the fake engine
where only the verdict matters. Files built by tests/reliability/viewer_files.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ocrwatch.config import Config
from ocrwatch.store.index import search

from . import viewer_files as files
from .helpers import wait_for

needs_tesseract = pytest.mark.skipif(
    shutil.which("tesseract") is None,
    reason="Tesseract is not installed (apt install tesseract-ocr)")

VALUE = "Jane Q. Public, 42 Harbour Road"
NOTE = "Approved by the harbour office"
COMMENT = "Call the applicant back"


def read_inbox(tmp_path: Path, build: dict[str, Callable[[Path], Path]], *, engine: str,
               on_success: str, queries: tuple[str, ...] = (), pdf: bool = False
               ) -> tuple[dict[str, dict[str, Any]], dict[str, set[str]]]:
    """Each file built in the inbox, read by a real daemon. Per file stem: its job row,
    its sidecar's text (or None), whether its original is still there as it was, its
    pages' warnings, and with ``pdf`` the text ``pdftotext`` finds in its searchable PDF;
    and per query, the stems of the files the index finds."""
    from ocrwatch.daemon import Daemon

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.3,
                    engine=engine, on_success=on_success, archive_dir=tmp_path / "archive",
                    languages=["eng"],
                    outputs=["md", "txt", "pdf"] if pdf else ["md", "txt"], pdfa="never")
    paths = {name: make(inbox / f"{name}.pdf") for name, make in build.items()}
    data = {name: path.read_bytes() for name, path in paths.items()}
    with Daemon(config) as daemon:
        wait_for(lambda: daemon.jobs.counts()["done"] + daemon.jobs.counts()["failed"]
                 == len(paths) and daemon.is_idle(), 240, "every file read")
        # A deleted original's row names its searchable PDF (NAME.ocr.pdf) instead.
        rows = {Path(r["display"]).stem.removesuffix(".ocr"): dict(r)
                for r in daemon.db.query("SELECT * FROM jobs")}

        hits = {query: {Path(hit.path).stem for hit in search(daemon.db, query)}
                for query in queries}
        out: dict[str, dict[str, Any]] = {}
        for name, path in paths.items():
            row = rows[name]
            txt = Path(os.fsdecode(row["md_path"])).with_suffix(".txt") \
                if row["md_path"] else None
            warnings = [w for (w,) in daemon.db.query(
                "SELECT warnings FROM pages WHERE job_id = ?", (row["id"],)) if w]
            out[name] = {"row": row,
                         "text": txt.read_text() if txt and txt.exists() else None,
                         "kept": path.exists() and path.read_bytes() == data[name],
                         "warnings": " ".join(warnings)}
            if pdf and txt is not None:
                out[name]["pdf"] = pdf_words(txt.with_suffix(".ocr.pdf"))
    return out, hits


def pdf_words(pdf: Path) -> list[tuple[str, tuple[float, float, float, float]]]:
    """The words ``pdftotext -bbox`` finds in ``pdf``, each with its box (points, from
    the page's top left)."""
    import re
    from html import unescape

    out = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    return [(unescape(text), (float(x0), float(y0), float(x1), float(y1)))
            for x0, y0, x1, y1, text in re.findall(
                r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">'
                r"(.*?)</word>", out)]


def assert_read(got: dict[str, Any], words: list[str]) -> None:
    row = got["row"]
    assert row["state"] == "done", row
    text = got["text"] or ""
    for word in words:
        assert word in text, f"{word!r} is not in the sidecar: {text!r}"


def assert_kept(got: dict[str, Any], why: str) -> None:
    row = got["row"]
    assert row["state"] == "done", row
    assert got["kept"], f"the original went: {row}"
    assert row["retire"] == "kept" and why in (row["retire_reason"] or ""), row


# -- 1. XFA forms, attached files ------------------------------------------------------
@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_xfa_forms_and_attached_files_keep_the_original_with_the_reason(
        tmp_path: Path, on_success: str) -> None:
    """A dynamic XFA form (its page says only "Please wait..."; with and without
    ``/NeedsRendering``), attached files and a portfolio: done, the original kept, the
    reason names the XFA form or the attached files (also a file attached to a note on a
    page); the XFA data's values are indexed."""
    people = {"name": "Jane Q. Public", "street": "42 Harbour Road"}
    got, hits = read_inbox(tmp_path, {
        "xfa": lambda p: files.xfa_form(p, people),
        "xfa_static_flag": lambda p: files.xfa_form(p, people, needs_rendering=False),
        "attached": lambda p: files.with_attachments(p, ["annex-a.xlsx"]),
        "paperclip": lambda p: files.with_attachments(p, ["receipt.jpg"], on_page=True),
        "portfolio": lambda p: files.with_attachments(p, ["annex-a.xlsx", "plan.dwg"],
                                                      portfolio=True),
        "plain": lambda p: files.text_page(["An ordinary letter with nothing attached"])
        .output(str(p)) or p,
    }, engine="fake", on_success=on_success, queries=('"Harbour Road"',))
    for name in ("xfa", "xfa_static_flag"):
        assert_kept(got[name], "dynamic XFA form")
        assert "42 Harbour Road" in (got[name]["text"] or ""), got[name]["text"]
    assert hits['"Harbour Road"'] == {"xfa", "xfa_static_flag"}
    assert_kept(got["attached"], "attached files that were not read (annex-a.xlsx)")
    assert_kept(got["paperclip"], "attached files that were not read (receipt.jpg on page 1)")
    assert_kept(got["portfolio"], "portfolio holds attached files that were not read "
                                  "(annex-a.xlsx, plan.dwg)")
    assert not got["plain"]["kept"], got["plain"]["row"]


# -- 2. filled form fields and notes --------------------------------------------------
@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_filled_fields_and_notes_on_a_text_page_are_read(tmp_path: Path,
                                                         on_success: str) -> None:
    """A born-digital form (its labels a text layer) with a filled field, a "Fill &
    Sign" note and a sticky-note comment: their exact text in the sidecar and the index
    beside the layer's (before: only the labels; the original deleted)."""
    every, hits = read_inbox(
        tmp_path, {"form": lambda p: files.filled_form(p, VALUE, NOTE, COMMENT)},
        engine="fake", on_success=on_success, queries=('"Harbour Road"', "applicant back"))
    got = every["form"]
    assert_read(got, [VALUE, NOTE, COMMENT, "Application for a parking permit"])
    assert hits['"Harbour Road"'] == {"form"}
    assert hits["applicant back"] == {"form"}
    assert not got["kept"]


@needs_tesseract
@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_filled_fields_on_a_scanned_form_are_drawn_and_read(tmp_path: Path,
                                                            on_success: str) -> None:
    """A scanned form (no text layer) filled in a viewer: the field and the note are
    drawn (PDFium's form environment) and read by Tesseract, the comment taken as text
    (before: the plain renderer left the field's value out)."""
    every, hits = read_inbox(
        tmp_path, {"form": lambda p: files.filled_form(p, VALUE, NOTE, COMMENT, scanned=True)},
        engine="tesseract", on_success=on_success, queries=('"Harbour Road"',))
    got = every["form"]
    assert_read(got, ["Harbour Road", "Jane", "harbour office", COMMENT, "parking permit"])
    assert hits['"Harbour Road"'] == {"form"}
    assert not got["kept"]


# -- 3. pictures on a text page -----------------------------------------------------------
@needs_tesseract
@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_words_in_a_small_picture_on_a_text_page_are_read(tmp_path: Path,
                                                          on_success: str) -> None:
    """A letter with a small scan of a reference (3% of the page, under the share that
    sends the whole page to OCR): the page is drawn without its text, Tesseract reads the
    picture, and its words go in among the layer's exact lines; the same for a stamp
    annotation ("PAID 7731", not in the page's content). A letter with a logo that holds
    no words is done without a doubt (its original goes)."""
    got, hits = read_inbox(tmp_path, {
        "stamped": lambda p: files.text_with_a_picture(p, "REF 5531"),
        "approved": lambda p: files.text_with_a_stamp(p, "PAID 7731"),
        "logo": files.text_with_a_logo,
    }, engine="tesseract", on_success=on_success, queries=("5531", "7731"))
    assert_read(got["stamped"], ["5531", "please find our reference below."])
    assert hits["5531"] == {"stamped"}
    text = got["stamped"]["text"]
    assert text.index("reference below") < text.index("5531"), text
    assert not got["stamped"]["kept"]
    assert_read(got["approved"], ["PAID 7731", "please find our reference below."])
    assert hits["7731"] == {"approved"}
    assert_read(got["logo"], ["please find our reference below."])
    assert not got["logo"]["kept"], got["logo"]["row"]


@needs_tesseract
@pytest.mark.skipif(shutil.which("pdftotext") is None,
                    reason="poppler-utils is not installed (apt install poppler-utils)")
def test_words_of_a_picture_reach_the_searchable_pdf_where_the_picture_is(
        tmp_path: Path) -> None:
    """The searchable PDF of a letter whose pictures are read keeps the letter's own
    text once and gains the words read on its picture and on its stamp, each over the
    picture that shows it (before: no layer on a page with text of its own, so
    ``pdftotext`` found neither "5531" nor "7731"); a signature's marks are not added."""
    got, _hits = read_inbox(tmp_path, {
        "stamped": lambda p: files.text_with_a_picture(p, "REF 5531"),
        "approved": lambda p: files.text_with_a_stamp(p, "PAID 7731"),
        "signed": files.text_with_a_signature,
    }, engine="tesseract", on_success="delete", pdf=True)
    # Where each picture is drawn, in points from the top left (viewer_files.py).
    for name, word, (x0, y0, x1, y1) in (("stamped", "5531", (300, 600, 500, 652)),
                                         ("approved", "7731", (300, 640, 500, 692))):
        words = got[name]["pdf"]
        boxes = [box for text, box in words if text == word]
        assert len(boxes) == 1, (name, words)
        left, top, right, bottom = boxes[0]
        assert x0 - 5 <= left < right <= x1 + 5 and y0 - 5 <= top < bottom <= y1 + 5, boxes
        texts = [text for text, _box in words]
        assert texts.count("reference") == 1 and texts.count("Madam,") == 1, texts
    signed = [text for text, _box in got["signed"]["pdf"]]
    assert signed.count("reference") == 1 and "NW" not in signed, signed


@needs_tesseract
def test_fields_and_notes_beside_a_picture_are_not_read_twice(tmp_path: Path) -> None:
    """A filled form with a stamp pasted on it: the stamp is read with OCR, the field and
    the note are taken as text once (they are hidden while the pictures are drawn)."""
    every, _hits = read_inbox(
        tmp_path, {"form": lambda p: files.filled_form(p, VALUE, NOTE, COMMENT,
                                                       stamp="REF 5531")},
        engine="tesseract", on_success="delete")
    got = every["form"]
    assert_read(got, [VALUE, NOTE, "5531"])
    assert got["text"].count("Harbour Road") == 1, got["text"]
    assert got["text"].count("harbour office") == 1, got["text"]


@needs_tesseract
@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_a_logo_or_a_signature_is_no_doubt_but_unread_words_are(tmp_path: Path,
                                                               on_success: str) -> None:
    """Pictures on a letter whose reading is unsure: a signature (read as "NW INV" at
    24%) and an emblem of rings (a run of O's and 0's at 1%) are marks, left out of the
    text with a warning, and the letter is read whole (its original goes); a scan of a
    sentence too coarse to read surely (six or more word-like bits at under 40%) is a
    picture of words that were lost: kept with the reason (before: the signature and
    the emblem kept their originals for ever, with "low confidence")."""
    got, _hits = read_inbox(tmp_path, {
        "signed": files.text_with_a_signature,
        "emblem": files.text_with_an_emblem,
        "coarse": lambda p: files.text_with_a_blurred_picture(
            p, "The invoice number is 4471 and payment is due"),
    }, engine="tesseract", on_success=on_success)
    for name in ("signed", "emblem"):
        assert_read(got[name], ["please find our reference below."])
        assert not got[name]["kept"], got[name]["row"]
        assert got[name]["row"]["retire_reason"] is None, got[name]["row"]
        assert "marks in the page's pictures" in got[name]["warnings"], got[name]
        assert "low confidence" not in got[name]["text"], got[name]["text"]
    assert "OO0" not in got["emblem"]["text"] and "NW" not in got["signed"]["text"]
    assert_kept(got["coarse"], "the words of a picture on the page were not read surely")
    assert "please find our reference below." in got["coarse"]["text"]


# -- 4. a small page holding a high-resolution scan -----------------------------------
@needs_tesseract
@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_a_card_scanned_at_high_resolution_is_drawn_at_its_resolution(
        tmp_path: Path, on_success: str) -> None:
    """A 1.7 x 1.2 inch page holding a 4000-pixel scan: drawn at about 2000 dpi (not 300,
    where its letters are 5 pixels high), its words read."""
    every, hits = read_inbox(tmp_path, {"card": lambda p: files.tiny_card(p, "Mira Okafor")},
                             engine="tesseract", on_success=on_success, queries=("Okafor",))
    got = every["card"]
    assert_read(got, ["Mira Okafor"])
    assert hits["Okafor"] == {"card"}


def test_a_small_page_is_drawn_at_its_scan_resolution_within_the_budget(
        tmp_path: Path) -> None:
    from ocrwatch.pages.image import Limits
    from ocrwatch.pages.pdfpages import RENDER_PIXELS, pdf_pages

    card = files.tiny_card(tmp_path / "card.pdf", "Mira Okafor")
    (page,) = pdf_pages(card, Limits(10, 200_000_000, 1 << 30), None, 300)
    assert page.dpi is not None and page.dpi >= 1500, page.dpi
    (small,) = pdf_pages(card, Limits(10, 2_000_000, 1 << 30), None, 300)
    assert small.size[0] * small.size[1] <= 2_000_000 * 1.01 <= RENDER_PIXELS, small.size
    letter = files.scanned_page(["A page scanned at 300 dpi"])
    letter.output(str(tmp_path / "letter.pdf"))
    (full,) = pdf_pages(tmp_path / "letter.pdf", Limits(10, 200_000_000, 1 << 30), None, 300)
    assert full.dpi == 300, "a full page is drawn at the configured dpi, as before"


# -- 5. a short text layer -------------------------------------------------------------
@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_a_short_text_layer_is_kept_and_ocr_only_adds_to_it(tmp_path: Path,
                                                            on_success: str) -> None:
    """A two-word Arabic heading (9 characters, under MIN_CHARS): its text is kept (the
    engine cannot read Arabic here), alone on a page, and beside a scan, whose reading
    (the fake engine's line) is added, never instead."""
    heading = "مرحبا بكم"
    got, hits = read_inbox(tmp_path, {
        "heading": lambda p: files.short_heading(p, heading),
        "minutes": lambda p: files.short_heading(p, heading, scan_words="Minutes"),
    }, engine="fake", on_success=on_success, queries=("مرحبا",))
    assert_read(got["heading"], [heading])
    assert_read(got["minutes"], [heading, "fake text of minutes.pdf page 1"])
    assert hits["مرحبا"] == {"heading", "minutes"}
    assert not got["heading"]["kept"] and not got["minutes"]["kept"]


def test_an_xfa_bomb_is_never_decoded_whole(tmp_path: Path) -> None:
    """XFA data that inflates to 100 MB (100 kB in the file): the form is still told
    apart (the original kept), its data not read, in well under a second of decoding."""
    import time
    import zlib

    import pikepdf

    from ocrwatch.pages.pdfdoc import extras

    path = files.xfa_form(tmp_path / "bomb.pdf", {"name": "x"})
    with pikepdf.open(path, allow_overwriting_input=True) as doc:
        bomb = pikepdf.Stream(doc, b"")
        bomb.write(zlib.compress(b"<a>" + b"x" * 100_000_000 + b"</a>", 9),
                   filter=pikepdf.Name.FlateDecode)
        doc.Root.AcroForm.XFA[3] = bomb
        doc.save(path)
    started = time.monotonic()
    found = extras(path)
    assert time.monotonic() - started < 5
    assert found.doubt is not None and "dynamic XFA form" in found.doubt
    assert found.text == ""
