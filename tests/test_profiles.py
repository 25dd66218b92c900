"""Model profiles (engines/profiles.py): chosen by model_profile, read by every engine that
runs the model; fp8 refused on cards that cannot run it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_nvml import FakeNvml, install

from ocrwatch.config import Config
from ocrwatch.config.load import load
from ocrwatch.core.errors import ConfigError, EngineUnavailable
from ocrwatch.doctor import checks as doctor
from ocrwatch.engines import gpu, profiles
from ocrwatch.engines.openai_http import chat_body
from ocrwatch.engines.vllm import VllmEngine, plan_memory
from ocrwatch.engines.vllm.supervisor import worker_settings


def test_the_default_profile_is_lightonocr_2_as_before() -> None:
    config = Config()
    profile = profiles.of(config)
    assert profile.name == "lightonocr-2-1b" and not profile.grounding
    assert profiles.model_id(config, "vllm") == "lightonai/LightOnOCR-2-1B"
    assert profiles.sampling(config, "remote") == (0.2, 0.9)
    assert profiles.max_tokens(config, "vllm") == 4096
    body = chat_body(config.remote, "data:image/png;base64,AA", 0.2, profile=profile)
    assert body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]


def test_lightonocr_3_asks_for_grounding_at_top_p_1_with_a_16k_sequence(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text('model_profile = "lightonocr-3-1b"\n')
    config = load(file, environ={})
    profile = profiles.of(config)
    assert profile.grounding and profile.max_side == 1540 and profile.max_model_len == 16384
    assert profiles.model_id(config, "remote") == "lightonai/LightOnOCR-3-1B"
    assert profiles.sampling(config, "vllm") == (0.2, 1.0)
    # The largest page's prompt and the longest answer fill the model's 16384 tokens.
    assert profiles.max_tokens(config, "vllm") + profile.max_prompt_tokens == 16384
    body = chat_body(config.remote, "data:x", 0.2, profile=profile,
                     model=profiles.model_id(config, "remote"), top_p=1.0)
    assert body["messages"][0]["content"][1] == {"type": "text", "text": "grounding"}
    assert body["model"] == "lightonai/LightOnOCR-3-1B" and body["top_p"] == 1.0
    # The memory plan holds one page of the whole sequence.
    plan = plan_memory(16.0, 16.0, profiles.max_tokens(config, "vllm"), profile=profile)
    assert plan.max_model_len == 16384
    assert plan.kv_tokens >= 16384 + (plan.max_num_seqs - 1) * 2452


def test_values_the_user_set_win_over_the_profile(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text('model_profile = "lightonocr-3-1b"\n[remote]\ntop_p = 0.5\n'
                    'model = "my-served-name"\nmax_tokens = 2000\n')
    config = load(file, environ={})
    assert profiles.sampling(config, "remote") == (0.2, 0.5)
    assert profiles.model_id(config, "remote") == "my-served-name"
    assert profiles.max_tokens(config, "remote") == 2000


def test_an_unknown_profile_is_refused_naming_the_choices(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text('model_profile = "lightonocr-9"\n')
    with pytest.raises(ConfigError, match=r"lightonocr-2-1b.*lightonocr-3-1b"):
        load(file, environ={})


def test_known_bad_library_versions_are_named() -> None:
    profile = profiles.get("lightonocr-3-1b")
    assert profile.version_problems({"vllm": "0.26.0", "transformers": "5.16.1"}) == []
    bad = profile.version_problems({"vllm": "0.27.1", "transformers": "5.17.0"})
    assert len(bad) == 2 and "loop" in bad[0] and "5.16.1" in bad[1]


def test_the_worker_is_told_the_profiles_prompt_text() -> None:
    config = Config(model_profile="lightonocr-3-1b")
    plan = plan_memory(16.0, 16.0, 4096, profile=profiles.of(config))
    settings = worker_settings(config.vllm, plan, "vllm", {}, "/m",
                               profile=profiles.of(config))
    assert settings["prompt_text"] == "grounding" and settings["quantization"] == "none"
    assert profiles.of(config).raw_prompt().count("<|image_pad|>grounding") == 1


@pytest.mark.parametrize("capability, refused", [((8, 6), True), ((8, 0), True),
                                                  ((8, 9), False), ((9, 0), False)])
def test_fp8_is_refused_below_compute_capability_8_9(capability: tuple[int, int],
                                                     refused: bool) -> None:
    problem = gpu.fp8_problem("fp8", "auto", capability)
    assert (problem is not None) == refused
    if problem:
        assert "8.9" in problem and f"{capability[0]}.{capability[1]}" in problem
        assert "Ampere" in problem and "bf16" in problem
    assert gpu.fp8_problem("none", "auto", (7, 5)) is None


def test_the_engine_refuses_fp8_on_an_ampere_card_before_starting_anything() -> None:
    config = Config(engine="vllm")
    config.vllm.quantization = "fp8"
    config.vllm.kv_cache_dtype = "fp8"
    with pytest.raises(EngineUnavailable, match=r"quantization = \"fp8\" and vllm\.kv_cache"):
        VllmEngine(config, backend="fake", backend_options={"capability": (8, 6)},
                   card_mib=16 * 1024)


def test_doctor_says_fp8_accuracy_is_not_measured_and_refuses_it_on_ampere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = Config(engine="vllm", inbox=[tmp_path / "in"], database=tmp_path / "db")
    config.vllm.kv_cache_dtype = "fp8"
    install(monkeypatch, FakeNvml(capability=(8, 9)))
    named = {c.name: c for c in doctor.check_gpu(config, doctor._smi())}
    assert named["fp8"].ok and "not measured" in named["fp8"].detail
    install(monkeypatch, FakeNvml(capability=(8, 6)))
    named = {c.name: c for c in doctor.check_gpu(config, doctor._smi())}
    assert not named["fp8"].ok and "bf16" in named["fp8"].fix


def test_a_lightonocr_3_shaped_folder_holds_its_16k_sequence_and_grounding_prompt(
        tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    import json

    from ocrwatch.testing import model_folder

    folder = model_folder.write(tmp_path / "m3", profiles.get("lightonocr-3-1b"))
    config = json.loads((folder / "config.json").read_text())
    assert config["text_config"]["max_position_embeddings"] == 16384
    assert config["architectures"] == ["LightOnOCRForConditionalGeneration"]
    assert config["vision_config"]["image_size"] == 1540
    assert json.loads((folder / "tokenizer_config.json").read_text())["model_max_length"] \
        == 16384


def test_the_folders_chat_template_puts_grounding_after_the_image(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    jinja2 = pytest.importorskip("jinja2")
    from ocrwatch.testing import model_folder

    folder = model_folder.write(tmp_path / "m3", profiles.get("lightonocr-3-1b"))
    prompt = jinja2.Template((folder / "chat_template.jinja").read_text()).render(
        messages=[{"role": "user", "content": [{"type": "image"},
                                               {"type": "text", "text": "grounding"}]}],
        add_generation_prompt=True)
    assert "<|image_pad|>grounding<|im_end|>" in prompt
    assert prompt == profiles.get("lightonocr-3-1b").raw_prompt().replace(
        "<|im_start|>system<|im_end|>\n", "")


def test_the_vllm_engine_plans_and_samples_by_the_profile() -> None:
    config = Config(engine="vllm", model_profile="lightonocr-3-1b")
    engine = VllmEngine(config, backend="fake", card_mib=16 * 1024)
    try:
        assert engine.plan.max_model_len == 16384  # one page of the whole sequence planned
        assert engine.profile.grounding and engine.max_side == 1540
        settings = engine._feeder._cfg  # the section as the profile completes it
        assert (settings.model, settings.top_p, settings.max_tokens) == (
            "lightonai/LightOnOCR-3-1B", 1.0, 16384 - engine.profile.max_prompt_tokens)
    finally:
        engine.close()
