from __future__ import annotations

import io
from pathlib import Path

import pytest
from helpers import save_pdf, text_page
from PIL import Image

from ocrwatch.config import Config
from ocrwatch.core.errors import InputError
from ocrwatch.pages.decode import count_pages, iter_pages, scale_to, sniff, to_rgb
from ocrwatch.pages.image import flattened


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(inbox=[tmp_path], database=tmp_path / "db.sqlite3")


@pytest.mark.parametrize(("fmt", "suffix"), [("PNG", ".png"), ("JPEG", ".jpg"),
                                             ("TIFF", ".tif"), ("BMP", ".bmp"),
                                             ("WEBP", ".webp")])
def test_every_image_format_gives_one_page(tmp_path: Path, config: Config, fmt: str,
                                           suffix: str) -> None:
    path = tmp_path / f"scan{suffix}"
    page = text_page(["hello"], width=800)
    page.paste((200, 30, 30), (700, 20, 780, 60))  # a red stamp: a colour page
    page.save(path, fmt)
    pages = list(iter_pages(path, config, None))
    assert len(pages) == 1
    assert pages[0].image.mode == "RGB"
    assert pages[0].size[0] == 800
    assert pages[0].source == path and pages[0].index == 0
    # Without its stamp, black on white: grey for Tesseract, RGB for a model (lossy WebP
    # would tint it).
    text_page(["hello"], width=800).save(path, fmt, lossless=True)
    assert [p.image.mode for p in iter_pages(path, config, None)] == ["L"]
    assert [p.image.mode for p in iter_pages(path, config, 1540)] == ["RGB"]


def test_multi_frame_tiff_gives_every_frame(tmp_path: Path, config: Config) -> None:
    path = tmp_path / "fax.tif"
    frames = [text_page([f"page {i}"], width=600 + 10 * i) for i in range(3)]
    frames[0].save(path, save_all=True, append_images=frames[1:], compression="tiff_lzw")
    pages = list(iter_pages(path, config, None))
    assert [p.index for p in pages] == [0, 1, 2]
    assert [p.size[0] for p in pages] == [600, 610, 620]
    assert count_pages(path, config) == 3


def test_bilevel_g4_tiff(tmp_path: Path, config: Config) -> None:
    path = tmp_path / "g4.tif"
    text_page(["bi-level"]).convert("1").save(path, compression="group4", dpi=(300, 300))
    (page,) = iter_pages(path, config, None)
    # Read at its own size (Tesseract), it stays 1-bit: an eighth of its grey's memory.
    assert page.image.mode == "1" and page.dpi == 300
    (fitted,) = iter_pages(path, config, 1540)  # a model reads RGB
    assert fitted.image.mode == "RGB"


@pytest.mark.parametrize(("mode", "kept"), [("L", "L"), ("LA", "L"), ("I;16", "L"),
                                            ("P", "RGB"), ("RGBA", "RGB"), ("CMYK", "RGB")])
def test_pages_read_at_their_own_size_keep_grey(tmp_path: Path, config: Config, mode: str,
                                                kept: str) -> None:
    path = tmp_path / "page.tif"
    image = text_page(["grey"], width=600).convert("L")
    if mode == "LA":
        image.putalpha(Image.new("L", image.size, 0))  # all transparent: white paper
    elif mode == "I;16":
        image = image.point(lambda v: v * 200, "I").convert("I;16")
    else:
        image = image.convert(mode)
    image.save(path)
    (page,) = iter_pages(path, config, None)
    assert page.image.mode == kept
    if mode == "LA":
        assert page.image.getextrema() == (255, 255)
    else:
        assert page.image.convert("L").getextrema()[0] < 64  # the text is still there


def test_grey_pdf_pages_are_drawn_grey_for_tesseract(tmp_path: Path, config: Config) -> None:
    path = save_pdf(tmp_path / "doc.pdf", [["one"], ["two"]])
    assert [p.image.mode for p in iter_pages(path, config, None)] == ["L", "L"]
    assert [p.image.mode for p in iter_pages(path, config, 1540)] == ["RGB", "RGB"]


def test_a_pdf_page_drawn_grey_has_the_pixels_of_its_rgb_drawing(tmp_path: Path) -> None:
    """Made grey from PDFium's bitmap a strip at a time: the pixels of the RGB drawing
    made grey after it; a page with one coloured mark in its last strip stays RGB."""
    import pypdfium2 as pdfium
    from fpdf import FPDF

    from ocrwatch.pages.budget import unlimited
    from ocrwatch.pages.pdfdraw import draw

    grey_path = save_pdf(tmp_path / "grey.pdf", [["one line of grey words"]])
    pdf = FPDF(unit="pt", format=(300, 400))
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(0, 16, "black words")
    pdf.set_fill_color(200, 30, 30)
    pdf.rect(280, 390, 10, 5, style="F")  # a red mark in the last rows
    pdf.output(str(tmp_path / "red.pdf"))
    for path, mode in ((grey_path, "L"), (tmp_path / "red.pdf", "RGB")):
        doc = pdfium.PdfDocument(str(path))
        try:
            page = doc[0]
            drawn = draw(page, 2.0, unlimited(), "page 1", flatten=True)
            plain = draw(page, 2.0, unlimited(), "page 1")
            page.close()
        finally:
            doc.close()
        assert drawn.mode == mode
        assert drawn.tobytes() == flattened(plain).tobytes()


def test_one_coloured_pixel_keeps_a_page_rgb() -> None:
    image = Image.new("RGB", (300, 1000), (250, 250, 250))
    assert flattened(image).mode == "L"
    assert flattened(image).getpixel((299, 999)) == 250
    image.putpixel((299, 999), (250, 250, 251))  # in the last strip checked
    assert flattened(image) is image


def test_pdf_pages_rendered_at_configured_dpi(tmp_path: Path, config: Config) -> None:
    # Scanned at 50 dpi: coarser than pdf_dpi (a sharper scan is drawn at its own
    # resolution, test_viewer.py).
    path = save_pdf(tmp_path / "doc.pdf", [["one"], ["two"], ["three"]], dpi=50)
    config.pdf_dpi = 100
    pages = list(iter_pages(path, config, None))
    assert len(pages) == 3
    # 1700 px at 50 dpi is 34 in; drawn at 100 dpi it is 3400 px wide.
    assert abs(pages[0].size[0] - 3400) <= 2
    assert pages[0].dpi == 100
    assert count_pages(path, config) == 3


def test_max_side_fits_the_longest_side_up_and_down(tmp_path: Path, config: Config) -> None:
    """LightOnOCR's 1540 px: larger pages are shrunk, smaller ones enlarged to it."""
    from ocrwatch.engines import profiles

    profile = profiles.get(profiles.DEFAULT)
    MAX_SIDE, PATCH, image_tokens = profile.max_side, profile.patch, profile.image_tokens

    path = tmp_path / "big.png"
    text_page(["x"], width=3000).save(path, dpi=(300, 300))
    (page,) = iter_pages(path, config, MAX_SIDE)
    assert max(page.size) == 1540 and page.dpi == round(300 * 1540 / 3000)
    small = tmp_path / "small.png"
    text_page(["x"], width=500).resize((500, 700)).save(small, dpi=(100, 100))
    (page,) = iter_pages(small, config, MAX_SIDE)
    assert page.size == (1100, 1540) and page.dpi == 220
    # Image tokens: 28-pixel patches of the page as the model gets it.
    assert image_tokens(*page.size) == -(-1100 // PATCH) * (1540 // PATCH) == 40 * 55
    assert image_tokens(500, 700) == image_tokens(*page.size)  # estimated before scaling
    card = tmp_path / "card.png"
    text_page(["x"], width=600).resize((600, 380)).save(card)
    (page,) = iter_pages(card, config, MAX_SIDE)
    assert page.size == (1540, 975)
    assert image_tokens(600, 380) == 55 * 35
    # Tesseract (no max_side) gets the page as it is.
    (page,) = iter_pages(card, config, None)
    assert page.size == (600, 380)
    assert scale_to(page.image, None) is page.image


def test_a_large_jpeg_for_the_model_decodes_smaller_to_the_same_page(
        tmp_path: Path, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JPEG shrunk to 1540 px anyway is decoded at half (a quarter...) its size first:
    the same page size, dpi and pixels (within a grey level or two) as decoded whole."""
    from PIL import ImageChops, ImageStat
    from PIL.JpegImagePlugin import JpegImageFile

    path = tmp_path / "scan.jpg"
    text_page(["An invoice", "paid in full"], width=2480).resize((2480, 3508)).save(
        path, dpi=(300, 300), quality=90)
    drafted: list[tuple[int, int]] = []
    draft = JpegImageFile.draft

    def spy(self: JpegImageFile, mode: str | None, size: tuple[int, int] | None) -> object:
        result = draft(self, mode, size)
        drafted.append(self.size)
        return result

    monkeypatch.setattr(JpegImageFile, "draft", spy)
    (page,) = iter_pages(path, config, 1540)
    assert drafted == [(1240, 1754)]  # decoded at half its size
    assert page.size == (1089, 1540) and page.dpi == round(300 * 1540 / 3508)
    with Image.open(path) as whole:
        expected = whole.convert("RGB").resize(page.size, Image.Resampling.LANCZOS)
    difference = ImageChops.difference(expected, page.image)
    assert max(ImageStat.Stat(difference).mean) < 2.0
    # Tesseract reads the scan at its own size: decoded whole.
    drafted.clear()
    (page,) = iter_pages(path, config, None)
    assert page.size == (2480, 3508) and page.dpi == 300 and drafted == []
    # A phone photo turned by its EXIF tag: decoded smaller, then turned upright.
    photo = tmp_path / "phone.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    text_page(["A receipt"], width=4000).resize((4000, 3000)).save(photo, exif=exif)
    (page,) = iter_pages(photo, config, 1540)
    assert drafted == [(2000, 1500)] and page.size == (1155, 1540)


def test_exif_orientation_is_applied(tmp_path: Path, config: Config) -> None:
    image = Image.new("RGB", (400, 200), "white")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    path = tmp_path / "phone.jpg"
    image.save(path, exif=exif)
    (page,) = iter_pages(path, config, None)
    assert page.size == (200, 400)


def test_alpha_is_flattened_on_white() -> None:
    image = Image.new("RGBA", (10, 10), (0, 0, 0, 0))
    image.putpixel((0, 0), (0, 0, 0, 255))
    rgb = to_rgb(image)
    assert rgb.mode == "RGB"
    assert rgb.getpixel((5, 5)) == (255, 255, 255)
    assert rgb.getpixel((0, 0)) == (0, 0, 0)


def test_palette_with_transparency_and_16_bit_grey() -> None:
    pal = Image.new("P", (4, 4), 0)
    pal.info["transparency"] = 0
    assert to_rgb(pal).getpixel((1, 1)) == (255, 255, 255)
    grey16 = Image.new("I;16", (4, 4), 30000)
    value = to_rgb(grey16).getpixel((0, 0))
    assert isinstance(value, tuple) and 240 <= value[0] <= 255


def test_sniff_reads_content_not_name(tmp_path: Path) -> None:
    path = tmp_path / "really-a-png.jpg"
    text_page(["x"], width=100).save(path, "PNG")
    assert sniff(path) == "png"


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.png", b"", "empty"),
        ("notes.png", b"this is just text\n", "not an image or PDF"),
        ("broken.pdf", b"%PDF-1.7\ngarbage garbage", "PDF"),
    ],
)
def test_bad_files_fail_with_plain_reasons(tmp_path: Path, config: Config, name: str,
                                           content: bytes, reason: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError, match=reason):
        list(iter_pages(path, config, None))


def test_truncated_jpeg_fails(tmp_path: Path, config: Config) -> None:
    buf = io.BytesIO()
    text_page(["truncated"]).save(buf, "JPEG")
    path = tmp_path / "cut.jpg"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 3])
    with pytest.raises(InputError, match="damaged or incomplete"):
        list(iter_pages(path, config, None))


def test_pixel_limit_checked_before_decoding(tmp_path: Path, config: Config) -> None:
    path = tmp_path / "huge.png"
    Image.new("1", (20000, 20000)).save(path)  # small file, 400 megapixels
    config.max_pixels = 100_000_000
    with pytest.raises(InputError, match="megapixels"):
        list(iter_pages(path, config, None))


def test_page_limit(tmp_path: Path, config: Config) -> None:
    path = save_pdf(tmp_path / "long.pdf", [["p"]] * 5)
    config.max_pages = 4
    with pytest.raises(InputError, match="5 pages, over the limit of 4"):
        list(iter_pages(path, config, None))


def test_file_size_limit(tmp_path: Path, config: Config) -> None:
    path = tmp_path / "big.png"
    text_page(["x"]).save(path)
    config.max_file_mb = 0.001
    with pytest.raises(InputError, match="max_file_mb"):
        list(iter_pages(path, config, None))


def test_deleted_file(tmp_path: Path, config: Config) -> None:
    with pytest.raises(InputError, match="deleted"):
        list(iter_pages(tmp_path / "gone.png", config, None))


def test_pages_come_one_at_a_time(tmp_path: Path, config: Config) -> None:
    path = save_pdf(tmp_path / "doc.pdf", [["a"], ["b"]])
    it = iter_pages(path, config, 500)
    first = next(it)
    assert first.index == 0 and max(first.size) == 500
    assert next(it).index == 1
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize(("down", "height"), [(98, 833), (196, 416), (204, 400)])
def test_a_fax_is_given_square_pixels(tmp_path: Path, config: Config, down: int,
                                      height: int) -> None:
    """A fax in standard mode is 204 dpi across and 98 down: its pixels are twice as tall
    as wide, and read as they are its print is squashed to half its height. The page is
    stretched down to square pixels, and its resolution is the finer one."""
    path = tmp_path / "fax.tif"
    text_page(["standard mode"], width=1700).convert("1").save(
        path, compression="group4", dpi=(204, down))
    (page,) = iter_pages(path, config, None)
    assert page.size == (1700, height) and page.dpi == 204


def test_a_resolution_ten_times_finer_one_way_is_a_broken_header(
        tmp_path: Path, config: Config) -> None:
    path = tmp_path / "odd.png"
    text_page(["odd"], width=1700).save(path, dpi=(300, 30))
    (page,) = iter_pages(path, config, None)
    assert page.size == (1700, 400) and page.dpi == 300


@pytest.mark.parametrize("mode", ["1", "L", "RGB"])
def test_thumbnails_of_pages_in_every_mode(mode: str) -> None:
    from ocrwatch.pages import thumbs

    page = text_page(["a thumbnail"], width=2400, size=120).convert(mode)
    data = thumbs.encode(page)
    assert len(data) <= thumbs.MAX_BYTES
    with Image.open(io.BytesIO(data)) as thumb:
        assert thumb.mode == "RGB" and max(thumb.size) == thumbs.MAX_SIDE
        # The print is still there, shrunk smoothly (a 1-bit page too).
        assert thumb.convert("L").getextrema()[0] < 128


def test_memory_is_given_back_without_starting_a_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """malloc_trim is found in the C library already loaded: ctypes.util.find_library
    ran ``ldconfig -p``, a child forked in the middle of reading a page."""
    import platform
    import subprocess

    from ocrwatch.pages import memory

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refused)
    memory._libc.cache_clear()
    try:
        if platform.libc_ver()[0] == "glibc":
            assert memory._libc() is not None
        memory.give_back()
    finally:
        memory._libc.cache_clear()
