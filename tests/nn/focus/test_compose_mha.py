"""compose_focus and QKProbe on torch.nn.MultiheadAttention and PyG's GPSConv.

References: the original MultiheadAttention (its own forward, its own attention weights),
each graph of a PyG batch run alone, and q/k computed by hand from the in-projection."""
from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch
from torch import nn

from quest_geometric.adapters import MultiheadAttentionAdapter, get_attention_adapter
from quest_geometric.analysis.probe import QKProbe
from quest_geometric.nn.focus.compose import (
    compose_focus,
    decompose,
    focus_disabled,
    router_parameters,
    set_focus_options,
)
from quest_geometric.nn.focus.composed import FocusComposed

C, H = 16, 2


def _mha(batch_first: bool = True, seed: int = 0, **kw) -> nn.Sequential:
    torch.manual_seed(seed)
    m = nn.Sequential(nn.MultiheadAttention(C, H, batch_first=batch_first, **kw))
    with torch.no_grad():  # non-zero biases, so a missing bias would show
        m[0].in_proj_bias.normal_()
        m[0].out_proj.bias.normal_()
    return m


def _inputs(batch_first: bool, b: int = 3, t: int = 9, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, C, generator=g)
    pad = torch.zeros(b, t, dtype=torch.bool)  # True = padding
    pad[1, 6:] = True
    pad[2, 2:] = True
    return (x if batch_first else x.transpose(0, 1).contiguous()), pad


def _btc(y: torch.Tensor, batch_first: bool) -> torch.Tensor:
    return y if batch_first else y.transpose(0, 1)


def _separate(mha: nn.MultiheadAttention) -> nn.MultiheadAttention:
    """The same MultiheadAttention with separate q/k/v projection weights (PyTorch's
    use_separate_proj_weight path)."""
    w = mha.in_proj_weight.detach()
    del mha.in_proj_weight
    mha.register_parameter("in_proj_weight", None)
    for name, part in zip(("q", "k", "v"), w.chunk(3)):
        setattr(mha, f"{name}_proj_weight", nn.Parameter(part.clone()))
    mha._qkv_same_embed_dim = False
    return mha


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("padding", [None, "bool", "float"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_disabled_is_bitwise_and_wide_window_equals_original(batch_first, padding, mode):
    m = _mha(batch_first)
    getattr(m, mode)()
    x, pad = _inputs(batch_first)
    kw = dict(need_weights=False)
    if padding == "bool":
        kw["key_padding_mask"] = pad
    elif padding == "float":
        kw["key_padding_mask"] = torch.zeros(pad.shape).masked_fill(pad, float("-inf"))
    with torch.no_grad():
        trainable = m[0](x, x, x, **kw)[0]
        # compose_focus freezes the original weights; on some CPUs (seen on an AVX2 AMD
        # EPYC) PyTorch's kernels for a frozen and a trainable MultiheadAttention differ in
        # the last bit, so the bitwise reference is the original with its weights frozen
        for p in m.parameters():
            p.requires_grad_(False)
        ref = m[0](x, x, x, **kw)[0]
        torch.testing.assert_close(ref, trainable)
        compose_focus(m, causal=False, num_groups=4, top_k=1, window=pad.size(1))
        assert isinstance(m[0], FocusComposed) and isinstance(m[0], nn.MultiheadAttention)
        with focus_disabled(m):
            off = m[0](x, x, x, **kw)
        assert off[1] is None and torch.equal(off[0], ref)
        out, weights = m[0](x, x, x, **kw)
    assert weights is None and out.shape == ref.shape
    real = ~pad if padding else torch.ones_like(pad)
    o, r = _btc(out, batch_first), _btc(ref, batch_first)
    torch.testing.assert_close(o[real], r[real], atol=1e-5, rtol=0)
    # padding query rows: out_proj of a zero attention output, i.e. its bias
    torch.testing.assert_close(o[~real], m[0].out_proj.bias.expand_as(o[~real]),
                               atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_causal_mask_separate_weights_and_unbatched(mode):
    # causal=True composition with the causal attn_mask, separate q/k/v weights
    m = _mha(True)
    getattr(m, mode)()
    x, pad = _inputs(True)
    t = x.size(1)
    causal = nn.Transformer.generate_square_subsequent_mask(t)  # float, -inf above
    fpad = torch.zeros(pad.shape).masked_fill(pad, float("-inf"))
    u = x[0]
    with torch.no_grad():
        packed = m[0](x, x, x, key_padding_mask=fpad, attn_mask=causal, need_weights=False)[0]
        _separate(m[0])
        ref = m[0](x, x, x, key_padding_mask=fpad, attn_mask=causal, need_weights=False)[0]
        torch.testing.assert_close(ref, packed, atol=1e-6, rtol=0)  # the conversion is exact
        ref_un = m[0](u, u, u, attn_mask=causal, need_weights=False)[0]
        compose_focus(m, causal=True, num_groups=4, top_k=1, window=t)
        for kpm, mask in ((fpad, causal), (pad, causal.isinf()),
                          (pad, causal.isinf().expand(x.size(0) * H, t, t))):
            out = m[0](x, x, x, key_padding_mask=kpm, attn_mask=mask, is_causal=True,
                       need_weights=False)[0]
            torch.testing.assert_close(out[~pad], ref[~pad], atol=1e-5, rtol=0)
        out_un, _ = m[0](u, u, u, attn_mask=causal, need_weights=False)
    assert out_un.shape == (t, C)
    torch.testing.assert_close(out_un, ref_un, atol=1e-5, rtol=0)


def test_small_window_changes_output_and_routers_train():
    m = _mha(True)
    x, pad = _inputs(True, t=12)
    with torch.no_grad():
        ref = m[0](x, x, x, key_padding_mask=pad, need_weights=False)[0]
    compose_focus(m, causal=False, num_groups=4, top_k=1, window=0)
    m.train()
    out = m[0](x, x, x, key_padding_mask=pad, need_weights=False)[0]
    assert not torch.allclose(out[~pad], ref[~pad], atol=1e-3)
    out[~pad].square().sum().backward()
    grads = [p.grad for p in router_parameters(m)]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(bool(g.abs().sum() > 0) for g in grads)
    assert all(p.grad is None for p in m[0].original.parameters())  # frozen


# ----------------------------------------------------------------------------- GPSConv

pyg = pytest.importorskip("torch_geometric")
from torch_geometric.data import Batch, Data  # noqa: E402
from torch_geometric.nn import GINConv, GPSConv  # noqa: E402
from torch_geometric.utils import to_dense_batch  # noqa: E402


class GPSNet(nn.Module):
    def __init__(self, conv: bool = True, norm: str = "layer_norm", layers: int = 2) -> None:
        super().__init__()
        self.lin = nn.Linear(5, C)

        def local():
            return GINConv(nn.Sequential(nn.Linear(C, C), nn.ReLU(), nn.Linear(C, C))) \
                if conv else None

        self.convs = nn.ModuleList([GPSConv(C, local(), heads=H, norm=norm,
                                            attn_type="multihead") for _ in range(layers)])

    def forward(self, data) -> torch.Tensor:
        x = self.lin(data.x)
        for c in self.convs:
            x = c(x, data.edge_index, data.batch)
        return x


def _graphs(sizes=(5, 9, 3, 12), seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        out.append(Data(x=torch.randn(n, 5, generator=g),
                        edge_index=torch.randint(0, n, (2, 2 * n), generator=g)))
    return out


@pytest.mark.parametrize("conv", [True, False])
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_gps_each_graph_equals_itself_alone(conv, mode):
    torch.manual_seed(0)
    net = GPSNet(conv=conv)
    graphs = _graphs()
    batch = Batch.from_data_list(graphs)
    getattr(net, mode)()  # dropout 0; the mode picks soft (train) or hard (eval) Focus
    with torch.no_grad():
        ref = net(batch)
    compose_focus(net, causal=False, num_groups=4, top_k=1, window=0)
    assert all(isinstance(c.attn, FocusComposed) and isinstance(c.attn, nn.MultiheadAttention)
               for c in net.convs)
    with torch.no_grad():
        out = net(batch)
        alone = torch.cat([net(Batch.from_data_list([g])) for g in graphs])
    torch.testing.assert_close(out, alone, atol=1e-5, rtol=0)
    assert not torch.allclose(out, ref, atol=1e-3)  # window 0: Focus really is on
    # a wide window is full attention over each graph: the uncomposed GPSConv model
    set_focus_options(net, window=max(g.num_nodes for g in graphs))
    with torch.no_grad():
        torch.testing.assert_close(net(batch), ref, atol=1e-5, rtol=0)
        with focus_disabled(net):
            assert torch.equal(net(batch), ref)
    decompose(net)
    assert all(type(c.attn) is nn.MultiheadAttention for c in net.convs)
    with torch.no_grad():
        assert torch.equal(net(batch), ref)


def test_gps_composed_attention_reads_through_to_the_original():
    torch.manual_seed(0)
    net = GPSNet(layers=1)
    mha = net.convs[0].attn
    compose_focus(net, causal=False, window=0)
    w = net.convs[0].attn
    assert w.batch_first and w.in_proj_weight is mha.in_proj_weight
    before = mha.in_proj_weight.detach().clone()
    net.convs[0].reset_parameters()  # GPSConv calls self.attn._reset_parameters()
    assert not torch.equal(mha.in_proj_weight, before)
    assert list(net.state_dict()) == [k for k in net.state_dict()
                                      if ".original." not in k]  # original names kept
    assert "convs.0.attn.in_proj_weight" in net.state_dict()
    net.eval()
    batch = Batch.from_data_list(_graphs())
    again = pickle.loads(pickle.dumps(net))  # torch.save(model) pickles the wrapper class
    assert type(again.convs[0].attn) is type(w)
    with torch.no_grad():
        assert torch.equal(again(batch), net(batch))


def test_qkprobe_measures_gps_attention_on_real_nodes():
    torch.manual_seed(0)
    net = GPSNet().eval()
    graphs = _graphs()
    batch = Batch.from_data_list(graphs)
    inputs = {}
    hooks = [c.register_forward_pre_hook(lambda mod, a, i=i: inputs.__setitem__(i, a[0]))
             for i, c in enumerate(net.convs)]
    with QKProbe(net) as probe, torch.no_grad():
        net(batch)
    for h in hooks:
        h.remove()
    assert probe.layer_names == ["convs.0.attn", "convs.1.attn"]
    recs = probe.results()
    assert all(isinstance(r[key], float) and math.isfinite(r[key]) for r in recs
               for key in ("pr_q", "pr_k", "qk_effective_rank", "attention_entropy"))
    n = batch.num_nodes
    for i, conv in enumerate(net.convs):
        mha = conv.attn
        x = inputs[i].double()  # the real nodes only, [N, C]
        w, bias = mha.in_proj_weight.detach().double(), mha.in_proj_bias.detach().double()
        q = x @ w[:C].T + bias[:C]
        k = x @ w[C:2 * C].T + bias[C:2 * C]
        d = C // H
        heads = [r for r in recs if r["layer"] == f"convs.{i}.attn" and r["head"] is not None]
        for h, r in enumerate(heads):
            for name, z in (("pr_q", q), ("pr_k", k)):
                cov = torch.cov(z[:, h * d:(h + 1) * d].T)
                pr = float(torch.diagonal(cov).sum() ** 2 / (cov ** 2).sum())
                assert r[name] == pytest.approx(pr, rel=1e-6)
            assert r["tokens"] == n and r["probe_tokens"] == n
        # entropy against the module's own attention weights (padding excluded)
        xd, real = to_dense_batch(inputs[i], batch.batch)
        with torch.no_grad():
            _, a = mha(xd, xd, xd, key_padding_mask=~real, need_weights=True,
                       average_attn_weights=False)  # [B, H, T, S]
        a = a.double()
        ent = -(torch.special.xlogy(a, a)).sum(-1) / real.sum(-1).double().log()[:, None, None]
        rows = (real & (real.sum(-1, keepdim=True) > 1))[:, None, :].expand_as(ent)
        want = (ent * rows).sum((0, 2)) / rows.sum((0, 2))
        got = torch.tensor([r["attention_entropy"] for r in heads], dtype=torch.float64)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # a composed GPSConv attention is still a MultiheadAttention: the probe measures the
    # same queries and keys through it
    compose_focus(net, causal=False, window=0)
    with QKProbe(net) as probe2, torch.no_grad():
        net(batch)
    assert probe2.layer_names == probe.layer_names
    first = [r for r in recs if r["layer"] == "convs.0.attn"]  # later layers see Focus outputs
    for a, b in zip([r for r in probe2.results() if r["layer"] == "convs.0.attn"], first):
        assert a["pr_q"] == pytest.approx(b["pr_q"], rel=1e-9)
        assert a["pr_k"] == pytest.approx(b["pr_k"], rel=1e-9)


def test_qk_view_follows_the_call():
    m = _mha(True)
    x, pad = _inputs(True)
    adapter = get_attention_adapter(m[0])
    assert isinstance(adapter, MultiheadAttentionAdapter) and adapter.causal is None
    t = x.size(1)
    causal = nn.Transformer.generate_square_subsequent_mask(t)
    view = adapter.qk_view(m[0], (x, x, x), {"key_padding_mask": pad, "attn_mask": causal})
    assert view.causal and torch.equal(view.q_valid, ~pad) and torch.equal(view.k_valid, ~pad)
    q = (x @ m[0].in_proj_weight[:C].T + m[0].in_proj_bias[:C]).view(3, t, H, C // H)
    torch.testing.assert_close(view.q, q.transpose(1, 2))
    assert view.scale == pytest.approx(1 / math.sqrt(C // H))
    assert not adapter.qk_view(m[0], (x, x, x), {}).causal


# ----------------------------------------------------------------------------- errors

def test_errors():
    m = _mha(True)
    with pytest.raises(ValueError, match="^FocusComposed: 'causal' must be True or False for a "
                                         "MultiheadAttention .*pass causal=True or "
                                         "causal=False, got None$"):
        compose_focus(copy.deepcopy(m))
    x, pad = _inputs(True)
    y = torch.randn_like(x)
    compose_focus(m, causal=False, window=2)
    with pytest.raises(ValueError, match=r"^compose_focus \(MultiheadAttention\): 'key' must be "
                                         "the 'query' tensor itself .*only self-attention.*"
                                         "cross-attention is not"):
        m[0](x, y, y, need_weights=False)
    with pytest.raises(ValueError, match=r"^compose_focus \(MultiheadAttention\): 'value' must "
                                         "be the 'query' tensor itself"):
        m[0](x, x, x.clone(), need_weights=False)
    with pytest.raises(ValueError, match=r"^compose_focus \(MultiheadAttention\): "
                                         r"'need_weights' must be False .*, got True \(the "
                                         r"default of MultiheadAttention.forward\)$"):
        m[0](x, x, x)
    with pytest.raises(ValueError, match=r"'need_weights' must be False .*, got True$"):
        m[0](x, x, x, need_weights=True)
    t = x.size(1)
    causal = nn.Transformer.generate_square_subsequent_mask(t)
    with pytest.raises(ValueError, match="asks for causal attention.*causal=False"):
        m[0](x, x, x, attn_mask=causal, need_weights=False)
    window = torch.ones(t, t, dtype=torch.bool).triu(3)  # a sliding window: not causal
    with pytest.raises(ValueError, match=r"^compose_focus \(MultiheadAttention\): 'attn_mask' "
                                         "must be None or the causal mask"):
        m[0](x, x, x, attn_mask=window, need_weights=False)
    with pytest.raises(ValueError, match="'attn_mask' must be .*, got an additive bias"):
        m[0](x, x, x, attn_mask=torch.randn(t, t), need_weights=False)
    with pytest.raises(ValueError, match="'key_padding_mask' must be .*, got an additive bias"):
        m[0](x, x, x, key_padding_mask=torch.randn(pad.shape), need_weights=False)
    with pytest.raises(ValueError, match=r"'key_padding_mask' must be of shape \[3, 9\]"):
        m[0](x, x, x, key_padding_mask=pad[:, :4], need_weights=False)
    with pytest.raises(ValueError, match="'attn_mask' must be the causal mask when "
                                         "is_causal=True"):
        m[0](x, x, x, is_causal=True, need_weights=False)
    # all-allowed masks are no restriction
    with torch.no_grad():
        a = m[0](x, x, x, attn_mask=torch.zeros(t, t), need_weights=False)[0]
        b = m[0](x, x, x, need_weights=False)[0]
    assert torch.equal(a, b)
    for kw in ({"add_bias_kv": True}, {"add_zero_attn": True}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            compose_focus(_mha(True, **kw), causal=False)
    # kdim != embed_dim can only be cross-attention: not composed
    cross = nn.Sequential(nn.MultiheadAttention(C, H, kdim=8, vdim=8))
    with pytest.raises(ValueError, match="^compose_focus: 'model' must be a model with a "
                                         "supported attention layer"):
        compose_focus(cross, causal=False)
