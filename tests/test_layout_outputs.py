"""hOCR and ALTO outputs, and the page layout kept in the index that they are made from.

Real parts: real Tesseract reading generated pages through the daemon, a real SQLite
index (an old one upgraded too), lxml parsing the hOCR as XML and as HTML, the ALTO
validated against the published ALTO 4.4 schema (tests/data/alto), and poppler's
``pdftotext -bbox`` reading the searchable PDF's words to compare places.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import helpers
import pytest
from PIL import Image

from ocrwatch.config import Config
from ocrwatch.core import layout as layouts
from ocrwatch.core.domain import PageText
from ocrwatch.core.layout import Block, PageLayout, Word
from ocrwatch.daemon import Daemon
from ocrwatch.results import alto, formats, hocr
from ocrwatch.results.wordboxes import page_boxes, unturn
from ocrwatch.store import db as dbmod
from ocrwatch.store.db import Database
from ocrwatch.store.index import pages_of
from ocrwatch.store.jobs import JobQueue
from ocrwatch.store.migrations import MIGRATIONS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.pdf_output import DPI, bbox_words, page_lines, synthetic_page, word_offsets

etree = pytest.importorskip("lxml.etree")
lxml_html = pytest.importorskip("lxml.html")

DATA = Path(__file__).parent / "data" / "alto"
ALTO_NS = "{http://www.loc.gov/standards/alto/ns-v4#}"
XHTML_NS = "{http://www.w3.org/1999/xhtml}"
TOLERANCE_PT = 6.0  # as in test_pdf_output: a word's centre from its true box
ROTATE = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180,
          270: Image.Transpose.ROTATE_90}  # clockwise degrees -> Pillow's transpose
needs_tools = pytest.mark.skipif(
    not (shutil.which("pdftotext") and shutil.which("tesseract")),
    reason="poppler-utils and tesseract are needed (apt install poppler-utils tesseract-ocr)")


def alto_schema() -> Any:
    """The ALTO 4.4 schema, its XLink import taken from tests/data (no network)."""

    class Local(etree.Resolver):  # type: ignore[misc]
        def resolve(self, url: str, pubid: object, context: object) -> object:
            if url.endswith("/xlink.xsd"):
                return self.resolve_filename(str(DATA / "xlink.xsd"), context)
            return None

    parser = etree.XMLParser(no_network=True)
    parser.resolvers.add(Local())
    return etree.XMLSchema(etree.parse(str(DATA / "alto-4-4.xsd"), parser))


def hocr_words(path: Path) -> list[tuple[str, tuple[int, ...]]]:
    """Each ``ocrx_word`` and its bbox, read as XHTML and checked to nest as hOCR says."""
    root = etree.parse(str(path)).getroot()
    assert root.tag == XHTML_NS + "html"
    out = []
    pages = [e for e in root.iter() if e.get("class") == "ocr_page"]
    assert pages
    for page in pages:
        assert "bbox 0 0 " in page.get("title")
        for line in (e for e in page.iter() if e.get("class") == "ocr_line"):
            for word in (e for e in line.iter() if e.get("class") == "ocrx_word"):
                box = word.get("title").split("bbox ", 1)[1].split(";")[0].split()
                out.append((word.text, tuple(int(v) for v in box)))
    # An HTML parser reads the same words.
    tree = lxml_html.parse(str(path))
    assert len(tree.getroot().find_class("ocrx_word")) == len(out)
    return out


def alto_words(path: Path) -> list[tuple[str, tuple[int, ...]]]:
    doc = etree.parse(str(path))
    schema = alto_schema()
    assert schema.validate(doc), schema.error_log
    out = []
    for s in doc.getroot().iter(ALTO_NS + "String"):
        x, y, w, h = (int(s.get(k)) for k in ("HPOS", "VPOS", "WIDTH", "HEIGHT"))
        out.append((s.get("CONTENT"), (x, y, x + w, y + h)))
    return out


def in_points(words: list[tuple[str, tuple[int, ...]]]) -> list[Any]:
    from benchmarks.pdf_output import TruthWord

    scale = 72 / DPI
    return [TruthWord(t, tuple(v * scale for v in b)) for t, b in words]


def config_for(tmp_path: Path, **kw: object) -> Config:
    values: dict[str, object] = dict(engine="tesseract", workers=1, languages=["eng"],
                                     outputs=["md", "txt", "pdf", "hocr", "alto"],
                                     pdfa="never")
    values.update(kw)
    config = helpers.make_config(tmp_path, **values)
    config.inbox[0].mkdir(parents=True, exist_ok=True)
    return config


def read(config: Config, *paths: Path) -> None:
    with Daemon(config) as daemon:

        def finished() -> bool:
            jobs = [daemon.jobs.known(p) for p in paths]
            return all(j is not None and j.state.value in ("done", "failed") for j in jobs)

        helpers.wait_for(finished, 120, "the files to be read")
        for p in paths:
            job = daemon.jobs.known(p)
            assert job is not None and job.state.value == "done", job


# -- the layout in the index -----------------------------------------------------------
def test_a_layout_survives_its_json_whole() -> None:
    layout = PageLayout(1200, 900, (Word("Grüße", (10, 20, 90, 50), 0),
                                    Word("zwei", (100, 20, 160, 50), 0),
                                    Word("line", (10, 70, 80, 99), 1)),
                        by_line=False, blocks=(Block("header", (5, 5, 300, 60), "# Grüße"),),
                        angle=2.5, read_size=(1240, 950), shown=(600, 450))
    assert layouts.loads(layouts.dumps(layout)) == layout
    bare = PageLayout(10, 10)
    assert layouts.loads(layouts.dumps(bare)) == bare


def test_an_index_made_before_layouts_were_kept_is_upgraded_and_keeps_its_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "index.sqlite3"
    monkeypatch.setattr(dbmod, "MIGRATIONS", [m for m in MIGRATIONS if m[0] < "013"])
    old = Database(path)
    queue = JobQueue(old)
    queue.offer(tmp_path / "a.png", 1, 1, "sha-a")
    job = queue.claim()
    assert job is not None
    old.close()
    # A page as the version before stored it (its code had no layout column to write).
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO pages(job_id, page, text, markdown, warnings) "
                     "VALUES (?, 1, 'old words', 'old words', '[]')", (job.id,))
    conn.close()
    monkeypatch.setattr(dbmod, "MIGRATIONS", MIGRATIONS)
    db = Database(path)
    try:
        (page,) = pages_of(db, job.id)
        assert page.text == "old words" and page.layout is None
        queue = JobQueue(db)
        queue.offer(tmp_path / "b.png", 1, 1, "sha-b")
        second = queue.claim()
        assert second is not None
        kept = PageLayout(100, 50, (Word("new", (1, 2, 30, 20), 0),))
        assert queue.complete(second.id, [PageText("new", "new", layout=kept)],
                              engine="fake", md_path=None, txt_path=None)
        assert pages_of(db, second.id)[0].layout == kept
    finally:
        db.close()


# -- boxes on the original page ------------------------------------------------------
@pytest.mark.parametrize("turned", [0, 90])
def test_a_page_read_at_another_size_has_its_boxes_in_the_files_pixels(turned: int) -> None:
    # Read at twice the size the file shows (a model's 1540 pixels), upright or after a
    # quarter turn: each box is halved, on the page as the file holds it.
    shown = (500, 300) if turned == 0 else (300, 500)  # as scanned
    read = (1000, 600)  # upright, as read
    layout = PageLayout(*read, (Word("word", (100, 200, 300, 260), 0),), shown=shown)
    boxes = page_boxes(PageText("word", "word", layout=layout, turned=turned))
    assert (boxes.width, boxes.height) == shown
    (_, box), = boxes.words()
    expected = {0: (50, 100, 150, 130), 90: (100, 350, 130, 450)}[turned]
    assert box == expected


@pytest.mark.parametrize("turned", [0, 90, 180, 270])
def test_a_point_on_the_upright_page_goes_back_where_it_was_before_the_turn(
        turned: int) -> None:
    original = Image.new("L", (40, 30), 0)
    original.putpixel((7, 5), 255)
    upright = original if not turned else original.transpose(ROTATE[turned])
    (x, y), = [(i, j) for i in range(upright.width) for j in range(upright.height)
               if upright.getpixel((i, j))]
    # The pixel's centre, taken back.
    ox, oy = unturn(x + 0.5, y + 0.5, turned, upright.width, upright.height)
    assert (int(ox), int(oy)) == (7, 5)


def test_a_line_level_layout_becomes_words_without_spaces() -> None:
    page = PageText("a b", "a b", layout=PageLayout(
        200, 100, (Word("two words", (10, 10, 100, 30), 0),), by_line=True))
    words = page_boxes(page).words()
    assert [w for w, _ in words] == ["two", "words"]
    assert words[0][1][2] <= words[1][1][0] and words[1][1][2] <= 100
    doc = etree.fromstring(alto.render([page], "x.png").encode())
    assert alto_schema().validate(doc)


def test_hocr_and_alto_hold_text_that_xml_cannot_carry_as_it_is() -> None:
    page = PageText("", "", layout=PageLayout(
        200, 100, (Word('<a&"b>\x0c', (10, 10, 100, 30), 0),)))
    for render in (hocr.render, alto.render):
        root = etree.fromstring(render([page], 'we"ird<&>.png').encode())
        assert root is not None
    doc = etree.fromstring(alto.render([page], "x.png").encode())
    assert [s.get("CONTENT") for s in doc.iter(ALTO_NS + "String")] == ['<a&"b>']


def test_every_output_the_config_accepts_is_registered() -> None:
    from ocrwatch.config.schema import OUTPUTS

    assert set(OUTPUTS) == set(formats.OUTPUTS)
    stem = Path("/x/scan")
    assert {o: p.name for o, p in formats.paths(stem, OUTPUTS).items()} == {
        "md": "scan.md", "txt": "scan.txt", "pdf": "scan.ocr.pdf", "hocr": "scan.hocr",
        "alto": "scan.alto.xml"}


def test_a_users_own_alto_file_is_never_taken_for_ours(tmp_path: Path) -> None:
    from ocrwatch.core.naming import choose_stem

    (tmp_path / "scan.alto.xml").write_text("mine")
    stem = choose_stem(tmp_path / "scan.png", tmp_path, set(), set())
    assert stem == tmp_path / "scan.png"  # scan.png.md, scan.png.alto.xml...
    assert (tmp_path / "scan.alto.xml").read_text() == "mine"


# -- end to end with Tesseract ---------------------------------------------------------
@needs_tools
def test_tesseract_read_gives_hocr_and_alto_words_where_the_pdf_has_them(
        tmp_path: Path) -> None:
    config = config_for(tmp_path)
    lines = page_lines(5, 6)
    image, truth = synthetic_page(lines)
    src = config.inbox[0] / "letter.png"
    image.save(src, dpi=(DPI, DPI))
    read(config, src)
    inbox = config.inbox[0]
    from_hocr = hocr_words(inbox / "letter.hocr")
    from_alto = alto_words(inbox / "letter.alto.xml")
    # The same words, on the same boxes, in both.
    assert from_hocr == from_alto
    assert len(from_hocr) == sum(len(line.split()) for line in lines)
    offsets = word_offsets(in_points(from_hocr), truth)
    assert max(offsets) <= TOLERANCE_PT, offsets
    # And where the searchable PDF's layer has them.
    pdf = bbox_words(inbox / "letter.ocr.pdf")[0]
    assert [w.text for w in pdf] == [w for w, _ in from_hocr]
    assert max(word_offsets(in_points(from_hocr), pdf)) <= TOLERANCE_PT


@needs_tools
def test_a_page_turned_upright_has_its_boxes_on_the_page_as_scanned(tmp_path: Path) -> None:
    config = config_for(tmp_path, outputs=["md", "hocr", "alto"])
    lines = page_lines(7, 6)
    upright, truth = synthetic_page(lines)
    src = config.inbox[0] / "sideways.png"
    # Scanned lying on its side: turned 90 degrees clockwise; read turned back 270.
    upright.transpose(ROTATE[90]).save(src, dpi=(DPI, DPI))
    read(config, src)
    words = alto_words(config.inbox[0] / "sideways.alto.xml")
    assert hocr_words(config.inbox[0] / "sideways.hocr") == words
    doc = etree.parse(str(config.inbox[0] / "sideways.alto.xml"))
    # The lines run down the page as scanned (270 degrees counter-clockwise): said in both.
    assert {b.get("ROTATION") for b in doc.getroot().iter(ALTO_NS + "TextBlock")} == {"270"}
    hocr_doc = etree.parse(str(config.inbox[0] / "sideways.hocr"))
    assert all(e.get("title").endswith("; textangle 270") for e in hocr_doc.iter()
               if e.get("class") == "ocr_line")
    (page,) = doc.getroot().iter(ALTO_NS + "Page")
    assert (int(page.get("WIDTH")), int(page.get("HEIGHT"))) == (upright.height,
                                                                  upright.width)
    # Each true box turned as the scan was: (x, y) upright is (H - y, x) on the scan.
    scale = 72 / DPI
    h_pt = upright.height * scale
    turned = [type(t)(t.text, (h_pt - t.box[3], t.box[0], h_pt - t.box[1], t.box[2]))
              for t in truth]
    offsets = word_offsets(in_points(words), turned)
    assert max(offsets) <= TOLERANCE_PT, offsets


@needs_tools
def test_reread_outputs_writes_hocr_and_alto_from_the_index_without_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_for(tmp_path, outputs=["md", "txt"])
    lines = page_lines(9, 5)
    image, truth = synthetic_page(lines)
    src = config.inbox[0] / "later.png"
    image.save(src, dpi=(DPI, DPI))
    read(config, src)
    assert not (config.inbox[0] / "later.hocr").exists()

    from ocrwatch.engines.tesseract import TesseractEngine

    def no_reading(*_a: object, **_k: object) -> object:
        raise AssertionError("a page was read again")

    monkeypatch.setattr(TesseractEngine, "layout", no_reading)
    monkeypatch.setattr(TesseractEngine, "recognize", no_reading)
    config.outputs = ["md", "txt", "pdf", "hocr", "alto"]
    daemon = Daemon(config, watch=False)  # not started, as `reread --outputs` does
    try:
        written = daemon.write_outputs()
    finally:
        daemon.close()
    assert written == {"files": 1, "outputs": 3, "skipped": 0, "placed": 0}
    words = alto_words(config.inbox[0] / "later.alto.xml")
    assert hocr_words(config.inbox[0] / "later.hocr") == words
    assert max(word_offsets(in_points(words), truth)) <= TOLERANCE_PT
    pdf = bbox_words(config.inbox[0] / "later.ocr.pdf")[0]
    assert [w.text for w in pdf] == [w for w, _ in words]


RECORD = """
import json, os, sys
from pathlib import Path
env = {k: v for k, v in os.environ.items() if k.startswith("OCRWATCH_")}
out = Path(os.environ["HOOK_RECORD"])
tmp = out.with_name(".part")
tmp.write_text(json.dumps({"argv": sys.argv[1:], "env": env}))
tmp.rename(out)
"""


@needs_tools
def test_hocr_and_alto_move_with_an_archived_original_and_reach_the_hook(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    script = tmp_path / "hook.py"
    script.write_text(RECORD)
    record = tmp_path / "record.json"
    monkeypatch.setenv("HOOK_RECORD", str(record))
    archive = tmp_path / "archive"
    config = config_for(tmp_path, outputs=["md", "hocr", "alto"], on_success="archive",
                        archive_dir=archive,
                        on_done=[sys.executable, str(script), "{alto}", "{hocr}", "{md}"])
    image, _ = synthetic_page(page_lines(11, 3))
    src = config.inbox[0] / "filed.png"
    image.save(src, dpi=(DPI, DPI))
    with Daemon(config):  # the original leaves the inbox: waited for by its hook
        helpers.wait_for(record.exists, 120, "the hook to run")
    data = json.loads(record.read_text())
    moved = archive / "inbox"
    assert data["argv"] == [str(moved / "filed.alto.xml"), str(moved / "filed.hocr"),
                            str(moved / "filed.md")]
    assert data["env"]["OCRWATCH_ALTO"] == str(moved / "filed.alto.xml")
    assert data["env"]["OCRWATCH_HOCR"] == str(moved / "filed.hocr")
    assert data["env"]["OCRWATCH_PDF"] == "" and data["env"]["OCRWATCH_TXT"] == ""
    assert not src.exists() and not (config.inbox[0] / "filed.hocr").exists()
    assert alto_words(moved / "filed.alto.xml") == hocr_words(moved / "filed.hocr")


@needs_tools
def test_boxes_found_again_for_a_page_stored_without_them_are_kept_for_next_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_for(tmp_path, outputs=["md"])
    image, _ = synthetic_page(page_lines(13, 3))
    src = config.inbox[0] / "old.png"
    image.save(src, dpi=(DPI, DPI))
    read(config, src)
    db = Database(config.database)
    try:  # as an index from before migration 013 holds it
        with db.transaction() as conn:
            conn.execute("UPDATE pages SET layout = NULL")
    finally:
        db.close()
    config.outputs = ["md", "hocr"]

    def reread() -> dict[str, int]:
        daemon = Daemon(config, watch=False)
        try:
            return daemon.write_outputs()
        finally:
            daemon.close()

    assert reread() == {"files": 1, "outputs": 1, "skipped": 0, "placed": 1}
    first = hocr_words(config.inbox[0] / "old.hocr")
    (config.inbox[0] / "old.hocr").unlink()
    from ocrwatch.engines.tesseract import TesseractEngine

    def no_reading(*_a: object, **_k: object) -> object:
        raise AssertionError("a page was read again")

    monkeypatch.setattr(TesseractEngine, "layout", no_reading)
    assert reread() == {"files": 1, "outputs": 1, "skipped": 0, "placed": 0}
    assert hocr_words(config.inbox[0] / "old.hocr") == first


@needs_tools
def test_a_page_straightened_to_be_read_has_its_boxes_on_the_page_as_scanned(
        tmp_path: Path) -> None:
    import math

    config = config_for(tmp_path, outputs=["md", "alto", "hocr"])
    lines = page_lines(17, 6)
    upright, truth = synthetic_page(lines)
    skew = 3.0
    # Scanned crooked: turned 3 degrees counter-clockwise (Pillow's rotate) on white.
    scanned = upright.rotate(skew, expand=True, fillcolor="white",
                             resample=Image.Resampling.BICUBIC)
    src = config.inbox[0] / "crooked.png"
    scanned.save(src, dpi=(DPI, DPI))
    read(config, src)
    db = Database(config.database)
    try:  # read straightened: the boxes were found on the straightened image
        ((found,),) = [tuple(r) for r in db.query("SELECT skew FROM pages")]
        kept = pages_of(db, 1)[0].layout
    finally:
        db.close()
    # Turned back 3 degrees clockwise (a negative angle, counter-clockwise) to read it.
    assert abs(found + skew) < 0.5 and kept is not None and kept.angle == found
    words = alto_words(config.inbox[0] / "crooked.alto.xml")
    assert hocr_words(config.inbox[0] / "crooked.hocr") == words
    doc = etree.parse(str(config.inbox[0] / "crooked.alto.xml"))
    (page,) = doc.getroot().iter(ALTO_NS + "Page")
    assert (int(page.get("WIDTH")), int(page.get("HEIGHT"))) == scanned.size
    # Each true word's centre, where the crooked scan has it.
    scale = 72 / DPI
    a = math.radians(skew)
    cx, cy = upright.width / 2, upright.height / 2
    sx, sy = scanned.width / 2, scanned.height / 2
    moved = []
    for t in truth:
        x, y = (t.box[0] + t.box[2]) / 2 / scale - cx, (t.box[1] + t.box[3]) / 2 / scale - cy
        px = sx + x * math.cos(a) + y * math.sin(a)
        py = sy - x * math.sin(a) + y * math.cos(a)
        moved.append(type(t)(t.text, (px * scale, py * scale, px * scale, py * scale)))
    offsets = word_offsets(in_points(words), moved)
    assert max(offsets) <= TOLERANCE_PT, offsets
