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
from ocrwatch.scan import ascenders, inkcover, orient, osd
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
    found = detector.detect(orient.turn(corpus_page(name), fed))
    assert found.lines and (fed + found.turn) % 360 == 0, found
    assert not osd_calls


@needs_corpus
def test_an_engine_that_needs_the_script_asks_osd_only_after_an_unsure_reading(
        osd_calls: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Tesseract's script doubt needs OSD's script, but only when the reading is unsure:
    a page whose lines tell its turn is turned without OSD and marked unchecked, and
    OSD is asked for its script once, afterwards (a French typescript: no doubt). With
    the lines' check off, OSD decides at preparation and names the script then."""
    page = Page(Path("tapus_06.jpg"), 0, orient.turn(corpus_page("tapus_06.jpg"), 180),
                dpi=None)
    config = Config(languages=["fra"])
    tesseract, model = scanprep.ScanPrep(config, scripts=True), scanprep.ScanPrep(config)
    try:
        prepared = tesseract.prepare(page)
        assert prepared.turned == 180 and prepared.script_unchecked and not osd_calls
        assert tesseract.script_doubt(prepared) is None and len(osd_calls) == 1
        made = model.prepare(page)
        assert made.turned == 180 and not made.script_unchecked and len(osd_calls) == 1
        monkeypatch.setattr(orient, "LINES_CHECK", False)
        prepared = tesseract.prepare(page)
        assert prepared.turned == 180 and not prepared.script_unchecked
        assert len(osd_calls) == 2
    finally:
        tesseract.close()
        model.close()


@needs_corpus
@pytest.mark.parametrize("fed", [90, 270])
def test_a_sideways_page_is_decided_by_its_lines_turned_a_quarter(
        detector: orient.Detector, osd_calls: list[int], monkeypatch: pytest.MonkeyPatch,
        fed: int) -> None:
    """Lines running down the page: measured turned a quarter, their ascenders tell which
    quarter, and OSD is not asked; with SIDEWAYS_LINES off, OSD turns it as before."""
    page = orient.turn(corpus_page("tapus_06.jpg"), fed)
    found = detector.detect(page)
    assert found.lines and (fed + found.turn) % 360 == 0, found
    assert not osd_calls
    monkeypatch.setattr(orient, "SIDEWAYS_LINES", False)
    found = detector.detect(page)
    assert not found.lines and (fed + found.turn) % 360 == 0, found
    assert osd_calls


def on_table(sheet: Image.Image, margin: int = 100) -> Image.Image:
    """``sheet`` photographed lying on a darker table: the table all around it."""
    photo = Image.new("RGB", (sheet.width + 2 * margin, sheet.height + 2 * margin),
                      (90, 80, 70))
    photo.paste(sheet.convert("RGB"), (margin, margin))
    return photo


def card(name: str, top: float) -> Image.Image:
    """A business-card-sized sheet (1000 x 600 pixels, 85 x 51 mm at 300 dpi) holding a
    stretch of the corpus page ``name`` from ``top`` (a share of its height) down, with
    a white margin, as a card's print keeps off its edge."""
    page = corpus_page(name)
    width = round(page.width * 0.84)
    text = page.crop((round(page.width * 0.08), round(page.height * top),
                      round(page.width * 0.08) + width,
                      round(page.height * top) + round(width * 0.55)))
    sheet = Image.new("RGB", (1000, 600), "white")
    sheet.paste(text.resize((900, 495), Image.Resampling.LANCZOS), (50, 52))
    return sheet


@needs_corpus
@pytest.mark.parametrize("name", ["ocrd_deu_00.tif", "ocrd_deu_02.jpg"])
@pytest.mark.parametrize("fed", [0, 90, 180, 270])
def test_a_card_on_a_table_is_decided_by_the_lines_of_its_text(
        detector: orient.Detector, osd_calls: list[int], name: str, fed: int) -> None:
    """A card photographed on a darker table, fed any way: the table is ink to the mask
    and blurred both profiles, so the card went to OSD; measured on the text's box its
    lines tell, and OSD is not asked."""
    photo = orient.turn(on_table(card(name, 0.2)), fed)
    found = detector.detect(photo)
    assert found.lines and (fed + found.turn) % 360 == 0, found
    assert not osd_calls


@needs_corpus
def test_the_card_measured_on_the_whole_picture_goes_to_osd(
        detector: orient.Detector, osd_calls: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """What the text's box changes: with SHEET_LINES off the same card goes to OSD, which
    leaves it upright."""
    monkeypatch.setattr(orient, "SHEET_LINES", False)
    found = detector.detect(on_table(card("ocrd_deu_00.tif", 0.2)))
    assert not found.lines and found.turn == 0 and osd_calls, found


@needs_corpus
def test_the_text_box_holds_the_card_s_print_and_not_the_table() -> None:
    """The box is the card's print with a margin, inside the card; a page whose ink
    reaches no edge is its own box (None)."""
    photo = on_table(card("ocrd_deu_00.tif", 0.2))
    box = inkcover.text_box(photo)
    assert box is not None
    left, top, right, bottom = box
    assert 100 <= left < 170 and 100 <= top < 170, box  # the card lies at (100, 100)
    assert 1030 < right <= 1100 and 630 < bottom <= 700, box
    assert inkcover.text_box(drawn("Dear Sir, we thank you for your letter.", 20)) is None


@needs_corpus
@pytest.mark.parametrize("fed", [0, 90, 180, 270])
def test_a_photographed_page_is_turned_upright_by_its_lines(
        osd_calls: list[int], tmp_path: Path, fed: int) -> None:
    """A phone photo of a corpus letter (tilted on a table, light falling off, blur,
    JPEG), fed any way, prepared as for a model engine: straightened, then turned upright
    by its lines, OSD not asked."""
    from benchmarks import cases

    made = cases.phone_photo(CORPUS / "ehri_dan_00.jpg", tmp_path / "photo.jpg", seed=7)
    with Image.open(made) as opened:
        photo = orient.turn(opened.convert("RGB"), fed)
    prep = scanprep.ScanPrep(Config(languages=["dan"]))
    try:
        ready = prep.prepare(Page(Path("photo.jpg"), 0, photo, dpi=None))
    finally:
        prep.close()
    assert (fed + ready.turned) % 360 == 0, ready.turned
    assert not osd_calls


@needs_corpus
@pytest.mark.parametrize("fed", [0, 180])
def test_many_lines_at_a_lower_majority_decide(
        detector: orient.Detector, osd_calls: list[int], monkeypatch: pytest.MonkeyPatch,
        fed: int) -> None:
    """A German letter's 25 lines vote 21 to 4 (84%) upright on its text's box: under the
    85% of 12 lines, over the 80% that 20 lines need (no wrong way reached 67% from 20
    lines on the orientation and held-out-style sets); with the first rule alone, OSD
    decides. Upside down they vote 25 to 3, which the first rule takes."""
    page = orient.turn(corpus_page("ehri_deu_06.jpg"), fed)
    found = detector.detect(page)
    assert found.lines and (fed + found.turn) % 360 == 0, found
    assert not osd_calls
    if fed == 0:
        monkeypatch.setattr(ascenders, "RULES", ascenders.RULES[:1])
        assert not detector.detect(page).lines and osd_calls


@needs_corpus
@pytest.mark.parametrize("fed", [0, 90, 180, 270])
def test_few_lines_all_one_way_decide(
        detector: orient.Detector, osd_calls: list[int], monkeypatch: pytest.MonkeyPatch,
        fed: int) -> None:
    """The last page of a typescript (a PDF page drawn at 200 dpi), upright: 11 lines, all
    upright, under the 12 of the first rule, over the 8 at 95% of the third; fed any way,
    decided by its lines."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(CORPUS / "tapus_multipage_3p.pdf"))
    try:
        image = doc[2].render(scale=200 / 72).to_pil().convert("RGB")
    finally:
        doc.close()
    page = orient.turn(image, fed)
    found = detector.detect(page)
    assert found.lines and (fed + found.turn) % 360 == 0, found
    assert not osd_calls
    if fed == 0:  # upright, its 11 votes; with the first rule alone, OSD decides
        monkeypatch.setattr(ascenders, "RULES", ascenders.RULES[:1])
        assert not detector.detect(page).lines and osd_calls


def test_the_rules_of_votes() -> None:
    """Each rule's least votes and share: 12 at 85%, 20 at 80%, 8 at 95%."""
    assert ascenders.Lines(12, 2).turn == 0 and ascenders.Lines(2, 12).turn == 180
    assert ascenders.Lines(11, 2).turn is None
    assert ascenders.Lines(16, 4).turn == 0 and ascenders.Lines(15, 4).turn is None
    assert ascenders.Lines(8, 0).turn == 0 and ascenders.Lines(0, 9).turn == 180
    assert ascenders.Lines(7, 0).turn is None and ascenders.Lines(10, 1).turn is None


@needs_corpus
def test_a_page_of_too_few_lines_goes_to_osd(
        detector: orient.Detector, osd_calls: list[int]) -> None:
    """The top of a letter (its heading and first lines): too few votes to decide."""
    page = corpus_page("ehri_dan_00.jpg")
    top = page.crop((0, 0, page.width, page.height // 5))
    votes = ascenders.measure(top)
    assert votes.upright + votes.upside_down < ascenders.MIN_LINES, votes
    found = detector.detect(top)
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
        found = detector.detect(orient.turn(page, 180))
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
