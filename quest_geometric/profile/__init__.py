"""Timing, peak-memory measurement and result writing shared by every benchmark."""
from __future__ import annotations

import csv
import datetime
import json
import math
import multiprocessing as mp
import os
import platform
import random
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from quest_geometric._utils.io import atomic_write_text


#: The keys of :func:`environment_info` that identify the machine instance: never added to
#: the metadata of an earlier run that a rewrite carries over (it ran elsewhere).
MACHINE_KEYS = ("cpu_model", "boot_id")


def cpu_model() -> str | None:
    """The CPU's ``model name`` in ``/proc/cpuinfo`` (:obj:`None` where there is none): two
    virtual machines of one name can run on different hosts, so timings say which."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return None


def boot_id() -> str | None:
    """The kernel's random id of this boot (``/proc/sys/kernel/random/boot_id``; :obj:`None`
    where there is none): tables with different ids were timed on different machine
    instances, whose speeds can differ with the same code."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:  # pragma: no cover - not Linux
        return None


def environment_info() -> dict[str, Any]:
    """Describe the machine and software a result was measured on.

    Returns:
        dict: date (UTC), platform, processor, CPU model, boot id (:func:`cpu_model`,
        :func:`boot_id`), CPU count, Python, torch, torch-geometric,
        scipy versions, whether torch-cluster / torch-scatter are usable, the CUDA device
        name if any, and the number of torch intra-op threads.
    """
    import scipy
    import torch_geometric

    from quest_geometric import __version__
    from quest_geometric.typing import WITH_TORCH_CLUSTER, WITH_TORCH_SCATTER

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "boot_id": boot_id(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "scipy": scipy.__version__,
        "quest_geometric": __version__,
        "torch_cluster": WITH_TORCH_CLUSTER,
        "torch_scatter": WITH_TORCH_SCATTER,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages of ``/proc/loadavg`` (``'n/a'`` where there is
    none), written beside timings so a reader can tell a busy machine from an idle one."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # pragma: no cover - not Linux
        return "n/a"


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_function(
    fn: Callable[[], Any],
    warmup: int = 1,
    repeat: int = 5,
    device: torch.device | str | None = None,
    max_seconds: float | None = None,
) -> dict[str, float]:
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
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "mean_s": statistics.fmean(times),
        "std_s": statistics.pstdev(times) if len(times) > 1 else 0.0,
        "repeats": len(times),
    }


def time_interleaved(
    fns: Mapping[str, Callable[[], Any]],
    warmup: int = 1,
    repeat: int = 5,
    device: torch.device | str | None = None,
    max_seconds: float | None = None,
    shuffle_seed: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Wall-clock times of several functions called in turn (round-robin), so that all of
    them meet the same background load; ratios are then taken per round.

    On a machine shared with other work, load changes over seconds; timing one function
    after the other lets a busy period fall on one of them only. Here round :math:`r` calls
    every function once, and :func:`paired_ratio` / :func:`round_ratios` compare them round
    by round. With ``shuffle_seed`` the order within each round is a fresh shuffle from
    :class:`random.Random` seeded with it (reproducible), so that no function always runs
    first (after the others' caches, allocations or thermal state) or last; without it the
    order is that of ``fns`` in every round.

    Args:
        fns (dict): name -> the work to time, called with no argument.
        warmup (int, optional): untimed rounds first. (default: :obj:`1`)
        repeat (int, optional): timed rounds. (default: :obj:`5`)
        device (torch.device, optional): a CUDA device is synchronised around each call.
            (default: :obj:`None`)
        max_seconds (float, optional): stop after the round in which the timed calls reach
            this much time in total (at least one round is always timed). (default: :obj:`None`)
        shuffle_seed (int, optional): shuffle the order of the calls in every timed round
            with this seed (the warm-up rounds keep the given order). (default: :obj:`None`)

    Returns:
        dict: name -> ``median_s``, ``min_s``, ``mean_s``, ``std_s``, ``repeats``,
        ``times`` (wall-clock seconds of each round), ``cpu_times`` (this process's CPU
        seconds, all threads, of each round: less sensitive to other jobs taking the cores)
        and ``positions`` (the function's place in each round's order, from 0).
    """
    if repeat < 1:
        raise ValueError(f"time_interleaved: 'repeat' must be >= 1 (got {repeat})")
    if not fns:
        raise ValueError("time_interleaved: 'fns' must hold at least one function")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    _sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    positions: dict[str, list[int]] = {name: [] for name in fns}
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
                   "positions": positions[name]}
            for name, ts in times.items()}


def round_ratios(timed: Mapping[str, Mapping[str, Any]], num: str, den: str,
                 key: str = "times") -> list[float]:
    """Every round's ratio ``time(num) / time(den)`` from :func:`time_interleaved` (or any
    mapping name -> ``{key: per-round seconds}``), in round order: the values to save beside
    a summarised ratio.

    Args:
        timed (dict): name -> per-round timings.
        num (str): the numerator's name (e.g. the baseline, for a speed-up).
        den (str): the denominator's name.
        key (str): ``'times'`` (wall clock) or ``'cpu_times'``. (default: ``'times'``)

    Returns:
        list of float: one ratio per round.
    """
    a, b = list(timed[num][key]), list(timed[den][key])
    if len(a) != len(b) or not a:
        raise ValueError(f"round_ratios: {num!r} and {den!r} must have the same non-zero number "
                         f"of rounds, got {len(a)} and {len(b)}")
    return [x / y for x, y in zip(a, b)]


def ratio_summary(ratios: Sequence[float]) -> dict[str, Any]:
    r"""Summary of per-round ratios: the true median (for an even count the mean of the two
    middle values, :func:`statistics.median`, not the upper one), the range, the count and
    every ratio.

    Args:
        ratios (sequence of float): one ratio per round (e.g. :func:`round_ratios`).

    Returns:
        dict: ``median``, ``min``, ``max``, ``rounds`` (the count) and ``ratios`` (a list,
        in the given order).

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
    """True median over rounds of ``time(num) / time(den)`` from :func:`time_interleaved`
    (:func:`ratio_summary` of :func:`round_ratios`)."""
    return ratio_summary(round_ratios(timed, num, den))["median"]


def _libc():
    """glibc's ``libc.so.6`` through :mod:`ctypes`, or :obj:`None` elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        lib = ctypes.CDLL("libc.so.6")
        lib.mallopt  # noqa: B018 - glibc only
        lib.malloc_trim  # noqa: B018
        return lib
    except (OSError, AttributeError):
        return None


def reuse_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse instead of returning it to the OS.

    glibc serves every allocation of 32 MiB or more (a ``[32768, 256]`` float32 tensor) with
    a fresh ``mmap`` and unmaps it on free, so each such tensor page-faults all its pages
    again on every call, which at long sequences can cost more than the routing itself
    (measured in the docs' benchmarks page). This raises the mmap and trim thresholds
    (``mallopt(M_MMAP_THRESHOLD, 1 GiB)``, ``mallopt(M_TRIM_THRESHOLD, 2 GiB)``) for the
    whole process, which is what the jemalloc/TCMalloc allocators recommended by PyTorch's
    CPU performance tuning guide do by design. It affects every method measured in the
    process alike; :func:`peak_memory_mb` trims the heap before it measures. The first few
    calls that allocate a given size can still fault: until freed chunks next to each other
    have merged into one that fits the aligned request, glibc extends the heap (up to 8 calls
    of a 64 MiB tensor in 40 runs, measured); time after a warm-up.

    Returns:
        bool: whether the setting was applied (glibc on Linux).
    """
    lib = _libc()
    if lib is None:
        return False
    return bool(lib.mallopt(-3, 1 << 30)) and bool(lib.mallopt(-1, (1 << 31) - 1))


def _rss_child(fn: Callable[[], Any], conn) -> None:  # pragma: no cover - runs in a fork
    try:
        # The parent's OpenMP thread pool does not survive fork: a parallel region in the
        # child would wait forever for threads that do not exist.  One thread is safe and
        # does not change what is allocated.
        torch.set_num_threads(1)
        with open("/proc/self/statm") as f:
            before_pages = int(f.read().split()[1])
        before = before_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
        fn()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
        conn.send(max(peak - before, 0.0))
    except BaseException as e:  # report, never hang the parent
        conn.send(e)
    finally:
        conn.close()


def peak_memory_mb(fn: Callable[[], Any], device: torch.device | str | None = None,
                   timeout_s: float = 900.0) -> float:
    """Peak memory in MiB that one call of ``fn()`` adds.

    On CUDA this is :func:`torch.cuda.max_memory_allocated` above the memory allocated before
    the call.  On CPU PyTorch keeps no allocator statistics, so the call runs in a *forked*
    process and the result is the peak resident set size (``ru_maxrss``) minus the resident
    size just before the call: the real high-water mark of the process, allocator caching
    included.  Inputs built before the call are shared with the fork and not counted.

    A forked child cannot run everything its parent can: a :func:`torch.compile` d function
    whose compiler workers live in the parent waits in the child for ever.  The parent waits
    at most ``timeout_s`` for the child's answer, then kills it and raises
    :class:`TimeoutError`.

    Args:
        fn (callable): the work to measure.
        device (torch.device, optional): where ``fn`` runs. (default: :obj:`None`, CPU)
        timeout_s (float, optional): the longest wait for the forked child (CPU only).
            (default: ``900``)

    Returns:
        float: MiB.

    Raises:
        TimeoutError: if the child gave no answer within ``timeout_s``.
    """
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    if not sys.platform.startswith("linux"):
        return math.nan
    lib = _libc()
    if lib is not None:  # give back memory kept by reuse_freed_memory() before measuring
        lib.malloc_trim(0)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_rss_child, args=(fn, child))
    proc.start()
    child.close()
    if not parent.poll(timeout_s):
        proc.kill()
        proc.join()
        raise TimeoutError(f"peak_memory_mb: the forked child measuring {fn!r} gave no answer "
                           f"within {timeout_s:g} s (a torch.compile'd function cannot run in "
                           "a fork of the process that compiled it); measure it another way")
    result = parent.recv()
    proc.join()
    if isinstance(result, BaseException):
        raise result
    return float(result)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:.4g}"
    return str(value)


# how the markdown table shows a data column: its heading and stored value -> cell text
_Display = Mapping[str, tuple[str, Callable[[Any], str]]]


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
                   display: _Display | None = None) -> str:
    """Render ``rows`` (dicts) as a GitHub markdown table with the given column order.

    Args:
        rows (list of dict): one dict per table row.
        columns (list of str, optional): column order. (default: keys of the first row)
        display (dict, optional): ``column -> (heading, format)`` for columns shown otherwise
            than stored, e.g. ``{"rel": ("vs full (%)", lambda v: f"{100 * v:+.2f}")}`` for a
            fraction shown as a signed percentage; an empty or missing value stays empty.
            (default: :obj:`None`, every column under its own name)
    """
    if not rows:
        return "_(no rows)_\n"
    columns = list(columns or rows[0].keys())
    display = dict(display or {})

    def cell(row: Mapping[str, Any], c: str) -> str:
        value = row.get(c, "")
        if c in display and value not in ("", None):
            return display[c][1](value)
        return _fmt(value)

    heads = [display[c][0] if c in display else c for c in columns]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(cell(row, c) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_results(
    name: str,
    rows: Sequence[Mapping[str, Any]],
    out_dir: str | os.PathLike = "benchmarks/results",
    meta: Mapping[str, Any] | None = None,
    columns: Sequence[str] | None = None,
    title: str | None = None,
    notes: str | None = None,
    display: _Display | None = None,
) -> dict[str, Path]:
    """Write ``rows`` as ``<name>.csv``, ``<name>.json`` and ``<name>.md`` under ``out_dir``.

    The JSON file holds ``{"meta": ..., "rows": ...}``; the markdown file holds a title, the
    table, optional notes, and the metadata (machine, versions, seeds, date) as a list, so a
    quoted table always travels with the conditions it was measured under.  Each file is
    written to a temporary file and renamed, so a killed run never leaves a half-written one.

    Args:
        name (str): file stem.
        rows (list of dict): one dict per table row.
        out_dir (str, optional): output folder. (default: :obj:`"benchmarks/results"`)
        meta (dict, optional): run conditions; :func:`environment_info` is added (where
            ``meta`` carries an earlier run's environment, a rewrite of its table, without
            this machine's :data:`MACHINE_KEYS`).
            (default: :obj:`None`)
        columns (list of str, optional): column order. (default: keys of the first row)
        title (str, optional): markdown heading. (default: :obj:`name`)
        notes (str, optional): markdown paragraph under the table. (default: :obj:`None`)
        display (dict, optional): columns the markdown table shows otherwise than stored
            (see :func:`markdown_table`); the CSV and JSON files keep the stored values and
            names. (default: :obj:`None`)

    Returns:
        dict: the written paths under keys ``csv``, ``json``, ``md``.
    """
    out = Path(out_dir)
    meta = dict(meta or {})
    env = environment_info()
    if "platform" in meta:  # an earlier run's conditions, carried over by a rewrite: the
        # machine it ran on is not this one, so this machine's identity is not added
        env = {k: v for k, v in env.items() if k not in MACHINE_KEYS}
    full_meta = {**env, **meta}
    columns = list(columns or (rows[0].keys() if rows else []))
    paths = {k: out / f"{name}.{k}" for k in ("csv", "json", "md")}

    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row.get(c, "") for c in columns})
    atomic_write_text(paths["csv"], buf.getvalue())
    atomic_write_text(
        paths["json"], json.dumps({"meta": full_meta, "rows": list(rows)}, indent=2, default=str)
    )
    md = [f"### {title or name}\n", markdown_table(rows, columns, display)]
    if notes:
        md.append("\n" + notes.strip() + "\n")
    md.append("\n" + "\n".join(f"- {k}: {v}" for k, v in full_meta.items()) + "\n")
    atomic_write_text(paths["md"], "\n".join(md))
    return paths
