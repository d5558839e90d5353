"""Datasets: image datasets as sphere/lattice graphs, the character-level corpus, the Python
language reference as token blocks for pretrained tokenizers (train / validation / test
deduplicated against the training text), and passkey retrieval prompts."""
from quest_geometric.datasets.char_corpus import (
    UNK_CHAR, WIKITEXT103_FILES, CharCorpus, load_python_reference,
)
from quest_geometric.datasets.images import (
    CIFAR10Graphs, CIFAR100Graphs, DigitsGraphs, load_digits_split, md5sum,
)
from quest_geometric.datasets.passkey import (
    PASSKEY_INTRO, PASSKEY_NEEDLE, PASSKEY_QUESTION, PasskeyPrompt, parse_passkey, passkey_prompt,
    passkey_trials,
)
from quest_geometric.datasets.pydoc_text import (
    pydoc_splits, pydoc_text, pydoc_topic_split, pydoc_topic_splits, token_blocks,
)
from quest_geometric.datasets.text_splits import (
    TextSplits, clean_blocks, covered_positions, deduplicated_splits, overlap_share, window_set,
)

__all__ = [
    "DigitsGraphs", "CIFAR10Graphs", "CIFAR100Graphs", "load_digits_split", "md5sum", "CharCorpus",
    "load_python_reference", "WIKITEXT103_FILES", "UNK_CHAR", "pydoc_topic_split", "token_blocks",
    "pydoc_topic_splits", "pydoc_text", "pydoc_splits", "window_set", "covered_positions",
    "overlap_share", "clean_blocks", "TextSplits", "deduplicated_splits",
    "PASSKEY_INTRO", "PASSKEY_NEEDLE",
    "PASSKEY_QUESTION", "PasskeyPrompt", "passkey_prompt", "passkey_trials", "parse_passkey",
]
