"""The memory options of router training (:mod:`quest_geometric.training.routers`): the loss
over chunks of positions and the checkpointed decoder layers give the plain loss and the
plain router gradients, on a tiny random Llama with Focus composed."""
from __future__ import annotations

import pytest
import torch

from quest_geometric.testing.focus import tiny_composed_llama as _tiny_composed


def _loss_and_grads(model, x, objective, mask=None, chunk=None, checkpointed=False):
    from quest_geometric.nn.focus import router_parameters
    from quest_geometric.training.routers import decoder_checkpointing, router_loss

    params = list(router_parameters(model))
    for p in params:
        p.grad = None
    with decoder_checkpointing(model, checkpointed):
        loss = router_loss(model, x, objective, attention_mask=mask, loss_chunk=chunk)
        loss.backward()
    return loss.detach(), [p.grad.clone() for p in params]


def _router_calls(model):
    """A counter of the calls of every Focus layer's router (and the hooks to remove)."""
    from quest_geometric.nn.focus import focus_layers

    calls = [0]
    hooks = [f.router.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
             for f in focus_layers(model)]
    return calls, hooks


@pytest.mark.parametrize("objective", ["lm", "distill"])
@pytest.mark.parametrize("masked", [False, True])
def test_chunked_loss_and_router_gradients_equal_the_plain_ones(objective, masked):
    from quest_geometric.testing.hf import tokens

    model = _tiny_composed("straight_through", 1).train()
    x = tokens(2, 24, seed=3)
    mask = None
    if masked:
        mask = torch.ones_like(x)
        mask[1, 17:] = 0
    plain, plain_grads = _loss_and_grads(model, x, objective, mask)
    assert float(plain) > 0 and all(float(g.abs().max()) > 0 for g in plain_grads)
    # chunks that do not divide the 24 positions, one position each, and one over them all
    for chunk in (5, 7, 1, 100):
        loss, grads = _loss_and_grads(model, x, objective, mask, chunk=chunk)
        torch.testing.assert_close(loss, plain)
        for g, ref in zip(grads, plain_grads):
            torch.testing.assert_close(g, ref)


def test_chunked_lm_loss_is_hugging_faces_with_its_divisor():
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training.routers import chunked_lm_loss

    model = _tiny_composed("straight_through", 1).train()
    x = tokens(2, 20, seed=4)
    labels = x.clone()
    labels[0, :6] = -100  # left out, as Hugging Face leaves them out
    ref = model(x, labels=labels, use_cache=False).loss
    torch.testing.assert_close(chunked_lm_loss(model, x, labels, 6), ref)
    # Trainer's divisor (the predicted tokens of the whole accumulated batch)
    ref_n = model(x, labels=labels, use_cache=False, num_items_in_batch=50).loss
    torch.testing.assert_close(chunked_lm_loss(model, x, labels, 6, num_items=50), ref_n)
    with pytest.raises(ValueError, match="chunked_lm_loss: 'labels' must be a tensor of the "
                                         "shape of 'input_ids'"):
        chunked_lm_loss(model, x, labels[:, 1:], 6)


@pytest.mark.parametrize("objective", ["lm", "distill"])
def test_decoder_checkpointing_recomputes_the_layers_with_the_plain_gradients(objective):
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training.routers import distillation_loss

    model = _tiny_composed("straight_through", 1).train()
    x = tokens(2, 24, seed=3)
    calls, hooks = _router_calls(model)
    plain, plain_grads = _loss_and_grads(model, x, objective)
    once = calls[0]
    calls[0] = 0
    loss, grads = _loss_and_grads(model, x, objective, checkpointed=True)
    # each layer's forward ran again in the backward: its router was called twice
    assert once == 2 and calls[0] == 2 * once
    calls[0] = 0
    both, both_grads = _loss_and_grads(model, x, objective, chunk=5, checkpointed=True)
    assert calls[0] == 2 * once
    for h in hooks:
        h.remove()
    torch.testing.assert_close(loss, plain)
    torch.testing.assert_close(both, plain)
    for g, g2, ref in zip(grads, both_grads, plain_grads):
        assert float(ref.abs().max()) > 0
        torch.testing.assert_close(g, ref)
        torch.testing.assert_close(g2, ref)
    # the model is left as it was: no layer checkpointing, no hook making the embeddings'
    # output need a gradient (an evaluation builds no graph)
    assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    assert not distillation_loss(model.eval(), x).requires_grad


@pytest.mark.slow
def test_train_routers_with_the_memory_options_trains_as_the_plain_run(tmp_path):
    """Three distillation steps with the pair budget: the same curves and routers with
    checkpointed layers and a chunked loss; the options are recorded, and a run may be
    resumed with other ones."""
    from quest_geometric.nn.focus import router_parameters
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training.routers import read_router_checkpoint, train_routers

    train = tokens(3, 24, seed=2)
    kw = dict(progress=False, objective="distill", pair_budget=(0.2, 1.0))
    plain_model = _tiny_composed("straight_through", 1)
    plain = train_routers(plain_model, train, 3, 3e-2, tmp_path / "plain", **kw)
    model = _tiny_composed("straight_through", 1)
    calls, hooks = _router_calls(model)
    out = train_routers(model, train, 3, 3e-2, tmp_path / "mem", gradient_checkpointing=True,
                        loss_chunk=5, **kw)
    for h in hooks:
        h.remove()
    assert calls[0] == 3 * 2 * 2  # 3 steps, 2 layers, each recomputed in the backward
    assert plain["memory"] == {"gradient_checkpointing": False, "loss_chunk": None}
    assert out["memory"] == {"gradient_checkpointing": True, "loss_chunk": 5}
    assert read_router_checkpoint(tmp_path / "mem")["state"]["memory"] == out["memory"]
    assert len(out["curve"]) == len(out["share_curve"]) == 3
    torch.testing.assert_close(out["curve"], plain["curve"])
    torch.testing.assert_close(out["share_curve"], plain["share_curve"])
    for p, ref in zip(router_parameters(model), router_parameters(plain_model)):
        torch.testing.assert_close(p, ref)
    assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    # the options leave the objective as it is: resuming with others continues the run
    more = train_routers(model, train, 4, 3e-2, tmp_path / "mem", **kw)
    assert more["step"] == 4 and more["memory"]["gradient_checkpointing"] is False


def test_bad_memory_options_are_refused():
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training import router_trainer
    from quest_geometric.training.routers import distillation_loss, router_loss, train_routers

    model = _tiny_composed("straight_through", 1)
    train = tokens(2, 12, seed=1)
    with pytest.raises(TypeError, match="train_routers: 'gradient_checkpointing' must be a "
                                        "bool, got"):
        train_routers(model, train, 1, 1e-2, "unused", gradient_checkpointing="yes")
    with pytest.raises(ValueError, match="train_routers: 'loss_chunk' must be an int >= 1, "
                                         "got 0"):
        train_routers(model, train, 1, 1e-2, "unused", loss_chunk=0)
    with pytest.raises(TypeError, match="train_routers: 'loss_chunk' must be an int >= 1"):
        train_routers(model, train, 1, 1e-2, "unused", loss_chunk=2.5)
    with pytest.raises(ValueError, match="router_loss: 'loss_chunk' must be an int >= 1"):
        router_loss(model, train, "lm", loss_chunk=-3)
    with pytest.raises(ValueError, match="router_trainer: 'loss_chunk' must be an int >= 1"):
        router_trainer(model, None, loss_chunk=0)
    # a model whose logits are more than the output embedding of the last hidden states
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="distillation_loss: 'loss_chunk' must be None for "
                                         "this model.*final_logit_softcapping"):
        distillation_loss(model, train, loss_chunk=4)
    with pytest.raises(ValueError, match="train_routers: 'loss_chunk' must be None"):
        train_routers(model, train, 1, 1e-2, "unused", loss_chunk=4)
    model.config.final_logit_softcapping = None
    # a model without Hugging Face gradient checkpointing
    model.supports_gradient_checkpointing = False
    with pytest.raises(ValueError, match="train_routers: 'gradient_checkpointing' must be "
                                         "False for a model without Hugging Face gradient "
                                         "checkpointing"):
        train_routers(model, train, 1, 1e-2, "unused", gradient_checkpointing=True)


@pytest.mark.slow
def test_router_trainer_checkpointed_and_chunked_takes_the_plain_step(tmp_path, hf_trainer):
    """One SGD step of Hugging Face's Trainer (the update is -lr times the gradient): the
    same routers with Trainer's checkpointing (made non-reentrant where left open) and a
    chunked loss, and the layers really recomputed."""
    TrainingArguments = hf_trainer.TrainingArguments

    from quest_geometric.nn.focus import router_parameters
    from quest_geometric.testing.hf import tokens
    from quest_geometric.training import router_trainer

    def args(out, **kw):
        return TrainingArguments(str(tmp_path / out), max_steps=1, learning_rate=50.0,
                                 optim="sgd", per_device_train_batch_size=2, report_to=[],
                                 use_cpu=True, save_strategy="no", logging_strategy="no",
                                 seed=0, disable_tqdm=True, lr_scheduler_type="constant",
                                 **kw)

    # the switch's name: 'activation_checkpointing', 'gradient_checkpointing' before it
    on = ("activation_checkpointing" if "activation_checkpointing"
          in TrainingArguments.__dataclass_fields__ else "gradient_checkpointing")
    for objective in ("lm", "distill"):
        data = [{"input_ids": t, "labels": t} for t in tokens(2, 16, seed=7)]
        plain = _tiny_composed("straight_through", 1)
        before = [p.detach().clone() for p in router_parameters(plain)]
        calls, hooks = _router_calls(plain)
        router_trainer(plain, args("plain"), train_dataset=data, objective=objective).train()
        once = calls[0]
        for h in hooks:
            h.remove()
        model = _tiny_composed("straight_through", 1)
        ck = args("ck", **{on: True})
        calls, hooks = _router_calls(model)
        router_trainer(model, ck, train_dataset=data, objective=objective,
                       loss_chunk=5).train()
        for h in hooks:
            h.remove()
        assert calls[0] == 2 * once > 0  # every layer recomputed in the backward
        assert getattr(ck, f"{on}_kwargs") == {"use_reentrant": False}
        moved = False
        for p, ref, p0 in zip(router_parameters(model), router_parameters(plain), before):
            torch.testing.assert_close(p, ref)
            moved = moved or not torch.equal(ref, p0)
        assert moved
