"""The engine registry: one record per engine drives the config, the command line, doctor,
status and the daemon; test-only engines are registered by ocrwatch.testing alone. The
registry fills itself on first use: the config and the command line import no engine."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import child_env, ocrwatch

from ocrwatch import config as config_mod
from ocrwatch.cli.parser import build_parser
from ocrwatch.config import Config, schema
from ocrwatch.core.errors import ConfigError, EngineUnavailable
from ocrwatch.doctor.checks import check_remote, check_tesseract
from ocrwatch.doctor.gpu import check_gpu
from ocrwatch.engines import registry
from ocrwatch.engines.base import Doctor, Engine, Registration
from ocrwatch.testing.fake import FakeEngine

PACKAGE = Path(__file__).resolve().parent.parent / "ocrwatch"
USER_ENGINES = ("auto", "tesseract", "vllm", "remote")


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Config]]:
    """A new engine, "probe", registered for one test: what a new engine module does."""
    monkeypatch.setattr(registry, "_ENGINES", dict(registry._ENGINES))
    monkeypatch.setattr(schema, "_ENGINES", list(schema._ENGINES))
    built: list[Config] = []

    def build(config: Config) -> Engine:
        built.append(config)
        return FakeEngine()

    registry.register(Registration(
        "probe", build, section="remote", doctor=(Doctor.GPU, Doctor.SERVERS),
        note=lambda config: f"probe reads {len(config.languages)} languages",
        languages=True))
    yield built


def doctor_help() -> str:
    """``ocrwatch doctor --help``, on one line."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(sub.choices["doctor"].format_help().split())


def test_users_are_offered_their_engines_and_never_the_fake_one() -> None:
    assert registry.names(public_only=True) == USER_ENGINES
    assert "fake" in registry.names()  # registered by ocrwatch.testing for the tests
    help_text = doctor_help()
    assert "OCR engine: auto, tesseract, vllm, remote" in help_text
    assert "fake" not in help_text


def test_without_the_testing_switch_fake_is_an_unknown_engine(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = child_env(home)
    env.pop("OCRWATCH_TESTING")
    flag = ocrwatch(["doctor", "--json", "--engine", "fake"], env)
    assert flag.returncode == 2
    assert "'fake' is not an engine; choose auto, tesseract, vllm, remote" in flag.stderr
    config = tmp_path / "config.toml"
    config.write_text('engine = "fake"\n')
    loaded = ocrwatch(["doctor", "--json", "--config", str(config)], env)
    assert loaded.returncode == 2
    assert "engine = 'fake' is not one of auto, tesseract, vllm, remote." in loaded.stderr
    # With the switch the tests' processes run it.
    allowed = ocrwatch(["doctor", "--json", "--config", str(config)], child_env(home))
    assert "not one of" not in allowed.stderr and '"name"' in allowed.stdout


def test_a_registered_engine_is_accepted_built_checked_and_noted(
        probe: list[Config]) -> None:
    config = config_mod.load(None, environ={}, overrides={"engine": "probe"})
    assert config.engine == "probe" and "probe" in registry.names(public_only=True)
    engine = registry.create(config)
    assert isinstance(engine, FakeEngine) and probe == [config]
    engine.close()
    assert build_parser().parse_args(["doctor", "--engine", "probe"]).engine == "probe"
    assert "OCR engine: auto, tesseract, vllm, remote, probe" in doctor_help()
    # Doctor asks the record: the GPU is needed, Tesseract is not (no PDF asked for).
    assert check_gpu(config, "no NVIDIA driver")[0].ok is False
    assert check_tesseract(config)[0].detail == "not needed: the engine is probe"
    # Status and the staleness of pages read follow the record too.
    assert registry.note("probe", config) == f"probe reads {len(config.languages)} languages"
    assert registry.read_with("probe", config) == f"probe {'+'.join(config.languages)}"
    assert registry.scans("probe") is True and registry.scans("fake") is False


def test_the_servers_check_names_the_engines_own_section(
        probe: list[Config], monkeypatch: pytest.MonkeyPatch) -> None:
    from ocrwatch.engines import remote

    def no_servers(self: remote.RemoteEngine) -> list[dict[str, object]]:
        raise EngineUnavailable("no server answers")

    monkeypatch.setattr(remote.RemoteEngine, "check", no_servers)
    config = Config(engine="probe")
    (check,) = check_remote(config)
    assert (check.name, check.ok, check.fix) == ("OCR servers", False,
                                                 "fix the [remote] section")
    assert check_remote(Config(engine="tesseract")) == []


def test_an_unknown_engine_is_refused_by_the_config_and_by_create() -> None:
    with pytest.raises(ConfigError, match="engine = 'magic' is not one of auto, tesseract, "
                                          "vllm, remote, fake"):
        config_mod.load(None, environ={}, overrides={"engine": "magic"})
    with pytest.raises(EngineUnavailable, match="unknown engine 'magic'"):
        registry.create(Config(), "magic")


def test_each_engine_module_declares_its_record() -> None:
    from ocrwatch.engines import remote, tesseract_entry
    from ocrwatch.engines.tesseract import TesseractEngine
    from ocrwatch.engines.vllm import entry

    records = {m.ENGINE.name: m.ENGINE for m in (tesseract_entry, entry, remote)}
    assert {n: registry.get(n) for n in records} == records
    assert records["vllm"].section == "vllm" and records["remote"].section == "remote"
    assert records["tesseract"].languages and not records["vllm"].languages
    fake = registry.get("fake")
    assert fake is not None and not fake.public and not fake.scans
    assert isinstance(registry.create(Config(), "fake"), FakeEngine)
    tesseract = registry.create(Config(languages=["eng"]), "tesseract")
    try:
        assert isinstance(tesseract, TesseractEngine)
    finally:
        tesseract.close()


# An engine's name compared as a string: the registry answers such questions instead.
NAME_TEST = re.compile(r'''[!=]=\s*"(auto|tesseract|vllm|remote|fake)"'''
                       r'''|(?:engine|name)\s+(?:not\s+)?in\s*\([^)]*"(tesseract|vllm|remote|fake)"''')


def test_no_engine_names_are_compared_outside_the_engines() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("engines", "testing"):
            continue  # the registry and the engine modules themselves
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = NAME_TEST.search(line)
            if match is None:
                continue
            if match.group(1) == "auto" and "engine" not in line:
                continue  # "auto" is also a value of pdfa, observer, pdf_text...
            found.append(f"{rel}:{number}: {line.strip()}")
    assert found == []


def test_the_registrys_modules_are_the_configs_engines() -> None:
    """A name the config accepts has a module that declares it, and the other way round."""
    assert set(registry._MODULES) == {*schema.ENGINES, *schema.TESTING_ENGINES}


def plain_python(code: str, tmp_path: Path, testing: bool = False) -> list[str]:
    """Run ``code`` in a fresh interpreter, as a user's script would (no test package, no
    registry imported first); its printed lines."""
    env = child_env(tmp_path / "home")
    if not testing:
        env.pop("OCRWATCH_TESTING")
    env["PYTHONPATH"] = str(PACKAGE.parent)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


ENGINE_MODULES = ("[m for m in sys.modules if m.startswith('ocrwatch.engines') "
                  "or m == 'ocrwatch.testing']")


def test_a_scripts_load_works_on_the_default_config_and_imports_no_engine(
        tmp_path: Path) -> None:
    out = plain_python(
        "import sys\n"
        "from ocrwatch.config import load\n"
        "config = load()\n"
        "print(config.engine)\n"
        f"print(sorted({ENGINE_MODULES}))\n"
        "config = load(overrides={'engine': 'remote'})\n"
        "print(config.engine)\n", tmp_path)
    assert out == ["auto", "[]", "remote"]


def test_an_engine_is_imported_the_first_time_it_is_asked_for(tmp_path: Path) -> None:
    out = plain_python(
        "import sys\n"
        "from ocrwatch.engines import registry\n"
        f"print(sorted({ENGINE_MODULES}))\n"
        "print(registry.names(public_only=True))\n"
        "print(registry.get('remote').section)\n"
        f"print(sorted({ENGINE_MODULES}))\n"
        "print(registry.get('fake'))\n", tmp_path)
    assert out[0] == "['ocrwatch.engines', 'ocrwatch.engines.base', 'ocrwatch.engines.gpu', " \
                     "'ocrwatch.engines.registry']"
    assert out[1] == "('auto', 'tesseract', 'vllm', 'remote')"
    assert out[2] == "remote" and "ocrwatch.engines.remote" in out[3]
    assert "ocrwatch.engines.tesseract" not in out[3]
    assert "'ocrwatch.engines.tesseract_entry'" not in out[3]
    assert "ocrwatch.engines.vllm.entry" not in out[3]
    assert out[4] == "None"  # without the testing switch the fake engine is unknown


def test_with_the_testing_switch_a_script_reads_with_the_fake_engine(tmp_path: Path) -> None:
    out = plain_python(
        "from ocrwatch.config import load\n"
        "from ocrwatch.engines import registry\n"
        "config = load(overrides={'engine': 'fake'})\n"
        "print(type(registry.create(config)).__name__)\n", tmp_path, testing=True)
    assert out == ["FakeEngine"]


def test_asking_about_an_engine_imports_its_entry_not_the_engine(tmp_path: Path) -> None:
    """``ocrwatch status`` wants the Tesseract engine's note, ``doctor`` its checks: its
    registry entry answers without the engine (Pillow, the text rules) being imported."""
    out = plain_python(
        "import sys\n"
        "from ocrwatch.config import load\n"
        "from ocrwatch.engines import registry\n"
        "from ocrwatch.engines.base import Doctor\n"
        "config = load(overrides={'engine': 'tesseract'})\n"
        "print(registry.needs(config, Doctor.TESSERACT), registry.read_with('tesseract', config))\n"
        "registry.note('tesseract', config)\n"
        f"print(sorted({ENGINE_MODULES}))\n", tmp_path)
    assert out[0].startswith("True tesseract ")
    assert "'ocrwatch.engines.tesseract_entry'" in out[1]
    assert "'ocrwatch.engines.tesseract'" not in out[1]
