"""PDF text layers: a born-digital page is taken from its own text, a bad layer is not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import normalize, text_page

from ocrwatch.config import Config, validate
from ocrwatch.core.errors import ConfigError
from ocrwatch.pages.decode import iter_pages
from ocrwatch.pages.pdftext import garbage

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
pytestmark = pytest.mark.skipif(not DEJAVU.is_file(),
                                reason="needs fonts-dejavu-core (.ci/apt-packages.txt)")

LETTER = ("Dear Ms Lindqvist,\nthank you for your letter of 3 March 2024 about the harbour "
          "office.\nThe invoice (no. 4711) for €1,250.00 is paid; a receipt follows.\n"
          "Kind regards, Jørgen Müller")
OTHER = "Bananas are yellow and grow in warm countries far from here"


def _pdf(path: Path, pages: list[dict[str, object]]) -> Path:
    """A PDF drawn with fpdf2: each page has ``text`` (DejaVu Sans), optionally
    ``invisible`` text, and an ``image`` drawn ``over`` or under the text."""
    from fpdf import FPDF
    from fpdf.enums import TextMode

    pdf = FPDF(format="A4")
    pdf.set_compression(False)  # so that a test can damage the font's Unicode map
    pdf.add_font("DejaVu", fname=str(DEJAVU))
    for spec in pages:
        pdf.add_page()
        pdf.set_font("DejaVu", size=11)
        image = spec.get("image")
        if image is not None and not spec.get("over"):
            pdf.image(image, x=0, y=0, w=210, h=297)
        if spec.get("text"):
            pdf.text_mode = TextMode.INVISIBLE if spec.get("invisible") else TextMode.FILL
            pdf.set_xy(20, 30)
            pdf.multi_cell(w=170, h=6, text=str(spec["text"]))
            pdf.text_mode = TextMode.FILL
        if image is not None and spec.get("over"):
            pdf.image(image, x=0, y=0, w=210, h=297)
    pdf.output(str(path))
    return path


def _remap(path: Path, targets: list[int]) -> Path:
    """Point every glyph of the font's Unicode map at other characters, as a PDF whose
    font lost its real map does (same byte lengths, so the file stays valid)."""
    data = path.read_bytes()
    n = iter(range(10**6))

    def swap(m: re.Match[bytes]) -> bytes:
        if m.group(1) in (b"0000", b"0020"):
            return m.group(0)
        return b"<%s> <%04X>" % (m.group(1), targets[next(n) % len(targets)])

    start = data.index(b"beginbfchar")
    end = data.index(b"endbfchar", start)
    body = re.sub(rb"<([0-9A-F]{4})> <([0-9A-F]{4})>", swap, data[start:end])
    path.write_bytes(data[:start] + body + data[end:])
    return path


def _scan(lines: list[str], path: Path) -> Path:
    text_page(lines, width=1700, size=40).save(path)
    return path


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(inbox=[tmp_path], database=tmp_path / "db.sqlite3")


def test_a_born_digital_page_is_taken_from_its_text_exactly(tmp_path: Path,
                                                           config: Config) -> None:
    path = _pdf(tmp_path / "letter.pdf", [{"text": LETTER}, {"text": LETTER.upper()}])
    pages = list(iter_pages(path, config, None, text_layer=True))
    assert [p.text is not None for p in pages] == [True, True]
    assert normalize(pages[0].text or "") == normalize(LETTER)
    assert (pages[1].text or "").split() == LETTER.upper().split()
    assert pages[0].image.size == (1, 1)  # nothing drawn to read it
    # Drawn small for its thumbnail only: the letter's print is on it.
    from ocrwatch.pages.pdfpages import SKETCH_SIDE
    sketch = pages[0].sketch
    assert sketch is not None and sketch.mode == "RGB"
    assert max(sketch.size) == SKETCH_SIDE and sketch.height > sketch.width  # A4, upright
    assert sketch.convert("L").getextrema()[0] < 128
    # A hyphen that ends a line stays a hyphen and a line break (PDFium says U+FFFE).
    hyphens = "the delayed Zu-\nzuges of the consulates and their Wei-\nsungen were sent"
    (page,) = iter_pages(_pdf(tmp_path / "h.pdf", [{"text": hyphens}]), config, None,
                         text_layer=True)
    assert page.text == hyphens + "\n"
    # Without text_layer (what the searchable PDF asks for), every page is drawn.
    drawn = list(iter_pages(path, config, None))
    assert all(p.text is None and p.image.width > 1000 for p in drawn)


def test_a_mixed_pdf_is_decided_page_by_page(tmp_path: Path, config: Config) -> None:
    scan = _scan(["a scanned page", "with no text layer"], tmp_path / "scan.png")
    path = _pdf(tmp_path / "mixed.pdf", [{"text": LETTER}, {"image": str(scan)},
                                         {"text": LETTER}])
    pages = list(iter_pages(path, config, None, text_layer=True))
    assert [p.text is not None for p in pages] == [True, False, True]
    assert pages[1].image.width > 1000 and pages[1].dpi == config.pdf_dpi


@pytest.mark.parametrize(("targets", "why"), [
    (list(range(0xE000, 0xE040)), "broken encoding"),  # private-use characters
    ([0xBC, 0xB7, 0xBD, 0xAE, 0xAC, 0xBB, 0xDD, 0xF8, 0x71, 0x5A, 0x24], "glyph soup"),
])
def test_a_garbage_layer_is_read_with_ocr(tmp_path: Path, config: Config,
                                          targets: list[int], why: str) -> None:
    from ocrwatch.pages import pdftext

    path = _remap(_pdf(tmp_path / "broken.pdf", [{"text": LETTER}]), targets)
    (page,) = iter_pages(path, config, None, text_layer=True)
    assert page.text is None and page.image.width > 1000
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))
    try:
        decision = pdftext.decide(doc[0])
        assert decision.text is None and why in decision.reason
        # pdf_text = "text" takes any layer, as asked.
        assert pdftext.decide(doc[0], "text").text
    finally:
        doc.close()


@pytest.mark.parametrize("how", ["invisible", "over"])
def test_text_hidden_under_an_image_that_says_something_else_is_not_taken(
        tmp_path: Path, config: Config, how: str) -> None:
    scan = _scan([OTHER[:30], OTHER[30:]], tmp_path / "other.png")
    spec: dict[str, object] = {"text": LETTER, "image": str(scan)}
    spec["invisible" if how == "invisible" else "over"] = True
    path = _pdf(tmp_path / "hidden.pdf", [spec])
    (page,) = iter_pages(path, config, None, text_layer=True)
    assert page.text is None  # what the page shows is read instead


def test_pdf_text_ocr_reads_every_page(tmp_path: Path, config: Config) -> None:
    path = _pdf(tmp_path / "letter.pdf", [{"text": LETTER}])
    config.pdf_text = "ocr"
    (page,) = iter_pages(path, config, None, text_layer=True)
    assert page.text is None
    config.pdf_text = "sometimes"
    with pytest.raises(ConfigError, match="pdf_text"):
        validate(config)


def test_garbage_judges_text_not_language() -> None:
    assert garbage(LETTER) is None
    assert garbage("Ελληνικά κείμενα και αριθμοί 2024, όλα καλά εδώ.") is None
    assert garbage("請求書の金額は一万二千円です。支払期限は三月末日です。") is None
    assert garbage("ЗАКАЗ № 15 от 12.03.2024 — оплачен полностью") is None
    assert "broken encoding" in (garbage("\x03\x04\x05\x06 \x07\x08\x09\x0b\x0c") or "")
    assert "broken encoding" in (garbage("Hello \ufffd\ufffd\ufffd\ufffd world") or "")
    assert "glyph soup" in (garbage("Ý¼·½ ø¿®·¬» ¬¸» ø¿®¾±«® ±ºº·½»") or "")
    assert "glyph soup" in (garbage("hElLo wOrLd tHiS iS nOt tExT aT aLl") or "")


def test_the_daemon_takes_the_layer_and_reads_only_the_scanned_page(tmp_path: Path) -> None:
    from helpers import wait_for

    from ocrwatch.daemon import Daemon
    from ocrwatch.store.index import search
    from ocrwatch.testing.fake import FakeEngine

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.3,
                    engine="fake")
    engine = FakeEngine()
    daemon = Daemon(config, engine=engine)
    daemon.start()
    try:
        scan = _scan(["a scanned page"], tmp_path / "scan.png")
        path = _pdf(inbox / "mixed.pdf", [{"text": LETTER}, {"image": str(scan)}])
        wait_for(lambda: (job := daemon.jobs.known(path)) is not None
                 and job.state.value in ("done", "failed"), 30, "the PDF")
        pages = (inbox / "mixed.txt").read_text(encoding="utf-8").split("\f")
        assert normalize(pages[0]) == normalize(LETTER)
        assert "fake text of mixed.pdf page 2" in pages[1]
        assert [b for b in engine.batches if b] == [[("mixed.pdf", 1)]]  # page 2 only
        assert [h.page for h in search(daemon.db, "Lindqvist")] == [1]
        # The page taken from its text has a picture of itself, like the scanned one.
        from PIL import Image

        job = daemon.jobs.known(path)
        assert job is not None and job.sha256
        for number in (1, 2):
            with Image.open(daemon.thumbs.path(job.sha256, number)) as thumb:
                assert min(thumb.size) > 100 and thumb.convert("L").getextrema()[0] < 128
    finally:
        daemon.close()


def test_pdfium_is_never_entered_by_two_threads_at_once(
        tmp_path: Path, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """PDFium is not thread-safe, even across documents. The daemon's preparers open PDFs
    at the same time and its readers check a PDF's own text for the PDF output: every
    PDFium call they make is counted here, and no two may overlap."""
    import threading
    import time

    import pypdfium2 as pdfium

    from ocrwatch.results import pdfout

    inside, most, guard = [0], [0], threading.Lock()

    def counted(real):  # type: ignore[no-untyped-def]
        def call(*args, **kwargs):  # type: ignore[no-untyped-def]
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            try:
                time.sleep(0.005)  # a window wide enough for another thread to step in
                return real(*args, **kwargs)
            finally:
                with guard:
                    inside[0] -= 1
        return call

    for cls, name in ((pdfium.PdfDocument, "__init__"), (pdfium.PdfDocument, "__getitem__"),
                      (pdfium.PdfPage, "render"), (pdfium.PdfPage, "get_textpage"),
                      (pdfium.PdfTextPage, "get_text_range"), (pdfium.PdfPage, "close")):
        monkeypatch.setattr(cls, name, counted(getattr(cls, name)))
    born = [_pdf(tmp_path / f"born{n}.pdf", [{"text": LETTER}, {"text": OTHER}])
            for n in range(2)]
    scanned = [_pdf(tmp_path / f"scan{n}.pdf", [{"image": _scan([OTHER], tmp_path /
                                                                 f"s{n}.png")}] * 2)
               for n in range(2)]
    failures: list[BaseException] = []

    def prepare(path: Path) -> None:
        try:
            for _ in range(3):
                pages = list(iter_pages(path, config, 1540, text_layer=True))
                assert len(pages) == 2
        except BaseException as exc:
            failures.append(exc)

    def own_text(path: Path) -> None:
        try:
            for _ in range(3):
                with path.open("rb") as fh:
                    assert pdfout._pages_with_text(fh) == ({0, 1} if "born" in path.name
                                                           else set())
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=prepare, args=(p,)) for p in [*born, *scanned]]
    threads += [threading.Thread(target=own_text, args=(p,)) for p in [*born, *scanned]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures
    assert most[0] == 1  # eight threads, and PDFium only ever entered by one
