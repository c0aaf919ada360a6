"""MX block formats and NVFP4 against independent references.

References, none of them the vectorised code under test:
- the spec rules (OCP MX v1.0 6.3; torchao ScaleCalculationMode; cuBLAS rceil), worked by hand
  from integer exponents, for the must-show exponent tables;
- ``mx.quantize_block_reference``: one block at a time in exact rational arithmetic with the
  codec's scalar reference for element rounding;
- for NVFP4, a model of TransformerEngine's float32 steps in exact rationals, rounded to float32
  by a small function written here (checked against NumPy on random values first).
"""
import math
from fractions import Fraction

import numpy as np
import pytest

from minifp8 import codec, formats, mx, testing

MODES = ("floor", "ceil", "even", "rceil")
ELEMENTS = ("E4M3", "E5M2", "E3M2", "E2M3", "E2M1")
EMAX = {"E4M3": 8, "E5M2": 15, "E3M2": 4, "E2M3": 2, "E2M1": 2}  # DESIGN.md section 4


def block_of(amax, size=32, dtype=np.float32):
    """A block whose largest magnitude is ``amax``: amax, then smaller values of both signs."""
    block = np.full(size, dtype(amax) / 3, dtype=dtype)
    block[0] = amax
    block[1::2] *= -1
    return block


# ================================================================================================
# Must show 1: the shared exponent comes from the exponent bits, in every scale mode.
# ================================================================================================
def test_amax_just_below_2_pow_20_gives_917504_not_a_float_log2_answer():
    amax = np.nextafter(np.float32(2**20), np.float32(0))  # 2**20 - 2**-4
    # The pitfall: a float32 log2 rounds up to exactly 20.
    assert np.floor(np.log2(amax)) == 20
    q = mx.quantize(block_of(amax), "MXFP8_E4M3")
    # The rule: amax < 2**20, so floor(log2(amax)) = 19 and shared_exp = 19 - emax(E4M3) = 19 - 8 = 11.
    assert q.scales[0] == 127 + 11
    # The element amax * 2**-11 = 512 - 2**-15 is above 448 and saturates; 448 * 2**11 = 917504.
    assert q.dequantize()[0] == 448 * 2**11 == 917504
    # What the float log2 would have given: shared_exp 12, element 256 - 2**-16 -> 256, times 2**12.
    assert 256 * 2**12 == 1048576 != q.dequantize()[0]


# Exponents worked from the rules with emax(E4M3) = 8, max 448 = 1.75 * 2**8, 3 mantissa bits:
#   floor: floor(log2 a) - 8          448, 449, 480, 500 lie in [2**8, 2**9): 0; 512 = 2**9: 1
#   ceil:  ceil(log2 a) - 8           every a in (2**8, 2**9] has ceil 9: 1 (448 is not a power of 2)
#   even:  a's significand rounded to 3 fraction bits, ties away; a carry to 2 adds one binade:
#          448 = 1.75 * 2**8 stays; 449 = 1.7539 * 2**8 -> 1.75; 480 = 1.875 * 2**8 stays;
#          500 = 1.953125 * 2**8 -> 2.0 (carry): 1; 512: 1
#   rceil: ceil(log2(a / 448))        448/448 = 1: 0; 449, 480, 500, 512 are in (448, 896]: 1
E4M3_TABLE = {
    448: {"floor": 0, "ceil": 1, "even": 0, "rceil": 0},
    449: {"floor": 0, "ceil": 1, "even": 0, "rceil": 1},
    480: {"floor": 0, "ceil": 1, "even": 0, "rceil": 1},
    500: {"floor": 0, "ceil": 1, "even": 1, "rceil": 1},
    512: {"floor": 1, "ceil": 1, "even": 1, "rceil": 1},
}
# FP4 E2M1: emax 2, max 6 = 1.5 * 2**2, 1 mantissa bit.
#   floor: 6, 7 in [4, 8): 0; 8: 1.   ceil: all in (4, 8]: 1.
#   even: 6 = 1.5 * 4 stays (0); 7 = 1.75 * 4 rounds (tie, away) to 2.0 (1); 8: 1.
#   rceil: 6/6 = 1: 0; 7/6, 8/6 in (1, 2]: 1.
E2M1_TABLE = {
    6: {"floor": 0, "ceil": 1, "even": 0, "rceil": 0},
    7: {"floor": 0, "ceil": 1, "even": 1, "rceil": 1},
    8: {"floor": 1, "ceil": 1, "even": 1, "rceil": 1},
}

# FP8 E5M2: emax 15, max 57344 = 1.75 * 2**15, 2 mantissa bits (57344 / 1024 = 56).
#   floor: 40960, 57344, 60416, 61440 lie in [2**15, 2**16): 0; 65536 = 2**16: 1.   ceil: all but 2**16 round up: 1.
#   even: 2 fraction bits, so the significand carries to 2 from 1.875 up (2 - half an ulp, 2 - 0.125):
#         40960 = 1.25 * 2**15 and 57344 = 1.75 * 2**15 stay (0); 60416 = 1.84375 * 2**15 -> 1.75 (0);
#         61440 = 1.875 * 2**15 is a tie -> away, 2.0 (1); 65536: 1
#   rceil: a / 57344 = 40/56 = 5/7 in (1/2, 1]: 0; 56/56 = 1: 0; 59/56, 60/56, 64/56 in (1, 2]: 1
E5M2_TABLE = {
    40960: {"floor": 0, "ceil": 1, "even": 0, "rceil": 0},
    57344: {"floor": 0, "ceil": 1, "even": 0, "rceil": 0},
    60416: {"floor": 0, "ceil": 1, "even": 0, "rceil": 1},
    61440: {"floor": 0, "ceil": 1, "even": 1, "rceil": 1},
    65536: {"floor": 1, "ceil": 1, "even": 1, "rceil": 1},
}
# FP6 E3M2: emax 4, max 28 = 1.75 * 2**4, 2 mantissa bits: the same significands in the binade [16, 32).
#   floor: 20, 28, 29.5, 30 in [16, 32): 0; 32: 1.   ceil: 1 for all.
#   even (carry from 1.875): 20 = 1.25 * 16, 28 = 1.75 * 16 stay; 29.5 = 1.84375 * 16 -> 1.75; 30 = 1.875 * 16 -> 2 (1).
#   rceil: 20/28 = 5/7: 0; 28/28: 0; 29.5/28 = 59/56, 30/28 = 15/14, 32/28 = 8/7 in (1, 2]: 1
E3M2_TABLE = {
    20: {"floor": 0, "ceil": 1, "even": 0, "rceil": 0},
    28: {"floor": 0, "ceil": 1, "even": 0, "rceil": 0},
    29.5: {"floor": 0, "ceil": 1, "even": 0, "rceil": 1},
    30: {"floor": 0, "ceil": 1, "even": 1, "rceil": 1},
    32: {"floor": 1, "ceil": 1, "even": 1, "rceil": 1},
}
# FP6 E2M3: emax 2, max 7.5 = 1.875 * 2**2 (the largest significand with 3 fraction bits), so rceil
# and even decide at different significands.
#   floor: 7.25, 7.5, 7.625, 7.75 in [4, 8): 0; 8: 1.   ceil: 1 for all.
#   even: 3 fraction bits (ulp 0.125), carry to 2 from 1.9375 up: 7.25 = 1.8125 * 4 is a tie between
#         1.75 and 1.875 -> away, 1.875, no carry (0); 7.5 = 1.875 * 4 stays (0); 7.625 = 1.90625 * 4 -> 1.875
#         (0.03125 from it, 0.09375 from 2) (0); 7.75 = 1.9375 * 4 is a tie between 1.875 and 2 -> 2 (1); 8: 1
#   rceil: 7.25/7.5 = 29/30 in (1/2, 1]: 0; 7.5/7.5 = 1: 0; 7.625/7.5 = 61/60, 7.75/7.5 = 31/30, 8/7.5 = 16/15: 1
E2M3_TABLE = {
    7.25: {"floor": 0, "ceil": 1, "even": 0, "rceil": 0},
    7.5: {"floor": 0, "ceil": 1, "even": 0, "rceil": 0},
    7.625: {"floor": 0, "ceil": 1, "even": 0, "rceil": 1},
    7.75: {"floor": 0, "ceil": 1, "even": 1, "rceil": 1},
    8: {"floor": 1, "ceil": 1, "even": 1, "rceil": 1},
}


@pytest.mark.parametrize("elem, table", [("E4M3", E4M3_TABLE), ("E2M1", E2M1_TABLE), ("E5M2", E5M2_TABLE),
                                         ("E3M2", E3M2_TABLE), ("E2M3", E2M3_TABLE)])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("binade", [0, -60, 40])
def test_scale_mode_exponent_tables(elem, table, mode, binade):
    for amax, expected in table.items():
        x = block_of(np.float32(amax) * np.float32(2.0**binade))
        q = mx.quantize(x, elem, scale_mode=mode)
        assert int(q.scales[0]) - 127 == expected[mode] + binade, (amax, mode)
        # and the element amax lands where the exponent says: amax * 2**-shared, saturated
        element_amax = min(Fraction(amax) / 2 ** expected[mode], Fraction(formats.get(elem).max))
        assert abs(Fraction(float(q.dequantize()[0]))) == round_to_grid(element_amax, elem) * 2 ** (
            expected[mode] + binade)


def round_to_grid(value: Fraction, elem) -> Fraction:
    """Nearest value of the element grid (ties to even code), found by search over the decode table."""
    table = formats.get(elem).values()
    grid = sorted({Fraction(float(v)) for v in table if np.isfinite(v) and v >= 0})
    return min(grid, key=lambda g: (abs(g - value), grid.index(g) % 2))


@pytest.mark.parametrize("mode", MODES)
def test_special_blocks(mode):
    x = np.stack([np.zeros(32, np.float32), block_of(3.0), block_of(3.0), block_of(3.0),
                  np.full(32, 1e-45, np.float32)])
    x[0, 5] = -0.0
    x[1, 7], x[2, 9] = np.nan, -np.inf
    x[3, 0], x[3, 1] = np.nan, np.inf
    q = mx.quantize(x, "E4M3", scale_mode=mode)
    assert q.scales[0, 0] == 0x00  # zero block: scale 2**-127 ...
    assert (q.codes[0] & 0x7F == 0).all() and q.codes[0, 5] == 0x80  # ... and +-0 codes, sign kept
    assert q.scales[1, 0] == 0xFF and q.scales[3, 0] == 0xFF  # NaN -> NaN scale, every mode
    assert np.isnan(q.dequantize()[[1, 3]]).all()
    if mode == "rceil":  # NVIDIA: Inf / max_elem rounds up to the largest scale, 2**127
        assert q.scales[2, 0] == 0xFE and q.codes[2, 9] == 0xFE  # -Inf saturates to -448
    else:  # OCP: Inf -> NaN scale, the whole block NaN
        assert q.scales[2, 0] == 0xFF and np.isnan(q.dequantize()[2]).all()
    assert q.scales[4, 0] == 0x00  # the smallest subnormal: the exponent clamps at -127


def test_shared_exponents_of_special_amaxes():
    amax = np.array([0, 448, np.nan, np.inf, 2.0**-200, 2.0**300])
    codes, shared = mx.shared_exponents(amax, "E4M3", "floor")
    assert codes.tolist() == [0x00, 127, 0xFF, 0xFF, 0x00, 0xFE]
    assert shared.tolist() == [-127, 0, 0, 0, -127, 127]  # 0 where the block is discarded
    codes, shared = mx.shared_exponents(amax, "MXFP8_E4M3", "rceil")
    assert codes.tolist() == [0x00, 127, 0xFF, 0xFE, 0x00, 0xFE] and shared.tolist() == [-127, 0, 0, 127, -127, 127]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shared_exponents_equal_the_exact_rule_at_every_binade(dtype):
    """Every float32 binade (subnormals too; for float64 every 9th binade of its whole range) times
    the significands where the scale modes decide (1, its neighbours, the 'even' and 'rceil'
    thresholds and theirs, the top of the binade), for every element format and scale mode,
    against the exact rule on Fractions, clamped to E8M0."""
    significands = np.array([1.0, 1.5, 1.75, 1.875, 1.9375, 1.96875, 1.984375], dtype)
    significands = np.concatenate([significands, np.nextafter(significands, dtype(0)),
                                   np.nextafter(significands, dtype(2)), [np.nextafter(dtype(2), 0)]])
    info = np.finfo(dtype)
    binades = np.arange(int(np.log2(info.smallest_subnormal)), info.maxexp, 1 if dtype == np.float32 else 9)
    with np.errstate(over="ignore", under="ignore"):
        amax = (significands[None, :] * np.exp2(binades.astype(dtype))[:, None]).reshape(-1)
    amax = np.unique(amax[(amax > 0) & np.isfinite(amax)])
    for elem in ELEMENTS:
        element = formats.get(elem)
        for mode in MODES:
            codes, shared = mx.shared_exponents(amax, elem, mode)
            expected = [min(max(mx._reference_shared_exponent(Fraction(float(a)), element, mode), -127), 127)
                        for a in amax]
            np.testing.assert_array_equal(shared, expected, err_msg=f"{elem} {mode}")
            np.testing.assert_array_equal(codes, np.array(expected) + 127)


def test_shared_exponents_and_block_amax_read_any_byte_order_and_shape():
    amax = np.array([[1.0, 448.0], [3.0, 2.0**-130]], np.float32)
    codes, shared = mx.shared_exponents(amax, "E4M3")
    assert codes.tolist() == [[119, 127], [120, 0]] and shared.shape == (2, 2)
    for dtype in (">f4", ">f8"):  # big-endian bits are read as the values they spell
        np.testing.assert_array_equal(mx.shared_exponents(amax.astype(dtype), "E4M3")[0], codes)
    np.testing.assert_array_equal(mx.shared_exponents(amax[0].astype(np.float16), "E4M3")[0], codes[0])
    zero_d = mx.shared_exponents(np.float32(np.nan), "E4M3")  # 0-d in, 0-d out
    assert zero_d[0].shape == () and zero_d[0] == 0xFF and zero_d[1] == 0
    blocks = np.array([[1.0, -3.0], [-0.5, 0.25]])
    for dtype in (np.float32, ">f4", np.float64, ">f8"):
        result = mx.block_amax(blocks.astype(dtype))
        assert result.tolist() == [3.0, 0.5] and result.dtype.isnative


def test_shared_exponents_of_integer_amaxes_are_exact_up_to_2_pow_53():
    # Integer amaxes are converted exactly (to float64): through float32's 24 bits, 2**25 - 1 would
    # round up to 2**25 (floor one binade too high) and 2**24 + 1 down to 2**24 (ceil one too low).
    # The rules on Python ints: floor(log2 a) = a.bit_length() - 1, ceil(log2 a) = (a - 1).bit_length().
    amax = [2**k + d for k in range(1, 54) for d in (-1, 0, 1) if 2**k + d <= 2**53]
    for dtype in (np.int64, np.uint64):
        codes, shared = mx.shared_exponents(np.array(amax, dtype), "E4M3", "floor")
        assert shared.tolist() == [a.bit_length() - 1 - EMAX["E4M3"] for a in amax]
        assert codes.tolist() == [a.bit_length() - 1 - EMAX["E4M3"] + 127 for a in amax]
        _, shared = mx.shared_exponents(np.array(amax, dtype), "E4M3", "ceil")
        assert shared.tolist() == [(a - 1).bit_length() - EMAX["E4M3"] for a in amax]


def test_exponent_clamps_at_127_for_float64():
    x = block_of(1e300, dtype=np.float64)
    for mode in MODES:
        q = mx.quantize(x, "E4M3", scale_mode=mode)
        assert q.scales[0] == 0xFE  # 2**127; 1e300 * 2**-127 saturates
        assert q.dequantize()[0] == np.float32(np.inf)  # 448 * 2**127 overflows float32
    assert mx.quantize(block_of(1e-300, dtype=np.float64), "E4M3").scales[0] == 0x00



@pytest.mark.parametrize("elem", ELEMENTS)
def test_rceil_is_exact_at_the_one_amax_where_float32_steps_round_down_to_2_pow_minus_127(elem):
    """rceil is ceil(log2(amax / max_elem)) computed exactly (DESIGN.md section 4). TransformerEngine
    rounds ``amax * float32(1 / max_elem)`` to float32 first; for one amax per format that product
    rounds down onto 2**-127 and its scale is 0x00 where ours is 0x01 (module docstring)."""
    max_elem = Fraction(float(formats.get(elem).max))
    # max_elem = s * 2**emax with s in [1, 2) of at most 4 bits, so max_elem * 2**-127 = s * 2**(emax - 127)
    # is a normal float32 (emax - 127 >= -125); the next float32 up adds one ulp, 2**(emax - 127 - 23).
    low = max_elem * Fraction(2) ** -127
    amax = low + Fraction(2) ** (EMAX[elem] - 150)
    a32 = np.nextafter(np.float32(float(low)), np.float32(1))
    assert Fraction(float(np.float32(float(low)))) == low and Fraction(float(a32)) == amax
    # Exactly: amax / max_elem = 2**-127 * (1 + 2**(emax - 23) / max_elem), in (2**-127, 2**-126), so
    # ceil(log2) = -126 and the code is -126 + 127 = 0x01.
    assert Fraction(2) ** -127 < amax / max_elem < Fraction(2) ** -126
    # TransformerEngine's float32 steps: the exact product is 2**-127 * (1 + d), d = the extra ulp's 2**-23 / s
    # plus float32(1 / max_elem)'s rounding error, 0.92 to 0.98 times 2**-23 for these formats: less than half
    # the float32 spacing there (2**-149, subnormal; half is 2**-127 * 2**-23). It rounds down to 2**-127,
    # which cvt.rp maps to 0x00.
    assert f32(amax * f32(1 / max_elem)) == Fraction(2) ** -127
    assert f32(amax / max_elem) == Fraction(2) ** -127  # (a float32 quotient as well)
    codes, shared = mx.shared_exponents(a32, elem, "rceil")
    assert codes == 0x01 and shared == -126
    block = block_of(a32)
    assert mx.quantize(block, elem, scale_mode="rceil").scales[0] == 0x01
    assert mx.quantize_block_reference(block, elem, scale_mode="rceil")[0] == 0x01
    # One float32 below, amax = max_elem * 2**-127: the quotient is 2**-127 exactly, 0x00 either way.
    assert mx.shared_exponents(np.float32(float(low)), elem, "rceil")[0] == 0x00


@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_a_zero_scale_means_2_pow_minus_127_when_scaling_and_when_decoding(mode):
    """OCP MX: E8M0 0x00 is 2**-127 (DESIGN.md section 4), not TransformerEngine's multiplier of 1 in
    the cast (and 0.0 in its dequantize), so a tiny non-zero block keeps its values."""
    amax = 448 * 2.0**-127  # = 1.75 * 2**-119, a normal float32
    # floor: floor(log2 amax) - emax = -119 - 8 = -127; rceil: ceil(log2(amax / 448)) = -127. Code 0x00.
    # amax * 2**127 = 448: code 0x7E; decoded, 448 * 2**-127 = amax again. (TransformerEngine: amax * 1
    # rounds to code 0x00 and decodes to 0.)
    q = mx.quantize(block_of(np.float32(amax)), "E4M3", scale_mode=mode)
    assert q.scales[0] == 0x00 and q.codes[0] == 0x7E
    assert q.dequantize()[0] == np.float32(amax)

# ================================================================================================
# Must show 2: the exact scalar reference equals the vectorised version on random blocks.
# ================================================================================================
def random_blocks(rng, elem, dtype=np.float32):
    """Blocks of every awkward kind, 32 wide, one row each."""
    fmt = formats.get(elem)
    sign = lambda n: rng.choice([-1.0, 1.0], n)  # noqa: E731
    rows = []
    for _ in range(2):
        rows.append(rng.standard_normal(32) * 2.0 ** rng.integers(-30, 30))  # ordinary
        rows.append(sign(32) * 2.0 ** rng.uniform(-149, 127, 32))  # many binades
        rows.append(sign(32) * rng.integers(1, 2**23, 32) * 2.0**-149)  # float32 subnormals
        outlier = sign(32) * 2.0 ** rng.uniform(-100, -60, 32)
        outlier[rng.integers(32)] = 2.0 ** rng.uniform(60, 100)  # one huge outlier
        rows.append(outlier)
        # element midpoints (rounding ties) under a known scale: grid midpoints times 2**k, with
        # the block amax an element value so that floor picks exactly that k
        grid = np.unique(np.abs(fmt.values()[np.isfinite(fmt.values())]))
        midpoints = (grid[:-1] + grid[1:]) / 2
        k = int(rng.integers(-20, 20))
        ties = sign(32) * rng.choice(midpoints, 32) * 2.0**k
        ties[0] = fmt.max * 2.0**k
        rows.append(ties)
        # amaxes at the mode boundaries: powers of two, max_elem * 2**k, the "even" carry point
        k = int(rng.integers(-20, 20))
        carry = 2 - 2.0 ** -(fmt.mantissa_bits + 1)
        for amax in (2.0**k, fmt.max * 2.0**k, carry * 2.0**k, np.nextafter(carry, 0) * 2.0**k,
                     np.nextafter(fmt.max, np.inf) * 2.0**k):
            rows.append(np.concatenate([[amax], sign(31) * rng.uniform(0, amax, 31)]))
    zeros = np.zeros(32)
    zeros[rng.integers(32, size=5)] = -0.0
    rows.append(zeros)
    nan_row = rng.standard_normal(32)
    nan_row[3] = np.nan
    inf_row = rng.standard_normal(32)
    inf_row[8] = -np.inf
    rows += [nan_row, inf_row]
    return np.array(rows).astype(dtype)


def assert_matches_reference(x, elem, mode, rounding="nearest_even", random_bits=None, bit_count=None):
    q = mx.quantize(x, elem, scale_mode=mode, rounding=rounding, random_bits=random_bits,
                    random_bit_count=bit_count)
    for row in range(x.shape[0]):
        bits = None if random_bits is None else [int(b) for b in random_bits[row]]
        scale, codes = mx.quantize_block_reference(x[row], elem, scale_mode=mode, rounding=rounding,
                                                   random_bits=bits, random_bit_count=bit_count)
        assert q.scales[row, 0] == scale, (elem, mode, rounding, row, x[row])
        assert list(q.codes[row]) == codes, (elem, mode, rounding, row, x[row])


@pytest.mark.parametrize("elem", ELEMENTS)
@pytest.mark.parametrize("mode", MODES)
def test_vectorised_equals_reference(elem, mode):
    rng = np.random.default_rng(10 * ELEMENTS.index(elem) + MODES.index(mode))
    assert_matches_reference(random_blocks(rng, elem), elem, mode)


@pytest.mark.parametrize("elem", ELEMENTS)
def test_vectorised_equals_reference_other_roundings_and_dtypes(elem):
    rng = np.random.default_rng(ELEMENTS.index(elem))
    x = random_blocks(rng, elem)
    for rounding in ("nearest_away", "toward_zero"):
        assert_matches_reference(x, elem, "floor", rounding)
    bits = rng.integers(0, 256, x.shape).astype(np.uint8)
    assert_matches_reference(x, elem, "even", "stochastic", bits, 8)
    # float64 is exact (no float32 detour), including values beyond float32's range
    wide = random_blocks(rng, elem, np.float64) * 2.0 ** rng.integers(-400, 400, (1, 32))
    assert_matches_reference(wide, elem, "rceil")
    assert_matches_reference(wide, elem, "floor")
    halves = rng.standard_normal((4, 32)).astype(np.float16)
    assert_matches_reference(halves, elem, "ceil")


def test_stochastic_rounding_rounds_up_with_the_discarded_fraction():
    # E4M3 elements between 1 and 1.125 (quantum 1/8) under scale 2**0: x = 1 + 1/32 is 1/4 of
    # the way up, so with 2-bit random numbers exactly one of the four (3) rounds it up.
    x = np.full((4, 32), 448.0, np.float32)
    x[:, 1] = 1 + 1 / 32
    bits = np.zeros((4, 32), np.uint8)
    bits[:, 1] = [0, 1, 2, 3]
    q = mx.quantize(x, "E4M3", rounding="stochastic", random_bits=bits, random_bit_count=2)
    assert q.dequantize()[:, 1].tolist() == [1, 1, 1, 1.125]


def test_stochastic_random_bit_count_defaults_to_the_width_of_the_bits_dtype():
    # As above, x = 1 + 1/32 discards 1/4 of a quantum. Without random_bit_count the count is the
    # dtype's width: for uint8 the fraction is 64/256, and x rounds up when bits + 64 >= 256, i.e.
    # bits >= 192; for uint16 when bits >= 3 * 2**14 = 49152. The codec has the same default.
    x = np.full((4, 32), 448.0, np.float32)
    x[:, 1] = 1 + 1 / 32
    for dtype, cases in ((np.uint8, [0, 191, 192, 255]), (np.uint16, [0, 49151, 49152, 65535])):
        bits = np.zeros((4, 32), dtype)
        bits[:, 1] = cases
        q = mx.quantize(x, "E4M3", rounding="stochastic", random_bits=bits)
        assert q.dequantize()[:, 1].tolist() == [1, 1, 1.125, 1.125], dtype
        values = codec.quantize(x[:, 1], "E4M3", rounding="stochastic", random_bits=bits[:, 1])
        assert values.tolist() == [1, 1, 1.125, 1.125], dtype


# ================================================================================================
# Must show 3: axes, padding, 0-d and empty inputs, shapes.
# ================================================================================================
def reference_along(x, elem, axis, block_size, mode="floor"):
    """Expected scales and codes from the reference, slicing x along ``axis`` by hand."""
    moved = np.moveaxis(x, axis, -1)
    n_blocks = -(-moved.shape[-1] // block_size)
    scales = np.zeros(moved.shape[:-1] + (n_blocks,), np.uint8)
    codes = np.zeros(moved.shape, np.uint8)
    for index in np.ndindex(moved.shape[:-1]):
        for b in range(n_blocks):
            part = slice(b * block_size, (b + 1) * block_size)
            scales[index + (b,)], block_codes = mx.quantize_block_reference(moved[index][part], elem, scale_mode=mode)
            codes[index + (part,)] = block_codes
    return np.moveaxis(scales, -1, axis), np.moveaxis(codes, -1, axis)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_every_axis_of_a_3d_array(axis):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5, 37, 6)) * 2.0 ** rng.integers(-8, 8, (5, 37, 6))).astype(np.float32)
    q = mx.quantize(x, "E2M1", axis=axis, block_size=4, scale_mode="even")
    scales, codes = reference_along(x, "E2M1", axis, 4, "even")
    expected_scale_shape = list(x.shape)
    expected_scale_shape[axis] = -(-x.shape[axis] // 4)
    assert q.scales.shape == tuple(expected_scale_shape) and q.codes.shape == x.shape
    np.testing.assert_array_equal(q.scales, scales)
    np.testing.assert_array_equal(q.codes, codes)
    assert q.dequantize().shape == x.shape and q.dequantize().dtype == np.float32


@pytest.mark.parametrize("length", [1, 31, 32, 33, 63, 64, 65, 100])
def test_lengths_not_multiple_of_the_block_are_padded_inside(length):
    rng = np.random.default_rng(length)
    x = rng.standard_normal((3, length)).astype(np.float32) * 100
    q = mx.quantize(x, "MXFP8_E5M2")
    scales, codes = reference_along(x, "E5M2", -1, 32)
    np.testing.assert_array_equal(q.scales, scales)
    np.testing.assert_array_equal(q.codes, codes)
    assert q.scales.shape == (3, -(-length // 32)) and q.dequantize().shape == (3, length)


def test_zero_d_input_is_a_clear_error():
    with pytest.raises(ValueError, match="0-d"):
        mx.quantize(np.float32(1.5), "E4M3")
    with pytest.raises(ValueError, match="0-d"):
        mx.quantize_nvfp4(np.float32(1.5))


@pytest.mark.parametrize("shape, axis", [((0,), 0), ((0, 32), -1), ((0, 32), 0), ((3, 0), -1), ((2, 0, 5), 1),
                                         ((2, 0, 5), 2)])
def test_empty_input_gives_empty_results(shape, axis):
    x = np.zeros(shape, np.float32)
    q = mx.quantize(x, "E4M3", axis=axis)
    scale_shape = list(shape)
    scale_shape[axis] = -(-shape[axis] // 32)
    assert q.codes.shape == shape and q.scales.shape == tuple(scale_shape)
    assert q.dequantize().shape == shape
    n = mx.quantize_nvfp4(x, axis=axis)
    assert n.codes.shape == shape and n.dequantize().shape == shape and n.encode_scale == 1


@pytest.mark.parametrize("shape, axis", [((7,), 0), ((4, 96), -1), ((96, 4), 0), ((2, 3, 40), 1), ((1, 1, 1), 2)])
def test_round_trip_keeps_the_shape_and_is_exact_on_representable_values(shape, axis):
    """Values on the element grid of a block whose amax is the element max, times 2**k, come back exactly."""
    rng = np.random.default_rng(3)
    fmt = formats.E4M3
    grid = fmt.values()[: fmt.max_code + 1]
    moved_shape = tuple(np.moveaxis(np.empty(shape), axis, -1).shape)
    moved = rng.choice(grid, moved_shape) * rng.choice([-1, 1], moved_shape)
    moved[..., ::32] = fmt.max  # every block holds the maximum, so floor gives shared_exp = k
    moved *= 2.0 ** rng.integers(-100, 100, moved_shape[:-1] + (1,))
    x = np.moveaxis(moved, -1, axis).astype(np.float32)
    back = mx.quantize(x, "E4M3", axis=axis).dequantize()
    assert back.shape == x.shape and back.dtype == np.float32
    np.testing.assert_array_equal(back, x)


def test_views_dtypes_and_format_spellings_agree():
    rng = np.random.default_rng(11)
    base = rng.standard_normal((64, 96)).astype(np.float32)
    for view in (base[:, ::2], base.T, base[::-1, 3:67], np.asfortranarray(base)):
        a = mx.quantize(view, "E4M3")
        b = mx.quantize(np.ascontiguousarray(view), "E4M3")
        np.testing.assert_array_equal(a.codes, b.codes)
        np.testing.assert_array_equal(a.scales, b.scales)
    q = mx.quantize(base, "E4M3")
    for spelling in (mx.MXFP8_E4M3, "MXFP8_E4M3", "mxfp8_e4m3", formats.E4M3, "float8_e4m3fn"):
        np.testing.assert_array_equal(mx.quantize(base, spelling).codes, q.codes)
    integers = rng.integers(-1000, 1000, (2, 32))
    np.testing.assert_array_equal(mx.quantize(integers, "E2M3").codes,
                                  mx.quantize(integers.astype(np.float64), "E2M3").codes)
    np.testing.assert_array_equal(mx.quantize(base.astype(np.float16), "E3M2").codes,
                                  mx.quantize(base.astype(np.float16).astype(np.float32), "E3M2").codes)
    assert mx.get("MXFP4_E2M1").elem is formats.E2M1 and mx.MXFP6_E2M3.block_size == 32
    assert mx.MXFP8_E5M2.scale is formats.E8M0 and set(mx.FORMATS) == {
        "MXFP8_E4M3", "MXFP8_E5M2", "MXFP6_E3M2", "MXFP6_E2M3", "MXFP4_E2M1"}


def test_large_array_goes_through_several_chunks():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((300, 4000)) * 2.0 ** rng.integers(-30, 30, (300, 1))).astype(np.float32)
    q = mx.quantize(x, "E4M3")  # 1.2M elements: three chunks
    rows = [0, 131, 299]
    scales, codes = reference_along(x[rows, :320], "E4M3", -1, 32)
    np.testing.assert_array_equal(q.scales[rows, :10], scales)
    np.testing.assert_array_equal(q.codes[rows, :320], codes)
    expected = codec.decode(q.codes, "E4M3") * np.repeat(codec.decode(q.scales, "E8M0"), 32, axis=1)[:, :4000]
    np.testing.assert_array_equal(q.dequantize(), expected)


def test_stochastic_rounding_cuts_the_random_bits_into_the_same_chunks_as_the_blocks(monkeypatch):
    # A big array is quantized a chunk of blocks at a time (_CHUNK_ELEMENTS, 2**19 elements): each
    # chunk must round with its own elements' random bits. Chunks of 2 blocks here, so the 7 blocks
    # take 4 chunks, the last one short; each block is held to the exact reference with its own bits.
    monkeypatch.setattr(mx, "_CHUNK_ELEMENTS", 64)
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((7, 32)) * 2.0 ** rng.integers(-8, 8, (7, 1))).astype(np.float32)
    bits = rng.integers(0, 256, x.shape).astype(np.uint8)
    assert_matches_reference(x, "E4M3", "floor", "stochastic", bits, 8)


def test_packed_fp4_low_nibble_first():
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32) * 4
    q = mx.quantize(x, "MXFP4_E2M1")
    packed = q.packed()
    assert packed.shape == (3, 3) and packed.dtype == np.uint8
    for r in range(3):
        for c in range(5):
            nibble = packed[r, c // 2] >> 4 if c % 2 else packed[r, c // 2] & 0xF
            assert nibble == q.codes[r, c]
        assert packed[r, 2] >> 4 == 0  # odd length: zero high nibble
    np.testing.assert_array_equal(mx.quantize(x, "E4M3").packed(), mx.quantize(x, "E4M3").codes)
    with pytest.raises(ValueError, match="4-bit and 8-bit"):
        mx.quantize(x, "E3M2").packed()



def test_packed_refuses_codes_wider_than_a_nibble():
    # found by a review: a code 0x1F was ORed into its neighbour's nibble (bytes 0xFF), where
    # dequantize() refuses it
    q = mx.quantize(np.ones((2, 4), np.float32), "E2M1")
    codes = q.codes.copy()
    codes[1, 2] = 0x1F
    for array in (mx.MXArray(q.scales, codes, formats.E2M1, 32, -1, q.shape),
                  mx.NVFP4Array(q.scales, codes, np.float32(1), np.float32(2688), -1, q.shape, 16)):
        with pytest.raises(ValueError, match=r"E2M1 codes lie in \[0, 16\), got 31 at index \(1, 2\)"):
            array.packed()

def test_scale_values_agree_with_ml_dtypes_e8m0():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32) * 2.0 ** np.arange(-60, 68, 16)[:, None]
    q = mx.quantize(x, "E4M3")
    scales = q.scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    np.testing.assert_array_equal(q.dequantize(), codec.decode(q.codes, "E4M3") * np.repeat(scales, 32, axis=1))


# ================================================================================================
# Must show 4: NVFP4 follows TransformerEngine's float32 order of operations.
# ================================================================================================
def f32(value: Fraction) -> Fraction:
    """Round a rational to the nearest float32, ties to even (normal and subnormal range)."""
    if value == 0:
        return Fraction(0)
    magnitude = abs(value)
    e = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** e > magnitude:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    n, rest = divmod(magnitude, quantum)
    n += rest > quantum / 2 or (rest == quantum / 2 and n % 2 == 1)
    return (n * quantum) if value > 0 else -(n * quantum)


FLT_MAX = Fraction(float(np.finfo(np.float32).max))


def e2m1(value: Fraction) -> int:
    return codec.encode_scalar(max(min(value, Fraction(6)), Fraction(-6)), "E2M1")


def te_model(block, global_amax, *, fold_one_sixth=True, round_product=True):
    """TransformerEngine's steps for one 16-block, each float32 operation rounded by ``f32``."""
    amax = Fraction(float(np.float32(global_amax)))
    s_enc = Fraction(1) if amax == 0 else min(f32(Fraction(2688) / amax), FLT_MAX)
    s_dec = f32(1 / s_enc)
    if fold_one_sixth:  # TE: S_enc * float32(1/6)
        multiplier = f32(s_enc * f32(Fraction(1, 6)))
    else:  # DESIGN.md's shorthand S_enc / 6
        multiplier = f32(s_enc / 6)
    block_amax = max(abs(Fraction(float(v))) for v in block)
    scale_code = codec.encode_scalar(min(f32(block_amax * multiplier), FLT_MAX), "E4M3", saturate=True)
    scale = Fraction(float(formats.E4M3.values()[scale_code]))
    encode = FLT_MAX if scale == 0 else min(f32(1 / f32(scale * s_dec)), FLT_MAX)
    product = f32 if round_product else (lambda v: v)
    return scale_code, [e2m1(product(Fraction(float(v)) * encode)) for v in block], encode


def test_float32_rounding_model_is_right():
    rng = np.random.default_rng(0)
    values = rng.standard_normal(2000) * 10.0 ** rng.integers(-44, 38, 2000)
    for v in values:
        assert f32(Fraction(float(v))) == Fraction(float(np.float32(v)))


def test_nvfp4_hand_example_global_amax_6():
    # S_enc = 2688 / 6 = 448 exactly. float32(1/6) = 11184811 * 2**-26, so S_enc * float32(1/6) =
    # 9786709.625 * 2**-17 rounds to 9786710 * 2**-17 (74.666672). Times the block amax 6 that is
    # 14680065 * 2**-15 = 448.00003 (exact in float32), which E4M3 rounds to 448 (code 0x7E); with
    # S_enc / 6 = 74.666664 instead it would be 447.99998, the same E4M3 448 here.
    # S_dec = float32(1/448) = 9586981 * 2**-32 and
    # 448 * S_dec = 1 + 192 * 2**-32 rounds to 1, so the element scale is exactly 1: the codes are
    # plain E2M1 round-to-nearest-even of x (ties 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2,
    # 2.5 -> 2, 3.5 -> 4, 5 -> 4).
    x = np.array([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -5, -2.5, 0.1, -0.0, 3, 4, 1, 0.5], np.float32)
    n = mx.quantize_nvfp4(x, global_amax=6)
    assert n.encode_scale == 448 and n.scales.tolist() == [0x7E]
    assert n.codes.tolist() == [0x7, 0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6, 0xE, 0xC, 0x0, 0x8, 0x5, 0x6, 0x2, 0x1]
    # Dequantization (TE's kernel): e2m1 * ((448 * 6) * float32(1/2688)); 2688 * float32(1/2688) = 1.
    np.testing.assert_array_equal(n.dequantize(), [6, 0, 1, 1, 2, 2, 4, 4, -4, -2, 0, -0.0, 3, 4, 1, 0.5])


def test_nvfp4_hand_example_block_scale_and_element_scale():
    # Same tensor scale, a second block with amax 3: 3 * 9786710 * 2**-17 = 224.00002 (exact), E4M3
    # 224 = 1.75 * 2**7 (code 0x76); 224 * S_dec = 1/2 + 96 * 2**-32 rounds to 1/2 (ulp 2**-24),
    # so the element scale is 2: x = 1.25 -> 2.5 -> 2 (code 4), x = 0.3 -> 0.6 -> 0.5 (code 1).
    x = np.zeros(32, np.float32)
    x[0] = 6
    x[16], x[17], x[18] = 3, 1.25, 0.3
    n = mx.quantize_nvfp4(x)
    assert n.global_amax == 6 and n.scales.tolist() == [0x7E, 0x76]
    assert n.codes[16:19].tolist() == [0x7, 0x4, 0x1]


def test_nvfp4_float32_product_changes_a_code():
    """Find x where float32(x * encode) and the exact product round to different E2M1 codes."""
    global_amax = np.float32(54.23361)
    block = np.full(16, np.float32(1.0))
    block[0] = global_amax
    _, _, encode = te_model(block, global_amax)
    assert encode.numerator & (encode.numerator - 1)  # not a power of two: the product rounds
    case = None
    for boundary in (Fraction(1, 4), Fraction(3, 4), Fraction(5, 4), Fraction(7, 4), Fraction(5, 2), Fraction(7, 2), 5):
        x = np.float32(float(boundary / encode))
        for _ in range(8):
            exact, rounded = e2m1(Fraction(float(x)) * encode), e2m1(f32(Fraction(float(x)) * encode))
            if exact != rounded:
                case = (x, rounded, exact)
                break
            x = np.nextafter(x, np.float32(np.inf))
        if case:
            break
    assert case is not None, "no candidate found"
    x, rounded, exact = case
    block[5] = x
    n = mx.quantize_nvfp4(block, global_amax=global_amax)
    assert n.codes[5] == rounded != exact


def test_nvfp4_block_scale_folds_one_sixth_into_the_multiplier():
    """TE computes block_amax * (S_enc * float32(1/6)), which is not always block_amax * (S_enc / 6)."""
    vals = formats.E4M3.values()
    midpoints = [(Fraction(float(a)) + Fraction(float(b))) / 2 for a, b in zip(vals[1:126], vals[2:127])]
    case = None
    for global_amax in np.linspace(1, 1000, 301, dtype=np.float32):
        s_enc = f32(Fraction(2688) / Fraction(float(global_amax)))
        folded, divided = f32(s_enc * f32(Fraction(1, 6))), f32(s_enc / 6)
        if folded == divided:
            continue
        for mid in midpoints[::5]:
            candidate = np.float32(float(mid / folded))
            if candidate > global_amax:
                continue
            block = np.zeros(16, np.float32)
            block[0] = candidate
            if te_model(block, global_amax)[0] != te_model(block, global_amax, fold_one_sixth=False)[0]:
                case = (global_amax, block)
                break
        if case:
            break
    assert case is not None, "no candidate found"
    global_amax, block = case
    folded_code, codes, _ = te_model(block, global_amax)
    n = mx.quantize_nvfp4(block, global_amax=global_amax)
    assert n.scales[0] == folded_code != te_model(block, global_amax, fold_one_sixth=False)[0]
    assert n.codes.tolist() == codes


def test_nvfp4_element_scale_is_the_reciprocal_of_the_decode_product():
    """TE's float32 path: encode = 1 / (S_dec_b * S_dec), which is not always S_enc / S_dec_b."""
    case = None
    for global_amax in np.linspace(1, 300, 150, dtype=np.float32):
        s_enc = f32(Fraction(2688) / Fraction(float(global_amax)))
        s_dec = f32(1 / s_enc)
        for scale_code in range(0x30, 0x7F, 3):
            scale = Fraction(float(formats.E4M3.values()[scale_code]))
            reciprocal, quotient = f32(1 / f32(scale * s_dec)), f32(s_enc / scale)
            if reciprocal == quotient:
                continue
            x = np.float32(float(Fraction(5, 2) / reciprocal))  # near the 2.5 tie of E2M1
            for _ in range(4):
                if e2m1(f32(Fraction(float(x)) * reciprocal)) != e2m1(f32(Fraction(float(x)) * quotient)):
                    case = (global_amax, scale_code, x, e2m1(f32(Fraction(float(x)) * reciprocal)))
                    break
                x = np.nextafter(x, np.float32(np.inf))
            if case:
                break
        if case:
            break
    assert case is not None, "no candidate found"
    global_amax, scale_code, x, expected = case
    # a block whose amax makes exactly this block scale: the largest float32 the model maps to it
    block = np.zeros(16, np.float32)
    block[1] = x
    multiplier = f32(f32(Fraction(2688) / Fraction(float(global_amax))) * f32(Fraction(1, 6)))
    block[0] = np.float32(float(Fraction(float(formats.E4M3.values()[scale_code])) / multiplier))
    assert te_model(block, global_amax)[0] == scale_code and block[0] >= x
    n = mx.quantize_nvfp4(block, global_amax=global_amax)
    assert n.scales[0] == scale_code and n.codes[1] == expected


def test_nvfp4_matches_the_model_on_random_blocks_and_every_axis():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((3, 40, 4)) * 2.0 ** rng.integers(-12, 12, (3, 1, 4))).astype(np.float32)
    for axis in (0, 1, 2):
        n = mx.quantize_nvfp4(x, axis=axis)
        moved_codes, moved_scales = np.moveaxis(n.codes, axis, -1), np.moveaxis(n.scales, axis, -1)
        moved = np.moveaxis(x, axis, -1)
        global_amax = np.abs(x).max()
        assert n.global_amax == global_amax
        for index in np.ndindex(moved.shape[:-1]):
            for b in range(moved_scales.shape[-1]):
                block = moved[index][16 * b:16 * b + 16]
                code, codes, _ = te_model(block, global_amax)
                assert moved_scales[index + (b,)] == code
                assert moved_codes[index][16 * b:16 * b + 16].tolist() == codes
        assert n.dequantize().shape == x.shape


def test_nvfp4_dequantize_order_and_error():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 48)).astype(np.float32)
    n = mx.quantize_nvfp4(x)
    scales = np.repeat(codec.decode(n.scales, "E4M3"), 16, axis=1)
    factor = (scales * np.abs(x).max()) * np.float32(1 / 2688)
    np.testing.assert_array_equal(n.dequantize(), codec.decode(n.codes, "E2M1") * factor)
    # errors stay within the top E2M1 half-step (1 of 6) of the block scale, which is block amax / 6
    # up to the E4M3 rounding of the block scale (2**-4)
    block_amax = np.repeat(np.abs(x.reshape(8, 3, 16)).max(-1), 16, axis=1)
    assert (np.abs(n.dequantize() - x) <= block_amax / 6 * (1 + 2**-4)).all()
    assert mx.quantize_nvfp4(np.zeros((2, 16))).dequantize().tolist() == np.zeros((2, 16)).tolist()
    packed = n.packed()
    assert packed.shape == (8, 24) and (packed & 0xF == n.codes[:, 0::2]).all()


def test_nvfp4_dequantize_stays_finite_when_block_scale_times_amax_overflows():
    # global_amax > FLT_MAX / 448: TransformerEngine's first product, S_dec_b * global_amax, overflows
    # float32. The values follow its steps with an unbounded exponent (f32 rounds without overflow).
    x = np.array([1e36, 0, 5e35, -2.5e35, 7e35, -1e36] + [0] * 10 + [3e38, 1e38] + [0] * 14, np.float32)
    n = mx.quantize_nvfp4(x)
    values = n.dequantize()
    assert np.isfinite(values).all()
    amax = Fraction(float(n.global_amax))
    one_over_2688 = Fraction(float(np.float32(1 / 2688)))
    block_scales = codec.decode(n.scales, "E4M3")
    for i, code in enumerate(n.codes):
        factor = f32(f32(Fraction(float(block_scales[i // 16])) * amax) * one_over_2688)
        assert Fraction(float(values[i])) == f32(Fraction(float(formats.E2M1.values()[code])) * factor), i
    block_amax = np.repeat(np.abs(x.reshape(2, 16)).max(-1), 16)  # the error bound of the test above
    assert (np.abs(values.astype(np.float64) - x) <= block_amax / 6 * (1 + 2**-4)).all()


def test_nvfp4_global_amax_below_the_data_saturates():
    x = np.linspace(-10, 10, 32, dtype=np.float32)
    n = mx.quantize_nvfp4(x, global_amax=1)
    assert (n.scales == 0x7E).all()  # block scale saturates at E4M3 448
    # the ends clip to +-6 and come back as +-6 * 448 * 1 / 2688 = +-1 (to float32 rounding)
    np.testing.assert_allclose(n.dequantize()[[0, -1]], [-1, 1], rtol=2**-22)


def test_nvfp4_tiny_global_amax_clamps_the_encode_scale_to_flt_max():
    # 2688 / 1e-38 = 2.7e41 overflows float32, so step 2 clamps S_enc to FLT_MAX (without the clamp
    # S_enc = Inf, S_dec = 0, and every block scale would saturate to 448, code 0x7E).
    # Block 0, amax float32(1e-38): 1e-38 * FLT_MAX / 6 = 0.5671 lies between the E4M3 values 9/16
    # and 10/16, nearer 9/16 = 1.125 * 2**-1: code 0x31 (exponent field 6, mantissa 1).
    # Block 1, amax float32(2e-39) (a subnormal): 2e-39 * FLT_MAX / 6 = 0.11343 = 14.52 / 128, nearer
    # 15/128 = 1.875 * 2**-4: code 0x1F (exponent field 3, mantissa 7).
    x = np.zeros(32, np.float32)
    x[:4] = [1e-38, 5e-39, -2.5e-39, 7e-39]
    x[16:18] = [2e-39, -1e-39]
    n = mx.quantize_nvfp4(x)
    assert n.encode_scale == np.finfo(np.float32).max and n.scales.tolist() == [0x31, 0x1F]
    for b in (0, 1):
        code, codes, _ = te_model(x[16 * b:16 * b + 16], n.global_amax)
        assert n.scales[b] == code and n.codes[16 * b:16 * b + 16].tolist() == codes


# ================================================================================================
# Must show 7: bad inputs raise clear errors.
# ================================================================================================
@pytest.mark.parametrize("block_size, error", [(3, ValueError), (0, ValueError), (-32, ValueError), (48, ValueError),
                                               (32.0, TypeError), (True, TypeError), ("32", TypeError)])
def test_bad_block_size(block_size, error):
    with pytest.raises(error, match="block_size"):
        mx.quantize(np.ones(64, np.float32), "E4M3", block_size=block_size)


@pytest.mark.parametrize("call, error, match", [
    (lambda x: mx.quantize(x, "E4M3", axis=2), ValueError, "out of range"),
    (lambda x: mx.quantize(x, "E4M3", axis=-3), ValueError, "out of range"),
    (lambda x: mx.quantize(x, "E4M3", axis=1.0), TypeError, "axis"),
    (lambda x: mx.quantize_nvfp4(x, axis=5), ValueError, "out of range"),
    (lambda x: mx.quantize(x, "E4M3", scale_mode="nearest"), ValueError, "scale_mode"),
    (lambda x: mx.quantize(x, "E4M3", rounding="up"), ValueError, "rounding"),
    (lambda x: mx.quantize(x, "E8M0"), ValueError, "MX elements"),
    (lambda x: mx.quantize(x, "E4M3FNUZ"), ValueError, "MX elements"),
    (lambda x: mx.quantize(x, "fp12"), ValueError, "unknown format"),
    (lambda x: mx.quantize(x, "MXFP5"), ValueError, "unknown MX format"),
    (lambda x: mx.quantize(x, 3), TypeError, "format"),
    # (they said "format must be a FloatFormat or a name (str)", naming neither elem nor MXFormat)
    (lambda x: mx.quantize(x, None), TypeError,
     r"elem must be an MXFormat, a FloatFormat or a format name \(str\), got NoneType None"),
    (lambda x: mx.quantize(x, mx.MXFormat), TypeError, "elem must be an MXFormat.*got type"),
    (lambda x: mx.shared_exponents(np.ones(3), None), TypeError, "elem must be an MXFormat.*got NoneType"),
    (lambda x: mx.quantize(x.astype(bool), "E4M3"), TypeError, "bool"),
    (lambda x: mx.quantize(x.astype(complex), "E4M3"), TypeError, "complex"),
    (lambda x: mx.quantize(np.full((2, 3), 2**60), "E4M3"), ValueError, "2\\*\\*53"),
    (lambda x: mx.quantize(x, "E4M3", random_bits=np.zeros(x.shape, np.uint8)), ValueError, "stochastic"),
    (lambda x: mx.quantize(x[:, :0], "E4M3", random_bit_count=4), ValueError, "random_bit_count is only used"),
    (lambda x: mx.quantize(x, "E4M3", rounding="stochastic"), ValueError, "random_bits"),
    (lambda x: mx.quantize(x, "E4M3", rounding="stochastic", random_bits=np.zeros(3, np.uint8)), ValueError,
     "shape"),
    (lambda x: mx.quantize(x, "E4M3", rounding="stochastic", random_bits=np.zeros(x.shape)), TypeError,
     "random_bits must be a NumPy uint8, uint16, uint32 or uint64 array, got dtype float64"),
    (lambda x: mx.shared_exponents(np.ones(3), "E4M3", "round"), ValueError, "scale_mode"),
    (lambda x: mx.shared_exponents(np.array([1 + 1j]), "E4M3"), TypeError, "amax must hold real numbers"),
    (lambda x: mx.shared_exponents(["3"], "E4M3"), TypeError, "amax must hold .* got dtype <U1"),
    (lambda x: mx.shared_exponents([True], "E4M3"), TypeError, "amax .* bool"),
    (lambda x: mx.block_amax(x.astype(np.float16)), TypeError,
     "blocks must be a float32 or float64 array, got dtype float16"),
    (lambda x: mx.block_amax(x.astype(np.int32)), TypeError, "got dtype int32"),
    (lambda x: mx.block_amax(x[0]), ValueError, r"blocks must be a 2-d .* got shape \(40,\)"),
    (lambda x: mx.block_amax(x[:, :0]), ValueError, r"got shape \(2, 0\)"),
    (lambda x: mx.quantize_block_reference([1.0], "E4M3", scale_mode="up"), ValueError, "scale_mode"),
    # zip dropped the elements without bits (one code for three elements), or the extra bits
    (lambda x: mx.quantize_block_reference([1.25, 2.5, 3.5], "E2M1", rounding="stochastic", random_bits=[0],
                                           random_bit_count=8), ValueError, "3 elements, got 1 bits"),
    (lambda x: mx.quantize_block_reference([1.25], "E2M1", rounding="stochastic", random_bits=[0, 1, 2],
                                           random_bit_count=8), ValueError, "1 elements, got 3 bits"),
    (lambda x: mx.get(3), TypeError, "MX format"),
])
def test_bad_arguments(call, error, match):
    x = np.ones((2, 40), np.float32)
    with pytest.raises(error, match=match):
        call(x)


def spread_rows():
    """Rows of very different magnitudes, so that scales put back in the wrong place decode far off."""
    return np.ones((4, 64), np.float32) * np.array([1, 100, 1e4, 1e-3], np.float32)[:, None]


@pytest.mark.parametrize("fields, error, match", [
    # the review's case: transposed scales of the right size decoded to [1, 12288, 1.25, 8192]
    (lambda q: dict(scales=q.scales.T.copy()), ValueError,
     r"scales has shape \(2, 4\), expected \(4, 2\) for codes of shape \(4, 64\) with blocks of 32 along axis 1"),
    (lambda q: dict(scales=q.scales[:1, :1].copy()), ValueError, r"scales has shape \(1, 1\), expected \(4, 2\)"),
    (lambda q: dict(scales=np.zeros((3, 2), np.uint8)), ValueError, r"scales has shape \(3, 2\)"),
    (lambda q: dict(block_size=16), ValueError, r"expected \(4, 4\) .* blocks of 16"),
    (lambda q: dict(scales=q.scales.astype(np.int32)), TypeError, "scales must be a numpy array of uint8, got .*int32"),
    (lambda q: dict(scales=q.scales.tolist()), TypeError, "scales must be a numpy array of uint8, got list"),
    (lambda q: dict(codes=q.codes.astype(np.float32)), TypeError, "codes must be a numpy array of uint8, .*float32"),
    (lambda q: dict(codes=np.uint8(3)), TypeError, "codes must be a numpy array of uint8, got uint8"),
    (lambda q: dict(codes=np.zeros((), np.uint8), shape=()), ValueError, "0-d"),
    (lambda q: dict(elem="E4M3"), TypeError, "elem must be a FloatFormat .*got str 'E4M3'"),
    (lambda q: dict(elem=formats.E4M3FNUZ), ValueError, "MX elements must be one of .* got E4M3FNUZ"),
    (lambda q: dict(elem=formats.E8M0), ValueError, "MX elements"),
    (lambda q: dict(block_size=20), ValueError, "block_size must be a power of two"),
    (lambda q: dict(block_size=32.0), TypeError, "block_size must be an int"),
    (lambda q: dict(axis=5), ValueError, "axis 5 is out of range"),
    (lambda q: dict(axis=-3), ValueError, "axis -3 is out of range"),
    (lambda q: dict(axis=1.0), TypeError, "axis must be an int"),
    (lambda q: dict(shape=(4, 32)), ValueError, r"shape \(4, 32\) does not match codes, whose shape is \(4, 64\)"),
    (lambda q: dict(shape=(64, 4)), ValueError, "does not match codes"),
    (lambda q: dict(shape="4, 64"), TypeError, "shape must be a tuple of ints, got str"),
    (lambda q: dict(shape=(4.0, 64)), TypeError, "shape must be a tuple of ints"),
])
def test_mx_array_checks_its_fields(fields, error, match):
    q = mx.quantize(spread_rows(), "E4M3")
    given = dict(scales=q.scales, codes=q.codes, elem=q.elem, block_size=32, axis=1, shape=q.shape)
    with pytest.raises(error, match=match):
        mx.MXArray(**{**given, **fields(q)})



@pytest.mark.parametrize("args, error, match", [
    # found by a review: these were accepted, and MXFormat("X", "E4M3") failed at its first use with
    # AttributeError: 'str' object has no attribute 'name'
    (("X", "E4M3"), TypeError, "elem must be a FloatFormat .* got str 'E4M3'"),
    (("X", formats.E8M0), ValueError, "MX elements must be one of E4M3, E5M2, E3M2, E2M3, E2M1 .* got E8M0"),
    (("X", formats.E4M3FNUZ), ValueError, "MX elements .* got E4M3FNUZ"),
    (("X", formats.E4M3, 7), ValueError, "block_size must be a power of two .* got 7"),
    (("X", formats.E4M3, 0), ValueError, "block_size must be a power of two .* got 0"),
    (("X", formats.E4M3, 32.0), TypeError, "block_size must be an int, got float 32.0"),
    (("X", formats.E4M3, True), TypeError, "block_size must be an int, got bool"),
    ((3, formats.E4M3), TypeError, "name must be a str, got int 3"),
])
def test_mx_format_checks_its_fields(args, error, match):
    with pytest.raises(error, match=match):
        mx.MXFormat(*args)


def test_every_catalogued_mx_format_passes_its_own_checks():
    for name, mx_format in mx.FORMATS.items():
        assert mx.MXFormat(name, mx_format.elem, mx_format.block_size) == mx_format
    small = mx.MXFormat("MXFP4_16", formats.E2M1, np.int64(16))
    assert type(small.block_size) is int and small == mx.MXFormat("MXFP4_16", formats.E2M1, 16)
    assert mx.quantize(np.ones(48, np.float32), small).scales.shape == (3,)


def test_mx_array_fields_that_pass_are_stored_normalised():
    x = spread_rows()
    q = mx.quantize(x, "E4M3")
    assert q.axis == 1 and q.shape == (4, 64) and type(q.block_size) is int
    again = mx.MXArray(q.scales, q.codes, formats.E4M3, np.int64(32), -1, [4, 64])
    assert again.axis == 1 and again.shape == (4, 64) and type(again.block_size) is int
    np.testing.assert_array_equal(again.dequantize(), q.dequantize())
    assert again.dequantize()[:, 0].tolist() == [1, 96, 10240, 2**-10]  # each row's own scale
    columns = mx.quantize(x.T, "MXFP4_E2M1", axis=0)  # scales (2, 4) along axis 0
    assert columns.scales.shape == (2, 4) and columns.packed().shape == (64, 2)
    n = mx.quantize_nvfp4(np.ones((3, 5), np.float32), axis=0)  # packed() builds an MXArray of n's fields
    assert n.scales.shape == (1, 5) and n.packed().tolist() == [[0x77, 0x77, 0x07]] * 3  # E2M1 6 is code 7


@pytest.mark.parametrize("fields, error, match", [
    (lambda n: dict(scales=n.scales.T.copy()), ValueError,
     r"scales has shape \(8, 4\), expected \(4, 8\) for codes of shape \(4, 128\) with blocks of 16 along axis 1"),
    (lambda n: dict(scales=n.scales[:, :1].copy()), ValueError, r"scales has shape \(4, 1\)"),
    (lambda n: dict(codes=n.codes.astype(np.int8)), TypeError, "codes must be a numpy array of uint8"),
    (lambda n: dict(global_amax="abc"), TypeError, "global_amax must be a real number .* got str 'abc'"),
    (lambda n: dict(global_amax=-1.0), ValueError, "global_amax must be a finite number >= 0"),
    (lambda n: dict(global_amax=np.float32(np.nan)), ValueError, "global_amax must be a finite number"),
    (lambda n: dict(encode_scale=0.0), ValueError, "encode_scale must be a finite number > 0, got 0.0"),
    (lambda n: dict(encode_scale=np.float32(np.inf)), ValueError, "encode_scale must be a finite number > 0"),
    (lambda n: dict(encode_scale=1e39), ValueError, "encode_scale=1e\\+39 overflows float32"),
    (lambda n: dict(encode_scale=None), TypeError, "encode_scale must be a real number"),
    (lambda n: dict(block_size=32, scales=n.scales[:, :4].copy()), ValueError,
     "block_size must be 16 for NVFP4, got 32"),
    (lambda n: dict(block_size=16.0), TypeError, "block_size must be an int"),
    (lambda n: dict(axis=5), ValueError, "axis 5 is out of range"),
    (lambda n: dict(shape=(4, 64)), ValueError, "does not match codes"),
])
def test_nvfp4_array_checks_its_fields(fields, error, match):
    n = mx.quantize_nvfp4(np.tile(spread_rows(), 2))
    given = dict(scales=n.scales, codes=n.codes, global_amax=n.global_amax, encode_scale=n.encode_scale, axis=1,
                 shape=n.shape)
    with pytest.raises(error, match=match):
        mx.NVFP4Array(**{**given, **fields(n)})
    again = mx.NVFP4Array(**{**given, "global_amax": 10000, "axis": -1, "shape": list(n.shape)})
    assert again.global_amax == np.float32(10000) and again.global_amax.dtype == np.float32 and again.axis == 1
    np.testing.assert_array_equal(again.dequantize(), n.dequantize())


@pytest.mark.parametrize("values, row_length, error, match", [
    (np.arange(10), 4, ValueError, "values has 10 elements, which is not a multiple of row_length 4"),
    (np.arange(10), 0, ValueError, "row_length must be >= 1, got 0"),
    (np.arange(10), -2, ValueError, "row_length must be >= 1"),
    (np.arange(10), 2.0, TypeError, "row_length must be an int, got float"),
    (np.arange(10), True, TypeError, "row_length must be an int, got bool"),
    (np.arange(10).reshape(2, 5), 5, ValueError, r"values must be a 1-d numpy array, got shape \(2, 5\)"),
    (list(range(10)), 5, TypeError, "values must be a 1-d numpy array, got list"),
])
def test_row_max_bad_arguments(values, row_length, error, match):
    with pytest.raises(error, match=match):
        mx.row_max(values, row_length)


def test_row_max_rows_of_every_kind():
    values = np.random.default_rng(6).integers(0, 1000, 96)
    for row_length in (1, 2, 3, 4, 8, 12, 32, 48, 96, np.int64(16)):
        np.testing.assert_array_equal(mx.row_max(values, row_length), values.reshape(-1, row_length).max(1))
    assert mx.row_max(np.zeros(0, np.uint32), 4).shape == (0,)


@pytest.mark.parametrize("block, error, match", [
    (1.0, TypeError, "block must be a 1-d sequence or array of numbers, got float 1.0"),
    (np.array(1.0), ValueError, r"block must be a 1-d .* got a 0-d array of shape \(\)"),
    (np.ones((2, 16)), ValueError, r"got a 2-d array of shape \(2, 16\)"),
    ("1.5", TypeError, "block must be a 1-d sequence .* got str"),
    ({1.0, 2.0}, TypeError, "got set"),
    ([[1.0, 2.0]], TypeError, "block values must be floats, ints or Fractions, got list"),
])
def test_quantize_block_reference_bad_blocks(block, error, match):
    with pytest.raises(error, match=match):
        mx.quantize_block_reference(block, "E4M3")


def test_quantize_block_reference_blocks_it_takes():
    expected = mx.quantize_block_reference([1.0, -3.0, 0.5], "E4M3")
    assert mx.quantize_block_reference((1.0, -3, Fraction(1, 2)), "E4M3") == expected
    assert mx.quantize_block_reference(np.array([1.0, -3.0, 0.5], np.float32), "E4M3") == expected
    # an empty block is all zeros (vacuously): scale 0x00, no codes; quantize never makes one
    assert mx.quantize_block_reference([], "E4M3") == mx.quantize_block_reference(np.zeros(0), "E4M3") == (0, [])


@pytest.mark.parametrize("global_amax, error, match", [
    (2**200, ValueError, "overflows float32"),   # integer overflow of the float32 amax
    (np.int64(10**18), None, None),  # fine: integers that fit float32
    (10**38, None, None),
    (1e39, ValueError, "overflows float32"),
    (-1.0, ValueError, ">= 0"),
    (float("nan"), ValueError, "finite"),
    (float("inf"), ValueError, "finite"),
    (True, TypeError, "real number"),
    ("6", TypeError, "real number"),
    (np.array([6.0]), TypeError, r"got an array of shape \(1,\): pass one number \(x.item\(\) for a 1-element array\)"),
    (np.array(True), TypeError, "real number .* got bool"),
    (np.array(np.nan, np.float32), ValueError, "finite"),
    # found in a review: a 0-d array, as golden.load and torch's .numpy() give it, was refused
    (np.array(6.0), None, None),
    (np.array(6, np.int16), None, None),
])
def test_bad_global_amax(global_amax, error, match):
    x = np.ones(16, np.float32)
    if error is None:
        q = mx.quantize_nvfp4(x, global_amax=global_amax)
        assert q.global_amax == np.float32(global_amax) and type(q.global_amax) is np.float32
        assert testing.compare_mx(q.scales, q.codes, x, "NVFP4", global_amax=global_amax).ok
        return
    with pytest.raises(error, match=match):
        mx.quantize_nvfp4(x, global_amax=global_amax)


def test_a_global_amax_of_minus_zero_is_zero():
    """An amax is a magnitude: -0.0 gave a global_amax of -0.0, and every dequantized value the wrong
    sign. It now quantizes and dequantizes as +0.0 does, given or in an NVFP4Array built by hand."""
    x = np.array([1.0, -2.0, 3.0, 0.0] * 4, np.float32)
    minus, plus = mx.quantize_nvfp4(x, global_amax=-0.0), mx.quantize_nvfp4(x, global_amax=0.0)
    assert np.signbit(minus.global_amax) == np.signbit(plus.global_amax) == False  # noqa: E712
    np.testing.assert_array_equal(np.signbit(minus.dequantize()), np.signbit(plus.dequantize()))
    np.testing.assert_array_equal(minus.dequantize(), plus.dequantize())
    rebuilt = mx.NVFP4Array(codes=plus.codes, scales=plus.scales, global_amax=-0.0, encode_scale=plus.encode_scale,
                            axis=plus.axis, shape=plus.shape)
    assert not np.signbit(rebuilt.global_amax)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nvfp4_rejects_non_finite_input(bad):
    x = np.ones(16, np.float32)
    x[3] = bad
    with pytest.raises(ValueError, match="finite"):
        mx.quantize_nvfp4(x)


@pytest.mark.parametrize("mode", mx.SCALE_MODES)
def test_shared_exponents_refuse_a_negative_amax_in_every_mode(mode):
    """rceil gave 0x00 and the other modes 0xFF; an amax is a magnitude, so it is an error
    (as in scaling.scale_from_amax). -0.0 is zero."""
    with pytest.raises(ValueError, match=r"amax must be >= 0 \(a largest magnitude\), got -3.0"):
        mx.shared_exponents(np.array([1.0, -3.0]), "E4M3", mode)
    assert mx.shared_exponents(np.array([-0.0]), "E4M3", mode)[0].tolist() == [0x00]


@pytest.mark.parametrize("elem", ["E4M3", "E5M2", "E3M2", "E2M3", "E2M1"])
def test_which_blocks_of_float32_input_dequantize_to_inf(elem):
    """As MXArray.dequantize says: never under floor; a block at FLT_MAX can under the rules that
    round the scale up, when its elements round up to 2**128 (exactly: the product is a power of two
    or above FLT_MAX, so Inf is its float32 rounding)."""
    x = np.full(32, np.finfo(np.float32).max, np.float32)
    assert np.isfinite(mx.quantize(x, elem, scale_mode="floor").dequantize()).all()
    e4m3 = mx.quantize(x, "E4M3", scale_mode="rceil")
    assert e4m3.scales[0] == 127 + 120 and np.isinf(e4m3.dequantize()).all()  # 256 * 2**120 = 2**128


def test_nvfp4_refuses_a_signed_block_scale():
    """A hand-built NVFP4Array whose block scale had its sign bit set dequantized to the negated block (a review's
    find); NVFP4's block scales are unsigned E4M3 (TransformerEngine computes them from an amax)."""
    q = mx.quantize_nvfp4(np.linspace(-3, 3, 32).astype(np.float32))
    signed = mx.NVFP4Array(scales=q.scales | np.uint8(0x80), codes=q.codes, global_amax=q.global_amax,
                           encode_scale=q.encode_scale, axis=-1, shape=q.shape)
    for call in (signed.dequantize, signed.scale_values):
        with pytest.raises(ValueError, match="NVFP4 block scales are unsigned E4M3 .* got 2 with the sign bit set, "
                                             "first 0xfe at flat index 0"):
            call()
    # the boundary: 0x80 (-0) is the first signed code; 0x7E (448) the largest unsigned finite one
    for scales, message in (([0x7E, 0x80], "got 1 with the sign bit set, first 0x80 at flat index 1"),
                            ([0x80, 0x00], "got 1 with the sign bit set, first 0x80 at flat index 0")):
        edge = mx.NVFP4Array(scales=np.array(scales, np.uint8), codes=q.codes, global_amax=q.global_amax,
                             encode_scale=q.encode_scale, axis=-1, shape=q.shape)
        for call in (edge.dequantize, edge.scale_values):
            with pytest.raises(ValueError, match=message + "$"):
                call()
    unsigned_edge = mx.NVFP4Array(scales=np.array([0x7E, 0x00], np.uint8), codes=q.codes, global_amax=q.global_amax,
                                  encode_scale=q.encode_scale, axis=-1, shape=q.shape)
    assert np.all(unsigned_edge.dequantize()[16:] == 0) and np.isfinite(unsigned_edge.scale_values()).all()
    assert np.array_equal(q.dequantize(), mx.NVFP4Array(scales=q.scales, codes=q.codes, global_amax=q.global_amax,
                                                         encode_scale=q.encode_scale, axis=-1,
                                                         shape=q.shape).dequantize())


# ---- a review's finds: every scale mode against an outside reference; NVFP4 and reference inputs ---------------
ML_DTYPES_ELEMENTS = {"E4M3": "float8_e4m3fn", "E5M2": "float8_e5m2", "E3M2": "float6_e3m2fn",
                      "E2M3": "float6_e2m3fn", "E2M1": "float4_e2m1fn"}


def _shared_exponent_by_definition(amax: float, element: formats.FloatFormat, scale_mode: str) -> int:
    """The "mx" note's rules, from Python's exact frexp and Fractions (none of minifp8's code)."""
    if amax == 0:
        return -127
    significand, exponent = math.frexp(amax)  # amax = significand * 2**exponent, significand in [0.5, 1)
    floor_log2, power_of_two = exponent - 1, significand == 0.5
    emax = math.frexp(element.max)[1] - 1
    if scale_mode == "floor":
        shared = floor_log2 - emax
    elif scale_mode == "ceil":
        shared = floor_log2 + (not power_of_two) - emax
    elif scale_mode == "even":  # the significand in [1, 2) rounded to the element's mantissa bits, ties away
        steps = Fraction(amax) / 2**floor_log2 * 2**element.mantissa_bits
        rounded = math.floor(steps + Fraction(1, 2))
        shared = floor_log2 + (rounded == 2 ** (element.mantissa_bits + 1)) - emax
    else:  # rceil: the least k with max * 2**k >= amax
        shared = floor_log2 - emax - 1
        while Fraction(element.max) * Fraction(2) ** shared < Fraction(amax):
            shared += 1
    return min(max(shared, -127), 127)


@pytest.mark.parametrize("mx_name", list(mx.FORMATS))
def test_every_scale_mode_equals_an_outside_reference(mx_name):
    """floor, ceil, even and rceil were checked against mx.py's own reference alone where torch is absent
    (a review's find). Here the shared exponent comes from the definitions above and the elements from
    ml_dtypes' casts of x * 2**-shared (exact in float32 for these inputs), clamped to +-max first."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    mx_format = mx.get(mx_name)
    element, size = mx_format.elem, mx_format.block_size
    element_type = getattr(ml_dtypes, ML_DTYPES_ELEMENTS[element.name])
    rng = np.random.default_rng(41)
    rows = []
    for binade in range(-126, 124, 5):  # blocks whose values lie within 8 binades of 2**binade
        rows.append(np.ldexp(rng.uniform(1, 2, size) * rng.choice([-1, 1], size), binade - rng.integers(0, 8, size)))
        edge = rows[-1].copy()
        edge[0] = np.float32(element.max) * 2.0 ** (binade - 8)  # an amax on rceil's boundary
        rows.append(edge)
    x = np.array(rows).astype(np.float32)
    x[np.abs(x) < 2.0**-126] = 0  # (no float32 subnormal elements: their scaled values stay exact)
    for scale_mode in mx.SCALE_MODES:
        quantized = mx.quantize(x, mx_format, scale_mode=scale_mode)
        for row in range(len(x)):
            amax = float(np.max(np.abs(x[row].astype(np.float64))))
            shared = _shared_exponent_by_definition(amax, element, scale_mode)
            assert quantized.scales[row, 0] == shared + 127, (scale_mode, row, amax)
            scaled = np.clip(x[row].astype(np.float64) * 2.0**-shared, -element.max, element.max)
            assert (scaled.astype(np.float32) == scaled).all()  # (one rounding: ml_dtypes' own)
            expected = scaled.astype(np.float32).astype(element_type).view(np.uint8)
            np.testing.assert_array_equal(quantized.codes[row], expected, err_msg=f"{scale_mode} row {row}")


def test_nvfp4_refuses_an_amax_that_float32_rounds_to_zero_and_a_nan_block_scale():
    """A review's finds: a given global_amax of 1e-46 (0 in float32) gave the tensor scale 1, not FLT_MAX,
    and every block scale 0; a block scale code 0x7F, E4M3's NaN, which TransformerEngine's saturating
    scale cast never writes, dequantised its block to NaN without a word (a set sign bit is refused)."""
    x = np.full(16, 1e-40)
    assert mx.quantize_nvfp4(x, global_amax=1e-45).encode_scale == np.float32(3.4028235e38)
    with pytest.raises(ValueError, match=r"^global_amax=1e-46 underflows float32 to 0"):
        mx.quantize_nvfp4(x, global_amax=1e-46)
    with pytest.raises(ValueError, match=r"^global_amax must be a finite number >= 0, got -1e-46"):
        mx.quantize_nvfp4(x, global_amax=-1e-46)  # (it rounds to -0.0, once read as the amax 0)
    quantized = mx.quantize_nvfp4(np.ones(16, np.float32))
    with pytest.raises(ValueError, match=r"^encode_scale=1e-50 underflows float32 to 0"):
        mx.NVFP4Array(quantized.scales, quantized.codes, quantized.global_amax, 1e-50, -1, quantized.shape)
    scales = quantized.scales.copy()
    scales[0] = 0x7F
    nan_scale = mx.NVFP4Array(scales, quantized.codes, quantized.global_amax, quantized.encode_scale, -1,
                              quantized.shape)
    for call in (nan_scale.dequantize, nan_scale.scale_values):
        with pytest.raises(ValueError, match=r"^scales: 0x7f is E4M3's NaN, which no NVFP4 block scale is"):
            call()


def test_the_block_reference_takes_random_bits_as_quantize_does():
    """A review's find: an unsigned NumPy array of random bits needed random_bit_count here (with an error
    saying random_bits was missing), where quantize takes the array's width; a scalar failed in len()."""
    rng = np.random.default_rng(43)
    x = rng.standard_normal(32).astype(np.float32)
    bits = rng.integers(0, 2**16, 32).astype(np.uint16)
    quantized = mx.quantize(x, "MXFP4_E2M1", rounding="stochastic", random_bits=bits)
    scale, codes = mx.quantize_block_reference(x, "E2M1", rounding="stochastic", random_bits=bits)
    assert scale == quantized.scales[0] and codes == list(quantized.codes)
    assert (scale, codes) == mx.quantize_block_reference(x, "E2M1", rounding="stochastic",
                                                         random_bits=[int(b) for b in bits], random_bit_count=16)
    with pytest.raises(TypeError, match=r"^random_bits must be a 1-d sequence or array of ints, one per element"):
        mx.quantize_block_reference([1.1], "E4M3", rounding="stochastic", random_bits=np.uint8(3),
                                    random_bit_count=8)
