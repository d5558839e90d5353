"""Timing: one function, or several in interleaved rounds with paired per-round ratios."""
from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable, Mapping, Sequence

import torch


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_function(fn: Callable[[], Any], warmup: int = 1, repeat: int = 5,
                  device: torch.device | str | None = None,
                  max_seconds: float | None = None) -> dict[str, float]:
    """Wall-clock time of ``fn()``: ``warmup`` untimed calls, then up to ``repeat`` timed ones.

    Args:
        fn (callable): the work to time, called with no argument.
        warmup (int, optional): untimed calls first. (default: :obj:`1`)
        repeat (int, optional): timed calls. (default: :obj:`5`)
        device (torch.device, optional): a CUDA device is synchronised around each call.
            (default: :obj:`None`)
        max_seconds (float, optional): stop repeating once this much time was spent in
            timed calls (at least one call is always timed). (default: :obj:`None`)

    Returns:
        dict: ``median_s``, ``min_s``, ``mean_s``, ``std_s`` and ``repeats``.
    """
    if repeat < 1:
        raise ValueError(f"time_function: 'repeat' must be >= 1 (got {repeat})")
    for _ in range(warmup):
        fn()
    _sync(device)
    times: list[float] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
        if max_seconds is not None and sum(times) > max_seconds:
            break
    return _stats(times)


def _stats(times: Sequence[float]) -> dict[str, float]:
    """Median, min, mean, population std and count of a list of seconds."""
    return {"median_s": statistics.median(times), "min_s": min(times),
            "mean_s": statistics.fmean(times),
            "std_s": statistics.pstdev(times) if len(times) > 1 else 0.0, "repeats": len(times)}


def time_interleaved(fns: Mapping[str, Callable[[], Any]], warmup: int = 1, repeat: int = 5,
                     device: torch.device | str | None = None, max_seconds: float | None = None,
                     shuffle_seed: int | None = None) -> dict[str, dict[str, Any]]:
    """Wall-clock times of several functions called in rounds, each round calling each once:
    load on a shared machine changes over seconds, so one timed after the other could meet a
    busy period alone; :func:`round_ratios` compares them round by round. ``shuffle_seed``
    shuffles each round's order so that no function always runs first or last (after the
    others' caches, allocations or thermal state); else the order is that of ``fns``.

    Args:
        fns (dict): name -> the work to time, called with no argument.
        warmup (int, optional): untimed rounds first. (default: :obj:`1`)
        repeat (int, optional): timed rounds. (default: :obj:`5`)
        device (torch.device, optional): as in :func:`time_function`. (default: :obj:`None`)
        max_seconds (float, optional): stop after the round in which the timed calls reach
            this much time in total (at least one round is timed). (default: :obj:`None`)
        shuffle_seed (int, optional): seed of the shuffles (the warm-up rounds keep the
            given order). (default: :obj:`None`)

    Returns:
        dict: name -> :func:`time_function`'s keys, and per round ``times`` (wall clock),
        ``cpu_times`` (this process's CPU seconds, all threads: less sensitive to other jobs
        taking the cores) and ``positions`` (the place in the round's order, from 0).
    """
    if repeat < 1:
        raise ValueError(f"time_interleaved: 'repeat' must be >= 1 (got {repeat})")
    if not fns:
        raise ValueError("time_interleaved: 'fns' must hold at least one function")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    _sync(device)
    times, cpu, positions = ({name: [] for name in fns} for _ in range(3))
    rng = random.Random(shuffle_seed) if shuffle_seed is not None else None
    total = 0.0
    for _ in range(repeat):
        order = list(fns)
        if rng is not None:
            rng.shuffle(order)
        for place, name in enumerate(order):
            fn = fns[name]
            positions[name].append(place)
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            _sync(device)
            dt = time.perf_counter() - t0
            times[name].append(dt)
            cpu[name].append(time.process_time() - c0)
            total += dt
        if max_seconds is not None and total > max_seconds:
            break
    return {name: {**_stats(ts), "times": ts, "cpu_times": cpu[name],
                   "positions": positions[name]} for name, ts in times.items()}


def round_ratios(timed: Mapping[str, Mapping[str, Any]], num: str, den: str,
                 key: str = "times") -> list[float]:
    """Every round's ratio ``time(num) / time(den)``, in round order (the values to save
    beside a summarised ratio).

    Args:
        timed (dict): name -> ``{key: per-round seconds}``, as :func:`time_interleaved` gives.
        num (str): the numerator's name (e.g. the baseline, for a speed-up).
        den (str): the denominator's name.
        key (str): ``'times'`` (wall clock) or ``'cpu_times'``. (default: ``'times'``)
    """
    a, b = list(timed[num][key]), list(timed[den][key])
    if len(a) != len(b) or not a:
        raise ValueError(f"round_ratios: {num!r} and {den!r} must have the same non-zero number "
                         f"of rounds, got {len(a)} and {len(b)}")
    return [x / y for x, y in zip(a, b)]


def ratio_summary(ratios: Sequence[float]) -> dict[str, Any]:
    r"""Summary of per-round ``ratios`` (e.g. :func:`round_ratios`): ``median`` (the true
    median, :func:`statistics.median`: for an even count the mean of the two middle values),
    ``min``, ``max``, ``rounds`` (the count) and ``ratios`` (a list, in the given order).

    Examples:
        >>> ratio_summary([1.0, 4.0, 2.0, 3.0])["median"]
        2.5
    """
    values = [float(r) for r in ratios]
    if not values:
        raise ValueError("ratio_summary: 'ratios' must hold at least one ratio")
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "rounds": len(values), "ratios": values}


def paired_ratio(timed: Mapping[str, Mapping[str, Any]], num: str, den: str) -> float:
    """The median of :func:`round_ratios` (:func:`ratio_summary`)."""
    return ratio_summary(round_ratios(timed, num, den))["median"]
