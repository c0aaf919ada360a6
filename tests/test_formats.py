"""The format catalogue against the spec tables (OFP8 rev 1.0 Tables 1-2; OCP MX v1.0 sections 5.3.2-5.3.3
for FP6/FP4 and 5.4.1 for E8M0)."""
import math

import numpy as np
import pytest

from minifp8 import codec, formats

# name: (max, min normal, min subnormal, NaN codes, Inf codes, has -0). Numbers from the specs
# (DESIGN.md section 2), written out by hand, not computed by the code under test.
SPEC = {
    "E4M3": (448.0, 2.0**-6, 2.0**-9, {0x7F, 0xFF}, set(), True),
    "E5M2": (57344.0, 2.0**-14, 2.0**-16, {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}, {0x7C, 0xFC}, True),
    "E4M3FNUZ": (240.0, 2.0**-7, 2.0**-10, {0x80}, set(), False),
    "E5M2FNUZ": (57344.0, 2.0**-15, 2.0**-17, {0x80}, set(), False),
    "E3M2": (28.0, 2.0**-2, 2.0**-4, set(), set(), True),
    "E2M3": (7.5, 1.0, 2.0**-3, set(), set(), True),
    "E2M1": (6.0, 1.0, 0.5, set(), set(), True),
    "E8M0": (2.0**127, 2.0**-127, 2.0**-127, {0xFF}, set(), False),
}

ML_DTYPES_NAMES = {
    "E4M3": "float8_e4m3fn", "E5M2": "float8_e5m2", "E4M3FNUZ": "float8_e4m3fnuz",
    "E5M2FNUZ": "float8_e5m2fnuz", "E3M2": "float6_e3m2fn", "E2M3": "float6_e2m3fn",
    "E2M1": "float4_e2m1fn", "E8M0": "float8_e8m0fnu",
}


def ml_dtypes_rounds_once(ml_dtypes) -> bool:
    """Whether this ml_dtypes casts float64 to FP8 in one rounding, and E8M0 just above 2**-127 as we do:
    0.7.0 does (seen 2026-12-02); earlier versions went through float32."""
    return tuple(int(part) for part in ml_dtypes.__version__.split(".")[:2]) >= (0, 7)


def test_get_takes_an_ml_dtypes_dtype_and_names_what_it_refuses():
    """A review's finds: formats.get(np.dtype(float8_e4m3fn)) said "got float8_e4m3fn" as if that were
    wrong, the scalar type said "got type", and get_list(b"e4m3") iterated the bytes ("got int")."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert formats.get(np.dtype(ml_dtypes.float8_e4m3fn)) is formats.E4M3
    assert formats.get(ml_dtypes.float8_e5m2) is formats.E5M2
    assert formats.get_list(np.dtype(ml_dtypes.float4_e2m1fn)) == [formats.E2M1]
    assert formats.get_list(ml_dtypes.float8_e4m3fn) == [formats.E4M3]  # (the scalar type, as get takes it)
    with pytest.raises(TypeError, match="^names must be a format name .* got memoryview"):
        formats.get_list(memoryview(b"e4m3"))
    with pytest.raises(ValueError, match="^format: the dtype float32 is not a format minifp8 knows"):
        formats.get(np.float32)
    with pytest.raises(TypeError, match="^format must be a FloatFormat, a name \\(str\\) or an ml_dtypes dtype, got "
                                        "NoneType None"):
        formats.get(None)
    with pytest.raises(TypeError, match="^names must be a format name \\(str\\) or a sequence of them, got bytes "
                                        "b'e4m3': decode it first"):
        formats.get_list(b"e4m3")


@pytest.mark.parametrize("name", SPEC)
def test_decode_table_matches_spec(name):
    fmt = formats.get(name)
    maximum, min_normal, min_subnormal, nan_codes, inf_codes, has_negative_zero = SPEC[name]
    table = fmt.values()
    assert len(table) == 2**fmt.bits
    assert fmt.max == maximum and np.nanmax(table[np.isfinite(table)]) == maximum
    assert fmt.min_normal == min_normal and fmt.min_subnormal == min_subnormal
    positive = table[np.isfinite(table) & (table > 0)]
    assert positive.min() == min_subnormal
    assert set(np.flatnonzero(np.isnan(table))) == nan_codes
    assert set(np.flatnonzero(np.isinf(table))) == inf_codes
    assert fmt.has_negative_zero == has_negative_zero
    if has_negative_zero:
        negative_zero = fmt.sign_mask
        assert table[negative_zero] == 0 and math.copysign(1, table[negative_zero]) == -1
    for code in nan_codes:
        assert np.isnan(codec.decode(np.array([code], np.uint8), fmt)[0])


@pytest.mark.parametrize("name", SPEC)
def test_decode_table_matches_ml_dtypes(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fmt = formats.get(name)
    codes = np.arange(2**fmt.bits, dtype=np.uint8)
    theirs = codes.view(getattr(ml_dtypes, ML_DTYPES_NAMES[name])).astype(np.float32)
    ours = codec.decode(codes, fmt)
    # bit for bit, NaNs included: a code with its sign bit set decodes to a NaN with its sign bit set
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))


@pytest.mark.parametrize("name", SPEC)
def test_encode_of_decode_is_identity_on_every_non_nan_code(name):
    fmt = formats.get(name)
    codes = np.arange(2**fmt.bits, dtype=np.uint8)
    values = codec.decode(codes, fmt)
    keep = ~np.isnan(values)
    np.testing.assert_array_equal(codec.encode(values[keep], fmt), codes[keep])
    np.testing.assert_array_equal(codec.encode(values[keep].astype(np.float64), fmt), codes[keep])
    finite = np.isfinite(values)  # saturation changes only what Inf encodes to
    np.testing.assert_array_equal(codec.encode(values[finite], fmt, saturate=True), codes[finite])
    for code in codes[keep][:: max(1, len(codes) // 64)]:
        assert codec.encode_scalar(float(values[code]), fmt) == code
    # A NaN code decodes to a NaN of its sign, and encodes back to a NaN code of that sign.
    nan_codes = codes[~keep]
    sign_bits = nan_codes & fmt.sign_mask  # (sign_mask is 0 for unsigned formats)
    np.testing.assert_array_equal(np.signbit(values[~keep]), sign_bits != 0)
    back = codec.encode(values[~keep], fmt)
    assert np.isnan(fmt.values()[back]).all()
    np.testing.assert_array_equal(back & fmt.sign_mask, sign_bits)


def test_emax_matches_mx_spec():
    # OCP MX v1.0 section 6.3: emax_elem is the exponent of the element format's largest normal number;
    # the element tables (OFP8 Table 1, MX section 5.3) give 8, 15, 4, 2, 2 for E4M3, E5M2, E3M2, E2M3, E2M1.
    assert [formats.get(n).emax for n in ("E4M3", "E5M2", "E3M2", "E2M3", "E2M1")] == [8, 15, 4, 2, 2]


@pytest.mark.parametrize("spelling, name", [("e4m3", "E4M3"), ("float8_e4m3fn", "E4M3"), ("FLOAT8_E5M2", "E5M2"),
                                            ("torch.float8_e5m2fnuz", "E5M2FNUZ"), ("float4_e2m1fn", "E2M1"),
                                            ("float8_e8m0fnu", "E8M0"), ("float6_e2m3fn", "E2M3")])
def test_get_accepts_our_and_library_spellings(spelling, name):
    assert formats.get(spelling) is formats.CATALOGUE[name]
    assert formats.get(formats.CATALOGUE[name]) is formats.CATALOGUE[name]


@pytest.mark.parametrize("name", ML_DTYPES_NAMES)
def test_every_ml_dtypes_name_is_a_spelling_of_its_format(name):
    assert formats.get(ML_DTYPES_NAMES[name]) is formats.CATALOGUE[name]
    assert formats.get("torch." + ML_DTYPES_NAMES[name].upper()) is formats.CATALOGUE[name]

def test_get_rejects_unknown_names_clearly():
    with pytest.raises(ValueError, match="unknown format 'e4m4'"):
        formats.get("e4m4")
    with pytest.raises(TypeError, match="got int"):
        formats.get(8)


def test_format_fields_are_validated():
    with pytest.raises(ValueError, match="nan_style"):
        formats.FloatFormat("X", 4, 3, 7, nan_style="sometimes")
    with pytest.raises(ValueError, match="1 to 8 bits"):
        formats.FloatFormat("X", 8, 7, 127)
    with pytest.raises(ValueError, match="infinity"):
        formats.FloatFormat("X", 4, 3, 7, has_infinity=True, nan_style="all_ones")


@pytest.mark.parametrize("fields, options, error, match", [
    (("X", -1, 3, 7), {}, ValueError, "exponent_bits >= 1 and mantissa_bits >= 0, got -1 and 3"),
    (("X", 4, -1, 7), {}, ValueError, "got 4 and -1"),
    (("X", 0, 3, 0), {}, ValueError, "exponent_bits >= 1"),        # no exponent: not a float format
    (("X", 0, 0, 0), {"signed": False}, ValueError, "exponent_bits >= 1"),  # zero width
    (("X", 4.0, 3, 7), {}, TypeError, "exponent_bits must be an int, got float 4.0"),
    (("X", True, 1, 0), {}, TypeError, "exponent_bits must be an int, got bool"),
    (("X", 4, 3, 7.5), {}, TypeError, "bias must be an int, got float 7.5"),
    ((None, 4, 3, 7), {}, TypeError, "name must be a non-empty str"),
    (("X", 4, 3, 7), {"signed": 1}, TypeError, "signed must be a bool, got int 1"),
    (("X", 4, 3, 2000), {}, ValueError, r"bias 2000 .* float32 cannot hold: bias must lie in \[-112, 147\]"),
    (("X", 4, 3, -2000), {}, ValueError, r"bias must lie in \[-112, 147\]"),
    (("X", 8, 0, 126), {"signed": False, "has_subnormals": False}, ValueError, r"\[127, 149\]"),  # 2**128
    (("X", 5, 0, 15), {"has_infinity": True, "nan_style": "ieee"}, ValueError, "mantissa_bits >= 1"),
    (("X", 1, 0, 0), {}, ValueError, "no positive finite value"),  # codes +-0 and NaN only
    (("X", 4, 3, 7), {"has_subnormals": False}, ValueError, "signed format needs has_subnormals=True"),
    (("X", 4, 3, 7), {"signed": False}, ValueError, "unsigned format must be an E8M0-style"),
    (("X", 4, 3, 7), {"signed": False, "has_subnormals": False, "nan_style": "none"}, ValueError, "E8M0-style"),
])
def test_format_fields_and_combinations_are_validated(fields, options, error, match):
    with pytest.raises(error, match=match):
        formats.FloatFormat(*fields, **options)


def test_bias_range_edges_give_values_that_fit_float32():
    lowest, highest = formats.FloatFormat("X", 4, 3, -112), formats.FloatFormat("X", 4, 3, 147)
    assert lowest.max == 1.75 * 2.0**127 and highest.min_subnormal == 2.0**-149
    assert np.isfinite(codec.decode(np.uint8(0x7E), lowest)) and codec.decode(np.uint8(0x01), highest) > 0


def test_a_new_format_is_just_data():
    # A format nobody catalogued (E3M4, bias 3) decodes from its fields and round-trips.
    fmt = formats.FloatFormat("E3M4", 3, 4, 3, nan_style="none")
    assert fmt.max == 2.0**4 * (1 + 15 / 16)
    codes = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(codec.encode(codec.decode(codes, fmt), fmt), codes)


def test_formats_that_differ_print_differently():
    """Found in a review: E5M2 without Inf printed as the catalogue's E5M2, and E8M0 did not say it
    is unsigned. The repr names every trait that differs from the defaults."""
    assert repr(formats.E5M2) == "FloatFormat(E5M2: E5M2, bias 15, Inf, IEEE NaN)"
    assert repr(formats.FloatFormat("E5M2", 5, 2, 15)) == "FloatFormat(E5M2: E5M2, bias 15)"
    assert repr(formats.E4M3) == "FloatFormat(E4M3: E4M3, bias 7)"
    assert repr(formats.E4M3FNUZ) == "FloatFormat(E4M3FNUZ: E4M3, bias 8, NaN at -0)"
    assert repr(formats.E2M1) == "FloatFormat(E2M1: E2M1, bias 1, no NaN)"
    assert repr(formats.E8M0) == "FloatFormat(E8M0: E8M0, bias 127, unsigned, no subnormals)"
    reprs = [repr(f) for f in formats.CATALOGUE.values()]
    assert len(set(reprs)) == len(reprs)


def test_a_block_format_given_for_an_element_format_gets_told_what_to_pass():
    """Found by a review of explain: ``explain(1.0, "MXFP4_E2M1")`` (and encode, and golden's
    --formats) said "unknown format" with a list of lowercase aliases, and an MXFormat gave "got
    MXFormat"; the hint names the block cast and comparison to use, and the element format."""
    from minifp8 import mx

    for name, element in (("MXFP4_E2M1", "E2M1"), ("mxfp8_e4m3", "E4M3"), ("MXFP6_E3M2", "E3M2")):
        with pytest.raises(ValueError, match=rf"unknown format '{name}' \({name}, a block format: quantize with "
                                             rf"minifp8\.mx\.quantize and compare with testing\.compare_mx; "
                                             rf"'{element}' names its elements alone\)"):
            formats.get(name)
    with pytest.raises(ValueError, match=r"\(NVFP4, a block format: quantize with minifp8\.mx\.quantize_nvfp4 and "
                                         r"compare with testing\.compare_mx\(\.\.\., 'NVFP4'\); 'E2M1' names"):
        formats.get("NVFP4")
    with pytest.raises(TypeError, match=r"got MXFormat \(MXFP8_E5M2, a block format: .* 'E5M2' names its elements"):
        formats.get(mx.get("MXFP8_E5M2"))
    for name in ("bogus", "MXFP9", "mxfp8_e9m9", 3):
        with pytest.raises((ValueError, TypeError)) as error:
            formats.get(name)
        assert "block format" not in str(error.value)
