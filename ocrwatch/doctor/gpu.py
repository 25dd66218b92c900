"""``ocrwatch doctor`` on the GPU side: the card, vLLM and its pins, and the model's files."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from ocrwatch.config import Config
from ocrwatch.core.errors import EngineUnavailable
from ocrwatch.doctor.check import NET_TIMEOUT, Check, _version
from ocrwatch.doctor.install import Install, detect
from ocrwatch.engines import gpu, profiles, registry
from ocrwatch.engines.base import Doctor
from ocrwatch.engines.gpu import Gpu
from ocrwatch.engines.vllm.memory import GpuBusy, default_budget, plan_memory

VLLM_PIN = "0.26.0"
TRANSFORMERS_PIN = "5.16.1"
CUDA13_DRIVER = 580  # vLLM 0.26 wheels are CUDA 13 builds: driver 580 or newer


def _smi() -> list[Gpu] | str:
    """The GPUs the driver (NVML) lists, or why it could not tell."""
    return gpu.gpus()


def _wants_gpu(config: Config) -> bool | None:
    """True: the config needs the GPU; None: it would use one if present; False: no."""
    return registry.needs(config, Doctor.GPU)


def check_gpu(config: Config, smi: list[Gpu] | str) -> list[Check]:
    wants = _wants_gpu(config)
    if wants is False:
        return [Check("GPU", True, f"not needed: the engine is {config.engine}")]
    if isinstance(smi, str):
        if wants is None:
            return [Check("GPU", True, f"no NVIDIA GPU ({smi}): the Tesseract CPU engine will "
                                       "read pages")]
        return [Check("GPU", False, smi,
                      "install the NVIDIA driver (580 or newer for CUDA 13) and nvidia-ml-py "
                      "so that the card is found, or set engine = \"tesseract\"")]
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
    # The engine's own plan as it would start now: the same budget, within what other
    # programs hold (NVML), the same refusal.
    card_gib = min(config.vllm.card_gb or card.total_mb / 1024, card.total_mb / 1024)
    others = (gpu.others_mib([]) or 0) / 1024
    try:
        plan = plan_memory(default_budget(card_gib, config.vllm.gpu_memory_gb), card_gib,
                           profiles.max_tokens(config, "vllm"), others_gib=others,
                           device_gib=card.total_mb / 1024,
                           kv_cache_dtype=config.vllm.kv_cache_dtype,
                           eager=config.vllm.enforce_eager, profile=profiles.of(config),
                           quantization=config.vllm.quantization)
    except GpuBusy as exc:
        checks.append(Check("GPU memory", False, str(exc).split(". Pages")[0],
                            "close programs holding GPU memory (`nvidia-smi` lists them); "
                            "until then files wait, none fails"))
        return checks
    except EngineUnavailable as exc:
        checks.append(Check("GPU memory budget", False, str(exc).split(". ")[0],
                            "raise vllm.gpu_memory_gb, lower vllm.max_tokens, or use a "
                            "larger card"))
        return checks
    checks.append(Check("GPU memory", True,
                        f"{plan.describe()}; {others:.1f} GiB held by other programs"))
    checks.extend(check_fp8(config, gpu.compute_capability()))
    return checks


def check_fp8(config: Config, capability: tuple[int, int] | None) -> list[Check]:
    """fp8 weights or KV cache, when asked for: whether the card can, and that their
    accuracy is not known (ocrwatch's benchmarks run on random weights)."""
    v = config.vllm
    if v.quantization != "fp8" and v.kv_cache_dtype != "fp8":
        return []
    asked = " and ".join(name for name, on in (("fp8 weights", v.quantization == "fp8"),
                                               ("fp8 KV cache", v.kv_cache_dtype == "fp8"))
                         if on)
    problem = gpu.fp8_problem(v.quantization, v.kv_cache_dtype, capability)
    if problem is not None:
        return [Check("fp8", False, problem.split(". An Ampere")[0],
                      "set vllm.quantization = \"none\" and vllm.kv_cache_dtype = \"auto\": "
                      "an Ampere card reads in bf16")]
    return [Check("fp8", True, f"{asked}: the card can; their effect on accuracy is not "
                               "measured here (ocrwatch's GPU benchmarks run on random "
                               "weights): compare a few of your pages with bf16 first")]


def check_vllm(config: Config, smi: list[Gpu] | str,
               install: Install | None = None) -> list[Check]:
    wants = _wants_gpu(config)
    if wants is False or (wants is None and isinstance(smi, str)):
        return [Check("vLLM", True, "not needed for this engine" if wants is False
                      else "not needed without a GPU")]
    if importlib.util.find_spec("vllm") is None:
        return [Check("vLLM", wants is None,
                      "not installed" + (": the CPU engine reads pages meanwhile"
                                         if wants is None else ""),
                      f"{(install or detect()).extra('gpu', 'GPU=1')} (vLLM {VLLM_PIN}, "
                      "Linux only)")]
    version = _version("vllm") or "unknown"
    tf = _version("transformers") or "missing"
    profile = profiles.of(config)
    bad = profile.version_problems({"vllm": version, "transformers": tf})
    if bad:
        return [Check("vLLM", False, f"vllm {version}, transformers {tf}: " + "; ".join(bad),
                      f"pip install 'vllm=={VLLM_PIN}' 'transformers=={TRANSFORMERS_PIN}' "
                      f"({profile.name} is known to work with {profile.known_good})")]
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
    model = profiles.model_id(config, "vllm")
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
