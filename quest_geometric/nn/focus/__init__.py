r"""Focus sparse attention (Yao et al., `"Why Attend to Everything? Focus is the Key"
<https://arxiv.org/abs/2604.03260>`_), one module per concern.

Token :math:`i` of a sequence attends to the tokens :math:`j` (:math:`j \le i` if causal)
with :math:`|i - j| \le w`, a shared hard group, :math:`G_i \cap G_j \neq \emptyset`, or
an attention sink, :math:`\min(p_i, p_j) < s` (:math:`p` the position in the sequence);
the groups come from a router (:mod:`~quest_geometric.nn.focus.router`, built on
:mod:`~quest_geometric.nn.focus.sinkhorn` and :mod:`~quest_geometric.nn.focus.topk`).
:class:`FocusAttention` (:mod:`~quest_geometric.nn.focus.module`) is the layer, computing
the pattern by a registered back-end (:mod:`~quest_geometric.nn.focus.backends`: the CPU
decomposition of :mod:`~quest_geometric.nn.focus.blocks`, FlexAttention of
:mod:`~quest_geometric.nn.focus.flex`, message passing over
:mod:`~quest_geometric.nn.focus.edge_index`, the dense oracle of
:mod:`~quest_geometric.nn.focus.dense`), tuned by :mod:`~quest_geometric.nn.focus.config`.
:mod:`~quest_geometric.nn.focus.decode` is cached decoding,
:mod:`~quest_geometric.nn.focus.compose` composes Focus onto pretrained models, whose
routers :mod:`~quest_geometric.nn.focus.router_files` saves, and
:mod:`~quest_geometric.nn.focus.budget` measures the pairs kept. Private: ``_layout`` and
``_aten`` (the only caller of PyTorch's private flash-attention kernels).
"""
from quest_geometric.nn.focus.backends import (choose_focus_backend, focus_backend,
                                               focus_backend_names, register_focus_backend,
                                               unregister_focus_backend)
from quest_geometric.nn.focus.blocks import focus_blocks_attention, focus_blocks_reference
from quest_geometric.nn.focus.budget import (additive_gate_share, focus_pair_share, pattern_share,
                                             straight_through_pair_share, window_for_share)
from quest_geometric.nn.focus.compose import (compose_focus, decompose, focus_disabled,
                                              focus_layers, router_parameters, set_focus_enabled,
                                              set_focus_options)
from quest_geometric.nn.focus.config import BlocksConfig, DecodeConfig, blocks_config, decode_config
from quest_geometric.nn.focus.composed import FocusComposed
from quest_geometric.nn.focus.decode import FocusDecodeState, route_prefix, route_step
from quest_geometric.nn.focus.dense import (focus_dense_attention, focus_far_bias_attention,
                                            focus_soft_attention, full_attention,
                                            straight_through_membership)
from quest_geometric.nn.focus.edge_index import focus_edge_index, smallest_shared_group
from quest_geometric.nn.focus.edges import FocusEdgeAttention
from quest_geometric.nn.focus.far_bias_router import FarBiasRouter
from quest_geometric.nn.focus.flex import FLEX_AVAILABLE, focus_block_mask, focus_flex_attention
from quest_geometric.nn.focus.module import FocusAttention
from quest_geometric.nn.focus.random_router import RandomGroupsRouter, random_balanced_groups
from quest_geometric.nn.focus.router import (FocusRouter, Router, RouterOutput, SoftRowsRouter,
                                             group_balance, register_router, registered_routers)
from quest_geometric.nn.focus.router_files import load_routers, save_routers
from quest_geometric.nn.focus.sinkhorn import sinkhorn_log, sinkhorn_step
from quest_geometric.nn.focus.topk import topk_groups
from quest_geometric.nn.focus.window_router import WindowOnlyRouter

__all__ = ["Router", "SoftRowsRouter", "register_router", "registered_routers", "FocusRouter",
           "RandomGroupsRouter", "random_balanced_groups", "WindowOnlyRouter", "FarBiasRouter",
           "RouterOutput", "group_balance", "sinkhorn_log", "topk_groups", "focus_edge_index",
           "smallest_shared_group", "FocusAttention", "FocusEdgeAttention",
           "focus_dense_attention", "focus_blocks_attention", "focus_blocks_reference",
           "focus_soft_attention", "focus_far_bias_attention", "full_attention",
           "straight_through_membership", "straight_through_pair_share", "additive_gate_share",
           "focus_pair_share", "pattern_share", "window_for_share", "focus_flex_attention",
           "focus_block_mask", "FLEX_AVAILABLE", "FocusDecodeState", "route_prefix", "route_step",
           "sinkhorn_step", "compose_focus", "decompose", "FocusComposed", "focus_layers",
           "router_parameters", "set_focus_enabled", "focus_disabled", "set_focus_options",
           "save_routers", "load_routers", "register_focus_backend", "unregister_focus_backend",
           "focus_backend", "focus_backend_names", "choose_focus_backend", "BlocksConfig",
           "DecodeConfig", "blocks_config", "decode_config"]
