"""Datasets: image datasets as sphere/lattice graphs, the character-level corpus, and the
Python language reference as token blocks for pretrained tokenizers."""
from quest_geometric.datasets.char_corpus import UNK_CHAR, WIKITEXT103_FILES, CharCorpus, load_python_reference
from quest_geometric.datasets.images import (
    CIFAR10Graphs,
    CIFAR100Graphs,
    DigitsGraphs,
    load_digits_split,
    md5sum,
)
from quest_geometric.datasets.pydoc_text import pydoc_topic_split, token_blocks

__all__ = [
    "DigitsGraphs",
    "CIFAR10Graphs",
    "CIFAR100Graphs",
    "load_digits_split",
    "md5sum",
    "CharCorpus",
    "load_python_reference",
    "WIKITEXT103_FILES",
    "UNK_CHAR",
    "pydoc_topic_split",
    "token_blocks",
]
