"""Issue 53 (5): every public function that takes a file or a folder accepts a ``str`` and an
``os.PathLike`` alike. Each row runs one call with the path as ``str`` and as
:class:`pathlib.Path` and checks the result against an independent reference (the file's
bytes through :mod:`hashlib`, what was written, a round trip).

The routers' files (``save_routers``/``load_routers``, ``train_routers``) have their own
rows in ``tests/nn/focus`` and ``tests/training``."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

KINDS = {"str": str, "PathLike": Path}


def _md5(tmp: Path, as_path) -> None:
    from quest_geometric.datasets import md5sum

    f = tmp / "data.bin"
    f.write_bytes(b"quest" * 1000)
    assert md5sum(as_path(f)) == hashlib.md5(f.read_bytes()).hexdigest()


def _checkpoint(tmp: Path, as_path) -> None:
    from quest_geometric.training.checkpoint import (
        load_checkpoint,
        read_checkpoint,
        save_checkpoint,
    )

    model = torch.nn.Linear(3, 2)
    f = as_path(tmp / "sub" / "checkpoint.pt")
    save_checkpoint(f, {"model": model.state_dict(), "step": 7})
    assert read_checkpoint(f)["step"] == 7
    other = torch.nn.Linear(3, 2)
    load_checkpoint(f, model=other)
    assert torch.equal(other.weight, model.weight)


def _metrics(tmp: Path, as_path) -> None:
    from quest_geometric.training.logging import MetricsLogger, read_metrics, truncate_metrics

    f = as_path(tmp / "runs" / "metrics.jsonl")
    logger = MetricsLogger(f)
    for step in (1, 2, 3):
        logger.log({"kind": "eval", "step": step, "val_loss": 1.0 / step})
    truncate_metrics(f, 2)
    lines = [json.loads(line) for line in Path(f).read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2] and read_metrics(f) == lines


def _plot(tmp: Path, as_path) -> None:
    from quest_geometric._utils.plotting import optional_pyplot
    from quest_geometric.training.logging import plot_curves

    if optional_pyplot() is None:
        pytest.skip("needs matplotlib")
    f = tmp / "metrics.jsonl"
    f.write_text("".join(json.dumps({"kind": "eval", "step": s, "val_loss": 1.0 / s}) + "\n"
                         for s in (1, 2)))
    out = plot_curves(as_path(f), as_path(tmp / "curves.png"), keys=("val_loss",))
    assert Path(out) == tmp / "curves.png" and (tmp / "curves.png").stat().st_size > 0
    plot_curves([as_path(f)], as_path(tmp / "two.png"), keys=("val_loss",))
    assert (tmp / "two.png").is_file()


def _char_corpus(tmp: Path, as_path) -> None:
    from quest_geometric.datasets import CharCorpus

    (tmp / "text.txt").write_text("abcdefgh" * 40)
    corpus = CharCorpus(as_path(tmp / "text.txt"), block_size=4)
    assert "".join(corpus.chars) == "abcdefgh" and corpus.source == os.fspath(tmp / "text.txt")


def _trainer_out_dir(tmp: Path, as_path) -> None:
    from quest_geometric.training.config import TrainConfig
    from quest_geometric.training.tasks import ClassificationTask
    from quest_geometric.training.trainer import Trainer

    torch.manual_seed(0)
    data = [(torch.randn(3), torch.tensor(i % 2)) for i in range(8)]
    cfg = TrainConfig(epochs=1, batch_size=4, lr=0.1, progress=False,
                      out_dir=as_path(tmp / "run"), seed=0)
    trainer = Trainer(torch.nn.Linear(3, 2), ClassificationTask(), cfg, data)
    trainer.fit()
    assert (tmp / "run" / "checkpoint.pt").is_file()
    written = trainer.save_checkpoint(as_path(tmp / "copy.pt"))
    assert os.fspath(written) == str(tmp / "copy.pt") and (tmp / "copy.pt").is_file()


ROWS = {"md5sum": _md5, "save/read/load_checkpoint": _checkpoint,
        "MetricsLogger/read_metrics/truncate_metrics": _metrics, "plot_curves": _plot,
        "CharCorpus": _char_corpus,
        "TrainConfig.out_dir/Trainer.save_checkpoint": _trainer_out_dir}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("row", ROWS)
def test_public_path_arguments_accept_str_and_pathlike(row, kind, tmp_path):
    ROWS[row](tmp_path, KINDS[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_tour_out_and_results_accept_str_and_pathlike(kind, tmp_path, monkeypatch, capsys):
    import quest_geometric.tour as tour

    as_path = KINDS[kind]
    monkeypatch.setattr(tour, "PARTS", {"p": ("Part", lambda ctx: "| a |")})
    report = tour.run_tour(out=as_path(tmp_path / "report"), progress=False,
                           results=as_path(tmp_path))
    assert report == tmp_path / "report" / "report.md" and report.is_file()
