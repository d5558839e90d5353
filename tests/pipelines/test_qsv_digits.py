"""The tour's QSV pipeline (quest_geometric.pipelines.qsv_digits): three same-size models, the
baseline content-free, the table recomputed from the returned models, bad arguments."""
import csv
import json

import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn.conv import TransformerConv
from torch_geometric.transforms import Compose
from torch_geometric.utils import degree

from quest_geometric.datasets import DigitsGraphs
from quest_geometric.pipelines import qsv_digits
from quest_geometric.transforms import AppendPosition, ImageToSphere

GRAPH = Compose([ImageToSphere(sizes=(16, 64), k=8, k_cross=2), AppendPosition()])


def sphere_batch(n=4, seed=0):
    images = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
    return Batch.from_data_list([GRAPH(Data(image=images[i], y=torch.tensor([i])))
                                 for i in range(n)])


def test_models_are_the_same_size_and_differ_only_in_attention():
    models = qsv_digits.build_models(4, 10, seed=3)
    assert list(models) == list(qsv_digits.VARIANTS) == ["qsv", "standard_attention", "uniform"]
    n = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    assert n["uniform"] == n["qsv"] and abs(n["standard_attention"] - n["qsv"]) <= 0.05 * n["qsv"]
    # QSV and its baseline start from the same weights: only the attention rule differs
    a, b = models["qsv"].state_dict(), models["uniform"].state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    control = models["standard_attention"]
    assert not control.qsv_layers()
    assert len([m for m in control.modules() if isinstance(m, TransformerConv)]) == 3


def test_the_baseline_is_content_free():
    """Every weight of the uniform model is 1 / in-degree of its target, whatever the input;
    the QSV model's weights depend on it (so the check can fail)."""
    models = qsv_digits.build_models(4, 10)
    for seed in (0, 1):
        batch = sphere_batch(seed=seed)
        indeg = degree(batch.edge_index[1], batch.num_nodes)
        for name, model in models.items():
            if name == "standard_attention":
                continue
            model.eval()
            _, att = model(batch, return_attention_weights=True)
            assert len(att) == 3
            for edge_index, alpha in att:
                uniform = (1.0 / indeg[edge_index[1]]).unsqueeze(-1).expand_as(alpha)
                if name == "uniform":
                    torch.testing.assert_close(alpha, uniform)
                else:
                    assert (alpha - uniform).abs().max() > 1e-3


@pytest.mark.parametrize("kwargs, exc, arg", [
    (dict(out_dir=None), TypeError, "out_dir"),
    (dict(epochs=0), ValueError, "epochs"),
    (dict(epochs=1.5), TypeError, "epochs"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(device="nowhere"), ValueError, "device"),
])
def test_bad_arguments_name_the_argument(tmp_path, kwargs, exc, arg):
    args = {"out_dir": tmp_path, "progress": False, **kwargs}
    with pytest.raises(exc, match=f"^qsv_digits.run: '{arg}'"):
        qsv_digits.run(**args)
    assert not any(tmp_path.iterdir())  # refused before any work


@pytest.mark.slow
def test_table_is_recomputed_from_the_returned_models(tmp_path, one_thread):
    result = qsv_digits.run(tmp_path, progress=False, epochs=1)
    rows = result["rows"]
    assert [r["variant"] for r in rows] == list(qsv_digits.VARIANTS)
    # the reference: the split built anew, every graph's prediction counted in plain batches
    splits = {s: DigitsGraphs(split=s, graph=GRAPH) for s in ("train", "test")}
    for row in rows:
        model = result["models"][row["variant"]].eval()
        assert row["params"] == sum(p.numel() for p in model.parameters())
        for split, column in (("test", "test_acc"), ("train", "train_acc")):
            data = splits[split]
            correct = 0
            with torch.no_grad():
                for batch in DataLoader([data[i] for i in range(len(data))], batch_size=100):
                    correct += int((model(batch).argmax(-1) == batch.y).sum())
            assert row[column] == pytest.approx(100.0 * correct / len(data)), (row, split)
        assert 20.0 < row["test_acc"] <= 100.0  # it learned something in one epoch (chance: 10)
    with open(tmp_path / "qsv_digits.csv") as f:
        table = list(csv.DictReader(f))
    assert [float(r["test_acc"]) for r in table] == pytest.approx([r["test_acc"] for r in rows])
    meta = json.loads((tmp_path / "qsv_digits.json").read_text())["meta"]
    assert meta["epochs"] == 1 and meta["seed"] == 0 and result["config"]["epochs"] == 1
    md = (tmp_path / "qsv_digits.md").read_text()
    assert result["markdown"] == md and "| test acc (%) | train acc (%) |" in md
    assert "_ms" not in md and "time" not in md.split("\n\n- ")[0]  # no timing columns
    assert len(result["summary"]) == 1 and all(v in result["summary"][0]
                                               for v in qsv_digits.VARIANTS)
