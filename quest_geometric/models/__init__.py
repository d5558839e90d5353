"""Models: the QSV graph classifier, a character GPT, and the offline loader of the
pretrained SmolLM2-135M."""
from quest_geometric.models.char_gpt import MLP, Block, CausalSelfAttention, CharGPT, GPTConfig
from quest_geometric.models.qsv_net import QSVBlock, QSVNet, match_parameter_count
from quest_geometric.models.smollm2 import load_smollm2, smollm2_path

__all__ = [
    "QSVNet", "QSVBlock", "match_parameter_count", "CharGPT", "GPTConfig", "CausalSelfAttention",
    "Block", "MLP", "load_smollm2", "smollm2_path",
]
