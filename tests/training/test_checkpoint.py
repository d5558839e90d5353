"""Tests of checkpoints: atomic writes, refusal of corrupt/foreign files, exact resume."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "_train_scripts")
sys.path.insert(0, SCRIPTS)
from qg_train_toy import MLP, GetBatch, TinyLM, classification_data, corpus  # noqa: E402

from quest_geometric.training.checkpoint import (  # noqa: E402
    CHECKPOINT_FORMAT,
    CheckpointError,
    atomic_torch_save,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
    to_safe,
)
from quest_geometric.training.config import TrainConfig  # noqa: E402
from quest_geometric.training.logging import read_metrics  # noqa: E402
from quest_geometric.training.seed import get_rng_state, seed_everything, set_rng_state  # noqa: E402
from quest_geometric.training.tasks import ClassificationTask, LanguageModelTask  # noqa: E402
from quest_geometric.training.trainer import Callback, Trainer  # noqa: E402


def _params(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _deterministic(final):
    return {k: v for k, v in final.items() if k not in ("time_s",) and not k.endswith("_per_s")}


@pytest.fixture
def ckpt(tmp_path):
    """A valid checkpoint of an MLP trained for one epoch."""
    seed_everything(0)
    cfg = TrainConfig(epochs=1, batch_size=8, progress=False, out_dir=str(tmp_path / "run"))
    Trainer(MLP(), ClassificationTask(), cfg, classification_data(16)).fit()
    return tmp_path / "run" / "checkpoint.pt"


# ---------------------------------------------------------------------- atomic writes
def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    p = tmp_path / "c.pt"
    save_checkpoint(p, {"model": {"w": torch.ones(3)}})
    with pytest.raises(TypeError, match="weights_only"):
        save_checkpoint(p, {"model": {"w": torch.zeros(3)}, "bad": object()})

    class Boom:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        atomic_torch_save({"x": Boom()}, p)
    assert torch.equal(read_checkpoint(p)["model"]["w"], torch.ones(3))
    assert sorted(os.listdir(tmp_path)) == ["c.pt"]  # no temporary left behind


def test_to_safe_converts_and_refuses():
    out = to_safe({"a": np.float64(1.5), "b": np.arange(3), "c": torch.float32,
                   "d": (np.int64(2), [None, True]), "v": torch.__version__})
    assert out["a"] == 1.5 and type(out["a"]) is float
    assert torch.equal(out["b"], torch.arange(3))
    assert out["c"] == "torch.float32" and type(out["v"]) is str
    assert out["d"] == (2, [None, True])
    with pytest.raises(TypeError, match=r"payload\['x'\]\[1\]"):
        to_safe({"x": [1, object()]})


# ---------------------------------------------------------------------- refusals
def test_truncated_checkpoint_refused(ckpt):
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        read_checkpoint(ckpt)


def test_garbage_and_empty_files_refused(tmp_path):
    p = tmp_path / "g.pt"
    p.write_bytes(os.urandom(2000))
    with pytest.raises(CheckpointError, match="cannot be read"):
        read_checkpoint(p)
    p.write_bytes(b"")
    with pytest.raises(CheckpointError, match="cannot be read"):
        read_checkpoint(p)
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(tmp_path / "missing.pt")


def test_flipped_bytes_detected_by_digest(ckpt):
    """torch.load does not notice changed tensor bytes; the digest does."""
    payload = read_checkpoint(ckpt)
    w = payload["model"]["net.0.weight"]
    # find the tensor's bytes in the file and change one of them
    raw = bytearray(ckpt.read_bytes())
    needle = w.contiguous().numpy().tobytes()
    i = raw.find(needle)
    assert i >= 0
    raw[i + 5] ^= 0xFF
    ckpt.write_bytes(bytes(raw))
    torch.load(ckpt, weights_only=True)  # PyTorch itself accepts the damaged file
    with pytest.raises(CheckpointError, match="corrupt"):
        read_checkpoint(ckpt)


def test_foreign_files_refused(tmp_path):
    model = MLP()
    p = tmp_path / "sd.pt"
    torch.save(model.state_dict(), p)
    with pytest.raises(CheckpointError, match="not a quest_geometric training checkpoint"):
        load_checkpoint(p, model)
    torch.save([1, 2, 3], p)
    with pytest.raises(CheckpointError, match="format tag"):
        read_checkpoint(p)
    torch.save({"format": CHECKPOINT_FORMAT, "version": 99, "digest": "", "payload": {}}, p)
    with pytest.raises(CheckpointError, match="version 99"):
        read_checkpoint(p)
    torch.save({"model": model, "format": CHECKPOINT_FORMAT}, p)  # a pickled module
    with pytest.raises(CheckpointError, match="weights_only"):
        read_checkpoint(p)


@pytest.mark.parametrize("other", ["wider", "deeper", "renamed"])
def test_other_architecture_refused_and_nothing_loaded(ckpt, other):
    model = {"wider": lambda: MLP(hidden=32), "deeper": lambda: nn.Sequential(MLP(), nn.Linear(2,
                                                                                               2)),
             "renamed": lambda: nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16,
                                                                                     2))}[other]()
    before = _params(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    with pytest.raises(CheckpointError, match="different model architecture"):
        load_checkpoint(ckpt, model, opt)
    assert _same(before, _params(model))
    assert opt.state_dict()["state"] == {}


def test_optimizer_structure_mismatch_refused(ckpt):
    model = MLP()
    before = _params(model)
    opt = torch.optim.SGD([{"params": list(model.parameters())}], lr=0.1)  # 1 group, not 2
    with pytest.raises(CheckpointError, match="optimizer parameter groups"):
        load_checkpoint(ckpt, model, opt)
    assert _same(before, _params(model))


def test_trainer_refuses_foreign_checkpoint_untouched(tmp_path):
    model = MLP()
    before = _params(model)
    p = tmp_path / "foreign.pt"
    torch.save({"model": model.state_dict()}, p)
    cfg = TrainConfig(epochs=1, batch_size=8, progress=False)
    with pytest.raises(CheckpointError, match="not a quest_geometric"):
        Trainer(model, ClassificationTask(), cfg, classification_data(16)).fit(resume=str(p))
    assert _same(before, _params(model))
    cfg = cfg.replace(out_dir=str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer(model, ClassificationTask(), cfg, classification_data(16)).fit(resume=True)


def test_load_checkpoint_round_trip(ckpt):
    payload = read_checkpoint(ckpt)
    model = MLP()
    load_checkpoint(ckpt, model)
    assert _same(_params(model), payload["model"])
    assert payload["epoch"] == 1 and payload["step"] == 2
    assert TrainConfig.from_dict(payload["config"]).batch_size == 8
    assert len(payload["history"]) == 1


def test_rng_state_round_trip():
    g = torch.Generator().manual_seed(5)
    seed_everything(1)
    state = get_rng_state(g)
    first = (random.random(), np.random.rand(), torch.rand(2), torch.rand(2, generator=g))
    set_rng_state(state, g)
    again = (random.random(), np.random.rand(), torch.rand(2), torch.rand(2, generator=g))
    assert first[0] == again[0] and first[1] == again[1]
    assert torch.equal(first[2], again[2]) and torch.equal(first[3], again[3])
    # the state survives a weights_only save/load
    p = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"qg_rng_{os.getpid()}.pt")
    torch.save(state, p)
    try:
        set_rng_state(torch.load(p, weights_only=True), g)
    finally:
        os.remove(p)
    assert random.random() == first[0] and torch.equal(torch.rand(2, generator=g), first[3])


# ---------------------------------------------------------------------- resume
def _run_script(*args, timeout=120):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, "run_toy.py"), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_killed_run_resumes_exactly(tmp_path):
    """SIGKILL mid-epoch 3 of 4 (dropout on, so RNG streams matter), resume in a new process:
    same final weights (bitwise) and metrics as an uninterrupted run; only epoch 3 is lost."""
    common = ["--mode", "epoch", "--dropout", "0.2", "--epochs", "4", "--batch-size", "16"]
    r = _run_script(*common, "--ref-out", str(tmp_path / "ref"), "--ref-result",
                    str(tmp_path / "ref.pt"), "--out", str(tmp_path / "run"),
                    "--kill-at-step", "10")
    assert r.returncode == -9, r.stderr[-2000:]  # killed by SIGKILL at step 10 (epoch 3)
    killed = read_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert killed["epoch"] == 2 and killed["step"] == 8  # lost: the current epoch only
    r = _run_script(*common, "--out", str(tmp_path / "run"), "--resume",
                    "--result", str(tmp_path / "res.pt"))
    assert r.returncode == 0, r.stderr[-2000:]
    ref, res = torch.load(tmp_path / "ref.pt"), torch.load(tmp_path / "res.pt")
    assert _same(ref["state"], res["state"])
    assert _deterministic(ref["final"]) == _deterministic(res["final"])
    assert [_deterministic(h) for h in ref["history"]] == [_deterministic(h)
                                                           for h in res["history"]]
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1, 2, 3, 4]
    assert [r["step"] for r in records if r["kind"] == "step"] == [3, 6, 9, 12, 15]


class Crash(Callback):
    def __init__(self, at):
        self.at = at

    def on_step_end(self, trainer, step, metrics):
        if step == self.at:
            raise KeyboardInterrupt


def _lm_run(out, crash_at=None, resume=False, dropout=0.2):
    seed_everything(0)
    model = TinyLM(dropout=dropout)
    gb = GetBatch(corpus(1500))
    cfg = TrainConfig(max_steps=13, batch_size=8, lr=0.02, warmup_steps=3, progress=False,
                      out_dir=str(out), log_every=2, eval_every=5, checkpoint_every=4,
                      eval_batches=2)
    cbs = [Crash(crash_at)] if crash_at else []
    trainer = Trainer(model, LanguageModelTask(), cfg, gb, gb, callbacks=cbs)
    return trainer, trainer.fit(resume="auto" if resume else False)


@pytest.mark.slow
def test_step_based_resume_exact(tmp_path):
    ref_trainer, ref = _lm_run(tmp_path / "ref")
    with pytest.raises(KeyboardInterrupt):
        _lm_run(tmp_path / "run", crash_at=10)  # the last checkpoint is at step 8
    assert read_checkpoint(tmp_path / "run" / "checkpoint.pt")["step"] == 8
    trainer, res = _lm_run(tmp_path / "run", resume=True)
    assert _same(_params(ref_trainer.raw_model), _params(trainer.raw_model))
    assert _deterministic(ref) == _deterministic(res)
    strip = lambda recs: [_deterministic(r) for r in recs]  # noqa: E731
    assert strip(read_metrics(tmp_path / "ref" / "metrics.jsonl")) == \
        strip(read_metrics(tmp_path / "run" / "metrics.jsonl"))


@pytest.mark.slow
def test_resume_of_finished_run_returns_final(tmp_path):
    ref_trainer, ref = _lm_run(tmp_path / "ref")
    trainer, again = _lm_run(tmp_path / "ref", resume=True)
    assert again == ref
    assert _same(_params(ref_trainer.raw_model), _params(trainer.raw_model))


@pytest.mark.slow
def test_resume_with_other_config_warns(tmp_path):
    _lm_run(tmp_path / "run")
    seed_everything(0)
    gb = GetBatch(corpus(1500))
    cfg = TrainConfig(max_steps=13, batch_size=8, lr=0.5, progress=False,
                      out_dir=str(tmp_path / "run"))
    with pytest.warns(UserWarning, match="different config"):
        Trainer(TinyLM(), LanguageModelTask(), cfg, gb, gb).fit(resume=True)


@pytest.mark.slow
def test_pyg_resume_exact(tmp_path):
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data
    from torch_geometric.nn import GCNConv, global_add_pool

    class GCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.drop, self.lin = GCNConv(2, 8), nn.Dropout(0.3), nn.Linear(8, 2)

        def forward(self, data):
            h = self.drop(self.conv(data.x, data.edge_index).relu())
            return self.lin(global_add_pool(h, data.batch))

    g = torch.Generator().manual_seed(1)
    graphs = [Data(x=torch.randn(5, 2, generator=g),
                   edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]),
                   y=torch.tensor([i % 2])) for i in range(12)]

    def run(out, crash_at=None, resume=False):
        seed_everything(0)
        model = GCN()
        cfg = TrainConfig(epochs=3, batch_size=4, lr=0.05, progress=False, out_dir=str(out))
        cbs = [Crash(crash_at)] if crash_at else []
        final = Trainer(model, ClassificationTask(), cfg, graphs, graphs[:6], callbacks=cbs).fit(
            resume="auto" if resume else False)
        return model, final

    ref_model, ref = run(tmp_path / "ref")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "run", crash_at=5)
    model, res = run(tmp_path / "run", resume=True)
    assert _same(_params(ref_model), _params(model))
    assert _deterministic(ref) == _deterministic(res)


def test_callback_state_is_checkpointed(tmp_path):
    class Stateful(Callback):
        def __init__(self):
            self.seen = 0

        def after_optimizer_step(self, trainer, step):
            self.seen += 1

        def state_dict(self):
            return {"seen": self.seen}

        def load_state_dict(self, state):
            self.seen = state["seen"]

    cfg = TrainConfig(epochs=3, batch_size=8, progress=False, out_dir=str(tmp_path))
    ds = classification_data(16)
    with pytest.raises(KeyboardInterrupt):
        Trainer(MLP(), ClassificationTask(), cfg, ds, callbacks=[Stateful(), Crash(5)]).fit()
    cb = Stateful()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(MLP(), ClassificationTask(), cfg, ds, callbacks=[cb, Crash(99)]).fit(resume="auto")
    assert cb.seen == 6  # 4 steps restored from the epoch-2 checkpoint + 2 more
