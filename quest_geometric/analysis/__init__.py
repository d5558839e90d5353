"""Analysis: query/key geometry metrics and probes, streaming covariance, key-spectrum control,
the small-sample statistics of the studies, and the scoring of passkey retrieval."""
from quest_geometric.analysis.metrics import (
    AttentionEntropy, attention_entropy, effective_rank, mean_attention_entropy,
    participation_ratio, participation_ratio_from_covariance, stable_rank,
)
from quest_geometric.analysis.probe import (
    QKProbe, QKTrajectory, QKView, logit_singular_values, masked_softmax_entropy, probe_model,
    register_attention_adapter, supported_attention_types, unregister_attention_adapter,
)
from quest_geometric.analysis.qsv import (
    NodeEntropy, ablation_accuracy, attention_entropy_per_node, node_attention_entropy,
    qsv_analysis, rotation_angles,
)
from quest_geometric.analysis.retrieval import greedy_continuation, passkey_accuracy, score_passkey
from quest_geometric.analysis.spectral_control import (
    KeySpectrumControl, qk_weight_kernels, spectrum_participation_ratio,
)
from quest_geometric.analysis.stats import (
    binomial_interval, directional_probability, finite_mean,
    least_squares_slope, mean_std, paired_differences, paired_permutation_test, paired_sign_test,
    paired_t_test, sign_test, spearman,
)
from quest_geometric.analysis.streaming import StreamingCovariance

__all__ = [
    "participation_ratio", "participation_ratio_from_covariance", "effective_rank", "stable_rank",
    "attention_entropy", "mean_attention_entropy", "AttentionEntropy", "StreamingCovariance",
    "QKProbe", "QKView", "register_attention_adapter", "unregister_attention_adapter",
    "supported_attention_types", "logit_singular_values", "masked_softmax_entropy", "probe_model",
    "KeySpectrumControl", "NodeEntropy", "node_attention_entropy", "attention_entropy_per_node",
    "rotation_angles", "ablation_accuracy", "qsv_analysis", "spectrum_participation_ratio",
    "qk_weight_kernels", "mean_std", "finite_mean", "sign_test", "paired_sign_test",
    "paired_permutation_test", "paired_t_test", "paired_differences",
    "directional_probability", "binomial_interval", "least_squares_slope", "spearman",
    "greedy_continuation", "score_passkey", "passkey_accuracy", "QKTrajectory",
]
