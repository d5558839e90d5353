"""Probe the query/key geometry of a model while it trains.

A small CharGPT on the embedded corpus (the Python language reference shipped with CPython)
is trained with the project's Trainer; every ``--probe-every`` steps a QKProbe measures, per
layer and head, the participation ratios of the queries and keys (PR_Q, PR_K), the effective
rank of QK^T/sqrt(d) and the normalised attention entropy on a fixed validation batch. The
script prints the trajectory per layer and the final table per head. ``--control shrink`` or
``hold`` applies the key-spectrum control after every optimiser step.

    python examples/probe_qk_geometry.py
    python examples/probe_qk_geometry.py --qk-init tied --control shrink
    python examples/probe_qk_geometry.py --quick          # seconds (CI)

The same ``QKProbe(model)`` works on Hugging Face GPT-2 / GPT-NeoX (Pythia) models.
"""
from __future__ import annotations

import argparse

import torch

from quest_geometric.analysis import KeySpectrumControl
from quest_geometric.analysis.probe import QKProbe
from quest_geometric.datasets import CharCorpus
from quest_geometric.models.char_gpt import CharGPT, GPTConfig
from quest_geometric.training import (Callback, EveryNSteps, LanguageModelTask, TrainConfig,
                                      Trainer)


class SpectrumCallback(Callback):
    """Apply a KeySpectrumControl right after every optimiser step."""

    def __init__(self, control: KeySpectrumControl) -> None:
        self.control = control

    def after_optimizer_step(self, trainer: Trainer, step: int) -> None:
        self.control.step()


def fmt(v) -> str:
    return "   n/a" if v is None else f"{v:6.2f}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="tiny model, a few steps (CI); overrides the sizes and steps below")
    p.add_argument("--steps", type=int, default=300, help="training steps")
    p.add_argument("--probe-every", type=int, default=50,
                   help="measure the query/key geometry every this many steps")
    p.add_argument("--layers", type=int, default=4, help="CharGPT layers")
    p.add_argument("--heads", type=int, default=4, help="attention heads per layer")
    p.add_argument("--width", type=int, default=64, help="embedding width")
    p.add_argument("--block", type=int, default=64, help="context length in characters")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--qk-init", choices=("independent", "tied", "orthogonal"),
                   default="independent",
                   help="initialisation of W_Q and W_K (tied: W_Q = W_K)")
    p.add_argument("--control", choices=("none", "hold", "shrink"), default="none",
                   help="key-spectrum control after every step: hold the initial W_K "
                        "spectrum's shape, shrink it, or none")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.probe_every, args.layers, args.heads = 8, 4, 2, 2
        args.width, args.block, args.batch_size = 32, 32, 8

    torch.manual_seed(args.seed)
    corpus = CharCorpus(block_size=args.block)
    model = CharGPT(GPTConfig(vocab_size=corpus.vocab_size, block_size=args.block,
                              n_layer=args.layers, n_head=args.heads, n_embd=args.width,
                              qk_init=args.qk_init))
    probe_x, _ = corpus.get_batch("val", 16, generator=torch.Generator().manual_seed(1))
    probe = QKProbe(model, enabled=False)  # hooks attached, idle until enabled
    trajectory = []

    def probe_now() -> list[dict]:
        """PR over the probe batch's tokens, ranks and entropy on the same batch."""
        was_training = model.training
        probe.reset()
        probe.enabled = True
        model.eval()
        with torch.no_grad():
            model(probe_x)
        probe.enabled = False
        model.train(was_training)
        return probe.results()

    def measure(trainer: Trainer, step: int) -> None:
        trajectory.append((step, [r for r in probe_now() if r["head"] is None]))

    callbacks: list[Callback] = [EveryNSteps(measure, args.probe_every, at_start=True)]
    if args.control != "none":
        callbacks.append(SpectrumCallback(KeySpectrumControl(model, mode=args.control,
                                                             per_head=True)))

    def get_batch(split, batch_size, generator):
        return corpus.get_batch(split, batch_size, generator=generator)

    cfg = TrainConfig(max_steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                      warmup_steps=min(20, args.steps // 5), eval_every=args.steps,
                      eval_batches=4, progress=False, seed=args.seed)
    print(f"CharGPT {args.layers} layers x {args.heads} heads, width {args.width}, "
          f"qk_init={args.qk_init!r}, control={args.control!r}; {args.steps} steps")
    final = Trainer(model, LanguageModelTask(), cfg, get_batch, get_batch,
                    callbacks=callbacks).fit()
    print(f"validation loss {final['val_loss']:.3f} nats/char ({final['val_bpc']:.3f} bpc)")

    print("\ntrajectory (layer means): step, layer, PR_Q, PR_K, PR_Q - PR_K, "
          "erank(QK^T), entropy")
    for step, layers in trajectory:
        for r in layers:
            print(f"{step:5d}  {r['layer']:<15}{fmt(r['pr_q'])}{fmt(r['pr_k'])}"
                  f"{fmt(r['pr_q_minus_pr_k'])}{fmt(r['qk_effective_rank'])}"
                  f"{fmt(r['attention_entropy'])}")
    # the final table per head, measured on the trained model
    records = probe_now()
    probe.remove()
    print("\nQKProbe table after training (per head; 'mean' = layer value)")
    print(f"{'layer':<15}{'head':>5}{'PR_Q':>7}{'PR_K':>7}{'dPR':>7}{'erank':>7}"
          f"{'srank':>7}{'H_norm':>7}")
    for r in records:
        head = "mean" if r["head"] is None else str(r["head"])
        print(f"{r['layer']:<15}{head:>5} {fmt(r['pr_q'])}{fmt(r['pr_k'])}"
              f"{fmt(r['pr_q_minus_pr_k'])}{fmt(r['qk_effective_rank'])}"
              f"{fmt(r['qk_stable_rank'])}{fmt(r['attention_entropy'])}")
    last = [r for r in records if r["head"] is None]
    share = sum((r["pr_q_minus_pr_k"] or 0.0) > 0 for r in last) / len(last)
    print(f"\nlayers with PR_Q > PR_K at the end: {share:.0%}")


if __name__ == "__main__":
    main()
