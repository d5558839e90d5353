"""The window plus sinks in chunks (quest_geometric.nn.focus.window_chunks), against the dense
oracle: values and gradients, causal and not, sinks, windows below and above the chunk,
short and ragged sequences."""
import itertools

import pytest
import torch

from quest_geometric.nn.focus import focus_blocks_attention
from quest_geometric.nn.focus import window_chunks as wc
from quest_geometric.nn.focus.config import BlocksConfig
from quest_geometric.nn.focus.dense import focus_dense_attention
from quest_geometric.testing.focus import check_focus_backend

CASES = list(itertools.product([1, 6, 37], [0, 1, 3, 9, 40], [0, 4], [True, False], [4, 16]))


def _inputs(n, seed, dtype=torch.float64):
    torch.manual_seed(seed)
    return [torch.randn(n, 2, 8, dtype=dtype, requires_grad=True) for _ in range(3)]


def _grads(out, inputs, go):
    return torch.autograd.grad(out, inputs, go)


def _spy(monkeypatch):
    calls = []
    real = wc.window_chunks_attention

    def spy(*args, **kwargs):
        calls.append(args[4])  # the sequence sizes
        return real(*args, **kwargs)

    from quest_geometric.nn.focus import blocks
    monkeypatch.setattr(blocks, "window_chunks_attention", spy)
    return calls


@pytest.mark.parametrize("n, window, num_sinks, causal, chunk", CASES)
def test_chunks_equal_the_dense_oracle(n, window, num_sinks, causal, chunk, tuning,
                                       monkeypatch):
    calls = _spy(monkeypatch)
    tuning.blocks(window_chunk=chunk, split_band_min_window=None)
    q, k, v = _inputs(n, n + window + chunk)
    groups = torch.zeros(n, 0, dtype=torch.long)
    out = focus_blocks_attention(q, k, v, groups, window, None, causal, 1, fused=True,
                                 num_sinks=num_sinks)
    assert calls == [[n]]  # the chunked path ran
    ref = focus_dense_attention(q, k, v, groups, window, None, causal, 1, num_sinks=num_sinks)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    go = torch.randn_like(ref)
    for a, b in zip(_grads(out, (q, k, v), go), _grads(ref, (q, k, v), go)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("n, window, num_sinks, causal, chunk", CASES[::3])
def test_plain_chunk_loop_equals_the_dense_oracle(n, window, num_sinks, causal, chunk):
    q, k, v = (x.detach() for x in _inputs(n, 7 * n + window))
    groups = torch.zeros(n, 0, dtype=torch.long)
    ref = focus_dense_attention(q, k, v, groups, window, None, causal, 1, num_sinks=num_sinks)
    out = wc.window_chunks_reference(q, k, v, window, chunk, causal, num_sinks)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_sinks", [0, 4])
def test_ragged_sequences(causal, num_sinks, tuning, monkeypatch):
    # one token, one shorter than the sinks, one below the window, two with a body
    calls = _spy(monkeypatch)
    tuning.blocks(window_chunk=8)
    sizes = [1, 3, 6, 50, 41]
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    n, window = batch.numel(), 7
    q, k, v = _inputs(n, 3)
    groups = torch.zeros(n, 0, dtype=torch.long)
    out = focus_blocks_attention(q, k, v, groups, window, batch, causal, 1, fused=True,
                                 num_sinks=num_sinks)
    assert calls == [sizes]
    ref = focus_dense_attention(q, k, v, groups, window, batch, causal, 1, num_sinks=num_sinks)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    go = torch.randn_like(ref)
    for a, b in zip(_grads(out, (q, k, v), go), _grads(ref, (q, k, v), go)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("chunk", [3, 16])
def test_check_focus_backend_with_chunks(chunk, tuning):
    # the project's back-end check (top-k 0 cases run in chunks), window below and above
    tuning.blocks(window_chunk=chunk, split_band_min_window=None)
    assert check_focus_backend("blocks", window=5, tol=1e-10) > 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_chunks_in_lower_precision(dtype, tuning):
    tuning.blocks(window_chunk=16)
    n, window = 70, 9
    q, k, v = (x.detach() for x in _inputs(n, 5))
    groups = torch.zeros(n, 0, dtype=torch.long)
    ref = focus_dense_attention(q, k, v, groups, window, None, True, 1, num_sinks=4)
    out = focus_blocks_attention(q.to(dtype), k.to(dtype), v.to(dtype), groups, window, None,
                                 True, 1, fused=True, num_sinks=4)
    assert out.dtype == dtype
    tol = 3e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_which_path_runs(tuning, monkeypatch):
    calls = _spy(monkeypatch)
    q, k, v = (x.detach() for x in _inputs(40, 1))
    groups = torch.zeros(40, 0, dtype=torch.long)
    one_group = torch.zeros(40, 1, dtype=torch.long)

    def run(g, w=5, batch=None, causal=True):
        return focus_blocks_attention(q, k, v, g, w, batch, causal, 1, fused=True, num_sinks=2)

    run(groups)
    assert len(calls) == 1
    run(one_group)  # groups to exclude: the general band
    assert len(calls) == 1
    tuning.blocks(split_band_min_window=5)  # the chunks before the split band
    run(groups)
    assert len(calls) == 2
    tuning.blocks(window_max_seqs=1)
    run(groups, batch=torch.arange(40) // 20, causal=False)  # two sequences: too many
    assert len(calls) == 2
    tuning.blocks(window_chunks=None)
    run(groups, causal=False)
    assert len(calls) == 2
    tuning.blocks(window_max_seqs=16)
    run(groups)
    assert len(calls) == 2


def test_config_rule_and_errors():
    cfg = BlocksConfig()
    assert cfg.window_chunk_size(64) == cfg.window_chunks[0][1]
    assert BlocksConfig(window_chunk=100).window_chunk_size(5000) == 100
    assert not BlocksConfig(window_chunks=None).window_in_chunks(1, 64, True)
    with pytest.raises(ValueError, match="BlocksConfig: 'window_chunks'"):
        BlocksConfig(window_chunks=((10, 4),))
    with pytest.raises(ValueError, match="BlocksConfig: 'window_chunk'"):
        BlocksConfig(window_chunk=0)
    with pytest.raises(ValueError, match="BlocksConfig: 'window_max_seqs'"):
        BlocksConfig(window_max_seqs=0)


@pytest.mark.parametrize("n, window, num_sinks", [(50, 7, 0), (50, 7, 4), (30, 40, 4), (9, 0, 0)])
def test_causal_prefix_is_one_unmasked_causal_call(n, window, num_sinks):
    # rows i <= w + s see every earlier key (in the window or a sink): one square call under
    # the kernel's causal mask; every other row is written by exactly one later call
    calls = wc._SequenceCalls([], [], [])
    wc._sequence_calls(3, n, window, 8, True, num_sinks, torch.float64, torch.device("cpu"),
                       calls)
    first = calls.chunks[0]
    p = min(n, window + num_sinks + 1)
    assert (first.q0, first.nb, first.bq, first.k0, first.lk) == (3, 1, p, 3, p)
    assert first.causal and first.bias is None and first.ns == 0
    pos = torch.arange(n)
    allowed = ((pos[:, None] - pos[None]) <= window) | (pos[None] < num_sinks)
    assert bool(allowed[:p].tril().eq(torch.ones(p, n, dtype=torch.bool).tril()).all())
    if p < n:  # the next row loses its oldest non-sink key
        assert not bool(allowed[p, :p + 1].all())
    written = torch.zeros(n, dtype=torch.long)
    for c in calls.chunks:
        written[c.q0 - 3:c.q0 - 3 + c.nb * c.bq] += 1
        assert c is first or not c.causal
    assert bool((written == 1).all())


def test_non_causal_has_no_prefix_call():
    calls = wc._SequenceCalls([], [], [])
    wc._sequence_calls(0, 50, 7, 8, False, 4, torch.float64, torch.device("cpu"), calls)
    assert not any(c.causal for c in calls.chunks + calls.merges + calls.sinks)


def test_wide_windows_of_one_causal_sequence_run_the_split_band(tuning, monkeypatch):
    # wider than window_chunks_max_window, one causal sequence runs the split band's unmasked
    # w-token calls; several sequences, non-causal or narrower windows keep the chunks; every
    # way equals the dense oracle
    from quest_geometric.nn.focus import blocks

    calls, splits = _spy(monkeypatch), []
    real = blocks._split_band_calls
    monkeypatch.setattr(blocks, "_split_band_calls",
                        lambda n, w: splits.append((n, w)) or real(n, w))
    tuning.blocks(window_chunk=4, window_chunks_max_window=8, split_band_min_window=5)
    q, k, v = (x.detach() for x in _inputs(40, 2))
    groups = torch.zeros(40, 0, dtype=torch.long)

    def check(window, causal=True, batch=None):
        out = focus_blocks_attention(q, k, v, groups, window, batch, causal, 1, fused=True,
                                     num_sinks=2)
        ref = focus_dense_attention(q, k, v, groups, window, batch, causal, 1, num_sinks=2)
        torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)

    check(9)
    assert (calls, splits) == ([], [(40, 9)])
    check(8)  # not wider than the limit
    check(9, causal=False)
    check(9, batch=torch.arange(40) // 20)
    assert calls == [[40], [40], [20, 20]] and len(splits) == 1
    tuning.blocks(split_band_min_window=None)  # the band does not split: the chunks
    check(9)
    assert calls[-1] == [40] and len(splits) == 1
    tuning.blocks(split_band_min_window=5, window_chunks_max_window=None)  # no limit
    check(30)
    assert calls[-1] == [40] and len(splits) == 1


def test_window_chunks_max_window_is_checked():
    assert BlocksConfig().window_in_chunks(1, 10**6, False)
    assert not BlocksConfig().window_in_chunks(1, 10**6, True)
    with pytest.raises(ValueError, match="BlocksConfig: 'window_chunks_max_window'"):
        BlocksConfig(window_chunks_max_window=-1)
