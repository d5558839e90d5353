"""Compose Focus sparse attention onto a Hugging Face GPT-2 and train only the routers.

The paper's "composable" setting: every pretrained weight is frozen and one small router per
layer (W_g and K centroids) is trained with the ordinary language-model loss. Then the model
is evaluated with Focus off (exactly the original), soft (training-mode gates, all pairs)
and hard (top-k groups plus the local window) at several top-k.

Without ``--pretrained`` a small GPT-2 is built from a ``GPT2Config`` (random weights, no
download), over the characters of the embedded corpus, and first trained for a few steps
with full attention so that it has something to lose. With ``--pretrained PATH`` a local
Hugging Face checkpoint directory (``save_pretrained`` output, with its tokenizer) is loaded
instead and the corpus is tokenised with its tokenizer.

    python examples/compose_focus_gpt2.py
    python examples/compose_focus_gpt2.py --pretrained ~/models/gpt2 --block 512 --window 64
    python examples/compose_focus_gpt2.py --quick                 # seconds (CI)

Needs ``transformers`` (``pip install -e ".[hf]"``).
"""
from __future__ import annotations

import argparse
import math
import time

import torch

from quest_geometric.datasets import load_python_reference
from quest_geometric.nn import (compose_focus, focus_disabled, focus_layers, router_parameters,
                                set_focus_options)


def build_model(args):
    import transformers

    if args.pretrained:
        model = transformers.GPT2LMHeadModel.from_pretrained(args.pretrained)
        tok = transformers.AutoTokenizer.from_pretrained(args.pretrained)
        text = load_python_reference()[: args.chars]
        ids = torch.tensor(tok(text)["input_ids"], dtype=torch.long)
        return model, ids, False
    from quest_geometric.datasets import CharCorpus

    corpus = CharCorpus(block_size=args.block)
    ids = torch.cat([corpus.splits["train"], corpus.splits["val"]]).long()[: args.chars]
    cfg = transformers.GPT2Config(vocab_size=corpus.vocab_size, n_positions=args.block,
                                  n_embd=args.width, n_layer=args.layers, n_head=args.heads,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  bos_token_id=None, eos_token_id=None, loss_type="ForCausalLM")
    return transformers.GPT2LMHeadModel(cfg), ids, True


def batches(ids: torch.Tensor, block: int, batch: int, gen: torch.Generator):
    starts = torch.randint(0, ids.numel() - block - 1, (batch,), generator=gen)
    x = torch.stack([ids[s:s + block] for s in starts.tolist()])
    return x


@torch.no_grad()
def evaluate(model, val: torch.Tensor) -> float:
    model.eval()
    return float(model(input_ids=val, labels=val).loss)


def train(model, params, ids, args, steps: int, seed: int) -> float:
    opt = torch.optim.AdamW(params, lr=args.lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    loss = float("nan")
    for step in range(1, steps + 1):
        x = batches(ids, args.block, args.batch_size, gen)
        out = model(input_ids=x, labels=x)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        loss = out.loss.item()
        if step % max(1, steps // 4) == 0:
            print(f"  step {step}/{steps}: loss {loss:.3f}")
    return loss


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="tiny model, a few steps (CI); overrides the sizes and steps below")
    p.add_argument("--pretrained", default=None,
                   help="a local Hugging Face GPT-2 directory (with its tokenizer); "
                        "default: a small GPT-2 built from a config and trained here first")
    p.add_argument("--block", type=int, default=256, help="sequence length in tokens")
    p.add_argument("--window", type=int, default=32,
                   help="Focus local window w: pairs at most w tokens apart are always kept")
    p.add_argument("--groups", type=int, default=4, help="Focus groups K (centroids per layer)")
    p.add_argument("--top-k", type=int, default=2, help="groups each token joins")
    p.add_argument("--layers", type=int, default=4,
                   help="layers of the GPT-2 built from a config")
    p.add_argument("--heads", type=int, default=4,
                   help="attention heads of the GPT-2 built from a config")
    p.add_argument("--width", type=int, default=128,
                   help="embedding width of the GPT-2 built from a config")
    p.add_argument("--base-steps", type=int, default=300,
                   help="full-attention steps for a model built from a config")
    p.add_argument("--router-steps", type=int, default=150,
                   help="training steps of the composed routers (the model stays frozen)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per step")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--chars", type=int, default=200_000, help="characters of corpus used")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    args = p.parse_args(argv)
    if args.quick:
        args.block, args.window, args.layers, args.heads, args.width = 64, 8, 2, 2, 32
        args.base_steps, args.router_steps, args.batch_size, args.chars = 10, 6, 4, 20_000
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise SystemExit("this example needs transformers: pip install -e '.[hf]'")
    torch.manual_seed(args.seed)

    model, ids, from_config = build_model(args)
    n_train = int(0.9 * ids.numel())
    train_ids, val_ids = ids[:n_train], ids[n_train:]
    val = batches(val_ids, args.block, 2 * args.batch_size, torch.Generator().manual_seed(123))
    print(f"GPT-2 ({'from a config' if from_config else args.pretrained}): "
          f"{sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{model.config.n_layer} layers; {ids.numel():,} tokens")
    if from_config:
        print(f"training the base model with full attention for {args.base_steps} steps")
        train(model, list(model.parameters()), train_ids, args, args.base_steps, args.seed)
    base = evaluate(model, val)

    compose_focus(model, num_groups=args.groups, top_k=args.top_k, window=args.window)
    params = list(router_parameters(model))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == sum(p.numel() for p in params)
    print(f"composed Focus (K={args.groups}, top-k={args.top_k}, w={args.window}): "
          f"{trainable:,} trainable router parameters, everything else frozen")
    with focus_disabled(model):
        off = evaluate(model, val)
    print(f"Focus off equals the original model: {abs(off - base) < 1e-6}")
    hard_before = evaluate(model, val)
    t0 = time.perf_counter()
    print(f"training the routers only for {args.router_steps} steps (soft gates)")
    train(model, params, train_ids, args, args.router_steps, args.seed + 1)
    dt = time.perf_counter() - t0

    rows = [("full attention (original)", "-", base)]
    for layer in focus_layers(model):
        layer.train()  # FocusAttention uses the soft gates in training mode
    with torch.no_grad():
        soft = float(model(input_ids=val, labels=val).loss)
    rows.append(("Focus soft (gated, all pairs)", "-", soft))
    for k in sorted({1, args.top_k, args.groups}):
        set_focus_options(model, top_k=k)
        rows.append((f"Focus hard, top-{k} of {args.groups}", k, evaluate(model, val)))
    set_focus_options(model, top_k=args.top_k)
    print(f"\nvalidation loss (nats/token) on {val.shape[0]} x {args.block} tokens; "
          f"routers trained {dt:.1f} s; hard top-{args.top_k} before router training: "
          f"{hard_before:.3f}")
    print(f"{'model':<32}{'loss':>8}{'rel. to full':>14}")
    for name, _, loss in rows:
        print(f"{name:<32}{loss:>8.3f}{loss / base - 1:>+13.1%}")
    print(f"(perplexity of the original: {math.exp(base):.2f})")


if __name__ == "__main__":
    main()
