r"""The token layout shared by the Focus modules (private)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

#: Half precision dtypes: computed in float32 by the back-ends (scores, softmax, merges).
HALF_DTYPES = (torch.float16, torch.bfloat16)


def seq_layout(batch: Optional[Tensor], n: int, device: torch.device
               ) -> Tuple[Tensor, int]:
    """Sequence id per token (long) and number of sequences."""
    if batch is None:
        return torch.zeros(n, dtype=torch.long, device=device), 1
    seq = batch.long()
    return seq, (int(seq.max()) + 1 if n > 0 else 0)
