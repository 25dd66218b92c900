"""Variants of the corpus pages that a new user's documents look like.

Each builder writes one file and says how it was made; the ground truth is the
original page's. Pixels are derived from real scans (no synthetic page), except the
born-digital PDF, which draws the ground-truth text with a real font (DejaVu Sans).
"""

from __future__ import annotations

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
