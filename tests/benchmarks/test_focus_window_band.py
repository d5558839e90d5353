"""The window-band benchmark's variants attend as the window plus sinks' definition."""
import importlib

import torch


def test_every_variant_equals_the_dense_window_plus_sinks(tmp_path):
    wb = importlib.import_module("benchmarks.focus.window_band")
    n, w, s = 90, 13, 4
    q, k, v = (x.double() for x in wb.inputs(n, seed=2))
    i = torch.arange(n)
    mask = (i[:, None] >= i[None]) & ((i[:, None] - i[None] <= w) | (i[None] < s))
    sc = torch.einsum("ihd,jhd->hij", q, k) * q.size(-1) ** -0.5
    want = torch.einsum("hij,jhd->ihd", torch.softmax(sc.masked_fill(~mask, float("-inf")), -1),
                        v)
    torch.testing.assert_close(wb.chunk_loop(q, k, v, w, s), want, atol=1e-12, rtol=1e-12)
    for name, fn in wb.variants(n, w, s, seed=2).items():
        if name != "causal sdpa":
            torch.testing.assert_close(fn().double(), want, atol=1e-5, rtol=1e-5, msg=name)
    before = torch.get_num_threads()
    out = wb.run(64, [9], [1], rounds=1, out_dir=tmp_path)
    assert torch.get_num_threads() == before
    assert [r["variant"] for r in out["rows"]] == ["causal sdpa", "chunk loop", "blocks",
                                                   "blocks, chunks", "blocks, general band"]
    assert out["rows"][0]["speedup"] == 1.0 and out["rows"][2]["max_abs_diff"] < 1e-5
    assert (tmp_path / "focus_window_band.md").is_file()
