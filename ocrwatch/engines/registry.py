"""The engine registry: every engine's name, config section, doctor checks and status note.

Each engine module declares one :class:`Registration` (``ENGINE``) and is listed here once;
the config's allowed ``engine`` values, the command line's choices, ``ocrwatch doctor``,
``ocrwatch status`` and the daemon ask this module instead of comparing names. A new
engine is one module and one line below.

Engines for tests only (the fake engine) live in :mod:`ocrwatch.testing`, which registers
them when imported; ``OCRWATCH_TESTING=1`` in the environment imports it here, so that the
test suite's daemon processes can run them. Users are never offered them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass

from ocrwatch.config import Config, schema
from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.engines import gpu as gpus
from ocrwatch.engines.base import Engine, Registration

AUTO = "auto"  # the engine value that leaves the choice to :func:`choose`
TESTING_VARIABLE = schema.TESTING_VARIABLE  # "1": register the test-only engines too


@dataclass(frozen=True)
class Choice:
    name: str
    why: str


_ENGINES: dict[str, Registration] = {}


schema.allow_engine(AUTO)


def register(entry: Registration) -> None:
    """Add an engine; the config accepts its name from now on."""
    _ENGINES[entry.name] = entry
    schema.allow_engine(entry.name)


def get(name: str) -> Registration | None:
    """The engine called ``name``; None for ``auto`` and for names never registered."""
    return _ENGINES.get(name)


def names(*, public_only: bool = False) -> tuple[str, ...]:
    """``auto`` and every engine's name, in registration order."""
    return (AUTO, *(e.name for e in _ENGINES.values() if e.public or not public_only))


def needs(config: Config, check: str) -> bool | None:
    """Whether the configured engine needs a doctor check; None when ``auto`` decides."""
    if config.engine == AUTO:
        return None
    entry = get(config.engine)
    return entry is not None and check in entry.doctor


def note(name: str, config: Config) -> str | None:
    """The status note of engine ``name`` for this configuration."""
    entry = get(name)
    return entry.note(config) if entry is not None and entry.note is not None else None


def read_with(name: str, config: Config) -> str:
    """What a page is read with, as stored beside it: a change makes the page stale."""
    entry = get(name)
    if entry is not None and entry.languages:
        return f"{name} {'+'.join(config.languages)}"
    return name


def scans(name: str) -> bool:
    """Whether pages for engine ``name`` go through the scan checks (blank, turn, skew)."""
    entry = get(name)
    return entry is None or entry.scans


def reads_languages(name: str) -> bool:
    """Whether engine ``name`` reads with the configured ``languages`` (Tesseract), so that
    a page in a script none of them reads is misread (``ocrwatch/scan/script.py``)."""
    entry = get(name)
    return entry is not None and entry.languages


def choose(config: Config) -> Choice:
    """Resolve ``engine = "auto"`` and explain the choice for ``ocrwatch status``."""
    if config.engine != AUTO:
        return Choice(config.engine, "set in the configuration")
    gpu = gpus.gpu_name()
    has_vllm = importlib.util.find_spec("vllm") is not None
    if gpu and has_vllm:
        return Choice(vllm.ENGINE.name, f"CUDA GPU found ({gpu}) and vLLM is installed")
    if gpu:
        return Choice(tesseract.ENGINE.name, f"CUDA GPU found ({gpu}) but vLLM is not "
                                             "installed: install the 'gpu' extra to use it")
    return Choice(tesseract.ENGINE.name, "no CUDA GPU found, using the CPU engine")


def create(config: Config, name: str | None = None) -> Engine:
    """Build the engine called ``name`` (default: the configured or automatic choice)."""
    name = name or choose(config).name
    entry = get(name)
    if entry is None:
        raise EngineUnavailable(f"unknown engine {name!r}")
    return entry.build(config)


# The engines, in the order they are offered. Imported last: each module imports the
# Registration above.
from ocrwatch.engines import remote, tesseract  # noqa: E402
from ocrwatch.engines.vllm import entry as vllm  # noqa: E402

for _module in (tesseract, vllm, remote):
    register(_module.ENGINE)

if os.environ.get(TESTING_VARIABLE) == "1":
    # Found by name: the product does not depend on its test package.
    importlib.import_module("ocrwatch.testing")
