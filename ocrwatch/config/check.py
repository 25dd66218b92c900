"""Validation: values of the right type but a wrong meaning, each refused with where it came
from, so the user knows what to edit.
"""

from __future__ import annotations

import ipaddress
import os
import typing
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ocrwatch.config.schema import (
    LAYOUTS,
    MODEL_PROFILES,
    OBSERVERS,
    ON_DONE_TIMEOUT_MAX,
    ON_SUCCESS,
    OUTPUTS,
    PDF_TEXT,
    PDFA,
    RANGES,
    Config,
    RemoteConfig,
    engine_names,
)
from ocrwatch.core.errors import ConfigError


def split_languages(languages: list[str]) -> list[str]:
    """``["eng+fra", "deu"]`` -> ``["eng", "fra", "deu"]``: each code once, in order."""
    codes: list[str] = []
    for entry in languages:
        for code in entry.replace("+", ",").split(","):
            code = code.strip()
            if code and code not in codes:
                codes.append(code)
    return codes


def validate(config: Config) -> None:
    """Check values that have the right type but a wrong meaning.

    Each message starts with where the bad value came from, so the user knows what to edit.
    """

    def fail(key: str, msg: str) -> None:
        raise ConfigError(f"{config.origin(key)}: {key} {msg}")

    engines = engine_names()  # registered by ocrwatch/engines/registry.py
    if config.engine not in engines:
        fail("engine", f"= {config.engine!r} is not one of {', '.join(engines)}.")
    if config.pdf_text not in PDF_TEXT:
        fail("pdf_text", f"= {config.pdf_text!r} is not one of {', '.join(PDF_TEXT)} (auto: "
                         "a PDF page's own text when it is real text, else OCR).")
    if config.observer not in OBSERVERS:
        fail("observer", f"= {config.observer!r} is not one of {', '.join(OBSERVERS)}.")
    if not config.inbox:
        fail("inbox", "must name at least one folder to watch.")
    # Tesseract, OCRmyPDF and paperless-ngx write "eng+fra"; a list or "eng,fra" works too.
    config.languages = split_languages(config.languages)
    if not config.languages or any("/" in lang for lang in config.languages):
        fail("languages", "must be Tesseract language codes such as ['eng', 'deu'] "
                          "(or \"eng+deu\", \"eng,deu\").")
    for pattern in config.ignore:
        if not pattern.strip() or "/" in pattern or os.sep in pattern:
            fail("ignore", f"holds {pattern!r}: its patterns match file names, not folders "
                           "or paths: write \"*.tmp\" or \"draft-*.pdf\".")
    for key, (low, high) in RANGES.items():
        owner: Any = config
        for part in key.split("."):
            owner = getattr(owner, part)
        if not low <= owner <= high:
            fail(key, f"= {owner!r} is out of range: it must be between {low:g} and {high:g}"
                      f"{_RANGE_HINTS.get(key, '')}.")
    if config.vllm.load_format not in ("auto", "dummy", "safetensors"):
        fail("vllm.load_format", "must be 'auto', 'safetensors' or 'dummy'.")
    if config.vllm.kv_cache_dtype not in ("auto", "fp8"):
        fail("vllm.kv_cache_dtype", "must be 'auto' (the model's bf16) or 'fp8'.")
    if config.vllm.quantization not in ("none", "fp8"):
        fail("vllm.quantization", "must be 'none' (the model's bf16 weights) or 'fp8' "
                                  "(vLLM's dynamic fp8, compute capability 8.9 or newer).")
    if config.model_profile not in MODEL_PROFILES:
        fail("model_profile", f"= {config.model_profile!r} is not one of "
                              f"{', '.join(repr(n) for n in MODEL_PROFILES)} "
                              "(docs/models.md says which to choose).")
    _validate_model_sections(config, fail)
    _validate_outputs(config, fail)
    if config.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        fail("log_level", "must be DEBUG, INFO, WARNING or ERROR.")
    problem = metrics_address_problem(config.metrics_address)
    if problem:
        fail("metrics_address", f"= {config.metrics_address!r} {problem}.")
    _check_loops(config)


def metrics_endpoint(address: str) -> tuple[str, int]:
    """``"127.0.0.1:9464"`` -> ``("127.0.0.1", 9464)``; ``"[::1]:9464"`` -> ``("::1", 9464)``.

    Raises ValueError with what is wrong (validate() words it for the user)."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host:
        raise ValueError("must be HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("has no port between 1 and 65535")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            # A name could resolve to anything, on any interface: an address is explicit.
            raise ValueError("must name an IP address or localhost") from None
    return host, int(port)


def metrics_address_problem(address: str) -> str | None:
    """Why ``metrics_address`` cannot be served, or None (empty: metrics off)."""
    if not address.strip():
        return None
    try:
        metrics_endpoint(address)
    except ValueError as exc:
        return (f"{exc}, e.g. \"127.0.0.1:9464\" (this machine only), or empty to turn "
                "metrics off")
    return None


def is_loopback(address: str) -> bool:
    """Whether only this machine can reach ``metrics_address``."""
    host, _ = metrics_endpoint(address)
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


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
    if not 0 <= r.per_server <= 1024:
        fail("remote.per_server", f"= {r.per_server} must be between 0 (off) and 1024 "
                                  "(requests in flight for each server that is up).")
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
        from ocrwatch.core.hookshell import check as check_hook

        if (refused := check_hook(config.on_done)) is not None:
            fail("on_done", f"= {config.on_done!r}: {refused}.")
    if config.on_done_timeout <= 0:
        fail("on_done_timeout", "must be greater than 0 (seconds).")
    if config.on_done_timeout > ON_DONE_TIMEOUT_MAX:
        # Past the platform's wait limits the daemon could not even stop.
        fail("on_done_timeout", f"= {config.on_done_timeout:g} is out of range: at most "
                                f"{ON_DONE_TIMEOUT_MAX} seconds (a day).")


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
