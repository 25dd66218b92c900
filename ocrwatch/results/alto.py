"""``NAME.alto.xml``: the pages' words and their boxes as ALTO v4 (the Library of
Congress's layout format that digitisation workflows and library viewers take).

Each page is a ``Page`` the size of the page as the file holds it, with one
``PrintSpace`` over all of it; its ``TextBlock``s (with ``ROTATION`` where the page was
turned upright to be read), ``TextLine``s and ``String``s (one a word, ``SP`` between,
along the line) carry HPOS/VPOS/WIDTH/HEIGHT in those pixels
(``MeasurementUnit`` pixel). Valid against the published ALTO 4.4 schema (the test
validates every file it writes).
"""

from __future__ import annotations

from ocrwatch.core.domain import PageText
from ocrwatch.core.layout import Box
from ocrwatch.core.version import __version__
from ocrwatch.results import xmltext
from ocrwatch.results.wordboxes import page_boxes

NAMESPACE = "http://www.loc.gov/standards/alto/ns-v4#"
SCHEMA = "http://www.loc.gov/standards/alto/v4/alto-4-4.xsd"


def _place(box: Box) -> str:
    left, top, right, bottom = box
    return (f'HPOS="{left}" VPOS="{top}" WIDTH="{max(0, right - left)}" '
            f'HEIGHT="{max(0, bottom - top)}"')


def render(pages: list[PageText], name: str) -> str:
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<alto xmlns="{NAMESPACE}" xmlns:xlink="http://www.w3.org/1999/xlink"',
        '      xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"',
        f'      xsi:schemaLocation="{NAMESPACE} {SCHEMA}">',
        " <Description>",
        "  <MeasurementUnit>pixel</MeasurementUnit>",
        "  <sourceImageInformation>",
        f"   <fileName>{xmltext.text(name)}</fileName>",
        "  </sourceImageInformation>",
        '  <Processing ID="ocrwatch">',
        "   <processingSoftware>",
        "    <softwareName>ocrwatch</softwareName>",
        f"    <softwareVersion>{__version__}</softwareVersion>",
        "   </processingSoftware>",
        "  </Processing>",
        " </Description>",
        " <Layout>",
    ]
    for p, page in enumerate(pages, 1):
        boxes = page_boxes(page)
        size = f'WIDTH="{boxes.width}" HEIGHT="{boxes.height}"'
        out.append(f'  <Page ID="page_{p}" PHYSICAL_IMG_NR="{p}" {size}>')
        out.append(f'   <PrintSpace ID="space_{p}" HPOS="0" VPOS="0" {size}>')
        n_line = n_word = 0
        for b, region in enumerate(boxes.regions, 1):
            turned = f' ROTATION="{boxes.angle}"' if boxes.angle else ""
            out.append(f'    <TextBlock ID="block_{p}_{b}" {_place(region.box)}{turned}>')
            for line in region.lines:
                n_line += 1
                out.append(f'     <TextLine ID="line_{p}_{n_line}" {_place(line.box)}>')
                for i, (word, box) in enumerate(line.words):
                    if i:
                        x, y, gap = boxes.space(line.words[i - 1][1], box)
                        out.append(f'      <SP WIDTH="{gap}" HPOS="{x}" VPOS="{y}"/>')
                    n_word += 1
                    out.append(f'      <String ID="word_{p}_{n_word}" '
                               f'CONTENT={xmltext.attr(word)} {_place(box)}/>')
                out.append("     </TextLine>")
            out.append("    </TextBlock>")
        out.append("   </PrintSpace>")
        out.append("  </Page>")
    out += [" </Layout>", "</alto>", ""]
    return "\n".join(out)
