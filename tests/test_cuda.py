"""The library on CUDA, against the same computation on the CPU.

Every test here is skipped without a GPU (development and CI machines have none); they run
in ``benchmarks/cuda_check.sh``, the script for a lent GPU machine. Each one builds a layer,
a model or an analysis on the CPU, copies it to CUDA and asserts that outputs and gradients
agree with the CPU's (float64 where the layer allows it, so that the tolerance measures the
code, not TF32), or, for the kNN, with the brute-force reference. The Focus FlexAttention
kernel has its own CUDA test in ``tests/nn/focus/test_flex.py``.
"""
from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

CUDA = torch.device("cuda")


def _grads(out: torch.Tensor, inputs, gout: torch.Tensor):
    return torch.autograd.grad(out, inputs, gout, allow_unused=True)


def _assert_same_on_cuda(module: torch.nn.Module, inputs: tuple, tol: float = 1e-9,
                         **kwargs) -> None:
    """``module`` on the CPU and a deep copy on CUDA: the same output, the same gradients
    with respect to the floating inputs and every parameter."""
    cpu = module
    gpu = copy.deepcopy(module).to(CUDA)
    leaves_c = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    leaves_g = [x.detach().clone().to(CUDA).requires_grad_(x.is_floating_point())
                for x in inputs]
    out_c = cpu(*leaves_c, **kwargs)
    out_g = gpu(*leaves_g, **kwargs)
    assert out_g.device.type == CUDA.type
    torch.testing.assert_close(out_g.cpu(), out_c, atol=tol, rtol=tol)
    gout = torch.randn_like(out_c)
    wrt_c = [x for x in leaves_c if x.requires_grad] + [p for p in cpu.parameters()
                                                         if p.requires_grad]
    wrt_g = [x for x in leaves_g if x.requires_grad] + [p for p in gpu.parameters()
                                                         if p.requires_grad]
    for a, b in zip(_grads(out_g, wrt_g, gout.to(CUDA)), _grads(out_c, wrt_c, gout)):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a.cpu(), b, atol=tol, rtol=tol)


# ----------------------------------------------------------------------------- QSV


@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("quaternion", ["feature", "node"])
def test_qsv_conv_on_cuda_equals_cpu_and_the_reference(dense, quaternion):
    from quest_geometric.testing.qsv import knn_edges, make_qsv_conv, qsv_conv_reference

    n, k = 300, 6
    conv = make_qsv_conv(channels=16, heads=2, quaternion=quaternion,
                         num_nodes=n if quaternion == "node" else None)
    edge_index = knn_edges(n, k, seed=3)
    x = torch.randn(n, 16, dtype=torch.float64)
    _assert_same_on_cuda(conv, (x, edge_index), dense=dense)
    gpu = copy.deepcopy(conv).to(CUDA)
    ref = qsv_conv_reference(conv, x, edge_index)
    torch.testing.assert_close(gpu(x.to(CUDA), edge_index.to(CUDA), dense=dense).cpu(), ref,
                               atol=1e-9, rtol=1e-9)


def test_qsv_conv_bipartite_and_float32_on_cuda():
    from quest_geometric.nn import QSVConv
    from quest_geometric.testing.qsv import random_dense_edges

    torch.manual_seed(0)
    conv = QSVConv((12, 8), 16, heads=2)
    edge_index = random_dense_edges(40, 5, n_src=70, seed=1)
    x = (torch.randn(70, 12), torch.randn(40, 8))
    out_c = conv(x, edge_index)
    gpu = copy.deepcopy(conv).to(CUDA)
    out_g = gpu((x[0].to(CUDA), x[1].to(CUDA)), edge_index.to(CUDA))
    assert out_g.shape == (40, 16)
    torch.testing.assert_close(out_g.cpu(), out_c, atol=1e-4, rtol=1e-4)  # TF32 matmuls


@pytest.mark.parametrize("dense", [True, False])
def test_qsv_conv_under_bf16_autocast_on_cuda_follows_float32(dense):
    """The Trainer's default on CUDA (bf16 autocast): features in bfloat16 beside float32
    attention weights reach the sparse products (their backward once refused mixed dtypes)."""
    from quest_geometric.testing.qsv import assert_bf16_autocast_follows_float32

    assert_bf16_autocast_follows_float32(200, CUDA, dense=dense)


def test_qsv_conv_gradcheck_on_cuda():
    from quest_geometric.testing.qsv import knn_edges, make_qsv_conv

    conv = make_qsv_conv(channels=8, heads=2).to(CUDA)
    edge_index = knn_edges(12, 4, seed=5).to(CUDA)
    x = torch.randn(12, 8, dtype=torch.float64, device=CUDA, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: conv(t, edge_index), (x,))


def test_qsv_net_on_cuda_equals_cpu():
    from quest_geometric.models import QSVNet
    from quest_geometric.testing.qsv import random_image_batch
    from quest_geometric.transforms import ImageToSphere

    batch = random_image_batch(ImageToSphere(sizes=(16, 32), k=6, k_cross=2), 3, 1)
    torch.manual_seed(0)
    model = QSVNet(1, 10, channels=16, heads=2, num_layers=2).double()
    batch.x = batch.x.double()
    if getattr(batch, "pos", None) is not None:
        batch.pos = batch.pos.double()
    model.eval()
    out_c = model(batch)
    gpu = copy.deepcopy(model).to(CUDA)
    out_g = gpu(batch.clone().to(CUDA))
    torch.testing.assert_close(out_g.cpu(), out_c, atol=1e-9, rtol=1e-9)
    out_g.square().sum().backward()
    out_c.square().sum().backward()
    for (name, a), b in zip(gpu.named_parameters(), model.parameters()):
        if b.grad is not None:
            torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-8, rtol=1e-8,
                                       msg=lambda m, name=name: f"{name}: {m}")


# ----------------------------------------------------------------------------- geometry


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_knn_graph_on_cuda_equals_brute_force(backend):
    from quest_geometric.geometry import knn_graph
    from quest_geometric.testing.geometry import brute_force_knn

    g = torch.Generator().manual_seed(0)
    pos = torch.rand(500, 3, generator=g)
    batch = torch.tensor([0] * 200 + [1] * 300)
    ei = knn_graph(pos.to(CUDA), 7, batch.to(CUDA), backend=backend)
    assert ei.device.type == CUDA.type
    ref = brute_force_knn(pos, pos, 7, batch, batch, exclude_self=True)  # loop=False
    got = ei.cpu()
    assert torch.equal(got, ref)
    assert torch.equal(got, knn_graph(pos, 7, batch)), "CUDA and CPU order the neighbours alike"


# ----------------------------------------------------------------------------- Focus


@pytest.mark.parametrize("backend", ["dense", "edges", "blocks", "auto"])
@pytest.mark.parametrize("top_k, num_sinks", [(1, 0), (2, 2)])
def test_focus_attention_on_cuda_equals_cpu(backend, top_k, num_sinks):
    from quest_geometric.nn import FocusAttention

    torch.manual_seed(0)
    layer = FocusAttention(32, 4, num_groups=4, group_dim=8, top_k=top_k, window=5,
                           backend=backend, num_sinks=num_sinks).double().eval()
    x = torch.randn(2, 40, 32, dtype=torch.float64)
    # float64: 'blocks' runs its reference path on CUDA, and so does 'auto' (Triton does
    # not compile the FlexAttention kernel for float64), exact like the others
    _assert_same_on_cuda(layer, (x,), tol=1e-9)


@pytest.mark.parametrize("top_k, num_sinks", [(1, 0), (2, 2)])
def test_focus_attention_auto_float32_on_cuda_runs_flex(top_k, num_sinks, monkeypatch):
    from quest_geometric.nn import FocusAttention
    from quest_geometric.nn.focus import backends, flex

    calls = []

    def spy(*args, **kwargs):
        calls.append(args[0].dtype)
        return flex.focus_flex_attention(*args, **kwargs)
    monkeypatch.setattr(backends, "focus_flex_attention", spy)
    torch.manual_seed(0)
    layer = FocusAttention(32, 4, num_groups=4, group_dim=8, top_k=top_k, window=5,
                           backend="auto", num_sinks=num_sinks).double().eval()
    x = torch.randn(2, 40, 32, dtype=torch.float64)
    with torch.no_grad():
        ref = layer(x)
        assert layer.last_backend == "blocks"  # CPU
        cuda_layer = copy.deepcopy(layer).float().to(CUDA)
        out = cuda_layer(x.float().to(CUDA))
    assert calls == [torch.float32] and cuda_layer.last_backend == "flex"  # compiled kernel
    assert "last_backend='flex'" in repr(cuda_layer)
    # the kernel's dots may use TF32
    torch.testing.assert_close(out.double().cpu(), ref, atol=5e-3, rtol=5e-3)


def test_flex_refuses_float64_on_cuda_by_name():
    from quest_geometric.nn.focus.flex import focus_flex_attention

    q = torch.randn(64, 2, 16, dtype=torch.float64, device=CUDA)
    groups = torch.zeros(64, 1, dtype=torch.long, device=CUDA)
    with torch.no_grad(), pytest.raises(TypeError, match="float64"):
        focus_flex_attention(q, q, q, groups, 4)


def test_focus_soft_training_mode_on_cuda_equals_cpu():
    from quest_geometric.nn import FocusAttention

    torch.manual_seed(0)
    layer = FocusAttention(32, 4, num_groups=4, group_dim=8, top_k=2, window=5,
                           backend="dense").double().train()
    x = torch.randn(2, 30, 32, dtype=torch.float64)
    _assert_same_on_cuda(layer, (x,), hard=False)


def test_focus_blocks_fallback_on_cuda_equals_the_dense_definition():
    from quest_geometric.nn import focus_blocks_attention, focus_dense_attention
    from quest_geometric.testing import random_groups

    n, h, d = 500, 2, 8
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(n, h, d, generator=g, dtype=torch.float64).to(CUDA)
               for _ in range(3))
    groups = random_groups(n, 6, 2, seed=2).to(CUDA)
    batch = torch.tensor([0] * 200 + [1] * 300, device=CUDA)
    # fused=False: the plain reference path, in float64 on the GPU
    out = focus_blocks_attention(q, k, v, groups, 9, batch, True, 6, fused=False, num_sinks=3)
    ref = focus_dense_attention(q.cpu(), k.cpu(), v.cpu(), groups.cpu(), 9, batch.cpu(), True,
                                6, num_sinks=3)
    torch.testing.assert_close(out.cpu(), ref, atol=1e-10, rtol=1e-10)


def test_composed_llama_on_cuda_equals_cpu():
    pytest.importorskip("transformers")
    from quest_geometric.testing import tiny_composed_llama
    from quest_geometric.testing.hf import tokens

    model = tiny_composed_llama(top_k=2, window=3).double().eval()
    ids = tokens(2, 24)
    with torch.no_grad():
        ref = model(ids).logits
        gpu = copy.deepcopy(model).to(CUDA)
        out = gpu(ids.to(CUDA)).logits
    torch.testing.assert_close(out.cpu(), ref, atol=5e-3, rtol=5e-3)


# ----------------------------------------------------------------------------- analysis


def test_geometry_metrics_on_cuda_equal_cpu():
    from quest_geometric.analysis.metrics import (
        attention_entropy,
        effective_rank,
        participation_ratio,
        stable_rank,
    )

    g = torch.Generator().manual_seed(0)
    z = torch.randn(200, 16, generator=g, dtype=torch.float64) * torch.linspace(0.1, 2, 16,
                                                                                 dtype=torch.float64)
    for fn in (participation_ratio, effective_rank, stable_rank):
        torch.testing.assert_close(fn(z.to(CUDA)).cpu(), fn(z), atol=1e-10, rtol=1e-10)
    attn = torch.softmax(torch.randn(3, 10, 10, generator=g, dtype=torch.float64), -1)
    mask = torch.ones(10, 10, dtype=torch.bool).tril()
    attn = attn.masked_fill(~mask, 0)
    attn = attn / attn.sum(-1, keepdim=True)
    a, b = attention_entropy(attn.to(CUDA), mask.to(CUDA)), attention_entropy(attn, mask)
    torch.testing.assert_close(a.entropy.cpu(), b.entropy, atol=1e-10, rtol=1e-10)
    assert torch.equal(a.valid.cpu(), b.valid)


# ----------------------------------------------------------------------------- models


@pytest.mark.parametrize("attention", ["full", "focus"])
def test_char_gpt_loss_and_gradients_on_cuda_equal_cpu(attention):
    from quest_geometric.models.char_gpt import CharGPT, GPTConfig

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=30, block_size=32, n_layer=2, n_head=2, n_embd=32,
                    attention=attention,
                    focus={"num_groups": 4, "top_k": 1, "window": 4, "backend": "dense"})
    model = CharGPT(cfg).double().eval()
    idx = torch.randint(0, 30, (2, 32))
    out_c = model(idx, idx)
    loss_c = out_c[1] if isinstance(out_c, tuple) else out_c
    gpu = copy.deepcopy(model).to(CUDA)
    out_g = gpu(idx.to(CUDA), idx.to(CUDA))
    loss_g = out_g[1] if isinstance(out_g, tuple) else out_g
    torch.testing.assert_close(loss_g.cpu(), loss_c, atol=1e-9, rtol=1e-9)
    loss_c.backward()
    loss_g.backward()
    for a, b in zip(gpu.parameters(), model.parameters()):
        if b.grad is not None:
            torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-8, rtol=1e-8)
