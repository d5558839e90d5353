r"""A public test helper for :func:`torch.compile` (in the spirit of e3nn's)."""
from __future__ import annotations

from typing import Any, Optional

import torch

__all__ = ["assert_torch_compile"]


def assert_torch_compile(
    module: torch.nn.Module,
    *args: Any,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    backend: str = "inductor",
    **kwargs: Any,
) -> Any:
    r"""Asserts that a module compiles with :func:`torch.compile` without any graph break
    (:func:`torch._dynamo.explain`, the reasons listed) and that, compiled with
    ``fullgraph=True``, it returns what the eager module returns
    (:func:`torch.testing.assert_close`, nested tuples/lists/dicts too). Build data-dependent
    inputs (graphs, neighbour lists) outside; compilation is slow: use small inputs.

    Args:
        module (torch.nn.Module): The module (or any callable) to check.
        *args: Positional arguments of the call.
        atol (float, optional): Absolute tolerance. (default: :obj:`None`, the dtype's)
        rtol (float, optional): Relative tolerance, given with ``atol``. (default: :obj:`None`)
        backend (str, optional): The :func:`torch.compile` backend; ``'aot_eager'`` checks
            tracing and autograd without code generation. (default: :obj:`'inductor'`)
        **kwargs: Keyword arguments of the call.

    Returns:
        The compiled module's output.

    Raises:
        AssertionError: On a graph break or a mismatch.
        ValueError: If only one of ``atol`` and ``rtol`` is given.
    """
    if (atol is None) != (rtol is None):
        raise ValueError("pass both 'atol' and 'rtol' or neither")
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(module)(*args, **kwargs)
    if explanation.graph_break_count != 0:
        reasons = "\n".join(f"  - {r.reason}" for r in explanation.break_reasons)
        raise AssertionError(
            f"torch.compile found {explanation.graph_break_count} graph break(s) in "
            f"{type(module).__name__}:\n{reasons}"
        )
    expected = module(*args, **kwargs)
    compiled = torch.compile(module, fullgraph=True, backend=backend)
    actual = compiled(*args, **kwargs)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
    return actual
