"""LightOnOCR-3's grounding answers read into Markdown and layout blocks (engines/grounding.py,
lightonocr.page_text with the 3-1B profile)."""

from __future__ import annotations

from fake_openai import FOOTER_WORD, HEADER_WORD, grounding_text

from ocrwatch.core.layout import PageLayout
from ocrwatch.engines import grounding, profiles
from ocrwatch.engines.lightonocr import page_text

V3 = profiles.get("lightonocr-3-1b")
V2 = profiles.get("lightonocr-2-1b")

# LightOn's README, "Grounding output", as published.
README = (
    "![image](309,90,691,516) Model architecture diagram showing NaViT, Projection, "
    "Embedding, ...\n"
    "![caption](400,555,591,566) Figure 1: Model architecture.\n"
    "![title](113,608,263,623) ## 2.2 LightOnOCR-1\n"
    "![text](112,640,882,698) The first version of LightOnOCR [13], established the core "
    "architecture ...\n"
    "![page_number](491,935,505,950) 3\n"
)


def test_the_readme_example_parses_into_its_blocks_in_order() -> None:
    reading = grounding.parse(README)
    assert [b.label for b in reading.blocks] == ["image", "caption", "title", "text",
                                                 "page_number"]
    assert reading.blocks[2].box == (113, 608, 263, 623)
    assert reading.blocks[2].text == "## 2.2 LightOnOCR-1"
    assert reading.blocks[4].margin and not reading.blocks[3].margin
    assert not reading.warnings


def test_margins_left_out_unless_kept_and_a_continued_block_joins_its_paragraph() -> None:
    blocks = grounding.parse(grounding_text(100, 200, (1, 2, 3), 0.2)).blocks
    text = grounding.markdown(blocks)
    assert HEADER_WORD not in text and FOOTER_WORD not in text
    assert not text.rstrip().endswith("3")  # the page number
    assert "Measured without headers" in text  # footnotes are the document's: kept
    assert "colour 010203 and its training recipe" in text  # text+ joined with a space
    assert "<table><tr><th>Model</th>" in text  # the table stays a table
    kept = grounding.markdown(blocks, keep_margins=True)
    assert HEADER_WORD in kept and FOOTER_WORD in kept


def test_page_text_gives_blocks_in_the_read_images_pixels_and_text_without_margins() -> None:
    raw = grounding_text(1000, 1400, (9, 9, 9), 0.2)
    page = page_text(raw, profile=V3, size=(1100, 1540))
    assert page.keep_original is None and page.error is None
    assert HEADER_WORD not in page.text and HEADER_WORD not in page.markdown
    assert "LightOnOCR-1" in page.text and "84.0" in page.text
    assert "$E = mc^2$" in page.markdown  # escaped delimiters repaired (generation 3)
    assert isinstance(page.layout, PageLayout)
    assert (page.layout.width, page.layout.height) == (1100, 1540)
    labels = [b.label for b in page.layout.blocks]
    assert labels[0] == "header" and labels[-1] == "page_number" and "text+" in labels
    header = page.layout.blocks[0]
    assert header.box == (88, 31, 1012, 69)  # (80,20,920,45) of 1100 x 1540
    assert HEADER_WORD in header.text  # the layout keeps every block, margins too
    kept = page_text(raw, profile=V3, size=(1100, 1540), keep_margins=True)
    assert HEADER_WORD in kept.text


def test_an_answer_without_markers_falls_back_to_its_plain_text_with_a_warning() -> None:
    page = page_text("# A page\n\nPlain words, no blocks at all.", profile=V3, size=(10, 10))
    assert "Plain words" in page.text and page.layout is None
    assert any("no layout blocks" in w for w in page.warnings)
    assert page.keep_original is None


def test_a_truncated_answer_keeps_its_blocks_and_drops_the_cut_marker() -> None:
    raw = "![text](10,10,990,100) First paragraph read whole.\n![table](10,120,99"
    page = page_text(raw, profile=V3, size=(500, 700), finish="length")
    assert page.text.strip() == "First paragraph read whole."
    assert "![" not in page.markdown
    assert any("cut-off block marker" in w for w in page.warnings)
    assert page.keep_original is not None  # ran out of tokens: the original is kept
    assert page.layout is not None and len(page.layout.blocks) == 1


def test_a_malformed_marker_is_removed_and_said() -> None:
    raw = "![text](10,10,990,100) Good text.\n![text](10,120,990) Broken box text."
    page = page_text(raw, profile=V3, size=(100, 100))
    assert "Good text." in page.text and "Broken box text." in page.text
    assert "![" not in page.markdown
    assert any("malformed block marker" in w for w in page.warnings)


def test_a_page_with_only_a_running_header_is_not_taken_for_an_empty_answer() -> None:
    page = page_text("![header](10,10,990,40) Chapter 2\n![page_number](490,950,510,970) 7",
                     profile=V3, size=(100, 100))
    assert page.text == "" and page.keep_original is None


def test_generation_2_answers_are_markdown_as_before() -> None:
    raw = "# Title\n\n![image](1,2,3,4) stays as written \\$5 and \\$7"
    page = page_text(raw, profile=V2, size=(100, 100))
    assert page.layout is None and "\\$5" in page.markdown


def test_escaped_dollars_repaired_only_around_math() -> None:
    fix = grounding.fix_escaped_dollars
    assert fix(r"where \$x^2 + y\$ holds") == "where $x^2 + y$ holds"
    assert fix(r"it cost \$5 and \$7 today") == r"it cost \$5 and \$7 today"  # prices
    assert fix(r"\$total price\$") == r"\$total price\$"  # words, not math
    assert fix(r"`\$x\$` in code") == r"`\$x\$` in code"


def test_blocks_of_a_straightened_page_lie_on_the_upright_page() -> None:
    from pathlib import Path

    from PIL import Image

    from ocrwatch.core.domain import Page
    from ocrwatch.scan import prepare as scanprep

    upright = Page(Path("p.png"), 0, Image.new("RGB", (1000, 1400), "white"))
    read = scanprep.again(upright, 90, 3.0)  # turned upright, then straightened 3 degrees
    raw = "![text](100,100,900,200) Some words\n![footer](100,950,900,990) Foot"
    result = scanprep.finish(page_text(raw, profile=V3, size=read.size), read)
    layout = result.layout
    assert layout is not None and layout.angle == 3.0 and result.turned == 90
    assert layout.read_size == read.size and (layout.width, layout.height) == read.upright
    # The read image's centre is the upright page's centre; a block's corner moves by the
    # straightening's turn, not off the page.
    cx, cy = read.size[0] / 2, read.size[1] / 2
    assert layout.to_page(cx, cy) == (layout.width / 2, layout.height / 2)
    left, top = layout.blocks[0].box[:2]
    x, y = layout.to_page(left, top)
    assert 0 <= x <= layout.width and 0 <= y <= layout.height
    assert [b.label for b in layout.blocks] == ["text", "footer"]
