"""The cores this process may really use, and a thread's lower CPU priority.

A GPU engine's page preparers are sized from these (``engines.base.gpu_preparers``): the
cores the process may run on (``taskset``, a container's CPU set), a cgroup's CPU quota,
and less the cores other programs keep busy right now (a desktop's user is working). The
preparers then run at a lower priority than the rest of the daemon, the engine's worker
and the user's programs (:func:`lower_thread_priority`): when the cores are contended,
the processes that feed the GPU and the user's own work go first, and preparing takes
what is left instead of a fixed share.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time

log = logging.getLogger(__name__)

CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"
BUSY_SAMPLE_S = 0.2  # how long busy_elsewhere() watches the cores


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, within a cgroup's CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def _cgroup_quota() -> float | None:
    """The cgroup's CPU quota in cores, or None where there is none (or no cgroup v2)."""
    try:
        with open(CGROUP_CPU_MAX, encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def busy_elsewhere(sample: float = BUSY_SAMPLE_S) -> float:
    """Cores that other programs keep busy now, among those this process may use: the
    busy time of those cores over ``sample`` seconds, less this process's own, in cores.
    0.0 where it cannot be told (no psutil, no per-core figures)."""
    try:
        import psutil

        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        me = psutil.Process()

        def busy() -> float:
            times = psutil.cpu_times(percpu=True)
            mine = [times[i] for i in cpus if i < len(times)] if cpus else times
            return sum(t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0)
                       + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0) for t in mine)

        def own() -> float:
            t = me.cpu_times()
            return float(t.user + t.system)

        b0, o0, w0 = busy(), own(), time.monotonic()
        time.sleep(sample)
        b1, o1, w1 = busy(), own(), time.monotonic()
    except Exception as exc:  # psutil missing or /proc unreadable: count no one else
        log.debug("could not tell how busy the cores are: %s", exc)
        return 0.0
    return max(0.0, ((b1 - b0) - (o1 - o0)) / max(w1 - w0, 1e-3))


def lower_thread_priority(nice: int) -> bool:
    """Lower the calling thread's CPU priority by ``nice`` steps (Linux: a thread has a
    nice value of its own). Whether it was lowered; elsewhere nothing is done, since
    there ``setpriority`` would lower the whole process."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as exc:
        log.debug("could not lower the priority of %s: %s", threading.current_thread().name, exc)
        return False
    return True
