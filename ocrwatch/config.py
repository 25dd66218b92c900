"""Configuration: one typed object, read from TOML, overridden by environment and flags.

Precedence, lowest first: built-in defaults, the TOML file, ``OCRWATCH_*`` environment
variables, command-line flags. Everything is validated before the daemon starts; a bad
value stops start-up with a message naming the key, where it came from and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ocrwatch import paths
from ocrwatch.errors import ConfigError
from ocrwatch.languages import default_languages

ENGINES = ("auto", "tesseract", "vllm", "remote", "fake")
OBSERVERS = ("auto", "native", "polling")
PDF_TEXT = ("auto", "ocr", "text")
OUTPUTS = ("md", "txt", "pdf")
PDFA = ("auto", "always", "never")
ON_SUCCESS = ("keep", "archive", "delete")
LAYOUTS = ("mirror", "date")


@dataclass
class VllmConfig:
    """Settings of the embedded vLLM engine (``engine = "vllm"``)."""

    model: str = "lightonai/LightOnOCR-2-1B"
    load_format: str = "auto"  # "dummy" runs the real compute on random weights (tests)
    gpu_memory_gb: float = 0.0  # 0: the card's size, capped at 16
    max_tokens: int = 4096
    temperature: float = 0.2
    top_p: float = 0.9
    enforce_eager: bool = False
    idle_sleep_seconds: float = 60.0
    idle_stop_seconds: float = 900.0
    admit_wait_seconds: float = 0.5  # how long a page may wait for like sizes to go in together
    start_timeout_seconds: float = 600.0
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
    engine: str = "auto"
    # English and the desktop's language when Tesseract has data for it.
    languages: list[str] = field(default_factory=default_languages)
    tessdata: Path | None = None  # None: look in the usual places
    workers: int = 0  # pages read at once by the CPU engine; 0: one per core
    settle_seconds: float = 2.0
    rescan_minutes: float = 5.0
    observer: str = "auto"
    follow_symlinks: bool = False
    pdf_dpi: int = 200
    pdf_text: str = "auto"  # a PDF page's own text: "auto" when real, "text" always, "ocr" never
    max_pages: int = 2000
    max_pixels: int = 200_000_000  # per page, after decoding
    max_file_mb: float = 2048.0
    failed_dir: Path | None = None  # None: failed files stay where they are
    max_attempts: int = 5  # transient failures (full disk...) before giving up
    log_level: str = "INFO"
    outputs: list[str] = field(default_factory=lambda: ["md", "txt"])
    pdfa: str = "auto"  # PDF/A-2b when Ghostscript is installed
    output_layout: str = "mirror"  # output_dir: "mirror" the inbox's tree or by "date"
    on_success: str = "keep"  # the original after a good read: "keep", "archive", "delete"
    archive_dir: Path | None = None
    archive_layout: str = "mirror"
    on_done: list[str] = field(default_factory=list)  # argv run after each file is done
    on_done_timeout: float = 60.0
    notify_batch: bool = False  # a desktop notification when the queue empties
    delete_sidecars: bool = True  # a deleted original takes the sidecars ocrwatch wrote along
    cache_dir: Path = field(default_factory=paths.cache_dir)  # page thumbnails
    vllm: VllmConfig = field(default_factory=VllmConfig)
    remote: RemoteConfig = field(default_factory=RemoteConfig)

    # Where the values came from; used for messages only.
    source: str = field(default="defaults", compare=False, repr=False)
    # Where each value that is not a default came from ("vllm.model" -> "the file ..."),
    # so that a message about a value names the place the user has to change.
    origins: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def origin(self, key: str) -> str:
        """Where ``key``'s value came from: a file, a variable, a flag, or the default."""
        return self.origins.get(key, "the built-in default")


_SECTIONS: dict[str, type[Any]] = {"vllm": VllmConfig, "remote": RemoteConfig}
_INTERNAL = {"source", "origins"}

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
    "max_attempts": (1, 1000),
    "vllm.gpu_memory_gb": (0, 4096),
    "vllm.max_tokens": (1, 16384),
    "vllm.idle_sleep_seconds": (0, 30 * 24 * 3600),
    "vllm.idle_stop_seconds": (0, 30 * 24 * 3600),
    "vllm.admit_wait_seconds": (0, 60),
    "vllm.start_timeout_seconds": (1, 24 * 3600),
    "remote.max_tokens": (1, 1_000_000),
    "remote.concurrency": (1, 1024),
    "remote.timeout_seconds": (0.1, 24 * 3600),
    "remote.retry_seconds": (0.1, 24 * 3600),
    "remote.health_seconds": (0.1, 24 * 3600),
}


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is list:
        (inner,) = typing.get_args(tp)
        return f"a list of {_type_name(inner)}s"
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return f"{_type_name(inner[0])} or empty"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            Path: "a path"}.get(tp, str(tp))


def _coerce(key: str, where: str, tp: Any, value: Any, *, from_text: bool) -> Any:
    """Turn ``value`` into ``tp`` or raise a ConfigError naming key and place."""

    def bad(expected: str = "") -> ConfigError:
        return ConfigError(
            f"{where}: {key} = {value!r} is not valid: expected {expected or _type_name(tp)}."
        )

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = next(a for a in typing.get_args(tp) if a is not type(None))
        if value is None or value == "":
            return None
        return _coerce(key, where, inner, value, from_text=from_text)
    if origin is list:
        (inner,) = typing.get_args(tp)
        if from_text and isinstance(value, str):
            if inner is Path:  # a PATH-like list; URLs and words hold colons of their own
                value = value.replace(os.pathsep, ",")
            value = [v for v in (p.strip() for p in value.split(",")) if v]
        if isinstance(value, str | Path):
            value = [value]
        if not isinstance(value, list):
            raise bad()
        return [_coerce(key, where, inner, v, from_text=from_text) for v in value]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if from_text and isinstance(value, str):
            low = value.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
        raise bad()
    if tp is int:
        if isinstance(value, bool):
            raise bad()
        if isinstance(value, int):
            return value
        if from_text and isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise bad() from None
        raise bad()
    if tp is float:
        if isinstance(value, bool):
            raise bad()
        if isinstance(value, int | float):
            number = float(value)
        elif from_text and isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise bad() from None
        else:
            raise bad()
        if not math.isfinite(number):  # nan and inf pass float() but mean nothing here
            raise bad("a finite number (nan and inf are not numbers of anything)")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad()
    if tp is Path:
        if isinstance(value, str | Path) and str(value):
            return Path(os.path.expandvars(str(value))).expanduser()
        raise bad()
    raise bad()


def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _apply(target: Any, data: Mapping[str, Any], where: str, origins: dict[str, str],
           prefix: str = "") -> None:
    hints = _hints(type(target))
    known = [f.name for f in dataclasses.fields(target) if f.name not in _INTERNAL]
    for key, value in data.items():
        full = f"{prefix}{key}"
        if key not in known:
            raise ConfigError(
                f"{where}: unknown key {full!r}. Known keys here: {', '.join(sorted(known))}."
            )
        if key in _SECTIONS and not prefix:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}: [{key}] must be a table of settings.")
            _apply(getattr(target, key), value, where, origins, prefix=f"{key}.")
            continue
        if value == "" and hints[key] is Path:
            value = _default(target, key)  # an empty path means "the default place"
        setattr(target, key, _coerce(full, where, hints[key], value, from_text=False))
        origins[full] = f"the file {where}"


def _default(target: Any, key: str) -> Any:
    for f in dataclasses.fields(target):
        if f.name == key:
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            return f.default
    raise KeyError(key)


def _env_overrides(config: Config, environ: Mapping[str, str]) -> None:
    """``OCRWATCH_KEY`` sets ``key``; ``OCRWATCH_VLLM_MODEL`` sets ``vllm.model``."""
    hints = _hints(Config)
    for f in dataclasses.fields(config):
        if f.name in _INTERNAL:
            continue
        if f.name in _SECTIONS:
            section = getattr(config, f.name)
            sub_hints = _hints(type(section))
            for sf in dataclasses.fields(section):
                var = f"OCRWATCH_{f.name}_{sf.name}".upper()
                if var in environ:
                    setattr(section, sf.name, _coerce(
                        f"{f.name}.{sf.name}", f"environment variable {var}",
                        sub_hints[sf.name], environ[var], from_text=True))
                    config.origins[f"{f.name}.{sf.name}"] = f"the environment variable {var}"
            continue
        var = f"OCRWATCH_{f.name}".upper()
        if var in environ:
            setattr(config, f.name, _coerce(f.name, f"environment variable {var}",
                                            hints[f.name], environ[var], from_text=True))
            config.origins[f.name] = f"the environment variable {var}"


def validate(config: Config) -> None:
    """Check values that have the right type but a wrong meaning.

    Each message starts with where the bad value came from, so the user knows what to edit.
    """

    def fail(key: str, msg: str) -> None:
        raise ConfigError(f"{config.origin(key)}: {key} {msg}")

    if config.engine not in ENGINES:
        fail("engine", f"= {config.engine!r} is not one of {', '.join(ENGINES)}.")
    if config.pdf_text not in PDF_TEXT:
        fail("pdf_text", f"= {config.pdf_text!r} is not one of {', '.join(PDF_TEXT)} (auto: "
                         "a PDF page's own text when it is real text, else OCR).")
    if config.observer not in OBSERVERS:
        fail("observer", f"= {config.observer!r} is not one of {', '.join(OBSERVERS)}.")
    if not config.inbox:
        fail("inbox", "must name at least one folder to watch.")
    if not config.languages or any(not lang or "/" in lang for lang in config.languages):
        fail("languages", "must be a list of Tesseract language codes such as ['eng', 'deu'].")
    for key, (low, high) in RANGES.items():
        owner: Any = config
        for part in key.split("."):
            owner = getattr(owner, part)
        if not low <= owner <= high:
            fail(key, f"= {owner!r} is out of range: it must be between {low:g} and {high:g}"
                      f"{_RANGE_HINTS.get(key, '')}.")
    if config.vllm.load_format not in ("auto", "dummy", "safetensors"):
        fail("vllm.load_format", "must be 'auto', 'safetensors' or 'dummy'.")
    _validate_model_sections(config, fail)
    _validate_outputs(config, fail)
    if config.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        fail("log_level", "must be DEBUG, INFO, WARNING or ERROR.")
    _check_loops(config)


_RANGE_HINTS = {
    "workers": " (0: one per core)",
    "vllm.gpu_memory_gb": " (0: the card's size, at most 16)",
    "vllm.max_tokens": " (4096 suits a page)",
}


def _validate_model_sections(config: Config, fail: typing.Callable[[str, str], None]) -> None:
    """Checks of [vllm] and [remote] beyond their types."""
    v, r = config.vllm, config.remote
    for section, temperature in (("vllm", v.temperature), ("remote", r.temperature)):
        if not 0 <= temperature <= 2:
            fail(f"{section}.temperature",
                 f"= {temperature!r} must be between 0 and 2 (0.2 is the model's setting).")
    for section, top_p in (("vllm", v.top_p), ("remote", r.top_p)):
        if not 0 < top_p <= 1:
            fail(f"{section}.top_p", f"= {top_p!r} must be above 0 and at most 1.")
    for key, value in (("vllm.idle_sleep_seconds", v.idle_sleep_seconds),
                       ("vllm.idle_stop_seconds", v.idle_stop_seconds),
                       ("vllm.admit_wait_seconds", v.admit_wait_seconds)):
        if value < 0:
            fail(key, f"= {value!r} must be 0 or more (0 turns it off).")
    if not v.model.strip():
        fail("vllm.model", "must name a Hugging Face model or a local model folder.")
    _validate_remote(r, fail)


def _server_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a server's base URL, or ``None``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "has a port that is not a number"
    if not parts.hostname:
        return "names no host"
    if parts.query or parts.fragment:
        return "must not carry a query (?...) or fragment (#...)"
    if parts.username or parts.password:
        return "must not hold a user name or password: set remote.api_key instead"
    return None


def _validate_remote(r: RemoteConfig, fail: typing.Callable[[str, str], None]) -> None:
    example = "e.g. http://127.0.0.1:8000/v1 (vLLM's server ends in /v1)"
    if r.urls and r.url != RemoteConfig.url:
        fail("remote.urls", "and remote.url are both set: list every server in remote.urls "
                            "and remove remote.url.")
    for key, value in [("remote.url", r.url), *(("remote.urls", u) for u in r.urls)]:
        problem = _server_url_problem(value)
        if problem:
            fail(key, f"= {value!r} {problem}, {example}.")
    seen = [u.rstrip("/") for u in r.urls]
    twice = sorted({u for u in seen if seen.count(u) > 1})
    if twice:
        fail("remote.urls", f"lists {', '.join(twice)} more than once; list each server once "
                            "(remote.concurrency sets how many pages go at once).")
    if not 1 <= r.concurrency <= 1024:
        fail("remote.concurrency", f"= {r.concurrency} must be between 1 and 1024 (requests in "
                                   "flight over all servers).")
    for key, seconds in (("remote.timeout_seconds", r.timeout_seconds),
                         ("remote.retry_seconds", r.retry_seconds),
                         ("remote.health_seconds", r.health_seconds)):
        if seconds <= 0:
            fail(key, f"= {seconds!r} must be greater than 0.")
    if not r.model.strip():
        fail("remote.model", "must name the model the server serves.")
    if r.ca_file is not None and not r.ca_file.is_file():
        fail("remote.ca_file", f"= {str(r.ca_file)!r} is not a file: point it to the PEM file "
                               "of the authority that signed the servers' certificates.")


def _validate_outputs(config: Config, fail: typing.Callable[[str, str], None]) -> None:
    """What is written, and what becomes of the original afterwards."""
    bad = [o for o in config.outputs if o not in OUTPUTS]
    if bad or not config.outputs or len(set(config.outputs)) != len(config.outputs):
        fail("outputs", f"= {config.outputs!r} must list some of {', '.join(OUTPUTS)}, "
                        "each once, e.g. [\"md\", \"txt\", \"pdf\"].")
    for key, value, allowed in (("pdfa", config.pdfa, PDFA),
                                ("on_success", config.on_success, ON_SUCCESS),
                                ("archive_layout", config.archive_layout, LAYOUTS),
                                ("output_layout", config.output_layout, LAYOUTS)):
        if value not in allowed:
            fail(key, f"= {value!r} is not one of {', '.join(allowed)}.")
    if config.on_success == "archive" and config.archive_dir is None:
        fail("on_success", "= \"archive\" needs archive_dir: the folder the originals go to.")
    if config.on_done and not config.on_done[0].strip():
        fail("on_done", "must start with the program to run, e.g. [\"/usr/bin/notify\", \"done\"].")
    if config.on_done:
        import shutil

        config.on_done[0] = os.path.expanduser(config.on_done[0])
        if shutil.which(config.on_done[0]) is None:
            fail("on_done", f"= {config.on_done!r}: {config.on_done[0]!r} is not a program "
                            "that can be run (give its full path, executable; the list is an "
                            "argv, never a shell line: [\"/path/to/program\", \"arg\"]).")
    if config.on_done_timeout <= 0:
        fail("on_done_timeout", "must be greater than 0 (seconds).")
    if config.on_done_timeout > ON_DONE_TIMEOUT_MAX:
        # Past the platform's wait limits the daemon could not even stop.
        fail("on_done_timeout", f"= {config.on_done_timeout:g} is out of range: at most "
                                f"{ON_DONE_TIMEOUT_MAX} seconds (a day).")
    if config.pdfa == "always" and "pdf" in config.outputs:
        import shutil

        if shutil.which("gs") is None:
            fail("pdfa", "= \"always\" needs Ghostscript: install it (Debian/Ubuntu: `sudo apt "
                         "install ghostscript`) or set pdfa = \"auto\".")


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True


def _origins(config: Config, *keys: str) -> str:
    """Where these keys' values came from, each place once: what the user must edit."""
    places = dict.fromkeys(config.origin(key) for key in keys)
    return " and ".join(places)


def _check_loops(config: Config) -> None:
    """Refuse layouts where the daemon would read its own output back."""
    for inbox in config.inbox:
        if config.output_dir is not None and _inside(config.output_dir, inbox):
            raise ConfigError(
                f"{_origins(config, 'output_dir', 'inbox')}: "
                f"output_dir {config.output_dir} is inside the watched folder "
                f"{inbox}; the sidecars would be read again. Choose a folder outside it, or "
                "leave output_dir empty to write sidecars beside the originals."
            )
        if config.failed_dir is not None and _inside(config.failed_dir, inbox):
            raise ConfigError(
                f"{_origins(config, 'failed_dir', 'inbox')}: "
                f"failed_dir {config.failed_dir} is inside the watched folder "
                f"{inbox}; failed files would be read again. Choose a folder outside it."
            )
        if config.archive_dir is not None and (_inside(config.archive_dir, inbox)
                                               or _inside(inbox, config.archive_dir)):
            raise ConfigError(
                f"{_origins(config, 'archive_dir', 'inbox')}: "
                f"archive_dir {config.archive_dir} and the watched folder "
                f"{inbox} overlap; archived files would be read again. Choose a folder "
                "outside the inbox."
            )
        if _inside(config.database.parent, inbox):
            raise ConfigError(
                f"{_origins(config, 'database', 'inbox')}: "
                f"database {config.database} is inside the watched folder "
                f"{inbox}. Keep the index outside the inbox."
            )
        if _inside(config.cache_dir, inbox):
            raise ConfigError(
                f"{_origins(config, 'cache_dir', 'inbox')}: "
                f"cache_dir {config.cache_dir} is inside the watched folder "
                f"{inbox}; its page thumbnails would be read. Choose a folder outside it."
            )
        if config.output_dir is not None and _inside(inbox, config.output_dir):
            raise ConfigError(
                f"{_origins(config, 'output_dir', 'inbox')}: "
                f"the watched folder {inbox} is inside output_dir "
                f"{config.output_dir}. Choose an output folder outside the inbox."
            )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}. Make it readable for your "
                          "user, or name another file with --config.") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line} is not UTF-8 text (byte {raw[exc.start]:#04x}). "
                          "TOML files must be UTF-8: save it as UTF-8 and start again.") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}. Fix the file or remove it.") from None


def load(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Read defaults, then the TOML file, then the environment, then ``overrides``.

    ``path`` None means the default file in the platform's config folder, which may be
    absent; a path given explicitly must exist.
    """
    environ = os.environ if environ is None else environ
    named_by = "--config"
    if path is None and environ.get("OCRWATCH_CONFIG"):
        path = Path(environ["OCRWATCH_CONFIG"]).expanduser()
        named_by = "the environment variable OCRWATCH_CONFIG"
        explicit = True
    else:
        explicit = path is not None
    if path is None:
        path = paths.config_file()
    config = Config()
    sources = ["defaults"]
    if path.exists():
        _apply(config, _read_toml(path), str(path), config.origins)
        sources.append(str(path))
    elif explicit:
        raise ConfigError(f"config file {path} (named by {named_by}) does not exist. "
                          "Copy config.example.toml there.")
    _env_overrides(config, environ)
    if overrides:
        hints = _hints(Config)
        for key, value in overrides.items():
            if value is None:
                continue
            if "." in key:
                section, sub = key.split(".", 1)
                target = getattr(config, section)
                setattr(target, sub, _coerce(key, "command line", _hints(type(target))[sub],
                                             value, from_text=True))
            else:
                flag = "--" + key.replace("_", "-")
                setattr(config, key, _coerce(key, f"the command-line flag {flag}", hints[key],
                                             value, from_text=True))
            config.origins[key] = f"the command-line flag --{key.replace('_', '-')}"
    config.source = " + ".join(sources)
    validate(config)
    return config
