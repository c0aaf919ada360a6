"""Contracts of the oracle for other backends (`minifp8.testing.compare`, `compare_mx` and their
reports) and of the golden files (`minifp8.golden`) that the other oracle tests left unpinned.

Every expected value here is worked out by hand from the format definitions (E4M3: code
``e << 3 | m``, value ``(1 + m/8) * 2**(e - 7)``), read from an IEEE bit pattern with `struct`, or
stated by a docstring or a golden note; none is copied from minifp8's output.

- Mismatch classes at their edges (`compare`'s docstring): "near-tie" is within 1/256 of a
  quantum from halfway, inclusive; a tie or near-tie is the *other neighbour* (one code away);
  a non-finite code for a finite input is "overflow", and so is an input whose expected code is
  NaN only because it overflows without saturation.
- `Report`: ``options`` leave out the random bits; float16 inputs are taken and their bits shown
  in 16 bits; input bits keep their leading zero digits.
- `BlockReport`: a differing scale alone makes it not ok; ``max_rows`` caps the scale rows too;
  inputs print as their own dtype, not as the float64 scaled value; two swapped codes get the
  layout hint; an NVFP4 row shows the element as the encoder saw it, clamped to +-6.
- Golden files: fixed zip timestamps and C-order arrays; the manifest's ``minifp8_version`` and
  random bits; the codec inputs' float64 near-midpoints (both signs, any spelling of float64) and
  signed random values; the special rows the block-input docstrings promise (signed zeros, ties
  at shared exponent 5, NVFP4 boundary blocks from scale code 0x01 to 0x7D, either side of each
  boundary).
"""
import hashlib
import json
import struct
import zipfile

import numpy as np
import pytest

import minifp8
from minifp8 import codec, formats, golden, mx, testing

E4M3_ONE, E4M3_1_125, E4M3_1_25 = 0x38, 0x39, 0x3A  # (1 + m/8) * 2**(e - 7), e = 7
E4M3_0_9375 = 0x37  # e = 6, m = 7: 1.875 / 2
E4M3_NAN, E4M3_MAX = 0x7F, 0x7E  # S.1111.111 and 448 = 1.75 * 2**8


def bits_text(value, code):
    """``0x`` and the big-endian hex digits of ``value`` packed with struct ``code`` ("e", "f", "d")."""
    return "0x" + struct.pack(">" + code, value).hex()


def kinds(report):
    return [row.kind for row in report.mismatches]


# ---- compare: the classes at their edges ----------------------------------------------------------
def test_near_tie_window_is_one_256th_of_a_quantum_inclusive():
    """E4M3 on [1, 2): quantum 1/8, tie 1.0625 between 1.0 (0x38) and 1.125 (0x39). The window is
    1/256 of a quantum = 2**-11: at 2**-11 from the tie a wrong neighbour is a near-tie (either
    side); at 2**-10 it is "other"."""
    x = np.array([1.0625 + 2.0**-11, 1.0625 - 2.0**-11, 1.0625 + 2.0**-10, 1.0625 - 2.0**-10], np.float32)
    backend = np.array([E4M3_ONE, E4M3_1_125, E4M3_ONE, E4M3_1_125], np.uint8)  # the other neighbour each
    report = testing.compare(backend, x, "E4M3")
    assert [row.expected_code for row in report.mismatches] == [E4M3_1_125, E4M3_ONE, E4M3_1_125, E4M3_ONE]
    assert kinds(report) == ["near-tie", "near-tie", "other", "other"]
    assert testing.NEAR_TIE_WINDOW == 1 / 256


def test_a_tie_or_near_tie_is_a_wrong_pick_of_the_other_neighbour_only():
    """A tie (1.0625 -> 1.0) returned as 1.25 or a near-tie returned as 0.9375 is two codes off:
    not the tie rule's doing, so "other"."""
    x = np.array([1.0625, 1.0625 + 2.0**-11], np.float32)
    report = testing.compare(np.array([E4M3_1_25, E4M3_0_9375], np.uint8), x, "E4M3")
    assert [(row.kind, row.distance) for row in report.mismatches] == [("other", 2), ("other", 2)]


def test_a_code_one_step_beyond_the_expected_one_is_no_pick_of_the_other_neighbour():
    """A later review's find: a code one step off on the far side (1.0625, a tie of 1.0 and 1.125, returned
    as 0.9375; its near-tie as 1.25) was called tie and near-tie, though neither is a neighbour of x: every
    code one too low read as the tie rule's or double rounding's doing. Now "other"; the other neighbour
    (1.125 for the tie, 1.0 for the near-tie) still reads as tie and near-tie."""
    x = np.array([1.0625, 1.0625 + 2.0**-11, 1.0625, 1.0625 + 2.0**-11], np.float32)
    report = testing.compare(np.array([0x37, 0x3A, 0x39, 0x38], np.uint8), x, "E4M3")
    assert [(row.kind, row.distance) for row in report.mismatches] == [("other", 1), ("other", 1), ("tie", 1),
                                                                         ("near-tie", 1)]


def test_the_fnuz_nan_prints_without_a_sign():
    """A review's find: FNUZ's one NaN, 0x80, printed as -nan in report rows (its value's sign bit), even for
    a +NaN input; describe_code says it has no sign."""
    report = testing.compare(np.array([0x7F] * 2, np.uint8), np.array([np.nan, 1000], np.float32), "E4M3FNUZ")
    assert " 0x80 nan " in str(report) and "-nan" not in str(report)
    custom = formats.FloatFormat("MyFNUZ", 4, 3, 8, nan_style="negative_zero")  # (a name get does not know)
    report = testing.compare(np.array([0x7F] * 2, np.uint8), np.array([np.nan, 1000], np.float32), custom)
    assert " 0x80 nan " in str(report) and "-nan" not in str(report)


def test_a_non_finite_code_for_a_finite_input_is_overflow():
    """``overflow``: |x| >= max, "or either code is non-finite": 1.0 returned as E4M3's NaN or E5M2's +Inf."""
    one = np.array([1.0, -1.0], np.float32)
    assert kinds(testing.compare(np.array([E4M3_NAN, 0xFF], np.uint8), one, "E4M3")) == ["overflow"] * 2
    assert kinds(testing.compare(np.array([0x7C, 0xFC], np.uint8), one, "E5M2")) == ["overflow"] * 2  # +-Inf


def test_overflow_to_nan_without_saturation_is_overflow_not_nan():
    """E4M3, saturate=False: 500 and 1000 round above 448, to NaN (0x7F: the codec note). A backend
    that saturates to 448 (0x7E) has an overflow bug; the input is finite and the format does not map
    it to NaN by definition, so it is not "NaN/Inf"."""
    x = np.array([500.0, 1000.0, -500.0], np.float32)
    report = testing.compare(np.array([E4M3_MAX, E4M3_MAX, E4M3_MAX | 0x80], np.uint8), x, "E4M3", saturate=False)
    assert [row.expected_code for row in report.mismatches] == [E4M3_NAN, E4M3_NAN, 0xFF]
    assert kinds(report) == ["overflow"] * 3 and report.by_class["NaN/Inf"] == 0


# ---- compare: the report ------------------------------------------------------------------------
def test_report_options_leave_out_the_random_bits():
    """Values on the grid round to themselves whatever the random bits (r = 0 and bits < 2**4)."""
    x = np.array([1.0, 2.0], np.float32)
    report = testing.compare(np.array([E4M3_ONE, 0x40], np.uint8), x, "E4M3", rounding="stochastic",
                             random_bits=np.array([15, 0], np.uint8), random_bit_count=4)
    assert report.ok and report.options == {"rounding": "stochastic", "random_bit_count": 4}
    assert str(report) == "E4M3 (rounding='stochastic', random_bit_count=4): 0 of 2 codes differ"


def test_float16_inputs_are_compared_and_their_bits_shown_in_16_bits():
    """``x``: "float16, float32 or float64". 1.0625 ties to even 1.0 (0x38)."""
    x = np.array([1.0, 1.0625], np.float16)
    report = testing.compare(np.array([E4M3_ONE, E4M3_1_125], np.uint8), x, "E4M3")
    assert [(row.index, row.input_bits, row.kind) for row in report.mismatches] == [
        ((1,), bits_text(1.0625, "e"), "tie")]
    assert report.mismatches[0].input_bits == "0x3c40"


@pytest.mark.parametrize("dtype, code, value", [(np.float16, "e", 2.0**-20), (np.float32, "f", 1e-30),
                                                (np.float64, "d", 1e-300)])
def test_input_bits_keep_their_leading_zero_digits(dtype, code, value):
    """Tiny positive inputs have a zero top hex digit: the bits are shown with every digit of the
    dtype's width (4, 8 or 16), as ``struct`` gives them. Each rounds to E4M3's +0 (0x00)."""
    x = np.array([value], dtype)
    row = testing.compare(np.array([0x01], np.uint8), x, "E4M3").mismatches[0]
    assert row.input_bits == bits_text(float(x[0]), code) and row.input_bits[2] == "0"
    assert len(row.input_bits) == 2 + 2 * x.itemsize and row.expected_code == 0x00


# ---- compare_mx: the block report ----------------------------------------------------------------
def two_blocks():
    """MXFP8_E4M3 input of two 32-blocks along the last axis, with scales and codes by hand (OCP MX
    v1.0 floor: shared_exp = floor(log2 amax) - 8): block 0 all 1.0 (shared_exp -8, scale 119,
    elements 256 = 0x78); block 1 amax 3.0 then 1.0 (shared_exp -7, scale 120, elements 384 = 0x7C
    and 128 = 0x70)."""
    x = np.ones((1, 64), np.float32)
    x[0, 32] = 3.0
    codes = np.full((1, 64), 0x78, np.uint8)
    codes[0, 32], codes[0, 33:] = 0x7C, 0x70
    return x, np.array([[119, 120]], np.uint8), codes


def test_compare_mx_agrees_with_the_hand_worked_blocks():
    x, scales, codes = two_blocks()
    assert testing.compare_mx(scales, codes, x, "MXFP8_E4M3").ok


def test_a_differing_scale_alone_fails_compare_mx():
    """Block 1's scale one binade high, every code right: its elements are not compared (they are
    meaningless under that scale), so the element report is clean, but the backend is wrong."""
    x, scales, codes = two_blocks()
    scales[0, 1] = 121
    report = testing.compare_mx(scales, codes, x, "MXFP8_E4M3")
    assert report.elements.ok and report.elements.total == 32 and report.scale_count == 1
    assert not report.ok
    row = report.scale_mismatches[0]
    assert (row.index, row.block_amax, row.expected_code, row.expected_value, row.actual_code, row.actual_value) == \
        ((0, 1), 3.0, 120, 2.0**-7, 121, 2.0**-6)
    with pytest.raises(AssertionError, match="1 of 2 block scales differ"):
        testing.assert_mx_equal(scales, codes, x, "MXFP8_E4M3")


def test_max_rows_caps_the_scale_rows_and_the_table_counts_the_rest():
    """Five all-1.0 blocks (scale 119 each) given scale 120: five scale rows, cut to ``max_rows``."""
    x = np.ones((1, 160), np.float32)
    scales, codes = np.full((1, 5), 120, np.uint8), np.full((1, 160), 0x78, np.uint8)
    report = testing.compare_mx(scales, codes, x, "MXFP8_E4M3", max_rows=2)
    assert report.scale_count == 5 and [row.index for row in report.scale_mismatches] == [(0, 0), (0, 1)]
    assert str(report).splitlines()[-1] == "... and 3 more"
    assert "more" not in str(testing.compare_mx(scales, codes, x, "MXFP8_E4M3", max_rows=5))
    assert testing.compare_mx(scales, codes, x, "MXFP8_E4M3", max_rows=0).scale_mismatches == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_block_report_prints_each_input_as_its_own_dtype(dtype):
    """Block amax 448 (shared_exp 0, scale 127), so 0.1 is scaled by 1. A float32 input prints with
    9 digits (its bits back), not as the float64 repr of the scaled value; a float64 one with repr."""
    x = np.zeros((1, 32), dtype)
    x[0, 0], x[0, 1] = 448.0, 0.1
    codes = np.zeros((1, 32), np.uint8)
    codes[0, 0] = E4M3_MAX
    report = testing.compare_mx(np.array([[127]], np.uint8), codes, x, "MXFP8_E4M3")
    assert report.elements.count == 1 and report.elements.input_dtype == np.dtype(dtype).name
    shown = str(report).splitlines()[-1].split()[1]
    assert shown == ("0.100000001" if dtype == np.float32 else repr(0.1))


def test_compare_mx_hints_at_two_swapped_element_codes():
    """Block amax 448 (scale 127): 1, 2, 3, 4 are 0x38, 0x40, 0x44, 0x48. A backend that writes the
    codes of elements 1 and 2 in each other's places holds the right codes in another order."""
    x = np.zeros((1, 32), np.float32)
    x[0, :5] = [448.0, 1.0, 2.0, 3.0, 4.0]
    codes = np.zeros((1, 32), np.uint8)
    codes[0, :5] = [E4M3_MAX, 0x40, 0x38, 0x44, 0x48]
    report = testing.compare_mx(np.array([[127]], np.uint8), codes, x, "MXFP8_E4M3")
    assert report.elements.count == 2
    assert "codes holds the expected codes in another order" in report.layout
    assert "another order" in str(report)


def test_nvfp4_report_names_the_tensor_amax_and_scale_its_block_scales_come_from():
    """NVFP4's block scales depend on the tensor amax (S_enc = 2688 / amax, NVIDIA's recipe): a backend
    that took the amax of another tensor (here twice this one's) gets every block scale wrong, and
    the report's second line gives the amax and S_enc to check its own against."""
    x = np.random.default_rng(46).standard_normal((4, 32)).astype(np.float32)
    amax = np.abs(x).max()
    wrong = mx.quantize_nvfp4(x, global_amax=2 * amax)
    report = testing.compare_mx(wrong.scales, wrong.codes, x, "NVFP4")
    assert report.scale_count == report.scale_total == 8
    assert str(report).splitlines()[1] == (f"tensor scale: global amax {float(amax):.9g} (max |x|), "
                                           f"S_enc {float(np.float32(2688) / amax):.9g} (448 * 6 / global amax)")
    assert str(report).splitlines()[2].startswith("the block scales imply a tensor amax near 4.3")  # (2 x 2.214)
    lines = str(report).splitlines()
    header, first = lines[lines.index("scales:") + 1:][:2]  # the scale table: each heading over its column
    row = report.scale_mismatches[0]
    assert header.index("expected") == first.index(f"{row.expected_code:#04x} ")
    assert header.index("actual") == first.rindex(f"{row.actual_code:#04x} ")
    assert first == first.rstrip() and header == header.rstrip()
    given = testing.compare_mx(wrong.scales, wrong.codes, x, "NVFP4", global_amax=2 * amax)
    assert given.ok and given.tensor_scale.startswith(f"tensor scale: global amax {float(2 * amax):.9g} (given)")
    zeros = np.zeros((1, 16), np.float32)
    report = testing.compare_mx(np.zeros((1, 1), np.uint8), np.zeros((1, 16), np.uint8), zeros, "NVFP4")
    assert report.tensor_scale == "tensor scale: global amax 0 (max |x|), S_enc 1 (1, for a tensor of zeros)"
    tiny = np.full((1, 16), 1e-38, np.float32)  # 2688 / 1e-38 overflows float32: S_enc is FLT_MAX
    expected = mx.quantize_nvfp4(tiny)
    report = testing.compare_mx(expected.scales, expected.codes, tiny, "NVFP4")
    assert report.tensor_scale.endswith(f"S_enc {float(np.finfo(np.float32).max):.9g} (448 * 6 / global amax, "
                                        f"capped at FLT_MAX)")
    mx_report = testing.compare_mx(*(lambda q: (q.scales, q.codes))(mx.quantize(x, "MXFP8_E4M3")), x, "MXFP8_E4M3")
    assert mx_report.tensor_scale == "" and "tensor scale" not in str(mx_report)


def test_nvfp4_rows_show_the_element_after_the_clamp_to_plus_minus_6():
    """The golden "nvfp4" note: code = e2m1_rne(clamp(x * encode, -6, 6)). Given a tensor amax of
    1e30, S_enc = 2688 / 1e30 and the block scale 2 * S_enc / 6 is below E4M3's smallest
    subnormal: scale code 0, S_dec_b = 0, encode = min(1 / 0, FLT_MAX) = FLT_MAX. Then 2 * FLT_MAX
    is Inf in float32 and -0.5 * FLT_MAX is finite; the encoder sees 6 and -6 (codes 0x7, 0xF)."""
    x = np.zeros((1, 16), np.float32)
    x[0, :2] = [2.0, -0.5]
    codes = np.zeros((1, 16), np.uint8)
    codes[0, :2] = [0x6, 0xE]  # 4 and -4: a backend that does not saturate the way the note says
    report = testing.compare_mx(np.array([[0x00]], np.uint8), codes, x, "NVFP4", global_amax=1e30)
    assert report.scale_count == 0
    assert [(row.expected_code, row.scaled_input, row.kind) for row in report.elements.mismatches] == [
        (0x7, 6.0, "overflow"), (0xF, -6.0, "overflow")]


# ---- golden files ---------------------------------------------------------------------------------
def test_golden_npz_members_have_fixed_timestamps(tmp_path):
    """Byte-identical files need a fixed zip date, not the time of writing (an identical rewrite
    within the same second cannot show that)."""
    golden.write_npz(tmp_path / "a.npz", {"x": np.arange(3, dtype=np.float32), "y": np.uint8(7)})
    with zipfile.ZipFile(tmp_path / "a.npz") as archive:
        infos = archive.infolist()
    assert len(infos) == 2 and all(info.date_time == (1980, 1, 1, 0, 0, 0) for info in infos)
    assert all(info.compress_type == zipfile.ZIP_STORED for info in infos)


def test_golden_npz_arrays_are_written_in_c_order(tmp_path):
    """A C++ or Rust reader indexes rows first: a Fortran-ordered array is written in C order, with
    ``fortran_order: False`` in its .npy header (NumPy's format: a dict literal after the magic)."""
    array = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    golden.write_npz(tmp_path / "f.npz", {"a": array})
    with zipfile.ZipFile(tmp_path / "f.npz") as archive:
        data = archive.read("a.npy")
    header_length = int.from_bytes(data[8:10], "little")  # version 1.0 header
    assert data[:8] == b"\x93NUMPY\x01\x00"
    assert "'fortran_order': False" in data[10:10 + header_length].decode("latin1")
    assert np.frombuffer(data[10 + header_length:], "<f4").tolist() == [0, 1, 2, 3, 4, 5]


# The sha256 of the manifest.json that each version writes (it records every golden file's sha256).
# Not a proof that the answers are right (the codec's, MX's and GEMM's tests are): it holds
# golden.py's promise that one version writes the same bytes on every machine, Python and NumPy.
# 0.2.0's bytes were the same under Python 3.10 to 3.13 with NumPy 2.0.0, 2.4.6 and 2.5.5, and under
# OpenBLAS's SkylakeX, Haswell, Sandybridge and Katmai kernels (the GEMM sums are exact: _check_exact_sums).
# 0.3.0's (float64 inputs beyond float32's range; each codec entry's format_fields) were the same
# under Python 3.10 with NumPy 2.0.0, 3.11 with 2.4.6 and 3.13 with 2.5.5 (2026-11-30).
# 0.3.1 adds the decode files and the "fields" and "decode" notes, and states NVFP4's dequantisation
# and the rounding names in the notes; every other file's bytes are 0.3.0's. 0.3.2's manifest differs
# from 0.3.1's in its version alone (2026-12-01). 0.3.3 adds NaN inputs with payloads to the codec files,
# NVFP4's dequantised values and the GEMMs' underflow term, and states the tolerance's order of operations
# (2026-12-03).
GOLDEN_MANIFEST_SHA256 = {"0.2.0": "320f4885cd792526b56e3115dfc4953adb0f49854a8aeb0c20894ae664018dd7",
                          "0.3.0": "eb7019e908816ce8dca9403e8721d782b5a2e7c58cdef07fe2598437e9d1d70f",
                          "0.3.1": "5d93e5bba11aa1d389d201a0bcb5937bdf99f740c6bed70744ecf9e1690dd4dc",
                          "0.3.2": "42deef43ceeb89d2296a4da5221f39538d7f494b9e633af03208a3ce838cfb0e",
                          "0.3.3": "8616b6a40fa2909bd35bd4a424d54b91d007f034fdac0bf6c61aaad5be614d17"}


def test_this_version_writes_the_golden_bytes_it_promised(tmp_path):
    golden.write(tmp_path)
    digest = hashlib.sha256((tmp_path / "manifest.json").read_bytes()).hexdigest()
    assert minifp8.__version__ in GOLDEN_MANIFEST_SHA256, (
        f"version {minifp8.__version__} has no pinned golden digest: pin {digest} once its files are final")
    assert digest == GOLDEN_MANIFEST_SHA256[minifp8.__version__], (
        "the golden files changed within a version: if the change is meant, raise the version "
        "(pyproject.toml and minifp8.__version__), say what changed in CHANGELOG.md (and in README's "
        "'Versions'), and pin the new digest here")
    golden.load(tmp_path)  # every file's bytes are those its manifest entry's sha256 names


def test_golden_manifest_records_the_version_and_full_range_random_bits(tmp_path):
    manifest = golden.write(tmp_path, ["E2M1"], blocks=False)
    assert manifest["minifp8_version"] == minifp8.__version__
    assert json.loads((tmp_path / "manifest.json").read_text())["minifp8_version"] == minifp8.__version__
    stochastic = [entry for entry in manifest["entries"] if entry.get("rounding") == "stochastic"]
    assert len(stochastic) == 4  # float32 and float64 files, saturate or not
    for entry in stochastic:
        with np.load(tmp_path / entry["file"], allow_pickle=False) as archive:
            bits = archive[entry["arrays"]["random_bits"]]
        # random_bit_count uniform bits: thousands of draws meet both ends of [0, 2**count)
        assert bits.dtype == np.uint8 and bits.min() == 0 and bits.max() == 2 ** entry["random_bit_count"] - 1


@pytest.mark.parametrize("name", ["E4M3", "E2M1", "E8M0"])
def test_float64_codec_inputs_hold_each_midpoint_times_one_plus_minus_2_to_the_minus_40(name):
    """The module docstring: "float64 files add the midpoints times (1 +- 2^-40), which a
    float32-first cast rounds wrongly": with both signs for a signed format, in any spelling of
    float64. Midpoints from the format's value table: halfway between neighbouring magnitudes."""
    fmt = formats.get(name)
    table = fmt.values()
    grid = np.unique(np.abs(table[np.isfinite(table)]))
    midpoints = (grid[:-1] + grid[1:]) / 2
    near = np.concatenate([midpoints * (1 - 2.0**-40), midpoints * (1 + 2.0**-40)])
    assert (near.astype(np.float32) == np.tile(midpoints, 2)).all()  # float32 lands on the tie
    x = golden.codec_inputs(name, np.float64)
    assert np.isin(near, x).all()
    negated = np.isin(-near, x)
    assert negated.all() if fmt.signed else not negated.any()
    for spelling in ("float64", "<f8", ">f8", float):
        np.testing.assert_array_equal(golden.codec_inputs(name, spelling), x)


def test_codec_random_inputs_have_both_signs_in_a_signed_format():
    """The 4,096 random values after the edge cases spread over every binade of a signed format on
    both sides of zero; E8M0 (unsigned) gets positive ones."""
    for name in ("E4M3", "E8M0"):
        edge = testing.edge_cases(name).size
        random_values = golden.codec_inputs(name, np.float32)[edge:edge + 4096]
        negative = np.count_nonzero(random_values < 0)
        if formats.get(name).signed:
            assert 1500 < negative < 2600, negative
        else:
            assert negative == 0


def test_block_inputs_hold_both_signed_zeros():
    """block_inputs and nvfp4_inputs: an all-zero row and "0.0/-0.0 mixes" (a backend may lose the
    sign of zero)."""
    for x in (golden.block_inputs(), golden.nvfp4_inputs()):
        zero = x == 0
        assert (zero & np.signbit(x)).any() and (zero & ~np.signbit(x)).any()


def test_mx_inputs_hold_ties_at_shared_exponent_5():
    """The module docstring: midpoints "placed so that block scaling lands it exactly on the tie
    (at shared exponents 5 and -127)": blocks of amax max_elem * 2**5 (floor: shared_exp 5) holding
    every midpoint times 2**5, both signs."""
    for name, element in (("MXFP8_E4M3", formats.E4M3), ("MXFP4_E2M1", formats.E2M1)):
        table = element.values()
        grid = np.unique(np.abs(table[np.isfinite(table)]))
        ties = ((grid[:-1] + grid[1:]) / 2 * 2.0**5).astype(np.float32)
        x = golden.mx_inputs(name)
        assert np.isin(ties, x).all() and np.isin(-ties, x).all(), name
        assert np.float32(element.max * 2.0**5) in x


def test_nvfp4_boundary_blocks_run_from_scale_code_1_to_125_either_side_of_each_boundary():
    """nvfp4_boundary_inputs: block b's amax "within 2 float32 steps of the midpoint between the E4M3
    values of codes c_b and c_b + 1 times 6 * global_amax / 2688, with c_b running from 0x01 to 0x7D".
    E4M3 values by hand: (m / 8) * 2**-6 for e = 0, else (1 + m / 8) * 2**(e - 7)."""
    global_amax = 6.0
    code = np.arange(0x7F)
    e, m = code >> 3, code & 7
    e4m3 = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * 2.0 ** (e - 7))
    midpoints = (e4m3[:-1] + e4m3[1:]) / 2
    amax = np.abs(golden.nvfp4_boundary_inputs(global_amax)).reshape(-1, 16).max(axis=1)
    lower_code = np.argmin(np.abs(midpoints[None, :] - amax[:, None] * 2688 / (6 * global_amax)), axis=1)
    targets = (midpoints[lower_code] * 6 * global_amax / 2688).astype(np.float32)
    steps = amax.view(np.int32).astype(np.int64) - targets.view(np.int32)
    assert lower_code.min() == 0x01 and lower_code.max() == 0x7D
    assert np.all(np.abs(steps) <= 2) and (steps < 0).any() and (steps > 0).any(), steps


def test_a_report_shows_the_sign_of_a_nan_input_and_of_nan_codes():
    # Both printed "nan": the sign, which decides the NaN code E4M3 keeps (0xff for -NaN), showed
    # only in the bits column (a code review).
    x = np.array([-np.nan, np.nan, 1.0], np.float32)
    swapped = codec.encode(x, "E4M3")
    swapped[:2] = [0x7F, 0xFF]
    rows = str(testing.compare(swapped, x, "E4M3")).splitlines()[3:]
    assert rows[0].split()[:6] == ["0", "-nan", "0xffc00000", "0xff", "-nan", "0x7f"]
    assert rows[1].split()[:6] == ["1", "nan", "0x7fc00000", "0x7f", "nan", "0xff"]


def test_max_rows_0_gives_the_first_line_alone():
    # It printed the column headings over no rows (and, for compare_mx, an empty elements section).
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    wrong = codec.encode(x, "E4M3") ^ np.uint8(1)
    report = testing.compare(wrong, x, "E4M3", max_rows=0)
    assert str(report) == report.head() and report.count == 64 and report.head().startswith("E4M3 (defaults): 64 of 64")
    q = mx.quantize(x, "MXFP8_E4M3")
    block_report = testing.compare_mx(q.scales, q.codes ^ np.uint8(1), x, "MXFP8_E4M3", max_rows=0)
    assert str(block_report) == block_report.head() and not block_report.ok


@pytest.mark.parametrize("later", [True, False])
def test_codes_shifted_by_one_element_are_named_an_off_by_one(later):
    # They got only "in another order" (when the end codes happened to match) and hundreds of rows
    # classed near-tie, subnormal or other (a code review).
    x = np.random.default_rng(46).standard_normal((16, 32)).astype(np.float32)
    expected = codec.encode(x, "E4M3")
    shifted = np.roll(expected, 1 if later else -1)  # (the wrapped end code is some other code)
    report = testing.compare(shifted, x, "E4M3")
    assert report.layout == (f"actual holds the expected codes shifted by one element, each one place "
                             f"{'later' if later else 'earlier'} in C order: an off-by-one offset, not a rounding bug")
    assert report.layout in str(report)


# ---- a review's finds in testing.py (2026-12-02) --------------------------------------------------

def test_compare_of_a_custom_narrow_format_with_nan_gives_a_report():
    """The hints try the catalogue's formats of the same width; E3M2 has no NaN, so encoding an x with
    NaN in it raised from inside compare, which never raises for a mismatch."""
    custom = formats.FloatFormat("E3M2N", 3, 2, 3, nan_style="all_ones")
    x = np.array([np.nan, 1.0, 27.0, -0.5], np.float32)
    report = testing.compare(codec.encode(x, custom), x, custom, saturate=True)
    assert report.count == 1 and report.by_class["overflow"] == 1


def test_compare_refuses_a_minus_zero_value_of_a_format_without_minus_zero():
    """-0.0 == 0.0, so decoded FNUZ values passed with a -0.0 that no code holds, and hid the sign-of-zero
    bug that codes show."""
    x = np.float32([-0.0, -1e-6])
    with pytest.raises(ValueError, match=r"actual holds np.float32\(-0.0\), which is not a E4M3FNUZ value"):
        testing.compare(np.float32([-0.0, -0.0]), x, "E4M3FNUZ")
    codes = testing.compare(np.uint8([0x80, 0x80]), x, "E4M3FNUZ")
    assert codes.count == 2 and codes.by_class["sign-of-zero"] == 2
    assert testing.compare(np.float32([0.0, 0.0]), x, "E4M3FNUZ").count == 0
    assert testing.compare(np.float32([-0.0, -0.0]), x, "E4M3").count == 0  # (E4M3 has -0)


@pytest.mark.parametrize("nan", [np.array(["class"]), np.array(["exact", "class"]), 0, None])
def test_compare_checks_the_type_of_nan(nan):
    """An array was taken (one of one element passed the membership test), or failed with NumPy's
    'truth value of an array is ambiguous'; 0 was a ValueError."""
    x = np.float32([1.0])
    with pytest.raises(TypeError, match="nan must be a str, one of exact, class; got"):
        testing.compare(codec.encode(x, "E4M3"), x, "E4M3", nan=nan)


def test_compare_knows_an_ml_dtypes_array_by_its_format_fields():
    """A format with E4M3's fields under another name was refused for a float8_e4m3fn array, with a
    message that named two formats of the same fields."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.float32([1.0, 2.0, -3.0])
    renamed = formats.FloatFormat("OFP8_E4M3", 4, 3, 7)
    assert testing.compare(x.astype(ml_dtypes.float8_e4m3fn), x, renamed).count == 0
    with pytest.raises(TypeError, match="holds E4M3 codes, not the E5M2 codes"):
        testing.compare(x.astype(ml_dtypes.float8_e4m3fn), x, "E5M2")


def test_edge_cases_hold_the_overflow_threshold_where_max_is_subnormal():
    """E1Mx with Inf has no normal binade: the spacing at max is the subnormal one, and edge_cases gave
    max + half the (wrong) spacing 2**(emax - M), which misses the threshold (1.75 in E1M2 with Inf)."""
    fmt = formats.FloatFormat("E1M2I", 1, 2, 0, has_infinity=True, nan_style="ieee")
    assert fmt.max == 1.5 and codec.encode(np.float32(1.75), fmt) == fmt.inf_code(False)
    cases = testing.edge_cases(fmt)
    assert 1.75 in cases and -1.75 in cases


# ---- a third mutation audit (stop 65): what the golden inputs' docstrings promise ----------------------
# Each of these was caught only by the pinned manifest digest, which a version bump re-pins.
def test_codec_inputs_hold_what_the_docstring_promises():
    """Float64 files: beyond float32's range both ways, 2**-151 (half float32's smallest subnormal)
    and float64's smallest subnormal, with both signs; and last the stochastic ties."""
    x = golden.codec_inputs("E4M3", np.float64)
    for value in (1e300, 2.0**128, 2.0**-151, 5e-324):
        assert value in x and -value in x
    ties = golden.stochastic_ties("E4M3")[0]
    assert np.array_equal(x[-ties.size:], ties.astype(np.float64))


def test_stochastic_ties_lie_half_a_random_step_into_the_gap_above_the_smallest_value():
    """By hand for E4M3 and 8 random bits: the smallest positive value is 2**-9 and the gap above it
    2**-9 (subnormal spacing); k = 0 puts f * 2**8 at 1/2, so x = 2**-9 * (1 + 1/512), with the bits
    255 (k = 0 rounds to r = 0: 0 + 255 < 256, toward zero; away would reach 256)."""
    assert golden.RANDOM_BIT_COUNT == 8 and 0 in golden.STOCHASTIC_TIE_STEPS
    x, bits = golden.stochastic_ties("E4M3")
    first = np.float32(2.0**-9 * (1 + 1 / 512))
    assert first in x and -first in x
    assert bits[np.flatnonzero(x == first)[0]] == 255


def test_codec_entries_name_their_arrays_and_random_bits_as_their_options_say(tmp_path):
    """An entry's expected codes end in _sat exactly when it saturates, and only a stochastic entry
    has random bits and a random_bit_count."""
    entries = golden.codec_entries("E5M2", tmp_path)
    assert entries
    for entry in entries:
        stochastic = entry["rounding"] == "stochastic"
        assert entry["arrays"]["expected_codes"].endswith("_sat") == entry["saturate"]
        assert (entry["random_bit_count"] is not None) == stochastic == (entry["arrays"]["random_bits"] is not None)


def test_mx_inputs_hold_the_ties_beside_them_and_the_even_carry_points():
    """MXFP8_E4M3: every midpoint of neighbouring E4M3 values times 2**5, and the float32 values just
    below it, with both signs; for each boundary binade j, the "even" carry point
    (2 - 2**-(M + 1)) * 2**j = 1.9375 * 2**j and the float32 below it (as block amaxes, of a random
    sign)."""
    x = golden.mx_inputs("MXFP8_E4M3")
    values = formats.E4M3.values()
    values = np.unique(values[np.isfinite(values) & (values >= 0)])
    ties = ((values[1:] + values[:-1]) / 2 * 2.0**5).astype(np.float32)
    below = np.nextafter(ties, np.float32(0))
    for wanted in (ties, -ties, below, -below):
        assert np.isin(wanted, x).all()
    for j in golden.MX_BOUNDARY_BINADES:
        carry = np.float32(1.9375 * 2.0**j)
        assert carry in np.abs(x) and np.nextafter(carry, np.float32(0)) in np.abs(x)


def test_gemm_inputs_hold_what_their_descriptions_say():
    """mx_nan: A[5, 10] is 0x7F, A[9, 40] is 0xFF, B's scale [1, 7] is 0xFF; rowwise: row 3 of A is
    zero codes, of both signs (0x00 and 0x80)."""
    descriptions = {name: description for name, *_, description in golden.GEMM_PROBLEMS}
    assert "A[5, 10] is 0x7F and A[9, 40] is 0xFF" in descriptions["mx_nan"]
    nan = golden.gemm_inputs("mx_nan")
    assert nan["a_codes"][5, 10] == 0x7F and nan["a_codes"][9, 40] == 0xFF and nan["b_scale_codes"][1, 7] == 0xFF
    assert "row 3 of A is zero codes (0x00 and 0x80)" in descriptions["rowwise"]
    assert set(golden.gemm_inputs("rowwise")["a_codes"][3].tolist()) == {0x00, 0x80}


def test_check_exact_sums_refuses_54_bits():
    """A third mutation audit: 55 and 53 bits were tested, not 54 (> 54 for > 53 passed). By hand: spans
    of 27 and 26 bits and K = 2 need 27 + 26 + 1 = 54 bits; the sum (2**28 - 3) * (2**26 - 1) =
    18014398039719939 is odd and above 2**53, so float64 cannot hold it."""
    a, b = np.array([[2**27 - 1, 2**27 - 2]]), np.array([[2**26 - 1], [2**26 - 1]])
    assert (2**28 - 3) * (2**26 - 1) == 18014398039719939 > 2**53
    with pytest.raises(RuntimeError, match="need 54 bits for exact float64 sums"):
        golden._check_exact_sums(a, b)
