"""The manifest of owned files: entries on disk before what they name, a torn last line
ignored, removal of only what is listed (regular files and empty folders, no link followed)."""
import os

import pytest

from quest_geometric._utils.owned_files import (
    Manifest,
    ManifestError,
    append_entries,
    manifest_text,
    read_manifest,
    remove_owned,
    unknown_entries,
    unsafe_entries,
    walk,
)


def test_appended_entries_read_back_and_a_torn_last_line_is_ignored(tmp_path):
    path = tmp_path / "m.jsonl"
    assert read_manifest(path) is None
    append_entries(path, [{"folder": "stage", "open": True}, {"file": "report.md"}])
    append_entries(path, [{"sealed": "stage"}, {"folder": "p"}])
    m = read_manifest(path)
    assert (m.files, m.folders, m.open) == ({"report.md"}, {"stage", "p"}, set())
    with open(path, "ab") as f:  # a kill (or a full disk) in the middle of an append
        f.write(b'{"file": "p/x.cs')
    assert read_manifest(path) == m
    # the compact text reads back the same
    path.write_text(manifest_text(m))
    assert read_manifest(path) == m


@pytest.mark.parametrize("text", ['{"format": 1}\n', '{"format": 2}\n{"file": "../x"}\n',
                                  '{"format": 2}\nnot json\n{"file": "a"}\n',
                                  '{"format": 2}\n{"file": "a", "extra": 1}\n'])
def test_a_manifest_of_another_shape_is_refused(tmp_path, text):
    (tmp_path / "m.jsonl").write_text(text)
    with pytest.raises(ManifestError):
        read_manifest(tmp_path / "m.jsonl")


def test_open_folders_cover_their_content_until_sealed(tmp_path):
    m = Manifest(files={"report.md"}, folders={"stage", "p"}, open={"stage"})
    entries = {"report.md": 0o100644, "stage": 0o40755, "stage/a/b.csv": 0o100644,
               "p": 0o40755, "p/mine.txt": 0o100644, "other": 0o100644}
    assert unknown_entries(entries, m) == ["other", "p/mine.txt"]
    entries["stage/link"] = 0o120777
    assert unsafe_entries(entries, m) == ["stage/link"]


def test_remove_owned_removes_only_listed_regular_files_and_empty_folders(tmp_path):
    out = tmp_path / "out"
    (out / "stage" / "deep").mkdir(parents=True)
    (out / "stage" / "deep" / "a.csv").write_text("x")
    (out / "p").mkdir()
    (out / "p" / "t.csv").write_text("x")
    (out / "p" / "mine.txt").write_text("keep")  # not listed: p stays, not empty
    (out / "report.md").write_text("x")
    m = Manifest(files={"report.md", "p/t.csv", "gone.csv"}, folders={"stage", "p"},
                 open={"stage"})
    remove_owned(out, m, roots=["stage", "p"])
    assert sorted(walk(out)) == ["p", "p/mine.txt", "report.md"]
    remove_owned(out, m)
    assert sorted(os.listdir(out)) == ["p"]
