"""Public test helpers users can run on their own models (e3nn style): a module compiles and
matches its eager output (:func:`assert_torch_compile`); Focus group sets, a tiny composed
Llama and a back-end against the dense oracle (:mod:`quest_geometric.testing.focus`);
independent references for QSV layers (:mod:`quest_geometric.testing.qsv`); brute-force kNN
and grids (:mod:`quest_geometric.testing.geometry`).
"""
from quest_geometric.testing.compile import assert_torch_compile
from quest_geometric.testing.focus import (
    check_focus_backend, focus_mask_reference, random_groups, tiny_composed_llama,
)
from quest_geometric.testing.geometry import brute_force_knn, grid_points
from quest_geometric.testing.qsv import (
    assert_bf16_autocast_follows_float32, conjugate, hamilton, knn_edges, make_qsv_conv,
    qsv_conv_reference, qsv_quaternions, random_dense_edges, random_image_batch,
)

__all__ = [
    "assert_torch_compile", "random_groups", "tiny_composed_llama", "check_focus_backend",
    "focus_mask_reference", "brute_force_knn", "grid_points", "hamilton", "conjugate",
    "qsv_quaternions", "qsv_conv_reference", "knn_edges", "random_dense_edges", "make_qsv_conv",
    "random_image_batch", "assert_bf16_autocast_follows_float32",
]
