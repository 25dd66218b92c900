"""The vLLM engine's worker protocol, streaming, faults and idle timers, with the fake worker.

The fake worker (``backend="fake"``) runs the real protocol in a real spawned process;
only vLLM is replaced. The colour of a page tells it how to misbehave (see
``ocrwatch.engines.vllm.backends.FakeBackend``).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import save_pdf, text_page, wait_for
from PIL import Image

from ocrwatch.config import Config
from ocrwatch.core.cpus import lower_thread_priority
from ocrwatch.core.domain import Page, PageText
from ocrwatch.core.errors import EngineError, EngineUnavailable
from ocrwatch.core.textutil import markdown_to_text, repeats_itself
from ocrwatch.engines import profiles
from ocrwatch.engines.base import PREPARE_NICE, gpu_preparers
from ocrwatch.engines.faults import Fault
from ocrwatch.engines.vllm import VllmEngine, plan_memory
from ocrwatch.engines.vllm.admission import pick_next
from ocrwatch.engines.vllm.backends import compilation_config, warm_up_sizes
from ocrwatch.engines.vllm.memory import (
    CONTEXT_GIB,
    GIB,
    MARGIN_GIB,
    SEQS_CAP,
    TYPICAL_OUTPUT_TOKENS,
    WEIGHTS_GIB,
    WORKING_GIB_AT_STEP,
    WORKING_GIB_EAGER,
    GpuBusy,
    typical_prompt_tokens,
)
from ocrwatch.engines.vllm.messages import (
    Add,
    Done,
    Ready,
    Refused,
    Sampling,
    Sleep,
    Slept,
    Stop,
    Stopped,
    VllmFigures,
    Wake,
    Woke,
)
from ocrwatch.engines.vllm.supervisor import worker_settings
from ocrwatch.engines.vllm.worker import main as worker_main

PROFILE = profiles.get(profiles.DEFAULT)
image_tokens = PROFILE.image_tokens
MAX_PROMPT_TOKENS = PROFILE.max_prompt_tokens

OK = (255, 255, 255)
CRASH_IN_BATCH = Fault.CRASH_IN_BATCH
CRASH_AT_FULL_SIZE = Fault.CRASH_AT_FULL_SIZE
CRASH_ALWAYS = Fault.CRASH_ALWAYS
OOM_IN_BATCH = Fault.OOM_IN_BATCH
REFUSED = Fault.REFUSED
LOOPS_WHEN_COLD = Fault.LOOPS_WHEN_COLD
LOOPS_ALWAYS = Fault.LOOPS_ALWAYS


def page(i: int, mark: tuple[int, int, int] = OK, size: tuple[int, int] = (120, 160)) -> Page:
    # The whole page carries the mark, so it survives the smaller-size retry's resize.
    return Page(Path(f"scan{i}.png"), i, Image.new("RGB", size, mark))


def make_engine(idle_sleep: float = 0.0, idle_stop: float = 0.0, queued: int | None = None,
                **options: Any) -> VllmEngine:
    config = Config()
    config.vllm.idle_sleep_seconds = idle_sleep
    config.vllm.idle_stop_seconds = idle_stop
    config.vllm.max_tokens = 64
    if queued is not None:
        config.vllm.queued_pages = queued
    return VllmEngine(config, backend="fake", backend_options=options, card_mib=16 * 1024)


@pytest.fixture
def engine() -> Iterator[VllmEngine]:
    eng = make_engine(delay=0.1)  # long enough for the pages of one call to share the GPU
    yield eng
    eng.close()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- the memory plan ------------------------------------------------------------------------


def test_plan_for_a_16_gb_card_is_the_sum_of_its_measured_parts() -> None:
    plan = plan_memory(16.0, 16.0, 4096)
    # KV per token from LightOnOCR's config: 2 x 28 layers x 8 heads x 128 x 2 bytes.
    assert plan.kv_bytes_per_token == 112 * 1024
    assert plan.fixed_gib == pytest.approx(CONTEXT_GIB + WEIGHTS_GIB + WORKING_GIB_AT_STEP)
    assert plan.budget_gib == 16.0 - MARGIN_GIB
    # The KV cache is what the pages need: the worst page (max_model_len tokens) and the
    # others at a typical page, and it all stays within the usable memory.
    page = typical_prompt_tokens() + TYPICAL_OUTPUT_TOKENS
    # The typical page is a portrait letter-size page: fewer tokens than a square one.
    assert image_tokens(1088, 1540) < typical_prompt_tokens() < MAX_PROMPT_TOKENS
    assert plan.kv_tokens == pytest.approx(
        plan.max_model_len + (plan.max_num_seqs - 1) * page, abs=1)
    assert plan.total_gib <= plan.budget_gib
    # ... and one page more would not fit: the most pages the budget holds.
    assert plan.total_gib + page * plan.kv_bytes_per_token / GIB > plan.budget_gib
    assert plan.max_num_seqs == 29  # with max_tokens 4096 (8 under the old fixed rule)
    assert plan.max_num_batched_tokens == 4096  # one A4 page or seven cards a step
    assert image_tokens(1088, 1540) <= plan.max_num_batched_tokens
    assert plan.max_model_len >= 3080 + 4096
    assert plan.cudagraph_sizes == [1, 2, 4, 8, 16, 24, 29]  # none above max_num_seqs
    assert plan_memory(12.0, 12.0, 500).max_num_seqs > plan_memory(12.0, 12.0, 4096).max_num_seqs
    # Memory bounds it on a 16 GB card; the cap (CUDA graphs at start) on a large one,
    # where the KV cache is what those pages need, not all the budget allows.
    assert plan_memory(16.0, 16.0, 500).max_num_seqs < SEQS_CAP
    assert plan_memory(40.0, 40.0, 500).total_gib < 40.0 - MARGIN_GIB - 1.0
    # Without CUDA graphs a step needs more working memory: fewer pages.
    eager = plan_memory(16.0, 16.0, 4096, eager=True)
    assert eager.fixed_gib == pytest.approx(CONTEXT_GIB + WEIGHTS_GIB + WORKING_GIB_EAGER)
    assert eager.max_num_seqs < plan.max_num_seqs
    assert plan_memory(40.0, 40.0, 500).max_num_seqs == SEQS_CAP


def test_fp8_kv_cache_halves_the_bytes_per_token_and_holds_more_pages() -> None:
    bf16 = plan_memory(12.0, 12.0, 4096)
    fp8 = plan_memory(12.0, 12.0, 4096, kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert fp8.max_num_seqs > bf16.max_num_seqs and fp8.kv_cache_dtype == "fp8"
    assert Config().vllm.kv_cache_dtype == "auto"  # off by default


def test_kv_bytes_per_token_come_from_the_model_config(tmp_path: Path) -> None:
    text = {"num_hidden_layers": 2, "num_key_value_heads": 1, "head_dim": 128}
    (tmp_path / "config.json").write_text(json.dumps({"text_config": text}))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4096)
    plan = plan_memory(16.0, 16.0, 64, model_dir=str(tmp_path))
    assert plan.kv_bytes_per_token == 2 * 2 * 1 * 128 * 2
    assert plan.fixed_gib == pytest.approx(CONTEXT_GIB + 4096 / GIB + WORKING_GIB_AT_STEP,
                                           abs=1e-3)


def test_plan_on_a_large_card_is_capped_by_the_budget() -> None:
    h200 = 143771 / 1024
    plan = plan_memory(16.0, h200, 4096)
    assert plan.budget_gib == 16.0
    # vLLM's utilization only gates its start: the planned share, the context left out.
    assert plan.gpu_memory_utilization * h200 == pytest.approx(plan.total_gib - CONTEXT_GIB,
                                                               abs=0.01)
    emulated = plan_memory(16.0, 16.0, 4096, device_gib=h200)
    assert emulated.max_num_seqs == plan_memory(16.0, 16.0, 4096).max_num_seqs
    assert emulated.gpu_memory_utilization < 0.12


def test_plan_refuses_a_budget_too_small_and_clips_one_too_large() -> None:
    with pytest.raises(EngineUnavailable, match="gpu_memory_gb") as refused:
        plan_memory(4.0, 24.0, 4096)
    assert not isinstance(refused.value, GpuBusy)
    assert plan_memory(24.0, 12.0, 4096).budget_gib == 12.0 - MARGIN_GIB
    small = plan_memory(5.6, 5.6, 4096)  # a small budget takes one page's step
    assert small.max_num_batched_tokens < 4096 and small.max_num_seqs >= 1


def test_plan_leaves_what_other_programs_hold_and_says_when_that_is_too_much() -> None:
    alone = plan_memory(16.0, 16.0, 500)
    shared = plan_memory(16.0, 16.0, 500, others_gib=3.0)
    assert shared.budget_gib == 16.0 - 3.0 - MARGIN_GIB
    assert shared.total_gib + 3.0 <= 16.0 - MARGIN_GIB  # the whole card stays under its size
    assert 1 <= shared.max_num_seqs < alone.max_num_seqs
    with pytest.raises(GpuBusy, match=r"the GPU is busy: 12.0 GiB held by other programs") as busy:
        plan_memory(16.0, 16.0, 500, others_gib=12.0)
    assert busy.value.others_gib == 12.0


def test_engine_policy_comes_from_the_plan() -> None:
    eng = make_engine()
    try:
        # One page per call (as for every engine), twice max_num_seqs callers: pages
        # stream, results come singly.
        assert eng.policy.concurrency == 2 * eng.plan.max_num_seqs
        assert 1 <= eng.policy.preparers <= gpu_preparers(turning=True)
        assert eng.policy.prepare_nice == PREPARE_NICE
        assert eng.max_side == 1540
        assert eng.describe()["state"] == "stopped"
    finally:
        eng.close()


@pytest.mark.parametrize(("cores", "threads", "turning"), [
    (1, 1, 1), (2, 2, 2), (4, 4, 4), (8, 4, 6), (12, 6, 10), (16, 8, 14), (24, 8, 16),
    (64, 8, 16)])
def test_gpu_engines_prepare_on_a_thread_per_core_to_4_then_more_when_turning_pages(
        cores: int, threads: int, turning: int) -> None:
    """Decoding alone: half the free cores, up to 8. Turning pages upright costs five times
    as much: all free cores but the engine's own 2, up to 16."""
    assert (gpu_preparers(cores=cores), gpu_preparers(True, cores)) == (threads, turning)


@pytest.mark.parametrize(("busy", "turning"), [(0.0, 14), (3.7, 10), (6.0, 8), (12.0, 4),
                                               (15.9, 1)])
def test_gpu_engines_leave_the_cores_other_programs_keep_busy(busy: float,
                                                              turning: int) -> None:
    assert gpu_preparers(True, 16, busy) == turning


def test_the_preparers_count_only_the_cores_the_daemon_may_run_on() -> None:
    """``taskset -c 0`` (a CPU affinity of one core) on a machine of more: one core."""
    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "from ocrwatch.core.cpus import usable_cores; "
            "from ocrwatch.engines.base import gpu_preparers; "
            "print(usable_cores(), gpu_preparers(True))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert out == ["1", "1"]


def test_a_preparer_thread_lowers_its_own_priority_only() -> None:
    niced: list[int] = []

    def preparer() -> None:
        assert lower_thread_priority(PREPARE_NICE)
        niced.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=preparer)
    thread.start()
    thread.join(10)
    assert niced == [min(19, before + PREPARE_NICE)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_the_engine_prepares_on_more_threads_when_pages_are_turned_upright(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ocrwatch.core.cpus.usable_cores", lambda: 16)
    monkeypatch.setattr("ocrwatch.core.cpus.busy_elsewhere", lambda: 0.0)
    for rotate, threads in ((True, 14), (False, 8)):
        eng = VllmEngine(Config(rotate_pages=rotate), backend="fake", card_mib=16 * 1024)
        try:
            assert eng.policy.preparers == threads
        finally:
            eng.close()


def test_real_backend_without_vllm_says_how_to_install_it() -> None:
    pytest.importorskip("ocrwatch")  # keeps the import order obvious
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here")
    with pytest.raises(EngineUnavailable, match="vLLM is not installed"):
        VllmEngine(Config())


# -- the worker protocol, straight ------------------------------------------------------------


def test_worker_protocol_answers_each_request_once() -> None:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=worker_main,
                       args=(child, {"backend": "fake", "parent_pid": os.getpid()}))
    proc.start()
    child.close()
    try:
        assert parent.poll(30)
        ready = parent.recv()
        assert isinstance(ready, Ready) and ready.info["vllm"] == "fake"
        figures: list[VllmFigures] = []

        def answer() -> object:
            """The worker's next answer; vLLM's figures, which it sends unasked while pages
            are in flight and as the last one ends, are kept aside."""
            while True:
                assert parent.poll(30)
                message = parent.recv()
                if not isinstance(message, VllmFigures):
                    return message
                figures.append(message)

        image = (2, 3, b"\xff" * 18)
        sampling = Sampling(temperature=0.2, top_p=0.9, max_tokens=8)
        parent.send(Add("a", image, sampling))
        parent.send(Add("b", image, sampling))
        answers = {}
        for _ in range(2):
            done = answer()
            assert isinstance(done, Done) and done.finish == "stop"
            answers[done.rid] = done
        assert sorted(answers) == ["a", "b"]
        parent.send(Sleep())
        assert isinstance(answer(), Slept)
        # The figures sent as the last page ended came before the answer to Sleep.
        assert figures and figures[-1].figures[0].name == "vllm:num_requests_running"
        parent.send(Wake())
        assert isinstance(answer(), Woke)
        refused = (2, 3, bytes(REFUSED) * 6)
        parent.send(Add("c", refused, sampling))
        refusal = answer()
        assert isinstance(refusal, Refused) and refusal.rid == "c"
        parent.send(Stop())
        assert answer() == Stopped()
        proc.join(30)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        parent.close()


def test_worker_reports_a_failed_start() -> None:
    eng = make_engine(fail_start="no CUDA device here")
    try:
        with pytest.raises(EngineUnavailable, match="could not start: RuntimeError: no CUDA"):
            eng.recognize([page(0)])
        assert eng.state == "stopped" and eng.worker_pid is None
    finally:
        eng.close()


# -- recognize and faults ----------------------------------------------------------------------


def test_one_result_per_page_in_order(engine: VllmEngine) -> None:
    pages = [page(i, size=(100 + i, 150)) for i in range(5)]
    results = engine.recognize(pages)
    assert [r.markdown.splitlines()[0] for r in results] == [
        f"# Page {100 + i}x150" for i in range(5)]
    assert all(r.error is None and not r.warnings for r in results)
    assert results[0].text.startswith("Page 100x150\n\nSome bold text")
    assert engine.recognize([]) == []


def test_a_worker_dying_with_pages_in_flight_is_restarted_and_every_page_read_again(
        engine: VllmEngine) -> None:
    # The page kills any worker it shares with others: read again with the others once,
    # then alone, which works.
    results = engine.recognize([page(0), page(1, CRASH_IN_BATCH), page(2)])
    assert [r.error for r in results] == [None, None, None]
    facts = engine.describe()
    assert facts["restarts"] == 2 and "exit code 70" in str(facts["last_error"])
    assert engine.state == "ready"


def test_out_of_memory_in_a_batch_is_survived(engine: VllmEngine) -> None:
    results = engine.recognize([page(0, OOM_IN_BATCH), page(1)])
    assert [r.error for r in results] == [None, None]
    assert "ran out of memory" in str(engine.describe()["last_error"])


def test_a_page_failing_alone_is_tried_once_smaller(engine: VllmEngine) -> None:
    (result,) = engine.recognize([page(0, CRASH_AT_FULL_SIZE)])
    assert result.error is None
    assert result.markdown.startswith("# Page 84x112")  # 0.7 of 120x160


def test_a_page_that_never_works_fails_with_the_reason_and_others_survive(
        engine: VllmEngine) -> None:
    results = engine.recognize([page(0), page(1, CRASH_ALWAYS), page(2)])
    assert results[0].error is None and results[2].error is None
    assert results[1].error is not None
    assert "exit code 71" in results[1].error
    assert results[1].markdown == "" and results[1].text == ""


def test_refused_input_fails_the_page_without_a_restart(engine: VllmEngine) -> None:
    results = engine.recognize([page(0, REFUSED), page(1)])
    assert results[0].error is not None and "maximum model length" in results[0].error
    assert results[1].error is None
    assert engine.describe()["restarts"] == 0


def test_a_looping_page_is_tried_again_warmer(engine: VllmEngine) -> None:
    fixed, stuck, fine = engine.recognize(
        [page(0, LOOPS_WHEN_COLD), page(1, LOOPS_ALWAYS), page(2)])
    assert "t=0.6" in fixed.markdown and not fixed.warnings
    assert stuck.error is None and stuck.markdown
    # Still looping after the retry: indexed, but a doubt, so the original is kept.
    assert stuck.keep_original and "ran out of tokens" in stuck.keep_original
    assert "t=0.2" in fine.markdown


def test_a_killed_worker_is_replaced_on_the_next_batch(engine: VllmEngine) -> None:
    engine.start()
    pid = engine.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    (result,) = engine.recognize([page(0)])
    assert result.error is None
    assert engine.worker_pid not in (None, pid)


def test_session_members_finds_a_process_in_a_group_of_its_own() -> None:
    """The session's processes, from psutil's table: also one that left the process group
    (as vLLM's engine process does), never an ended one."""
    import subprocess
    import sys

    from ocrwatch.engines.vllm.worker import session_members

    code = ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', "
            "'import os, time; os.setpgid(0, 0); time.sleep(60)'])\n"
            "print(child.pid, flush=True)\ntime.sleep(60)\n")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        wait_for(lambda: os.getpgid(child) == child, 10, "the child's own process group")
        assert sorted(session_members(leader.pid)) == sorted([leader.pid, child])
        assert session_members(1) == []
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)
        leader.wait(timeout=30)
    wait_for(lambda: session_members(leader.pid) == [], 10, "the session to be gone")


def test_a_killed_worker_takes_its_helper_processes_with_it() -> None:
    # vLLM's engine process holds the GPU memory and may sit in a process group of its
    # own; ending the worker must end it too, or the card stays full.
    eng = make_engine(helper=True)
    try:
        eng.start()
        pid, helper = eng.worker_pid, eng.worker_info["helper_pid"]
        assert pid is not None and not gone(helper)
        os.kill(pid, signal.SIGKILL)
        assert eng.recognize([page(0)])[0].error is None  # notices, cleans up, restarts
        assert wait_gone(helper, 10)
        new_helper = eng.worker_info["helper_pid"]
        eng.release()
        assert wait_gone(new_helper, 10)
    finally:
        eng.close()


def test_a_worker_dying_while_pages_are_sent_does_not_hang_the_engine() -> None:
    # The forked helper keeps the pipe open, so without care the write of a page larger
    # than the pipe's buffer would block forever on a dead worker.
    eng = make_engine(helper=True)
    try:
        eng.start()
        pid, helper = eng.worker_pid, eng.worker_info["helper_pid"]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        big = [page(i, size=(2000, 2000)) for i in range(2)]  # 24 MB to write
        results = eng.recognize(big)
        assert [r.error for r in results] == [None, None]
        assert wait_gone(helper, 10)
        assert eng.describe()["restarts"] == 1
    finally:
        eng.close()


def wait_gone(pid: int, timeout: float) -> bool:
    waiter = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if gone(pid) or _zombie(pid):
            return True
        waiter.wait(0.05)
    return False


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_start_timeout_is_reported() -> None:
    config = Config()
    config.vllm.start_timeout_seconds = 0.5
    eng = VllmEngine(config, backend="fake", backend_options={"start_delay": 30},
                     card_mib=16 * 1024)
    try:
        with pytest.raises(EngineUnavailable, match="did not answer within"):
            eng.start()
        assert eng.state == "stopped"
    finally:
        eng.close()


# -- streaming -------------------------------------------------------------------------------


def test_a_page_added_while_others_decode_joins_them_and_no_page_waits_for_another() -> None:
    eng = make_engine(delay=1.0)
    try:
        eng.start()
        first: list[Any] = []
        reader = threading.Thread(target=lambda: first.extend(eng.recognize([page(0)])))
        started = time.monotonic()
        reader.start()
        wait_for(lambda: eng.describe()["pages_in_flight"] == 1, 10, "the first page in flight")
        (second,) = eng.recognize([page(1, size=(90, 60))])
        took = time.monotonic() - started
        reader.join(10)
        assert first[0].error is None and second.error is None
        assert "# Page 90x60" in second.markdown
        # Added while the first decoded, and not held back until it ended (that is 2 s).
        assert took < 1.9, took
        assert eng.most_in_flight == 2
    finally:
        eng.close()


def test_at_most_max_num_seqs_pages_are_in_flight_and_each_has_one_result() -> None:
    eng = make_engine(delay=0.2, queued=0)
    try:
        n = eng.plan.max_num_seqs + 6
        pages = [page(i, size=(100 + i, 150)) for i in range(n)]
        results = eng.recognize(pages)
        assert [r.markdown.splitlines()[0] for r in results] == [
            f"# Page {100 + i}x150" for i in range(n)]
        assert eng.most_in_flight == eng.plan.max_num_seqs > 8
        assert eng.describe()["pages_in_flight"] == 0
    finally:
        eng.close()


def test_like_sizes_are_admitted_together_and_none_waits_past_the_bound() -> None:
    a4, card = image_tokens(1088, 1540), image_tokens(800, 500)
    waiting = [(card, 0.0), (a4, 0.1), (card, 0.2), (a4, 0.3)]
    assert pick_next(waiting, None, 0.4, 0.5) == 0  # nothing admitted yet: the oldest
    assert pick_next(waiting, a4, 0.4, 0.5) == 1  # after an A4 page: the next A4 page
    assert pick_next(waiting, card, 0.4, 0.5) == 0
    assert pick_next(waiting[1:], card, 0.4, 0.5) == 1  # the card, though younger
    assert pick_next(waiting, a4, 0.5, 0.5) == 0  # the oldest waited its 0.5 s: its turn
    # Through the engine: 16 pages, A4 and cards interleaved, all read, within the plan.
    eng = make_engine(delay=0.05)
    try:
        sizes = [(1088, 1540) if i % 2 else (800, 500) for i in range(16)]
        results = eng.recognize([page(i, size=sizes[i]) for i in range(16)])
        assert [r.markdown.splitlines()[0] for r in results] == [
            f"# Page {w}x{h}" for w, h in sizes]
        assert eng.most_in_flight <= eng.plan.max_num_seqs
    finally:
        eng.close()


def read_behind(eng: VllmEngine, pages: list[Page],
                in_flight: int) -> tuple[threading.Thread, list[PageText]]:
    """Pages read on another thread, as the daemon's readers do; returns once
    ``in_flight`` of them are in the worker. The results fill in when they end."""
    results: list[PageText] = []
    reader = threading.Thread(target=lambda: results.extend(eng.recognize(pages)))
    reader.start()
    wait_for(lambda: eng.describe()["pages_in_flight"] == in_flight, 10,
             f"{in_flight} pages in flight")
    return reader, results


def test_a_worker_killed_with_eight_pages_in_flight_reads_each_again_once() -> None:
    eng = make_engine(delay=2.0)
    try:
        eng.start()
        pid = eng.worker_pid
        assert pid is not None
        reader, results = read_behind(eng, [page(i, size=(100 + i, 150)) for i in range(8)], 8)
        os.kill(pid, signal.SIGKILL)
        reader.join(30)
        assert not reader.is_alive()
        assert [r.markdown.splitlines()[0] for r in results] == [
            f"# Page {100 + i}x150" for i in range(8)]
        assert eng.describe()["restarts"] == 1
        assert eng.worker_pid not in (None, pid)
    finally:
        eng.close()


def test_sleep_while_pages_go_round_again_loses_none() -> None:
    # The pages loop, so each goes back in the queue warmer just as the sleep is due:
    # the sleep comes first, then the pages wake the worker and are read.
    eng = make_engine(delay=0.3)
    try:
        eng.start()
        reader, results = read_behind(eng, [page(i, LOOPS_WHEN_COLD) for i in range(4)], 4)
        eng.sleep()
        reader.join(30)
        assert not reader.is_alive()
        assert len(results) == 4 and all("t=0.6" in r.markdown for r in results)
        assert "wake" in eng.timings
    finally:
        eng.close()


def test_queued_pages_wait_in_vllms_own_queue_beyond_max_num_seqs() -> None:
    """vllm.queued_pages more than the plan's pages in flight are handed over, so that a
    page that ends is replaced at vLLM's next step; vLLM (here its stand-in, which keeps
    to max_num_seqs as vLLM's scheduler does) runs them as slots free."""
    eng = make_engine(delay=0.3, queued=4)
    try:
        seqs = eng.plan.max_num_seqs
        pages = [page(i, size=(100 + i, 150)) for i in range(seqs + 10)]
        eng.start()
        reader, results = read_behind(eng, pages, seqs + 4)
        assert eng.describe()["pages_in_flight"] == seqs + 4  # never more
        reader.join(30)
        assert [r.markdown.splitlines()[0] for r in results] == [
            f"# Page {100 + i}x150" for i in range(seqs + 10)]
        assert eng.most_in_flight == seqs + 4
    finally:
        eng.close()


def test_warm_starts_a_stopped_worker_without_a_page_and_is_a_no_op_when_up() -> None:
    eng = make_engine(start_delay=0.5)
    try:
        assert eng.state == "stopped"
        eng.warm()  # returns at once: the start runs on the feeder's thread
        assert eng.state in ("stopped", "starting")
        assert eng.wait_for_state(["ready"], 20)
        pid = eng.worker_pid
        eng.warm()
        (result,) = eng.recognize([page(0)])
        assert result.error is None and eng.worker_pid == pid  # the warmed worker read it
    finally:
        eng.close()


def test_a_file_arriving_starts_the_engine_while_it_settles(tmp_path: Path) -> None:
    """The first page after an idle stop: the worker starts when the file appears, not
    once it has settled and its pages are prepared."""
    from ocrwatch.daemon import Daemon

    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    settle_seconds=3.0, engine="vllm")
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    eng = VllmEngine(config, backend="fake", card_mib=16 * 1024)
    inbox = config.inbox[0]
    inbox.mkdir(parents=True)
    with Daemon(config, engine=eng) as daemon:
        assert eng.state == "stopped"
        staged = tmp_path / "scan.png"
        text_page(["a letter"]).save(staged)
        data = staged.read_bytes()
        # Written in place and held open (a scanner adding the file's end later): it is
        # still settling however fast the worker starts; a file renamed in whole settles
        # in a fraction of a second (intake/settle.WHOLE_STILL).
        with open(inbox / "scan.png", "wb") as out:
            out.write(data[: len(data) // 2])
            out.flush()
            wait_for(lambda: eng.state == "ready", 2.5,
                     "the worker started before the file settled")
            assert daemon.jobs.known(inbox / "scan.png") is None  # still settling
            out.write(data[len(data) // 2:])
        wait_for(lambda: (job := daemon.jobs.known(inbox / "scan.png")) is not None
                 and job.state.value == "done", 30, "the file read")


def test_release_reads_every_page_handed_over_then_ends_the_worker() -> None:
    # The daemon pauses: pages already handed over (a full engine, four waiting) are
    # read, then the worker ends and is not started again for them.
    eng = make_engine(delay=0.5, queued=0)
    try:
        eng.start()
        seqs = eng.plan.max_num_seqs
        reader, results = read_behind(eng, [page(i) for i in range(seqs + 4)], seqs)
        pid = eng.worker_pid
        eng.release()
        assert eng.state == "stopped" and eng.worker_pid is None
        reader.join(10)
        assert len(results) == seqs + 4 and all(r.error is None for r in results)
        assert pid is not None and gone(pid)
    finally:
        eng.close()


def test_sleep_and_release_wait_for_the_pages_in_flight() -> None:
    eng = make_engine(delay=0.5)
    try:
        eng.start()
        reader, results = read_behind(eng, [page(i) for i in range(4)], 4)
        eng.sleep()
        assert eng.state == "asleep"
        reader.join(10)
        assert [r.error for r in results] == [None] * 4
        pid = eng.worker_pid
        (woken,) = eng.recognize([page(5)])  # wakes the same worker
        assert woken.error is None and eng.worker_pid == pid
        reader = threading.Thread(target=lambda: results.extend(eng.recognize([page(6)])))
        reader.start()
        wait_for(lambda: eng.describe()["pages_in_flight"] == 1, 10, "a page in flight")
        eng.release()
        reader.join(10)
        assert results[-1].error is None and eng.state == "stopped"
        assert pid is not None and gone(pid)
    finally:
        eng.close()


def test_the_daemon_streams_through_a_killed_worker_and_indexes_each_page_once(
        tmp_path: Path) -> None:
    from ocrwatch.daemon import Daemon

    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    settle_seconds=0.3, engine="vllm")
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    # Not under test here, and slow on a loaded machine (the orientation check reads a page
    # of two words four ways): pages must reach the engine faster than it ends them.
    config.rotate_pages = config.deskew = False
    eng = VllmEngine(config, backend="fake", backend_options={"delay": 1.0}, card_mib=16 * 1024)
    inbox = config.inbox[0]
    inbox.mkdir(parents=True)
    files = []
    for i in range(8):
        path = inbox / f"scan{i}.png"
        text_page([f"page {i}"]).save(path)
        files.append(path)
    files.append(save_pdf(inbox / "report.pdf", [["a"], ["b"], ["c"]]))
    with Daemon(config, engine=eng) as daemon:
        wait_for(lambda: eng.describe()["pages_in_flight"] >= 6, 30, "pages in flight")
        pid = eng.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        def done(path: Path) -> bool:
            job = daemon.jobs.known(path)
            return job is not None and job.state.value == "done"

        wait_for(lambda: all(done(p) for p in files), 60, "every file done")
        rows = daemon.db.conn.execute(
            "SELECT job_id, page, COUNT(*) FROM pages GROUP BY job_id, page").fetchall()
        assert len(rows) == 8 + 3 and all(count == 1 for _, _, count in rows)
        assert eng.describe()["restarts"] == 1
        assert eng.worker_pid not in (None, pid)
    assert "<!-- page 3 -->" in (inbox / "report.md").read_text()


# -- idle states -------------------------------------------------------------------------------


class StepClock:
    """A clock the test moves by hand, so that the idle timers fire when it says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_idle_engine_sleeps_then_ends_its_worker_then_restarts() -> None:
    # The idle timers run on the test's clock: under load a real clock let the stop timer
    # (counted from the last page, as is the sleep timer) fire before the test looked.
    clock = StepClock()
    config = Config()
    config.vllm.idle_sleep_seconds, config.vllm.idle_stop_seconds = 0.2, 0.8
    eng = VllmEngine(config, backend="fake", card_mib=16 * 1024, clock=clock)
    try:
        eng.recognize([page(0)])
        pid = eng.worker_pid
        assert pid is not None
        clock.now += 0.3
        eng.poke()
        assert eng.wait_for_state(["asleep"], 10)
        assert eng.worker_pid == pid  # asleep, still there
        clock.now += 0.6
        eng.poke()
        assert eng.wait_for_state(["stopped"], 10)
        assert eng.worker_pid is None and gone(pid)
        assert eng.describe()["gpu_memory_mb"] == 0
        (result,) = eng.recognize([page(1)])
        assert result.error is None and eng.worker_pid not in (None, pid)
    finally:
        eng.close()


def test_a_worker_being_ended_is_still_named_while_its_state_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the worker ends, the state and the pid agree: never "asleep" with no worker
    (the engine used to let go of the worker first and say "stopped" only once it had
    ended, so a look in between saw an asleep engine without a worker)."""
    from ocrwatch.engines.vllm import supervisor

    seen: list[tuple[str, int | None]] = []
    stop = supervisor.Worker.stop

    def watched_stop(self: supervisor.Worker) -> None:
        seen.append((eng.state, eng.worker_pid))  # what another thread sees meanwhile
        stop(self)

    monkeypatch.setattr(supervisor.Worker, "stop", watched_stop)
    clock = StepClock()
    config = Config()
    config.vllm.idle_sleep_seconds, config.vllm.idle_stop_seconds = 0.2, 0.8
    eng = VllmEngine(config, backend="fake", card_mib=16 * 1024, clock=clock)
    try:
        eng.recognize([page(0)])
        pid = eng.worker_pid
        clock.now += 0.3
        eng.poke()
        assert eng.wait_for_state(["asleep"], 10)
        clock.now += 0.6
        eng.poke()
        assert eng.wait_for_state(["stopped"], 10)
        assert seen == [("asleep", pid)]
    finally:
        eng.close()


def test_next_page_wakes_a_sleeping_worker_without_a_restart() -> None:
    eng = make_engine(idle_sleep=0.1)
    try:
        eng.recognize([page(0)])
        pid = eng.worker_pid
        assert eng.wait_for_state(["asleep"], 10)
        (result,) = eng.recognize([page(1)])
        assert result.error is None
        assert eng.worker_pid == pid
        assert "wake" in eng.timings and "sleep" in eng.timings
    finally:
        eng.close()


def test_timers_off_keep_the_worker_ready(engine: VllmEngine) -> None:
    engine.recognize([page(0)])
    assert not engine.wait_for_state(["asleep", "stopped"], 0.3)
    assert engine.state == "ready"


def test_release_ends_the_worker_and_the_next_page_restarts_it(engine: VllmEngine) -> None:
    engine.recognize([page(0)])
    pid = engine.worker_pid
    assert pid is not None
    engine.release()
    assert engine.state == "stopped" and gone(pid)
    engine.release()  # nothing to release: fine
    assert engine.recognize([page(1)])[0].error is None


def test_explicit_sleep_and_wake(engine: VllmEngine) -> None:
    engine.start()
    engine.sleep()
    assert engine.state == "asleep"
    engine.wake()
    assert engine.state == "ready"


def test_a_sleep_that_keeps_the_gpu_memory_ends_the_worker_instead(
        caplog: pytest.LogCaptureFixture) -> None:
    asked: list[list[int]] = []

    def held(pids: list[int]) -> int:  # what nvidia-smi would say of a sleep that kept it all
        asked.append(pids)
        return 14_000

    config = Config()
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    eng = VllmEngine(config, backend="fake", card_mib=16 * 1024, held_mib=held)
    try:
        eng.start()
        pid = eng.worker_pid
        assert pid is not None
        with caplog.at_level("WARNING"):
            eng.sleep()
        assert eng.state == "stopped" and gone(pid)
        assert asked and pid in asked[0]  # the worker's own processes were measured
        assert "still hold 14000 MiB" in caplog.text
        (result,) = eng.recognize([page(1)])  # the next page starts a fresh worker
        assert result.error is None and eng.worker_pid not in (None, pid)
    finally:
        eng.close()


def test_a_sleep_that_gives_the_memory_back_stays_asleep() -> None:
    config = Config()
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    eng = VllmEngine(config, backend="fake", card_mib=16 * 1024, held_mib=lambda pids: 900)
    try:
        eng.start()
        pid = eng.worker_pid
        eng.sleep()
        assert eng.state == "asleep" and eng.worker_pid == pid
    finally:
        eng.close()


def test_vllm_compiles_nothing_unless_asked_and_graphs_only_the_decode_sizes() -> None:
    settings: dict[str, Any] = {"cudagraph_sizes": [1, 2, 4, 8]}
    assert compilation_config(settings) == {"cudagraph_capture_sizes": [1, 2, 4, 8],
                                            "mode": "NONE", "cudagraph_mode": "FULL_DECODE_ONLY"}
    settings["torch_compile"] = True
    assert compilation_config(settings) == {"cudagraph_capture_sizes": [1, 2, 4, 8]}


def test_the_sampling_warm_up_meets_each_kind_of_batch_triton_compiles_apart_once() -> None:
    # 1, a multiple of 16, and any other size: one batch of each, the smallest.
    assert warm_up_sizes([1, 2, 4, 8, 16, 24, 32, 33]) == [1, 2, 16]
    assert warm_up_sizes([1, 2, 4, 8]) == [1, 2]
    assert warm_up_sizes([4, 8, 12]) == [4]
    assert warm_up_sizes([16, 32]) == [16]
    assert warm_up_sizes([]) == []


def test_the_engine_hands_its_compile_setting_to_the_worker() -> None:
    config = Config()
    assert config.vllm.torch_compile is False
    config.vllm.torch_compile = True
    plan = plan_memory(16.0, 16.0, config.vllm.max_tokens)
    settings = worker_settings(config.vllm, plan, "vllm", {}, "/models/lightonocr")
    assert settings["torch_compile"] is True
    assert settings["cudagraph_sizes"] == plan.cudagraph_sizes


def test_close_is_safe_twice_and_refuses_more_work() -> None:
    eng = make_engine(idle_sleep=30, idle_stop=60)
    eng.recognize([page(0)])
    pid = eng.worker_pid
    assert pid is not None
    eng.close()
    eng.close()
    assert eng.state == "closed" and gone(pid)
    with pytest.raises(EngineError, match="closed"):
        eng.recognize([page(1)])


def test_describe_has_what_status_shows(engine: VllmEngine) -> None:
    engine.recognize([page(0), page(1)])
    facts = engine.describe()
    assert facts["engine"] == "vllm" and facts["state"] == "ready"
    assert facts["model"] == "lightonai/LightOnOCR-2-1B"
    assert isinstance(facts["pages_per_second"], float)
    assert facts["gpu_memory_budget_gb"] == 16.0 - MARGIN_GIB
    assert f"{engine.plan.max_num_seqs} pages in flight" in str(facts["memory_plan"])


# -- text helpers -----------------------------------------------------------------------------


def test_markdown_to_text_strips_markup_and_keeps_math() -> None:
    md = ("# Title\n\nSome **bold**, *italic* and __strong__ words, a [link](http://x) "
          "and ![a figure](img.png).\n\n$$a_1 * b_2 = c^{*}$$ and $x_i$ stay.\n\n"
          "<table><tr><th>Item</th><th>Price</th></tr>"
          "<tr><td>Tea &amp; cake</td><td>3.50</td></tr></table>\n\n"
          "| A | B |\n|---|---|\n| 1 | 2 |\n")
    text = markdown_to_text(md)
    assert text.startswith("Title\n\nSome bold, italic and strong words, a link and a figure.")
    assert "$$a_1 * b_2 = c^{*}$$ and $x_i$ stay." in text
    assert "Item\tPrice\nTea & cake\t3.50" in text
    assert "A\tB\n1\t2" in text
    assert "<" not in text and "**" not in text
    assert markdown_to_text("") == ""


def test_markdown_to_text_follows_commonmark_where_regexes_did_not() -> None:
    """Escapes, code spans and list markers as a Markdown viewer shows them (the text is
    parsed by markdown-it-py): an escaped star is a star, a code span keeps its stars."""
    assert markdown_to_text(r"Price \*not emphasis\* and `x*y*z` and 5 \_ 6") == (
        "Price *not emphasis* and x*y*z and 5 _ 6\n")
    assert markdown_to_text("- one\n- **two**\n  - nested\n\n3. third\n4. fourth") == (
        "- one\n- two\n  - nested\n\n3. third\n4. fourth\n")
    assert markdown_to_text("[see (this) page](http://x/(y)) and <b>bold</b>") == (
        "see (this) page and bold\n")


def test_repeats_itself_spots_the_model_looping() -> None:
    assert repeats_itself("Intro.\n" + "the same line again\n" * 40)
    assert repeats_itself("Total " + "0" * 400)
    assert not repeats_itself("A normal page of text, with no loop at all. " * 3
                              + "It ends here.")
    table = "<tr><td></td><td></td></tr>\n" * 4
    assert not repeats_itself("Header\n" + table + "Footer")


# -- a shared card -------------------------------------------------------------------------------


class Card:
    """What NVML would say other programs hold on a 16 GiB card, changed by the test."""

    def __init__(self, others_mib: int) -> None:
        self.others_mib = others_mib
        self.asked: list[list[int]] = []

    def __call__(self, own: list[int]) -> int:
        self.asked.append(list(own))
        return self.others_mib


def shared_engine(card: Card, standby: bool = False, **options: Any) -> VllmEngine:
    config = Config()
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    config.vllm.max_tokens = 500
    config.vllm.standby = standby
    return VllmEngine(config, backend="fake", backend_options=options, card_mib=16 * 1024,
                      others_mib=card)


def test_a_busy_card_holds_the_pages_says_why_and_reads_them_once_memory_frees() -> None:
    card = Card(12 * 1024)  # 12 GiB held by another program: not one page fits
    eng = shared_engine(card)
    try:
        results: list[PageText] = []
        caller = threading.Thread(target=lambda: results.extend(eng.recognize([page(0)])))
        caller.start()
        assert eng.wait_for_state(["waiting"], 10)
        facts = eng.describe()
        assert "the GPU is busy: 12.0 GiB held by other programs" in facts["waiting_reason"]
        assert facts["gpu_memory_mb"] == 0 and eng.worker_pid is None
        assert not results  # held, not failed
        asked = len(card.asked)
        assert wait_for(lambda: len(card.asked) > asked, 10, "the card asked again")
        card.others_mib = 3 * 1024  # the other program shrinks: the page is read
        caller.join(30)
        assert not caller.is_alive()
        assert results[0].error is None
        assert "waiting_reason" not in eng.describe()
        # The plan was made within what the other program left.
        assert eng.plan.others_gib == 3.0 and eng.plan.total_gib + 3.0 <= 16.0
        assert eng.worker_info["max_num_seqs"] == eng.plan.max_num_seqs
        assert eng.worker_info["kv_cache_memory_bytes"] == eng.plan.kv_cache_bytes
    finally:
        eng.close()


def test_a_sleeping_engine_that_no_longer_fits_restarts_within_what_is_left() -> None:
    card = Card(0)
    eng = shared_engine(card)
    try:
        eng.recognize([page(0)])
        pid, seqs = eng.worker_pid, eng.plan.max_num_seqs
        eng.sleep()
        card.others_mib = 4 * 1024  # a game started while the engine slept
        (result,) = eng.recognize([page(1)])
        assert result.error is None
        assert eng.worker_pid not in (None, pid) and gone(pid)  # not woken: planned again
        assert eng.plan.others_gib == 4.0 and eng.plan.max_num_seqs < seqs
    finally:
        eng.close()


def test_a_sleeping_engine_that_still_fits_is_woken() -> None:
    card = Card(1024)
    eng = shared_engine(card)
    try:
        eng.recognize([page(0)])
        pid = eng.worker_pid
        eng.sleep()
        (result,) = eng.recognize([page(1)])
        assert result.error is None and eng.worker_pid == pid and "wake" in eng.timings
        assert pid in card.asked[-1]  # its own processes are not counted as others'
    finally:
        eng.close()


def test_pausing_while_the_card_is_busy_hands_the_pages_back() -> None:
    card = Card(12 * 1024)
    eng = shared_engine(card)
    try:
        failures: list[BaseException] = []

        def read() -> None:
            try:
                eng.recognize([page(0)])
            except EngineUnavailable as exc:
                failures.append(exc)

        caller = threading.Thread(target=read)
        caller.start()
        assert eng.wait_for_state(["waiting"], 10)
        eng.release()  # the daemon pausing: it must not wait for the card
        caller.join(10)
        assert not caller.is_alive()
        assert failures and isinstance(failures[0], GpuBusy)  # its file goes back, unfailed
    finally:
        eng.close()


# -- the standby worker --------------------------------------------------------------------------


def test_after_the_idle_stop_a_standby_process_waits_and_becomes_the_next_worker(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="ocrwatch.engines.vllm.feeder")
    config = Config()
    config.vllm.idle_sleep_seconds = 0
    config.vllm.idle_stop_seconds = 0.3
    config.vllm.max_tokens = 64
    assert config.vllm.standby is True  # on by default
    eng = VllmEngine(config, backend="fake", backend_options={"import_delay": 0.5},
                     card_mib=16 * 1024)
    try:
        eng.recognize([page(0)])
        first = eng.worker_pid
        assert first is not None and eng.standby_pid is None  # none while a worker runs
        assert eng.wait_for_state(["stopped"], 10)
        assert gone(first) and eng.describe()["gpu_memory_mb"] == 0
        standby = wait_for(lambda: eng.standby_pid, 10, "a standby process")
        ready = wait_for(lambda: (eng.describe().get("standby") or {}).get("ready"), 10,
                         "the standby's imports done")
        assert ready
        wait_for(lambda: "vLLM standby ready" in caplog.text, 10, "the log saying so")
        rss = eng.describe()["standby"]["rss_mb"]
        assert isinstance(rss, int) and rss > 0
        (result,) = eng.recognize([page(1)])
        assert result.error is None
        assert eng.worker_pid == standby and eng.standby_pid is None  # the standby took over
        assert eng.worker_info["standby"]["import_seconds"] >= 0.5
    finally:
        eng.close()
    assert gone(standby)


def test_stand_by_imports_vllm_before_the_first_page_which_then_pays_only_the_start() -> None:
    """What the daemon calls at launch: the worker's imports begin then, not at the first
    file, and the first page's worker is that process."""
    config = Config()
    config.vllm.max_tokens = 64
    eng = VllmEngine(config, backend="fake", backend_options={"import_delay": 0.5},
                     card_mib=16 * 1024)
    try:
        assert eng.standby_pid is None
        eng.stand_by()
        standby = wait_for(lambda: eng.standby_pid, 10, "a standby process")
        assert eng.describe()["gpu_memory_mb"] == 0 and eng.worker_pid is None
        eng.stand_by()  # a second call starts no second process
        assert eng.standby_pid == standby
        (result,) = eng.recognize([page(0)])
        assert result.error is None
        assert eng.worker_pid == standby and eng.standby_pid is None
        eng.stand_by()  # while a worker runs: nothing
        assert eng.standby_pid is None
    finally:
        eng.close()
    assert gone(standby)


def test_no_standby_when_it_is_turned_off() -> None:
    config = Config()
    config.vllm.idle_sleep_seconds = 0
    config.vllm.idle_stop_seconds = 0.2
    config.vllm.standby = False
    eng = VllmEngine(config, backend="fake", card_mib=16 * 1024)
    try:
        eng.stand_by()
        assert not wait_for_or_none(lambda: eng.standby_pid, 0.3)
        eng.recognize([page(0)])
        assert eng.wait_for_state(["stopped"], 10)
        assert not wait_for_or_none(lambda: eng.standby_pid, 0.5)
    finally:
        eng.close()


def wait_for_or_none(condition: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.05)
    return None


# -- admission with mixed pages ------------------------------------------------------------------


def test_mixed_pages_fill_every_slot_and_a_freed_slot_is_taken_at_once() -> None:
    eng = make_engine(delay=0.3)
    try:
        seqs = eng.plan.max_num_seqs
        # A4 pages and cards (a quarter of their size: the fake reads any size alike).
        sizes = [(272, 385) if i % 3 else (200, 125) for i in range(2 * seqs)]
        pages = [Page(Path(f"mix{i}.png"), i, Image.new("RGB", size, OK))
                 for i, size in enumerate(sizes)]
        eng.start()
        started = time.monotonic()
        with ThreadPoolExecutor(eng.policy.concurrency) as pool:
            results = [r for rs in pool.map(lambda p: eng.recognize([p]), pages) for r in rs]
        took = time.monotonic() - started
        assert all(r.error is None for r in results)
        # Cards and A4 pages together, to the plan's bound: every slot, and the pages
        # queued behind them in vLLM's own queue.
        assert eng.most_in_flight == seqs + Config().vllm.queued_pages
        # Two rounds of 0.3 s: no page waited for a pair, a batch, or a like size.
        assert took < 2 * 0.3 + 1.2, took
    finally:
        eng.close()


def test_the_daemon_holds_files_while_the_card_is_busy_and_says_why(tmp_path: Path) -> None:
    from ocrwatch.core.status import format_status
    from ocrwatch.daemon import Daemon
    from ocrwatch.tray.menu import status_lines

    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    settle_seconds=0.3, engine="vllm")
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    config.vllm.standby = False
    card = Card(12 * 1024)
    eng = VllmEngine(config, backend="fake", card_mib=16 * 1024, others_mib=card)
    inbox = config.inbox[0]
    inbox.mkdir(parents=True)
    files = []
    for i in range(3):
        path = inbox / f"scan{i}.png"
        text_page([f"page {i}"]).save(path)
        files.append(path)
    with Daemon(config, engine=eng) as daemon:
        wait_for(lambda: eng.state == "waiting", 30, "the engine waiting for the card")
        status = daemon.status()
        why = "the GPU is busy: 12.0 GiB held by other programs"
        assert why in format_status(status)
        assert any(why in line for line in status_lines(status))
        assert status.failed == 0 and status.done == 0
        assert why in str(status.to_dict()["engine"]["waiting_reason"])  # status --json
        busy = [w for w in status.progress.waiting if w.what == "GPU busy"]
        assert busy and busy[0].files == 3 and why in busy[0].why
        card.asked.clear()
        wait_for(lambda: len(card.asked) >= 2, 10, "the card asked again while waiting")
        assert daemon.status().failed == 0  # still held, none failed
        card.others_mib = 1024  # the other program ends

        def done(path: Path) -> bool:
            job = daemon.jobs.known(path)
            return job is not None and job.state.value == "done"

        wait_for(lambda: all(done(p) for p in files), 30, "every file read")
        assert "GPU is busy" not in format_status(daemon.status())
