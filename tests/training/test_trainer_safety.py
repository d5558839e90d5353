"""A Trainer's output folder: one run at a time, no leftovers, checkpoints read as data only."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_train_scripts"))
from qg_train_toy import MLP, classification_data

from quest_geometric.training import CheckpointError, FolderInUseError
from quest_geometric.training.config import TrainConfig
from quest_geometric.training.logging import read_metrics
from quest_geometric.training.tasks import ClassificationTask
from quest_geometric.training.trainer import LOCK_NAME, Callback, Trainer


def _trainer(out_dir, callbacks=(), epochs=2) -> Trainer:
    cfg = TrainConfig(epochs=epochs, batch_size=16, lr=0.05, progress=False, log_every=2,
                      out_dir=str(out_dir), seed=0)
    data = classification_data(32)
    torch.manual_seed(0)  # the same initial weights every time
    return Trainer(MLP(), ClassificationTask(), cfg, data, data, callbacks=list(callbacks))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


class _SecondRun(Callback):
    """Starts a second run on the same folder in the middle of the first."""

    def __init__(self, out_dir) -> None:
        self.out_dir, self.error = out_dir, None

    def on_epoch_end(self, trainer, epoch, metrics) -> None:
        if epoch == 1:  # (fork_rng: building it must not disturb the first run's stream)
            with torch.random.fork_rng(), pytest.raises(FolderInUseError) as info:
                _trainer(self.out_dir).fit()
            self.error = str(info.value)


def test_second_run_on_the_same_folder_is_refused(tmp_path) -> None:
    second = _SecondRun(tmp_path)
    alone = _trainer(tmp_path / "alone").fit()
    final = _trainer(tmp_path, [second]).fit()
    lock = os.path.join(str(tmp_path), LOCK_NAME)
    assert second.error is not None and repr(lock) in second.error
    assert f"process {os.getpid()}" in second.error
    # the first run's records only, in order, and the same result as a run alone
    records = read_metrics(tmp_path / "metrics.jsonl", kind="epoch")
    assert [r["epoch"] for r in records] == [1, 2]
    assert final["val_loss"] == alone["val_loss"]
    assert not os.path.exists(lock)  # released on return
    _trainer(tmp_path).fit(overwrite=True)  # the folder is free again


def test_fresh_start_over_a_finished_run_is_refused_unless_told(tmp_path) -> None:
    """Issue 53: fit() on a finished run's folder used to retrain it from step 0 without a
    word; now it refuses and leaves the run as it was; resume='auto' returns the run's final
    record, overwrite=True starts over."""
    first = _trainer(tmp_path).fit()
    files = {n: (tmp_path / n).read_bytes() for n in ("checkpoint.pt", "metrics.jsonl")}
    with pytest.raises(FileExistsError, match=r"Trainer.fit: out_dir .* holds a previous "
                                              r"run's checkpoint.*overwrite=True"):
        _trainer(tmp_path).fit()
    assert {n: (tmp_path / n).read_bytes() for n in files} == files
    assert not (tmp_path / LOCK_NAME).exists()
    assert _trainer(tmp_path).fit(resume="auto") == first  # nothing more to train
    again = _trainer(tmp_path).fit(overwrite=True)  # the same seed: the same run again
    assert again["val_loss"] == first["val_loss"] and again["step"] == first["step"]
    assert [r["epoch"] for r in read_metrics(tmp_path / "metrics.jsonl", kind="epoch")] == [1, 2]
    with pytest.raises(TypeError, match="Trainer.fit.*overwrite"):
        _trainer(tmp_path).fit(overwrite="yes")


class _Boom(Callback):
    def on_epoch_end(self, trainer, epoch, metrics) -> None:
        raise RuntimeError("boom")


def test_lock_is_released_when_fit_raises(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        _trainer(tmp_path, [_Boom()]).fit()
    assert not os.path.exists(tmp_path / LOCK_NAME)
    _trainer(tmp_path).fit()


def test_stale_lock_is_taken_over_and_live_ones_refused(tmp_path) -> None:
    lock = tmp_path / LOCK_NAME
    lock.write_text(f"{_dead_pid()} {socket.gethostname()}\n")  # a killed run's lock
    _trainer(tmp_path).fit()
    assert not lock.exists()
    written = (tmp_path / "metrics.jsonl").read_text()
    for content in (f"{os.getpid()} {socket.gethostname()}\n",  # a live process
                    f"{_dead_pid()} some-other-host\n",  # cannot tell: refused
                    ""):  # unreadable
        lock.write_text(content)
        with pytest.raises(FolderInUseError, match=re.escape(repr(str(lock)))):
            _trainer(tmp_path).fit()
        assert lock.read_text() == content  # somebody else's lock is left alone
    assert (tmp_path / "metrics.jsonl").read_text() == written  # refused before writing


def test_own_stale_temporaries_are_removed_on_start(tmp_path) -> None:
    own = [".checkpoint.pt.abcd_123.tmp", ".metrics.jsonl.z9z9z9z9.tmp"]
    others = [".checkpoint.pt.abc.tmp", ".checkpoint.pt.abcd_123.tmp.keep",
              "x.checkpoint.pt.abcd1234.tmp",
              ".other.pt.abcd1234.tmp", ".checkpoint.pt.ABCD1234.tmp", "notes.txt"]
    for name in own + others:
        (tmp_path / name).write_bytes(b"x" * 10)
    (tmp_path / ".checkpoint.pt.dir12345.tmp").mkdir()  # not a file: not ours
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / ".checkpoint.pt.abcd1234.tmp").write_bytes(b"x")  # another folder
    _trainer(tmp_path, epochs=1).fit()
    left = set(os.listdir(tmp_path))
    assert not left & set(own)
    assert set(others) | {".checkpoint.pt.dir12345.tmp", "sub"} <= left
    assert (sub / ".checkpoint.pt.abcd1234.tmp").exists()


@pytest.mark.slow
def test_temporary_of_a_killed_write_is_removed(tmp_path) -> None:
    # A checkpoint write killed mid-way (SIGKILL: no cleanup runs) leaves its temporary.
    code = ("import os, sys, torch\n"
            "from quest_geometric._utils.io import atomic_torch_save\n"
            "class Kill:\n"
            "    def __reduce__(self):\n"
            "        os.kill(os.getpid(), 9)\n"
            "atomic_torch_save({'w': torch.zeros(1000), 'k': Kill()}, sys.argv[1])\n")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "checkpoint.pt")],
                          env=env, timeout=120, check=False)
    assert proc.returncode == -9
    stale = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert len(stale) == 1 and stale[0].startswith(".checkpoint.pt.")
    _trainer(tmp_path, epochs=1).fit()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def test_crafted_resume_checkpoint_never_runs(tmp_path) -> None:
    marker = tmp_path / "marker"
    crafted = tmp_path / "checkpoint.pt"
    torch.save({"format": "quest_geometric.training.checkpoint", "version": 1,
                "payload": {"model": _Payload(str(marker))}}, crafted)
    with pytest.raises(CheckpointError, match=re.escape(repr(str(crafted))) + ".*refused"):
        _trainer(tmp_path).fit(resume="auto")
    assert not marker.exists()
    assert not (tmp_path / LOCK_NAME).exists()
