"""The paired before/after timing: its summary is the median of per-round ratios, and a child
process times a subject on a checkout given by path."""
from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.operators import before_after as ba

ROOT = Path(__file__).resolve().parents[2]


def _rec(subject, threads, rnd, before, after):
    return {"subject": subject, "threads": threads, "round": rnd,
            "before": {"forward_s": before}, "after": {"forward_s": after}}


def test_summary_is_the_median_of_per_round_ratios():
    recs = [_rec("qsv", 1, 0, 2.0, 1.0), _rec("qsv", 1, 1, 3.0, 2.0),
            _rec("qsv", 1, 2, 1.0, 4.0), _rec("qsv", 2, 0, 1.0, 1.0)]
    rows = {(r["subject"], r["threads"]): r for r in ba.summarize(recs)}
    one = rows[("qsv", 1)]
    # ratios 2, 1.5, 0.25: median 1.5 (not the ratio of the medians, 2 / 2 = 1)
    assert one["speedup"] == 1.5 and one["rounds"] == 3
    assert one["speedup_min"] == 0.25 and one["speedup_max"] == 2.0
    assert one["before_s"] == statistics.median([2.0, 3.0, 1.0])
    assert rows[("qsv", 2)]["speedup"] == 1.0
    table = ba.markdown(ba.summarize(recs), {"date": "d"})
    assert "| qsv | 1 | forward_s | 3 | 2 | 2 | 1.500 | 0.250 | 2.000 |" in table


def test_write_keeps_every_round(tmp_path):
    recs = [_rec("qsv", 1, 0, 2.0, 1.0)]
    ba.write(tmp_path / "out", {"date": "d"}, recs)
    import json
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["records"] == recs and data["rows"][0]["speedup"] == 2.0
    assert (tmp_path / "out.md").read_text().startswith("### Operators before and after")


@pytest.mark.slow
def test_a_child_times_the_checkout_it_is_given(monkeypatch):
    """One child process on this checkout, at the benchmark's own size (16,200 points): the
    qsv subject returns its two timings."""
    monkeypatch.setitem(ba.REPEAT, "qsv", 1)
    out = ba.child(str(ROOT), "qsv", 1, "")
    assert set(out) == {"forward_s", "forward_backward_s"}
    assert all(0 < v < 60 for v in out.values())


def test_the_command_line_answers_help():
    res = subprocess.run([sys.executable, "-m", "benchmarks.operators.before_after", "--help"],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0 and "--before" in res.stdout


def test_a_child_keeps_freed_memory_when_asked(monkeypatch):
    """``allocator='reuse'``: the child's mallopt calls succeed (it raises otherwise) before
    the subject runs; here a subject with nothing to time, so only that part runs."""
    monkeypatch.setitem(ba.REPEAT, "nothing", 1)
    assert ba.child(str(ROOT), "nothing", 1, "", "reuse") == {}
    assert ba.child(str(ROOT), "nothing", 1, "", "default") == {}
    with pytest.raises(ValueError, match="allocator"):
        ba.child(str(ROOT), "nothing", 1, "", "jemalloc")
