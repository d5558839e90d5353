"""Datasets: image datasets as sphere/lattice graphs, and the character-level corpus."""
from quest_geometric.datasets.char_corpus import UNK_CHAR, WIKITEXT103_FILES, CharCorpus, load_python_reference
from quest_geometric.datasets.images import (
    CIFAR10Graphs,
    CIFAR100Graphs,
    DigitsGraphs,
    load_digits_split,
    md5sum,
)

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
]
