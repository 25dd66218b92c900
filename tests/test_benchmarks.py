"""The accuracy benchmark's metrics, and the script end to end on one generated page."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from helpers import MINUTES, scribbled, text_page, wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import accuracy
from benchmarks._common import (
    corpus,
    levenshtein,
    levenshtein_dp,
    normalize,
    score,
    word_recall,
)
from benchmarks.cases import DEJAVU


def one_page_corpus(tmp_path: Path, lines: list[str], size: int = 44,
                    dpi: int = 300) -> Path:
    """A corpus folder in ``tmp_path`` of one drawn page of ``lines``, with its ground
    truth."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    text_page(lines, size=size).save(folder / "page.png", dpi=(dpi, dpi))
    (folder / "page.gt.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_levenshtein_known_values() -> None:
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "") == 0
    assert levenshtein("", "abc") == 3
    assert levenshtein("abc", "") == 3
    assert levenshtein("flaw", "lawn") == 2
    assert levenshtein("straße", "strasse") == 2
    # Longer than one 64-bit word, with the edits in the middle.
    a = "x" * 100 + "abcdef" + "y" * 100
    assert levenshtein(a, a.replace("abcdef", "azcdf")) == 2


# A small alphabet makes long common runs and many ties, where bit-vector bugs hide.
_text = st.text(alphabet="abé \n", max_size=90)


@settings(max_examples=300, deadline=None)
@given(_text, _text)
def test_levenshtein_equals_the_plain_dynamic_programme(a: str, b: str) -> None:
    assert levenshtein(a, b) == levenshtein_dp(a, b) == levenshtein(b, a)


def test_normalize_folds_compatibility_forms_and_whitespace() -> None:
    assert normalize("  ﬁne\tＡ１\n\n\fcafe\u0301  ") == "fine A1 café"


def test_word_recall_is_a_casefolded_multiset() -> None:
    assert word_recall("the cat, the hat", "The hat the") == (3, 4)
    assert word_recall("", "anything") == (0, 0)


def test_score_of_one_page() -> None:
    s = score("Hello   world\n", "Hel1o world")
    assert (s.edits, s.ref_chars) == (1, 11)
    assert s.cer == pytest.approx(1 / 11)
    assert s.recall == 0.5


def test_corpus_pairs_and_manifest(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"x")
    (tmp_path / "a.gt.txt").write_text("a", encoding="utf-8")
    (tmp_path / "b.jpg").write_bytes(b"x")  # no ground truth: left out
    (tmp_path / "manifest.tsv").write_text("file\tkind\tlanguage\na.png\tsample\tfra\n",
                                           encoding="utf-8")
    items = corpus(tmp_path)
    assert [(i.path.name, i.languages, i.kind) for i in items] == [("a.png", "fra", "sample")]


def test_each_orientation_variant_is_made_from_the_page_not_over_it(tmp_path: Path) -> None:
    from benchmarks import orientation

    for name in ("letter-p1.png", "tess_8071_093.3B.tif"):
        page = tmp_path / name
        text_page(["Invoice number 4711 for March"], size=30).save(page, format="PNG")
        original = page.read_bytes()
        made = [v.make(page, orientation.variant_stem(tmp_path, name, v))
                for v in orientation.VARIANTS]
        assert page.read_bytes() == original
        written = [p for p in made if p != page]  # "scan" is the page itself
        assert len(set(written)) == len(written) == len(orientation.VARIANTS) - 1, written


def test_the_cost_of_preparing_is_timed_on_each_page_with_the_daemons_steps(
        tmp_path: Path, home: Path) -> None:
    sheet = text_page(["Invoice number 4711 for March", "The quick brown fox jumps"], size=30)
    sheet.save(tmp_path / "page.png", dpi=(200, 200))
    sheet.save(tmp_path / "two.tif", save_all=True, append_images=[sheet], dpi=(200, 200))
    costs = accuracy.prep_costs([tmp_path / "page.png", tmp_path / "two.tif"])
    assert list(costs) == ["ink coverage", "straightening and orientation", "all"]
    assert all(len(seconds) == 3 for seconds in costs.values())  # one figure a page
    for ink, upright, whole in zip(*costs.values(), strict=True):
        assert ink > 0 and upright > 0 and whole == pytest.approx(ink + upright)


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs the tesseract command")
def test_accuracy_script_on_one_page(tmp_path: Path, home: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["Invoice number 4711 for March", "The quick brown fox jumps over the lazy dog"]
    folder = one_page_corpus(tmp_path, lines, dpi=200)
    before = sorted(p.name for p in folder.iterdir())
    os.chmod(folder, 0o555)  # the corpus must only ever be read
    out = tmp_path / "accuracy.txt"
    try:
        code = accuracy.main(["--corpus", str(folder), "--languages", "eng",
                              "--cases", "corpus", "--out", str(out)])
    finally:
        os.chmod(folder, 0o755)
    assert sorted(p.name for p in folder.iterdir()) == before
    report = out.read_text(encoding="utf-8")
    assert report == capsys.readouterr().out
    row = next(line for line in report.splitlines() if line.startswith("| page.png |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:3] == ["eng", "1"]
    cer_daemon, cer_plain = float(cells[3]), float(cells[4])
    recall_daemon, recall_plain = float(cells[6]), float(cells[7])
    assert 0 <= cer_daemon < 0.1 and 0 <= cer_plain < 0.1
    assert recall_daemon > 0.8 and recall_plain > 0.8
    assert float(cells[8]) > 0 and float(cells[9]) > 0  # seconds per page, both measured
    assert re.search(r"^# machine: .+ cores", report, re.M)
    assert re.search(r"^# plain: +tesseract \d", report, re.M)
    verdict = re.search(r"requirement, .*: (PASS|FAIL) \(", report)
    assert verdict is not None and code == (0 if verdict.group(1) == "PASS" else 1)


@pytest.mark.skipif(shutil.which("tesseract") is None or not DEJAVU.is_file(),
                    reason="needs the tesseract command and fonts-dejavu-core")
def test_accuracy_script_builds_the_derived_cases(tmp_path: Path, home: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["Invoice number 4711 for March", "The quick brown fox jumps over the lazy dog"]
    folder = one_page_corpus(tmp_path, lines, size=60)
    out = tmp_path / "accuracy.txt"
    accuracy.main(["--corpus", str(folder), "--languages", "eng", "--cases", "dpi100",
                   "born-digital", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    assert "| page.dpi100.png | eng | 1 |" in report
    row = next(line for line in report.splitlines()
               if line.startswith("| page.born-digital.pdf |"))
    assert float(row.split("|")[4]) == 0.0  # the text layer, exactly
    summary = report.split("## summary")[1]
    assert "| dpi100 | 1 | 1 |" in summary and "| born-digital | 1 | 1 |" in summary


def test_search_benchmark_end_to_end(tmp_path: Path) -> None:
    """The search benchmark at a small size (CI's short version of the 100,000 pages)."""
    from benchmarks import search as bench

    out = tmp_path / "search.txt"
    assert bench.main(["--pages", "1500", "--repeats", "2", "--browser-repeats", "1",
                       "--out", str(out)]) == 0
    report = out.read_text()
    assert re.search(r"^# machine: .+ cores", report, re.M)
    indexing = report.split("## Indexing")[1].split("##")[0]
    rates = re.findall(r"\| ([\d.]+) \| (\d+) \| ([\d.]+) \| (\d+) \|$", indexing, re.M)
    assert len(rates) == 4 and all(float(r[1]) > 0 for r in rates)
    pooled = re.search(r"p50 ([\d.]+) ms, p95 ([\d.]+) ms, p99 ([\d.]+) ms", report)
    assert pooled is not None and 0 < float(pooled.group(1)) <= float(pooled.group(2))
    assert report.count("| word, planted | `q=Zollverein` | 3 |") == 1  # planted: known hits
    for goal in ("p95 of the query mix", "first results on the page", "indexing >="):
        assert re.search(re.escape(goal) + r".*: (PASS|FAIL|not measured)", report), goal


def test_line_end_hyphens_are_joined_as_pdftotext_joins_them() -> None:
    from benchmarks._common import joined_hyphens

    assert joined_hyphens("Jacqueline Fontai-\nnel me dit") == "Jacqueline Fontainel me dit"
    assert joined_hyphens("gentle- \n  men") == "gentlemen"
    # A dash that begins a line, or one alone, is no hyphenated word.
    assert joined_hyphens("-Non!\n-À bientôt.\nwords -\nmore") == (
        "-Non!\n-À bientôt.\nwords -\nmore")


def test_a_made_page_is_the_same_page_for_the_same_seed(tmp_path: Path) -> None:
    """Made pages feed tests: their noise must come from the seed, not from the run."""
    from benchmarks import cases

    made = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        out = cases.paper_texture(tmp_path / f"{name}.jpg", seed=seed, size=(400, 300))
        made[name] = out.read_bytes()
    assert made["a"] == made["b"]
    assert made["a"] != made["c"]


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Tesseract's OSD data")
def test_orientation_and_blank_benchmarks_on_one_page(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import blank_pages, orientation

    lines = ["Invoice number 4711 for the month of March, paid in full",
             "The quick brown fox jumps over the lazy dog again and again",
             "Please keep this letter with your other papers for next year",
             "Orientation is detected from the shapes of the letters here"] * 3
    folder = one_page_corpus(tmp_path, lines, size=36)
    out = tmp_path / "orientation.txt"
    orientation.main(["--corpus", str(folder), "--languages", "eng",
                      "--variants", "scan", "dpi150", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    for variant in ("scan", "dpi150"):
        for fed in (0, 90, 180, 270):
            assert re.search(rf"^\| {variant} \| {fed} \| 1 \| 1 \| 0 \| 0 \| 0 \|", report, re.M)
    assert "right: 8 of 8; wrong turns: 0; left as fed: 0; recorded blank: 0" in report
    out = tmp_path / "blank.txt"
    blank_pages.main(["--corpus", str(folder), "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    assert re.search(r"^\| page \| 1 \| 0 \|", report, re.M)
    assert re.search(r"^\| back \| 1 \| 1 \|", report, re.M)
    capsys.readouterr()


def test_read_first_benchmark_on_one_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The page's lines made undecided, so that it is read first each way it is fed: its
    upright reading passes the rule and none of its turned ones does."""
    from benchmarks import read_first
    from ocrwatch.scan import orient

    monkeypatch.setattr(orient.Detector, "by_lines", staticmethod(lambda image: None))
    lines = ["Invoice number 4711 for the month of March, paid in full",
             "The quick brown fox jumps over the lazy dog again and again",
             "Please keep this letter with your other papers for next year"] * 4
    folder = one_page_corpus(tmp_path, lines, size=36)
    out = tmp_path / "read_first.txt"
    read_first.main(["--corpus", str(folder), "--variants", "scan", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    assert "read first: 4 (1 upright, 3 turned)" in report
    assert "upright pages read as upright text (no OSD): **1 of 1**" in report
    assert "turned pages read as upright text (would stay turned): **0 of 3**" in report
    capsys.readouterr()


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Tesseract's OSD data")
def test_prep_ahead_benchmark_on_a_short_pdf(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Both ways prepare every page of the PDF (the benchmark asserts the count) and the
    report sets them side by side."""
    from benchmarks import prep_ahead

    out = tmp_path / "prep_ahead.txt"
    prep_ahead.main(["--pages", "3", "--runs", "1", "--workers", "2", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    assert "3 A4 pages at 300 dpi in one PDF" in report
    assert re.search(r"\| up to 3 pages ahead \(as shipped\) \| [\d.]+ \| [\d.]+ \| [\d.]+ \|",
                     report)
    assert re.search(r"ahead / one at a time, pages/s \(medians\): [\d.]+x", report)
    capsys.readouterr()


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Tesseract's OSD data")
def test_orientation_benchmark_compares_the_band_check_with_the_whole_page(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--compare prepares each page with the band check, with the whole-page check and
    without orientation: both checks' verdicts and the CPU seconds of the three."""
    from benchmarks import orientation

    lines = ["Invoice number 4711 for the month of March, paid in full",
             "Please keep this letter with your other papers for next year"] * 4
    folder = one_page_corpus(tmp_path, lines, size=36)
    out = tmp_path / "orientation.txt"
    orientation.main(["--corpus", str(folder), "--languages", "eng", "--compare",
                      "--variants", "scan", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    assert "| before | 4 | 0 | 0 |" in report and "| after | 4 | 0 | 0 |" in report
    assert "pages decided otherwise than before: 0" in report
    for label in ("before", "after", "no orientation"):
        assert re.search(rf"^\| {label} \| \d+\.\d+ \| \d+\.\d+ \| [\d.]+ \| 4 \|$",
                         report, re.M), label
    capsys.readouterr()


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Tesseract's OSD data")
def test_orientation_benchmark_compares_the_lines_on_the_text_box(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--compare sheet: before and after verdicts, lines' decisions both ways, and the
    lists name the page (not a switch)."""
    from benchmarks import orientation

    lines = ["Invoice number 4711 for the month of March, paid in full",
             "Please keep this letter with your other papers for next year"] * 4
    folder = one_page_corpus(tmp_path, lines, size=36)
    out = tmp_path / "orientation.txt"
    orientation.main(["--corpus", str(folder), "--languages", "eng", "--compare", "sheet",
                      "--variants", "scan", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    assert "| before | 4 | 0 | 0 |" in report and "| after | 4 | 0 | 0 |" in report
    assert "pages decided otherwise than before: 0" in report
    assert re.search(r"^pages decided by their lines: \d+ of 4 \(before \d+\)$", report, re.M)
    assert "SHEET_LINES scan" not in report and "SIDEWAYS_LINES scan" not in report
    capsys.readouterr()


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Tesseract's OSD data")
def test_prep_kinds_on_a_small_drop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Preparation per kind before and after on one A4 page, one card fed four ways and
    one four-page PDF of the drop: every kind's row, both threaded rows, no page turned
    wrong, and the card mostly decided without OSD after."""
    from benchmarks import prep_kinds

    out = tmp_path / "prep_kinds.txt"
    prep_kinds.main(["--drop", "1,1,1", "--turned", "--threads", "1", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    for kind, pages in (("a4", 1), ("card", 4), ("pdf", 4), ("all", 9)):
        assert re.search(rf"^\| {kind} \| {pages} \| [\d.]+ \| [\d.]+ \|", report, re.M), kind
    card = next(line for line in report.splitlines() if line.startswith("| card |"))
    before, after = (int(c) for c in card.strip("| ").split(" | ")[-2:])  # OSD calls
    assert before == 4 and after < before, card  # card_00 fed 180 still goes to OSD
    for label in ("before", "after"):
        assert re.search(rf"^\| {label} \| 9 \| [\d.]+ \|", report, re.M), label
        assert f"pages turned otherwise than fed, {label}: 0" in report
    capsys.readouterr()


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs the tesseract command")
def test_skew_sweep_on_one_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sweep reads a skewed page as ocrwatch straightens it, at the exact turn and
    around it, and beside the `tesseract` command; a clean page is within the goal."""
    from benchmarks import skew_sweep

    lines = ["Invoice number 4711 for the month of March, paid in full",
             "The quick brown fox jumps over the lazy dog again and again",
             "Please keep this letter with your other papers for next year"] * 3
    folder = one_page_corpus(tmp_path, lines, size=36)
    out = tmp_path / "sweep.txt"
    skew_sweep.main(["--corpus", str(folder), "--degrees", "4", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    row = next(line for line in report.splitlines() if line.startswith("| page.png |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "4"
    assert abs(float(cells[3]) + 4) <= 0.3  # the straightening measured: 4 degrees back
    upright, ours = float(cells[2]), float(cells[4])
    assert upright < 0.05 and skew_sweep.within(ours, upright), row
    exact = [float(c) for c in cells[5:10]]
    assert all(0 <= cer < 0.1 for cer in exact), row
    assert 0 <= float(cells[11]) <= 1 and float(cells[12]) > 0  # plain CER, seconds
    assert "ocrwatch misses the goal on 0 of 1" in report
    capsys.readouterr()


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Tesseract's OSD data")
def test_preparer_threads_benchmark_on_one_page(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The page fed four ways, prepared on 1 and 2 threads, in them and in processes,
    with orientation on and off: every page prepared in each row, the figures printed."""
    from benchmarks import prep_threads

    lines = ["Invoice number 4711 for the month of March, paid in full",
             "The quick brown fox jumps over the lazy dog again and again"] * 3
    folder = one_page_corpus(tmp_path, lines, size=36)
    out = tmp_path / "threads.txt"
    prep_threads.main(["--corpus", str(folder), "--threads", "1", "2", "--out", str(out)])
    rows = [line for line in out.read_text(encoding="utf-8").splitlines()
            if re.match(r"^\| (on|off) \|", line)]
    assert [tuple(c.strip() for c in row.strip("|").split("|")[:4]) for row in rows] == [
        (rotate, way, threads, "4") for rotate in ("on", "off") for threads in ("1", "2")
        for way in ("threads", "processes")]
    for row in rows:
        rate = float(row.strip("|").split("|")[5])
        assert rate > 0, row
    capsys.readouterr()


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs the tesseract command")
def test_mark_lines_benchmark_on_one_page(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A page with pencil strokes under its text: the strokes' lines are left out and
    named, not found in the ground truth, and the reading beats every line's."""
    from benchmarks import mark_lines

    folder = tmp_path / "corpus"
    folder.mkdir()
    image, _ = scribbled(seed=2)
    image.save(folder / "minutes.png", dpi=(200, 200))
    (folder / "minutes.gt.txt").write_text("\n".join(MINUTES) + "\n", encoding="utf-8")
    out = tmp_path / "marks.txt"
    mark_lines.main(["--corpus", str(folder), "--variants", "as scanned", "--out", str(out)])
    report = out.read_text(encoding="utf-8")
    rows = [line for line in report.splitlines() if line.startswith("| minutes.png |")]
    assert [r.split("|")[2].strip() for r in rows] == ["as scanned"]
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    ours, every, plain = (float(c) for c in cells[2:5])
    assert ours < 0.01 < every and 0 <= plain <= 1, rows[0]
    assert cells[5].count("`") >= 4, rows[0]  # two lines left out, each in backquotes
    assert "of them of 4 characters or more found in the ground truth as read\n" in report + "\n"
    capsys.readouterr()


def test_the_daemon_benchmarks_scraper_records_the_engines_fill(tmp_path: Path) -> None:
    """benchmarks/_drop.py's Scraper over real HTTP on 127.0.0.1: each scrape's vLLM
    requests running and waiting, with its time, reach the report's fill line, and the
    first scrape at 90% of the engine alone's places is named."""
    import http.server
    import threading

    from benchmarks._drop import Scraper
    from benchmarks.gpu_daemon import fill_lines

    running = iter([2, 9, 31, 34] + [34] * 1000)

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = ("# TYPE ocrwatch_vllm_requests_running gauge\n"
                    f"ocrwatch_vllm_requests_running {next(running)}\n"
                    "# TYPE ocrwatch_vllm_requests_waiting gauge\n"
                    "ocrwatch_vllm_requests_waiting 1\n").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        scraper = Scraper(f"http://127.0.0.1:{server.server_address[1]}/metrics", every=0.05)
        with scraper:
            wait_for(lambda: scraper.scrapes >= 4, 10, "four scrapes")
    finally:
        server.shutdown()
        server.server_close()
        serving.join(5)
    summary = scraper.summary()
    assert [row[1:] for row in summary["fill"][:4]] == [(2, 1), (9, 1), (31, 1), (34, 1)]
    times = [row[0] for row in summary["fill"]]
    assert times == sorted(times) and times[0] > 0
    lines = fill_lines(summary["fill"], {"most_in_flight": 38, "max_num_seqs": 34})
    assert "2+1" in lines[0] and "9+1" in lines[0]
    assert lines[1] == f"  31 places or more first taken {times[2]:g} s after the drop"
