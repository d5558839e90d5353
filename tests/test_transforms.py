"""Tests of quest_geometric.transforms: ImageToSphere and ImageToLattice."""
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader

import quest_geometric.transforms.image_to_lattice as lattice_mod
import quest_geometric.transforms.image_to_sphere as sphere_mod
from quest_geometric.geometry.graphs import lattice_graph, sphere_graph
from quest_geometric.transforms.image_to_lattice import ImageToLattice
from quest_geometric.transforms.image_to_sphere import ImageToSphere, project_to_image

SIZES = (16, 48, 120)  # small template for fast tests


def expected_grid(pos, projection, cap):
    """Projection written from the geometric definitions, independently of the library."""
    p = pos.double().numpy()
    u = p / np.linalg.norm(p, axis=1, keepdims=True)
    theta = np.arccos(np.clip(u[:, 2], -1, 1))
    phi = np.arctan2(u[:, 1], u[:, 0])
    tc = math.radians(cap)
    if projection == "stereographic":
        rho, rho_c = np.tan(theta / 2), math.tan(tc / 2)
    else:
        rho, rho_c = 2 * np.sin(theta / 2), 2 * math.sin(tc / 2)
    return np.stack([rho * np.cos(phi), -rho * np.sin(phi)], 1) / rho_c


def pixel_coords(g, h, w, align_corners):
    if align_corners:
        return (g[:, 0] + 1) / 2 * (w - 1), (g[:, 1] + 1) / 2 * (h - 1)
    return ((g[:, 0] + 1) * w - 1) / 2, ((g[:, 1] + 1) * h - 1) / 2


# ------------------------------------------------------------------------- projections
@pytest.mark.parametrize("projection,cap", [("stereographic", 90.0), ("stereographic", 60.0),
                                            ("equal_area", 180.0), ("equal_area", 120.0)])
def test_project_to_image_matches_definition(projection, cap):
    pos = sphere_graph(SIZES, 4, 2).pos
    g = project_to_image(pos, projection, cap).numpy()
    np.testing.assert_allclose(g, expected_grid(pos, projection, cap), atol=1e-6)


def test_projection_geometry():
    # The boundary of the cap lands on the unit circle; the pole in the centre.
    for projection, cap in [("stereographic", 90.0), ("equal_area", 179.0),
                            ("equal_area", 70.0)]:
        t = math.radians(cap)
        ring = torch.tensor([[math.sin(t) * math.cos(a), math.sin(t) * math.sin(a),
                              math.cos(t)] for a in np.linspace(0, 6, 7)],
                            dtype=torch.float64)
        g = project_to_image(torch.cat([ring, ring.new_tensor([[0.0, 0.0, 2.0]])]),
                             projection, cap)
        assert torch.allclose(g[:-1].norm(dim=1), torch.ones(7, dtype=torch.float64),
                              atol=1e-5)
        assert torch.allclose(g[-1], torch.zeros(2, dtype=torch.float64))
    # Equal-area: uniform points on the whole sphere fill the unit disc uniformly, so a
    # quarter of them land within radius 1/2.
    from quest_geometric.geometry.fibonacci import fibonacci_sphere
    g = project_to_image(fibonacci_sphere(4000), "equal_area", 180.0)
    assert abs((g.norm(dim=1) < 0.5).double().mean().item() - 0.25) < 0.005
    with pytest.raises(ValueError, match="'cap'"):
        project_to_image(torch.ones(1, 3), "stereographic", 180.0)
    with pytest.raises(ValueError, match="'projection'"):
        project_to_image(torch.ones(1, 3), "mercator")


# ------------------------------------------------------------------------- ImageToSphere
@pytest.mark.parametrize("projection", ["stereographic", "equal_area"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_linear_ramp_is_sampled_exactly(projection, align_corners):
    h, w = 24, 32
    ii, jj = torch.meshgrid(torch.arange(h, dtype=torch.float64),
                            torch.arange(w, dtype=torch.float64), indexing="ij")
    image = torch.stack([0.5 * jj - 0.25 * ii + 3.0, 2.0 * ii + 0.1 * jj])  # [2, H, W]
    t = ImageToSphere(SIZES, k=4, k_cross=2, projection=projection,
                      align_corners=align_corners)
    data = t(image)
    g = expected_grid(data.pos, projection, t.cap)
    jf, if_ = pixel_coords(g, h, w, align_corners)
    inside = (jf >= 0) & (jf <= w - 1) & (if_ >= 0) & (if_ <= h - 1)
    assert inside.sum() > len(g) // 4
    expected = np.stack([0.5 * jf - 0.25 * if_ + 3.0, 2.0 * if_ + 0.1 * jf], 1)
    np.testing.assert_allclose(data.x.numpy()[inside], expected[inside], atol=1e-9)
    # In the image square but beyond the outermost pixel centres: the border value (no
    # blending with the zero padding); outside the square: exactly zero.
    square = (np.abs(g) <= 1).all(1)
    jc, ic = np.clip(jf, 0, w - 1), np.clip(if_, 0, h - 1)
    clamped = np.stack([0.5 * jc - 0.25 * ic + 3.0, 2.0 * ic + 0.1 * jc], 1)
    np.testing.assert_allclose(data.x.numpy()[square], clamped[square], atol=1e-9)
    assert (data.x.numpy()[~square] == 0).all()
    assert data.x.dtype == torch.float64 and data.x.shape == (sum(SIZES), 2)


def test_constant_image_and_padding():
    image = torch.full((3, 20, 20), 0.7)
    # equal-area on the whole sphere: every node inside the image disc
    x = ImageToSphere(SIZES, k=4, k_cross=2, projection="equal_area")(image).x
    assert torch.allclose(x, torch.full_like(x, 0.7))
    # stereographic hemisphere, zero padding: constant inside, zero far outside
    t = ImageToSphere(SIZES, k=4, k_cross=2, projection="stereographic")
    data = t(image)
    g = np.abs(expected_grid(data.pos, "stereographic", 90.0)).max(1)
    inside, outside = torch.from_numpy(g < 1 - 0.1), torch.from_numpy(g > 1 + 0.1)
    assert inside.any() and outside.any()
    assert torch.allclose(data.x[inside], torch.full_like(data.x[inside], 0.7))
    assert torch.equal(data.x[outside], torch.zeros_like(data.x[outside]))
    # border padding: constant everywhere
    x = ImageToSphere(SIZES, k=4, k_cross=2, padding_mode="border")(image).x
    assert torch.allclose(x, torch.full_like(x, 0.7))


def test_output_form_y_kept_and_input_untouched():
    t = ImageToSphere(SIZES, k=4, k_cross=2)
    image = torch.rand(3, 16, 16)
    data = Data(image=image, y=torch.tensor([7]), name="a")
    out = t(data)
    graph = sphere_graph(SIZES, 4, k_cross=2)
    assert torch.equal(out.edge_index, graph.edge_index)
    assert torch.equal(out.pos, graph.pos) and torch.equal(out.shell, graph.shell)
    assert out.x.shape == (sum(SIZES), 3)
    assert torch.equal(out.y, torch.tensor([7])) and out.name == "a"
    assert "image" not in out
    assert set(data.keys()) == {"image", "y", "name"} and data.image is image
    assert torch.equal(t(image).x, out.x)
    # outputs are copies: modifying one in place leaves the template intact
    out.pos.add_(1.0)
    assert torch.equal(t(image).pos, graph.pos)


def test_dataloader_batching():
    t = ImageToSphere(SIZES, k=4, k_cross=2)
    images = torch.rand(2, 1, 12, 12)
    data_list = [t(Data(image=images[b], y=torch.tensor([b + 3]))) for b in range(2)]
    batch = next(iter(DataLoader(data_list, batch_size=2)))
    n, e = sum(SIZES), data_list[0].edge_index.size(1)
    assert torch.equal(batch.y, torch.tensor([3, 4]))
    assert torch.equal(batch.edge_index[:, e:], data_list[1].edge_index + n)
    assert torch.equal(batch.edge_index[:, :e], data_list[0].edge_index)
    assert torch.equal(batch.x, torch.cat([d.x for d in data_list]))
    assert torch.equal(batch.batch, torch.arange(2).repeat_interleave(n))


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


def test_sphere_template_built_once(monkeypatch):
    calls = []
    original = sphere_mod._build_sphere_template

    def counting(config):
        calls.append(config)
        return original(config)

    monkeypatch.setattr(sphere_mod, "_build_sphere_template", counting)
    sphere_mod._sphere_template.cache_clear()
    t = ImageToSphere((10, 30), k=3, k_cross=2, projection="equal_area")
    images = torch.rand(256, 3, 32, 32)
    for b in range(256):
        t(images[b])
    ImageToSphere((10, 30), k=3, k_cross=2, projection="equal_area")(images[0])
    t.batch_call(images[:4])
    assert len(calls) == 1
    ImageToSphere((10, 30), k=3, k_cross=2, projection="stereographic")(images[0])
    assert len(calls) == 2
    sphere_mod._sphere_template.cache_clear()


def test_lattice_template_built_once(monkeypatch):
    calls = []
    original = lattice_mod._build_lattice_template
    monkeypatch.setattr(lattice_mod, "_build_lattice_template",
                        lambda c: calls.append(c) or original(c))
    lattice_mod._lattice_template.cache_clear()
    t = ImageToLattice(k=4)
    for _ in range(50):
        t(torch.rand(1, 9, 11))
    assert len(calls) == 1
    t(torch.rand(1, 11, 9))
    assert len(calls) == 2
    lattice_mod._lattice_template.cache_clear()


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
    with pytest.raises(ValueError, match="non-finite"):
        t(torch.full((1, 4, 4), float("nan")))
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


# ------------------------------------------------------------------------- ImageToLattice
def test_image_to_lattice():
    image = torch.rand(2, 5, 6)
    data = ImageToLattice(k=8)(Data(image=image, y=torch.tensor([1])))
    graph = lattice_graph(5, 6, 8)
    for i in range(5):
        for j in range(6):
            node = i * 6 + j
            assert torch.equal(data.x[node], image[:, i, j])
            assert data.pos[node].tolist() == [j, i, 0]
    assert torch.equal(data.edge_index, graph.edge_index)
    assert torch.equal(data.shell, torch.zeros(30, dtype=torch.long))
    assert torch.equal(data.y, torch.tensor([1]))
    batch = next(iter(DataLoader([data, data], batch_size=2)))
    assert torch.equal(batch.edge_index[:, 240:], data.edge_index + 30)
    assert torch.equal(batch.y, torch.tensor([1, 1]))


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


# ------------------------------------------------------------------------- input forms
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
        with pytest.raises(ValueError, match="'image' has dtype"):
            t(raw[0].to(dtype))
        with pytest.raises(ValueError, match="'images' has dtype"):
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
    with pytest.raises(ValueError, match=r"channels-last.*permute\(0, 3, 1, 2\)"):
        t.batch_call(image.permute(1, 2, 0)[None])
    with pytest.raises(ValueError, match=r"unsqueeze\(0\)"):
        t.batch_call(image)
    # the suggested calls work and give the same graph
    torch.testing.assert_close(t(image.permute(1, 2, 0).permute(2, 0, 1)).x, t(image).x)
    torch.testing.assert_close(t.batch_call(image[None])[0].x, t(image).x)


def test_fill_value_sets_nodes_outside_the_image():
    image = torch.rand(2, 12, 12)
    base = ImageToSphere(SIZES, k=4, k_cross=2)
    filled = ImageToSphere(SIZES, k=4, k_cross=2, fill_value=-1.5)
    outside = base.template().outside
    assert outside.any() and (~outside).any()
    a, b = base(image).x, filled(image).x
    assert torch.equal(a[~outside], b[~outside])
    assert (a[outside] == 0).all() and (b[outside] == -1.5).all()
    g = np.abs(expected_grid(base.template().pos, "stereographic", 90.0)).max(1)
    assert torch.equal(outside, torch.from_numpy(g > 1.0))  # outside = beyond the square
    batch = filled.batch_call(image[None], as_batch=True)
    assert torch.equal(batch.x, b)
    assert "fill_value=-1.5" in repr(filled)
    # the equal-area projection of the whole sphere has no node outside the image disc
    assert not ImageToSphere(SIZES, k=4, k_cross=2, projection="equal_area").template().outside.any()
    with pytest.raises(ValueError, match="'fill_value'"):
        ImageToSphere(SIZES, k=4, k_cross=2, fill_value=float("nan"))
    with pytest.raises(ValueError, match="'fill_value'"):
        ImageToSphere(SIZES, k=4, k_cross=2, fill_value=1.0, padding_mode="border")
