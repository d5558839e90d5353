r"""How busy the CPU is: the cores this process may use, the load average and a thread count
chosen from the free cores (the tour's choice)."""
from __future__ import annotations

import math
import os
from typing import Mapping, Optional

__all__ = ["available_cores", "load_average", "choose_threads"]

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
