"""Backends with planted bugs (layouts, out-of-range codes, wide integers, unknown options) and the
golden files read by their notes alone: what the oracle must name, and how."""
import hashlib
import json

import re

import numpy as np
import pytest

from minifp8 import codec, formats, golden, mx, testing


def _random_e4m3_inputs(shape, seed=0):
    return np.random.default_rng(seed).normal(0.0, 4.0, size=shape).astype(np.float32)


# ---- a transposed (column-major) output is named as a layout bug, not 12 "other" rounding bugs -------
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (2, 3, 4)])
def test_a_transposed_result_is_reported_as_a_layout_bug(shape):
    x = _random_e4m3_inputs(shape)
    expected = codec.encode(x, "E4M3")
    column_major = np.swapaxes(expected, -1, -2).reshape(shape)  # a kernel that wrote rows as columns
    report = testing.compare(column_major, x, "E4M3")
    assert report.count > 1 and "last two axes swapped" in report.layout
    assert str(report).splitlines()[1] == report.layout  # under the first line, above the table


def test_a_layout_bug_is_named_under_nan_class_for_a_backend_with_one_nan():
    """Found in a review: with nan="class" (tutorial 8's advice for a backend that writes one
    canonical NaN), the layout hints compared codes exactly, so a transposed or shifted output of
    such a backend got no hint, only rows of "other"."""
    x = _random_e4m3_inputs((4, 6))
    x[0, 1], x[2, 3] = -np.nan, np.nan
    canonical = codec.encode(x, "E4M3")
    canonical[np.isnan(codec.decode(canonical, "E4M3"))] = 0x7F  # (x's -NaN encodes to 0xFF)
    assert testing.compare(canonical, x, "E4M3", nan="class").ok
    transposed = testing.compare(np.ascontiguousarray(canonical.T).reshape(x.shape), x, "E4M3", nan="class")
    assert "last two axes swapped" in transposed.layout
    assert "shifted by one element" in testing.compare(np.roll(canonical, 1), x, "E4M3", nan="class").layout


def test_a_result_in_another_order_is_reported_as_a_layout_bug():
    x = _random_e4m3_inputs(64)
    expected = codec.encode(x, "E4M3")
    report = testing.compare(expected[::-1].copy(), x, "E4M3")  # written back to front
    assert "in another order" in report.layout and "in another order" in str(report)
    shifted = testing.compare(np.roll(expected, 1), x, "E4M3")  # an off-by-one output index
    assert "shifted by one element" in shifted.layout


def test_sign_bugs_and_rounding_bugs_get_no_layout_hint():
    edge = next(testing.sweep("E4M3", kind="edge"))
    finite = edge[np.isfinite(edge)]
    expected = codec.encode(finite, "E4M3")
    zero_signs_swapped = np.where(finite == 0, expected ^ 0x80, expected).astype(np.uint8)  # (+0 and -0 once each)
    negated = codec.encode(-finite, "E4M3")  # the sweep is symmetric: the same codes, every sign wrong
    ties_away = codec.encode(finite, "E4M3", rounding="nearest_away")
    for wrong in (zero_signs_swapped, negated, ties_away):
        report = testing.compare(wrong, finite, "E4M3")
        assert report.count > 1 and "layout" not in report.layout
        if wrong is not ties_away:  # (the rounding bug is named as one: the next test)
            assert report.layout == "" and not str(report).splitlines()[1]


# ---- a kernel that follows another rule everywhere is named by that rule (found in a review: these
# ---- bugs came back as hundreds of rows of "other", "near-tie" and "subnormal") ----------------------
def _wide_inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(4096) * np.exp2(rng.integers(-22, 18, 4096))  # E5M2's subnormals to beyond its max
    odd = np.arange(1, 16, 2)
    ties = np.concatenate([1 + odd / 16, 1 + odd[:4] / 8])[:, None] * np.exp2(np.arange(-3, 4))  # E4M3's, E5M2's
    return np.concatenate([x, ties.reshape(-1), -ties.reshape(-1), [0.0, -0.0, np.nan, np.inf, -np.inf]]).astype(np.float32)


@pytest.mark.parametrize("fmt, bug, options, hint", [
    ("E4M3", lambda x: codec.encode(x, "E4M3", rounding="toward_zero"), {},
     "actual equals encode(x, 'E4M3', rounding='toward_zero') at every element: the backend rounds toward zero, "
     "not nearest even"),
    ("E5M2", lambda x: codec.encode(x, "E5M2"), {"rounding": "nearest_away"},
     "actual equals encode(x, 'E5M2', rounding='nearest_even') at every element: the backend rounds nearest even, "
     "not nearest away"),
    ("E5M2", lambda x: codec.encode(x, "E5M2", saturate=True), {},
     "actual equals encode(x, 'E5M2', saturate=True) at every element: the backend clamps overflow to +-max"),
    ("E4M3", lambda x: codec.encode(x, "E4M3"), {"saturate": True},
     "actual equals encode(x, 'E4M3', saturate=False) at every element: the backend overflows to Inf or NaN"),
    ("E4M3", lambda x: codec.encode(x.astype(np.float64) * 2, "E4M3"), {},
     "actual equals encode(x * 2, 'E4M3') at every element: every exponent is one too large"),
    ("E5M2", lambda x: codec.encode(x.astype(np.float64) / 2, "E5M2"), {},
     "actual equals encode(x * 0.5, 'E5M2') at every element: every exponent is one too small"),
    ("E4M3", lambda x: codec.encode(x, "E5M2"), {},
     "actual equals encode(x, 'E5M2') at every element: the backend wrote E5M2 codes, not E4M3"),
    ("E4M3FNUZ", lambda x: codec.encode(x, "E4M3"), {},
     "actual equals encode(x, 'E4M3') at every element: the backend wrote E4M3 codes, not E4M3FNUZ"),
])
def test_a_kernel_following_another_rule_is_named_by_it(fmt, bug, options, hint):
    x = _wide_inputs()
    report = testing.compare(bug(x), x, fmt, **options)
    assert report.count > 10 and report.layout.startswith(hint), report.layout
    assert str(report).splitlines()[1] == report.layout


def test_the_rule_named_is_a_call_that_gives_actual():
    """Found in a review: the hint printed only the option that changed, so with saturate=True
    passed it showed encode(x, 'E4M3', rounding='nearest_away'), whose codes differ from actual's."""
    x = _wide_inputs()
    actual = codec.encode(x, "E4M3", saturate=True, rounding="nearest_away")
    report = testing.compare(actual, x, "E4M3", saturate=True)
    assert report.layout.startswith("actual equals encode(x, 'E4M3', saturate=True, rounding='nearest_away') ")
    assert np.array_equal(codec.encode(x, "E4M3", saturate=True, rounding="nearest_away"), actual)


def test_no_rule_is_named_where_none_explains_every_code():
    x = _wide_inputs()
    expected = codec.encode(x, "E4M3")
    partly = np.where(np.arange(x.size) % 2 == 0, codec.encode(x, "E4M3", rounding="toward_zero"), expected)
    partly[1] = codec.encode(x[1:2], "E4M3", rounding="toward_zero")[0] ^ 1  # one code no rule gives
    for wrong in (partly.astype(np.uint8), np.random.default_rng(1).integers(0, 256, x.size).astype(np.uint8)):
        assert testing.compare(wrong, x, "E4M3").layout == ""
    stochastic = testing.compare(codec.encode(x, "E4M3", rounding="toward_zero"), x, "E4M3", rounding="stochastic",
                                 random_bits=np.zeros(x.size, np.uint8))
    assert stochastic.layout == ""  # (another rule would need other random bits: none is tried)


def test_compare_mx_names_transposed_codes_and_scales():
    x = _random_e4m3_inputs((32, 32))
    expected = mx.quantize(x, "MXFP8_E4M3")
    report = testing.compare_mx(expected.scales, expected.codes.T, x, "MXFP8_E4M3")
    assert report.layout.startswith("codes holds the expected codes with the last two axes swapped")
    assert str(report).splitlines()[1] == report.layout and report.elements.layout == ""
    assert "elements (each input as given" in str(report)  # the element table is still shown in full
    wide = np.ldexp(_random_e4m3_inputs((32, 1024)), np.arange(1024) // 32 % 7)  # 32 x 32 blocks, varied
    expected = mx.quantize(wide, "MXFP8_E4M3")
    report = testing.compare_mx(expected.scales.T, expected.codes, wide, "MXFP8_E4M3")
    assert report.layout.startswith("scales holds the expected codes with the last two axes swapped")
    assert testing.compare_mx(expected.scales, expected.codes, wide, "MXFP8_E4M3").layout == ""


# ---- an MX kernel that follows another scale mode or rounding is named by it -------------------------
# (found in a review by a kernel author: compare named the rule of a plain E2M1 cast, compare_mx threw the
# same note away and tried no rule for the scales)
@pytest.mark.parametrize("elem, bug, uses", [
    ("MXFP4_E2M1", {"rounding": "nearest_away"}, "rounding='nearest_away'"),
    ("MXFP4_E2M1", {"scale_mode": "ceil"}, "scale_mode='ceil'"),
    ("MXFP6_E3M2", {"scale_mode": "rceil", "rounding": "toward_zero"}, "scale_mode='rceil' and rounding='toward_zero'"),
    ("MXFP8_E4M3", {"scale_mode": "even"}, "scale_mode='even'"),
])
def test_compare_mx_names_the_rule_an_mx_kernel_follows(elem, bug, uses):
    x = golden.mx_inputs(elem)  # (with ties of the element format and scale-mode boundaries)
    buggy = mx.quantize(x, elem, **bug)
    report = testing.compare_mx(buggy.scales, buggy.codes, x, elem)
    assert not report.ok and str(report).splitlines()[1] == report.layout.splitlines()[0]
    assert report.layout.splitlines()[0].endswith(f"in every block: the backend uses {uses}")
    call = re.search(r"mx\.quantize\(x, '(\w+)', (.*)\) in every block", report.layout)
    rule = dict(re.findall(r"(\w+)='(\w+)'", call.group(2)))  # the call shown reproduces the backend's output
    assert testing.compare_mx(buggy.scales, buggy.codes, x, call.group(1), **rule).ok


def test_compare_mx_says_when_its_inputs_cannot_tell_ceil_from_a_shared_exponent_one_too_large():
    """A review's find: on random data no block amax is a power of two, so ceil is floor + 1 in every block,
    and a kernel whose shared exponent is one too large was said to use ceil, flatly. The note now says the
    inputs cannot tell them apart; on golden.mx_inputs (above) it names ceil alone."""
    x = np.random.default_rng(0).normal(size=(8, 64)).astype(np.float32)
    ceil = mx.quantize(x, "MXFP8_E4M3", scale_mode="ceil")
    floor = mx.quantize(x, "MXFP8_E4M3")
    assert np.array_equal(ceil.scales, floor.scales + 1)  # (the premise: these inputs cannot tell them apart)
    layout = testing.compare_mx(ceil.scales, ceil.codes, x, "MXFP8_E4M3").layout.splitlines()[0]
    assert layout.endswith("the backend uses scale_mode='ceil', or every scale +1 (below): these inputs cannot tell "
                           "them apart (golden.mx_inputs' boundary rows can)")


@pytest.mark.parametrize("length", [64, 33])
def test_compare_mx_names_fp4_codes_whose_nibbles_were_swapped(length):
    # (an odd row length moved the last code into the dropped padding nibble, so the "another order" hint
    # was lost and every row read as a rounding bug; found in a review by a kernel author)
    x = np.random.default_rng(5).normal(0.0, 1.0, (4, length)).astype(np.float32)
    expected = mx.quantize(x, "MXFP4_E2M1")
    packed = expected.packed()
    swapped = ((packed >> 4) | (packed << 4)).astype(np.uint8)  # a kernel that wrote the first code high
    codes = np.stack([swapped & 0x0F, swapped >> 4], axis=-1).reshape(4, -1)[:, :length]  # unpacked as documented
    report = testing.compare_mx(expected.scales, codes, x, "MXFP4_E2M1")
    assert report.layout.startswith("codes holds the expected codes with each pair along the last axis swapped")
    assert ("last code of each odd-length row lost to the padding nibble" in report.layout) == (length % 2 == 1)


def test_compare_mx_names_an_unbiased_shared_exponent_written_as_the_scale():
    # (an int8 shared_exp read as a byte: a plain scale mismatch before; found in a review)
    x = golden.block_inputs()
    expected = mx.quantize(x, "MXFP4_E2M1")
    unbiased = ((expected.scales.astype(np.int64) - 127) % 256).astype(np.uint8)
    report = testing.compare_mx(unbiased, expected.codes, x, "MXFP4_E2M1")
    assert report.layout.splitlines()[0] == ("every scale that differs is the expected code minus 127 (mod 256): the "
                                             "backend wrote the shared exponent itself, not E8M0's code "
                                             "(shared_exp + 127)")
    off_by_one = (expected.scales + 1).astype(np.uint8)
    assert "minus 127" not in testing.compare_mx(off_by_one, expected.codes, x, "MXFP4_E2M1").layout
    # one block minus 127 and another plus 1: not "every scale" (a mutation audit's find: .any() passed).
    # By hand the three blocks' scales are 127 (amax 256 = 2**8 * 1), 119 (amax 1) and 120 (amax 2)
    mixed = np.concatenate([np.full(32, 256.0), np.ones(32), np.full(32, 2.0)]).astype(np.float32)[None, :]
    assert mx.quantize(mixed, "MXFP8_E4M3").scales.tolist() == [[127, 119, 120]]
    codes = mx.quantize(mixed, "MXFP8_E4M3").codes
    assert "minus 127" not in testing.compare_mx(np.array([[0, 120, 120]], np.uint8), codes, mixed,
                                                 "MXFP8_E4M3").layout
    assert "minus 127" in testing.compare_mx(np.array([[0, 248, 120]], np.uint8), codes, mixed, "MXFP8_E4M3").layout


@pytest.mark.parametrize("step, hint", [
    (1, "every scale is the expected code plus 1: an E8M0 bias of 128, not 127, or a shared exponent one too large "
        "in every block"),
    (-1, "every scale is the expected code minus 1: an E8M0 bias of 126, not 127, or a shared exponent one too small "
         "in every block")])
def test_compare_mx_names_a_scale_one_code_off(step, hint):
    """E8M0's classic bug, an exponent bias off by one, had no hint (found in a review by a kernel author):
    on golden.mx_inputs, whose rows have power-of-two amaxes, no scale mode explains it either."""
    x = golden.mx_inputs("MXFP8_E4M3")
    expected = mx.quantize(x, "MXFP8_E4M3")
    finite = expected.scales != mx.E8M0_NAN
    shifted = np.where(finite, (expected.scales.astype(np.int64) + step) % 256, expected.scales).astype(np.uint8)
    assert hint in testing.compare_mx(shifted, expected.codes, x, "MXFP8_E4M3").layout.splitlines()


def test_compare_names_every_rule_that_explains_the_codes():
    """Found in a review by a kernel author: the hint named only the first rule that fit, so a correct
    satfinite kernel tested on overflowing inputs alone read as rounding toward zero, and a ROCm
    backend's E5M2FNUZ codes on normal inputs as an exponent one too large."""
    x = np.array([1000.0, -600.0, 500.0, 0.5, 3.0, 70000.0], np.float32)
    report = testing.compare(codec.encode(x, "E4M3", saturate=True), x, "E4M3")
    assert report.layout == ("actual equals encode(x, 'E4M3', saturate=True) at every element: the backend clamps "
                             "overflow to +-max; encode(x, 'E4M3', rounding='toward_zero') too: the backend rounds "
                             "toward zero, not nearest even; these inputs cannot tell the rules apart")
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    report = testing.compare(codec.encode(x, "E5M2FNUZ"), x, "E5M2")
    assert report.layout.startswith("actual equals encode(x, 'E5M2FNUZ') at every element: the backend wrote "
                                    "E5M2FNUZ codes, not E5M2; encode(x * 2, 'E5M2') too: every exponent is one")


@pytest.mark.parametrize("narrow, name", [(np.float16, "float16"), (None, "bfloat16")])
def test_compare_names_a_double_rounding_through_a_16_bit_type(narrow, name):
    """A cast that rounds x to bfloat16 or float16 first read as hundreds of "near-tie", "other" and
    "subnormal" rows, with no hint (found in a review by a kernel author). The bfloat16 rounding here
    is ml_dtypes' where it is installed, else round-to-nearest-even of float32's top half."""
    x = next(testing.sweep())  # (the structured float32 sweep: ties and their neighbours in every binade)
    with np.errstate(over="ignore", invalid="ignore"):  # (beyond float16's range: Inf)
        if narrow is None:
            ml_dtypes = pytest.importorskip("ml_dtypes")
            narrowed = x.astype(ml_dtypes.bfloat16).astype(np.float32)
        else:
            narrowed = x.astype(narrow).astype(np.float32)
    report = testing.compare(codec.encode(narrowed, "E4M3"), x, "E4M3")
    assert report.count > 10
    assert report.layout.startswith(f"actual equals encode(x.astype({name}), 'E4M3') at every element: the backend "
                                    f"rounds x to {name} first (a double rounding)"), report.layout


def test_compare_mx_names_no_rule_where_none_explains_every_block():
    x = golden.block_inputs()
    expected = mx.quantize(x, "MXFP4_E2M1")
    codes = expected.codes.copy()
    codes[0, 0] ^= 1  # one element off by one code: no scale mode or rounding gives it
    assert testing.compare_mx(expected.scales, codes, x, "MXFP4_E2M1").layout == ""


# ---- an NVFP4 kernel that took another tensor amax: the report estimates the one it used -----------------
@pytest.mark.parametrize("factor", [2.0, 0.5, 7.0])
def test_compare_mx_estimates_the_tensor_amax_an_nvfp4_kernel_used(factor):
    # (its element rows, classified against minifp8's S_enc, pointed at rounding bugs; found in a review)
    x = np.random.default_rng(3).normal(0.0, 1.0, (8, 64)).astype(np.float32)
    used = factor * float(np.abs(x).max())
    buggy = mx.quantize_nvfp4(x, global_amax=used)
    report = testing.compare_mx(buggy.scales, buggy.codes, x, "NVFP4")
    note = report.layout.splitlines()[0]
    implied = float(re.search(r"imply a tensor amax near (\S+) ", note).group(1))
    assert note.endswith("did the backend take another tensor's amax, a stale one, or skip the reduction across "
                         "devices?") and abs(implied / used - 1) < 0.03, (note, used)


def test_compare_mx_estimates_no_tensor_amax_for_a_block_scale_rounding_bug():
    x = np.random.default_rng(3).normal(0.0, 1.0, (8, 64)).astype(np.float32)
    expected = mx.quantize_nvfp4(x)
    low = np.where(expected.scales > 1, expected.scales - 1, expected.scales)  # every scale one E4M3 step down
    report = testing.compare_mx(low.astype(np.uint8), expected.codes, x, "NVFP4")
    assert report.scale_count > 16 and "imply a tensor amax" not in str(report)


# ---- compare_mx takes what compare takes, and checks every code --------------------------------------
def test_compare_mx_takes_ml_dtypes_codes_and_scales_as_compare_does():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = _random_e4m3_inputs((2, 64))
    expected = mx.quantize(x, "MXFP4_E2M1")
    scales, codes = expected.scales.view(ml_dtypes.float8_e8m0fnu), expected.codes.view(ml_dtypes.float4_e2m1fn)
    assert testing.compare_mx(scales, codes, x, "MXFP4_E2M1").ok  # was: "scales must be uint8 codes"
    with pytest.raises(TypeError, match="codes has dtype float8_e4m3fn, which holds E4M3 codes, not the "
                                        "E2M1 codes"):
        testing.compare_mx(expected.scales, expected.codes.view(ml_dtypes.float8_e4m3fn), x, "MXFP4_E2M1")
    with pytest.raises(TypeError, match="scales must be uint8 codes.*got dtype int64; if they are E8M0 codes "
                                        r"\(a Python int or list of ints becomes int64\), convert them"):
        testing.compare_mx(expected.scales.astype(np.int64), expected.codes, x, "MXFP4_E2M1")


def test_compare_mx_rejects_codes_out_of_range_in_blocks_it_does_not_compare():
    """An E2M1 code of 0x1F in a block whose scale differs was skipped, and the report said nothing."""
    x = _random_e4m3_inputs((1, 64))
    expected = mx.quantize(x, "MXFP4_E2M1")
    scales, codes = expected.scales.copy(), expected.codes.copy()
    scales[0, 1] += 1
    codes[0, 40] = 0x1F
    with pytest.raises(ValueError, match=r"E2M1 codes lie in \[0, 16\), got 31 in codes \(1 codes out of range, "
                                         r"the first at index \(0, 40\)\)"):
        testing.compare_mx(scales, codes, x, "MXFP4_E2M1")


def test_compare_mx_takes_any_byte_as_a_dont_care_code_of_a_nan_scale_block():
    """A block whose expected scale is 0xFF decodes to NaN whatever its codes (the golden notes:
    don't care), so its codes are neither range-checked nor compared; the other blocks' are."""
    x = _random_e4m3_inputs((2, 64))
    x[1, 3] = np.nan  # block (1, 0) gets the NaN scale
    expected = mx.quantize(x, "MXFP4_E2M1")
    assert expected.scales[1, 0] == 0xFF and (expected.scales != 0xFF).sum() == 3
    codes = expected.codes.copy()
    codes[1, :32] = 0xEE  # no E2M1 code
    assert testing.compare_mx(expected.scales, codes, x, "MXFP4_E2M1").ok
    codes[1, 32] = 0xEE  # the next block is compared
    with pytest.raises(ValueError, match=r"got 238 in codes \(1 codes out of range, the first at index \(1, 32\)\)"):
        testing.compare_mx(expected.scales, codes, x, "MXFP4_E2M1")


def test_compare_mx_with_a_block_longer_than_the_axis_pads_nothing():
    """An axis shorter than the block is one block per row (as mx.quantize takes it): no row is
    padded out to block_size (2**40 would ask for terabytes)."""
    x = _random_e4m3_inputs((3, 5))
    expected = mx.quantize(x, "E2M1", block_size=2**40)
    codes = expected.codes.copy()
    codes[2, 4] ^= 1
    report = testing.compare_mx(expected.scales, codes, x, "E2M1", block_size=2**40)
    assert report.scale_count == 0 and report.elements.count == 1
    assert report.elements.mismatches[0].index == (2, 4)


def test_integer_codes_wider_than_a_byte_say_how_to_pass_them():
    x = np.array([1.0625, 2.0], np.float32)
    with pytest.raises(TypeError, match=r"got dtype int64; if they are E4M3 codes \(a Python int or list of ints "
                                        r"becomes int64\), convert them with .astype\(np.uint8\)"):
        testing.compare([0x38, 0x40], x, "E4M3")
    assert testing.compare(np.asarray([0x38, 0x40]).astype(np.uint8), x, "E4M3").ok
    # found in a review: codes no format has (9 bits, or negative) got the same advice, and the cast
    # wrapped them into valid codes, hiding the backend's bug
    for wide, shown in ((np.array([0x38, 0x140]), "holds 320 at index (1,)"), (np.array([-1, 0x40]), "holds -1")):
        with pytest.raises(ValueError, match=rf"actual has dtype int64 and {re.escape(shown)} .*values outside "
                                             r"E4M3's codes \[0, 256\)\): if these are the backend's codes, it "
                                             r"writes more than 8 bits"):
            testing.compare(wide, x, "E4M3")


def test_unknown_options_are_named_with_the_ones_each_helper_takes():
    x = np.ones((1, 32), np.float32)
    with pytest.raises(TypeError, match="compare: unknown option 'roundng'; the options are rounding, saturate, "
                                        r"random_bits, random_bit_count \(as for minifp8.codec.encode\)"):
        testing.compare(codec.encode(x, "E4M3"), x, "E4M3", roundng="toward_zero")
    expected = mx.quantize(x, "E4M3")
    with pytest.raises(TypeError, match="compare_mx: unknown option 'scale_mod'; the options are block_size, axis, "
                                        "scale_mode"):
        testing.assert_mx_equal(expected.scales, expected.codes, x, "E4M3", scale_mod="ceil")
    nvfp4 = mx.quantize_nvfp4(x)
    with pytest.raises(TypeError, match=r"compare_mx \(NVFP4\): unknown option 'block_size'; the options are axis, "
                                        "global_amax"):
        testing.compare_mx(nvfp4.scales, nvfp4.codes, x, "NVFP4", block_size=16)


# ---- the golden manifest's notes define what a C++ reader needs, and the files obey them --------------
@pytest.fixture(scope="module")
def golden_mx_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("golden")
    golden.write(folder, ["E4M3"])
    return folder


def test_golden_mx_note_defines_the_scale_modes_and_the_files_obey_it(golden_mx_dir):
    """The note said only "by scale_mode": a reader in another language could not compute the scales,
    nor tell how 80 columns make 3 blocks of 32. Here the note's formulas, written in numpy, give
    every MX entry's scales (and the short last block is the note's, not a padded 96)."""
    manifest = json.loads((golden_mx_dir / "manifest.json").read_text())
    note = manifest["notes"]["mx"]
    for stated in ("floor: floor(log2(amax)) - emax_elem", "ceil: ceil(log2(amax)) - emax_elem",
                   "rceil: ceil(log2(amax / max_elem))", "ties away", "the scale code is shared_exp + 127",
                   "all-zero block gets 0x00", "ends in a shorter block", "E4M3 8, E5M2 15, E3M2 4, E2M3 2, E2M1 2"):
        assert stated in note, stated
    emax = {"E4M3": 8, "E5M2": 15, "E3M2": 4, "E2M3": 2, "E2M1": 2}  # from the note
    mantissa_bits = {"E4M3": 3, "E5M2": 2, "E3M2": 2, "E2M3": 3, "E2M1": 1}
    max_elem = {"E4M3": 448.0, "E5M2": 57344.0, "E3M2": 28.0, "E2M3": 7.5, "E2M1": 6.0}
    checked = set()
    for entry in manifest["entries"]:
        if entry["kind"] != "mx":
            continue
        with np.load(golden_mx_dir / entry["file"]) as archive:
            x, scales = archive[entry["arrays"]["input"]], archive[entry["arrays"]["expected_scales"]]
        element, size, mode = entry["element_format"], entry["block_size"], entry["scale_mode"]
        rows, length = x.shape
        assert scales.shape == (rows, -(-length // size))
        blocks = np.zeros((rows, scales.shape[1] * size))
        blocks[:, :length] = x
        with np.errstate(invalid="ignore"):
            amax = np.abs(blocks.reshape(rows, -1, size)).max(axis=-1)
        finite = np.where(np.isfinite(amax) & (amax > 0), amax, 1.0)
        significand, exponent = np.frexp(finite)  # finite = significand * 2**exponent, significand in [0.5, 1)
        log2_floor = exponent - 1
        if mode == "floor":
            shared = log2_floor - emax[element]
        elif mode == "ceil":
            shared = log2_floor + (significand != 0.5) - emax[element]
        elif mode == "even":  # the significand rounded to the element's mantissa bits, ties away
            rounded = np.floor(2 * significand * 2 ** mantissa_bits[element] + 0.5) / 2 ** mantissa_bits[element]
            shared = log2_floor + (rounded == 2) - emax[element]
        else:  # the least k with amax <= max_elem * 2**k
            k = log2_floor - emax[element]
            shared = np.where(finite <= np.ldexp(max_elem[element], k), k, k + 1)
        code = np.clip(shared, -127, 127) + 127
        code = np.where(amax == 0, 0x00, code)
        code = np.where(np.isinf(amax), 0xFE if mode == "rceil" else 0xFF, code)
        code = np.where(np.isnan(amax), 0xFF, code)
        np.testing.assert_array_equal(scales, code, err_msg=f"{entry['file']} {mode}")
        checked.add((element, mode))
    assert len(checked) == 5 * 4


def test_golden_nvfp4_note_says_what_encode_scale_and_s_dec_b_are(golden_mx_dir):
    manifest = json.loads((golden_mx_dir / "manifest.json").read_text())
    note = manifest["notes"]["nvfp4"]
    assert "the encode_scale array holds S_enc" in note and "S_dec_b = the E4M3 value of that code" in note
    for entry in manifest["entries"]:
        if entry["kind"] == "nvfp4":
            with np.load(golden_mx_dir / entry["file"]) as archive:
                amax, stored = archive[entry["arrays"]["global_amax"]], archive[entry["arrays"]["encode_scale"]]
            with np.errstate(over="ignore"):  # (the tiny tensor's 2688 / amax is Inf in float32)
                assert stored == np.minimum(np.float32(2688) / amax, np.finfo(np.float32).max)  # S_enc, as stated


def test_a_0d_input_shows_its_index_as_empty_parentheses():
    """The index column of a 0-d comparison was blank."""
    report = testing.compare(np.uint8(0x39), np.float32(1.0625), "E4M3")  # a tie: 1.0 (0x38) expected
    row = str(report).splitlines()[-1].split()
    assert report.mismatches[0].index == () and row[:3] == ["()", "1.0625", "0x3f880000"] and row[-1] == "tie"


def test_golden_load_checks_the_checksums_and_schema_it_reads(golden_mx_dir, tmp_path):
    """load() read a file from another run, or a manifest of another schema, without a word."""
    manifest, files = golden.load(golden_mx_dir)
    assert manifest["schema_version"] == golden.SCHEMA_VERSION
    codec_entry = next(entry for entry in manifest["entries"] if entry["kind"] == "codec")
    arrays = files[codec_entry["file"]]
    assert list(arrays[codec_entry["arrays"]["input"]].shape) == codec_entry["shapes"]["x"]
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in golden_mx_dir.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    other = next(entry["file"] for entry in manifest["entries"] if entry["file"] != codec_entry["file"])
    (copy / codec_entry["file"]).write_bytes((golden_mx_dir / other).read_bytes())  # a valid .npz, not this one
    with pytest.raises(ValueError, match=f"{codec_entry['file']} has sha256 [0-9a-f]{{64}}, but the manifest's "
                                         f"entry [0-9]+ records {codec_entry['sha256']}"):
        golden.load(copy)
    (copy / codec_entry["file"]).write_bytes((golden_mx_dir / codec_entry["file"]).read_bytes())
    # each entry's sha256 is checked, not only the first of those that name its file (a review found this)
    sharing = [index for index, entry in enumerate(manifest["entries"]) if entry["file"] == codec_entry["file"]]
    assert len(sharing) > 1
    entries = [dict(entry) for entry in manifest["entries"]]
    entries[sharing[-1]]["sha256"] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps({**manifest, "entries": entries}))
    with pytest.raises(ValueError, match=f"{codec_entry['file']} has sha256 {codec_entry['sha256']}, but the "
                                         f"manifest's entry {sharing[-1]} records 0{{64}}"):
        golden.load(copy)
    (copy / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 99}))
    with pytest.raises(ValueError, match=r"must be a 'minifp8-golden' manifest of schema_version 2, got schema and "
                                         r"version \('minifp8-golden', 99\)"):
        golden.load(copy)


def test_golden_load_names_the_file_behind_each_failure(golden_mx_dir, tmp_path):
    """Found in a review: a manifest that is not JSON raised json's "Expecting value: line 1 column 1"
    (no file named), a listed file that is missing a bare FileNotFoundError, and an entry naming an
    array its file lacks was accepted."""
    manifest, _ = golden.load(golden_mx_dir)
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in golden_mx_dir.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    (copy / "manifest.json").write_text("not json")
    with pytest.raises(ValueError, match=r"golden.load: .*manifest.json is not a JSON text: Expecting value"):
        golden.load(copy)
    entries = [dict(entry, arrays=dict(entry["arrays"])) for entry in manifest["entries"]]
    entries[0]["arrays"]["input"] = "no_such_array"
    (copy / "manifest.json").write_text(json.dumps({**manifest, "entries": entries}))
    with pytest.raises(ValueError, match=rf"entry 0 names arrays \['no_such_array'\] that {entries[0]['file']} "
                                         r"does not hold"):
        golden.load(copy)
    # a listed file whose sha256 matches but which is no .npz: NumPy's "pickled (object) data", no file named
    (copy / "notes.txt").write_bytes(b"hello")
    entries = [dict(entry) for entry in manifest["entries"]]
    entries[0].update(file="notes.txt", sha256=hashlib.sha256(b"hello").hexdigest())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "entries": entries}))
    with pytest.raises(ValueError, match=r"golden.load: .*notes.txt is not an .npz archive \(a zip file\), which "
                                         r"the manifest's entry 0 says it is"):
        golden.load(copy)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    (copy / manifest["entries"][0]["file"]).unlink()
    with pytest.raises(FileNotFoundError, match=rf"{manifest['entries'][0]['file']}: the manifest lists it, but "
                                                r"there is no such file"):
        golden.load(copy)


def test_golden_load_checks_the_shapes_and_dtypes_the_manifest_gives(golden_mx_dir, tmp_path):
    """load() read a manifest whose shapes or dtypes disagreed with the arrays (stop 59's list): a
    reader in another language sizes its buffers from the manifest, so the two must agree."""
    manifest, files = golden.load(golden_mx_dir)
    for entry in manifest["entries"]:  # what load() now checks holds for every written entry
        for name, shape in entry["shapes"].items():
            array = files[entry["file"]][name]
            assert list(array.shape) == shape and array.dtype.str == entry["dtypes"][name]
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in golden_mx_dir.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    index = next(i for i, entry in enumerate(manifest["entries"]) if entry["kind"] == "codec")
    entry = manifest["entries"][index]
    actual = list(files[entry["file"]]["x"].shape)
    for change, message in [
        ({"shapes": {**entry["shapes"], "x": [actual[0] + 1]}},
         rf"entry {index} gives array 'x' the shape \[{actual[0] + 1}\], but {entry['file']} holds it with "
         rf"shape \[{actual[0]}\]"),
        ({"dtypes": {**entry["dtypes"], "x": "<f2"}},
         rf"entry {index} gives array 'x' the dtype '<f2', but {entry['file']} holds it with dtype "
         rf"'{files[entry['file']]['x'].dtype.str}'"),
        ({"shapes": {**entry["shapes"], "nothing": [3]}},
         rf"entry {index} gives the shape of an array 'nothing' that {entry['file']} does not hold"),
        ({"dtypes": ["<f4"]},
         rf"entry {index}: dtypes must be an object mapping array names to their dtypes, got list"),
    ]:
        entries = [dict(item) for item in manifest["entries"]]
        entries[index].update(change)
        (copy / "manifest.json").write_text(json.dumps({**manifest, "entries": entries}))
        with pytest.raises(ValueError, match=message):
            golden.load(copy)


def test_an_e8m0_kernel_that_flushes_subnormal_inputs_is_named_a_flush_not_an_overflow():
    """Found in a review: E8M0 has no zero, so a kernel that flushed float32 subnormal inputs (DAZ)
    returns the NaN of zero, 0xFF, which was classed 'overflow' beside inputs of 1e-40."""
    x = np.array([1e-40, 3e-39, 1e-45, 2.0**-126, 1.0], np.float32)
    flushed = np.where(x < 2.0**-126, 0xFF, codec.encode(x, "E8M0")).astype(np.uint8)
    report = testing.compare(flushed, x, "E8M0")
    assert report.by_class["subnormal"] == 3 and report.count == 3
    assert testing.compare(np.full(2, 0xFF, np.uint8), np.float32([2.0**-126, 1.0]), "E8M0").by_class[
        "overflow"] == 2  # (NaN back for a normal input is still no flush)


def test_golden_codec_entries_carry_their_formats_fields_and_names_are_unambiguous(tmp_path):
    """Found in a review: an entry named its format only, so a reader could not rebuild one it did not
    know; a format of other fields under a catalogued name wrote files labelled with that name, two
    formats of one name overwrote each other's file, and a name with '/' failed on the path."""
    from minifp8 import formats

    e3m4 = formats.FloatFormat("E3M4", 3, 4, 3, has_infinity=True, nan_style="ieee")
    manifest = golden.write(tmp_path / "ok", ["E4M3", e3m4], blocks=False)
    fields = {entry["format"]: entry["format_fields"] for entry in manifest["entries"]}
    assert fields["E3M4"] == {"exponent_bits": 3, "mantissa_bits": 4, "bias": 3, "signed": True,
                              "has_subnormals": True, "has_infinity": True, "nan_style": "ieee"}
    assert formats.FloatFormat("E4M3", **fields["E4M3"]) == formats.E4M3  # (rebuilt from the manifest)
    for listed, message in [
        ([formats.FloatFormat("E4M3", 4, 3, 11)], r"has a name of the catalogue's FloatFormat\(E4M3: E4M3, bias 7\)"),
        ([formats.FloatFormat("X1", 4, 3, 7), formats.FloatFormat("X1", 4, 3, 8)], "has a name of another listed"),
        # an alias (a later review's find): the manifest named float8_e4m3fn, which readers resolve to
        # the catalogue's E4M3, bias 7, beside fields of bias 8
        ([formats.FloatFormat("float8_e4m3fn", 4, 3, 8)], r"has a name of the catalogue's FloatFormat\(E4M3: E4M3, bias 7\)"),
        ([formats.FloatFormat("my/fmt", 4, 3, 7)], "letters, digits, '_', '.' and '-' only, got 'my/fmt'"),
    ]:
        with pytest.raises(ValueError, match=message):
            golden.write(tmp_path / "refused", listed, blocks=False)
    assert not list((tmp_path / "refused").glob("*.npz"))  # (refused before any file is written)
    # an alias with the catalogue's fields is the same format: written, under the name given
    alias = golden.write(tmp_path / "alias", [formats.FloatFormat("float8_e4m3fn", 4, 3, 7)], blocks=False)
    assert {entry["format"] for entry in alias["entries"]} == {"float8_e4m3fn"}


# ---- found by mutation testing of minifp8/testing.py: each test fails on the mutant it names ----------
def test_a_rule_that_holds_at_the_first_4096_mismatches_only_is_not_named():
    """`_rule_note` tries a rule on the first differing elements, then on the whole array: without the
    second check, a code no rule gives after the 4096th mismatch was missed and toward_zero named.
    E4M3 by hand: (1 + 3/32) * 2**k lies 3/4 of a spacing above 2**k (code (k + 7) << 3), so
    nearest_even gives code | 1 and toward_zero the code; code | 2 is 1.25 * 2**k, which no rule gives."""
    k = np.arange(5000) % 15 - 6  # every normal binade of E4M3, 2**-6 to 2**8
    x = ((1 + 3 / 32) * np.exp2(k)).astype(np.float32)
    truncated = ((k + 7) << 3).astype(np.uint8)
    np.testing.assert_array_equal(codec.encode(x, "E4M3", rounding="toward_zero"), truncated)  # (the hand codes)
    assert testing.compare(truncated, x, "E4M3").layout.startswith(
        "actual equals encode(x, 'E4M3', rounding='toward_zero') at every element")
    wrong = truncated.copy()
    wrong[-1] |= 2  # the 5000th mismatch: no rule gives it
    report = testing.compare(wrong, x, "E4M3")
    assert report.count == 5000 and report.layout == "", report.layout


def test_a_rule_is_named_under_nan_class_when_the_nan_codes_differ_too():
    """With nan="class" a NaN code for another NaN code is no mismatch, so the rule must hold up to
    it: a kernel that truncates and writes E4M3's NaN with the sign bit set (0xFF for +NaN, 0x7F) is
    named as one that rounds toward zero (the rule check compared the NaN codes exactly)."""
    x = _wide_inputs()
    wrong = codec.encode(x, "E4M3", rounding="toward_zero")
    assert wrong[np.isnan(x)].tolist() == [0x7F]
    wrong[np.isnan(x)] = 0xFF
    report = testing.compare(wrong, x, "E4M3", nan="class")
    assert report.count > 10 and report.layout.startswith(
        "actual equals encode(x, 'E4M3', rounding='toward_zero') at every element"), report.layout
    assert testing.compare(wrong, x, "E4M3").layout == ""  # (with nan="exact" the NaN code breaks the rule)


def test_an_e8m0_flush_of_a_float32_subnormal_above_e8m0s_smallest_value_is_a_subnormal_mismatch():
    """E8M0's smallest value is 2**-127, below float32's smallest normal 2**-126: 1.5 * 2**-127 is a
    float32 subnormal that E8M0 encodes (as 2**-127 or 2**-126), and a kernel that flushed it to zero
    first (DAZ) returns the NaN of zero, 0xFF. That is the flush of `compare`'s docstring, for every
    float32 subnormal input, not an overflow (the class tested |x| < 2**-127 only)."""
    x = np.array([1.5 * 2.0**-127, 2.0**-126 - 2.0**-149, 1.0], np.float32)
    assert (np.abs(x[:2]) < np.finfo(np.float32).tiny).all() and (x[:2] > 2.0**-127).all()
    report = testing.compare(np.array([0xFF, 0xFF, 0x7F], np.uint8), x, "E8M0")  # 1.0 is 2**(127 - 127)
    assert report.count == 2 and report.by_class["subnormal"] == 2, report.by_class


def test_two_swapped_codes_get_the_layout_hint():
    """Two elements written to each other's place hold the expected codes in another order: a layout
    hint, as for more. E4M3 by hand: 1.0 is 0x38, 2.0 is 0x40."""
    report = testing.compare(np.array([0x40, 0x38], np.uint8), np.array([1.0, 2.0], np.float32), "E4M3")
    assert report.count == 2 and "in another order" in report.layout, report.layout
    assert str(report).splitlines()[1] == report.layout


def test_golden_write_refuses_a_format_name_with_letters_beyond_ascii(tmp_path):
    """A format's name names its files: ASCII letters, digits, '_', '.' and '-' only, so that a reader
    on any file system spells them alike (found by mutation testing: str.isalnum alone takes 'É')."""
    from minifp8 import formats

    with pytest.raises(ValueError, match="letters, digits, '_', '.' and '-' only, got 'É4M3'"):
        golden.write(tmp_path / "refused", [formats.FloatFormat("É4M3", 4, 3, 7)], blocks=False)
    assert not list((tmp_path / "refused").glob("*.npz"))



def test_golden_write_refuses_format_names_that_differ_only_in_case(tmp_path):
    """Their files (codec_Tiny_float32.npz, codec_TINY_float32.npz) would be one file on macOS or
    Windows: the second overwrote the first, whose sha256 then failed golden.load (a review's find)."""
    from minifp8 import formats

    tiny, shouting = formats.FloatFormat("Tiny", 2, 1, 1), formats.FloatFormat("TINY", 2, 1, 1)
    with pytest.raises(ValueError, match="the format names 'TINY' and 'Tiny' differ only in case: their files would "
                                         r"be one file on a case-insensitive file system \(macOS, Windows\)"):
        golden.write(tmp_path / "refused", [shouting, tiny], blocks=False)
    assert not list((tmp_path / "refused").glob("*.npz"))
    golden.write(tmp_path / "one", [tiny, tiny], blocks=False)  # (the same format twice: its files once)
    manifest, files = golden.load(tmp_path / "one")
    assert {entry["format"] for entry in manifest["entries"]} == {"Tiny"} and all("Tiny" in name for name in files)

def test_compare_mx_names_an_element_cast_that_does_not_saturate():
    """A review's find: compare_mx cleared the element report's hints (layout hints of a subset
    mislead), so an MX kernel whose element cast overflows to NaN instead of clamping to 448, as OCP
    MX requires, got no hint at all. A rule that gives every compared element code is now named."""
    from minifp8 import mx

    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (2, 64)).astype(np.float32)
    x[0, 0] = 1000.0          # scaled to 500: above 464, where E4M3 overflows unless clamped
    expected = mx.quantize(x, "MXFP8_E4M3")
    scaled = np.ldexp(x.astype(np.float64), -np.repeat(expected.scales.astype(np.int64) - mx.E8M0_BIAS, 32, axis=1))
    report = testing.compare_mx(expected.scales, codec.encode(scaled, "E4M3"), x, "MXFP8_E4M3")
    assert report.elements.count == 2 and report.layout.startswith(
        "in the blocks whose scale agrees, the element codes, where x is each input as the element cast sees it "
        "(divided by its block's scale): actual equals encode(x, 'E4M3', saturate=False, "
        "rounding='nearest_even') at every element: the backend overflows to Inf or NaN instead of clamping")
    # a rule over whole blocks still comes first, alone
    truncated = codec.encode(scaled, "E4M3", saturate=True, rounding="toward_zero")
    assert testing.compare_mx(expected.scales, truncated, x, "MXFP8_E4M3").layout == (
        "scales and codes equal mx.quantize(x, 'MXFP8_E4M3', scale_mode='floor', rounding='toward_zero') in every "
        "block: the backend uses rounding='toward_zero'")


def test_compare_mx_names_a_cause_of_one_code_off_only_where_every_differing_block_fits_it():
    """A second mutation audit's find: the causes of a scale one code off (kept at 2^-126; a float32
    log2 of an amax just above a power of two, under ceil, or just below one, under floor) are named
    only where every differing block fits them, and nothing tested blocks of which only some do
    (.any() for .all() passed).
    By hand: MX E4M3 scales of amax 2**-140, 1 and 2 are 0 (clamped), 119 and 120; under ceil, of
    amax 2**20 + 2**-3 (float32 log2 exactly 20), 3 and 2 they are 140, 121 and 120."""
    x = np.concatenate([np.full(32, 2.0**-140), np.ones(32), np.full(32, 2.0)]).astype(np.float32)[None, :]
    expected = mx.quantize(x, "MXFP8_E4M3")
    assert expected.scales.tolist() == [[0, 119, 120]]
    both = testing.compare_mx(np.array([[1, 120, 120]], np.uint8), expected.codes, x, "MXFP8_E4M3").layout
    alone = testing.compare_mx(np.array([[1, 119, 120]], np.uint8), expected.codes, x, "MXFP8_E4M3").layout
    assert "2^-126" not in both and "2^-126" in alone
    top = np.float32(2.0**20 + 2.0**-3)
    assert np.log2(top) == 20.0
    x = np.concatenate([np.full(32, top), np.full(32, 3.0), np.full(32, 2.0)]).astype(np.float32)[None, :]
    expected = mx.quantize(x, "MXFP8_E4M3", scale_mode="ceil")
    assert expected.scales.tolist() == [[140, 121, 120]]
    reports = {}
    for name, minus in (("both", [1, 1, 0]), ("alone", [1, 0, 0])):
        scales = (expected.scales - np.array([minus], np.uint8)).astype(np.uint8)
        reports[name] = testing.compare_mx(scales, expected.codes, x, "MXFP8_E4M3", scale_mode="ceil").layout
    assert "just above a power of two" not in reports["both"] and "just above a power of two" in reports["alone"]
    # under floor, of amax 2**20 - 2**-4 (float32 log2 rounds up to exactly 20), 3 and 2: 138, 120 and 120
    below = np.nextafter(np.float32(2.0**20), np.float32(0))
    assert below == 2.0**20 - 2.0**-4 and np.log2(below) == 20.0
    x = np.concatenate([np.full(32, below), np.full(32, 3.0), np.full(32, 2.0)]).astype(np.float32)[None, :]
    expected = mx.quantize(x, "MXFP8_E4M3")
    assert expected.scales.tolist() == [[138, 120, 120]]
    for name, plus in (("both", [1, 1, 0]), ("alone", [1, 0, 0])):
        scales = (expected.scales + np.array([plus], np.uint8)).astype(np.uint8)
        reports[name] = testing.compare_mx(scales, expected.codes, x, "MXFP8_E4M3").layout
    assert "just below a power of two" not in reports["both"] and "just below a power of two" in reports["alone"]


def _log2_mx_backend(x, scale_mode="floor", clamp=False):
    """MXFP8 E4M3, 32-blocks on the last axis (a multiple of 32), with a shared exponent from a float32
    log2 of the amax (tutorial 8's bug), or (``clamp``) the library's scale clamped to 2^-126 (code 1)."""
    blocks = x.reshape(-1, 32)
    if clamp:
        scales = np.maximum(mx.quantize(blocks, "MXFP8_E4M3", scale_mode=scale_mode).scales.reshape(-1), 1)
    else:
        with np.errstate(divide="ignore"):
            log2 = np.log2(np.abs(blocks).max(axis=1))  # BUG: float32 log2
        exponent = np.floor(log2) if scale_mode == "floor" else np.ceil(log2)
        scales = np.clip(np.where(np.isfinite(exponent), exponent, -200) - 8 + 127, 0, 254)
    shared = scales.astype(np.int64) - mx.E8M0_BIAS
    codes = codec.encode(np.ldexp(blocks.astype(np.float64), -shared[:, None]), "E4M3", saturate=True)
    return scales.astype(np.uint8).reshape(x.shape[0], -1), codes.reshape(x.shape)


def test_compare_mx_names_a_scale_mode_and_a_bug_that_give_the_same_result_as_alternatives():
    """A review's find: where a scale mode gave every scale and code of a backend whose scales are one
    code off for a checked cause (a float32 log2, a clamp to 2^-126), the first line said "the backend
    uses scale_mode='even'" as fact, and the next named the cause, as fact too. Both are now named as
    alternatives on the first line; golden.mx_inputs' rows tell them apart, and there the cause stands
    alone. By hand, as in the test above: amaxes 2**20 - 2**-4 (float32 log2 20), 3 and 2 give 138, 120
    and 120 under floor, and 139, 120, 120 under even (the significand rounded to 3 bits carries to 2);
    amax 1.5 * 2**-119 gives 0 under floor, 1 under ceil, and 2 gives 120 under both."""
    below = np.nextafter(np.float32(2.0**20), np.float32(0))
    x = np.concatenate([np.full(32, below), np.full(32, 3.0), np.full(32, 2.0)]).astype(np.float32)[None, :]
    scales, codes = _log2_mx_backend(x)
    assert scales.tolist() == [[139, 120, 120]] and mx.quantize(x, "MXFP8_E4M3", scale_mode="even").scales.tolist() \
        == [[139, 120, 120]]
    assert testing.compare_mx(scales, codes, x, "MXFP8_E4M3").layout.splitlines() == [
        "scales and codes equal mx.quantize(x, 'MXFP8_E4M3', scale_mode='even', rounding='nearest_even') in every "
        "block: the backend uses scale_mode='even' (or 'rceil', alike on these inputs); or each block's amax lies "
        "just below a power of two, and its float32 log2 rounds up to it; these inputs cannot tell them apart "
        "(golden.mx_inputs' boundary rows can)",
        "every scale that differs is the expected code plus 1: the shared exponent one too large in those blocks"]
    # (rceil, named as alike by a later review, gives them too: ceil(log2(amax / 448)) is 139 - 127 there)
    assert mx.quantize(x, "MXFP8_E4M3", scale_mode="rceil").scales.tolist() == [[139, 120, 120]]
    x = np.concatenate([np.full(32, 1.5 * 2.0**-119), np.full(32, 2.0)]).astype(np.float32)[None, :]
    scales, codes = _log2_mx_backend(x, clamp=True)
    assert scales.tolist() == [[1, 120]] == mx.quantize(x, "MXFP8_E4M3", scale_mode="ceil").scales.tolist()
    assert testing.compare_mx(scales, codes, x, "MXFP8_E4M3").layout.splitlines()[0].endswith(
        "the backend uses scale_mode='ceil'; or the scale kept at 2^-126, float32's smallest normal, where it should "
        "be 2^-127: a clamp, or exp2f under flush-to-zero; these inputs cannot tell them apart (golden.mx_inputs' "
        "rows of scale 2**-127 can)")
    # golden.mx_inputs (padded to whole blocks; its rows of NaN and Inf left out) tell them apart: the cause alone
    wide = np.pad(golden.mx_inputs("MXFP8_E4M3"), ((0, 0), (0, 16)))
    wide = wide[np.isfinite(wide).all(axis=1)]
    for clamp, cause in ((False, "(each block's amax lies just below a power of two"), (True, "(the scale kept at")):
        layout = testing.compare_mx(*_log2_mx_backend(wide, clamp=clamp), wide, "MXFP8_E4M3").layout
        assert "scale_mode=" not in layout and cause in layout.splitlines()[0]
    # a rule that changes the rounding too is no alternative: the bug rounds as the oracle does (1.45 scales
    # to 185.6, which rounds to 192, toward zero to 176: the backend's rounding shows)
    x[0, 33] = 1.45
    scales, codes = _log2_mx_backend(x, clamp=True)
    layout = testing.compare_mx(scales, codes, x, "MXFP8_E4M3", rounding="toward_zero").layout
    assert "scale_mode='ceil' and rounding='nearest_even'" in layout and "cannot tell them apart" not in layout


def _signed_max_mx_backend(x):
    """MXFP8 E4M3, 32-blocks on the last axis, whose block amax is max(x), not max(|x|) (the bug): the
    library's scale rule (OCP floor) applied to each block's signed maximum, and the codes scaled by it."""
    blocks = x.reshape(-1, 32)
    scales, shared = mx.shared_exponents(blocks.max(axis=1), "E4M3")  # BUG: max(x)
    codes = codec.encode(np.ldexp(blocks.astype(np.float64), -shared[:, None].astype(np.int64)), "E4M3",
                         saturate=True)
    return scales.reshape(x.shape[0], -1), codes.reshape(x.shape)


def test_compare_mx_names_a_block_amax_taken_as_max_x_not_max_abs_x():
    """A review's find: a backend whose block amax is the signed max(x) got a scale one code low blamed on
    "an amax that missed the block's largest element, such as one over part of the block" (the second
    largest magnitude lay in the binade of max(x)), and, two codes low, no cause at all. By hand: blocks
    of values in (-0.99, 0.99) whose max(x) lies in [0.5, 1) (exponent -1) have the OCP scale 2**(-1 - 8),
    code 118; led by -3.0 (exponent 1) the expected code is 120, led by -1.5 (exponent 0) 119; led by
    +3.0 the backend's max(x) is the amax, and its scale agrees."""
    x = np.random.default_rng(0).uniform(-0.99, 0.99, (4, 64)).astype(np.float32)
    x[:, 32] = 3.0
    for lead, note in ((-3.0, "every scale that differs is below the expected code: the shared exponent too small "
                               "in those blocks"),
                       (-1.5, "every scale that differs is the expected code minus 1: the shared exponent one too "
                              "small in those blocks")):
        x[:, 0] = lead
        scales, codes = _signed_max_mx_backend(x)
        expected = mx.quantize(x, "MXFP8_E4M3")
        assert scales[:, 0].tolist() == [118] * 4 and expected.scales[:, 0].tolist() == [120 if lead == -3 else 119] * 4
        assert np.array_equal(scales[:, 1], expected.scales[:, 1])
        report = testing.compare_mx(scales, codes, x, "MXFP8_E4M3")
        assert report.scale_count == 4 and report.elements.ok
        assert report.layout == f"{note} (the block amax is max(x), not max(|x|): a negative element was the largest)"
    # checked, not guessed: a block led by a negative element whose backend scale is the max |x| one
    x[0, 32] = -3.0  # (block (0, 1): max(x) gives 118, the scale given stays 120)
    assert "max(x)" not in testing.compare_mx(scales, codes, x, "MXFP8_E4M3").layout


def test_a_rearrangement_on_inputs_that_hold_each_code_once_is_also_named_a_per_code_bug():
    """Found by a review: on round-trip inputs (each code once, in code order: ``decode(arange)``, as the
    golden decode files hold), a bug that maps codes to codes gives the same arrays as a rearrangement,
    and the layout verdicts ("an off-by-one offset, not a rounding bug", "a layout bug") were stated
    alone. The same bug on inputs that repeat values, shuffled, keeps no layout hint; a real shift
    there keeps its verdict."""
    both = "; or each expected code became one other code wherever it occurs (a bug that builds codes wrongly"
    codes = np.arange(1, 0x7E, dtype=np.uint8)  # code + 1 (no NaN reached): a shift by one, in code order
    layout = testing.compare(codes + 1, codec.decode(codes, "E4M3").astype(np.float32), "E4M3", max_rows=0).layout
    assert layout.startswith("actual holds the expected codes shifted by one element, each one place earlier")
    assert both in layout and "not a rounding bug" not in layout
    codes = np.arange(16, dtype=np.uint8)  # E2M1 with its last mantissa bit flipped: pairs swapped
    layout = testing.compare(codes ^ 1, codec.decode(codes, "E2M1").astype(np.float32), "E2M1", max_rows=0).layout
    assert layout.startswith("actual holds the expected codes with each pair along the last axis swapped; or each")
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)  # nibbles of each code swapped: a transpose
    swapped = ((codes << 4) | (codes >> 4)).astype(np.uint8)
    layout = testing.compare(swapped, codec.decode(codes, "E4M3").astype(np.float32), "E4M3", max_rows=0).layout
    assert layout.startswith("actual holds the expected codes with the last two axes swapped (a transposed or "
                             "column-major result); or each expected code became")
    # the same inputs, each value four times, shuffled: the code + 1 bug is no rearrangement, a shift is one
    x = np.random.default_rng(0).permutation(np.repeat(codec.decode(np.arange(1, 0x7E, dtype=np.uint8), "E4M3"), 4))
    expected = codec.encode(x.astype(np.float32), "E4M3")
    assert "holds the expected codes" not in testing.compare(expected + 1, x.astype(np.float32), "E4M3").layout
    assert testing.compare(np.roll(expected, 1), x.astype(np.float32), "E4M3").layout.endswith(
        "each one place later in C order: an off-by-one offset, not a rounding bug")
    # a review of this change: a rule that explains every code is still named, first (truncation of
    # sorted inputs, one in each gap, 3/4 of the way up: every code one below, a shift by one too)
    values = codec.decode(np.arange(0x08, 0x70, dtype=np.uint8), "E4M3").astype(np.float64)
    x = (values[:-1] + 0.75 * np.diff(values)).astype(np.float32)
    layout = testing.compare(codec.encode(x, "E4M3", rounding="toward_zero"), x, "E4M3").layout
    assert layout.startswith("actual equals encode(x, 'E4M3', rounding='toward_zero') at every element: the backend "
                             "rounds toward zero, not nearest even; or actual holds the expected codes shifted by one")
    assert both in layout


@pytest.mark.parametrize("elem", ["MXFP8_E4M3", "NVFP4"])
def test_a_block_kernel_that_flushes_float32_subnormal_inputs_is_named_a_flush(elem):
    """A review's find: a kernel that flushes float32 subnormal inputs to zero before scaling (DAZ/FTZ)
    had its element mismatches classed "other", with no hint: after block scaling a subnormal is a
    normal element value. By hand: MX, a block of amax 2**-119 (normal) has the scale 2**-127, so
    2**-133 * k (k = 1 to 8, float32 subnormals) scales to k * 2**-6, E4M3 normals (codes 0x08 to 0x20),
    which flushed inputs make 0x00. NVFP4: a global amax of 2**-116 gives S_enc = 2688 * 2**116, and a
    block of amax 2**-126 the block scale 0.4375 (code 0x2e), so 2**-129 * k (k = 2 to 7) and -2**-128
    scale to about 0.75 * k and -1 (E2M1 codes 0x03 to 0x05 and 0x0a, 0x02 for k = 2), flushed to +-0."""
    x = np.zeros((2, 32), np.float32)
    if elem == "NVFP4":
        x[0, 0], x[1, 0] = 2.0**-116, 2.0**-126
        x[1, 1:7] = 2.0**-129 * np.arange(2, 8)
        x[1, 7] = -2.0**-128
    else:
        x[:, 0] = 2.0**-119
        x[1, 1:9] = 2.0**-133 * np.arange(1, 9)
    x[0, 8:] = np.linspace(-1, 1, 24) * x[0, 0]  # (normal inputs: no flush)
    flushed = np.where(np.abs(x) < 2.0**-126, np.copysign(np.float32(0), x), x).astype(np.float32)
    backend = mx.quantize_nvfp4(flushed) if elem == "NVFP4" else mx.quantize(flushed, elem)
    expected = mx.quantize_nvfp4(x) if elem == "NVFP4" else mx.quantize(x, elem)
    assert np.array_equal(backend.scales, expected.scales)
    assert (expected.codes[1, 1:8] != 0).all() and (backend.codes[1, 1:8] & 7 == 0).all()
    report = testing.compare_mx(backend.scales, backend.codes, x, elem)
    assert report.elements.count == report.elements.by_class["subnormal"] == (8 if elem != "NVFP4" else 7)
    assert sum(report.elements.by_class.values()) == report.elements.count  # (moved out of "other", not added)
    assert {row.kind for row in report.elements.mismatches} == {"subnormal"}
    assert report.layout.splitlines()[0] == (
        "scales and codes equal those of x with its float32 subnormals flushed to zero (signs kept): the backend "
        "flushes float32 subnormal inputs to zero (DAZ/FTZ)")
    # a zero code for a normal input is no flush, and the flush alone no longer gives every code
    codes = backend.codes.copy()
    codes[0, 8] = 0
    report = testing.compare_mx(backend.scales, codes, x, elem)
    assert report.elements.by_class["subnormal"] == report.elements.count - 1 and "DAZ" not in report.layout


def test_a_flush_of_inputs_and_a_flush_of_element_results_that_give_the_same_codes_are_named_alike():
    """The final review's find: where the flushed float32 subnormal inputs all scale to element
    subnormals, an element cast without subnormal results (outputs flushed) writes the same codes,
    and the DAZ hint stated the input flush as fact. By hand: a block of amax 2**-119 has the scale
    2**-127; 2**-136 * k (k = 1 to 7) scales to k * 2**-9, E4M3's subnormals 0x01 to 0x07, which
    either flush makes 0x00; 2**-133 scales to 2**-6, E4M3's smallest normal, which only the input
    flush makes 0x00, and then the hint names the input flush alone."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 1:8] = 2.0**-119, 2.0**-136 * np.arange(1, 8)
    expected = mx.quantize(x, "MXFP8_E4M3")
    assert expected.scales.tolist() == [[0]] and expected.codes[0, 1:8].tolist() == list(range(1, 8))
    codes = expected.codes.copy()
    codes[0, 1:8] = 0
    assert testing.compare_mx(expected.scales, codes, x, "MXFP8_E4M3").layout.splitlines()[0] == (
        "scales and codes equal those of x with its float32 subnormals flushed to zero (signs kept): the backend "
        "flushes float32 subnormal inputs to zero (DAZ/FTZ); or its element cast flushes subnormal results to "
        "zero: these inputs cannot tell them apart (a float32 subnormal input that its block's scale takes to a "
        "normal element value can)")
    x[0, 8] = 2.0**-133
    codes = mx.quantize(np.where(np.abs(x) < 2.0**-126, np.float32(0), x), "MXFP8_E4M3").codes
    assert mx.quantize(x, "MXFP8_E4M3").codes[0, 8] == 0x08 and codes[0, 8] == 0
    layout = testing.compare_mx(expected.scales, codes, x, "MXFP8_E4M3").layout
    assert "(DAZ/FTZ)" in layout and "subnormal results" not in layout


def test_compare_mx_names_a_wrong_rounding_under_the_declared_scale_mode_before_another_mode():
    """The final review's find: a backend that rounds toward zero under the declared rceil was said to
    use scale_mode='even' and rounding='toward_zero' (even gives rceil's scales on random data, and
    the rules that changed the mode were tried first); the rules that change one option come first."""
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    assert np.array_equal(mx.quantize(x, "MXFP8_E4M3", scale_mode="even").scales,
                          mx.quantize(x, "MXFP8_E4M3", scale_mode="rceil").scales)
    backend = mx.quantize(x, "MXFP8_E4M3", scale_mode="rceil", rounding="toward_zero")
    assert testing.compare_mx(backend.scales, backend.codes, x, "MXFP8_E4M3", scale_mode="rceil").layout == (
        "scales and codes equal mx.quantize(x, 'MXFP8_E4M3', scale_mode='rceil', rounding='toward_zero') in every "
        "block: the backend uses rounding='toward_zero'")


def test_compare_mx_names_an_nvfp4_block_scale_rounded_in_another_float32_order():
    """A review of tutorial 4 found that earlier TransformerEngine code computes NVFP4's block scale as
    block_amax / 6 * S_enc, the current code (and minifp8) as block_amax * (S_enc * float32(1/6)). By
    hand: a global amax of 26.52745 gives S_enc = 2688 / 26.52745, and a block amax of 13.73743 a
    block scale of 232 in exact arithmetic, E4M3's tie between 224 (0x76) and 240 (0x77). The current
    order lands a hair above, on 240; the earlier one lands on 232 exactly, and the tie goes to the
    even 224. Both orders are named wherever they give every scale and code, and only there."""
    x = np.zeros(32, np.float32)
    x[0], x[16], x[17], x[18] = 26.52745, 13.73743, 1.7, -2.0
    encode_scale = np.float32(2688) / np.float32(26.52745)
    assert np.float32(13.73743) / np.float32(6) * encode_scale == 232.0
    assert np.float32(13.73743) * (encode_scale * (np.float32(1) / np.float32(6))) > 232.0
    expected = mx.quantize_nvfp4(x)
    assert expected.scales.tolist() == [0x7E, 0x77]
    earlier = expected.scales.copy()
    earlier[1] = 0x76  # 224
    element_scale = np.float32(1) / (np.float32(224) * (np.float32(1) / encode_scale))  # steps 5 and 6
    codes = expected.codes.copy()
    codes[16:] = codec.encode(np.clip(x[16:] * element_scale, -6, 6), "E2M1")
    assert codes[17] != expected.codes[17]  # 1.7 x S_enc / 224 = 0.77 rounds to 1; 1.7 x S_enc / 240 = 0.72 to 0.5
    layout = testing.compare_mx(earlier, codes, x, "NVFP4").layout
    assert layout.startswith("scales and codes equal NVFP4's with the block scale e4m3(block_amax / 6 * S_enc) or ")
    assert "which minifp8 follows" in layout
    # the same scale with codes the other order does not give: no order is named
    assert "equal NVFP4's" not in testing.compare_mx(earlier, expected.codes, x, "NVFP4").layout


@pytest.mark.parametrize("name, beyond, overflow", [("E4M3", 480, "NaN"), ("E5M2", 65536, "Inf")])
def test_a_bit_level_truncation_that_overflows_is_named(name, beyond, overflow):
    """A review's find: a cast that cuts the bits rounds toward zero but, past max plus one spacing, lands on
    the NaN (E4M3) or Inf (E5M2) codes; no rule matched it (toward_zero clamps finite overflow, IEEE 754
    section 7.4), so its report had no hint. The truncation is simulated here from the definition: each
    input's magnitude cut to the grid below it, and the overflow codes set by hand."""
    fmt = formats.get(name)
    x = next(testing.sweep(name, kind="edge"))
    magnitudes = fmt.values()[: 1 << (fmt.bits - 1)]
    finite = np.isfinite(magnitudes)
    grid, codes_of = magnitudes[finite], np.flatnonzero(finite).astype(np.uint8)
    below = np.searchsorted(grid, np.abs(x.astype(np.float64)), side="right") - 1  # the largest value <= |x|
    actual = codes_of[np.clip(below, 0, None)] | np.where(np.signbit(x), np.uint8(fmt.sign_mask), np.uint8(0))
    too_big = np.abs(x) >= beyond
    actual[too_big] = (0x7F if name == "E4M3" else 0x7C) | np.where(np.signbit(x[too_big]), 0x80, 0).astype(np.uint8)
    actual[np.isnan(x)] = codec.encode(x[np.isnan(x)], name)
    report = testing.compare(actual, x, name)
    # (a later review's find: an Inf input alone tried the rule, which then doubled plain toward_zero's hint)
    with_inf = np.float32([1.3, 2.7, -5.1, 100.3, np.inf, -np.inf])
    assert "cannot tell" not in testing.compare(codec.encode(with_inf, name, rounding="toward_zero"), with_inf,
                                                name).layout
    assert not report.ok and report.layout.startswith(
        f"actual equals encode(np.where(abs(x) >= {beyond}, x * np.inf, x), '{name}', rounding='toward_zero', "
        f"saturate=False) at every element: the backend truncates (rounds toward zero) and, as a cut of the bits "
        f"does, overflows to {overflow} from {beyond} up")


def test_bytes_of_words_in_the_other_byte_order_are_named():
    """8-bit codes moved as 16- or 32-bit words across an endianness change hold the expected codes with
    each pair swapped, or each four reversed: they got the generic "in another order" hint, where FP4's
    swapped nibbles got a specific one (a left-alone item of stop 66). Two swapped codes alone keep the
    generic hint (test_two_swapped_codes_get_the_layout_hint)."""
    x = _random_e4m3_inputs(64).reshape(8, 8)
    expected = codec.encode(x, "E4M3")
    for word in (16, 32):
        moved = expected.view(f"<u{word // 8}").byteswap().view(np.uint8).reshape(x.shape)
        layout = testing.compare(moved, x, "E4M3").layout
        assert f"the bytes of {word}-bit words in the other byte order" in layout, layout
    layout = testing.compare(expected[:, ::-1].copy(), x, "E4M3").layout  # rows reversed: no byte-order hint
    assert "in another order" in layout and "byte order" not in layout, layout


def test_compare_mx_names_nvfp4_elements_scaled_in_another_float32_order():
    """Steps 5-6 of NVFP4 (TransformerEngine, minifp8: x * min(1 / (s_block * S_dec), FLT_MAX), clipped
    to +-6) in another float32 order (torchao divides, x / (s_block * (global_amax / 2688))) give other
    E2M1 codes where the scaled value lies within float32 rounding of a midpoint between E2M1 values; only step 4's
    orders were tried (a left-alone item of stop 66). Inputs a few float32 ulps either side of those
    midpoints, times each block's dequantisation scale; the backend is simulated from each order's
    formula. Where the scales agree and the codes follow an order, the note names it, and only then."""
    f32 = np.float32
    rng = np.random.default_rng(1)
    global_amax, n = f32(1000.0), 256
    x = np.zeros((n, 16), f32)
    x[:, 0] = rng.uniform(1, 1000, n).astype(f32)  # each block's amax, so its scale
    encode = f32(2688) / global_amax
    block = codec.decode(mx.quantize_nvfp4(x, global_amax=global_amax).scales.ravel(), "E4M3").astype(f32)[:, None]
    midpoints = rng.choice([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], (n, 15)) * rng.choice([-1, 1], (n, 15))
    x[:, 1:] = midpoints * (block * (f32(1) / encode)) * (1 + rng.integers(-4, 5, (n, 15)) * 2.0**-24)
    expected = mx.quantize_nvfp4(x, global_amax=global_amax)
    assert np.array_equal(codec.decode(expected.scales.ravel(), "E4M3")[:, None], block)  # (the blocks' scales)
    backends = {"x / (s_block * S_dec)": lambda: x / (block * (f32(1) / encode)),
                "x * (S_enc / s_block)": lambda: x * (encode / block),
                "x * S_enc / s_block": lambda: x * encode / block}
    for order, scaled in backends.items():
        codes = codec.encode(np.clip(scaled(), -6, 6).astype(f32), "E2M1")
        assert np.count_nonzero(codes != expected.codes) > 100, order
        layout = testing.compare_mx(expected.scales, codes, x, "NVFP4", global_amax=global_amax).layout
        assert layout.startswith(f"the element codes equal NVFP4's with each element scaled as e2m1({order})"), layout
        assert "(steps 5-6) in another order" in layout
    wrong = expected.codes ^ np.uint8(1)  # a per-code bug: no order fits
    assert "steps 5-6" not in testing.compare_mx(expected.scales, wrong, x, "NVFP4", global_amax=global_amax).layout
    assert testing.compare_mx(expected.scales, expected.codes, x, "NVFP4", global_amax=global_amax).ok
