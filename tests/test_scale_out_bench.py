"""benchmarks/scale_out.py --quick: the daemon's own balancing, the daemon behind the real
vllm-router and a plain client through it, over two fake servers, and each daemon with
one server killed mid-drop (on this machine the figures mean little; what is checked is
that they are printed and that no page is lost)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_router import ROUTER

ROOT = Path(__file__).resolve().parent.parent


def running_under(folder: Path) -> list[str]:
    """Command lines of live processes that name ``folder`` or write their output there
    (the servers and daemons name it; the router's output goes to its log there)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            output = str((proc / "fd" / "1").readlink())
        except OSError:
            continue
        if str(folder) in line or output.startswith(str(folder)):
            found.append(line)
    return found


@pytest.mark.skipif(ROUTER is None, reason="vllm-router is not installed (it comes with "
                                           "'.[dev]')")
def test_the_quick_run_prints_every_figure_and_loses_no_page(tmp_path: Path) -> None:
    out, work = tmp_path / "scale_out.txt", tmp_path / "work"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale_out.py"), "--quick",
         "--out", str(out), "--work", str(work)],
        capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    report = out.read_text()
    assert report in done.stdout + "\n"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in report.splitlines()
            if line.startswith("| (")]
    # Three ways at two levels in flight, then the two daemons with a server killed.
    assert [r[0].split(":")[0] for r in rows] == ["(a) own", "(b) router", "(c) plain"] * 2 \
        + ["(a) own", "(b) router"]
    for row in rows[:6]:  # 8 cards and a 4-page PDF, each page answered once
        assert float(row[2]) > 0, row
        assert row[4].split()[0] == "0" and row[5] == "0" and row[6] == "12", row
        assert re.fullmatch(r"\d+% / \d+%", row[7]), row
    for row in rows[6:]:
        assert float(row[1]) > 0 and row[2:5] == ["0", "0", "12"], row
        assert int(row[6].split()[0]) >= 4, row  # killed once a third was answered
    assert re.search(r"^4 in flight: \(a\) own / \(b\) router \d+\.\d{3}; \(a\) own / \(c\) "
                     r"plain \d+\.\d{3}; \(b\) router / \(c\) plain \d+\.\d{3}", report,
                     re.MULTILINE)
    assert re.search(r"# router: +vllm-router --policy power_of_two", report)
    assert running_under(work) == []  # servers, router and daemons all ended
