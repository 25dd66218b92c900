"""Faint print or the other side showing through: telling them apart on a page that holds
too little ink to read (:mod:`ocrwatch.scan.inkcover`) but is not empty.

Ink is what is 30% darker than its paper, so that the print of a sheet's other side,
showing through at 5-20% of its darkness, is not. But a faint typescript (a worn ribbon,
a carbon copy) on grey or tinted paper can be as faint: the grey corpus typescripts,
their print at 60% of its darkness on blue-grey paper, measured blank, and Tesseract read
one of them at CER 0.11. Only one thing tells such print from show-through for sure:
show-through is mirrored.

So a page that is blank at the ink level but has marks ``FAINT_DEPTH`` darker than its
paper is looked at once more. Its marks are stretched to full contrast (each pixel's
depth below its paper, the darkest 0.2% of the page made black, the sensor's noise
filtered out first), and Tesseract's orientation detection (OSD) is asked how sure it is
which way up that copy is, and which way up the copy mirrored is. Print reads as print:
OSD leans to it (confidence ``SURE`` or more) and far more (``MIRROR_FACTOR``) than to
its mirror image. Show-through reads as print only mirrored. As OSD is fooled now and
then by the grain that stretching brings up, its verdict for print is checked by reading
the copy, turned upright, and its mirror image (upright and upside down): print reads as
``FAINT_WORDS`` confident level words or more, and as clearly more (``READ_FACTOR``) than
mirrored. Anything else stays
blank: a page that cannot be told is not sent to a model engine, which would invent its
text. It costs two OSD calls (about 1 s) on the pages that have such marks, and three
readings (a few seconds) on those OSD takes for print; a clean blank back has no such
marks and costs nothing more.

A page found to be faint print carries its stretched copy (``Page.stretched``), and so
does a page whose marks are mostly fainter than ink (``FAINT_RATIO``). Tesseract's one
threshold finds little on such a page itself; the Tesseract engine also reads the copy
and keeps the reading with more words read surely.
"""

from __future__ import annotations

from typing import Protocol

from PIL import Image, ImageChops, ImageFilter, ImageOps

from ocrwatch.scan import inkcover, orient

FAINT_DEPTH = 0.12  # marks this much darker than their paper may be faint print
# A page with this many times more marks at FAINT_DEPTH than ink is faint print even
# where some of it is ink: 1.0-3.8 on the corpus's and the typeset pages, 10 on the
# faintest corpus typescript (tapus_06), 20-140 on the grey typescripts at 70% of their
# darkness on blue-grey paper, where Tesseract read them at CER 0.75-1.0.
FAINT_RATIO = 20.0
# OSD's confidence on the stretched page from which it may be print (the reading below
# then decides): 3.6-11.9 on corpus pages made faint, but for one made faint with the
# book and table it was photographed on (1.4); show-through on the 138 corpus backs up to
# 4.6, always with its mirror image surer still (6.3-9.1).
SURE = 3.0
MIRROR_FACTOR = 2.0  # ... and how much surer than on its mirror image
FAINT_WORDS = 20  # confident level words the stretched page must read as, at least
# ... and how much more confident level text than its mirror image: read, mirrored print
# still gives many words at half the confidence (print made faint from the corpus: 1.29-2.2
# times its mirror image; show-through, taken for print by OSD: 1.06, and 1.18 on a back at
# 100 dpi stretched without its noise filtered out). A back read is a stated failure, so
# the margin is kept on its side: a faint page at 1.29 (tapus_06) stays blank.
READ_FACTOR = 1.3
STRETCH_SHARE = 0.002  # the darkest share of the page made black when stretching
STRETCH_FLOOR = 8  # grey levels: the least depth made black (grain alone is not made marks)
WORK_SIDE = 3300  # pixels: the longest side the page is stretched at (OSD's own size)


class Judge(Protocol):
    """What tells print (:class:`ocrwatch.scan.orient.Detector`): OSD's turn and
    confidence for a page (None: it cannot tell), and a reading's confident level words
    (their summed confidence and count; None: nothing to read with)."""

    def osd_only(self, image: Image.Image) -> tuple[int, float] | None: ...

    def level_text(self, image: Image.Image) -> tuple[float, int] | None: ...


def has_faint_marks(image: Image.Image) -> bool:
    """Whether the page holds marks that may be faint print (at ``FAINT_DEPTH``)."""
    return not inkcover.looks_blank(*inkcover.measure(image, FAINT_DEPTH))


def mostly_faint(marks: float, ink: float) -> bool:
    """Whether a page of ``ink`` share and ``marks`` share at ``FAINT_DEPTH``
    (:func:`inkcover.measure_depths`) holds mostly marks fainter than ink:
    ``FAINT_RATIO`` times as many."""
    return marks >= inkcover.BLANK_COVERAGE and marks >= FAINT_RATIO * ink


def stretched(image: Image.Image, side: int | None = WORK_SIDE) -> Image.Image:
    """The page's marks at full contrast, in grey: each pixel's depth below the paper
    where it lies, scaled so that the darkest ``STRETCH_SHARE`` of the page is black;
    reduced to about ``side`` pixels on its longest side (None: at its own size)."""
    grey = image.convert("L")
    factor = max(1, round(max(grey.size) / side)) if side else 1
    if factor > 1:
        grey = grey.reduce(factor)
    # Sensor noise is a pixel here and there, a stroke of print is wider: stretched, the
    # noise of blue-grey paper made OSD unsure of a page of faint typescript (1.2, its
    # mirror image 2.0; with the noise filtered out 8.0 and 1.3).
    # (Judged unfiltered as well, a faint page of 9 pt type was print, OSD 18.2 and 3.4
    # mirrored, where filtered it is 4.6 and 14.1; but a back at 100 dpi then passed OSD
    # too and came within 1.18 of the reading's 1.3. So small faint print stays blank.)
    grey = grey.filter(ImageFilter.MedianFilter(3))
    cells = grey.reduce(max(1, min(grey.size) // inkcover.CELLS)).filter(
        ImageFilter.MedianFilter(inkcover.CELL_MEDIAN))
    depth = ImageChops.subtract(cells.resize(grey.size, Image.Resampling.BILINEAR), grey)
    histogram, seen, top = depth.histogram(), 0, 255
    wanted = STRETCH_SHARE * grey.width * grey.height
    for value in range(255, -1, -1):
        seen += histogram[value]
        if seen >= wanted:
            top = value
            break
    top = max(top, STRETCH_FLOOR)
    return depth.point(lambda value: max(0, 255 - round(value * 255 / top)))


def is_faint_print(image: Image.Image, judge: Judge,
                   marks: tuple[float, float] | None = None) -> bool:
    """Whether a page that holds too little ink to read holds faint print, not the other
    side's print showing through (see the module's notes). ``marks``: its share and
    densest square at ``FAINT_DEPTH``, when measured already."""
    if inkcover.looks_blank(*(marks or inkcover.measure(image, FAINT_DEPTH))):
        return False
    copy = stretched(image)
    ahead = judge.osd_only(copy)
    if ahead is None or ahead[1] < SURE:
        return False
    behind = judge.osd_only(ImageOps.mirror(copy))
    if behind is not None and ahead[1] < MIRROR_FACTOR * behind[1]:
        return False
    # The grain that stretching brings up fools OSD now and then (a mirrored magazine
    # page at 150 dpi: 4.2 as it is, 0.2 mirrored), so its verdict is checked by reading:
    # the copy turned upright must read as level text, and better than mirrored.
    upright = orient.turn(copy, ahead[0])
    read = judge.level_text(upright)
    if read is None:
        return True  # no languages to read with: OSD's word stands
    if read[1] < FAINT_WORDS:
        return False
    # Mirrored, level text stays level: the other side's print, if that is what it is,
    # reads upright or upside down.
    mirror = ImageOps.mirror(upright)
    mirrored = max((judge.level_text(m) or (0.0, 0))[0]
                   for m in (mirror, orient.turn(mirror, 180)))
    return read[0] >= READ_FACTOR * mirrored
