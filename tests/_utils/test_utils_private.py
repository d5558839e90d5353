"""quest_geometric._utils: atomic writes, device parsing, optional pyplot and argument checks."""
import json
import os
import struct
import sys

import pytest
import torch

from quest_geometric._utils import (
    all_finite,
    atomic_torch_save,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_choice,
    check_int,
    check_positive_float,
    check_positive_int,
    check_shell_radii,
    check_shell_sizes,
    optional_pyplot,
    resolve_device,
    save_figure,
)


class _Boom:
    """Pickling (``torch.save``) fails midway through the write."""

    def __reduce__(self):
        raise RuntimeError("boom")


class _BadJSON:
    pass


# ---------------------------------------------------------------------- atomic writes
def test_atomic_writes_write_and_create_folders(tmp_path):
    p = tmp_path / "a" / "b" / "f.txt"
    atomic_write_text(p, "héllo\n")
    assert p.read_text(encoding="utf-8") == "héllo\n"
    atomic_write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    atomic_write_json(p, {"x": [1, 2.5]}, indent=1)
    assert json.loads(p.read_text()) == {"x": [1, 2.5]} and "\n" in p.read_text()
    atomic_torch_save({"w": torch.arange(3)}, str(p))
    assert torch.equal(torch.load(p, weights_only=True)["w"], torch.arange(3))
    assert sorted(os.listdir(p.parent)) == ["f.txt"]


def test_atomic_torch_save_failure_keeps_old_file_and_no_temp(tmp_path):
    p = tmp_path / "c.pt"
    atomic_torch_save({"w": torch.ones(3)}, p)
    before = p.read_bytes()
    with pytest.raises(RuntimeError, match="boom"):
        # the tensor is serialised before the failing object: the write really is midway
        atomic_torch_save({"w": torch.zeros(1000), "x": _Boom()}, p)
    assert p.read_bytes() == before
    assert torch.equal(torch.load(p, weights_only=True)["w"], torch.ones(3))
    assert os.listdir(tmp_path) == ["c.pt"]


def test_atomic_text_failures_keep_old_file_and_no_temp(tmp_path):
    p = tmp_path / "r.json"
    atomic_write_text(p, "old")
    with pytest.raises(TypeError):
        atomic_write_json(p, {"a": _BadJSON()})
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(p, "caf\u00e9", encoding="ascii")
    assert p.read_text() == "old"
    assert os.listdir(tmp_path) == ["r.json"]


def test_atomic_write_failure_without_old_file_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        atomic_torch_save(_Boom(), tmp_path / "new.pt")
    assert os.listdir(tmp_path) == []


def test_checkpoint_atomic_torch_save_is_the_utils_one():
    from quest_geometric.training import checkpoint

    assert checkpoint.atomic_torch_save is atomic_torch_save


# ---------------------------------------------------------------------- devices
def test_resolve_device_parses():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.parametrize("dev", ["cuda", "cuda:1", torch.device("cuda", 0)])
def test_resolve_device_refuses_cuda_without_gpu_naming_the_argument(dev):
    with pytest.raises(ValueError, match=r"^TrainConfig\.device=.*no CUDA GPU"):
        resolve_device(dev, name="TrainConfig.device")

    class MyError(Exception):
        pass

    with pytest.raises(MyError, match=r"^--device=.*no CUDA GPU"):
        resolve_device(dev, name="--device", error=MyError)


def test_resolve_device_refuses_bad_strings_and_auto_when_not_allowed():
    with pytest.raises(ValueError, match=r"^--dev='quantum' is not a valid torch device"):
        resolve_device("quantum", name="--dev")
    with pytest.raises(ValueError, match="^device=.*not a valid"):
        resolve_device(3.5)
    with pytest.raises(KeyError, match="--device must be a torch device.*'auto'"):
        resolve_device("auto", name="--device", error=KeyError, allow_auto=False)


# ---------------------------------------------------------------------- checks
def test_check_int():
    assert check_int(3, "n") == 3 and check_int(0, "n", 0) == 0 and check_int(5, "n", 1,
                                                                              maximum=5) == 5
    # a wrong type (a bool, a float, a str) is a TypeError, a wrong value a ValueError
    with pytest.raises(TypeError, match=r"^f: 'n' must be an int >= 1, got True$"):
        check_int(True, "n", 1, where="f")
    with pytest.raises(TypeError, match=r"^'n' must be an int >= 1, got 2\.0$"):
        check_int(2.0, "n", 1)
    with pytest.raises(ValueError, match=r"^Cls: 'k' must be an int >= 2, got 1$"):
        check_int(1, "`k`", 2, where="Cls")
    with pytest.raises(ValueError, match=r"^'n' must be an int >= 0 and <= 4, got 5$"):
        check_int(5, "n", 0, maximum=4)
    with pytest.raises(TypeError, match=r"^'n' must be an int, got '3'$"):
        check_int("3", "n")
    # a note after the name stays outside the quotes
    with pytest.raises(ValueError, match=r"^g: 'm' \(or None\) must be an int >= 1, got 0$"):
        check_int(0, "m (or None)", 1, where="g")


def test_check_positive_int_types_and_values():
    assert check_positive_int(1, "'k'") == 1
    for bad in (True, 2.5, "3", None):
        with pytest.raises(TypeError, match=r"^'k' must be an int >= 1"):
            check_positive_int(bad, "'k'")
    for bad in (0, -3):
        with pytest.raises(ValueError, match=r"^g: 'k' must be an int >= 1, got " + str(bad)):
            check_positive_int(bad, "'k'", where="g")


def test_check_shell_sizes_and_radii():
    assert check_shell_sizes((3, 5)) == [3, 5]
    with pytest.raises(TypeError, match="^f: 'sizes' must be a sequence of ints >= 1, got 4$"):
        check_shell_sizes(4, where="f")
    with pytest.raises(TypeError, match=r"^'sizes' \(entry 1\) must be an int >= 1, got 2\.5$"):
        check_shell_sizes([4, 2.5])
    with pytest.raises(ValueError, match=r"^'sizes' must be a non-empty sequence of ints >= 1"):
        check_shell_sizes([])
    with pytest.raises(ValueError, match=r"^'sizes' \(entry 1\) must be an int >= 1, got 0$"):
        check_shell_sizes([4, 0])
    assert check_shell_radii(None, 3) == [1.0, 2.0, 3.0]
    assert check_shell_radii([0.5, 2], 2) == [0.5, 2.0]
    with pytest.raises(ValueError, match=r"^'radii' must be one radius per shell \(2\)"):
        check_shell_radii([1.0], 2)
    with pytest.raises(ValueError, match=r"^f: 'radii' must be positive, got list \[0\.0, 1\.0\]"):
        check_shell_radii([0.0, 1.0], 2, where="f")
    with pytest.raises(ValueError, match=r"^'radii' \(entry 1\) must be a finite number, got inf"):
        check_shell_radii([1.0, float("inf")], 2)
    with pytest.raises(TypeError, match=r"^'radii' \(entry 0\) must be a real number, got '1'"):
        check_shell_radii(["1", 2.0], 2)
    with pytest.raises(ValueError, match="^'radii' must be strictly increasing"):
        check_shell_radii([2.0, 2.0], 2)


def test_check_positive_float_and_choice():
    assert check_positive_float(2, "lr") == 2.0 and isinstance(check_positive_float(2, "lr"), float)
    assert check_positive_float(0, "wd", allow_zero=True) == 0.0
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"^opt: 'lr' must be a finite number > 0, got"):
            check_positive_float(bad, "lr", where="opt")
    for bad in (True, "1", None):
        with pytest.raises(TypeError, match=r"^opt: 'lr' must be a real number > 0, got"):
            check_positive_float(bad, "lr", where="opt")
    with pytest.raises(ValueError, match=r"'wd' must be a finite number >= 0, got -0\.1"):
        check_positive_float(-0.1, "wd", allow_zero=True)
    assert check_choice("b", "mode", ("a", "b")) == "b"
    with pytest.raises(ValueError, match=r"^f: 'mode' must be one of \('a', 'b'\), got 'c'$"):
        check_choice("c", "mode", ["a", "b"], where="f")
    with pytest.raises(TypeError, match=r"^f: 'mode' must be a str, one of \('a', 'b'\), got 1$"):
        check_choice(1, "mode", ["a", "b"], where="f")


# ---------------------------------------------------------------------- plotting
def test_optional_pyplot():
    plt = optional_pyplot()
    if plt is None:  # matplotlib absent: `required` names the extra
        with pytest.raises(ImportError, match=r"quest_geometric\[bench\]"):
            optional_pyplot(required=True)
    else:
        import matplotlib

        assert matplotlib.get_backend().lower() == "agg"
        assert plt is optional_pyplot(required=True)


def _png_size(path):
    """(width, height) in pixels read from a PNG file's IHDR chunk (the PNG specification)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_save_figure_writes_png_creates_folder_closes_and_returns_path(tmp_path):
    plt = optional_pyplot()
    if plt is None:
        pytest.skip("matplotlib is not installed")
    fig, ax = plt.subplots(figsize=(2.0, 1.5))
    ax.plot([0, 1], [1, 0])
    path = tmp_path / "missing" / "deeper" / "f.png"
    assert not path.parent.exists()
    out = save_figure(fig, path, dpi=50)
    assert out is path  # the very object passed in
    assert _png_size(path) == (100, 75)  # 2 x 1.5 inches at 50 dots per inch
    assert not plt.fignum_exists(fig.number)
    # a str path comes back as that str; the default resolution is 120 dpi
    fig = plt.figure(figsize=(1.0, 0.5))
    name = str(tmp_path / "g.png")
    assert save_figure(fig, name) is name
    assert _png_size(tmp_path / "g.png") == (120, 60)
    assert not plt.fignum_exists(fig.number)


def test_save_figure_rect_bounds_the_axes(tmp_path):
    plt = optional_pyplot()
    if plt is None:
        pytest.skip("matplotlib is not installed")
    tops = {}
    for rect in (None, (0, 0, 1, 0.5)):
        fig, ax = plt.subplots(figsize=(3, 3))
        ax.set_title("t")
        save_figure(fig, tmp_path / "r.png", dpi=20, rect=rect)
        tops[rect] = ax.get_position().y1
    assert tops[None] > 0.8  # laid out over the whole figure
    assert tops[(0, 0, 1, 0.5)] < 0.5  # the axes and their title fit under the rect's top


def test_all_finite_matches_the_elementwise_test_and_survives_overflowing_sums():
    big = torch.finfo(torch.float32).max
    cases = {
        "finite": (torch.randn(5, 7), True),
        "empty": (torch.empty(0, 4), True),
        "sum overflows, entries finite": (torch.full((4, 2), big), True),
        "sum overflows to -inf": (torch.tensor([-big, -big, 1.0]), True),
        "nan": (torch.tensor([1.0, float("nan")]), False),
        "inf": (torch.tensor([[1.0], [float("inf")]]), False),
        "-inf": (torch.tensor([-float("inf"), 2.0]), False),
        "inf and -inf (sum nan)": (torch.tensor([float("inf"), -float("inf")]), False),
        "half, sum overflows": (torch.full((3,), 6.0e4, dtype=torch.float16), True),
        "half nan": (torch.tensor([1.0, float("nan")], dtype=torch.float16), False),
        "float64 inf": (torch.tensor([1.0, float("inf")], dtype=torch.float64), False),
    }
    for name, (t, expected) in cases.items():
        assert bool(torch.isfinite(t).all()) == expected, name  # the reference agrees
        assert all_finite(t) is expected, name
    g = torch.Generator().manual_seed(0)
    for _ in range(20):  # random tensors with random non-finite entries
        t = torch.randn(6, 5, generator=g)
        hits = torch.rand(6, 5, generator=g) < 0.05
        t[hits] = float("nan")
        assert all_finite(t) == bool(torch.isfinite(t).all())


# --------------------------------------------------------------------------- same_values
def test_same_values_answers_as_torch_equal():
    """``same_values`` (bytes by memcmp where that is the same question) against
    ``torch.equal`` on equal tensors, tensors differing in one element at the first, a
    middle and the last position (the last byte too), other shapes, dtypes, strided views,
    empty tensors and floating point (where bytes and values differ: -0.0, nan)."""
    from quest_geometric._utils.compare import MEMCMP_AVAILABLE, same_values

    if sys.platform.startswith("linux"):  # the C library is there: the memcmp path runs
        assert MEMCMP_AVAILABLE
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.bool):
        a = torch.randint(0, 2 if dtype == torch.bool else 100, (1000,), generator=g).to(dtype)
        assert same_values(a, a.clone()) and torch.equal(a, a.clone())
        for i in (0, 517, 999):
            b = a.clone()
            b[i] = ~b[i] if dtype == torch.bool else b[i] + 1
            assert not same_values(a, b) and not same_values(b, a)
    a = torch.arange(12, dtype=torch.int64)
    b = a.clone()
    b[-1] += 1 << 56  # only the last element's most significant byte differs
    assert not same_values(a, b)
    assert not same_values(a, a.view(3, 4))  # same bytes, another shape
    assert not same_values(a, a.to(torch.int32))  # same values, another dtype
    m = torch.arange(24, dtype=torch.int64).view(4, 6)
    assert same_values(m[:, ::2], m[:, ::2].contiguous())  # a strided view: torch.equal
    assert not same_values(m[:, ::2], m[:, 1::2].contiguous())
    assert same_values(torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64))
    assert same_values(torch.tensor([0.0]), torch.tensor([-0.0]))  # values, not bytes
    nan = torch.tensor([float("nan")])
    assert not same_values(nan, nan.clone())  # as torch.equal: nan is not equal to itself


def test_check_all_finite_names_the_first_bad_argument_and_allows_overflowing_sums():
    import pytest
    import torch

    from quest_geometric._utils.checks import check_all_finite

    a, b = torch.ones(3), torch.ones(2, 2)
    check_all_finite((("a", a), ("b", b), ("none", None)), where="f")  # finite: no error
    b[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"^f: 'b' must be finite, got 1 NaN or infinite of "
                                         r"4 entries$"):
        check_all_finite((("a", a), ("b", b)), where="f")
    # finite entries whose sum overflows (float16 max 65504) are not refused
    big = torch.full((4,), 60000.0, dtype=torch.float16)
    assert not torch.isfinite(big.sum())
    check_all_finite((("big", big),), where="f")
    check_all_finite((("ids", torch.arange(3)),), where="f")  # integers: nothing to check
