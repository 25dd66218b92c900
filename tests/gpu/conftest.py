"""GPU tests: run only where a CUDA GPU, vLLM and a LightOnOCR-shaped model folder exist.

Environment:
  OCRWATCH_GPU_MODEL       model folder (full size; loaded with load_format="dummy")
  OCRWATCH_GPU_TINY_MODEL  optional: a tiny folder with real weights (make_model.py --tiny)
  OCRWATCH_CORPUS          folder of real scans (default: ../shared/corpus beside the repo)
  TRITON_CACHE_DIR, VLLM_CACHE_ROOT
                           kept when set: the kernels vLLM compiles at its first start
                           (benchmarks/gpu_run.sh passes the user's, as a desktop keeps them)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the helpers module beside this file
from gpu_helpers import Sampler, used_mib, why_not

# Every test gets a HOME of its own (tests/conftest.py), and with it, by default, empty
# kernel caches: each engine start would compile vLLM's sampling kernels again (13-16 s
# on the H200), which a desktop does once. One cache for the session, or the caller's.
KERNEL_CACHES = {"TRITON_CACHE_DIR": "triton", "VLLM_CACHE_ROOT": "vllm"}


@pytest.fixture(scope="session")
def kernel_caches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    shared = tmp_path_factory.mktemp("kernel-caches")
    return {key: os.environ.get(key) or str(shared / sub) for key, sub in KERNEL_CACHES.items()}


@pytest.fixture(autouse=True)
def _kernel_caches(kernel_caches: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in kernel_caches.items():
        monkeypatch.setenv(key, value)


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
