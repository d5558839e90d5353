"""Dataset transforms: images to sphere or lattice graphs, node positions as features, and
image augmentation."""
from quest_geometric.transforms.append_position import AppendPosition
from quest_geometric.transforms.image_augment import (
    NormalizeImage, RandomCropPad, RandomHorizontalFlip,
)
from quest_geometric.transforms.image_to_lattice import ImageToLattice
from quest_geometric.transforms.image_to_sphere import DEFAULT_CAP, ImageToSphere, project_to_image

__all__ = ["ImageToSphere", "ImageToLattice", "project_to_image", "DEFAULT_CAP", "RandomCropPad",
           "RandomHorizontalFlip", "NormalizeImage", "AppendPosition"]
