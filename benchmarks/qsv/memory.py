r"""How much memory does one forward + backward of :class:`~quest_geometric.nn.QSVConv` take
at up to ~1M points, beside torch-harmonics' ``NeighborhoodAttentionS2`` and PyG's
``TransformerConv``?

On torch-harmonics' equiangular grids (180 x 360 = 64,800, 360 x 720 = 259,200 and
720 x 1440 = 1,036,800 points), 64 channels, one head, each layer runs one forward +
backward (input requiring its gradient, loss ``out.square().mean()``) **in its own child
process** (``multiprocessing`` spawn), so that no layer's peak mixes with another's.
QSVConv (dense fused path) and TransformerConv run on the exact kNN graph of the grid points
with :math:`k` = torch-harmonics' mean neighbourhood (its own cutoff), self loops included:
the rule of :mod:`~benchmarks.qsv.vs_torch_harmonics`.  The graph is built
once per grid in a child process of its own and handed to the layers' children in a
temporary file.

In each child, after the layer, its inputs and the graph are built, the heap is trimmed
(``malloc_trim``) and the resident set size read (``VmRSS`` of ``/proc/self/status``, the
*baseline*); the peak-RSS mark is reset to it (``echo 5 > /proc/self/clear_refs``) and the
address space capped (``RLIMIT_AS``, soft limit; 12 GiB by default) before the call, so a
layer that does not fit fails inside its child with a :class:`MemoryError` or
:class:`RuntimeError` instead of waking the kernel's OOM killer; after the call the limit is
lifted and ``VmHWM`` read: the *peak*.  ``delta`` = peak - baseline is what the forward +
backward itself adds; the peak includes the Python and torch runtime (about 0.4 GiB), the
inputs and the graph.  The parent also watches the machine's ``MemAvailable`` and stops a
child that would drive it below a floor, and lowers the cap of a child when less than the
cap (plus a reserve) is available at its start (each row says the cap it ran under).

Run ``python -m benchmarks.qsv.memory`` (``--quick`` for the 45 x 90 and 90 x 180 grids).
"""
from __future__ import annotations

import argparse
import gc
import math
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from quest_geometric._utils.checks import check_choice, check_int, check_real, fail
from quest_geometric.profile import libc, write_results

__all__ = ["GRIDS", "QUICK_GRIDS", "LAYERS", "CHANNELS", "TARGET_GB", "CAP_GB",
           "neighbourhood_size", "forward_flops", "lower_bound_gb", "layer_parameters",
           "measure_layer", "memory_rows", "run", "main"]

#: The grids (nlat, nlon) of the full run: 64,800, 259,200 and 1,036,800 points.
GRIDS = ((180, 360), (360, 720), (720, 1440))
#: The grids of ``--quick``: 4,050 and 16,200 points.
QUICK_GRIDS = ((45, 90), (90, 180))
#: The layers measured, in table order.
LAYERS = ("QSVConv", "NeighborhoodAttentionS2", "TransformerConv")
#: Channels (one head).
CHANNELS = 64
#: The issue's memory target: a forward + backward at 1M points fits in 8 GiB.
TARGET_GB = 8.0
#: Default cap on each child's address space, GiB.
CAP_GB = 12.0
#: GiB of ``MemAvailable`` left to the rest of the machine when a child's cap is lowered.
RESERVE_GB = 1.0
#: The parent stops a child when ``MemAvailable`` falls below this many GiB.
FLOOR_GB = 0.5

_GIB = 2 ** 30
_MIB = 2 ** 20


def neighbourhood_size(nlat: int, nlon: int, layer: Optional[torch.nn.Module] = None
                       ) -> dict[str, Any]:
    """torch-harmonics' neighbourhood on an equiangular ``nlat x nlon`` grid (its default
    cutoff, one latitude spacing) and the kNN size of the comparison.

    ``NeighborhoodAttentionS2`` stores the neighbourhoods of one meridian (one row per output
    latitude; the other longitudes follow by shifts), so its neighbourhood entries over the
    whole grid are ``psi_col_idx.numel() * nlon`` and its mean neighbourhood
    ``psi_col_idx.numel() / nlat``.

    Args:
        nlat (int): latitudes of the grid.
        nlon (int): longitudes of the grid.
        layer (torch.nn.Module, optional): a ``NeighborhoodAttentionS2`` already built on that
            grid, read instead of building one. (default: :obj:`None`)

    Returns:
        dict: ``k`` (the mean neighbourhood rounded, at least 1: the rule of
        :mod:`~benchmarks.qsv.vs_torch_harmonics`), ``mean_nbr`` and
        ``th_edges`` (torch-harmonics' neighbourhood entries over the grid).
    """
    nlat = check_int(nlat, "nlat", 2, where="neighbourhood_size")
    nlon = check_int(nlon, "nlon", 1, where="neighbourhood_size")
    th = layer
    if th is None:
        from torch_harmonics import NeighborhoodAttentionS2

        th = NeighborhoodAttentionS2(CHANNELS, (nlat, nlon), (nlat, nlon), num_heads=1)
    entries = th.psi_col_idx.numel()
    mean_nbr = entries / (th.psi_roff_idx.numel() - 1)
    return {"k": max(1, round(mean_nbr)), "mean_nbr": mean_nbr, "th_edges": entries * nlon}


def forward_flops(layer: str, nodes: int, edges: int, channels: int = CHANNELS) -> int:
    r"""Floating-point operations of one forward call of ``layer`` with one head (a
    multiply-add counts 2), by formula: the dense maps and the per-edge work, without the
    softmax's exponentials, normalisations, biases and index operations.

    * ``'QSVConv'`` and ``'TransformerConv'``:
      :func:`benchmarks.qsv.layer_speed.forward_flops` with one head,
      :math:`8 N C + 9 N C + 8 E + 2 E C` and :math:`8 N C^2 + 4 E C`;
    * ``'NeighborhoodAttentionS2'``: four :math:`C \to C` maps (query, key, value and the
      output projection, :math:`8 N C^2`), and per neighbourhood entry the query-key dot
      product and the weighted sum of the values (:math:`2 E C + 2 E C`), with :math:`E` its
      own neighbourhood entries (:func:`neighbourhood_size`'s ``th_edges``); the quadrature
      weight of each entry (:math:`E` products) is left out like the softmax.

    Args:
        layer (str): one of :data:`LAYERS`.
        nodes (int): :math:`N`.
        edges (int): :math:`E`.
        channels (int): :math:`C`. (default: ``64``)

    Returns:
        int: the forward FLOPs.
    """
    from benchmarks.qsv.layer_speed import forward_flops as speed_flops

    check_choice(layer, "'layer'", LAYERS, where="forward_flops")
    N = check_int(nodes, "nodes", 0, where="forward_flops")
    E = check_int(edges, "edges", 0, where="forward_flops")
    C = check_int(channels, "channels", 1, where="forward_flops")
    if layer == "NeighborhoodAttentionS2":
        return 8 * N * C * C + 4 * E * C
    return speed_flops(layer, N, E, C, heads=1)


def lower_bound_gb(layer: str, nodes: int, edges: int, channels: int = CHANNELS) -> float:
    r"""A lower bound (GiB, float32) of the memory one forward + backward of ``layer`` holds
    at its peak, used to skip a layer that clearly cannot fit under the cap.

    * ``'TransformerConv'``: the input (:math:`N C`) and, alive together in its message
      function, the gathered queries, keys and values saved for the backward and the
      messages (four :math:`[E, C]` tensors): :math:`4 (N C + 4 E C)` bytes;
    * ``'QSVConv'`` and ``'NeighborhoodAttentionS2'``: the input, the output and the input's
      gradient, alive together at the end of the backward: :math:`4 \cdot 3 N C` bytes.

    Args:
        layer (str): one of :data:`LAYERS`.
        nodes (int): :math:`N`.
        edges (int): :math:`E` (the kNN edges for TransformerConv).
        channels (int): :math:`C`. (default: ``64``)

    Returns:
        float: GiB.
    """
    check_choice(layer, "'layer'", LAYERS, where="lower_bound_gb")
    N = check_int(nodes, "nodes", 0, where="lower_bound_gb")
    E = check_int(edges, "edges", 0, where="lower_bound_gb")
    C = check_int(channels, "channels", 1, where="lower_bound_gb")
    floats = N * C + 4 * E * C if layer == "TransformerConv" else 3 * N * C
    return 4 * floats / _GIB


def _build_layer(layer: str, nlat: int, nlon: int, channels: int) -> torch.nn.Module:
    if layer == "QSVConv":
        from quest_geometric.nn.qsv_conv import QSVConv

        return QSVConv(channels, channels, heads=1)
    if layer == "TransformerConv":
        from torch_geometric.nn import TransformerConv

        return TransformerConv(channels, channels, heads=1)
    from torch_harmonics import NeighborhoodAttentionS2

    return NeighborhoodAttentionS2(channels, (nlat, nlon), (nlat, nlon), num_heads=1)


def layer_parameters(layer: str, nlat: int, nlon: int, channels: int = CHANNELS) -> int:
    """Learnable parameters of ``layer`` as measured (one head, ``channels`` wide; the grid
    only matters to torch-harmonics, whose parameter count does not depend on it)."""
    check_choice(layer, "'layer'", LAYERS, where="layer_parameters")
    return sum(p.numel() for p in _build_layer(layer, nlat, nlon, channels).parameters())


def _status_kib() -> dict[str, int]:
    """The ``Vm*`` lines of ``/proc/self/status`` in KiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Vm"):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return out


def _reset_peak() -> bool:
    """Reset this process's peak RSS (``VmHWM``) to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _meminfo_gb(key: str, default: float) -> float:
    """Line ``key`` (``'MemAvailable'``, ``'MemTotal'``) of ``/proc/meminfo`` in GiB
    (``default`` where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024 / _GIB
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        pass
    return default


def _available_gb() -> float:
    """``MemAvailable`` in GiB (``inf`` where there is none)."""
    return _meminfo_gb("MemAvailable", math.inf)


def _build_graph(task: dict) -> dict:  # runs in a child, capped as a whole
    from benchmarks.qsv.harmonics import equiangular_graph

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = int(task["cap_gb"] * _GIB)
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY
                                            else min(cap, hard), hard))
    try:
        edge_index = equiangular_graph(task["nlat"], task["nlon"], task["k"])
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    torch.save(edge_index, task["graph_path"])
    return {"edges": edge_index.size(1)}


def _measure(task: dict) -> dict:  # runs in a child, capped around the call
    layer_name, nlat, nlon, channels = task["layer"], task["nlat"], task["nlon"], task["channels"]
    torch.manual_seed(0)
    layer = _build_layer(layer_name, nlat, nlon, channels)
    if layer_name == "NeighborhoodAttentionS2":
        x = torch.randn(1, channels, nlat, nlon, requires_grad=True)
        args: tuple = (x,)
        kwargs: dict = {}
    else:
        edge_index = torch.load(task["graph_path"])
        x = torch.randn(nlat * nlon, channels, requires_grad=True)
        args = (x, edge_index)
        kwargs = {"dense": True} if layer_name == "QSVConv" else {}
    gc.collect()
    lib = libc()
    if lib is not None:
        lib.malloc_trim(0)
    before = _status_kib()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = int(task["cap_gb"] * _GIB)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    error = None
    out = None
    reset = _reset_peak()
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        out = layer(*args, **kwargs)
        out.square().mean().backward()
    except (MemoryError, RuntimeError) as e:
        error = e
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    after = _status_kib()
    del out
    return {"baseline_mb": before["VmRSS"] / 1024, "peak_mb": after["VmHWM"] / 1024,
            "vm_before_mb": before["VmSize"] / 1024, "peak_reset": reset,
            "error": None if error is None else type(error).__name__,
            "message": None if error is None else _first_line(error)}


def _first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, or its ``repr`` when the message is empty (a
    bare :class:`MemoryError` raised by an allocation has none)."""
    return (str(error).splitlines() or [repr(error)])[0][:300]


def _child(task: dict, conn) -> None:  # pragma: no cover - runs in a spawned process
    try:
        torch.set_num_threads(task["threads"])
        result = _build_graph(task) if task["kind"] == "graph" else _measure(task)
        conn.send(result)
    except BaseException as e:  # report, never hang the parent
        conn.send({"crash": f"{type(e).__name__}: {str(e)[:300]}"})
    finally:
        conn.close()


def _in_child(task: dict, cap_gb: float, timeout_s: float, floor_gb: float) -> dict:
    """Run ``task`` in a spawned child with an address-space cap of ``cap_gb`` (lowered
    to what the machine has available less :data:`RESERVE_GB`), watching ``MemAvailable``.

    Returns the child's dict plus ``cap_gb`` (the cap it ran under), or a dict with
    ``stopped`` (the parent stopped it: low memory or the time limit) or ``crash`` (it
    raised something else, or died: its exit code)."""
    cap = min(cap_gb, _available_gb() - RESERVE_GB)
    if cap <= 0:
        return {"stopped": f"not started: {_available_gb():.1f} GiB available", "cap_gb": cap_gb}
    task = {**task, "cap_gb": cap}
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(task, send), daemon=True)
    proc.start()
    send.close()
    result: Optional[dict] = None
    stopped = None
    start = time.monotonic()
    try:
        while result is None and stopped is None:
            if recv.poll(0.2):
                try:
                    result = recv.recv()
                except EOFError:
                    break
            elif not proc.is_alive():
                if not recv.poll(0):
                    break
            elif _available_gb() < floor_gb:
                stopped = f"stopped: MemAvailable fell below {floor_gb:g} GiB"
            elif time.monotonic() - start > timeout_s:
                stopped = f"stopped: over the {timeout_s:g} s limit"
    finally:
        if proc.is_alive() and (stopped is not None or result is None):
            proc.kill()
        proc.join()
        recv.close()
    if stopped is not None:
        return {"stopped": stopped, "cap_gb": round(cap, 2)}
    if result is None:
        return {"crash": f"child process died (exit code {proc.exitcode})",
                "cap_gb": round(cap, 2)}
    return {**result, "cap_gb": round(cap, 2)}


def measure_layer(layer: str, nlat: int, nlon: int, graph_path: Optional[str] = None,
                  cap_gb: float = CAP_GB, channels: int = CHANNELS, threads: int = 1,
                  timeout_s: float = 3600.0, floor_gb: float = FLOOR_GB) -> dict[str, Any]:
    """Peak memory of one forward + backward of ``layer`` on the ``nlat x nlon`` grid, in a
    spawned child process capped at ``cap_gb`` (see the module's description).

    Args:
        layer (str): one of :data:`LAYERS`.
        nlat (int): latitudes of the grid.
        nlon (int): longitudes of the grid.
        graph_path (str, optional): an ``edge_index`` of the grid's points in the dense
            layout, saved with :func:`torch.save` (needed by QSVConv and TransformerConv).
            (default: :obj:`None`)
        cap_gb (float): the child's address-space cap, GiB. (default: :data:`CAP_GB`)
        channels (int): :math:`C`. (default: ``64``)
        threads (int): torch threads in the child. (default: ``1``)
        timeout_s (float): the parent stops the child after this long (a guard, not a
            measurement). (default: ``3600``)
        floor_gb (float): the parent stops the child when the machine's ``MemAvailable``
            falls below this. (default: :data:`FLOOR_GB`)

    Returns:
        dict: ``status`` (``'ok'``; ``'does not fit under the cap (<error class>: <its first
        line>; <peak> MiB resident when it failed)'``; or why no measurement came back),
        ``baseline_mb``, ``peak_mb``, ``delta_mb`` (MiB; NaN unless ``'ok'``), ``cap_gb``
        (the cap the child ran under), ``peak_reset`` (whether the peak mark was reset at
        the baseline; if not, the peak is the whole child's), ``reached_mb`` (the peak
        reached before a failure under the cap) and ``message``
        (the error's first line).
    """
    check_choice(layer, "'layer'", LAYERS, where="measure_layer")
    nlat = check_int(nlat, "nlat", 2, where="measure_layer")
    nlon = check_int(nlon, "nlon", 1, where="measure_layer")
    cap_gb = check_real(cap_gb, "cap_gb", True, where="measure_layer")
    if layer != "NeighborhoodAttentionS2" and graph_path is None:
        raise fail(ValueError, "measure_layer", "graph_path", f"the saved graph for {layer}",
                   graph_path)
    task = {"kind": "layer", "layer": layer, "nlat": nlat, "nlon": nlon, "channels": channels,
            "graph_path": None if graph_path is None else str(graph_path),
            "threads": check_int(threads, "threads", 1, where="measure_layer")}
    res = _in_child(task, cap_gb, timeout_s, floor_gb)
    nan = math.nan
    out = {"cap_gb": res["cap_gb"], "baseline_mb": nan, "peak_mb": nan, "delta_mb": nan,
           "reached_mb": nan, "peak_reset": res.get("peak_reset"), "message": res.get("message")}
    if "stopped" in res or "crash" in res:
        out["status"] = res.get("stopped") or res["crash"]
    elif res["error"] is not None:
        out.update(status=f"does not fit under the cap ({res['error']}: {res['message']}; "
                          f"{res['peak_mb']:.0f} MiB resident when it failed)",
                   reached_mb=res["peak_mb"])
    else:
        out.update(status="ok", baseline_mb=res["baseline_mb"], peak_mb=res["peak_mb"],
                   delta_mb=res["peak_mb"] - res["baseline_mb"])
    return out


def _fits(result: dict, target_mb: float) -> Optional[bool]:
    """Whether a measured peak is within the target: :obj:`None` when unknown (a failure
    below the target, or no measurement)."""
    if result["status"] == "ok":
        return bool(result["peak_mb"] <= target_mb)
    if result["reached_mb"] > target_mb:  # NaN compares False
        return False
    return None


def memory_rows(grids: Sequence[tuple[int, int]] = GRIDS, layers: Sequence[str] = LAYERS,
                cap_gb: float = CAP_GB, channels: int = CHANNELS, threads: int = 1,
                timeout_s: float = 3600.0, progress: bool = True,
                tmp_dir: Optional[str] = None) -> list[dict]:
    """One row per grid and layer (see the module's description): ``points``, ``grid``,
    ``k``, ``edges`` (the kNN edges; torch-harmonics' own neighbourhood entries on its
    row), ``layer``, ``params``, ``fwd_flops`` (:func:`forward_flops`), ``cap_gb``,
    ``baseline_mb``, ``peak_mb``, ``delta_mb``, ``fits_8gb`` (``peak_mb`` within
    :data:`TARGET_GB`; :obj:`None` when not known) and ``status``.

    A layer whose :func:`lower_bound_gb` exceeds the cap is skipped (``status`` says the
    bound); the kNN graph of each grid is built in a capped child of its own and saved in a
    temporary file under ``tmp_dir`` (a fresh temporary folder by default), deleted when
    the grid is done.
    """
    for layer in layers:
        check_choice(layer, "'layers'", LAYERS, where="memory_rows")
    cap_gb = check_real(cap_gb, "cap_gb", True, where="memory_rows")
    target_mb = TARGET_GB * 1024
    own_dir = tmp_dir is None
    folder = tempfile.mkdtemp(prefix="qsv_memory_") if own_dir else str(tmp_dir)
    rows = []
    try:
        for nlat, nlon in grids:
            n = nlat * nlon
            nbr = neighbourhood_size(nlat, nlon)
            k = nbr["k"]
            graph_path = os.path.join(folder, f"qsv_memory_graph_{nlat}x{nlon}_k{k}.pt")
            graph = None
            try:
                for layer in layers:
                    edges = nbr["th_edges"] if layer == "NeighborhoodAttentionS2" else n * k
                    row = {"points": n, "grid": f"{nlat}x{nlon}", "k": k, "edges": edges,
                           "layer": layer, "params": layer_parameters(layer, nlat, nlon, channels),
                           "fwd_flops": forward_flops(layer, n, edges, channels),
                           "mean_nbr_th": round(nbr["mean_nbr"], 2), "cap_gb": cap_gb}
                    bound = lower_bound_gb(layer, n, edges, channels)
                    if bound > cap_gb:
                        row.update(baseline_mb=math.nan, peak_mb=math.nan, delta_mb=math.nan,
                                   fits_8gb=False if bound > TARGET_GB else None,
                                   status=f"skipped: estimated >= {bound:.1f} GiB "
                                          f"(lower bound) > cap {cap_gb:g} GiB")
                        rows.append(row)
                        if progress:
                            print(f"[memory] {n} pts, {layer}: {row['status']}", flush=True)
                        continue
                    if layer != "NeighborhoodAttentionS2" and graph is None:
                        graph = _in_child({"kind": "graph", "nlat": nlat, "nlon": nlon, "k": k,
                                           "graph_path": graph_path, "threads": threads},
                                          cap_gb, timeout_s, FLOOR_GB)
                    if layer != "NeighborhoodAttentionS2" and "edges" not in graph:
                        why = graph.get("stopped") or graph.get("crash")
                        row.update(baseline_mb=math.nan, peak_mb=math.nan, delta_mb=math.nan,
                                   fits_8gb=None, status=f"no graph: {why}")
                        rows.append(row)
                        continue
                    res = measure_layer(layer, nlat, nlon, graph_path, cap_gb, channels,
                                        threads, timeout_s)
                    row.update(cap_gb=res["cap_gb"], baseline_mb=res["baseline_mb"],
                               peak_mb=res["peak_mb"], delta_mb=res["delta_mb"],
                               fits_8gb=_fits(res, target_mb), status=res["status"],
                               reached_mb=res["reached_mb"], peak_reset=res["peak_reset"],
                               message=res["message"])
                    rows.append(row)
                    if progress:
                        print(f"[memory] {n} pts, {layer}: {res['status']}, peak "
                              f"{res['peak_mb']:.0f} MiB, delta {res['delta_mb']:.0f} MiB",
                              flush=True)
            finally:
                if os.path.exists(graph_path):
                    os.remove(graph_path)
    finally:
        if own_dir:
            os.rmdir(folder)
    return rows


COLUMNS = ["points", "grid", "k", "edges", "layer", "params", "fwd_flops", "cap_gb",
           "baseline_mb", "peak_mb", "delta_mb", "fits_8gb", "status"]

#: The markdown table shows the FLOPs in GFLOP (the CSV and JSON keep the count).
DISPLAY = {"fwd_flops": ("fwd_gflop", lambda v: f"{v / 1e9:.3g}")}


def _notes(cap_gb: float) -> str:
    return (
        "Peak resident memory (RSS, MiB) of one forward + backward (input requiring its "
        "gradient, loss out.square().mean(), float32, 64 channels, one head, one thread), "
        "each layer in its own spawned child process on CPU. `baseline_mb`: the child's RSS "
        "after building the layer, its input and the graph (heap trimmed), before the call; "
        "`peak_mb`: VmHWM after the call, its mark reset to the baseline just before "
        "(/proc/self/clear_refs), so it holds the Python and torch runtime (~0.4 GiB), the "
        "inputs and the graph; `delta_mb` = peak - baseline: what the forward + backward "
        "adds. `fits_8gb`: peak_mb <= 8 GiB (the issue's target; None when not known: no peak "
        "measured and none above 8 GiB reached before a failure). "
        f"Each child's address space was capped (RLIMIT_AS, {cap_gb:g} GiB unless `cap_gb` "
        "says lower) so that a layer that does not fit fails inside it; a layer whose lower "
        "bound (its [E, C] tensors alive together, TransformerConv) exceeds the cap is "
        "skipped. QSVConv (dense fused path) and TransformerConv run on the exact kNN graph of "
        "the grid points with k = torch-harmonics' mean neighbourhood rounded (its own "
        "cutoff, as in qsv_vs_torch_harmonics), self loops included; `edges` on the "
        "NeighborhoodAttentionS2 rows counts its own neighbourhood entries, and its baseline "
        "holds its precomputed neighbourhoods instead of the kNN graph. QSVConv's first call "
        "also builds the graph structure it caches (counted in its delta). `fwd_gflop`: "
        "forward FLOPs by formula / 1e9 (forward_flops; the CSV's fwd_flops holds the "
        "count). Memory, unlike time, does not depend on the other jobs of the machine.")


def run(quick: bool = False, out_dir: str | Path = "benchmarks/qsv/results",
        cap_gb: float = CAP_GB, grids: Optional[Sequence[tuple[int, int]]] = None,
        layers: Sequence[str] = LAYERS, progress: bool = True,
        name: str = "qsv_memory") -> dict[str, Any]:
    """Measure every layer on every grid and write ``<name>[_quick].{csv,json,md}``.

    Args:
        quick (bool): :data:`QUICK_GRIDS` instead of :data:`GRIDS`. (default: :obj:`False`)
        out_dir (str): result folder. (default: ``'benchmarks/qsv/results'``)
        cap_gb (float): each child's address-space cap, GiB. (default: :data:`CAP_GB`)
        grids (list of (int, int), optional): other grids. (default: :obj:`None`)
        layers (list of str): the layers. (default: :data:`LAYERS`)
        progress (bool): print each row. (default: :obj:`True`)
        name (str): file stem. (default: ``'qsv_memory'``)

    Returns:
        dict: ``rows``, ``paths`` (the written files; empty when skipped), ``skipped`` (a
        message when torch-harmonics is missing, else :obj:`None`) and ``markdown``.
    """
    from benchmarks.qsv.harmonics import MISSING_HARMONICS, harmonics_version

    cap_gb = check_real(cap_gb, "cap_gb", True, where="run")
    version = harmonics_version()
    if version is None:  # the grid and k come from torch-harmonics
        print(MISSING_HARMONICS)
        return {"rows": [], "paths": {}, "skipped": MISSING_HARMONICS, "markdown": ""}
    grids = tuple(grids) if grids is not None else (QUICK_GRIDS if quick else GRIDS)
    rows = memory_rows(grids, layers, cap_gb, progress=progress)
    stem = f"{name}_quick" if quick else name
    paths = write_results(
        stem, rows, out_dir,
        meta={"torch_harmonics": version, "grids": [list(g) for g in grids],
              "channels": CHANNELS, "heads": 1, "dtype": "float32", "threads_in_child": 1,
              "cap_gb": cap_gb, "target_gb": TARGET_GB, "quick": quick, "seed": 0,
              "memory_total_gb": round(_meminfo_gb("MemTotal", math.nan), 1),
              "method": "spawned child per layer, VmHWM - VmRSS after clear_refs, RLIMIT_AS"},
        columns=COLUMNS, title="Memory of one forward + backward: QSVConv, torch-harmonics "
                               "NeighborhoodAttentionS2 and TransformerConv",
        notes=_notes(cap_gb), display=DISPLAY)
    markdown = paths["md"].read_text()
    return {"rows": rows, "paths": paths, "skipped": None, "markdown": markdown}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Command-line entry of ``python -m benchmarks.qsv.memory``."""
    if not sys.platform.startswith("linux"):
        raise SystemExit("qsv_memory: reads /proc/self/status; Linux only")
    parser = argparse.ArgumentParser(
        description="Peak memory of one forward + backward: QSVConv, torch-harmonics "
                    "NeighborhoodAttentionS2 and TransformerConv, up to ~1M points")
    parser.add_argument("--quick", action="store_true",
                        help="the 45x90 and 90x180 grids only (smoke test)")
    parser.add_argument("--cap-gb", type=float, default=CAP_GB,
                        help="address-space cap of each child process, GiB (default 12)")
    parser.add_argument("--grids", nargs="+", default=None, metavar="NLATxNLON",
                        help="other grids, e.g. 180x360 360x720")
    parser.add_argument("--layers", nargs="+", default=list(LAYERS), choices=LAYERS)
    parser.add_argument("--name", default="qsv_memory", help="result file stem")
    parser.add_argument("--out", default="benchmarks/qsv/results")
    args = parser.parse_args(argv)
    grids = None
    if args.grids:
        grids = [tuple(int(v) for v in g.lower().split("x")) for g in args.grids]
    result = run(quick=args.quick, out_dir=args.out, cap_gb=args.cap_gb, grids=grids,
                 layers=args.layers, name=args.name)
    print(result["markdown"])
    return result


if __name__ == "__main__":
    main()
