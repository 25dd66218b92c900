"""GPU tests: run only where a CUDA GPU, vLLM and a LightOnOCR-shaped model folder exist.

Environment:
  OCRWATCH_GPU_MODEL       model folder (full size; loaded with load_format="dummy")
  OCRWATCH_GPU_TINY_MODEL  optional: a tiny folder with real weights (make_model.py --tiny)
  OCRWATCH_CORPUS          folder of real scans (default: ../shared/corpus beside the repo)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the helpers module beside this file
from gpu_helpers import Sampler, used_mib, why_not


@pytest.fixture(scope="session")
def sampler() -> Iterator[Sampler]:
    s = Sampler().start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def baseline_mib() -> int:
    return used_mib()


@pytest.fixture(scope="session")
def corpus() -> Path:
    default = Path(__file__).resolve().parents[3] / "shared" / "corpus"
    path = Path(os.environ.get("OCRWATCH_CORPUS", default))
    if not path.is_dir():
        pytest.skip(f"no corpus folder at {path} (set OCRWATCH_CORPUS)")
    return path


def pytest_report_header() -> str:
    reason = why_not()
    line = "GPU tests: " + ("skipped, " + reason if reason else "running")
    print(line, file=sys.stderr)
    return line


# The leak check in tests/conftest.py runs per test; here the sampler and the shared
# engine's feeder thread live for the whole module on purpose (the engine's fixture closes
# it, which joins the feeder), so they are left out of the per-test check.
LONG_LIVED = ("gpu-memory-sampler", "ocrwatch-vllm-feed")


@pytest.fixture
def long_lived_threads() -> tuple[str, ...]:
    return LONG_LIVED
