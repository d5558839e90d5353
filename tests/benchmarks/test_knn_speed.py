"""The kNN back-end benchmark runs end to end and writes a consistent table."""
import csv

import pytest

from benchmarks.qsv import knn_speed


@pytest.mark.slow
def test_quick_run_writes_the_table(tmp_path):
    knn_speed.run(quick=True, out_dir=tmp_path, progress=False, sizes=[500])
    with open(tmp_path / "knn_speed.csv") as f:
        knn = list(csv.DictReader(f))
    assert {r["backend"] for r in knn} >= {"scipy", "torch"}
    assert all(float(r["seconds"]) > 0 for r in knn)
