"""Upright or upside down from a page's lines (scan/ascenders.py), before OSD, for engines
that need no script from OSD: real corpus pages, OSD's calls counted."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont

from ocrwatch.config import Config
from ocrwatch.core.domain import Page
from ocrwatch.scan import ascenders, orient, osd
from ocrwatch.scan import prepare as scanprep

pytestmark = pytest.mark.skipif(not shutil.which("tesseract"),
                                reason="tesseract is needed (apt install tesseract-ocr)")

# ../shared/corpus beside the checkout, or beside the folder of worktrees.
_HERE = Path(__file__).resolve().parent.parent
CORPUS = next((p for p in (_HERE.parent / "shared" / "corpus",
                           _HERE.parent.parent / "shared" / "corpus") if p.is_dir()),
              _HERE.parent / "shared" / "corpus")
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(),
                                  reason="the corpus (../shared/corpus) is not here")
DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


@pytest.fixture
def osd_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """OSD's calls (the real OSD, counted)."""
    calls: list[int] = []
    found = osd.OsdApi.found

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return found(self, *args, **kwargs)

    monkeypatch.setattr(osd.OsdApi, "found", counted)
    return calls


@pytest.fixture
def detector() -> Iterator[orient.Detector]:
    made = orient.Detector(None, ["fra"])
    if made.missing:
        pytest.skip(made.missing)
    yield made
    made.close()


def corpus_page(name: str) -> Image.Image:
    with Image.open(CORPUS / name) as opened:
        return opened.convert("RGB")


def drawn(text: str, lines: int, font: Path = DEJAVU) -> Image.Image:
    """An A4 page at 200 dpi with ``lines`` lines of ``text`` at 11 pt."""
    face = ImageFont.truetype(str(font), 31)
    page = Image.new("L", (1654, 2339), 255)
    draw = ImageDraw.Draw(page)
    wrapped = textwrap.wrap(" ".join([text] * 20), width=80)[:lines]
    for row, line in enumerate(wrapped):
        draw.text((160, 200 + row * 50), line, fill=0, font=face)
    return page


@needs_corpus
@pytest.mark.parametrize("name", ["tapus_06.jpg", "ehri_dan_00.jpg", "tapus_05.jpg"])
@pytest.mark.parametrize("fed", [0, 180])
def test_a_page_upright_or_upside_down_is_decided_by_its_lines_without_osd(
        detector: orient.Detector, osd_calls: list[int], name: str, fed: int) -> None:
    """A typescript, a letter and a typed table, upright and upside down: their lines'
    ascenders tell, and OSD is not asked."""
    found = detector.detect(orient.turn(corpus_page(name), fed), needs_script=False)
    assert found.lines and (fed + found.turn) % 360 == 0, found
    assert not osd_calls


@needs_corpus
def test_an_engine_that_needs_the_script_still_gets_osd(
        osd_calls: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Tesseract's script doubt needs OSD's script: its pages go to OSD as before; a
    model's preparation turns the same page without OSD. And with the switch off, OSD
    decides for the model too (what the benchmark compares)."""
    page = Page(Path("tapus_06.jpg"), 0, orient.turn(corpus_page("tapus_06.jpg"), 180),
                dpi=None)
    config = Config(languages=["fra"])
    tesseract, model = scanprep.ScanPrep(config, scripts=True), scanprep.ScanPrep(config)
    try:
        assert tesseract.prepare(page).turned == 180 and len(osd_calls) == 1
        assert model.prepare(page).turned == 180 and len(osd_calls) == 1
        monkeypatch.setattr(orient, "LINES_CHECK", False)
        assert model.prepare(page).turned == 180 and len(osd_calls) == 2
    finally:
        tesseract.close()
        model.close()


@needs_corpus
@pytest.mark.parametrize("fed", [90, 270])
def test_a_sideways_page_is_not_decided_by_its_lines(
        detector: orient.Detector, osd_calls: list[int], fed: int) -> None:
    """Lines running down the page: the axis check leaves it to OSD, which turns it."""
    found = detector.detect(orient.turn(corpus_page("tapus_06.jpg"), fed), needs_script=False)
    assert not found.lines and (fed + found.turn) % 360 == 0, found
    assert osd_calls


@needs_corpus
def test_a_page_of_too_few_lines_goes_to_osd(
        detector: orient.Detector, osd_calls: list[int]) -> None:
    """The top of a letter (its heading and first lines): too few votes to decide."""
    page = corpus_page("ehri_dan_00.jpg")
    top = page.crop((0, 0, page.width, page.height // 5))
    votes = ascenders.measure(top)
    assert votes.upright + votes.upside_down < ascenders.MIN_LINES, votes
    found = detector.detect(top, needs_script=False)
    assert not found.lines and osd_calls, found


@pytest.mark.skipif(not DEJAVU.is_file(), reason="DejaVu fonts are needed (fonts-dejavu-core)")
def test_languages_not_written_in_latin_go_to_osd(osd_calls: list[int]) -> None:
    """A Cyrillic letter read with ``rus``: the lines' measure was made for Latin print,
    so OSD decides, as before."""
    page = drawn("Уважаемый Иван Петрович, благодарим вас за письмо от двенадцатого марта. "
                 "Счёт номер 4711 оплачен полностью, и мы будем рады видеть вас снова.", 30)
    detector = orient.Detector(None, ["rus"])
    if detector.missing:
        pytest.skip(detector.missing)
    try:
        assert not detector.latin
        found = detector.detect(orient.turn(page, 180), needs_script=False)
    finally:
        detector.close()
    assert not found.lines and osd_calls, found
    assert ascenders.latin(["eng", "fra", "deu"]) and ascenders.latin(["script/Latin"])
    assert not ascenders.latin(["eng", "ell"]) and not ascenders.latin([])


OTHER_SCRIPTS = {
    "Cyrillic": "Уважаемый Иван Петрович, благодарим вас за письмо от двенадцатого марта. "
                "Счёт номер 4711 оплачен полностью, и мы будем рады видеть вас снова.",
    "Greek": "Αγαπητέ κύριε Παπαδόπουλε, σας ευχαριστούμε για την επιστολή σας. Το "
             "τιμολόγιο αριθμός 4711 έχει πληρωθεί πλήρως και θα χαρούμε να σας δούμε.",
    "Hebrew": "שלום רב, אנו מודים לך על מכתבך מיום שנים עשר במרץ. החשבון מספר 4711 שולם "
              "במלואו ואנו שמחים לראותך שוב בחנות שלנו",
}


@pytest.mark.skipif(not DEJAVU.is_file(), reason="DejaVu fonts are needed (fonts-dejavu-core)")
@pytest.mark.parametrize("script", sorted(OTHER_SCRIPTS))
@pytest.mark.parametrize("font", ["DejaVuSans.ttf", "DejaVuSerif.ttf"])
def test_a_page_in_another_script_read_with_latin_languages_is_never_turned_wrong(
        script: str, font: str) -> None:
    """A model's user with ``languages = ["eng"]`` may feed a Cyrillic, Greek or Hebrew
    page: its lines either vote as Latin print does (capitals and tall letters over the
    band) or not clearly, in which case OSD decides; never the wrong way."""
    page = drawn(OTHER_SCRIPTS[script], 30, DEJAVU.with_name(font))
    for fed in (0, 180):
        decided = ascenders.measure(orient.turn(page, fed)).turn
        assert decided is None or (fed + decided) % 360 == 0, (fed, decided)
