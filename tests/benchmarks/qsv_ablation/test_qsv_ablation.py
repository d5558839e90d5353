"""The QSV ablation study (benchmarks/qsv/ablation_study/): tiny end-to-end runs, aggregation,
paper column, bad input."""
import csv
import json
import math
import statistics

import pytest
import torch
from torch_geometric.data import Data

from benchmarks.qsv import ablation_study as qa
from benchmarks.qsv.ablation import main as ablation_main
from benchmarks.qsv.ablation import summarise
from benchmarks.qsv.ablation_study import report
from quest_geometric.analysis.stats import paired_differences
from quest_geometric.transforms import AppendPosition

TINY = dict(channels=8, heads=2, num_layers=1, train_limit=48, test_limit=24,
            analysis_samples=8, batch_size=16, eval_batch_size=24)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("qsv_ablation")
    threads = torch.get_num_threads()
    try:
        result = qa.run(dataset="digits", seeds=[0, 1], epochs=1, quick=True, out_dir=out,
                        progress=False, analyse=True, variants=["qsv", "resnet20"],
                        threads=1, **TINY)
    finally:
        torch.set_num_threads(threads)
    return out, result


@pytest.mark.slow
def test_files_columns_and_finite_values(tiny_run):
    out, result = tiny_run
    stem = out / "qsv_ablation_digits_quick"
    for suffix in (".csv", ".json", ".md", "_seeds.csv", "_analysis.csv", "_analysis.md",
                   "_entropy.png", "_angles.png"):
        assert (out / f"{stem.name}{suffix}").is_file(), suffix
    assert not (out / "qsv_ablation_digits.csv").exists()  # --quick never overwrites
    with open(f"{stem}.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["variant"] for r in rows] == ["qsv", "resnet20"]
    for col in ("variant", "params", "seeds", "acc_mean", "acc_std", "delta", "paper",
                "paper_delta", "epoch_s"):
        assert col in rows[0]
    for r in rows:
        for col in ("params", "acc_mean", "acc_std", "epoch_s", "paper"):
            assert math.isfinite(float(r[col])), (r["variant"], col)
        assert 0 <= float(r["acc_mean"]) <= 100
    assert float(rows[0]["params"]) < float(rows[1]["params"])  # tiny QSV vs ResNet-20
    md = (out / f"{stem.name}.md").read_text()
    assert "| paper |" in md and "85.9" in md and "93.2" in md
    analysis = json.loads((out / f"{stem.name}_analysis.json").read_text())["rows"]
    assert [a["variant"] for a in analysis] == ["qsv"]
    a = analysis[0]
    assert 0 <= a["entropy_mean"] <= 1 and 0 <= a["angle_median_deg"] <= 180
    assert a["acc_trained"] == pytest.approx(result["rows"][0]["acc_mean"])  # same test set


@pytest.mark.slow
def test_mean_std_recomputed_from_seed_rows(tiny_run):
    out, result = tiny_run
    with open(out / "qsv_ablation_digits_quick_seeds.csv") as f:
        seeds = list(csv.DictReader(f))
    with open(out / "qsv_ablation_digits_quick.csv") as f:
        table = {r["variant"]: r for r in csv.DictReader(f)}
    assert sorted((r["variant"], int(r["seed"])) for r in seeds) == [
        ("qsv", 0), ("qsv", 1), ("resnet20", 0), ("resnet20", 1)]
    for v in ("qsv", "resnet20"):
        accs = [float(r["acc"]) for r in seeds if r["variant"] == v]
        assert float(table[v]["acc_mean"]) == pytest.approx(sum(accs) / 2)
        assert float(table[v]["acc_std"]) == pytest.approx(abs(accs[0] - accs[1]) / math.sqrt(2))
        assert int(table[v]["seeds"]) == 2
    delta = float(table["resnet20"]["acc_mean"]) - float(table["qsv"]["acc_mean"])
    assert float(table["resnet20"]["delta"]) == pytest.approx(delta)
    # Accuracies are multiples of 1/24 of the 24 test images, in percent.
    for r in seeds:
        assert float(r["acc"]) * 24 / 100 == pytest.approx(round(float(r["acc"]) * 24 / 100))


@pytest.mark.slow
def test_resume_reuses_finished_runs(tiny_run):
    out, result = tiny_run
    run_dirs = sorted(p.name for p in result["run_root"].iterdir())
    assert run_dirs == ["qsv_s0", "qsv_s1", "resnet20_s0", "resnet20_s1"]
    for d in run_dirs:
        assert (result["run_root"] / d / "run.json").is_file()
        assert (result["run_root"] / d / "checkpoint.pt").is_file()
    again = qa.run(dataset="digits", seeds=[0], epochs=1, quick=True, out_dir=out,
                   progress=False, variants=["qsv"], **TINY)
    assert again["results"][0]["acc"] == result["results"][0]["acc"]
    assert again["results"][0]["epoch_s"] == result["results"][0]["epoch_s"]  # not retrained


def test_aggregate_against_statistics_and_paper_column():
    accs = {"qsv": [80.0, 84.0, 83.0], "no_transport": [70.0, 75.0, 71.5],
            "standard_attention": [90.0, 88.0, 91.0]}
    results = [{"variant": v, "seed": s, "params": 100, "acc": a, "train_acc": a + 1,
                "epoch_s": 2.0 + s} for v, xs in accs.items() for s, a in enumerate(xs)]
    rows = {r["variant"]: r for r in qa.aggregate(results, "cifar10")}
    assert list(rows) == ["qsv", "no_transport", "standard_attention"]  # VARIANTS order
    for v, xs in accs.items():
        assert rows[v]["acc_mean"] == pytest.approx(statistics.mean(xs))
        assert rows[v]["acc_std"] == pytest.approx(statistics.stdev(xs))
        assert rows[v]["delta"] == pytest.approx(statistics.mean(xs) - statistics.mean(accs["qsv"]))
        assert rows[v]["epoch_s"] == pytest.approx(3.0)
    assert rows["qsv"]["paper"] == 85.9 and rows["standard_attention"]["paper"] == 87.3
    assert math.isnan(rows["no_transport"]["paper"]) and rows["no_transport"]["paper_delta"] == -4.0
    c100 = {r["variant"]: r for r in qa.aggregate(results, "cifar100")}
    assert math.isnan(c100["standard_attention"]["paper"])
    assert math.isnan(c100["standard_attention"]["paper_delta"])
    assert c100["no_transport"]["paper_delta"] == -4.0
    one = qa.aggregate(results[:1], "digits")[0]
    assert one["acc_mean"] == 80.0 and math.isnan(one["acc_std"])  # one seed: no std


def test_append_position_on_a_lattice():
    pos = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]])  # (j, i, 0) of 2 x 2
    data = AppendPosition()(Data(x=torch.ones(4, 1), pos=pos))
    assert data.x.shape == (4, 4)
    expected = torch.tensor([[-1.0, -1, 0], [1, -1, 0], [-1, 1, 0], [1, 1, 0]])
    torch.testing.assert_close(data.x[:, 1:], expected)
    assert str(AppendPosition()) == "AppendPosition()"
    with pytest.raises(ValueError, match="pos"):
        AppendPosition()(Data(x=torch.ones(4, 1)))


def test_append_position_lives_in_transforms_and_matches_normalize_scale():
    from torch_geometric.transforms import NormalizeScale

    pos = torch.randn(30, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    data = Data(x=torch.zeros(30, 2), pos=pos.clone())
    out = AppendPosition()(data)
    assert out.x.shape == (30, 5) and out.x.dtype == torch.float32
    assert torch.equal(out.pos, pos)  # positions unchanged, features appended
    # PyG's NormalizeScale centres and scales the positions the same way, times 0.999999
    ref = NormalizeScale()(Data(pos=pos.clone())).pos / 0.999999
    torch.testing.assert_close(out.x[:, 2:], ref.float())
    assert float(out.x[:, 2:].abs().max()) == pytest.approx(1.0)
    # registered as a PyG datapipe method, like the package's other transforms
    iterable = pytest.importorskip("torch.utils.data.datapipes.iter")
    piped = list(iterable.IterableWrapper([Data(x=torch.zeros(30, 2), pos=pos.clone())])
                 .append_position())
    assert torch.equal(piped[0].x, out.x)
    single = AppendPosition()(Data(x=torch.ones(1, 1), pos=torch.tensor([[2.0, 3.0]])))
    assert torch.equal(single.x, torch.tensor([[1.0, 0.0, 0.0]]))  # zeros, not NaN


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="^qsv_ablation: 'dataset' must be one of"):
        qa.run(dataset="mnist", out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="unknown variants"):
        qa.run(dataset="digits", variants=["qsv", "vit"], out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="seeds"):
        qa.run(dataset="digits", seeds=[0, 0], out_dir=tmp_path, progress=False)
    with pytest.raises(TypeError, match="unknown overrides"):
        qa.run(dataset="digits", widht=3, out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="root"):
        qa.run(dataset="cifar10", seeds=[0], variants=["qsv"], out_dir=tmp_path,
               progress=False)
    empty = tmp_path / "no_cifar_here"
    empty.mkdir()
    for dataset, what in (("cifar10", "CIFAR-10"), ("cifar100", "CIFAR-100")):
        with pytest.raises(FileNotFoundError, match=f"no {what} data.*download=True"):
            qa.run(dataset=dataset, root=empty, seeds=[0], variants=["resnet20"],
                   out_dir=tmp_path, progress=False, epochs=1)
    with pytest.raises(SystemExit):
        ablation_main(["--dataset", "imagenet"])


# ----------------------------------------------------------------------------- the pipeline
@pytest.mark.parametrize("variant", ["qsv", "lattice"])
def test_with_position_batch_call_equals_per_sample_compose(variant):
    from torch_geometric.data import Batch
    from torch_geometric.transforms import Compose

    cfg = qa.PRESETS["digits"]["quick"]
    t = qa.graph_transform(variant, cfg)
    assert isinstance(t, qa.WithPosition)
    images = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.arange(5)
    fast = t.batch_call(images, y=y, as_batch=True)
    ref = Batch.from_data_list([Compose([t.base, AppendPosition()])(
        Data(image=images[b], y=y[b:b + 1])) for b in range(5)])
    for key in ("x", "edge_index", "pos", "batch", "y"):
        assert torch.equal(fast[key], ref[key]), key
    assert fast.x.size(1) == 1 + 3
    assert [d.x.shape for d in t.batch_call(images)] == [ref.get_example(0).x.shape] * 5


@pytest.mark.slow
def test_graph_loader_order_and_batches_equal_collated_samples():
    from torch_geometric.data import Batch

    cfg = qa.PRESETS["digits"]["quick"].replace(train_limit=40)
    ds = qa.load_split("digits", True, qa.graph_transform("qsv", cfg), cfg)
    loader = qa.graph_loader(ds, 16, shuffle=True, seed=3)
    assert len(loader) == 3
    orders = []
    for epoch in (0, 1, 0):
        loader.sampler.set_epoch(epoch)
        orders.append([i for b in loader.sampler for i in b])
    assert sorted(orders[0]) == list(range(40)) and orders[0] == orders[2]
    assert orders[0] != orders[1]
    loader.sampler.set_epoch(0)
    first = next(iter(loader))
    ref = Batch.from_data_list([ds[i] for i in orders[0][:16]])
    for key in ("x", "edge_index", "y", "batch"):
        assert torch.equal(first[key], ref[key]), key
    plain = qa.graph_loader(ds, 16, shuffle=False)
    assert [i for b in plain.sampler for i in b] == list(range(40))
    images = qa.load_split("digits", True, None, cfg)  # ResNet data: no vectorised path
    assert qa.graph_loader(images, 16, shuffle=True) is images


def test_paired_differences_sign_permutation_and_t():
    from scipy import stats as sps

    a = {0: 81.0, 1: 82.0, 2: 79.5, 3: 83.0, 4: 81.0, 9: 50.0}
    r = {0: 80.0, 1: 80.0, 2: 80.0, 3: 80.0, 4: 80.0, 7: 99.0}
    pd = paired_differences(a, r)
    d = [1.0, 2.0, -0.5, 3.0, 1.0]  # seeds 0-4 only
    assert pd["n"] == 5 and pd["wins"] == 4 and pd["losses"] == 1
    assert pd["mean"] == pytest.approx(statistics.mean(d))
    assert pd["sign_p"] == pytest.approx(2 * (1 + 5) / 32)  # P(X <= 1), X ~ Bin(5, 1/2)
    assert pd["t_p"] == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue)
    # |sum| = 6.5 or more: all signs as observed, or only -0.5 flipped (7.5), and mirrors
    assert pd["perm_p"] == pytest.approx(4 / 32)
    assert pd["ci_low"] < pd["mean"] < pd["ci_high"]
    allpos = paired_differences({s: 2.0 + s for s in range(5)}, {s: 0.0 for s in range(5)})
    assert allpos["sign_p"] == pytest.approx(2 / 32) and allpos["perm_p"] == pytest.approx(2 / 32)
    ties = paired_differences({0: 1.0, 1: 1.0, 2: 2.0}, {0: 1.0, 1: 1.0, 2: 1.0})
    assert ties["wins"] == 1 and ties["losses"] == 0 and ties["sign_p"] == pytest.approx(1.0)
    none = paired_differences({0: 1.0}, {1: 1.0})
    assert none["n"] == 0 and math.isnan(none["mean"]) and math.isnan(none["sign_p"])


def test_aggregate_paired_columns():
    results = [{"variant": v, "seed": s, "params": 1, "acc": a, "train_acc": a,
                "train_clean_acc": 99.0 + 0.5 * s, "epoch_s": 1.0}
               for v, accs in (("qsv", [80.0, 82.0, 81.0]), ("uniform", [81.0, 81.0, 83.0]))
               for s, a in enumerate(accs)]
    rows = {r["variant"]: r for r in qa.aggregate(results, "digits")}
    assert rows["uniform"]["paired_delta"] == pytest.approx((1.0 - 1.0 + 2.0) / 3)
    assert rows["uniform"]["wins_vs_qsv"] == "2/3"
    assert rows["uniform"]["train_clean_acc_mean"] == pytest.approx(99.5)
    assert math.isnan(rows["qsv"]["paired_delta"]) and rows["qsv"]["paired_n"] == 0
    # d = (1, -1, 2): permutation p 6/8 (|sum| >= 2), t interval from the t distribution
    assert rows["uniform"]["perm_p"] == pytest.approx(6 / 8)
    half = 4.302652729911275 * statistics.stdev([1.0, -1.0, 2.0]) / math.sqrt(3)  # t_{2,.975}
    assert rows["uniform"]["delta_ci_low"] == pytest.approx(2 / 3 - half)
    assert rows["uniform"]["delta_ci_high"] == pytest.approx(2 / 3 + half)
    assert rows["uniform"]["param_matched"] == "yes"


def test_aggregate_marks_rows_that_are_not_parameter_matched():
    results = [{"variant": v, "seed": 0, "params": p, "acc": 90.0, "train_acc": 99.0,
                "epoch_s": 1.0}
               for v, p in (("qsv", 15_266), ("standard_attention", 15_213),
                            ("resnet20", 269_434))]
    rows = {r["variant"]: r for r in qa.aggregate(results, "digits")}
    assert rows["standard_attention"]["param_matched"] == "yes"  # -0.3%
    assert rows["resnet20"]["param_matched"] == "no"
    lines = report.findings(list(rows.values()), [])
    assert any("269,434 parameters, NOT parameter-matched" in s for s in lines)


def test_headline_states_the_setting_and_an_undecided_sign():
    accs = {"qsv": [97.5, 98.33, 97.22, 96.94, 97.5],
            "standard_attention": [95.83, 95.56, 97.22, 95.0, 98.06]}
    results = [{"variant": v, "seed": s, "params": 15_000, "acc": a, "train_acc": 100.0,
                "epoch_s": 1.0} for v, xs in accs.items() for s, a in enumerate(xs)]
    rows = qa.aggregate(results, "digits")
    line = report.headline(rows, "digits", qa.PRESETS["digits"]["full"])
    assert "8x8 images on 80 sphere nodes" in line and "~15K-parameter" in line
    assert "360 test images, so one image is 0.28 points" in line
    assert "-1.16 points over 5 paired seeds" in line  # (-5.82) / 5 of the rounded values
    assert "sign not decided" in line
    assert "sign test p=0.625" in line


@pytest.mark.slow
def test_clean_training_accuracy_is_the_final_model_on_clean_images(tiny_run):
    from torch_geometric.loader import DataLoader

    from quest_geometric.training.checkpoint import load_checkpoint
    from quest_geometric.training.seed import seed_everything

    out, result = tiny_run
    r = next(x for x in result["results"] if x["variant"] == "qsv" and x["seed"] == 0)
    cfg = result["config"]
    assert not cfg.augment and math.isfinite(r["train_clean_acc"])
    train = qa.load_split("digits", True, qa.graph_transform("qsv", cfg), cfg)
    seed_everything(0)
    model = qa.build_model("qsv", cfg, train[0].x.size(1), 10, train[0].num_nodes)
    load_checkpoint(result["run_root"] / "qsv_s0" / "checkpoint.pt", model)
    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in DataLoader(train, batch_size=7):  # per-sample pipeline, collated
            correct += int((model(batch).argmax(-1) == batch.y).sum())
    assert r["train_clean_acc"] == pytest.approx(100.0 * correct / len(train))
    metrics = [json.loads(line) for line in
               (result["run_root"] / "qsv_s0" / "metrics.jsonl").read_text().splitlines()]
    logged = [m for m in metrics if m.get("kind") == "clean_train"]
    assert logged and logged[-1]["train_clean_acc"] == pytest.approx(r["train_clean_acc"] / 100)


class _MeanPoolLinear(torch.nn.Module):
    """A tiny classifier: the graph's mean node features through one linear layer."""

    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, num_classes)

    def forward(self, batch):
        from torch_geometric.nn import global_mean_pool

        return self.lin(global_mean_pool(batch.x, batch.batch))


def test_train_variant_hooks_build_analyse_and_reuse(tmp_path):
    """train_run trains the factory's model, records the dataset's name and
    stores what ``analyse`` returns; a reused run without an analysis is analysed on the model
    of its checkpoint, and one with an analysis is returned as it is."""
    from quest_geometric.training.checkpoint import read_checkpoint

    cfg = qa.DIGITS.replace(epochs=1, eval_every=1, batch_size=16, eval_batch_size=24)
    splits = tuple(s.index_select(list(range(n)))
                   for s, n in zip(qa.load_splits("qsv", cfg), (48, 24, 48)))
    built, analysed = [], []

    def build(variant, cfg, in_channels, num_classes, num_nodes):
        built.append((variant, in_channels, num_classes, num_nodes))
        return _MeanPoolLinear(in_channels, num_classes)

    def analyse(model, result):
        analysed.append(result["variant"])
        return {"weight_sum": float(model.lin.weight.detach().sum().cpu())}

    def train(variant, **kw):
        return qa.train_run(variant, 0, cfg, splits, tmp_path, variants=["tiny"], build=build,
                            dataset="tiny_digits", **kw)

    with pytest.raises(ValueError, match="variant"):
        qa.train_run("tiny", 0, cfg, splits, tmp_path, build=build)
    first = train("tiny")  # trained, no analysis
    in_channels = splits[0][0].x.size(1)
    assert built == [("tiny", in_channels, 10, splits[0][0].num_nodes)] and not analysed
    assert first["params"] == in_channels * 10 + 10 and first["analysis"] is None
    payload = read_checkpoint(tmp_path / "tiny_s0" / "checkpoint.pt")
    assert payload["config"]["extra"]["dataset"] == "tiny_digits"
    trained = payload["model"]["lin.weight"].sum().item()

    second = train("tiny", analyse=analyse)  # reused: analysed on the checkpoint's model
    assert len(built) == 2 and analysed == ["tiny"]
    assert second["analysis"]["weight_sum"] == pytest.approx(trained)
    assert {k: v for k, v in second.items() if k != "analysis"} == {
        k: v for k, v in first.items() if k != "analysis"}
    saved = json.loads((tmp_path / "tiny_s0" / "run.json").read_text())["result"]
    assert saved["analysis"] == second["analysis"]
    assert train("tiny", analyse=analyse) == second and len(analysed) == 1  # nothing to do

    fresh = qa.train_run("tiny", 1, cfg, splits, tmp_path, variants=["tiny"], build=build,
                         analyse=analyse)  # trained and analysed
    model_weights = read_checkpoint(tmp_path / "tiny_s1" / "checkpoint.pt")["model"]
    assert fresh["analysis"]["weight_sum"] == pytest.approx(
        model_weights["lin.weight"].sum().item())
    assert analysed == ["tiny", "tiny"] and fresh["params"] == first["params"]


def test_digits_presets_train_without_the_crop():
    full, quick = qa.PRESETS["digits"]["full"], qa.PRESETS["digits"]["quick"]
    assert not full.augment and not quick.augment and full.epochs == 60
    ds = qa.load_split("digits", True, qa.graph_transform("qsv", full), full)
    assert ds.augment_transform is None  # the vectorised graph_batch path applies


@pytest.mark.slow
def test_variant_epochs_trains_one_variant_longer(tmp_path):
    threads = torch.get_num_threads()
    try:
        res = qa.run(dataset="digits", seeds=[0], epochs=1, quick=True, out_dir=tmp_path,
                     progress=False, variants=["qsv", "no_transport"], threads=1,
                     variant_epochs={"no_transport": 2}, **TINY)
    finally:
        torch.set_num_threads(threads)
    by = {r["variant"]: r for r in res["results"]}
    assert by["qsv"]["epochs"] == 1 and by["no_transport"]["epochs"] == 2
    assert {r["variant"]: r["epochs"] for r in res["rows"]} == {"qsv": 1, "no_transport": 2}
    longer = res["run_root"].parent / res["config"].replace(epochs=2).tag() / "no_transport_s0"
    metrics = [json.loads(line) for line in (longer / "metrics.jsonl").read_text().splitlines()]
    assert max(m.get("epoch", 0) for m in metrics) == 2  # trained two epochs, in its own folder
    assert not (res["run_root"] / "no_transport_s0").exists()
    md = (tmp_path / "qsv_ablation_digits_quick.md").read_text()
    assert "except no_transport 2" in md and "| epochs |" in md
    with pytest.raises(ValueError, match="variant_epochs"):
        qa.run(dataset="digits", seeds=[0], quick=True, out_dir=tmp_path, progress=False,
               variants=["qsv"], variant_epochs={"no_transport": 2}, **TINY)
    with pytest.raises(ValueError, match="positive integer"):
        qa.run(dataset="digits", seeds=[0], quick=True, out_dir=tmp_path, progress=False,
               variants=["qsv"], variant_epochs={"qsv": 0}, **TINY)


def test_variant_epochs_command_line_parsing():
    from benchmarks.qsv.ablation import _parse_variant_epochs

    import argparse

    parser = argparse.ArgumentParser()
    assert _parse_variant_epochs(parser, ["no_transport=120", "uniform=80"]) == {
        "no_transport": 120, "uniform": 80}
    assert _parse_variant_epochs(parser, None) is None
    with pytest.raises(SystemExit):
        _parse_variant_epochs(parser, ["no_transport:120"])


def _seeds_file(path, rows, **meta):
    base = {"dataset": "digits", "quick": False, "seeds": sorted({r["seed"] for r in rows}),
            "config": {"channels": 32, **dict(qa.PRESETS["digits"]["full"].__dict__)},
            "variant_epochs": None, "date": "then"}
    base["config"]["sphere_sizes"] = list(base["config"]["sphere_sizes"])
    base.update(meta)
    path.write_text(json.dumps({"meta": base, "rows": rows}))
    return path


def _row(v, s, acc):
    return {"variant": v, "seed": s, "params": 100, "acc": acc, "train_acc": 100.0,
            "train_clean_acc": 100.0, "epoch_s": 1.0, "epochs": 60}


def test_summarise_merges_seed_files_without_training(tmp_path):
    first = _seeds_file(tmp_path / "a.json", [_row(v, s, 90.0 + s + (v == "uniform"))
                                              for v in ("qsv", "uniform") for s in range(3)])
    more = _seeds_file(tmp_path / "b.json", [_row("qsv", 3, 91.0), _row("uniform", 3, 90.0),
                                             _row("qsv", 0, 90.0)])  # seed 0 repeated, same
    res = summarise([first, more], out_dir=tmp_path / "out")
    rows = {r["variant"]: r for r in res["rows"]}
    assert rows["qsv"]["seeds"] == 4 and rows["uniform"]["seeds"] == 4
    assert rows["qsv"]["acc_mean"] == pytest.approx((90 + 91 + 92 + 91) / 4)
    assert rows["uniform"]["paired_delta"] == pytest.approx((1 + 1 + 1 - 1) / 4)
    assert rows["uniform"]["wins_vs_qsv"] == "3/4"
    per_seed = json.loads((tmp_path / "out" / "qsv_ablation_digits_seeds.json").read_text())
    assert [(r["variant"], r["seed"]) for r in per_seed["rows"]] == [
        ("qsv", 0), ("qsv", 1), ("qsv", 2), ("qsv", 3),
        ("uniform", 0), ("uniform", 1), ("uniform", 2), ("uniform", 3)]
    assert [m["file"] for m in per_seed["meta"]["merged_from"]] == ["a.json", "b.json"]
    assert (tmp_path / "out" / "qsv_ablation_digits.md").read_text().count("Setting: digits") == 1
    # the merged per-seed file alone gives the same table again
    again = summarise([tmp_path / "out" / "qsv_ablation_digits_seeds.json"],
                         out_dir=tmp_path / "again")
    for key in ("acc_mean", "acc_std", "seeds", "wins_vs_qsv"):
        assert [r[key] for r in again["rows"]] == [r[key] for r in res["rows"]], key
    assert again["rows"][1]["paired_delta"] == res["rows"][1]["paired_delta"]


def test_summarise_refuses_conflicts(tmp_path):
    a = _seeds_file(tmp_path / "a.json", [_row("qsv", 0, 90.0)])
    b = _seeds_file(tmp_path / "b.json", [_row("qsv", 0, 91.0)])
    with pytest.raises(ValueError, match="qsv seed 0 differs"):
        summarise([a, b], out_dir=tmp_path)
    c = _seeds_file(tmp_path / "c.json", [_row("qsv", 1, 90.0)], variant_epochs={"qsv": 9})
    with pytest.raises(ValueError, match="qsv seed 0 trained 60 epochs"):
        summarise([a, c], out_dir=tmp_path)
    longer = {**_row("uniform", 1, 90.0), "epochs": 120}
    d = _seeds_file(tmp_path / "d1.json", [longer], variant_epochs={"uniform": 120})
    e = _seeds_file(tmp_path / "e.json", [_row("uniform", 2, 90.0)], variant_epochs={"uniform": 80})
    with pytest.raises(ValueError, match="differ in 'variant_epochs' for 'uniform'"):
        summarise([d, e], out_dir=tmp_path)
    # a file that did not run the longer variant merges with one that did
    merged = summarise([a, d], out_dir=tmp_path / "m")
    assert {r["variant"]: r["epochs"] for r in merged["rows"]} == {"qsv": 60, "uniform": 120}
    (tmp_path / "d.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a per-seed results file"):
        summarise([tmp_path / "d.json"], out_dir=tmp_path)
    with pytest.raises(ValueError, match="at least one"):
        summarise([], out_dir=tmp_path)


def test_bad_seeds(tmp_path):
    for seeds in ([0, 0], [-1], []):
        with pytest.raises(ValueError, match="seeds"):
            qa.run(dataset="digits", seeds=seeds, out_dir=tmp_path, progress=False)
