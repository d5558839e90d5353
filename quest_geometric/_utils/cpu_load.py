r"""How busy the CPU is: the cores this process may use, the load average, a thread count
chosen from the free cores, and a wait for the load to fall before something is timed (a
timing taken while other work competes for the cores is not the machine's speed).
"""
from __future__ import annotations

import math
import os
import time
from typing import Callable, Mapping, Optional

__all__ = ["available_cores", "load_average", "wait_for_load", "choose_threads"]

#: The load (1-minute average) above the available cores from which a measurement counts as
#: taken on a contended machine: more runnable threads than cores, by this margin.
CONTENTION_MARGIN = 0.5


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, else :func:`os.cpu_count`)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def load_average(path: str = "/proc/loadavg") -> Optional[float]:
    """The 1-minute load average (all processes), or :obj:`None` where there is none."""
    try:
        with open(path, encoding="ascii") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        try:
            return float(os.getloadavg()[0])
        except (AttributeError, OSError):
            return None


def wait_for_load(threads: int, limit_s: float = 300.0, poll_s: float = 5.0,
                  load: Optional[Callable[[], Optional[float]]] = None,
                  sleep: Callable[[float], None] = time.sleep) -> Optional[float]:
    """Wait until the 1-minute load is at most ``threads`` plus :data:`CONTENTION_MARGIN`,
    polling every ``poll_s`` seconds for at most ``limit_s``; returns the last load read
    (:obj:`None` where the system gives none).

    A benchmark that builds its models and warms them up loads the machine itself, and the
    1-minute average takes minutes to forget that: timed at once, its first rounds read that
    load and count as measured under load, even on an idle machine. A machine that stays
    loaded past ``limit_s`` is timed anyway, and its rounds carry the load they were
    measured under.

    Args:
        threads (int): the threads the timed work will use.
        limit_s (float): the longest wait in seconds (default: :obj:`300.0`).
        poll_s (float): seconds between two reads (default: :obj:`5.0`).
        load (callable, optional): reads the load (default: :func:`load_average`).
        sleep (callable): waits a number of seconds (default: :func:`time.sleep`).
    """
    read = load_average if load is None else load
    waited, value = 0.0, read()
    while value is not None and value > threads + CONTENTION_MARGIN and waited < limit_s:
        sleep(poll_s)
        waited += poll_s
        value = read()
    return value


def choose_threads(cores: Optional[int] = None, load: Optional[float] = None,
                   env: Optional[Mapping[str, str]] = None) -> tuple[int, str]:
    r"""A torch thread count for work about to start, and why, as one sentence:
    ``OMP_NUM_THREADS`` if set (the user's choice), else the free cores
    :math:`\mathrm{round}(c - \ell)` for :math:`c` available cores and 1-minute load average
    :math:`\ell` (the other work's, since this work has not started), within :math:`[1, c]`.

    Args:
        cores (int, optional): available cores. (default: :func:`available_cores`)
        load (float, optional): 1-minute load average. (default: :func:`load_average`)
        env (Mapping, optional): the environment. (default: :obj:`os.environ`)
    """
    env = os.environ if env is None else env
    cores = available_cores() if cores is None else cores
    try:
        n = int(env.get("OMP_NUM_THREADS", "").strip())
    except ValueError:  # unset, empty or not a number: ignored
        n = 0
    if n >= 1:
        return n, f"OMP_NUM_THREADS={n} is set in the environment (kept)"
    load = load_average() if load is None else load
    if load is None:
        return cores, f"{cores} core(s) available; no load average on this platform"
    free = cores - load
    n = max(1, min(cores, math.floor(free + 0.5)))
    return n, (f"{cores} core(s) available to this process, 1-minute load average "
               f"{load:.2f} before starting, so about {max(free, 0.0):.1f} free")
