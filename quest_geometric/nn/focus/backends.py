r"""The registry of Focus hard-attention back-ends, by name. A back-end is a function

.. code-block:: python

    fn(q, k, v, groups, window, batch, causal, num_groups, num_sinks) -> out

on ``[N, H, D]`` tensors (scale :math:`1/\sqrt{D}`) and ``[N, top_k]`` groups, computing
exactly the pattern of :func:`~quest_geometric.nn.focus.dense.focus_dense_attention`
(:func:`quest_geometric.testing.focus.check_focus_backend` checks one). They agree in
outputs and gradients and differ in where they are fast:

- ``'blocks'`` (:func:`~quest_geometric.nn.focus.blocks.focus_blocks_attention`): the
  paper's decomposition into a window band and per-group blocks, on every device; the fast
  path on the CPU.
- ``'flex'`` (:func:`~quest_geometric.nn.focus.flex.focus_flex_attention`): one block-sparse
  FlexAttention call, fast on CUDA; on the CPU forward only with :math:`O(N^2)` memory, a
  check rather than a fast path.
- ``'edges'``: PyG message passing over
  :func:`~quest_geometric.nn.focus.edge_index.focus_edge_index`, for general graphs.
- ``'dense'``: masked SDPA, the small-:math:`N` oracle.
- ``'auto'``: the rule :func:`choose_focus_backend` (``'flex'`` on CUDA, ``'blocks'``
  elsewhere), at each call.

Example:
    >>> from quest_geometric.nn.focus.backends import register_focus_backend
    >>> from quest_geometric.nn.focus.dense import focus_dense_attention
    >>> def my_backend(q, k, v, groups, window, batch, causal, num_groups, num_sinks):
    ...     return focus_dense_attention(q, k, v, groups, window, batch, causal, num_groups,
    ...                                  num_sinks=num_sinks)
    >>> register_focus_backend("mine", my_backend)
    >>> "mine" in focus_backend_names()
    True
    >>> unregister_focus_backend("mine")
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

from torch import Tensor

from quest_geometric._utils.checks import fail
from quest_geometric.nn.focus.blocks import focus_blocks_attention
from quest_geometric.nn.focus.dense import focus_dense_attention
from quest_geometric.nn.focus.edge_index import focus_edge_index
from quest_geometric.nn.focus.edges import FocusEdgeAttention
from quest_geometric.nn.focus.flex import FLEX_AVAILABLE, FLEX_COMPILED_DTYPES, focus_flex_attention
from quest_geometric.nn.focus.group_sets import codable

__all__ = ["FocusBackend", "register_focus_backend", "unregister_focus_backend",
           "focus_backend", "focus_backend_names", "choose_focus_backend", "AUTO"]

#: A hard-attention back-end: ``fn(q, k, v, groups, window, batch, causal, num_groups,
#: num_sinks) -> out`` (see the module docstring).
FocusBackend = Callable[[Tensor, Tensor, Tensor, Tensor, int, Optional[Tensor], bool, int, int],
                        Tensor]

#: The name of the rule that picks a back-end per call (:func:`choose_focus_backend`).
AUTO = "auto"

_REGISTRY: Dict[str, FocusBackend] = {}
_BUILT_IN = ("blocks", "flex", "edges", "dense")


def register_focus_backend(name: str, fn: FocusBackend, replace: bool = False) -> None:
    r"""Register :obj:`fn` as the Focus back-end :obj:`name` (``FocusAttention(backend=name)``).

    Raises:
        TypeError: if :obj:`name` is not a string or :obj:`fn` is not callable.
        ValueError: if :obj:`name` is ``'auto'``, empty, a built-in back-end, or taken and
            :obj:`replace` is false.
    """
    where = "register_focus_backend"
    if not isinstance(name, str):
        raise fail(TypeError, where, "name", "a str", name)
    if not callable(fn):
        raise fail(TypeError, where, "fn", "a callable", fn)
    if not name or name == AUTO or name in _BUILT_IN:
        raise fail(ValueError, where, "name", f"a new name (not empty, {AUTO!r} or a built-in "
                   f"back-end {_BUILT_IN})", name)
    if name in _REGISTRY and not replace:
        raise fail(ValueError, where, "name", "a name not yet registered (pass replace=True "
                   "to replace it)", name)
    _REGISTRY[name] = fn


def unregister_focus_backend(name: str) -> None:
    r"""Remove the back-end :obj:`name` registered by :func:`register_focus_backend`."""
    if name in _BUILT_IN or name not in _REGISTRY:
        added = tuple(n for n in _REGISTRY if n not in _BUILT_IN)
        raise fail(ValueError, "unregister_focus_backend", "name", "a back-end registered by "
                   f"register_focus_backend, one of {added}", name)
    del _REGISTRY[name]


def focus_backend(name: str) -> FocusBackend:
    """The function of the back-end :obj:`name`.

    Raises:
        ValueError: for a name that is not registered (listing those that are).
    """
    fn = _REGISTRY.get(name) if isinstance(name, str) else None
    if fn is None:
        raise fail(ValueError, "focus_backend", "name", f"one of {focus_backend_names()}", name)
    return fn


def focus_backend_names() -> Tuple[str, ...]:
    """The registered back-ends' names, the built-in ones first."""
    return tuple(_REGISTRY)


def choose_focus_backend(q: Tensor, num_groups: int) -> str:
    r"""The back-end ``'auto'`` runs for queries :obj:`q` ``[N, H, D]`` and :math:`K` groups:
    ``'flex'`` on CUDA when FlexAttention is available, :math:`K \le` :data:`MAX_SET_GROUPS
    <quest_geometric.nn.focus.group_sets.MAX_SET_GROUPS>`, :math:`N > 0` and the dtype is one
    its compiled kernel takes; ``'blocks'`` everywhere else."""
    if (q.device.type == "cuda" and FLEX_AVAILABLE and codable(num_groups) and q.size(0) > 0
            and q.dtype in FLEX_COMPILED_DTYPES):
        return "flex"
    return "blocks"


def _blocks(q, k, v, groups, window, batch, causal, num_groups, num_sinks):
    return focus_blocks_attention(q, k, v, groups, window, batch, causal, num_groups,
                                  num_sinks=num_sinks)


def _flex(q, k, v, groups, window, batch, causal, num_groups, num_sinks):
    return focus_flex_attention(q, k, v, groups, window, batch, causal, num_groups,
                                num_sinks=num_sinks)


def _edges(q, k, v, groups, window, batch, causal, num_groups, num_sinks):
    edge_index = focus_edge_index(groups, window, batch, causal, num_sinks=num_sinks)
    return _EDGE_ATTENTION(q, k, v, edge_index)


def _dense(q, k, v, groups, window, batch, causal, num_groups, num_sinks):
    return focus_dense_attention(q, k, v, groups, window, batch, causal, num_groups,
                                 num_sinks=num_sinks)


#: The message-passing module of ``'edges'`` (it holds no parameter or state).
_EDGE_ATTENTION = FocusEdgeAttention()
_REGISTRY.update(zip(_BUILT_IN, (_blocks, _flex, _edges, _dense)))
