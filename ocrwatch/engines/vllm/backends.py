"""What the worker process drives: vLLM's engine, or a stand-in for tests.

Both take pages one at a time (``add``), advance every page in flight (``step``) and
report each page the moment it ends. This module needs only the standard library, Pillow
and vLLM (imported lazily), so that it runs wherever vLLM runs.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ocrwatch.core.errors import EngineError
from ocrwatch.engines.faults import Fault
from ocrwatch.engines.vllm.figures import figures_of
from ocrwatch.engines.vllm.messages import Done, Figure, Sampling, VllmFigures

if TYPE_CHECKING:
    from PIL import Image


class Backend(Protocol):
    info: dict[str, Any]

    def add(self, request_id: str, image: Image.Image, sampling: Sampling) -> None: ...

    def step(self) -> list[Done]:
        """Advance every page in flight; the pages that finished."""
        ...

    def busy(self) -> bool: ...

    def figures(self) -> VllmFigures | None:
        """The engine's own figures now (docs/metrics.md), or None when it keeps none."""
        ...

    def sleep(self) -> None: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...


class InputRefused(EngineError):
    """The engine refused a request but is still fine (e.g. a prompt too long)."""


class VllmBackend:
    """vLLM's engine with the settings the parent planned, fed page by page."""

    def __init__(self, settings: dict[str, Any]) -> None:
        started = time.monotonic()
        from vllm import LLM

        model_class = _register_model_class(settings["model"],
                                            settings.get("pagewise_encoder", True))
        self._llm = LLM(
            model=settings["model"],
            load_format=settings.get("load_format", "auto"),
            dtype="bfloat16",
            max_model_len=settings["max_model_len"],
            gpu_memory_utilization=settings["gpu_memory_utilization"],
            max_num_seqs=settings["max_num_seqs"],
            max_num_batched_tokens=settings["max_num_batched_tokens"],
            # The plan's KV cache, not a share of the card: what the planned pages need.
            kv_cache_memory_bytes=settings.get("kv_cache_memory_bytes") or None,
            kv_cache_dtype=settings.get("kv_cache_dtype", "auto"),
            # vLLM's dynamic fp8: the bf16 weights quantized as they load.
            quantization="fp8" if settings.get("quantization") == "fp8" else None,
            limit_mm_per_prompt={"image": 1},
            mm_processor_cache_gb=0,
            enable_prefix_caching=False,
            enable_sleep_mode=True,
            enforce_eager=settings.get("enforce_eager", False),
            # vLLM's figures (KV cache, requests running and waiting, tokens, time to
            # first token) are kept only with its stats on; LLM turns them off by default.
            disable_log_stats=not settings.get("vllm_stats", True),
            seed=0,
            compilation_config=compilation_config(settings),
        )
        self._engine = self._llm.llm_engine
        self._prompt = self._build_prompt(settings.get("prompt_text"))
        warmed = self._warm_up(settings)
        self._open: dict[str, int] = {}  # request id -> most pages in flight alongside it
        import vllm

        self.info = {"vllm": vllm.__version__,
                     "start_seconds": round(time.monotonic() - started, 1),
                     "model_class": model_class, "warmed_up": warmed}

    def _warm_up(self, settings: dict[str, Any]) -> list[int]:
        """Sample one batch of each kind Triton compiles apart, with the pages' own
        sampling settings (see ``warm_up_sizes``).

        vLLM compiles a sampling kernel (Triton) the first time it samples a batch of a
        new kind; unwarmed, that took about 3 s in the middle of the first eight pages.
        Triton keeps what it compiles on disk, so on later starts this costs little.
        Returns the batch sizes sampled.
        """
        from vllm import SamplingParams

        params = SamplingParams(temperature=settings["temperature"], top_p=settings["top_p"],
                                max_tokens=2)
        warmed: list[int] = []
        try:
            for n in warm_up_sizes(settings["cudagraph_sizes"]):
                self._llm.generate(["warm-up"] * n, params, use_tqdm=False)
                warmed.append(n)
        except Exception as exc:  # a slower first batch is no reason to fail the start
            print(f"ocrwatch: sampling warm-up failed: {exc}", file=sys.stderr)
        return warmed

    def _build_prompt(self, text: str | None) -> str:
        """The chat template applied to one user turn holding the image and, when the
        profile has one, its text (LightOnOCR-3's "grounding"), in LightOn's order."""
        content: list[dict[str, str]] = [{"type": "image"}]
        if text:
            content.append({"type": "text", "text": text})
        from ocrwatch.engines.profiles import raw_prompt

        fallback = raw_prompt(text)
        try:
            tokenizer = self._llm.get_tokenizer()
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": content}],
                tokenize=False, add_generation_prompt=True)
        except Exception:  # no template, or one that wants other content: use the known shape
            return fallback
        if not isinstance(prompt, str) or "<|image_pad|>" not in prompt:
            return fallback
        if text and text not in prompt:
            return fallback
        return prompt

    def add(self, request_id: str, image: Image.Image, sampling: Sampling) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        # FINAL_ONLY: step() reports a page once, when it ends, not its growing text.
        params = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                                max_tokens=sampling.max_tokens, ignore_eos=sampling.ignore_eos,
                                output_kind=RequestOutputKind.FINAL_ONLY)
        try:
            self._engine.add_request(
                request_id, {"prompt": self._prompt, "multi_modal_data": {"image": image}},
                params)
        except (ValueError, TypeError) as exc:  # vLLM checks inputs before they reach the GPU
            raise InputRefused(str(exc)) from exc
        self._open[request_id] = 0
        n = len(self._open)
        for key in self._open:
            self._open[key] = max(self._open[key], n)

    def step(self) -> list[Done]:
        done = []
        for out in self._engine.step():
            if not out.finished:
                continue
            rid = _known_id(out.request_id, self._open)
            peers = self._open.pop(rid, 1)
            first = out.outputs[0]
            done.append(Done(rid, first.text, len(first.token_ids),
                             first.finish_reason or "stop", peers))
        return done

    def busy(self) -> bool:
        return bool(self._open) or bool(self._engine.has_unfinished_requests())

    def figures(self) -> VllmFigures | None:
        if not getattr(self._engine, "log_stats", False):
            return None
        try:
            return figures_of(self._engine.get_metrics())
        except Exception as exc:  # a figure is never worth a page
            print(f"ocrwatch: vLLM's figures could not be read: {exc}", file=sys.stderr)
            return None

    def sleep(self) -> None:
        self._llm.sleep(level=1)

    def wake(self) -> None:
        self._llm.wake_up()

    def close(self) -> None:
        del self._engine
        del self._llm


def _register_model_class(model_dir: str, pagewise: bool = True) -> str:
    """Hand vLLM the LightOnOCR model class itself, not its module's name.

    For a class known only by name, vLLM imports it in a fresh Python process to read its
    traits (so that the import cannot touch CUDA here): about 25 s on a first start,
    before its on-disk cache of those traits exists. The class is needed in this process
    anyway (vLLM's engine process is forked from it), and importing it touches no GPU.
    With ``pagewise``, the class is :mod:`.pagewise`'s, which encodes each page alone.
    Returns "pagewise", "handed over", or "by name" when vLLM is left to find the class.
    """
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
        if "LightOnOCRForConditionalGeneration" not in config.get("architectures", []):
            return "by name"
        from vllm import ModelRegistry
        from vllm.model_executor.models.lightonocr import LightOnOCRForConditionalGeneration

        model_class: type = LightOnOCRForConditionalGeneration
        name = "handed over"
        if pagewise:
            try:
                from ocrwatch.engines.vllm import pagewise as pagewise_module

                model_class = pagewise_module.model_class() or model_class
            except Exception as exc:  # vLLM moved what it follows: vLLM's own class then
                print(f"ocrwatch: vLLM's own vision encoder is used: {exc}", file=sys.stderr)
            name = "pagewise" if model_class is not LightOnOCRForConditionalGeneration else name
        ModelRegistry.register_model("LightOnOCRForConditionalGeneration", model_class)
    except Exception as exc:  # another vLLM, or no such folder: vLLM's own way then
        print(f"ocrwatch: the model class was left to vLLM: {exc}", file=sys.stderr)
        return "by name"
    return name


def warm_up_sizes(sizes: list[int]) -> list[int]:
    """One batch size of each kind Triton compiles a kernel for apart: it specialises an
    integer argument (the batch size) on being 1 and on being a multiple of 16, so 1, one
    other size and one multiple of 16 compile every variant that ``sizes`` will meet. Each
    batch warmed costs about 0.15 s of every start, cached or not."""
    kinds = {1: [n for n in sizes if n == 1],
             16: [n for n in sizes if n % 16 == 0],
             0: [n for n in sizes if n != 1 and n % 16]}
    return sorted(found[0] for found in kinds.values() if found)


def compilation_config(settings: dict[str, Any]) -> dict[str, Any]:
    """vLLM's compilation settings: CUDA graphs for the decode batch sizes, and no
    torch.compile unless ``torch_compile`` asks for it.

    torch.compile cost 28 s on a first start and 7 s on later ones (plus inductor's own
    set-up in every process); a 1B model gains little from it, since a decode step is
    launch-bound and a CUDA graph of the whole step removes that cost without it
    (benchmarks/gpu_start.py measures both ways).
    """
    config: dict[str, Any] = {}
    if settings.get("cudagraph_sizes"):
        config["cudagraph_capture_sizes"] = list(settings["cudagraph_sizes"])
    if not settings.get("torch_compile", False):
        config["mode"] = "NONE"
        config["cudagraph_mode"] = "FULL_DECODE_ONLY"
    return config


def _known_id(reported: str, open_ids: dict[str, int]) -> str:
    """The id the parent gave: vLLM may report it with a suffix of its own."""
    if reported in open_ids:
        return reported
    for rid in open_ids:
        if reported.startswith(rid + "-") or reported.startswith(rid + "_"):
            return rid
    return reported


class FakeBackend:
    """A stand-in for vLLM so the protocol, streaming, faults and timers run on any CPU.

    Pages are in flight together and each one takes ``delay`` seconds, whatever else is
    in flight, as on a GPU with room to spare. The colour of a page's top-left pixel
    tells it how to misbehave (the tests paint it): see :class:`ocrwatch.engines.faults.Fault`.
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        options = settings.get("fake", {})
        time.sleep(float(options.get("start_delay", 0.0)))
        if options.get("fail_start"):
            raise RuntimeError(str(options["fail_start"]))
        self._delay = float(options.get("delay", 0.0))
        self.info = {"vllm": "fake", "start_seconds": 0.0, "pid": os.getpid(),
                     "max_num_seqs": settings.get("max_num_seqs"),
                     "kv_cache_memory_bytes": settings.get("kv_cache_memory_bytes"),
                     "kv_cache_dtype": settings.get("kv_cache_dtype")}
        if options.get("helper"):
            # Like vLLM's engine process: forked (so it holds the worker's pipe too) and
            # in a process group of its own.
            child = os.fork()
            if child == 0:
                os.setpgid(0, 0)
                time.sleep(300)
                os._exit(0)
            self.info["helper_pid"] = child
        self.asleep = False
        # As vLLM's scheduler: at most max_num_seqs pages run, the others wait their turn.
        self._seqs = int(settings.get("max_num_seqs") or 1)
        self.most_running = 0
        self.tokens_written = 0
        # id -> (image, sampling, when it ends, most pages in flight alongside it)
        self._open: dict[str, tuple[Image.Image, Sampling, float, int]] = {}
        self._waiting: collections.deque[tuple[str, Image.Image, Sampling]] = (
            collections.deque())

    def add(self, request_id: str, image: Image.Image, sampling: Sampling) -> None:
        if self.asleep:
            raise RuntimeError("a page was added while asleep")
        if image.getpixel((0, 0)) == Fault.REFUSED:
            raise InputRefused("prompt is longer than the maximum model length")
        self._waiting.append((request_id, image, sampling))
        self._schedule()

    def _schedule(self) -> None:
        """Waiting pages into the free slots, each timed from when it starts to run."""
        while self._waiting and len(self._open) < self._seqs:
            rid, image, sampling = self._waiting.popleft()
            self._open[rid] = (image, sampling, time.monotonic() + self._delay, 0)
        n = len(self._open)
        self.most_running = max(self.most_running, n)
        for key, (im, p, end, peers) in self._open.items():
            self._open[key] = (im, p, end, max(peers, n))

    def step(self) -> list[Done]:
        many = len(self._open) > 1
        for image, _, _, _ in self._open.values():
            mark = image.getpixel((0, 0))
            if mark == Fault.CRASH_IN_BATCH and many:
                os._exit(70)
            if ((mark == Fault.CRASH_AT_FULL_SIZE and image.width >= 100)
                    or mark == Fault.CRASH_ALWAYS):
                os._exit(71)
            if mark == Fault.OOM_IN_BATCH and many:
                raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        now = time.monotonic()
        ended = [rid for rid, (_, _, end, _) in self._open.items() if end <= now]
        if not ended:
            soonest = min(end for _, _, end, _ in self._open.values())
            time.sleep(min(0.005, max(0.0, soonest - now)))
        done = []
        for rid in ended:
            image, p, _, peers = self._open.pop(rid)
            mark = image.getpixel((0, 0))
            if mark == Fault.LOOPS_ALWAYS or (mark == Fault.LOOPS_WHEN_COLD
                                              and p.temperature <= 0.2):
                text = "# Page\n\n" + "the same line again\n" * (p.max_tokens // 4)
                done.append(Done(rid, text, p.max_tokens, "length", peers))
            else:
                text = (f"# Page {image.width}x{image.height}\n\nSome **bold** text, "
                        f"t={p.temperature}.")
                done.append(Done(rid, text, 12, "stop", peers))
            self.tokens_written += done[-1].tokens
        if done:
            self._schedule()
        return done

    def busy(self) -> bool:
        return bool(self._open) or bool(self._waiting)

    def figures(self) -> VllmFigures | None:
        """vLLM's gauges as this stand-in's scheduler has them, and the tokens written."""
        return VllmFigures(time.time(), (
            Figure("gauge", "vllm:num_requests_running", (), float(len(self._open))),
            Figure("gauge", "vllm:num_requests_waiting", (), float(len(self._waiting))),
            Figure("counter", "vllm:generation_tokens", (), float(self.tokens_written))))

    def sleep(self) -> None:
        self.asleep = True

    def wake(self) -> None:
        self.asleep = False

    def close(self) -> None:
        pass


def preload(settings: dict[str, Any]) -> None:
    """What a standby process imports ahead: torch, vLLM and the model's class.

    None of it makes a CUDA context (vLLM asks the driver through NVML until an engine
    is made), so the standby holds nothing on the card.
    """
    if settings.get("backend") == "fake":
        time.sleep(float(settings.get("fake", {}).get("import_delay", 0.0)))
        return
    import contextlib

    import torch  # noqa: F401
    import vllm
    from vllm import LLM, SamplingParams  # noqa: F401
    from vllm.sampling_params import RequestOutputKind  # noqa: F401

    with contextlib.suppress(ImportError):  # another vLLM: the class is found by name later
        import vllm.model_executor.models.lightonocr  # noqa: F401


def make_backend(settings: dict[str, Any]) -> Backend:
    if settings.get("backend") == "fake":
        return FakeBackend(settings)
    return VllmBackend(settings)
