"""Tests for the image augmentation transforms and the CIFAR / digits image-graph datasets.

The CIFAR tests write tiny files in the real python-batch format (pickled dicts with
``b'data'`` uint8 ``[n, 3072]`` rows of R, G, B planes and ``b'labels'`` / ``b'fine_labels'``,
plus the meta files) and, for extraction, a ``.tar.gz`` of them; downloads are mocked.
"""
from __future__ import annotations

import os
import pickle
import shutil
import tarfile

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader

import quest_geometric.datasets.images as images_mod
from quest_geometric.datasets.images import (
    CIFAR10Graphs,
    CIFAR100Graphs,
    DigitsGraphs,
    _digits_split_indices,
    load_digits_split,
    md5sum,
)
from quest_geometric.transforms.image_augment import (
    NormalizeImage,
    RandomCropPad,
    RandomHorizontalFlip,
)

CIFAR10_NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog",
                 b"horse", b"ship", b"truck"]


# ============================================================================ file writers
def _dump(obj: object, path: str, python2_numpy_names: bool = False) -> None:
    data = pickle.dumps(obj, protocol=2)
    if python2_numpy_names:  # the official files were pickled by numpy 1.x under Python 2
        data = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    with open(path, "wb") as f:
        f.write(data)


def write_cifar10(folder: str, n_train: int = 3, n_test: int = 4, seed: int = 0) -> dict:
    """Write a tiny CIFAR-10 in the python format; return the arrays written."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    out = {"train_data": [], "train_labels": []}
    for b in range(1, 6):
        data = rng.integers(0, 256, size=(n_train, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n_train).tolist()
        _dump({b"batch_label": f"training batch {b} of 5".encode(), b"labels": labels,
               b"data": data, b"filenames": [b"x.png"] * n_train},
              os.path.join(folder, f"data_batch_{b}"), python2_numpy_names=b == 2)
        out["train_data"].append(data)
        out["train_labels"] += labels
    data = rng.integers(0, 256, size=(n_test, 3072), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n_test).tolist()
    _dump({b"batch_label": b"testing batch 1 of 1", b"labels": labels, b"data": data,
           b"filenames": [b"y.png"] * n_test}, os.path.join(folder, "test_batch"))
    _dump({b"num_cases_per_batch": n_train, b"label_names": CIFAR10_NAMES, b"num_vis": 3072},
          os.path.join(folder, "batches.meta"))
    out["train_data"] = np.concatenate(out["train_data"])
    out["test_data"], out["test_labels"] = data, labels
    return out


def write_cifar100(folder: str, n_train: int = 6, n_test: int = 3, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        fine = rng.integers(0, 100, size=n).tolist()
        coarse = [(f + 7) % 20 for f in fine]  # differ from the fine labels on purpose
        _dump({b"filenames": [b"z.png"] * n, b"batch_label": split.encode(),
               b"fine_labels": fine, b"coarse_labels": coarse, b"data": data},
              os.path.join(folder, split))
        out[f"{split}_data"], out[f"{split}_labels"] = data, fine
    _dump({b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
           b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)]},
          os.path.join(folder, "meta"))
    return out


def make_archive(src_parent: str, folder: str, archive: str) -> str:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(os.path.join(src_parent, folder), arcname=folder)
    return archive


def pixel(rows: np.ndarray, n: int, c: int, h: int, w: int) -> int:
    """The CIFAR byte of image n, channel c, row h, column w (planes R, G, B; row-major)."""
    return int(rows[n, c * 1024 + h * 32 + w])


# ============================================================================ augmentation
def manual_pad(image: torch.Tensor, p: int) -> torch.Tensor:
    c, h, w = image.shape
    out = torch.zeros(c, h + 2 * p, w + 2 * p, dtype=image.dtype)
    out[:, p:p + h, p:p + w] = image
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_random_crop_pad_is_window_of_padded_image(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    image = (torch.rand(3, 10, 12, generator=gen) * 200 + 1).to(dtype)  # no zeros inside
    t = RandomCropPad((10, 12), padding=3)
    padded = manual_pad(image, 3)
    windows = {(i, j): padded[:, i:i + 10, j:j + 12] for i in range(7) for j in range(7)}
    seen = set()
    torch.manual_seed(1)
    for _ in range(300):
        out = t(image)
        assert out.shape == image.shape and out.dtype == dtype
        matches = [ij for ij, win in windows.items() if torch.equal(out, win)]
        assert len(matches) == 1
        seen.add(matches[0])
    # Every offset is reachable (uniform over 49 positions: 300 draws miss one w.p. < 1e-3).
    assert seen == set(windows)
    # The deterministic part equals the manual slice.
    for (i, j), win in list(windows.items())[:5]:
        assert torch.equal(t.crop(image, i, j), win)


def test_random_crop_pad_data_and_reproducible() -> None:
    image = torch.rand(3, 32, 32)
    data = Data(image=image, y=torch.tensor([7]))
    t = RandomCropPad(32, padding=4)
    torch.manual_seed(5)
    a = t(data)
    torch.manual_seed(5)
    b = t(data)
    assert torch.equal(a.image, b.image) and a.y.item() == 7
    assert data.image is image  # the input Data is not modified
    # Smaller crops, padding 0, size == image: identity.
    assert torch.equal(RandomCropPad(32, padding=0)(image), image)
    assert RandomCropPad((5, 7), padding=0)(image).shape == (3, 5, 7)


def test_random_horizontal_flip() -> None:
    image = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 3, 4)
    assert torch.equal(RandomHorizontalFlip(p=1.0)(image), torch.flip(image, dims=[2]))
    assert torch.equal(RandomHorizontalFlip(p=0.0)(image), image)
    torch.manual_seed(0)
    flips = [not torch.equal(RandomHorizontalFlip()(image), image) for _ in range(400)]
    assert 0.4 < sum(flips) / 400 < 0.6
    data = Data(image=image, y=torch.tensor([1]))
    out = RandomHorizontalFlip(p=1.0)(data)
    assert torch.equal(out.image[:, :, 0], image[:, :, -1]) and torch.equal(data.image, image)


def test_normalize_image_by_hand() -> None:
    image = torch.rand(3, 4, 5, dtype=torch.float64)
    mean, std = (0.1, 0.5, 0.9), (0.2, 0.3, 0.4)
    out = NormalizeImage(mean, std)(image)
    for c in range(3):
        for h in range(4):
            for w in range(5):
                expected = (image[c, h, w].item() - mean[c]) / std[c]
                assert out[c, h, w].item() == pytest.approx(expected)
    assert torch.allclose(NormalizeImage(0.5, 2.0)(image), (image - 0.5) / 2.0)


def test_augment_reprs() -> None:
    assert str(RandomCropPad(32)) == "RandomCropPad(32, padding=4)"
    assert str(RandomCropPad((3, 4), padding=0)) == "RandomCropPad((3, 4), padding=0)"
    assert str(RandomHorizontalFlip()) == "RandomHorizontalFlip(p=0.5)"
    assert str(NormalizeImage((0.5, 0.25), 0.5)) == "NormalizeImage(mean=(0.5, 0.25), std=0.5)"


@pytest.mark.parametrize("make, exc", [
    (lambda: RandomCropPad(0), ValueError), (lambda: RandomCropPad((3,)), ValueError),
    (lambda: RandomCropPad(3, padding=-1), ValueError), (lambda: RandomCropPad(True), TypeError),
    (lambda: RandomCropPad("3"), TypeError), (lambda: RandomHorizontalFlip(p=1.5), ValueError),
    (lambda: RandomHorizontalFlip(p=float("nan")), ValueError),
    (lambda: RandomHorizontalFlip(p="0.5"), TypeError),
    (lambda: NormalizeImage(0.5, 0.0), ValueError),
    (lambda: NormalizeImage((0.5, 0.5), (1.0, 1.0, 1.0)), ValueError),
    (lambda: NormalizeImage([], 1.0), ValueError),
    (lambda: NormalizeImage(float("inf"), 1.0), ValueError),
    (lambda: NormalizeImage("0.5", 1.0), TypeError),
])
def test_augment_argument_errors(make, exc) -> None:
    with pytest.raises(exc, match=r"^(RandomCropPad|RandomHorizontalFlip|NormalizeImage): "
                                  r"'(size|padding|p|mean|std)' must be "):
        make()


def test_augment_input_errors() -> None:
    with pytest.raises(ValueError, match=r"^RandomCropPad: 'data' must be an image of at least "
                       r"\(36, 36\) pixels"):
        RandomCropPad(40, padding=2)(torch.zeros(3, 32, 32))
    with pytest.raises(ValueError, match=r"^RandomHorizontalFlip: 'data' must be of shape "
                                         r"\[C, H, W\].*pass image\[None\]"):
        RandomHorizontalFlip()(torch.zeros(32, 32))
    with pytest.raises(ValueError, match="^RandomHorizontalFlip: 'data' must be a .* with an "
                                         "'image' attribute, got a Data without 'image'$"):
        RandomHorizontalFlip()(Data(x=torch.zeros(3, 1)))
    with pytest.raises(TypeError, match="^NormalizeImage: 'data' must be a floating-point"):
        NormalizeImage(0.5, 0.5)(torch.zeros(3, 2, 2, dtype=torch.uint8))
    with pytest.raises(ValueError, match="^NormalizeImage: 'data' must be an image with 2 "
                                         "channels"):
        NormalizeImage((0.5, 0.5), (1.0, 1.0))(torch.zeros(3, 2, 2))
    with pytest.raises(TypeError):
        RandomCropPad(2)("not an image")


# ============================================================================ CIFAR
@pytest.fixture
def cifar10_root(tmp_path):
    arrays = write_cifar10(str(tmp_path / "raw" / "cifar-10-batches-py"))
    return str(tmp_path), arrays


def test_cifar10_process_pixels_labels_and_splits(cifar10_root) -> None:
    root, arrays = cifar10_root
    train = CIFAR10Graphs(root, train=True, graph=None, normalize=False, log=False)
    test = CIFAR10Graphs(root, train=False, graph=None, normalize=False, log=False)
    assert len(train) == 15 and len(test) == 4 and train.num_classes == 10
    assert str(train) == "CIFAR10Graphs(15, split='train')"
    assert train.images.dtype == torch.uint8 and train.images.shape == (15, 3, 32, 32)
    assert train.classes[0] == "airplane" and train.classes[9] == "truck"
    rng = np.random.default_rng(0)
    for ds, rows, labels in ((train, arrays["train_data"], arrays["train_labels"]),
                             (test, arrays["test_data"], arrays["test_labels"])):
        assert ds.labels.tolist() == labels
        for _ in range(50):
            n, c, h, w = (int(rng.integers(len(ds))), int(rng.integers(3)),
                          int(rng.integers(32)), int(rng.integers(32)))
            assert int(ds.images[n, c, h, w]) == pixel(rows, n, c, h, w)
        sample = ds[1]
        assert sample.y.tolist() == [labels[1]]
        assert sample.image.shape == (1, 3, 32, 32)
        expected = torch.tensor([[pixel(rows, 1, c, h, w) for w in range(32)]
                                 for c in range(3) for h in range(32)], dtype=torch.float32)
        assert torch.allclose(sample.image.view(96, 32), expected / 255.0)
    # Processed once: the processed files exist and a second load does not process again.
    assert sorted(os.listdir(os.path.join(root, "processed")))[-2:] == ["test.pt", "train.pt"]
    mp = pytest.MonkeyPatch()
    mp.setattr(CIFAR10Graphs, "process", lambda self: pytest.fail("processed twice"))
    try:
        again = CIFAR10Graphs(root, train=True, graph=None, normalize=False, log=False)
    finally:
        mp.undo()
    assert torch.equal(again.images, train.images)


def test_cifar10_normalisation_uses_training_statistics(cifar10_root) -> None:
    root, arrays = cifar10_root
    train_px = arrays["train_data"].reshape(-1, 3, 1024).astype(np.float64) / 255.0
    mean = train_px.transpose(1, 0, 2).reshape(3, -1).mean(axis=1)
    std = train_px.transpose(1, 0, 2).reshape(3, -1).std(axis=1)
    test = CIFAR10Graphs(root, train=False, graph=None, log=False)
    assert np.allclose(test.mean, mean) and np.allclose(test.std, std)
    raw = arrays["test_data"][2].reshape(3, 32, 32).astype(np.float64) / 255.0
    expected = (raw - mean[:, None, None]) / std[:, None, None]
    assert np.allclose(test[2].image[0].numpy(), expected, atol=1e-5)
    custom = CIFAR10Graphs(root, train=False, graph=None, normalize=((0.5,) * 3, (0.25,) * 3),
                           log=False)
    assert np.allclose(custom[2].image[0].numpy(), (raw - 0.5) / 0.25, atol=1e-5)


def test_cifar100_fine_labels(tmp_path) -> None:
    arrays = write_cifar100(str(tmp_path / "raw" / "cifar-100-python"))
    train = CIFAR100Graphs(str(tmp_path), graph=None, normalize=False, log=False)
    test = CIFAR100Graphs(str(tmp_path), train=False, graph=None, normalize=False, log=False)
    assert (len(train), len(test), train.num_classes) == (6, 3, 100)
    assert train.labels.tolist() == arrays["train_labels"]
    assert test.labels.tolist() == arrays["test_labels"]
    assert train.classes[3] == "fine3" and len(train.classes) == 100
    assert int(test.images[2, 1, 5, 7]) == pixel(arrays["test_data"], 2, 1, 5, 7)
    assert int(train.images[4, 2, 31, 0]) == pixel(arrays["train_data"], 4, 2, 31, 0)


def test_torchvision_layout_is_accepted(tmp_path) -> None:
    # torchvision's CIFAR10(root) leaves root/cifar-10-batches-py (and the archive).
    arrays = write_cifar10(str(tmp_path / "cifar-10-batches-py"))

    def no_download(*args, **kwargs):
        raise AssertionError("must not download")

    mp = pytest.MonkeyPatch()
    mp.setattr(images_mod, "download_url", no_download)
    try:
        ds = CIFAR10Graphs(str(tmp_path), train=False, graph=None, download=True, log=False)
    finally:
        mp.undo()
    assert ds.labels.tolist() == arrays["test_labels"]
    assert not os.path.exists(tmp_path / "raw" / "cifar-10-batches-py")


@pytest.mark.parametrize("archive_dir", ["raw", "."])
def test_local_archive_is_extracted_without_download(tmp_path, monkeypatch, archive_dir) -> None:
    src = tmp_path / "src"
    arrays = write_cifar10(str(src / "cifar-10-batches-py"))
    root = tmp_path / "root"
    (root / archive_dir).mkdir(parents=True, exist_ok=True)
    archive = make_archive(str(src), "cifar-10-batches-py",
                           str(root / archive_dir / "cifar-10-python.tar.gz"))
    monkeypatch.setattr(CIFAR10Graphs, "md5", md5sum(archive))
    monkeypatch.setattr(images_mod, "download_url",
                        lambda *a, **k: pytest.fail("must not download"))
    ds = CIFAR10Graphs(str(root), graph=None, log=False)  # download=False is enough
    assert ds.labels.tolist() == arrays["train_labels"]
    assert os.path.exists(archive)  # the user's archive is kept


def test_download_is_mocked_extracted_and_checked(tmp_path, monkeypatch) -> None:
    src = tmp_path / "src"
    arrays = write_cifar100(str(src / "cifar-100-python"))
    archive = make_archive(str(src), "cifar-100-python", str(tmp_path / "cifar-100-python.tar.gz"))
    calls = []

    def fake_download(url, folder, log=True, filename=None):
        calls.append(url)
        dst = os.path.join(folder, os.path.basename(url))
        shutil.copyfile(archive, dst)
        return dst

    monkeypatch.setattr(images_mod, "download_url", fake_download)
    monkeypatch.setattr(CIFAR100Graphs, "md5", md5sum(archive))
    root = str(tmp_path / "root")
    ds = CIFAR100Graphs(root, train=False, graph=None, download=True, log=False)
    assert calls == ["https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"]
    assert ds.labels.tolist() == arrays["test_labels"]
    assert os.path.isfile(os.path.join(root, "raw", "cifar-100-python", "meta"))
    assert not os.path.exists(os.path.join(root, "raw", "cifar-100-python.tar.gz"))


@pytest.mark.parametrize("cls,url,folder", [
    (CIFAR10Graphs, "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
     "cifar-10-batches-py"),
    (CIFAR100Graphs, "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
     "cifar-100-python"),
])
def test_no_data_says_what_to_download(tmp_path, cls, url, folder) -> None:
    with pytest.raises(FileNotFoundError) as info:
        cls(str(tmp_path), log=False)
    message = str(info.value)
    assert url in message and "download=True" in message and folder in message


def test_bad_md5_is_refused(tmp_path, monkeypatch) -> None:
    src = tmp_path / "src"
    write_cifar10(str(src / "cifar-10-batches-py"))
    (tmp_path / "root").mkdir()
    make_archive(str(src), "cifar-10-batches-py", str(tmp_path / "root" / "cifar-10-python.tar.gz"))
    # The official md5 does not match our tiny archive.
    with pytest.raises(ValueError, match="c58f30108f718f92721af3b95e74349a"):
        CIFAR10Graphs(str(tmp_path / "root"), log=False)
    assert not os.path.exists(tmp_path / "root" / "raw" / "cifar-10-batches-py")
    assert os.path.exists(tmp_path / "root" / "cifar-10-python.tar.gz")  # the user's file stays

    # A bad download is refused and removed, so the next run does not pick it up.
    def fake_download(url, folder, log=True, filename=None):
        dst = os.path.join(folder, "cifar-10-python.tar.gz")
        with open(dst, "wb") as f:
            f.write(b"truncated")
        return dst

    monkeypatch.setattr(images_mod, "download_url", fake_download)
    other = tmp_path / "other"
    with pytest.raises(ValueError, match="md5"):
        CIFAR10Graphs(str(other), download=True, log=False)
    assert not os.path.exists(other / "raw" / "cifar-10-python.tar.gz")


def test_corrupt_and_foreign_pickles_are_refused(cifar10_root) -> None:
    root, _ = cifar10_root
    batch = os.path.join(root, "raw", "cifar-10-batches-py", "data_batch_3")
    with open(batch, "wb") as f:
        f.write(b"\x80\x02}q\x00(truncated")
    with pytest.raises(ValueError, match="corrupt"):
        CIFAR10Graphs(root, log=False)

    class Exploit:
        def __reduce__(self):
            return (os.remove, (os.path.join(root, "canary"),))

    open(os.path.join(root, "canary"), "w").close()
    with open(batch, "wb") as f:
        pickle.dump({b"data": Exploit(), b"labels": [0]}, f)
    with pytest.raises(ValueError, match="not allowed"):
        CIFAR10Graphs(root, log=False)
    assert os.path.exists(os.path.join(root, "canary"))  # never executed

    _dump({b"data": np.zeros((2, 100), dtype=np.uint8), b"labels": [0, 1]}, batch)
    with pytest.raises(ValueError, match=r"\[n, 3072\]"):
        CIFAR10Graphs(root, log=False)
    _dump({b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [0, 10]}, batch)
    with pytest.raises(ValueError, match="labels must lie"):
        CIFAR10Graphs(root, log=False)


def test_cifar_argument_errors(cifar10_root) -> None:
    root, _ = cifar10_root
    with pytest.raises(ValueError, match="^CIFAR10Graphs: 'augment' must be False .*training "
                                         "split"):
        CIFAR10Graphs(root, train=False, augment=True, log=False)
    with pytest.raises(ValueError, match="^CIFAR10Graphs: 'graph' must be"):
        CIFAR10Graphs(root, graph="torus", log=False)
    with pytest.raises(TypeError, match="^CIFAR10Graphs: 'normalize' must be"):
        CIFAR10Graphs(root, normalize="yes", log=False)
    with pytest.raises(ValueError, match="^CIFAR10Graphs: 'normalize' must be"):
        CIFAR10Graphs(root, normalize=(0.5, 0.5, 0.5), log=False)
    with pytest.raises(TypeError, match="^CIFAR10Graphs: 'augment' must be"):
        CIFAR10Graphs(root, augment=3, log=False)


def test_cifar_augmentation_runs_before_the_graph(cifar10_root) -> None:
    root, _ = cifar10_root
    seen = []

    def graph(data):  # a stand-in graph transform that records what it is given
        seen.append(data.image.clone())
        return Data(x=data.image.flatten(1).t(), y=data.y)

    ds = CIFAR10Graphs(root, graph=graph, augment=True, normalize=False, log=False)
    torch.manual_seed(3)
    a = ds[4]
    torch.manual_seed(3)
    b = ds[4]
    assert torch.equal(a.x, b.x) and a.x.shape == (1024, 3)
    base = ds.images[4].float() / 255.0
    padded = manual_pad(base, 4)
    candidates = [padded[:, i:i + 32, j:j + 32] for i in range(9) for j in range(9)]
    candidates += [torch.flip(c, dims=[2]) for c in candidates]
    assert any(torch.equal(seen[0], c) for c in candidates)


# ============================================================================ digits
def test_digits_split_fixed_disjoint_stratified() -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    labels = np.asarray(digits.target)
    train_idx, test_idx = _digits_split_indices(labels, 360, seed=0)
    again = _digits_split_indices(labels, 360, seed=0)
    assert np.array_equal(train_idx, again[0]) and np.array_equal(test_idx, again[1])
    assert (len(train_idx), len(test_idx)) == (1437, 360)
    assert np.intersect1d(train_idx, test_idx).size == 0
    assert np.array_equal(np.union1d(train_idx, test_idx), np.arange(1797))
    for c in range(10):
        n_c = int((labels == c).sum())
        assert abs(int((labels[test_idx] == c).sum()) - n_c * 360 / 1797) < 1.0
    images, y = load_digits_split("test")
    assert images.shape == (360, 1, 8, 8) and images.dtype == torch.float32
    assert torch.equal(y, torch.from_numpy(labels[test_idx]))
    assert torch.allclose(images[:, 0], torch.from_numpy(digits.images[test_idx] / 16.0).float())
    assert float(images.min()) >= 0.0 and float(images.max()) <= 1.0


def test_digits_dataset_images_and_normalisation() -> None:
    train = DigitsGraphs(split="train", graph=None)
    test = DigitsGraphs(split="test", graph=None)
    assert (len(train), len(test), train.num_classes) == (1437, 360, 10)
    assert set(train.labels.tolist()) == set(range(10))
    assert train.mean == test.mean and train.std == test.std
    stacked = torch.cat([train[i].image for i in range(len(train))])
    assert stacked.shape == (1437, 1, 8, 8)
    assert abs(float(stacked.mean())) < 1e-4 and abs(float(stacked.std(unbiased=False)) - 1) < 1e-4
    raw = DigitsGraphs(split="test", graph=None, normalize=False)
    assert torch.equal(raw[7].image[0], raw.images[7]) and raw[7].y.item() == raw.labels[7]
    with pytest.raises(ValueError, match="training split"):
        DigitsGraphs(split="test", augment=True)
    with pytest.raises(ValueError, match="^DigitsGraphs: 'split' must be one of"):
        DigitsGraphs(split="val")


def test_digits_augment_is_shift_without_flip() -> None:
    ds = DigitsGraphs(split="train", graph=None, augment=True, normalize=False)
    assert str(ds.augment_transform) == "RandomCropPad(8, padding=1)"
    torch.manual_seed(0)
    out = ds[0].image[0]
    padded = manual_pad(ds.images[0], 1)
    assert any(torch.equal(out, padded[:, i:i + 8, j:j + 8]) for i in range(3) for j in range(3))


# ============================================================================ integration
@pytest.fixture(scope="module")
def small_sphere():
    from quest_geometric.transforms.image_to_sphere import ImageToSphere

    return ImageToSphere(sizes=(16, 48), k=6, k_cross=2)


def test_loader_batches_cifar_spheres(cifar10_root, small_sphere) -> None:
    root, arrays = cifar10_root
    ds = CIFAR10Graphs(root, graph=small_sphere, augment=True, log=False)
    torch.manual_seed(0)
    batch = next(iter(DataLoader(ds, batch_size=5, shuffle=False)))
    assert batch.num_graphs == 5 and batch.x.shape == (5 * 64, 3)
    assert batch.edge_index.shape == (2, 5 * 64 * 8)
    assert batch.y.tolist() == arrays["train_labels"][:5]


@pytest.mark.parametrize("graph", ["lattice", "sphere_small", None])
def test_graph_batch_equals_collated_samples(cifar10_root, small_sphere, graph) -> None:
    root, _ = cifar10_root
    ds = CIFAR10Graphs(root, train=False, graph=small_sphere if graph == "sphere_small" else graph,
                       log=False)
    index = [3, 0, 2]
    fast = ds.graph_batch(index)
    slow = Batch.from_data_list([ds[i] for i in index])
    assert fast.num_graphs == 3 and set(fast.keys()) == set(slow.keys())
    for key in slow.keys():
        assert torch.allclose(fast[key].float(), slow[key].float(), atol=1e-6), key
    sub = ds[torch.tensor([1, 3])]  # positions are relative to a subset
    assert torch.equal(sub.graph_batch([1]).y, ds.labels[3:4])


@pytest.mark.parametrize("graph,num_nodes", [("lattice", 64), ("sphere", None)])
def test_loader_batches_digits(graph, num_nodes) -> None:
    ds = DigitsGraphs(split="test", graph=graph)
    batch = next(iter(DataLoader(ds, batch_size=4)))
    n = ds[0].num_nodes if num_nodes is None else num_nodes
    assert batch.num_graphs == 4 and batch.x.shape == (4 * n, 1)
    assert torch.equal(batch.y, ds.labels[:4])
