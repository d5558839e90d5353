"""Probe adapters (registered by name) for PyG's
:class:`~torch_geometric.nn.conv.TransformerConv` (attention over the edges, with edge
features under ``edge_dim``) and :class:`~quest_geometric.nn.focus.module.FocusAttention`
(the full softmax over its q/k, the dense counterpart of its sparse pattern)."""
from __future__ import annotations

import math
from typing import Any, Dict

import torch
from torch import Tensor, nn

from quest_geometric._utils.checks import fail
from quest_geometric.adapters.base import AttentionAdapter, QKView
from quest_geometric.adapters.registry import register_attention_adapter

__all__ = ["TransformerConvProbeAdapter", "FocusAttentionProbeAdapter"]


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


class TransformerConvProbeAdapter(AttentionAdapter):
    """Probe-only adapter of PyG's ``TransformerConv``: per-head queries of the targets,
    keys of the sources, the graph's edges (any edge layout), edge-feature logits."""

    probe_only = True
    causal = False

    def qk_view(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> QKView:
        from torch_geometric.utils import is_torch_sparse_tensor, to_edge_index

        x = _arg(args, kwargs, 0, "x")
        edge_index = _arg(args, kwargs, 1, "edge_index")
        edge_attr = _arg(args, kwargs, 2, "edge_attr")
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        H, C = module.heads, module.out_channels
        q = module.lin_query(x_dst).view(-1, H, C)
        k = module.lin_key(x_src).view(-1, H, C)
        if isinstance(edge_index, Tensor) and not edge_index.is_sparse \
                and not is_torch_sparse_tensor(edge_index):
            src, dst = edge_index[0], edge_index[1]
            if getattr(module, "flow", "source_to_target") == "target_to_source":
                src, dst = dst, src
        elif is_torch_sparse_tensor(edge_index):  # adjacency given transposed: row = target
            (dst, src), _ = to_edge_index(edge_index)
        elif hasattr(edge_index, "coo"):  # torch_sparse.SparseTensor, also transposed
            dst, src, _ = edge_index.coo()
        else:
            raise fail(TypeError, "QKProbe", "edge_index", "a [2, E] tensor, a torch sparse "
                       "tensor or a torch_sparse SparseTensor (of the TransformerConv call)",
                       edge_index)
        scale = 1.0 / math.sqrt(C)
        edge_logits = None
        if module.lin_edge is not None:
            if edge_attr is None or not isinstance(edge_index, Tensor) or edge_index.dim() != 2 \
                    or edge_index.size(0) != 2 or is_torch_sparse_tensor(edge_index):
                bad = "edge_attr" if edge_attr is None else "edge_index"
                raise fail(ValueError, "QKProbe", bad, "given, with a [2, E] edge_index "
                           "tensor, for a TransformerConv with edge_dim (to reproduce its "
                           "logits)", edge_attr if edge_attr is None else edge_index)

            e = module.lin_edge(edge_attr).view(-1, H, C)
            edge_logits = (q[dst] * (k[src] + e)).sum(-1) * scale
        ei = torch.stack([src.long(), dst.long()])
        return QKView(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0), scale,
                      edge_index=ei, edge_logits=edge_logits)


class FocusAttentionProbeAdapter(AttentionAdapter):
    """Probe-only adapter of :class:`~quest_geometric.nn.focus.module.FocusAttention`
    (its own projections or its fused ``qkv``; ``[B, T, C]`` or PyG ``[N, C]`` + ``batch``
    input)."""

    probe_only = True

    def qk_view(self, module: nn.Module, args: tuple, kwargs: Dict[str, Any]) -> QKView:
        from torch_geometric.utils import to_dense_batch

        x = _arg(args, kwargs, 0, "x")
        batch = _arg(args, kwargs, 1, "batch")
        flat = x.reshape(-1, x.size(-1))
        if module.qkv is not None:
            q, k, _ = module.qkv(flat)
        else:
            q, k = module.q_proj(flat), module.k_proj(flat)
        H, d = module.num_heads, module.head_dim
        scale = 1.0 / math.sqrt(d)
        if x.dim() == 3:
            B, T = x.shape[:2]
            q, k = (t.reshape(B, T, H, d).transpose(1, 2) for t in (q, k))
            return QKView(q, k, scale, causal=module.causal)
        if batch is None:
            batch = torch.zeros(flat.size(0), dtype=torch.long, device=flat.device)
        qd, valid = to_dense_batch(q, batch)
        kd, _ = to_dense_batch(k, batch)
        B, T = valid.shape
        qd, kd = (t.view(B, T, H, d).transpose(1, 2) for t in (qd, kd))
        return QKView(qd, kd, scale, causal=module.causal, q_valid=valid, k_valid=valid)


register_attention_adapter("torch_geometric.nn.conv.transformer_conv.TransformerConv",
                           TransformerConvProbeAdapter(), builtin=True)
register_attention_adapter("quest_geometric.nn.focus.module.FocusAttention",
                           FocusAttentionProbeAdapter(), builtin=True)
