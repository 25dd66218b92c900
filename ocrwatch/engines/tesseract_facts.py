"""What the Tesseract engine's results say that others act on, named once."""

from __future__ import annotations

# The start of the warning a page read with a mean word confidence under 40% carries
# (ocrwatch/engines/tesseract.py): such a reading is a doubt, and the original is kept.
LOW_CONFIDENCE = "low confidence ("
