"""``NAME.hocr``: the pages' words and their boxes as hOCR 1.2 (XHTML).

Each page is an ``ocr_page`` whose ``bbox`` is the page as the file holds it; its lines
(``ocr_line``, with ``textangle`` where the page was turned upright to be read) and
words (``ocrx_word``) carry their boxes in those pixels, grouped in
``ocr_carea``/``ocr_par`` as :mod:`ocrwatch.results.wordboxes` groups them, as
Tesseract's own hOCR does. Tools that take hOCR (hocr-tools, OCRmyPDF's hocrtransform,
archive viewers) read it.
"""

from __future__ import annotations

from ocrwatch.core.domain import PageText
from ocrwatch.core.layout import Box
from ocrwatch.core.version import __version__
from ocrwatch.results import xmltext
from ocrwatch.results.wordboxes import page_boxes

CAPABILITIES = "ocr_page ocr_carea ocr_par ocr_line ocrx_word"


def _bbox(box: Box) -> str:
    return "bbox {} {} {} {}".format(*box)


def render(pages: list[PageText], name: str) -> str:
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"',
        '    "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">',
        '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">',
        " <head>",
        f"  <title>{xmltext.text(name)}</title>",
        '  <meta http-equiv="Content-Type" content="text/html;charset=utf-8"/>',
        f'  <meta name="ocr-system" content="ocrwatch {__version__}"/>',
        f'  <meta name="ocr-capabilities" content="{CAPABILITIES}"/>',
        f'  <meta name="ocr-number-of-pages" content="{len(pages)}"/>',
        " </head>",
        " <body>",
    ]
    for p, page in enumerate(pages, 1):
        boxes = page_boxes(page)
        whole = _bbox((0, 0, boxes.width, boxes.height))
        title = f"image {_quoted(name)}; {whole}; ppageno {p - 1}"
        out.append(f'  <div class="ocr_page" id="page_{p}" title={xmltext.attr(title)}>')
        n_line = n_word = 0
        for b, region in enumerate(boxes.regions, 1):
            out.append(f'   <div class="ocr_carea" id="block_{p}_{b}" '
                       f'title="{_bbox(region.box)}">')
            out.append(f'    <p class="ocr_par" id="par_{p}_{b}" title="{_bbox(region.box)}">')
            for line in region.lines:
                n_line += 1
                # A page turned upright to be read: its lines run at that angle as scanned.
                angle = f"; textangle {boxes.angle}" if boxes.angle else ""
                out.append(f'     <span class="ocr_line" id="line_{p}_{n_line}" '
                           f'title="{_bbox(line.box)}{angle}">')
                for word, box in line.words:
                    n_word += 1
                    out.append(f'      <span class="ocrx_word" id="word_{p}_{n_word}" '
                               f'title="{_bbox(box)}">{xmltext.text(word)}</span>')
                out.append("     </span>")
            out.append("    </p>")
            out.append("   </div>")
        out.append("  </div>")
    out += [" </body>", "</html>", ""]
    return "\n".join(out)


def _quoted(name: str) -> str:
    """A file name as an hOCR property value: in double quotes, inner ones escaped."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
