r"""Passkey retrieval prompts: a random 5-digit number hidden at a chosen depth of real prose.

The test of Mohtashami and Jaggi (2023, "Landmark Attention"), with real text as filler. A
prompt of exactly :math:`L` tokens is the concatenation of token ids

.. math::

    \underbrace{\mathrm{intro}}_{a} \;\Vert\; f_{0:m} \;\Vert\;
    \underbrace{\mathrm{needle}(\mathrm{key})}_{k} \;\Vert\; f_{m:F} \;\Vert\;
    \underbrace{\mathrm{question}}_{q},
    \qquad F = L - a - k - q, \quad m = \mathrm{round}(\mathrm{depth} \cdot F),

where :math:`f` is :math:`F` consecutive tokens of the filler stream from a random offset
(:data:`PASSKEY_INTRO`, :data:`PASSKEY_NEEDLE`, :data:`PASSKEY_QUESTION`). Each piece is
tokenized on its own (without special tokens), so the length is exact whatever the tokenizer
does at the seams. The answer is correct when its first run of digits is exactly the key
(:func:`parse_passkey`).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from quest_geometric._utils.checks import check_int

__all__ = ["PASSKEY_INTRO", "PASSKEY_NEEDLE", "PASSKEY_QUESTION", "PasskeyPrompt",
           "passkey_prompt", "passkey_trials", "parse_passkey"]

#: Text before the filler.
PASSKEY_INTRO = ("There is an important piece of information hidden inside a lot of irrelevant "
                 "text. Find it and memorize it. I will quiz you about it.\n\n")
#: The needle; ``{key}`` is replaced by the 5-digit key.
PASSKEY_NEEDLE = "\nThe pass key is {key}. Remember it. {key} is the pass key.\n"
#: Text after the filler; the model continues it with the key.
PASSKEY_QUESTION = "\n\nWhat is the pass key? The pass key is"


@dataclass
class PasskeyPrompt:
    r"""One passkey trial.

    Attributes:
        input_ids (Tensor): the ``[length]`` prompt token ids.
        key (str): the 5-digit key.
        depth (float): the requested depth in :math:`[0, 1]`.
        needle_start (int): index of the needle's first token in ``input_ids``.
        needle_len (int): the needle's token count.
        filler_len (int): filler tokens in the prompt (:math:`F`).
        filler_offset (int): where the filler starts in the filler stream.
        intro_len (int): tokens of the introduction (before the filler).
        trial (int): the trial's index within its (length, depth).
    """

    input_ids: Tensor
    key: str
    depth: float
    needle_start: int
    needle_len: int
    filler_len: int
    filler_offset: int
    intro_len: int
    trial: int = 0

    @property
    def length(self) -> int:
        """Tokens in the prompt."""
        return int(self.input_ids.numel())

    @property
    def actual_depth(self) -> float:
        r"""Share of the filler before the needle, :math:`m / F`."""
        m = self.needle_start - self.intro_len
        return m / self.filler_len if self.filler_len else 0.0


def _encode(tokenizer: Any, text: str, where: str) -> list[int]:
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        raise TypeError(f"{where}: 'tokenizer' must have an encode(text, add_special_tokens=False) "
                        f"method, got {type(tokenizer).__name__}")
    return list(encode(text, add_special_tokens=False))


def passkey_prompt(tokenizer: Any, filler_ids: Sequence[int], length: int, depth: float,
                   key: str, filler_offset: int = 0, trial: int = 0) -> PasskeyPrompt:
    r"""Build one prompt of exactly ``length`` tokens with ``key`` at ``depth`` of the filler.

    Args:
        tokenizer: a Hugging Face tokenizer, or any object with
            ``encode(text, add_special_tokens=False) -> list[int]``.
        filler_ids (Sequence[int]): the filler token stream (real prose, e.g. a test split).
        length (int): total prompt tokens.
        depth (float): where the needle goes, :math:`0` (first) to :math:`1` (last).
        key (str): the key, 5 decimal digits.
        filler_offset (int): first filler token used (default: :obj:`0`).
        trial (int): recorded in the result (default: :obj:`0`).

    Returns:
        PasskeyPrompt: the prompt and where its needle is.

    Raises:
        ValueError: for a key that is not 5 digits, a depth outside :math:`[0, 1]`, a length too
            short for the fixed text, or a filler stream too short from ``filler_offset``.

    Example:
        >>> class Chars:  # one id per character
        ...     def encode(self, text, add_special_tokens=False):
        ...         return [ord(c) for c in text]
        >>> p = passkey_prompt(Chars(), [ord("x")] * 1000, length=400, depth=0.5, key="12345")
        >>> p.length, "".join(map(chr, p.input_ids[p.needle_start:p.needle_start + 22].tolist()))
        (400, '\nThe pass key is 12345')
    """
    where = "passkey_prompt"
    if not (isinstance(key, str) and re.fullmatch(r"\d{5}", key)):
        raise ValueError(f"{where}: 'key' must be a string of 5 digits, got {key!r}")
    _check_depth(depth, where)
    check_int(length, "'length'", 1, where=where)
    check_int(filler_offset, "'filler_offset'", 0, where=where)
    intro = _encode(tokenizer, PASSKEY_INTRO, where)
    needle = _encode(tokenizer, PASSKEY_NEEDLE.format(key=key), where)
    question = _encode(tokenizer, PASSKEY_QUESTION, where)
    F = length - len(intro) - len(needle) - len(question)
    if F < 0:
        raise ValueError(f"{where}: 'length'={length} is shorter than the fixed text "
                         f"({len(intro) + len(needle) + len(question)} tokens)")
    filler = list(filler_ids[filler_offset:filler_offset + F])
    if len(filler) < F:
        raise ValueError(f"{where}: the filler stream has {len(filler_ids)} tokens; "
                         f"{F} are needed from 'filler_offset'={filler_offset}")
    m = int(round(depth * F))
    ids = intro + filler[:m] + needle + filler[m:] + question
    return PasskeyPrompt(input_ids=torch.tensor(ids, dtype=torch.long), key=key,
                         depth=float(depth), needle_start=len(intro) + m, needle_len=len(needle),
                         filler_len=F, filler_offset=filler_offset, intro_len=len(intro),
                         trial=trial)


def _check_depth(depth: Any, where: str, what: str = "'depth'") -> None:
    """A needle depth is a real number in :math:`[0, 1]`; else a :class:`ValueError`."""
    if isinstance(depth, bool) or not isinstance(depth, (int, float)) or not 0 <= depth <= 1:
        raise ValueError(f"{where}: {what} must be a number in [0, 1], got {depth!r}")


def _depth_key(depth: float) -> int:
    """The integer that names a depth in a trial's seed (:func:`passkey_trials`)."""
    quarters = 4 * float(depth)
    if quarters == round(quarters):
        return int(round(quarters))
    return 5 + int(round(1e6 * float(depth)))


def passkey_trials(tokenizer: Any, filler_ids: Sequence[int], length: int,
                   depths: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
                   trials_per_depth: int = 10, seed: int = 0) -> list[PasskeyPrompt]:
    r"""Seeded trials at one length: ``trials_per_depth`` prompts at each depth.

    Trial :math:`j` at depth :math:`\delta` draws its key (uniform in 10000-99999) and its
    filler offset (uniform over the offsets that fit) from
    ``numpy.random.default_rng([seed, length, key(delta), j])``, so every trial is
    reproducible on its own and independent of the other depths asked for (trials pair
    across runs by (length, depth, trial, seed)). ``key`` is :math:`4\delta` for the quarter
    depths (their index among the five default depths) and
    :math:`5 + \mathrm{round}(10^6\delta)` for any other depth.

    Args:
        tokenizer: as in :func:`passkey_prompt`.
        filler_ids (Sequence[int]): the filler token stream.
        length (int): total prompt tokens.
        depths (Sequence[float]): needle depths in :math:`[0, 1]` (default: five, 0 to 1).
        trials_per_depth (int): prompts per depth (default: :obj:`10`).
        seed (int): the seed (default: :obj:`0`).

    Returns:
        list[PasskeyPrompt]: depth-major, ``len(depths) * trials_per_depth`` prompts.
    """
    check_int(trials_per_depth, "'trials_per_depth'", 1, where="passkey_trials")
    check_int(seed, "'seed'", 0, where="passkey_trials")
    check_int(length, "'length'", 1, where="passkey_trials")
    if len(depths) == 0:
        raise ValueError("passkey_trials: 'depths' must hold at least one depth")
    filler_ids = list(filler_ids)
    out = []
    for depth in depths:
        _check_depth(depth, "passkey_trials", "every depth")
        d = _depth_key(depth)
        for j in range(trials_per_depth):
            rng = np.random.default_rng([seed, length, d, j])
            key = str(int(rng.integers(10000, 100000)))
            needed = _filler_len(tokenizer, length, key)
            if needed > len(filler_ids):
                raise ValueError(f"passkey_trials: the filler stream has {len(filler_ids)} tokens, "
                                 f"fewer than the {needed} a prompt of {length} needs")
            offset = int(rng.integers(0, len(filler_ids) - needed + 1))
            out.append(passkey_prompt(tokenizer, filler_ids, length, float(depth), key,
                                      filler_offset=offset, trial=j))
    return out


def _filler_len(tokenizer: Any, length: int, key: str) -> int:
    w = "passkey_trials"
    return length - sum(len(_encode(tokenizer, t, w)) for t in
                        (PASSKEY_INTRO, PASSKEY_NEEDLE.format(key=key), PASSKEY_QUESTION))


def parse_passkey(text: str) -> Optional[str]:
    r"""The first run of decimal digits in a model's answer, or :obj:`None` when there is none.

    An answer is correct when this equals the key exactly.

    Args:
        text (str): the decoded continuation.

    Example:
        >>> parse_passkey(" 12345. Remember"), parse_passkey(" none")
        ('12345', None)
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_passkey: 'text' must be a str, got {type(text).__name__}")
    m = re.search(r"\d+", text)
    return m.group(0) if m else None
