"""The data of the experiment: the Python language reference split by topic into training
and validation (:func:`~quest_geometric.datasets.pydoc_topic_split`), cut into token
blocks (:func:`~quest_geometric.datasets.token_blocks`)."""
from __future__ import annotations

from typing import Any, Optional


def load_data(tok: Any, block: int, val_blocks: int, max_train: Optional[int] = None):
    """``(train, val, train_topics, val_topics)``: training blocks (at most ``max_train``),
    the first ``val_blocks`` validation blocks, of ``block`` tokens each."""
    from quest_geometric.datasets import pydoc_topic_split, token_blocks

    tr_names, va_names = pydoc_topic_split()
    train = token_blocks(tok, tr_names, block_size=block, max_blocks=max_train)
    val = token_blocks(tok, va_names, block_size=block, max_blocks=val_blocks)
    return train, val, tr_names, va_names



def validation_blocks(tok: Any, val_names: Any, block: int, val_blocks: int,
                      eval_block: int) -> Any:
    """The validation tokens of ``val_blocks`` blocks of ``block`` tokens, cut into blocks of
    ``eval_block`` tokens instead (``val_blocks * block // eval_block`` of them).

    Raises:
        ValueError: if ``eval_block`` is below 2 or longer than the validation tokens.
    """
    from quest_geometric.datasets import token_blocks

    if eval_block < 2 or (val_blocks * block) // eval_block < 1:
        raise ValueError(f"run: eval_block must be in 2..{val_blocks * block} (the "
                         f"validation tokens), got {eval_block}")
    return token_blocks(tok, val_names, block_size=eval_block,
                        max_blocks=(val_blocks * block) // eval_block)
