r"""Focus sparse attention (Yao et al., `"Why Attend to Everything? Focus is the Key"
<https://arxiv.org/abs/2604.03260>`_), one module per concern.

Token :math:`i` of a sequence attends to the tokens :math:`j` (:math:`j \le i` if causal)
with :math:`|i - j| \le w`, a shared hard group, :math:`G_i \cap G_j \neq \emptyset`, or
an attention sink, :math:`\min(p_i, p_j) < s` (:math:`p` the position in the sequence,
``num_sinks`` :math:`s`, 0 by default); the groups come from a learned router. The
modules, from the bottom up:

- :mod:`~quest_geometric.nn.focus.sinkhorn`: prefix-causal log-space Sinkhorn, whole
  sequences (:func:`sinkhorn_log`) and one token at a time (:func:`sinkhorn_step`, with its
  host-side twin for cached decoding).
- :mod:`~quest_geometric.nn.focus.topk`: the deterministic top-:math:`k` tie rule
  (:func:`topk_groups`).
- :mod:`~quest_geometric.nn.focus.group_sets`: the one bit code of group sets the blocks,
  decoding and FlexAttention paths share.
- :mod:`~quest_geometric.nn.focus.config`: the kernels' tuning as frozen configuration
  (:class:`BlocksConfig`, :class:`DecodeConfig`; :func:`blocks_config`,
  :func:`decode_config` set them for a block of code).
- :mod:`~quest_geometric.nn.focus.router`: the routing protocol :class:`Router` (what a new
  routing rule implements, in one file: groups, the optional soft rows of
  :class:`SoftRowsRouter`, and ``config()`` / ``from_config()`` to be saved; its result is a
  :class:`RouterOutput`), the registry a rule joins with :func:`register_router`, the
  learned :class:`FocusRouter` (centroids, Sinkhorn, top-:math:`k`) and
  :func:`group_balance`.
- :mod:`~quest_geometric.nn.focus.random_router`: :class:`RandomGroupsRouter`, random
  balanced groups (an untrained, content-free :class:`Router`).
- :mod:`~quest_geometric.nn.focus.window_router`: :class:`WindowOnlyRouter`, the empty
  group set for every token (``top_k = 0``): the sliding window plus attention sinks as a
  Focus pattern (content-free).
- :mod:`~quest_geometric.nn.focus.far_bias_router`: :class:`FarBiasRouter`, the
  content-free trained control of the soft rows (a per-head temperature and far-pair bias,
  :func:`~quest_geometric.nn.focus.dense.focus_far_bias_attention`).
- :mod:`~quest_geometric.nn.focus.edge_index`: the pattern as a PyG ``edge_index``
  (:func:`focus_edge_index`, memory :math:`O(E)`).
- :mod:`~quest_geometric.nn.focus.dense`: every pair computed densely: the hard-mask oracle
  :func:`focus_dense_attention`, the soft-gated training attention
  :func:`focus_soft_attention` (with the straight-through gate's
  :func:`straight_through_membership`) and :func:`full_attention`.
- :mod:`~quest_geometric.nn.focus.budget`: :func:`straight_through_pair_share`, the share of
  far pairs hard Focus keeps, differentiable, for a pair budget in training;
  :func:`additive_gate_share`, the share the soft additive gate keeps;
  :func:`focus_pair_share`, the measured share of pairs a hard pattern keeps; the sliding
  window plus attention sinks at the same budget: :func:`pattern_share` (its exact share)
  and :func:`window_for_share` (the smallest window reaching a share).
- :mod:`~quest_geometric.nn.focus.edges`: :class:`FocusEdgeAttention`, message passing over
  any ``edge_index`` (general graphs).
- :mod:`~quest_geometric.nn.focus.blocks`: the paper's decomposition (same-group buckets plus
  the window band, merged through log-sum-exps): :func:`focus_blocks_reference` and the fast
  :func:`focus_blocks_attention`.
- :mod:`~quest_geometric.nn.focus.flex`: the pattern as one block-sparse FlexAttention call
  (:func:`focus_block_mask`, :func:`focus_flex_attention`).
- :mod:`~quest_geometric.nn.focus.backends`: the registry of hard-attention back-ends
  (:func:`register_focus_backend`, :func:`focus_backend`, :func:`focus_backend_names`) and
  the ``'auto'`` rule (:func:`choose_focus_backend`).
- :mod:`~quest_geometric.nn.focus.module`: :class:`FocusAttention`, the layer (a router,
  learned by default or any :class:`Router`, projections, a registered back-end or
  ``'auto'``, validated options).
- :mod:`~quest_geometric.nn.focus.decode`: cached incremental decoding (the routing state
  kept beside a KV cache).
- :mod:`~quest_geometric.nn.focus.composed`: :class:`FocusComposed`, the wrapper of one
  pretrained attention layer (through :mod:`quest_geometric.adapters`); its cached decoding
  keeps its state on the KV cache object (:mod:`~quest_geometric.nn.focus.hf_cache`).
- :mod:`~quest_geometric.nn.focus.compose`: :func:`compose_focus`, :func:`decompose` and the
  switches (:func:`set_focus_enabled`, :func:`focus_disabled`, :func:`set_focus_options`),
  Focus composed onto frozen pretrained attention layers.
- :mod:`~quest_geometric.nn.focus.router_files`: the router file format,
  :func:`save_routers` / :func:`load_routers`; files of earlier versions are converted by
  :mod:`~quest_geometric.nn.focus.convert_routers`.

Two private modules: ``_layout`` (the token layout the modules share; their argument checks
are in :mod:`quest_geometric._utils.checks`)
and ``_aten`` (the only place that calls PyTorch's private ATen flash-attention kernels, with
the torch version they were checked against).
"""
from quest_geometric.nn.focus.backends import (
    choose_focus_backend,
    focus_backend,
    focus_backend_names,
    register_focus_backend,
    unregister_focus_backend,
)
from quest_geometric.nn.focus.blocks import focus_blocks_attention, focus_blocks_reference
from quest_geometric.nn.focus.budget import (
    additive_gate_share,
    focus_pair_share,
    pattern_share,
    straight_through_pair_share,
    window_for_share,
)
from quest_geometric.nn.focus.compose import (
    compose_focus,
    decompose,
    focus_disabled,
    focus_layers,
    router_parameters,
    set_focus_enabled,
    set_focus_options,
)
from quest_geometric.nn.focus.config import (
    BlocksConfig,
    DecodeConfig,
    blocks_config,
    decode_config,
)
from quest_geometric.nn.focus.composed import FocusComposed
from quest_geometric.nn.focus.decode import FocusDecodeState, route_prefix, route_step
from quest_geometric.nn.focus.dense import (
    focus_dense_attention,
    focus_far_bias_attention,
    focus_soft_attention,
    full_attention,
    straight_through_membership,
)
from quest_geometric.nn.focus.edge_index import focus_edge_index, smallest_shared_group
from quest_geometric.nn.focus.edges import FocusEdgeAttention
from quest_geometric.nn.focus.far_bias_router import FarBiasRouter
from quest_geometric.nn.focus.flex import FLEX_AVAILABLE, focus_block_mask, focus_flex_attention
from quest_geometric.nn.focus.module import FocusAttention
from quest_geometric.nn.focus.random_router import RandomGroupsRouter, random_balanced_groups
from quest_geometric.nn.focus.router import (
    FocusRouter,
    Router,
    RouterOutput,
    SoftRowsRouter,
    group_balance,
    register_router,
    registered_routers,
)
from quest_geometric.nn.focus.router_files import load_routers, save_routers
from quest_geometric.nn.focus.sinkhorn import sinkhorn_log, sinkhorn_step
from quest_geometric.nn.focus.topk import topk_groups
from quest_geometric.nn.focus.window_router import WindowOnlyRouter

__all__ = [
    "Router",
    "SoftRowsRouter",
    "register_router",
    "registered_routers",
    "FocusRouter",
    "RandomGroupsRouter",
    "random_balanced_groups",
    "WindowOnlyRouter",
    "FarBiasRouter",
    "RouterOutput",
    "group_balance",
    "sinkhorn_log",
    "topk_groups",
    "focus_edge_index",
    "smallest_shared_group",
    "FocusAttention",
    "FocusEdgeAttention",
    "focus_dense_attention",
    "focus_blocks_attention",
    "focus_blocks_reference",
    "focus_soft_attention",
    "focus_far_bias_attention",
    "full_attention",
    "straight_through_membership",
    "straight_through_pair_share",
    "additive_gate_share",
    "focus_pair_share",
    "pattern_share",
    "window_for_share",
    "focus_flex_attention",
    "focus_block_mask",
    "FLEX_AVAILABLE",
    "FocusDecodeState",
    "route_prefix",
    "route_step",
    "sinkhorn_step",
    "compose_focus",
    "decompose",
    "FocusComposed",
    "focus_layers",
    "router_parameters",
    "set_focus_enabled",
    "focus_disabled",
    "set_focus_options",
    "save_routers",
    "load_routers",
    "register_focus_backend",
    "unregister_focus_backend",
    "focus_backend",
    "focus_backend_names",
    "choose_focus_backend",
    "BlocksConfig",
    "DecodeConfig",
    "blocks_config",
    "decode_config",
]
