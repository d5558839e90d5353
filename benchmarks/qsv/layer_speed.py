"""How fast is :class:`~quest_geometric.nn.QSVConv` against PyG's attention layers?

Forward + backward time and peak memory of ``QSVConv``, ``TransformerConv`` and ``GATv2Conv``
at the same width and heads on the same batched sphere graph (3 concentric Fibonacci shells,
64 + 256 + 1024 = 1,344 nodes per image, in-degree 16 = 12 within-shell + 4 cross-shell
neighbours), at several batch sizes and thread counts, with ``torch.compile`` rows
(``--compiled``) and the ``--rewrite`` of a committed table.

    python -m benchmarks.qsv.layer_speed [--quick] [--threads 1] [--device cuda]
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch
from tqdm.auto import tqdm

from quest_geometric.profile import (load_average, peak_memory_mb, ratio_summary, round_ratios,
                                     time_interleaved, write_results)

SIZES = (64, 256, 1024)
#: Seed of the shuffled order of the layers within each timing round.
ROUND_SEED = 0
K_WITHIN, K_CROSS = 12, 4
CHANNELS, HEADS = 64, 4


def forward_flops(layer: str, nodes: int, edges: int, channels: int = CHANNELS,
                  heads: int = HEADS) -> int:
    r"""Floating-point operations of one forward call of ``layer`` (a multiply-add counts 2),
    by formula at ``channels`` :math:`C`, ``heads`` :math:`H`, :math:`N` nodes and :math:`E`
    edges: the dense maps and the per-edge work, without the softmax's exponentials,
    normalisations, biases and index operations (all :math:`O(N C + E H)`).

    * ``'QSVConv'``: the quaternion map :math:`C \to 4H` (:math:`8 N C H`), the rotation of
      every node's :math:`C/4` vector parts by a :math:`3 \times 3` matrix before and after
      aggregation (:math:`2 \cdot 18 \cdot N C / 4 = 9 N C`), one 4-dimensional dot product
      per edge and head (:math:`8 E H`) and the weighted sum (:math:`2 E C`);
    * ``'TransformerConv'`` (``out_channels = C / H``, ``concat``, ``root_weight``): four
      :math:`C \to C` maps (query, key, value, skip: :math:`8 N C^2`), the per-edge dot
      products and weighted sum (:math:`2 E C + 2 E C`);
    * ``'GATv2Conv'``: two :math:`C \to C` maps (:math:`4 N C^2`), per edge the sum
      :math:`x_i + x_j`, the leaky ReLU, the dot product with the attention vector and the
      weighted sum (:math:`E C + E C + 2 E C + 2 E C`).

    Backward costs about twice the forward, so forward + backward is about 3x this.

    Args:
        layer (str): ``'QSVConv'``, ``'TransformerConv'`` or ``'GATv2Conv'``.
        nodes (int): :math:`N`.
        edges (int): :math:`E`.
        channels (int): :math:`C`. (default: ``64``)
        heads (int): :math:`H`. (default: ``4``)

    Returns:
        int: the forward FLOPs.
    """
    N, E, C, H = int(nodes), int(edges), int(channels), int(heads)
    if layer == "QSVConv":
        return 8 * N * C * H + 9 * N * C + 8 * E * H + 2 * E * C
    if layer == "TransformerConv":
        return 8 * N * C * C + 4 * E * C
    if layer == "GATv2Conv":
        return 4 * N * C * C + 6 * E * C
    raise ValueError(f"forward_flops: 'layer' must be 'QSVConv', 'TransformerConv' or "
                     f"'GATv2Conv', got {layer!r}")


def problem(batch_size: int, device: torch.device
            ) -> tuple[torch.Tensor, int, torch.Tensor, dict[str, torch.nn.Module]]:
    """The timed problem, seeded 0: the sphere graph of :data:`SIZES` (in-degree
    :data:`K_WITHIN` + :data:`K_CROSS`) repeated ``batch_size`` times, its node count, random
    features of width :data:`CHANNELS`, and the three layers at that width and :data:`HEADS`
    heads (``QSVConv``, ``TransformerConv``, ``GATv2Conv``), all on ``device``.

    Returns:
        tuple: ``edge_index``, ``num_nodes``, ``x`` and the layers by name.
    """
    from torch_geometric.nn import GATv2Conv, TransformerConv

    from quest_geometric.geometry.graphs import sphere_graph
    from quest_geometric.nn.qsv_conv import QSVConv

    torch.manual_seed(0)
    template = sphere_graph(SIZES, k=K_WITHIN, k_cross=K_CROSS)
    n = template.num_nodes
    offsets = (torch.arange(batch_size) * n).repeat_interleave(template.edge_index.size(1))
    edge_index = (template.edge_index.repeat(1, batch_size) + offsets).to(device)
    num_nodes = n * batch_size
    x = torch.randn(num_nodes, CHANNELS, device=device)
    layers = {"QSVConv": QSVConv(CHANNELS, CHANNELS, heads=HEADS),
              "TransformerConv": TransformerConv(CHANNELS, CHANNELS // HEADS, heads=HEADS),
              "GATv2Conv": GATv2Conv(CHANNELS, CHANNELS // HEADS, heads=HEADS)}
    return edge_index, num_nodes, x, {name: m.to(device) for name, m in layers.items()}


def table_meta(batch_sizes: list[int], threads: list[int], device: torch.device, quick: bool,
               rounds: int) -> dict[str, Any]:
    """The conditions written with a table: the batch sizes and thread counts timed, the
    problem's sizes, the device, ``quick``, the rounds, their order and the load now."""
    return {"batch_sizes": list(batch_sizes), "threads": list(threads), "sizes": SIZES,
            "k": K_WITHIN + K_CROSS, "channels": CHANNELS, "heads": HEADS, "dtype": "float32",
            "device": str(device), "seed": 0, "quick": quick, "rounds": rounds,
            "round_order": f"shuffled every round (seed {ROUND_SEED})", "load": load_average()}


def step(layer: torch.nn.Module, x: torch.Tensor,
         edge_index: torch.Tensor) -> Callable[[], None]:
    """One forward + backward of ``layer`` on a copy of ``x`` that requires gradients,
    gradients cleared first."""
    xr = x.clone().requires_grad_(True)

    def run_step() -> None:
        layer.zero_grad(set_to_none=True)
        xr.grad = None
        layer(xr, edge_index).square().mean().backward()

    return run_step


def timed_rows(layers: Mapping[str, torch.nn.Module], steps: Mapping[str, Callable[[], None]],
               mem: Mapping[str, float], graphs: int, edge_index: torch.Tensor, num_nodes: int,
               repeat: int, device: torch.device) -> list[dict]:
    """Time ``steps`` (one per row name, the layer of each in ``layers``) at torch's current
    thread count and return one row per layer.

    The layers are timed in turn, round by round (:func:`time_interleaved`, order shuffled
    every round with :data:`ROUND_SEED`) so that all meet the same background load;
    ``speedup_vs_transformer`` is the median over rounds of TransformerConv's time over the
    layer's (every round's in ``round_ratios``). ``mem`` holds each row's peak memory and
    ``fwd_gflop`` comes from :func:`forward_flops` of the layer's class.
    """
    timed = time_interleaved(dict(steps), warmup=1, repeat=repeat, device=device,
                             shuffle_seed=ROUND_SEED)
    return [{
        "graphs": graphs, "threads": torch.get_num_threads(), "layer": name,
        "params": sum(p.numel() for p in layer.parameters()), "nodes": num_nodes,
        "edges": edge_index.size(1),
        "fwd_gflop": forward_flops(type(layer).__name__, num_nodes, edge_index.size(1)) / 1e9,
        "fwd_bwd_ms": 1e3 * timed[name]["median_s"],
        "std_ms": 1e3 * timed[name]["std_s"], "peak_mb": mem[name],
        "speedup_vs_transformer": ratio_summary(
            round_ratios(timed, "TransformerConv", name))["median"],
        "round_ratios": round_ratios(timed, "TransformerConv", name),
        "round_positions": timed[name]["positions"],
        "memory_vs_transformer": (mem[name] / mem["TransformerConv"]
                                  if mem["TransformerConv"] else math.nan),
    } for name, layer in layers.items()]


def summary(layers: list[dict]) -> list[str]:
    """One line per QSVConv row: its time, and its speed and peak memory against
    TransformerConv's."""
    return [
        f"QSVConv forward+backward {q['fwd_bwd_ms']:.0f} ms on {q['graphs']} graphs ({q['nodes']} "
        f"nodes) at {q['threads']} thread(s): {q['speedup_vs_transformer']:.2f}x "
        f"TransformerConv's speed, {q['memory_vs_transformer']:.2f}x its peak memory"
        for q in layers if q["layer"] == "QSVConv"
    ]


#: The columns of the table, in order.
COLUMNS = ["graphs", "threads", "layer", "params", "fwd_gflop", "flops_vs_transformer", "nodes",
           "edges", "fwd_bwd_ms", "std_ms", "peak_mb", "speedup_vs_transformer",
           "memory_vs_transformer"]


def write_tables(layers: list[dict], out_dir: Path, meta: dict) -> dict[str, Path]:
    """Write the table (its ``flops_vs_transformer`` column filled in from the rows'
    ``fwd_gflop``) with its notes, for :func:`run` and for the ``--rewrite`` of a committed
    table (:func:`rewrite`)."""
    by_batch = {(r["graphs"], r["threads"], r["layer"]): r for r in layers}
    for r in layers:
        ref = by_batch.get((r["graphs"], r["threads"], "TransformerConv"))
        r["flops_vs_transformer"] = r["fwd_gflop"] / ref["fwd_gflop"] if ref else math.nan
    params = {r["layer"]: r["params"] for r in layers}
    return write_results(
        "qsv_layer_speed", layers, out_dir, meta=meta, title="QSVConv vs PyG attention layers",
        columns=COLUMNS,
        notes="Forward + backward of one layer on a batch of sphere graphs, the three layers "
              "timed in turn round by round; `speedup_vs_transformer` is the median over rounds "
              "of TransformerConv's time over the layer's (the mean of the two middle rounds for "
              "an even count; runs from this version shuffle the order within each round and save "
              "every round's ratio in the JSON file's `round_ratios`). Peak memory is the "
              "resident-set high-water mark added by one step (CPU) or allocator peak (CUDA), "
              "measured once per batch. `params`: the layer's parameters (QSVConv "
              f"{params.get('QSVConv', 'n/a'):,}, TransformerConv "
              f"{params.get('TransformerConv', 'n/a'):,}, GATv2Conv "
              f"{params.get('GATv2Conv', 'n/a'):,}): QSVConv has no value map and a 4-per-head "
              "quaternion map where TransformerConv has four C x C maps. `fwd_gflop`: forward "
              "FLOPs by formula (`benchmarks.qsv.layer_speed.forward_flops`; multiply-add = 2; "
              "dense maps and per-edge work, no softmax exponentials or index operations; "
              "backward about 2x more), so a speed-up can be read against the work each layer "
              "does: "
              "`flops_vs_transformer` is the layer's share of TransformerConv's FLOPs.",
    )


#: The layers that get a compiled row with ``compiled=True``, and the suffix of its name.
COMPILED_LAYERS = ("QSVConv", "TransformerConv")
COMPILED_SUFFIX = " (compiled)"


def base_layer(name: str) -> str:
    """The layer a row measures: ``'QSVConv (compiled)'`` -> ``'QSVConv'``."""
    return name[:-len(COMPILED_SUFFIX)] if name.endswith(COMPILED_SUFFIX) else name


def layer_rows(batch_size: int, device: torch.device, repeat: int, progress: bool = False,
               threads: Sequence[Optional[int]] = (None,), compiled: bool = False,
               backend: str = "inductor") -> list[dict]:
    """Time and memory of one forward + backward per layer on the batched sphere graph
    (:func:`timed_rows`: the layers timed in turn, round by round,
    ``speedup_vs_transformer`` the median over rounds of TransformerConv's time over the
    layer's). Each entry of ``threads`` (``None``: torch's
    setting) gives one set of rows; peak memory is measured once per layer (not for
    compiled rows on CPU, which cannot run in the forked child that measures it: NaN).

    With ``compiled``, the layers of :data:`COMPILED_LAYERS` also run as
    ``torch.compile(layer, fullgraph=True, backend=backend)`` (rows ``'<layer> (compiled)'``),
    compiled before anything is measured; the compiled QSVConv gets ``dense=True`` when the
    graph has the dense layout.
    """
    edge_index, num_nodes, x, layers = problem(batch_size, device)
    steps = {name: step(layer, x, edge_index) for name, layer in layers.items()}
    if compiled:
        from quest_geometric.nn.qsv_conv import QSVConv

        torch._dynamo.reset()
        for name in COMPILED_LAYERS:
            cname = name + COMPILED_SUFFIX
            layers[cname] = layers[name]
            kwargs = ({"dense": True} if name == "QSVConv"
                      and QSVConv.is_dense_layout(edge_index, num_nodes) else {})
            steps[cname] = _compiled_step(layers[name], x, edge_index, backend, kwargs)
            steps[cname]()  # compile outside every measurement
    # a compiled layer cannot run in the forked child that measures CPU memory (its compiler
    # workers live in this process): its memory is not measured on CPU
    mem = {name: (math.nan if name.endswith(COMPILED_SUFFIX) and device.type == "cpu"
                  else peak_memory_mb(fn, device=device)) for name, fn in steps.items()}
    rows = []
    previous = torch.get_num_threads()
    try:
        for nt in tqdm(threads, desc=f"threads ({batch_size} graphs)", disable=not progress):
            if nt is not None:
                torch.set_num_threads(int(nt))
            rows += timed_rows(layers, steps, mem, batch_size, edge_index, num_nodes, repeat,
                               device)
    finally:
        torch.set_num_threads(previous)
    return rows


def _compiled_step(layer: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor,
                   backend: str, kwargs: dict[str, Any]) -> Any:
    """One forward + backward of ``torch.compile(layer, fullgraph=True, backend=backend)``
    on a copy of ``x`` that requires gradients."""
    call = torch.compile(layer, fullgraph=True, backend=backend)
    xr = x.clone().requires_grad_(True)

    def step() -> None:
        layer.zero_grad(set_to_none=True)
        xr.grad = None
        call(xr, edge_index, **kwargs).square().mean().backward()

    return step


def _as_tuple(value: Union[int, Sequence[int], None], name: str) -> Optional[tuple[int, ...]]:
    if value is None:
        return None
    values = (value,) if isinstance(value, int) else tuple(value)
    if not values or any(isinstance(v, bool) or int(v) < 1 for v in values):
        raise ValueError(f"run: '{name}' must be positive integers (got {value!r})")
    return tuple(int(v) for v in values)


def run(quick: bool = False, device: torch.device | str = "cpu",
        out_dir: str | Path = "benchmarks/qsv/results", progress: bool = True,
        batch_size: Union[int, Sequence[int], None] = None,
        threads: Union[int, Sequence[int], None] = None, compiled: bool = False,
        backend: str = "inductor") -> dict[str, Any]:
    """Run the benchmark and write ``qsv_layer_speed.*`` to ``out_dir``.

    Args:
        quick (bool): batch 8 instead of batches of 16 and 64 graphs.
        device (str): ``'cpu'`` or ``'cuda'``.
        out_dir (str): result folder.
        progress (bool): progress bars.
        batch_size (int or sequence of int, optional): the numbers of graphs in the batch,
            one set of rows each. (default: ``8`` with ``quick``, else ``(16, 64)``)
        threads (int or sequence of int, optional): torch intra-op thread counts, one set of
            layer rows each (restored afterwards); on a shared machine one thread gives
            stable numbers. (default: torch's setting with ``quick``, else one thread and
            torch's setting)
        compiled (bool): also time ``torch.compile`` of QSVConv and TransformerConv (rows
            ``'<layer> (compiled)'``, see :func:`layer_rows`). (default: :obj:`False`)
        backend (str): the :func:`torch.compile` backend of the compiled rows.
            (default: :obj:`'inductor'`)

    Returns:
        dict: ``layers`` rows, ``markdown`` (the table) and a short ``summary``.
    """
    device = torch.device(device)
    out_dir = Path(out_dir)
    sizes = _as_tuple(batch_size, "batch_size") or ((8,) if quick else (16, 64))
    counts = _as_tuple(threads, "threads")
    if counts is None:
        counts = ((torch.get_num_threads(),) if quick
                  else tuple(dict.fromkeys((1, torch.get_num_threads()))))
    repeat = 5 if quick else 7
    layers = [row for bs in sizes
              for row in layer_rows(bs, device, repeat, progress, threads=counts,
                                    compiled=compiled, backend=backend)]
    meta = table_meta(list(sizes), list(counts), device, quick, repeat)
    if compiled:
        meta["compile_backend"] = backend
    p1 = write_tables(layers, out_dir, meta)
    return {"layers": layers, "markdown": p1["md"].read_text(), "summary": summary(layers)}


def rewrite(results: Union[str, Path], out_dir: Union[str, Path, None] = None) -> dict[str, Any]:
    """Rewrite a committed table from its JSON file (read as data) with the parameter and
    FLOP columns, timing nothing: the measured columns and the metadata are kept.

    Args:
        results (path): ``qsv_layer_speed.json``.
        out_dir (path, optional): where to write (default: beside ``results``).

    Returns:
        dict: ``layers`` and ``markdown``.
    """
    path = Path(results)
    doc = json.loads(path.read_text())
    layers, meta = doc["rows"], doc["meta"]
    for r in layers:
        r["fwd_gflop"] = forward_flops(base_layer(r["layer"]), r["nodes"], r["edges"],
                                       meta["channels"], meta["heads"]) / 1e9
    p = write_tables(layers, Path(out_dir) if out_dir is not None else path.parent, meta)
    return {"layers": layers, "markdown": p["md"].read_text()}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry of ``python -m benchmarks.qsv.layer_speed``."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 8")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, nargs="+", default=None,
                        help="graphs per batch (default: 16 64; 8 with --quick)")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="torch intra-op thread counts (default: 1 and torch's choice)")
    parser.add_argument("--compiled", action="store_true",
                        help="also time torch.compile of QSVConv and TransformerConv")
    parser.add_argument("--backend", default="inductor",
                        help="torch.compile backend of the --compiled rows")
    parser.add_argument("--out", default="benchmarks/qsv/results")
    parser.add_argument("--rewrite", default=None, metavar="JSON",
                        help="time nothing: rewrite this committed table with the parameter "
                             "and FLOP columns")
    args = parser.parse_args(argv)
    if args.rewrite:
        print(rewrite(args.rewrite, args.out)["markdown"])
        return
    result = run(quick=args.quick, device=args.device, out_dir=args.out,
                 batch_size=args.batch_size, threads=args.threads, compiled=args.compiled,
                 backend=args.backend)
    print(result["markdown"])

if __name__ == "__main__":
    main()
