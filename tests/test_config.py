from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from ocrwatch import config as cfg
from ocrwatch.config import schema
from ocrwatch.core.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_when_no_file(home: Path) -> None:
    c = cfg.load(environ={})
    assert c.inbox == [home / "OCR-Inbox"]
    assert c.engine == "auto"
    assert c.settle_seconds == 2.0
    assert c.database == home / ".local" / "share" / "ocrwatch" / "ocrwatch.sqlite3"
    assert c.output_dir is None


def test_default_file_in_config_dir_is_read(home: Path) -> None:
    path = home / ".config" / "ocrwatch" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text('engine = "tesseract"\nlanguages = ["eng", "fra"]\n')
    c = cfg.load(environ={})
    assert c.engine == "tesseract"
    assert c.languages == ["eng", "fra"]
    assert str(path) in c.source


def test_example_file_documents_every_key_with_its_default(home: Path) -> None:
    example = ROOT / "config.example.toml"
    data = tomllib.loads(example.read_text())
    fields = {f.name for f in dataclasses.fields(cfg.Config)} - schema._INTERNAL
    # Left out on purpose, shown commented: its default depends on the desktop's locale.
    assert "\n# languages = " in example.read_text()
    assert set(data) | {"languages"} == fields and "languages" not in data
    loaded = cfg.load(example, environ={})
    for section, cls in (("vllm", cfg.VllmConfig), ("remote", cfg.RemoteConfig)):
        assert set(data[section]) == {f.name for f in dataclasses.fields(cls)
                                      if f"{section}.{f.name}" not in schema.BENCHMARK_KEYS}
        for f in dataclasses.fields(cls):
            default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                       else f.default)
            assert getattr(getattr(loaded, section), f.name) == default, f"{section}.{f.name}"
    assert loaded.engine == cfg.Config().engine
    assert loaded.languages == cfg.Config().languages
    assert loaded.max_pixels == cfg.Config().max_pixels


def test_a_copied_example_keeps_the_desktops_language(home: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Copying the example must not pin English: German data installed and a German
    desktop give ["eng", "deu"] with the example file as with no file at all."""
    from ocrwatch.config import languages

    monkeypatch.setattr(languages, "available_languages",
                        lambda explicit=None: {"eng": Path("eng"), "deu": Path("deu")})
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    assert cfg.load(ROOT / "config.example.toml", environ={}).languages == ["eng", "deu"]


@pytest.mark.parametrize("given", ["eng+fra", "eng,fra", "eng + fra", "eng+fra,eng"])
def test_languages_take_tesseracts_plus_form_and_commas(home: Path, given: str) -> None:
    assert cfg.load(overrides={"languages": given}, environ={}).languages == ["eng", "fra"]
    assert cfg.load(environ={"OCRWATCH_LANGUAGES": given}).languages == ["eng", "fra"]


def test_languages_plus_form_in_the_file(home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, 'languages = "eng+deu"\n')
    assert cfg.load(path, environ={}).languages == ["eng", "deu"]
    path = write(tmp_path, 'languages = ["eng+deu", "fra"]\n')
    assert cfg.load(path, environ={}).languages == ["eng", "deu", "fra"]


def test_unknown_key_names_key_file_and_known_keys(home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "setle_seconds = 3\n")
    with pytest.raises(ConfigError) as err:
        cfg.load(path, environ={})
    msg = str(err.value)
    assert "setle_seconds" in msg and str(path) in msg and "settle_seconds" in msg


def test_unknown_key_in_section(home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "[vllm]\nmodle = 'x'\n")
    with pytest.raises(ConfigError, match=r"vllm\.modle"):
        cfg.load(path, environ={})


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("settle_seconds = 'soon'", "settle_seconds"),
        ("settle_seconds = -1", "settle_seconds"),
        ("engine = 'magic'", "engine"),
        ("languages = []", "languages"),
        ("pdf_dpi = 5000", "pdf_dpi"),
        ("follow_symlinks = 'yes'", "follow_symlinks"),
        ("max_pages = true", "max_pages"),
        ("inbox = 3", "inbox"),
        ("[vllm]\ntemperature = 9", "vllm.temperature"),
        ("[remote]\nurls = ['ftp://host/v1']", "remote.urls"),
        ("[remote]\nurls = ['http:///v1']", "remote.urls"),
        ("[remote]\nurls = ['http://a:8000/v1?x=1']", "remote.urls"),
        ("[remote]\nurls = ['http://user:pw@a:8000/v1']", "remote.urls"),
        ("[remote]\nurls = ['http://a:80x/v1']", "remote.urls"),
        ("[remote]\nurls = ['http://a/v1', 'http://a/v1/']", "remote.urls"),
        ("[remote]\nurl = 'http://b/v1'\nurls = ['http://a/v1']", "remote.url"),
        ("[remote]\nurl = '127.0.0.1:8000'", "remote.url"),
        ("[remote]\nconcurrency = 0", "remote.concurrency"),
        ("[remote]\nconcurrency = 5000", "remote.concurrency"),
        ("[remote]\nretry_seconds = 0", "remote.retry_seconds"),
        ("[remote]\nhealth_seconds = -1", "remote.health_seconds"),
        ("[remote]\nca_file = '/nonexistent/ca.pem'", "remote.ca_file"),
    ],
)
def test_bad_values_name_the_key(home: Path, tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as err:
        cfg.load(path, environ={})
    assert key in str(err.value)
    assert str(path) in str(err.value)


def test_invalid_toml_is_reported(home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "engine = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        cfg.load(path, environ={})


def test_a_config_nested_50000_deep_is_reported_naming_the_file(home: Path,
                                                                 tmp_path: Path) -> None:
    """Before: "unexpected error … report that" (a RecursionError in the TOML parser)."""
    path = write(tmp_path, "x = " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ConfigError, match="nested too deep") as err:
        cfg.load(path, environ={})
    assert str(path) in str(err.value) and "Fix the file" in str(err.value)


def test_missing_explicit_file(home: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        cfg.load(tmp_path / "nope.toml", environ={})


def test_environment_overrides_file_and_flags_override_environment(
    home: Path, tmp_path: Path
) -> None:
    path = write(tmp_path, 'engine = "tesseract"\nsettle_seconds = 5\n[vllm]\nmodel = "a"\n')
    env = {"OCRWATCH_SETTLE_SECONDS": "7.5", "OCRWATCH_VLLM_MODEL": "/models/b",
           "OCRWATCH_INBOX": f"{tmp_path}/a,{tmp_path}/b", "OCRWATCH_FOLLOW_SYMLINKS": "yes"}
    c = cfg.load(path, environ=env)
    assert c.settle_seconds == 7.5
    assert c.vllm.model == "/models/b"
    assert c.inbox == [tmp_path / "a", tmp_path / "b"]
    assert c.follow_symlinks is True
    c = cfg.load(path, environ=env, overrides={"settle_seconds": "1", "engine": "fake"})
    assert c.settle_seconds == 1.0
    assert c.engine == "fake"


def test_bad_environment_value_names_variable(home: Path) -> None:
    with pytest.raises(ConfigError, match="OCRWATCH_WORKERS"):
        cfg.load(environ={"OCRWATCH_WORKERS": "many"})


def test_config_path_from_environment(home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, 'engine = "fake"\n')
    assert cfg.load(environ={"OCRWATCH_CONFIG": str(path)}).engine == "fake"


def test_tilde_and_several_inboxes(home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, 'inbox = ["~/Scans", "~/Faxes"]\n')
    assert cfg.load(path, environ={}).inbox == [home / "Scans", home / "Faxes"]


@pytest.mark.parametrize(
    "text",
    [
        'inbox = ["~/In"]\noutput_dir = "~/In/out"',
        'inbox = ["~/In"]\nfailed_dir = "~/In/failed"',
        'inbox = ["~/In"]\ndatabase = "~/In/index.sqlite3"',
        'inbox = ["~/Archive/In"]\noutput_dir = "~/Archive"',
    ],
)
def test_layouts_that_would_loop_are_refused(home: Path, tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="inside"):
        cfg.load(write(tmp_path, text + "\n"), environ={})


def test_output_dir_outside_inbox_is_fine(home: Path, tmp_path: Path) -> None:
    c = cfg.load(write(tmp_path, 'inbox = ["~/In"]\noutput_dir = "~/Out"\n'), environ={})
    assert c.output_dir == home / "Out"


def test_remote_servers_and_key_from_file_and_environment(home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "[remote]\nurls = ['http://gpu1:8000/v1', 'https://gpu2/v1']\n")
    c = cfg.load(path, environ={})
    assert c.remote.urls == ["http://gpu1:8000/v1", "https://gpu2/v1"]
    assert c.remote.api_key == ""
    env = {"OCRWATCH_REMOTE_URLS": "http://a:8000/v1, http://b:8001/v1",
           "OCRWATCH_REMOTE_API_KEY": "sekret"}
    c = cfg.load(environ=env)
    assert c.remote.urls == ["http://a:8000/v1", "http://b:8001/v1"]  # colons kept
    assert c.remote.api_key == "sekret"


def test_benchmark_switches_are_read_only_where_testing_is_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ignore_eos (every page runs to max_tokens, for benchmarks) is not a user's setting."""
    path = tmp_path / "config.toml"
    path.write_text("[vllm]\nignore_eos = true\n")
    monkeypatch.delenv(schema.TESTING_VARIABLE, raising=False)
    with pytest.raises(ConfigError, match=r"vllm\.ignore_eos is a benchmark switch .*"
                                          r"OCRWATCH_TESTING=1"):
        cfg.load(path, environ={})
    monkeypatch.setenv(schema.TESTING_VARIABLE, "1")
    assert cfg.load(path, environ={}).vllm.ignore_eos is True
