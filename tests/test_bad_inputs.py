"""The bad-input audit of issue 28 §8, as data: every case calls one public entry point with
one representative bad input (a wrong type, a wrong value, a wrong shape, a non-finite
value) and states the exception class and the function and argument the message must name.

The rule (``quest_geometric._utils.checks``): ``"<function>: '<argument>' must be ..., got
..."``, :class:`TypeError` for a wrong type (including a :obj:`bool` where an ``int`` is
expected and a non-tensor where a tensor is expected), :class:`ValueError` for a wrong value.
Add a row when adding a public entry point or an argument check.
"""
from __future__ import annotations

import functools
import os
import re
from typing import Any, Callable, NamedTuple

import pytest
import torch
from torch_geometric.data import Data

from quest_geometric import adapters, analysis, datasets, geometry, models, transforms
from quest_geometric import quaternion as Q
from quest_geometric.nn import QSVConv, QuaternionLinear
from quest_geometric import training
from quest_geometric.nn import focus as F
from quest_geometric.nn.focus.decode import focus_decode_attention
from quest_geometric.training.routers import block_order

NAN = float("nan")
INF = float("inf")


def _q(n: int = 6) -> torch.Tensor:
    return torch.randn(n, 2, 4)


def _g(n: int = 6) -> torch.Tensor:
    return torch.zeros(n, 1, dtype=torch.long)


def _soft(n: int = 6, k: int = 3) -> torch.Tensor:
    return torch.full((n, k), 1.0 / k)


def _img(c: int = 1, h: int = 8, w: int = 8) -> torch.Tensor:
    return torch.rand(c, h, w)


def _tiny_gpt() -> "models.CharGPT":
    return models.CharGPT(models.GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2,
                                           n_embd=8))


@functools.lru_cache(maxsize=1)
def _corpus() -> "datasets.CharCorpus":
    return datasets.CharCorpus(block_size=8)


def _mha_model() -> torch.nn.Module:
    """A model holding one torch MultiheadAttention composed with Focus (bidirectional)."""
    model = torch.nn.Sequential(torch.nn.MultiheadAttention(8, 2, batch_first=True))
    return F.compose_focus(model, num_groups=2, top_k=1, window=2, causal=False)


def _x(b: int = 1, t: int = 4, c: int = 8) -> torch.Tensor:
    return torch.randn(b, t, c)


def _qsv(**kw: Any) -> "models.QSVNet":
    return models.QSVNet(3, 5, channels=16, heads=2, **kw)


def _load_crafted_routers(**changes: Any) -> Any:
    """load_routers on a router folder whose config was changed as :obj:`changes` say and
    digested again (a consistent crafted file: only the bounds can refuse it)."""
    import json
    import tempfile

    from quest_geometric._utils.digested import pair_digest

    with tempfile.TemporaryDirectory() as folder:
        F.save_routers(F.compose_focus(_tiny_gpt(), num_groups=2, top_k=1, window=2), folder)
        cfg = os.path.join(folder, "focus_routers.json")
        with open(cfg) as f:
            meta = json.load(f)
        meta["config"].update(changes)
        with open(os.path.join(folder, "focus_routers.safetensors"), "rb") as f:
            meta["sha256"] = pair_digest(meta, f.read())
        with open(cfg, "w") as f:
            json.dump(meta, f)
        return F.load_routers(_tiny_gpt(), folder)


def _train_tiny_routers(**kw: Any) -> Any:
    """train_routers of a tiny composed CharGPT (never reached: the arguments are refused)."""
    model = F.compose_focus(_tiny_gpt(), num_groups=2, top_k=1, window=2)
    return training.train_routers(model, kw.pop("train", torch.zeros(2, 8, dtype=torch.long)),
                                  1, 1e-3, "never-written", **kw)


MHA = "compose_focus (MultiheadAttention)"


def _nan(*shape: int, value: float = NAN) -> torch.Tensor:
    """A random tensor of ``shape`` with one entry set to ``value`` (NaN by default)."""
    t = torch.rand(*shape)
    t.view(-1)[min(3, t.numel() - 1)] = value
    return t


def _nan_qkv(which: str | None, value: float = NAN) -> tuple[torch.Tensor, ...]:
    """Random ``[6, 2, 4]`` q, k, v with one ``value`` entry in ``which`` (none for None)."""
    qkv = {n: torch.randn(6, 2, 4) for n in ("q", "k", "v")}
    if which is not None:
        qkv[which][3, 1, 2] = value
    return qkv["q"], qkv["k"], qkv["v"]


class Case(NamedTuple):
    id: str
    call: Callable[[], Any]
    exc: type
    where: str
    arg: str


CASES = [
    # ---- nn: QSVConv, QuaternionLinear
    Case("QSVConv-out_channels-float", lambda: QSVConv(16, 16.0), TypeError, "QSVConv",
         "out_channels"),
    Case("QSVConv-in_channels-float", lambda: QSVConv(16.0, 16), TypeError, "QSVConv",
         "in_channels"),
    Case("QSVConv-in_channels-zero", lambda: QSVConv(0, 16), ValueError, "QSVConv",
         "in_channels"),
    Case("QSVConv-out_channels-multiple", lambda: QSVConv(12, 12, heads=2), ValueError,
         "QSVConv", "out_channels"),
    Case("QSVConv-heads-bool", lambda: QSVConv(16, 16, heads=True), TypeError, "QSVConv", "heads"),
    Case("QSVConv-heads-zero", lambda: QSVConv(16, 16, heads=0), ValueError, "QSVConv", "heads"),
    Case("QSVConv-quaternion-value", lambda: QSVConv(16, 16, quaternion="edge"), ValueError,
         "QSVConv", "quaternion"),
    Case("QSVConv-quaternion-type", lambda: QSVConv(16, 16, quaternion=1), TypeError, "QSVConv",
         "quaternion"),
    Case("QSVConv-temperature-nan", lambda: QSVConv(16, 16, temperature=NAN), ValueError,
         "QSVConv", "temperature"),
    Case("QSVConv-dropout-range", lambda: QSVConv(16, 16, dropout=2.0), ValueError, "QSVConv",
         "dropout"),
    Case("QSVConv-transport-type", lambda: QSVConv(16, 16, transport="yes"), TypeError, "QSVConv",
         "transport"),
    Case("QSVConv.forward-x-list",
         lambda: QSVConv(16, 16)("x", torch.zeros(2, 0, dtype=torch.long)),
         TypeError, "QSVConv", "x"),
    Case("QSVConv.forward-x-int", lambda: QSVConv(16, 16)(torch.zeros(3, 16, dtype=torch.long),
                                                      torch.zeros(2, 0, dtype=torch.long)),
         TypeError, "QSVConv", "x"),
    Case("QSVConv.forward-x-shape", lambda: QSVConv(16, 16)(torch.randn(3, 8),
                                                        torch.zeros(2, 0, dtype=torch.long)),
         ValueError, "QSVConv", "x"),
    Case("QSVConv.forward-x-inf", lambda: QSVConv(16, 16)(torch.full((3, 16), INF),
                                                      torch.zeros(2, 0, dtype=torch.long)),
         ValueError, "QSVConv", "x"),
    Case("QSVConv.forward-edge_index-float", lambda: QSVConv(16, 16)(torch.randn(3, 16),
                                                                 torch.zeros(2, 1)),
         TypeError, "QSVConv", "edge_index"),
    Case("QSVConv.forward-edge_index-range", lambda: QSVConv(16, 16)(
        torch.randn(3, 16), torch.tensor([[0], [3]])), ValueError, "QSVConv", "edge_index"),
    # the index range, checked on every path (the dense [N, k] layout of k = 2 here, which the
    # native kernels take), and a finite input whose result overflows
    Case("QSVConv.forward-edge_index-huge", lambda: QSVConv(16, 16)(
        torch.randn(5, 16), torch.tensor([[0, 1, 2, 3, 10**9, 0, 1, 2, 3, 4],
                                          [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]])),
        ValueError, "QSVConv", "edge_index"),
    Case("QSVConv.forward-edge_index-just-past", lambda: QSVConv(16, 16)(
        torch.randn(5, 16), torch.tensor([[0, 1, 2, 3, 6, 0, 1, 2, 3, 4],
                                          [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]])),
        ValueError, "QSVConv", "edge_index"),
    Case("QSVConv.forward-x-overflows", lambda: QSVConv(16, 16)(
        torch.full((3, 16), 3e38), torch.tensor([[0, 1, 2], [1, 2, 0]])),
        ValueError, "QSVConv", "x"),
    Case("QSVConv.forward-return_attention_weights", lambda: QSVConv(16, 16)(
        torch.randn(3, 16), torch.tensor([[0], [1]]), return_attention_weights=1),
        TypeError, "QSVConv", "return_attention_weights"),
    Case("QuaternionLinear-in_channels-bool", lambda: QuaternionLinear(True, 4), TypeError,
         "QuaternionLinear", "in_channels"),
    Case("QuaternionLinear-in_channels-multiple", lambda: QuaternionLinear(6, 4), ValueError,
         "QuaternionLinear", "in_channels"),
    Case("QuaternionLinear.forward-x-dtype", lambda: QuaternionLinear(4, 4)(
        torch.randn(2, 4, dtype=torch.float64)), TypeError, "QuaternionLinear", "x"),
    # ---- quaternion
    Case("multiply-p-ndarray", lambda: Q.multiply(torch.zeros(4).numpy(), torch.zeros(4)),
         TypeError, "multiply", "p"),
    Case("normalize-q-shape", lambda: Q.normalize(torch.zeros(5, 3)), ValueError, "normalize",
         "q"),
    Case("rotate-v-shape", lambda: Q.rotate(torch.tensor([1.0, 0, 0, 0]), torch.zeros(4)),
         ValueError, "rotate", "v"),
    Case("random_unit-shape-negative", lambda: Q.random_unit(-1), ValueError, "random_unit",
         "shape"),
    Case("random_unit-dtype-int", lambda: Q.random_unit(3, dtype=torch.int64), TypeError,
         "random_unit", "dtype"),
    # ---- analysis metrics
    Case("participation_ratio-z-list", lambda: analysis.participation_ratio([[1.0]]), TypeError,
         "participation_ratio", "z"),
    Case("participation_ratio-z-nan", lambda: analysis.participation_ratio(
        torch.full((3, 2), NAN)), ValueError, "participation_ratio", "z"),
    Case("effective_rank-m-dims", lambda: analysis.effective_rank(torch.ones(3)), ValueError,
         "effective_rank", "m"),
    Case("attention_entropy-attn-complex", lambda: analysis.attention_entropy(
        torch.ones(2, 2, dtype=torch.complex64)), TypeError, "attention_entropy", "attn"),
    # ---- nn.focus: layers, routers, back-ends
    Case("FocusAttention-embed_dim-float", lambda: F.FocusAttention(8.0, 2), TypeError,
         "FocusAttention", "embed_dim"),
    Case("FocusAttention-num_groups-zero", lambda: F.FocusAttention(8, 2, num_groups=0),
         ValueError, "FocusAttention", "num_groups"),
    Case("FocusAttention-window-negative", lambda: F.FocusAttention(8, 2, window=-1),
         ValueError, "FocusAttention", "window"),
    Case("FocusAttention-backend-value", lambda: F.FocusAttention(8, 2, backend="flash"),
         ValueError, "FocusAttention", "backend"),
    Case("FocusAttention-backend-type", lambda: F.FocusAttention(8, 2, backend=3), TypeError,
         "FocusAttention", "backend"),
    Case("FocusAttention-gate_scale-nan", lambda: F.FocusAttention(8, 2, gate_scale=NAN),
         ValueError, "FocusAttention", "gate_scale"),
    Case("FocusAttention-gate_bias-str", lambda: F.FocusAttention(8, 2, gate_bias="1"),
         TypeError, "FocusAttention", "gate_bias"),
    Case("FocusAttention.forward-x-int", lambda: F.FocusAttention(8, 2, num_groups=2)(
        torch.zeros(4, 8, dtype=torch.long)), TypeError, "FocusAttention", "x"),
    Case("FocusAttention.forward-x-shape", lambda: F.FocusAttention(8, 2, num_groups=2)(
        torch.randn(8)), ValueError, "FocusAttention", "x"),
    Case("FocusAttention.forward-batch-float", lambda: F.FocusAttention(8, 2, num_groups=2)(
        torch.randn(4, 8), torch.zeros(4)), TypeError, "FocusAttention", "batch"),
    Case("FocusAttention-num_heads-float", lambda: F.FocusAttention(8, 2.0), TypeError,
         "FocusAttention", "num_heads"),
    Case("FocusAttention-embed_dim-divisible", lambda: F.FocusAttention(9, 2), ValueError,
         "FocusAttention", "embed_dim"),
    Case("FocusAttention.forward-batch-3d", lambda: F.FocusAttention(8, 2, num_groups=2)(
        torch.randn(1, 4, 8), torch.zeros(4, dtype=torch.long)), ValueError, "FocusAttention",
        "batch"),
    Case("FocusEdgeAttention.forward-edge_index-float", lambda: F.FocusEdgeAttention()(
        _q(), _q(), _q(), torch.zeros(2, 1)), TypeError, "FocusEdgeAttention", "edge_index"),
    Case("FocusEdgeAttention.forward-edge_index-range", lambda: F.FocusEdgeAttention()(
        _q(), _q(), _q(), torch.tensor([[0], [6]])), ValueError, "FocusEdgeAttention",
        "edge_index"),
    Case("group_balance-groups-float", lambda: F.group_balance(_g().float(), 2), TypeError,
         "group_balance", "groups"),
    Case("straight_through_membership-groups-float", lambda: F.straight_through_membership(
        _soft(), _g().float()), TypeError, "straight_through_membership", "groups"),
    Case("focus_soft_attention-gate-value", lambda: F.focus_soft_attention(
        _q(), _q(), _q(), _soft(), 1, gate="sigmoid"), ValueError, "focus_soft_attention",
        "gate"),
    Case("FocusRouter-in_channels-bool", lambda: F.FocusRouter(True), TypeError, "FocusRouter",
         "in_channels"),
    Case("FocusRouter-tau-zero", lambda: F.FocusRouter(8, tau=0.0), ValueError, "FocusRouter",
         "tau"),
    Case("FocusRouter-sinkhorn_iters-negative", lambda: F.FocusRouter(8, sinkhorn_iters=-1),
         ValueError, "FocusRouter", "sinkhorn_iters"),
    Case("FocusRouter.forward-h-list", lambda: F.FocusRouter(8, num_groups=2)([[0.0] * 8]),
         TypeError, "FocusRouter", "h"),
    Case("RandomGroupsRouter-seed-negative", lambda: F.RandomGroupsRouter(2, seed=-1),
         ValueError, "RandomGroupsRouter", "seed"),
    Case("RandomGroupsRouter.forward-h-int", lambda: F.RandomGroupsRouter(2)(
        torch.zeros(3, 4, dtype=torch.long)), TypeError, "RandomGroupsRouter", "h"),
    Case("topk_groups-top_k-bool", lambda: F.topk_groups(torch.randn(4, 3), True), TypeError,
         "topk_groups", "top_k"),
    Case("topk_groups-top_k-large", lambda: F.topk_groups(torch.randn(4, 3), 4), ValueError,
         "topk_groups", "top_k"),
    Case("focus_dense_attention-q-list", lambda: F.focus_dense_attention(
        [[0.0]], _q(), _q(), _g(), 1), TypeError, "focus_dense_attention", "q"),
    Case("focus_dense_attention-k-shape", lambda: F.focus_dense_attention(
        _q(), _q(5), _q(), _g(), 1), ValueError, "focus_dense_attention", "k"),
    Case("focus_dense_attention-v-dtype", lambda: F.focus_dense_attention(
        _q(), _q(), _q().double(), _g(), 1), TypeError, "focus_dense_attention", "v"),
    Case("focus_dense_attention-groups-float", lambda: F.focus_dense_attention(
        _q(), _q(), _q(), _g().float(), 1), TypeError, "focus_dense_attention", "groups"),
    Case("focus_dense_attention-window-float", lambda: F.focus_dense_attention(
        _q(), _q(), _q(), _g(), 1.0), TypeError, "focus_dense_attention", "window"),
    Case("focus_blocks_attention-groups-rows", lambda: F.focus_blocks_attention(
        _q(), _q(), _q(), _g(5), 1), ValueError, "focus_blocks_attention", "groups"),
    Case("focus_blocks_attention-batch-unsorted", lambda: F.focus_blocks_attention(
        _q(), _q(), _q(), _g(), 1, torch.tensor([1, 1, 1, 0, 0, 0])), ValueError,
        "focus_blocks_attention", "batch"),
    Case("focus_blocks_reference-num_groups-zero", lambda: F.focus_blocks_reference(
        _q(), _q(), _q(), _g(), 1, None, True, 0), ValueError, "focus_blocks_reference",
        "num_groups"),
    Case("focus_soft_attention-soft-int", lambda: F.focus_soft_attention(
        _q(), _q(), _q(), _soft().long(), 1), TypeError, "focus_soft_attention", "soft"),
    Case("focus_soft_attention-soft-shape", lambda: F.focus_soft_attention(
        _q(), _q(), _q(), _soft(5), 1), ValueError, "focus_soft_attention", "soft"),
    Case("focus_soft_attention-gate_scale-inf", lambda: F.focus_soft_attention(
        _q(), _q(), _q(), _soft(), 1, gate_scale=INF), ValueError, "focus_soft_attention",
        "gate_scale"),
    Case("focus_soft_attention-soft-nan", lambda: F.focus_soft_attention(
        _q(), _q(), _q(), torch.full((6, 3), NAN), 1), ValueError, "focus_soft_attention",
        "soft"),
    Case("focus_edge_index-window-bool", lambda: F.focus_edge_index(_g(), True), TypeError,
         "focus_edge_index", "window"),
    Case("focus_edge_index-groups-negative", lambda: F.focus_edge_index(-_g() - 1, 1),
         ValueError, "focus_edge_index", "groups"),
    Case("FocusEdgeAttention.forward-q-int", lambda: F.FocusEdgeAttention()(
        _q().long(), _q(), _q(), torch.zeros(2, 0, dtype=torch.long)), TypeError,
        "FocusEdgeAttention", "q"),
    Case("straight_through_pair_share-window-negative", lambda: F.straight_through_pair_share(
        _soft(), _g(), -1), ValueError, "straight_through_pair_share", "window"),
    Case("additive_gate_share-soft-list", lambda: F.additive_gate_share([[1.0]], 1), TypeError,
         "additive_gate_share", "soft"),
    Case("additive_gate_share-gate_bias-nan", lambda: F.additive_gate_share(
        _soft(), 1, gate_bias=NAN), ValueError, "additive_gate_share", "gate_bias"),
    Case("focus_block_mask-block_size-float", lambda: F.focus_block_mask(
        _g(32), 2, block_size=16.0), TypeError, "focus_block_mask", "block_size"),
    Case("focus_block_mask-block_size-multiple", lambda: F.focus_block_mask(
        _g(32), 2, block_size=24), ValueError, "focus_block_mask", "block_size"),
    Case("group_balance-batch-float", lambda: F.group_balance(
        _g(), 2, torch.zeros(6)), TypeError, "group_balance", "batch"),
    # ---- transforms
    Case("ImageToSphere-sizes-int", lambda: transforms.ImageToSphere(5), TypeError,
         "ImageToSphere", "sizes"),
    Case("ImageToSphere-sizes-empty", lambda: transforms.ImageToSphere(()), ValueError,
         "ImageToSphere", "sizes"),
    Case("ImageToSphere-radii-order", lambda: transforms.ImageToSphere(
        (8, 16), k=4, radii=(2.0, 1.0)), ValueError, "ImageToSphere", "radii"),
    Case("ImageToSphere-data-list", lambda: transforms.ImageToSphere((8, 16), k=4)([[1.0]]),
         TypeError, "ImageToSphere", "data"),
    Case("ImageToSphere-image-channels-last", lambda: transforms.ImageToSphere(
        (8, 16), k=4)(torch.rand(8, 8, 3)), ValueError, "ImageToSphere", "image"),
    Case("ImageToSphere-image-nan", lambda: transforms.ImageToSphere((8, 16), k=4)(
        torch.full((1, 8, 8), NAN)), ValueError, "ImageToSphere", "image"),
    Case("ImageToSphere.batch_call-images-list", lambda: transforms.ImageToSphere(
        (8, 16), k=4).batch_call([_img()]), TypeError, "ImageToSphere.batch_call", "images"),
    Case("ImageToSphere.batch_call-images-shape", lambda: transforms.ImageToSphere(
        (8, 16), k=4).batch_call(_img()), ValueError, "ImageToSphere.batch_call", "images"),
    Case("ImageToLattice-k-bool", lambda: transforms.ImageToLattice(k=True), TypeError,
         "ImageToLattice", "k"),
    Case("ImageToLattice-image-int", lambda: transforms.ImageToLattice(k=4)(
        torch.zeros(1, 4, 4, dtype=torch.long)), TypeError, "ImageToLattice", "image"),
    Case("RandomCropPad-padding-negative", lambda: transforms.RandomCropPad(8, padding=-1),
         ValueError, "RandomCropPad", "padding"),
    Case("RandomCropPad-padding-float", lambda: transforms.RandomCropPad(8, padding=1.0),
         TypeError, "RandomCropPad", "padding"),
    # ---- geometry
    Case("fibonacci_sphere-n-float", lambda: geometry.fibonacci_sphere(10.0), TypeError,
         "fibonacci_sphere", "n"),
    Case("fibonacci_sphere-n-zero", lambda: geometry.fibonacci_sphere(0), ValueError,
         "fibonacci_sphere", "n"),
    Case("concentric_spheres-sizes-str", lambda: geometry.concentric_spheres("8"), TypeError,
         "concentric_spheres", "sizes"),
    Case("concentric_spheres-radii-inf", lambda: geometry.concentric_spheres(
        (4, 8), (1.0, INF)), ValueError, "concentric_spheres", "radii"),
    Case("sphere_graph-k-zero", lambda: geometry.sphere_graph((8, 16), k=0), ValueError,
         "sphere_graph", "k"),
    Case("sphere_graph-k_cross-bool", lambda: geometry.sphere_graph((8, 16), k=4,
                                                                    k_cross=True),
         TypeError, "sphere_graph", "k_cross"),
    Case("lattice_graph-height-zero", lambda: geometry.lattice_graph(0, 4, 4), ValueError,
         "lattice_graph", "height"),
    Case("knn_graph-pos-list", lambda: geometry.knn_graph([[0.0, 1.0]], 1), TypeError,
         "knn_graph", "pos"),
    Case("knn_graph-pos-nan", lambda: geometry.knn_graph(torch.full((4, 3), NAN), 1),
         ValueError, "knn_graph", "pos"),
    Case("knn_graph-pos-shape", lambda: geometry.knn_graph(torch.rand(4), 1), ValueError,
         "knn_graph", "pos"),
    Case("knn_graph-k-bool", lambda: geometry.knn_graph(torch.rand(4, 3), True), TypeError,
         "knn_graph", "k"),
    Case("knn_graph-k-too-large", lambda: geometry.knn_graph(torch.rand(4, 3), 4), ValueError,
         "knn_graph", "k"),
    Case("knn_graph-backend", lambda: geometry.knn_graph(torch.rand(4, 3), 1, backend="faiss"),
         ValueError, "knn_graph", "backend"),
    Case("knn_graph-batch-float", lambda: geometry.knn_graph(torch.rand(4, 3), 1,
                                                             torch.zeros(4)),
         TypeError, "knn_graph", "batch"),
    Case("knn_bipartite-y-dims", lambda: geometry.knn_bipartite(torch.rand(4, 3),
                                                                torch.rand(2, 2), 1),
         ValueError, "knn_bipartite", "y"),
    Case("knn_bipartite-x-int", lambda: geometry.knn_bipartite(torch.zeros(4, 3,
                                                                           dtype=torch.long),
                                                               torch.rand(2, 3), 1),
         TypeError, "knn_bipartite", "x"),
    # ---- datasets
    Case("window_set-n-zero", lambda: datasets.window_set([1, 2, 3], 0), ValueError,
         "window_set", "n"),
    Case("window_set-n-float", lambda: datasets.window_set([1, 2, 3], 2.0), TypeError,
         "window_set", "n"),
    Case("clean_blocks-n-large", lambda: datasets.clean_blocks([1, 2, 3], frozenset(), 2, n=3),
         ValueError, "clean_blocks", "n"),
    Case("pydoc_topic_split-val_every-bool", lambda: datasets.pydoc_topic_split(True),
         TypeError, "pydoc_topic_split", "val_every"),
    Case("pydoc_topic_splits-every-small", lambda: datasets.pydoc_topic_splits(2), ValueError,
         "pydoc_topic_splits", "every"),
    Case("passkey_trials-length-zero", lambda: datasets.passkey_trials(None, [1], 0),
         ValueError, "passkey_trials", "length"),
    Case("passkey_trials-seed-float", lambda: datasets.passkey_trials(None, [1], 8, seed=0.5),
         TypeError, "passkey_trials", "seed"),
    # ---- analysis
    Case("sign_test-wins-float", lambda: analysis.sign_test(1.5, 2), TypeError, "sign_test",
         "wins"),
    Case("sign_test-losses-negative", lambda: analysis.sign_test(1, -2), ValueError,
         "sign_test", "losses"),
    Case("StreamingCovariance-dim-bool", lambda: analysis.StreamingCovariance(True), TypeError,
         "StreamingCovariance", "dim"),
    Case("StreamingCovariance-dim-zero", lambda: analysis.StreamingCovariance(0), ValueError,
         "StreamingCovariance", "dim"),
    Case("greedy_continuation-max_new_tokens-zero", lambda: analysis.greedy_continuation(
        None, torch.zeros(1, 2, dtype=torch.long), 0), ValueError, "greedy_continuation",
        "max_new_tokens"),
    Case("KeySpectrumControl-decay-negative", lambda: analysis.KeySpectrumControl(
        torch.nn.Linear(2, 2), decay=-1.0), ValueError, "KeySpectrumControl", "decay"),
    Case("KeySpectrumControl-model-type", lambda: analysis.KeySpectrumControl("gpt"),
         TypeError, "KeySpectrumControl", "model"),
    Case("KeySpectrumControl-every-zero", lambda: analysis.KeySpectrumControl(
        torch.nn.Linear(2, 2), every=0), ValueError, "KeySpectrumControl",
        "every"),
    # ---- Focus: attention sinks, window-only routing, pair shares, router training
    Case("focus_dense_attention-num_sinks-negative", lambda: F.focus_dense_attention(
        _q(), _q(), _q(), _g(), 2, num_sinks=-1), ValueError, "focus_dense_attention",
        "num_sinks"),
    Case("focus_blocks_attention-num_sinks-bool", lambda: F.focus_blocks_attention(
        _q(), _q(), _q(), _g(), 2, num_sinks=True), TypeError, "focus_blocks_attention",
        "num_sinks"),
    Case("focus_edge_index-num_sinks-float", lambda: F.focus_edge_index(_g(), 2, num_sinks=1.0),
         TypeError, "focus_edge_index", "num_sinks"),
    Case("focus_soft_attention-num_sinks-negative", lambda: F.focus_soft_attention(
        _q(), _q(), _q(), _soft(), 2, num_sinks=-2), ValueError, "focus_soft_attention",
        "num_sinks"),
    Case("focus_decode_attention-num_sinks-float", lambda: focus_decode_attention(
        None, None, None, None, 2, 1.0, num_sinks=0.5), TypeError, "focus_decode_attention",
        "num_sinks"),
    Case("FocusAttention-num_sinks-negative", lambda: F.FocusAttention(8, 2, num_sinks=-1),
         ValueError, "FocusAttention", "num_sinks"),
    Case("straight_through_pair_share-num_sinks-bool", lambda: F.straight_through_pair_share(
        _soft(), _g(), 2, num_sinks=False), TypeError, "straight_through_pair_share",
        "num_sinks"),
    Case("focus_pair_share-groups-float", lambda: F.focus_pair_share(
        torch.zeros(6, 1), 2), TypeError, "focus_pair_share", "groups"),
    Case("focus_pair_share-num_sinks-negative", lambda: F.focus_pair_share(
        _g(), 2, num_sinks=-1), ValueError, "focus_pair_share", "num_sinks"),
    Case("pattern_share-seq_len-bool", lambda: F.pattern_share(True, 2), TypeError,
         "pattern_share", "seq_len"),
    Case("pattern_share-window-negative", lambda: F.pattern_share(8, -1), ValueError,
         "pattern_share", "window"),
    Case("window_for_share-share-nan", lambda: F.window_for_share(8, NAN), ValueError,
         "window_for_share", "share"),
    Case("window_for_share-share-str", lambda: F.window_for_share(8, "0.5"), TypeError,
         "window_for_share", "share"),
    Case("WindowOnlyRouter-top_k-one", lambda: setattr(F.WindowOnlyRouter(), "top_k", 1),
         ValueError, "WindowOnlyRouter", "top_k"),
    Case("WindowOnlyRouter-top_k-float", lambda: setattr(F.WindowOnlyRouter(), "top_k", 0.0),
         TypeError, "WindowOnlyRouter", "top_k"),
    Case("WindowOnlyRouter-h-long", lambda: F.WindowOnlyRouter()(
        torch.zeros(6, 4, dtype=torch.long)), TypeError, "WindowOnlyRouter", "h"),
    Case("WindowOnlyRouter-batch-with-3d", lambda: F.WindowOnlyRouter()(
        torch.zeros(2, 3, 4), batch=torch.zeros(6, dtype=torch.long)), ValueError,
        "WindowOnlyRouter", "batch"),
    Case("FarBiasRouter-num_heads-zero", lambda: F.FarBiasRouter(0), ValueError,
         "FarBiasRouter", "num_heads"),
    Case("FarBiasRouter-q-heads", lambda: F.FarBiasRouter(3).soft_attention(
        _q(), _q(), _q(), 2), ValueError, "FarBiasRouter", "q"),
    Case("focus_far_bias_attention-log_scale-list", lambda: F.focus_far_bias_attention(
        _q(), _q(), _q(), [0.0, 0.0], torch.zeros(2), 2), TypeError,
        "focus_far_bias_attention", "log_scale"),
    Case("focus_far_bias_attention-far_bias-shape", lambda: F.focus_far_bias_attention(
        _q(), _q(), _q(), torch.zeros(2), torch.zeros(3), 2), ValueError,
        "focus_far_bias_attention", "far_bias"),
    Case("focus_far_bias_attention-num_sinks-negative", lambda: F.focus_far_bias_attention(
        _q(), _q(), _q(), torch.zeros(2), torch.zeros(2), 2, num_sinks=-1), ValueError,
        "focus_far_bias_attention", "num_sinks"),
    Case("train_routers-objective-value", lambda: training.train_routers(
        None, None, 1, 1e-3, None, objective="kl"), ValueError, "train_routers", "objective"),
    Case("train_routers-pair_budget-value", lambda: training.train_routers(
        None, None, 1, 1e-3, None, pair_budget=(1.5, 1.0)), ValueError, "train_routers",
        "pair_budget"),
    Case("train_routers-pair_budget-type", lambda: training.train_routers(
        None, None, 1, 1e-3, None, pair_budget=0.5), TypeError, "train_routers",
        "pair_budget"),
    Case("train_routers-gradient_checkpointing-type", lambda: _train_tiny_routers(
        gradient_checkpointing="yes"), TypeError, "train_routers", "gradient_checkpointing"),
    Case("train_routers-gradient_checkpointing-not-hf", lambda: _train_tiny_routers(
        gradient_checkpointing=True), ValueError, "train_routers", "gradient_checkpointing"),
    Case("train_routers-loss_chunk-zero", lambda: _train_tiny_routers(loss_chunk=0),
         ValueError, "train_routers", "loss_chunk"),
    Case("train_routers-loss_chunk-float", lambda: _train_tiny_routers(loss_chunk=8.0),
         TypeError, "train_routers", "loss_chunk"),
    Case("train_routers-loss_chunk-not-hf", lambda: _train_tiny_routers(loss_chunk=4),
         ValueError, "train_routers", "loss_chunk"),
    Case("router_loss-loss_chunk-negative", lambda: training.router_loss(
        None, torch.zeros(1, 4, dtype=torch.long), loss_chunk=-1), ValueError, "router_loss",
        "loss_chunk"),
    Case("router_loss-objective-type", lambda: training.router_loss(
        None, torch.zeros(1, 4, dtype=torch.long), 1), TypeError, "router_loss", "objective"),
    Case("router_loss-input_ids-float", lambda: training.router_loss(
        None, torch.zeros(1, 4)), TypeError, "router_loss", "input_ids"),
    Case("router_loss-input_ids-1d", lambda: training.router_loss(
        None, torch.zeros(4, dtype=torch.long)), ValueError, "router_loss", "input_ids"),
    Case("router_trainer-objective-value", lambda: training.router_trainer(
        None, None, objective="kl"), ValueError, "router_trainer", "objective"),
    # routers files: every size a file configures is bounded before anything is built;
    # the router rules' from_config and train_routers' own arguments
    Case("load_routers-num_groups-huge", lambda: _load_crafted_routers(num_groups=10 ** 12),
         ValueError, "load_routers", "num_groups"),
    Case("load_routers-sinkhorn_iters-huge", lambda: _load_crafted_routers(
        sinkhorn_iters=10 ** 9), ValueError, "load_routers", "sinkhorn_iters"),
    Case("load_routers-sinkhorn_iters-float", lambda: _load_crafted_routers(
        sinkhorn_iters=1e9), ValueError, "load_routers", "sinkhorn_iters"),
    Case("load_routers-window-huge", lambda: _load_crafted_routers(window=2 ** 40),
         ValueError, "load_routers", "window"),
    Case("load_routers-num_sinks-huge", lambda: _load_crafted_routers(num_sinks=2 ** 40),
         ValueError, "load_routers", "num_sinks"),
    Case("load_routers-group_dim-huge", lambda: _load_crafted_routers(group_dim=10 ** 9),
         ValueError, "load_routers", "group_dim"),
    Case("load_routers-top_k-huge", lambda: _load_crafted_routers(top_k=10 ** 9),
         ValueError, "load_routers", "top_k"),
    Case("load_routers-tau-negative", lambda: _load_crafted_routers(tau=-1.0),
         ValueError, "load_routers", "tau"),
    Case("load_routers-router-num_heads-huge", lambda: _load_crafted_routers(
        router={"type": "far_bias", "num_heads": 10 ** 12, "causal": True}), ValueError,
        "load_routers", "num_heads"),
    Case("FocusRouter.from_config-sinkhorn_iters-huge", lambda: F.FocusRouter.from_config(
        {"in_channels": 8, "num_groups": 2, "group_dim": 4, "tau": 0.1,
         "sinkhorn_iters": 10 ** 9, "top_k": 1, "causal": True}), ValueError,
        "FocusRouter.from_config", "sinkhorn_iters"),
    Case("RandomGroupsRouter.from_config-num_groups-huge", lambda:
         F.RandomGroupsRouter.from_config({"num_groups": 10 ** 12, "top_k": 1, "seed": 0,
                                           "causal": True}), ValueError,
         "RandomGroupsRouter.from_config", "num_groups"),
    Case("WindowOnlyRouter.from_config-config-unknown", lambda:
         F.WindowOnlyRouter.from_config({"causal": True, "window": 4}), ValueError,
         "WindowOnlyRouter.from_config", "config"),
    Case("WindowOnlyRouter.from_config-causal-str", lambda:
         F.WindowOnlyRouter.from_config({"causal": "yes"}), TypeError,
         "WindowOnlyRouter.from_config", "causal"),
    Case("register_router-name-empty", lambda: F.register_router(""), ValueError,
         "register_router", "name"),
    Case("register_router-name-taken", lambda: F.register_router("focus")(F.WindowOnlyRouter),
         ValueError, "register_router", "name"),
    Case("train_routers-seed-negative", lambda: _train_tiny_routers(seed=-1), ValueError,
         "train_routers", "seed"),
    Case("train_routers-train-list", lambda: _train_tiny_routers(train=[[1, 2]]), TypeError,
         "train_routers", "train"),
    Case("train_routers-train-shape", lambda: _train_tiny_routers(
        train=torch.zeros(8, dtype=torch.long)), ValueError, "train_routers", "train"),
    Case("freeze_all_but_routers-model-type", lambda: training.freeze_all_but_routers("gpt"),
         TypeError, "freeze_all_but_routers", "model"),
    Case("block_order-num_blocks-zero", lambda: block_order(0, 5), ValueError, "block_order",
         "num_blocks"),
    Case("block_order-steps-float", lambda: block_order(4, 5.0), TypeError, "block_order",
         "steps"),
    # ---- models
    Case("GPTConfig-n_layer-zero", lambda: models.GPTConfig(n_layer=0), ValueError, "GPTConfig",
         "n_layer"),
    Case("GPTConfig-attention-value", lambda: models.GPTConfig(attention="linear"), ValueError,
         "GPTConfig", "attention"),
    Case("QSVNet-heads-float", lambda: models.QSVNet(3, 5, channels=16, heads=2.0), TypeError,
         "QSVNet", "heads"),
    Case("QSVNet-stem-value", lambda: models.QSVNet(3, 5, channels=16, heads=2, stem="mlp"),
         ValueError, "QSVNet", "stem"),

    # ---- datasets: image datasets and the character corpus
    Case("DigitsGraphs-split-value", lambda: datasets.DigitsGraphs(split="val"), ValueError,
         "DigitsGraphs", "split"),
    Case("DigitsGraphs-split-type", lambda: datasets.DigitsGraphs(split=0), TypeError,
         "DigitsGraphs", "split"),
    Case("DigitsGraphs-graph-value", lambda: datasets.DigitsGraphs(graph="torus"), ValueError,
         "DigitsGraphs", "graph"),
    Case("DigitsGraphs-graph-type", lambda: datasets.DigitsGraphs(graph=3), TypeError,
         "DigitsGraphs", "graph"),
    Case("DigitsGraphs-normalize-type", lambda: datasets.DigitsGraphs(normalize="yes"),
         TypeError, "DigitsGraphs", "normalize"),
    Case("DigitsGraphs-normalize-pair", lambda: datasets.DigitsGraphs(normalize=(0.5,)),
         ValueError, "DigitsGraphs", "normalize"),
    Case("DigitsGraphs-augment-test-split", lambda: datasets.DigitsGraphs(
        split="test", augment=True), ValueError, "DigitsGraphs", "augment"),
    Case("DigitsGraphs-augment-type", lambda: datasets.DigitsGraphs(augment=1), TypeError,
         "DigitsGraphs", "augment"),
    Case("DigitsGraphs-transform-type", lambda: datasets.DigitsGraphs(transform=5), TypeError,
         "DigitsGraphs", "transform"),
    Case("load_digits_split-split-value", lambda: datasets.load_digits_split("all"),
         ValueError, "load_digits_split", "split"),
    Case("CIFAR10Graphs-root-type", lambda: datasets.CIFAR10Graphs(5), TypeError,
         "CIFAR10Graphs", "root"),
    Case("CIFAR100Graphs-train-type", lambda: datasets.CIFAR100Graphs("unused", train=1),
         TypeError, "CIFAR100Graphs", "train"),
    Case("CharCorpus-val_fraction-one", lambda: datasets.CharCorpus(val_fraction=1.0),
         ValueError, "CharCorpus", "val_fraction"),
    Case("CharCorpus-val_fraction-str", lambda: datasets.CharCorpus(val_fraction="0.1"),
         TypeError, "CharCorpus", "val_fraction"),
    Case("CharCorpus-source-type", lambda: datasets.CharCorpus(source=5), TypeError,
         "CharCorpus", "source"),
    Case("CharCorpus-vocab-entry-type", lambda: datasets.CharCorpus(vocab=["a", 1]), TypeError,
         "CharCorpus", "vocab"),
    Case("CharCorpus-vocab-entry-long", lambda: datasets.CharCorpus(vocab=["a", "bc"]),
         ValueError, "CharCorpus", "vocab"),
    Case("CharCorpus-vocab-duplicate", lambda: datasets.CharCorpus(vocab="aba"), ValueError,
         "CharCorpus", "vocab"),
    Case("CharCorpus-vocab-type", lambda: datasets.CharCorpus(vocab=5), TypeError,
         "CharCorpus", "vocab"),
    Case("CharCorpus-block_size-too-long", lambda: datasets.CharCorpus(block_size=10 ** 7),
         ValueError, "CharCorpus", "block_size"),
    Case("CharCorpus.encode-text-bytes", lambda: _corpus().encode(b"abc"), TypeError,
         "CharCorpus.encode", "text"),
    Case("CharCorpus.decode-ids-float", lambda: _corpus().decode([1.5]), TypeError,
         "CharCorpus.decode", "ids"),
    Case("CharCorpus.decode-ids-range", lambda: _corpus().decode([10 ** 6]), ValueError,
         "CharCorpus.decode", "ids"),
    Case("CharCorpus.decode-ids-2d", lambda: _corpus().decode(
        torch.zeros(2, 2, dtype=torch.long)), ValueError, "CharCorpus.decode", "ids"),
    Case("CharCorpus.get_batch-split-value", lambda: _corpus().get_batch("test", 2),
         ValueError, "CharCorpus.get_batch", "split"),
    Case("CharCorpus.get_batch-split-type", lambda: _corpus().get_batch(0, 2), TypeError,
         "CharCorpus.get_batch", "split"),
    Case("CharCorpus.num_blocks-block_size-too-long", lambda: _corpus().num_blocks(
        "val", block_size=10 ** 7), ValueError, "CharCorpus.num_blocks", "block_size"),
    Case("CharCorpus.iter_blocks-max_blocks-zero", lambda: next(_corpus().iter_blocks(
        "val", max_blocks=0)), ValueError, "CharCorpus.iter_blocks", "max_blocks"),
    Case("CharCorpus.iter_blocks-max_blocks-float", lambda: next(_corpus().iter_blocks(
        "val", max_blocks=2.0)), TypeError, "CharCorpus.iter_blocks", "max_blocks"),
    Case("CharCorpus.split_length-split-value", lambda: _corpus().split_length("dev"),
         ValueError, "CharCorpus.split_length", "split"),
    # ---- transforms: image augmentation and normalisation
    Case("RandomCropPad-size-zero", lambda: transforms.RandomCropPad(0), ValueError,
         "RandomCropPad", "size"),
    Case("RandomCropPad-size-triple", lambda: transforms.RandomCropPad((8, 8, 8)), ValueError,
         "RandomCropPad", "size"),
    Case("RandomCropPad-size-str", lambda: transforms.RandomCropPad("8"), TypeError,
         "RandomCropPad", "size"),
    Case("RandomCropPad-data-list", lambda: transforms.RandomCropPad(4)([1.0]), TypeError,
         "RandomCropPad", "data"),
    Case("RandomCropPad-data-2d", lambda: transforms.RandomCropPad(4)(torch.rand(8, 8)),
         ValueError, "RandomCropPad", "data"),
    Case("RandomCropPad-data-small", lambda: transforms.RandomCropPad(8, padding=0)(
        torch.rand(1, 4, 4)), ValueError, "RandomCropPad", "data"),
    Case("RandomCropPad-data.image-list", lambda: transforms.RandomCropPad(4)(
        Data(image=[1.0])), TypeError, "RandomCropPad", "data.image"),
    Case("RandomCropPad-data-no-image", lambda: transforms.RandomCropPad(4)(
        Data(x=torch.zeros(1))), ValueError, "RandomCropPad", "data"),
    Case("RandomCropPad.crop-top-range", lambda: transforms.RandomCropPad(4, padding=0).crop(
        torch.rand(1, 4, 4), 1, 0), ValueError, "RandomCropPad.crop", "top"),
    Case("RandomCropPad.crop-left-float", lambda: transforms.RandomCropPad(4, padding=0).crop(
        torch.rand(1, 4, 4), 0, 0.0), TypeError, "RandomCropPad.crop", "left"),
    Case("RandomHorizontalFlip-p-range", lambda: transforms.RandomHorizontalFlip(1.5),
         ValueError, "RandomHorizontalFlip", "p"),
    Case("RandomHorizontalFlip-p-str", lambda: transforms.RandomHorizontalFlip("0.5"),
         TypeError, "RandomHorizontalFlip", "p"),
    Case("NormalizeImage-std-zero", lambda: transforms.NormalizeImage(0.5, 0.0), ValueError,
         "NormalizeImage", "std"),
    Case("NormalizeImage-mean-str", lambda: transforms.NormalizeImage("a", 1.0), TypeError,
         "NormalizeImage", "mean"),
    Case("NormalizeImage-mean-empty", lambda: transforms.NormalizeImage([], 1.0), ValueError,
         "NormalizeImage", "mean"),
    Case("NormalizeImage-mean-nan", lambda: transforms.NormalizeImage(NAN, 1.0), ValueError,
         "NormalizeImage", "mean"),
    Case("NormalizeImage-std-length", lambda: transforms.NormalizeImage(
        (0.1, 0.2), (1.0, 2.0, 3.0)), ValueError, "NormalizeImage", "std"),
    Case("NormalizeImage-data-uint8", lambda: transforms.NormalizeImage(0.5, 0.5)(
        torch.zeros(1, 4, 4, dtype=torch.uint8)), TypeError, "NormalizeImage", "data"),
    Case("NormalizeImage-data-channels", lambda: transforms.NormalizeImage(
        (0.5, 0.5), (1.0, 1.0))(torch.rand(3, 4, 4)), ValueError, "NormalizeImage", "data"),
    # ---- geometry: graph builders
    Case("fibonacci_sphere-radius-zero", lambda: geometry.fibonacci_sphere(8, 0.0), ValueError,
         "fibonacci_sphere", "radius"),
    Case("fibonacci_sphere-radius-str", lambda: geometry.fibonacci_sphere(8, "1"), TypeError,
         "fibonacci_sphere", "radius"),
    Case("fibonacci_sphere-dtype-int", lambda: geometry.fibonacci_sphere(
        8, dtype=torch.int64), TypeError, "fibonacci_sphere", "dtype"),
    Case("fibonacci_sphere-dtype-str", lambda: geometry.fibonacci_sphere(8, dtype="float32"),
         TypeError, "fibonacci_sphere", "dtype"),
    Case("sphere_graph-k-shell-size", lambda: geometry.sphere_graph((4, 8), k=4), ValueError,
         "sphere_graph", "k"),
    Case("sphere_graph-k_cross-single-shell", lambda: geometry.sphere_graph((8,), k=2,
                                                                            k_cross=1),
         ValueError, "sphere_graph", "k_cross"),
    Case("sphere_graph-k_cross-adjacent", lambda: geometry.sphere_graph((4, 8), k=2,
                                                                        k_cross=9),
         ValueError, "sphere_graph", "k_cross"),
    Case("lattice_graph-k-large", lambda: geometry.lattice_graph(2, 2, 4), ValueError,
         "lattice_graph", "k"),
    # ---- models: QSVNet, QSVBlock, GPTConfig, CharGPT
    Case("QSVNet-mlp_ratio-str", lambda: _qsv(mlp_ratio="2"), TypeError, "QSVNet",
         "mlp_ratio"),
    Case("QSVNet-mlp_ratio-zero", lambda: _qsv(mlp_ratio=0.0), ValueError, "QSVNet",
         "mlp_ratio"),
    Case("QSVNet-dropout-one", lambda: _qsv(dropout=1.0), ValueError, "QSVNet", "dropout"),
    Case("QSVNet-dropout-str", lambda: _qsv(dropout="0"), TypeError, "QSVNet", "dropout"),
    Case("QSVNet-qsv_kwargs-list", lambda: _qsv(qsv_kwargs=[]), TypeError, "QSVNet",
         "qsv_kwargs"),
    Case("QSVNet-qsv_kwargs-num_nodes", lambda: _qsv(qsv_kwargs={"num_nodes": 4}), ValueError,
         "QSVNet", "qsv_kwargs"),
    Case("QSVNet-transformer_kwargs-with-qsv", lambda: _qsv(transformer_kwargs={"beta": True}),
         ValueError, "QSVNet", "transformer_kwargs"),
    Case("QSVNet-qsv_kwargs-with-transformer", lambda: _qsv(conv="transformer",
                                                            qsv_kwargs={"transport": False}),
         ValueError, "QSVNet", "qsv_kwargs"),
    Case("QSVNet-channels-multiple-qsv", lambda: models.QSVNet(3, 5, channels=12, heads=2),
         ValueError, "QSVNet", "channels"),
    Case("QSVNet-channels-multiple-transformer", lambda: models.QSVNet(
        3, 5, channels=15, heads=2, conv="transformer", mixing="linear"), ValueError, "QSVNet",
        "channels"),
    Case("QSVNet-pos_embedding-int", lambda: _qsv(pos_embedding=1), TypeError, "QSVNet",
         "pos_embedding"),
    Case("QSVNet-num_nodes-unused", lambda: _qsv(num_nodes=5), ValueError, "QSVNet",
         "num_nodes"),
    Case("QSVNet.set_ablation-transport-int", lambda: _qsv().set_ablation(transport=0),
         TypeError, "QSVNet.set_ablation", "transport"),
    Case("QSVNet.set_ablation-attention-value", lambda: _qsv().set_ablation(attention="none"),
         ValueError, "QSVNet.set_ablation", "attention"),
    Case("QSVNet.restore_ablation-state-tuple", lambda: _qsv().restore_ablation(()),
         TypeError, "QSVNet.restore_ablation", "state"),
    Case("QSVNet.restore_ablation-state-length", lambda: _qsv().restore_ablation([]),
         ValueError, "QSVNet.restore_ablation", "state"),
    Case("QSVNet.forward-data.x-list", lambda: _qsv()(Data(
        x=[[0.0] * 3], edge_index=torch.zeros(2, 0, dtype=torch.long))), TypeError, "QSVNet",
        "data.x"),
    Case("QSVNet.forward-data.x-shape", lambda: _qsv()(Data(
        x=torch.rand(4, 2), edge_index=torch.zeros(2, 0, dtype=torch.long))), ValueError,
        "QSVNet", "data.x"),
    Case("QSVNet.forward-data.x-long", lambda: _qsv()(Data(
        x=torch.zeros(4, 3, dtype=torch.long), edge_index=torch.zeros(2, 0, dtype=torch.long))),
        TypeError, "QSVNet", "data.x"),
    Case("QSVNet.forward-data.edge_index-missing", lambda: _qsv()(Data(x=torch.rand(4, 3))),
         TypeError, "QSVNet", "data.edge_index"),
    Case("QSVNet.forward-data.x-template", lambda: _qsv(pos_embedding=True, num_nodes=3)(Data(
        x=torch.rand(4, 3), edge_index=torch.zeros(2, 0, dtype=torch.long))), ValueError,
        "QSVNet", "data.x"),
    Case("QSVNet.pool-shell-missing", lambda: _qsv(readout="outer").pool(
        torch.rand(4, 16), torch.zeros(4, dtype=torch.long), 1), ValueError, "QSVNet", "shell"),
    Case("QSVNet.pool-shell-list", lambda: _qsv(readout="outer").pool(
        torch.rand(4, 16), torch.zeros(4, dtype=torch.long), 1, [0, 0, 0, 0]), TypeError,
        "QSVNet", "shell"),
    Case("QSVNet.quaternions-data.x-shape", lambda: _qsv().quaternions(Data(
        x=torch.rand(4, 2), edge_index=torch.zeros(2, 0, dtype=torch.long))), ValueError,
        "QSVNet.quaternions", "data.x"),
    Case("QSVBlock-mixing-value", lambda: models.QSVBlock(16, 2, mixing="quat"), ValueError,
         "QSVBlock", "mixing"),
    Case("QSVBlock-conv-value", lambda: models.QSVBlock(16, 2, conv="gat"), ValueError,
         "QSVBlock", "conv"),
    Case("QSVBlock-channels-float", lambda: models.QSVBlock(16.0, 2), TypeError, "QSVBlock",
         "channels"),
    Case("QSVBlock-dropout-one", lambda: models.QSVBlock(16, 2, dropout=1.0), ValueError,
         "QSVBlock", "dropout"),
    Case("QSVBlock-conv_kwargs-list", lambda: models.QSVBlock(16, 2, conv_kwargs=[]),
         TypeError, "QSVBlock", "conv_kwargs"),
    Case("GPTConfig-n_embd-divisible", lambda: models.GPTConfig(n_embd=30, n_head=4),
         ValueError, "GPTConfig", "n_embd"),
    Case("GPTConfig-dropout-one", lambda: models.GPTConfig(dropout=1.0), ValueError,
         "GPTConfig", "dropout"),
    Case("GPTConfig-dropout-str", lambda: models.GPTConfig(dropout="0"), TypeError,
         "GPTConfig", "dropout"),
    Case("GPTConfig-focus-list", lambda: models.GPTConfig(focus=[]), TypeError, "GPTConfig",
         "focus"),
    Case("GPTConfig-init_std-zero", lambda: models.GPTConfig(init_std=0.0), ValueError,
         "GPTConfig", "init_std"),
    Case("GPTConfig.from_dict-d-list", lambda: models.GPTConfig.from_dict([]), TypeError,
         "GPTConfig.from_dict", "d"),
    Case("GPTConfig.from_dict-d-unknown", lambda: models.GPTConfig.from_dict({"n_layers": 2}),
         ValueError, "GPTConfig.from_dict", "d"),
    Case("CharGPT-config-str", lambda: models.CharGPT("small"), TypeError, "CharGPT",
         "config"),
    Case("CharGPT.forward-idx-float", lambda: _tiny_gpt()(torch.zeros(1, 4)), TypeError,
         "CharGPT", "idx"),
    Case("CharGPT.forward-idx-1d", lambda: _tiny_gpt()(torch.zeros(4, dtype=torch.long)),
         ValueError, "CharGPT", "idx"),
    Case("CharGPT.forward-idx-long", lambda: _tiny_gpt()(torch.zeros(1, 9, dtype=torch.long)),
         ValueError, "CharGPT", "idx"),
    Case("CharGPT.forward-targets-shape", lambda: _tiny_gpt()(
        torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)), ValueError,
        "CharGPT", "targets"),
    Case("CharGPT.generate-temperature-zero", lambda: _tiny_gpt().generate(
        torch.zeros(1, 2, dtype=torch.long), 2, temperature=0.0), ValueError,
        "CharGPT.generate", "temperature"),
    Case("CharGPT.generate-top_k-large", lambda: _tiny_gpt().generate(
        torch.zeros(1, 2, dtype=torch.long), 2, top_k=11), ValueError, "CharGPT.generate",
        "top_k"),
    Case("CharGPT.generate-max_new_tokens-float", lambda: _tiny_gpt().generate(
        torch.zeros(1, 2, dtype=torch.long), 2.0), TypeError, "CharGPT.generate",
        "max_new_tokens"),
    Case("CausalSelfAttention.queries-x-shape", lambda: _tiny_gpt().blocks[0].attn.queries(
        torch.rand(2, 8)), ValueError, "CausalSelfAttention", "x"),
    # ---- analysis: QKProbe
    Case("QKProbe-layers-name", lambda: analysis.QKProbe(_tiny_gpt(), layers=["nope"]),
         ValueError, "QKProbe", "layers"),
    Case("QKProbe-layers-index", lambda: analysis.QKProbe(_tiny_gpt(), layers=[5]),
         ValueError, "QKProbe", "layers"),
    Case("QKProbe-layers-bool", lambda: analysis.QKProbe(_tiny_gpt(), layers=[True]),
         TypeError, "QKProbe", "layers"),
    Case("QKProbe-layers-float", lambda: analysis.QKProbe(_tiny_gpt(), layers=[0.0]),
         TypeError, "QKProbe", "layers"),
    Case("QKProbe-layers-module", lambda: analysis.QKProbe(
        _tiny_gpt(), layers=[torch.nn.Linear(2, 2)]), ValueError, "QKProbe", "layers"),
    Case("QKProbe-layers-empty", lambda: analysis.QKProbe(_tiny_gpt(), layers=[]), ValueError,
         "QKProbe", "layers"),
    Case("QKProbe-model-no-attention", lambda: analysis.QKProbe(torch.nn.Linear(2, 2)),
         ValueError, "QKProbe", "model"),
    Case("QKProbe-model-str", lambda: analysis.QKProbe("gpt"), TypeError, "QKProbe", "model"),
    Case("QKTrajectory-model-str", lambda: analysis.QKTrajectory("gpt", None), TypeError,
         "QKTrajectory", "model"),
    Case("QKTrajectory-max_tokens-1", lambda: analysis.QKTrajectory(_tiny_gpt(), None, 1),
         ValueError, "QKTrajectory", "max_tokens"),
    Case("QKTrajectory.layer_mean-key", lambda: analysis.QKTrajectory(
        _tiny_gpt(), None).layer_mean("pr"), ValueError, "QKTrajectory.layer_mean", "key"),
    # ---- adapters
    Case("FunctionAdapter-fn-int", lambda: adapters.FunctionAdapter(3), TypeError,
         "FunctionAdapter", "fn"),
    Case("register_attention_adapter-cls-unqualified", lambda: adapters.register_attention_adapter(
        "Attention", lambda m, a, k: None), ValueError, "register_attention_adapter", "cls"),
    Case("register_attention_adapter-cls-int", lambda: adapters.register_attention_adapter(
        3, lambda m, a, k: None), TypeError, "register_attention_adapter", "cls"),
    Case("register_attention_adapter-adapter-class", lambda: adapters.register_attention_adapter(
        "my.pkg.Attention", adapters.AttentionAdapter), TypeError, "register_attention_adapter",
        "adapter"),
    Case("register_attention_adapter-adapter-int", lambda: adapters.register_attention_adapter(
        "my.pkg.Attention", 3), TypeError, "register_attention_adapter", "adapter"),
    # padding_from_mask keeps ValueError for a non-tensor mask: its documented contract
    # ("ValueError: for any other mask"; e.g. another implementation's block mask)
    Case("padding_from_mask-attention_mask-list", lambda: adapters.padding_from_mask(
        [[1, 1]], 2, 2, True, "f"), ValueError, "f", "attention_mask"),
    Case("padding_from_mask-attention_mask-1d", lambda: adapters.padding_from_mask(
        torch.ones(5), 5, 5, True, "f"), ValueError, "f", "attention_mask"),
    Case("padding_from_mask-attention_mask-length", lambda: adapters.padding_from_mask(
        torch.ones(2, 4), 5, 5, True, "f"), ValueError, "f", "attention_mask"),
    Case("padding_from_mask-attention_mask-4d-shape", lambda: adapters.padding_from_mask(
        torch.ones(1, 1, 3, 5, dtype=torch.bool), 5, 5, True, "f"), ValueError, "f",
        "attention_mask"),
    Case("MHA-query-list", lambda: _mha_model()[0]([[0.0]], [[0.0]], [[0.0]],
                                                   need_weights=False),
         TypeError, MHA, "query"),
    Case("MHA-query-shape", lambda: _mha_model()[0](*[_x(c=5)] * 3, need_weights=False),
         ValueError, MHA, "query"),
    Case("MHA-key-other", lambda: _mha_model()[0](_x(), _x(), _x(), need_weights=False),
         ValueError, MHA, "key"),
    Case("MHA-need_weights-default", lambda: _mha_model()[0](*[_x()] * 3), ValueError, MHA,
         "need_weights"),
    Case("MHA-key_padding_mask-shape", lambda: _mha_model()[0](
        *[_x()] * 3, need_weights=False, key_padding_mask=torch.zeros(1, 3, dtype=torch.bool)),
        ValueError, MHA, "key_padding_mask"),
    Case("MHA-key_padding_mask-list", lambda: _mha_model()[0](
        *[_x()] * 3, need_weights=False, key_padding_mask=[[False] * 4]), TypeError, MHA,
        "key_padding_mask"),
    Case("MHA-key_padding_mask-long", lambda: _mha_model()[0](
        *[_x()] * 3, need_weights=False, key_padding_mask=torch.zeros(1, 4, dtype=torch.long)),
        TypeError, MHA, "key_padding_mask"),
    Case("MHA-attn_mask-bias", lambda: _mha_model()[0](
        *[_x()] * 3, need_weights=False, attn_mask=torch.full((4, 4), 0.5)), ValueError, MHA,
        "attn_mask"),
    Case("MHA-attn_mask-list", lambda: _mha_model()[0](
        *[_x()] * 3, need_weights=False, attn_mask=[[0.0]]), TypeError, MHA, "attn_mask"),
    Case("MHA-attn_mask-shape", lambda: _mha_model()[0](
        *[_x()] * 3, need_weights=False, attn_mask=torch.zeros(3, 3)), ValueError, MHA,
        "attn_mask"),
    Case("MHA-attn_mask-is_causal", lambda: _mha_model()[0](
        *[_x()] * 3, need_weights=False, is_causal=True), ValueError, MHA, "attn_mask"),
    # ---- nn.focus.compose
    Case("compose_focus-model-str", lambda: F.compose_focus("gpt"), TypeError, "compose_focus",
         "model"),
    Case("compose_focus-model-no-attention", lambda: F.compose_focus(torch.nn.Linear(2, 2)),
         ValueError, "compose_focus", "model"),
    Case("compose_focus-model-composed", lambda: F.compose_focus(_mha_model(), causal=False),
         ValueError, "compose_focus", "model"),
    Case("compose_focus-top_k-large", lambda: F.compose_focus(_tiny_gpt(), num_groups=2,
                                                             top_k=3),
         ValueError, "compose_focus", "top_k"),
    Case("compose_focus-top_k-float", lambda: F.compose_focus(_tiny_gpt(), top_k=1.0),
         TypeError, "compose_focus", "top_k"),
    Case("FocusComposed-module-unsupported", lambda: F.FocusComposed(torch.nn.Linear(2, 2)),
         ValueError, "FocusComposed", "module"),
    Case("FocusComposed-causal-missing", lambda: F.FocusComposed(
        torch.nn.MultiheadAttention(8, 2), num_groups=2, top_k=1), ValueError, "FocusComposed",
        "causal"),
    Case("decompose-model-uncomposed", lambda: F.decompose(torch.nn.Linear(2, 2)), ValueError,
         "decompose", "model"),
    Case("set_focus_enabled-model-no-focus", lambda: F.set_focus_enabled(
        torch.nn.Linear(2, 2), True), ValueError, "set_focus_enabled", "model"),
    Case("set_focus_enabled-model-str", lambda: F.set_focus_enabled("gpt", True), TypeError,
         "set_focus_enabled", "model"),
    Case("set_focus_options-top_k-zero", lambda: F.set_focus_options(_mha_model(), top_k=0),
         ValueError, "set_focus_options", "top_k"),
    Case("set_focus_options-window-float", lambda: F.set_focus_options(_mha_model(),
                                                                      window=1.0),
         TypeError, "set_focus_options", "window"),
    Case("save_routers-model-uncomposed", lambda: F.save_routers(
        torch.nn.Linear(2, 2), "never-written"), ValueError, "save_routers", "model"),
    # ---- training: TrainConfig, Trainer
    Case("TrainConfig-lr-str", lambda: training.TrainConfig(epochs=1, lr="0.1"), TypeError,
         "TrainConfig", "lr"),
    Case("TrainConfig-lr-zero", lambda: training.TrainConfig(epochs=1, lr=0.0), ValueError,
         "TrainConfig", "lr"),
    Case("TrainConfig-epochs-none", lambda: training.TrainConfig(epochs=None, max_steps=None),
         ValueError, "TrainConfig", "epochs"),
    Case("TrainConfig-betas-float", lambda: training.TrainConfig(epochs=1, betas=0.9),
         TypeError, "TrainConfig", "betas"),
    Case("TrainConfig-betas-range", lambda: training.TrainConfig(epochs=1, betas=(0.9, 1.0)),
         ValueError, "TrainConfig", "betas"),
    Case("TrainConfig-optimizer-value", lambda: training.TrainConfig(epochs=1, optimizer="adam"),
         ValueError, "TrainConfig", "optimizer"),
    Case("TrainConfig-nesterov-adamw", lambda: training.TrainConfig(epochs=1, nesterov=True),
         ValueError, "TrainConfig", "nesterov"),
    Case("TrainConfig-warmup_epochs-both", lambda: training.TrainConfig(
        epochs=1, warmup_steps=2, warmup_epochs=1.0), ValueError, "TrainConfig", "warmup_epochs"),
    Case("TrainConfig-device-int", lambda: training.TrainConfig(epochs=1, device=0), TypeError,
         "TrainConfig", "device"),
    Case("TrainConfig.from_dict-d-unknown", lambda: training.TrainConfig.from_dict(
        {"epochs": 1, "bogus": 2}), ValueError, "TrainConfig.from_dict", "d"),
    Case("Trainer-model-str", lambda: training.Trainer(
        "mlp", training.ClassificationTask(), training.TrainConfig(epochs=1), [1]), TypeError,
        "Trainer", "model"),
    Case("Trainer-config-dict", lambda: training.Trainer(
        torch.nn.Linear(2, 2), training.ClassificationTask(), {"epochs": 1}, [1]), TypeError,
        "Trainer", "config"),
    Case("Trainer-task-object", lambda: training.Trainer(
        torch.nn.Linear(2, 2), object(), training.TrainConfig(epochs=1), [1]), TypeError,
        "Trainer", "task"),
    Case("Trainer-train_data-none", lambda: training.Trainer(
        torch.nn.Linear(2, 2), training.ClassificationTask(), training.TrainConfig(epochs=1),
        None), TypeError, "Trainer", "train_data"),
    Case("Trainer-callbacks-object", lambda: training.Trainer(
        torch.nn.Linear(2, 2), training.ClassificationTask(), training.TrainConfig(epochs=1),
        [1], callbacks=[object()]), TypeError, "Trainer", "callbacks"),
    Case("build_optimizer-model-frozen", lambda: training.build_optimizer(
        torch.nn.Linear(2, 2).requires_grad_(False), training.TrainConfig(epochs=1)), ValueError,
        "build_optimizer", "model"),
    # ---- analysis: metrics and paired statistics
    Case("participation_ratio-z-one-sample", lambda: analysis.participation_ratio(
        torch.randn(1, 4)), ValueError, "participation_ratio", "z"),
    Case("participation_ratio-z-constant", lambda: analysis.participation_ratio(
        torch.ones(5, 3)), ValueError, "participation_ratio", "z"),
    Case("participation_ratio_from_covariance-cov-square", lambda:
         analysis.participation_ratio_from_covariance(torch.ones(2, 3)), ValueError,
         "participation_ratio_from_covariance", "cov"),
    Case("effective_rank-m-zero", lambda: analysis.effective_rank(torch.zeros(3, 3)),
         ValueError, "effective_rank", "m"),
    Case("stable_rank-m-empty", lambda: analysis.stable_rank(torch.ones(3, 0)), ValueError,
         "stable_rank", "m"),
    Case("attention_entropy-attn-negative", lambda: analysis.attention_entropy(
        torch.tensor([[1.5, -0.5]])), ValueError, "attention_entropy", "attn"),
    Case("attention_entropy-attn-rows", lambda: analysis.attention_entropy(
        torch.tensor([[0.2, 0.2]])), ValueError, "attention_entropy", "attn"),
    Case("attention_entropy-mask-long", lambda: analysis.attention_entropy(
        torch.tensor([[0.5, 0.5]]), mask=torch.ones(1, 2, dtype=torch.long)), TypeError,
        "attention_entropy", "mask"),
    Case("attention_entropy-mask-shape", lambda: analysis.attention_entropy(
        torch.full((2, 2), 0.5), mask=torch.ones(3, 2, dtype=torch.bool)), ValueError,
        "attention_entropy", "mask"),
    Case("paired_sign_test-a-str", lambda: analysis.paired_sign_test("12", "34"), TypeError,
         "paired_sign_test", "a"),
    Case("paired_sign_test-b-length", lambda: analysis.paired_sign_test([1.0], [1.0, 2.0]),
         ValueError, "paired_sign_test", "b"),
    Case("paired_sign_test-a-nan", lambda: analysis.paired_sign_test([NAN], [1.0]), ValueError,
         "paired_sign_test", "a"),
    Case("paired_permutation_test-a-many", lambda: analysis.paired_permutation_test(
        [0.0] * 21, [1.0] * 21), ValueError, "paired_permutation_test", "a"),
    Case("paired_t_test-a-one-pair", lambda: analysis.paired_t_test([1.0], [2.0]), ValueError,
         "paired_t_test", "a"),
    Case("paired_t_test-level-str", lambda: analysis.paired_t_test(
        [1.0, 2.0], [0.0, 0.5], level="0.9"), TypeError, "paired_t_test", "level"),
    Case("paired_t_test-level-one", lambda: analysis.paired_t_test(
        [1.0, 2.0], [0.0, 0.5], level=1.0), ValueError, "paired_t_test", "level"),
    Case("directional_probability-b-length", lambda: analysis.directional_probability(
        [1.0], [1.0, 2.0]), ValueError, "directional_probability", "b"),
    # ---- issue 53 (H5): one finiteness rule, a NaN or infinity refused with its argument
    Case("QuaternionLinear.forward-x-nan", lambda: QuaternionLinear(4, 4)(
        torch.tensor([[NAN, 0.0, 0.0, 0.0]])), ValueError, "QuaternionLinear", "x"),
    Case("full_attention-q-nan", lambda: F.full_attention(*_nan_qkv("q")), ValueError,
         "full_attention", "q"),
    Case("full_attention-v-inf", lambda: F.full_attention(*_nan_qkv("v", INF)), ValueError,
         "full_attention", "v"),
    Case("focus_dense_attention-k-nan", lambda: F.focus_dense_attention(
        *_nan_qkv("k"), _g(), 2), ValueError, "focus_dense_attention", "k"),
    Case("focus_blocks_attention-q-nan", lambda: F.focus_blocks_attention(
        *_nan_qkv("q"), _g(), 2), ValueError, "focus_blocks_attention", "q"),
    Case("focus_blocks_reference-v-inf", lambda: F.focus_blocks_reference(
        *_nan_qkv("v", -INF), _g(), 2), ValueError, "focus_blocks_reference", "v"),
    Case("focus_soft_attention-q-nan", lambda: F.focus_soft_attention(
        *_nan_qkv("q"), _soft(), 2), ValueError, "focus_soft_attention", "q"),
    Case("focus_far_bias_attention-far_bias-nan", lambda: F.focus_far_bias_attention(
        *_nan_qkv(None), torch.zeros(2), torch.tensor([0.0, NAN]), 2), ValueError,
        "focus_far_bias_attention", "far_bias"),
    Case("sinkhorn_log-scores-nan", lambda: F.sinkhorn_log(torch.full((6, 3), NAN)),
         ValueError, "sinkhorn_log", "scores"),
    Case("straight_through_membership-soft-nan", lambda: F.straight_through_membership(
        torch.full((6, 3), NAN), _g()), ValueError, "straight_through_membership", "soft"),
    Case("straight_through_pair_share-soft-nan", lambda: F.straight_through_pair_share(
        torch.full((6, 3), NAN), _g(), 2), ValueError, "straight_through_pair_share", "soft"),
    Case("additive_gate_share-soft-inf", lambda: F.additive_gate_share(
        torch.full((6, 3), INF), 2), ValueError, "additive_gate_share", "soft"),
    Case("RandomGroupsRouter-h-nan", lambda: F.RandomGroupsRouter(3)(_nan(6, 8)), ValueError,
         "RandomGroupsRouter", "h"),
    Case("WindowOnlyRouter-h-nan", lambda: F.WindowOnlyRouter()(_nan(6, 8)), ValueError,
         "WindowOnlyRouter", "h"),
    Case("FarBiasRouter-h-inf", lambda: F.FarBiasRouter(2)(_nan(6, 8, value=INF)), ValueError,
         "FarBiasRouter", "h"),
    Case("FocusAttention-x-nan", lambda: F.FocusAttention(8, 2, num_groups=2, window=2)(
        _nan(6, 8)), ValueError, "FocusAttention", "x"),
    Case("NormalizeImage-data-nan", lambda: transforms.NormalizeImage(0.5, 0.2)(
        _nan(1, 8, 8)), ValueError, "NormalizeImage", "data"),
    Case("RandomCropPad-data.image-nan", lambda: transforms.RandomCropPad(8)(
        Data(image=_nan(1, 8, 8))), ValueError, "RandomCropPad", "data.image"),
    Case("RandomHorizontalFlip-data-inf", lambda: transforms.RandomHorizontalFlip()(
        _nan(1, 8, 8, value=INF)), ValueError, "RandomHorizontalFlip", "data"),
    Case("AppendPosition-data.pos-nan", lambda: transforms.AppendPosition()(
        Data(x=torch.rand(6, 2), pos=_nan(6, 3))), ValueError, "AppendPosition", "data.pos"),
    Case("AppendPosition-data.x-inf", lambda: transforms.AppendPosition()(
        Data(x=_nan(6, 2, value=INF), pos=torch.rand(6, 3))), ValueError, "AppendPosition",
        "data.x"),
    Case("project_to_image-pos-nan", lambda: transforms.project_to_image(_nan(4, 3)),
         ValueError, "project_to_image", "pos"),
    Case("masked_softmax_entropy-logits-nan", lambda: analysis.masked_softmax_entropy(
        _nan(2, 2), torch.ones(2, 2, dtype=torch.bool)), ValueError, "masked_softmax_entropy",
        "logits"),
    Case("logit_singular_values-k-inf", lambda: analysis.logit_singular_values(
        torch.ones(4, 2), _nan(4, 2, value=INF)), ValueError, "logit_singular_values", "k"),
    Case("spectrum_participation_ratio-s-nan", lambda: analysis.spectrum_participation_ratio(
        torch.tensor([NAN, 1.0])), ValueError, "spectrum_participation_ratio", "s"),
    Case("mean_std-values-nan", lambda: analysis.mean_std([1.0, NAN]), ValueError, "mean_std",
         "values"),
    Case("least_squares_slope-y-nan", lambda: analysis.least_squares_slope(
        [1.0, 2.0, 3.0], [1.0, NAN, 3.0]), ValueError, "least_squares_slope", "y"),
    # ---- issue 53 (H5): impossible inputs that returned a plausible value
    Case("sinkhorn_log-num_iters-negative", lambda: F.sinkhorn_log(torch.randn(6, 3),
                                                                   num_iters=-1),
         ValueError, "sinkhorn_log", "num_iters"),
    Case("sinkhorn_log-num_segments-zero", lambda: F.sinkhorn_log(
        torch.randn(6, 3), batch=torch.zeros(6, dtype=torch.long), num_segments=0),
        ValueError, "sinkhorn_log", "num_segments"),
    Case("full_attention-k-fewer-tokens", lambda: F.full_attention(
        torch.randn(16, 2, 4), torch.randn(10, 2, 4), torch.randn(10, 2, 4)), ValueError,
        "full_attention", "k"),
    Case("full_attention-k-fewer-tokens-bidirectional", lambda: F.full_attention(
        torch.randn(16, 2, 4), torch.randn(10, 2, 4), torch.randn(10, 2, 4), causal=False),
        ValueError, "full_attention", "k"),
    Case("spearman-y-length", lambda: analysis.spearman([1, 2], [1]), ValueError, "spearman",
         "y"),
    Case("least_squares_slope-y-length", lambda: analysis.least_squares_slope(
        [1.0, 2.0], [1.0]), ValueError, "least_squares_slope", "y"),
    Case("binomial_interval-n-zero", lambda: analysis.binomial_interval(0, 0), ValueError,
         "binomial_interval", "n"),
    Case("binomial_interval-k-above-n", lambda: analysis.binomial_interval(3, 2), ValueError,
         "binomial_interval", "k"),
    Case("binomial_interval-k-negative", lambda: analysis.binomial_interval(-1, 2), ValueError,
         "binomial_interval", "k"),
    Case("binomial_interval-level-one", lambda: analysis.binomial_interval(1, 2, level=1.0),
         ValueError, "binomial_interval", "level"),
    Case("mean_std-values-empty", lambda: analysis.mean_std([]), ValueError, "mean_std",
         "values"),
    Case("random_balanced_groups-top_k-above-K", lambda: F.random_balanced_groups(
        torch.arange(6), 2, 3), ValueError, "random_balanced_groups", "top_k"),
]


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_with_a_named_argument(case):
    with pytest.raises(Exception) as info:
        case.call()
    # the exact class, not a subclass or a neighbour: TypeError for a wrong type, ValueError
    # for a wrong value
    assert type(info.value) is case.exc, f"{type(info.value).__name__}: {info.value}"
    msg = str(info.value)
    assert msg.startswith(f"{case.where}: ") or re.match(
        rf"^{re.escape(case.where)}(\(.*?\))?: ", msg), msg
    assert f"'{case.arg}'" in msg and " must be " in msg, msg
