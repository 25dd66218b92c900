"""The searchable PDF: text, word positions, unchanged images, page counts, PDF/A.

Real parts throughout: real Tesseract (engine and word boxes), real poppler tools reading
the output (``pdftotext``, ``pdftotext -bbox``, ``pdfimages``), real Ghostscript for PDF/A.
The model path uses an engine that returns the page's known text without positions, as
the model does, over Tesseract's real boxes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import helpers
import pikepdf
import pytest
from helpers import wait_for
from PIL import Image

from ocrwatch.config import Config
from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.layout import PageLayout, Word
from ocrwatch.daemon import Daemon
from ocrwatch.engines.base import Engine
from ocrwatch.intake.inbox_files import wanted
from ocrwatch.results.align import place_text
from ocrwatch.results.sidecar import choose_stem
from ocrwatch.testing.fake import FakeEngine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.pdf_output import DPI, bbox_words, page_lines, synthetic_page, word_offsets

pytestmark = pytest.mark.skipif(
    not (shutil.which("pdftotext") and shutil.which("pdfimages")),
    reason="poppler-utils is not installed (apt install poppler-utils)")

# How far a word of the layer may sit from its true box: centre to centre, in points.
# The text is 44 px (16 pt) high at 200 dpi; measured offsets are about 2-4 pt.
TOLERANCE_PT = 6.0


class KnownTextEngine(FakeEngine):
    """Reads like the model: the page's known text, and no word positions."""

    name = "known-text"

    def __init__(self, texts: dict[str, list[str]]) -> None:
        super().__init__(max_side=1540)
        self.texts = texts

    def recognize(self, pages: Sequence[Page]) -> list[PageText]:
        out = []
        for p in pages:
            text = self.texts[p.source.name][p.index]
            out.append(PageText(markdown=text, text=text))
        return out


def make_config(tmp_path: Path, **kw: object) -> Config:
    values: dict[str, object] = dict(engine="tesseract", workers=1,
                                     outputs=["md", "txt", "pdf"], pdfa="never")
    values.update(kw)
    return helpers.make_config(tmp_path, **values)


def make_inbox(tmp_path: Path, **kw: object) -> tuple[Config, Path]:
    """The config and its inbox, made."""
    config = make_config(tmp_path, **kw)
    config.inbox[0].mkdir()
    return config, config.inbox[0]


def pdf_text(pdf: Path) -> str:
    """The PDF's text as poppler's pdftotext reads it (pages split by form feeds)."""
    return subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout


def read_all(daemon: Daemon, *paths: Path) -> None:
    def finished() -> bool:
        jobs = [daemon.jobs.known(p) for p in paths]
        return all(j is not None and j.state.value in ("done", "failed") for j in jobs)

    wait_for(finished, 120, "the files to be read")
    for p in paths:
        job = daemon.jobs.known(p)
        assert job is not None and job.state.value == "done", (p, job)


def read_one(config: Config, src: Path, engine: Engine | None = None) -> list[str | None]:
    """A daemon on ``config`` reads ``src``; each page's warnings (None: none)."""
    with Daemon(config, engine=engine) as daemon:
        read_all(daemon, src)
        return [r["warnings"] for r in daemon.db.query("SELECT warnings FROM pages")]


def all_warnings(config: Config, src: Path, engine: Engine | None = None) -> str:
    return " ".join(w or "" for w in read_one(config, src, engine))


def pdf_images(pdf: Path, folder: Path) -> list[Image.Image]:
    """Every image of ``pdf`` as pixels, in page order (``pdfimages -png``)."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["pdfimages", "-png", str(pdf), str(folder / "img")], check=True,
                   timeout=60)
    return [Image.open(p).convert("RGB") for p in sorted(folder.glob("img-*.png"))]


def same_pixels(a: Image.Image, b: Image.Image) -> bool:
    return a.size == b.size and a.convert("RGB").tobytes() == b.convert("RGB").tobytes()


def write_page(path: Path, seed: int) -> tuple[list[str], list[object]]:
    lines = page_lines(seed)
    image, truth = synthetic_page(lines)
    image.save(path, dpi=(DPI, DPI))
    return lines, truth  # type: ignore[return-value]


def test_tesseract_engine_pdf_holds_text_on_true_positions_over_unchanged_image(
        tmp_path: Path) -> None:
    config, inbox = make_inbox(tmp_path)
    src = inbox / "letter.png"
    lines, truth = write_page(src, 1)
    read_one(config, src)
    out = inbox / "letter.ocr.pdf"
    text = pdf_text(out)
    for line in lines:
        assert line in text
    offsets = word_offsets(bbox_words(out)[0], truth)  # type: ignore[arg-type]
    assert len(offsets) == sum(len(line.split()) for line in lines)
    assert max(offsets) <= TOLERANCE_PT, offsets
    with pikepdf.open(out) as pdf:
        assert len(pdf.pages) == 1
    (image,) = pdf_images(out, tmp_path / "images")
    assert same_pixels(image, Image.open(src))
    # The PDF is an output, never read back as a new file.
    assert not wanted(out, config.inbox)


def test_model_text_is_placed_on_tesseract_boxes(tmp_path: Path) -> None:
    config, inbox = make_inbox(tmp_path, engine="fake")
    src = inbox / "memo.png"
    lines, truth = write_page(src, 4)
    engine = KnownTextEngine({"memo.png": ["\n".join(lines)]})
    warnings = read_one(config, src, engine)
    assert warnings[0] is None  # aligned word by word: no warning
    out = inbox / "memo.ocr.pdf"
    found = bbox_words(out)[0]
    assert [w.text for w in found] == [w for line in lines for w in line.split()]
    offsets = word_offsets(found, truth)  # type: ignore[arg-type]
    assert max(offsets) <= TOLERANCE_PT, offsets
    (image,) = pdf_images(out, tmp_path / "images")
    assert same_pixels(image, Image.open(src))


def test_unalignable_model_text_gets_a_line_layer_and_a_warning(tmp_path: Path) -> None:
    config, inbox = make_inbox(tmp_path, engine="fake")
    src = inbox / "other.png"
    write_page(src, 2)
    model = "Zwölf Boxkämpfer jagen Viktor quer\nüber den großen Sylter Deich"
    engine = KnownTextEngine({"other.png": [model]})
    warnings = read_one(config, src, engine)
    assert "placed by line" in (warnings[0] or "")
    text = pdf_text(inbox / "other.ocr.pdf")
    assert "Zwölf Boxkämpfer jagen Viktor quer" in text
    assert "über den großen Sylter Deich" in text


def test_multipage_pdf_in_multipage_pdf_out(tmp_path: Path) -> None:
    config, inbox = make_inbox(tmp_path)
    pages = [synthetic_page(page_lines(seed, 3))[0] for seed in (5, 6, 7)]
    src = inbox / "report.pdf"
    pages[0].save(src, "PDF", resolution=DPI, save_all=True, append_images=pages[1:])
    read_one(config, src)
    out = inbox / "report.ocr.pdf"
    with pikepdf.open(src) as a, pikepdf.open(out) as b:
        assert len(a.pages) == len(b.pages) == 3
    texts = pdf_text(out).split("\f")
    for seed, text in zip((5, 6, 7), texts, strict=False):
        assert page_lines(seed, 3)[0] in text
    before = pdf_images(src, tmp_path / "in")
    after = pdf_images(out, tmp_path / "out")
    assert len(before) == len(after) == 3
    assert all(same_pixels(x, y) for x, y in zip(before, after, strict=True))


def test_pdfa_is_made_by_pikepdf_without_ghostscript(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrwatch.results import pdfout

    monkeypatch.setattr(pdfout, "ghostscript", lambda: None)
    config, inbox = make_inbox(tmp_path, pdfa="auto")
    src = inbox / "a.png"
    lines, _ = write_page(src, 3)
    read_one(config, src)
    out = inbox / "a.ocr.pdf"
    with pikepdf.open(out) as pdf:
        meta = pdf.open_metadata()
        assert meta.get("pdfaid:part") == "2"
        assert meta.get("pdfaid:conformance") == "B"
        assert "/OutputIntents" in pdf.Root
    # pikepdf's PDF/A-2b validator (an allowlist: it passes only what it knows conforms).
    from pikepdf import pdfa

    report = pdfa.validate_written(out, "2b")
    assert report.passed and report.findings == [], report.findings
    text = pdf_text(out)
    assert lines[0] in text
    (image,) = pdf_images(out, tmp_path / "images")
    assert same_pixels(image, Image.open(src))


def _jpeg_with_a_profile(path: Path) -> None:
    """A scan as cameras and scanners write it: JPEG with an ICC profile of its own (the
    kind Ghostscript's PDF/A re-encoded: 3.17x for a corpus scan)."""
    from PIL import ImageCms

    image, _ = synthetic_page(page_lines(5))
    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
    image.save(path, quality=85, dpi=(DPI, DPI), icc_profile=profile.tobytes())


@pytest.mark.parametrize("kind", ["jpeg", "png", "pdf"])
def test_pdfa_keeps_every_page_stream_and_the_size(tmp_path: Path, kind: str) -> None:
    """pdfa = "auto": the PDF/A holds the original's image bytes as they are, and is
    at most 1.1x the original plus its text layer (Ghostscript's was up to 10x)."""
    from pikepdf import pdfa

    config, inbox = make_inbox(tmp_path, pdfa="auto")
    (tmp_path / "plain").mkdir()
    plain_config, plain_inbox = make_inbox(tmp_path / "plain", pdfa="never")
    if kind == "jpeg":
        src = inbox / "scan.jpg"
        _jpeg_with_a_profile(src)
    elif kind == "png":
        src = inbox / "scan.png"
        write_page(src, 4)
    else:
        src = inbox / "scan.pdf"
        jpg = tmp_path / "page.jpg"
        _jpeg_with_a_profile(jpg)
        import img2pdf

        src.write_bytes(img2pdf.convert(str(jpg)))
    twin = plain_inbox / src.name
    twin.write_bytes(src.read_bytes())
    read_one(config, src)
    read_one(plain_config, twin)
    out, plain = src.with_suffix(".ocr.pdf"), twin.with_suffix(".ocr.pdf")
    assert pdfa.validate_written(out, "2b").passed
    layer = plain.stat().st_size - src.stat().st_size
    assert out.stat().st_size <= 1.1 * (src.stat().st_size + max(0, layer)), (
        out.stat().st_size, src.stat().st_size, layer)
    with pikepdf.open(out) as a, pikepdf.open(plain) as b:
        (got,) = [img.read_raw_bytes() for img in a.pages[0].Resources.XObject.values()
                  if img.get("/Subtype") == "/Image"]
        (want,) = [img.read_raw_bytes() for img in b.pages[0].Resources.XObject.values()
                   if img.get("/Subtype") == "/Image"]
        assert got == want  # the same stream as in the plain PDF, byte for byte
    if kind == "jpeg":
        assert got == src.read_bytes()


def test_a_pdf_pikepdf_cannot_certify_stays_plain_and_says_why(tmp_path: Path) -> None:
    """A born-digital PDF whose font is not embedded (fpdf2's core Helvetica) is no
    PDF/A without changing it: with pdfa = "auto" it stays a plain PDF, with a reason."""
    from fpdf import FPDF

    config, inbox = make_inbox(tmp_path, pdfa="auto")
    doc = FPDF()
    doc.add_page()
    doc.set_font("Helvetica", size=14)
    doc.cell(text="The harbour office opens at nine")
    src = inbox / "letter.pdf"
    doc.output(str(src))
    warnings = all_warnings(config, src)
    assert "PDF: not PDF/A: pikepdf's PDF/A-2b check did not pass" in warnings, warnings
    out = inbox / "letter.ocr.pdf"
    with pikepdf.open(out) as pdf:
        assert pdf.open_metadata().get("pdfaid:part") is None
    assert "harbour office" in pdf_text(out)


def test_jpeg_bytes_go_into_the_pdf_unchanged(tmp_path: Path) -> None:
    config, inbox = make_inbox(tmp_path)
    src = inbox / "photo.jpg"
    image, _ = synthetic_page(page_lines(8))
    image.save(src, quality=80, dpi=(DPI, DPI))
    read_one(config, src)
    with pikepdf.open(inbox / "photo.ocr.pdf") as pdf:
        (raw,) = [img.read_raw_bytes() for img in pdf.pages[0].Resources.XObject.values()]
    assert raw == src.read_bytes()


def test_same_stem_originals_get_their_own_pdfs(tmp_path: Path) -> None:
    config, inbox = make_inbox(tmp_path, engine="fake")
    png, jpg = inbox / "scan.png", inbox / "scan.jpg"
    write_page(png, 1)
    write_page(jpg, 2)
    (inbox / "notes.ocr.pdf").write_bytes(b"%PDF-1.4 the user's own")
    (inbox / "notes.png").write_bytes(png.read_bytes() + b"\0")
    engine = KnownTextEngine({"scan.png": ["one"], "scan.jpg": ["two"], "notes.png": ["x"]})
    with Daemon(config, engine=engine) as daemon:
        read_all(daemon, png, jpg, inbox / "notes.png")
    pdfs = sorted(p.name for p in inbox.glob("*.ocr.pdf"))
    assert pdfs == ["notes.ocr.pdf", "notes.png.ocr.pdf", "scan.jpg.ocr.pdf", "scan.ocr.pdf"]
    assert (inbox / "notes.ocr.pdf").read_bytes() == b"%PDF-1.4 the user's own"


def test_a_foreign_pdf_sidecar_name_is_not_taken(tmp_path: Path) -> None:
    (tmp_path / "scan.ocr.pdf").write_bytes(b"%PDF mine")
    assert choose_stem(tmp_path / "scan.png", tmp_path, set(), set()).name == "scan.png"
    # Our own earlier output under that stem is ours to replace.
    own = {tmp_path / "scan.md", tmp_path / "scan.txt"}
    assert choose_stem(tmp_path / "scan.png", tmp_path, set(), own).name == "scan"


# -- alignment -------------------------------------------------------------------------
def boxes(*lines: list[str]) -> PageLayout:
    """Tesseract-like words: 20 px a character, 10 px gaps, 50 px a line."""
    words = []
    for n, line in enumerate(lines):
        x = 10
        for w in line:
            words.append(Word(w, (x, 10 + 50 * n, x + 20 * len(w), 40 + 50 * n), n))
            x += 20 * len(w) + 10
    return PageLayout(1000, 400, tuple(words))


def test_substituted_words_take_their_partners_box() -> None:
    tess = boxes(["The", "harb0ur", "office"], ["opens", "at", "nlne"])
    layout, warnings = place_text("The harbour office\nopens at nine", tess)
    assert warnings == []
    assert [(w.text, w.box) for w in layout.words] == [
        (w.text, t.box) for w, t in zip(layout.words, tess.words, strict=True)]
    assert [w.text for w in layout.words] == ["The", "harbour", "office", "opens", "at", "nine"]


def test_a_word_only_the_model_read_goes_on_its_line() -> None:
    tess = boxes(["The", "office", "opens"], ["at", "nine", "sharp"])
    layout, warnings = place_text("The office opens daily\nat nine sharp", tess)
    assert warnings == []
    daily = next(w for w in layout.words if w.text == "daily")
    opens = next(w for w in layout.words if w.text == "opens")
    assert daily.line == opens.line == 0
    assert daily.box[0] > opens.box[2]  # after its neighbour, on the same line
    assert daily.box[1] == opens.box[1]


def test_one_box_read_as_two_words_is_split() -> None:
    tess = boxes(["New", "York-based", "firm"])
    layout, _ = place_text("New York based firm", tess)
    york, based = layout.words[1], layout.words[2]
    whole = tess.words[1].box
    assert york.box[0] == whole[0] and based.box[2] == whole[2]
    assert york.box[2] <= based.box[0]


def test_no_tesseract_words_gives_a_line_layer() -> None:
    layout, warnings = place_text("a line\nanother line", PageLayout(1000, 1400))
    assert layout.by_line and [w.text for w in layout.words] == ["a", "line", "another", "line"]
    assert [w.line for w in layout.words] == [0, 0, 1, 1]
    assert "placed by line" in warnings[0]
    assert layout.words[1].box[3] <= layout.words[2].box[1]
    assert layout.words[0].box[2] < layout.words[1].box[0]


def test_a_pdf_with_text_of_its_own_does_not_get_it_twice(tmp_path: Path) -> None:
    config, inbox = make_inbox(tmp_path)
    first = inbox / "first.png"
    lines, _ = write_page(first, 9)
    with Daemon(config) as daemon:
        read_all(daemon, first)
        again = inbox / "again.pdf"
        shutil.copy(inbox / "first.ocr.pdf", again)  # already searchable
        read_all(daemon, again)
    text = pdf_text(inbox / "again.ocr.pdf")
    assert text.count(lines[0]) == 1


def test_doctor_says_what_the_pdf_output_needs(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrwatch.doctor import checks as doctor

    assert doctor.check_pdf(make_config(tmp_path, outputs=["md"]))[0].ok
    # The model engines need Tesseract for word positions once the PDF is asked for.
    vllm_pdf = make_config(tmp_path, engine="vllm")
    assert doctor.check_tesseract(vllm_pdf)[0].name == "Tesseract languages"
    vllm_md = make_config(tmp_path, engine="vllm", outputs=["md"])
    assert "not needed" in doctor.check_tesseract(vllm_md)[0].detail
    monkeypatch.setenv("PATH", str(tmp_path))  # no Ghostscript on it
    check = doctor.check_pdf(make_config(tmp_path, pdfa="auto"))[0]
    assert check.ok and "PDF/A-2b made by pikepdf" in check.detail  # Ghostscript not needed
    always = doctor.check_pdf(make_config(tmp_path, pdfa="always"))[0]
    assert not always.ok and "apt install ghostscript" in always.fix


# -- when the PDF cannot be made as asked ------------------------------------------------
def test_a_pdf_that_cannot_be_written_costs_only_the_pdf(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrwatch.results import pdfout

    def broken(*args: object, **kw: object) -> list[str]:
        raise pikepdf.PdfError("unreadable cross-reference table")

    monkeypatch.setattr(pdfout, "build", broken)
    config, inbox = make_inbox(tmp_path, engine="fake")
    src = inbox / "odd.png"
    write_page(src, 1)
    warnings = all_warnings(config, src, KnownTextEngine({"odd.png": ["some text"]}))
    assert "no searchable PDF was written: unreadable cross-reference table" in warnings
    assert sorted(p.name for p in inbox.iterdir()) == ["odd.md", "odd.png", "odd.txt"]


def test_without_tesseract_data_the_model_text_gets_a_line_layer(tmp_path: Path) -> None:
    config, inbox = make_inbox(tmp_path, engine="fake", languages=["qqq"])  # no such data
    src = inbox / "memo.png"
    lines, _ = write_page(src, 2)
    engine = KnownTextEngine({"memo.png": ["\n".join(lines)]})
    warnings = all_warnings(config, src, engine)
    assert "Tesseract cannot find word positions" in warnings
    assert "placed by line" in warnings
    text = pdf_text(inbox / "memo.ocr.pdf")
    for line in lines:
        assert line in text


def test_a_failing_ghostscript_leaves_the_plain_pdf(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pdfa = "always" sends what pikepdf cannot certify through Ghostscript; when that
    fails too, the plain PDF is kept and the reason said."""
    from fpdf import FPDF

    from ocrwatch.results import pdfout

    false = shutil.which("false")
    assert false is not None
    monkeypatch.setattr(pdfout, "ghostscript", lambda: false)
    config, inbox = make_inbox(tmp_path, pdfa="always")
    doc = FPDF()
    doc.add_page()
    doc.set_font("Helvetica", size=14)
    doc.cell(text="The harbour office opens at nine")
    src = inbox / "letter.pdf"
    doc.output(str(src))
    warnings = all_warnings(config, src)
    assert "PDF: not PDF/A: Ghostscript could not make a PDF/A (exit 1" in warnings
    out = inbox / "letter.ocr.pdf"
    with pikepdf.open(out) as pdf:
        assert pdf.open_metadata().get("pdfaid:part") is None
    assert "harbour office" in pdf_text(out)
    assert not [p for p in inbox.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(("orientation", "turn"), [(6, 90), (3, 180), (8, 270)])
def test_a_jpeg_turned_by_its_exif_tag_gets_words_where_they_are_shown(
        tmp_path: Path, orientation: int, turn: int) -> None:
    config, inbox = make_inbox(tmp_path)
    lines = page_lines(orientation, 4)
    upright, truth = synthetic_page(lines)
    # Stored turned, with the tag that tells viewers how to turn it back.
    stored = upright.rotate(turn, expand=True)
    exif = Image.Exif()
    exif[0x0112] = orientation
    src = inbox / "turned.jpg"
    stored.save(src, quality=95, dpi=(DPI, DPI), exif=exif.tobytes())
    read_one(config, src)
    out = inbox / "turned.ocr.pdf"
    with pikepdf.open(out) as pdf:
        assert int(pdf.pages[0].obj.get("/Rotate", 0)) % 360 == turn
    offsets = word_offsets(bbox_words(out)[0], truth)  # type: ignore[arg-type]
    assert max(offsets) <= TOLERANCE_PT, offsets


def test_a_multipage_tiff_gives_a_multipage_pdf_with_its_pixels(tmp_path: Path) -> None:
    config, inbox = make_inbox(tmp_path, engine="fake")
    frames = [synthetic_page(page_lines(seed, 3))[0] for seed in (1, 2)]
    src = inbox / "fax.tif"
    frames[0].save(src, save_all=True, append_images=frames[1:], compression="tiff_lzw",
                   dpi=(DPI, DPI))
    texts = ["\n".join(page_lines(seed, 3)) for seed in (1, 2)]
    with Daemon(config, engine=KnownTextEngine({"fax.tif": texts})) as daemon:
        read_all(daemon, src)
    out = inbox / "fax.ocr.pdf"
    with pikepdf.open(out) as pdf:
        assert len(pdf.pages) == 2
    images = pdf_images(out, tmp_path / "images")
    assert len(images) == 2
    assert all(same_pixels(a, b) for a, b in zip(images, frames, strict=True))
    pages = pdf_text(out).split("\f")
    assert page_lines(1, 3)[0] in pages[0] and page_lines(2, 3)[0] in pages[1]


@pytest.mark.skipif(shutil.which("tesseract") is None,
                    reason="the tesseract command is not installed (apt install tesseract-ocr)")
def test_the_pdf_benchmark_runs_and_reports_both_paths(tmp_path: Path) -> None:
    from benchmarks import pdf_output

    report = "\n".join(pdf_output.run(1, tmp_path / "report.txt"))
    assert (tmp_path / "report.txt").read_text().strip() == report.strip()
    for heading in ("## clean pages", "## poor scans", "| ocrwatch, Tesseract engine |",
                    "| ocrwatch, model text on Tesseract boxes |", "| `tesseract ... pdf` |"):
        assert heading in report
    words = sum(len(line.split()) for line in page_lines(0))
    clean = report.split("## poor scans")[0]
    # Every word of the clean page found, in each of the three layers.
    assert clean.count(f"| 0 of {words} |") == 3, clean
