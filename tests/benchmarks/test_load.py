"""The benchmarks' wait for a quiet machine, against waits worked out by hand."""
from benchmarks.load import wait_for_load


def test_wait_for_load_waits_for_the_load_to_fall_below_the_threads():
    loads, slept = iter([2.4, 1.9, 1.6, 1.4, 1.0]), []
    # 1 thread: 2.4, 1.9 and 1.6 are above 1 + 0.5; 1.4 is the first one at or below it
    assert wait_for_load(1, load=lambda: next(loads), sleep=slept.append,
                                  poll_s=5) == 1.4
    assert slept == [5, 5, 5]
    # 2 threads: 2.4 is already within 2 + 0.5, so there is no wait
    slept.clear()
    assert wait_for_load(2, load=lambda: 2.4, sleep=slept.append) == 2.4
    assert slept == []


def test_wait_for_load_gives_up_after_its_limit_and_without_a_load():
    slept = []
    assert wait_for_load(1, limit_s=12, poll_s=5, load=lambda: 3.0,
                                  sleep=slept.append) == 3.0
    assert slept == [5, 5, 5]  # 0, 5, 10 s waited are under 12; 15 is not
    slept.clear()
    assert wait_for_load(1, load=lambda: None, sleep=slept.append) is None
    assert slept == []
