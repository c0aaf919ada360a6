"""The oracle helpers for other backends: mismatch reports, sweeps and golden files."""
import json
import os
from fractions import Fraction

import numpy as np
import pytest

from minifp8 import codec, formats, gemm, golden, mx, testing

from test_codec import ml_dtypes_codes, onnx_saturate_codes


@pytest.fixture(scope="module")
def structured():
    return next(testing.sweep(kind="structured"))


# ---- 1. deliberately wrong backends get the right class --------------------------------------------
def test_a_backend_that_rounds_ties_away_shows_tie_mismatches(structured):
    x = structured[np.isfinite(structured)]
    wrong = codec.encode(x, "E4M3", rounding="nearest_away")
    report = testing.compare(wrong, x, "E4M3")
    assert not report.ok and report.by_class["tie"] > 0
    in_range = np.abs(x) < 448
    in_range_report = testing.compare(wrong[in_range], x[in_range], "E4M3")
    assert in_range_report.by_class["tie"] == in_range_report.count  # every in-range mismatch is a tie
    assert {row.kind for row in report.mismatches} <= {"tie", "overflow"}
    assert all(row.distance == 1 for row in in_range_report.mismatches)


def test_a_backend_that_flushes_subnormals_shows_subnormal_mismatches(structured):
    x = structured[np.isfinite(structured)]
    flushed = np.where(np.abs(x) < formats.E5M2.min_normal, np.copysign(0.0, x), x).astype(np.float32)
    report = testing.compare(codec.encode(flushed, "E5M2"), x, "E5M2")
    assert report.count > 0 and report.by_class["subnormal"] == report.count


def test_a_backend_that_overflows_to_nan_instead_of_saturating_shows_overflow(structured):
    wrong = codec.encode(structured, "E4M3", saturate=False)
    report = testing.compare(wrong, structured, "E4M3", saturate=True)
    finite = np.isfinite(structured)
    assert report.by_class["overflow"] == testing.compare(wrong[finite], structured[finite], "E4M3",
                                                          saturate=True).count > 0
    assert report.by_class["NaN/Inf"] == 2  # +Inf and -Inf
    assert report.count == report.by_class["overflow"] + report.by_class["NaN/Inf"]


def test_sign_of_zero_and_nan_payload_handling():
    x = np.array([-1e-30, 1.0, np.nan], np.float32)
    actual = np.array([0x00, 0x3C, 0x7D], np.uint8)  # +0 for a negative underflow, a different NaN payload
    report = testing.compare(actual, x, "E5M2")
    assert [row.kind for row in report.mismatches] == ["sign-of-zero", "NaN/Inf"]
    assert testing.compare(actual, x, "E5M2", nan="class").count == 1


def test_a_backend_whose_only_mismatches_are_nan_payloads_is_told_of_nan_class():
    """A review's find: a backend that writes another NaN code (E5M2 has three of each sign; minifp8
    writes 0x7e and 0xfe) got "NaN/Inf" rows and no word of nan="class". By hand: E5M2 1.0 is 0x3c,
    2.0 is 0x40; 0x7d, 0x7f, 0xfd and 0xff are NaNs."""
    x = np.array([np.nan, -np.nan, 1.0, 2.0], np.float32)
    payload = "every code that differs is a NaN where another NaN is expected (another payload"
    for actual, hint in (([0x7D, 0xFF, 0x3C, 0x40], "): pass nan='class' if NaN payloads are not part of the "
                                                    "contract"),
                         ([0x7F, 0x7F, 0x3C, 0x40], " or sign): pass nan='class' if NaN payloads and signs are not "
                                                    "part of the contract")):
        report = testing.compare(np.array(actual, np.uint8), x, "E5M2")
        assert report.count == report.by_class["NaN/Inf"] == 2 and report.layout == payload + hint
        assert str(report).splitlines()[1] == report.layout
        assert testing.compare(np.array(actual, np.uint8), x, "E5M2", nan="class").ok
    # no hint where a NaN's sign alone differs (E4M3's one NaN of each sign), or a number differs too
    assert testing.compare(np.array([0x7F, 0x7F, 0x38, 0x40], np.uint8), x, "E4M3").layout == ""
    assert testing.compare(np.array([0x7D, 0xFE, 0x3C, 0x44], np.uint8), x, "E5M2").layout == ""


def test_nan_class_still_reports_nan_against_a_number():
    # nan="class" forgives a different NaN payload only: a NaN where a number belongs, or a number
    # where a NaN belongs, is still a mismatch. E5M2: 1.0 = 0x3C, 2.0 = 0x40; 0x7D and 0xFF are NaNs.
    x = np.array([1.0, np.nan, np.nan, 2.0], np.float32)
    actual = np.array([0x7D, 0x3C, 0xFF, 0x40], np.uint8)
    report = testing.compare(actual, x, "E5M2", nan="class")
    assert report.count == 2 and [row.index for row in report.mismatches] == [(0,), (1,)]


def test_mismatch_rows_give_the_index_and_input_bits_of_their_own_element():
    # E4M3 codes by hand: 1 = 0x38, 2 = 0x40, 3 = 0x44, 4 = 0x48, 464 -> 448 = 0x7E, 6 = 0x4C.
    # The backend is wrong at (0, 2) and (1, 1) of a 2-d x; float32 3.0 is 0x40400000, 464.0 0x43e80000.
    x = np.array([[1.0, 2.0, 3.0], [4.0, 464.0, 6.0]], np.float32)
    actual = np.array([[0x38, 0x40, 0x45], [0x48, 0x7F, 0x4C]], np.uint8)
    report = testing.compare(actual, x, "E4M3")
    assert [(row.index, row.input, row.input_bits, row.expected_code) for row in report.mismatches] == [
        ((0, 2), 3.0, "0x40400000", 0x44), ((1, 1), 464.0, "0x43e80000", 0x7E)]


def test_code_distance_counts_steps_across_zero():
    # E4M3 1.0 is code 0x38, 56 steps above zero (codes 0x00..0x38 increase); -1.0 is 56 steps below,
    # and +0 and -0 are one point. A sign error on 1.0 is 112 steps away; -0 for +0 is 0 steps.
    x = np.array([-1.0, 0.0], np.float32)
    report = testing.compare(np.array([0x38, 0x80], np.uint8), x, "E4M3")
    assert [(row.distance, row.kind) for row in report.mismatches] == [(112, "sign"), (0, "sign-of-zero")]


@pytest.mark.parametrize("name", ["E4M3", "E5M2", "E4M3FNUZ", "E2M1", "E3M2"])
def test_a_lost_or_flipped_sign_is_classed_sign(name):
    """Found in a review: a backend that encoded |x|, or -x, got 'other' (tutorial 8: "a real bug in
    the rounding") at every negative input. A code that is the expected one with its sign bit
    flipped, for a finite nonzero value, is 'sign'; a zero's other sign stays 'sign-of-zero', and
    an overflow to the other Inf stays 'overflow' (where the format has Inf)."""
    fmt = formats.get(name)
    x = np.linspace(-fmt.max, fmt.max, 201).astype(np.float32)
    expected = codec.encode(x, fmt, saturate=True)
    for backend in (np.abs(x), -x):
        actual = codec.encode(backend, fmt, saturate=True)
        report = testing.compare(actual, x, fmt, saturate=True)
        differ, nonzero = actual != expected, codec.decode(expected, fmt) != 0
        assert report.count == np.count_nonzero(differ)
        assert report.by_class["sign"] == np.count_nonzero(differ & nonzero) > 0
        assert report.by_class["sign-of-zero"] == np.count_nonzero(differ & ~nonzero)  # (x rounds to 0 there)
    if fmt.nan_style != "negative_zero":  # (FNUZ has one zero)
        zeros = testing.compare(np.array([fmt.sign_mask], np.uint8), np.array([0.0], np.float32), fmt)
        assert zeros.mismatches[0].kind == "sign-of-zero"
    if fmt.has_infinity:
        inf = testing.compare(codec.encode(np.float32(-1e30), fmt)[None], np.array([1e30], np.float32), fmt)
        assert inf.mismatches[0].kind == "overflow"
    off_by_one = testing.compare(codec.encode(x, fmt, saturate=True) ^ np.uint8(1), x, fmt, saturate=True)
    assert off_by_one.by_class["sign"] == 0  # (the low bit, not the sign: no such class)


@pytest.mark.parametrize("name", ["E4M3FNUZ", "E5M2FNUZ"])
def test_fnuz_nan_for_a_negative_zero_result_is_a_sign_of_zero_mismatch(name):
    """A backend that keeps the sign of -0.0 (or of a negative input rounding to zero) writes 0x80,
    FNUZ's NaN. It was classed overflow, which points at the saturation rules (an audit's find)."""
    x = np.array([-0.0, -1e-9, 0.0], np.float32)
    report = testing.compare(np.array([0x80, 0x80, 0x80], np.uint8), x, name)
    assert [row.kind for row in report.mismatches] == ["sign-of-zero"] * 3
    assert [row.expected_code for row in report.mismatches] == [0x00] * 3


def test_overflow_class_covers_inputs_exactly_at_max():
    # "overflow" is |x| >= max: a backend that gives E2M1's max 6 as 4 (code 0x6 instead of 0x7) has
    # an overflow mismatch, even though both codes are finite.
    x = np.array([6.0, -6.0], np.float32)
    report = testing.compare(np.array([0x6, 0xE], np.uint8), x, "E2M1")
    assert [row.kind for row in report.mismatches] == ["overflow", "overflow"]


def test_report_table_names_everything_and_assert_raises_with_it():
    # 464 must tie to even 448 (0x7E), not overflow; 17/1024 must tie to even 16/1024 (0x08), not 18/1024.
    x = np.array([1.0, 464.0, 17 / 1024], np.float32)
    actual = np.array([0x38, 0x7F, 0x09], np.uint8)
    report = testing.compare(actual, x, "E4M3")
    text = str(report)
    assert "2 of 3 codes differ" in text and "0x43e80000" in text and "0x7e 448" in text and "0x7f nan" in text
    assert [(row.index, row.kind, row.distance) for row in report.mismatches] == [((1,), "overflow", None),
                                                                                    ((2,), "tie", 1)]
    with pytest.raises(AssertionError, match="2 of 3 codes differ"):
        testing.assert_codes_equal(actual, x, "E4M3")
    testing.assert_codes_equal(codec.encode(x, "E4M3"), x, "E4M3")


def test_report_shows_the_input_bits_of_big_endian_x_in_native_order():
    x = np.array([1.0625], np.float32)
    actual = np.array([0x39], np.uint8)  # 1.0625 ties to even 1.0 (0x38)
    for order in ("<f4", ">f4"):
        row = testing.compare(actual, x.astype(order), "E4M3").mismatches[0]
        assert row.input_bits == "0x3f880000" and row.input == 1.0625 and row.expected_code == 0x38


def test_actual_may_be_codes_float8_dtypes_or_values():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.linspace(-500, 500, 1001, dtype=np.float32)
    as_float8 = x.astype(ml_dtypes.float8_e4m3fn)
    assert testing.compare(as_float8, x, "E4M3").ok
    assert testing.compare(as_float8.astype(np.float32), x, "E4M3", nan="class").ok
    assert testing.compare(as_float8.view(np.uint8), x, "E4M3").ok


# ---- 5. bad inputs -------------------------------------------------------------------------------
def test_compare_rejects_bad_inputs_clearly():
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match=r"actual has shape \(3,\) but x has shape \(4,\)"):
        testing.compare(np.zeros(3, np.uint8), x, "E4M3")
    with pytest.raises(TypeError, match="got dtype int16"):
        testing.compare(np.zeros(4, np.int16), x, "E4M3")
    with pytest.raises(TypeError, match="x must be a float16, float32 or float64 array .*got dtype int32"):
        testing.compare(np.zeros(4, np.uint8), np.ones(4, np.int32), "E4M3")
    with pytest.raises(ValueError, match="0.3 is not|not a E4M3 value"):
        testing.compare(np.full(4, 0.3, np.float32), x, "E4M3")
    with pytest.raises(ValueError, match=r"E2M1 codes lie in \[0, 16\)"):
        testing.compare(np.full(4, 16, np.uint8), x, "E2M1")
    with pytest.raises(ValueError, match="nan must be"):
        testing.compare(np.zeros(4, np.uint8), x, "E4M3", nan="payload")


# ---- sweeps ----------------------------------------------------------------------------------------
def test_sweeps():
    structured = list(testing.sweep(kind="structured"))
    assert len(structured) == 1 and structured[0].size == 1 << 19 and structured[0].dtype == np.float32
    batches = testing.sweep(kind="exhaustive", batch_size=1 << 20)  # lazy: 4096 batches, made on demand
    first, second = next(batches), next(batches)
    assert first.size == 1 << 20 and (first.view(np.uint32) == np.arange(1 << 20)).all()
    assert second.view(np.uint32)[0] == 1 << 20
    with pytest.raises(ValueError, match="power of two"):
        next(testing.sweep(kind="exhaustive", batch_size=3))
    edge = next(testing.sweep("E4M3", kind="edge"))
    for value in (448.0, 464.0, -464.0, 2.0**-9, 2.0**-10, np.inf):
        assert value in edge
    assert np.signbit(edge[np.isnan(edge)]).tolist() == [False, True]  # NaN and -NaN
    assert not np.isnan(next(testing.sweep("E2M1", kind="edge"))).any()
    with pytest.raises(ValueError, match="needs the format"):
        next(testing.sweep(kind="edge"))
    with pytest.raises(ValueError, match="kind must be"):
        next(testing.sweep("E4M3", kind="random"))



def test_sweep_checks_its_arguments_when_called_not_at_the_first_batch():
    """sweep was a generator: a bad argument raised only at next(), and batch_size and fmt were
    not looked at for the kinds that do not use them (a review's find)."""
    for bad in (-1, 0, 3, 1 << 33):
        with pytest.raises(ValueError, match=f"batch_size must be .*got {bad}"):
            testing.sweep(kind="exhaustive", batch_size=bad)
        with pytest.raises(ValueError, match=f"batch_size must be .*got {bad}"):
            testing.sweep(kind="structured", batch_size=bad)
    for bad in (2.5, "1024", True, None):
        with pytest.raises(TypeError, match=f"batch_size must be an int, got {type(bad).__name__}"):
            testing.sweep(kind="exhaustive", batch_size=bad)
    with pytest.raises(ValueError, match="unknown format 'bogus'"):
        testing.sweep("bogus", kind="structured")
    with pytest.raises(TypeError, match="format must be a FloatFormat, a name \\(str\\) or an ml_dtypes dtype"):
        testing.sweep(3, kind="exhaustive")
    with pytest.raises(ValueError, match="needs the format"):
        testing.sweep(kind="edge")
    with pytest.raises(ValueError, match="kind must be 'structured', 'exhaustive' or 'edge', got 'random'"):
        testing.sweep("E4M3", kind="random")
    with pytest.raises(TypeError, match="kind must be a str .*got NoneType None"):
        testing.sweep("E4M3", kind=None)
    assert next(testing.sweep("E4M3", kind="structured", batch_size=np.int64(1 << 32))).size == 1 << 19

# ---- golden files ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def golden_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden")
    golden.write(out)
    return out


def test_golden_files_have_the_zip_layout_the_docstring_promises(golden_dir):
    """golden's docstring (and so --help) promises a reader in another language: members stored
    uncompressed (zip method 0), one per array named <array>.npy, NPY version 1.0, little-endian,
    C order; and the entry fields it lists (mx entries' saturate and input_dtype among them)."""
    import zipfile

    manifest = json.loads((golden_dir / "manifest.json").read_text(encoding="utf-8"))
    for name in sorted({entry["file"] for entry in manifest["entries"]}):
        with zipfile.ZipFile(golden_dir / name) as archive:
            arrays = {member[:-len(".npy")] for member in archive.namelist()}
            for member in archive.infolist():
                data = archive.read(member.filename)
                header = data[10:10 + int.from_bytes(data[8:10], "little")].decode("latin1")
                assert member.compress_type == zipfile.ZIP_STORED, (name, member.filename)
                assert member.filename.endswith(".npy") and data[:8] == b"\x93NUMPY\x01\x00", (name, member.filename)
                assert "'fortran_order': False" in header and "'>" not in header, (name, member.filename, header)
        named = {array for entry in manifest["entries"] if entry["file"] == name
                 for array in entry["arrays"].values() if isinstance(array, str)}
        assert named <= arrays, (name, named - arrays)
    documented = golden.__doc__.split("\nEvery array is little-endian.")[0]  # (the list of entry fields)
    for entry in manifest["entries"]:
        for field in entry:
            assert f"``{field}``" in documented, (entry["kind"], field)


def test_golden_inputs_use_no_libm_function(monkeypatch):
    """np.exp2 (and a normal draw) go through libm, whose last bit may differ between machines, so
    the files would too; the inputs are built from random integers with exact steps (an audit's find)."""
    def refuse(*args, **kwargs):
        raise AssertionError("libm")

    monkeypatch.setattr(np, "exp2", refuse)
    monkeypatch.setattr(np, "exp", refuse)
    monkeypatch.setattr(np, "log", refuse)
    for fmt in ("E4M3", "E8M0", "E2M1"):
        for dtype in (np.float32, np.float64):
            assert golden.codec_inputs(fmt, dtype).size > 4096
    assert golden.block_inputs().shape == golden.nvfp4_inputs().shape == (24, 80)
    assert golden.mx_inputs("MXFP8_E4M3").shape[0] > 24
    assert golden.nvfp4_boundary_inputs(54.23361).shape == (6, 80)



def test_golden_codec_inputs_take_a_float32_or_float64_dtype_only():
    """An int32 dtype turned NaN and Inf into -2**31 with only a RuntimeWarning (a review's find)."""
    reference = golden.codec_inputs("E4M3", np.float32)
    for spelling in ("float32", "<f4", ">f4", np.dtype(np.float32)):
        x = golden.codec_inputs("E4M3", spelling)
        assert x.dtype == np.float32 and np.array_equal(x, reference, equal_nan=True)
    assert golden.codec_inputs("E4M3", float).dtype == np.float64
    for bad, name in ((np.int32, "int32"), ("float16", "float16"), (np.complex128, "complex128"), (bool, "bool")):
        with pytest.raises(ValueError, match=f"codec_inputs: dtype must be float32 or float64, got {name}"):
            golden.codec_inputs("E4M3", bad)
    for bad in (None, "bogus", 3):
        with pytest.raises(TypeError, match=f"codec_inputs: dtype must be a float32 or float64 dtype .*got "
                                            f"{type(bad).__name__} {bad!r}"):
            golden.codec_inputs("E4M3", bad)


@pytest.mark.parametrize("function, min_length", [(golden.block_inputs, 71), (golden.nvfp4_inputs, 8)])
def test_golden_block_inputs_need_int_rows_and_length_that_hold_their_special_values(function, min_length):
    """length=0 gave a raw IndexError and rows='a' a UFuncTypeError (a review's find)."""
    name = function.__name__
    assert function(7, min_length).shape == (7, min_length)
    assert function(np.int64(8), np.int32(min_length + 1)).shape == (8, min_length + 1)
    for bad in ("a", 2.0, True, None):
        with pytest.raises(TypeError, match=f"{name}: rows must be an int, got {type(bad).__name__}"):
            function(rows=bad)
        with pytest.raises(TypeError, match=f"{name}: length must be an int, got {type(bad).__name__}"):
            function(length=bad)
    for bad in (-1, 0, 6):
        with pytest.raises(ValueError, match=f"{name}: rows must be >= 7, got {bad}"):
            function(rows=bad)
    for bad in (-1, 0, min_length - 1):
        with pytest.raises(ValueError, match=f"{name}: length must be >= {min_length}, got {bad}"):
            function(length=bad)


@pytest.mark.parametrize("size_type", [np.uint8, np.uint16, np.int16])
def test_golden_input_helpers_take_numpy_integer_sizes_as_the_ints_they_hold(size_type):
    """Sizes were checked as ints but used as given: a uint8 length wrapped (mx_inputs' block count
    gave an OverflowError, nvfp4_boundary_inputs a failed reshape of rows * length)."""
    calls = [(golden.block_inputs, {"rows": 8, "length": 80}), (golden.nvfp4_inputs, {"rows": 8, "length": 80}),
             (golden.mx_inputs, {"mx_format": "MXFP8_E4M3", "length": 80}),
             (golden.mx_inputs, {"mx_format": "MXFP4_E2M1", "length": 72}),
             (golden.nvfp4_boundary_inputs, {"global_amax": 6.0, "rows": 6, "length": 80})]
    for function, options in calls:
        typed = {name: size_type(value) if isinstance(value, int) and not isinstance(value, float) else value
                 for name, value in options.items()}
        np.testing.assert_array_equal(function(**typed), function(**options), err_msg=function.__name__)
    for layout in golden.GEMM_LAYOUTS:
        blocks = golden.gemm_scale_blocks(layout, size_type(64), size_type(128), size_type(48))
        assert blocks == golden.gemm_scale_blocks(layout, 64, 128, 48)
        assert all(type(size) is int for block in blocks for size in block), layout

def test_the_nvfp4_golden_vector_scales_every_nonzero_block():
    """Its input used to be the MX rows (binades 2**-20 to 2**20 and a 3e6 outlier under one
    tensor scale): 70 of 120 block scales were E4M3's zero, so most blocks tested nothing."""
    from minifp8 import mx

    x = golden.nvfp4_inputs()
    result = mx.quantize_nvfp4(x)
    zero_scales = codec.decode(result.scales, "E4M3") == 0
    zero_blocks = np.abs(x).reshape(24, 5, 16).max(axis=2) == 0
    np.testing.assert_array_equal(zero_scales, zero_blocks)
    assert zero_blocks.sum() == 5 and np.isfinite(x).all()


def test_golden_files_regenerate_byte_identically(golden_dir, tmp_path):
    golden.write(tmp_path)
    first = sorted(p.name for p in golden_dir.iterdir())
    assert first == sorted(p.name for p in tmp_path.iterdir())
    for name in first:
        assert (golden_dir / name).read_bytes() == (tmp_path / name).read_bytes(), name


def test_golden_manifest_is_versioned_and_checksummed(golden_dir):
    import hashlib

    manifest = json.loads((golden_dir / "manifest.json").read_text())
    assert manifest["schema"] == "minifp8-golden" and manifest["schema_version"] == golden.SCHEMA_VERSION
    kinds = {entry["kind"] for entry in manifest["entries"]}
    assert "codec" in kinds
    for entry in manifest["entries"]:
        assert hashlib.sha256((golden_dir / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
        for key in ("file", "format", "arrays", "shapes"):
            assert key in entry
    codec_entries = [e for e in manifest["entries"] if e["kind"] == "codec"]
    combos = {(e["format"], e["rounding"], e["saturate"], e["input_dtype"]) for e in codec_entries}
    assert len(combos) == len(formats.CATALOGUE) * 4 * 2 * 2


def test_golden_files_reload_with_numpy_and_agree_with_ml_dtypes(golden_dir):
    pytest.importorskip("ml_dtypes")
    manifest = json.loads((golden_dir / "manifest.json").read_text())
    checked = 0
    for entry in manifest["entries"]:
        if entry["kind"] != "codec" or entry["rounding"] != "nearest_even":
            continue
        with np.load(golden_dir / entry["file"], allow_pickle=False) as archive:
            x, expected = archive[entry["arrays"]["input"]], archive[entry["arrays"]["expected_codes"]]
        fmt = formats.get(entry["format"])
        with np.errstate(over="ignore", invalid="ignore"):  # (invalid: a signalling NaN, quieted)
            exactly_float32 = x.astype(np.float32).astype(x.dtype) == x
            exactly_float32 |= np.isnan(x)  # ml_dtypes rounds float64 twice: compare float32-exact inputs only
            x32 = x[exactly_float32].astype(np.float32)  # (a float32 file's signalling NaNs stay as they are)
        if fmt.name == "E8M0":  # ml_dtypes' subnormal quirk, see test_codec
            keep = ~((x32 > 2.0**-127) & (x32 < 1.5 * 2.0**-127))
            x32, got = x32[keep], expected[exactly_float32][keep]
        else:
            got = expected[exactly_float32]
        if entry["saturate"] and fmt.name in ("E4M3", "E5M2", "E4M3FNUZ", "E5M2FNUZ"):
            np.testing.assert_array_equal(got, onnx_saturate_codes(x32, fmt.name))
        elif not entry["saturate"]:
            np.testing.assert_array_equal(got, ml_dtypes_codes(x32, fmt.name))
        else:
            continue
        checked += 1
    assert checked >= 2 * len(formats.CATALOGUE)


def test_golden_cli_runs_under_python_oo(tmp_path):
    """Under -OO (no docstrings) the command crashed building its help's epilog from __doc__."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-OO", "-m", "minifp8.golden", "--out", str(tmp_path), "--formats",
                             "E2M1", "--no-blocks"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and not result.stderr, result.stderr
    assert golden.load(tmp_path)[0]["entries"]


def test_golden_write_refuses_a_set_of_formats(tmp_path):
    """A set's order follows PYTHONHASHSEED: the manifest's entries came in another order from run to run,
    against the promise of byte-identical files."""
    with pytest.raises(TypeError, match="format_names must be a format name or a sequence of them, got a set, whose "
                                        "order changes from run to run: pass a list or tuple"):
        golden.write(tmp_path, {"E4M3", "E5M2"}, blocks=False)
    assert not any(tmp_path.iterdir())
    with pytest.raises(TypeError, match="got a frozenset"):
        formats.get_list(frozenset({"E4M3"}))
    assert formats.get_list({"E5M2": 0, "E4M3": 1}.keys()) == [formats.E5M2, formats.E4M3]  # (ordered: taken)


def test_golden_cli_help_documents_the_layout(capsys):
    with pytest.raises(SystemExit) as exit_info:
        golden.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "manifest.json" in text and "schema_version" in text and "expected_codes" in text


def test_golden_cli_rejects_unknown_formats_and_unwritable_folders(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        golden.main(["--out", str(tmp_path), "--formats", "E4M3,E9M9"])
    assert exit_info.value.code == 2 and "unknown format 'E9M9'" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert golden.main(["--out", str(blocker / "sub")]) == 1
    assert "cannot write golden files" in capsys.readouterr().err
    assert golden.main(["--out", str(tmp_path / "ok"), "--formats", "e4m3"]) == 0
    assert (tmp_path / "ok" / "manifest.json").exists()


def test_golden_write_takes_one_name_or_a_non_empty_list_once_each(tmp_path):
    def written_formats(format_names):
        return [e["format"] for e in golden.write(tmp_path, format_names, blocks=False)["entries"]]

    per_format = 2 * len(golden.ROUNDINGS) * 2 + 1  # input dtypes x roundings x saturation, and the decode entry
    assert written_formats("E4M3") == ["E4M3"] * per_format  # one name is one format, not its characters
    assert written_formats(["E4M3", "e4m3", formats.E4M3, "E2M1"]) == ["E4M3"] * per_format + ["E2M1"] * per_format
    with pytest.raises(ValueError, match="^golden.write: format_names must name at least one format.*empty list"):
        golden.write(tmp_path / "empty", [])
    with pytest.raises(TypeError, match="^golden.write: format_names must be a format name or a sequence of them, "
                                        "got int 123"):
        golden.write(tmp_path / "number", 123)
    with pytest.raises(ValueError, match="^golden.write: unknown format 'bogus'"):
        golden.write(tmp_path / "bogus", ["E4M3", "bogus"])
    assert not (tmp_path / "bogus").exists()  # names are checked before anything is written
    (tmp_path / "a_file").write_text("")
    with pytest.raises(OSError, match="cannot write golden files to .*a_file: it is a file, not a folder$"):
        golden.write(tmp_path / "a_file", "E4M3", blocks=False)  # (it said "File exists")


def test_golden_write_npz_takes_plain_member_names_only(tmp_path):
    """A review's find: a name became a zip member's path as given ("a/../b.npy", a path traversal for
    whoever unzips it), an int name was written as "1.npy", and mixed name types failed in sorted()."""
    for name, error in (("a/../b", ValueError), ("", ValueError), ("..", ValueError), ("x y", ValueError),
                        (1, TypeError)):
        with pytest.raises(error, match=r"^golden.write_npz: an array's name names its zip member: a non-empty str "
                                        r"of letters, digits, '_', '\.' and '-', got "):
            golden.write_npz(tmp_path / "bad.npz", {name: np.ones(2), "fine": np.ones(1)})
        assert not (tmp_path / "bad.npz").exists()
    golden.write_npz(tmp_path / "good.npz", {"x_1.a-b": np.ones(2)})
    with np.load(tmp_path / "good.npz") as archive:
        assert archive.files == ["x_1.a-b"]


# ---- found in a review: the notes said saturate=true gives +-max for Inf (FNUZ too: ONNX Cast-24) and that
# E8M0 gives 0xFF for Inf (0xFE with saturate=true); the rules below are the notes', checked on the files
NAN_CODES = {"E4M3": (0x7F, 0xFF), "E5M2": (0x7E, 0xFE), "E4M3FNUZ": (0x80, 0x80), "E5M2FNUZ": (0x80, 0x80)}
OVERFLOW_CODES = {"E4M3": (0x7F, 0xFF), "E5M2": (0x7C, 0xFC), "E4M3FNUZ": (0x80, 0x80), "E5M2FNUZ": (0x80, 0x80)}
E8M0_CODES = {"NaN": 0xFF, "2**-127": 0x00, "2**127": 0xFE}  # (above: the codes of +x and -x; E8M0 is unsigned)


def rounds_above_max(x, fmt, rounding, random_bits, random_bit_count):
    """Whether finite ``x`` rounds, with an unbounded exponent, to a magnitude above ``fmt.max``, from
    the definitions (not codec.encode): beyond max plus the top binade's quantum always (toward
    zero too); between the two by the rounding's rule for the fraction ``f`` of a quantum above max."""
    with np.errstate(invalid="ignore"):  # (a signalling NaN input, quieted)
        magnitude = np.abs(x.astype(np.float64))
    quantum = 2.0 ** (fmt.emax - fmt.mantissa_bits)
    with np.errstate(invalid="ignore"):  # (Inf - Inf)
        fraction = magnitude / quantum - fmt.max / quantum  # exact: powers of two and one binade
    if rounding == "nearest_even":  # (E8M0's max, 1 quantum, is odd: its ties go up)
        up = (fraction > 0.5) | ((fraction == 0.5) & (fmt.max / quantum % 2 == 1))
    elif rounding == "nearest_away":
        up = fraction >= 0.5
    elif rounding == "stochastic":  # the "stochastic" note
        up = np.round(fraction * 2**random_bit_count) + random_bits >= 2**random_bit_count
    else:
        up = np.zeros(x.shape, bool)
    between = (magnitude > fmt.max) & (magnitude < fmt.max + quantum)
    return np.isfinite(x) & ((magnitude >= fmt.max + quantum) | (between & up))


def expected_special_codes(x, fmt, rounding, saturate, overflow):
    """The codes the notes give at NaN, +-Inf and finite overflow (``overflow``), -1 elsewhere."""
    negative = np.signbit(x)
    inf, nan = np.isinf(x), np.isnan(x)
    codes = np.full(x.shape, -1)
    if fmt.name == "E8M0":
        top = E8M0_CODES["2**127"] if saturate else E8M0_CODES["NaN"]
        codes = np.where(overflow | (inf & ~negative), top, codes)
        codes = np.where(overflow & (rounding == "toward_zero"), E8M0_CODES["2**127"], codes)
        codes = np.where((x > 0) & (x < 2.0**-127), E8M0_CODES["2**-127"], codes)
        return np.where(nan | (x <= 0), E8M0_CODES["NaN"], codes)

    def signed(positive_and_negative):
        return np.where(negative, positive_and_negative[1], positive_and_negative[0])

    signed_max = signed((fmt.max_code, fmt.max_code | fmt.sign_mask))
    if not fmt.has_nan:  # FP6/FP4: always +-max
        return np.where(overflow | inf, signed_max, codes)
    codes = np.where(nan, signed(NAN_CODES[fmt.name]), codes)
    beyond = signed(OVERFLOW_CODES[fmt.name])  # +-Inf (E5M2) or NaN
    if saturate:  # FNUZ, which cannot spell Inf, too (ONNX Cast-24)
        return np.where(overflow | inf, signed_max, codes)
    codes = np.where(overflow | inf, beyond, codes)
    return np.where(overflow & (rounding == "toward_zero"), signed_max, codes)


def test_golden_notes_state_the_codes_of_the_files_at_inf_overflow_and_nan(golden_dir):
    manifest = json.loads((golden_dir / "manifest.json").read_text())
    notes = manifest["notes"]
    for fmt_name, codes in (*NAN_CODES.items(), *OVERFLOW_CODES.items()):  # the codes the tests use, in the notes
        assert all(f"0x{code:02X}" in notes["codec"] for code in codes), fmt_name
    assert all(f"0x{code:02X} ({value})" in notes["E8M0"] for value, code in E8M0_CODES.items())
    assert "saturate=true: overflow and +-Inf give +-max (FNUZ too, as ONNX Cast-24 says" in notes["codec"]
    checked = set()
    for entry, arrays in entries_of(golden_dir, "codec"):
        fmt, rounding, saturate = formats.get(entry["format"]), entry["rounding"], entry["saturate"]
        x, codes = arrays["input"], arrays["expected_codes"]
        overflow = rounds_above_max(x, fmt, rounding, arrays.get("random_bits"), entry["random_bit_count"])
        expected = expected_special_codes(x, fmt, rounding, saturate, overflow)
        ruled = expected >= 0
        assert np.isposinf(x).any() and np.isneginf(x).any(), entry["file"]
        nan_signs = set(np.signbit(x[np.isnan(x)]).tolist())  # -NaN too: the notes keep its sign
        assert nan_signs == ({False, True} if fmt.has_nan else set()), entry["file"]
        np.testing.assert_array_equal(codes[ruled], expected[ruled], err_msg=f"{entry['file']} {rounding} {saturate}")
        if overflow.any():  # (E8M0's float32 file cannot overflow toward zero: its float64 file does)
            checked.add((fmt.name, rounding, saturate))
    assert len(checked) == len(formats.CATALOGUE) * len(golden.ROUNDINGS) * 2  # every rule met finite overflow


def test_golden_stochastic_files_pin_the_ties_of_f_times_2_to_the_k(golden_dir):
    """The "stochastic" note: |x| = (n + f) * quantum, r = f * 2**K rounded to the nearest integer, ties
    to even, and away from zero when r + random_bits >= 2**K. Each stochastic entry holds inputs with
    f * 2**K = k + 1/2 (found here with exact arithmetic) for even and odd k, with the random bits that
    make the tie decide, and the codes of every tie follow the note (those that overflow: the test
    above). Before, no tie decided (a few random float32 inputs are ties, with bits that do not), so a
    consumer that rounds them away or down passed every file."""
    checked = 0
    for entry, arrays in entries_of(golden_dir, "codec"):
        if entry["rounding"] != "stochastic":
            continue
        fmt, bit_count = formats.get(entry["format"]), entry["random_bit_count"]
        with np.errstate(invalid="ignore"):  # (a signalling NaN input, quieted)
            magnitude = np.abs(arrays["input"].astype(np.float64))
        finite = np.isfinite(magnitude) & (magnitude > 0)
        magnitude = np.where(finite, magnitude, 1.0)
        exponent = np.frexp(magnitude)[1] - 1  # floor(log2 |x|)
        quantum = np.ldexp(1.0, np.maximum(exponent, fmt.emin) - fmt.mantissa_bits)
        steps = (magnitude / quantum % 1) * 2**bit_count  # f * 2**K, every step exact
        parities, decisive = set(), 0
        for i in np.flatnonzero(finite & (steps % 1 == 0.5)):
            r = round(Fraction(steps[i]))  # (Python rounds a Fraction's half to even)
            bits = int(arrays["random_bits"][i])
            if r + bits in (2**bit_count - 1, 2**bit_count):  # the tie decides: k even, or k odd
                parities.add(int(steps[i]) % 2)
                decisive += 1
            rounded = (magnitude[i] // quantum[i] + (r + bits >= 2**bit_count)) * quantum[i]
            if rounded <= fmt.max:
                decoded = fmt.values()[arrays["expected_codes"][i]]
                assert decoded == np.copysign(rounded, arrays["input"][i]), (entry["file"], i)
                checked += 1
        assert parities == {0, 1} and decisive == golden.stochastic_ties(fmt)[0].size, entry["file"]
    assert checked > 0


def entries_of(golden_dir, kind):
    """(entry, {role: array}) for every entry of ``kind`` in the golden folder, read with numpy alone."""
    manifest = json.loads((golden_dir / "manifest.json").read_text())
    found = []
    for entry in manifest["entries"]:
        if entry["kind"] == kind:
            with np.load(golden_dir / entry["file"], allow_pickle=False) as archive:
                found.append((entry, {role: archive[name] for role, name in entry["arrays"].items() if name}))
    return found


# Independent references for the block files, written from the definitions: reference_mx from OCP MX
# v1.0 section 6.3 (minifp8.mx's module docstring), calling none of mx.quantize, mx.shared_exponents
# and codec.encode; float32_nvfp4 from TransformerEngine's steps (minifp8.mx.quantize_nvfp4's docstring).
def reference_mx(x, elem, scale_mode, *, ties="even", float32_log2=False):
    """MX scales and element codes of float32 ``x`` (32-blocks along the last axis), exactly.

    shared_exp (OCP MX v1.0 section 6.3; torchao's ceil/even; NVIDIA's rceil) from ``np.frexp`` of
    the block amax in float64, exact; elements ``x * 2**-shared_exp`` (exact in float64), rounded
    to the nearest value of the element grid by comparing ``2 |v|`` with the sum of its two
    neighbours (exact), ties to the even code (``ties="away"``: away from zero), clamped to max.
    ``float32_log2=True`` is a backend bug: floor/ceil/rceil from a float32 ``np.log2``.
    """
    fmt = formats.get(elem)
    rows, length = x.shape
    blocks = np.pad(x.astype(np.float64), [(0, 0), (0, -length % 32)]).reshape(rows, -1, 32)
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(blocks), axis=-1)
    has_nan, has_inf = np.isnan(blocks).any(-1), np.isinf(blocks).any(-1)
    finite_amax = np.where(np.isfinite(amax), amax, 0.0)
    significand, exponent = np.frexp(finite_amax)  # amax = significand * 2**exponent, significand in [0.5, 1)
    floor_log2 = exponent - 1
    if scale_mode == "floor":
        shared = floor_log2 - fmt.emax
    elif scale_mode == "ceil":
        shared = floor_log2 + (significand != 0.5) - fmt.emax
    elif scale_mode == "even":  # the significand rounded to M bits, ties away; a carry to 2 adds a binade
        rounded = np.floor(2 * significand * 2**fmt.mantissa_bits + 0.5)
        shared = floor_log2 + (rounded == 2 ** (fmt.mantissa_bits + 1)) - fmt.emax
    else:  # rceil: the least k with amax <= max_elem * 2**k
        k = floor_log2 - fmt.emax
        shared = np.where(finite_amax <= np.ldexp(fmt.max, k), k, k + 1)
    if float32_log2:  # the bug: log2 in float32, which rounds 2**j * (1 +- 2**-24) to j
        amax32 = finite_amax.astype(np.float32)
        with np.errstate(divide="ignore"):
            log2 = np.log2(amax32 / np.float32(fmt.max)) if scale_mode == "rceil" else np.log2(amax32)
        rounded = np.nan_to_num(np.floor(log2) if scale_mode == "floor" else np.ceil(log2), neginf=-127)
        shared = rounded - (0 if scale_mode == "rceil" else fmt.emax)
    shared = np.where(finite_amax == 0, -127, np.clip(shared, -127, 127)).astype(np.int64)
    nan_scale = has_nan | (has_inf & (scale_mode != "rceil"))
    shared = np.where(has_inf & ~nan_scale, 127, shared)  # rceil: Inf / max_elem rounds up to 2**127
    scales = np.where(nan_scale, 0xFF, shared + 127).astype(np.uint8)

    scaled = np.ldexp(blocks, -np.where(nan_scale, 0, shared)[..., None])
    grid = np.unique(np.abs(fmt.values()[np.isfinite(fmt.values())]))  # grid index = positive code
    magnitude = np.minimum(np.nan_to_num(np.abs(scaled), posinf=fmt.max), fmt.max)
    low = np.minimum(np.searchsorted(grid, magnitude, side="right") - 1, grid.size - 2)
    twice, sum_of_neighbours = 2 * magnitude, grid[low] + grid[low + 1]
    tie_goes_up = (low % 2 == 1) if ties == "even" else True
    up = (twice > sum_of_neighbours) | ((twice == sum_of_neighbours) & tie_goes_up)
    codes = (low + up) | np.where(np.signbit(scaled), fmt.sign_mask, 0)
    codes = np.where(nan_scale[..., None], 0, codes).reshape(rows, -1)[:, :length].astype(np.uint8)
    return scales, codes


def float32_nvfp4(x, global_amax, variant="transformer_engine"):
    """An NVFP4 backend in float32 steps: TransformerEngine's order (`minifp8.mx.quantize_nvfp4`), or one of
    the orders a backend might take instead (each a bug against the definition)."""
    flt_max = np.float32(np.finfo(np.float32).max)
    global_amax = np.float32(global_amax)
    blocks = x.astype(np.float32).reshape(-1, 16)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s_enc = np.float32(1) if global_amax == 0 else np.minimum(np.float32(2688) / global_amax, flt_max)
        s_dec = np.float32(1) / s_enc
        amax = np.abs(blocks).max(axis=1)
        block_scale = {"S_enc / 6": lambda: amax * (s_enc / np.float32(6)),
                       "(amax / 6) * S_enc": lambda: (amax / np.float32(6)) * s_enc,
                       }.get(variant, lambda: amax * (s_enc * np.float32(1 / 6)))()
        scale_codes = codec.encode(np.minimum(block_scale, flt_max), "E4M3", saturate=True)
        s_dec_b = codec.decode(scale_codes, "E4M3")[:, None]
        encode = np.minimum(s_enc / s_dec_b if variant == "S_enc / S_dec_b" else np.float32(1) / (s_dec_b * s_dec),
                            flt_max)
        if variant == "x / (S_dec_b * S_dec)":
            scaled = np.where(s_dec_b > 0, blocks / np.where(s_dec_b > 0, s_dec_b * s_dec, 1), blocks * encode)
        elif variant == "exact float64 product":
            scaled = blocks.astype(np.float64) * encode.astype(np.float64)
        else:
            scaled = blocks * encode
        rounding = "nearest_away" if variant == "ties away" else "nearest_even"
        codes = codec.encode(np.clip(scaled, -6, 6), "E2M1", rounding=rounding)
    return scale_codes.reshape(x.shape[0], -1), codes.reshape(x.shape)


NVFP4_VARIANTS = ("S_enc / 6", "(amax / 6) * S_enc", "S_enc / S_dec_b", "x / (S_dec_b * S_dec)",
                  "exact float64 product", "ties away")


def differences(found, scales, codes, block_size):
    """How many scales, and codes outside 0xFF-scale blocks (don't care), differ from an entry."""
    expected_scales, expected_codes = found["expected_scales"], found["expected_codes"]
    care = np.repeat(expected_scales != 0xFF, block_size, axis=1)[:, :codes.shape[1]]
    return int((scales != expected_scales).sum()), int(((codes != expected_codes) & care).sum())


def test_golden_mx_files_match_an_exact_reference(golden_dir):
    """The files against `reference_mx` (was: against mx.quantize again, which fails on I/O only)."""
    found = entries_of(golden_dir, "mx")
    assert len(found) == len(mx.FORMATS) * len(mx.SCALE_MODES)
    for entry, arrays in found:
        scales, codes = reference_mx(arrays["input"], entry["element_format"], entry["scale_mode"])
        np.testing.assert_array_equal(arrays["expected_scales"], scales, err_msg=str(entry["arrays"]))
        care = np.repeat(scales != 0xFF, 32, axis=1)[:, :codes.shape[1]]
        np.testing.assert_array_equal(arrays["expected_codes"][care], codes[care], err_msg=str(entry["arrays"]))
        assert (scales == 0xFF).any() and (scales == 0xFE).any() == (entry["scale_mode"] == "rceil")


def test_golden_nvfp4_file_matches_a_rational_model_of_transformer_engine(golden_dir):
    from test_mx import te_model  # TransformerEngine's float32 steps, each rounded exactly with Fractions

    found = entries_of(golden_dir, "nvfp4")
    caps = len(golden.nvfp4_cap_inputs())
    assert [entry["global_amax_given"] for entry, _ in found] == \
        [False] + [True] * len(golden.NVFP4_GLOBAL_AMAXES) + [False] * caps
    for entry, arrays in found:
        x, global_amax = arrays["input"], arrays["global_amax"]
        if not entry["global_amax_given"]:
            assert global_amax == np.abs(x).max()
        blocks = x.reshape(-1, 16)
        for b, block in enumerate(blocks):
            scale_code, codes, _ = te_model(block, global_amax)
            codes = np.where((block == 0) & np.signbit(block), 0x8, codes)  # -0.0 keeps its sign; the model reads 0
            assert arrays["expected_scales"].reshape(-1)[b] == scale_code, (entry["arrays"], b)
            assert arrays["expected_codes"].reshape(-1, 16)[b].tolist() == codes.tolist(), (entry["arrays"], b)
    assert [float(arrays["global_amax"]) for entry, arrays in found[1:-caps]] == \
        [float(np.float32(amax)) for amax in golden.NVFP4_GLOBAL_AMAXES]


def test_golden_nvfp4_file_meets_the_caps_of_the_note(golden_dir):
    """The "nvfp4" note: S_enc = min(2688 / global_amax, FLT_MAX), and encode = min(1 / (S_dec_b *
    S_dec), FLT_MAX) with 1 / 0 = Inf. One entry's 2688 / global_amax exceeds FLT_MAX; another has a
    non-zero block whose scale code is 0, where x * FLT_MAX takes 2**-127 to 2 - 2**-23 (E2M1 2,
    0x4) and 2**-17 past 6 (0x7), and keeps zeros (an encode scale of 0 or Inf would not). Before,
    no entry met either cap."""
    found = {entry["arrays"]["input"]: arrays for entry, arrays in entries_of(golden_dir, "nvfp4")}
    flt_max = np.finfo(np.float32).max
    tiny = found["x_tiny"]
    assert Fraction(2688) / Fraction(float(tiny["global_amax"])) > Fraction(float(flt_max))
    assert tiny["encode_scale"] == flt_max
    zero_scale = found["x_zero_scale"]
    x, scales, codes = zero_scale["input"].reshape(-1, 16), zero_scale["expected_scales"].reshape(-1), \
        zero_scale["expected_codes"].reshape(-1, 16)
    block = np.flatnonzero((scales == 0) & (np.abs(x).max(axis=1) > 0))[0]
    expected = {2.0**-17: 0x7, -2.0**-17: 0xF, 2.0**-127: 0x4}
    for value, code in expected.items():
        assert codes[block][x[block] == value].tolist() == [code], value
    zeros = x[block] == 0
    assert codes[block][zeros].tolist() == np.where(np.signbit(x[block][zeros]), 0x8, 0x0).tolist() != []


def test_the_float32_nvfp4_backend_without_a_bug_gives_the_files_codes(golden_dir):
    """The harness of the tests below: in TransformerEngine's order, `float32_nvfp4` agrees with
    the file (as `reference_mx` does with the MX files), so its variants differ by their bug only."""
    for entry, arrays in entries_of(golden_dir, "nvfp4"):
        scales, codes = float32_nvfp4(arrays["input"], arrays["global_amax"])
        assert np.array_equal(scales, arrays["expected_scales"]) and np.array_equal(codes, arrays["expected_codes"])


# ---- the golden block files catch common bugs (a review found that they caught none of these) ----
@pytest.mark.parametrize("mx_format", list(mx.FORMATS))
def test_golden_mx_files_catch_an_element_encoder_that_rounds_ties_away(golden_dir, mx_format):
    """microxcaling's default element rounding. Before, 16 of the 20 MX entries showed no difference
    and the other 4 (E5M2) one. Every scale mode meets the ties below 2**emax exactly (shared_exp
    -127), with both signs: each of those whose lower neighbour has the even code must differ."""
    element = mx.get(mx_format).elem
    grid = np.unique(np.abs(element.values()[np.isfinite(element.values())]))
    even_lower = np.flatnonzero((grid[1:] + grid[:-1]) / 2 < 2.0**element.emax) % 2 == 0
    for entry, arrays in entries_of(golden_dir, "mx"):
        if entry["format"] == mx_format:
            scales, codes = reference_mx(arrays["input"], entry["element_format"], entry["scale_mode"], ties="away")
            scale_count, code_count = differences(arrays, scales, codes, 32)
            assert scale_count == 0 and code_count >= 2 * even_lower.sum() > 0, entry["scale_mode"]


@pytest.mark.parametrize("mx_format", list(mx.FORMATS))
def test_golden_mx_files_catch_a_shared_exponent_from_a_float32_log2(golden_dir, mx_format):
    """Tutorial 8's bug: a float32 log2 rounds the float32 just below (or above) 2**j to j. Before,
    no block amax lay there and the floor and ceil entries showed no difference."""
    for entry, arrays in entries_of(golden_dir, "mx"):
        if entry["format"] == mx_format and entry["scale_mode"] != "even":
            scales, codes = reference_mx(arrays["input"], entry["element_format"], entry["scale_mode"],
                                         float32_log2=True)
            assert differences(arrays, scales, codes, 32)[0] > 0, entry["scale_mode"]


@pytest.mark.parametrize("variant", NVFP4_VARIANTS)
def test_golden_nvfp4_file_catches_each_other_order_of_float32_operations(golden_dir, variant):
    """Before, every one of these gave the same codes and scales as the file (one entry, whose
    random inputs never met a rounding boundary). Now each given-amax entry catches each of them."""
    caught = [sum(differences(arrays, *float32_nvfp4(arrays["input"], arrays["global_amax"], variant), 16))
              for entry, arrays in entries_of(golden_dir, "nvfp4") if entry["global_amax_given"]]
    assert len(caught) == len(golden.NVFP4_GLOBAL_AMAXES) and all(caught), caught


def test_golden_mx_inputs_hold_ties_and_amaxes_beside_powers_of_two():
    for mx_format in mx.FORMATS.values():
        x = golden.mx_inputs(mx_format)
        assert x.dtype == np.float32 and x.shape[1] == 80
        assert np.array_equal(x[:24], golden.block_inputs(), equal_nan=True)
        table = mx_format.elem.values()
        grid = np.unique(np.abs(table[np.isfinite(table)]))
        midpoints = (grid[:-1] + grid[1:]) / 2
        for scale in (2.0**golden.MX_TIE_EXPONENT, 2.0**-127):
            assert np.isin(np.float32(midpoints[midpoints < 2.0**mx_format.elem.emax] * scale), x).all()
        block_amax = np.abs(np.pad(x[24:], [(0, 0), (0, 16)]).reshape(-1, 32)).max(axis=1)
        for j in golden.MX_BOUNDARY_BINADES:
            power = np.float32(2.0**j)
            for amax in (np.nextafter(power, np.float32(0)), power, np.nextafter(power, np.float32(np.inf)),
                         np.float32(mx_format.elem.max * 2.0**j)):
                assert amax in block_amax, (mx_format.name, j, amax)


# ---- compare_mx --------------------------------------------------------------------------------------
def test_compare_mx_reports_scales_separately_from_elements():
    from minifp8 import mx

    x = golden.block_inputs()
    expected = mx.quantize(x, "MXFP8_E4M3")
    assert testing.compare_mx(expected.scales, expected.codes, x, "MXFP8_E4M3").ok
    scales, codes = expected.scales.copy(), expected.codes.copy()
    scales[0, 1] += 1          # a scale one binade too big: its block's elements are not compared
    codes[0, 40:42] ^= 1       # ... so these two element errors in that block are not reported
    codes[7, 3] ^= 1           # one element error in a block whose scale is right
    report = testing.compare_mx(scales, codes, x, "MXFP8_E4M3")
    assert report.scale_count == 1 and report.scale_mismatches[0].index == (0, 1)
    assert report.scale_mismatches[0].actual_code == expected.scales[0, 1] + 1
    assert report.elements.count == 1 and report.elements.mismatches[0].index == (7, 3)
    assert "1 of 72 block scales differ" in str(report)
    # head() is the first line alone, as Report.head() and MatmulReport.head() are
    assert report.head() == str(report).splitlines()[0] and "1 of 72 block scales differ" in report.head()
    assert "elements in the other blocks: 1 of" in report.head()
    with pytest.raises(AssertionError, match="block scales differ"):
        testing.assert_mx_equal(scales, codes, x, "MXFP8_E4M3")


def test_compare_mx_classifies_a_ties_away_element_encoder():
    from minifp8 import mx

    rng = np.random.default_rng(3)
    # Values on the E2M1 grid's midpoints after scaling: amax 6 per block gives shared_exp 0.
    midpoints = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    x = rng.choice(midpoints, size=(4, 32)).astype(np.float32)
    x[:, 0] = 6.0
    away = mx.quantize(x, "MXFP4_E2M1", rounding="nearest_away")
    report = testing.compare_mx(away.scales, away.codes, x, "MXFP4_E2M1")
    assert report.scale_count == 0 and report.elements.count > 0
    assert report.elements.by_class["tie"] == report.elements.count
    # the head line counts the classes, as compare's does (it left them out)
    assert str(report).splitlines()[0].endswith(f"elements in the other blocks: {report.elements.count} of 128 "
                                                f"differ [tie {report.elements.count}]")


def test_compare_mx_checks_stochastic_rounding_with_the_same_random_bits():
    from minifp8 import mx

    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 40)).astype(np.float32)
    bits = rng.integers(0, 16, x.shape).astype(np.uint8)
    options = {"axis": 0, "rounding": "stochastic", "random_bits": bits, "random_bit_count": 4}
    expected = mx.quantize(x, "MXFP8_E4M3", **options)
    assert testing.compare_mx(expected.scales, expected.codes, x, "MXFP8_E4M3", **options).ok
    codes = expected.codes.copy()
    codes[2, 7] ^= 1
    report = testing.compare_mx(expected.scales, codes, x, "MXFP8_E4M3", **options)
    assert report.elements.count == 1 and report.elements.mismatches[0].index == (2, 7)
    assert "random_bits" not in report.options and report.options["random_bit_count"] == 4


def test_compare_mx_stochastic_elements_keep_their_own_random_bits_when_a_scale_differs():
    # A correct backend except for one block scale: only that scale is reported, and the elements of
    # the other three blocks (96 of them) are compared with their own random bits, so they all agree.
    from minifp8 import mx

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    options = {"rounding": "stochastic", "random_bits": rng.integers(0, 256, x.shape).astype(np.uint8),
               "random_bit_count": 8}
    expected = mx.quantize(x, "MXFP8_E4M3", **options)
    scales = expected.scales.copy()
    scales[0, 0] += 1
    report = testing.compare_mx(scales, expected.codes, x, "MXFP8_E4M3", **options)
    assert report.scale_count == 1 and report.elements.total == 96 and report.elements.ok, str(report)


@pytest.mark.parametrize("shape, axis", [((0,), -1), ((0, 5), -1), ((0, 5), 0), ((5, 0), -1), ((5, 0), 0)])
def test_compare_mx_accepts_empty_inputs(shape, axis):
    from minifp8 import mx

    x = np.zeros(shape, np.float32)
    expected = mx.quantize(x, "E4M3", axis=axis)
    report = testing.compare_mx(expected.scales, expected.codes, x, "E4M3", axis=axis)
    assert report.ok and report.elements.total == 0


def test_nvfp4_codes_of_a_block_with_scale_zero_are_named_as_unread():
    """Found in a review: a backend writing zeros in a block whose scale code is 0x00 (it dequantises
    to zeros whatever its codes) got three 'overflow' rows and no word. minifp8 keeps comparing them
    (bit for bit with TransformerEngine), and a note says what they are; codes differing elsewhere
    get no such note."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 16:20] = 1000, [1e-3, -2e-3, 0, 5e-4]
    q = mx.quantize_nvfp4(x)
    assert list(q.scales[0]) == [0x7E, 0x00]
    codes = q.codes.copy()
    codes[0, 16:] = 0
    report = testing.compare_mx(q.scales, codes, x, "NVFP4")
    assert report.elements.count == 3 and np.array_equal(
        mx.NVFP4Array(codes=codes, scales=q.scales, global_amax=q.global_amax, encode_scale=q.encode_scale,
                      axis=-1, shape=q.shape).dequantize(), q.dequantize())
    assert ("3 of the element codes that differ lie in blocks whose scale code is 0x00, which dequantise to zeros "
            "whatever their codes: minifp8 encodes them as TransformerEngine does (encode = min(1 / 0, FLT_MAX): "
            "inputs of |x| >= 6 / FLT_MAX saturate to +-6)") in report.layout
    codes = q.codes.copy()
    codes[0, 1] ^= 1  # (a block with a nonzero scale)
    assert "0x00" not in testing.compare_mx(q.scales, codes, x, "NVFP4").layout


def test_mx_blocks_with_scale_zero_cast_times_one_or_two_to_the_126_are_named():
    """Found in a review: TransformerEngine's MXFP8 cast multiplies a 0x00-scale block by 1, not
    2**127 (the mx module docstring), and such a backend got 64 'other' rows and no hint. The note
    names it, and torchao's to_mx (times 2**126); codes that differ elsewhere get no such note."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 32)) * 1e-37).astype(np.float32)
    q = mx.quantize(x, "MXFP8_E4M3")
    assert (q.scales == 0).all()
    for factor, words in ((1.0, "times 1 cast, not x times 2**127 (0x00 is 2**-127, OCP MX section 5.4.1): "
                                "TransformerEngine's exp2f_rcp(0x00) = 1"),
                          (2.0**126, "times 2**126 cast, not x times 2**127 (0x00 is 2**-127, OCP MX section "
                                     "5.4.1): torchao's to_mx")):
        codes = codec.encode(x.astype(np.float64) * factor, "E4M3", saturate=True)
        report = testing.compare_mx(q.scales, codes, x, "MXFP8_E4M3")
        assert report.elements.count > 0 and words in report.layout
    # stochastic rounding too, each element with its own random bits (a review of the note's first version)
    bits = rng.integers(0, 256, size=x.shape, dtype=np.uint8)
    options = dict(rounding="stochastic", random_bits=bits)
    q = mx.quantize(x, "MXFP8_E4M3", **options)
    codes = codec.encode(x.astype(np.float64), "E4M3", saturate=True, **options)
    report = testing.compare_mx(q.scales, codes, x, "MXFP8_E4M3", **options)
    assert report.elements.count > 0 and "x times 1 cast" in report.layout
    wide = np.concatenate([x, rng.standard_normal((2, 32)).astype(np.float32)])
    q = mx.quantize(wide, "MXFP8_E4M3")
    codes = q.codes.copy()
    codes[2, 3] ^= 1
    assert "0x00" not in testing.compare_mx(q.scales, codes, wide, "MXFP8_E4M3").layout


def test_compare_mx_names_the_block_size_or_axis_whose_scales_have_the_backends_shape():
    """Found in a review: scales from blocks of 16, or along the other axis, got only "scales has
    shape (4, 5), expected (4, 3)". The message names the blocks expected and the block sizes and
    axes whose scales have the backend's shape, where some do."""
    from minifp8 import mx

    x = np.random.default_rng(0).standard_normal((4, 80)).astype(np.float32)
    square = np.random.default_rng(1).standard_normal((32, 32)).astype(np.float32)
    for scales, inputs, elem, message in (
            (mx.quantize(x, "MXFP8_E4M3", block_size=16).scales, x, "MXFP8_E4M3",
             r"scales has shape \(4, 5\), expected \(4, 3\) for x of shape \(4, 80\) with blocks of 32 along axis 1; "
             r"blocks of 16 along axis 1 give that shape: pass the backend's block_size and axis$"),
            (mx.quantize(square, "MXFP8_E4M3", axis=0).scales, square, "MXFP8_E4M3",
             r"expected \(32, 1\) .* with blocks of 32 along axis 1; blocks of 32, 64, 128 or 256 along axis 0 give "
             r"that shape"),
            (mx.quantize_nvfp4(square, axis=0).scales, square, "NVFP4",
             r"with blocks of 16 along axis 1; blocks of 16 along axis 0 give that shape: pass the backend's axis$"),
            (np.zeros((4, 7), np.uint8), x, "MXFP8_E4M3",
             r"expected \(4, 3\) for x of shape \(4, 80\) with blocks of 32 along axis 1$")):
        codes = np.zeros(inputs.shape, np.uint8)
        with pytest.raises(ValueError, match=message):
            testing.compare_mx(scales, codes, inputs, elem)


def test_compare_mx_rejects_bad_shapes_and_dtypes():
    from minifp8 import mx

    x = golden.block_inputs()
    expected = mx.quantize(x, "MXFP4_E2M1")
    with pytest.raises(ValueError, match="unpack FP4 nibbles first"):
        testing.compare_mx(expected.scales, expected.packed(), x, "MXFP4_E2M1")
    with pytest.raises(ValueError, match="scales has shape"):
        testing.compare_mx(expected.scales[:, :1], expected.codes, x, "MXFP4_E2M1")
    with pytest.raises(TypeError, match="must be uint8"):
        testing.compare_mx(expected.scales.astype(np.int32), expected.codes, x, "MXFP4_E2M1")
    with pytest.raises(TypeError, match="x must be"):
        testing.compare_mx(expected.scales, expected.codes, np.zeros(x.shape, np.int32), "MXFP4_E2M1")


@pytest.mark.parametrize("argv, message", [
    (["--formats", ","], "--formats names no format"),
    (["--formats", ""], "--formats names no format"),
    (["--formats", "E4M3,E9M9"], "unknown format 'E9M9'"),
    (["--out", ""], "--out must name a folder"),
])
def test_golden_cli_errors_are_one_line_without_traceback(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    argv = argv if "--out" in argv else ["--out", str(tmp_path / "g")] + argv
    with pytest.raises(SystemExit) as exit_info:
        golden.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # nothing written, in the folder asked for or the current one


def test_golden_cli_says_when_out_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert golden.main(["--out", str(blocker), "--no-blocks", "--formats", "E4M3"]) == 1
    err = capsys.readouterr().err
    assert f"--out {blocker} is a file, not a folder" in err and len(err.splitlines()) == 1


def test_golden_cli_help_says_which_shapes_the_manifest_lists(tmp_path, capsys):
    with pytest.raises(SystemExit):
        golden.main(["--help"])
    text = capsys.readouterr().out
    assert "``shapes`` and ``dtypes``: the shape and the dtype" in text and "every array the entry names" in text
    assert "formats of the codec and decode files" in text  # --formats does not pick MX or NVFP4 files
    manifest = golden.write(tmp_path, ["E2M1"])
    for entry in manifest["entries"]:
        named = {name for name in entry["arrays"].values() if name is not None}
        assert set(entry["shapes"]) == set(entry["dtypes"]) == named, entry["file"]


# ---- found in a review of the oracle: each test failed before its fix ---------------------------------
@pytest.mark.parametrize("name", list(formats.CATALOGUE))
def test_edge_cases_hold_both_signed_zeros(name):
    """np.unique keeps one of -0.0 and +0.0; a backend that drops the sign of zero (or writes FNUZ's
    NaN code for -0.0) must fail the edge sweep as it fails the structured one."""
    edge = testing.edge_cases(name)
    zeros = edge[edge == 0].view(np.uint32)
    assert sorted(zeros.tolist()) == [0, 0x8000_0000]
    finite = edge[np.isfinite(edge)]
    assert np.all(np.diff(finite) >= 0) and len(np.unique(finite.view(np.uint32))) == finite.size


def test_the_edge_sweep_catches_a_backend_that_loses_the_sign_of_zero():
    x = next(testing.sweep("E4M3", kind="edge"))
    backend = codec.encode(np.where(x == 0, np.float32(0), x), "E4M3")
    report = testing.compare(backend, x, "E4M3")
    assert report.count == 1 and report.by_class["sign-of-zero"] == 1


def test_golden_manifest_shapes_are_the_files_shapes(golden_dir):
    """Including the 0-d arrays of the NVFP4 entry (global_amax, encode_scale)."""
    manifest = json.loads((golden_dir / "manifest.json").read_text())
    zero_d = 0
    for entry in manifest["entries"]:
        with np.load(golden_dir / entry["file"], allow_pickle=False) as archive:
            for name, shape in entry["shapes"].items():
                assert list(archive[name].shape) == shape, (entry["file"], name)
                zero_d += shape == []
    assert zero_d >= 2


def test_golden_files_do_not_depend_on_the_operating_system(tmp_path, monkeypatch):
    arrays = {"x": np.arange(4, dtype=np.float32), "amax": np.float32(3)}
    here = golden.write_npz(tmp_path / "here.npz", arrays)
    monkeypatch.setattr("sys.platform", "win32")  # zipfile.ZipInfo reads it for create_system
    assert golden.write_npz(tmp_path / "windows.npz", arrays) == here


def test_golden_cli_reports_an_unusable_out_path_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert golden.main(["--out", "a" * 300, "--no-blocks", "--formats", "E4M3"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m minifp8.golden: error: --out: ") and "'aaaa" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert os.name == "nt" or "File name too long" in err  # (the OS's words: Windows has its own)


def test_compare_rejects_a_float8_dtype_of_another_format():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.0, 2.5, -3.0], np.float32)
    with pytest.raises(TypeError, match="actual has dtype float8_e5m2, which holds E5M2 codes, not the "
                                        "E4M3 codes that the format given names"):
        testing.compare(x.astype(ml_dtypes.float8_e5m2), x, "E4M3")
    with pytest.raises(TypeError, match="holds E4M3 codes, not the E4M3FNUZ codes"):
        testing.compare(x.astype(ml_dtypes.float8_e4m3fn), x, "E4M3FNUZ")
    assert testing.compare(x.astype(ml_dtypes.float8_e4m3fn), x, "float8_e4m3fn").ok  # (an alias)
    # A float8 dtype minifp8 does not know (ml_dtypes' IEEE-style E4M3, max 240) was read as E4M3
    # codes: 300 came back as 0x78, reported as one mismatch of class "other" (an audit's find).
    with pytest.raises(TypeError, match="dtype float8_e4m3, a 1-byte format minifp8 does not know, not E4M3"):
        testing.compare(np.array([300.0, 1.0], np.float32).astype(ml_dtypes.float8_e4m3), x[:2], "E4M3")
    assert testing.compare(codec.encode(x, "E4M3").view(np.int8), x, "E4M3").ok  # integer bytes are codes


def test_compare_names_bad_arguments():
    x = np.array([1.0, 2.0], np.float32)
    for bad in (None, 2.5, True):
        with pytest.raises(TypeError,
                           match=rf"max_rows \(mismatches to keep for the table\) must be an int, got .*{bad!r}"):
            testing.compare(x, x, "E4M3", max_rows=bad)
        with pytest.raises(TypeError, match="max_rows .* must be an int"):
            testing.compare_mx(np.zeros(1, np.uint8), np.zeros(2, np.uint8), x, "E4M3", max_rows=bad)
    for compare in (lambda: testing.compare(x, x, "E4M3", max_rows=-1),  # (a TypeError before; found in an API review)
                    lambda: testing.compare_mx(np.zeros(1, np.uint8), np.zeros(2, np.uint8), x, "E4M3", max_rows=-1),
                    lambda: gemm.compare_matmul(np.zeros((1, 1)), np.zeros((1, 1), np.uint8), np.ones((1, 1)),
                                                np.zeros((1, 1), np.uint8), np.ones((1, 1)), a_format="E4M3",
                                                b_format="E4M3", max_rows=-1)):
        with pytest.raises(ValueError, match=r"max_rows .* must be >= 0, got -1"):
            compare()
    with pytest.raises(ValueError, match=r"actual holds NaN, which is not a E2M1 value \(E2M1 has no NaN\)"):
        testing.compare(np.array([np.nan, 1.0], np.float32), x, "E2M1")
    with pytest.raises(TypeError, match="batch_size must be an int"):
        next(testing.sweep(kind="exhaustive", batch_size=2.0**20))


def test_a_negative_e8m0_input_is_classed_nan_at_any_magnitude():
    """E8M0 maps every negative number to NaN by definition, beyond its max too."""
    report = testing.compare(np.array([0x7F, 0x7F], np.uint8), np.array([-3e38, -3.0], np.float32), "E8M0")
    assert report.by_class["NaN/Inf"] == 2 and report.by_class["overflow"] == 0


def test_gradcheck_passes_exact_gradients_with_atol_zero_and_names_bad_tolerances():
    from minifp8.autograd import Tensor

    x = Tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    w = Tensor(np.array([0.5, 0.0, 2.0], np.float32), requires_grad=True)
    report = testing.gradcheck(lambda a, b: a * b, x, w, atol=0.0, raise_on_failure=False)
    assert report.passed, str(report)  # x * 0 has gradient 0, and central differences give exactly 0
    for name, value in (("eps", 0.0), ("eps", -1e-6), ("atol", -1.0), ("rtol", float("nan")),
                        ("float32_atol", float("inf")), ("float32_rtol", -0.5)):
        with pytest.raises(ValueError, match=f"gradcheck: {name} must be a finite number"):
            testing.gradcheck(lambda a, b: a * b, x, w, **{name: value})
    with pytest.raises(TypeError, match="gradcheck: eps"):
        testing.gradcheck(lambda a, b: a * b, x, w, eps="1e-6")


def test_gradcheck_names_a_bad_fn_seed_or_names():
    """seed='x' got numpy's SeedSequence message and fn=3 "'int' object is not callable" (a review's find)."""
    from minifp8.autograd import Tensor

    x = Tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)
    with pytest.raises(TypeError, match="gradcheck: fn must be callable, got int 3"):
        testing.gradcheck(3, x)
    for bad in ("x", 1.5, True, None):
        with pytest.raises(TypeError, match=f"gradcheck: seed must be an int, got {type(bad).__name__}"):
            testing.gradcheck(lambda t: t * 2.0, x, seed=bad)
    with pytest.raises(ValueError, match="gradcheck: seed must be >= 0, got -1"):
        testing.gradcheck(lambda t: t * 2.0, x, seed=-1)
    for bad in ("x", 3, [1], ("x", None)):
        with pytest.raises(TypeError, match="gradcheck: names must be a list or tuple of str, one per input"):
            testing.gradcheck(lambda t: t * 2.0, x, names=bad)
    assert testing.gradcheck(lambda t: t * 2.0, x, seed=np.int64(0), names=("x",)).passed


def test_gradcheck_refuses_to_pass_with_nothing_to_check():
    """An fn that returns no floating Tensor passed (zeros against zeros), and a non-leaf input failed with an
    in-place-change error the caller never made (a review's finds)."""
    from minifp8.autograd import Tensor

    x = Tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="gradcheck: fn returned no floating-point Tensor, got an empty tuple"):
        testing.gradcheck(lambda t: (), x)
    with pytest.raises(ValueError, match=r"gradcheck: fn returned no floating-point Tensor, got \['int64'\]"):
        testing.gradcheck(lambda t: Tensor(np.argsort(t.data)), x)
    with pytest.raises(ValueError, match="gradcheck: input 0 is the output of op 'mul', not a leaf"):
        testing.gradcheck(lambda t: (t * t).sum(), x * 2.0)
    assert testing.gradcheck(lambda t: (t * t).sum(), x).passed


def test_gradcheck_passes_an_error_of_exactly_one_tolerance():
    """The docstring: the check passes when each error (|difference| / tolerance) is <= 1, so an error
    of exactly 1 passes (found by mutation testing: < 1 went unnoticed). L = sum(x**3 * r) at x = 0 has
    analytic gradient 0, and central differences give (eps**3 r + eps**3 r) / (2 eps) = eps**2 r,
    exactly (eps a power of two); with atol 0 and rtol 1 the tolerance is |numeric| itself."""
    from minifp8.autograd import Tensor

    x = Tensor(np.zeros(3, np.float32), requires_grad=True)
    report = testing.gradcheck(lambda t: t * t * t, x, eps=2.0**-10, atol=0.0, rtol=1.0, raise_on_failure=False)
    entry = report.inputs[0]
    assert entry.analytic == 0.0 and entry.numeric != 0.0 and entry.error == 1.0
    assert entry.passed and report.passed, str(report)
    assert not testing.gradcheck(lambda t: t * t * t, x, eps=2.0**-10, atol=0.0, rtol=0.5,
                                 raise_on_failure=False).passed  # (an error of 2 fails)


# ---- a second review of the oracle helpers: each test failed before its fix ---------------------------
def test_golden_manifest_gives_every_arrays_dtype_and_the_files_are_little_endian(golden_dir):
    """A C++ or Rust reader needs the dtype and byte order of every array, random bits included."""
    manifest = json.loads((golden_dir / "manifest.json").read_text())
    stochastic = 0
    for entry in manifest["entries"]:
        named = {name for name in entry["arrays"].values() if name is not None}
        assert set(entry["shapes"]) == set(entry["dtypes"]) == named, (entry["file"], entry["arrays"])
        with np.load(golden_dir / entry["file"], allow_pickle=False) as archive:
            for name in named:
                assert archive[name].dtype.str == entry["dtypes"][name] in ("<f4", "<f8", "|u1"), (entry["file"], name)
                assert list(archive[name].shape) == entry["shapes"][name]
        stochastic += entry["arrays"].get("random_bits") is not None
    assert stochastic == 2 * len(formats.CATALOGUE) * 2  # saturation x input dtypes


def test_golden_writer_writes_big_endian_arrays_little_endian(tmp_path):
    values = np.array([1.5, -2.0, np.nan], ">f4")
    golden.write_npz(tmp_path / "a.npz", {"x": values, "y": np.array(3.0, ">f8")})
    with np.load(tmp_path / "a.npz") as archive:
        assert archive["x"].dtype.str == "<f4" and archive["y"].dtype.str == "<f8"
        np.testing.assert_array_equal(archive["x"], values)
    assert golden.write_npz(tmp_path / "b.npz", {"x": values.astype("<f4"), "y": np.array(3.0)}) == \
        golden.write_npz(tmp_path / "c.npz", {"x": values, "y": np.array(3.0, ">f8")})


def test_golden_manifest_says_how_to_read_its_entries(golden_dir):
    """The rules a reader needs (as minifp8.codec and minifp8.mx state them), and the don't-care codes of NaN-scale
    MX blocks: the file holds 0 there, and compare_mx ignores whatever a backend writes."""
    manifest = json.loads((golden_dir / "manifest.json").read_text())
    notes = manifest["notes"]
    assert set(notes) == {"arrays", "fields", "codec", "stochastic", "E8M0", "mx", "nvfp4", "gemm", "decode"}
    assert "little-endian" in notes["arrays"] and "ties" in notes["E8M0"] and "up" in notes["E8M0"]
    assert "random_bits" in notes["stochastic"] and "S_enc * float32(1/6)" in notes["nvfp4"]
    assert "(S_dec_b * global_amax) * float32(1/2688)" in notes["nvfp4"]  # the dequantisation
    for name in ("nan_style", "has_subnormals", "'ieee'", "'all_ones'", "'negative_zero'", "'none'", "emin"):
        assert name in notes["fields"], name
    assert all(f"{rounding} (" in notes["codec"] for rounding in golden.ROUNDINGS)
    assert "don't-care" in notes["mx"] and "ignore_codes_where_scale" in notes["mx"]
    for note in ("codec", "stochastic", "E8M0"):  # each points to where minifp8 states the rule in full
        assert "minifp8.codec" in notes[note]
    for note in ("mx", "nvfp4"):
        assert "minifp8.mx" in notes[note]
    for entry, arrays in entries_of(golden_dir, "mx"):
        assert entry["ignore_codes_where_scale"] == 0xFF
        nan_blocks = np.repeat(arrays["expected_scales"] == 0xFF, 32, axis=1)[:, :80]
        assert nan_blocks.any() and (arrays["expected_codes"][nan_blocks] == 0).all()
        codes = arrays["expected_codes"].copy()
        codes[nan_blocks] = 0x11  # anything, even a byte that is no E2M1 code: don't care
        assert testing.compare_mx(arrays["expected_scales"], codes, arrays["input"], entry["format"],
                                  scale_mode=entry["scale_mode"]).ok


def test_report_prints_float64_inputs_with_every_digit():
    """A float64 input just below a tie printed as the tie itself (.9g): "0.0029296875"."""
    x = np.array([3 * 2.0**-10 * (1 - 2.0**-40)])  # below 1.5 * 2**-9: rounds to 2**-9, code 0x01
    text = str(testing.compare(np.array([0x02], np.uint8), x, "E4M3"))
    assert " 0.0029296874999973355 " in text and "0.0029296875 " not in text
    row = text.splitlines()[-1]
    assert float(row.split()[1]) == x[0] and row.split()[2] == "0x3f67ffffffffe800"
    as_float32 = str(testing.compare(np.array([0x34], np.uint8), np.array([0.8], np.float32), "E4M3"))  # 0x35
    shown = float(as_float32.splitlines()[-1].split()[1])
    assert np.float32(shown) == np.float32(0.8) and shown != 0.8  # 9 digits: the float32, not the decimal


def test_report_header_names_the_nan_mode():
    x = np.array([1.0, np.nan], np.float32)
    actual = np.array([0x39, 0xFF], np.uint8)
    assert str(testing.compare(actual, x, "E4M3")).startswith("E4M3 (defaults): 2 of 2 codes differ")
    assert str(testing.compare(actual, x, "E4M3", nan="class")).startswith("E4M3 (nan='class'): 1 of 2")
    assert str(testing.compare(actual, x, "E4M3", nan="class", saturate=True)).startswith(
        "E4M3 (saturate=True, nan='class'): 1 of 2")
    scales, codes = mx.quantize(np.ones((1, 32), np.float32), "E4M3").scales, np.zeros((1, 32), np.uint8)
    assert str(testing.compare_mx(scales, codes, np.ones((1, 32), np.float32), "E4M3", nan="class")).startswith(
        "MX E4M3/32 (nan='class'): 0 of 1 block scales differ; elements in the other blocks: 32 of 32 differ")


def test_block_report_rows_show_the_input_as_given_and_after_scaling():
    x = np.full((1, 32), 2.0**-20, np.float32)
    x[0, 0] = 448 * 2.0**-20  # the amax: shared_exp = 8 - 20 - emax 8 = -20
    x[0, 5] = 1.0625 * 2.0**-20  # scaled: 1.0625, a tie, 1.0 (0x38)
    expected = mx.quantize(x, "E4M3")
    codes = expected.codes.copy()
    codes[0, 5] = 0x39
    report = testing.compare_mx(expected.scales, codes, x, "E4M3")
    row = report.elements.mismatches[0]
    assert (row.index, row.input, row.input_bits) == ((0, 5), float(x[0, 5]), "0x35880000")
    assert (row.scaled_input, row.scaled_bits, row.kind) == (1.0625, "0x3ff1000000000000", "tie")
    text = str(report)
    assert "after scaling" in text and "0x35880000" in text and "0x3ff1000000000000" in text
    nvfp4 = mx.quantize_nvfp4(x, global_amax=6.0)
    codes = nvfp4.codes.copy()
    codes[0, 5] ^= 1
    row = testing.compare_mx(nvfp4.scales, codes, x, "NVFP4", global_amax=6.0).elements.mismatches[0]
    assert row.input_bits == "0x35880000" and len(row.scaled_bits) == 10  # NVFP4 scales in float32


def test_rejected_input_dtypes_say_what_is_accepted():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.0, 2.5], np.float32)
    # (long double is float64 on Windows and on ARM Macs, and float64 is an accepted input)
    wide = [x.astype(np.longdouble)] if np.dtype(np.longdouble).itemsize > 8 else []
    for bad in (*wide, x.astype(np.int32), x.astype(ml_dtypes.int4)):
        with pytest.raises(TypeError, match="x must be a float16, float32 or float64 array \\(or an ml_dtypes float "
                                            "array\\)") as error:
            testing.compare(np.zeros(2, np.uint8), bad, "E4M3")
        assert "holds" not in str(error.value)
    # ml_dtypes floats are inputs as their float32 values (tests/test_ml_dtypes_inputs.py); as actual they are
    # not codes, and bfloat16 gets the hint
    for bad, hint in ((x.astype(ml_dtypes.bfloat16), True), *((array, False) for array in wide),
                      (x.astype(np.int32), False)):
        with pytest.raises(TypeError, match="actual must be uint8 codes, .* or float16/32/64 values") as error:
            testing.compare(bad, x, "E4M3")
        assert ("actual.astype(np.float32) holds" in str(error.value)) == hint
    with pytest.raises(TypeError, match="x must be a float16, .* got dtype int32"):
        testing.compare_mx(np.zeros(1, np.uint8), np.zeros(2, np.uint8), x.astype(np.int32), "E4M3")


def test_results_that_hold_no_numbers_are_named_not_read_as_a_shape_mismatch():
    """compare(None, x) said "actual has shape () but x has shape (2,)", and compare_mx the same of its
    scales or codes: a missing result read as a shape bug."""
    x = np.array([1.0, 2.5], np.float32)
    for bad, shown in ((None, "NoneType None"), ("ab", "str 'ab'"), ([1, None], r"list \[1, None\]"),
                       (np.array(["a", "b"]), r"ndarray of dtype <U1 and shape \(2,\)")):
        with pytest.raises(TypeError, match=f"actual must be the backend's codes .* got {shown}$"):
            testing.compare(bad, x, "E4M3")
    x = np.ones(32, np.float32)
    with pytest.raises(TypeError, match="scales must be the backend's codes .* got NoneType None$"):
        testing.compare_mx(None, np.zeros(32, np.uint8), x, "MXFP8_E4M3")
    with pytest.raises(TypeError, match="codes must be the backend's codes .* got NoneType None$"):
        testing.compare_mx(np.zeros(1, np.uint8), None, x, "MXFP8_E4M3")


def test_the_module_docstring_says_which_helpers_raise():
    """It said every helper returns a report and raises when the check fails: compare and
    compare_mx never raise for a mismatch, and the assert_* helpers return None."""
    x = np.array([1.0625], np.float32)
    assert not testing.compare(np.array([0x39], np.uint8), x, "E4M3").ok  # returned, not raised
    assert testing.assert_codes_equal(np.array([0x38], np.uint8), x, "E4M3") is None
    doc = " ".join(testing.__doc__.split())
    assert "never raise for a mismatch" in doc and "return None and raise ``AssertionError``" in doc
    assert "Each helper returns a report object and raises" not in doc


def test_golden_boundary_input_builders_check_their_arguments():
    with pytest.raises(ValueError, match="unknown MX format 'MXFP9'"):
        golden.mx_inputs("MXFP9")
    with pytest.raises(ValueError, match="mx_inputs: length must be >= 71, got 70"):
        golden.mx_inputs("MXFP8_E4M3", 70)
    for bad, error in ((0, ValueError), (-1.0, ValueError), (float("inf"), ValueError), ("6", TypeError)):
        with pytest.raises(error, match="nvfp4_boundary_inputs: global_amax must be"):
            golden.nvfp4_boundary_inputs(bad)
    with pytest.raises(ValueError, match="nvfp4_boundary_inputs: length must be >= 16, got 15"):
        golden.nvfp4_boundary_inputs(6.0, length=15)
    x = golden.nvfp4_boundary_inputs(6.0, rows=2, length=40)  # 2 whole blocks a row; the rest zeros
    assert x.shape == (2, 40) and (x[:, 32:] == 0).all() and (np.abs(x) < 6).all()


# ---- the GEMM golden file, checked without minifp8's codec or gemm: exact rationals and the spec's decoders ----
# (exponent bits, mantissa bits, bias): OCP OFP8 rev 1.0 Table 1 (E4M3, E5M2), OCP MX v1.0 section 5.3 (E2M1)
SPEC_ELEMENTS = {"E4M3": (4, 3, 7), "E5M2": (5, 2, 15), "E2M1": (2, 1, 1)}
GEMM_LAYOUTS = {"per_tensor", "rowwise", "1x128_128x128", "mx", "nvfp4"}


def spec_decode(codes, name):
    """float64 values of uint8 codes, from the specifications: E8M0 2**(code - 127), 0xFF NaN; the
    elements (-1)**s * 2**(1 - bias) * 0.m (field 0) or 2**(field - bias) * 1.m, E4M3 S.1111.111 NaN,
    E5M2 field 31 Inf (m = 0) or NaN."""
    codes = np.asarray(codes).astype(np.int64)
    if name == "E8M0":
        return np.where(codes == 0xFF, np.nan, np.ldexp(1.0, codes - 127))
    exponent_bits, mantissa_bits, bias = SPEC_ELEMENTS[name]
    magnitude_bits = exponent_bits + mantissa_bits
    assert (codes >> (magnitude_bits + 1) == 0).all()
    field, mantissa = (codes >> mantissa_bits) & ((1 << exponent_bits) - 1), codes & ((1 << mantissa_bits) - 1)
    fraction = mantissa / 2.0**mantissa_bits
    values = np.where(field == 0, np.ldexp(fraction, 1 - bias), np.ldexp(1 + fraction, field - bias))
    values = np.where(codes >> magnitude_bits, -values, values)
    if name == "E4M3":
        values = np.where(codes & 0x7F == 0x7F, np.nan, values)
    if name == "E5M2":
        values = np.where(field == 31, np.where(mantissa == 0, np.copysign(np.inf, values), np.nan), values)
    return values


def gemm_operands(entry, arrays):
    """A and B dequantised in float64 by the "gemm" note alone: each code's value times the scale of its
    block (scales[i // block[0], j // block[1]]) times the tensor scale (exact: at most 4 + 24 + 24 bits)."""
    operands = []
    for operand in "ab":
        values = spec_decode(arrays[f"{operand}_codes"], entry[f"{operand}_format"])
        rows, columns = entry[f"{operand}_scale_block"]
        scales = arrays[f"{operand}_scales"].astype(np.float64)
        assert scales.shape == (values.shape[0] // rows, values.shape[1] // columns)
        scales = np.repeat(np.repeat(scales, rows, axis=0), columns, axis=1)
        if f"{operand}_tensor_scale" in arrays:
            scales = scales * np.float64(arrays[f"{operand}_tensor_scale"])
        with np.errstate(invalid="ignore"):
            operands.append(values * scales)
    return operands


def float32_kernel(entry, arrays, scale_power=1):
    """A kernel in float32: dequantise each element in float32 (one rounding), then multiply and add in
    float32, k in order; NVFP4's tensor scales in the epilogue. ``scale_power=2``: A's scales applied twice."""
    a_values = spec_decode(arrays["a_codes"], entry["a_format"]).astype(np.float32)
    b_values = spec_decode(arrays["b_codes"], entry["b_format"]).astype(np.float32)
    expanded = []
    for operand in "ab":
        rows, columns = entry[f"{operand}_scale_block"]
        expanded.append(np.repeat(np.repeat(arrays[f"{operand}_scales"], rows, axis=0), columns, axis=1))
    with np.errstate(all="ignore"):
        a = a_values * expanded[0]
        for _ in range(scale_power - 1):
            a = a * expanded[0]
        b = b_values * expanded[1]
        accumulator = np.zeros((entry["m"], entry["n"]), np.float32)
        for k in range(entry["k"]):
            accumulator = accumulator + a[:, k, None] * b[None, k, :]
        if "a_tensor_scale" in arrays:
            accumulator = accumulator * (arrays["a_tensor_scale"] * arrays["b_tensor_scale"])
    assert accumulator.dtype == np.float32
    return accumulator


def gemm_entries_of(golden_dir):
    found = entries_of(golden_dir, "gemm")
    assert [entry["name"] for entry, _ in found] == [problem[0] for problem in golden.GEMM_PROBLEMS]
    return found


def agrees(output, arrays):
    """The note's rule: within tolerance where the reference is finite, NaN where it is NaN."""
    reference, tolerance = arrays["reference"], arrays["tolerance"]
    with np.errstate(invalid="ignore"):
        within = np.abs(output.astype(np.float64) - reference) <= tolerance
    return np.where(np.isnan(reference), np.isnan(output), within)


def test_golden_gemm_file_covers_the_scale_layouts_and_stays_small(golden_dir):
    found = gemm_entries_of(golden_dir)
    assert len(found) == 7
    assert {entry["layout"] for entry, _ in found} == GEMM_LAYOUTS
    assert {entry["a_format"] for entry, _ in found} | {entry["b_format"] for entry, _ in found} == \
        {"E4M3", "E5M2", "E2M1"}
    assert (golden_dir / "gemm.npz").stat().st_size < 512 * 1024
    for entry, arrays in found:
        m, k, n = entry["m"], entry["k"], entry["n"]
        assert arrays["a_codes"].shape == (m, k) and arrays["b_codes"].shape == (k, n)
        for role in ("reference", "magnitude", "reference_error_bound", "tolerance"):
            assert arrays[role].shape == (m, n) and arrays[role].dtype == np.float64, (entry["name"], role)
        # the scale layouts of the table in minifp8.gemm.dequantize's docstring
        expected = {"per_tensor": ((1, 1), (1, 1)), "rowwise": ((m, 1), (1, n)),
                    "1x128_128x128": ((m, k // 128), (k // 128, n // 128)), "mx": ((m, k // 32), (k // 32, n)),
                    "nvfp4": ((m, k // 16), (k // 16, n))}[entry["layout"]]
        assert (arrays["a_scales"].shape, arrays["b_scales"].shape) == expected, entry["name"]
        assert arrays["a_scales"].dtype == arrays["b_scales"].dtype == np.float32
        assert entry["scale_format"] == {"mx": "E8M0", "nvfp4": "E4M3"}.get(entry["layout"])
        assert ("a_tensor_scale" in arrays) == ("b_tensor_scale" in arrays) == (entry["layout"] == "nvfp4")
    blocks = {entry["name"]: arrays["b_scales"].shape for entry, arrays in found}
    assert blocks["1x128_128x128"] == (2, 2)  # B's 128 x 128 blocks, two along K and two along N


def test_golden_gemm_scale_codes_decode_to_the_stored_scales(golden_dir):
    decoded = 0
    for entry, arrays in gemm_entries_of(golden_dir):
        if entry["scale_format"] is None:
            assert "a_scale_codes" not in arrays
            continue
        for operand in "ab":
            values = spec_decode(arrays[f"{operand}_scale_codes"], entry["scale_format"])
            np.testing.assert_array_equal(arrays[f"{operand}_scales"], values.astype(np.float32))
            assert (values[np.isfinite(values)] > 0).all()
            decoded += values.size
    assert decoded == (16 * 8 + 8 * 32) + (16 * 16 + 16 * 32) + (16 * 2 + 2 * 16)  # mx, nvfp4, mx_nan


def test_golden_gemm_reference_and_magnitude_are_the_exact_sums(golden_dir):
    """Fractions for some outputs of each entry (the zero row and the NaN rows and columns among them);
    the NaN pattern from the codes; and, as the note says, a float64 GEMM in another order gives the
    reference bit for bit (so no BLAS changes the file)."""
    rng = np.random.default_rng(0)
    for entry, arrays in gemm_entries_of(golden_dir):
        a, b = gemm_operands(entry, arrays)
        reference, magnitude, bound = arrays["reference"], arrays["magnitude"], arrays["reference_error_bound"]
        nan_rows, nan_columns = np.isnan(a).any(axis=1), np.isnan(b).any(axis=0)
        np.testing.assert_array_equal(np.isnan(reference), nan_rows[:, None] | nan_columns[None, :])
        outputs = {tuple(index) for index in rng.integers(0, [entry["m"], entry["n"]], size=(6, 2))}
        if entry["name"] == "rowwise":
            assert (arrays["a_codes"][3] & 0x7F == 0).all()
            outputs |= {(3, 0), (3, 17)}
            assert (reference[3] == 0).all() and (magnitude[3] == 0).all()
        if entry["name"] == "mx_nan":
            assert list(np.flatnonzero(nan_rows)) == [5, 9] and list(np.flatnonzero(nan_columns)) == [7]
            outputs |= {(5, 0), (0, 7), (9, 7)}
        for i, j in sorted(outputs):
            if nan_rows[i] or nan_columns[j]:
                assert np.isnan(reference[i, j]) and bound[i, j] == 0 and arrays["tolerance"][i, j] == 0
                continue
            terms = [Fraction(x) * Fraction(y) for x, y in zip(a[i], b[:, j])]
            assert Fraction(reference[i, j]) == sum(terms), (entry["name"], i, j)
            assert Fraction(magnitude[i, j]) == sum(abs(term) for term in terms), (entry["name"], i, j)
            gamma = entry["k"] * 2.0**-53 / (1 - entry["k"] * 2.0**-53)
            assert bound[i, j] >= gamma * magnitude[i, j]
        finite_a, finite_b = np.where(np.isfinite(a), a, 0.0), np.where(np.isfinite(b), b, 0.0)
        backwards = np.zeros_like(reference)
        for k in reversed(range(entry["k"])):
            backwards = backwards + finite_a[:, k, None] * finite_b[None, k, :]
        finite = ~np.isnan(reference)
        np.testing.assert_array_equal(backwards[finite], reference[finite])


def test_golden_gemm_tolerance_accepts_a_float32_kernel_and_rejects_a_scale_applied_twice(golden_dir):
    from minifp8 import gemm

    for entry, arrays in gemm_entries_of(golden_dir):
        output = float32_kernel(entry, arrays)
        assert agrees(output, arrays).all(), entry["name"]
        twice = float32_kernel(entry, arrays, scale_power=2)
        assert (~agrees(twice, arrays)).mean() > 0.5, entry["name"]
        operands = [arrays["a_codes"], arrays["a_scales"].astype(np.float64), arrays["b_codes"],
                    arrays["b_scales"].astype(np.float64)]
        if "a_tensor_scale" in arrays:
            operands[1] = operands[1] * np.float64(arrays["a_tensor_scale"])
            operands[3] = operands[3] * np.float64(arrays["b_tensor_scale"])
        formats_given = {"a_format": entry["a_format"], "b_format": entry["b_format"]}
        report = gemm.compare_matmul(output, *operands, **formats_given)
        assert report.ok and np.array_equal(report.tolerance, arrays["tolerance"]), entry["name"]
        with np.errstate(all="ignore"):
            assert not gemm.compare_matmul(twice, *operands, **formats_given, max_rows=0).ok


def test_golden_gemm_tiny_entry_needs_the_tolerances_underflow_term(golden_dir):
    """rowwise_tiny: A's dequantised values are float32 subnormals that float32 rounds, and the float32
    kernel's error there exceeds what the rounding of K + 3 operations and the output allows without
    the underflow term C, yet lies within the stored tolerance."""
    entry, arrays = next(found for found in gemm_entries_of(golden_dir) if found[0]["name"] == "rowwise_tiny")
    a, _ = gemm_operands(entry, arrays)
    assert (np.abs(a[a != 0]) < 2.0**-126).all() and (a.astype(np.float32) != a).any()
    output = float32_kernel(entry, arrays)
    error = np.abs(output - arrays["reference"])
    k, u = entry["k"], 2.0**-24
    without_underflow = (2 * (k + 3) * u / (1 - (k + 3) * u) * arrays["magnitude"] + u * np.abs(arrays["reference"])
                         + (4 * k + 5) * 2.0**-149)
    assert (error > without_underflow).any() and (error <= arrays["tolerance"]).all()


def test_golden_gemm_note_says_what_a_consumer_needs(golden_dir):
    note = " ".join(json.loads((golden_dir / "manifest.json").read_text())["notes"]["gemm"].split())
    for stated in ("a_codes is M x K and b_codes K x N, both row-major", "a_scales[i // (M / R), k // (K / C)]",
                   "rowwise [1, K], [K, 1]", "1x128_128x128 [1, 128], [128, 128]", "mx [1, 32], [32, 1]",
                   "nvfp4 [1, 16], [16, 1]", "2**(code - 127), 0xFF NaN", "computed exactly",
                   "reference is the exact D", "gamma_n = n u / (1 - n u)", "acc = gamma_(K+3) with u = 2**-24",
                   "it gives the stored tolerance bit for bit", "|output - reference| <= tolerance",
                   "is NaN where reference is NaN", "the underflow_term array, M x N, holds it"):
        assert stated in note, stated


def test_golden_gemm_note_rebuilds_the_error_bound_and_the_tolerance_bit_for_bit(golden_dir):
    """The note's formulas, written here from its text in its order, give the stored reference error bound and
    tolerance of every GEMM entry bit for bit, with C from the underflow_term array (0.3.3; before, C was not
    stored and the note said to use the tolerance as given, which no consumer could check)."""
    for entry, arrays in gemm_entries_of(golden_dir):
        k, reference, magnitude = entry["k"], arrays["reference"], arrays["magnitude"]
        finite = np.isfinite(reference)
        gamma_k = k * 2.0**-53 / (1 - k * 2.0**-53)
        acc = (k + 3) * 2.0**-24 / (1 - (k + 3) * 2.0**-24)
        error_bound = np.where(finite, gamma_k * magnitude / (1 - gamma_k), 0.0)
        exact_magnitude = magnitude / (1 - gamma_k)
        accumulated = np.where(exact_magnitude > 0, acc * exact_magnitude, 0.0) + (4 * k + 4) * 2.0**-149
        carried = arrays["underflow_term"]
        accumulated = np.where(carried > 0, accumulated + (1 + acc) * carried, accumulated)
        with np.errstate(invalid="ignore"):
            tolerance = np.where(finite, (2.0**-24 * ((np.abs(reference) + error_bound) + accumulated) + 2.0**-150)
                                 + accumulated + error_bound, 0.0)
        assert np.array_equal(error_bound, arrays["reference_error_bound"]), entry["name"]
        assert np.array_equal(tolerance, arrays["tolerance"]), entry["name"]
        assert (carried > 0).any() == (entry["name"] == "rowwise_tiny"), entry["name"]


def test_golden_gemm_builders_name_a_bad_problem_or_layout():
    with pytest.raises(ValueError, match="gemm_inputs: name must be one of per_tensor, rowwise, .*got 'bogus'"):
        golden.gemm_inputs("bogus")
    with pytest.raises(ValueError, match="gemm_scale_blocks: layout must be one of per_tensor, .*got 'columnwise'"):
        golden.gemm_scale_blocks("columnwise", 16, 256, 32)
    assert golden.gemm_scale_blocks("1x128_128x128", 16, 256, 256) == ((1, 128), (128, 128))
    # found in a review: a K that no block divides, or a size below 1, was returned blocks silently
    with pytest.raises(ValueError, match="gemm_scale_blocks: k must be a multiple of 32, the mx blocks along K, got 100"):
        golden.gemm_scale_blocks("mx", 16, 100, 32)
    with pytest.raises(ValueError, match="gemm_scale_blocks: m must be >= 1, got 0"):
        golden.gemm_scale_blocks("rowwise", 0, 4, 4)
    with pytest.raises(TypeError, match="gemm_scale_blocks: n must be an int"):
        golden.gemm_scale_blocks("per_tensor", 4, 4, 4.0)


def test_golden_exact_sum_check_counts_the_growth_of_a_sum_of_k_terms():
    """`_check_exact_sums`: K products that are multiples of 2**g below 2**h sum below K * 2**h, so an
    exact sum needs h - g bits plus ceil(log2 K) (found by mutation testing: without the K term the
    check passed sums float64 rounds). 2 - 2**-51 is a multiple of 2**-51 below 2 (52 bits), times
    ones (below 2: 1 bit): three such products sum to 6 - 3 * 2**-51, which float64 cannot hold (in
    [4, 8) its spacing is 2**-50), so the check must refuse them; one product alone is exact."""
    term = 2 - 2.0**-51
    assert Fraction(sum([term] * 3)) != 3 * Fraction(term)  # (float64 rounds this sum)
    with pytest.raises(RuntimeError, match="the GEMM inputs need 55 bits for exact float64 sums"):
        golden._check_exact_sums(np.full((1, 3), term), np.ones((3, 1)))
    golden._check_exact_sums(np.full((1, 1), term), np.ones((1, 1)))  # 53 bits: passes


@pytest.mark.parametrize("global_amax", [1e-33, 1e-40, 1e-45])
def test_nvfp4_boundary_inputs_refuses_an_amax_whose_inputs_would_be_float32_subnormals(global_amax):
    """Found in a review: 1e-40 passed the check and failed later with "quantize_nvfp4 needs finite
    inputs" (float32 steps below 0.0 made NaN bits)."""
    with pytest.raises(ValueError, match=r"nvfp4_boundary_inputs: global_amax .* is too small: .* give 1e-30 or more"):
        golden.nvfp4_boundary_inputs(global_amax)
    assert np.all(np.isfinite(golden.nvfp4_boundary_inputs(1e-30)))


def test_golden_write_npz_takes_a_str_path(tmp_path):
    # (a str raised AttributeError: 'str' object has no attribute 'write_bytes'; found in an API review)
    digest = golden.write_npz(str(tmp_path / "a.npz"), {"x": np.arange(3.0)})
    assert digest == golden.write_npz(tmp_path / "b.npz", {"x": np.arange(3.0)})
    with pytest.raises(TypeError, match="golden.write_npz: path must be a file path"):
        golden.write_npz(3, {"x": np.arange(3.0)})


def test_a_rounding_rule_that_also_fits_sorted_inputs_is_named_beside_the_shift():
    """Found by a review: a truncating cast of an arange sweep matched a one-element shift too, and the
    hint said "an off-by-one offset, not a rounding bug", never naming the rule."""
    x = np.arange(0, 2, 0.2, dtype=np.float32)
    layout = testing.compare(codec.encode(x, "E2M1", rounding="toward_zero"), x, "E2M1").layout
    assert layout.startswith("actual holds the expected codes shifted by one element")
    assert "not a rounding bug" not in layout
    assert "or actual equals encode(x, 'E2M1', rounding='toward_zero') at every element" in layout
    assert layout.endswith("these inputs cannot tell an offset from a rule apart (shuffled inputs can)")
    # a shift that no rule explains keeps its verdict
    x = np.random.default_rng(3).normal(size=64).astype(np.float32)
    shifted = np.roll(codec.encode(x, "E4M3"), 1)
    assert testing.compare(shifted, x, "E4M3").layout.endswith(": an off-by-one offset, not a rounding bug")


def test_a_flushed_negative_subnormal_in_fnuz_is_a_subnormal_not_an_overflow():
    """Found by a review: FNUZ's one zero makes a flush that keeps the sign write 0x80, its NaN, which
    was classed overflow; the same flush of the positive input was subnormal."""
    x = np.array([-2.0**-9, -3 * 2.0**-10, 2.0**-9, -1.0], np.float32)
    for name in ("E4M3FNUZ", "E5M2FNUZ"):
        fmt = formats.get(name)
        tiny = x * np.float32(fmt.min_normal / 2.0**-7)  # below the format's smallest normal
        tiny[3:] = x[3:]
        actual = codec.encode(tiny, fmt)
        actual[:2], actual[2] = 0x80, 0x00
        actual[3] = 0x80  # NaN back for a normal input stays an overflow
        report = testing.compare(actual, tiny, fmt)
        assert [row.kind for row in report.mismatches] == ["subnormal"] * 3 + ["overflow"]


def test_a_scale_one_code_off_in_some_blocks_gets_a_cause_only_where_one_is_checked():
    """Found by reviews: "minus 1" gave the float32-log2 cause, which makes a scale one code high; and
    later, every +1 or -1 got a cause whatever the blocks held and whatever the scale mode (a scale
    clamped to 2^-126 was called a float32 log2 rounding up, and under ``ceil`` a float32 log2 that
    rounds down was called an amax that missed the block's largest magnitude)."""
    rng = np.random.default_rng(1)
    x = np.clip(rng.normal(size=(4, 64)), -1.9, 1.9).astype(np.float32)
    quantized = mx.quantize(x, "MXFP8_E4M3")
    for step, size in ((-1, "small"), (1, "large")):  # one block off for no reason the oracle can check
        scales = quantized.scales.copy()
        scales[1, 1] = int(scales[1, 1]) + step
        layout = testing.compare_mx(scales, quantized.codes, x, "MXFP8_E4M3").layout
        assert layout.splitlines()[0].endswith(f"the shared exponent one too {size} in those blocks")
    # a backend that took each block's second largest magnitude as its amax
    x[1, 37] = 3.0  # the largest of block (1, 1), one binade above the rest
    exact = mx.quantize(x, "MXFP8_E4M3")
    second_largest = np.sort(np.abs(x.reshape(4, 2, 32)), axis=2)[..., -2]
    backend_scales = mx.shared_exponents(second_largest, "E4M3")[0]
    assert (backend_scales != exact.scales).sum() == 1 and backend_scales[1, 1] == exact.scales[1, 1] - 1
    layout = testing.compare_mx(backend_scales, exact.codes, x, "MXFP8_E4M3").layout
    assert ("one too small in those blocks (each block's second largest magnitude, taken as its amax, gives that "
            "scale: the amax may miss the block's largest element, as one over part of the block would)") in layout
    # ceil from a float32 log2, just above 2^20 (where it rounds down to 20)
    x[1, 37] = np.nextafter(np.float32(2.0**20), np.float32(np.inf))
    exact = mx.quantize(x, "MXFP8_E4M3", scale_mode="ceil")
    backend_scales = exact.scales.copy()
    backend_scales[1, 1] = int(np.ceil(np.log2(x[1, 37]))) - 8 + mx.E8M0_BIAS  # float32 log2: 20, not 20.0000001
    assert backend_scales[1, 1] == exact.scales[1, 1] - 1
    layout = testing.compare_mx(backend_scales, exact.codes, x, "MXFP8_E4M3", scale_mode="ceil").layout
    assert ("one too small in those blocks (each block's amax lies just above a power of two, and its float32 "
            "log2 rounds down to it)") in layout
    # a scale kept a normal float32: 2^-126 (code 1) where E8M0's 2^-127 (code 0) is due
    tiny = np.concatenate([np.full((1, 32), 5e-42, np.float32), x[:1, :32]])
    exact = mx.quantize(tiny, "MXFP8_E4M3")
    backend_scales = exact.scales.copy()
    assert backend_scales[0, 0] == 0
    backend_scales[0, 0] = 1
    layout = testing.compare_mx(backend_scales, exact.codes, tiny, "MXFP8_E4M3").layout
    assert "one too large in those blocks (the scale kept at 2^-126, float32's smallest normal" in layout


def test_a_float64_input_rounded_through_float32_is_named_as_that_double_rounding():
    """Found by a review: the rule hint tried float16 and bfloat16 for float32 inputs only, so a float64
    input cast through float32 was called "rounds toward zero" (a rule that fit these three by chance)."""
    x = np.array([1.0625 + 2.0**-40, 1.0625 - 2.0**-40, 3.0])
    layout = testing.compare(codec.encode(x.astype(np.float32), "E4M3"), x, "E4M3").layout
    assert layout.startswith("actual equals encode(x.astype(float32), 'E4M3') at every element: the backend "
                             "rounds x to float32 first (a double rounding)")


def test_a_tie_between_zero_and_the_smallest_subnormal_returned_as_zero_is_a_flushed_subnormal():
    """The class order puts a flushed subnormal before a tie (README's table): 2**-10, half of E4M3's
    smallest subnormal 2**-9, rounds away to 0x01 under nearest_away; a backend's 0 is "subnormal",
    not "tie" (a mutation audit's find: nothing pinned the order there)."""
    report = testing.compare(np.array([0x00], np.uint8), np.array([2.0**-10], np.float32), "E4M3",
                             rounding="nearest_away")
    assert report.count == 1 and report.mismatches[0].expected_code == 0x01
    assert report.mismatches[0].kind == "subnormal"


def test_compare_mx_names_every_kind_of_format_it_takes_for_a_mistyped_name():
    """A mistyped element name listed the element formats alone, though compare_mx (and mx.quantize)
    also take the MX names, and compare_mx "NVFP4" (a left-alone item of stop 66)."""
    x = np.ones(32, np.float32)
    scales, codes = np.zeros(1, np.uint8), np.zeros(32, np.uint8)
    for name in ("nvfp5", "MXFP9"):
        with pytest.raises(ValueError, match=rf"^compare_mx: unknown (MX )?format '{name}'") as info:
            testing.compare_mx(scales, codes, x, name)
        assert "MXFP8_E4M3" in str(info.value) and str(info.value).endswith("; or 'NVFP4'")
    # (the final review: it listed every format, e8m0 and the FNUZ ones too, which mx then refuses)
    with pytest.raises(ValueError, match=r"^unknown format 'fp12'; MX elements: E4M3, E5M2, E3M2, E2M3, E2M1 "
                                         r"\(or another of their names, e.g. 'float8_e4m3fn'\); or an MX format: "):
        mx.quantize(x, "fp12")
    with pytest.raises(ValueError, match=r"^compare_mx: MX elements must be one of .*, got E8M0$"):
        testing.compare_mx(scales, codes, x, "E8M0")  # (no "or 'NVFP4'" after an error that is not a typo)
    assert not testing.compare_mx(scales, codes, x, "e4m3").ok  # a known name still reaches the comparison
