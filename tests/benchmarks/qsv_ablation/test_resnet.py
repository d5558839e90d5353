"""Tests for the CIFAR ResNet-20 baseline."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.loader import DataLoader

from quest_geometric.datasets.images import DigitsGraphs
from benchmarks.qsv.ablation_study.resnet import BasicBlock, ResNet20


def analytic_count(in_channels: int, num_classes: int, shortcut: str) -> int:
    """He et al. (2016) Sec. 4.2 counted by hand: 3x3 convs without bias, BN (gamma, beta)
    after every conv, 3 stages x 3 blocks of two convs, a linear layer on 64 features."""
    conv = lambda cin, cout, k=3: cin * cout * k * k  # noqa: E731
    bn = lambda c: 2 * c  # noqa: E731
    total = conv(in_channels, 16) + bn(16)
    cin = 16
    for planes in (16, 32, 64):
        for b in range(3):
            total += conv(cin, planes) + bn(planes) + conv(planes, planes) + bn(planes)
            if cin != planes and shortcut == "B":
                total += conv(cin, planes, 1) + bn(planes)
            cin = planes
    return total + 64 * num_classes + num_classes


@pytest.mark.parametrize("shortcut, expected", [("A", 269_722), ("B", 272_474)])
def test_parameter_count_cifar10(shortcut, expected):
    model = ResNet20(10, 3, shortcut=shortcut)
    assert analytic_count(3, 10, shortcut) == expected
    assert model.parameter_count() == expected
    assert sum(p.numel() for p in model.parameters()) == expected


@pytest.mark.parametrize("in_channels, num_classes", [(1, 10), (3, 100)])
def test_parameter_count_other_shapes(in_channels, num_classes):
    for shortcut in ("A", "B"):
        model = ResNet20(num_classes, in_channels, shortcut=shortcut)
        assert model.parameter_count() == analytic_count(in_channels, num_classes, shortcut)


def test_structure_20_weighted_layers():
    model = ResNet20()
    convs3 = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)
              and m.kernel_size == (3, 3)]
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(convs3) + len(linears) == 20
    assert [m.out_channels for m in convs3] == [16] + [16] * 6 + [32] * 6 + [64] * 6


@pytest.mark.parametrize("shortcut", ["A", "B"])
def test_forward_shapes(shortcut):
    model = ResNet20(10, 3, shortcut=shortcut)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 10)


def test_option_a_shortcut_is_subsampled_zero_padded_identity():
    block = BasicBlock(16, 32, stride=2, shortcut="A")
    x = torch.randn(2, 16, 8, 8)
    manual = torch.zeros(2, 32, 4, 4)
    manual[:, 8:24] = x[:, :, 0::2, 0::2]
    torch.testing.assert_close(block._shortcut(x), manual)
    # With the residual branch switched off (zero BN scale) the block is ReLU(shortcut).
    with torch.no_grad():
        block.bn2.weight.zero_()
        block.bn2.bias.zero_()
    block.eval()
    torch.testing.assert_close(block(x), torch.relu(manual))
    assert sum(p.numel() for p in block.shortcut.parameters()) == 0


@pytest.mark.slow
def test_accepts_image_batches_from_the_dataset():
    ds = DigitsGraphs(split="test", graph=None)
    batch = next(iter(DataLoader(ds, batch_size=4)))
    model = ResNet20(num_classes=10, in_channels=1).eval()
    out = model(batch)
    assert out.shape == (4, 10)
    torch.testing.assert_close(out, model(batch.image))


@pytest.mark.slow
def test_trains_on_digits(one_thread):
    torch.manual_seed(0)
    ds = DigitsGraphs(split="train", graph=None)
    images, labels = ds.graph_batch(range(64)).image, ds.labels[:64]
    model = ResNet20(num_classes=10, in_channels=1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_repr_and_bad_input():
    assert str(ResNet20()) == "ResNet20(num_classes=10, in_channels=3)"
    assert str(ResNet20(100, 1, "B")) == "ResNet20(num_classes=100, in_channels=1, shortcut='B')"
    with pytest.raises(ValueError, match="shortcut"):
        ResNet20(shortcut="C")
    with pytest.raises(ValueError, match="num_classes"):
        ResNet20(0)
    model = ResNet20()
    with pytest.raises(ValueError, match=r"\[B, 3, H, W\]"):
        model(torch.randn(2, 1, 8, 8))
    with pytest.raises(TypeError, match="image"):
        model([1, 2])


@pytest.mark.parametrize("kwargs, error, arg", [
    ({"num_classes": True}, TypeError, "num_classes"),
    ({"shortcut": "C"}, ValueError, "shortcut"),
])
def test_bad_arguments_name_the_argument(kwargs, error, arg):
    with pytest.raises(error, match=rf"ResNet20.*{arg}|{arg}.*ResNet20"):
        ResNet20(**kwargs)
