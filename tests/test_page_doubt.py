"""A doubt found while preparing a page keeps the file's original (Page.doubt)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from ocrwatch.core.domain import Page, doubt_of
from ocrwatch.pipeline import read


def test_a_page_prepared_with_a_doubt_carries_it_into_its_result() -> None:
    image = Image.new("RGB", (20, 20), "white")
    pages = [Page(Path("form.pdf"), 0, image, text="Layer text", doubt="an XFA form"),
             Page(Path("form.pdf"), 1, image, text="Layer text")]
    results, unavailable = read(None, "none", pages)  # type: ignore[arg-type]
    assert unavailable is None
    assert [doubt_of(r) for r in results] == ["an XFA form", None]
