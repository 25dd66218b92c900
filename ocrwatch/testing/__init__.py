"""What the test suite runs in place of real parts, kept out of what users are offered.

Importing this package registers the fake engine (:mod:`.fake`, ``engine = "fake"``): it
reads nothing and is for testing what surrounds an engine. The tests import it; their
daemon and command-line processes get it through ``OCRWATCH_TESTING=1``, with which the
config accepts ``engine = "fake"`` and the engine registry imports this package the first
time the fake engine is asked for. Without either, ``engine = "fake"`` is refused like
any unknown engine, and no command line or config offers it.
"""

from __future__ import annotations

from ocrwatch.engines import registry
from ocrwatch.engines.base import Registration
from ocrwatch.testing.fake import FakeEngine

__all__ = ["FakeEngine"]

# Pages go to it as decoded (no blank, orientation or skew checks: it reads no pixels).
registry.register(Registration("fake", lambda config: FakeEngine(), scans=False, public=False))
