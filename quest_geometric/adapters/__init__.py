"""Attention adapters: one protocol (:class:`AttentionAdapter`) to drive any attention module
from outside, and one registry, keyed by qualified class name, that both
:func:`~quest_geometric.nn.focus.compose.compose_focus` and
:class:`~quest_geometric.analysis.probe.QKProbe` consume: one
:func:`register_attention_adapter` call teaches both a new class. Built in: Hugging Face
GPT-2, GPT-NeoX and Llama-family attention (:mod:`~quest_geometric.adapters.hf`),
:class:`torch.nn.MultiheadAttention` (:mod:`~quest_geometric.adapters.torch_mha`), and, for
the probe only, PyG's ``TransformerConv`` and ``FocusAttention``
(:mod:`~quest_geometric.adapters.pyg`)."""
from quest_geometric.adapters import hf, pyg, torch_mha  # noqa: F401  (register the built-ins)
from quest_geometric.adapters.base import (AttentionAdapter, AttentionCall, FunctionAdapter,
                                           HeadLayout, QKView, padding_from_mask, repeat_kv)
from quest_geometric.adapters.hf import (GPT2AttentionAdapter, GPTNeoXAttentionAdapter,
                                         HFAttentionAdapter, LlamaAttentionAdapter)
from quest_geometric.adapters.registry import (get_attention_adapter, register_attention_adapter,
                                               supported_attention_types,
                                               unregister_attention_adapter)
from quest_geometric.adapters.torch_mha import MultiheadAttentionAdapter

__all__ = [
    "AttentionAdapter", "AttentionCall", "HeadLayout", "QKView", "FunctionAdapter",
    "padding_from_mask", "repeat_kv", "register_attention_adapter",
    "unregister_attention_adapter", "get_attention_adapter", "supported_attention_types",
    "HFAttentionAdapter", "GPT2AttentionAdapter", "GPTNeoXAttentionAdapter",
    "LlamaAttentionAdapter", "MultiheadAttentionAdapter",
]
