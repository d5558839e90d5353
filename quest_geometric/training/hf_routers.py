r"""Training Focus routers with Hugging Face's :class:`transformers.Trainer`
(:func:`router_trainer`), the way a Hugging Face user trains adapters. ``transformers`` is
imported only when :func:`router_trainer` is called.

Example:
    >>> from transformers import TrainingArguments
    >>> from quest_geometric.nn.focus import compose_focus
    >>> from quest_geometric.training import router_trainer
    >>> compose_focus(model, num_groups=4, top_k=2, window=64)      # doctest: +SKIP
    >>> args = TrainingArguments("out", max_steps=100, learning_rate=2e-3,
    ...                          per_device_train_batch_size=1, report_to=[])  # doctest: +SKIP
    >>> router_trainer(model, args, train_dataset=blocks,
    ...                objective="distill").train()                  # doctest: +SKIP
"""
from __future__ import annotations

import functools
from typing import Any, Optional

from torch import nn

__all__ = ["freeze_all_but_routers", "router_trainer"]


def freeze_all_but_routers(model: nn.Module) -> int:
    r"""Freeze every parameter of ``model`` but its Focus routers'
    (:func:`~quest_geometric.nn.focus.router_parameters`), which are set trainable.

    Returns:
        int: the number of trainable scalars (the routers').

    Raises:
        TypeError: if ``model`` is not a :class:`torch.nn.Module`.
        ValueError: if ``model`` has no Focus layer (compose it first with
            :func:`~quest_geometric.nn.focus.compose_focus`).
    """
    from quest_geometric.nn.focus import focus_layers, router_parameters

    if not isinstance(model, nn.Module):
        raise TypeError(f"freeze_all_but_routers: 'model' must be a torch.nn.Module, got "
                        f"{type(model).__name__}")
    if not focus_layers(model):
        raise ValueError("freeze_all_but_routers: 'model' must be composed with Focus "
                         "(compose_focus(model, ...)), got a model without Focus layers")
    for p in model.parameters():
        p.requires_grad_(False)
    routers = list(router_parameters(model))
    for p in routers:
        p.requires_grad_(True)
    return sum(p.numel() for p in routers)


def _routers_hidden(model: nn.Module) -> bool:
    """Whether ``save_pretrained`` of ``model`` leaves its routers out, so that a checkpoint
    needs :func:`~quest_geometric.nn.focus.save_routers` beside it."""
    left_out = getattr(model, "_keys_to_ignore_on_save", None) or ()
    return any(k.startswith("focus.") or ".focus." in k for k in left_out)


def _load_saved_routers(model: nn.Module, folder: Any) -> None:
    """Load the routers a checkpoint folder holds (written by the trainer's ``_save``)."""
    import os

    from quest_geometric.nn.focus import load_routers
    from quest_geometric.nn.focus.router_files import ROUTERS_CONFIG

    if folder and os.path.isfile(os.path.join(folder, ROUTERS_CONFIG)):
        load_routers(model, folder)


@functools.lru_cache(maxsize=None)
def _trainer_class() -> type:
    """The ``Trainer`` subclass, built on first use (importing ``transformers``)."""
    from transformers import Trainer

    from quest_geometric.nn.focus import save_routers
    from quest_geometric.training.routers import chunked_lm_loss, router_loss

    class RouterTrainer(Trainer):
        """A :class:`transformers.Trainer` whose loss is a router objective."""

        def __init__(self, *args: Any, objective: str = "lm",
                     loss_chunk: Optional[int] = None, **kwargs: Any) -> None:
            self.router_objective = objective
            self.router_loss_chunk = loss_chunk
            super().__init__(*args, **kwargs)

        def compute_loss(self, model: nn.Module, inputs: dict, return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            chunk = self.router_loss_chunk
            if self.router_objective == "lm" and chunk is None:
                return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                            num_items_in_batch=num_items_in_batch)
            if self.router_objective == "lm":  # Hugging Face's loss on 'labels', chunked
                loss = chunked_lm_loss(model, inputs["input_ids"], inputs["labels"], chunk,
                                       inputs.get("attention_mask"), num_items_in_batch)
            else:
                loss = router_loss(model, inputs["input_ids"], self.router_objective,
                                   attention_mask=inputs.get("attention_mask"),
                                   loss_chunk=chunk)
            return (loss, None) if return_outputs else loss

        # save_pretrained leaves a composed model's routers out: checkpoints carry them
        def _save(self, output_dir: Any = None, state_dict: Any = None) -> None:
            super()._save(output_dir, state_dict=state_dict)
            if self.args.should_save and _routers_hidden(self.model):
                save_routers(self.model, output_dir or self.args.output_dir)

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None
                                  ) -> None:
            super()._load_from_checkpoint(resume_from_checkpoint, model=model)
            _load_saved_routers(self.model if model is None else model, resume_from_checkpoint)

        def _load_best_model(self) -> None:
            super()._load_best_model()
            _load_saved_routers(self.model, self.state.best_model_checkpoint)

    return RouterTrainer


#: ``TrainingArguments``' activation checkpointing switch and keyword arguments, under the
#: new and the older (alias) names.
_CHECKPOINTING_ARGS = (("activation_checkpointing", "activation_checkpointing_kwargs"),
                       ("gradient_checkpointing", "gradient_checkpointing_kwargs"))


def _non_reentrant(args: Any) -> None:
    """With checkpointing on in ``args``, set ``use_reentrant=False`` where its keyword
    arguments leave it unset (see :func:`router_trainer`)."""
    if args is None or not any(getattr(args, on, None) for on, _ in _CHECKPOINTING_ARGS):
        return
    for _, name in _CHECKPOINTING_ARGS:
        kwargs = getattr(args, name, None)
        if kwargs is None or (isinstance(kwargs, dict) and "use_reentrant" not in kwargs):
            if hasattr(args, name):
                setattr(args, name, {**(kwargs or {}), "use_reentrant": False})


def router_trainer(model: nn.Module, args: Any, train_dataset: Any = None, *,
                   objective: str = "lm", loss_chunk: Optional[int] = None,
                   **trainer_kwargs: Any) -> Any:
    """A :class:`transformers.Trainer` that trains only the Focus routers of ``model`` (every
    other weight frozen by :func:`freeze_all_but_routers`). With checkpointing on in ``args``,
    ``use_reentrant=False`` is set where left unset: a reentrant checkpoint passes gradients to
    the routers inside a layer only when the layer's (frozen) input needs one. Checkpoints hold
    the routers beside what ``save_pretrained`` writes, and resuming loads them back.

    Args:
        model (torch.nn.Module): a Hugging Face causal LM composed with
            :func:`~quest_geometric.nn.focus.compose_focus`.
        args (transformers.TrainingArguments): the training arguments.
        train_dataset: the training data (items with ``input_ids``, plus ``labels`` for
            ``'lm'``), as ``Trainer`` takes it.
        objective (str): ``'lm'`` (the model's next-token loss on ``labels``) or ``'distill'``
            (:func:`~quest_geometric.training.routers.distillation_loss`, no labels).
            (default: :obj:`'lm'`)
        loss_chunk (int, optional): compute the loss by chunks of this many positions
            (:func:`~quest_geometric.training.routers.router_loss`); :obj:`None` for the plain
            loss. (default: :obj:`None`)
        **trainer_kwargs: passed on to ``Trainer`` (``data_collator``, ``callbacks``, ...).

    Returns:
        transformers.Trainer: call ``.train()``.

    Raises:
        ValueError: for an unknown ``objective``, a bad ``loss_chunk`` or a model without
            Focus layers.
        ImportError: if ``transformers`` is not installed.
    """
    from quest_geometric.training.routers import check_loss_chunk, check_objective

    check_objective(objective, "router_trainer")
    loss_chunk = check_loss_chunk(loss_chunk, "router_trainer", model)
    _non_reentrant(args)
    freeze_all_but_routers(model)
    return _trainer_class()(model=model, args=args, train_dataset=train_dataset,
                            objective=objective, loss_chunk=loss_chunk, **trainer_kwargs)
