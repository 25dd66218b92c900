"""The search page in a real browser: Debian's chromium driven by Playwright.

Nothing is downloaded: Playwright starts /usr/bin/chromium (``.ci/apt-packages.txt``).
``OCRWATCH_SCREENSHOTS=docs`` saves the page's screenshots for the docs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for
from search_site import Site, site

__all__ = ["site"]  # the fixture

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = os.environ.get("OCRWATCH_SCREENSHOTS")  # read now: the home fixture clears OCRWATCH_*
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install 'ocrwatch[dev]'")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason="chromium is not installed (apt-get install chromium)")


@pytest.fixture
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            # --no-sandbox: CI runs as root, where chromium's sandbox cannot start.
            # The resolver rule lets a test pose as a rebinding attacker's name.
            args=["--no-sandbox", "--host-resolver-rules=MAP evil.example 127.0.0.1"])
        try:
            yield b
        finally:
            b.close()


def shoot(page: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS).absolute() / name), full_page=True)


def rendered_names(page: Any) -> list[str]:
    return list(page.locator("#hits .name").all_text_contents())


def wait_for_thumbnails(page: Any) -> None:
    """Every hit's thumbnail loaded (they load lazily, when seen: each is scrolled to)."""
    for thumb in page.locator("#hits .thumb").all():
        thumb.scroll_into_view_if_needed()
        wait_for(lambda t=thumb: t.evaluate("img => img.complete && img.naturalWidth"),
                 15, "a thumbnail to load")


def test_type_filter_and_open(site: Site, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1100, "height": 760})
    page.goto(site.server.url)
    assert page.url == f"http://127.0.0.1:{site.server.port}/"  # the token left the address
    page.locator("#q").press_sequentially("fake", delay=30)  # as typed, a key at a time
    wait_for(lambda: len(rendered_names(page)) == 5, 15, "hits while typing")
    assert sorted(rendered_names(page)) == ["harbour report.pdf"] * 3 + ["note.jpg",
                                                                          "receipt 2024.png"]
    first = page.locator("#hits .hit").first
    assert "<mark>" in first.locator(".snippet").inner_html()
    wait_for(lambda: page.locator("#hits .thumb").first.evaluate(
        "img => img.complete && img.naturalWidth"), 15, "the first thumbnail to load")
    assert "page" in first.locator(".meta").inner_text()

    # The folder filter is the inbox's tree, its folders indented under it.
    wait_for(lambda: page.locator("#folder option").count() == 4, 15, "the folder list")
    shown = page.locator("#folder option").evaluate_all("os => os.map(o => [o.text, o.title])")
    indent = "\u00a0\u00a0"
    assert shown == [["all folders", ""], ["inbox", "inbox"],
                     [indent + "letters", "inbox/letters"], [indent + "taxes", "inbox/taxes"]]
    # Filter by folder: only the letters folder's files stay.
    page.select_option("#folder", value=str(site.inbox / "letters"))
    wait_for(lambda: sorted(rendered_names(page)) == ["harbour report.pdf"] * 3 + ["note.jpg"],
             15, "hits in the chosen folder")
    # And by name.
    page.fill("#name", "harbour")
    wait_for(lambda: rendered_names(page) == ["harbour report.pdf"] * 3, 15, "hits by name")
    # Leaving the field asks nothing new: asked again on its "change", the hits were
    # drawn anew between the press and the release of the click that left it, and the
    # click was lost.
    asked = page.evaluate("document.body.dataset.asked")
    assert asked is not None and int(asked) > 1  # each keystroke asked
    page.locator("#name").blur()
    assert page.evaluate("document.body.dataset.asked") == asked

    # A click opens the original at the page of the hit.
    hit = page.locator("#hits .hit").nth(1)
    at = int(hit.get_attribute("data-page"))
    hit.locator(".name").click()
    wait_for(lambda: site.opened, 15, "the opener to be called")
    assert site.opened == [(site.files["report"], at)]


def test_pagination(site: Site, browser: Any) -> None:
    page = browser.new_page()
    page.goto(site.server.url)
    page.goto(f"http://127.0.0.1:{site.server.port}/?per=2")  # the cookie holds the token
    page.fill("#q", "fake")
    seen: list[str] = []
    for number, count in ((1, 2), (2, 2), (3, 1)):
        # The files read last (the empty page's list, also "page 1") may show first.
        wait_for(lambda n=number: page.locator("#pageno").inner_text() == f"page {n}"
                 and page.locator("#summary").inner_text().startswith("hits ")
                 and page.locator("#hits .hit").count() > 0, 15, f"page {number}")
        assert page.locator("#hits .hit").count() == count
        seen += [f"{h.get_attribute('data-job')}/{h.get_attribute('data-page')}"
                 for h in page.locator("#hits .hit").all()]
        if number < 3:
            page.click("#next")
    assert page.locator("#next").is_disabled()
    assert len(seen) == len(set(seen)) == 5
    page.click("#prev")
    wait_for(lambda: page.locator("#pageno").inner_text() == "page 2", 15, "back to page 2")


def test_no_token_and_foreign_host_are_refused(site: Site, browser: Any) -> None:
    page = browser.new_page()
    plain = f"http://127.0.0.1:{site.server.port}/"
    response = page.goto(plain)
    assert response is not None and response.status == 403
    assert "token" in page.inner_text("body")
    response = page.goto(plain + "api/search?q=fake")
    assert response is not None and response.status == 403
    # DNS rebinding: a name the attacker controls, pointed at 127.0.0.1, even with the token.
    response = page.goto(f"http://evil.example:{site.server.port}/?token={site.server.token}")
    assert response is not None and response.status == 403
    assert "Host" in page.inner_text("body")
    assert site.opened == []


def test_the_empty_page_shows_the_files_read_last(site: Site, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1100, "height": 760})
    page.goto(site.server.url)
    wait_for(lambda: len(rendered_names(page)) == 3, 15, "the files read last")
    assert sorted(rendered_names(page)) == ["harbour report.pdf", "note.jpg",
                                            "receipt 2024.png"]
    assert page.locator("#summary").inner_text() == "Read last:"
    assert page.locator("#pager").is_hidden()
    report = page.locator("#hits .hit", has_text="harbour report.pdf")
    assert "3 pages" in report.locator(".meta").inner_text()
    wait_for_thumbnails(page)
    # Typing searches; clearing the box brings the files read last back.
    page.locator("#q").press_sequentially("fake", delay=30)
    wait_for(lambda: len(rendered_names(page)) == 5, 15, "hits while typing")
    page.fill("#q", "")
    wait_for(lambda: len(rendered_names(page)) == 3
             and page.locator("#summary").inner_text() == "Read last:", 15, "recent again")


def _born_digital(path: Path, lines: list[str]) -> Path:
    """A PDF with its own text (as a word processor writes it), drawn by fpdf2."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.add_page()
    pdf.set_font("Helvetica", size=16)
    for line in lines:
        pdf.cell(text=line, new_x="LMARGIN", new_y="NEXT", h=12)
    pdf.output(str(path))
    return path


def test_real_pages_read_by_tesseract(tmp_path: Path, home: Path, browser: Any) -> None:
    """Pages read by the real engine, found on the page (and the docs' screenshots)."""
    from helpers import save_pdf, text_page

    from ocrwatch.config import Config
    from ocrwatch.daemon import Daemon
    from ocrwatch.web.server import SearchServer

    inbox = tmp_path / "OCR-Inbox"
    for folder in ("Letters", "Taxes", "Bank"):
        (inbox / folder).mkdir(parents=True)
    files = [
        inbox / "Letters" / "harbour office.png",
        save_pdf(inbox / "Taxes" / "tax return 2024.pdf",
                 [["Tax return 2024", "Income from the harbour office", "Total due: 1,250.00"],
                  ["Page two", "Receipts for the harbour fees", "Signed in Rotterdam"]]),
        inbox / "Bank" / "statement march.jpg",
        _born_digital(inbox / "Letters" / "electricity bill.pdf",
                      ["Electricity bill, February", "Meter reading: 48 213 kWh",
                       "Amount due: 96.40, by direct debit on 1 March"]),
    ]
    text_page(["Dear Madam Schneider,", "the harbour office in Rotterdam",
               "confirms your booking for March."]).save(files[0])
    text_page(["Bank statement, March", "Transfer to the harbour authority",
               "Balance: 3,400.00"]).save(files[2], "JPEG")
    config = Config(inbox=[inbox], database=tmp_path / "real.sqlite3", settle_seconds=0.2,
                    engine="tesseract", workers=1, cache_dir=tmp_path / "cache")
    with Daemon(config) as daemon:
        wait_for(lambda: all((j := daemon.jobs.known(f)) is not None and j.state == "done"
                             for f in files), 120, "three files read by Tesseract")
        with SearchServer(config.database, daemon.thumbs, inbox=[inbox],
                          opener=lambda path, page: None) as server:
            page = browser.new_page(viewport={"width": 1000, "height": 640})
            page.goto(server.url)
            # Newest first; the born-digital PDF, whose text was taken from it, drawn too.
            wait_for(lambda: len(rendered_names(page)) == 4, 30, "the files read last")
            wait_for_thumbnails(page)
            page.evaluate("() => window.scrollTo(0, 0)")
            shoot(page, "search-recent.png")
            bill = page.locator("#hits .hit", has_text="electricity bill.pdf").locator(".thumb")
            assert bill.evaluate("img => img.naturalWidth") > 100  # a page, not 1x1 white
            page.locator("#q").press_sequentially("harb", delay=40)  # a prefix, as typed
            wait_for(lambda: len(rendered_names(page)) == 4, 30, "four pages with harbour*")
            snippets = page.locator("#hits .snippet").all_inner_texts()
            assert all("harbour" in s.lower() for s in snippets), snippets
            assert "<mark>harbour</mark>" in page.locator("#hits .snippet").first.inner_html()
            wait_for_thumbnails(page)
            page.evaluate("() => window.scrollTo(0, 0)")
            shoot(page, "search-page.png")
            page.select_option("#folder", value=str(inbox / "Taxes"))
            page.fill("#q", "harbour")
            wait_for(lambda: rendered_names(page) == ["tax return 2024.pdf"] * 2, 30,
                     "the Taxes folder's hits")
            shoot(page, "search-page-filtered.png")


def test_a_file_read_with_doubts_is_marked_in_its_entry(site: Site, browser: Any) -> None:
    """A file read with doubts carries a small visible marker, its reason on hover; the
    others carry none. (The doubt is recorded as the daemon records one: the job's
    warning ``page 1: doubtful text: …``.)"""
    import sqlite3

    why = "the engine's answer was empty, though the page is not blank"
    database = site.server.database
    with contextlib.closing(sqlite3.connect(database)) as conn, conn:
        conn.execute("UPDATE jobs SET warnings = ? WHERE display = ?",
                     (f'["page 1: doubtful text: {why}"]', str(site.files["note"])))
    page = browser.new_page()
    page.goto(site.server.url)
    page.fill("#q", "fake")
    wait_for(lambda: len(rendered_names(page)) == 5, 15, "the hits")
    for hit in page.locator("#hits .hit").all():
        marker = hit.locator(".doubt")
        if hit.locator(".name").inner_text() == "note.jpg":
            assert marker.is_visible() and marker.inner_text() == "· read with doubts"
            assert marker.get_attribute("title") == f"page 1: {why}"
        else:
            assert not marker.is_visible()
