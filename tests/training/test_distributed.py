"""Tests of the DDP plumbing: sharding, reductions, and 2 gloo processes under torchrun."""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "_train_scripts")
sys.path.insert(0, SCRIPTS)
import run_toy  # noqa: E402
from qg_train_toy import GetBatch, TinyLM, classification_data, corpus  # noqa: E402

from quest_geometric.training.checkpoint import read_checkpoint  # noqa: E402
from quest_geometric.training.config import TrainConfig  # noqa: E402
from quest_geometric.training.data import make_loader  # noqa: E402
from quest_geometric.training.distributed import (  # noqa: E402
    DistInfo,
    ShardSampler,
    all_gather_object,
    get_dist_info,
    init_distributed,
    reduce_sums,
)
from quest_geometric.training.logging import read_metrics  # noqa: E402
from quest_geometric.training.seed import derive_seed  # noqa: E402
from quest_geometric.training.tasks import LanguageModelTask  # noqa: E402
from quest_geometric.training.trainer import Trainer  # noqa: E402


# ---------------------------------------------------------------------- in-process units
@pytest.mark.parametrize("n, world", [(10, 1), (10, 3), (7, 2), (2, 4)])
def test_shard_sampler_partitions(n, world):
    shards = [list(ShardSampler(n, r, world)) for r in range(world)]
    assert sorted(i for s in shards for i in s) == list(range(n))
    assert [len(ShardSampler(n, r, world)) for r in range(world)] == [len(s) for s in shards]
    assert repr(ShardSampler(n, 0, world)) == f"ShardSampler({n}, rank=0, world_size={world})"
    with pytest.raises(ValueError, match="rank"):
        ShardSampler(n, world, world)


def test_sharded_loaders_cover_the_single_process_batch():
    """W ranks x batch b/W see together exactly the samples of 1 rank x batch b, every epoch."""
    ds = classification_data(24)
    single = make_loader(ds, 8, shuffle=True, seed=4)
    ranks = [make_loader(ds, 4, shuffle=True, seed=4, rank=r, world_size=2) for r in range(2)]
    for epoch in range(2):
        for loader in [single] + ranks:
            loader.sampler.set_epoch(epoch)
        for (xs, _), (x0, _), (x1, _) in zip(single, *ranks):
            key = lambda t: sorted(map(tuple, t.tolist()))  # noqa: E731
            assert key(xs) == key(torch.cat([x0, x1]))
    single.sampler.set_epoch(0)
    e0 = [x for x, _ in single]
    single.sampler.set_epoch(1)
    assert not torch.equal(torch.cat(e0), torch.cat([x for x, _ in single]))  # reshuffled


def test_sharded_pyg_loaders():
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Batch, Data

    graphs = [Data(x=torch.full((i % 3 + 2, 1), float(i)), edge_index=torch.zeros(2, 0,
                                                                                  dtype=torch.long),
                   y=torch.tensor([i])) for i in range(12)]
    single = make_loader(graphs, 6, shuffle=True, seed=0)
    ranks = [make_loader(graphs, 3, shuffle=True, seed=0, rank=r, world_size=2) for r in range(2)]
    for bs, b0, b1 in zip(single, *ranks):
        assert isinstance(bs, Batch)
        assert sorted(bs.y.tolist()) == sorted(b0.y.tolist() + b1.y.tolist())
    val = [make_loader(graphs, 5, shuffle=False, world_size=2, rank=r) for r in range(2)]
    assert sorted(y for v in val for b in v for y in b.y.tolist()) == list(range(12))


def test_single_process_helpers(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_distributed() == DistInfo(0, 1, 0) == get_dist_info()
    assert DistInfo().is_main and not DistInfo().distributed
    assert reduce_sums({"a": torch.tensor(2.0), "b": 3}) == {"a": 2.0, "b": 3.0}
    assert all_gather_object({"x": 1}) == [{"x": 1}]
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ValueError, match="RANK=5"):
        init_distributed()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK"):
        init_distributed()


def test_batch_size_must_divide_world(monkeypatch):
    import quest_geometric.training.trainer as trainer_mod

    monkeypatch.setattr(trainer_mod, "init_distributed", lambda: DistInfo(0, 3, 0))
    with pytest.raises(ValueError, match="divisible by the world size 3"):
        Trainer(TinyLM(), LanguageModelTask(), TrainConfig(max_steps=1, batch_size=8),
                GetBatch(corpus(100)))


# ---------------------------------------------------------------------- 2 processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """One torchrun job: 2 gloo ranks run the epoch-based MLP, then the step-based LM."""
    out = tmp_path_factory.mktemp("ddp")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    if sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
           os.path.join(SCRIPTS, "run_toy.py"), "--mode", "epoch,step", "--batch-size", "16",
           "--out", str(out / "run"), "--result", str(out / "res.pt")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    if r.returncode != 0:  # the whole output and what was written, for a rare abort's cause
        written = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
        pytest.fail(f"torchrun exited with {r.returncode}; written: {written}\n--- stdout ---\n"
                    f"{r.stdout[-4000:]}\n--- stderr ---\n{r.stderr[-8000:]}", pytrace=False)
    return out


def _single_process(tmp_path, mode):
    args = argparse.Namespace(mode=mode, dropout=0.0, epochs=4, max_steps=12, batch_size=16, seed=0)
    run_toy.run(args, str(tmp_path / mode), str(tmp_path / f"{mode}.pt"))
    return torch.load(tmp_path / f"{mode}.pt")


@pytest.mark.slow
def test_ddp_matches_single_process(ddp_run, tmp_path):
    """Same global batch (2 ranks x 8 vs 1 x 16), DDP gradient averaging of mean losses:
    the same weights and metrics up to float rounding."""
    ddp = torch.load(ddp_run / "res.pt.epoch")
    ref = _single_process(tmp_path, "epoch")
    for k in ref["state"]:
        assert torch.allclose(ddp["state"][k], ref["state"][k], rtol=1e-5, atol=1e-6), k
    for k in ("train_loss", "train_acc", "val_loss", "val_acc", "step", "epoch"):
        assert ddp["final"][k] == pytest.approx(ref["final"][k], rel=1e-5), k
    # only rank 0 wrote the log (one record per epoch) and the checkpoint carries both ranks
    assert [r["epoch"] for r in read_metrics(ddp_run / "run" / "epoch" / "metrics.jsonl",
                                             "epoch")] \
        == [1, 2, 3, 4]
    assert len(read_checkpoint(ddp_run / "run" / "epoch" / "checkpoint.pt")["rank_states"]) == 2


@pytest.mark.slow
def test_ddp_step_based_streams_and_reduction(ddp_run):
    r0, r1 = (torch.load(ddp_run / f"res.pt.step.rank{r}") for r in range(2))
    final = torch.load(ddp_run / "res.pt.step")["final"]
    # DDP keeps the replicas identical
    for k in r0["state"]:
        assert torch.equal(r0["state"][k], r1["state"][k]), k
    # each rank drew its own documented stream: batch_size / 2 blocks from (seed, 'train', rank)
    gb = GetBatch(corpus())
    for rank, res in enumerate((r0, r1)):
        g = torch.Generator().manual_seed(derive_seed(0, "train", rank))
        assert torch.equal(res["first_batch"], gb("train", 8, g)[0])
    assert not torch.equal(r0["first_batch"], r1["first_batch"])
    # the reported validation loss is the token mean over both ranks' validation batches
    model = TinyLM()
    model.load_state_dict(r0["state"])
    model.eval()
    losses = []
    for rank in range(2):
        g = torch.Generator().manual_seed(derive_seed(0, "val", rank))
        for _ in range(2):  # eval_batches
            x, y = gb("val", 8, g)
            with torch.no_grad():
                losses.append(F.cross_entropy(model(x)[0].reshape(-1, 11), y.reshape(-1),
                                              reduction="none"))
    assert final["val_loss"] == pytest.approx(torch.cat(losses).mean().item(), rel=1e-5)


@pytest.mark.slow
def test_resume_ddp_checkpoint_in_one_process(ddp_run):
    """A checkpoint of 2 ranks resumes on 1 (the streams are re-seeded, with a warning)."""
    gb = GetBatch(corpus())
    cfg = TrainConfig(max_steps=16, batch_size=16, lr=0.02, warmup_steps=2, seed=0, progress=False,
                      log_every=3, eval_every=4, checkpoint_every=4, eval_batches=2)
    trainer = Trainer(TinyLM(), LanguageModelTask(), cfg, gb, gb)
    with pytest.warns(UserWarning, match="written by 2 rank"):
        final = trainer.fit(resume=str(ddp_run / "run" / "step" / "checkpoint.pt"))
    assert final["step"] == 16 and trainer.step == 16
