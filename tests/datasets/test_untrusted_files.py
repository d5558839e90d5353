"""Files under a dataset root may come from someone else: they are read as data only.

Each crafted file would write a marker file if any of its content were executed; the marker
must never appear, and the error must name the file and say it was refused.
"""
from __future__ import annotations

import os
import pickle
import pickletools
import re
import sys

import numpy as np
import pytest
import torch

import quest_geometric.datasets.images as images_mod
from quest_geometric.datasets.images import CIFAR10Graphs


class _Payload:
    """Unpickling this runs ``exec``, which writes ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def _write_cifar10(folder: str, n: int = 2) -> None:
    """A tiny CIFAR-10 in the python-batch format (numpy arrays pickled with protocol 2)."""
    rng = np.random.default_rng(0)
    os.makedirs(folder, exist_ok=True)
    names = [f"data_batch_{b}" for b in range(1, 6)] + ["test_batch"]
    for fname in names:
        batch = {b"labels": rng.integers(0, 10, size=n).tolist(),
                 b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
                 b"batch_label": b"x", b"filenames": [b"x.png"] * n}
        with open(os.path.join(folder, fname), "wb") as f:
            pickle.dump(batch, f, protocol=2)
    with open(os.path.join(folder, "batches.meta"), "wb") as f:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)]}, f, protocol=2)


@pytest.fixture
def root(tmp_path):
    _write_cifar10(str(tmp_path / "raw" / "cifar-10-batches-py"))
    return tmp_path


def _refused(path) -> str:
    return "refused to load " + re.escape(repr(str(path)))


def test_processed_pre_transform_file_never_runs(root) -> None:
    CIFAR10Graphs(str(root), graph=None, log=False)  # writes root/processed
    marker = root / "marker"
    for fname in ("pre_transform.pt", "pre_filter.pt"):
        crafted = root / "processed" / fname
        torch.save(_Payload(str(marker)), crafted)
        with pytest.raises(ValueError, match=_refused(crafted)):
            CIFAR10Graphs(str(root), graph=None, log=False)
        assert not marker.exists()
        os.unlink(crafted)
    # a data-only record of "no pre-processing" (what older versions wrote) is accepted
    torch.save("None", root / "processed" / "pre_transform.pt")
    assert len(CIFAR10Graphs(str(root), graph=None, log=False)) == 10
    # one that records a pre-processing step is refused rather than silently ignored
    torch.save("SomeTransform()", root / "processed" / "pre_transform.pt")
    with pytest.raises(ValueError, match="pre-processing step"):
        CIFAR10Graphs(str(root), graph=None, log=False)
    # force_reload processes the raw data again and ignores the processed folder
    assert len(CIFAR10Graphs(str(root), graph=None, log=False, force_reload=True)) == 10


@pytest.mark.parametrize("split", ["train.pt", "test.pt"])
def test_processed_split_file_never_runs(root, split) -> None:
    CIFAR10Graphs(str(root), graph=None, log=False)
    marker = root / "marker"
    crafted = root / "processed" / split
    torch.save({"images": _Payload(str(marker))}, crafted)
    with pytest.raises(ValueError, match=_refused(crafted)):
        CIFAR10Graphs(str(root), train=split == "train.pt", graph=None, log=False)
    assert not marker.exists()
    # data only but not a processed split: refused too, not a KeyError deep inside
    torch.save({"images": torch.zeros(3)}, crafted)
    with pytest.raises(ValueError, match=_refused(crafted) + ".*not a processed CIFAR-10"):
        CIFAR10Graphs(str(root), train=split == "train.pt", graph=None, log=False)


def test_batch_with_reduce_payload_never_runs(root) -> None:
    marker = root / "marker"
    batch = root / "raw" / "cifar-10-batches-py" / "data_batch_2"
    with open(batch, "wb") as f:
        pickle.dump({b"data": _Payload(str(marker)), b"labels": [0]}, f, protocol=2)
    with pytest.raises(ValueError, match=_refused(batch) + ".*exec' is not allowed"):
        CIFAR10Graphs(str(root), log=False)
    assert not marker.exists()


def test_batch_importing_a_numpy_submodule_never_runs(root, tmp_path, monkeypatch) -> None:
    # A module reachable as numpy.<name> whose import writes the marker and exits with
    # status 0: before the exact allow-list, any numpy.* global was imported.
    marker = root / "marker"
    extra = tmp_path / "extra_numpy_path"
    extra.mkdir()
    (extra / "qg_payload.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nimport sys\nsys.exit(0)\n")
    monkeypatch.setattr(np, "__path__", [*np.__path__, str(extra)])
    monkeypatch.delitem(sys.modules, "numpy.qg_payload", raising=False)
    batch = root / "raw" / "cifar-10-batches-py" / "batches.meta"
    for name in (b"ndarray", b"_reconstruct", b"dtype"):
        batch.write_bytes(b"\x80\x02cnumpy.qg_payload\n" + name + b"\n.")
        with pytest.raises(ValueError, match=_refused(batch)):
            CIFAR10Graphs(str(root), log=False)
        assert not marker.exists()
    assert "numpy.qg_payload" not in sys.modules


def test_base_exception_while_reading_is_an_error(root, monkeypatch) -> None:
    # Whatever a crafted file triggers while being read, even SystemExit(0) or
    # KeyboardInterrupt, it ends as an error naming the file, never as a clean exit.
    batch = root / "raw" / "cifar-10-batches-py" / "data_batch_1"
    for exc in (SystemExit(0), KeyboardInterrupt()):
        def boom(exc=exc):
            raise exc

        allowed = dict(images_mod._RestrictedUnpickler._ALLOWED)
        allowed[("numpy", "ndarray")] = boom
        monkeypatch.setattr(images_mod._RestrictedUnpickler, "_ALLOWED", allowed)
        with pytest.raises(ValueError, match=_refused(batch) + f".*{type(exc).__name__}"):
            CIFAR10Graphs(str(root), log=False)


def _globals(data: bytes) -> set[tuple[str, str]]:
    return {tuple(arg.split(" ", 1)) for op, arg, _ in pickletools.genops(data)
            if op.name == "GLOBAL"}


def test_allow_list_is_exactly_numpys_array_pickling() -> None:
    # The globals of a real-format batch: a protocol-2 pickle of arrays, lists and bytes,
    # written by numpy 2 under Python 3 (numpy._core, _codecs.encode for bytes) and by
    # numpy 1.x under Python 2, as the official files were (numpy.core, no _codecs).
    batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 2], b"names": [b"a"]}
    written = _globals(pickle.dumps(batch, protocol=2))
    assert written == {("numpy._core.multiarray", "_reconstruct"), ("numpy", "ndarray"),
                       ("numpy", "dtype"), ("_codecs", "encode")}
    official = (written - {("_codecs", "encode"), ("numpy._core.multiarray", "_reconstruct")}
                | {("numpy.core.multiarray", "_reconstruct")})
    assert set(images_mod._RestrictedUnpickler._ALLOWED) == written | official
    # and these globals read such a file back exactly, under both spellings
    for data in (pickle.dumps(batch, protocol=2),
                 pickle.dumps(batch, protocol=2).replace(b"numpy._core.", b"numpy.core.")):
        import io

        got = images_mod._RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
        assert np.array_equal(got[b"data"], batch[b"data"]) and got[b"labels"] == [1, 2]
        assert got[b"data"].dtype == np.uint8
