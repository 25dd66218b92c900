"""The searchable PDF's text layer as pdf.js reads it: the viewer of Firefox and of many
web pages, whose copy and paste follows its text content (items, each ending a line or
not). Debian's pdf.js (libjs-pdf, ``.ci/apt-packages.txt``) runs in Debian's chromium,
driven by Playwright; the files are served on 127.0.0.1. Nothing is downloaded."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from test_scan_pages import (
    CORPUS,
    TABLE_ROWS,
    TABLE_WORDS,
    _layer_pdf,
    read_letter_upright_and_sideways,
)

from benchmarks._common import score

PDFJS = Path("/usr/share/javascript/pdf/build")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install 'ocrwatch[dev]'")
pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and (PDFJS / "pdf.js").is_file()),
    reason="chromium and pdf.js are needed (apt-get install chromium libjs-pdf)")

# Each page's lines as pdf.js's text content gives them: items joined, a line ended
# where an item says so (hasEOL), as the viewer's text layer is copied.
READ_LINES = """async (url) => {
  pdfjsLib.GlobalWorkerOptions.workerSrc = "/pdf.worker.js";
  const doc = await pdfjsLib.getDocument(url).promise;
  const pages = [];
  for (let n = 1; n <= doc.numPages; n++) {
    const content = await (await doc.getPage(n)).getTextContent();
    const lines = [];
    let line = "";
    for (const item of content.items) {
      line += item.str;
      if (item.hasEOL) { lines.push(line); line = ""; }
    }
    lines.push(line);
    pages.push(lines.map((l) => l.split(/\\s+/).filter(Boolean).join(" ")).filter(Boolean));
  }
  return pages;
}"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def pdfjs(tmp_path: Path) -> Iterator[Any]:
    """A function from a PDF's path to its pages' lines, as pdf.js reads them."""
    site = tmp_path / "site"
    site.mkdir()
    for name in ("pdf.js", "pdf.worker.js"):
        shutil.copy(PDFJS / name, site / name)
    (site / "index.html").write_text('<!doctype html><script src="/pdf.js"></script>\n')
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox"])  # CI runs as root
            try:
                page = browser.new_page()
                page.goto(f"{base}/index.html")

                def lines(pdf: Path) -> list[list[str]]:
                    shutil.copy(pdf, site / "doc.pdf")
                    return list(page.evaluate(READ_LINES, f"{base}/doc.pdf"))

                yield lines
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_pdfjs_reads_a_row_of_cells_far_apart_as_one_line(tmp_path: Path, pdfjs: Any) -> None:
    (lines,) = pdfjs(_layer_pdf(tmp_path, TABLE_WORDS, (1400, 400)))
    assert lines == list(TABLE_ROWS)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
def test_pdfjs_reads_a_typed_letter_line_by_line_upright_and_turned(
        tmp_path: Path, pdfjs: Any) -> None:
    """A typed letter, as scanned and fed sideways: pdf.js gives the .txt's lines, each
    whole and in order, on both pages (the turned page's layer lies on it as shown)."""
    got, pdf = read_letter_upright_and_sideways(tmp_path)
    with pikepdf.open(pdf) as doc:
        assert [int(p.obj.get("/Rotate", 0)) for p in doc.pages] == [0, 270]
    pages = pdfjs(pdf)
    assert len(pages) == 2
    for row, lines in zip(got, pages, strict=True):
        txt_lines = [" ".join(line.split()) for line in str(row["text"]).splitlines()
                     if line.strip()]
        assert lines == txt_lines, (row["page"], lines, txt_lines)
        assert score("\n".join(txt_lines), "\n".join(lines)).cer == 0
