r"""Where does :class:`~quest_geometric.nn.QSVConv`'s forward spend its time, against one
sparse product over the same pattern?

The floor target of the layer (issue 27) is a forward within 2x of one sparse-dense product
:math:`Y = A X` over fixed weights on the same ``[N, k]`` pattern (``fwd_vs_spmm >= 0.5`` in
``python -m benchmarks.qsv.vs_torch_harmonics``). This benchmark splits one eager forward (the
dense layout, no autograd) into its operators with :mod:`torch.profiler` (self CPU time per
operator, the mean over profiled calls) and divides each by the sparse product's time in
the same process, so the table reads directly as "what each stage costs, in sparse
products". Operators are grouped by name; ``'total'`` is the sum over the forward's
operators. A second table (:func:`epilogue_rows`) times, in paired rounds, the inference
forward (a fused prologue, and the output rotation in the attention kernel's epilogue)
against the same layer on its training path's kernels.

Run ``python -m benchmarks.qsv.forward_breakdown`` (``--quick`` for a smoke test).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from quest_geometric.profile import load_average, write_results

#: Grids of the breakdown (nlat, nlon) and the in-degree of their kNN graph, as in the
#: torch-harmonics comparison: 16,200 and 64,800 points.
GRIDS = ((90, 180), (180, 360))
CHANNELS = 64
#: The floor the stages are measured in.
FLOOR = "one sparse product"


def _self_ms(fn, calls: int) -> tuple[dict[str, float], float]:
    """Self CPU time per operator name (ms per call, the mean over ``calls`` profiled calls
    after two warm-up calls) and the wall time per call of those calls."""
    import time

    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        wall = (time.perf_counter() - start) / calls
    out: dict[str, float] = {}
    for event in prof.key_averages():
        if event.self_cpu_time_total > 0:
            out[event.key] = out.get(event.key, 0.0) + event.self_cpu_time_total / 1e3 / calls
    return out, 1e3 * wall


def _grids(grids, k_by_grid: dict | None):
    """Per grid: ``(points, k, edge_index, x, layer, sparse product)``, the layer and the
    features seeded alike for every table (one head, :data:`CHANNELS` channels)."""
    from benchmarks.qsv.cuda import K_BY_GRID, floor_functions, grid_graph
    from quest_geometric.nn.qsv_conv import QSVConv

    k_by_grid = K_BY_GRID if k_by_grid is None else k_by_grid
    for nlat, nlon in grids:
        k = k_by_grid[(nlat, nlon)]
        edge_index = grid_graph(nlat, nlon, k)
        n = nlat * nlon
        torch.manual_seed(0)
        x = torch.randn(n, CHANNELS)
        conv = QSVConv(CHANNELS, CHANNELS, heads=1)
        yield n, k, edge_index, x, conv, floor_functions(edge_index, x)["spmm"]


def breakdown_rows(grids=GRIDS, threads=(1, 2), calls: int = 20,
                   k_by_grid: dict | None = None) -> list[dict]:
    """One row per grid, thread count and operator of QSVConv's eager dense forward (no
    autograd, one head, 64 channels), plus ``'total'`` and the floor's row.

    Columns: ``points``, ``k``, ``threads``, ``op``, ``ms`` (self CPU time per call),
    ``share`` (of the forward's total), ``in_spmm`` (``ms`` over the sparse product's
    ``ms``: 2 is the whole budget of the floor target), ``wall_ms`` (the profiled calls'
    wall time per call, on the ``'total'`` and floor rows).
    """
    rows: list[dict] = []
    previous = torch.get_num_threads()
    try:
        for n, k, edge_index, x, conv, spmm in _grids(grids, k_by_grid):
            for t in threads:
                torch.set_num_threads(t)
                with torch.no_grad():
                    floor_ops, floor_wall = _self_ms(spmm, calls)
                    ops, wall = _self_ms(lambda: conv(x, edge_index, dense=True), calls)
                floor_ms = sum(floor_ops.values())
                total = sum(ops.values())
                base = {"points": n, "k": k, "threads": t}
                for op, ms in sorted(ops.items(), key=lambda kv: -kv[1]):
                    rows.append({**base, "op": op, "ms": ms, "share": ms / total,
                                 "in_spmm": ms / floor_ms})
                rows.append({**base, "op": "total", "ms": total, "share": 1.0,
                             "in_spmm": total / floor_ms, "wall_ms": wall})
                rows.append({**base, "op": FLOOR, "ms": floor_ms, "share": float("nan"),
                             "in_spmm": 1.0, "wall_ms": floor_wall})
    finally:
        torch.set_num_threads(previous)
    return rows


def epilogue_rows(grids=GRIDS, threads=(1, 2), repeat: int = 15, calls: int = 10,
                  k_by_grid: dict | None = None) -> list[dict]:
    """The inference forward (``'fused'``, what :class:`~quest_geometric.nn.QSVConv` runs
    without gradients: the prologue of :func:`~quest_geometric.nn._qsv_native.prepare`, then
    the attention with the output rotation in its epilogue) against the same layer on the
    kernels of its training path (``'separate'``: the quaternion map, the normalisation, the
    rotation matrices, the sources' rotation, the attention, then a second pass rotating the
    output back), and one sparse product, timed in the same shuffled rounds (``calls``
    calls each per round).

    Columns: ``points``, ``k``, ``threads``, ``fused_ms``, ``separate_ms``, ``spmm_ms``
    (medians per call), ``speedup`` (paired median of time(separate) / time(fused)),
    ``fused_in_spmm`` and ``separate_in_spmm`` (paired medians of time(forward) /
    time(sparse product): the floor target needs <= 2), ``rounds``.
    """
    import copy

    from quest_geometric.profile import paired_ratio, time_interleaved

    rows: list[dict] = []
    previous = torch.get_num_threads()
    try:
        for n, k, edge_index, x, fused, spmm in _grids(grids, k_by_grid):
            separate = copy.deepcopy(fused)  # on the training path's kernels:
            facts = separate._facts
            separate._facts = lambda *a, facts=facts: facts(*a)._replace(needs_grad=True)

            def looped(fn):
                def call():
                    with torch.no_grad():
                        for _ in range(calls):
                            fn()
                return call

            fns = {"fused": looped(lambda: fused(x, edge_index, dense=True)),
                   "separate": looped(lambda: separate(x, edge_index, dense=True)),
                   "spmm": looped(spmm)}
            for t in threads:
                torch.set_num_threads(t)
                timed = time_interleaved(fns, warmup=1, repeat=repeat, shuffle_seed=0)
                rows.append({
                    "points": n, "k": k, "threads": t,
                    **{f"{name}_ms": 1e3 * timed[name]["median_s"] / calls for name in fns},
                    "speedup": paired_ratio(timed, "separate", "fused"),
                    "fused_in_spmm": paired_ratio(timed, "fused", "spmm"),
                    "separate_in_spmm": paired_ratio(timed, "separate", "spmm"),
                    "rounds": repeat})
    finally:
        torch.set_num_threads(previous)
    return rows


def run(quick: bool = False, out_dir: str | Path = "benchmarks/qsv/results", threads=(1, 2),
        machine: str | None = None, min_share: float = 0.01) -> dict[str, Any]:
    """Profile and write ``qsv_forward_breakdown[_quick].{csv,json,md}``; operators below
    ``min_share`` of the forward are summed into one ``'other'`` row; ``rows`` in the
    returned dict keeps them all."""
    note = machine if machine else ("not stated: timings may come from a shared machine "
                                    "and are then indicative only")
    # the paired timing first, in a process the profiler has not run in yet (after the
    # profiled calls the two-kernel forward at 64,800 points took 33 ms against 20 ms alone)
    ep_rows = epilogue_rows(GRIDS[:1] if quick else GRIDS, threads, repeat=3 if quick else 15,
                            calls=2 if quick else 10)
    rows = breakdown_rows(GRIDS[:1] if quick else GRIDS, threads, calls=3 if quick else 20)
    shown: list[dict] = []
    for key in dict.fromkeys((r["points"], r["threads"]) for r in rows):
        cell = [r for r in rows if (r["points"], r["threads"]) == key]
        small = [r for r in cell if r["op"] not in ("total", FLOOR) and r["share"] < min_share]
        shown += [r for r in cell if r not in small and r["op"] not in ("total", FLOOR)]
        if small:
            shown.append({**{c: cell[0][c] for c in ("points", "k", "threads")}, "op": "other",
                          "ms": sum(r["ms"] for r in small),
                          "share": sum(r["share"] for r in small),
                          "in_spmm": sum(r["in_spmm"] for r in small)})
        shown += [r for r in cell if r["op"] in ("total", FLOOR)]
    suffix = "_quick" if quick else ""
    p = write_results(
        f"qsv_forward_breakdown{suffix}", shown, out_dir,
        meta={"threads_measured": list(threads), "quick": quick, "seed": 0, "heads": 1,
              "channels": CHANNELS, "machine_note": note, "load_at_start": load_average()},
        title="QSVConv's eager forward by operator, in sparse products",
        columns=["points", "k", "threads", "op", "ms", "share", "in_spmm", "wall_ms"],
        notes=("QSVConv (64 channels, one head, native kernels where built) on the exact kNN "
               "graph of torch-harmonics' equiangular grid points, dense layout, forward "
               "without autograd. `ms`: self CPU time per call of each operator "
               "(torch.profiler, mean of the profiled calls); `share`: of the forward's "
               f"total; `in_spmm`: `ms` over `{FLOOR}` (a CSR product over fixed weights on "
               "the same pattern, profiled the same way): the floor target (forward within "
               "2x of that product) needs `total` <= 2. `wall_ms`: wall time per profiled "
               f"call. Operators under {min_share:.0%} of the forward are summed as "
               f"`other`. Machine: {note}."))
    text = p["md"].read_text()
    ep = write_results(
        f"qsv_forward_epilogue{suffix}", ep_rows, out_dir,
        meta={"threads_measured": list(threads), "quick": quick, "seed": 0, "heads": 1,
              "channels": CHANNELS, "machine_note": note, "load_at_start": load_average()},
        title="QSVConv's inference forward: the fused prologue and epilogue",
        columns=["points", "k", "threads", "fused_ms", "separate_ms", "spmm_ms", "speedup",
                 "fused_in_spmm", "separate_in_spmm", "rounds"],
        notes=("QSVConv (64 channels, one head) forward without autograd on the same graphs: "
               "`fused` is what the layer runs when no gradient is needed: one pass per node "
               "for the quaternion map, the rotations and the sources' rotation "
               "(`quest_geometric::qsv_prepare`), then the attention rotating each output "
               "row back and adding the bias in its epilogue "
               "(`quest_geometric::qsv_attend_rotate`); `separate` is the same layer on its "
               "training path's kernels (a linear map, a normalisation, the matrices, a "
               "rotation, the attention, a second rotation); `spmm` one "
               "sparse product over fixed weights on the pattern. Shuffled interleaved "
               "rounds; `speedup` = paired median of time(separate) / time(fused); "
               "`*_in_spmm` = paired medians of time(forward) / time(sparse product) (the "
               f"floor target needs <= 2). Machine: {note}."))
    text += "\n" + ep["md"].read_text()
    print(text)
    return {"rows": rows, "shown": shown, "epilogue": ep_rows, "markdown": text,
            "paths": p, "epilogue_paths": ep}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry of ``python -m benchmarks.qsv.forward_breakdown``."""
    parser = argparse.ArgumentParser(description="QSVConv's forward by operator, in sparse "
                                                 "products")
    parser.add_argument("--quick", action="store_true", help="16,200 points, 3 calls")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--machine", default=None,
                        help="what else ran on the machine (e.g. 'idle'), written beside the "
                             "table")
    parser.add_argument("--out", default="benchmarks/qsv/results")
    args = parser.parse_args(argv)
    return run(quick=args.quick, out_dir=args.out, threads=tuple(args.threads),
               machine=args.machine)


if __name__ == "__main__":
    main()
