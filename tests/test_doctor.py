"""``ocrwatch doctor``: each check against a controlled machine (a stand-in NVML, temp dirs)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, install

from ocrwatch.config import Config
from ocrwatch.doctor import checks as doctor
from ocrwatch.fs import paths


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean machine: no GPU, no model cache, no display, our own folders."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(paths, "log_dir", lambda: tmp_path / "logs")
    install(monkeypatch, None)
    return tmp_path


def config(tmp: Path, **kw: object) -> Config:
    c = Config(inbox=[tmp / "inbox"], database=tmp / "data" / "index.sqlite3")
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {c.name: c for c in checks}


def offline(_model: str) -> str:
    return "huggingface.co not reachable (test)"


def test_cpu_machine_auto_engine_is_all_ok(machine: Path) -> None:
    checks = doctor.run_checks(config(machine), reachable=offline)
    named = by_name(checks)
    assert named["GPU"].ok and "Tesseract CPU engine" in named["GPU"].detail
    assert named["vLLM"].ok
    assert "model" not in named
    assert named["inbox"].ok and "will be created" in named["inbox"].detail
    assert named["display and tray"].ok and "no display" in named["display and tray"].detail
    assert named["daemon"].detail.startswith("no daemon is running")
    assert all(c.ok for c in checks), doctor.format_report(checks)
    assert doctor.format_report(checks).endswith("everything the daemon needs is in place")


def test_vllm_engine_without_gpu_fails_with_a_fix(machine: Path) -> None:
    named = by_name(doctor.run_checks(config(machine, engine="vllm"), reachable=offline))
    assert not named["GPU"].ok and "NVIDIA driver did not answer" in named["GPU"].detail
    assert "driver" in named["GPU"].fix
    report = doctor.format_report(list(named.values()))
    assert "[FAIL] GPU" in report and "fix: install the NVIDIA driver" in report


def test_gpu_old_driver_and_a_busy_card(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A game holds 11 GiB of the 16 GB card: the engine would hold its files, and says so.
    install(monkeypatch, FakeNvml(driver="550.54.14", used_mib=11 * 1024 + 200,
                                  graphics={4242: 11 * 1024}))
    checks = doctor.check_gpu(config(machine, engine="vllm"), doctor._smi())
    named = by_name(checks)
    assert not named["GPU and driver"].ok and "580" in named["GPU and driver"].fix
    assert "RTX 4080, driver 550.54.14" in named["GPU and driver"].detail
    memory = named["GPU memory"]
    assert not memory.ok
    assert "the GPU is busy: 11.2 GiB held by other programs" in memory.detail
    assert "files wait" in memory.fix


def test_gpu_good(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(name="NVIDIA H200", total_mib=143771, used_mib=500))
    named = by_name(doctor.check_gpu(config(machine), doctor._smi()))
    assert named["GPU and driver"].ok and named["GPU memory"].ok
    # The engine's own plan, as it would start now.
    assert "pages in flight" in named["GPU memory"].detail
    assert "0.5 GiB held by other programs" in named["GPU memory"].detail


def test_gpu_budget_is_judged_by_the_engines_own_plan(machine: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A 4 GiB budget: the engine would refuse to start, so doctor fails too.
    install(monkeypatch, FakeNvml(used_mib=300))
    c = config(machine, engine="vllm")
    c.vllm.gpu_memory_gb = 4.0
    named = by_name(doctor.check_gpu(c, doctor._smi()))
    assert not named["GPU memory budget"].ok
    assert "needs at least" in named["GPU memory budget"].detail
    assert "vllm.gpu_memory_gb" in named["GPU memory budget"].fix


def test_nvml_failure_is_reported(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, None, "the NVIDIA driver did not answer (Driver Not Loaded)")
    smi = doctor._smi()
    assert isinstance(smi, str) and "Driver Not Loaded" in smi


def test_model_cached_downloadable_or_not(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(name="NVIDIA H200", total_mib=143771, used_mib=1771))
    smi = doctor._smi()
    c = config(machine, engine="vllm")
    (miss,) = doctor.check_model(c, smi, reachable=offline)
    assert not miss.ok and "not reachable" in miss.detail and "vllm.model" in miss.fix
    (fine,) = doctor.check_model(c, smi, reachable=lambda _m: None)
    assert fine.ok and "downloadable" in fine.detail
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (off,) = doctor.check_model(c, smi, reachable=lambda _m: None)
    assert not off.ok and "huggingface-cli download" in off.fix
    snap = (machine / "hub" / "models--lightonai--LightOnOCR-2-1B" / "snapshots" / "abc123")
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_bytes(b"")
    (cached,) = doctor.check_model(c, smi, reachable=offline)
    assert cached.ok and str(snap) in cached.detail


def test_vllm_presence(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(name="NVIDIA H200", total_mib=143771, used_mib=1771))
    smi = doctor._smi()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    (absent,) = doctor.check_vllm(config(machine, engine="vllm"), smi)
    assert not absent.ok and "make run GPU=1" in absent.fix
    (auto,) = doctor.check_vllm(config(machine), smi)
    assert auto.ok and "CPU engine" in auto.detail  # auto falls back to Tesseract


def test_missing_language(machine: Path) -> None:
    (chk,) = doctor.check_tesseract(config(machine, languages=["eng", "zzz"]))
    assert not chk.ok and "missing: zzz" in chk.detail
    assert "tesseract-ocr-zzz" in chk.fix


def test_unwritable_inbox_and_index(machine: Path) -> None:
    blocker = machine / "file"
    blocker.write_text("x")
    checks = doctor.check_folders(config(machine, inbox=[blocker],
                                         database=blocker / "index.sqlite3"))
    named = by_name(checks)
    assert not named["inbox"].ok and "not a folder" in named["inbox"].detail
    assert not named["index"].ok and "database" in named["index"].fix


def test_low_disk(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "MIN_FREE_DISK_MB", 1 << 40)
    (chk,) = doctor.check_disk(config(machine))
    assert not chk.ok and "free some space" in chk.fix


def test_tray_checks() -> None:
    (none,) = doctor.check_tray({}, "linux")
    assert none.ok and "no display" in none.detail
    (nobus,) = doctor.check_tray({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    if importlib.util.find_spec("gi") is None:
        # Which system packages it names: test_only_packages_not_installed_are_named.
        assert not nobus.ok and "make run" in nobus.fix
    else:
        assert not nobus.ok and "dbus-run-session" in nobus.fix
        (good,) = doctor.check_tray({"DISPLAY": ":0", "DBUS_SESSION_BUS_ADDRESS": "x"},
                                    "linux")
        assert good.ok and "tray backend" in good.detail
    (mac,) = doctor.check_tray({}, "darwin")
    assert mac.ok


def test_a_broken_check_does_not_hide_the_rest(
    machine: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def boom(_c: Config) -> list[doctor.Check]:
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor, "check_disk", boom)
    named = by_name(doctor.run_checks(config(machine), reachable=offline))
    assert not named["free disk"].ok and "boom" in named["free disk"].detail
    assert "daemon" in named


def test_quick_and_imports_no_torch() -> None:
    code = ("import sys, time; t = time.monotonic();"
            "from ocrwatch import config; from ocrwatch.doctor import checks as doctor;"
            "doctor.run_checks(config.Config(), reachable=lambda m: None);"
            "assert 'torch' not in sys.modules and 'vllm' not in sys.modules, 'heavy import';"
            "print(time.monotonic() - t)")
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert float(out.stdout.strip()) < 15
    assert time.monotonic() - start < 30


def test_remote_servers_are_probed(machine: Path) -> None:
    from fake_openai import FakeServer
    from test_remote_engine import free_port

    down = f"http://127.0.0.1:{free_port()}/v1"
    with FakeServer() as up, FakeServer(api_key="right") as locked:
        c = config(machine, engine="remote")
        c.remote.urls = [up.url, down, locked.url]
        c.remote.api_key = "wrong"
        servers = [x for x in doctor.run_checks(c, reachable=offline) if x.name == "OCR server"]
    assert [s.ok for s in servers] == [True, False, False]
    assert "serves lightonai/LightOnOCR-2-1B" in servers[0].detail
    assert "nothing answers" in servers[1].detail and "vllm serve" in servers[1].fix
    assert "remote.api_key" in servers[2].fix
    assert up.chat_requests == 0  # a probe reads no page


# -- advice that fits how ocrwatch was installed -------------------------------------------
def _layouts(tmp: Path) -> dict[str, tuple[Path, Path]]:
    """Fake installations as each way leaves them: (environment, ocrwatch package)."""
    site = "lib/python3.12/site-packages/ocrwatch"
    checkout = tmp / "src" / "ocrwatch"
    (checkout / "ocrwatch").mkdir(parents=True)
    (checkout / "Makefile").write_text("run:\n")
    (checkout / "pyproject.toml").write_text("[project]\nname = \"ocrwatch\"\n")
    pipx = tmp / "home" / ".local" / "share" / "pipx" / "venvs" / "ocrwatch"
    uv = tmp / "home" / ".local" / "share" / "uv" / "tools" / "ocrwatch"
    plain = tmp / "venv"
    for env in (pipx, uv, plain):
        (env / site).mkdir(parents=True)
    (pipx / "pipx_metadata.json").write_text("{}")
    (uv / "uv-receipt.toml").write_text("[tool]\n")
    return {"checkout": (checkout / ".venv", checkout / "ocrwatch"),
            "pipx": (pipx, pipx / site), "uv": (uv, uv / site), "pip": (plain, plain / site)}


def test_the_installation_is_told_apart(tmp_path: Path) -> None:
    from ocrwatch.doctor.install import detect

    layouts = _layouts(tmp_path)
    found = {kind: detect(prefix, package, python=str(prefix / "bin" / "python"))
             for kind, (prefix, package) in layouts.items()}
    assert {kind: i.kind for kind, i in found.items()} == {k: k for k in layouts}
    assert found["checkout"].root == tmp_path / "src" / "ocrwatch"
    assert found["checkout"].extra("gpu", "GPU=1") == (
        f"`make run GPU=1` in {tmp_path / 'src' / 'ocrwatch'}")
    assert found["pipx"].extra("tray") == "`pipx install --force 'ocrwatch[tray]'`"
    assert found["uv"].extra("gpu") == "`uv tool install --reinstall 'ocrwatch[gpu]'`"
    assert found["pip"].extra("tray") == (
        f"`{tmp_path / 'venv' / 'bin' / 'python'} -m pip install 'ocrwatch[tray]'`")


def test_a_pipx_user_is_not_told_to_run_make(machine: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrwatch.doctor.install import detect

    prefix, package = _layouts(machine)["pipx"]
    pipx = detect(prefix, package)
    install(monkeypatch, FakeNvml(name="NVIDIA H200", total_mib=143771, used_mib=1771))
    smi = doctor._smi()
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: None if name in ("vllm", "gi") else real_find_spec(name))
    (vllm,) = doctor.check_vllm(config(machine, engine="vllm"), smi, install=pipx)
    assert "make" not in vllm.fix and "pipx install --force 'ocrwatch[gpu]'" in vllm.fix
    (tray,) = doctor.check_tray({"WAYLAND_DISPLAY": "wayland-0"}, "linux", install=pipx)
    assert not tray.ok and "make" not in tray.fix
    assert "pipx install --force 'ocrwatch[tray]'" in tray.fix


def _installed(package: str) -> bool:
    """Asked of dpkg directly, as a person would."""
    out = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", package],
                         capture_output=True, text=True, check=False).stdout
    return out.startswith("ii")


needs_dpkg = pytest.mark.skipif(not Path("/usr/bin/dpkg-query").exists(),
                                reason="needs dpkg (Debian, Ubuntu)")


@needs_dpkg
def test_only_packages_not_installed_are_named(machine: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrwatch.doctor import desktop
    from ocrwatch.doctor.install import Install, debs_missing

    assert debs_missing(["dpkg", "ocrwatch-no-such-package"]) == ["ocrwatch-no-such-package"]
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: None if name == "gi" else real_find_spec(name))
    checkout = Install("checkout", machine / "src")
    (tray,) = doctor.check_tray({"WAYLAND_DISPLAY": "wayland-0"}, "linux", install=checkout)
    missing = [p for p in desktop.TRAY_DEBIAN if not _installed(p)]
    for package in desktop.TRAY_DEBIAN:
        assert (f" {package}" in tray.fix) == (package in missing), (package, tray.fix)
    assert f"`make run` in {machine / 'src'} again" in tray.fix
    if not missing:
        assert "apt" not in tray.fix
    # A language whose package is installed, but whose data Tesseract does not find: no
    # apt advice, the folder to set instead.
    monkeypatch.setattr("ocrwatch.engines.tesseract.available_languages",
                        lambda folder=None: {})
    (lang,) = doctor.check_tesseract(config(machine, languages=["eng"]))
    if _installed("tesseract-ocr-eng"):
        assert "apt" not in lang.fix and "tessdata" in lang.fix and "installed" in lang.fix
    else:
        assert "sudo apt install tesseract-ocr-eng" in lang.fix
