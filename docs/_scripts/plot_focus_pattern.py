"""Draws the figure of the Focus page: a hard Focus attention pattern and its groups.

Run from the repository root:

    python docs/_scripts/plot_focus_pattern.py

Writes ``docs/_static/focus_pattern.png``. The hidden states are a fixed random embedding of
the characters of a sentence (equal characters get equal states), routed
by an untrained :class:`~quest_geometric.nn.focus.router.FocusRouter` (K = 4, top-k = 1,
prefix-causal Sinkhorn); the mask is built by
:func:`~quest_geometric.nn.focus.edge_index.focus_edge_index` with window w = 8.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from quest_geometric.nn.focus import FocusRouter, focus_edge_index  # noqa: E402

STATIC = Path(__file__).resolve().parents[1] / "_static"
TEXT = ("Focus keeps a local window and lets each token attend far back only "
        "to tokens that share its group.")[:96]
K, TOP_K, WINDOW, DIM = 4, 1, 8, 32
GROUP_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"]


def focus_pattern(seed: int = 0):
    """The router output and the dense [T, T] picture of the hard mask: 0 masked, 1 local
    window, 2 + g a distant pair allowed because both tokens are in group g. (The prefix-causal
    balancing also depends on the prefix, so equal characters usually, not always, share a
    group.)"""
    torch.manual_seed(seed)
    vocab = sorted(set(TEXT))
    table = torch.randn(len(vocab), DIM)
    h = table[torch.tensor([vocab.index(c) for c in TEXT])]  # [T, DIM]
    router = FocusRouter(DIM, num_groups=K, group_dim=16, top_k=TOP_K, causal=True).eval()
    with torch.no_grad():
        out = router(h)
    edge_index = focus_edge_index(out.groups, WINDOW)
    t = len(TEXT)
    img = np.zeros((t, t), dtype=np.int64)
    src, dst = edge_index.numpy()
    near = dst - src <= WINDOW
    img[dst[near], src[near]] = 1
    g = out.groups[:, 0].numpy()
    img[dst[~near], src[~near]] = 2 + g[dst[~near]]
    return out, img


def main() -> Path:
    out, img = focus_pattern()
    t = img.shape[0]
    kept = (img > 0).sum() / (t * (t + 1) / 2)
    g = out.groups[:, 0].numpy()
    cmap = ListedColormap(["white", "0.6"] + GROUP_COLORS)
    gcmap = ListedColormap(GROUP_COLORS)
    fig = plt.figure(figsize=(13, 6.6))
    grid = fig.add_gridspec(2, 3, width_ratios=[1.0, 0.04, 0.5], height_ratios=[0.04, 1.0],
                            wspace=0.04, hspace=0.03)
    ax0 = fig.add_subplot(grid[1, 0])
    ax_top = fig.add_subplot(grid[0, 0], sharex=ax0)
    ax_side = fig.add_subplot(grid[1, 1], sharey=ax0)
    ax1 = fig.add_subplot(grid[1, 2])
    ax0.imshow(img, cmap=cmap, vmin=0, vmax=len(GROUP_COLORS) + 1, interpolation="nearest",
               aspect="auto")
    ax0.set_xlabel("key position j")
    ax0.set_ylabel("query position i")
    ax_top.imshow(g[None, :], cmap=gcmap, vmin=0, vmax=K - 1, aspect="auto",
                  interpolation="nearest")
    ax_top.set_axis_off()
    ax_top.set_title(f"Hard Focus mask: T = {t}, K = {K}, top-k = {TOP_K}, window w = {WINDOW}; "
                     f"{100 * kept:.0f}% of the causal pairs kept\n"
                     f"grey: local window (i - j <= w); colour: distant pair sharing a group; "
                     f"strips: each token's group", fontsize=10)
    ax_side.imshow(g[:, None], cmap=gcmap, vmin=0, vmax=K - 1, aspect="auto",
                   interpolation="nearest")
    ax_side.set_axis_off()
    soft = out.soft.numpy()
    ax1.imshow(soft, aspect="auto", cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
    ax1.set_xticks(range(K))
    ax1.set_xticklabels([f"{k}\n({int((g == k).sum())})" for k in range(K)])
    for k, lab in enumerate(ax1.get_xticklabels()):
        lab.set_color(GROUP_COLORS[k])
    ax1.set_xlabel("group k (tokens in it)")
    step = 3
    ax1.yaxis.tick_right()
    ax1.set_yticks(range(0, t, step))
    ax1.set_yticklabels([f"{i} {TEXT[i]!r}" for i in range(0, t, step)], fontsize=6.5)
    ax1.set_title("Soft memberships g_i (prefix-causal Sinkhorn);\n"
                  "token 0 is uniform, later tokens near one-hot", fontsize=10)
    STATIC.mkdir(parents=True, exist_ok=True)
    path = STATIC / "focus_pattern.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(main())
