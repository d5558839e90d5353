"""Every script in examples/ runs with --quick and prints what it promises."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(name, *args, timeout=240):
    # One thread: on a shared, loaded CPU, PyTorch's default thread pool makes these small
    # workloads tens of times slower (the threads wait on each other).
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), "--quick", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_every_example_is_tested_and_listed():
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    tested = re.findall(r'run_example\("([^"]+\.py)"', Path(__file__).read_text())
    assert set(scripts) == set(tested), (scripts, tested)
    readme = (EXAMPLES / "README.md").read_text()
    assert all(s in readme for s in scripts)


@pytest.mark.slow
def test_first_model_learns():
    out = run_example("first_model.py")
    assert "QSVConv(4, 32, heads=2)" in out  # pixel value + 3 position features, projected
    losses = [tuple(map(float, m)) for m in
              re.findall(r"loss first steps ([0-9.]+), last steps ([0-9.]+)", out)]
    assert len(losses) == 2  # --quick: two epochs
    # The loss falls well below chance level (ln 10 = 2.30) and the test accuracy is far
    # above chance (0.1); 3 seeds gave 1.15-1.32 and 0.61-0.70 at the time of writing.
    assert losses[-1][1] < 1.8 < losses[0][0]
    acc = float(re.search(r"final test accuracy ([0-9.]+) on 360 digits", out).group(1))
    assert acc >= 0.4, out


@pytest.mark.slow
def test_qsv_conv_in_your_model():
    out = run_example("qsv_conv_in_your_model.py")
    assert "QSVConv(32, 32, heads=2, quaternion='node'" in out
    acc = float(re.search(r"test accuracy ([0-9.]+) on 128 digits", out).group(1))
    assert 0.0 <= acc <= 1.0


@pytest.mark.slow
def test_images_to_sphere_graphs(tmp_path):
    fig = tmp_path / "digit.png"
    out = run_example("images_to_sphere_graphs.py", "--figure", str(fig))
    # sizes (16, 64), k = 8, k_cross = 4: 80 nodes, 12 in-edges each
    assert "stereographic:    80 nodes,    960 edges, in-degree 12..12" in out
    assert "equals the per-image transform: True" in out
    assert fig.stat().st_size > 0


@pytest.mark.slow
def test_compose_focus_gpt2():
    pytest.importorskip("transformers")
    out = run_example("compose_focus_gpt2.py")
    # 2 layers * (d * d_g + K * d_g) = 2 * (32 * 16 + 4 * 16)
    assert "1,152 trainable router parameters" in out
    assert "Focus off equals the original model: True" in out
    assert re.search(r"Focus hard, top-2 of 4\s+[0-9.]+", out)


@pytest.mark.slow
def test_probe_qk_geometry():
    out = run_example("probe_qk_geometry.py")
    rows = re.findall(r"^blocks\.(\d)\.attn\s+(\d|mean)\s+([0-9.]+)\s+([0-9.]+)", out, re.M)
    assert len(rows) == 2 * 3  # 2 layers x (2 heads + the layer mean)
    for _, _, pr_q, pr_k in rows:  # a participation ratio lies in [1, head_dim = 16]
        assert 1.0 <= float(pr_q) <= 16.0 and 1.0 <= float(pr_k) <= 16.0
    assert "layers with PR_Q > PR_K at the end:" in out
