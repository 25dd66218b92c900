"""Variants of the corpus pages that a new user's documents look like.

Each builder writes one file and says how it was made; the ground truth is the
original page's. Pixels are derived from real scans (no synthetic page), except the
born-digital PDF, which draws the ground-truth text with a real font (DejaVu Sans).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import random
from collections.abc import Sequence
from pathlib import Path

from PIL import Image, ImageChops, ImageFilter, ImageOps

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")  # Debian fonts-dejavu-core
STAMPS = (72, 96)


def _open(path: Path) -> tuple[Image.Image, float]:
    """The page upright, 8-bit (grey or RGB), and the dpi it was scanned at.

    A missing or stamped resolution is taken as 300 dpi (the corpus's scans are 300-400).
    """
    with Image.open(path) as opened:
        opened.load()
        dpi = opened.info.get("dpi")
        image = ImageOps.exif_transpose(opened)
    try:
        value = float(dpi[0]) if dpi else 0.0
    except (TypeError, ValueError, IndexError):
        value = 0.0
    if not 150 <= value <= 1200 or round(value) in STAMPS:
        value = 300.0
    if image.mode not in ("L", "RGB"):
        image = image.convert("RGB" if image.mode in ("RGBA", "P", "CMYK") else "L")
    return image, value


def low_resolution(src: Path, out: Path, dpi: int) -> Path:
    """The page as a ``dpi`` scan, with no resolution in the file (PNG without pHYs)."""
    image, source_dpi = _open(src)
    scale = dpi / source_dpi
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    image.resize(size, Image.Resampling.LANCZOS).save(out, "PNG")
    return out


def enlarged(src: Path, out: Path, dpi: int = 600) -> Path:
    """The page enlarged to ``dpi`` (LANCZOS) and saying so: a stand-in for a scan at that
    resolution (the corpus has one real 600 dpi page)."""
    image, source_dpi = _open(src)
    scale = dpi / source_dpi
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    image.resize(size, Image.Resampling.LANCZOS).save(out, "PNG", dpi=(dpi, dpi))
    return out


def stamped(src: Path, out: Path, dpi: int = 72) -> Path:
    """The same pixels, with a wrong ``dpi`` stamped as a camera or an editor does."""
    image, _ = _open(src)
    image.save(out, "PNG", dpi=(dpi, dpi))
    return out


def phone_photo(src: Path, out: Path, seed: int) -> Path:
    """A phone-like photo: turned by up to 2 degrees, light falling off across the page,
    a little blur, JPEG at quality 85 and the 72 dpi that phones write."""
    rng = random.Random(seed)
    image, _ = _open(src)
    image = image.convert("RGB")
    angle = rng.uniform(0.5, 2.0) * rng.choice((-1, 1))
    image = image.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True,
                         fillcolor=(120, 110, 100))  # the table the page lies on
    # Light from one side: a linear ramp from 100% down to 60% in a random direction.
    ramp = Image.linear_gradient("L").resize(image.size)
    ramp = ramp.rotate(rng.uniform(0, 360), resample=Image.Resampling.BILINEAR,
                       fillcolor=128)
    light = ramp.point(lambda v: round(153 + v * 102 / 255))
    image = ImageChops.multiply(image, Image.merge("RGB", (light, light, light)))
    image = image.filter(ImageFilter.GaussianBlur(0.8))
    image.save(out, "JPEG", quality=85, dpi=(72, 72))
    return out


def born_digital(texts: Sequence[str], out: Path, font: Path = DEJAVU) -> Path:
    """A PDF with the texts drawn in a real font, one text per page (fpdf2)."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(auto=True, margin=12)  # a long text runs onto a next page
    pdf.set_margins(15, 12, 15)
    pdf.add_font("DejaVu", fname=str(font))
    pdf.set_font("DejaVu", size=10)
    for text in texts:
        pdf.add_page()
        for line in text.splitlines():
            pdf.multi_cell(w=0, h=5, text=line, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(out))
    return out


def fax(src: Path, out: Path, fine: bool = False) -> Path:
    """The page as a fax sends it: 204 dpi across, 98 down (standard mode; ``fine``: 196),
    black and white with the fax machine's fixed threshold, as a Group 4 TIFF that says so."""
    image, source_dpi = _open(src)
    down = 196 if fine else 98
    size = (max(1, round(image.width * 204 / source_dpi)),
            max(1, round(image.height * down / source_dpi)))
    grey = image.convert("L").resize(size, Image.Resampling.LANCZOS)
    grey.point(lambda v: 255 if v > 140 else 0).convert("1").save(
        out, "TIFF", compression="group4", dpi=(204, down))
    return out


# Degrees clockwise -> Pillow's transpose (whose ROTATE_ turn counter-clockwise).
TRANSPOSE = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180,
             270: Image.Transpose.ROTATE_90}


def turned(src: Path, out: Path, clockwise: int) -> Path:
    """The page as a sheet fed sideways or upside down: turned ``clockwise`` degrees."""
    image, dpi = _open(src)
    image.transpose(TRANSPOSE[clockwise]).save(out, "PNG", dpi=(round(dpi),) * 2)
    return out


def skewed(src: Path, out: Path, degrees: float) -> Path:
    """The page as a sheet fed crooked: turned ``degrees`` counter-clockwise on white."""
    image, dpi = _open(src)
    white = 255 if image.mode == "L" else (255, 255, 255)
    image.rotate(degrees, resample=Image.Resampling.BICUBIC, expand=True,
                 fillcolor=white).save(out, "PNG", dpi=(round(dpi),) * 2)
    return out


def noise_image(size: tuple[int, int], sigma: float, rng: random.Random) -> Image.Image:
    """Gaussian noise centred on 128 (Pillow's ``effect_noise``), the same for the same
    ``rng``. Pillow draws it from the C library's ``rand()``, which Python's seeds do
    not reach: unseeded, a made page differed from run to run, and a test on it passed
    in one noise state and failed in another. So ``rand()`` is seeded from ``rng``."""
    _srand(rng.getrandbits(31))
    return Image.effect_noise(size, sigma)


def _srand(seed: int) -> None:
    libc = _libc()
    if libc is not None:
        libc.srand(ctypes.c_uint(seed))


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, looked up once (``find_library`` runs ``ldconfig``); None where
    there is none to seed (Windows): the noise is then unseeded."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "srand") else None


def _paper(size: tuple[int, int], rng: random.Random, tint: tuple[int, int, int],
           grain: float, noise: float) -> Image.Image:
    """Scanned paper: a tint, low-frequency grain (fibres, uneven whiteness) and sensor
    noise."""
    width, height = size
    coarse = noise_image((max(1, width // 8), max(1, height // 8)), grain, rng)
    coarse = coarse.resize(size, Image.Resampling.BICUBIC)
    fine = noise_image(size, noise, rng)
    seed_shift = rng.randint(-3, 3)
    layers = []
    for channel in tint:
        base = Image.new("L", size, max(0, min(255, channel + seed_shift)))
        # effect_noise is centred on 128: subtract that back out.
        layer = ImageChops.add(base, coarse, scale=1.0, offset=-128)
        layers.append(ImageChops.add(layer, fine, scale=1.0, offset=-128))
    return Image.merge("RGB", layers)


def blank_back(src: Path, out: Path, seed: int) -> Path:
    """The blank back of the page's sheet as a scanner gives it: paper grain, sensor
    noise, a few specks of dust and the front's print showing through faintly, mirrored."""
    rng = random.Random(seed)
    front, dpi = _open(src)
    front = ImageOps.mirror(front.convert("L"))
    paper = _paper(front.size, rng, (246, 244, 238), grain=rng.uniform(6, 12),
                   noise=rng.uniform(4, 8))
    # Show-through: the print at 10-20% of its darkness, blurred by the paper.
    depth = rng.uniform(0.10, 0.20)
    ghost = front.filter(ImageFilter.GaussianBlur(2)).point(
        lambda v: round(255 - (255 - v) * depth))
    page = ImageChops.multiply(paper, Image.merge("RGB", (ghost, ghost, ghost)))
    for _ in range(rng.randint(20, 60)):  # dust: specks of 1-3 pixels
        x, y = rng.randrange(page.width), rng.randrange(page.height)
        r = rng.randint(0, 2)
        page.paste((40, 40, 40), (x, y, min(page.width, x + r + 1), min(page.height, y + r + 1)))
    page.save(out, "JPEG", quality=90, dpi=(round(dpi),) * 2)
    return out


def filed(src: Path, out: Path, seed: int) -> Path:
    """The sheet as it comes out of a file: punch holes along a long edge, shown dark or
    grey by the scanner's backing, or light with a shadow on one side of their rim, and a
    staple in a corner, at their sizes on an A4 sheet (the page's short side taken as
    210 mm), saved as JPEG."""
    from PIL import ImageDraw

    rng = random.Random(seed)
    image, dpi = _open(src)
    page = image.convert("RGB")
    mm = min(page.size) / 210
    draw = ImageDraw.Draw(page)
    near = rng.random() < 0.5  # a back's holes are on the other side: the sheet turned over
    # ISO 838: 2 or 4 holes of 6 mm, 80 mm apart, 12 mm in; US: 3 of 8 mm, 108 mm apart.
    count, apart, diameter, inset = rng.choice(((2, 80, 6, 12), (4, 80, 6, 12),
                                                (3, 108, 8, 10)))
    # The backing: dark, grey, or light with the hole's rim casting a shadow on one side.
    backing = rng.choice((rng.randint(10, 60), rng.randint(110, 160), rng.randint(205, 230)))
    shadow = rng.randint(60, 120)
    start = rng.randrange(360)
    r = diameter / 2 * mm
    for n in range(count):
        # Along one of the sheet's long edges: left or right of a page scanned upright,
        # top or bottom of one scanned sideways.
        offset = (n - (count - 1) / 2) * apart * mm
        if page.height >= page.width:
            x = inset * mm if near else page.width - inset * mm
            y = page.height / 2 + offset
        else:
            x, y = page.width / 2 + offset, inset * mm if near else page.height - inset * mm
        draw.ellipse((x - r, y - r, x + r, y + r), fill=(backing,) * 3)
        if backing > 200:
            draw.arc((x - r, y - r, x + r, y + r), start, start + 150, fill=(shadow,) * 3,
                     width=max(1, round(0.5 * mm)))
    # A staple in the top corner opposite the holes' edge or the same: its crown (12.7 mm)
    # level, upright or at 45 degrees, or on a back its two folded legs (5 mm each).
    metal = rng.randint(60, 110)
    corner_x = 10 * mm if rng.random() < 0.5 else page.width - 10 * mm
    cx, cy, width = corner_x, 10 * mm, max(1, round(0.6 * mm))
    angle = math.radians(rng.choice((0, 45, 90, 135)))
    dx, dy = math.cos(angle), math.sin(angle)
    if rng.random() < 0.5:
        half = 6.35 * mm
        draw.line((cx - dx * half, cy - dy * half, cx + dx * half, cy + dy * half),
                  fill=(metal,) * 3, width=width)
    else:
        inner, outer = 1 * mm, 6 * mm  # each leg, from the staple's middle
        for side in (-1, 1):
            draw.line((cx + side * dx * inner, cy + side * dy * inner,
                       cx + side * dx * outer, cy + side * dy * outer),
                      fill=(metal,) * 3, width=width)
    page.save(out, "JPEG", quality=90, dpi=(round(dpi),) * 2)
    return out


def noisy(src: Path, out: Path, seed: int) -> Path:
    """The page on yellowed paper with grain, speckle and a red rubber stamp."""
    from PIL import ImageDraw

    rng = random.Random(seed)
    image, dpi = _open(src)
    grey = image.convert("L")
    paper = _paper(grey.size, rng, (236, 224, 178), grain=10.0, noise=8.0)
    page = ImageChops.multiply(paper, Image.merge("RGB", (grey, grey, grey)))
    draw = ImageDraw.Draw(page)
    for _ in range(page.width * page.height // 4000):  # speckle: dark dots of 1-2 pixels
        x, y = rng.randrange(page.width), rng.randrange(page.height)
        size = rng.randint(0, 1)
        draw.rectangle((x, y, x + size, y + size), fill=(60, 55, 40))
    # A round stamp in a corner, in red ink.
    r = min(page.size) // 10
    cx, cy = page.width - 2 * r, page.height - 2 * r
    draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=(200, 40, 40), width=max(2, r // 12))
    draw.ellipse((cx - r * 2 // 3, cy - r * 2 // 3, cx + r * 2 // 3, cy + r * 2 // 3),
                 outline=(200, 40, 40), width=max(2, r // 20))
    page.save(out, "JPEG", quality=88, dpi=(round(dpi),) * 2)
    return out


def faint(src: Path, out: Path, seed: int, darkness: float = 0.5) -> Path:
    """A faint typescript: the page's print at ``darkness`` of its own on blue-grey paper
    with grain (a worn ribbon, a carbon copy), saved as PNG without a resolution."""
    rng = random.Random(seed)
    image, _dpi = _open(src)
    grey = image.convert("L").point(lambda v: round(255 - (255 - v) * darkness))
    paper = _paper(grey.size, rng, (190, 205, 215), grain=8.0, noise=6.0)
    ImageChops.multiply(paper, Image.merge("RGB", (grey, grey, grey))).save(out, "PNG")
    return out


def paper_texture(out: Path, seed: int, size: tuple[int, int] = (2480, 3508)) -> Path:
    """Yellowed paper alone (A4 at 300 dpi): grain, speckle and no text."""
    rng = random.Random(seed)
    page = _paper(size, rng, (236, 224, 178), grain=12.0, noise=8.0)
    px = page.load()
    assert px is not None
    for _ in range(size[0] * size[1] // 4000):
        x, y = rng.randrange(size[0]), rng.randrange(size[1])
        px[x, y] = (70, 65, 50)
    page.save(out, "JPEG", quality=88, dpi=(300, 300))
    return out


def halftone(out: Path, size: tuple[int, int] = (1240, 1754), pitch: int = 12) -> Path:
    """A printed photograph's halftone screen on yellowed paper: rows of dots whose size
    follows a smooth picture, no text."""
    import math

    from PIL import ImageDraw

    page = Image.new("RGB", size, (236, 224, 178))
    draw = ImageDraw.Draw(page)
    for y in range(0, size[1], pitch):
        for x in range(0, size[0], pitch):
            tone = 0.5 + 0.5 * math.sin(x / 150) * math.cos(y / 200)
            r = tone * pitch * 0.45
            if r > 0.6:
                draw.ellipse((x - r, y - r, x + r, y + r), fill=(60, 50, 40))
    page.save(out, "PNG")
    return out
