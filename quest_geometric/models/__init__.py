"""Models: the QSV graph classifier and its controls, CIFAR ResNet-20, a character GPT, and
the offline loader of the pretrained SmolLM2-135M."""
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
from quest_geometric.models.smollm2 import load_smollm2, smollm2_path

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
    "load_smollm2",
    "smollm2_path",
]
