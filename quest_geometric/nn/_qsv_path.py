r"""Which way :class:`~quest_geometric.nn.QSVConv` computes a call (private).

:func:`choose_path` is the one place that decides: it reads a :class:`PathFacts` record (what
the layer knows about the call) and returns a :class:`Plan`.  Every path computes the same
function; ``docs/qsv.md`` (*Execution paths*) says what each one is for.
"""
from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["Layout", "Path", "PathFacts", "Plan", "choose_path"]


class Layout(enum.Enum):
    """What the layer knows of the graph's layout before the attention runs."""

    #: Read on the host: every target has ``k`` in-edges, sorted by target.
    DENSE = "dense"
    #: Asserted by the caller (``dense=True``) under :func:`torch.compile`: checked inside
    #: the compiled graph, by the attention itself.
    ASSUMED_DENSE = "assumed_dense"
    #: Unknown while tracing (``dense=None`` under :func:`torch.compile`; the sizes allow the
    #: dense layout): found at run time, inside the graph.
    RUN_TIME = "run_time"
    #: Not dense, or the scatter path is required (explaining, hooks, ``dense=False``).
    SCATTER = "scatter"


class Path(enum.Enum):
    """The attention's execution paths (``QSVConv._path_<value>`` computes each)."""

    SCATTER = "scatter"  #: PyG message passing: the general reference
    DENSE_GATHER = "dense_gather"  #: ``[N, k]`` neighbour table, plain gather (``fused=False``)
    DENSE_FUSED = "dense_fused"  #: ``[N, k]`` weights as a CSR matrix, sparse-dense product
    DENSE_NATIVE = "dense_native"  #: the native attention kernel
    DENSE_EPILOGUE = "dense_epilogue"  #: the kernel with the output rotation and bias
    COND = "cond"  #: :func:`torch.cond` between the dense and the scatter path, at run time
    GRAPH = "graph"  #: one custom operator finding the layout at run time (native kernel)
    GRAPH_ROTATE = "graph_rotate"  #: the same with the output rotation and bias


class PathFacts(NamedTuple):
    """What decides the path; the layer fills it from the call's tensors and its settings."""

    #: What is known of the graph's layout (:class:`Layout`).
    layout: Layout
    #: The native kernels are built, enabled and take every tensor of the call.
    native: bool
    #: ``fused=True`` and the features and quaternions share a float32 / float64 dtype.
    fused: bool
    #: Autograd records the call (grad mode on, something requires a gradient).
    needs_grad: bool
    #: :func:`torch.autocast` is on for the features' device.
    autocast: bool
    #: ``attention='learned'`` (the native kernel computes learned weights only).
    learned: bool
    #: Attention dropout is active (training with ``dropout > 0``).
    dropout: bool
    #: An explain mask weights the dense path's messages.
    masked: bool
    #: The quaternions come from one feature tensor alone: what the fused prologue computes.
    feature_quaternions: bool
    #: ``transport=True``: the features are rotated before and after the aggregation.
    transport: bool


class Plan(NamedTuple):
    """The decision: the prologue, the attention's path and whether it checks the layout."""

    #: Compute the quaternions, rotations and rotated sources in one native pass (inference).
    prologue: bool
    #: The attention's execution path.
    path: Path
    #: The dense path must check the targets' layout itself (inside a compiled graph).
    check_targets: bool


def choose_path(facts: PathFacts) -> Plan:
    """The execution path of one call: the native kernel where it can run (learned
    attention without dropout, ``fused``), its forward-only forms without a gradient and
    outside autocast, a run-time choice (custom operator or :func:`torch.cond`) for an
    unknown layout, and the PyTorch dense forms under an explain mask."""
    f = facts
    kernel = f.native and f.fused and f.learned and not f.dropout
    inference = not f.needs_grad and not f.autocast and f.transport
    prologue = f.native and f.feature_quaternions and inference
    if f.layout is Layout.SCATTER:
        path = Path.SCATTER
    elif f.layout is Layout.RUN_TIME:
        path = Path.GRAPH_ROTATE if kernel and inference else Path.GRAPH if kernel else Path.COND
    elif kernel and not f.masked:
        path = Path.DENSE_EPILOGUE if inference else Path.DENSE_NATIVE
    else:
        path = Path.DENSE_FUSED if f.fused else Path.DENSE_GATHER
    return Plan(prologue, path, f.layout is Layout.ASSUMED_DENSE)
