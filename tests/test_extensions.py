"""The optional compiled extensions against the built-in paths.

CI installs torch-cluster and torch-scatter (``.[ext]``) and these tests then run; elsewhere
they skip cleanly.  The torch-cluster kNN back-end is compared with SciPy and the exact
PyTorch back-end in ``test_geometry.py``; here torch-scatter's segment softmax and sum serve
as an independent reference for :class:`QSVConv`'s general (scatter) path.
"""
import os

import pytest
import torch

from quest_geometric.nn import QSVConv
from quest_geometric.quaternion import to_rotation_matrix
from quest_geometric.typing import WITH_TORCH_CLUSTER, WITH_TORCH_SCATTER


@pytest.mark.skipif(
    os.environ.get("CI", "").lower() != "true",
    reason="runs in CI only (CI=true), which must have torch-cluster and torch-scatter; "
           "elsewhere they are optional: install them with "
           "`pip install --no-build-isolation -e \".[ext]\"` in the repository's root")
def test_ci_has_the_extensions():
    assert WITH_TORCH_CLUSTER and WITH_TORCH_SCATTER, (
        "CI installs '.[ext]': torch-cluster and torch-scatter must import "
        "(see quest_geometric.typing.UNAVAILABLE_REASON)"
    )


def _random_graph(n=30, e=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (e,), generator=g)
    dst = torch.randint(0, n - 3, (e,), generator=g)  # the last nodes stay isolated
    return torch.stack([src, dst])


@pytest.mark.skipif(not WITH_TORCH_SCATTER,
                    reason="torch-scatter not installed; install it with "
                           "`pip install --no-build-isolation -e \".[ext]\"` in the "
                           "repository's root (a source build, about 10 minutes)")
@pytest.mark.parametrize("transport", [True, False])
@pytest.mark.slow
def test_qsvconv_scatter_path_equals_torch_scatter_reference(transport):
    import torch_scatter

    torch.manual_seed(0)
    n, heads, channels = 30, 2, 16
    conv = QSVConv(channels, channels, heads=heads, transport=transport, bias=False).double()
    x = torch.randn(n, channels, dtype=torch.float64)
    ei = _random_graph(n)
    src, dst = ei

    q = conv.quaternions(x)  # [N, H, 4]
    logit = (q[dst] * q[src]).sum(-1)  # Re(conj(q_i) q_j)
    alpha = torch_scatter.scatter_softmax(logit, dst, dim=0)  # [E, H]
    xj = x[src].view(-1, heads, channels // (4 * heads), 4)
    if transport:
        r = to_rotation_matrix(q)  # [N, H, 3, 3]
        rel = r[dst].transpose(-1, -2) @ r[src]  # R(q_i)^T R(q_j) per edge
        vec = torch.einsum("ehab,ehmb->ehma", rel, xj[..., 1:])
        xj = torch.cat([xj[..., :1], vec], dim=-1)
    msg = (alpha[:, :, None, None] * xj).reshape(-1, channels)
    expected = torch_scatter.scatter_add(msg, dst, dim=0, dim_size=n)

    out = conv(x, ei, dense=False)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    assert torch.all(out[-3:] == 0)
