r"""Attention adapters: one protocol to drive any attention module from outside.

An :class:`AttentionAdapter` parses one call of a recognised attention module, returns its
per-head queries, keys and values and applies its output projection.
:func:`~quest_geometric.nn.focus.compose.compose_focus` and
:class:`~quest_geometric.analysis.probe.QKProbe` both consume this one registry, keyed by
qualified class name; teach both a new class with one :func:`register_attention_adapter`
call. This layer sits below :mod:`quest_geometric.nn` and :mod:`quest_geometric.analysis`.

Built-in adapters: Hugging Face ``GPT2Attention``, ``GPTNeoXAttention``, ``LlamaAttention``,
``MistralAttention``, ``Qwen2Attention`` (:mod:`~quest_geometric.adapters.hf`), PyTorch's
:class:`torch.nn.MultiheadAttention` (:mod:`~quest_geometric.adapters.torch_mha`), PyG's
``TransformerConv`` and the library's ``FocusAttention`` (probe only,
:mod:`~quest_geometric.adapters.pyg`); CharGPT registers its own in
:mod:`quest_geometric.models.char_gpt`.
"""
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
