"""prose: the documented file rule (highest licence version, no symlinks; NEWS.Debian.gz of
each package, signature lines dropped), blocks as consecutive slices per source, the record
of files with their SHA-256, and clear errors where files are missing. Small files made here,
never the system's."""
import gzip
import hashlib
import os

import pytest
import torch

from benchmarks.focus.prose import ood_prose_blocks, prose_files, read_prose


class ByteTokenizer:
    def encode(self, text, add_special_tokens=True):
        assert add_special_tokens is False
        return list(text.encode("utf-8"))


@pytest.fixture
def roots(tmp_path):
    lic = tmp_path / "licenses"
    lic.mkdir()
    for name, text in {"GPL-2": "old gpl " * 40, "GPL-3": "new gpl " * 40,
                       "GPL-10": "gpl ten " * 40,
                       "BSD": "bsd text " * 30, "MPL-1.1": "mpl one " * 30,
                       "MPL-2.0": "mpl two " * 30,
                       "LGPL-2.1": "lgpl " * 30}.items():
        (lic / name).write_text(text)
    os.symlink(lic / "GPL-3", lic / "GPL")  # a symbolic link is not read
    doc = tmp_path / "doc"
    for pkg, body in {"zeta": "zeta news one.\n -- Jane <j@x.org>  Mon, 1 Jan 2024\n",
                      "alpha": "alpha release notes.\n\nmore words here, and more words to read.\n "
                               "-- Bob <b@y.org>  Tue\n",
                      "beta": None}.items():
        (doc / pkg).mkdir(parents=True)
        if body is not None:
            (doc / pkg / "NEWS.Debian.gz").write_bytes(gzip.compress(body.encode()))
        (doc / pkg / "changelog.Debian.gz").write_bytes(gzip.compress(b"not read"))
    return {"licenses": str(lic), "debian-news": str(doc)}


def test_file_rule(roots):
    lic = [p.name for p in prose_files("licenses", roots["licenses"])]
    assert lic == ["BSD", "GPL-10", "LGPL-2.1", "MPL-2.0"]  # 10 > 3 > 2 numerically
    news = [p.parent.name for p in prose_files("debian-news", roots["debian-news"])]
    assert news == ["alpha", "zeta"]


def test_read_prose_records_sha256_and_drops_signatures(roots):
    text, files = read_prose("debian-news", roots["debian-news"])
    assert text == ("alpha release notes.\n\nmore words here, and more words to read.\n\n"
                    "zeta news one.")
    for f in files:
        assert f["sha256"] == hashlib.sha256(open(f["path"], "rb").read()).hexdigest()
    assert [os.path.basename(os.path.dirname(f["path"])) for f in files] == ["alpha", "zeta"]


def test_blocks_are_slices_of_each_source(roots):
    tok = ByteTokenizer()
    blocks, rec = ood_prose_blocks(tok, block_len=64, min_blocks=3, roots=roots)
    lic_ids = tok.encode(read_prose("licenses", roots["licenses"])[0], False)
    news_ids = tok.encode(read_prose("debian-news", roots["debian-news"])[0], False)
    nl, nn = len(lic_ids) // 64, len(news_ids) // 64
    assert nl > 1 and nn == 1
    assert rec["block_source"] == ["licenses"] * nl + ["debian-news"] * nn
    assert blocks[:nl].flatten().tolist() == lic_ids[:nl * 64]
    assert blocks[nl:].flatten().tolist() == news_ids[:64]
    assert rec["sources"]["licenses"]["blocks"] == nl
    assert [os.path.basename(f["path"]) for f in rec["sources"]["licenses"]["files"]] == \
        ["BSD", "GPL-10", "LGPL-2.1", "MPL-2.0"]
    capped, _ = ood_prose_blocks(tok, block_len=64, min_blocks=2, roots=roots,
                                 max_blocks_per_source=1)
    assert capped.tolist() == blocks[[0, nl]].tolist()


def test_missing_files_fail_clearly(roots, tmp_path):
    tok = ByteTokenizer()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="NEWS.Debian.gz.*empty"):
        ood_prose_blocks(tok, 64, 1, roots={**roots, "debian-news": str(empty)})
    with pytest.raises(FileNotFoundError, match="missing.*nowhere"):
        ood_prose_blocks(tok, 64, 1, roots={**roots, "licenses": str(tmp_path / "nowhere")})
    with pytest.raises(ValueError, match="'debian-news' gives .* fewer than one block"):
        ood_prose_blocks(tok, 4096, 1, roots=roots, sources=["debian-news"])
    with pytest.raises(ValueError, match="fewer than 'min_blocks'=99"):
        ood_prose_blocks(tok, 64, 99, roots=roots)
    with pytest.raises(ValueError, match="'source'"):
        prose_files("fortunes")
    with pytest.raises(ValueError, match="'sources'"):
        ood_prose_blocks(tok, 64, 1, sources="licenses")


def test_pinned_files_give_the_same_blocks_after_a_package_is_installed(roots, tmp_path):
    # the rule reads what the machine has: a new package early in sorted order shifts the
    # later text; the pinned list of a previous record reads the old files only
    tok = ByteTokenizer()
    before, rec = ood_prose_blocks(tok, block_len=16, min_blocks=2, roots=roots)
    pins = {s: r["files"] for s, r in rec["sources"].items()}
    text_before = read_prose("debian-news", roots["debian-news"])[0]
    doc = tmp_path / "doc" / "aaa-new"
    doc.mkdir()
    (doc / "NEWS.Debian.gz").write_bytes(gzip.compress(b"a newly installed package's notes"))
    shifted, _ = ood_prose_blocks(tok, block_len=16, min_blocks=2, roots=roots)
    assert not torch.equal(shifted, before)
    pinned, rec2 = ood_prose_blocks(tok, block_len=16, min_blocks=2, roots=roots, files=pins)
    assert torch.equal(pinned, before)
    assert {s: r["files"] for s, r in rec2["sources"].items()} == pins
    # the pinned text is the rule's text of the pinned files, in the pinned order
    text, _ = read_prose("debian-news", files=[f["path"] for f in pins["debian-news"]])
    assert text == text_before


def test_pinned_files_refuse_missing_and_changed_files_by_name(roots):
    _, rec = ood_prose_blocks(ByteTokenizer(), block_len=16, min_blocks=2, roots=roots)
    pins = {s: r["files"] for s, r in rec["sources"].items()}
    news = pins["debian-news"]
    changed = news[0]["path"]
    with gzip.open(changed, "wb") as fh:
        fh.write(b"other bytes under the same name")
    with pytest.raises(ValueError, match="pinned file .*alpha.*another version"):
        read_prose("debian-news", files=news)
    os.remove(changed)
    with pytest.raises(FileNotFoundError, match="missing on this machine.*alpha"):
        ood_prose_blocks(ByteTokenizer(), 16, 1, roots=roots, files=pins)
    with pytest.raises(ValueError, match="'files' pins sources"):
        ood_prose_blocks(ByteTokenizer(), 16, 1, sources=["licenses"], files=pins)
    with pytest.raises(ValueError, match="non-empty list"):
        read_prose("licenses", files=[])
    with pytest.raises(ValueError, match="'source' must be one of"):
        read_prose("fortunes", files=news)
