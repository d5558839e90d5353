"""focus_data_splits: the table's overlaps are those of the library functions on the same
text (byte tokens, out-of-domain files made here)."""
import pytest

from quest_geometric.datasets import (
    overlap_share,
    pydoc_text,
    pydoc_topic_split,
    token_blocks,
    window_set,
)
from benchmarks.focus import data_splits as focus_data_splits


class ByteTokenizer:
    def encode(self, text, add_special_tokens=False):
        return list(text.encode("utf-8"))


@pytest.mark.slow
def test_rows_match_direct_measurement(tmp_path):
    lic, doc = tmp_path / "lic", tmp_path / "doc"
    lic.mkdir()
    (lic / "MIT-1").write_text("Permission is hereby granted, free of charge. " * 100)
    (doc / "pkg").mkdir(parents=True)
    import gzip
    (doc / "pkg" / "NEWS.Debian.gz").write_bytes(gzip.compress(b"The daemon now restarts. " * 60))
    tok = ByteTokenizer()
    rows, extra = focus_data_splits.run(tok, block=512, roots={"licenses": str(lic),
                                                               "debian-news": str(doc)})
    by = {r["split"]: r for r in rows}
    train, val = pydoc_topic_split()
    direct = overlap_share(token_blocks(tok, val, block_size=512)[:8],
                           window_set(tok.encode(pydoc_text(train)), 32), 32)
    assert by["old split: validation, first 8 blocks"]["overlap"] == round(direct["share"], 4)
    assert by["old split: validation, first 8 blocks"]["overlap"] > 0.3
    assert by["new split: validation, deduplicated blocks"]["overlap"] == 0.0
    assert by["new split: test, deduplicated blocks"]["overlap"] == 0.0
    assert by["out of domain: licenses"]["blocks"] == len(
        ("Permission is hereby granted, free of "
         "charge. " * 100).strip()) // 512 and by["out of domain: debian-news"]["blocks"] == 2
    assert extra["ood_files"]["licenses"]["files"][0]["path"].endswith("MIT-1")
