"""Is :class:`~quest_geometric.nn.QSVConv` as fast as torch-harmonics'
``NeighborhoodAttentionS2`` on the same points, and how does it do on small graphs?

QSVConv against NVIDIA torch-harmonics' ``NeighborhoodAttentionS2`` (its optimized CPU
kernel) and PyG's ``TransformerConv`` on the same points, channels and mean neighbourhood
(eager and compiled, forward and forward + backward), checked against the speed targets; and
a batch of small digit sphere graphs against ``TransformerConv`` (the per-call overhead case).

Run ``python -m benchmarks.qsv.vs_torch_harmonics`` (``--quick`` for a smoke test).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from quest_geometric.profile import (
    load_average,
    paired_ratio,
    round_ratios,
    time_interleaved,
    write_results,
)
from benchmarks.qsv.harmonics import MISSING_HARMONICS, equiangular_graph, harmonics_version
from quest_geometric.nn import qsv_native_available, set_qsv_native_enabled

#: The grids of the torch-harmonics comparison (nlat, nlon): 16,200 and 64,800 points.
HARMONICS_GRIDS = ((90, 180), (180, 360))
HARMONICS_CHANNELS = 64


#: The aggregation floors, timed as layers in the same interleaved rounds as QSVConv (their
#: ``qsv_speedup`` is time(floor) / time(QSVConv), paired round by round):
#: :func:`~benchmarks.qsv.cuda.floor_functions`' one ``[E, C]`` gather and
#: one sparse product over fixed weights in the forward pass, that product's forward +
#: backward in the forward + backward pass.
FLOOR_GATHER = "floor: one gather"
FLOOR_SPMM = "floor: one sparse product"
FLOOR_SPMM_FB = "floor: sparse product forward + backward"
FLOORS = {"forward": {FLOOR_GATHER: "gather", FLOOR_SPMM: "spmm"},
          "forward+backward": {FLOOR_SPMM_FB: "spmm_fb"}}


def harmonics_rows(grids=HARMONICS_GRIDS, threads=(1, 2), compiled: bool = True,
                   repeat: int = 5, progress: bool = True) -> list[dict]:
    """QSVConv, torch-harmonics' ``NeighborhoodAttentionS2`` (optimized kernel) and
    TransformerConv on the same points, channels (64), heads (1) and mean neighbourhood
    (torch-harmonics' own cutoff): forward and forward + backward, eager (and compiled),
    at each thread count, timed in interleaved rounds so that all three meet the same load,
    with the aggregation floors (:data:`FLOORS`) in the same rounds.
    """
    from torch_geometric.nn import TransformerConv
    from torch_harmonics import NeighborhoodAttentionS2

    from benchmarks.qsv.cuda import floor_functions
    from benchmarks.qsv.memory import forward_flops, neighbourhood_size
    from quest_geometric.nn.qsv_conv import QSVConv

    rows = []
    previous = torch.get_num_threads()
    try:
        for nlat, nlon in grids:
            torch.manual_seed(0)
            th = NeighborhoodAttentionS2(HARMONICS_CHANNELS, (nlat, nlon), (nlat, nlon),
                                         num_heads=1)
            n = nlat * nlon
            nbr = neighbourhood_size(nlat, nlon, layer=th)
            mean_nbr, k = nbr["mean_nbr"], nbr["k"]
            edge_index = equiangular_graph(nlat, nlon, k)
            qsv = QSVConv(HARMONICS_CHANNELS, HARMONICS_CHANNELS, heads=1)
            tconv = TransformerConv(HARMONICS_CHANNELS, HARMONICS_CHANNELS, heads=1)
            # parameters, and forward FLOPs over each layer's own neighbourhood entries
            size = {name: {"params": sum(p.numel() for p in layer.parameters()),
                           "fwd_gflop": forward_flops(name, n, edges, HARMONICS_CHANNELS) / 1e9}
                    for name, layer, edges in (
                        ("QSVConv", qsv, edge_index.size(1)),
                        ("TransformerConv", tconv, edge_index.size(1)),
                        ("NeighborhoodAttentionS2", th, nbr["th_edges"]))}
            size[PAIRED_EAGER] = size[TORCH_PATH] = size["QSVConv"]
            x = torch.randn(n, HARMONICS_CHANNELS)
            x_grid = x.t().reshape(1, HARMONICS_CHANNELS, nlat, nlon).contiguous()
            modes = ["eager"] + (["compiled"] if compiled else [])
            floor_fns = floor_functions(edge_index, x)  # built once per grid, outside timing
            for t in threads:
                torch.set_num_threads(t)
                for mode in modes:
                    layers = {"QSVConv": qsv, "NeighborhoodAttentionS2": th,
                              "TransformerConv": tconv}
                    if mode == "eager" and qsv_native_available():
                        # the same layer without its native kernels, in the same rounds
                        layers[TORCH_PATH] = TorchPath(qsv)
                    if mode == "compiled":
                        torch._dynamo.reset()
                        layers = {name: torch.compile(m) for name, m in layers.items()}
                        # the eager layer in the same rounds: compiled vs eager, paired
                        layers[PAIRED_EAGER] = qsv
                    inputs = {"QSVConv": (x, edge_index), "TransformerConv": (x, edge_index),
                              "NeighborhoodAttentionS2": (x_grid,),
                              PAIRED_EAGER: (x, edge_index), TORCH_PATH: (x, edge_index)}
                    kwargs = {"QSVConv": {"dense": True}, "TransformerConv": {},
                              "NeighborhoodAttentionS2": {}, PAIRED_EAGER: {"dense": True},
                              TORCH_PATH: {"dense": True}}
                    for what in ("forward", "forward+backward"):
                        fns = {}
                        for name, layer in layers.items():
                            args = inputs[name]
                            kw = kwargs[name]
                            if what == "forward":
                                def fn(layer=layer, args=args, kw=kw):
                                    with torch.no_grad():
                                        layer(*args, **kw)
                            else:
                                leaf = args[0].clone().requires_grad_(True)
                                rest = args[1:]

                                def fn(layer=layer, leaf=leaf, rest=rest, kw=kw):
                                    leaf.grad = None
                                    layer(leaf, *rest, **kw).square().mean().backward()
                            fns[name] = fn
                        for name, key in FLOORS[what].items():
                            # the floors in the same rounds: the same cache and allocator
                            # state as the layers (timed apart they ran on a quieter one)
                            def floor(f=floor_fns[key]):
                                with torch.no_grad():
                                    f()
                            fns[name] = floor
                        load_before = load_average()
                        timed = time_interleaved(fns, warmup=2 if mode == "compiled" else 1,
                                                 repeat=repeat, shuffle_seed=0)
                        for name in fns:
                            rows.append({
                                "points": n, "grid": f"{nlat}x{nlon}", "k": k,
                                "mean_nbr_th": round(mean_nbr, 2), "threads": t, "mode": mode,
                                "pass": what, "layer": name,
                                "ms": 1e3 * timed[name]["median_s"],
                                "std_ms": 1e3 * timed[name]["std_s"],
                                "qsv_speedup": paired_ratio(timed, name, "QSVConv"),
                                "round_ratios": round_ratios(timed, name, "QSVConv"),
                                **size.get(name, {}),
                                "load": load_before,
                            })
                        if progress:
                            q = 1e3 * timed["QSVConv"]["median_s"]
                            h = 1e3 * timed["NeighborhoodAttentionS2"]["median_s"]
                            print(f"[harmonics] {n} pts, {t} thr, {mode}, {what}: QSVConv "
                                  f"{q:.1f} ms, torch-harmonics {h:.1f} ms", flush=True)
    finally:
        torch.set_num_threads(previous)
    return rows


#: The eager QSVConv timed in the rounds of the compiled layers (its ``qsv_speedup`` is
#: time(eager) / time(compiled QSVConv), paired round by round).
PAIRED_EAGER = "QSVConv (eager, same rounds)"
#: The eager QSVConv with its native kernels switched off (its ``qsv_speedup`` is the
#: kernels' speed-up, paired round by round).
TORCH_PATH = "QSVConv (PyTorch path)"


class TorchPath(torch.nn.Module):
    """A :class:`~quest_geometric.nn.QSVConv` called with its native kernels switched off
    (:func:`~quest_geometric.nn.set_qsv_native_enabled`), the setting restored after the
    call; the backward of that call runs the PyTorch path's graph."""

    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        previous = set_qsv_native_enabled(False)
        try:
            return self.conv(*args, **kwargs)
        finally:
            set_qsv_native_enabled(previous)


def small_graph_rows(threads=(1, 2), repeat: int = 20, batch_size: int = 32) -> list[dict]:
    """The per-call overhead case: a batch of ``batch_size`` digit sphere graphs (16 + 64
    nodes, in-degree 8 + 2, the digits preset), width 32 and 2 heads, QSVConv against
    TransformerConv, forward and forward + backward (eager)."""
    from torch_geometric.nn import TransformerConv

    from quest_geometric.nn.qsv_conv import QSVConv
    from quest_geometric.transforms.image_to_sphere import ImageToSphere

    torch.manual_seed(0)
    batch = ImageToSphere(sizes=(16, 64), k=8, k_cross=2).batch_call(
        torch.rand(batch_size, 1, 8, 8), as_batch=True)
    edge_index, n = batch.edge_index, batch.num_nodes
    channels, heads = 32, 2
    layers = {"QSVConv": QSVConv(channels, channels, heads=heads),
              "TransformerConv": TransformerConv(channels, channels // heads, heads=heads)}
    x = torch.randn(n, channels)
    rows = []
    previous = torch.get_num_threads()
    try:
        for t in threads:
            torch.set_num_threads(t)
            for what in ("forward", "forward+backward"):
                fns = {}
                for name, layer in layers.items():
                    if what == "forward":
                        def fn(layer=layer):
                            with torch.no_grad():
                                layer(x, edge_index)
                    else:
                        leaf = x.clone().requires_grad_(True)

                        def fn(layer=layer, leaf=leaf):
                            leaf.grad = None
                            layer(leaf, edge_index).square().mean().backward()
                    fns[name] = fn
                load_before = load_average()
                timed = time_interleaved(fns, warmup=3, repeat=repeat, shuffle_seed=0)
                for name in fns:
                    rows.append({"graphs": batch_size, "nodes": n, "edges": edge_index.size(1),
                                 "channels": channels, "heads": heads, "threads": t,
                                 "pass": what, "layer": name,
                                 "ms": 1e3 * timed[name]["median_s"],
                                 "std_ms": 1e3 * timed[name]["std_s"],
                                 "qsv_speedup": paired_ratio(timed, name, "QSVConv"),
                                 "round_ratios": round_ratios(timed, name, "QSVConv"),
                                 "load": load_before})
    finally:
        torch.set_num_threads(previous)
    return rows


def run(quick: bool = False, out_dir: str | Path = "benchmarks/qsv/results",
                           progress: bool = True, threads=(1, 2),
                           compiled: bool | None = None, machine: str | None = None,
                           name: str = "qsv_vs_torch_harmonics") -> dict[str, Any]:
    """Run the torch-harmonics comparison (skipped with a message when torch-harmonics is
    absent) and the small-graph comparison; write ``qsv_vs_torch_harmonics[_quick].*``
    and ``qsv_small_graphs[_quick].*``.

    Args:
        quick (bool): only the 16,200-point grid, eager, 3 rounds (a smoke test; the full
            run needs an idle machine). (default: :obj:`False`)
        out_dir (str): result folder. (default: ``'benchmarks/qsv/results'``)
        progress (bool): print each measurement. (default: :obj:`True`)
        threads (tuple of int): torch thread counts. (default: ``(1, 2)``)
        compiled (bool, optional): also time :func:`torch.compile` d layers.
            (default: :obj:`not quick`)
        machine (str, optional): what else ran on the machine, written beside the tables
            (for example ``'idle'``); :obj:`None` writes that it was not stated, so the
            timings read as taken on a possibly shared machine. (default: :obj:`None`)
        name (str): stem of the torch-harmonics table; the small-graph table is
            ``qsv_small_graphs`` plus what follows ``qsv_vs_torch_harmonics`` in ``name``.
            (default: ``'qsv_vs_torch_harmonics'``)

    Returns:
        dict: ``rows`` (empty when skipped), ``small_rows``, ``targets`` (the issue's
        targets, per grid and thread count: :func:`harmonics_targets`), ``skipped`` (the
        message or :obj:`None`), ``markdown``.
    """
    out_dir = Path(out_dir)
    suffix = "_quick" if quick else ""
    compiled = (not quick) if compiled is None else compiled
    version = harmonics_version()
    note = machine if machine else ("not stated: timings may come from a shared machine "
                                    "and are then indicative only")
    meta_common = {"threads_measured": list(threads), "quick": quick, "seed": 0,
                   "dtype": "float32", "load_at_start": load_average(), "machine_note": note}
    taken = f"Machine: {note}."
    tail = name[len("qsv_vs_torch_harmonics"):] if name.startswith("qsv_vs_torch_harmonics") \
        else f"_{name}"
    markdown, rows, targets, skipped = "", [], [], None
    if version is None:
        skipped = MISSING_HARMONICS
        print(skipped)
    else:
        grids = HARMONICS_GRIDS[:1] if quick else HARMONICS_GRIDS
        rows = harmonics_rows(grids, threads, compiled, repeat=3 if quick else 7,
                              progress=progress)
        p = write_results(
            f"{name}{suffix}", rows, out_dir,
            meta={**meta_common, "torch_harmonics": version, "grids": [list(g) for g in grids],
                  "channels": HARMONICS_CHANNELS, "heads": 1, "load_at_end": load_average()},
            title="QSVConv vs torch-harmonics NeighborhoodAttentionS2 and TransformerConv",
            columns=["points", "grid", "k", "mean_nbr_th", "threads", "mode", "pass", "layer",
                     "params", "fwd_gflop", "ms", "std_ms", "qsv_speedup", "load"],
            notes=("Same points (torch-harmonics' equiangular grid), 64 channels, one head; "
                   "QSVConv and TransformerConv on the exact kNN graph of those points with "
                   "k = torch-harmonics' mean neighbourhood (its own cutoff), self loops "
                   "included, QSVConv on its dense path. `qsv_speedup`: median over "
                   "interleaved rounds of time(layer) / time(QSVConv) (> 1: QSVConv faster). "
                   f"`{FLOOR_GATHER}`: one [E, C] gather of the neighbours' features; "
                   f"`{FLOOR_SPMM}`: one sparse-dense product over fixed weights (a single "
                   "pass over the neighbours), the floors of the aggregation, and "
                   f"`{FLOOR_SPMM_FB}` that product's forward + backward (weights and "
                   "features requiring gradients), each timed in the same rounds as the "
                   "layers, so its `qsv_speedup` is the floor's time over QSVConv's, paired. "
                   f"`{PAIRED_EAGER}`: the eager QSVConv timed in the same rounds as the "
                   "compiled layers, so its `qsv_speedup` is the compiled layer's speed-up "
                   "over eager, paired. `params`: learnable parameters; `fwd_gflop`: forward "
                   "FLOPs by formula (`benchmarks.qsv.memory.forward_flops`; "
                   "torch-harmonics over its own neighbourhood entries). `load`: "
                   f"/proc/loadavg before the measurement. {taken}"))
        markdown += p["md"].read_text() + "\n"
        targets = harmonics_targets(rows)
        if targets:
            p = write_results(
                f"{name}_targets{suffix}", targets, out_dir,
                meta={**meta_common, "torch_harmonics": version},
                title="QSVConv against the speed targets", columns=TARGET_COLUMNS,
                notes=f"Per grid, thread count and mode: {_TARGET_NOTES} {taken}")
            markdown += p["md"].read_text() + "\n"
    small = small_graph_rows(threads, repeat=10 if quick else 30)
    p = write_results(f"qsv_small_graphs{tail}{suffix}", small, out_dir,
                      meta={**meta_common, "load_at_end": load_average()},
                      title="QSVConv vs TransformerConv on a batch of 32 digit sphere graphs",
                      columns=["graphs", "nodes", "edges", "channels", "heads", "threads",
                               "pass", "layer", "ms", "std_ms", "qsv_speedup", "load"],
                      notes=("32 graphs of 80 nodes (16 + 64 Fibonacci nodes, in-degree 8 + 2), "
                             "width 32, 2 heads, eager. `qsv_speedup`: median over interleaved "
                             f"rounds of time(layer) / time(QSVConv). {taken}"))
    markdown += p["md"].read_text()
    return {"rows": rows, "small_rows": small, "targets": targets, "skipped": skipped,
            "markdown": markdown}


def write_targets(json_path: str | Path) -> dict[str, Any]:
    """Rewrite ``<stem>_targets.{csv,json,md}`` from a finished ``<stem>.json`` of
    :func:`run` without timing anything (the targets table of a run made
    before the table existed); the run's metadata is carried over."""
    import json

    json_path = Path(json_path)
    if not json_path.is_file():
        raise FileNotFoundError(f"write_targets: no result file {json_path}; run the "
                                "benchmark first")
    blob = json.loads(json_path.read_text())
    targets = harmonics_targets(blob["rows"])
    meta = {k: v for k, v in blob.get("meta", {}).items() if k != "date"}
    meta["targets_from"] = json_path.name
    p = write_results(f"{json_path.stem}_targets", targets, json_path.parent, meta=meta,
                      title="QSVConv against the speed targets", columns=TARGET_COLUMNS,
                      notes=("Per grid, thread count and mode, from the rows of "
                             f"`{json_path.name}` (see its notes for the machine): "
                             + _TARGET_NOTES))
    print(p["md"].read_text())
    return {"targets": targets, "paths": p}


_TARGET_NOTES = (
    "`fwd_vs_th` = time(torch-harmonics forward) / time(QSVConv forward), target >= 1; "
    "`fb_vs_th` the same for forward + backward, target >= 3; `fb_vs_tconv` = "
    "time(TransformerConv forward + backward) / time(QSVConv forward + backward), target >= "
    "3 (each layer in the same mode as the row); `fwd_vs_gather` = time(one [E, C] gather) / "
    "time(QSVConv forward) and `fwd_vs_spmm` = time(one sparse product over fixed weights) / "
    "time(QSVConv forward): how far the forward is from one pass over the neighbours' "
    "features (1 = at the floor; target >= 0.5, `floor_target_met`); `fb_vs_spmm` = "
    "time(that product's forward + backward) / time(QSVConv forward + backward), target >= "
    "1/3 (`fb_floor_target_met`); the floor ratios paired round by round, the floors timed "
    "in QSVConv's rounds (in older result files the floors were timed apart, in rounds of "
    "their own, and these are ratios of medians); compiled rows: `fwd_vs_eager` and "
    "`fb_vs_eager` = time(eager QSVConv) / time(compiled QSVConv) in the same rounds, target >= 1 "
    "(`compiled_target_met`, both passes); eager rows: `native_fwd_speedup` and "
    "`native_fb_speedup` = time(QSVConv on its PyTorch path, native kernels off) / "
    "time(QSVConv) in the same rounds (what the native kernels bring; QSVConv runs them "
    "wherever they are built, and the PyTorch path is what a machine without a C compiler "
    "gets).")

#: The issue's floor targets: forward within 2x of one sparse product, forward + backward
#: within 3x of that product's forward + backward.
FWD_FLOOR_TARGET = 0.5
FB_FLOOR_TARGET = 1.0 / 3.0


#: Column order of the targets table (the compiled columns stay empty on eager rows).
TARGET_COLUMNS = ["points", "threads", "mode", "qsv_fwd_ms", "qsv_fb_ms", "fwd_vs_th",
                  "fwd_target_met", "fb_vs_th", "fb_target_met", "fb_vs_tconv",
                  "tconv_target_met", "fwd_vs_gather", "fwd_vs_spmm", "floor_target_met",
                  "fb_vs_spmm", "fb_floor_target_met", "native_fwd_speedup",
                  "native_fb_speedup", "fwd_vs_eager", "fb_vs_eager", "compiled_target_met"]


def _floor_ratios(cell: dict, q: dict, qfb: dict) -> dict[str, float]:
    """``fwd_vs_gather``, ``fwd_vs_spmm`` and ``fb_vs_spmm`` of one cell: the floors' paired
    ratios where they were timed in QSVConv's rounds (the :data:`FLOORS` rows), else, for
    older result files, the floors timed apart (``gather_ms``, ``spmm_ms``,
    ``spmm_fb_ms`` on QSVConv's rows) over QSVConv's median."""
    out = {}
    for key, what, name, column, qrow in (
            ("fwd_vs_gather", "forward", FLOOR_GATHER, "gather_ms", q),
            ("fwd_vs_spmm", "forward", FLOOR_SPMM, "spmm_ms", q),
            ("fb_vs_spmm", "forward+backward", FLOOR_SPMM_FB, "spmm_fb_ms", qfb)):
        if (what, name) in cell:
            out[key] = cell[(what, name)]["qsv_speedup"]
        elif column in qrow:
            out[key] = qrow[column] / qrow["ms"]
    return out


def harmonics_targets(rows: list[dict]) -> list[dict]:
    """The issue's speed targets from :func:`harmonics_rows`'s rows, one row per grid, thread
    count and mode (eager, compiled): QSVConv's forward and forward + backward speed-ups over
    torch-harmonics and TransformerConv in that mode (the paired medians ``qsv_speedup``),
    the distance from the aggregation floors (:func:`_floor_ratios`: the floors' paired
    ratios, where measured) and, for the compiled rows, the
    paired speed-up over the eager layer; each with whether its target is met."""
    by: dict[tuple, dict] = {}
    for r in rows:
        by.setdefault((r["points"], r["threads"], r["mode"]), {})[(r["pass"], r["layer"])] = r
    out = []
    for (points, threads, mode), cell in sorted(by.items(), key=lambda kv: (
            kv[0][0], kv[0][1], kv[0][2] != "eager")):
        try:
            fwd_th = cell[("forward", "NeighborhoodAttentionS2")]["qsv_speedup"]
            fb_th = cell[("forward+backward", "NeighborhoodAttentionS2")]["qsv_speedup"]
            fb_tc = cell[("forward+backward", "TransformerConv")]["qsv_speedup"]
            q = cell[("forward", "QSVConv")]
            qfb = cell[("forward+backward", "QSVConv")]
        except KeyError:  # an incomplete cell (a layer or a pass not measured)
            continue
        row = {"points": points, "threads": threads, "mode": mode,
               "qsv_fwd_ms": q["ms"], "qsv_fb_ms": qfb["ms"],
               "fwd_vs_th": fwd_th, "fwd_target_met": fwd_th >= 1,
               "fb_vs_th": fb_th, "fb_target_met": fb_th >= 3,
               "fb_vs_tconv": fb_tc, "tconv_target_met": fb_tc >= 3}
        floors = _floor_ratios(cell, q, qfb)
        if "fwd_vs_spmm" in floors:
            floors["floor_target_met"] = floors["fwd_vs_spmm"] >= FWD_FLOOR_TARGET
        if "fb_vs_spmm" in floors:
            floors["fb_floor_target_met"] = floors["fb_vs_spmm"] >= FB_FLOOR_TARGET
        row.update(floors)
        torch_fwd = cell.get(("forward", TORCH_PATH))
        torch_fb = cell.get(("forward+backward", TORCH_PATH))
        if torch_fwd is not None and torch_fb is not None:
            row["native_fwd_speedup"] = torch_fwd["qsv_speedup"]
            row["native_fb_speedup"] = torch_fb["qsv_speedup"]
        if mode == "compiled":
            eager_fwd = cell.get(("forward", PAIRED_EAGER))
            eager_fb = cell.get(("forward+backward", PAIRED_EAGER))
            if eager_fwd is not None and eager_fb is not None:
                row["fwd_vs_eager"] = eager_fwd["qsv_speedup"]
                row["fb_vs_eager"] = eager_fb["qsv_speedup"]
                row["compiled_target_met"] = min(row["fwd_vs_eager"], row["fb_vs_eager"]) >= 1
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry of ``python -m benchmarks.qsv.vs_torch_harmonics``."""
    parser = argparse.ArgumentParser(
        description="QSVConv vs torch-harmonics NeighborhoodAttentionS2 and TransformerConv")
    parser.add_argument("--quick", action="store_true",
                        help="16,200 points only, eager, 3 rounds (smoke test)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--compiled", action=argparse.BooleanOptionalAction, default=None,
                        help="also time torch.compile'd layers (default: on unless --quick)")
    parser.add_argument("--machine", default=None,
                        help="what else ran on the machine (e.g. 'idle'), written beside the "
                             "tables")
    parser.add_argument("--name", default="qsv_vs_torch_harmonics", help="result file stem")
    parser.add_argument("--out", default="benchmarks/qsv/results")
    parser.add_argument("--targets-only", action="store_true",
                        help="time nothing: rewrite <name>_targets from <name>.json")
    args = parser.parse_args(argv)
    if args.targets_only:
        return write_targets(Path(args.out) / f"{args.name}.json")
    result = run(quick=args.quick, out_dir=args.out, threads=tuple(args.threads),
                 compiled=args.compiled, machine=args.machine, name=args.name)
    print(result["markdown"])
    return result


if __name__ == "__main__":
    main()
