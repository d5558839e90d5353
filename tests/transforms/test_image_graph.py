"""What ImageToSphere and ImageToLattice share (quest_geometric.transforms._image_graph):
the batch call, input checks and forms, the functional names and the repr."""
import pytest
import torch
from torch_geometric.data import Batch, Data

from quest_geometric.transforms.image_to_lattice import ImageToLattice
from quest_geometric.transforms.image_to_sphere import ImageToSphere

SIZES = (16, 48, 120)  # small template for fast tests


@pytest.mark.parametrize("cls", ["sphere", "lattice"])
def test_batch_call_matches_single_calls(cls):
    t = ImageToSphere(SIZES, k=4, k_cross=2) if cls == "sphere" else ImageToLattice(k=4)
    images, y = torch.rand(3, 2, 10, 12), torch.tensor([1, 5, 2])
    single = [t(Data(image=images[b], y=y[b:b + 1])) for b in range(3)]
    as_list = t.batch_call(images, y)
    for a, b in zip(single, as_list):
        for key in a.keys():
            assert torch.allclose(a[key], b[key]) if key == "x" else torch.equal(a[key], b[key])
    fast = t.batch_call(images, y, as_batch=True)
    ref = Batch.from_data_list(single)
    assert set(fast.keys()) == set(ref.keys()) and fast.num_graphs == 3
    for key in ref.keys():
        assert torch.allclose(fast[key], ref[key]) if key == "x" else torch.equal(
            fast[key], ref[key])
    for a, b in zip(fast.to_data_list(), single):
        assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)
    with pytest.raises(ValueError, match="'images'"):
        t.batch_call(images[0])


def test_image_errors_and_repr():
    t = ImageToSphere(SIZES, k=4, k_cross=2)
    with pytest.raises(ValueError, match="'image'"):
        t(torch.rand(1, 3, 8, 8))
    with pytest.raises(ValueError, match="'image'"):
        t(torch.rand(8, 8))
    with pytest.raises(ValueError, match="'data.image'"):
        t(Data(image=torch.rand(8, 8)))
    with pytest.raises(ValueError, match="'image'"):
        t(Data(x=torch.rand(3, 2)))
    with pytest.raises(ValueError, match="^ImageToSphere: 'image' must be finite, got NaN or "
                       "infinite entries$"):
        t(torch.full((1, 4, 4), float("nan")))
    with pytest.raises(TypeError, match="^ImageToSphere: 'data' must be a .* got list"):
        t([[1.0]])
    with pytest.raises(ValueError, match="'projection'"):
        ImageToSphere(projection="mercator")
    with pytest.raises(ValueError, match="'padding_mode'"):
        ImageToSphere(SIZES, k=4, padding_mode="wrap")
    with pytest.raises(ValueError, match="'k'"):
        ImageToSphere((4, 40), k=4)
    with pytest.raises(ValueError, match="'image'"):
        ImageToLattice()(torch.rand(2, 1, 4, 4))
    assert str(ImageToSphere()) == ("ImageToSphere(sizes=(64, 256, 1024), k=12, k_cross=4, "
                                    "projection='stereographic', cap=90)")
    assert str(ImageToSphere(SIZES, k=4, k_cross=2, projection="equal_area",
                             padding_mode="border")) == (
        "ImageToSphere(sizes=(16, 48, 120), k=4, k_cross=2, projection='equal_area', "
        "cap=180, padding_mode='border')")
    assert str(ImageToLattice(k=4)) == "ImageToLattice(k=4)"


def test_functional_datapipe_registration():
    """`@functional_transform` registers each transform as a PyG datapipe method."""
    iterable = pytest.importorskip("torch.utils.data.datapipes.iter")
    from quest_geometric.transforms import ImageToLattice, ImageToSphere

    images = [torch.rand(1, 6, 6) for _ in range(3)]
    pipe = iterable.IterableWrapper(images).image_to_sphere(sizes=(12, 24), k=4, k_cross=2)
    direct = ImageToSphere(sizes=(12, 24), k=4, k_cross=2)
    for got, image in zip(pipe, images):
        want = direct(image)
        assert torch.equal(got.x, want.x) and torch.equal(got.edge_index, want.edge_index)
    lattice = list(iterable.IterableWrapper(images).image_to_lattice(k=4))
    assert torch.equal(lattice[0].x, ImageToLattice(k=4)(images[0]).x)


@pytest.mark.parametrize("cls", ["sphere", "lattice"])
def test_uint8_images_are_rescaled_to_unit_range(cls):
    t = ImageToSphere(SIZES, k=4, k_cross=2) if cls == "sphere" else ImageToLattice(k=4)
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(0, 256, (3, 2, 9, 9), generator=g, dtype=torch.uint8)
    for b in range(3):
        torch.testing.assert_close(t(raw[b]).x, t(raw[b].float() / 255.0).x)
    batch = t.batch_call(raw, as_batch=True)
    torch.testing.assert_close(batch.x, t.batch_call(raw.float() / 255.0, as_batch=True).x)
    assert float(batch.x.max()) <= 1.0 and float(batch.x.min()) >= 0.0
    for dtype in (torch.int64, torch.int16, torch.bool):
        where = type(t).__name__
        with pytest.raises(TypeError, match=f"^{where}: 'image' must be a floating-point or "
                           f"uint8 image .*got a {dtype} tensor"):
            t(raw[0].to(dtype))
        with pytest.raises(TypeError, match=rf"^{where}\.batch_call: 'images' must be a "
                           f"floating-point or uint8 image .*got a {dtype} tensor"):
            t.batch_call(raw.to(dtype))


@pytest.mark.parametrize("cls", ["sphere", "lattice"])
def test_channels_last_and_batched_input_say_what_to_call(cls):
    t = ImageToSphere(SIZES, k=4, k_cross=2) if cls == "sphere" else ImageToLattice(k=4)
    image = torch.rand(3, 12, 10)
    with pytest.raises(ValueError, match=r"channels-last.*permute\(2, 0, 1\)"):
        t(image.permute(1, 2, 0))
    with pytest.raises(ValueError, match=r"channels-last.*permute\(2, 0, 1\)"):
        t(Data(image=image.permute(1, 2, 0)))
    with pytest.raises(ValueError, match=r"batch \[B, C, H, W\].*batch_call"):
        t(image[None])
    gray = image[0]
    with pytest.raises(ValueError, match=r"shape \[12, 10\].*\[H, W\].*pass image\[None\]"):
        t(gray)
    with pytest.raises(ValueError, match=r"\[H, W\].*pass data\.image\[None\]"):
        t(Data(image=gray))
    with pytest.raises(ValueError, match=r"channels-last.*permute\(0, 3, 1, 2\)"):
        t.batch_call(image.permute(1, 2, 0)[None])
    with pytest.raises(ValueError, match=r"unsqueeze\(0\)"):
        t.batch_call(image)
    # the suggested calls work and give the same graph
    torch.testing.assert_close(t(image.permute(1, 2, 0).permute(2, 0, 1)).x, t(image).x)
    torch.testing.assert_close(t.batch_call(image[None])[0].x, t(image).x)
    torch.testing.assert_close(t(gray[None]).x, t(image[:1]).x)
