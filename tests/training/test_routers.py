"""Router training (:mod:`quest_geometric.training.routers`) on a tiny random Llama with Focus
composed: the seeded block order, resuming, the pair budget and the objective record."""
from __future__ import annotations

import pytest
import torch

from quest_geometric.testing.focus import tiny_composed_llama as _tiny_composed
from quest_geometric.training.routers import block_order, train_routers


def test_block_order_draws_every_block_equally_often_per_chunk():
    o = block_order(7, 20, seed=3, chunk_passes=2)
    assert o.numel() == 28  # ceil(20 / 14) = 2 chunks of 2 passes
    for chunk in o.view(2, 14):
        assert torch.bincount(chunk, minlength=7).tolist() == [2] * 7
    assert not torch.equal(o[:14], o[14:])  # each chunk its own permutation
    assert not torch.equal(o, block_order(7, 20, seed=4, chunk_passes=2))
    with pytest.raises(ValueError, match="num_blocks"):
        block_order(0, 5)
    with pytest.raises(ValueError, match="chunk_passes"):
        block_order(5, 5, chunk_passes=0)



def test_block_order_of_a_longer_run_starts_with_the_shorter_one():
    short, long = block_order(84, 300), block_order(84, 420)
    assert short.numel() == 336 and long.numel() == 672
    assert torch.equal(long[:336], short)
    # the first chunk is the order of the committed 300-step runs: one permutation of four
    # passes drawn at once
    ref = torch.randperm(4 * 84, generator=torch.Generator().manual_seed(0)) % 84
    assert torch.equal(short, ref)



@pytest.mark.slow
def test_train_routers_resumed_equals_uninterrupted(tmp_path):
    pytest.importorskip("transformers")
    from quest_geometric.testing.hf import tokens

    from quest_geometric.nn.focus import router_parameters

    train = tokens(5, 24, seed=2)

    def composed():
        return _tiny_composed(num_groups=2, window=4)

    def trained(run_dir, interrupted):
        model = composed()
        calls = 0
        while True:  # max_minutes=0 stops after every step: a resume each time
            out = train_routers(model, train, 6, 1e-2, run_dir, ckpt_every=4,
                                progress=False, max_minutes=0.0 if interrupted else None)
            calls += 1
            if out["finished"]:
                return out, [p.detach().clone() for p in router_parameters(model)], calls

    whole, p_whole, n_whole = trained(tmp_path / "a", False)
    parts, p_parts, n_parts = trained(tmp_path / "b", True)
    assert (n_whole, n_parts) == (1, 6)
    assert whole["finished"] and parts["finished"] and parts["step"] == 6
    assert parts["curve"] == pytest.approx(whole["curve"], rel=1e-5)
    for a, b in zip(p_whole, p_parts):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert whole["curve"][-1] != whole["curve"][0]  # the routers did train
    # more steps continue the same order: 6 steps then 11 equal 11 at once
    extended = train_routers(composed(), train, 11, 1e-2, tmp_path / "a", progress=False)
    model = composed()
    at_once = train_routers(model, train, 11, 1e-2, tmp_path / "c", progress=False)
    assert extended["step"] == at_once["step"] == 11
    assert extended["curve"] == pytest.approx(at_once["curve"], rel=1e-5)



@pytest.mark.slow
def test_train_routers_pair_budget(tmp_path):
    pytest.importorskip("transformers")
    from quest_geometric.testing.hf import tokens

    from quest_geometric.nn.focus import (
        focus_layers,
        router_parameters,
        save_routers,
        straight_through_pair_share,
    )

    train = tokens(5, 24, seed=2)

    def params(m):
        return [p.detach().clone() for p in router_parameters(m)]

    plain = _tiny_composed("straight_through", 2)
    a = train_routers(plain, train, 8, 2e-2, tmp_path / "plain", progress=False)
    # a budget that never binds (share <= 1) trains exactly like no budget
    idle = _tiny_composed("straight_through", 2)
    b = train_routers(idle, train, 8, 2e-2, tmp_path / "idle", progress=False,
                      pair_budget=(1.0, 5.0))
    assert b["curve"] == pytest.approx(a["curve"], rel=1e-6)
    for x, y in zip(params(plain), params(idle)):
        torch.testing.assert_close(x, y)
    assert len(b["share_curve"]) == 8 and "share_curve" not in a

    # share_curve is the mean far share of the layers' hard groups at each step
    fresh = _tiny_composed("straight_through", 2)
    fresh.train()
    seen = []
    hooks = [f.router.register_forward_hook(
        lambda _m, _i, out, f=f: seen.append(straight_through_pair_share(
            out.soft.reshape(-1, 4), out.groups.reshape(-1, 2), f.window)))
        for f in focus_layers(fresh)]
    order = block_order(train.size(0), 8)
    with torch.no_grad():
        fresh(train[order[0]].unsqueeze(0), use_cache=False)
    for h in hooks:
        h.remove()
    assert b["share_curve"][0] == pytest.approx(float(torch.stack(seen).mean()), rel=1e-5)

    # a binding budget lowers the far share against the same training without it
    tight = _tiny_composed("straight_through", 2)
    c = train_routers(tight, train, 8, 2e-2, tmp_path / "tight", progress=False,
                      pair_budget=(0.0, 50.0))
    assert sum(c["share_curve"][-3:]) < sum(b["share_curve"][-3:])

    # resuming with another objective is refused
    with pytest.raises(ValueError, match="was trained with"):
        train_routers(_tiny_composed("straight_through", 2), train, 9, 2e-2,
                      tmp_path / "tight", progress=False)
    with pytest.raises(ValueError, match="pair_budget"):
        train_routers(_tiny_composed("straight_through", 2), train, 1, 2e-2,
                      tmp_path / "bad", progress=False, pair_budget=(1.5, 1.0))

    # init_from: a new run starts from saved routers (0 steps: exactly them)
    save_routers(tight, str(tmp_path / "saved"))
    other = _tiny_composed("straight_through", 2, seed=5)
    assert not all(torch.equal(x, y) for x, y in zip(params(other), params(tight)))
    train_routers(other, train, 0, 2e-2, tmp_path / "init", progress=False,
                  init_from=tmp_path / "saved")
    for x, y in zip(params(other), params(tight)):
        torch.testing.assert_close(x, y)
    # routers saved without sinks start a run composed with sinks: the values are loaded,
    # the model keeps its sinks and window
    from quest_geometric.nn.focus import focus_layers

    sunk = _tiny_composed("straight_through", 2, seed=6, num_sinks=3)
    train_routers(sunk, train, 0, 2e-2, tmp_path / "init_sinks", progress=False,
                  init_from=tmp_path / "saved")
    for x, y in zip(params(sunk), params(tight)):
        torch.testing.assert_close(x, y)
    assert all(f.num_sinks == 3 for f in focus_layers(sunk))



def test_train_routers_gate_bias_is_part_of_the_objective(tmp_path):
    """The additive gate's b changes the loss, so a run resumed with another b is refused; a
    checkpoint from before b was recorded resumes as b = 0.5, the only value then used."""
    pytest.importorskip("transformers")
    from quest_geometric.testing.hf import tokens

    train = tokens(5, 24, seed=2)
    a = train_routers(_tiny_composed(top_k=2), train, 2, 1e-2, tmp_path / "a",
                      progress=False)
    assert a["objective"]["gate_bias"] == [0.5]
    b = train_routers(_tiny_composed(top_k=2, gate_bias=0.125), train, 2, 1e-2,
                      tmp_path / "b", progress=False)
    assert b["objective"]["gate_bias"] == [0.125]
    assert b["curve"][0] != pytest.approx(a["curve"][0], rel=1e-6)  # another loss
    with pytest.raises(ValueError, match="gate_bias"):
        train_routers(_tiny_composed(top_k=2, gate_bias=0.125), train, 3, 1e-2,
                      tmp_path / "a", progress=False)
    resumed = train_routers(_tiny_composed(top_k=2), train, 3, 1e-2, str(tmp_path / "a"),
                            progress=False)
    assert resumed["step"] == 3 and resumed["curve"][:2] == a["curve"]


def test_train_routers_checkpoint_is_digested_locked_and_records_seed_and_data(tmp_path):
    """The checkpoint is safetensors + JSON with a digest of both; a second run with another
    seed or other data on the same folder is refused rather than resuming the first's
    routers; a folder another live process holds is refused; run_dir may be a str."""
    import json
    import os
    import socket

    from safetensors.torch import load_file

    from quest_geometric._utils.lock import FolderInUseError
    from quest_geometric.nn.focus import router_parameters
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training.routers import (
        CHECKPOINT_RECORD,
        CHECKPOINT_TENSORS,
        LOCK_NAME,
        read_router_checkpoint,
    )

    pytest.importorskip("transformers")
    train = tokens(5, 24, seed=2)
    run = str(tmp_path / "run")  # a str, as users pass it
    model = _tiny_composed(top_k=2)
    out = train_routers(model, train, 2, 1e-2, run, seed=3, progress=False)
    assert sorted(os.listdir(run)) == [CHECKPOINT_RECORD, CHECKPOINT_TENSORS]  # lock gone
    record = json.loads((tmp_path / "run" / CHECKPOINT_RECORD).read_text())
    assert record["seed"] == 3 and record["state"]["step"] == 2
    assert record["data"]["shape"] == [5, 24]
    params = load_file(str(tmp_path / "run" / CHECKPOINT_TENSORS))
    for i, p in enumerate(router_parameters(model)):
        assert torch.equal(params[f"param.{i}"], p.detach())
    blob = read_router_checkpoint(run)
    assert blob["state"]["curve"] == out["curve"] and blob["seed"] == 3
    with pytest.raises(ValueError, match="seed=3, not seed=4"):
        train_routers(_tiny_composed(top_k=2), train, 3, 1e-2, run, seed=4, progress=False)
    other = train.clone()
    other[0, 0] = (other[0, 0] + 1) % 50
    with pytest.raises(ValueError, match="trained on other data"):
        train_routers(_tiny_composed(top_k=2), other, 3, 1e-2, run, seed=3, progress=False)
    # a live process holds the folder: refused, nothing written
    lock = tmp_path / "run" / LOCK_NAME
    lock.write_text(f"{os.getppid()} {socket.gethostname()}\n")
    with pytest.raises(FolderInUseError, match="train_routers: the folder .* is in use"):
        train_routers(_tiny_composed(top_k=2), train, 3, 1e-2, run, seed=3, progress=False)
    lock.unlink()
    # an edited record (another step count) fails the digest
    record["state"]["step"] = 1
    (tmp_path / "run" / CHECKPOINT_RECORD).write_text(json.dumps(record))
    with pytest.raises(ValueError, match="refused to load .*SHA-256 digest"):
        train_routers(_tiny_composed(top_k=2), train, 3, 1e-2, run, seed=3, progress=False)



def _plain_and_composed(top_k=1, num_groups=4, window=2):
    """The same tiny random Llama twice: plain (the reference) and with Focus composed."""
    import copy

    from quest_geometric.nn.focus import compose_focus
    from quest_geometric.testing.hf import build_hf

    plain = build_hf("llama", seed=0)
    composed = copy.deepcopy(plain)
    torch.manual_seed(0)
    compose_focus(composed, num_groups=num_groups, top_k=top_k, window=window,
                  backend="blocks", gate="straight_through")
    return plain.eval(), composed.eval()


def _kl_reference(p_logits, q_logits, keep=None):
    """KL(p || q) per position by torch.nn.functional.kl_div, averaged over kept positions."""
    import torch.nn.functional as F

    kl = F.kl_div(torch.log_softmax(q_logits.double(), -1), torch.log_softmax(
        p_logits.double(), -1), log_target=True, reduction="none").sum(-1)
    return kl.mean() if keep is None else (kl * keep).sum() / keep.sum()


def test_distillation_loss_is_the_kl_from_the_original_model():
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training.routers import distillation_loss

    plain, composed = _plain_and_composed(top_k=1)
    x = tokens(2, 24, seed=3)
    with torch.no_grad():
        ref = _kl_reference(plain(x).logits, composed(x).logits)
    got = distillation_loss(composed, x)
    assert not got.requires_grad  # eval mode: the hard pattern, no gradient to the routers
    composed.train()  # the straight-through gate: a gradient reaches the routers
    assert distillation_loss(composed, x).requires_grad
    composed.eval()
    assert float(ref) > 1e-4  # top-1 of 4 with a window of 2 changes the model
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-6)
    # masked positions are left out of the mean
    mask = torch.ones_like(x)
    mask[1, 18:] = 0
    with torch.no_grad():
        ref_m = _kl_reference(plain(x, attention_mask=mask).logits,
                              composed(x, attention_mask=mask).logits, mask.double())
    torch.testing.assert_close(distillation_loss(composed, x, mask).double(), ref_m,
                               rtol=1e-4, atol=1e-6)


def test_distillation_loss_vanishes_when_focus_keeps_every_pair():
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training.routers import distillation_loss

    _, composed = _plain_and_composed(top_k=4, num_groups=4)  # top-K: full attention
    assert float(distillation_loss(composed, tokens(2, 20, seed=5))) < 1e-6


def test_router_loss_lm_is_the_models_own_loss_and_objectives_are_checked():
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training.routers import router_loss

    _, composed = _plain_and_composed()
    x = tokens(1, 16, seed=2)
    torch.testing.assert_close(router_loss(composed, x, "lm"),
                               composed(x, labels=x, use_cache=False).loss)
    with pytest.raises(ValueError, match="router_loss: 'objective' must be one of"):
        router_loss(composed, x, "kl")
    with pytest.raises(TypeError, match="router_loss: 'objective' must be a str"):
        router_loss(composed, x, 1)
    with pytest.raises(ValueError, match="'input_ids' must be a \\[batch, length\\]"):
        router_loss(composed, x[0], "distill")


@pytest.mark.slow
def test_train_routers_distill_trains_only_the_routers_and_records_its_objective(tmp_path):
    from quest_geometric.nn.focus import router_parameters
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training.routers import distillation_loss

    model = _tiny_composed("straight_through", 1)
    train = tokens(4, 24, seed=2)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters()
              if not p.requires_grad}
    before = [p.detach().clone() for p in router_parameters(model)]
    with torch.no_grad():
        start = float(sum(distillation_loss(model, b[None]) for b in train))
    out = train_routers(model, train, 12, 3e-2, tmp_path / "d", progress=False,
                        objective="distill")
    assert out["finished"] and len(out["curve"]) == 12
    assert out["objective"]["loss"] == "distill"
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    assert any(not torch.equal(a, b) for a, b in zip(before, router_parameters(model)))
    with torch.no_grad():
        end = float(sum(distillation_loss(model, b[None]) for b in train))
    assert end < start  # the routers learned to preserve the model on its training blocks
    with pytest.raises(ValueError, match="was trained with"):
        train_routers(model, train, 13, 3e-2, tmp_path / "d", progress=False, objective="lm")


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["lm", "distill"])
def test_router_trainer_with_hugging_face_trains_only_the_routers(tmp_path, objective,
                                                                  hf_trainer):
    TrainingArguments = hf_trainer.TrainingArguments

    from quest_geometric.nn.focus import router_parameters
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training import freeze_all_but_routers, router_trainer

    model = _tiny_composed("straight_through", 1)
    n = freeze_all_but_routers(model)
    assert n == sum(p.numel() for p in router_parameters(model)) > 0
    frozen = {k: p.detach().clone() for k, p in model.named_parameters() if not p.requires_grad}
    before = [p.detach().clone() for p in router_parameters(model)]
    data = [{"input_ids": t, **({"labels": t} if objective == "lm" else {})}
            for t in tokens(4, 16, seed=7)]
    args = TrainingArguments(str(tmp_path / "hf"), max_steps=3, learning_rate=5e-2,
                             per_device_train_batch_size=2, report_to=[], use_cpu=True,
                             save_strategy="no", logging_strategy="no", seed=0,
                             disable_tqdm=True)
    trainer = router_trainer(model, args, train_dataset=data, objective=objective)
    out = trainer.train()
    assert out.global_step == 3 and out.training_loss == out.training_loss  # finite, not NaN
    assert all(torch.equal(p, frozen[k]) for k, p in model.named_parameters() if k in frozen)
    assert any(not torch.equal(a, b) for a, b in zip(before, router_parameters(model)))


@pytest.mark.slow
def test_router_trainer_checkpoints_carry_the_routers(tmp_path, hf_trainer):
    """save_pretrained leaves a composed model's routers out of its weights file, so the
    trainer's checkpoints hold them beside it (save_routers) and resuming loads them."""
    from safetensors import safe_open

    from quest_geometric.nn.focus import router_parameters
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training import router_trainer

    data = [{"input_ids": t, "labels": t} for t in tokens(4, 16, seed=7)]

    def args(out):
        return hf_trainer.TrainingArguments(
            str(out), max_steps=2, learning_rate=5e-2, per_device_train_batch_size=2,
            report_to=[], use_cpu=True, save_strategy="steps", save_steps=2,
            logging_strategy="no", seed=0, disable_tqdm=True)

    model = _tiny_composed("straight_through", 1)
    router_trainer(model, args(tmp_path / "a"), train_dataset=data).train()
    trained = [p.detach().clone() for p in router_parameters(model)]
    ckpt = tmp_path / "a" / "checkpoint-2"
    assert (ckpt / "focus_routers.safetensors").is_file()
    with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
        assert not any("focus" in k for k in f.keys())
    # a fresh composition (other router initialisation) resumed from the checkpoint, with
    # no step left to train, has the trained routers
    fresh = _tiny_composed("straight_through", 1, seed=5)
    assert any(not torch.equal(a, b) for a, b in zip(trained, router_parameters(fresh)))
    router_trainer(fresh, args(tmp_path / "b"), train_dataset=data).train(
        resume_from_checkpoint=str(ckpt))
    assert all(torch.equal(a, b) for a, b in zip(trained, router_parameters(fresh)))


def test_router_trainer_refuses_a_model_without_focus_and_an_unknown_objective():
    from quest_geometric.testing.hf import build_hf
    from quest_geometric.training import freeze_all_but_routers, router_trainer

    with pytest.raises(ValueError, match="freeze_all_but_routers: 'model' must be composed"):
        freeze_all_but_routers(build_hf("llama", seed=0))
    with pytest.raises(TypeError, match="'model' must be a torch.nn.Module"):
        freeze_all_but_routers("model")
    with pytest.raises(ValueError, match="router_trainer: 'objective' must be one of"):
        router_trainer(build_hf("llama", seed=0), None, objective="rl")
