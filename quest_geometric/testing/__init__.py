"""Public test helpers users can run on their own models (e3nn style).

- :func:`assert_torch_compile`: a module compiles and matches its eager output.
- :func:`random_groups`: random hard Focus group sets, :func:`tiny_composed_llama`: a tiny
  random Llama with Focus composed, :func:`check_focus_backend`: a Focus back-end against
  the dense oracle, :func:`focus_mask_reference`: the Focus pattern from its definition
  (:mod:`quest_geometric.testing.focus`).
- :mod:`quest_geometric.testing.qsv`: independent references for QSV layers, and
  :func:`assert_bf16_autocast_follows_float32` (the layer under bf16 autocast).
- :mod:`quest_geometric.testing.geometry`: brute-force kNN and grids.
"""
from quest_geometric.testing.compile import assert_torch_compile
from quest_geometric.testing.focus import (
    check_focus_backend,
    focus_mask_reference,
    random_groups,
    tiny_composed_llama,
)
from quest_geometric.testing.geometry import brute_force_knn, grid_points
from quest_geometric.testing.qsv import (
    assert_bf16_autocast_follows_float32,
    conjugate,
    hamilton,
    knn_edges,
    make_qsv_conv,
    qsv_conv_reference,
    qsv_quaternions,
    random_dense_edges,
    random_image_batch,
)

__all__ = [
    "assert_torch_compile",
    "random_groups",
    "tiny_composed_llama",
    "check_focus_backend",
    "focus_mask_reference",
    "brute_force_knn",
    "grid_points",
    "hamilton",
    "conjugate",
    "qsv_quaternions",
    "qsv_conv_reference",
    "knn_edges",
    "random_dense_edges",
    "make_qsv_conv",
    "random_image_batch",
    "assert_bf16_autocast_follows_float32",
]
