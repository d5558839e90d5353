"""FlexAttention back-end of Focus attention (CPU eager forward; CUDA when available)."""
import math

import pytest
import torch
import torch.nn.functional as F

from quest_geometric.nn.focus.dense import focus_dense_attention
from quest_geometric.nn.focus.flex import FLEX_AVAILABLE, focus_block_mask, focus_flex_attention
from quest_geometric.testing.focus import random_groups

pytestmark = pytest.mark.skipif(not FLEX_AVAILABLE, reason="FlexAttention not available")

H, D = 2, 8


def _qkv(n, dtype=torch.float32, seed=0, device="cpu", d=D):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, H, d, generator=g, dtype=dtype).to(device) for _ in range(3))


def _batch(lengths):
    return torch.arange(len(lengths)).repeat_interleave(torch.tensor(lengths))


def _brute_mask(groups, window, batch, causal, num_groups, num_sinks=0):
    """The Focus pattern over all N x N (query, key) pairs, straight from its definition."""
    n = groups.size(0)
    seq = torch.zeros(n, dtype=torch.long) if batch is None else batch
    pos = torch.empty(n, dtype=torch.long)
    for s in seq.unique():
        idx = (seq == s).nonzero().view(-1)
        pos[idx] = torch.arange(idx.numel())
    member = torch.zeros(n, num_groups)
    member[torch.arange(n).view(-1, 1), groups] = 1.0
    shared = (member @ member.T) > 0
    dist = pos.view(-1, 1) - pos.view(1, -1)
    sink = torch.minimum(pos.view(-1, 1), pos.view(1, -1)) < num_sinks
    allowed = (seq.view(-1, 1) == seq.view(1, -1)) & ((dist.abs() <= window) | shared | sink)
    if causal:
        allowed &= dist >= 0
    return allowed, seq, pos


def _block_rows(num, idx, nb):
    """Dense [nb, nb] bool table from a flex (count, column-index) pair, by plain loops."""
    out = torch.zeros(nb, nb, dtype=torch.bool)
    for r in range(nb):
        cols = idx[0, 0, r, :int(num[0, 0, r])].tolist()
        assert len(set(cols)) == len(cols)  # each block listed once
        out[r, cols] = True
    return out


# ---------------------------------------------------------------------------------------
# outputs against the dense oracle
# ---------------------------------------------------------------------------------------

CASES = {
    # name: (n, num_groups, top_k, window, lengths, block_size, dtype)
    "topk1": (200, 4, 1, 3, None, 16, torch.float32),
    "topk2_ragged128": (200, 4, 2, 3, None, 128, torch.float32),
    "topk2_float64": (170, 5, 2, 2, None, 16, torch.float64),
    "batch_unequal_w0": (257, 5, 2, 0, [100, 1, 56, 100], 16, torch.float32),
    "batch_w_gt_seq": (180, 3, 1, 500, [90, 30, 60], 128, torch.float32),
    "topk1_batch_float64": (211, 6, 1, 5, [7, 150, 54], 32, torch.float64),
}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("num_sinks", [0, 4])
@pytest.mark.slow
def test_matches_dense(case, causal, num_sinks):
    n, kg, tk, w, lengths, bs, dtype = CASES[case]
    q, k, v = _qkv(n, dtype, seed=n)
    groups = random_groups(n, kg, tk, seed=n)
    batch = None if lengths is None else _batch(lengths)
    out = focus_flex_attention(q, k, v, groups, w, batch, causal, kg, block_size=bs,
                               num_sinks=num_sinks)
    ref = focus_dense_attention(q, k, v, groups, w, batch, causal, kg, num_sinks=num_sinks)
    assert out.shape == (n, H, D) and out.dtype == dtype
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.slow
def test_singleton_and_empty_groups(causal):
    # group 0 has one member, groups 3 and 5 are empty (num_groups=6 given explicitly)
    n = 140
    g = torch.Generator().manual_seed(3)
    groups = torch.tensor([1, 2, 4])[torch.randint(0, 3, (n,), generator=g)].view(-1, 1)
    groups[37] = 0
    q, k, v = _qkv(n, seed=3)
    out = focus_flex_attention(q, k, v, groups, 2, None, causal, num_groups=6, block_size=16)
    ref = focus_dense_attention(q, k, v, groups, 2, None, causal, 6)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.slow
def test_topk_all_groups_is_full_attention(causal):
    # every token in every group: the pattern is plain (causal) attention, whatever w is
    n, kg = 150, 3
    groups = torch.arange(kg).repeat(n, 1)
    q, k, v = _qkv(n, seed=5)
    out = focus_flex_attention(q, k, v, groups, 0, causal=causal, block_size=16)
    sdpa = F.scaled_dot_product_attention(*(x.transpose(0, 1) for x in (q, k, v)),
                                          is_causal=causal).transpose(0, 1)
    torch.testing.assert_close(out, sdpa, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, focus_dense_attention(q, k, v, groups, 0, None, causal),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_no_grad_accepts_leaf_tensors_that_require_grad():
    n = 64
    q, k, v = (x.requires_grad_() for x in _qkv(n, seed=9))
    groups = random_groups(n, 4, 1, seed=9)
    with torch.no_grad():
        out = focus_flex_attention(q, k, v, groups, 4, block_size=16)
        ref = focus_dense_attention(q, k, v, groups, 4)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------
# the block mask: permutation, element mask and block table
# ---------------------------------------------------------------------------------------

MASK_CASES = [
    # (n, num_groups, top_k, window, lengths, block_size, causal, seed, num_sinks)
    (150, 4, 1, 3, None, 16, True, 0, 0),
    (150, 4, 1, 3, None, 16, False, 1, 0),
    (173, 5, 2, 6, [60, 13, 100], 16, True, 2, 0),
    (173, 5, 2, 0, [60, 13, 100], 32, False, 3, 0),
    (96, 3, 3, 2, [1, 95], 16, True, 4, 0),
    (200, 8, 1, 40, [120, 80], 16, True, 5, 0),
    (173, 5, 2, 6, [60, 13, 100], 16, True, 6, 4),
    (173, 5, 1, 2, [60, 13, 100], 16, False, 7, 20),
    (150, 4, 0, 5, [70, 80], 16, True, 8, 3),  # no group: window and sinks only
    (150, 4, 0, 5, None, 32, False, 9, 2),
]


@pytest.mark.parametrize("n,kg,tk,w,lengths,bs,causal,seed,ns", MASK_CASES)
def test_block_mask_is_exact(n, kg, tk, w, lengths, bs, causal, seed, ns):
    groups = random_groups(n, kg, tk, seed=seed)
    if seed % 2 and tk:  # some tokens with a sorted run layout too
        groups[: n // 3] = groups[: n // 3].sort(0).values
    batch = None if lengths is None else _batch(lengths)
    bm, perm = focus_block_mask(groups, w, batch, causal, kg, block_size=bs, num_sinks=ns)
    allowed, seq, pos = _brute_mask(groups, w, batch, causal, kg, ns)

    # perm: a permutation, sorted by (sequence, smallest group, position)
    assert sorted(perm.tolist()) == list(range(n))
    key = [(int(seq[i]), int(groups[i].min()) if tk else 0, int(pos[i]))
           for i in perm.tolist()]
    assert key == sorted(key)

    ap = allowed[perm][:, perm]  # brute-force mask in the permuted order
    idx = torch.arange(n)
    mm = bm.mask_mod(torch.tensor(0), torch.tensor(0), idx.view(-1, 1), idx.view(1, -1))
    assert torch.equal(mm, ap)

    nb = -(-n // bs)
    assert bm.kv_num_blocks.shape == (1, 1, nb) and bm.BLOCK_SIZE == (bs, bs)
    partial = _block_rows(bm.kv_num_blocks, bm.kv_indices, nb)
    full = _block_rows(bm.full_kv_num_blocks, bm.full_kv_indices, nb)
    assert not (partial & full).any()
    if n % bs:  # the ragged last block is never full (conservative)
        assert not full[-1].any() and not full[:, -1].any()

    padded = torch.zeros(nb * bs, nb * bs, dtype=torch.bool)
    padded[:n, :n] = ap
    blocks = padded.view(nb, bs, nb, bs).permute(0, 2, 1, 3)
    has_pair = blocks.any(-1).any(-1)
    valid = torch.zeros(nb * bs, dtype=torch.bool)
    valid[:n] = True
    vb = valid.view(nb, bs)
    all_pairs = (blocks | ~(vb.view(nb, 1, bs, 1) & vb.view(1, nb, 1, bs))).all(-1).all(-1)
    assert not (has_pair & ~(partial | full)).any(), "a block holding an allowed pair is missing"
    assert not (full & ~all_pairs).any(), "a block marked full holds a forbidden pair"

    # what a block-sparse kernel computes: full blocks, and mask_mod inside partial blocks
    pe = partial.repeat_interleave(bs, 0).repeat_interleave(bs, 1)[:n, :n]
    fe = full.repeat_interleave(bs, 0).repeat_interleave(bs, 1)[:n, :n]
    assert torch.equal(fe | (pe & mm), ap)


@pytest.mark.parametrize("causal", [True, False])
def test_block_table_contiguous_groups_hand_count(causal):
    # N = 1024, K = 8 contiguous groups of 128 tokens = 2 blocks of 64 each, w = 16.
    # Non-causal: each group is a 2 x 2 square of full blocks (8 * 4 = 32), plus the two
    # blocks across each of the 7 group boundaries (partial, pairs within w) -> 14.
    # Causal: per group (b1, b0) is full and (b0, b0), (b1, b1) are partial (8 full,
    # 16 partial), plus one partial block across each boundary (7).
    n, kg = 1024, 8
    groups = (torch.arange(n) * kg // n).view(-1, 1)
    bm, perm = focus_block_mask(groups, 16, causal=causal, block_size=64)
    assert torch.equal(perm, torch.arange(n))
    nfull, npart = int(bm.full_kv_num_blocks.sum()), int(bm.kv_num_blocks.sum())
    assert (nfull, npart) == ((8, 23) if causal else (32, 14))
    total = 16 * 17 // 2 if causal else 16 * 16
    assert (nfull + npart) / total < 0.4


def test_block_table_random_balanced_groups_is_sparse():
    # random balanced groups: the listed blocks approach the 1/K same-group share plus the
    # cross-group band as N grows
    n, kg = 16384, 8
    groups = torch.randperm(n, generator=torch.Generator().manual_seed(0)).remainder(kg)
    bm, _ = focus_block_mask(groups.view(-1, 1), 16, causal=True, block_size=128)
    nb = n // 128
    listed = int(bm.kv_num_blocks.sum()) + int(bm.full_kv_num_blocks.sum())
    assert listed < 0.4 * nb * (nb + 1) / 2


# ---------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------


def test_errors():
    n = 32
    q, k, v = _qkv(n)
    groups = random_groups(n, 4, 1)
    with pytest.raises(ValueError, match="no backward"):
        focus_flex_attention(q.clone().requires_grad_(), k, v, groups, 2, block_size=16)
    with pytest.raises(ValueError, match="at most 63"):
        focus_flex_attention(q, k, v, groups, 2, num_groups=64, block_size=16)
    with pytest.raises(ValueError, match="at most 63"):
        focus_block_mask(torch.full((n, 1), 63), 2, block_size=16)
    with pytest.raises(ValueError, match=r"^focus_flex_attention: 'k' must be of the shape of "
                       r"'q' \[32, 2, 8\], got a torch.float32 tensor of shape \[31, 2, 8\]$"):
        focus_flex_attention(q, k[:-1], v, groups, 2)
    with pytest.raises(ValueError, match=r"^focus_flex_attention: 'q' must be a \[N, H, D\] "):
        focus_flex_attention(q[0], k, v, groups, 2)
    with pytest.raises(ValueError, match="^focus_flex_attention: 'groups' must be of 32 rows"):
        focus_flex_attention(q, k, v, groups[:-1], 2)
    with pytest.raises(TypeError, match="^focus_flex_attention: 'groups' must be a long tensor"):
        focus_flex_attention(q, k, v, groups.float(), 2)
    with pytest.raises(ValueError, match=r"^focus_flex_attention: 'groups' must be group ids in "
                       r"\[0, 3\)"):
        focus_flex_attention(q, k, v, groups, 2, num_groups=3)
    for bad, err in ((-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="^focus_flex_attention: 'window' must be an int >= 0"):
            focus_flex_attention(q, k, v, groups, bad)
    for bad, err in ((0, ValueError), (24, ValueError), (100, ValueError), (16.0, TypeError)):
        with pytest.raises(err, match="^focus_flex_attention: 'block_size' must be"):
            focus_flex_attention(q, k, v, groups, 2, block_size=bad)
    unsorted = torch.tensor([0] * 10 + [1] * 12 + [0] * 10)
    with pytest.raises(ValueError, match="^focus_flex_attention: 'batch' must be sorted"):
        focus_flex_attention(q, k, v, groups, 2, batch=unsorted)
    with pytest.raises(ValueError, match="^focus_block_mask: 'batch' must be sorted"):
        focus_block_mask(groups, 2, batch=unsorted)


# ---------------------------------------------------------------------------------------
# CUDA: the compiled block-sparse kernel, outputs and gradients
# ---------------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("top_k, num_sinks", [(1, 0), (2, 0), (2, 4), (0, 4)])
@pytest.mark.parametrize("d", [D, 32])  # 8: zero-padded to FLEX_MIN_HEAD_DIM; 32: as given
def test_cuda_outputs_and_gradients(causal, top_k, num_sinks, d):
    n, kg = 1000, 4
    lengths = [300, 1, 699]
    dev = "cuda"
    q, k, v = (x.requires_grad_() for x in _qkv(n, seed=11, device=dev, d=d))
    groups = random_groups(n, kg, top_k, seed=11).to(dev)
    batch = _batch(lengths).to(dev)
    out = focus_flex_attention(q, k, v, groups, 8, batch, causal, kg, block_size=128,
                               num_sinks=num_sinks)
    gout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), gout)
    qr, kr, vr = (x.detach().clone().requires_grad_() for x in (q, k, v))
    ref = focus_dense_attention(qr, kr, vr, groups, 8, batch, causal, kg, num_sinks=num_sinks)
    rgrads = torch.autograd.grad(ref, (qr, kr, vr), gout)
    tol = 2e-3 * math.sqrt(d)  # TF32 may be used by the kernel's dots
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    for a, b in zip(grads, rgrads):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def test_eager_path_refuses_sizes_that_would_materialise_gigabytes():
    from quest_geometric.nn.focus.flex import EAGER_MAX_PAIRS, focus_flex_attention

    n = 8193  # 4 * 8193^2 > 2^28: refused before anything N x N is allocated
    assert 4 * n * n > EAGER_MAX_PAIRS
    q = torch.zeros(n, 4, 2)
    groups = torch.zeros(n, 1, dtype=torch.long)
    with torch.no_grad(), pytest.raises(ValueError, match="backend='blocks'"):
        focus_flex_attention(q, q, q, groups, 4)
