"""quiet_progress: the model loader's bars (the Hub's and transformers') are off within the
block and restored after it."""
import io

import pytest

from quest_geometric._utils.progress import quiet_progress


def _drawn(make) -> str:
    buf = io.StringIO()
    for _ in make(range(3), file=buf):
        pass
    return buf.getvalue()


@pytest.mark.slow  # imports transformers (seconds)
def test_quiet_progress_silences_and_restores_the_hub_and_transformers_bars():
    hub = pytest.importorskip("huggingface_hub.utils")
    tf = pytest.importorskip("transformers.utils.logging")
    assert "3/3" in _drawn(hub.tqdm) and "3/3" in _drawn(tf.tqdm)  # the reference: drawn
    with quiet_progress():
        assert _drawn(hub.tqdm) == "" and _drawn(tf.tqdm) == ""
    assert "3/3" in _drawn(hub.tqdm) and "3/3" in _drawn(tf.tqdm)
    with quiet_progress(active=False):
        assert "3/3" in _drawn(hub.tqdm)


@pytest.mark.slow
def test_a_library_switched_off_before_stays_off():
    tf = pytest.importorskip("transformers.utils.logging")
    tf.disable_progress_bar()
    try:
        with quiet_progress():
            pass
        assert not tf.is_progress_bar_enabled()
    finally:
        tf.enable_progress_bar()
