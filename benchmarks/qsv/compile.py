"""Is ``torch.compile`` of :class:`~quest_geometric.nn.QSVConv` and of a
:class:`~quest_geometric.models.QSVNet` no slower than eager, and in which form should the
rotations run?

Three subjects, each eager and compiled (``torch.compile(..., fullgraph=True)``, inductor),
forward (no gradient) and forward + backward, at each thread count:

* ``rotation``: the per-node rotation of the features alone
  (:func:`~quest_geometric.quaternion.rotate_vector_parts`, ``[N, 1, 16, 4]`` features,
  ``[N, 1, 3, 3]`` matrices) by its two methods, the batched product (the eager layer's
  without native kernels) and the elementwise sum (the traced layer's without them), and by
  the native kernel where it is built: the measurement behind those choices;
* ``layer``: ``QSVConv(64, 64, heads=1)`` on the kNN graph (k = 20, self loops, the dense
  layout) of N Fibonacci points, called with ``dense=True``;
* ``net``: ``QSVNet(3, 10, channels=64, heads=4, num_layers=4)`` on a batch of the sphere
  graphs of :mod:`~benchmarks.qsv.layer_speed` (1,344 nodes each, in-degree
  16), called as a user calls it (``dense=None``: the layout is found at run time, inside the
  custom operator ``quest_geometric::qsv_attend_graph`` where the native kernels apply), and
  compiled once more with every ``QSVConv`` built with ``dense=True`` (the graphs are dense),
  which leaves that choice out of the compiled graph.

The variants of one subject, thread count and pass are timed in the same rounds, in an order
shuffled every round (:func:`~quest_geometric.profile.time_interleaved`), and
``vs_eager`` is the true median over rounds of time(eager) / time(variant) (every round's
ratio is saved in the JSON file). The number of graph breaks (``torch._dynamo.explain``) and
the first call's time (``compile_s``) are recorded per compiled subject.

Run ``python -m benchmarks.qsv.compile`` (``--quick`` for small sizes).
"""
from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from quest_geometric.profile import (
    load_average,
    ratio_summary,
    round_ratios,
    time_interleaved,
    write_results,
)
from quest_geometric.nn import qsv_native_status

#: Points of the layer subject (the torch-harmonics comparison's sizes).
LAYER_POINTS = (16_200, 64_800)
#: Graphs per batch of the net subject.
NET_GRAPHS = (16,)
QUICK_LAYER_POINTS = (4_050,)
QUICK_NET_GRAPHS = (2,)
CHANNELS = 64
K = 20
ROUND_SEED = 0
EAGER = "eager"
COMPILED = "compiled"
#: The net's third variant: compiled with every QSVConv told its graphs are dense.
COMPILED_DENSE = "compiled, dense=True"

Step = Callable[[], Any]


def _layer_graph(points: int) -> torch.Tensor:
    from quest_geometric.geometry.fibonacci import fibonacci_sphere
    from quest_geometric.geometry.knn import knn_graph

    return knn_graph(fibonacci_sphere(points), K, loop=True)


def _steps(call: Callable[..., torch.Tensor], args: tuple, grad_args: tuple[int, ...],
           params: Sequence[torch.nn.Parameter]) -> dict[str, Step]:
    """``{'forward': ..., 'forward+backward': ...}`` for one callable: the forward without
    gradients, and the forward + backward of the mean square of the output with leaf copies
    of the arguments at ``grad_args`` (and the parameters) receiving gradients."""
    leaves = tuple(a.detach().clone().requires_grad_(True) if i in grad_args else a
                   for i, a in enumerate(args))

    def forward() -> None:
        with torch.no_grad():
            call(*args)

    def forward_backward() -> None:
        for p in params:
            p.grad = None
        for i in grad_args:
            leaves[i].grad = None
        call(*leaves).square().mean().backward()

    return {"forward": forward, "forward+backward": forward_backward}


def _graph_breaks(fn: Callable[..., Any], *args: Any) -> int:
    torch._dynamo.reset()
    return int(torch._dynamo.explain(fn)(*args).graph_break_count)


def subjects(quick: bool = False, backend: str = "inductor") -> list[dict[str, Any]]:
    """The measured subjects: name, size, the variants' callables (name -> ``(call, args,
    grad_args, params)``) and a function giving the graph breaks of the compiled form."""
    from quest_geometric.models.qsv_net import QSVNet
    from benchmarks.qsv.layer_speed import K_CROSS, K_WITHIN, SIZES
    from quest_geometric.geometry.graphs import sphere_graph
    from quest_geometric.nn import qsv_native_available
    from quest_geometric.nn.qsv_conv import QSVConv
    from quest_geometric.quaternion import (
        ROTATE_METHODS,
        normalize,
        rotate_vector_parts,
        to_rotation_matrix,
    )
    from torch_geometric.data import Batch, Data

    def _compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(fn, fullgraph=True, backend=backend)

    out = []
    for points in (QUICK_LAYER_POINTS if quick else LAYER_POINTS):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(points, 1, CHANNELS // 4, 4, generator=g)
        rot = to_rotation_matrix(normalize(torch.randn(points, 1, 4, generator=g)))
        variants, forms = {}, []
        for form in ROTATE_METHODS:
            def fn(r: torch.Tensor, v: torch.Tensor, form: str = form) -> torch.Tensor:
                return rotate_vector_parts(r, v, method=form)

            forms.append(fn)
            variants[f"{EAGER}, {form}"] = (fn, (rot, x), (0, 1), ())
            variants[f"{COMPILED}, {form}"] = (_compiled(fn), (rot, x), (0, 1), ())
        if qsv_native_available():  # the native kernel, which the layer runs where built
            def native_fn(r: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                # the registered operator (quest_geometric.nn's QSVConv calls the same)
                return torch.ops.quest_geometric.qsv_rotate(r, v, False)

            forms.append(native_fn)
            variants[f"{EAGER}, native"] = (native_fn, (rot, x), (0, 1), ())
            variants[f"{COMPILED}, native"] = (_compiled(native_fn), (rot, x), (0, 1), ())
        out.append({"subject": "rotation", "size": points, "edges": 0, "variants": variants,
                    "reference": f"{EAGER}, bmm",
                    # the most graph breaks of either form
                    "graph_breaks": lambda forms=forms, a=(rot, x): max(
                        _graph_breaks(f, *a) for f in forms)})
    for points in (QUICK_LAYER_POINTS if quick else LAYER_POINTS):
        torch.manual_seed(0)
        edge_index = _layer_graph(points)
        conv = QSVConv(CHANNELS, CHANNELS, heads=1)
        x = torch.randn(points, CHANNELS)
        params = list(conv.parameters())

        def layer(h: torch.Tensor, conv=conv, edge_index=edge_index) -> torch.Tensor:
            return conv(h, edge_index, dense=True)

        out.append({"subject": "layer", "size": points, "edges": edge_index.size(1),
                    "variants": {EAGER: (layer, (x,), (0,), params),
                                 COMPILED: (_compiled(layer), (x,), (0,), params)},
                    "reference": EAGER,
                    "graph_breaks": lambda fn=layer, x=x: _graph_breaks(fn, x)})
    for graphs in (QUICK_NET_GRAPHS if quick else NET_GRAPHS):
        torch.manual_seed(0)
        template = sphere_graph(SIZES, k=K_WITHIN, k_cross=K_CROSS)
        # batched as a DataLoader batches (Batch.from_data_list records the number of
        # graphs; a hand-built Batch would count them from the data, a graph break)
        data = Batch.from_data_list([Data(x=torch.randn(template.num_nodes, 3),
                                          edge_index=template.edge_index)
                                     for _ in range(graphs)])
        nodes, edge_index = data.num_nodes, data.edge_index
        net = QSVNet(3, 10, channels=CHANNELS, heads=4, num_layers=4)
        params = list(net.parameters())
        # the same net told that its graphs are dense (QSVConv(dense=True)): compiled
        # without finding the layout at run time
        net_dense = copy.deepcopy(net)
        for module in net_dense.modules():
            if isinstance(module, QSVConv):
                module.dense = True
        params_dense = list(net_dense.parameters())
        out.append({"subject": "net", "size": nodes, "edges": edge_index.size(1),
                    "variants": {EAGER: (net, (data,), (), params),
                                 COMPILED: (_compiled(net), (data,), (), params),
                                 COMPILED_DENSE: (_compiled(net_dense), (data,), (),
                                                  params_dense)},
                    "reference": EAGER,
                    "graph_breaks": lambda net=net, data=data: _graph_breaks(net, data)})
    return out


def compile_rows(quick: bool = False, threads: Sequence[Optional[int]] = (1, 2),
                 repeat: int = 7, progress: bool = True, backend: str = "inductor"
                 ) -> list[dict[str, Any]]:
    """One row per subject, size, thread count, pass and variant (see the module), compiled
    with ``backend``."""
    rows = []
    previous = torch.get_num_threads()
    try:
        for subject in subjects(quick, backend):
            breaks = subject["graph_breaks"]()
            torch._dynamo.reset()
            compile_s: dict[str, float] = {}
            steps: dict[str, dict[str, Step]] = {}
            for name, (call, args, grad_args, params) in subject["variants"].items():
                steps[name] = _steps(call, args, grad_args, params)
                if name.startswith(COMPILED):  # compile both passes outside the timings
                    t0 = time.perf_counter()
                    steps[name]["forward"]()
                    steps[name]["forward+backward"]()
                    compile_s[name] = time.perf_counter() - t0
            for nt in threads:
                if nt is not None:
                    torch.set_num_threads(int(nt))
                for what in ("forward", "forward+backward"):
                    load = load_average()
                    timed = time_interleaved({n: s[what] for n, s in steps.items()}, warmup=1,
                                             repeat=repeat, shuffle_seed=ROUND_SEED)
                    for name in steps:
                        ratios = round_ratios(timed, subject["reference"], name)
                        rows.append({
                            "subject": subject["subject"], "size": subject["size"],
                            "edges": subject["edges"], "threads": torch.get_num_threads(),
                            "pass": what, "variant": name,
                            "ms": 1e3 * timed[name]["median_s"],
                            "std_ms": 1e3 * timed[name]["std_s"],
                            "vs_eager": ratio_summary(ratios)["median"],
                            "vs_eager_min": min(ratios), "vs_eager_max": max(ratios),
                            "round_ratios": ratios,
                            "graph_breaks": breaks if name.startswith(COMPILED) else None,
                            "compile_s": compile_s.get(name), "load": load})
                    if progress:
                        print(f"[compile] {subject['subject']} {subject['size']} {nt} thr "
                              f"{what}: " + ", ".join(
                                  f"{n} {1e3 * timed[n]['median_s']:.2f} ms" for n in steps),
                              flush=True)
    finally:
        torch.set_num_threads(previous)
    return rows


def verdict_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per subject, size and thread count: the compiled layer's and net's speed-up over eager
    in both passes and whether the target (no slower than eager in the whole forward +
    backward and in the forward, no graph breaks) is met; for the rotation, which form is
    faster eagerly and compiled."""
    by: dict[tuple, dict] = {}
    for r in rows:
        by.setdefault((r["subject"], r["size"], r["threads"]), {})[(r["pass"], r["variant"])] = r
    out = []
    for (subject, size, threads), cell in by.items():
        if subject == "rotation":
            row = {"subject": subject, "size": size, "threads": threads}
            for what in ("forward", "forward+backward"):
                for mode in (EAGER, COMPILED):
                    b = cell.get((what, f"{mode}, bmm"))
                    for form in ("elementwise", "native"):
                        e = cell.get((what, f"{mode}, {form}"))
                        if b and e:
                            # per round time(ref)/time(e) over time(ref)/time(b) =
                            # time(b)/time(e): > 1 when that form is faster (same rounds)
                            row[f"{mode}_{what}_{form}_vs_bmm"] = ratio_summary(
                                [re / rb for re, rb in zip(e["round_ratios"],
                                                           b["round_ratios"])])["median"]
            out.append(row)
            continue
        c_f, c_fb = cell.get(("forward", COMPILED)), cell.get(("forward+backward", COMPILED))
        if not (c_f and c_fb):
            continue
        row = {"subject": subject, "size": size, "threads": threads,
               "fwd_vs_eager": c_f["vs_eager"], "fb_vs_eager": c_fb["vs_eager"],
               "graph_breaks": c_fb["graph_breaks"],
               "target_met": (min(c_f["vs_eager"], c_fb["vs_eager"]) >= 1.0
                              and c_fb["graph_breaks"] == 0)}
        d_f = cell.get(("forward", COMPILED_DENSE))
        d_fb = cell.get(("forward+backward", COMPILED_DENSE))
        if d_f and d_fb:  # the net with QSVConv(dense=True), against the same eager net
            row.update(dense_fwd_vs_eager=d_f["vs_eager"], dense_fb_vs_eager=d_fb["vs_eager"])
        out.append(row)
    return out


COLUMNS = ["subject", "size", "edges", "threads", "pass", "variant", "ms", "std_ms",
           "vs_eager", "vs_eager_min", "vs_eager_max", "graph_breaks", "compile_s", "load"]


def run(quick: bool = False, out_dir: str | Path = "benchmarks/qsv/results",
        threads: Sequence[Optional[int]] = (1, 2), machine: Optional[str] = None,
        progress: bool = True, backend: str = "inductor") -> dict[str, Any]:
    """Time every subject and write ``qsv_compile[_quick].{csv,json,md}`` and the verdict
    ``qsv_compile_targets[_quick].*``."""
    suffix = "_quick" if quick else ""
    note = machine or ("not stated: timings may come from a shared machine and are then "
                       "indicative only")
    meta = {"threads_measured": list(threads), "quick": quick, "seed": 0, "dtype": "float32",
            "backend": backend, "round_seed": ROUND_SEED, "load_at_start": load_average(),
            "machine_note": note}
    rows = compile_rows(quick, threads, repeat=3 if quick else 7, progress=progress,
                        backend=backend)
    meta["load_at_end"] = load_average()
    p = write_results(
        f"qsv_compile{suffix}", rows, out_dir, meta=meta, columns=COLUMNS,
        title="torch.compile of QSVConv and QSVNet against eager",
        notes=("Forward (no gradient) and forward + backward (mean square of the output) of "
               "each subject, the variants of one subject, thread count and pass timed in the "
               "same rounds in a shuffled order. `vs_eager`: true median over rounds of "
               "time(reference) / time(variant) (> 1: faster than the reference; the reference "
               "is the eager layer or net, and the eager batched-product form for the "
               "rotation), with the rounds' range; every round's ratio is in the JSON file. "
               "`graph_breaks`: torch._dynamo.explain of the compiled subject; `compile_s`: "
               "first forward and forward + backward calls (compilation included). Layer: "
               f"QSVConv({CHANNELS}, {CHANNELS}, heads=1) on the kNN graph (k = {K}, self "
               "loops) of `size` Fibonacci points, dense=True; net: QSVNet(3, 10, channels=64, "
               "heads=4, num_layers=4) on batched sphere graphs of `size` nodes, dense=None. "
               f"Machine: {note}."))
    verdict = verdict_rows(rows)
    q = write_results(
        f"qsv_compile_targets{suffix}", verdict, out_dir, meta=meta,
        columns=["subject", "size", "threads", "fwd_vs_eager", "fb_vs_eager", "graph_breaks",
                 "target_met", "dense_fwd_vs_eager", "dense_fb_vs_eager",
                 "eager_forward_elementwise_vs_bmm",
                 "eager_forward+backward_elementwise_vs_bmm",
                 "compiled_forward_elementwise_vs_bmm",
                 "compiled_forward+backward_elementwise_vs_bmm",
                 "eager_forward_native_vs_bmm", "eager_forward+backward_native_vs_bmm",
                 "compiled_forward_native_vs_bmm", "compiled_forward+backward_native_vs_bmm"],
        title="Compiled no slower than eager (issue 27), and the rotation's form",
        notes=("`fwd_vs_eager`, `fb_vs_eager`: the compiled subject's paired speed-up over "
               "eager; `target_met`: both >= 1 and no graph break. Net rows: "
               "`dense_fwd_vs_eager`, `dense_fb_vs_eager` the same for the net compiled with "
               "QSVConv(dense=True) (the layout not found at run time), against the same "
               "eager net. "
               "Rotation rows: "
               "`<mode>_<pass>_elementwise_vs_bmm` = time(batched product) / "
               "time(elementwise sum) in that mode (> 1: the elementwise form is faster), "
               "and `<mode>_<pass>_native_vs_bmm` the same for the native kernel "
               "(quest_geometric.nn._qsv_native.rotate, which QSVConv runs in both modes "
               "where it is built), from the same rounds. The layer and net rows run the "
               f"native kernels where built (status: {qsv_native_status()['reason']}). "
               f"Machine: {note}."))
    return {"rows": rows, "targets": verdict,
            "markdown": p["md"].read_text() + "\n" + q["md"].read_text()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry of ``python -m benchmarks.qsv.compile``."""
    parser = argparse.ArgumentParser(
        description="torch.compile of QSVConv and QSVNet against eager (issue 27)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_LAYER_POINTS[0]:,} points and {QUICK_NET_GRAPHS[0]} "
                             "graphs, 3 rounds")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--machine", default=None,
                        help="what else ran on the machine (e.g. 'idle'), written beside the "
                             "tables")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--out", default="benchmarks/qsv/results")
    args = parser.parse_args(argv)
    result = run(args.quick, args.out, tuple(args.threads), args.machine,
                 backend=args.backend)
    print(result["markdown"])
    return result


if __name__ == "__main__":
    main()
