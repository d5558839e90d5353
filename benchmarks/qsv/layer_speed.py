"""QSVConv vs TransformerConv / GATv2Conv (forward + backward, peak memory) on batched
sphere graphs.

    python -m benchmarks.qsv.layer_speed [--quick] [--threads 1] [--device cuda]

The tour's pipeline lives in :mod:`quest_geometric.pipelines.qsv_layer_speed` (one batch
size at one thread count); several batch sizes and thread counts, the ``torch.compile`` rows
(``--compiled``), the command line and the ``--rewrite`` of a committed table live here.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from tqdm.auto import tqdm

from benchmarks.qsv.pipelines import qsv_layer_speed
from benchmarks.qsv.pipelines.qsv_layer_speed import (forward_flops, summary, table_meta,
                                                       timed_rows, write_tables)
from quest_geometric.profile import peak_memory_mb

#: The layers that get a compiled row with ``compiled=True``, and the suffix of its name.
COMPILED_LAYERS = ("QSVConv", "TransformerConv")
COMPILED_SUFFIX = " (compiled)"


def base_layer(name: str) -> str:
    """The layer a row measures: ``'QSVConv (compiled)'`` -> ``'QSVConv'``."""
    return name[:-len(COMPILED_SUFFIX)] if name.endswith(COMPILED_SUFFIX) else name


def layer_rows(batch_size: int, device: torch.device, repeat: int, progress: bool,
               threads: Sequence[Optional[int]] = (None,), compiled: bool = False,
               backend: str = "inductor") -> list[dict]:
    """Time and memory of one forward + backward per layer on the batched sphere graph
    (:func:`~quest_geometric.pipelines.qsv_layer_speed.timed_rows`: the layers timed in
    turn, round by round, ``speedup_vs_transformer`` the median over rounds of
    TransformerConv's time over the layer's). Each entry of ``threads`` (``None``: torch's
    setting) gives one set of rows; peak memory is measured once per layer (not for
    compiled rows on CPU, which cannot run in the forked child that measures it: NaN).

    With ``compiled``, the layers of :data:`COMPILED_LAYERS` also run as
    ``torch.compile(layer, fullgraph=True, backend=backend)`` (rows ``'<layer> (compiled)'``),
    compiled before anything is measured; the compiled QSVConv gets ``dense=True`` when the
    graph has the dense layout.
    """
    edge_index, num_nodes, x, layers = qsv_layer_speed.problem(batch_size, device)
    steps = {name: qsv_layer_speed.step(layer, x, edge_index) for name, layer in layers.items()}
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
    if not values or any(int(v) < 1 for v in values):
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
    parser = argparse.ArgumentParser(description=qsv_layer_speed.__doc__,
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

