"""Public test helpers users can run on their own models (e3nn style)."""
from quest_geometric.testing.compile import assert_torch_compile
from quest_geometric.testing.geometry import brute_force_knn, grid_points
from quest_geometric.testing.qsv import (
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
]
