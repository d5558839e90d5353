"""Every measured number of the README and the docs' results pages is generated from the
committed result files by ``docs/_scripts/generate.py``; this regenerates them."""
import importlib
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "docs" / "_scripts"


@pytest.fixture(scope="module")
def gen():
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield importlib.import_module("generate")
    finally:
        sys.path.remove(str(SCRIPTS))


def test_pages_are_as_generated(gen):
    differ = gen.generate(check=True)
    assert not differ, (f"{', '.join(differ)} differ from what the result files give; "
                        f"regenerate with: {gen.COMMAND}")


def test_every_source_exists_and_every_block_is_known(gen):
    for key, path in gen.SOURCES.items():
        assert (ROOT / path).is_file(), (key, path)
    for rel in gen.TARGETS:
        names = [m.group(2) for m in gen._BLOCK.finditer((ROOT / rel).read_text())]
        assert names, rel
        for name in names:
            assert name in gen.BLOCKS or name == "test command" or (
                name.startswith("table ") and name[6:] in gen.SOURCES), (rel, name)


def test_a_stale_block_is_rewritten_and_the_rest_kept(gen):
    text = ("prose 1\n<!-- generated: readme qsv -->\n| stale |\n<!-- end generated -->\n"
            "prose 2\n<!-- generated: test command -->\n<!-- end generated -->\n")
    out = gen.fill(text, "")
    assert out.startswith("prose 1\n<!-- generated: readme qsv -->\n| result |")
    assert "| stale |" not in out and "\nprose 2\n" in out
    assert gen.test_command() in out
    assert gen.fill(out, "") == out  # idempotent


def test_headline_numbers_follow_the_result_file(gen, tmp_path, monkeypatch):
    """The ablation row is the JSON's paired difference and interval (read here with json,
    independently of the generator), and a changed file changes the table."""
    rows = json.loads((ROOT / gen.SOURCES["qsv_ablation"]).read_text())["rows"]
    ref = next(r for r in rows if r["variant"] == "no_transport")
    expected = (f"{ref['paired_delta']:+.2f} [{ref['delta_ci_low']:+.2f}, "
                f"{ref['delta_ci_high']:+.2f}]")
    assert expected in gen.block("readme qsv", "")
    ref["paired_delta"] = -9.87
    changed = tmp_path / "ablation.json"
    changed.write_text(json.dumps({"meta": json.loads(
        (ROOT / gen.SOURCES["qsv_ablation"]).read_text())["meta"], "rows": rows}))
    monkeypatch.setitem(gen.SOURCES, "qsv_ablation", str(changed))
    assert "-9.87 [" in gen.block("readme qsv", "")


def test_verdict_sentence_follows_met_by(gen):
    import headlines

    verdict = json.loads((ROOT / gen.SOURCES["focus_verdict"]).read_text())

    class One:
        def __call__(self, key):
            return verdict

    assert headlines.verdict_sentence(One()).startswith("**No Focus configuration")
    verdict["meta"]["met_by"] = ["K4_top2_w256_distill_s4"]
    assert "`K4_top2_w256_distill_s4`" in headlines.verdict_sentence(One())
    with pytest.raises(ValueError, match="PRETRAINED_CAVEAT"):
        headlines.pretrained_caveat(One())


def test_long_context_sentence_reads_the_pairs(gen):
    """The 8K sentence quotes the summary's paired changes (read here with json) and says
    "loses to" / "beats" / "is not told apart from" the window plus sinks by the paired
    permutation p, and "within" the target only at or under its percentage."""
    import headlines

    files = {k: json.loads((ROOT / gen.SOURCES[k]).read_text())
             for k in ("focus_long_context", "focus_verdict")}

    class Load:
        def __call__(self, key):
            return files[key]

    ood = files["focus_long_context"]["sets"]["ood"]
    name = next(n for n in ood if n.startswith("K") and not n.endswith("_random"))
    row = ood[name]
    row["vs_window"]["n"] = 5  # below the 6 windows an exact paired test needs for p < 0.05
    text = headlines.long_context_sentence(Load())
    assert f"`{name}` ({row['windows']})" in text  # listed as undecided, not quoted
    assert f"`{name}` ({row['pairs_kept']:.0%} of pairs)" not in text
    row["vs_window"]["n"] = 6
    text = headlines.long_context_sentence(Load())
    assert f"`{name}`" in text
    assert f"{row['vs_full']['ppl_change_pct']:+.1f}% (permutation p" in text
    assert f"{row['vs_window']['ppl_change_pct']:+.1f}% (permutation p" in text
    row["vs_window"].update(p_perm=0.01, mean_diff=0.2)
    assert "routing loses to the window" in headlines.long_context_sentence(Load())
    row["vs_window"].update(p_perm=0.01, mean_diff=-0.2)
    assert "routing beats the window" in headlines.long_context_sentence(Load())
    row["vs_window"].update(p_perm=0.3)
    assert "is not told apart from the window" in headlines.long_context_sentence(Load())
    target = files["focus_verdict"]["meta"]["target"]["ood_delta_pct"]
    row["vs_full"]["ppl_change_pct"] = target
    assert "and is within the target's" in headlines.long_context_sentence(Load())
    row["vs_full"]["ppl_change_pct"] = target + 0.01
    assert "and is outside the target's" in headlines.long_context_sentence(Load())


def test_long_trained_routers_are_compared_with_their_start(gen):
    """A row trained further on long blocks gets its own sentence: against the 1K-trained
    routers it started from (paired by window), against full attention and the window."""
    import headlines

    files = {k: json.loads((ROOT / gen.SOURCES[k]).read_text())
             for k in ("focus_long_context", "focus_verdict")}
    ood = files["focus_long_context"]["sets"]["ood"]
    parent = next(n for n in ood if n.startswith("K") and not n.endswith("_random"))
    pair = {"n": 8, "ppl_change_pct": -2.5, "p_perm": 0.04, "worse": 1}
    training = {"objective": "lm", "block": 4096, "steps": 16, "revisit_mean": -0.002,
                "revisit_sem": 0.0003, "plateau": "no"}
    ood[f"{parent}_4k"] = {**ood[parent], "vs_parent": {**pair, "against": parent},
                           "training": training}

    class Load:
        def __call__(self, key):
            return files[key]

    text = headlines.long_context_sentence(Load())
    assert (f"Routers trained further (16 'lm' steps on 4,096-token blocks), `{parent}_4k`, "
            f"are -2.5% (permutation p = 0.04, worse on 1 of 8 windows) against the routers "
            f"`{parent}` they started from") in text
    assert "-0.0020 +- 0.0003, says they were still learning" in text
    assert text.count(f"`{parent}_4k` (") == 0  # not reported as a row of its own
    ood[f"{parent}_8k"] = {**ood[f"{parent}_4k"], "training": {**training, "block": 8192}}
    para = next(p for p in headlines.long_context_sentence(Load()).split("\n\n")
                if f"`{parent}_4k`" in p)
    assert f"8,192-token blocks), `{parent}_8k`" in para  # both rows in one paragraph
    del ood[f"{parent}_8k"]
    training["plateau"] = "yes"  # the revisit measure's interval reaches 0
    assert "no longer shows learning" in headlines.long_context_sentence(Load())
    ood[f"{parent}_4k"]["vs_parent"]["n"] = 3
    assert "(fewer than 6 windows: not yet a finding)" in headlines.long_context_sentence(Load())


def test_span_and_p_formatting(gen):
    import headlines

    assert headlines._span([1.234, 1.5], unit="x") == "1.23-1.50x"
    assert headlines._span([-1.0, 0.5], "{:+.2f}", "%") == "-1.00% to +0.50%"
    assert headlines._span([2.0, 2.001]) == "2.00"
    assert headlines._p(3e-6) == "3e-6" and headlines._p(0.0312) == "0.031"
    assert math.isclose(float(headlines._p(0.19)), 0.19)


def test_readme_and_tour_give_the_same_focus_caveat():
    from quest_geometric.tour import PRETRAINED_CAVEAT

    assert PRETRAINED_CAVEAT in (ROOT / "README.md").read_text()


def _line(block: str, start: str) -> list[str]:
    line = next(x for x in block.splitlines() if x.startswith(f"| {start}"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_qsv_targets_count_and_name_the_rows_that_miss(gen, tmp_path, monkeypatch):
    """The TransformerConv row counts the compiled rows whose flag is set in the JSON (read
    here with json) and names the others; a flag turned off in a copy is named."""
    data = json.loads((ROOT / gen.SOURCES["qsv_floor"]).read_text())
    comp = [r for r in data["rows"] if r["mode"] == "compiled"]
    met = sum(bool(r["tconv_target_met"]) for r in comp)
    cell = _line(gen.block("qsv targets", "../"), "forward + backward: TransformerConv")[3]
    assert f"met in {met} of {len(comp)}" in cell
    lo, hi = min(r["fb_vs_tconv"] for r in comp), max(r["fb_vs_tconv"] for r in comp)
    assert cell.startswith(f"{lo:.2f}-{hi:.2f}x")
    target = next(r for r in comp if r["tconv_target_met"])
    target["tconv_target_met"] = False
    changed = tmp_path / "targets.json"
    changed.write_text(json.dumps(data))
    monkeypatch.setitem(gen.SOURCES, "qsv_floor", str(changed))
    cell = _line(gen.block("qsv targets", "../"), "forward + backward: TransformerConv")[3]
    assert f"met in {met - 1} of {len(comp)}" in cell
    assert f"{target['points']:,} points, {target['threads']} thread" in cell


def test_qsv_ablation_table_calls_a_sign_decided_only_by_the_rule(gen, tmp_path, monkeypatch):
    """'sign decided' is yes only with the interval off zero and both exact tests < 0.05."""
    data = json.loads((ROOT / gen.SOURCES["qsv_ablation"]).read_text())
    row = next(r for r in data["rows"] if r["variant"] == "lattice")
    assert _line(gen.block("qsv ablation", "../"), row["description"])[9] == (
        "yes" if (row["delta_ci_low"] > 0 or row["delta_ci_high"] < 0)
        and row["perm_p"] < 0.05 and row["sign_p"] < 0.05 else "no")
    changed = tmp_path / "ablation.json"
    for perm_p, sign_p, expected in ((0.01, 0.01, "yes"), (0.01, 0.0625, "no")):
        row.update(delta_ci_low=0.5, delta_ci_high=1.5, perm_p=perm_p, sign_p=sign_p)
        changed.write_text(json.dumps(data))
        monkeypatch.setitem(gen.SOURCES, "qsv_ablation", str(changed))
        assert _line(gen.block("qsv ablation", "../"), row["description"])[9] == expected


def test_frontier_summary_quotes_each_decided_row(gen):
    """The README's one-sentence frontier quotes, for each time-split row measured on enough
    8K windows, the verdict's share of pairs at 8K (as the README's table does) and its
    change against full attention and the window plus sinks, the
    windows it is worse on (from the long-context summary) and its one-thread prefill against
    its bound, all read here with json; the rows are the time split's; a row on too few
    windows drops out."""
    import headlines

    files = {k: json.loads((ROOT / gen.SOURCES[k]).read_text())
             for k in ("focus_long_context", "focus_verdict", "focus_time_split")}

    class Load:
        def __call__(self, key):
            return files[key]

    verdict = {r["name"]: r for r in files["focus_verdict"]["rows"]}
    split = files["focus_time_split"]["rows"]
    one = min(r["threads"] for r in split)
    timed = [r for r in split if r["threads"] == one and r["config"] != "full"
             and not r["config"].startswith("sinks@")]
    text = headlines.frontier_summary(Load())
    assert text.startswith("At 8,192 tokens") and text.count(". ") == 0
    for r in timed:
        v = verdict[r["config"]]
        w = files["focus_long_context"]["sets"]["ood"][r["config"]]["vs_window"]
        assert (f"`{r['config']}` ({v['pairs_kept_8k']:.0%} of the pairs) "
                f"{v['ood_8k_pct']:+.1f}%, "
                f"{v['ood_8k_vs_window_pct']:+.1f}% (worse on {w['worse']} of {w['n']} "
                f"windows, p = {v['ood_8k_vs_window_p']:.2g}), "
                f"{v['prefill_1t']:.2f}x of {v['prefill_bound_8k']:.2f}x") in text
    dropped = timed[0]["config"]
    verdict[dropped]["ood_8k_windows"] = files["focus_verdict"]["meta"]["min_windows"] - 1
    assert f"`{dropped}`" not in headlines.frontier_summary(Load())
