"""Test helpers for Focus attention (:mod:`quest_geometric.nn.focus`)."""
from __future__ import annotations

import itertools
import math
from typing import Callable, Optional, Union

import torch
from torch import Tensor

__all__ = ["random_groups", "tiny_composed_llama", "focus_mask_reference", "check_focus_backend"]


def random_groups(n: int, num_groups: int, top_k: int,
                  generator: Optional[torch.Generator] = None, seed: int = 0) -> Tensor:
    r"""Random hard group sets ``[n, top_k]`` (long), as a router's ``groups`` holds them:
    for each token, the first :obj:`top_k` entries of a random permutation of the group ids.

    Args:
        n (int): number of tokens.
        num_groups (int): :math:`K`.
        top_k (int): groups per token, :math:`1..K`.
        generator (torch.Generator, optional): the random source. (default: :obj:`None`, a
            new CPU generator seeded with :obj:`seed`)
        seed (int): the seed when no :obj:`generator` is given. (default: :obj:`0`)

    Example:
        >>> random_groups(3, 4, 2).shape
        torch.Size([3, 2])
    """
    g = generator if generator is not None else torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(num_groups, generator=g)[:top_k] for _ in range(n)])


def tiny_composed_llama(gate="additive", top_k=1, seed=0, num_groups=4, window=2, **focus_kwargs):
    """A tiny random Llama (:func:`~quest_geometric.testing.hf.build_hf`) with Focus composed
    (``backend='blocks'``, routers seeded with ``seed``), every weight but the routers'
    frozen: the model of the router-training tests."""
    from quest_geometric.nn.focus import compose_focus, router_parameters
    from quest_geometric.testing.hf import build_hf

    model = build_hf("llama", seed=0)
    torch.manual_seed(seed)
    compose_focus(model, num_groups=num_groups, top_k=top_k, window=window, backend="blocks",
                  gate=gate, **focus_kwargs)
    for p in model.parameters():
        p.requires_grad_(False)
    for p in router_parameters(model):
        p.requires_grad_(True)
    return model


def focus_mask_reference(groups: Tensor, window: int, batch: Optional[Tensor],
                         causal: bool, num_sinks: int = 0) -> Tensor:
    """The Focus pattern ``[N, N]`` (bool, CPU) from its definition, by plain loops over all
    pairs (small :math:`N` only): ``mask[i, j]`` (query ``i``, key ``j``) is true iff both
    tokens lie in one sequence (``batch``, sorted ids, or :obj:`None`: one sequence),
    ``j <= i`` if causal, and ``|i - j| <= window``, or their group sets (rows of ``groups``
    ``[N, top_k]``, possibly ``top_k = 0``) share a group, or one of them is among the first
    ``num_sinks`` tokens of the sequence (an attention sink)."""
    n = groups.size(0)
    seq = [0] * n if batch is None else batch.tolist()
    sets = [set(row) for row in groups.tolist()]
    first = {}
    for i, b in enumerate(seq):
        first.setdefault(b, i)
    rows = []
    for i in range(n):
        row = []
        for j in range(n):
            same = seq[i] == seq[j] and not (causal and j > i)
            start = first[seq[i]]
            sink = i - start < num_sinks or j - start < num_sinks
            row.append(same and (abs(i - j) <= window or bool(sets[i] & sets[j]) or sink))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.bool).view(n, n)


def _masked_softmax_reference(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """float64 softmax attention ``[N, H, D]`` under a ``[N, N]`` (query, key) mask."""
    q, k, v = q.double(), k.double(), v.double()
    s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(q.size(-1))
    s = s.masked_fill(~mask.to(s.device), float("-inf"))
    return torch.einsum("hij,jhd->ihd", torch.softmax(s, -1), v)


#: The sequence lengths :func:`check_focus_backend` runs: one sequence, and ragged ones (one
#: token, shorter than the window, longer).
_LAYOUTS = ((37,), (1, 4, 31))


def check_focus_backend(backend: Union[str, Callable[..., Tensor]], *, device="cpu",
                        dtype: torch.dtype = torch.float64, gradients: bool = True,
                        window: int = 5, num_groups: int = 6, tol: float = 1e-6,
                        seed: int = 0) -> int:
    r"""Check a Focus hard-attention back-end against the dense oracle
    (:func:`focus_mask_reference` under a float64 softmax): outputs and, with
    :obj:`gradients`, the gradients of ``q``, ``k``, ``v`` for a random output gradient,
    causal and not, top-:math:`k` 0, 1 and 2 (two groups never used), 0 and 2 attention
    sinks, on one sequence and on ragged ones (a padded batch's layout without the padding).

    Args:
        backend (str or callable): a registered back-end's name
            (:func:`~quest_geometric.nn.focus.backends.focus_backend_names`) or a function
            of the signature :data:`~quest_geometric.nn.focus.backends.FocusBackend`.
        device (str or torch.device): where the inputs live. (default: ``"cpu"``)
        dtype (torch.dtype): of ``q``, ``k``, ``v``. (default: :obj:`torch.float64`)
        gradients (bool): also compare gradients (:obj:`False` for a forward-only back-end
            such as ``'flex'`` on CPU). (default: :obj:`True`)
        window (int): the local window :math:`w`. (default: :obj:`5`)
        num_groups (int): :math:`K`. (default: :obj:`6`)
        tol (float): absolute and relative tolerance. (default: :obj:`1e-6`)
        seed (int): seed of the random inputs. (default: :obj:`0`)

    Returns:
        int: the number of cases checked.

    Raises:
        AssertionError: naming the first case (layout, top-:math:`k`, sinks, causal) whose
            output or gradient differs.

    Example:
        >>> check_focus_backend("dense")
        24
    """
    from quest_geometric.nn.focus.backends import focus_backend

    fn = focus_backend(backend) if isinstance(backend, str) else backend
    gen = torch.Generator().manual_seed(seed)
    cases = 0
    for lengths, top_k in itertools.product(_LAYOUTS, (0, 1, 2)):
        batch = (None if len(lengths) == 1 else
                 torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)))
        groups = random_groups(sum(lengths), num_groups - 2, top_k, generator=gen)
        for num_sinks, causal in itertools.product((0, 2), (True, False)):
            case = f"lengths={lengths}, top_k={top_k}, num_sinks={num_sinks}, causal={causal}"
            _check_case(fn, case, groups, batch, window, causal, num_groups, num_sinks, device,
                        dtype, gradients, tol, gen)
            cases += 1
    return cases


def _check_case(fn, case, groups, batch, window, causal, num_groups, num_sinks, device,
                dtype, gradients, tol, gen) -> None:
    n = groups.size(0)
    q, k, v = (torch.randn(n, 2, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    ref_in = [x.clone().requires_grad_(gradients) for x in (q, k, v)]
    ref = _masked_softmax_reference(*ref_in, focus_mask_reference(groups, window, batch,
                                                                  causal, num_sinks))
    inputs = [x.to(device, dtype).requires_grad_(gradients) for x in (q, k, v)]
    dev_batch = None if batch is None else batch.to(device)
    with torch.set_grad_enabled(gradients):
        out = fn(*inputs, groups.to(device), window, dev_batch, causal, num_groups, num_sinks)
    if tuple(out.shape) != (n, 2, 8):
        raise AssertionError(f"focus back-end: output of shape {list(out.shape)}, expected "
                             f"[{n}, 2, 8] ({case})")
    _close(out.detach(), ref.detach(), f"output ({case})", tol)
    if gradients:
        go = torch.randn(n, 2, 8, generator=gen, dtype=torch.float64)
        got = torch.autograd.grad(out, inputs, go.to(device, dtype))
        want = torch.autograd.grad(ref, ref_in, go)
        for name, a, b in zip("qkv", got, want):
            _close(a, b, f"gradient of {name} ({case})", tol)


def _close(a: Tensor, b: Tensor, what: str, tol: float) -> None:
    try:
        torch.testing.assert_close(a.cpu().double(), b, atol=tol, rtol=tol)
    except AssertionError as err:
        raise AssertionError(f"focus back-end: {what} differs from the dense oracle: "
                             f"{err}") from None
