"""Analysis: query/key geometry metrics, streaming covariance and key-spectrum control."""
from quest_geometric.analysis.metrics import (
    AttentionEntropy,
    attention_entropy,
    effective_rank,
    mean_attention_entropy,
    participation_ratio,
    participation_ratio_from_covariance,
    stable_rank,
)
from quest_geometric.analysis.spectral_control import (
    KeySpectrumControl,
    qk_weight_kernels,
    spectrum_participation_ratio,
)
from quest_geometric.analysis.streaming import StreamingCovariance

__all__ = [
    "participation_ratio",
    "participation_ratio_from_covariance",
    "effective_rank",
    "stable_rank",
    "attention_entropy",
    "mean_attention_entropy",
    "AttentionEntropy",
    "StreamingCovariance",
    "KeySpectrumControl",
    "spectrum_participation_ratio",
    "qk_weight_kernels",
]
