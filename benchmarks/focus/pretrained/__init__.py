r"""Focus composed onto a real pretrained model, SmolLM2-135M (4-bit weights, offline).

Question: does Focus composed onto a frozen pretrained model, training only the routers,
keep its quality, and how many causal pairs does hard top-:math:`k` keep? And does cached
decoding with Focus run faster than full attention at long contexts?

* **Data.** The Python language reference (``pydoc_data.topics``), split by topic into train
  and validation (:func:`~quest_geometric.datasets.pydoc_topic_split`, no topic in both), cut
  into blocks of ``block`` tokens (:func:`~quest_geometric.datasets.token_blocks`); a fixed
  validation set (the first ``val_blocks`` validation blocks).
* **Rows.** Full attention; for each soft gate, Focus composed with :math:`K` groups and a
  window :math:`w`, routers trained only (every original weight frozen, AdamW, one block per
  step), evaluated soft and hard with top-:math:`k` = 1, 2 and :math:`K`.
* **Speed.** Tokens per second of greedy decoding with the KV cache after a prompt of
  1K, 4K and 8K tokens, full attention against Focus hard top-1 and top-2, in alternation.

Training (:func:`~quest_geometric.training.routers.train_routers`) is resumable: each gate's
routers, optimiser, step and loss curve are checkpointed atomically every ``ckpt_every``
steps in ``run_dir``; rerunning the same command continues.

Run ``python -m benchmarks.focus.pretrained`` (``--quick`` for a smoke run, ``--speed`` for
decoding, ``--eval-saved`` to evaluate saved routers again, ``--bounds-only`` for the
decoding bounds of a speed table).

Layout (each name imported from here):

* :mod:`~benchmarks.focus.pretrained.config`: the ``--quick`` and full
  presets;
* :mod:`~benchmarks.focus.pretrained.data`: the token blocks;
* :mod:`~benchmarks.focus.pretrained.routers`: every read and write of
  router weights (:func:`load_router_weights`, the training checkpoint, saved folders);
* :mod:`~quest_geometric.training`: :func:`evaluate_lm`;
* :mod:`~benchmarks.focus.pretrained.evaluate`: :func:`paired_block_delta` (and
  ``evaluate_modes``, the rows of each mode);
* :mod:`~benchmarks.focus.pretrained.summary`: :func:`revisit_drop`;
* :mod:`~benchmarks.focus.pretrained.report`: titles, columns, notes;
* :mod:`~benchmarks.focus.pretrained.plots`: the loss curves;
* :mod:`~benchmarks.focus.pretrained.study`: :func:`run`;
* :mod:`~benchmarks.focus.pretrained.reeval`: :func:`evaluate_saved`;
* :mod:`~benchmarks.focus.pretrained.speed`: :func:`run_speed`;
* :mod:`~benchmarks.focus.pretrained.bounds`: :func:`decode_bounds`,
  :func:`write_decode_bounds`;
* :mod:`~benchmarks.focus.pretrained.cli`: :func:`main`.
"""
from benchmarks.focus.pretrained.bounds import decode_bounds, write_decode_bounds
from benchmarks.focus.pretrained.cli import main
from benchmarks.focus.pretrained.evaluate import paired_block_delta
from quest_geometric.training import evaluate_lm
from benchmarks.focus.pretrained.reeval import evaluate_saved
from benchmarks.focus.pretrained.routers import load_router_weights
from benchmarks.focus.pretrained.speed import run_speed
from benchmarks.focus.pretrained.study import run
from benchmarks.focus.pretrained.summary import revisit_drop

__all__ = ["run", "run_speed", "evaluate_lm", "revisit_drop",
           "load_router_weights", "paired_block_delta", "evaluate_saved",
           "decode_bounds", "write_decode_bounds",
           "main"]
