"""Peak memory of a call, and glibc's handling of freed memory."""
from __future__ import annotations

import ctypes
import math
import multiprocessing as mp
import os
import resource
import sys
from typing import Any, Callable

import torch


def libc():
    """glibc's ``libc.so.6`` through :mod:`ctypes`, or :obj:`None` elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL("libc.so.6")
        lib.mallopt  # noqa: B018 - glibc only
        lib.malloc_trim  # noqa: B018
        return lib
    except (OSError, AttributeError):
        return None


def reuse_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (``mallopt(M_MMAP_THRESHOLD, 1 GiB)``,
    ``mallopt(M_TRIM_THRESHOLD, 2 GiB)``, for the whole process); return whether it was
    applied (glibc on Linux). glibc otherwise maps each allocation of 32 MiB or more afresh and
    unmaps it on free, so such a tensor page-faults all its pages again on every call; the
    first calls of a given size can still fault: time after a warm-up."""
    lib = libc()
    if lib is None:
        return False
    return bool(lib.mallopt(-3, 1 << 30)) and bool(lib.mallopt(-1, (1 << 31) - 1))


def _rss_child(fn: Callable[[], Any], conn) -> None:  # pragma: no cover - runs in a fork
    try:
        # The parent's OpenMP pool does not survive fork: a parallel region would wait for
        # ever for threads that do not exist. One thread allocates the same.
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

    On CUDA, :func:`torch.cuda.max_memory_allocated` above the memory allocated before. On
    CPU (no allocator statistics), the call runs in a *forked* process: its peak resident set
    size (``ru_maxrss``) minus the resident size before the call (inputs built before are
    shared, not counted); NaN off Linux.

    Args:
        fn (callable): the work to measure.
        device (torch.device, optional): where ``fn`` runs. (default: :obj:`None`, CPU)
        timeout_s (float, optional): the longest wait for the forked child. (default: ``900``)

    Raises:
        TimeoutError: if the child gave no answer within ``timeout_s`` (a
            :func:`torch.compile` d function whose compiler workers live in the parent waits
            in the child for ever).
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
    lib = libc()
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
