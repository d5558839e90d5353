r"""How fast is :class:`~quest_geometric.nn.QSVConv` on a GPU, against its floor and its peers?

The CUDA counterpart of :mod:`benchmarks.qsv.vs_torch_harmonics`: the same
points (torch-harmonics' equiangular grids of 16,200 and 64,800 points), channels (64), heads
(1) and neighbourhood (the exact kNN graph with :math:`k` = torch-harmonics' mean
neighbourhood at its default cutoff, :data:`K_BY_GRID`), on one CUDA device:

* QSVConv (dense path), PyG's ``TransformerConv`` and, where torch-harmonics imports,
  its ``NeighborhoodAttentionS2``, forward and forward + backward, eager and compiled, timed
  in shuffled interleaved rounds (the device synchronised around each call);
* the floors of the aggregation on the same device: one ``[E, C]`` gather, one sparse-dense
  product over fixed weights and that product's forward + backward (as on the CPU);
* the peak device memory of one forward + backward of each layer, and of QSVConv and
  TransformerConv at 1,036,800 points (the 720 x 1440 grid).

torch-harmonics publishes its own CUDA kernel's figures (H100, 64,800 points, C = 64, one
head: 0.55 ms forward, 1.11 ms backward); the PyPI wheel carries CPU kernels only, so a
``NeighborhoodAttentionS2`` timed here runs its PyTorch fallback and is labelled so.

Run ``python -m benchmarks.qsv.cuda`` on a machine with a GPU (``--quick``: 16,200 points,
eager, 5 rounds).
"""
from __future__ import annotations

import argparse
import math
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from quest_geometric.profile import (
    paired_ratio,
    peak_memory_mb,
    round_ratios,
    time_interleaved,
    write_results,
)

#: The grids (nlat, nlon) of the timing: 16,200 and 64,800 points, as on the CPU.
CUDA_GRIDS = ((90, 180), (180, 360))
#: The grid of the memory row: 1,036,800 points.
MEMORY_GRID = (720, 1440)
CHANNELS = 64
#: torch-harmonics' mean neighbourhood at its default cutoff, rounded (the kNN size of the
#: comparison, :func:`benchmarks.qsv.memory.neighbourhood_size`), so that
#: the graphs can be built where torch-harmonics is not installed; a test checks these
#: against torch-harmonics itself.
K_BY_GRID = {(90, 180): 20, (180, 360): 21, (720, 1440): 23}
#: torch-harmonics' published CUDA figures (its README, H100, 64,800 points, C = 64, one
#: head), quoted beside the table, never timed here.
HARMONICS_PUBLISHED_H100_MS = {"forward": 0.55, "backward": 1.11}
#: Floors: one gather, one sparse product, that product's forward + backward.
FLOORS = ("gather", "spmm", "spmm_fb")


def equiangular_points(nlat: int, nlon: int, colatitudes: torch.Tensor | None = None
                       ) -> torch.Tensor:
    r"""The points of torch-harmonics' ``'equiangular'`` grid on the unit sphere, row-major
    ``(lat, lon)`` (as its ``[B, C, nlat, nlon]`` tensors flatten): colatitudes
    :math:`\theta_i = \pi i / (n_{lat} - 1)` (poles included, the Clenshaw-Curtis nodes;
    torch-harmonics' ``precompute_latitudes`` gives them to within 1e-15) and longitudes
    :math:`\phi_j = 2 \pi j / n_{lon}`.

    Args:
        nlat (int): latitudes (at least 2).
        nlon (int): longitudes.
        colatitudes (torch.Tensor, optional): ``[nlat]`` colatitudes to use instead (the
            CPU comparison passes torch-harmonics' own). (default: :obj:`None`)

    Returns:
        torch.Tensor: ``[nlat * nlon, 3]`` float64.
    """
    if nlat < 2 or nlon < 1:
        raise ValueError(f"equiangular_points: 'nlat' must be >= 2 and 'nlon' >= 1 (got "
                         f"{nlat}, {nlon})")
    if colatitudes is None:
        colat = torch.arange(nlat, dtype=torch.float64) * (math.pi / (nlat - 1))
    elif colatitudes.shape != (nlat,):
        raise ValueError(f"equiangular_points: 'colatitudes' must have shape [{nlat}] (got "
                         f"{list(colatitudes.shape)})")
    else:
        colat = colatitudes.to(torch.float64)
    lon = torch.arange(nlon, dtype=torch.float64) * (2 * math.pi / nlon)
    theta, phi = torch.meshgrid(colat, lon, indexing="ij")
    pos = torch.stack([theta.sin() * phi.cos(), theta.sin() * phi.sin(), theta.cos()], -1)
    return pos.reshape(-1, 3)


def grid_graph(nlat: int, nlon: int, k: int, colatitudes: torch.Tensor | None = None
               ) -> torch.Tensor:
    """The exact kNN graph (``k`` in-edges per node, self included, sorted by target: the
    dense layout of QSVConv) of :func:`equiangular_points`, built on the CPU (SciPy)."""
    from quest_geometric.geometry.knn import knn_graph

    return knn_graph(equiangular_points(nlat, nlon, colatitudes), k, loop=True)


def floor_functions(edge_index: torch.Tensor, x: torch.Tensor
                    ) -> dict[str, Callable[[], Any]]:
    r"""The floors of QSVConv's aggregation on ``x``'s device, as functions to time, each from
    torch's own sparse kernels: ``'gather'``, one ``[E, C]`` gather of the neighbours'
    features; ``'spmm'``, one sparse-dense product :math:`Y = A X` over fixed weights (a
    single pass over the neighbours); ``'spmm_fb'``, the three products a forward + backward
    of it needs when the weights and the features require gradients: :math:`A X`, the
    sampled product :math:`\langle G_i, X_j \rangle` on :math:`A`'s pattern for the weights
    (:func:`torch.sparse.sampled_addmm`) and :math:`A^{\top} G` for the features. The CSR
    matrices (the transpose included) are built here, outside the timed calls; run the
    functions under :func:`torch.no_grad`.

    Args:
        edge_index (torch.Tensor): ``[2, N k]`` in the dense layout (``k`` in-edges per
            target, sorted by target).
        x (torch.Tensor): ``[N, C]`` features.
    """
    n, dev = x.size(0), x.device
    k = edge_index.size(1) // n
    crow = torch.arange(0, n * k + 1, k, device=dev)
    col = edge_index[0]
    w = torch.rand(edge_index.size(1), device=dev)
    g = torch.randn_like(x)
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
        a = torch.sparse_csr_tensor(crow, col, w, (n, n), check_invariants=False)
        a_t = a.t().to_sparse_csr()
        pattern = torch.sparse_csr_tensor(crow, col, torch.zeros_like(w), (n, n),
                                          check_invariants=False)

    def spmm_fb() -> None:
        a @ x
        torch.sparse.sampled_addmm(pattern, g, x.t(), beta=0.0)
        a_t @ g

    return {"gather": lambda: x.index_select(0, col), "spmm": lambda: a @ x,
            "spmm_fb": spmm_fb}


def _harmonics_layer(nlat: int, nlon: int):
    """torch-harmonics' ``NeighborhoodAttentionS2`` on the grid, or :obj:`None` (with the
    reason) where it does not import."""
    try:
        from torch_harmonics import NeighborhoodAttentionS2
    except Exception as err:  # an ABI mismatch raises ImportError or OSError
        return None, f"torch-harmonics not usable here: {type(err).__name__}: {err}"
    torch.manual_seed(0)
    return NeighborhoodAttentionS2(CHANNELS, (nlat, nlon), (nlat, nlon), num_heads=1), None


def cuda_rows(grids=CUDA_GRIDS, compiled: bool = True, repeat: int = 30,
              progress: bool = True, device: str = "cuda",
              k_by_grid: dict | None = None, max_seconds: float | None = None
              ) -> tuple[list[dict], list[str]]:
    """Time the layers and floors on ``device``; returns the rows and the notes (what was
    skipped and why).

    Args:
        grids (tuple): ``(nlat, nlon)`` grids. (default: :data:`CUDA_GRIDS`)
        compiled (bool): also time the :func:`torch.compile` d layers. (default: :obj:`True`)
        repeat (int): timed rounds. (default: ``30``)
        progress (bool): print each measurement. (default: :obj:`True`)
        device (str): where to run (the tests run it on the CPU). (default: ``'cuda'``)
        k_by_grid (dict, optional): in-edges per node of each grid.
            (default: :data:`K_BY_GRID`)
        max_seconds (float, optional): the time limit of one mode and pass's rounds
            (:func:`~quest_geometric.profile.time_interleaved`).
            (default: :obj:`None`)
    """
    k_by_grid = K_BY_GRID if k_by_grid is None else k_by_grid
    from torch_geometric.nn import TransformerConv

    from quest_geometric.nn.qsv_conv import QSVConv

    dev = torch.device(device)
    rows, notes = [], []
    for nlat, nlon in grids:
        n, k = nlat * nlon, k_by_grid[(nlat, nlon)]
        edge_index = grid_graph(nlat, nlon, k).to(dev)
        torch.manual_seed(0)
        layers: dict[str, torch.nn.Module] = {
            "QSVConv": QSVConv(CHANNELS, CHANNELS, heads=1).to(dev),
            "TransformerConv": TransformerConv(CHANNELS, CHANNELS, heads=1).to(dev)}
        th, why = _harmonics_layer(nlat, nlon)
        if th is None:
            if why not in notes:
                notes.append(why)
        else:
            layers["NeighborhoodAttentionS2"] = th.to(dev)
        x = torch.randn(n, CHANNELS, device=dev)
        x_grid = x.t().reshape(1, CHANNELS, nlat, nlon).contiguous()
        inputs = {"QSVConv": ((x, edge_index), {"dense": True}),
                  "TransformerConv": ((x, edge_index), {}),
                  "NeighborhoodAttentionS2": ((x_grid,), {})}
        with torch.no_grad():
            floors = time_interleaved(floor_functions(edge_index, x), warmup=2, repeat=repeat,
                                      device=dev, shuffle_seed=0)
        floor_ms = {f"{name}_ms": 1e3 * floors[name]["median_s"] for name in FLOORS}
        for mode in ["eager"] + (["compiled"] if compiled else []):
            run_layers = dict(layers)
            if mode == "compiled":
                torch._dynamo.reset()
                run_layers = {name: torch.compile(m) for name, m in layers.items()}
            for what in ("forward", "forward+backward"):
                fns = {}
                for name, layer in run_layers.items():
                    args, kw = inputs[name]
                    fns[name] = _step(layer, args, kw, what)
                timed = time_interleaved(fns, warmup=3 if mode == "compiled" else 2,
                                         repeat=repeat, device=dev, shuffle_seed=0,
                                         max_seconds=max_seconds)
                for name in fns:
                    mem = (peak_memory_mb(fns[name], device=dev)
                           if mode == "eager" and what == "forward+backward" else math.nan)
                    rows.append({
                        "points": n, "grid": f"{nlat}x{nlon}", "k": k, "mode": mode,
                        "pass": what, "layer": name + (" (PyTorch fallback)"
                                                       if name == "NeighborhoodAttentionS2"
                                                       else ""),
                        "ms": 1e3 * timed[name]["median_s"],
                        "std_ms": 1e3 * timed[name]["std_s"],
                        "rounds": timed[name]["repeats"],
                        "qsv_speedup": paired_ratio(timed, name, "QSVConv"),
                        "round_ratios": round_ratios(timed, name, "QSVConv"),
                        "peak_mib": mem, **floor_ms})
                if progress:
                    print(f"[qsv_cuda] {n} pts, {mode}, {what}: " + ", ".join(
                        f"{name} {1e3 * timed[name]['median_s']:.3f} ms" for name in fns),
                        flush=True)
    return rows, notes


def _step(layer: torch.nn.Module, args: tuple, kw: dict, what: str) -> Callable[[], None]:
    if what == "forward":
        def fn() -> None:
            with torch.no_grad():
                layer(*args, **kw)
        return fn
    leaf = args[0].detach().clone().requires_grad_(True)
    rest = args[1:]

    def fb() -> None:
        leaf.grad = None
        layer(leaf, *rest, **kw).square().mean().backward()
    return fb


def memory_rows(grid=MEMORY_GRID, device: str = "cuda") -> list[dict]:
    """Peak device memory of one forward + backward of QSVConv and TransformerConv at
    ``grid`` (1,036,800 points by default); a layer that runs out of memory gets ``nan``."""
    from torch_geometric.nn import TransformerConv

    from quest_geometric.nn.qsv_conv import QSVConv

    dev = torch.device(device)
    nlat, nlon = grid
    n, k = nlat * nlon, K_BY_GRID[grid]
    edge_index = grid_graph(nlat, nlon, k).to(dev)
    x = torch.randn(n, CHANNELS, device=dev)
    torch.manual_seed(0)
    out = []
    for name, layer, kw in (("QSVConv", QSVConv(CHANNELS, CHANNELS, heads=1), {"dense": True}),
                            ("TransformerConv", TransformerConv(CHANNELS, CHANNELS, heads=1),
                             {})):
        layer = layer.to(dev)
        fn = _step(layer, (x, edge_index), kw, "forward+backward")
        try:
            mib = peak_memory_mb(fn, device=dev)
        except torch.OutOfMemoryError:
            mib = math.nan
        out.append({"points": n, "grid": f"{nlat}x{nlon}", "k": k, "layer": name,
                    "peak_mib": mib, "fits_8_gib": bool(mib <= 8 * 1024)})
        del layer, fn
        torch.cuda.empty_cache()
    return out


def launch_profile(grids=CUDA_GRIDS, device: str = "cuda", calls: int = 5,
                   k_by_grid: dict | None = None) -> list[dict]:
    r"""What one eager QSVConv call does on ``device``: kernels launched, the time the
    device spends in them and the wall time, per call (the mean of ``calls`` profiled calls
    after two warm-up calls), for the forward, the forward + backward and the floor (one
    sparse product over fixed weights).

    ``device_busy`` = kernel time / wall time: a call whose device is idle most of its wall
    time (busy well below 1, many kernels of microseconds) is bound by launching kernels, not
    by their work, which is what compiling (fusing kernels) removes. On the CPU (the tests)
    there are no kernels: ``kernels`` is 0 and only the operator count and wall time mean
    something.

    Columns: ``points``, ``what``, ``aten_ops`` (operators dispatched per call, nested ones
    included), ``kernels``, ``kernel_ms``, ``wall_ms``, ``device_busy``.
    """
    import time

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from quest_geometric.nn.qsv_conv import QSVConv

    k_by_grid = K_BY_GRID if k_by_grid is None else k_by_grid
    dev = torch.device(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda"
                                           else [])

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    out = []
    for nlat, nlon in grids:
        n = nlat * nlon
        edge_index = grid_graph(nlat, nlon, k_by_grid[(nlat, nlon)]).to(dev)
        torch.manual_seed(0)
        layer = QSVConv(CHANNELS, CHANNELS, heads=1).to(dev)
        x = torch.randn(n, CHANNELS, device=dev)
        spmm = floor_functions(edge_index, x)["spmm"]

        def spmm_no_grad() -> None:
            with torch.no_grad():
                spmm()
        fns = {"forward": _step(layer, (x, edge_index), {"dense": True}, "forward"),
               "forward+backward": _step(layer, (x, edge_index), {"dense": True},
                                         "forward+backward"),
               "spmm (floor)": spmm_no_grad}
        for what, fn in fns.items():
            for _ in range(2):
                fn()
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            wall_ms = 1e3 * (time.perf_counter() - t0) / calls
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    fn()
                sync()
            events = prof.events()
            kernels = [e for e in events if e.device_type == DeviceType.CUDA]
            kernel_ms = sum(e.time_range.elapsed_us() for e in kernels) / 1e3 / calls
            aten = sum(1 for e in events
                       if e.device_type == DeviceType.CPU and e.name.startswith("aten::"))
            out.append({"points": n, "what": what, "aten_ops": aten / calls,
                        "kernels": len(kernels) / calls, "kernel_ms": kernel_ms,
                        "wall_ms": wall_ms, "device_busy": kernel_ms / wall_ms})
    return out


def targets(rows: list[dict]) -> list[dict]:
    """Per grid and mode: QSVConv's time, its distance from the floors (``fwd_vs_spmm`` =
    time(one sparse product) / time(forward), target >= 0.5; ``fb_vs_spmm`` the same for
    forward + backward, target >= 1/3) and its paired speed-up over TransformerConv."""
    by: dict[tuple, dict] = {}
    for r in rows:
        by.setdefault((r["points"], r["mode"]), {})[(r["pass"], r["layer"])] = r
    out = []
    for (points, mode), cell in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        q, qfb = cell.get(("forward", "QSVConv")), cell.get(("forward+backward", "QSVConv"))
        if q is None or qfb is None:
            continue
        tc = cell.get(("forward+backward", "TransformerConv"), {})
        out.append({"points": points, "mode": mode, "qsv_fwd_ms": q["ms"],
                    "qsv_fb_ms": qfb["ms"], "fwd_vs_spmm": q["spmm_ms"] / q["ms"],
                    "floor_target_met": q["spmm_ms"] / q["ms"] >= 0.5,
                    "fb_vs_spmm": qfb["spmm_fb_ms"] / qfb["ms"],
                    "fb_floor_target_met": qfb["spmm_fb_ms"] / qfb["ms"] >= 1 / 3,
                    "fb_vs_tconv": tc.get("qsv_speedup", math.nan)})
    return out


def run(quick: bool = False, out_dir: str | Path = "benchmarks/qsv/results", progress: bool = True,
        compiled: bool | None = None, memory: bool | None = None, machine: str | None = None,
        device: str = "cuda", name: str = "qsv_cuda", max_seconds: float = 10.0,
        profile: bool = False) -> dict[str, Any]:
    """Run the CUDA benchmark and write ``<name>[_quick]``, ``<name>_targets[_quick]``
    and (with ``memory``) ``<name>_memory``.

    Args:
        quick (bool): 16,200 points, eager, 5 rounds, no memory row. (default: :obj:`False`)
        out_dir (str): result folder. (default: ``'benchmarks/qsv/results'``)
        progress (bool): print each measurement. (default: :obj:`True`)
        compiled (bool, optional): also time compiled layers. (default: :obj:`not quick`)
        memory (bool, optional): the 1M-point memory rows. (default: :obj:`not quick`)
        machine (str, optional): what else ran on the machine, written beside the tables.
        device (str): the CUDA device. (default: ``'cuda'``)
        name (str): stem of the result files. (default: ``'qsv_cuda'``)
        max_seconds (float): stop the timed rounds of one mode and pass once the calls
            reach this many seconds in total (at least one round). (default: ``10``)
        profile (bool): only :func:`launch_profile`, written as ``<name>_profile``.
            (default: :obj:`False`)

    Raises:
        RuntimeError: without a CUDA device.
    """
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("qsv_cuda: needs a CUDA device (torch.cuda.is_available() is "
                           f"{torch.cuda.is_available()}, device={device!r}); the CPU "
                           "comparison is benchmarks/qsv/vs_torch_harmonics.py")
    out_dir = Path(out_dir)
    suffix = "_quick" if quick else ""
    compiled = (not quick) if compiled is None else compiled
    memory = (not quick) if memory is None else memory
    grids = CUDA_GRIDS[:1] if quick else CUDA_GRIDS
    note = machine or "not stated"
    meta = {"device_name": torch.cuda.get_device_name(device), "quick": quick, "seed": 0,
            "dtype": "float32", "machine_note": note}
    if profile:
        prof_rows = launch_profile(grids, device=device)
        p = write_results(
            f"{name}_profile{suffix}", prof_rows, out_dir, meta=meta,
            title="What one eager QSVConv call does on CUDA: kernels, device time, wall time",
            notes=("Per call, the mean of 5 profiled calls (torch.profiler) after 2 warm-up "
                   "calls; `wall_ms` timed without the profiler. `device_busy` = kernel time "
                   "/ wall time: well below 1 means the call waits on kernel launches, not "
                   f"on their work. Machine: {note}."))
        return {"rows": [], "targets": [], "memory": [], "skipped": [], "profile": prof_rows,
                "markdown": p["md"].read_text()}
    rows, skipped = cuda_rows(grids, compiled, repeat=5 if quick else 30, progress=progress,
                              device=device, max_seconds=max_seconds)
    meta.update({"tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "skipped": skipped,
                 "harmonics_published_h100_ms": HARMONICS_PUBLISHED_H100_MS})
    published = (f"torch-harmonics' own CUDA kernel, as published (H100, 64,800 points, "
                 f"C = 64, one head): {HARMONICS_PUBLISHED_H100_MS['forward']} ms forward, "
                 f"{HARMONICS_PUBLISHED_H100_MS['backward']} ms backward; not timed here.")
    p = write_results(
        f"{name}{suffix}", rows, out_dir, meta=meta,
        title="QSVConv on CUDA against TransformerConv and the aggregation floors",
        columns=["points", "grid", "k", "mode", "pass", "layer", "ms", "std_ms", "rounds",
                 "qsv_speedup",
                 "peak_mib", "gather_ms", "spmm_ms", "spmm_fb_ms"],
        notes=("Same points, channels (64), heads (1) and kNN graph as the CPU table "
               "(`qsv_vs_torch_harmonics`). `qsv_speedup`: median over shuffled interleaved "
               "rounds of time(layer) / time(QSVConv), the device synchronised around each "
               "call. `peak_mib`: peak device memory one eager forward + backward adds. "
               f"{published} Skipped: {'; '.join(skipped) or 'nothing'}. Machine: {note}."))
    markdown = p["md"].read_text() + "\n"
    t = targets(rows)
    p = write_results(f"{name}_targets{suffix}", t, out_dir, meta=meta,
                      title="QSVConv on CUDA against the floor targets",
                      notes=("`fwd_vs_spmm` target >= 0.5, `fb_vs_spmm` target >= 1/3 (as on "
                             "the CPU); `fb_vs_tconv`: TransformerConv's forward + backward "
                             f"time over QSVConv's, paired. Machine: {note}."))
    markdown += p["md"].read_text() + "\n"
    mem = []
    if memory:
        mem = memory_rows(device=device)
        p = write_results(f"{name}_memory{suffix}", mem, out_dir, meta=meta,
                          title="Peak device memory of one forward + backward at 1M points",
                          notes=(f"C = 64, one head, k = {K_BY_GRID[MEMORY_GRID]}, eager, "
                                 f"float32; `nan`: out of memory. Machine: {note}."))
        markdown += p["md"].read_text()
    return {"rows": rows, "targets": t, "memory": mem, "skipped": skipped,
            "markdown": markdown}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry of ``python -m benchmarks.qsv.cuda``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="16,200 points, eager, 5 rounds, no memory row (smoke test)")
    parser.add_argument("--compiled", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--memory", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--machine", default=None, help="what else ran on the machine")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default="benchmarks/qsv/results")
    parser.add_argument("--name", default="qsv_cuda", help="result file stem")
    parser.add_argument("--max-seconds", type=float, default=10.0,
                        help="time limit of one mode and pass's timed rounds")
    parser.add_argument("--profile", action="store_true",
                        help="only profile eager QSVConv's kernel launches")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, out_dir=args.out, compiled=args.compiled,
                 memory=args.memory, machine=args.machine, device=args.device,
                 name=args.name, max_seconds=args.max_seconds, profile=args.profile)
    print(result["markdown"])
    return result


if __name__ == "__main__":
    main()
