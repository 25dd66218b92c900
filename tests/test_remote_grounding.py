"""LightOnOCR-3-1B through the remote engine, end to end: a fake OpenAI-compatible server on
127.0.0.1 answers in LightOn's grounding format; the daemon writes the sidecars without the
running margins, indexes them, and sets each block's text in its block in the PDF layer."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pypdfium2
import pytest
from fake_openai import FOOTER_WORD, HEADER_WORD, FakeServer
from helpers import wait_for
from PIL import Image

from ocrwatch.config import Config
from ocrwatch.daemon import Daemon
from ocrwatch.store.index import search

V3 = "lightonai/LightOnOCR-3-1B"


def page_image(colour: tuple[int, int, int]) -> Image.Image:
    """A page whose corner names it to the fake server, with a dark block (not blank)."""
    image = Image.new("RGB", (600, 800), colour)
    image.paste((0, 0, 0), (200, 300, 400, 500))
    return image


def config_for(tmp_path: Path, url: str, **top: object) -> Config:
    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    cache_dir=tmp_path / "cache", settle_seconds=0.3, engine="remote",
                    model_profile="lightonocr-3-1b", outputs=["md", "txt", "pdf"],
                    rotate_pages=False, deskew=False)
    config.remote.urls = [url]
    for key, value in top.items():
        setattr(config, key, value)
    return config


def run_drop(config: Config, files: dict[str, tuple[int, int, int]]) -> Daemon:
    daemon = Daemon(config)
    daemon.start()
    config.inbox[0].mkdir(parents=True, exist_ok=True)
    for name, colour in files.items():
        page_image(colour).save(config.inbox[0] / name)

    def all_done() -> bool:
        jobs = [daemon.jobs.known(config.inbox[0] / name) for name in files]
        return all(j is not None and j.state.value in ("done", "failed") for j in jobs)

    wait_for(all_done, 60, "every file read")
    return daemon


def block_text(pdf: Path, box: tuple[int, int, int, int]) -> str:
    """The PDF layer's text inside a 0-1000 box of the page (a little margin around it)."""
    doc = pypdfium2.PdfDocument(str(pdf))
    try:
        page = doc[0]
        width, height = page.get_size()
        left, top, right, bottom = box
        text = page.get_textpage().get_text_bounded(
            left=width * (left - 5) / 1000, bottom=height * (1 - (bottom + 5) / 1000),
            right=width * (right + 5) / 1000, top=height * (1 - (top - 5) / 1000))
        return " ".join(text.split())
    finally:
        doc.close()


def test_grounding_blocks_reach_sidecars_index_and_pdf_without_running_margins(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ocrwatch")
    with FakeServer(models=[V3]) as server:
        config = config_for(tmp_path, server.url)
        daemon = run_drop(config, {"paper.png": (10, 20, 30)})
        try:
            job = daemon.jobs.known(config.inbox[0] / "paper.png")
            assert job is not None and job.state.value == "done", job
            assert search(daemon.db, "architecture")
            assert search(daemon.db, HEADER_WORD) == []  # only in the running header
            assert search(daemon.db, FOOTER_WORD) == []
        finally:
            daemon.close()
        body = server.requests[0]
    # LightOn's request for generation 3: the image, then "grounding"; top_p 1.0.
    assert body["model"] == V3 and body["top_p"] == 1.0 and body["temperature"] == 0.2
    assert body["messages"][0]["content"][1] == {"type": "text", "text": "grounding"}
    md = (config.inbox[0] / "paper.md").read_text()
    txt = (config.inbox[0] / "paper.txt").read_text()
    for sidecar in (md, txt):
        assert HEADER_WORD not in sidecar and FOOTER_WORD not in sidecar
        assert "LightOnOCR-1" in sidecar and "Measured without headers" in sidecar
    assert "<table>" in md and "$E = mc^2$" in md  # a table kept; math delimiters repaired
    assert "colour 0a141e and its training recipe" in md  # "text+" joined its paragraph
    # The PDF layer: each block's text in its block (Tesseract finds no words here).
    pdf = config.inbox[0] / "paper.ocr.pdf"
    assert "LightOnOCR-1" in block_text(pdf, (113, 108, 600, 140))
    assert HEADER_WORD in block_text(pdf, (80, 20, 920, 45))  # on the page: in the PDF
    assert "LightOnOCR-1" not in block_text(pdf, (112, 860, 882, 950))
    assert "in the model's layout blocks" in caplog.text


def test_margins_kept_when_asked(tmp_path: Path) -> None:
    with FakeServer(models=[V3]) as server:
        config = config_for(tmp_path, server.url, keep_margins=True, outputs=["md", "txt"])
        daemon = run_drop(config, {"kept.png": (11, 20, 30)})
        try:
            assert search(daemon.db, HEADER_WORD)
        finally:
            daemon.close()
    assert FOOTER_WORD in (config.inbox[0] / "kept.txt").read_text()


def test_malformed_and_cut_answers_fall_back_to_their_text_with_a_warning(
        tmp_path: Path) -> None:
    with FakeServer(models=[V3]) as server:
        server.scripted = {
            "0c1420": ("A page read as plain Markdown, without any block marker.", "stop"),
            "0d1420": ("![text](10,10,990,200) The first block came whole.\n![tab", "length"),
        }
        config = config_for(tmp_path, server.url, outputs=["md", "txt"])
        daemon = run_drop(config, {"plain.png": (12, 20, 32), "cut.png": (13, 20, 32)})
        try:
            warnings = {}
            for name in ("plain.png", "cut.png"):
                job = daemon.jobs.known(config.inbox[0] / name)
                assert job is not None and job.state.value == "done", (name, job)
                (row,) = daemon.db.query("SELECT warnings FROM pages WHERE job_id = ?",
                                         (job.id,))
                warnings[name] = row["warnings"] or ""
        finally:
            daemon.close()
    assert "without any block marker" in (config.inbox[0] / "plain.txt").read_text()
    assert "no layout blocks" in warnings["plain.png"]
    assert (config.inbox[0] / "cut.txt").read_text().strip() == "The first block came whole."
    assert "cut-off block marker" in warnings["cut.png"]


def test_blocks_whose_words_tesseract_reads_too_take_tesseracts_word_boxes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from helpers import text_page

    caplog.set_level(logging.INFO, logger="ocrwatch")
    lines = ["Harbour master report for the spring tides",
             "Vessels moored along the eastern quay wall"]
    image = text_page(lines, width=1600)
    image.paste((14, 20, 30), (0, 0, 24, 24))  # names the page to the fake server
    height = image.height
    top = [round((80 + k * 44 * 1.6) / height * 1000) for k in range(3)]
    answer = (f"![header](20,5,980,30) Running Head\n"
              f"![text](50,{top[0]},950,{top[1]}) {lines[0]}\n"
              f"![text](50,{top[1]},950,{top[2]}) {lines[1]}")
    with FakeServer(models=[V3]) as server:
        server.scripted = {"0e141e": (answer, "stop")}
        config = config_for(tmp_path, server.url)
        daemon = Daemon(config)
        try:
            daemon.start()
            config.inbox[0].mkdir(parents=True, exist_ok=True)
            image.save(config.inbox[0] / "harbour.png")

            def done() -> bool:
                job = daemon.jobs.known(config.inbox[0] / "harbour.png")
                return job is not None and job.state.value in ("done", "failed")

            wait_for(done, 60, "the page read")
        finally:
            daemon.close()
    assert "on Tesseract's word boxes" in caplog.text
    doc = pypdfium2.PdfDocument(str(config.inbox[0] / "harbour.ocr.pdf"))
    try:
        text = doc[0].get_textpage().get_text_range()
    finally:
        doc.close()
    assert "Harbour master report" in " ".join(text.split())


def test_grounding_blocks_reach_hocr_and_alto_in_their_blocks(tmp_path: Path) -> None:
    from test_layout_outputs import alto_words, hocr_words

    with FakeServer(models=[V3]) as server:
        config = config_for(tmp_path, server.url,
                            outputs=["md", "txt", "pdf", "hocr", "alto"])
        daemon = run_drop(config, {"paper.png": (10, 20, 30)})
        try:
            job = daemon.jobs.known(config.inbox[0] / "paper.png")
            assert job is not None and job.state.value == "done", job
        finally:
            daemon.close()
    # Valid hOCR and ALTO (the XSD), the same words, each in its block's box: the
    # LightOnOCR-1 heading's block is (113, 108)-(600, 140) on the 0-1000 grid.
    hocr_file = config.inbox[0] / "paper.hocr"
    hocr = hocr_words(hocr_file)
    alto = alto_words(config.inbox[0] / "paper.alto.xml")
    assert [w for w, _ in hocr] == [w for w, _ in alto] and hocr
    heading = [box for word, box in hocr if word == "LightOnOCR-1"]
    assert heading, hocr
    # The model read the page scaled to 1540 pixels; the boxes are on the 600x800 page
    # as the file holds it, and the page's own bbox says so.
    size = re.search(r"ocr_page.*?bbox 0 0 (\d+) (\d+)", hocr_file.read_text(), re.S)
    assert size is not None
    width, height = int(size[1]), int(size[2])
    assert (width, height) == (600, 800)
    left, top, right, bottom = heading[0]
    assert width * 0.11 <= left and right <= width * 0.61, (heading, width)
    assert height * 0.10 <= top and bottom <= height * 0.15, (heading, height)
