"""The daemon on a 16 GB card it shares with another program, and from stopped to read.

    python3 benchmarks/gpu_shared.py MODEL_DIR [--out FILE] [--json FILE]

MODEL_DIR is a LightOnOCR-2-1B-shaped folder (random weights, 500 tokens a page with
``ignore_eos``). One real daemon (``ocrwatch run``, ``engine = "vllm"``,
``vllm.card_gb = 16``, ``idle_stop_seconds`` 10, the standby on); the other program is a
torch process holding GPU memory (benchmarks/gpu_hold.py). In one run:

1. **11 GiB held.** Eight A4 pages are dropped; ``ocrwatch status --json`` is asked until
   the engine waits for the card, and then for 25 s more: the reason it shows, and that
   no file failed. The other program exits; the time from its exit to the last sidecar
   (goal: 30 s).
2. **3 GiB held.** After the idle stop, the other program holds 3 GiB and the 64-page drop
   of benchmarks/gpu_daemon.py is dropped: pages/s, and the whole card's peak (ocrwatch
   and the other program; goal under 16 GiB).
3. **From stopped to read.** After the idle stop, and once the standby process has
   imported vLLM: what ocrwatch holds on the card (goal 0 MiB), the standby's RAM, then
   one A4 page dropped and timed to its sidecar (goal 10 s).

The card's memory (every process) is read through NVML every 0.1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._drop import (  # noqa: E402
    daemon_env,
    done_pages,
    failures,
    make_drop,
    query,
    text_page,
    toml_list,
    vllm_lines,
)
from benchmarks.gpu_engine import Sampler, emit, gpu_facts, used_mib  # noqa: E402

GIB = 1024.0
IDLE_STOP_S = 10.0
BUSY_GIB, SHARED_GIB = 11.0, 3.0


class Holder:
    """The other program: benchmarks/gpu_hold.py holding GIB until released."""

    def __init__(self, gib: float) -> None:
        self.gib = gib
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks/gpu_hold.py"),
                                      str(gib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("held"):
            self.release()
            raise SystemExit(f"could not hold {gib} GiB on the GPU: {line!r}")
        from ocrwatch.engines import gpu

        self.held_mib = gpu.processes_mib([self.proc.pid])

    def release(self) -> float:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        return time.monotonic()


class Daemon:
    """`ocrwatch run` with the vLLM engine, its folders under ``work``."""

    def __init__(self, model: str, work: Path, tokens: int) -> None:
        self.work = work
        home = work / "home"
        self.inbox, self.staging = work / "inbox", work / "staging"
        for d in (home, self.inbox, self.staging, work / "run"):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(work / "run", 0o700)
        self.database = work / "index.sqlite3"
        self.config = work / "config.toml"
        self.config.write_text("\n".join([
            f"inbox = {toml_list([str(self.inbox)])}",
            f"database = {json.dumps(str(self.database))}",
            "settle_seconds = 1.0",
            "rescan_minutes = 60.0",
            *vllm_lines(model, tokens),
            "idle_sleep_seconds = 0.0",
            f"idle_stop_seconds = {IDLE_STOP_S}",
            "card_gb = 16.0",
            "standby = true",
        ]) + "\n")
        self.env = daemon_env(home, work)
        self.log_path = work / "daemon.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "run", "--no-tray",
                                      "--config", str(self.config)], stdout=self._log,
                                     stderr=subprocess.STDOUT, env=self.env)

    def status(self) -> dict[str, Any]:
        out = subprocess.run([sys.executable, "-m", "ocrwatch", "status", "--json", "--config",
                              str(self.config)], capture_output=True, text=True, env=self.env,
                             timeout=60)
        try:
            parsed: dict[str, Any] = json.loads(out.stdout)
        except ValueError:
            return {}
        return parsed

    def status_text(self) -> str:
        return subprocess.run([sys.executable, "-m", "ocrwatch", "status", "--config",
                               str(self.config)], capture_output=True, text=True, env=self.env,
                              timeout=60).stdout

    def states(self) -> dict[str, int]:
        return dict(query(self.database, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))

    def alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise SystemExit(f"the daemon ended with status {self.proc.returncode}:\n{tail}")

    def wait(self, what: str, ok: Any, timeout: float, every: float = 0.1) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.alive()
            value = ok()
            if value:
                return value
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}; jobs {self.states()}")
            time.sleep(every)

    def log_count(self, mark: str) -> int:
        return self.log_path.read_text(errors="replace").count(mark)

    def drop(self, files: list[Path]) -> float:
        for f in files:
            shutil.copy(f, self.staging / f.name)
        t = time.monotonic()
        for f in files:
            os.rename(self.staging / f.name, self.inbox / f.name)
        return t

    def finished(self) -> int:
        s = self.states()
        return s.get("done", 0) + s.get("failed", 0)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


def a4_files(folder: Path, n: int, seed: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        path = folder / f"busy_{seed}_{i:02d}.jpg"
        text_page(2480, 3508, seed + i).save(path, quality=85, dpi=(300, 300))
        out.append(path)
    return out


def wait_standby(d: Daemon, before: int) -> None:
    """Until the daemon's log says a standby got ready after ``before`` such lines."""
    d.wait("the idle stop and the standby's imports",
           lambda: d.log_count("vLLM standby ready") > before, 180, every=0.5)


def run(model: str, work: Path, tokens: int, sampler: Sampler) -> dict[str, Any]:
    from ocrwatch.engines import gpu

    out: dict[str, Any] = {}
    files = make_drop(work / "drop")
    busy_files = a4_files(work / "busy", 8, 3000)
    last = a4_files(work / "last", 1, 4000)
    base = used_mib() or 0
    out["baseline_mib"] = base

    # 1. 11 GiB held: the files wait, with the reason in status; none fails.
    holder = Holder(BUSY_GIB)
    out["busy_holder_mib"] = holder.held_mib
    d = Daemon(model, work, tokens)
    try:
        d.drop(busy_files)
        status = d.wait("the engine waiting for the card",
                        lambda: (lambda s: s if s.get("engine", {}).get("state") == "waiting"
                                 else None)(d.status()), 120, every=1.0)
        out["busy_reason"] = status["engine"].get("waiting_reason")
        out["busy_status_text"] = [ln for ln in d.status_text().splitlines()
                                   if "waiting" in ln or "queue" in ln or "engine" in ln]
        held_until = time.monotonic() + 25
        worst_failed = 0
        while time.monotonic() < held_until:  # the game runs on; the files keep waiting
            d.alive()
            worst_failed = max(worst_failed, d.states().get("failed", 0))
            time.sleep(1.0)
        out["busy_failed_while_waiting"] = worst_failed
        out["busy_done_while_waiting"] = d.states().get("done", 0)
        out["busy_standby"] = d.status().get("engine", {}).get("standby")
        freed = holder.release()
        d.wait("the waiting files read", lambda: d.finished() >= len(busy_files), 180)
        out["busy_read_after_exit_s"] = round(time.monotonic() - freed, 1)
        out["busy_failed"] = d.states().get("failed", 0)
        out["busy_errors"] = failures(d.database)

        # 2. 3 GiB held: the 64-page drop; the whole card's peak.
        wait_standby(d, d.log_count("vLLM standby ready"))
        holder = Holder(SHARED_GIB)
        out["shared_holder_mib"] = holder.held_mib
        names = [work / "drop" / n for n in files]
        since = d.drop(names)
        n_before = len(busy_files)
        d.wait("the drop read", lambda: d.finished() >= n_before + len(files), 400)
        ended = max((d.inbox / n).with_suffix(".md").stat().st_mtime for n in files
                    if (d.inbox / n).with_suffix(".md").exists())
        seconds = ended - (time.time() - (time.monotonic() - since))
        pages = done_pages(d.database, files)
        out["shared"] = {"pages": pages, "seconds": round(seconds, 2),
                         "rate": round(pages / seconds, 3),
                         "card_peak_mib": sampler.peak(since),
                         "failed": d.states().get("failed", 0),
                         "plan": d.status().get("engine", {}).get("memory_plan")}
        holder.release()

        # 3. From stopped to read, with the standby ready.
        wait_standby(d, d.log_count("vLLM standby ready"))
        engine = d.status().get("engine", {})
        pids = [d.proc.pid]
        standby_pid = (engine.get("standby") or {}).get("pid")
        if standby_pid:  # the standby and anything in its session
            pids += [int(p) for p in subprocess.run(["pgrep", "-s", str(standby_pid)],
                                                     capture_output=True,
                                                     text=True).stdout.split()]
        out["stopped"] = {"state": engine.get("state"),
                          "ocrwatch_gpu_mib": gpu.processes_mib(pids),
                          "card_used_mib": used_mib(), "baseline_mib": base,
                          "standby": engine.get("standby")}
        t = d.drop(last)
        d.wait("the page after the idle stop", lambda: d.finished() >= n_before + len(files) + 1,
               120, every=0.05)
        out["stopped_to_read_s"] = round(time.monotonic() - t, 2)
        log = d.log_path.read_text(errors="replace")
        out["worker_starts"] = [ln.split("] ", 1)[-1][:200] for ln in log.splitlines()
                                if "Starting the vLLM worker" in ln or "worker ready in" in ln]
    finally:
        d.stop()
        shutil.copy(d.log_path, work / "daemon_shared.log")
    return out


def report(meta: dict[str, Any], r: dict[str, Any]) -> str:
    base = r["baseline_mib"]
    shared = r["shared"]
    stopped = r["stopped"]
    standby = stopped.get("standby") or {}
    lines = [
        "ocrwatch on a shared card (benchmarks/gpu_shared.py)",
        f"date: {meta['date']}  machine: {meta['gpu']}  vLLM {meta['vllm']}",
        "model: LightOnOCR-2-1B shape, random weights, bf16; 500 tokens a page (ignore_eos); "
        "the daemon plans for a 16 GB card (vllm.card_gb = 16); the other program is a torch "
        "process holding GPU memory (benchmarks/gpu_hold.py)",
        f"{base} MiB were in use on the card before the run",
        "",
        f"1. another program holding {BUSY_GIB:g} GiB ({r['busy_holder_mib']} MiB with its CUDA "
        "context), 8 A4 pages dropped:",
        f"   status said: {r['busy_reason']}",
        *[f"   `ocrwatch status`: {ln.strip()}" for ln in r["busy_status_text"]],
        f"   over 25 s of waiting: {r['busy_failed_while_waiting']} files failed, "
        f"{r['busy_done_while_waiting']} read; the standby meanwhile: {r['busy_standby']}",
        f"   the other program exited: the 8 files were read {r['busy_read_after_exit_s']} s "
        f"later (goal 30 s); failed {r['busy_failed']} {r['busy_errors']}",
        "",
        f"2. another program holding {SHARED_GIB:g} GiB ({r['shared_holder_mib']} MiB with its "
        "context), the 64-page drop:",
        f"   {shared['pages']} pages in {shared['seconds']} s, {shared['rate']:.2f} pages/s; "
        f"failed files {shared['failed']}",
        f"   the whole card (ocrwatch and the other program) peaked at "
        f"{(shared['card_peak_mib'] - base) / GIB:.2f} GiB (goal under 16 GiB)",
        f"   the plan: {shared['plan']}",
        "",
        "3. from stopped to read:",
        f"   after the idle stop ({IDLE_STOP_S:g} s): engine {stopped['state']}, ocrwatch's "
        f"processes held {stopped['ocrwatch_gpu_mib']} MiB on the card (card in use "
        f"{stopped['card_used_mib']} MiB, {base} MiB before the run)",
        f"   the standby process: {standby.get('rss_mb')} MiB of RAM (RSS), vLLM imported",
        f"   one A4 page dropped: its sidecar {r['stopped_to_read_s']} s later (goal 10 s; 1 s of "
        "it is the settle time)",
        "",
        "worker starts (the daemon's log):",
        *[f"   {ln}" for ln in r["worker_starts"]],
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="LightOnOCR-shaped model folder")
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ocrwatch-shared-bench"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    meta: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), **gpu_facts()}
    sampler = Sampler()
    try:
        result = run(args.model, args.work, args.tokens, sampler)
    finally:
        sampler.stop()
    emit(report(meta, result), args.out, args.json, {"meta": meta, "result": result})


if __name__ == "__main__":
    main()
