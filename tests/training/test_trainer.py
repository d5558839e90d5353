"""Tests of the training loop, config, tasks, schedule, callbacks and metrics logging."""
from __future__ import annotations

import json
import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_train_scripts"))
from qg_train_toy import MLP, GetBatch, TinyLM, classification_data, corpus  # noqa: E402

from quest_geometric.training.config import TrainConfig  # noqa: E402
from quest_geometric.training.data import is_step_data, random_blocks  # noqa: E402
from quest_geometric.training.logging import plot_curves, read_metrics  # noqa: E402
from quest_geometric.training.seed import derive_seed, seed_everything  # noqa: E402
from quest_geometric.training.tasks import ClassificationTask, LanguageModelTask  # noqa: E402
from quest_geometric.training.trainer import (  # noqa: E402
    Callback,
    EveryNSteps,
    Trainer,
    WarmupCosine,
)


def _cfg(**kw):
    base = dict(epochs=3, batch_size=16, lr=0.05, progress=False, log_every=2)
    base.update(kw)
    return TrainConfig(**base)


# ---------------------------------------------------------------------- config
@pytest.mark.parametrize("kw, exc, arg", [
    (dict(epochs=None, max_steps=None), ValueError, "epochs"),
    (dict(epochs=0), ValueError, "epochs"),
    (dict(epochs=2.5), TypeError, "epochs"),
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(lr=0.0), ValueError, "lr"),
    (dict(lr=float("nan")), ValueError, "lr"),
    (dict(lr="0.1"), TypeError, "lr"),
    (dict(lr=torch.tensor(0.1)), TypeError, "lr"),
    (dict(min_lr=1.0, lr=0.1), ValueError, "min_lr"),
    (dict(optimizer="adam"), ValueError, "optimizer"),
    (dict(optimizer=None), TypeError, "optimizer"),
    (dict(nesterov=True), ValueError, "nesterov"),
    (dict(optimizer="sgd", momentum=1.0), ValueError, "momentum"),
    (dict(betas=(0.9, 1.5)), ValueError, "betas"),
    (dict(betas=(0.9, 0.99, 0.999)), ValueError, "betas"),
    (dict(betas=0.9), TypeError, "betas"),
    (dict(schedule="linear"), ValueError, "schedule"),
    (dict(warmup_steps=2, warmup_epochs=1.0), ValueError, "warmup_epochs"),
    (dict(epochs=None, max_steps=5, warmup_epochs=1.0), ValueError, "warmup_epochs"),
    (dict(grad_clip=0.0), ValueError, "grad_clip"),
    (dict(amp="fp8"), ValueError, "amp"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(log_every=0), ValueError, "log_every"),
    (dict(eval_every=-1), ValueError, "eval_every"),
    (dict(device=0), TypeError, "device"),
    (dict(extra=[]), TypeError, "extra"),
])
def test_config_validation(kw, exc, arg):
    base = dict(epochs=1)
    base.update(kw)
    with pytest.raises(exc, match=f"^TrainConfig: '{arg}'( \\(or None\\))? must be "):
        TrainConfig(**base)


def test_config_round_trip_and_diff():
    cfg = TrainConfig(epochs=2, optimizer="sgd", nesterov=True, extra={"model": "mlp"})
    again = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert cfg.trajectory_diff(cfg.replace(epochs=9, progress=False)) == {}
    assert set(cfg.trajectory_diff(cfg.replace(lr=0.5))) == {"lr"}
    with pytest.raises(ValueError, match=r"^TrainConfig.from_dict: 'd' must be a dict of "
                                         r"TrainConfig fields, got unknown fields \['bogus'\]$"):
        TrainConfig.from_dict({"epochs": 1, "bogus": 2})
    with pytest.raises(TypeError, match="^TrainConfig.from_dict: 'd' must be a dict, got"):
        TrainConfig.from_dict([("epochs", 1)])


# ---------------------------------------------------------------------- schedule
def test_warmup_cosine_matches_formula():
    f = WarmupCosine(total=20, warmup=4, min_ratio=0.1)
    for t in range(4):
        assert f(t) == pytest.approx((t + 1) / 4)
    for t in range(4, 25):
        p = min(1.0, (t - 4) / 16)
        assert f(t) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * p)))
    assert f(20) == pytest.approx(0.1)
    assert WarmupCosine(10, 0, cosine=False)(7) == 1.0


# ---------------------------------------------------------------------- tasks
def test_classification_task_tuple_matches_reference():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x, y = torch.randn(10, 4), torch.randint(3, (10,))
    loss, sums = ClassificationTask().training_step(model, (x, y))
    logits = model(x)
    ref = -torch.log_softmax(logits, -1)[torch.arange(10), y].mean()
    assert torch.allclose(loss, ref)
    assert float(sums["correct"]) == float((logits.argmax(-1) == y).sum())
    assert float(sums["count"]) == 10
    assert float(sums["loss_sum"]) == pytest.approx(10 * ref.item(), rel=1e-6)
    m = ClassificationTask().summarize({k: float(v) for k, v in sums.items()})
    assert m["acc"] == pytest.approx(float((logits.argmax(-1) == y).float().mean()))


def test_classification_task_bad_input():
    model = nn.Linear(4, 3)
    with pytest.raises(ValueError, match="logits"):
        ClassificationTask().training_step(model, (torch.randn(5, 4), torch.zeros(6,
                                                                                  dtype=torch.long)))
    with pytest.raises(TypeError, match="integer"):
        ClassificationTask().training_step(model, (torch.randn(5, 4), torch.zeros(5)))
    with pytest.raises(TypeError, match="PyG Batch"):
        ClassificationTask().training_step(model, torch.randn(5, 4))
    with pytest.raises(ValueError, match="label_smoothing"):
        ClassificationTask(label_smoothing=1.0)


@pytest.mark.parametrize("pass_targets", [None, True, False])
def test_language_model_task_paths_agree(pass_targets):
    torch.manual_seed(0)
    model = TinyLM(vocab=7)
    x, y = torch.randint(7, (3, 5)), torch.randint(7, (3, 5))
    loss, sums = LanguageModelTask(pass_targets=pass_targets).training_step(model, (x, y))
    logits = model(x)[0]
    ref = F.cross_entropy(logits.reshape(-1, 7), y.reshape(-1))
    assert torch.allclose(loss, ref)
    assert float(sums["count"]) == 15
    m = LanguageModelTask().summarize({k: float(v) for k, v in sums.items()})
    assert m["bpc"] == pytest.approx(ref.item() / math.log(2), rel=1e-6)
    assert m["acc"] == pytest.approx(float((logits.argmax(-1) == y).float().mean()))


def test_language_model_task_ignore_index():
    torch.manual_seed(0)
    model = TinyLM(vocab=7)
    x, y = torch.randint(7, (2, 4)), torch.randint(7, (2, 4))
    y[0, :2] = -1
    loss, sums = LanguageModelTask(pass_targets=False).training_step(model, (x, y))
    assert float(sums["count"]) == 6
    logits = model(x)[0]
    keep = y != -1
    assert torch.allclose(loss, F.cross_entropy(logits[keep], y[keep]))


# ---------------------------------------------------------------------- the loop
def test_trainer_equals_hand_written_loop():
    """SGD + momentum + warmup-cosine, shuffled by the documented permutation."""
    ds = classification_data(48)
    cfg = _cfg(epochs=3, batch_size=16, optimizer="sgd", momentum=0.9, warmup_steps=2,
               min_lr=0.005, weight_decay=0.01, seed=3)
    seed_everything(0)
    model = MLP()
    ref = MLP()
    ref.load_state_dict(model.state_dict())
    Trainer(model, ClassificationTask(), cfg, ds).fit()

    decay = [p for p in ref.parameters() if p.dim() >= 2]
    no_decay = [p for p in ref.parameters() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 0.01},
                           {"params": no_decay, "weight_decay": 0.0}], lr=0.05, momentum=0.9)
    x, y = ds.tensors
    total, step = 9, 0
    for epoch in range(3):
        perm = torch.randperm(48, generator=torch.Generator().manual_seed(3 + epoch))
        for b in range(3):
            idx = perm[16 * b:16 * (b + 1)]
            if step < 2:
                factor = (step + 1) / 2
            else:
                factor = 0.1 + 0.45 * (1 + math.cos(math.pi * (step - 2) / (total - 2)))
            for g in opt.param_groups:
                g["lr"] = 0.05 * factor
            opt.zero_grad()
            F.cross_entropy(ref(x[idx]), y[idx]).backward()
            opt.step()
            step += 1
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()


def test_trainer_learns_and_logs(tmp_path):
    seed_everything(0)
    train, val = classification_data(128), classification_data(64, seed=1)
    cfg = _cfg(epochs=6, batch_size=32, lr=0.01, out_dir=str(tmp_path), warmup_epochs=1.0)
    model = MLP()
    final = Trainer(model, ClassificationTask(), cfg, train, val).fit()
    # the reported validation metrics are those of the final model on the val set
    ref = ClassificationTask().evaluate(model, [val.tensors])
    assert final["val_loss"] == pytest.approx(ref["loss"], rel=1e-5)
    assert final["val_acc"] == pytest.approx(ref["acc"])
    assert final["val_acc"] > 0.8  # separable data: far above chance
    epochs = read_metrics(tmp_path / "metrics.jsonl", kind="epoch")
    assert [r["epoch"] for r in epochs] == list(range(1, 7))
    assert epochs[0]["train_loss"] > epochs[-1]["train_loss"]
    f = WarmupCosine(total=24, warmup=4)
    assert [r["lr"] for r in epochs] == pytest.approx([0.01 * f(r["step"]) for r in epochs])
    steps = read_metrics(tmp_path / "metrics.jsonl", kind="step")
    assert [r["step"] for r in steps] == list(range(2, 25, 2))
    assert all(r["samples_per_s"] > 0 for r in epochs)


def test_trainer_pyg_graph_classification(tmp_path):
    pyg = pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data
    from torch_geometric.nn import GCNConv, global_mean_pool

    class GCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = GCNConv(3, 16), GCNConv(16, 16)
            self.lin = nn.Linear(16, 2)

        def forward(self, data):
            h = self.conv1(data.x, data.edge_index).relu()
            h = self.conv2(h, data.edge_index).relu()
            return self.lin(global_mean_pool(h, data.batch))

    g = torch.Generator().manual_seed(0)
    graphs = []
    for i in range(24):
        n = 4 + i % 5
        label = i % 2
        x = torch.randn(n, 3, generator=g) + (1.5 if label else -1.5)
        ei = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
        graphs.append(Data(x=x, edge_index=torch.cat([ei, ei.flip(0)], 1), y=torch.tensor([label])))
    seed_everything(0)
    model = GCN()
    cfg = _cfg(epochs=4, batch_size=8, lr=0.02, out_dir=str(tmp_path))
    final = Trainer(model, ClassificationTask(), cfg, graphs[:16], graphs[16:]).fit()
    batch = pyg.data.Batch.from_data_list(graphs[16:])
    with torch.no_grad():
        logits = model.eval()(batch)
    assert final["val_loss"] == pytest.approx(F.cross_entropy(logits, batch.y).item(), rel=1e-5)
    assert final["val_acc"] == pytest.approx((logits.argmax(-1) == batch.y).float().mean().item())
    assert final["step"] == 8


@pytest.mark.slow
def test_step_based_language_model(tmp_path):
    seed_everything(0)
    gb = GetBatch(corpus(2000), block=8)
    cfg = TrainConfig(max_steps=30, batch_size=16, lr=0.05, progress=False, log_every=10,
                      eval_every=10, eval_batches=3, out_dir=str(tmp_path))
    model = TinyLM()
    final = Trainer(model, LanguageModelTask(), cfg, gb, gb).fit()
    evals = read_metrics(tmp_path / "metrics.jsonl", kind="eval")
    assert [r["step"] for r in evals] == [10, 20, 30]
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]
    # the evaluation draws `eval_batches` batches from the documented (seed, 'val', rank) stream
    gen = torch.Generator().manual_seed(derive_seed(0, "val", 0))
    batches = [gb("val", 16, gen) for _ in range(3)]
    ref = LanguageModelTask().evaluate(model, batches)
    assert final["val_loss"] == pytest.approx(ref["loss"], rel=1e-5)
    assert final["val_bpc"] == pytest.approx(ref["loss"] / math.log(2), rel=1e-5)
    assert "tokens_per_s" in final


def test_random_blocks_and_streams():
    data = torch.arange(100)
    g = torch.Generator().manual_seed(0)
    x, y = random_blocks(data, 4, 10, g)
    assert x.shape == y.shape == (4, 10)
    assert torch.equal(y, x + 1) and torch.equal(x[:, 1:], x[:, :-1] + 1)
    assert int(x.max()) <= 98
    g0 = torch.Generator().manual_seed(0)
    assert torch.equal(random_blocks(data, 4, 10, g0)[0], x)
    assert derive_seed(0, "train", 0) != derive_seed(0, "train", 1)
    with pytest.raises(ValueError, match="more than"):
        random_blocks(torch.arange(5), 1, 5)
    assert is_step_data(GetBatch(corpus(100))) and not is_step_data(classification_data(4))


class Counter(Callback):
    def __init__(self):
        self.calls = {"opt": [], "step": [], "epoch": [], "eval": [], "start": 0, "end": 0}

    def on_fit_start(self, trainer):
        self.calls["start"] += 1

    def after_optimizer_step(self, trainer, step):
        self.calls["opt"].append(step)

    def on_step_end(self, trainer, step, metrics):
        assert metrics["loss"].dim() == 0
        self.calls["step"].append(step)

    def on_epoch_end(self, trainer, epoch, metrics):
        self.calls["epoch"].append(epoch)

    def on_eval_end(self, trainer, step, metrics):
        self.calls["eval"].append(step)

    def on_fit_end(self, trainer, metrics):
        self.calls["end"] += 1


def test_callbacks_are_called():
    c, probe = Counter(), []
    ds = classification_data(32)
    cfg = _cfg(epochs=4, batch_size=8, eval_every=2)
    Trainer(MLP(), ClassificationTask(), cfg, ds, ds,
            callbacks=[c, EveryNSteps(lambda t, s: probe.append(s), every=5, at_start=True)]).fit()
    assert c.calls["opt"] == c.calls["step"] == list(range(1, 17))
    assert c.calls["epoch"] == [1, 2, 3, 4]
    assert c.calls["eval"] == [8, 16]
    assert c.calls["start"] == c.calls["end"] == 1
    assert probe == [0, 5, 10, 15]
    with pytest.raises(ValueError, match="every"):
        EveryNSteps(lambda t, s: None, every=0)


def test_grad_clip_applies():
    norms = []

    class Norm(Callback):
        def after_optimizer_step(self, trainer, step):
            norms.append(torch.norm(torch.stack([p.grad.norm()
                                                 for p in trainer.raw_model.parameters()])))

    ds = TensorDataset(torch.randn(32, 6) * 50, torch.randint(2, (32,)))
    Trainer(MLP(), ClassificationTask(), _cfg(epochs=1, batch_size=8, grad_clip=0.1), ds,
            callbacks=[Norm()]).fit()
    assert len(norms) == 4 and all(n <= 0.1 + 1e-5 for n in norms)


def test_bf16_autocast_on_cpu_and_fp16_refused():
    ds = classification_data(16)
    final = Trainer(MLP(), ClassificationTask(), _cfg(epochs=1, batch_size=8, amp="bf16"), ds,
                    ds).fit()
    assert math.isfinite(final["val_loss"])
    with pytest.raises(ValueError, match="fp16"):
        Trainer(MLP(), ClassificationTask(), _cfg(epochs=1, amp="fp16"), ds)


def test_non_finite_loss_raises():
    class NaNModel(MLP):
        def forward(self, x):
            return super().forward(x) * float("nan")

    with pytest.raises(FloatingPointError, match="non-finite"):
        Trainer(NaNModel(), ClassificationTask(), _cfg(epochs=1, batch_size=8),
                classification_data(16)).fit()


@pytest.mark.parametrize("deterministic", [False, True])
def test_seeded_runs_repeat(deterministic):
    def run(seed):
        seed_everything(0)
        model = MLP(dropout=0.3)
        cfg = _cfg(epochs=2, batch_size=8, seed=seed, deterministic=deterministic)
        Trainer(model, ClassificationTask(), cfg, classification_data(32)).fit()
        return torch.cat([p.flatten() for p in model.parameters()])

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(model="x"), TypeError, "model"),
    (dict(task=object()), TypeError, "training_step"),
    (dict(cfg=TrainConfig(epochs=1, batch_size=4)), None, None),
    (dict(train=GetBatch(corpus(200)), cfg=TrainConfig(epochs=1)), ValueError, "max_steps"),
    (dict(train=GetBatch(corpus(200)), val=classification_data(4),
          cfg=TrainConfig(max_steps=2)), TypeError, "val_data"),
    (dict(train=[]), ValueError, "empty"),
    (dict(callbacks=[object()]), TypeError, "Callback"),
    (dict(cfg=TrainConfig(epochs=1, device="cuda")), ValueError, "CUDA"),
])
def test_trainer_bad_input(kw, exc, match):
    if kw.get("cfg") is not None and kw["cfg"].device == "cuda" and torch.cuda.is_available():
        pytest.skip("CUDA present")
    args = dict(model=MLP(), task=ClassificationTask(), cfg=TrainConfig(epochs=1),
                train=classification_data(8), val=None, callbacks=None)
    args.update(kw)
    make = lambda: Trainer(args["model"], args["task"], args["cfg"], args["train"],  # noqa: E731
                           args["val"], callbacks=args["callbacks"])
    if exc is None:
        assert "Trainer(MLP, ClassificationTask" in repr(make())
        return
    with pytest.raises(exc, match=match):
        make()


@pytest.mark.slow
def test_plot_curves(tmp_path):
    pytest.importorskip("matplotlib")
    for name, shift in (("a", 0.0), ("b", 0.5)):
        d = tmp_path / name
        d.mkdir()
        with open(d / "metrics.jsonl", "w") as f:
            for e in range(1, 4):
                f.write(json.dumps({"kind": "epoch", "epoch": e, "step": 2 * e,
                                    "train_loss": 1 / e + shift, "val_loss": 1.2 / e}) + "\n")
                f.write(json.dumps({"kind": "step", "step": 2 * e, "loss": 1 / e}) + "\n")
    out = plot_curves([tmp_path / "a" / "metrics.jsonl", tmp_path / "b" / "metrics.jsonl"],
                      tmp_path / "curves.png", keys=["train_loss", "val_loss", "loss"])
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="none of the keys"):
        plot_curves(tmp_path / "a" / "metrics.jsonl", tmp_path / "x.png", keys=["nope"])
    with pytest.raises(ValueError, match="labels"):
        plot_curves(tmp_path / "a" / "metrics.jsonl", tmp_path / "x.png", labels=["1", "2"])


def test_read_metrics_skips_torn_last_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"kind": "epoch", "step": 1}\n{"kind": "ep')
    assert read_metrics(p) == [{"kind": "epoch", "step": 1}]
