"""The tour's thread choice from the free cores, against values worked out by hand."""
import pytest

from quest_geometric._utils import cpu_load
from quest_geometric._utils.cpu_load import choose_threads


@pytest.mark.parametrize("cores, load, expected", [
    (2, 0.1, 2),   # quiet: both cores
    (2, 0.9, 1),   # one core busy elsewhere
    (2, 1.6, 1),   # busier still: never fewer than one
    (2, 8.0, 1),
    (16, 4.2, 12),
    (4, 0.0, 4),
])
def test_threads_are_the_free_cores(cores, load, expected):
    n, why = choose_threads(cores=cores, load=load, env={})
    assert n == expected
    assert f"{cores} core(s) available" in why and f"load average {load:.2f}" in why


def test_omp_num_threads_is_kept_and_a_bad_value_ignored():
    assert choose_threads(cores=2, load=5.0, env={"OMP_NUM_THREADS": "3"}) == (
        3, "OMP_NUM_THREADS=3 is set in the environment (kept)")
    n, why = choose_threads(cores=2, load=0.9, env={"OMP_NUM_THREADS": "lots"})
    assert n == 1 and "load average 0.90" in why


def test_no_load_average_uses_the_available_cores(monkeypatch):
    monkeypatch.setattr(cpu_load, "load_average", lambda: None)
    assert choose_threads(cores=3, env={}) == (3, "3 core(s) available; no load average on "
                                                  "this platform")


def test_load_average_reads_the_first_field(tmp_path):
    f = tmp_path / "loadavg"
    f.write_text("4.27 3.10 2.05 3/96 12345\n")
    assert cpu_load.load_average(str(f)) == 4.27
