r"""Image classification datasets served as graphs: CIFAR-10, CIFAR-100 and the scikit-learn
handwritten digits. They store **images**; each access runs, per sample,

.. code-block:: text

    augmentation (training split, optional)  ->  float in [0, 1]  ->  per-channel
    normalisation (training-split statistics)  ->  graph transform  ->  user transform

so the augmentation acts on the pixel grid before the image is sampled onto the sphere or the
lattice (whose template is built once). With ``graph=None`` a sample is
``Data(image=[1, C, H, W], y=[1])``, batched by PyG into ``[B, C, H, W]`` for a CNN.
"""
from __future__ import annotations

import functools
import hashlib
import os
import os.path as osp
import pickle
import sys
from collections.abc import Sequence
from typing import Any, Callable, ClassVar, Optional, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import (
    Batch, Data, Dataset, InMemoryDataset, download_url, extract_tar,
)
from torch_geometric.data.dataset import files_exist
from torch_geometric.transforms import BaseTransform, Compose

from quest_geometric._utils.checks import check_choice, fail
from quest_geometric._utils.untrusted import load_tensors, refused
from quest_geometric.transforms.image_augment import (
    NormalizeImage, RandomCropPad, RandomHorizontalFlip,
)

__all__ = [
    "CIFAR10Graphs", "CIFAR100Graphs", "DigitsGraphs", "load_digits_split", "md5sum",
]

GraphArg = Union[str, Callable[[Data], Any], None]
AugmentArg = Union[bool, Callable[[Data], Any], None]
NormalizeArg = Union[bool, tuple[Sequence[float], Sequence[float]]]


def md5sum(path: Union[str, os.PathLike], chunk_size: int = 1 << 20) -> str:
    """The MD5 digest of the file at ``path`` as 32 lowercase hexadecimal digits.

    Args:
        path (str or os.PathLike): the file.
        chunk_size (int): bytes read at a time. (default: ``1 << 20``)
    """
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk_size), b""):
            digest.update(block)
    return digest.hexdigest()


def _to_float(image: Tensor) -> Tensor:
    """float32 images: ``uint8`` is divided by 255, floats are only cast."""
    if image.dtype == torch.uint8:
        return image.to(torch.float32).div_(255.0)
    return image.to(torch.float32)


class _ToFloatImage(BaseTransform):
    """``Data.image`` to float32: ``uint8`` is divided by 255, floats are only cast."""

    def forward(self, data: Data) -> Data:
        data.image = _to_float(data.image)
        return data


class _ImageBatchDim(BaseTransform):
    """``Data.image`` ``[C, H, W]`` -> ``[1, C, H, W]``, batched by PyG to ``[B, C, H, W]``."""

    def forward(self, data: Data) -> Data:
        data.image = data.image.unsqueeze(0)
        return data


def _graph_transform(graph: GraphArg, name: str) -> Callable[[Data], Any]:
    if graph is None:
        return _ImageBatchDim()
    if not isinstance(graph, str):
        if callable(graph):
            return graph
        raise fail(TypeError, name, "graph", "'sphere', 'lattice', None or a callable transform",
                   graph)
    if graph == "sphere":
        from quest_geometric.transforms.image_to_sphere import ImageToSphere

        return ImageToSphere()
    if graph == "lattice":
        from quest_geometric.transforms.image_to_lattice import ImageToLattice

        return ImageToLattice()
    raise fail(ValueError, name, "graph", "'sphere', 'lattice', None or a callable transform",
               graph)


def _normalization(normalize: NormalizeArg, stats: tuple[Sequence[float], Sequence[float]],
                   name: str) -> Optional[NormalizeImage]:
    if normalize is True:
        return NormalizeImage(*stats)
    if normalize is False or normalize is None:
        return None
    if isinstance(normalize, (tuple, list)) and len(normalize) == 2:
        return NormalizeImage(normalize[0], normalize[1])
    raise fail(ValueError if isinstance(normalize, (tuple, list)) else TypeError, name,
               "normalize", "True (training-split statistics), False, or a pair (mean, std)",
               normalize)


class _ImagePipeline:
    """The per-sample pipeline shared by the image datasets (``transform``, a
    :class:`~torch_geometric.transforms.Compose` of its parts), and the batched fast path."""

    images: Tensor
    labels: Tensor
    transform: Optional[Callable[[Data], Any]]

    def _setup_pipeline(self, *, name: str, training: bool, augment: AugmentArg,
                        default_augment: Callable[[], Callable[[Data], Any]],
                        normalize: Optional[NormalizeImage], graph: GraphArg,
                        transform: Optional[Callable[[Data], Any]]) -> None:
        if augment is True:
            if not training:
                raise fail(ValueError, name, "augment", "False or an explicit transform on the "
                           "test split", True, hint="; augment=True (the default augmentation) "
                           "is meant for the training split")
            augment_step: Optional[Callable[[Data], Any]] = default_augment()
        elif augment is False or augment is None:
            augment_step = None
        elif callable(augment):
            augment_step = augment
        else:
            raise fail(TypeError, name, "augment", "a bool or a callable transform", augment)
        if transform is not None and not callable(transform):
            raise fail(TypeError, name, "transform", "callable (or None)", transform)
        self.augment_transform = augment_step
        self.normalize_transform = normalize
        self.graph_transform = _graph_transform(graph, name)
        self.user_transform = transform
        steps = [augment_step, _ToFloatImage(), normalize, self.graph_transform, transform]
        self.transform = Compose([step for step in steps if step is not None])

    def len(self) -> int:
        return int(self.labels.numel())

    def get(self, idx: int) -> Data:
        return Data(image=self.images[idx], y=self.labels[idx].view(1))

    def graph_batch(self, index: Union[Sequence[int], Tensor]) -> Batch:
        r"""``Batch.from_data_list([dataset[i] for i in index])``, vectorised for evaluation:
        without augmentation and user ``transform``, and with a graph transform that has a
        ``batch_call``, the images are converted, normalised and sampled in one call.

        Args:
            index (Sequence[int] or Tensor): positions in this dataset (after any
                ``index_select``/``shuffle``).
        """
        index = torch.as_tensor(index, dtype=torch.long).flatten()
        if (self.augment_transform is not None or self.user_transform is not None
                or not hasattr(self.graph_transform, "batch_call")):
            return Batch.from_data_list([self[int(i)] for i in index])  # type: ignore[index]
        subset = getattr(self, "_indices", None)
        rows = index if subset is None else torch.as_tensor(subset, dtype=torch.long)[index]
        images = _to_float(self.images[rows])
        if self.normalize_transform is not None:
            mean = torch.tensor(self.normalize_transform.mean).view(1, -1, 1, 1)
            std = torch.tensor(self.normalize_transform.std).view(1, -1, 1, 1)
            images = (images - mean) / std
        return self.graph_transform.batch_call(images, y=self.labels[rows], as_batch=True)


def _channel_stats(images: Tensor, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Per-channel mean and population std of ``images`` ``[N, C, H, W]`` (uint8 -> /255),
    accumulated in float64 over chunks of images, so a full CIFAR split needs little memory."""
    scale = 255.0 if images.dtype == torch.uint8 else 1.0
    channels = images.size(1)
    total = torch.zeros(channels, dtype=torch.float64)
    total_sq = torch.zeros(channels, dtype=torch.float64)
    for start in range(0, images.size(0), chunk):
        block = images[start:start + chunk].to(torch.float64) / scale
        total += block.sum(dim=(0, 2, 3))
        total_sq += block.square().sum(dim=(0, 2, 3))
    count = images.size(0) * images.size(2) * images.size(3)
    mean = total / count
    var = (total_sq / count - mean.square()).clamp_min(0.0)
    return mean.tolist(), var.sqrt().tolist()


def _numpy_reconstruct() -> Any:
    try:  # numpy >= 2
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return _reconstruct


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles only what a CIFAR python batch holds: builtins and numpy arrays.

    The batches are pickles; this unpickler resolves exactly the globals that numpy's array
    pickling uses (``_reconstruct``, ``ndarray``, ``dtype``; ``_codecs.encode`` for the bytes
    of protocol-2 pickles written by Python 3) and refuses every other one *before* importing
    anything, so a foreign file can neither call a function nor import a module.
    """

    _ALLOWED: ClassVar[dict[tuple[str, str], Callable[[], Any]]] = {
        # the official files: numpy 1.x under Python 2; numpy 2 writes numpy._core
        ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct,
        ("numpy", "ndarray"): lambda: np.ndarray,
        ("numpy", "dtype"): lambda: np.dtype,
        ("_codecs", "encode"): lambda: __import__("codecs").encode,
    }

    def find_class(self, module: str, name: str) -> Any:
        resolve = self._ALLOWED.get((module, name))
        if resolve is None:
            raise pickle.UnpicklingError(
                f"global '{module}.{name}' is not allowed in a CIFAR batch")
        return resolve()


def _read_batch(path: str, name: str) -> dict[str, Any]:
    """Read one CIFAR python batch as a dict with ``str`` keys; any failure while reading
    (even a ``BaseException``) is a :class:`ValueError` naming the file as refused."""
    try:
        with open(path, "rb") as f:
            raw = _RestrictedUnpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise
    except BaseException as e:  # nothing read from the file may escape as success
        raise refused(
            name, path, "it is corrupt or not a CIFAR python batch, or holds more than numpy "
            "arrays and plain containers. Delete it and download the dataset again "
            "(download=True)", e,
        ) from e
    if not isinstance(raw, dict):
        raise refused(name, path, f"it holds a {type(raw).__name__}, expected the dict of a CIFAR "
                      "python batch; the file is corrupt or not a CIFAR file")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in raw.items()}


def _decode_names(names: Any) -> list[str]:
    return [n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names]


class _CIFARGraphs(_ImagePipeline, InMemoryDataset):
    """Shared machinery of :class:`CIFAR10Graphs` and :class:`CIFAR100Graphs`."""

    url: str
    md5: str
    archive: str
    folder: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    meta_file: str
    label_key: str
    names_key: str
    num_classes_: int
    dataset_name: str

    def __init__(self, root: Union[str, os.PathLike], train: bool = True,
                 graph: GraphArg = "sphere", augment: AugmentArg = False,
                 normalize: NormalizeArg = True,
                 transform: Optional[Callable[[Data], Any]] = None, download: bool = False,
                 log: bool = True, force_reload: bool = False) -> None:
        name = self.__class__.__name__
        if not isinstance(root, (str, os.PathLike)):
            raise fail(TypeError, name, "root", "a path (str or os.PathLike)", root)
        if not isinstance(train, bool):
            raise fail(TypeError, name, "train", "a bool", train)
        self.train = train
        self.download_enabled = bool(download)
        super().__init__(os.fspath(root), None, None, None, log=log, force_reload=force_reload)

        stored = self._read_processed(self.processed_paths[0 if train else 1])
        self.images: Tensor = stored["images"]
        self.labels: Tensor = stored["labels"]
        self.classes: list[str] = list(stored["classes"])
        self.mean: list[float] = list(stored["mean"])
        self.std: list[float] = list(stored["std"])
        self._setup_pipeline(
            name=name, training=train, augment=augment,
            default_augment=lambda: Compose([RandomCropPad(32, padding=4),
                                             RandomHorizontalFlip()]),
            normalize=_normalization(normalize, (self.mean, self.std), name), graph=graph,
            transform=transform)

    def _process(self) -> None:
        """Process the raw batches unless ``root/processed`` already holds both splits.

        Replaces PyG's :meth:`~torch_geometric.data.Dataset._process`, which unpickles
        ``processed/pre_transform.pt`` and ``pre_filter.pt`` with ``weights_only=False`` (so a
        shared processed folder could run code). These datasets take neither argument and
        write neither file; one found there (written by an older version) is read as data
        only, and anything that is not the plain string a dataset without them records is
        refused.
        """
        name = self.__class__.__name__
        if not self.force_reload:
            for fname in ("pre_transform.pt", "pre_filter.pt"):
                path = osp.join(self.processed_dir, fname)
                if osp.exists(path) and load_tensors(path, name) != "None":
                    raise refused(
                        name, path, "it records a pre-processing step, which this dataset "
                        "never applies; the processed folder was not written by it. Pass "
                        "force_reload=True to process the raw data again")
            if files_exist(self.processed_paths):
                return
        if self.log and "PYTEST_CURRENT_TEST" not in os.environ:
            print("Processing...", file=sys.stderr)
        os.makedirs(self.processed_dir, exist_ok=True)
        self.process()
        if self.log and "PYTEST_CURRENT_TEST" not in os.environ:
            print("Done!", file=sys.stderr)

    def _read_processed(self, path: str) -> dict[str, Any]:
        """A processed split, read as data only (``weights_only=True``) and checked."""
        name = self.__class__.__name__
        stored = load_tensors(path, name)
        ok = (
            isinstance(stored, dict)
            and isinstance(stored.get("images"), Tensor) and stored["images"].dtype == torch.uint8
            and stored["images"].dim() == 4 and tuple(stored["images"].shape[1:]) == (3, 32, 32)
            and isinstance(stored.get("labels"), Tensor) and stored["labels"].dtype == torch.long
            and tuple(stored["labels"].shape) == (stored["images"].size(0),)
            and isinstance(stored.get("classes"), (list, tuple))
            and all(isinstance(c, str) for c in stored["classes"])
            and all(isinstance(stored.get(k), (list, tuple)) and len(stored[k]) == 3
                    and all(isinstance(v, float) for v in stored[k]) for k in ("mean", "std"))
        )
        if not ok:
            raise refused(
                name, path, f"it is not a processed {self.dataset_name} split (a dict of uint8 "
                "images [N, 3, 32, 32], long labels [N], class names and the per-channel mean "
                "and std). Pass force_reload=True to process the raw data again")
        return stored

    @property
    def raw_file_names(self) -> list[str]:
        files = (*self.train_files, *self.test_files, self.meta_file)
        return [osp.join(self.folder, f) for f in files]

    @property
    def processed_file_names(self) -> list[str]:
        return ["train.pt", "test.pt"]

    @property
    def raw_dir(self) -> str:
        """``root/raw``, or ``root`` itself when it holds torchvision's extracted folder."""
        for candidate in (osp.join(self.root, "raw"), self.root):
            if all(osp.isfile(osp.join(candidate, f)) for f in self.raw_file_names):
                return candidate
        return osp.join(self.root, "raw")

    @property
    def num_classes(self) -> int:
        return self.num_classes_

    def _missing_message(self) -> str:
        root = self.root
        files = ", ".join((*self.train_files, *self.test_files, self.meta_file))
        return (
            f"{self.__class__.__name__}: no {self.dataset_name} data under {root!r}. Pass "
            f"download=True to fetch {self.url} (md5 {self.md5}), or place the python-version "
            f"archive {self.archive!r} in {osp.join(root, 'raw')!r} or {root!r}, or its "
            f"extracted folder {self.folder + '/'!r} (holding {files}) in "
            f"{osp.join(root, 'raw')!r} or directly in {root!r} (torchvision's layout)"
        )

    def download(self) -> None:
        name = self.__class__.__name__
        candidates = (osp.join(self.root, "raw", self.archive), osp.join(self.root, self.archive))
        archive = next((c for c in candidates if osp.isfile(c)), None)
        downloaded = False
        if archive is None:
            if not self.download_enabled:
                raise FileNotFoundError(self._missing_message())
            archive = download_url(self.url, self.raw_dir, log=self.log)
            downloaded = True
        digest = md5sum(archive)
        if digest != self.md5:
            if downloaded:  # never leave a bad download behind to be picked up next time
                os.unlink(archive)
            raise ValueError(
                f"{name}: the archive {archive!r} has md5 {digest}, expected {self.md5}; it is "
                f"corrupt or incomplete. Delete it and download {self.url} again")
        extract_tar(archive, osp.join(self.root, "raw"), mode="r:gz", log=self.log)
        if downloaded:
            os.unlink(archive)
        missing = [f for f in self.raw_file_names if not osp.isfile(osp.join(self.raw_dir, f))]
        if missing:
            raise ValueError(
                f"{name}: the archive {archive!r} did not contain {missing}; expected the "
                f"folder {self.folder!r} of the official python version")

    def _read_split(self, files: Sequence[str]) -> tuple[Tensor, Tensor]:
        name = self.__class__.__name__
        images, labels = [], []
        for f in files:
            path = osp.join(self.raw_dir, self.folder, f)
            batch = _read_batch(path, name)
            if "data" not in batch or self.label_key not in batch:
                raise ValueError(
                    f"{name}: {path!r} lacks the keys 'data' and {self.label_key!r} of a "
                    f"{self.dataset_name} batch (found {sorted(batch)}); is it the right dataset?")
            data = np.asarray(batch["data"])
            y = np.asarray(batch[self.label_key])
            if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
                raise ValueError(
                    f"{name}: {path!r}: 'data' must be a uint8 array of shape [n, 3072], got "
                    f"{data.dtype} {data.shape}")
            if y.ndim != 1 or y.shape[0] != data.shape[0]:
                raise ValueError(f"{name}: {path!r}: {len(y)} labels for {data.shape[0]} images")
            if y.size and (y.min() < 0 or y.max() >= self.num_classes_):
                raise ValueError(
                    f"{name}: {path!r}: labels must lie in [0, {self.num_classes_ - 1}], got "
                    f"the range [{y.min()}, {y.max()}]")
            # Each row holds the red, green and blue 32 x 32 planes, each row-major.
            images.append(torch.from_numpy(data.reshape(-1, 3, 32, 32).copy()))
            labels.append(torch.from_numpy(y.astype(np.int64)))
        return torch.cat(images), torch.cat(labels)

    def process(self) -> None:
        name = self.__class__.__name__
        meta_path = osp.join(self.raw_dir, self.folder, self.meta_file)
        meta = _read_batch(meta_path, name)
        if self.names_key not in meta:
            raise ValueError(f"{name}: {meta_path!r} lacks the key {self.names_key!r} of the "
                             f"{self.dataset_name} meta file")
        classes = _decode_names(meta[self.names_key])
        train_images, train_labels = self._read_split(self.train_files)
        test_images, test_labels = self._read_split(self.test_files)
        mean, std = _channel_stats(train_images)
        for (images, labels), path in zip(
            ((train_images, train_labels), (test_images, test_labels)), self.processed_paths):
            torch.save(
                {"images": images, "labels": labels, "classes": classes, "mean": mean, "std": std},
                path)

    def __repr__(self) -> str:
        split = "train" if self.train else "test"
        return f"{self.__class__.__name__}({len(self)}, split={split!r})"


class CIFAR10Graphs(_CIFARGraphs):
    r"""The CIFAR-10 dataset (Krizhevsky, 2009) of 32 x 32 colour images in 10 classes, each
    served as a graph (sphere or flat lattice) built from the image at access time.

    The official python-version batches are found in ``root/raw/cifar-10-batches-py/`` or
    ``root/cifar-10-batches-py/`` (torchvision's layout, so its download is reused); else the
    archive ``cifar-10-python.tar.gz`` in ``root/raw`` or ``root`` is checked (md5) and
    extracted; else, with ``download=True``, it is downloaded from
    https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz (md5
    ``c58f30108f718f92721af3b95e74349a``). Processing stores ``uint8`` images
    ``[N, 3, 32, 32]`` and labels in ``root/processed``. A sample is the graph transform's
    ``Data(x [N, 3], pos, shell, edge_index, y [1])``, or ``Data(image [1, 3, 32, 32], y)``.

    Args:
        root (str or os.PathLike): root directory of the dataset.
        train (bool): the 50,000 training or the 10,000 test images. (default: :obj:`True`)
        graph (str or callable, optional): ``'sphere'`` (a default ``ImageToSphere``),
            ``'lattice'`` (a default ``ImageToLattice``), any transform taking
            ``Data(image, y)``, or :obj:`None` for the image itself. (default: ``'sphere'``)
        augment (bool or callable): :obj:`True` (training split only) applies
            :class:`~quest_geometric.transforms.image_augment.RandomCropPad` ``(32, padding=4)``
            then :class:`~quest_geometric.transforms.image_augment.RandomHorizontalFlip`; a
            callable is applied to ``Data(image uint8 [3, 32, 32], y)``. (default: :obj:`False`)
        normalize (bool or (mean, std)): :obj:`True` uses the training split's per-channel
            pixel statistics, a pair those given, :obj:`False` none. (default: :obj:`True`)
        transform (callable, optional): applied last, to the graph. (default: :obj:`None`)
        download (bool): download the archive when no data is found. (default: :obj:`False`)
        log (bool): print download and processing progress. (default: :obj:`True`)
        force_reload (bool): re-process the raw data. (default: :obj:`False`)

    Attributes:
        images (Tensor): all images of the split, ``uint8`` ``[N, 3, 32, 32]``.
        labels (Tensor): their labels, ``long`` ``[N]``.
        classes (list[str]): the class names from ``batches.meta``.
        mean (list[float]): the training split's per-channel pixel mean (in ``[0, 1]`` units).
        std (list[float]): the training split's per-channel pixel standard deviation.

    **STATS**: 50,000 training and 10,000 test graphs, 3 features, 10 classes; with the
    default ``ImageToSphere()`` (3 shells of 64 + 256 + 1,024 nodes, in-degree 16) 1,344 nodes
    and 21,504 edges, with the default ``ImageToLattice()`` 1,024 nodes and 8,192 edges.
    """

    url = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    md5 = "c58f30108f718f92721af3b95e74349a"
    archive = "cifar-10-python.tar.gz"
    folder = "cifar-10-batches-py"
    train_files = tuple(f"data_batch_{i}" for i in range(1, 6))
    test_files = ("test_batch",)
    meta_file = "batches.meta"
    label_key = "labels"
    names_key = "label_names"
    num_classes_ = 10
    dataset_name = "CIFAR-10"


class CIFAR100Graphs(_CIFARGraphs):
    r"""The CIFAR-100 dataset (Krizhevsky, 2009) of 32 x 32 colour images in 100 fine classes,
    each served as a graph (sphere or flat lattice) built from the image at access time.

    As :class:`CIFAR10Graphs` (the same arguments and defaults, the same **STATS** with 100
    classes), with the archive ``cifar-100-python.tar.gz`` from
    https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz (md5
    ``eb9058c3a382ffc7106e4002c42a8d85``), extracted to ``cifar-100-python/`` (``train``,
    ``test``, ``meta``; torchvision's layout). Labels are the **fine** labels.
    """

    url = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    md5 = "eb9058c3a382ffc7106e4002c42a8d85"
    archive = "cifar-100-python.tar.gz"
    folder = "cifar-100-python"
    train_files = ("train",)
    test_files = ("test",)
    meta_file = "meta"
    label_key = "fine_labels"
    names_key = "fine_label_names"
    num_classes_ = 100
    dataset_name = "CIFAR-100"


#: Size of the fixed digits test split (20% of 1,797, allocated over the classes).
DIGITS_TEST_SIZE = 360


def _digits_split_indices(labels: np.ndarray, test_size: int, seed: int
                          ) -> tuple[np.ndarray, np.ndarray]:
    """A stratified split: each class gives its largest-remainder share of ``test_size`` to
    the test split, by a :class:`numpy.random.RandomState` permutation (a stream numpy keeps
    stable across versions); sorted indices."""
    classes, counts = np.unique(labels, return_counts=True)
    exact = counts * test_size / labels.size
    share = np.floor(exact).astype(np.int64)
    remainder = test_size - int(share.sum())
    # Largest remainders first; ties go to the smaller class label (stable sort).
    order = np.argsort(-(exact - share), kind="stable")
    share[order[:remainder]] += 1
    rng = np.random.RandomState(seed)
    test = []
    for c, k in zip(classes, share):
        members = np.flatnonzero(labels == c)
        test.append(rng.permutation(members)[:k])
    test_idx = np.sort(np.concatenate(test))
    mask = np.ones(labels.size, dtype=bool)
    mask[test_idx] = False
    return np.flatnonzero(mask), test_idx


def load_digits_split(split: str = "train") -> tuple[Tensor, Tensor]:
    r"""The fixed split of scikit-learn's handwritten digits as image and label tensors.

    The 1,797 8 x 8 images of :func:`sklearn.datasets.load_digits` (grey levels 0..16) are
    divided by 16. The split is stratified: 360 test images (class shares rounded by largest
    remainder) drawn by ``numpy.random.RandomState(0)``, the other 1,437 for training.

    Args:
        split (str): ``'train'`` or ``'test'``. (default: ``'train'``)

    Returns:
        (Tensor, Tensor): ``float32`` images ``[n, 1, 8, 8]`` and ``long`` labels ``[n]``.
    """
    check_choice(split, "split", ("train", "test"), where="load_digits_split")
    images, labels, train_idx, test_idx = _digits_arrays()
    idx = train_idx if split == "train" else test_idx
    out = torch.from_numpy(images[idx] / np.float32(16.0))
    return out.unsqueeze(1).contiguous(), torch.from_numpy(labels[idx])


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``load_digits`` images (float32 ``[1797, 8, 8]``), labels and the fixed split (cached)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    labels = np.asarray(digits.target, dtype=np.int64)
    train_idx, test_idx = _digits_split_indices(labels, DIGITS_TEST_SIZE, seed=0)
    images = np.asarray(digits.images, dtype=np.float32)
    for array in (images, labels, train_idx, test_idx):
        array.setflags(write=False)
    return images, labels, train_idx, test_idx


class DigitsGraphs(_ImagePipeline, Dataset):
    r"""scikit-learn's handwritten digits (1,797 8 x 8 grey images, 10 classes), served as
    graphs like :class:`CIFAR10Graphs`: the offline dataset for quick runs and tests.

    The data ship with scikit-learn, so nothing is downloaded; the split is
    :func:`load_digits_split`. Images stay ``[1, 8, 8]`` floats in :math:`[0, 1]`: the sphere
    samples them bilinearly at its nodes, the lattice has the 64 pixels as nodes.

    Args:
        root (str or os.PathLike, optional): ignored (the interface of every image dataset).
            (default: :obj:`None`)
        split (str): ``'train'`` or ``'test'``. (default: ``'train'``)
        graph (str or callable, optional): ``'sphere'``, ``'lattice'``, a transform taking
            ``Data(image [1, 8, 8], y)``, or :obj:`None` for the image itself (then
            ``Data(image [1, 1, 8, 8], y)``). (default: ``'sphere'``)
        augment (bool or callable): :obj:`True` (training split only) applies
            :class:`~quest_geometric.transforms.image_augment.RandomCropPad` ``(8, padding=1)``
            (the CIFAR shift scaled to 8 pixels; no flip: mirrored digits are not digits); a
            callable is applied to ``Data(image [1, 8, 8], y)``. (default: :obj:`False`)
        normalize (bool or (mean, std)): as in :class:`CIFAR10Graphs`. (default: :obj:`True`)
        transform (callable, optional): applied last, to the graph. (default: :obj:`None`)

    Attributes:
        images (Tensor): the split's images, ``float32`` ``[n, 1, 8, 8]``.
        labels (Tensor): their labels, ``long`` ``[n]``.
        mean (list[float]): the training split's pixel mean.
        std (list[float]): the training split's pixel standard deviation.

    **STATS**: 1,437 training and 360 test graphs, 1 feature, 10 classes; 1,344 nodes and
    21,504 edges (default sphere) or 64 nodes and 512 edges (default lattice).
    """

    def __init__(self, root: Optional[Union[str, os.PathLike]] = None, split: str = "train",
                 graph: GraphArg = "sphere", augment: AugmentArg = False,
                 normalize: NormalizeArg = True,
                 transform: Optional[Callable[[Data], Any]] = None) -> None:
        name = self.__class__.__name__
        check_choice(split, "split", ("train", "test"), where=name)

        super().__init__(None, None, None, None, log=False)
        self.split = split
        self.images, self.labels = load_digits_split(split)
        train_images = self.images if split == "train" else load_digits_split("train")[0]
        mean, std = _channel_stats(train_images)
        self.mean: list[float] = mean
        self.std: list[float] = std
        self.classes = [str(i) for i in range(10)]
        self._setup_pipeline(name=name, training=split == "train", augment=augment,
                             default_augment=lambda: RandomCropPad(8, padding=1),
                             normalize=_normalization(normalize, (mean, std), name), graph=graph,
                             transform=transform)

    @property
    def num_classes(self) -> int:
        return 10

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({len(self)}, split={self.split!r})"
