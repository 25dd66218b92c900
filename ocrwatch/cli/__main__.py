"""``python -m ocrwatch.cli``: the same as ``ocrwatch``."""

from __future__ import annotations

import sys

from ocrwatch.cli import main

sys.exit(main())
