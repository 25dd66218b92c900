"""Pages as scanners deliver them: turned, skewed, blank backs, noisy paper; and the
searchable PDF's text layer read in order. Real Tesseract, real files, a real daemon."""

from __future__ import annotations

import base64
import io
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import helpers
import pikepdf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from ocrwatch.config import Config
from ocrwatch.config.languages import available_languages
from ocrwatch.core import wordlike
from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.layout import PageLayout, Word
from ocrwatch.core.status import format_status
from ocrwatch.daemon import Daemon
from ocrwatch.pages.decode import iter_pages
from ocrwatch.results import pdfout
from ocrwatch.scan import deskew, faint, inkcover, orient, osd
from ocrwatch.scan import prepare as scanprep
from ocrwatch.store.index import search
from ocrwatch.testing.fake import FakeEngine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import cases
from benchmarks._common import joined_hyphens, score
from benchmarks.pdf_output import DPI, bbox_words, page_lines, synthetic_page, word_offsets

pytestmark = pytest.mark.skipif(
    not (shutil.which("pdftotext") and shutil.which("tesseract")),
    reason="poppler-utils and tesseract are needed (apt install poppler-utils tesseract-ocr)")

# ../shared/corpus beside the checkout, or beside the folder of worktrees.
_HERE = Path(__file__).resolve().parent.parent
CORPUS = next((p for p in (_HERE.parent / "shared" / "corpus",
                           _HERE.parent.parent / "shared" / "corpus") if p.is_dir()),
              _HERE.parent / "shared" / "corpus")
TOLERANCE_PT = 6.0  # as in test_pdf_output: a layer word's centre from its true box
ROTATE = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180,
          270: Image.Transpose.ROTATE_90}  # clockwise degrees -> Pillow's transpose


def config_for(tmp_path: Path, **kw: object) -> Config:
    values: dict[str, object] = dict(engine="tesseract", workers=1, languages=["eng"],
                                     outputs=["md", "txt", "pdf"], pdfa="never")
    values.update(kw)
    config = helpers.make_config(tmp_path, **values)
    config.inbox[0].mkdir(parents=True)
    return config


def letter(seed: int = 3, count: int = 9) -> tuple[Image.Image, list[str], list[object]]:
    lines = page_lines(seed, count)
    image, truth = synthetic_page(lines)
    return image, lines, truth  # type: ignore[return-value]


def feeder_tiff(config: Config, upright: Image.Image, turns: Sequence[int]) -> Path:
    """A TIFF in the inbox of ``upright`` fed each of ``turns`` (clockwise degrees)."""
    frames = [upright.transpose(ROTATE[t]) if t else upright for t in turns]
    src = config.inbox[0] / "feeder.tif"
    frames[0].save(src, save_all=True, append_images=frames[1:], dpi=(DPI, DPI),
                   compression="tiff_deflate")
    return src


def read(config: Config, *paths: Path, engine: FakeEngine | None = None) -> Daemon:
    daemon = Daemon(config, engine=engine)
    daemon.start()

    def finished() -> bool:
        jobs = [daemon.jobs.known(p) for p in paths]
        return all(j is not None and j.state.value in ("done", "failed") for j in jobs)

    try:
        helpers.wait_for(finished, 240, "the files to be read")
    except BaseException:
        daemon.close()
        raise
    return daemon


def rows(daemon: Daemon) -> list[dict[str, object]]:
    return [dict(r) for r in daemon.db.query(
        "SELECT page, text, markdown, warnings, turned, skew, blank, nonwords FROM pages "
        "ORDER BY job_id, page")]


def pdf_text(pdf: Path, *args: str) -> str:
    return subprocess.run(["pdftotext", *args, str(pdf), "-"], capture_output=True,
                          text=True, check=True, timeout=60).stdout


class Recording(FakeEngine):
    """Reads like a model (the page's known text, no word boxes) and keeps the pages it
    was given, to show what every engine gets."""

    name = "recording"

    def __init__(self, text: str) -> None:
        super().__init__(max_side=None)
        self.text = text
        self.seen: list[Page] = []

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        self.seen += pages
        return [PageText(markdown=self.text, text=self.text) for _ in pages]


# -- orientation --------------------------------------------------------------------
def test_turned_tiff_frames_are_read_upright_and_the_turn_is_recorded(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    upright, lines, truth = letter()
    src = feeder_tiff(config, upright, (90, 180, 270))
    daemon = read(config, src)
    try:
        got = rows(daemon)
        hits = search(daemon.db, "harbour OR invoices OR weekday", limit=10)
        status = daemon.status()
    finally:
        daemon.close()
    # A page fed turned 90 degrees clockwise is turned back 270 clockwise, and so on.
    assert [r["turned"] for r in got] == [270, 180, 90]
    reference = "\n".join(lines)
    for row in got:
        assert score(reference, str(row["text"])).cer < 0.02, row["text"]
    assert {h.turned for h in hits} == {270, 180, 90}
    assert status.turned_today == 3 and "3 turned upright" in format_status(status)
    # The PDF shows each page upright, its text layer on the words as displayed.
    pdf = config.inbox[0] / "feeder.ocr.pdf"
    with pikepdf.open(pdf) as doc:
        assert [int(p.obj.get("/Rotate", 0)) for p in doc.pages] == [270, 180, 90]
    for page_words in bbox_words(pdf):
        offsets = word_offsets(page_words, truth)  # type: ignore[arg-type]
        assert len(offsets) == len(truth) and max(offsets) <= TOLERANCE_PT, offsets
    for page_text in pdf_text(pdf).split("\f")[:3]:
        assert score(reference, page_text).cer < 0.02, page_text


def test_a_page_its_lines_do_not_turn_is_read_first_and_turned_only_if_not_upright(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tesseract reads a page whose lines do not tell its turn as it lies: read as upright
    text, it costs no OSD; read otherwise, it is turned as before (OSD, the reading check)
    and read again, its turn recorded, its PDF page and thumbnail upright."""
    monkeypatch.setattr(scanprep.orient.Detector, "by_lines", staticmethod(lambda image: None))
    asked: list[object] = []
    found = osd.OsdApi.found

    def counted(self: osd.OsdApi, *args: Any, **kwargs: Any) -> Any:
        asked.append(args)
        return found(self, *args, **kwargs)

    monkeypatch.setattr(osd.OsdApi, "found", counted)
    config = config_for(tmp_path)
    upright, lines, truth = letter(6)
    src = feeder_tiff(config, upright, (0, 90, 180, 270))
    daemon = read(config, src)
    try:
        got = rows(daemon)
        job = daemon.jobs.known(src)
        assert job is not None and job.sha256
        shapes = []
        for number in range(1, 5):
            with Image.open(daemon.thumbs.path(job.sha256, number)) as thumb:
                shapes.append(thumb.width < thumb.height)
    finally:
        daemon.close()
    assert [r["turned"] for r in got] == [0, 270, 180, 90]
    assert len(asked) == 3  # OSD for the three pages not read as upright text, not the first
    reference = "\n".join(lines)
    for row in got:
        assert score(reference, str(row["text"])).cer < 0.02, row["text"]
    assert shapes == [upright.width < upright.height] * 4  # every thumbnail stands upright
    pdf = config.inbox[0] / "feeder.ocr.pdf"
    with pikepdf.open(pdf) as doc:
        assert [int(p.obj.get("/Rotate", 0)) for p in doc.pages] == [0, 270, 180, 90]
    for page_words in bbox_words(pdf):
        offsets = word_offsets(page_words, truth)  # type: ignore[arg-type]
        assert len(offsets) == len(truth) and max(offsets) <= TOLERANCE_PT, offsets


def test_a_page_read_first_but_not_surely_is_read_again_only_if_osd_turns_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine whose reading does not say it is of upright text (no confidence here):
    the page goes to OSD after its reading, as it would have before it; left as it lay,
    its reading stands (one reading); turned, it is read again upright (two)."""
    from ocrwatch import pipeline

    monkeypatch.setattr(scanprep.orient.Detector, "by_lines", staticmethod(lambda image: None))
    config = config_for(tmp_path)
    prep = scanprep.ScanPrep(config, scripts=True, read_first=True)
    upright, lines, _ = letter(7)
    engine = Recording("\n".join(lines))
    told: list[Page] = []
    try:
        for fed, reads, turned in ((0, 1, 0), (180, 2, 180)):
            path = tmp_path / f"fed{fed}.png"
            (upright.transpose(ROTATE[fed]) if fed else upright).save(path, dpi=(DPI, DPI))
            (page,) = [prep.prepare(p) for p in iter_pages(path, config, None)]
            assert page.turn_unchecked and page.turned == 0
            engine.seen.clear()
            (result,), unavailable = pipeline.read(engine, "recording", [page], prep,
                                                   told.append)
            assert unavailable is None and len(engine.seen) == reads
            assert engine.seen[-1].turned == turned and result.turned == turned
            assert engine.seen[-1].turn_unchecked == (reads == 1)  # read again: settled
        assert [p.turned for p in told] == [180]  # its thumbnail drawn again, upright
    finally:
        prep.close()


def test_a_pdf_page_scanned_upside_down_is_read_upright(tmp_path: Path) -> None:
    import img2pdf

    config = config_for(tmp_path)
    upright, lines, _ = letter(4)
    pngs = []
    for n, image in enumerate((upright, upright.transpose(ROTATE[180]))):
        png = tmp_path / f"p{n}.png"
        image.save(png, dpi=(DPI, DPI))
        pngs.append(png)
    src = config.inbox[0] / "duplex.pdf"
    src.write_bytes(img2pdf.convert([str(p) for p in pngs]))
    daemon = read(config, src)
    try:
        got = rows(daemon)
    finally:
        daemon.close()
    assert [r["turned"] for r in got] == [0, 180]
    reference = "\n".join(lines)
    with pikepdf.open(src.with_name("duplex.ocr.pdf")) as doc:
        assert [int(p.obj.get("/Rotate", 0)) for p in doc.pages] == [0, 180]
    for row, layer in zip(got, pdf_text(src.with_name("duplex.ocr.pdf")).split("\f"),
                          strict=False):
        assert score(reference, str(row["text"])).cer < 0.02
        assert score(reference, layer).cer < 0.02, layer


def test_a_model_engine_gets_the_page_upright_and_its_text_lies_on_it(tmp_path: Path) -> None:
    config = config_for(tmp_path, engine="fake")
    upright, lines, truth = letter(5)
    src = config.inbox[0] / "sideways.png"
    upright.transpose(ROTATE[90]).save(src, dpi=(DPI, DPI))
    engine = Recording("\n".join(lines))
    daemon = read(config, src, engine=engine)
    try:
        (row,) = rows(daemon)
    finally:
        daemon.close()
    (page,) = engine.seen
    # Read at its own size (max_side None), a grey page comes grey: the same pixels.
    assert page.turned == 270
    assert page.image.convert("RGB").tobytes() == upright.convert("RGB").tobytes()
    assert row["turned"] == 270
    pdf = config.inbox[0] / "sideways.ocr.pdf"
    (found,) = bbox_words(pdf)
    offsets = word_offsets(found, truth)  # type: ignore[arg-type]
    assert len(offsets) == len(truth) and max(offsets) <= TOLERANCE_PT, offsets


def test_the_remote_engine_gets_the_page_upright_over_http(tmp_path: Path) -> None:
    """The turn is made before any engine: a page fed sideways reaches an OpenAI-style
    server on 127.0.0.1 upright, its top-left corner where the sheet's is."""
    from fake_openai import FakeServer

    upright, _, _ = letter(5)
    upright = upright.convert("RGB")
    ImageDraw.Draw(upright).rectangle((0, 0, 79, 79), fill=(200, 40, 40))  # the sheet's corner
    with FakeServer() as server:
        config = config_for(tmp_path, engine="remote", outputs=["md", "txt"])
        config.remote.urls = [server.url]
        src = config.inbox[0] / "sideways.png"
        upright.transpose(ROTATE[90]).save(src, dpi=(DPI, DPI))
        daemon = read(config, src)
        try:
            (row,) = rows(daemon)
        finally:
            daemon.close()
        (body,) = server.requests
    url = body["messages"][0]["content"][0]["image_url"]["url"]
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
    # The letter's shape, not the sideways sheet's (its long side scaled to the model's).
    assert abs(sent.width / sent.height - upright.width / upright.height) < 0.01
    assert sent.getpixel((0, 0)) == (200, 40, 40)
    assert row["turned"] == 270 and "colour c82828" in str(row["markdown"])


def _osd_page() -> Image.Image:
    """A grey page of text as OSD sees it (sized to its 3300 pixels): 0.3-0.7 s of OSD."""
    lines = page_lines(7, 30)
    return orient.sized(helpers.text_page(lines, width=2400, size=40, mode="L"),
                        orient.OSD_SIDE)


def test_osd_through_the_c_api_says_what_tesserocr_says() -> None:
    import tesserocr

    osd_file = available_languages()["osd"]
    api = osd.OsdApi(osd_file)
    reference = tesserocr.PyTessBaseAPI(path=str(osd_file.parent) + "/", lang="osd",
                                        psm=tesserocr.PSM.OSD_ONLY)
    try:
        assert api.releases_the_interpreter
        page = _osd_page()
        for clockwise in (0, 90, 180, 270):
            turned = orient.turn(page, clockwise)
            reference.SetImage(turned)
            reference.SetSourceResolution(300)
            want = reference.DetectOrientationScript()
            reference.Clear()
            degrees, confidence = api.detect(turned, 300) or (-1, -1.0)
            assert degrees == want["orient_deg"] == clockwise
            assert abs(confidence - want["orient_conf"]) < 1e-3
            found = api.found(turned, 300)  # and the script, which the script check uses
            assert found is not None and found.script == want["script_name"] == "Latin"
            assert abs(found.script_confidence - want["script_conf"]) < 1e-3
        assert api.detect(Image.new("L", (800, 600), 255), 300) is None  # no text: undecided
    finally:
        api.close()
        reference.End()


def test_osd_leaves_the_interpreter_to_other_threads() -> None:
    """tesserocr's call keeps the interpreter for the whole detection: the daemon's eight
    preparers then detected one page at a time, and fed vLLM 1.36 pages/s instead of 5.77.
    Here this thread, waking 50 ms into a detection of 0.3 s or more, runs at once; with
    the interpreter held it would wake only when the detection is over."""
    api = osd.OsdApi(available_languages()["osd"])
    page = _osd_page()
    started, done = threading.Event(), threading.Event()
    ended: dict[str, float] = {}

    def detect() -> None:
        started.set()
        found = api.detect(page, 300)
        ended["osd"] = time.monotonic()
        ended["found"] = float(found is not None)
        done.set()

    thread = threading.Thread(target=detect)
    try:
        thread.start()
        assert started.wait(10)
        assert not done.wait(0.05)  # the detection runs on
        ended["awake"] = time.monotonic()
        assert done.wait(60)
    finally:
        thread.join(timeout=60)
        api.close()
    assert ended["found"] and ended["awake"] < ended["osd"] - 0.1, ended


@pytest.fixture
def osd_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Orientation by OSD and the reading check alone, the text lines' check off: what
    these tests are about (pages whose lines decide never reach them)."""
    monkeypatch.setattr(orient, "LINES_CHECK", False)


@pytest.mark.usefixtures("osd_decides")
def test_an_idle_preparer_gives_osd_back_and_loads_it_again() -> None:
    """OSD's instance is closed when the preparer has nothing to do (its memory is not
    held while the readers read) and made again for the next page, which it turns as
    before."""
    page = orient.turn(letter()[0], 90)
    detector = orient.Detector(None, ["eng"])
    try:
        first = detector.detect(page)
        assert detector.release() and not detector.release()  # once: nothing left
        again = detector.detect(page)
        assert (again.turn, again.confidence) == (first.turn, first.confidence)
        assert again.turn == 270
    finally:
        detector.close()


@pytest.mark.usefixtures("osd_decides")
def test_a_page_with_too_little_text_to_decide_stays_as_it_is(tmp_path: Path) -> None:
    page = helpers.text_page(["Total 12"], width=900)
    detector = orient.Detector(None, ["eng"])
    for clockwise in (0, 90):
        found = detector.detect(orient.turn(page, clockwise))
        assert found.turn == 0, found


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
@pytest.mark.parametrize(("name", "lang", "fed", "checked"), [
    ("tapus_08.jpeg", "fra", 90, True), ("tapus_08.jpeg", "fra", 180, True),
    ("tapus_08.jpeg", "fra", 270, True), ("ehri_dan_00.jpg", "dan", 90, True)])
@pytest.mark.usefixtures("osd_decides")
def test_a_small_page_and_a_page_osd_is_unsure_of_are_turned_upright(
        name: str, lang: str, fed: int, checked: bool) -> None:
    """A small yellow page (512x708: OSD found too little text on it before it was sized;
    it was left turned, CER 1.0), and a letter fed sideways that OSD turns with a
    confidence of about 1, which a band read at its mean word confidence did not confirm:
    Tesseract reads a sideways page's lines too, as words standing on end. Where OSD is
    unsure, the reading of the four turns decides (``checked``)."""
    with Image.open(CORPUS / name) as opened:
        upright = opened.convert("RGB")
    detector = orient.Detector(None, [lang])
    try:
        assert detector.detect(upright).turn == 0
        found = detector.detect(orient.turn(upright, fed))
    finally:
        detector.close()
    assert (fed + found.turn) % 360 == 0 and found.checked == checked, found


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
@pytest.mark.usefixtures("osd_decides")
def test_an_unsure_upright_page_that_reads_upright_is_read_once_not_four_times(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """OSD is unsure of ehri_dan_00 upright (confidence 0.75): the check read it four
    ways (about 4 s). Read as it is, it has 108 level words at a mean confidence of 0.9,
    as upright text does: that reading is enough. Fed upside down (its reading as it is:
    83 words at 0.41), it is turned; its lines lie level, so only the band of it as it is
    and turned 180 degrees are read, not all four turns of the whole page."""
    with Image.open(CORPUS / "ehri_dan_00.jpg") as opened:
        upright = opened.convert("RGB")
    detector = orient.Detector(None, ["dan"])
    readings: list[int] = []
    level_words = detector._level_words

    def counted(image: Image.Image) -> tuple[float, int]:
        readings.append(1)
        return level_words(image)

    monkeypatch.setattr(detector, "_level_words", counted)
    try:
        found = detector.detect(upright)
        assert (found.turn, found.checked, len(readings)) == (0, True, 1), found
        readings.clear()
        found = detector.detect(orient.turn(upright, 180))
        assert (found.turn, len(readings)) == (180, 2), found
    finally:
        detector.close()


@pytest.mark.usefixtures("osd_decides")
def test_a_page_without_text_on_either_axis_is_read_two_ways_not_four(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Noise and paper grain: OSD is unsure (or cannot decide), and the page reads as no
    level word as it is and turned 90 degrees. Upside-down lines still read as level
    words, so neither of the other two turns can hold text: the page is left as it is
    after two readings (four took 5 s on a noise page, and turned a grain page 180
    degrees on four junk "words")."""
    detector = orient.Detector(None, ["eng"])
    readings: list[int] = []
    level_words = detector._level_words

    def counted(image: Image.Image) -> tuple[float, int]:
        score, count = level_words(image)
        readings.append(count)
        return score, count

    monkeypatch.setattr(detector, "_level_words", counted)
    noise = cases.noise_image((1240, 1754), 60, random.Random(1)).convert("L")
    with Image.open(cases.paper_texture(tmp_path / "grain.png", seed=3)) as opened:
        grain = opened.convert("L")
    try:
        for page in (noise, grain):
            readings.clear()
            found = detector.detect(page)
            assert (found.turn, readings) == (0, [0, 0]), found
    finally:
        detector.close()


def test_the_ink_profiles_tell_the_axis_of_a_pages_lines() -> None:
    """Rows much sharper than columns where lines lie level, the reverse on the page
    turned a quarter, and no axis on a blank page."""
    page = letter(count=30)[0]  # lines of text of differing lengths and letters
    assert deskew.line_ratio(page) >= 1.5 * orient.AXIS_RATIO
    assert deskew.line_ratio(orient.turn(page, 90)) <= 1 / (1.5 * orient.AXIS_RATIO)
    assert deskew.line_ratio(Image.new("L", (800, 1000), 255)) == 1.0


@pytest.mark.parametrize(("fed", "turns"), [(0, [0]), (180, [0, 180]), (90, [0, 90, 270]),
                                            (270, [0, 90, 270])])
@pytest.mark.usefixtures("osd_decides")
def test_an_unsure_page_is_checked_on_a_band_the_turns_of_its_axis_only(
        monkeypatch: pytest.MonkeyPatch, fed: int, turns: list[int]) -> None:
    """The reading check read the whole page four ways where OSD was unsure (about 4 s a
    page). The ink profiles give the lines' axis: a band of half the page is read as it
    is and turned the way(s) left on that axis, and it decides."""
    page = letter(count=30)[0]
    proposed = (360 - fed) % 360
    monkeypatch.setattr(osd.OsdApi, "found", lambda self, image, dpi: osd.Found(
        (360 - proposed) % 360, 1.0, "Latin", 20.0))
    detector = orient.Detector(None, ["eng"])
    sizes: list[tuple[int, int]] = []
    level_words = detector._level_words

    def counted(image: Image.Image) -> tuple[float, int]:
        sizes.append(image.size)
        return level_words(image)

    monkeypatch.setattr(detector, "_level_words", counted)
    try:
        found = detector.detect(orient.turn(page, fed))
    finally:
        detector.close()
    assert (fed + found.turn) % 360 == 0 and found.checked, found
    whole = orient.sized(orient.turn(page, fed), orient.CHECK_SIDE).size
    assert all(w * h <= 0.51 * whole[0] * whole[1] for w, h in sizes), (sizes, whole)
    assert len(sizes) == len(turns), sizes


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
@pytest.mark.parametrize(("name", "lang", "variant", "fed"), [
    ("tapus_06.jpg", "fra", "dpi150", 0), ("tapus_06.jpg", "fra", "dpi150", 180),
    ("tess_8071_093.3B.tif", "eng", "dpi100", 0), ("tess_8071_093.3B.tif", "eng", "dpi100", 180),
    ("ehri_eng_04.jpg", "eng", "dpi100", 270), ("tapus_table_00.jpg", "fra", "photo", 0),
    ("tapus_table_00.jpg", "fra", "photo", 180), ("tapus_table_00.jpg", "fra", "dpi100", 0),
    ("tapus_table_00.jpg", "fra", "dpi100", 180)])
@pytest.mark.usefixtures("osd_decides")
def test_low_resolution_scans_and_photos_are_turned_right(
        tmp_path: Path, name: str, lang: str, variant: str, fed: int) -> None:
    """OSD drops characters under 10 pixels and misjudges print told to be at a phone's
    72 dpi: on these pages, as OSD saw them before they were sized, it was wrong, six of
    seven with a confidence of 2.4 to 5.9 (upright pages turned upside down, upside-down
    pages left so). Sized to 3300 pixels, or checked by reading, each is turned upright.
    The table at 100 dpi, enlarged 4 times for OSD, got "turn 180" upright and "leave
    it" upside down, both at a confidence over 3: on so small a page the reading checks
    a turn under 5."""
    src = CORPUS / name
    made = {"dpi150": lambda: cases.low_resolution(src, tmp_path / "p.png", 150),
            "dpi100": lambda: cases.low_resolution(src, tmp_path / "p.png", 100),
            "photo": lambda: cases.phone_photo(src, tmp_path / "p.jpg", seed=7)}[variant]()
    with Image.open(made) as opened:
        page = opened.convert("RGB")
    detector = orient.Detector(None, [lang])
    try:
        found = detector.detect(orient.turn(page, fed))
    finally:
        detector.close()
    assert (fed + found.turn) % 360 == 0, found


def test_without_osd_data_pages_are_read_as_they_are_and_the_log_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from ocrwatch.config import languages

    have = {k: v for k, v in languages.available_languages().items() if k != "osd"}
    monkeypatch.setattr(orient, "available_languages", lambda explicit=None: have)
    upright, _, _ = letter()
    prep = scanprep.ScanPrep(Config(languages=["eng"]))
    sideways = Page(Path("x.png"), 0, upright.transpose(ROTATE[90]), dpi=DPI)
    with caplog.at_level("WARNING"):
        assert prep.prepare(sideways).turned == 0
    assert "osd.traineddata" in caplog.text and "tesseract-ocr-osd" in caplog.text
    assert prep.missing and "rotate_pages = false" in prep.missing


def test_rotate_pages_false_leaves_pages_as_they_are() -> None:
    upright, _, _ = letter()
    sideways = Page(Path("x.png"), 0, upright.transpose(ROTATE[180]), dpi=DPI)
    assert scanprep.ScanPrep(Config(languages=["eng"], rotate_pages=False)).prepare(
        sideways).turned == 0
    assert scanprep.ScanPrep(Config(languages=["eng"])).prepare(sideways).turned == 180


# -- blank pages --------------------------------------------------------------------
def test_scan_like_blank_backs_are_recorded_blank_without_reading(tmp_path: Path) -> None:
    config = config_for(tmp_path, engine="fake")
    front, lines, _ = letter()
    front_path = tmp_path / "front.png"
    front.save(front_path, dpi=(DPI, DPI))
    backs = [cases.blank_back(front_path, config.inbox[0] / f"back{n}.jpg", seed=n)
             for n in range(3)]
    # The back of a filed sheet: punch holes shown dark by the scanner, a staple.
    backs.append(cases.filed(cases.blank_back(front_path, tmp_path / "back3.jpg", seed=3),
                             config.inbox[0] / "filed.jpg", seed=3))
    engine = Recording("\n".join(lines))
    daemon = read(config, *backs, engine=engine)
    try:
        got = rows(daemon)
        status = daemon.status()
    finally:
        daemon.close()
    assert engine.seen == []  # no engine saw them
    assert [r["blank"] for r in got] == [1, 1, 1, 1]
    assert status.blank_today == 4 and "4 blank" in format_status(status)
    assert all(r["text"] == "" for r in got)
    for back in backs:
        assert scanprep.BLANK_NOTE in back.with_suffix(".md").read_text(encoding="utf-8")
    assert not inkcover.is_blank(front)


@pytest.mark.parametrize(("size", "at", "font"), [
    ((1600, 1200), (20, 20), 28),  # one line near the top-left corner of a small page
    ((2480, 3508), (1200, 1700), 28),  # one 7 pt word in the middle of an A4 page
    ((2480, 3508), (150, 3300), 40),  # a footer line alone at the foot of an A4 page
])
def test_a_page_with_one_short_line_is_not_blank(
        size: tuple[int, int], at: tuple[int, int], font: int) -> None:
    # Under 0.1% of such a page is ink, as on a blank back: the line's concentrated ink
    # is what tells it apart, and reading it must not be skipped.
    page = Image.new("RGB", size, "white")
    ImageDraw.Draw(page).text(at, "Invoice 1 total due", fill="black",
                              font=ImageFont.load_default(size=font))
    assert inkcover.coverage(page) < inkcover.BLANK_COVERAGE
    assert not inkcover.is_blank(page)


def test_punch_holes_and_a_staple_on_a_blank_back_are_not_text_but_a_word_by_them_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filed sheet's back went to the engine: its punch holes (discs where a dark or grey
    backing shows through, or a light backing's shadow on their rim) and its staple are
    large marks. They are not counted now; a word or a number in the same margin still
    is, and so is one round letter by the edge (holes come in rows). A thin stroke alone
    in a corner ("l", "1", a rule) over 4 mm long is taken for a staple."""
    letter_page, _lines, _ = letter()
    front = Image.new("RGB", (round(8.27 * DPI), round(11.69 * DPI)), "white")  # A4
    front.paste(letter_page, (0, DPI))
    front_path = tmp_path / "front.png"
    front.save(front_path, dpi=(DPI, DPI))
    margin_marks = [
        ((0.80, 0.03), "Copy", 34),  # 12 pt at 200 dpi, the top right corner
        ((0.45, 0.95), "Page 2", 28),  # 10 pt, a footer
        ((0.93, 0.50), "17", 40),  # a number by the holes' edge
        ((0.05, 0.90), "3.12.26", 28),  # a date by the holes' edge, at its foot
        ((0.04, 0.06), "Draft", 70),  # a big word in the staple's corner
    ]
    for seed in range(6):
        back = cases.blank_back(front_path, tmp_path / f"b{seed}.jpg", seed=seed)
        with Image.open(cases.filed(back, tmp_path / f"f{seed}.jpg", seed=seed)) as opened:
            filed = opened.convert("RGB")
        assert inkcover.is_blank(filed), (seed, inkcover.measure(filed))
        with monkeypatch.context() as patched:  # the marks counted as ink, as before
            patched.setattr(inkcover, "MARKS_AT_MOST", 0.0)
            assert not inkcover.is_blank(filed), seed
        (x, y), word, size = margin_marks[seed % len(margin_marks)]
        ImageDraw.Draw(filed).text((x * filed.width, y * filed.height), word, fill="black",
                                   font=ImageFont.load_default(size=size))
        assert not inkcover.is_blank(filed), (seed, word)
    # One disc or ring of a hole's size by the edge is a letter, a 0 or a bullet: holes
    # come two or more in a row.
    for mark in ("O", "\N{BLACK CIRCLE}"):
        lone = Image.new("RGB", front.size, "white")
        ImageDraw.Draw(lone).text((round(0.03 * lone.width), lone.height // 2), mark,
                                  fill="black", font=ImageFont.truetype(
                                      str(cases.DEJAVU), round(36 * DPI / 72)))
        assert not inkcover.is_blank(lone), mark
    # The middle of the page is never looked at mark by mark: a dot there is a mark.
    dotted = Image.new("RGB", front.size, "white")
    r = front.width // 60
    cx, cy = front.width // 2, front.height // 2
    ImageDraw.Draw(dotted).ellipse((cx - r, cy - r, cx + r, cy + r), fill="black")
    assert not inkcover.is_blank(dotted)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 120), st.integers(1, 120), st.sampled_from([3, 9, 11]),
       st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.floats(0, 1, exclude_max=True)),
                max_size=60))
def test_marks_are_grouped_as_pillows_max_filter_groups_them(
        width: int, height: int, size: int, inks: list[tuple[float, float]]) -> None:
    """The margin's marks are grouped by running sums, not Pillow's rank filter (which sorts
    each window and took most of a blank back's preparation): the same pixels, edges too."""
    mask = Image.new("L", (width, height), 0)
    for x, y in inks:
        mask.putpixel((int(x * width), int(y * height)), 255)
    assert (inkcover._spread(mask, size).tobytes()
            == mask.filter(ImageFilter.MaxFilter(size)).tobytes())


def test_a_holes_shadow_broken_into_arcs_is_one_hole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A light backing shows a hole by a thin shadow on its rim; the median filter that
    takes out specks breaks it into arcs. Arcs 3 mm apart each fit a small wrong circle,
    the holes no longer made a row, and a filed back made from a new page was read.
    Marks that far apart are now also tried as one."""
    import random

    size = (2480, 3508)  # A4 at 300 dpi
    mm = size[0] / 210
    r = 4 * mm  # US holes: 8 mm, 108 mm apart, 10 mm in
    for start in (0, 90, 180, 270):  # where the shadow falls on the rim
        page = cases._paper(size, random.Random(start), (246, 244, 238), grain=8, noise=5)
        draw = ImageDraw.Draw(page)
        for n in (-1, 0, 1):
            x, y = size[0] - 10 * mm, size[1] / 2 + n * 108 * mm
            box = (x - r, y - r, x + r, y + r)
            draw.ellipse(box, fill=(220,) * 3)
            for a, b in ((0, 50), (100, 150)):  # the shadow in two arcs, 50 degrees apart
                draw.arc(box, start + a, start + b, fill=(90,) * 3, width=round(0.6 * mm))
        assert inkcover.is_blank(page), (start, inkcover.measure(page))
        with monkeypatch.context() as patched:  # pieces grouped as closely as before
            patched.setattr(inkcover, "WIDE_GROUP", inkcover.GROUP)
            assert not inkcover.is_blank(page), start


def _photographed(sheet: Image.Image, seed: int, *, table: tuple[int, int, int] = (110, 95, 80),
                  dimmest: float = 0.6, soft: bool = False) -> Image.Image:
    """``sheet`` as a phone sees it on a table: tilted 1.5 degrees on a dark table top, the
    light falling off smoothly from 100% to ``dimmest`` across it; ``soft``: a little
    blurred and saved as JPEG, as a phone does."""
    import io
    import random

    from PIL import ImageChops, ImageFilter

    rng = random.Random(seed)
    photo = sheet.convert("RGB").rotate(rng.choice((-1.5, 1.5)), expand=True,
                                        resample=Image.Resampling.BICUBIC, fillcolor=table)
    ramp = Image.linear_gradient("L").resize(photo.size)
    if rng.random() < 0.5:
        ramp = ramp.transpose(Image.Transpose.ROTATE_90).resize(photo.size)
    light = ramp.point(lambda v: round(255 - v * (1 - dimmest))).convert("RGB")
    photo = ImageChops.multiply(photo, light)
    if not soft:
        return photo
    saved = io.BytesIO()
    photo.filter(ImageFilter.GaussianBlur(0.8)).save(saved, "JPEG", quality=85)
    with Image.open(saved) as opened:
        return opened.convert("RGB")


def _photographed_back_blank_and_a_line_on_it_not(tmp_path: Path, **photo: Any) -> None:
    """Three blank backs photographed so (``_photographed``'s keywords) are blank; each
    with one short line in its middle is not."""
    front, _lines, _ = letter()
    front_path = tmp_path / "front.png"
    front.save(front_path, dpi=(DPI, DPI))
    for seed in range(3):
        with Image.open(cases.blank_back(front_path, tmp_path / f"b{seed}.jpg",
                                         seed=seed)) as opened:
            back = opened.convert("RGB")
        shot = _photographed(back, seed, **photo)
        assert inkcover.is_blank(shot), (seed, inkcover.measure(shot))
        ImageDraw.Draw(back).text((back.width // 2, back.height // 2), "Invoice 1 total due",
                                  fill="black", font=ImageFont.load_default(size=28))
        assert not inkcover.is_blank(_photographed(back, seed, **photo)), seed


def test_a_photographed_blank_back_is_blank_and_one_line_on_it_is_not(tmp_path: Path) -> None:
    """Light falling off across a photographed sheet made the dim side darker than the
    page's one paper level less 30%, and the table around the sheet was ink: the page
    went to the engine. The paper is now measured place by place, and what is dark from
    the picture's edge inwards is not on the page."""
    _photographed_back_blank_and_a_line_on_it_not(tmp_path)


def test_a_blank_back_photographed_on_a_grey_table_in_failing_light_is_blank(
        tmp_path: Path) -> None:
    """The light falling to 55% across the sheet brought its median paper down to twice
    the grey table's (120), so the table was not "far darker than the paper"; the paper
    level measured on the table's own cells was low there, and the sheet's soft edge
    against it was ink: the back was read. The table is now also told by being far
    darker than the best-lit paper near it."""
    _photographed_back_blank_and_a_line_on_it_not(
        tmp_path, table=(120, 110, 100), dimmest=0.55, soft=True)


@pytest.mark.parametrize(("lid", "border", "degrees"), [
    (128, 40, 2.0),  # crooked on a mid-grey lid: the lid's edge was ink
    (70, 200, 0.0),  # a small sheet on a dark bed, the bed two thirds of the picture
])
def test_a_blank_back_on_a_grey_or_dark_scanner_bed_is_blank(
        tmp_path: Path, lid: int, border: int, degrees: float) -> None:
    """Where the paper met a mid-grey lid, the level drawn between the two made the lid's
    edge ink; and where the bed was most of the picture, it was taken for the paper, so a
    dark line at the sheet's edge was not "far darker than the paper". Both were read."""
    from PIL import ImageOps

    front, _lines, _ = letter()
    front_path = tmp_path / "front.png"
    front.resize((front.width // 2, front.height // 2)).save(front_path, dpi=(150, 150))
    for seed in range(2):
        with Image.open(cases.blank_back(front_path, tmp_path / f"b{seed}.jpg",
                                         seed=seed)) as opened:
            back = opened.convert("RGB")
        on_bed = ImageOps.expand(back, border, (lid,) * 3).rotate(
            degrees, expand=True, resample=Image.Resampling.BICUBIC, fillcolor=(lid,) * 3)
        assert inkcover.is_blank(on_bed), (seed, inkcover.measure(on_bed))
        ImageDraw.Draw(back).text((back.width // 3, back.height // 2), "Invoice 1 total due",
                                  fill="black", font=ImageFont.load_default(size=16))
        on_bed = ImageOps.expand(back, border, (lid,) * 3).rotate(
            degrees, expand=True, resample=Image.Resampling.BICUBIC, fillcolor=(lid,) * 3)
        assert not inkcover.is_blank(on_bed), seed


def _faint(sheet: Image.Image, seed: int, *, mirrored: bool = False,
           darkness: float = 0.25) -> Image.Image:
    """``sheet``'s print at a quarter of its darkness (``darkness``) on blue-grey paper (a
    worn ribbon, a carbon copy): under 30% darker than the paper, as show-through is.
    ``mirrored``: the same marks as the other side's print showing through."""
    import random

    from PIL import ImageChops, ImageOps

    grey = sheet.convert("L").point(lambda v: round(255 - (255 - v) * darkness))
    if mirrored:
        grey = ImageOps.mirror(grey)
    paper = cases._paper(grey.size, random.Random(seed), (190, 205, 215), grain=8, noise=6)
    return ImageChops.multiply(paper, Image.merge("RGB", (grey, grey, grey)))


def faint_and_ink(page: Image.Image) -> tuple[float, float]:
    """The page's share of marks at faint.FAINT_DEPTH and of ink, as the daemon measures."""
    (ink, _), (marks, _) = inkcover.measure_depths(page, (inkcover.INK_DEPTH,
                                                          faint.FAINT_DEPTH))
    return marks, ink


def test_measuring_two_depths_at_once_gives_what_each_alone_gives() -> None:
    """The daemon measures ink and faint marks in one pass over the page's paper."""
    front, _lines, _ = letter()
    pages = [front, _faint(front, 0), _faint(front, 1, mirrored=True),
             _faint(Image.new("RGB", front.size, "white"), 0)]
    bed = Image.new("RGB", (front.width + 400, front.height + 300), (120, 120, 120))
    bed.paste(_faint(front, 0).rotate(4, expand=False, fillcolor=(120, 120, 120)), (200, 150))
    pages.append(bed)
    for page in pages:
        depths = (inkcover.INK_DEPTH, faint.FAINT_DEPTH)
        assert inkcover.measure_depths(page, depths) == [inkcover.measure(page, d)
                                                         for d in depths]
    assert any(not inkcover.looks_blank(*inkcover.measure(p, faint.FAINT_DEPTH))
               and inkcover.is_blank(p) for p in pages)  # a page with faint marks only


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_flood_fill_fills_what_pillows_fills(data: st.DataObject) -> None:
    """inkcover's fill (runs found with bytes.find, the interpreter free between them)
    gives Pillow's own pixel-by-pixel result, seed after seed."""
    width, height = data.draw(st.integers(1, 30)), data.draw(st.integers(1, 30))
    greys = data.draw(st.sampled_from([(0, 255), (0, 128, 255), (3, 7)]))
    pixels = data.draw(st.lists(st.sampled_from(greys), min_size=width * height,
                                max_size=width * height))
    seeds = data.draw(st.lists(st.tuples(st.integers(0, width - 1), st.integers(0, height - 1)),
                               min_size=1, max_size=5))
    value = data.draw(st.sampled_from([*greys, 200]))
    ours = Image.frombytes("L", (width, height), bytes(pixels))
    pillows = ours.copy()
    for seed in seeds:
        ImageDraw.floodfill(pillows, seed, value)
    inkcover.floodfill(ours, seeds, value)
    assert ours.tobytes() == pillows.tobytes()


def test_the_skew_measure_sums_squared_steps_between_rows() -> None:
    rows = Image.frombytes("L", (1, 5), bytes([0, 10, 250, 7, 7]))
    mask = rows.resize((40, 5), Image.Resampling.NEAREST)
    assert deskew._sharpness(mask, 0.0) == 10**2 + 240**2 + 243**2 + 0
    assert deskew._sharpness(Image.new("L", (40, 1), 255), 0.0) == 0.0


def test_the_skew_measure_turns_ink_as_coordinates_as_an_image_turn_would() -> None:
    """The angle measure turns the ink's coordinates: its row profile matches the one of
    the mask turned as an image (same measure, same sign), at any angle."""
    upright, _lines, _ = letter(7, 12)
    mask = inkcover.ink_mask(upright.rotate(4.0, resample=Image.Resampling.BICUBIC,
                                            expand=True, fillcolor="white"), deskew.WORK_SIDE)
    ink = deskew._Ink(mask)
    angles = [x / 2 for x in range(-16, 17)]
    by_coordinates = [ink.sharpness(a) for a in angles]
    by_image = [deskew._sharpness(mask, a) for a in angles]
    best = angles[by_coordinates.index(max(by_coordinates))]
    assert best == angles[by_image.index(max(by_image))] == -4.0
    # Both measures rise and fall together over the angles (rank correlation).
    order = sorted(range(len(angles)), key=by_coordinates.__getitem__)
    ranks = sorted(range(len(angles)), key=by_image.__getitem__)
    assert sum(abs(order.index(i) - ranks.index(i)) for i in range(len(angles))) \
        <= 2 * len(angles)
    assert deskew._Ink(Image.new("L", (40, 30), 0)).sharpness(3.0) == 0.0


def test_faint_print_is_told_from_show_through_by_its_mirror_image() -> None:
    """Both hold too little ink to read (under 30% darker than the paper); the faint
    print reads as print to OSD once stretched, the show-through only mirrored."""
    detector = orient.Detector(None, ["eng"])
    try:
        front, _lines, _ = letter()
        for seed in range(2):
            print_, through = _faint(front, seed), _faint(front, seed, mirrored=True)
            assert inkcover.is_blank(print_) and inkcover.is_blank(through)  # as before
            assert faint.is_faint_print(print_, detector), seed
            assert not faint.is_faint_print(through, detector), seed
        # Paper alone has no faint marks: nothing more is asked of OSD.
        paper = _faint(Image.new("RGB", front.size, "white"), 0)
        assert not faint.has_faint_marks(paper)
        # A page whose marks are mostly fainter than ink (at 30% of its darkness: about
        # 40 times more marks at 12% than ink, and some ink, or none, as the paper's grain
        # falls) is faint: the Tesseract engine also reads its stretched copy. A page in
        # full black is not.
        page = _faint(front, 0, darkness=0.3)
        assert faint.mostly_faint(*faint_and_ink(page))
        page = _faint(front, 0, darkness=1.0)
        assert not faint.mostly_faint(*faint_and_ink(page))
    finally:
        detector.close()


def test_a_faint_typescript_is_read_and_its_show_through_is_blank(tmp_path: Path) -> None:
    """A faint page on blue-grey paper was recorded blank and never read. It is read now
    (from its stretched copy, where Tesseract's one threshold finds the print), and the
    same marks mirrored, the other side showing through, are still blank; fed sideways,
    it is turned upright."""
    config = config_for(tmp_path)
    front, lines, _ = letter()
    inbox = config.inbox[0]
    page, back, sideways = inbox / "faint.png", inbox / "back.png", inbox / "sideways.png"
    _faint(front, 1).save(page, dpi=(DPI, DPI))
    _faint(front, 1, mirrored=True).save(back, dpi=(DPI, DPI))
    _faint(front, 2).transpose(Image.Transpose.ROTATE_90).save(sideways, dpi=(DPI, DPI))
    daemon = read(config, page, back, sideways)
    try:
        got = {}
        for path in (page, back, sideways):
            job = daemon.jobs.known(path)
            assert job is not None and job.state.value == "done", job
            got[path.name] = daemon.db.query(
                "SELECT text, blank, turned FROM pages WHERE job_id = ?", (job.id,))[0]
    finally:
        daemon.close()
    assert got["back.png"]["blank"] == 1
    for name in ("faint.png", "sideways.png"):
        assert got[name]["blank"] == 0, name
        found = score("\n".join(lines), str(got[name]["text"]))
        assert found.cer < 0.1, (name, found)
    assert got["faint.png"]["turned"] == 0
    assert got["sideways.png"]["turned"] == 90  # fed a quarter turn left: turned right


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
def test_a_faint_page_fed_turned_is_turned_by_its_stretched_copy(tmp_path: Path) -> None:
    """A corpus typescript made faint on blue-grey paper, fed sideways or upside down: on
    the page as it is, OSD saw too little print and the page was left as fed, to be read
    as noise. Its marks stretched to full contrast show which way up it is."""
    src = cases.faint(CORPUS / "tapus_05.jpg", tmp_path / "faint.png", seed=3)
    with Image.open(src) as opened:
        image = opened.convert("RGB")
    prep = scanprep.ScanPrep(Config(languages=("fra",)))
    try:
        for fed in (90, 180, 270):
            page = Page(source=src, index=0, image=orient.turn(image, fed), dpi=None)
            ready = prep.prepare(page)
            assert not ready.blank and ready.stretched is not None, fed
            assert ready.turned == (360 - fed) % 360, (fed, ready.turned)
            # Its copy goes with it through the turn and the straightening (tapus_05 lies
            # 0.3 degrees crooked as scanned: a little larger, straightened).
            assert ready.stretched.size == ready.image.size, fed
            assert ready.image.size == image.size or ready.skew, fed
    finally:
        prep.close()


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
def test_no_corpus_page_is_blank_and_every_blank_back_made_from_one_is(tmp_path: Path) -> None:
    from ocrwatch.pages.decode import iter_pages

    config = Config()
    for n, path in enumerate(sorted(CORPUS.iterdir())):
        if path.name.endswith((".txt", ".tsv", ".md")):
            continue
        for page in iter_pages(path, config, None):
            assert not inkcover.is_blank(page.image), (path.name, page.index)
        if path.suffix != ".pdf":
            back = cases.blank_back(path, tmp_path / f"{path.stem}.back.jpg", seed=n)
            with Image.open(back) as image:
                assert inkcover.is_blank(image), (back.name, inkcover.coverage(image))


# -- deskew ---------------------------------------------------------------------------
def test_skewed_pages_are_straightened_and_straight_ones_left_alone(tmp_path: Path) -> None:
    upright, _lines, _ = letter(7, 12)
    assert deskew.skew_angle(upright) == 0.0
    for degrees in (2.0, 5.0, -3.0):
        crooked = upright.rotate(degrees, resample=Image.Resampling.BICUBIC, expand=True,
                                 fillcolor="white")
        assert abs(deskew.skew_angle(crooked) + degrees) <= 0.3, degrees
    straight = Page(Path("x.png"), 0, upright, dpi=DPI)
    assert scanprep.ScanPrep(Config(languages=["eng"])).prepare(straight) is straight


def test_a_wide_page_a_third_of_a_degree_crooked_is_straightened(tmp_path: Path) -> None:
    """A landscape page 0.4 degrees crooked: its long lines drift by a third of their
    height, enough for Tesseract's layout to break them; it is measured on the finer
    mask and straightened (the floor was 1 degree, and it was read as fed). A page 0.1
    degrees off is left as it is, as a straight one is."""
    upright, _lines, _ = letter(7, 12)
    wide = upright.resize((upright.width * 2, upright.height), Image.Resampling.BICUBIC)
    assert deskew.skew_angle(wide) == 0.0
    for degrees, straightened in ((0.4, True), (-0.5, True), (0.1, False)):
        crooked = wide.rotate(degrees, resample=Image.Resampling.BICUBIC, expand=True,
                              fillcolor="white")
        angle = deskew.skew_angle(crooked)
        if straightened:
            assert abs(angle + degrees) <= 0.15, (degrees, angle)
        else:
            assert angle == 0.0, (degrees, angle)


def test_the_skew_floor_is_a_third_of_a_degree_for_tesseract_and_a_degree_for_a_model(
        tmp_path: Path) -> None:
    """The floor was measured with Tesseract (its layout breaks lines); a model engine's
    pages keep a degree, and a straight page costs its preparation no finer mask."""
    from ocrwatch.testing.fake import FakeEngine

    upright, _lines, _ = letter(7, 12)
    wide = upright.resize((upright.width * 2, upright.height), Image.Resampling.BICUBIC)
    crooked = wide.rotate(0.4, resample=Image.Resampling.BICUBIC, expand=True,
                          fillcolor="white")
    page = Page(Path("x.png"), 0, crooked, dpi=DPI)
    floors = {}
    for name, engine in (("tesseract", None), ("model", FakeEngine())):
        daemon = Daemon(helpers.make_config(tmp_path / name, engine="tesseract"),
                        engine=engine)
        try:
            assert daemon.ctx.scan is not None
            floors[name] = daemon.ctx.scan.least_skew
            ready = daemon.ctx.scan.prepare(page)
        finally:
            daemon.close()
        if name == "tesseract":
            assert abs((ready.skew or 0.0) + 0.4) <= 0.15, ready.skew
        else:
            assert not ready.skew and ready is page, ready.skew
    assert floors == {"tesseract": deskew.MIN_ANGLE, "model": deskew.JUDGED_ANGLE}


def test_a_page_fed_sideways_and_a_little_crooked_is_turned_then_straightened() -> None:
    """Under a degree, the turn is judged on the page as fed and the page straightened
    after it (judged straightened, two noisy pages fed sideways were turned the wrong
    way): fed a quarter turn either way, the page comes out upright and level."""
    upright, _lines, _ = letter(7, 12)
    wide = upright.resize((upright.width * 2, upright.height), Image.Resampling.BICUBIC)
    crooked = wide.rotate(0.5, resample=Image.Resampling.BICUBIC, expand=True,
                          fillcolor="white")
    prep = scanprep.ScanPrep(Config(languages=["eng"]))
    try:
        for fed in (90, 270):
            page = Page(Path("x.png"), 0, orient.turn(crooked, fed), dpi=DPI)
            ready = prep.prepare(page)
            assert ready.turned == (360 - fed) % 360, (fed, ready.turned)
            assert ready.skew is not None and abs(ready.skew + 0.5) <= 0.15, ready.skew
            assert ready.image.width > ready.image.height  # upright: the wide way again
            assert deskew.skew_angle(ready.image) == 0.0  # and level
    finally:
        prep.close()


def test_a_bilevel_page_fed_crooked_is_straightened_in_grey() -> None:
    """A 1-bit page (a fax, a bilevel TIFF) is kept 1-bit for Tesseract; straightened,
    it is turned smoothly in grey, its corners the paper's white."""
    upright, _lines, _ = letter(7, 12)
    crooked = upright.rotate(3.0, resample=Image.Resampling.BICUBIC, expand=True,
                             fillcolor="white").convert("L").point(
        lambda v: 255 * (v > 128)).convert("1")
    angle = deskew.skew_angle(crooked)
    assert abs(angle + 3.0) <= 0.3
    straight = deskew.straighten(crooked, angle)
    assert straight.mode == "L"
    assert straight.getpixel((0, 0)) == 255
    assert sum(1 for count in straight.histogram() if count) > 2  # edges smoothed in grey


def test_a_skewed_page_reads_as_well_as_straight_and_its_layer_reads_in_order(
        tmp_path: Path) -> None:
    upright, lines, _ = letter(7, 12)
    reference = "\n".join(lines)
    src = tmp_path / "crooked.png"
    upright.rotate(5, resample=Image.Resampling.BICUBIC, expand=True,
                   fillcolor="white").save(src, dpi=(DPI, DPI))
    results = {}
    for on in (True, False):
        config = config_for(tmp_path / str(on), deskew=on)
        copy = config.inbox[0] / src.name
        shutil.copy(src, copy)
        daemon = read(config, copy)
        try:
            (row,) = rows(daemon)
        finally:
            daemon.close()
        results[on] = (score(reference, str(row["text"])).cer, row["skew"],
                       pdf_text(copy.with_name("crooked.ocr.pdf")))
    cer_on, skew_on, layer = results[True]
    cer_off, skew_off, _ = results[False]
    assert skew_on == pytest.approx(-5.0, abs=0.3) and skew_off == 0
    assert cer_on < 0.02 and cer_on < cer_off, (cer_on, cer_off)
    assert score(reference, layer).cer <= max(1.1 * cer_on, 0.02), layer


def test_a_grey_sheet_fed_crooked_on_a_white_lid_is_read(tmp_path: Path) -> None:
    """White corners around grey paper, once straightened, threw Tesseract's threshold
    off: the page read as nothing."""
    upright, lines, _ = letter(9, 12)
    grey = Image.eval(upright.convert("L"), lambda v: 40 + v * 100 // 255)  # paper at 140
    crooked = grey.rotate(3, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=255)
    config = config_for(tmp_path, outputs=["txt"])
    src = config.inbox[0] / "grey.png"
    crooked.convert("RGB").save(src, dpi=(DPI, DPI))
    daemon = read(config, src)
    try:
        (row,) = rows(daemon)
    finally:
        daemon.close()
    assert row["skew"] == pytest.approx(-3.0, abs=0.3)
    assert score("\n".join(lines), str(row["text"])).cer < 0.05, row["text"]


def test_a_grey_sheet_fed_crooked_and_turned_is_straightened_then_turned_upright(
        tmp_path: Path) -> None:
    """Fed sideways or upside down as well as crooked on a white lid: OSD, judging the page
    as fed, could not decide (the white corners moved its threshold off the print), and
    the page was left as fed, to be read as noise. Straightened first, it is turned."""
    upright, lines, _ = letter(9, 12)
    grey = Image.eval(upright.convert("L"), lambda v: 40 + v * 100 // 255)  # paper at 140
    for degrees in (3.0, -7.0):
        crooked = grey.rotate(degrees, resample=Image.Resampling.BICUBIC, expand=True,
                              fillcolor=255).convert("RGB")
        prep = scanprep.ScanPrep(Config(languages=("eng",)))
        try:
            for fed in (90, 180, 270):
                page = Page(Path("crooked.png"), 0, orient.turn(crooked, fed), dpi=DPI)
                ready = prep.prepare(page)
                assert ready.turned == (360 - fed) % 360, (degrees, fed, ready.turned)
                assert ready.skew == pytest.approx(-degrees, abs=0.3), (degrees, fed)
                assert ready.upright == orient.turn(page.image, ready.turned).size
                # As drawn again for a model's word boxes: the same pixels.
                again = scanprep.again(page, ready.turned, ready.skew).image
                assert again.size == ready.image.size and again.tobytes() == ready.image.tobytes()
        finally:
            prep.close()
    config = config_for(tmp_path, outputs=["txt"])
    src = config.inbox[0] / "grey.png"
    orient.turn(crooked, 180).save(src, dpi=(DPI, DPI))
    daemon = read(config, src)
    try:
        (row,) = rows(daemon)
    finally:
        daemon.close()
    assert (row["turned"], row["skew"]) == (180, pytest.approx(7.0, abs=0.3))
    assert score("\n".join(lines), str(row["text"])).cer < 0.05, row["text"]


# -- noisy paper ----------------------------------------------------------------------
def test_paper_texture_alone_gives_no_text(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    src = cases.paper_texture(config.inbox[0] / "texture.jpg", seed=1, size=(1240, 1754))
    daemon = read(config, src)
    try:
        (row,) = rows(daemon)
    finally:
        daemon.close()
    assert row["text"] == "" and row["blank"] == 1


def test_a_noisy_page_reads_no_worse_than_plain_tesseract(tmp_path: Path) -> None:
    config = config_for(tmp_path, outputs=["txt"])
    upright, lines, _ = letter(11, 10)
    clean = tmp_path / "clean.png"
    upright.save(clean, dpi=(DPI, DPI))
    src = cases.noisy(clean, config.inbox[0] / "yellowed.jpg", seed=2)
    plain = subprocess.run(["tesseract", str(src), "-", "-l", "eng"], capture_output=True,
                           text=True, check=True, timeout=120,
                           env={"OMP_THREAD_LIMIT": "1", "PATH": "/usr/bin:/bin"}).stdout
    daemon = read(config, src)
    try:
        (row,) = rows(daemon)
    finally:
        daemon.close()
    reference = "\n".join(lines)
    ours, theirs = score(reference, str(row["text"])).cer, score(reference, plain).cer
    assert ours <= theirs + 0.005, (ours, theirs)
    assert row["nonwords"] == 0


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
def test_a_page_read_unsurely_is_read_again_with_local_thresholds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ehri_dan_00, a typed letter on grey, uneven paper, reads unsurely with Tesseract's
    one global threshold; read again with local thresholds (Sauvola) it reads with more
    sure words, and that reading is kept. A page read surely is read once."""
    from ocrwatch.engines import tesseract

    engine = tesseract.TesseractEngine(Config(workers=1, languages=["dan"],
                                              database=tmp_path / "db"))
    readings: list[tuple[int, int, int]] = []  # thresholding method, confidence, sure words
    real = engine._reading

    def counted(api: object) -> tesseract._Reading:
        got = real(api)
        readings.append((api.GetIntVariable("thresholding_method"),  # type: ignore[attr-defined]
                         got.confidence, got.sure))
        return got

    monkeypatch.setattr(engine, "_reading", counted)
    truth = (CORPUS / "ehri_dan_00.gt.txt").read_text(encoding="utf-8")
    with Image.open(CORPUS / "ehri_dan_00.jpg") as opened:
        page = Page(CORPUS / "ehri_dan_00.jpg", 0, opened.convert("RGB"), dpi=72)
    try:
        (both,) = engine.recognize([page])
        assert [method for method, _, _ in readings] == [0, 2]
        (_, unsure, sure_global), (_, _, sure_local) = readings
        assert unsure < tesseract.SURE_CONF and sure_local > sure_global
        readings.clear()
        sure_conf = tesseract.SURE_CONF
        monkeypatch.setattr(tesseract, "SURE_CONF", 0)  # the global threshold alone
        (global_only,) = engine.recognize([page])
        assert [method for method, _, _ in readings] == [0]
        kept, plain = score(truth, both.text).cer, score(truth, global_only.text).cer
        assert kept < 0.07 and plain > 2 * kept, (kept, plain)
        readings.clear()
        monkeypatch.setattr(tesseract, "SURE_CONF", sure_conf)
        clean = helpers.text_page(["The quick brown fox jumps", "over the lazy dog"])
        (out,) = engine.recognize([Page(tmp_path / "clean.png", 0, clean, dpi=200)])
        assert "lazy dog" in helpers.normalize(out.text)
        assert len(readings) == 1 and readings[0][0] == 0 and readings[0][1] >= sure_conf
    finally:
        engine.close()


def test_an_unsure_page_is_read_again_only_where_local_thresholds_change_its_ink(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second reading (Sauvola) costs a whole reading: it is made only where the
    local thresholds change at least ``LOCAL_DIFFERS`` of the page's ink. A black and
    white page with broken strokes (a fax's kind: read unsurely, the same pixels at any
    threshold) is read once; grey print under heavy grain, where the thresholds part,
    twice."""
    import numpy as np

    from ocrwatch.engines import tesseract

    engine = tesseract.TesseractEngine(Config(workers=1, languages=["eng"],
                                              database=tmp_path / "db"))
    readings: list[tuple[int, int]] = []  # thresholding method, confidence
    real_reading, real_differs = engine._reading, tesseract.ink_differs
    shares: list[float] = []

    def counted(api: object) -> tesseract._Reading:
        got = real_reading(api)
        readings.append((api.GetIntVariable("thresholding_method"),  # type: ignore[attr-defined]
                         got.confidence))
        return got

    def measured(first: Image.Image, second: Image.Image) -> bool:
        a, b = (np.asarray(im.convert("L")) < 128 for im in (first, second))
        shares.append(float(np.count_nonzero(a ^ b)) / min(a.sum(), b.sum()))
        return real_differs(first, second)

    monkeypatch.setattr(engine, "_reading", counted)
    monkeypatch.setattr(tesseract, "ink_differs", measured)
    lines = ["Quarterly statement of the account", "Paid on the third of March 1987",
             "Balance carried over: 1,204.55", "Interest at four per cent",
             "Signed by the clerk of the office"] * 3
    rng = np.random.default_rng(1)
    ink = np.asarray(helpers.text_page(lines, size=20, width=900).convert("L")) < 128
    ink = (ink & (rng.random(ink.shape) > 0.2)) | (rng.random(ink.shape) < 0.004)
    broken = Image.fromarray(np.where(ink, 0, 255).astype("uint8"))
    grey = np.asarray(helpers.text_page(lines, size=16, width=900).convert("L"), dtype=float)
    grainy = Image.fromarray(np.clip(grey + rng.normal(0, 40, grey.shape), 0, 255)
                             .astype("uint8"))
    try:
        (out,) = engine.recognize([Page(tmp_path / "fax.png", 0, broken, dpi=200)])
        assert [m for m, _ in readings] == [0], (readings, shares)
        assert readings[0][1] < tesseract.SURE_CONF and shares[-1] < tesseract.LOCAL_DIFFERS
        assert "statement" in out.text
        readings.clear()
        (out,) = engine.recognize([Page(tmp_path / "grain.png", 0, grainy, dpi=200)])
        assert [m for m, _ in readings] == [0, 2], (readings, shares)
        assert shares[-1] >= tesseract.LOCAL_DIFFERS
        assert "statement" in out.text
    finally:
        engine.close()


def test_a_halftone_is_not_taken_for_small_text(tmp_path: Path) -> None:
    """Its dots form 4 px "lines": enlarged 4x for them, it read as 15 KB of garbage."""
    config = config_for(tmp_path, outputs=["txt"])
    src = cases.halftone(config.inbox[0] / "photo.png")
    plain = subprocess.run(["tesseract", str(src), "-", "-l", "eng"], capture_output=True,
                           text=True, check=True, timeout=120,
                           env={"OMP_THREAD_LIMIT": "1", "PATH": "/usr/bin:/bin"}).stdout
    daemon = read(config, src)
    try:
        (row,) = rows(daemon)
        found = search(daemon.db, "eee OR FEEee OR Sate")
    finally:
        daemon.close()
    assert len(str(row["text"]).strip()) <= 1.1 * len(plain.strip()) + 10, len(str(row["text"]))
    assert row["nonwords"] == 1 and found == []


def test_a_reading_of_mostly_non_words_is_flagged_and_kept_out_of_search(
        tmp_path: Path) -> None:
    assert wordlike.mostly_nonwords("ee: ,. —~ i '/ a. Il; ;:. j ‘ _ rn, .: - ' , fi /")
    assert wordlike.mostly_nonwords("FEEee este eeeeae\nFEtee eee eeeeeaee\nTHESES EEE eee")
    assert not wordlike.mostly_nonwords("Dear Madam, in our great despair we appeal to you")
    assert not wordlike.mostly_nonwords("Total 12.50 EUR, 3 items, paid 01/02/2024")
    config = config_for(tmp_path, engine="fake", outputs=["md", "txt"])
    front, _, _ = letter()
    src = config.inbox[0] / "grain.png"
    front.save(src, dpi=(DPI, DPI))
    engine = Recording("ee: ,. zq —~ i '/ a. Il; ;:. j ‘ _ rn, .: - ' , fi / zq")
    daemon = read(config, src, engine=engine)
    try:
        (row,) = rows(daemon)
        assert search(daemon.db, "zq") == []
    finally:
        daemon.close()
    assert row["nonwords"] == 1 and "mostly not words" in str(row["warnings"])
    assert "zq" in src.with_suffix(".txt").read_text(encoding="utf-8")  # kept in the sidecar


# -- the text layer's reading order -------------------------------------------------
def read_letter_upright_and_sideways(tmp_path: Path) -> tuple[list[dict[str, object]], Path]:
    """A typed letter (ehri_eng_03.jpg) as a TIFF of two frames, upright and fed 90 degrees
    clockwise, read by the daemon: its page rows and its searchable PDF."""
    config = config_for(tmp_path)
    with Image.open(CORPUS / "ehri_eng_03.jpg") as opened:
        upright = opened.convert("RGB")
        dpi = opened.info.get("dpi", (300, 300))
    src = config.inbox[0] / "letter.tif"
    upright.save(src, save_all=True, append_images=[upright.transpose(ROTATE[90])],
                 dpi=dpi, compression="tiff_deflate")
    daemon = read(config, src)
    try:
        return rows(daemon), src.with_name("letter.ocr.pdf")
    finally:
        daemon.close()


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
def test_pdftotext_reads_a_typed_letter_in_order_upright_and_turned(tmp_path: Path) -> None:
    """A typed letter (widely spaced words, lines of uneven height): with a text object
    per word sized to its line, pdftotext read its PDF at CER 0.208 against the .txt's
    0.183, splitting lines into columns."""
    reference = (CORPUS / "ehri_eng_03.gt.txt").read_text(encoding="utf-8")
    got, pdf = read_letter_upright_and_sideways(tmp_path)
    assert [r["turned"] for r in got] == [0, 270]
    layers = pdf_text(pdf).split("\f")
    for row, layer in zip(got, layers, strict=False):
        txt_cer, layer_cer = score(reference, str(row["text"])).cer, score(reference, layer).cer
        assert layer_cer <= 1.1 * txt_cer, (row["page"], layer_cer, txt_cer)


def test_each_line_is_one_text_object_with_spaces_on_one_baseline() -> None:
    words = (Word("Dear", (100, 100, 180, 130), 0), Word("Madam,", (260, 102, 400, 133), 0),
             Word("In", (100, 160, 140, 190), 1), Word("our", (160, 161, 220, 190), 1),
             Word("great", (240, 158, 330, 191), 1))
    stream = pdfout.text_layer(PageLayout(1000, 1000, words), "/F1", (0, 0, 360, 360), 0)
    text = stream.decode()
    assert text.count("BT") == 2 and text.count("ET") == 2
    assert text.count("<0020> Tj") == 3  # a space between the words of each line
    tms = [line.split()[5] for line in text.splitlines() if " Tm " in line]
    assert tms[0] == tms[1] and tms[2] == tms[3] == tms[4]  # one baseline per line


def _read_corpus_page(tmp_path: Path, name: str, language: str
                      ) -> tuple[dict[str, object], str, str]:
    """A one-page corpus file read by the daemon: its index row, its ground truth and
    pdftotext's reading of its searchable PDF."""
    config = config_for(tmp_path, languages=[language])
    scan = CORPUS / name
    reference = scan.with_name(f"{scan.stem}.gt.txt").read_text(encoding="utf-8")
    src = config.inbox[0] / scan.name
    shutil.copy(scan, src)
    daemon = read(config, src)
    try:
        (row,) = rows(daemon)
    finally:
        daemon.close()
    return row, reference, pdf_text(src.with_name(f"{scan.stem}.ocr.pdf"))


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
def test_pdftotext_reads_a_double_spaced_two_column_typescript_column_by_column(
        tmp_path: Path) -> None:
    """Its lines sized to their ink were 1.8 sizes apart, over pdftotext's 1.5: each line
    became a block and the two columns interleaved line by line (CER 0.70 against the
    .txt's 0.04). Sized to the column's pitch over 1.4, the right column's heading sat
    1.51 sizes above the column's first line, a block of its own read before the left
    column (CER 0.055 against 0.045, hyphenated words joined in both). Now pdftotext reads
    the .txt's words in the .txt's order."""
    row, reference, layer = _read_corpus_page(tmp_path, "tapus_01.jpg", "fra")
    # The left column reads on before the right one begins, its heading included.
    assert layer.index("Monnier sait") < layer.index("à Paris") < layer.index("Merde")
    assert layer.index("Merde") < layer.index("Chez moi") < layer.index("anguilles")
    joined = score(reference, joined_hyphens(str(row["text"]))).cer
    assert score(reference, layer).cer <= 1.1 * joined + 0.002
    same = score(joined_hyphens(str(row["text"])), layer)
    assert same.cer < 0.01, same  # one hyphen pdftotext drops ("L'ex=-")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
@pytest.mark.parametrize("name", ["tapus_table_00.jpg", "tapus_05.jpg"])
def test_a_table_reads_row_by_row_as_its_txt_does(tmp_path: Path, name: str) -> None:
    """A table's rows have gaps of an em or more between cells, where pdftotext splits a
    line and reads the pieces as columns: CER 0.421 from the PDF of tapus_table_00 where
    the .txt, row by row, has 0.289 (tapus_05: 0.210 against 0.144)."""
    row, reference, layer = _read_corpus_page(tmp_path, name, "fra")
    txt_cer, layer_cer = score(reference, str(row["text"])).cer, score(reference, layer).cer
    assert layer_cer <= 1.1 * txt_cer + 0.002, (layer_cer, txt_cer)


def _layer_pdf(tmp_path: Path, words: tuple[Word, ...], size: tuple[int, int]) -> Path:
    """A page holding only ``words``' layer, one pixel to a point."""
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=size)
    page = pdf.pages[0]
    name = page.add_resource(pdfout._font(pdf), pikepdf.Name.Font, prefix="F")
    page.contents_add(pdf.make_stream(
        pdfout.text_layer(PageLayout(*size, words), str(name), (0, 0, *size), 0)))
    pdf.save(tmp_path / "layer.pdf")
    return tmp_path / "layer.pdf"


# A table of three rows, its cells 500 pixels apart, on a page of 1400x400 pixels.
TABLE_ROWS = ("Name Amount Due", "Alice 12.50 May", "Bob 7.00 June")
TABLE_WORDS = tuple(
    Word(text, (100 + 500 * col, 100 + 50 * n, 100 + 500 * col + 24 * len(text), 130 + 50 * n), n)
    for n, row in enumerate(TABLE_ROWS) for col, text in enumerate(row.split()))


def test_a_row_of_cells_far_apart_reads_whole_and_each_word_starts_where_printed(
        tmp_path: Path) -> None:
    words = TABLE_WORDS
    pdf = _layer_pdf(tmp_path, words, (1400, 400))
    lines = [" ".join(line.split()) for line in pdf_text(pdf).splitlines() if line.strip()]
    assert lines == list(TABLE_ROWS)
    (found,) = bbox_words(pdf)
    assert [w.text for w in found] == [w.text for w in words]
    for printed, drawn in zip(words, found, strict=True):
        assert abs(drawn.box[0] - printed.box[0]) < 1.0, (printed, drawn)  # starts in place
        assert drawn.box[2] >= printed.box[2] - 1.0  # and covers the word


def _layer_words(tmp_path: Path, words: tuple[Word, ...], size: tuple[int, int]) -> list[str]:
    """pdftotext's lines of a page holding only ``words``' layer."""
    pdf = _layer_pdf(tmp_path, words, size)
    return [" ".join(line.split()) for line in pdf_text(pdf).splitlines() if line.strip()]


def test_words_whose_boxes_touch_read_as_two_words(tmp_path: Path) -> None:
    """Tesseract's boxes of "avaient" and ":" touch: drawn to their boxes, pdftotext read
    "avaient:"."""
    words = (Word("Elles", (100, 100, 190, 130), 0), Word("avaient", (210, 100, 330, 130), 0),
             Word(":", (330, 108, 338, 130), 0), Word("dit", (360, 100, 410, 130), 0))
    assert " ".join(_layer_words(tmp_path, words, (500, 500))).split() == [
        "Elles", "avaient", ":", "dit"]


def test_a_word_whose_box_starts_inside_the_one_before_stays_on_its_line(
        tmp_path: Path) -> None:
    """Words typed over each other (or boxes that overlap): drawn where their boxes
    begin, the later word lay left of the end of the one before, and pdftotext read each
    word of the line as a line of its own."""
    words = (Word("a", (100, 100, 130, 130), 0), Word("gntehtr", (160, 96, 320, 140), 0),
             Word("whtearais", (240, 96, 420, 140), 0), Word("gentleman", (440, 100, 640, 130), 0),
             Word("and", (660, 100, 730, 130), 0),
             Word("the", (100, 160, 160, 190), 1), Word("next", (180, 160, 260, 190), 1),
             Word("line", (280, 160, 350, 190), 1))
    assert _layer_words(tmp_path, words, (800, 400)) == [
        "a gntehtr whtearais gentleman and", "the next line"]


# The first six lines of Tesseract's words on ehri_dan_00.jpg (../shared/corpus) fed 2
# degrees crooked and read straightened: marks across the first two lines give some of
# their words boxes two to three lines tall.
_STROKED = (
    "Bl 470 813 573 846; fatetefag 862 728 1144 851; sf 1163 762 1244 831; "
    "deres 1256 736 1417 833; skr 1410 728 1571 860; else 1603 765 1690 811; "
    "af 1751 761 1811 855; 22. 1831 830 1863 839; ds., 2047 831 2053 841; "
    "hvor 2196 829 2224 837 |"
    "gg 503 810 650 922; anmoder 623 870 835 941; Generalkonsulatet 866 872 1378 919; "
    "om 1420 886 1478 918; at 1511 854 1564 918; Fr 1603 832 1888 934; drag 1817 769 2139 947; "
    "ter, 2179 872 2275 961 |"
    "Frk. 507 966 644 1035; Anna 683 970 803 1012; Wimmer, 831 967 1038 1019; "
    "skal 1086 967 1200 1011; man, 1232 978 1345 1019; idet 1388 969 1508 1013; "
    "man 1537 980 1629 1014; gaar 1660 979 1778 1023; ud 1811 975 1874 1016; "
    "fra, 1903 954 2025 1026; at 2054 973 2114 1021; De 2144 964 2224 1023 |"
    "er 529 1071 584 1104; dansk 620 1059 774 1103; Statsborger, 806 1060 1163 1114; "
    "herved 1206 1060 1384 1103; tillade 1421 1060 1631 1105; sig 1666 1063 1750 1114; "
    "at 1785 1067 1842 1108; meddele 1872 1058 2085 1112; Dem, 2116 1038 2233 1123 |"
    "at 526 1156 583 1196; det 616 1155 707 1197; forholder 743 1153 1143 1216; "
    "sig 1045 1149 1148 1220; rigtigt, 1174 1138 1504 1205; at 1455 1134 1515 1214; "
    "Frk. 1545 1155 1655 1201; Wimmer 1695 1156 1865 1202; i 1907 1158 1931 1201; "
    "Oktober 1968 1127 2174 1204 |"
    "Maaned 521 1248 708 1290; 1941 744 1246 859 1290; sammen 897 1259 1077 1290; "
    "med 1111 1249 1203 1291; er 1237 1260 1291 1290; Familie 1322 1247 1539 1292; "
    "Stark 1577 1249 1726 1294; er 1758 1262 1815 1294; afrejst 1849 1250 2055 1305; "
    "til 2093 1253 2172 1298 |"
)


def test_a_line_with_outsized_boxes_reads_after_the_line_above(tmp_path: Path) -> None:
    """Sized by its tallest boxes (3.1 times the usual line), the second line reached
    above the first and pdftotext read it first (CER 0.141 from the PDF where the .txt
    has 0.090)."""
    words = tuple(Word(text, (int(a), int(b), int(c), int(d)), n)
                  for n, line in enumerate("".join(_STROKED).split(" |")[:-1])
                  for text, a, b, c, d in (w.split() for w in line.split("; ")))
    text = " ".join(_layer_words(tmp_path, words, (2607, 1400)))
    assert text.index("fatetefag") < text.index("anmoder") < text.index("Anna") \
        < text.index("Statsborger") < text.index("Maaned"), text


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the corpus (../shared/corpus) is not here")
def test_a_standard_mode_fax_reads_as_well_as_a_fine_one(tmp_path: Path) -> None:
    """A corpus page sent as a Group 4 fax at 204x98 dpi: read as its pixels are, its
    print squashed to half its height, CER 0.115; stretched to square pixels 0.055, as
    a fine-mode fax (204x196) reads."""
    config = Config(languages=["eng"])
    from ocrwatch.engines import tesseract

    engine = tesseract.TesseractEngine(config)
    reference = (CORPUS / "tess_8071_093.3B.gt.txt").read_text(encoding="utf-8")
    try:
        cers = []
        for fine in (False, True):
            fax = cases.fax(CORPUS / "tess_8071_093.3B.tif", tmp_path / f"{fine}.tif", fine)
            (page,) = iter_pages(fax, config, None)
            (result,) = engine.recognize([page])
            cers.append(score(reference, result.text).cer)
    finally:
        engine.close()
    assert cers[0] < 0.08 and cers[0] < 1.3 * cers[1], cers


def test_an_upright_page_osd_turns_with_a_confidence_under_five_is_checked_and_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An upright receipt got OSD's "turn 180" at 3.40 (over the old threshold of 3) and
    was read upside down. OSD was never wrong from 3.5 on (benchmarks/results/
    orientation.txt): under SURE (5) its turn is checked by reading, and the page, which
    reads as upright text, stays as it is."""
    page = helpers.text_page(helpers.MINUTES * 3, width=1700)
    monkeypatch.setattr(osd.OsdApi, "found",
                        lambda self, image, dpi: osd.Found(180, 3.4, "Latin", 20.0))
    detector = orient.Detector(None, ["eng"])
    try:
        found = detector.detect(page)
    finally:
        detector.close()
    assert (found.turn, found.checked, found.proposed) == (0, True, 180), found


def test_the_reading_check_takes_no_turn_less_word_like_than_the_page_as_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A dot-matrix receipt turned 90 degrees read as symbols scored as level "words"
    and was kept turned. A turn that scores higher but reads as fewer word-like
    characters than the page as it is is not taken."""
    detector = orient.Detector(None, ["eng"])
    readings = {0: (3.0, 10, 0.9), 90: (9.0, 30, 0.4), 180: (1.0, 5, 0.3),
                270: (0.0, 0, 0.0)}
    seen: list[int] = []

    def reading(image: Image.Image) -> tuple[float, int, float]:
        turn = 90 * len(seen)
        seen.append(turn)
        return readings[turn]

    monkeypatch.setattr(detector, "_reading", reading)
    try:
        assert detector._best(Image.new("L", (800, 1000), 255), 90) == 0
        seen.clear()
        readings[90] = (9.0, 30, 0.95)
        assert detector._best(Image.new("L", (800, 1000), 255), 90) == 90
    finally:
        detector.close()


def test_a_second_reading_replaces_the_first_only_when_no_less_word_like() -> None:
    """Faint typing on tinted paper: the Sauvola reading made letters of the grain and
    won on "sure words", 750 characters of symbols for 213 of text. A second reading
    with more sure words but more characters of non-words is not taken."""
    from ocrwatch.engines.tesseract import _Reading, better

    first = _Reading("The committee met on Tuesday\n", 80, (), 4)
    grain = _Reading("The committee met on Tuesday ~;:,. eeee ,.;' iil ::;\n", 70, (), 6)
    cleaner = _Reading("The committee met on Tuesday to discuss\n", 85, (), 6)
    assert not better(grain, first)
    assert better(cleaner, first)
    assert not better(first, cleaner)


def test_a_dot_matrix_invoices_rows_stay_on_their_lines(tmp_path: Path) -> None:
    """Tesseract 5.5's layout read a receipt's descriptions, then its quantities, then its
    prices as blocks of their own (CER 0.65 with every word found). Rows of numbers
    level with another block's lines are read again as one block of rows."""
    import random as _random

    from benchmarks import heldout_set
    from ocrwatch.engines import tesseract

    config = Config(languages=["eng"])
    words = ["bread", "butter", "coffee", "apples", "cheese", "tomato", "pasta", "rice",
             "olive", "sugar", "flour", "onion"]
    path, truth = heldout_set.dot_matrix(_random.Random(1), words, tmp_path / "dm.png")
    engine = tesseract.TesseractEngine(config)
    try:
        (page,) = iter_pages(path, config, None)
        (result,) = engine.recognize([page])
    finally:
        engine.close()
    assert score(truth, result.text).cer < 0.2, result.text


def _two_columns() -> Image.Image:
    """A page of two columns of prose with a clear gutter, as a typescript sets them."""
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 30)
    left = ["The committee met on", "Tuesday to discuss the", "harbour and its roads,",
            "and the new school for", "the children of the", "village by the river."]
    right = ["Prices rose again in", "the spring, and the", "market moved to the",
             "square beside the old", "church, where farmers", "sold their grain."]
    page = Image.new("L", (1700, 900), 255)
    draw = ImageDraw.Draw(page)
    for n, (a, b) in enumerate(zip(left, right, strict=True)):
        draw.text((100, 100 + 50 * n), a, fill=0, font=font)
        draw.text((950, 100 + 50 * n), b, fill=0, font=font)
    return page


@pytest.mark.skipif(not Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").is_file(),
                    reason="DejaVu fonts are needed (fonts-dejavu-core)")
def test_a_reading_across_the_gutter_is_told_and_does_not_replace_one_by_columns() -> None:
    """A faint two-column typescript: its stretched copy read the columns across (15 of
    52 lines bridged against 2 of 64) with more sure words, and replaced the reading by
    columns (CER 0.142 -> 0.698). Real Tesseract readings of a two-column page: as one
    block, its lines span the gutter; by its own layout, none does; the reading across
    never replaces the one by columns."""
    from ocrwatch.engines.tesseract import TesseractEngine, better

    engine = TesseractEngine(Config(languages=["eng"]))
    try:
        api = engine._api()
        api.SetImage(_two_columns())
        api.SetSourceResolution(300)
        by_columns = engine._reading(api)
        api.SetPageSegMode(engine._tesserocr.PSM.SINGLE_BLOCK)
        try:
            api.SetImage(_two_columns())
            api.SetSourceResolution(300)
            across = engine._reading(api)
        finally:
            api.SetPageSegMode(engine._tesserocr.PSM.AUTO)
    finally:
        engine.close()
    assert "committee met on\nTuesday" in by_columns.text  # the columns apart
    assert "committee met on Prices" in across.text.replace("  ", " ")
    assert by_columns.bridged == 0
    assert across.bridged >= 5
    # More sure words do not make the reading across win, and it stays a fair contest
    # the other way round.
    richer = replace(across, sure=by_columns.sure + 20)
    assert not better(richer, by_columns)
    assert better(replace(by_columns, sure=across.sure + 1), across)


@pytest.mark.parametrize(("max_side", "at_once"), [(None, True), (1540, False)])
def test_an_idle_preparer_gives_osd_back_at_once_for_tesseract_later_for_a_model(
        monkeypatch: pytest.MonkeyPatch, max_side: int | None, at_once: bool) -> None:
    """Tesseract's readers read in the daemon's process: OSD goes back the moment a
    preparer finds no file (a one-page file's peak). A model engine's preparers keep it
    until they have found nothing for KEEP_OSD_IDLE_S: a drop's files come one after
    another, and reloading OSD for each cost the GPU daemon its preparers' time."""
    from types import SimpleNamespace

    from ocrwatch import scheduler

    released: list[float] = []
    clock = [100.0]
    monkeypatch.setattr(scheduler.time, "monotonic", lambda: clock[0])
    fake = SimpleNamespace(ctx=SimpleNamespace(scan=SimpleNamespace(
        idle=lambda: released.append(clock[0]))), engine=SimpleNamespace(max_side=max_side),
        _preparer=threading.local())
    scheduler.Scheduler._idle_preparer(fake)  # type: ignore[arg-type]
    assert bool(released) is at_once
    clock[0] += scheduler.KEEP_OSD_IDLE_S - 1
    scheduler.Scheduler._idle_preparer(fake)  # type: ignore[arg-type]
    assert bool(released) is at_once
    clock[0] += 1
    scheduler.Scheduler._idle_preparer(fake)  # type: ignore[arg-type]
    assert released  # idle long enough: given back either way
