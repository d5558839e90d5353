"""Tests of quest_geometric.transforms.image_to_sphere: the projections and ImageToSphere."""
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

import quest_geometric.transforms.image_to_sphere as sphere_mod
from quest_geometric.geometry.graphs import sphere_graph
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
    assert not ImageToSphere(SIZES, k=4, k_cross=2,
                             projection="equal_area").template().outside.any()
    with pytest.raises(ValueError, match="'fill_value'"):
        ImageToSphere(SIZES, k=4, k_cross=2, fill_value=float("nan"))
    with pytest.raises(ValueError, match="'fill_value'"):
        ImageToSphere(SIZES, k=4, k_cross=2, fill_value=1.0, padding_mode="border")
