"""Models: the QSV graph classifier and its controls, CIFAR ResNet-20, and a character GPT."""
from quest_geometric.models.char_gpt import MLP, Block, CausalSelfAttention, CharGPT, GPTConfig
from quest_geometric.models.qsv_net import (
    VARIANTS,
    QSVBlock,
    QSVNet,
    match_parameter_count,
    parameter_counts,
    qsv_variant,
)
from quest_geometric.models.resnet import BasicBlock, ResNet20

__all__ = [
    "QSVNet",
    "QSVBlock",
    "qsv_variant",
    "match_parameter_count",
    "parameter_counts",
    "VARIANTS",
    "ResNet20",
    "BasicBlock",
    "CharGPT",
    "GPTConfig",
    "CausalSelfAttention",
    "Block",
    "MLP",
]
