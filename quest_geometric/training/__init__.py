"""The training harness shared by every benchmark: :class:`Trainer` (seeded, resumable,
DDP-ready; settings in :class:`TrainConfig`, files in :mod:`quest_geometric.training.checkpoint`),
the Focus router trainings, :func:`train_routers` and :func:`router_trainer` (Hugging
Face's ``Trainer``), and :func:`evaluate_lm`, a language model's validation loss with what
its Focus layers kept."""
from quest_geometric._utils.lock import FolderInUseError
from quest_geometric.training.checkpoint import (CheckpointError, load_checkpoint,
                                                  read_checkpoint, save_checkpoint)
from quest_geometric.training.config import TrainConfig
from quest_geometric.training.data import make_loader, random_blocks
from quest_geometric.training.distributed import get_dist_info, init_distributed
from quest_geometric.training.evaluation import evaluate_lm
from quest_geometric.training.hf_routers import freeze_all_but_routers, router_trainer
from quest_geometric.training.logging import MetricsLogger, plot_curves, read_metrics
from quest_geometric.training.routers import (OBJECTIVES, distillation_loss, router_loss,
                                              train_routers)
from quest_geometric.training.seed import enable_determinism, seed_everything
from quest_geometric.training.tasks import ClassificationTask, LanguageModelTask, Task
from quest_geometric.training.trainer import (Callback, EveryNSteps, Trainer, WarmupCosine,
                                              build_optimizer)

__all__ = [
    "Trainer", "TrainConfig", "Callback", "EveryNSteps", "WarmupCosine", "build_optimizer",
    "Task", "ClassificationTask", "LanguageModelTask", "make_loader", "random_blocks",
    "save_checkpoint", "load_checkpoint", "read_checkpoint", "CheckpointError",
    "FolderInUseError", "init_distributed", "get_dist_info",
    "MetricsLogger", "read_metrics", "plot_curves", "seed_everything", "enable_determinism",
    "train_routers", "router_loss", "distillation_loss", "OBJECTIVES", "router_trainer",
    "freeze_all_but_routers", "evaluate_lm",
]
