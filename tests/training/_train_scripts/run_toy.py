"""Run a short toy training (used by the resume and DDP tests in subprocesses).

    python run_toy.py --mode epoch|step|epoch,step --out DIR [--kill-at-step K] [--resume] [--result
    F]
    python run_toy.py ... --ref-out DIR2 --ref-result F2   # first an uninterrupted run

Works unchanged under ``torchrun``; rank 0 writes ``--result``; every rank writes
``--result``.rank{r} with its final weights and the first training batch it drew.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qg_train_toy import MLP, GetBatch, TinyLM, classification_data, corpus  # noqa: E402

from quest_geometric.training.config import TrainConfig  # noqa: E402
from quest_geometric.training.distributed import get_dist_info  # noqa: E402
from quest_geometric.training.seed import seed_everything  # noqa: E402
from quest_geometric.training.tasks import ClassificationTask, LanguageModelTask  # noqa: E402
from quest_geometric.training.trainer import Callback, Trainer  # noqa: E402


class Kill(Callback):
    """SIGKILL this process (no clean-up at all) after optimiser step ``at``."""

    def __init__(self, at: int):
        self.at = at

    def on_step_end(self, trainer, step, metrics):
        if step == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def run(args, out, result, kill_at=None, resume=False):
    seed_everything(args.seed)
    if args.mode == "epoch":
        model = MLP(dropout=args.dropout)
        task, train, val = ClassificationTask(), classification_data(64), classification_data(32,
                                                                                              seed=1)
        cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=0.05, warmup_steps=2,
                          optimizer="sgd", momentum=0.9, seed=args.seed, out_dir=out,
                          progress=False, log_every=3)
    else:
        model = TinyLM(dropout=args.dropout)
        task, gb = LanguageModelTask(), GetBatch(corpus())
        train = val = gb
        cfg = TrainConfig(max_steps=args.max_steps, batch_size=args.batch_size, lr=0.02,
                          warmup_steps=2, seed=args.seed, out_dir=out, progress=False,
                          log_every=3, eval_every=4, checkpoint_every=4, eval_batches=2)
    seen = []

    class Record(Callback):
        def on_fit_start(self, trainer):
            if args.mode == "step" and trainer.step == 0:
                g = torch.Generator()
                g.set_state(trainer.generator.get_state())
                seen.append(train("train", trainer.local_batch_size, g)[0])

    callbacks = [Record()] + ([Kill(kill_at)] if kill_at else [])
    trainer = Trainer(model, task, cfg, train, val, callbacks=callbacks)
    final = trainer.fit(resume="auto" if resume else False)
    info = get_dist_info()
    state = {k: v.clone() for k, v in trainer.raw_model.state_dict().items()}
    if result:
        if info.is_main:
            torch.save({"final": final, "state": state, "history": trainer.history}, result)
        torch.save({"state": state, "first_batch": seen[0] if seen else None},
                   f"{result}.rank{info.rank}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="epoch",
                   help="epoch, step, or epoch,step (one after the other)")
    p.add_argument("--out", required=True)
    p.add_argument("--result", default=None)
    p.add_argument("--ref-out", default=None)
    p.add_argument("--ref-result", default=None)
    p.add_argument("--kill-at-step", type=int, default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    modes = args.mode.split(",")
    for mode in modes:
        args.mode = mode

        def sub(p):
            return p and (os.path.join(p, mode) if len(modes) > 1 else p)

        def res(p):
            return p and (f"{p}.{mode}" if len(modes) > 1 else p)

        if args.ref_out:
            run(args, sub(args.ref_out), res(args.ref_result))
        run(args, sub(args.out), res(args.result), kill_at=args.kill_at_step, resume=args.resume)
    from quest_geometric.training.distributed import cleanup_distributed

    cleanup_distributed()


if __name__ == "__main__":
    main()
