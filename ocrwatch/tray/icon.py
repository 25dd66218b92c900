"""The tray icon's picture: one background colour per state, a queue count and a failed badge."""

from __future__ import annotations

from typing import Any

from PIL import Image, ImageDraw, ImageFont

from ocrwatch.core.status import Status

SIZE = 64
_SCALE = 4  # drawn at 4x and scaled down, for smooth edges at tray sizes

# Colours: one background per state, so the state reads even at 16 px.
COLOURS = {
    "idle": (46, 125, 50),  # green: watching, nothing to do
    "working": (21, 101, 192),  # blue: reading pages
    "paused": (117, 117, 117),  # grey: paused by the user
    "asleep": (40, 53, 147),  # indigo: idle, GPU memory given back
    "stopping": (66, 66, 66),
}
FAILED = (211, 47, 47)
WHITE = (255, 255, 255)
PAPER = (250, 250, 250)
INK = (120, 144, 156)
MOON = (255, 236, 153)


def look(status: Status) -> str:
    """The icon's main look: idle, working, paused, asleep or stopping."""
    if status.paused or status.state == "paused":
        return "paused"
    if status.state in ("working", "stopping"):
        return status.state
    if status.engine.state in ("asleep", "stopped"):
        return "asleep"
    return "idle"


def _font(px: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=px)
    except (OSError, TypeError, ValueError):  # Pillow without FreeType
        return ImageFont.load_default()


def draw_icon(status: Status) -> Image.Image:
    """The tray icon for ``status``, 64x64 RGBA.

    A page on a rounded square whose colour tells the state: green idle, blue working
    (with the number of files in the queue), grey paused (two bars), indigo when the GPU
    is asleep (a moon); a red badge with "!" when failed files wait, in any state.
    """
    s = _SCALE
    big = Image.new("RGBA", (SIZE * s, SIZE * s), (0, 0, 0, 0))
    d = ImageDraw.Draw(big)
    kind = look(status)
    d.rounded_rectangle((2 * s, 2 * s, 62 * s, 62 * s), radius=12 * s, fill=COLOURS[kind])

    # The page, with a folded corner and lines of text.
    x0, y0, x1, y1 = 17 * s, 10 * s, 47 * s, 54 * s
    fold = 9 * s
    page = [(x0, y0), (x1 - fold, y0), (x1, y0 + fold), (x1, y1), (x0, y1)]
    d.polygon(page, fill=PAPER if kind != "paused" else (200, 200, 200))
    d.polygon([(x1 - fold, y0), (x1 - fold, y0 + fold), (x1, y0 + fold)], fill=(176, 190, 197))
    for i, width in enumerate((22, 18, 22, 14)):
        y = (22 + 7 * i) * s
        d.rounded_rectangle((21 * s, y, (21 + width) * s, y + 3 * s), radius=s, fill=INK)

    if kind == "paused":
        # Two bars over the page: the universal "paused".
        d.rounded_rectangle((20 * s, 18 * s, 29 * s, 48 * s), radius=2 * s, fill=(55, 55, 55))
        d.rounded_rectangle((35 * s, 18 * s, 44 * s, 48 * s), radius=2 * s, fill=(55, 55, 55))
    elif kind == "working":
        n = status.in_queue
        text = "99+" if n > 99 else str(max(n, 1))
        r = 15 * s if len(text) < 3 else 17 * s
        cx, cy = 47 * s, 46 * s
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=WHITE, outline=COLOURS["working"],
                  width=2 * s)
        font = _font((20 if len(text) == 1 else 16 if len(text) == 2 else 12) * s)
        d.text((cx, cy), text, fill=COLOURS["working"], font=font, anchor="mm",
               stroke_width=s // 2, stroke_fill=COLOURS["working"])
    elif kind == "asleep":
        # A crescent: a disc with another disc bitten out of it, over the page.
        mask = Image.new("L", big.size, 0)
        m = ImageDraw.Draw(mask)
        cx, cy, r = 46 * s, 46 * s, 13 * s
        m.ellipse((cx - r, cy - r, cx + r, cy + r), fill=255)
        ox, oy = cx + 7 * s, cy - 6 * s
        m.ellipse((ox - r, oy - r, ox + r, oy + r), fill=0)
        big.paste(Image.new("RGBA", big.size, (*MOON, 255)), (0, 0), mask)

    if status.failed > 0:
        cx, cy, r = 50 * s, 14 * s, 12 * s
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=FAILED, outline=WHITE, width=2 * s)
        d.rounded_rectangle((cx - 2 * s, cy - 8 * s, cx + 2 * s, cy + 3 * s), radius=s,
                            fill=WHITE)
        d.ellipse((cx - 2 * s, cy + 5 * s, cx + 2 * s, cy + 9 * s), fill=WHITE)

    return big.resize((SIZE, SIZE), Image.Resampling.LANCZOS)


def icon_key(status: Status) -> tuple[Any, ...]:
    """What the icon's pixels depend on; redraw only when it changes."""
    kind = look(status)
    count = min(status.in_queue, 100) if kind == "working" else 0
    return kind, count, status.failed > 0
