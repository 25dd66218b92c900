"""The engine registry: every engine's name, config section, doctor checks and status note.

Each engine module declares one :class:`Registration` (``ENGINE``) and is listed in
``_MODULES`` below, its name in the config's ``ENGINES`` (``ocrwatch/config/schema.py``);
the config's allowed ``engine`` values, the command line's choices, ``ocrwatch doctor``,
``ocrwatch status`` and the daemon ask this module instead of comparing names. A new
engine is one module, one line below and its name in the config.

The registry fills itself on first use: an engine's module is imported the first time its
engine is asked for (``get``), so that importing this module, or the config, costs no
engine's imports (httpx for the remote engine, the vLLM worker's plumbing); a command that
never builds or asks about an engine never imports one.

Engines for tests only (the fake engine) live in :mod:`ocrwatch.testing`; where
``OCRWATCH_TESTING=1`` is set in the environment the config accepts them and this module
imports that package when one is asked for, so that the test suite's daemon processes can
run them. Users are never offered them.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from ocrwatch.config import Config, schema
from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.engines import gpu as gpus
from ocrwatch.engines.base import Engine, Registration

AUTO = schema.AUTO_ENGINE  # the engine value that leaves the choice to :func:`choose`
TESTING_VARIABLE = schema.TESTING_VARIABLE  # "1": the test-only engines are accepted too
TESSERACT, VLLM = "tesseract", "vllm"  # what ``auto`` chooses from

# Where each engine the config names is declared (its module's ``ENGINE``), imported the
# first time the engine is asked for. Found by name: the product does not depend on its
# test package, and a command imports only the engine it uses.
_MODULES = {
    "tesseract": "ocrwatch.engines.tesseract_entry",
    "vllm": "ocrwatch.engines.vllm.entry",
    "remote": "ocrwatch.engines.remote",
    "fake": "ocrwatch.testing",  # registers itself when imported
}


@dataclass(frozen=True)
class Choice:
    name: str
    why: str


_ENGINES: dict[str, Registration] = {}  # the engines loaded or registered so far


def register(entry: Registration) -> None:
    """Add an engine; the config accepts its name from now on."""
    _ENGINES[entry.name] = entry
    schema.allow_engine(entry.name, public=entry.public)


def get(name: str) -> Registration | None:
    """The engine called ``name``, its module imported on first use; None for ``auto`` and
    for names the config does not accept."""
    entry = _ENGINES.get(name)
    if entry is None and name in _MODULES and name in schema.engine_names():
        module = importlib.import_module(_MODULES[name])
        declared = getattr(module, "ENGINE", None)
        if isinstance(declared, Registration) and declared.name not in _ENGINES:
            register(declared)
        entry = _ENGINES.get(name)
    return entry


def names(*, public_only: bool = False) -> tuple[str, ...]:
    """``auto`` and every engine's name, in the order offered; imports no engine."""
    return schema.engine_names(public_only=public_only)


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
        return Choice(VLLM, f"CUDA GPU found ({gpu}) and vLLM is installed")
    if gpu:
        return Choice(TESSERACT, f"CUDA GPU found ({gpu}) but vLLM is not "
                                 "installed: install the 'gpu' extra to use it")
    return Choice(TESSERACT, "no CUDA GPU found, using the CPU engine")


def create(config: Config, name: str | None = None) -> Engine:
    """Build the engine called ``name`` (default: the configured or automatic choice)."""
    name = name or choose(config).name
    entry = get(name)
    if entry is None:
        raise EngineUnavailable(f"unknown engine {name!r}")
    return entry.build(config)
