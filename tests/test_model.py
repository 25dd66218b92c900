"""Model resolution: local folders, the Hugging Face cache, and clear errors. No network."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.engines import model

MAKE_MODEL = Path(__file__).resolve().parents[2] / "shared" / "gpu" / "make_model.py"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # Belt and braces: nothing in these tests may reach the hub.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_a_local_folder_is_used_as_is(tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert model.resolve(str(folder)) == folder.resolve()


def test_a_relative_folder_works_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert model.resolve("./m") == (tmp_path / "m").resolve()


def test_a_folder_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable, match=r"no config\.json"):
        model.resolve(str(tmp_path))


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable, match="does not exist"):
        model.resolve(str(tmp_path / "nowhere"))


def test_a_name_that_is_neither_is_refused() -> None:
    with pytest.raises(EngineUnavailable, match="neither an existing folder nor"):
        model.resolve("not/a/hub/id")
    with pytest.raises(EngineUnavailable, match="empty"):
        model.resolve("  ")


hub = pytest.mark.skipif(importlib.util.find_spec("huggingface_hub") is None,
                         reason="huggingface_hub is not installed (the 'gpu' extra)")


@hub
def test_an_uncached_hub_id_offline_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable, match="not in the Hugging Face cache") as info:
        model.resolve("lightonai/LightOnOCR-2-1B", cache_dir=tmp_path)
    assert "HF_HUB_OFFLINE" in str(info.value) and "vllm.model" in str(info.value)


@hub
def test_a_cached_hub_id_is_read_from_the_cache(tmp_path: Path) -> None:
    # The cache's own layout: refs/main names a snapshot folder holding the files.
    repo = tmp_path / "models--lightonai--LightOnOCR-2-1B"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "mistral3"}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    found = model.resolve("lightonai/LightOnOCR-2-1B", cache_dir=tmp_path)
    assert found == snapshot


@pytest.mark.skipif(not MAKE_MODEL.exists() or importlib.util.find_spec("tokenizers") is None,
                    reason="needs ../shared/gpu/make_model.py and the tokenizers package")
def test_a_folder_made_like_lightonocr_resolves(tmp_path: Path) -> None:
    args = [sys.executable, str(MAKE_MODEL), str(tmp_path / "m")]
    if importlib.util.find_spec("torch") is not None:
        args.append("--tiny")  # the small one with weights needs torch to write them
    subprocess.run(args, check=True, capture_output=True, timeout=300)
    found = model.resolve(str(tmp_path / "m"))
    config = json.loads((found / "config.json").read_text())
    assert config["architectures"] == ["LightOnOCRForConditionalGeneration"]
