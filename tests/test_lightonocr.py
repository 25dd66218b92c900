"""What the model's engines say about a page: its image tokens after the model's resize."""

from __future__ import annotations

from ocrwatch.engines import profiles

PROFILE = profiles.get(profiles.DEFAULT)
image_tokens = PROFILE.image_tokens
MAX_IMAGE_TOKENS = PROFILE.max_image_tokens

A4 = image_tokens(2480, 3508)  # 300 dpi A4 scan
CARD = image_tokens(1600, 260)  # a label strip: few tokens even once fitted to 1540 px


def test_image_tokens_follow_the_resize_and_the_cap() -> None:
    assert image_tokens(1088, 1540) == 39 * 55
    assert image_tokens(1088, 1540) == A4  # a 300 dpi A4 scan is scaled to 1540 first
    assert image_tokens(800, 500) == 55 * 35  # a small card is enlarged to 1540 x 963
    assert image_tokens(10000, 10000) == MAX_IMAGE_TOKENS == 3025
    assert image_tokens(1, 1) == MAX_IMAGE_TOKENS  # a tiny image is enlarged to 1540 x 1540
    assert CARD == 55 * 9
