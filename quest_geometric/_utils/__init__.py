"""Private helpers shared across the package's subpackages (checks, atomic file writes,
devices, optional plotting). Not public API: the names carry no underscore only so that
other subpackages can import them; they may change between releases.
"""
from quest_geometric._utils.checks import (
    all_finite, check_batch, check_choice, check_features, check_groups, check_hard_args,
    check_image, check_images, check_int, check_positive_float, check_positive_int, check_qkv,
    check_real, check_return_attention_weights, check_shell_radii, check_shell_sizes,
    check_soft, check_window,
)
from quest_geometric._utils.device import resolve_device
from quest_geometric._utils.io import (
    atomic_torch_save, atomic_write_bytes, atomic_write_json, atomic_write_text,
)
from quest_geometric._utils.plotting import optional_pyplot, save_figure

__all__ = [
    "all_finite", "atomic_torch_save", "atomic_write_bytes", "atomic_write_json",
    "atomic_write_text", "check_batch", "check_choice", "check_features", "check_groups",
    "check_hard_args", "check_image", "check_images", "check_int", "check_positive_float",
    "check_positive_int", "check_qkv", "check_real", "check_return_attention_weights",
    "check_shell_radii", "check_shell_sizes", "check_soft", "check_window", "optional_pyplot",
    "resolve_device", "save_figure",
]
