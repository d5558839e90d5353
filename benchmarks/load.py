r"""A wait for a quiet machine before a benchmark times something: a timing taken while other
work competes for the cores is not the machine's speed."""
from __future__ import annotations

import time
from typing import Callable, Optional

from quest_geometric._utils.cpu_load import load_average

__all__ = ["CONTENTION_MARGIN", "wait_for_load"]

#: The load (1-minute average) above the available cores from which a measurement counts as
#: taken on a contended machine: more runnable threads than cores, by this margin.
CONTENTION_MARGIN = 0.5


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
