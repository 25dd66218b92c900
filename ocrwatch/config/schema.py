"""The configuration's shape: one typed object, its sections, the allowed values and ranges."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ocrwatch.config.languages import default_languages
from ocrwatch.core.naming import OUTPUT_NAMES
from ocrwatch.fs import paths

# The values ``engine`` takes, as data: the engines import the config, so the config names
# them without importing any. "auto" leaves the choice to the engine registry
# (ocrwatch/engines/registry.py), which imports an engine's module the first time it is
# asked for that engine; a name added here needs its module listed there
# (tests/test_registry.py checks that they agree).
AUTO_ENGINE = "auto"
ENGINES = ("tesseract", "vllm", "remote")  # offered to users, in this order
# Engines of the test suite (ocrwatch/testing/), accepted only where TESTING_VARIABLE is "1".
TESTING_ENGINES = ("fake",)
# Engines registered at run time beyond these (a plugin's; a test's probe): name, offered.
_ENGINES: list[tuple[str, bool]] = []


def allow_engine(name: str, public: bool = True) -> None:
    """Accept ``engine = name`` too (called by the engine registry for an engine registered
    at run time); ``public``: offered to users on the command line."""
    if name not in engine_names():
        _ENGINES.append((name, public))


def engine_names(public_only: bool = False) -> tuple[str, ...]:
    """The values ``engine`` may take: ``auto``, the engines shipped, the test suite's where
    TESTING_VARIABLE is set (unless ``public_only``), then those registered at run time."""
    testing = () if public_only or os.environ.get(TESTING_VARIABLE) != "1" else TESTING_ENGINES
    return (AUTO_ENGINE, *ENGINES, *testing,
            *(name for name, public in _ENGINES if public or not public_only))


OBSERVERS = ("auto", "native", "polling")
PDF_TEXT = ("auto", "ocr", "text")
OUTPUTS = OUTPUT_NAMES  # ocrwatch/results/formats.py registers how each is made
PDFA = ("auto", "always", "never")
ON_SUCCESS = ("keep", "archive", "delete")
LAYOUTS = ("mirror", "date")
# The values model_profile takes: ocrwatch/engines/profiles.py holds each one's rules.
MODEL_PROFILES = ("lightonocr-2-1b", "lightonocr-3-1b")


@dataclass
class VllmConfig:
    """Settings of the embedded vLLM engine (``engine = "vllm"``)."""

    model: str = "lightonai/LightOnOCR-2-1B"
    load_format: str = "auto"  # "dummy" runs the real compute on random weights (tests)
    gpu_memory_gb: float = 0.0  # 0: the card's size, capped at 16
    # 0: the card's own size. Lower plans as if the card were that small (benchmarks
    # emulate a 16 GB card on a larger one; other programs' memory counts against it).
    card_gb: float = 0.0
    kv_cache_dtype: str = "auto"  # "fp8" halves the KV cache per page; accuracy unmeasured
    # "fp8": vLLM's dynamic fp8 weights (compute capability 8.9 or newer); accuracy unmeasured
    quantization: str = "none"
    # After the idle stop, keep a process with vLLM imported (no GPU memory, about 1 GiB
    # of RAM) so that the next page pays only the engine's creation (docs/gpu.md).
    standby: bool = True
    max_tokens: int = 4096
    temperature: float = 0.2
    top_p: float = 0.9
    enforce_eager: bool = False
    torch_compile: bool = False  # slower starts for no gain with this model (docs/gpu.md)
    # Encode each page's image alone, without the attention mask vLLM builds over all the
    # images of a step (vLLM 0.26 only; docs/gpu.md): the same result, faster.
    pagewise_encoder: bool = True
    idle_sleep_seconds: float = 60.0
    idle_stop_seconds: float = 900.0
    # 0: pages go in in arrival order (like sizes first measured no faster, docs/gpu.md); above 0,
    # like sizes go in together and none waits longer than this for its turn.
    admit_wait_seconds: float = 0.0
    # Pages handed to vLLM beyond max_num_seqs: they wait in vLLM's own queue, their images
    # already processed and nothing of theirs on the card, so a page that ends is replaced
    # at the next step rather than after a round trip to the daemon.
    queued_pages: int = 4
    start_timeout_seconds: float = 600.0
    # Prepare pages (blank, skew, orientation) in processes of their own, one per
    # preparer, rather than in threads of the daemon's: threads share one interpreter lock
    # and fed the GPU slower than it reads (docs/gpu.md).
    prepare_processes: bool = True
    ignore_eos: bool = False  # benchmarks only: every page writes exactly max_tokens


@dataclass
class RemoteConfig:
    """Settings of the remote engine: an OpenAI-compatible server (``vllm serve``)."""

    url: str = "http://127.0.0.1:8000/v1"
    urls: list[str] = field(default_factory=list)  # several servers; replaces url when set
    model: str = "lightonai/LightOnOCR-2-1B"
    api_key: str = ""  # or OCRWATCH_REMOTE_API_KEY
    ca_file: Path | None = None  # PEM of a private authority; TLS is always verified
    max_tokens: int = 4096
    temperature: float = 0.2
    top_p: float = 0.9
    concurrency: int = 2  # requests in flight, over all servers
    # 0: off. Else at most this many in flight per server that is up (each healthy server
    # behind a router counts), never more than concurrency.
    per_server: int = 0
    timeout_seconds: float = 300.0  # for one page's answer
    retry_seconds: float = 120.0  # a page waits this long for a fit server, then is requeued
    health_seconds: float = 30.0  # every server is probed this often
    ignore_eos: bool = False  # benchmarks only: every page writes exactly max_tokens


@dataclass
class Config:
    """Every setting of ocrwatch, with its default."""

    inbox: list[Path] = field(default_factory=lambda: [paths.default_inbox()])
    output_dir: Path | None = None  # None: sidecars beside the originals
    database: Path = field(default_factory=paths.default_database)
    engine: str = AUTO_ENGINE
    # The model and its rules (ocrwatch/engines/profiles.py, docs/models.md) for the vllm
    # and remote engines: "lightonocr-2-1b" or "lightonocr-3-1b" (layout blocks).
    model_profile: str = "lightonocr-2-1b"
    # LightOnOCR-3's running headers, footers and page numbers in the .md/.txt and the
    # index; by default they are left out, as LightOn's omit-margins does.
    keep_margins: bool = False
    # English and the desktop's language when Tesseract has data for it.
    languages: list[str] = field(default_factory=default_languages)
    tessdata: Path | None = None  # None: look in the usual places
    workers: int = 0  # pages read at once by the CPU engine; 0: one per core
    settle_seconds: float = 2.0
    # Globs on file names never read, besides the fixed temporary and hidden names.
    ignore: list[str] = field(default_factory=list)
    rescan_minutes: float = 5.0
    observer: str = "auto"
    follow_symlinks: bool = False
    pdf_dpi: int = 200
    pdf_text: str = "auto"  # a PDF page's own text: "auto" when real, "text" always, "ocr" never
    # Scanner realities (docs/outputs.md has what each costs per page):
    rotate_pages: bool = True  # turn sideways and upside-down pages upright (Tesseract OSD)
    deskew: bool = True  # straighten pages skewed by 1-10 degrees
    skip_blank: bool = True  # record pages with next to no ink blank, without reading them
    max_pages: int = 2000
    max_pixels: int = 200_000_000  # per page, after decoding
    max_file_mb: float = 2048.0
    prepare_seconds: float = 60.0  # what preparing one page may take (decode, text check)
    prepare_memory_mb: float = 1024.0  # ...and the memory it may need
    failed_dir: Path | None = None  # None: failed files stay where they are
    max_attempts: int = 5  # transient failures (full disk...) before giving up
    log_level: str = "INFO"
    outputs: list[str] = field(default_factory=lambda: ["md", "txt"])
    pdfa: str = "auto"  # PDF/A-2b by pikepdf, pages kept; "always": Ghostscript for the rest
    output_layout: str = "mirror"  # output_dir: "mirror" the inbox's tree or by "date"
    on_success: str = "keep"  # the original after a good read: "keep", "archive", "delete"
    archive_dir: Path | None = None
    archive_layout: str = "mirror"
    on_done: list[str] = field(default_factory=list)  # argv run after each file is done
    on_done_timeout: float = 60.0
    notify_batch: bool = False  # a desktop notification when the queue empties
    delete_sidecars: bool = True  # a deleted original takes the sidecars ocrwatch wrote along
    cache_dir: Path = field(default_factory=paths.cache_dir)  # page thumbnails
    # "127.0.0.1:9464": Prometheus metrics served at /metrics there (docs/metrics.md);
    # empty: off. No token (a scraper carries none): loopback unless the user names another.
    metrics_address: str = ""
    vllm: VllmConfig = field(default_factory=VllmConfig)
    remote: RemoteConfig = field(default_factory=RemoteConfig)

    # Where the values came from; used for messages only.
    source: str = field(default="defaults", compare=False, repr=False)
    file: Path | None = field(default=None, compare=False, repr=False)  # the file read, if any
    # Where each value that is not a default came from ("vllm.model" -> "the file ..."),
    # so that a message about a value names the place the user has to change.
    origins: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def origin(self, key: str) -> str:
        """Where ``key``'s value came from: a file, a variable, a flag, or the default."""
        return self.origins.get(key, "the built-in default")


_SECTIONS: dict[str, type[Any]] = {"vllm": VllmConfig, "remote": RemoteConfig}
_INTERNAL = {"source", "file", "origins"}
# "1" in the environment: the tests' and benchmarks' own engines and switches are taken
# (ocrwatch/testing/); a user's configuration never needs them.
TESTING_VARIABLE = "OCRWATCH_TESTING"
# Benchmark switches kept out of the user's configuration: a file may set them only where
# TESTING_VARIABLE is "1" (every page then runs to max_tokens, so runs compare alike).
BENCHMARK_KEYS = frozenset({"vllm.ignore_eos", "remote.ignore_eos"})

# Sane ranges (inclusive) for numbers: a value outside is a typo or a unit mix-up, and
# some are harmful (100000 workers start 100000 threads; an infinite size limit fails
# every file). Keys checked more closely below are left out.
ON_DONE_TIMEOUT_MAX = 24 * 3600
RANGES: dict[str, tuple[float, float]] = {
    "workers": (0, 256),
    "settle_seconds": (0.1, 3600),
    "rescan_minutes": (0.1, 7 * 24 * 60),
    "pdf_dpi": (36, 1200),
    "max_pages": (1, 100_000),
    "max_pixels": (1, 2_000_000_000),
    "max_file_mb": (0.001, 1_048_576),
    "prepare_seconds": (0.1, 24 * 3600),
    "prepare_memory_mb": (16, 1_048_576),
    "max_attempts": (1, 1000),
    "vllm.gpu_memory_gb": (0, 4096),
    "vllm.card_gb": (0, 4096),
    "vllm.max_tokens": (1, 16384),
    "vllm.idle_sleep_seconds": (0, 30 * 24 * 3600),
    "vllm.idle_stop_seconds": (0, 30 * 24 * 3600),
    "vllm.admit_wait_seconds": (0, 60),
    "vllm.queued_pages": (0, 256),
    "vllm.start_timeout_seconds": (1, 24 * 3600),
    "remote.max_tokens": (1, 1_000_000),
    "remote.concurrency": (1, 1024),
    "remote.timeout_seconds": (0.1, 24 * 3600),
    "remote.retry_seconds": (0.1, 24 * 3600),
    "remote.health_seconds": (0.1, 24 * 3600),
}


