import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from quest_geometric.analysis.streaming import StreamingCovariance
from quest_geometric.testing.common import np_pr_from_covariance as np_pr


def data(n, dim, seed=0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    return torch.randn(n, dim, generator=g, dtype=torch.float64) @ a + shift


def test_update_over_chunks_equals_numpy():
    z = data(103, 5, shift=1e4)  # large mean: raw moments would lose digits
    acc = StreamingCovariance(5)
    for chunk in torch.split(z, [1, 40, 2, 60]):
        acc.update(chunk.float() if chunk.size(0) == 2 else chunk)
    zf = z.clone()
    zf[41:43] = zf[41:43].float().double()
    ref = np.cov(zf.numpy(), rowvar=False)
    assert acc.count == 103
    assert np.allclose(acc.mean.numpy(), zf.numpy().mean(0), rtol=1e-12)
    assert np.allclose(acc.covariance.numpy(), ref, rtol=1e-9, atol=1e-9)
    assert np.isclose(acc.participation_ratio().item(), np_pr(ref), rtol=1e-9)
    ev = acc.eigenvalues()
    assert torch.all(ev[:-1] >= ev[1:])
    assert np.allclose(ev.numpy(), np.sort(np.linalg.eigvalsh(ref))[::-1], rtol=1e-8)
    assert repr(acc) == "StreamingCovariance(5, count=103)"


def test_merge_equals_all_data():
    z = data(80, 4, seed=1)
    a, b = StreamingCovariance(4), StreamingCovariance(4)
    a.update(z[:30])
    b.update(z[30:55]).update(z[55:])
    merged = a.copy().merge(b)
    assert merged.count == 80 and a.count == 30
    assert np.allclose(merged.covariance.numpy(), np.cov(z.numpy(), rowvar=False), rtol=1e-10)
    # Merging an empty accumulator changes nothing; merging into an empty one copies.
    assert torch.equal(merged.copy().merge(StreamingCovariance(4)).covariance, merged.covariance)
    assert torch.allclose(StreamingCovariance(4).merge(merged).covariance, merged.covariance)


def test_per_head_shapes():
    H, B, T, d = 3, 2, 11, 4
    q = torch.randn(B, H, T, d)
    acc = StreamingCovariance(d, shape=(H,))
    acc.update(q.transpose(0, 1).reshape(H, B * T, d))
    assert acc.mean.shape == (H, d)
    assert acc.covariance.shape == (H, d, d)
    assert acc.participation_ratio().shape == (H,)
    assert acc.eigenvalues().shape == (H, d)
    for h in range(H):
        ref = np.cov(q[:, h].reshape(-1, d).double().numpy(), rowvar=False)
        assert np.allclose(acc.covariance[h].numpy(), ref, rtol=1e-6, atol=1e-9)
        assert np.isclose(acc.participation_ratio()[h].item(), np_pr(ref), rtol=1e-6)
    assert "shape=(3,)" in repr(acc)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=8),
    split=st.integers(min_value=0, max_value=8),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_random_chunkings_property(sizes, split, seed):
    n = sum(sizes)
    if n < 2:
        return
    z = data(n, 3, seed=seed, shift=float(seed % 7) * 100)
    chunks = torch.split(z, sizes)
    k = min(split, len(chunks))
    a, b = StreamingCovariance(3), StreamingCovariance(3)
    for c in chunks[:k]:
        a.update(c)
    for c in chunks[k:]:
        b.update(c)
    a.merge(b)
    ref = np.cov(z.numpy(), rowvar=False)
    assert a.count == n
    assert np.allclose(a.covariance.numpy(), ref, rtol=1e-8, atol=1e-8)


def test_state_dict_roundtrip():
    acc = StreamingCovariance(3, shape=(2,)).update(torch.randn(2, 10, 3))
    other = StreamingCovariance(3, shape=(2,)).load_state_dict(acc.state_dict())
    assert other.count == 10 and torch.equal(other.covariance, acc.covariance)
    with pytest.raises(ValueError, match="mismatch"):
        StreamingCovariance(4).load_state_dict(acc.state_dict())


def test_errors():
    acc = StreamingCovariance(3)
    with pytest.raises(ValueError, match="at least 2 sample"):
        acc.participation_ratio()
    with pytest.raises(ValueError, match="at least 1 sample"):
        acc.mean
    acc.update(torch.randn(1, 3))
    with pytest.raises(ValueError, match="undefined"):
        acc.covariance
    with pytest.raises(ValueError, match="shape"):
        acc.update(torch.randn(4, 2))
    with pytest.raises(ValueError, match="shape"):
        StreamingCovariance(3, shape=(2,)).update(torch.randn(3, 5, 3))
    with pytest.raises(ValueError, match="NaN"):
        acc.update(torch.tensor([[0.0, float("nan"), 1.0]]))
    const = StreamingCovariance(2).update(torch.ones(5, 2))
    with pytest.raises(ValueError, match="zero variance"):
        const.participation_ratio()
    with pytest.raises(ValueError, match="incompatible"):
        acc.merge(StreamingCovariance(4))
    with pytest.raises(TypeError):
        acc.merge(torch.zeros(3))
    with pytest.raises(ValueError, match="dim"):
        StreamingCovariance(0)
    with pytest.raises(ValueError, match="shape"):
        StreamingCovariance(2, shape=(0,))


def test_all_reduce_without_distributed_is_a_copy():
    acc = StreamingCovariance(3).update(torch.randn(10, 3))
    out = acc.all_reduce()
    assert out is not acc and out.count == 10 and torch.equal(out.covariance, acc.covariance)


def _worker(rank, world, init_file, out_dir):
    import torch.distributed as dist

    torch.set_num_threads(1)  # no OpenMP pool in a forked child
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        z = data(50, 4, seed=3, shift=10.0)
        parts = [z[:7], z[7:]]  # unequal shares
        acc = StreamingCovariance(4, shape=(2,))
        local = parts[rank]
        acc.update(torch.stack([local, 2 * local]))
        out = acc.all_reduce()
        torch.save({"count": out.count, "cov": out.covariance, "local": acc.count},
                   os.path.join(out_dir, f"r{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2])
def test_all_reduce_gloo_matches_single_process(tmp_path, world):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    init_file = tmp_path / "init"
    # fork: the children inherit the imported modules (spawn would re-import torch per child).
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    mp.start_processes(_worker, args=(world, str(init_file), str(tmp_path)), nprocs=world,
                       join=True, start_method=method)
    z = data(50, 4, seed=3, shift=10.0)
    ref = StreamingCovariance(4, shape=(2,)).update(torch.stack([z, 2 * z]))
    for r in range(world):
        res = torch.load(tmp_path / f"r{r}.pt")
        assert res["count"] == 50
        assert res["local"] == (7 if r == 0 else 43)
        assert torch.allclose(res["cov"], ref.covariance, rtol=1e-12, atol=1e-12)
        assert np.allclose(res["cov"][1].numpy(), np.cov((2 * z).numpy(), rowvar=False), rtol=1e-10)
