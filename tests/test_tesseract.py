"""The CPU engine with the real Tesseract."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import MINUTES, normalize, scribbled, text_page

from ocrwatch.config import Config
from ocrwatch.core.domain import Page
from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.engines.tesseract import (
    DEFAULT_DPI,
    LINE_PX,
    MAX_UPSAMPLE,
    SMALL_LINE_PX,
    TesseractEngine,
    available_languages,
    believable,
    line_height,
    prepare_tessdata,
    source_resolution,
    text_to_markdown,
    upsample_factor,
)


def page(width: int, height: int, dpi: int | None) -> Page:
    from PIL import Image

    return Page(Path("x.png"), 0, Image.new("RGB", (width, height), "white"), dpi=dpi)


def test_source_resolution() -> None:
    assert source_resolution(page(2480, 3508, 300)) == 300  # A4 at 300 dpi
    assert source_resolution(page(850, 1100, 100)) == 100  # a real 100 dpi scan
    assert source_resolution(page(1700, 2200, None)) == DEFAULT_DPI
    # A 2341x3221 scan stamped 72 dpi would be a 45-inch page; 72 and 96 are what
    # cameras and editors write on anything: neither is believed.
    assert source_resolution(page(2341, 3221, 72)) == DEFAULT_DPI
    assert not believable(page(800, 600, 96)) and not believable(page(800, 600, 72))
    assert source_resolution(page(30000, 200, 600)) == DEFAULT_DPI  # a 50-inch "page"


def test_upsample_factor_follows_the_text_size() -> None:
    a4_100 = (827, 1169)
    assert upsample_factor(None, a4_100) == 1.0  # no text found: nothing to enlarge for
    assert upsample_factor(float(LINE_PX), a4_100) == 1.0
    assert upsample_factor(float(SMALL_LINE_PX), a4_100) == 1.0
    assert upsample_factor(14.0, a4_100) == pytest.approx(LINE_PX / 14)  # 100 dpi -> 300
    assert upsample_factor(3.0, a4_100) == MAX_UPSAMPLE
    # A page that is already huge is enlarged at most to the pixel budget.
    assert upsample_factor(10.0, (4000, 4000)) == pytest.approx((80e6 / 16e6) ** 0.5)
    assert upsample_factor(10.0, (8000, 8000)) == 1.0  # not even 1.2x fits


def test_line_height_measures_tesseracts_layout(tmp_path: Path) -> None:
    import tesserocr

    data = prepare_tessdata(["eng"])
    lines = ["The quick brown fox jumps over", "the lazy dog near the river",
             "while seven wizards quietly hex", "a jolly sphinx of black quartz"]
    with tesserocr.PyTessBaseAPI(path=str(data) + os.sep, lang="eng") as api:
        for size in (14, 44):
            api.SetImage(text_page(lines, size=size))
            api.SetSourceResolution(300)
            height = line_height(api)
            assert height is not None and 0.7 * size <= height <= 1.6 * size


def test_small_text_without_a_resolution_is_enlarged_and_read(tmp_path: Path) -> None:
    """Text about 100 dpi in size, no dpi in the file: read after enlarging it."""
    engine = TesseractEngine(Config(workers=1, database=tmp_path / "db"))
    lines = ["Invoice number 4711 for the harbour office",
             "Payment due within thirty days of delivery",
             "Questions about this invoice go to accounts",
             "Thank you for your order and kind regards"]
    try:
        image = text_page(lines, width=480, size=10)  # lines about 10 px high
        (out,) = engine.recognize([Page(Path("form.png"), 0, image, dpi=None)])
        text = normalize(out.text)
        # Read as it is, words run together ("paymentdue", "foryourotder").
        for phrase in ("harbour office", "payment due", "thirty days of delivery",
                       "your order"):
            assert phrase in text, text
    finally:
        engine.close()


def test_a_bilevel_page_reads_as_its_rgb_copy_does(tmp_path: Path) -> None:
    """Pages read at their own size stay 1-bit (pages/image.py: flattened): Tesseract
    reads the same words from them, small print enlarged as before."""
    engine = TesseractEngine(Config(workers=1, database=tmp_path / "db"))
    lines = ["Invoice number 4711 for the harbour office",
             "Payment due within thirty days of delivery",
             "Questions about this invoice go to accounts",
             "Thank you for your order and kind regards"]
    try:
        for size, dpi in ((40, 300), (12, None)):  # the second is enlarged first
            bilevel = text_page(lines, width=1700 if size == 40 else 480,
                                size=size).convert("L").point(lambda v: 255 * (v > 128))
            bilevel = bilevel.convert("1")
            (one,) = engine.recognize([Page(Path("fax.tif"), 0, bilevel, dpi=dpi)])
            (rgb,) = engine.recognize([Page(Path("fax.tif"), 0, bilevel.convert("RGB"),
                                            dpi=dpi)])
            assert "harbour" in normalize(one.text), one.text
            assert one.text == rgb.text
    finally:
        engine.close()


def test_markdown_keeps_lines_and_escapes_what_markdown_would_eat() -> None:
    md = text_to_markdown("# not a heading\n- not a list\n1. not a list\nplain\n\nnext para\n")
    assert md.splitlines()[0] == "\\# not a heading  "
    assert md.splitlines()[1] == "\\- not a list  "
    assert md.splitlines()[2] == "1\\. not a list  "
    assert "plain\n\nnext para" in md


def test_reads_rendered_text_in_two_threads(tmp_path: Path) -> None:
    import threading

    engine = TesseractEngine(Config(workers=2, database=tmp_path / "db"))
    try:
        assert engine.policy.concurrency == 2 and engine.max_side is None
        lines = [["The quick brown fox jumps"], ["over the lazy dog near Lyon"]]
        results: dict[int, str] = {}

        def read(i: int) -> None:
            image = text_page(lines[i])
            (out,) = engine.recognize([Page(Path(f"{i}.png"), 0, image, dpi=200)])
            results[i] = out.text

        threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert "quick brown fox" in normalize(results[0])
        assert "lazy dog near lyon" in normalize(results[1])
        assert engine.describe()["pages_per_second"]
    finally:
        engine.close()
        engine.close()  # safe twice


def test_blank_page_reads_as_empty(tmp_path: Path) -> None:
    engine = TesseractEngine(Config(workers=1, database=tmp_path / "db"))
    try:
        (out,) = engine.recognize([page(800, 1000, 200)])
        assert out.text.strip() == "" and out.error is None
    finally:
        engine.close()


def test_missing_language_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable) as err:
        TesseractEngine(Config(languages=["eng", "xyz"], database=tmp_path / "db"))
    message = str(err.value)
    assert "xyz" in message and "apt install tesseract-ocr-xyz" in message
    assert "eng" in message  # what is installed


def test_languages_from_different_folders_are_linked_together(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    have = available_languages()
    assert "eng" in have
    other = tmp_path / "more"
    other.mkdir()
    os.symlink(have["eng"], other / "zzz.traineddata")  # a second language elsewhere
    merged = prepare_tessdata(["eng", "zzz"], explicit=other)
    assert (merged / "eng.traineddata").resolve() == have["eng"].resolve()
    assert (merged / "zzz.traineddata").exists()
    assert merged.is_relative_to(home)


def test_a_line_of_marks_read_as_text_is_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Strokes under the text read as two lines of symbols and letters at low confidence;
    they are left out of the text and the words, the page's lines are all kept."""
    from ocrwatch.engines import tesseract

    image, strokes = scribbled(seed=2)
    engine = TesseractEngine(Config(workers=1, database=tmp_path / "db"))
    try:
        (out,) = engine.recognize([Page(Path("minutes.png"), 0, image, dpi=200)])
        assert normalize(out.text) == normalize("\n".join(MINUTES)), out.text
        assert out.layout is not None and out.layout.words
        assert all(w.box[3] < strokes for w in out.layout.words)
        assert {w.line for w in out.layout.words} == set(range(len(MINUTES)))
        assert not out.nonwords  # marks left out of a page of words: the page is words
        monkeypatch.setattr(tesseract, "JUNK_LINE_CONF", 0)  # every line kept
        (kept,) = engine.recognize([Page(Path("minutes.png"), 0, image, dpi=200)])
        assert normalize(kept.text).startswith(normalize("\n".join(MINUTES)))
        assert len(normalize(kept.text)) > len(normalize(out.text)) + 5, kept.text
        assert kept.layout is not None and any(w.box[3] > strokes for w in kept.layout.words)
    finally:
        engine.close()


def test_a_line_is_marks_only_when_read_unsurely_and_mostly_not_words() -> None:
    from ocrwatch.engines.tesseract import JUNK_LINE_CONF, junk_line

    assert junk_line("\\ N | ~ = S/ “\\ \\", 28.0)
    assert junk_line("Sf. a ‘Uy we /™", 30.5)
    assert not junk_line("Sf. a ‘Uy we /™", JUNK_LINE_CONF + 1)  # read surely: kept
    # Lines of the corpus read with little confidence that are text: kept.
    assert not junk_line("sammenfassen ::", 34.6)  # the end of a hyphenated word
    assert not junk_line("— 140 —", 30.0)  # a page number
    assert not junk_line("37.H.6;", 20.0)  # a file reference
    assert not junk_line("Washington, ay a is", 28.9)


def test_a_page_tesseract_cannot_take_fails_with_a_reason(tmp_path: Path) -> None:
    """A strip 3 pixels wide: Tesseract's recognition fails; the page says so and the
    engine reads the next page (read again with local thresholds after the failed
    reading, the strip aborted the process)."""
    engine = TesseractEngine(Config(workers=1, database=tmp_path / "db"))
    try:
        strip, fine = page(3, 40000, 300), Page(Path("ok.png"), 1, text_page(MINUTES), dpi=200)
        bad, good = engine.recognize([strip, fine])
        assert bad.error is not None and "Tesseract cannot read page 1 (3x40000" in bad.error
        assert good.error is None and "library should open longer" in normalize(good.text)
        layout = engine.layout(strip)  # for placing a model's text: no boxes, no crash
        assert layout.words == () and (layout.width, layout.height) == (3, 40000)
    finally:
        engine.close()
