"""The GPU benchmarks' own arithmetic, on any machine: which plain setting is the one to beat."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_daemon  # noqa: E402


def test_the_best_plain_setting_is_the_fastest_that_stayed_under_16_gib() -> None:
    base = 615
    plain = [
        {"seqs": 8, "rate": 3.3, "peak_mib": base + 14_700},
        {"seqs": 16, "rate": 4.2, "peak_mib": base + 14_800},
        {"seqs": 24, "rate": 4.9, "peak_mib": base + 16 * 1024 + 1},  # fastest, but over
        {"seqs": 32, "error": "exit 1"},
    ]
    best = gpu_daemon.best_plain(plain, base)
    assert best is not None and best["seqs"] == 16
    assert gpu_daemon.best_plain(plain[2:], base) is None


def test_the_report_sets_the_engine_and_the_daemon_against_the_best_plain_figure() -> None:
    meta = {"date": "d", "gpu": "g", "cores": 16, "vllm": "v", "tokens": 500, "files": 52,
            "pages": 64, "settle": 1.0, "baseline_mib": 0, "plain_step": 4096,
            "plain_len": 3840}
    prep = {k: {"pages": 1, "s": 1.0, "pages_per_s": 1.0} for k in ("a4", "card", "pdf")}
    daemon = {"pages": 64, "seconds": 16.0, "rate": 4.0, "peak_mib": 12_000, "failed": 0,
              "errors": [], "first_file_s": 50.0, "after_idle_stop_s": 9.7}
    alone = {"pages": 64, "seconds": 14.0, "rate": 4.4, "peak_mib": 12_000, "start_s": 25.0,
             "most_in_flight": 27, "errors": [], "plan": "27 pages in flight"}
    plain = [{"seqs": 24, "pages": 64, "seconds": 14.0, "rate": 4.0, "warm_rate": 3.9,
              "peak_mib": 14_800}]
    text = gpu_daemon.report(meta, prep, daemon, alone, plain)
    assert "best plain setting under 16 GiB: max_num_seqs 24, 4.00 pages/s" in text
    assert "daemon / best plain: 1.00x (goal 1.1x)" in text
    assert "engine alone / best plain: 1.10x (goal 1.05x)" in text


def test_plain_vllm_with_the_engines_encoder_is_reported_but_never_the_figure_to_beat() -> None:
    base = 615
    plain = [{"seqs": 24, "pages": 64, "seconds": 14.0, "rate": 4.6, "warm_rate": 4.4,
              "peak_mib": base + 14_800},
             {"seqs": 33, "pagewise": True, "pages": 64, "seconds": 8.7, "rate": 7.3,
              "warm_rate": 7.0, "peak_mib": base + 14_500}]
    best = gpu_daemon.best_plain(plain, base)
    assert best is not None and best["seqs"] == 24 and not best.get("pagewise")
    meta = {"date": "d", "gpu": "g", "cores": 16, "vllm": "v", "tokens": 500, "files": 52,
            "pages": 64, "settle": 1.0, "baseline_mib": base, "plain_step": 4096,
            "plain_len": 3840}
    prep = {k: {"pages": 1, "s": 1.0, "pages_per_s": 1.0} for k in ("a4", "card", "pdf")}
    alone = {"pages": 64, "seconds": 9.4, "rate": 6.8, "peak_mib": base + 13_000,
             "start_s": 22.0, "most_in_flight": 37, "errors": [], "plan": "33 pages"}
    text = gpu_daemon.report(meta, prep, None, alone, plain)
    assert "| plain vLLM with the engine's page-at-a-time encoder, max_num_seqs 33," in text
    assert "best plain setting under 16 GiB: max_num_seqs 24, 4.60 pages/s" in text
    assert "engine alone / plain vLLM at 33 with the same encoder: 0.93x" in text


def test_the_feeders_page_timeline_lines_are_what_the_benchmark_reads() -> None:
    """The daemon's debug line (feeder.timeline) and the benchmark's parser agree: a
    page's steps, in seconds after the drop, their quarters and the medians between."""
    from _drop import page_timeline

    from ocrwatch.core.domain import Page
    from ocrwatch.engines.vllm.admission import Request
    from ocrwatch.engines.vllm.feeder import timeline
    from ocrwatch.engines.vllm.messages import Done

    started = 1000.0
    lines = []
    for i in range(4):
        page = Page(Path(f"a4_{i:02d}.jpg"), 0, None)  # type: ignore[arg-type]
        request = Request(page, page.image, 1800, 0.0, 0.2, queued_at=started + 0.5 + i,
                          sent_at=started + 0.6 + i)
        done = Done("p1", "text", 500, "length", received=started + 0.61 + i,
                    taken=started + 0.7 + i)
        lines.append(timeline(request, done))
    lines.append("page timeline: not_dropped.jpg page 1: queued 1 sent 1 received 1 "
                 "taken 1 done 1")
    figures = page_timeline("\n".join(lines), started, {f"a4_{i:02d}.jpg" for i in range(4)})
    assert figures["pages"] == 4
    assert figures["queued"] == {"0%": 0.5, "25%": 0.5, "50%": 1.5, "75%": 2.5, "100%": 3.5}
    assert figures["sent->received"] == 0.01
    assert abs(figures["received->taken"] - 0.09) < 1e-9
    text = "\n".join(gpu_daemon.timeline_lines("daemon", figures))
    assert "  taken: 0.7, 0.7, 1.7, 2.7, 3.7" in text
    assert gpu_daemon.timeline_lines("daemon", {"pages": 0}) == [
        "daemon's page timeline: no page timeline lines were logged"]
