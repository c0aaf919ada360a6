"""``minifp8.explain``: a second, grid-based derivation of the scalar encoder, and its narrative.

- For every catalogued format, rounding mode and ``saturate``: ``explain(x).code`` equals
  ``codec.encode_scalar(x)`` on `testing.edge_cases`, every value of the format, every midpoint
  and the float64 numbers just either side of each midpoint, +-Inf, NaN and -0.0; stochastic
  rounding with several bit counts and random bits (``-m slow``: the full cross product).
- The facts hold: the neighbours bracket |x| with no value of the format strictly between them,
  the position is ``(|x| - lower) / spacing`` in [0, 1], the value is the code's.
- ``describe_code``'s bit fields reassemble every code of every format, and its formula gives the
  code's value.
- Cases derived by hand from the specs (OCP OFP8 rev 1.0 section 5, OCP MX v1.0 sections 5.3 and
  5.4.1, ONNX Cast-19 and Cast-24), written out here, not read from minifp8.
- The narrative, the command line and the errors for bad input.
"""
from __future__ import annotations

import importlib
import math
import re
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

import minifp8
from minifp8 import codec, formats, testing
from minifp8.explain import Explanation, _parse_number, describe_code, explain, main

explain_module = importlib.import_module("minifp8.explain")

FORMATS = list(formats.CATALOGUE)
NEAREST_AND_TRUNCATION = ("nearest_even", "nearest_away", "toward_zero")
CASES = {"nan", "not positive", "infinity", "zero", "exact", "overflow", "underflow", "below smallest", "tie",
         "round"}


# ---- inputs --------------------------------------------------------------------------------------
def magnitudes(fmt: formats.FloatFormat) -> np.ndarray:
    """The finite non-negative values of ``fmt`` from its decode table, ascending (float64, exact)."""
    table = fmt.values()
    return np.unique(np.abs(table[np.isfinite(table)]))


def beyond_max(fmt: formats.FloatFormat) -> float:
    """max + the spacing of max's binade: what an unbounded exponent would give next (hand rule:
    the spacing of binade e is 2^(e - M), and max lies in binade floor(log2(max)))."""
    return fmt.max + 2.0 ** (max(math.floor(math.log2(fmt.max)), fmt.emin) - fmt.mantissa_bits)


def sweep_inputs(fmt: formats.FloatFormat) -> list:
    """edge_cases (as Python floats, and every 16th as a NumPy float32 scalar), every value, every
    midpoint (the one above max too) and the float64 numbers just either side of each, both signs
    (for E8M0, which is unsigned, a few negative numbers only), +-Inf, NaN (where the format has
    it) and +-0.0; each once."""
    grid = np.append(magnitudes(fmt), beyond_max(fmt))
    midpoints = (grid[:-1] + grid[1:]) / 2
    points = np.concatenate([grid, midpoints, np.nextafter(midpoints, np.inf), np.nextafter(midpoints, 0),
                             [grid[1] / 2, grid[1] / 4, fmt.max * 2, 1e300]])
    edges = testing.edge_cases(fmt)
    finite_edges = np.abs(edges[np.isfinite(edges) & (edges != 0)].astype(np.float64))
    floats = set(points.tolist()) | set(finite_edges.tolist())
    floats |= {-x for x in floats} if fmt.signed else {-x for x in list(floats)[::50]}
    specials = [math.inf, -math.inf, 0.0, -0.0] + ([math.nan, -math.nan] if fmt.has_nan else [])
    return sorted(floats) + list(edges[::16]) + specials


def same_code_as_encode_scalar(x, fmt, **options) -> Explanation:
    why = explain(x, fmt, **options)
    expected = codec.encode_scalar(x, fmt, options.get("rounding", "nearest_even"), options.get("saturate", False),
                                   options.get("random_bits"), options.get("random_bit_count"))
    assert why.code == expected, (x, fmt, options, hex(why.code), hex(expected))
    return why


def vectorised_codes(inputs: list, fmt: formats.FloatFormat, **options) -> list[int]:
    """`codec.encode`'s codes for ``inputs`` (Python floats and NumPy float32 scalars), one call per
    dtype: the vectorised twin that the codec's tests hold equal to `codec.encode_scalar` (whose
    code `explain` checks itself), so that these sweeps check explain against a third party."""
    codes = [0] * len(inputs)
    for dtype in (np.float64, np.float32):
        where = [i for i, x in enumerate(inputs) if isinstance(x, np.float32) == (dtype is np.float32)]
        bits = options.get("random_bits")
        extra = {} if bits is None else {"random_bits": np.full(len(where), bits, np.uint32)}
        encoded = codec.encode(np.array([inputs[i] for i in where], dtype), fmt, **{**options, **extra})
        for i, code in zip(where, encoded.tolist()):
            codes[i] = code
    return codes


def check_sweep(inputs: list, fmt: formats.FloatFormat, grid: np.ndarray, all_facts: bool, **options) -> None:
    """explain's code for every input equals `vectorised_codes`, and its facts hold (those that
    depend on the options only, unless ``all_facts``: the neighbours do not depend on them)."""
    table = fmt.values()
    explained = [explain(x, fmt, **options) for x in inputs]
    wrong = [(x, hex(why.code), hex(expected)) for x, why, expected in
             zip(inputs, explained, vectorised_codes(inputs, fmt, **options)) if why.code != expected]
    assert not wrong, (fmt.name, options, "x, explain's code, codec.encode's:", wrong[:10])
    wrong_value = [why for why in explained if not (why.value == table[why.code]
                                                    or (math.isnan(why.value) and math.isnan(table[why.code])))]
    not_a_neighbour = [why for why in explained if why.rounded is not None and why.lower is not None
                       and why.rounded not in (why.lower, why.upper)]
    assert not wrong_value and not not_a_neighbour, (wrong_value[:3], not_a_neighbour[:3])
    for why in explained if all_facts else ():
        check_facts(why, fmt, grid)


def check_facts(why: Explanation, fmt: formats.FloatFormat, grid: np.ndarray) -> None:
    """The structural facts of one explanation (``grid``: the format's magnitudes, ascending)."""
    assert why.case in CASES
    assert why.fmt is fmt and why.format_name == fmt.name
    table = fmt.values()
    decoded = table[why.code]
    assert (math.isnan(why.value) and math.isnan(decoded)) or why.value == decoded
    if np.isfinite(decoded) and decoded == 0:
        assert math.copysign(1, why.value) == math.copysign(1, decoded)
    for value, code in ((why.lower, why.lower_code), (why.upper, why.upper_code)):
        if value is not None and code is not None:
            assert Fraction(float(table[code])) == value and code & fmt.sign_mask == 0
        elif value is not None:  # only max + spacing has no code
            assert value == Fraction(beyond_max(fmt)) and why.upper is value
    if why.exact is None:
        assert why.case in ("nan", "infinity", "not positive") and why.lower is None and why.upper is None
        return
    magnitude = abs(why.exact)
    if why.lower is not None and why.upper is not None:
        assert why.lower <= magnitude <= why.upper
        between = (grid > float(why.lower)) & (grid < float(why.upper))
        assert not between.any(), (why, grid[between])
        assert why.position is not None and why.spacing is not None and 0 <= why.position <= 1
        if why.lower == why.upper:
            assert why.case == "exact" and why.position == 0
            above = grid[grid > float(magnitude)]  # (the spacing of an exact |x|: the gap to the next value up)
            next_up = Fraction(float(above[0])) if above.size else Fraction(beyond_max(fmt))
            assert why.spacing == next_up - magnitude
        else:
            assert why.spacing == why.upper - why.lower
            assert why.position == (magnitude - why.lower) / why.spacing
            assert why.rounded in (why.lower, why.upper)
    smallest_normal = Fraction(fmt.min_normal)
    assert why.subnormal == (fmt.has_subnormals and 0 < magnitude < smallest_normal)
    if why.case in ("round", "tie", "exact", "underflow", "below smallest"):
        assert why.rounded is not None and Fraction(abs(why.value)) == why.rounded
    if why.case == "tie":
        assert why.position == Fraction(1, 2) and why.rounding in ("nearest_even", "nearest_away")
    if why.case == "overflow":
        assert why.rounded is None or why.rounded > Fraction(fmt.max)


# ---- explain equals encode_scalar ----------------------------------------------------------------
@pytest.mark.parametrize("name", FORMATS)
def test_explain_derives_the_codecs_code_and_its_facts_hold(name):
    fmt = formats.get(name)
    grid = magnitudes(fmt)
    inputs = sweep_inputs(fmt)
    beyond = [x for x in inputs if not abs(x) <= fmt.max / 2]  # where saturate can act (NaN included)
    for rounding in NEAREST_AND_TRUNCATION:
        check_sweep(inputs, fmt, grid, rounding == "nearest_even", rounding=rounding)
        check_sweep(beyond, fmt, grid, False, rounding=rounding, saturate=True)


def stochastic_inputs(fmt: formats.FloatFormat, every: int) -> list[float]:
    """Points at several positions in every ``every``-th interval of the grid (the lowest two, the
    one below max and the one above it always), both signs."""
    grid = np.append(magnitudes(fmt), beyond_max(fmt))
    picked = sorted({0, 1, len(grid) - 3, len(grid) - 2} | set(range(0, len(grid) - 1, every)))
    points = [float(grid[i] + (grid[i + 1] - grid[i]) * p) for i in picked for p in (1 / 16, 0.3, 0.5, 15 / 16)]
    return points + [-p for p in points]


@pytest.mark.parametrize("name", FORMATS)
def test_explain_derives_stochastic_rounding(name):
    fmt = formats.get(name)
    grid = magnitudes(fmt)
    inputs = stochastic_inputs(fmt, every=11)
    bit_choices = {1: range(2), 4: range(16), 8: (0, 127, 128, 255), 32: (0, 2**32 - 1)}
    for count, bits in bit_choices.items():
        for random_bits in bits:
            check_sweep(inputs, fmt, grid, random_bits == 1, rounding="stochastic", random_bits=random_bits,
                        random_bit_count=count, saturate=random_bits % 2 == 1)
    for x in inputs[::7]:  # the position rounded to k bits, as the narrative shows it
        why = explain(x, fmt, rounding="stochastic", random_bits=5, random_bit_count=4)
        if why.position is not None and why.case != "exact":
            assert why.position_bits == round(why.position * 16)


@pytest.mark.slow
@pytest.mark.parametrize("name", FORMATS)
def test_explain_equals_encode_scalar_in_the_full_cross_product(name):
    fmt = formats.get(name)
    grid = magnitudes(fmt)
    for saturate in (False, True):
        for x in sweep_inputs(fmt):
            for rounding in NEAREST_AND_TRUNCATION:
                check_facts(same_code_as_encode_scalar(x, fmt, rounding=rounding, saturate=saturate), fmt, grid)
        for x in stochastic_inputs(fmt, every=1):
            for count in (1, 2, 3, 4):
                for random_bits in range(2**count):
                    check_facts(same_code_as_encode_scalar(x, fmt, rounding="stochastic", saturate=saturate,
                                                           random_bits=random_bits, random_bit_count=count), fmt, grid)


def test_stochastic_rounding_adds_the_bits_to_the_position_rounded_to_k_bits():
    """0.3 of the way from 1 to 1.125 in E4M3, 4 bits: 0.3 * 16 = 4.8 rounds to 5, so R = 11..15
    carry (5 + 11 = 16) and R = 0..10 do not (tutorial 2's example, derived by hand)."""
    x = 1 + 0.3 * 0.125
    ups = [explain(x, "E4M3", rounding="stochastic", random_bits=r, random_bit_count=4).code == 0x39 for r in range(16)]
    assert ups == [False] * 11 + [True] * 5
    why = explain(x, "E4M3", rounding="stochastic", random_bits=11, random_bit_count=4)
    assert why.position_bits == 5 and why.case == "round" and why.random_bits == 11 and why.random_bit_count == 4
    assert "5 + 11 = 16 >= 16: carries" in str(why)


@pytest.mark.parametrize("bits_type", [np.uint8, np.uint16, np.int8, np.int64])
def test_numpy_integer_random_bits_and_count_are_taken_as_the_ints_they_hold(bits_type):
    """The golden files store random bits as uint8: a Python reader passes them one at a time.
    NumPy integers wrap (np.uint8(255) + 128 is 127, 2**np.uint8(8) is 0), which once gave 0x38 for
    1.0625 with bits 255 and "a bug in one of them" for a uint8 count. Here the same position
    (half a spacing: 128 of 256) with every bit pattern gives the code of the Python int."""
    count = 7 if bits_type is np.int8 else 8
    for bits in range(1 << count):
        for x, fmt in ((1.0625, "E4M3"), (1.1248, "E4M3"), (-2.5, "E5M2")):
            expected = codec.encode_scalar(x, fmt, "stochastic", False, bits, count)
            assert codec.encode_scalar(x, fmt, "stochastic", False, bits_type(bits), bits_type(count)) == expected
    why = explain(1.0625, "E4M3", rounding="stochastic", random_bits=np.uint8(255), random_bit_count=np.uint8(8))
    assert why.code == 0x39 and type(why.random_bits) is int and type(why.random_bit_count) is int
    assert "128 + 255 = 383 >= 256: carries, up to 1.125" in str(why)


# ---- cases derived by hand from the specs --------------------------------------------------------
def test_hand_derived_e4m3_cases():
    # 0.3 lies in [2^-2, 2^-1): exponent field -2 + 7 = 5 (0101), spacing 2^-2 / 8 = 1/32.
    # 0.3 * 32 = 9.6: between 9/32 = 0.28125 (1.001b, 0x29) and 10/32 = 0.3125 (1.010b, 0x2A), past the midpoint.
    why = explain(0.3, "E4M3")
    assert (why.code, why.value, why.case) == (0b0_0101_010, 0.3125, "round")
    assert (why.lower, why.lower_code, why.upper, why.upper_code) == (Fraction(9, 32), 0x29, Fraction(10, 32), 0x2A)
    assert why.spacing == Fraction(1, 32) and abs(float(why.position) - 0.6) < 1e-12
    # 448 = 1.75 * 2^8: exponent 8 + 7 = 15 (1111), mantissa 110 (S.1111.111 is NaN): 0x7E, the largest value.
    assert explain(448, "E4M3").code == 0b0_1111_110 == 0x7E
    # 464 is halfway between 448 (1.110b * 2^8) and 480 (1.111b * 2^8, beyond max): the even mantissa is 448's,
    # so 464 rounds to 448 before any overflow check (OFP8 rounds first): 0x7E, saturated or not.
    for saturate in (False, True):
        why = explain(464, "E4M3", saturate=saturate)
        assert (why.code, why.case, why.upper, why.upper_code) == (0x7E, "tie", 480, None)
    # Just above 464 rounds up to 480 > 448: NaN 0x7F (E4M3 has no Inf), or 448 when saturating; so does 480.
    for x in (math.nextafter(464.0, math.inf), 480.0):
        assert (explain(x, "E4M3").code, explain(x, "E4M3").case) == (0x7F, "overflow")
        assert explain(x, "E4M3", saturate=True).code == 0x7E
        assert explain(-x, "E4M3").code == 0xFF  # the sign stays on the NaN
    # Ties: 1.0625 is halfway between 1 (1.000b, 0x38) and 1.125 (1.001b): the even one is 1.
    # 1.1875 is halfway between 1.125 (1.001b) and 1.25 (1.010b, 0x3A): the even one is 1.25.
    assert (explain(1.0625, "E4M3").code, explain(1.0625, "E4M3").case) == (0x38, "tie")
    assert explain(1.1875, "E4M3").code == 0x3A
    assert explain(1.0625, "E4M3", rounding="nearest_away").code == 0x39  # away from zero: 1.125
    assert explain(-1.0625, "E4M3", rounding="nearest_away").code == 0xB9
    assert explain(1.1875 - 2**-20, "E4M3", rounding="toward_zero").code == 0x39
    # Subnormals: 0.m * 2^(1 - 7), spacing 2^-9; 2^-9 is 0 0000 001.
    why = explain(2.0**-9, "E4M3")
    assert (why.code, why.case, why.subnormal) == (0x01, "exact", True)
    assert explain(3 * 2.0**-10, "E4M3").code == 0x02  # halfway between 1 and 2 spacings: 2 is even
    why = explain(2.0**-10, "E4M3")  # halfway between 0 and 2^-9: 0 is even
    assert (why.code, why.case) == (0x00, "underflow")
    assert explain(-(2.0**-10), "E4M3").code == 0x80  # -0
    assert explain(-0.0, "E4M3").code == 0x80 and explain(0, "E4M3").code == 0x00
    # toward_zero never overflows to NaN (IEEE 754-2019 section 7.4): 1e6 gives 448.
    assert explain(1e6, "E4M3", rounding="toward_zero").code == 0x7E


def test_hand_derived_e5m2_cases():
    # E5M2 has Inf: S.11111.00; NaN: S.11111.{01,10,11} (minifp8 writes the quiet 10).
    assert explain(math.inf, "E5M2").code == 0b0_11111_00 == 0x7C
    assert explain(-math.inf, "E5M2").code == 0xFC
    assert explain(math.inf, "E5M2", saturate=True).code == 0x7B  # 57344 = 1.11b * 2^15
    assert explain(math.nan, "E5M2").code == 0x7E
    # 61440 is halfway between 57344 (7 * 8192) and 65536 (8 * 8192, beyond max): the even one is 65536,
    # which overflows: +Inf, or 57344 when saturating.
    why = explain(61440, "E5M2")
    assert (why.code, why.case, why.rounded) == (0x7C, "overflow", 65536)
    assert explain(61440, "E5M2", saturate=True).code == 0x7B
    assert explain(61440, "E5M2", rounding="toward_zero").code == 0x7B


def test_hand_derived_fnuz_e8m0_and_fp4_cases():
    # FNUZ: 0x80 is NaN, so there is no -0; Inf is NaN, or +-max when saturating (ONNX Cast-19; Cast-24).
    # E4M3FNUZ's smallest subnormal is 2^(1-8) / 8 = 2^-10; -2^-12 is a quarter of it: rounds to +0.
    assert (explain(-(2.0**-12), "E4M3FNUZ").code, explain(-(2.0**-12), "E4M3FNUZ").case) == (0x00, "underflow")
    assert explain(-0.0, "E4M3FNUZ").code == 0x00
    assert explain(-math.inf, "E4M3FNUZ", saturate=True).code == 0xFF  # -240
    assert explain(math.inf, "E5M2FNUZ", saturate=True).code == 0x7F  # 57344
    assert explain(math.inf, "E5M2FNUZ").code == 0x80 and explain(-math.inf, "E4M3FNUZ").code == 0x80
    assert explain(-math.nan, "E4M3FNUZ").code == 0x80
    # E8M0 (MX section 5.4.1): 2^(E - 127), unsigned, no zero, 0xFF is NaN.
    assert (explain(0, "E8M0").code, explain(0, "E8M0").case) == (0xFF, "not positive")
    assert explain(-1.0, "E8M0").code == 0xFF and explain(-math.inf, "E8M0").code == 0xFF
    assert explain(1, "E8M0").code == 127
    why = explain(2.0**-130, "E8M0")  # below 2^-127, the smallest: 2^-127 in every mode
    assert (why.code, why.case, why.lower) == (0x00, "below smallest", None)
    assert explain(2.0**-130, "E8M0", rounding="toward_zero").code == 0x00
    assert explain(3, "E8M0").code == 129  # halfway between 2 and 4: up (4 = 2 x the spacing 2 is even)
    assert explain(math.inf, "E8M0").code == 0xFF and explain(math.inf, "E8M0", saturate=True).code == 0xFE
    # E2M1 (MX section 5.3) has no Inf or NaN: beyond max it saturates. 7 is halfway between 6 (3 x 2) and
    # 8 (4 x 2, beyond max): it rounds to 8, overflows and saturates to 6 = 0 11 1.
    why = explain(7, "E2M1")
    assert (why.code, why.case, why.value) == (0b0_11_1, "overflow", 6.0)
    assert explain(-math.inf, "E2M1").code == 0b1_11_1
    with pytest.raises(ValueError, match="NaN cannot be encoded in E2M1"):
        explain(math.nan, "E2M1")


def test_inputs_are_taken_exactly_whatever_their_type():
    assert explain(Fraction(3, 10), "E4M3").exact == Fraction(3, 10)
    assert explain(0.3, "E4M3").exact == Fraction(0.3) != Fraction(3, 10)
    why = explain(np.float32(0.3), "E4M3")
    assert (why.exact, why.input_type, why.input_text) == (Fraction(float(np.float32(0.3))), "float32", "0.3")
    assert explain(np.float16(1.0625), "E4M3").code == 0x38 and explain(np.int64(448), "E4M3").code == 0x7E
    assert explain(2**70, "E5M2").case == "overflow"  # a Python int beyond float64's exact integers
    ml_dtypes = pytest.importorskip("ml_dtypes")
    why = explain(ml_dtypes.bfloat16(0.3), "E4M3")
    assert why.exact == Fraction(float(np.float32(ml_dtypes.bfloat16(0.3)))) and why.input_type == "bfloat16"


# ---- describe_code -------------------------------------------------------------------------------
VALUE_LINE = re.compile(r"^  value     0x[0-9A-F]+ = (?P<bits>[01 ]+): (?P<formula>\S.*?)(?: = (?P<shown>\S+))?(?::.*)?$")
FORMULA = re.compile(r"^(?P<sign>[+-]?)2\^\((?P<exponent>\d+)-(?P<bias>\d+)\)"
                     r"(?: x \((?P<lead>[01]) \+ (?P<mantissa>\d+)/(?P<scale>\d+)\))?$")


@pytest.mark.parametrize("name", FORMATS)
def test_describe_code_reassembles_every_code_and_its_formula_gives_the_value(name):
    fmt = formats.get(name)
    table = fmt.values()
    for code in range(1 << fmt.bits):
        text = describe_code(code, fmt)
        lines = text.splitlines()
        assert lines[0].startswith(f"{fmt.name} code 0x{code:0{(fmt.bits + 3) // 4}X}:")
        match = VALUE_LINE.match(lines[-1])
        assert match, lines[-1]
        groups = match["bits"].split(" ")
        assert [len(group) for group in groups] == ([1] if fmt.signed else []) + [fmt.exponent_bits] + \
            ([fmt.mantissa_bits] if fmt.mantissa_bits else [])
        assert int("".join(groups), 2) == code
        formula = match["formula"]
        if np.isnan(table[code]):
            assert formula == "NaN" and "NaN" in lines[1 + fmt.signed]
        elif np.isinf(table[code]):
            assert formula == ("-Inf" if table[code] < 0 else "+Inf")
        else:
            parts = FORMULA.match(formula)
            assert parts, formula
            value = Fraction(2) ** (int(parts["exponent"]) - int(parts["bias"]))
            if parts["lead"] is not None:
                assert int(parts["scale"]) == 2**fmt.mantissa_bits
                value *= int(parts["lead"]) + Fraction(int(parts["mantissa"]), int(parts["scale"]))
            value = -value if parts["sign"] == "-" else value
            assert value == Fraction(float(table[code])), (formula, table[code])
            assert (parts["sign"] == "") == (not fmt.signed)
            assert float(match["shown"]) == table[code]
            kind = "subnormal" if fmt.has_subnormals and int(parts["exponent"]) == 1 and parts["lead"] == "0" \
                else "normal"
            assert re.search(rf"= \d+: {kind}:", text) or table[code] == 0, (kind, text)


def test_describe_code_refuses_codes_outside_the_format():
    assert describe_code(0x7F, "E8M0").endswith("2^(127-127) = 1")
    with pytest.raises(ValueError, match=r"E2M1 codes lie in \[0, 16\)"):
        describe_code(16, "E2M1")
    with pytest.raises(ValueError, match="got -1"):
        describe_code(-1, "E4M3")
    with pytest.raises(TypeError, match="code must be an int"):
        describe_code(1.0, "E4M3")  # type: ignore[arg-type]


# ---- the narrative -------------------------------------------------------------------------------
@pytest.mark.parametrize(("x", "name", "options", "case"), [
    (0.3, "E4M3", {}, "round"), (1.0625, "E4M3", {}, "tie"), (470, "E4M3", {}, "overflow"),
    (1e6, "E4M3", {"rounding": "toward_zero"}, "overflow"), (2.0**-10, "E4M3", {}, "underflow"),
    (-(2.0**-12), "E4M3FNUZ", {}, "underflow"), (2.0**-9, "E4M3", {}, "exact"), (math.inf, "E5M2", {}, "infinity"),
    (math.nan, "E4M3", {}, "nan"), (-0.0, "E4M3", {}, "zero"), (0, "E8M0", {}, "not positive"),
    (1e-40, "E8M0", {}, "below smallest"), (7, "E2M1", {}, "overflow"),
    (1.1, "E4M3", {"rounding": "stochastic", "random_bits": 3, "random_bit_count": 4}, "round"),
])
def test_the_narrative_names_the_format_the_code_and_the_case(x, name, options, case):
    why = explain(x, name, **options)
    text = str(why)
    assert why.case == case
    assert name in text.splitlines()[0] and f"case {case}" in text.splitlines()[0]
    assert f"0x{why.code:0{(why.fmt.bits + 3) // 4}X}" in text
    assert 3 <= len(text.splitlines()) <= 8 and "None" not in text
    if why.rule:
        assert why.rule in text


def test_the_narrative_of_a_tie_and_a_subnormal_says_what_decided():
    assert "exactly halfway" in str(explain(1.0625, "E4M3")) and "even" in str(explain(1.0625, "E4M3"))
    assert "subnormal" in str(explain(3 * 2.0**-11, "E4M3"))
    assert "ONNX Cast-24" in str(explain(math.inf, "E4M3FNUZ", saturate=True))
    assert "ONNX Cast-19" in str(explain(math.inf, "E4M3FNUZ"))


# ---- bad input -----------------------------------------------------------------------------------
def test_bad_python_input_gives_clear_errors():
    with pytest.raises(TypeError, match="x must be a float, int or fractions.Fraction, got str"):
        explain("0.3", "E4M3")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"explain takes one number, got an array of shape \(2,\)"):
        explain(np.float32([1, 2]), "E4M3")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got an array of shape \(\).*x.item\(\)"):
        explain(np.array(1.0), "E4M3")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got bool"):
        explain(True, "E4M3")
    with pytest.raises(ValueError, match="unknown format 'NOPE'"):
        explain(1.0, "NOPE")
    with pytest.raises(ValueError, match="unknown rounding mode"):
        explain(1.0, "E4M3", rounding="nearest")
    with pytest.raises(ValueError, match="random_bits is only used with rounding='stochastic'"):
        explain(1.0, "E4M3", random_bits=1, random_bit_count=4)
    with pytest.raises(ValueError, match="needs random_bits"):
        explain(1.0, "E4M3", rounding="stochastic")


def test_a_derivation_that_differs_from_encode_scalar_is_a_runtime_error(monkeypatch):
    monkeypatch.setattr(explain_module, "encode_scalar", lambda *args: 0x29)
    with pytest.raises(RuntimeError, match=r"explain derived code 0x2A .* codec.encode_scalar gives 0x29"):
        explain(0.3, "E4M3")


def test_the_module_is_not_loaded_by_the_package():
    """``python -m minifp8.explain`` runs the module as __main__; were it imported by ``import minifp8``
    already, runpy would warn on every run (and ``minifp8.explain`` would be ambiguous)."""
    assert "explain" not in minifp8.__all__
    assert explain_module.explain is explain and explain_module.__name__ == "minifp8.explain"
    loaded = subprocess.run([sys.executable, "-c", "import sys, minifp8; print('minifp8.explain' in sys.modules)"],
                            capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"


# ---- the command line ----------------------------------------------------------------------------
def test_cli_prints_the_narrative_and_describes_codes(capsys):
    assert main(["0.3", "E4M3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("E4M3 encoding of 0.3 (nearest_even): 0x2A") and "0.28125 (0x29)" in out
    assert main(["-inf", "E5M2", "--saturate"]) == 0  # a negative VALUE is not a flag
    assert "0xFB" in capsys.readouterr().out
    assert main(["3/10", "e4m3", "--rounding", "toward_zero"]) == 0
    assert "3/10 (Fraction)" in capsys.readouterr().out
    assert main(["0x1.8p-3", "E4M3"]) == 0 and "case exact" in capsys.readouterr().out
    assert main(["-1e5", "E4M3"]) == 0 and "0xFF" in capsys.readouterr().out
    assert main(["1.1", "E4M3", "--rounding", "stochastic", "--random-bits", "3", "--random-bit-count", "4"]) == 0
    assert "13 + 3 = 16 >= 16: carries" in capsys.readouterr().out
    assert main(["0x2A", "E4M3", "--code"]) == 0
    assert capsys.readouterr().out == describe_code(0x2A, "E4M3") + "\n"
    assert main(["255", "E8M0", "--code"]) == 0 and "NaN" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["0.3", "NOPE"], "FORMAT: unknown format 'NOPE'"),
    (["0.3.3", "E4M3"], "VALUE: cannot read '0.3.3' as a number"),
    (["abc", "E4M3"], "VALUE: cannot read 'abc' as a number"),  # (float.fromhex would read 0xabc)
    (["1p3", "E4M3"], "VALUE: cannot read '1p3' as a number"),
    (["1/0", "E4M3"], "VALUE: cannot read '1/0' as a fraction"),
    (["1", "E4M3", "--random-bits", "3"], "random_bits is only used with rounding='stochastic'"),
    (["1", "E4M3", "--rounding", "stochastic", "--random-bits", "3"],
     "needs random_bits and random_bit_count: random_bit_count not given"),  # (a review's find: it named both)
    (["300", "E4M3", "--code"], r"--code: E4M3 codes lie in \[0, 256\)"),
    (["0.5", "E4M3", "--code"], "--code: VALUE must be an integer code"),
    (["7", "E4M3", "--code", "--saturate"], "--code describes a code"),
    (["7", "E4M3", "--code", "--rounding", "toward_zero"], "--code describes a code"),
    (["7", "E4M3", "--code", "--random-bits", "3"], "--code describes a code"),
    (["7", "E4M3", "--code", "--random-bit-count", "4"], "--code describes a code"),
    (["nan", "E2M1"], "NaN cannot be encoded in E2M1"),
    (["1", "E4M3", "--rounding", "up"], "argument --rounding: invalid choice"),
])
def test_cli_bad_input_is_one_line_on_stderr_and_exit_status_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err, captured.err
    assert captured.err.startswith("python -m minifp8.explain: error: ")
    assert re.search(message, captured.err), captured.err


def test_python_m_minifp8_explain_runs_without_warnings():
    """(runpy would warn if ``import minifp8`` had loaded the module before running it as __main__.)"""
    done = subprocess.run([sys.executable, "-m", "minifp8.explain", "1.0625", "E4M3"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "case tie" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "minifp8.explain", "0.3", "NOPE"], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and bad.stdout == ""


def test_the_narrative_says_which_side_of_the_midpoint_and_the_relative_error():
    # 0.26 in E4M3: neighbours 0.25 and 0.28125, position (0.26 - 0.25) / 2^-5 = 0.32; 0.3: 0.6
    short, past = str(explain(Fraction(26, 100), "E4M3")), str(explain(0.3, "E4M3"))
    assert "short of the midpoint, down to 0.25" in short and "0.32 of a spacing" in short
    assert "past the midpoint, up to 0.3125" in past
    # (0.3125 - 0.3) / 0.3 = 1/24 = 4.1666...%; (0.25 - 0.26) / 0.26 = -3.846...%
    assert "+0.0125 (+4.17% of |x|)" in past and "-0.01 (-3.85% of |x|)" in short


def test_the_smallest_normal_value_is_not_subnormal():
    for name in ("E4M3", "E5M2", "E2M1", "E3M2"):
        fmt = formats.get(name)
        assert not explain(fmt.min_normal, fmt).subnormal
        assert explain(Fraction(fmt.min_normal) * Fraction(15, 16), fmt).subnormal


def test_numbers_beyond_float64_are_explained_and_narrated():
    """An int or Fraction far beyond float64 (or too long to print) is explained and printed (the
    error and the percentage went through float and raised OverflowError)."""
    for x, fmt, options, code in ((2**2000, "E4M3", {"saturate": True}, 0x7E),
                                  (-(10**5000), "E4M3", {"rounding": "toward_zero"}, 0xFE),
                                  (Fraction(1, 10**400), "E8M0", {}, 0x00),
                                  (Fraction(-1, 2**3000), "E5M2", {}, 0x80)):
        why = explain(x, fmt, **options)
        assert why.code == codec.encode_scalar(x, fmt, options.get("rounding", "nearest_even"),
                                               options.get("saturate", False)) == code
        text = str(why)
        assert "~2^" in text and len(text) < 2000, text
    beyond = str(explain(1e6, "E4M3"))  # (its binade's spacing is not max's: the line names whose it is)
    assert "[2^19, 2^20): spacing 2^5 = 32, that of max's binade [2^8, 2^9)" in beyond


def test_a_format_with_an_ieee_nan_and_no_inf_keeps_its_top_numbers_finite():
    """nan_style="ieee" without has_infinity: the all-ones exponent with mantissa 0 is a number (16 here),
    which describe_code called +Inf."""
    fmt = formats.FloatFormat("E3M2_NO_INF", 3, 2, 3, nan_style="ieee")
    assert fmt.values()[0x1C] == 16  # 2^(7-3) x (1 + 0/4)
    assert "Inf" not in describe_code(0x1C, fmt) and describe_code(0x1C, fmt).endswith("= 16")
    why = explain(16, fmt)
    assert why.case == "exact" and why.code == 0x1C and "Inf" not in str(why)


@pytest.mark.parametrize("value, options, expected", [
    ("1e999", ["--rounding", "toward_zero"], "0x7E"),  # read exactly: finite, so it saturates (not Inf)
    ("1e-999", [], "0x00, case underflow"),            # not 0.0: a number that rounds to zero
    ("-1e-999", [], "0x80, case underflow"),
])
def test_cli_reads_decimals_beyond_float64_exactly(value, options, expected, capsys):
    assert main([value, "E4M3", *options]) == 0
    assert expected in capsys.readouterr().out


def test_cli_reads_minus_zero_as_the_negative_zero(capsys):
    """Found in a review: "-0" was read as the integer 0 and explained as +0 (0x00)."""
    assert main(["--", "-0", "E4M3"]) == 0
    assert "0x80, case zero" in capsys.readouterr().out
    assert main(["0", "E4M3"]) == 0
    assert "0x00, case zero" in capsys.readouterr().out


@pytest.mark.parametrize("argv, first_line", [
    # a review's find: float.fromhex rounds these to 0, which E8M0 (no zero) explained as its NaN 0xFF
    (["0x1p-1080", "E8M0"], "E8M0 encoding of ~2^-1080 (nearest_even): 0x00, case below smallest"),
    (["--", "-0x1.8p-1100", "E4M3"], "E4M3 encoding of -~2^-1100 (nearest_even): 0x80, case underflow"),
    (["0x0.0p-2000", "E4M3"], "E4M3 encoding of 0.0 (nearest_even): 0x00, case zero"),   # zero itself
    (["--", "-0x0p0", "E4M3"], "E4M3 encoding of -0.0 (nearest_even): 0x80, case zero"),
    (["--", "-nan", "E5M2"], "E5M2 encoding of -nan (nearest_even): 0xFE, case nan"),   # (str dropped the sign)
])
def test_cli_reads_hex_floats_below_float64_exactly_and_shows_a_nan_sign(argv, first_line, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == first_line, out


@pytest.mark.parametrize("argv, message", [
    (["-1/0", "E4M3"], "VALUE: cannot read '-1/0' as a fraction"),  # (not "the following arguments are required")
    (["0x1p2000", "E4M3"], "beyond float64's range"),
    (["0x1p-999999999", "E4M3"], "VALUE: '0x1p-999999999' has a binary exponent beyond +-400,000"),
    # found in a review: read exactly, 1e99999999999 made an integer of 10^11 digits and never returned
    (["1e99999999999", "E4M3"], "VALUE: '1e99999999999' has a decimal exponent beyond +-100,000"),
    (["--", "-1e-99999999999", "E4M3"], "has a decimal exponent beyond +-100,000"),
])
def test_cli_odd_values_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and message in err, err


# ---- found in a review: inputs a hair from the midpoint read "0.5 of a spacing", then "past the
# ---- midpoint"; 1e30 read "exactly 1e+30" although the float is not 10**30 --------------------------
@pytest.mark.parametrize("x, position, decision", [
    (2.0**-10 * (1 + 2.0**-40), "1/2 + 2^-41", "past the midpoint, up to 0.001953125"),
    (2.0**-10 * (1 - 2.0**-40), "1/2 - 2^-41", "short of the midpoint, down to 0"),
    (1 - 2.0**-40, "1 - 2^-36", "past the midpoint, up to 1"),
    (1.0625 + 3e-13, "1/2 + 2.4e-12", "past the midpoint, up to 1.125"),
    (1.0625, "0.5", "exactly halfway"),
    (1.1, "0.8", "past the midpoint, up to 1.125"),
])
def test_a_position_next_to_the_midpoint_is_written_against_it(x, position, decision):
    text = str(explain(x, "E4M3"))
    assert f"|x| lies {position} of a spacing above" in text and decision in text


def test_a_large_integer_is_shown_exactly_where_it_differs_from_what_was_written():
    assert "(float, exactly 1000000000000000019884624838656)" in str(explain(1e30, "E4M3"))
    assert "exactly" not in str(explain(1e16, "E4M3")).splitlines()[1]  # (1e16 is 10**16 exactly)


def test_cli_notes_that_a_hex_value_without_code_was_read_as_a_number(capsys):
    """Found in a review: a code pasted from a report table (0x7F) was explained as the number 127,
    silently."""
    assert main(["0x7F", "E4M3"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("E4M3 encoding of 127 (nearest_even)")
    assert captured.err == "note: 0x7F was read as the number 127; for what the code 0x7F means, add --code\n"
    for argv in (["0x1C0", "E4M3"], ["0x1.8p-3", "E4M3"], ["127", "E4M3"], ["0x7F", "E4M3", "--code"]):
        assert main(argv) == 0 and capsys.readouterr().err == ""  # (beyond a code, a hex float, decimal, --code)


def test_the_nan_rule_names_the_nan_code_of_a_narrower_format():
    """Found in a review: the text said 0x80 and 0xFF, the 8-bit codes, for every width."""
    fnuz7 = formats.FloatFormat("E3M3FNUZ", 3, 3, 4, nan_style="negative_zero")
    unsigned6 = formats.FloatFormat("UE6M0", 6, 0, 31, signed=False, has_subnormals=False)
    assert "E3M3FNUZ spells it 0x40, the pattern of -0" in str(explain(math.nan, fnuz7))
    assert "UE6M0 spells it 0x3F, its all-ones code" in str(explain(math.nan, unsigned6))
    assert "E4M3FNUZ spells it 0x80" in str(explain(math.nan, "E4M3FNUZ"))


# ---- found by mutation testing of minifp8/explain.py: each test fails on the mutant it names ------
def test_the_narrative_of_a_tie_names_the_even_multiple_it_rounds_to():
    # 1.1875 = 19/16 is halfway between 9/8 and 10/8 (E4M3's spacing at 1 is 1/8): the even multiple is 10,
    # up to 1.25 (the text named the lower neighbour's 9); 1.0625 = 17/16 lies between 8/8 and 9/8: 8, down to 1.
    assert "to the even multiple of the spacing (10 x 0.125): up to 1.25" in str(explain(1.1875, "E4M3"))
    assert "to the even multiple of the spacing (8 x 0.125): down to 1" in str(explain(1.0625, "E4M3"))


def test_describe_code_gives_the_exponent_of_a_subnormal_or_zero_code_as_1_minus_the_bias():
    # OCP OFP8 rev 1.0 section 5: exponent field 0 means 2^(1 - bias), the lowest normal binade's
    # (E4M3: 2^-6, E5M2: 2^-14), not 2^(0 - bias).
    assert "exponent  0000 = 0: subnormal: 2^(1-7) = 2^-6, as the lowest normal binade" in describe_code(0x01, "E4M3")
    assert "exponent  00000 = 0: zero: 2^(1-15) = 2^-14, as the lowest normal binade" in describe_code(0x80, "E5M2")


def test_stochastic_rounding_rounds_a_position_halfway_between_k_bit_steps_to_even():
    """IEEE P3109, as the golden "stochastic" note states it: the position is rounded to k bits to
    nearest, ties to even. 1 + 1/32 lies 1/4 of a spacing (1/8) above 1 in E4M3: with k = 1, 1/4 * 2
    = 1/2 rounds to 0, so random bits 1 give 0 + 1 < 2, no carry: 1.0 (0x38); rounding 1/2 up would
    carry to 1.125 (0x39). 1 + 3/32: 3/4 * 2 = 3/2 rounds to 2, which carries with any bits."""
    why = explain(1 + 1 / 32, "E4M3", rounding="stochastic", random_bits=1, random_bit_count=1)
    assert (why.position, why.position_bits, why.code) == (Fraction(1, 4), 0, 0x38)
    why = explain(1 + 3 / 32, "E4M3", rounding="stochastic", random_bits=0, random_bit_count=1)
    assert (why.position, why.position_bits, why.code) == (Fraction(3, 4), 2, 0x39)


def test_cli_notes_a_hex_value_only_where_it_could_be_a_code_of_the_format(capsys):
    # E4M3's codes are 0x00 to 0xFF, so 0x100 (256) is none of them; E2M1's are 0x0 to 0xF
    for argv, noted in ((["0xFF", "E4M3"], True), (["0x100", "E4M3"], False), (["0xF", "E2M1"], True),
                        (["0x10", "E2M1"], False)):
        assert main(argv) == 0
        assert ("add --code" in capsys.readouterr().err) == noted, argv


def test_cli_takes_a_negative_value_that_starts_with_a_point(capsys):
    # -0.05 in E4M3: 0.05 = 1.6 * 2^-5, exponent field -5 + 7 = 0010, mantissa 0.6 * 8 = 4.8 -> 5 (101): 0x95.
    # (argparse's own negative-number pattern has no exponent: it took "-.5e-1" for a flag.)
    assert main(["-.5e-1", "E4M3"]) == 0
    assert capsys.readouterr().out.startswith("E4M3 encoding of -0.05 (nearest_even): 0x95")


def test_the_fnuz_rules_name_the_lost_signs_and_a_finite_overflow_clamps_by_onnx_cast_24():
    # ONNX Cast-19's FNUZ formats have no -0 (its pattern is the NaN 0x80) and one NaN, unsigned
    why = explain(-(2.0**-12), "E4M3FNUZ")
    assert (why.code, why.case, why.rule) == (0x00, "underflow", "E4M3FNUZ has no -0 (its pattern is NaN): +0")
    assert why.rule in str(why)
    assert explain(-math.nan, "E4M3FNUZ").rule.endswith("; its sign is not kept")
    assert "sign" not in explain(math.nan, "E4M3FNUZ").rule
    # so does a negative Inf or overflow, which gives the unsigned NaN 0x80 (the rule said nothing of it,
    # beside a code line whose sign bit is set)
    for x, fmt in ((-math.inf, "E4M3FNUZ"), (-1e6, "E5M2FNUZ")):
        assert explain(x, fmt).rule.endswith(f"; its sign is not kept (0x80 is {fmt}'s only NaN)")
    assert "sign" not in explain(math.inf, "E4M3FNUZ").rule and "sign" not in explain(-math.inf, "E4M3").rule
    # saturate=True takes a finite overflow to max: ONNX Cast-24's saturate, which defines it for FNUZ
    # (OFP8, cited before, defines neither FNUZ nor E8M0; found in a review); Cast-24 for Inf too
    why = explain(1000.0, "E4M3FNUZ", saturate=True)
    assert (why.code, why.case, why.rule) == (0x7F, "overflow", "saturate=True: +max (ONNX Cast-24's saturate)")
    assert "Cast-24" in explain(math.inf, "E4M3FNUZ", saturate=True).rule
    assert explain(1000.0, "E4M3", saturate=True).rule == "saturate=True: +max (OCP OFP8 rev 1.0 section 5)"
    assert explain(1e39, "E8M0", saturate=True).rule.startswith("saturate=True: +max (the rule OCP OFP8 rev 1.0 "
                                                                 "section 5 gives E4M3 and E5M2, which minifp8 applies")


@pytest.mark.parametrize("text, dtype, held", [("0x3f880000", np.float32, "0x1.1000000000000p+0"),
                                               ("0xbba00000", np.float32, "-0x1.4000000000000p-8"),
                                               ("0xffc00000", np.float32, "-nan"),
                                               ("0x3c00", np.float16, "0x1.0000000000000p+0"),
                                               ("0x3ff8000000000000", np.float64, "0x1.8000000000000p+0")])
def test_cli_notes_the_value_that_a_float_s_pasted_bits_hold(text, dtype, held, capsys):
    """Found by a review: a report's "input bits" pasted as VALUE was explained as an integer, with no
    word; the note now names the value those bits hold, as a VALUE that reads back exactly."""
    assert main([text, "E4M3"]) == 0
    name = np.dtype(dtype).name
    assert capsys.readouterr().err == (f"note: {text} was read as the number {int(text, 16)}; if it is the bits of a "
                                       f"{name} (a report's input bits), explain the value they hold: "
                                       f"python -m minifp8.explain {held} E4M3\n")
    value = np.array(int(text, 16), f"u{np.dtype(dtype).itemsize}").view(dtype)
    assert explain(_parse_number(held), "E4M3").code == explain(float(value), "E4M3").code
    if not math.isnan(value):
        assert _parse_number(held) == float(value)
    assert main(["0x123456", "E4M3"]) == 0 and capsys.readouterr().err == ""  # (6 digits: no float's width)


def test_cli_notes_float_bits_that_are_small_or_signed_plus(capsys):
    """A review of the note: 0x00000001 (8 digits: a float32's bits, the smallest subnormal) got only
    the --code note, and +0x3f800000 no note at all; -0x3f800000 is a number, not bits."""
    assert main(["0x00000001", "E4M3"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "note: 0x00000001 was read as the number 1; for what the code 0x00000001 means, add --code",
        "note: 0x00000001 was read as the number 1; if it is the bits of a float32 (a report's input bits), explain "
        "the value they hold: python -m minifp8.explain 0x1.0000000000000p-149 E4M3"]
    assert main(["+0x3f800000", "E4M3"]) == 0
    assert capsys.readouterr().err.endswith("explain the value they hold: python -m minifp8.explain "
                                            "0x1.0000000000000p+0 E4M3\n")
    assert main(["--", "-0x3f800000", "E4M3"]) == 0 and capsys.readouterr().err == ""


def test_a_negative_nan_of_an_ml_dtypes_scalar_prints_its_sign():
    """Found by a review: the sign of an ml_dtypes NaN was dropped from the header ("nan"), while its
    code, 0xFE, keeps it; and a stochastic header read "random_bits=15 of 4", as if 15 out of 4."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for value in (-ml_dtypes.bfloat16(math.nan), -np.array(math.nan, ml_dtypes.float8_e4m3fn)[()]):
        why = explain(value, "E5M2")
        assert why.code == 0xFE and str(why).startswith("E5M2 encoding of -nan (nearest_even)")
    why = explain(1.3, "E4M3", rounding="stochastic", random_bits=15, random_bit_count=4)
    assert str(why).startswith("E4M3 encoding of 1.3 (stochastic, random_bits=15, random_bit_count=4): 0x3B")


def test_describe_code_gives_the_fnuz_nan_no_sign():
    """A review of explain: the FNUZ formats' one NaN, 0x80, read "sign 1: -", as if a negative NaN
    existed there; formats with NaNs of both signs keep theirs."""
    for name in ("E4M3FNUZ", "E5M2FNUZ"):
        assert describe_code(0x80, name).splitlines()[1] == (
            "  sign      1: none (the format's one NaN, whose pattern has this bit set)")
    assert describe_code(0xFF, "E4M3").splitlines()[1] == "  sign      1: -"
    assert describe_code(0x7F, "E4M3").splitlines()[1] == "  sign      0: +"


def test_the_help_says_a_decimal_value_is_read_as_float64(capsys):
    """A review's find: 1.0625000001 explains as float64 (0x39), while a kernel's float32 constant of that
    spelling is 1.0625 (0x38); the help said only "a float". It says how VALUE is read, and the float32
    value, given exactly, explains as the kernel sees it."""
    from minifp8 import explain as module
    with pytest.raises(SystemExit):
        module.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "read as a float64 (a Python float; beyond its range, exactly; a kernel's float32 constant may be" in shown
    assert module.explain(1.0625000001, "E4M3").code == 0x39
    assert module.explain(np.float32(1.0625000001), "E4M3").code == 0x38


# ---- found by a second mutation audit of minifp8/explain.py: each test fails on a mutant that passed the rest ----
def test_each_special_rule_cites_its_source_and_says_when_a_sign_is_dropped():
    # E8M0 is unsigned (OCP MX v1.0 section 5.4.1): a negative NaN gives its one NaN, 0xFF, without its sign
    why = explain(-math.nan, "E8M0")
    assert (why.code, why.case) == (0xFF, "nan") and why.rule.endswith("; its sign is not kept")
    assert "sign" not in explain(math.nan, "E8M0").rule
    # the FNUZ formats have no -0 (ONNX Cast-19: its pattern is the NaN): -0.0 gives +0 and says so; +0.0, and
    # -0.0 in E4M3 (which has -0), need no rule
    why = explain(-0.0, "E4M3FNUZ")
    assert (why.code, why.case, why.rule) == (0x00, "zero", "E4M3FNUZ has no -0 (its pattern is NaN): +0")
    assert explain(0.0, "E4M3FNUZ").rule == "" and explain(-0.0, "E4M3").rule == ""
    # E8M0's smallest value is 2^(0 - 127), written as the power of two it is
    assert "every mode gives its smallest value, 2^-127 = " in explain(2.0**-130, "E8M0").rule
    # OFP8 section 5 defines saturation for E5M2 as for E4M3
    assert explain(1e6, "E5M2", saturate=True).rule.endswith("(OCP OFP8 rev 1.0 section 5)")
    # without saturation and without Inf, an overflow is NaN: by MX section 5.4.1 for E8M0, OFP8 section 5 for E4M3
    for x in (1e39, math.inf):
        assert explain(x, "E8M0").rule.endswith("NaN (OCP MX v1.0 section 5.4.1)")
    assert explain(1e6, "E4M3").rule.endswith("NaN (OCP OFP8 rev 1.0 section 5)")
    # OFP8 section 5: E5M2's NaNs are S.11111.{01,10,11} (a non-zero mantissa), E4M3's only S.1111.111
    assert "all-ones exponent and a non-zero mantissa" in explain(math.nan, "E5M2").rule
    assert "S.1111.111" in explain(math.nan, "E4M3").rule


@pytest.mark.parametrize("name, x, max_code", [("E4M3", 480, 0x7E), ("E5M2", 65536, 0x7B)])
def test_max_plus_spacing_overflows_in_every_mode(name, x, max_code):
    """480 = 448 + 32 (E4M3's max 1.75 x 2^8 plus its binade's spacing 2^(8-3)); 65536 = 57344 + 8192 (E5M2:
    1.75 x 2^15 plus 2^(15-2)). Rounded with an unbounded exponent such a number is itself, beyond max: every
    mode overflows (toward_zero to max, IEEE 754-2019 section 7.4), with no upper neighbour and no position
    (the docstring's "from max + spacing on"); it was a "round" to max under toward_zero, at position 1."""
    for rounding in NEAREST_AND_TRUNCATION:
        why = explain(x, name, rounding=rounding)
        assert (why.case, why.upper, why.position, why.rounded) == ("overflow", None, None, None), rounding
    assert explain(x, name, rounding="toward_zero").code == max_code


def test_a_halfway_point_is_a_tie_under_nearest_away_too():
    # 1.0625 lies halfway between 1 (0x38) and 1.125 (0x39); -1.1875 between -1.125 and -1.25 (0 0111 010 with the
    # sign: 0xBA); nearest_away takes the one away from zero, and the case is a tie as under nearest_even
    for x, code in ((1.0625, 0x39), (-1.1875, 0xBA)):
        why = explain(x, "E4M3", rounding="nearest_away")
        assert (why.case, why.code) == ("tie", code) and "case tie" in str(why).splitlines()[0]
    assert explain(1.0625, "E4M3", rounding="toward_zero").case == "round"  # (truncation has no ties)


def test_describe_code_shows_minus_zero_an_unsigned_header_a_subnormal_significand_and_inf():
    # 0x80 = 1 0000 000 in E4M3 is -0 (OFP8 section 5 has both zeros); explain(-0.0) ends on that code line
    assert describe_code(0x80, "E4M3").endswith("-2^(1-7) x (0 + 0/8) = -0")
    assert str(explain(-0.0, "E4M3")).endswith("-2^(1-7) x (0 + 0/8) = -0")
    assert describe_code(0x00, "E4M3").endswith("+2^(1-7) x (0 + 0/8) = 0")
    # E8M0 (MX section 5.4.1): 8 exponent bits, no sign bit, no mantissa; 127 = 0b01111111
    assert describe_code(127, "E8M0").splitlines()[0] == "E8M0 code 0x7F: exponent 01111111, no mantissa (unsigned)"
    assert "unsigned" not in describe_code(127, "E4M3")
    # a subnormal's significand is 0.m, a normal's 1.m (OFP8 section 5): 0x01 = 0 0000 001, 0x39 = 0 0111 001
    assert "  mantissa  001 = 1: significand 0 + 1/8" in describe_code(0x01, "E4M3").splitlines()
    assert "  mantissa  001 = 1: significand 1 + 1/8" in describe_code(0x39, "E4M3").splitlines()
    # E5M2's +Inf is 0 11111 00: all-ones exponent, zero mantissa
    assert describe_code(0x7C, "E5M2").splitlines()[-1].endswith("+Inf: all-ones exponent, zero mantissa "
                                                                 "(OCP OFP8 rev 1.0 section 5)")


def test_the_narrative_names_saturate_the_subnormal_range_the_zero_rule_a_neighbour_beyond_max_and_an_exact_code():
    assert str(explain(1000.0, "E4M3", saturate=True)).startswith("E4M3 encoding of 1000.0 (nearest_even, saturate):")
    # E4M3's smallest normal is 2^(1-7) = 2^-6, its subnormal spacing 2^-6 / 8 = 2^-9
    assert "  binade      subnormal range (0, 2^-6): spacing 2^-9" in str(explain(3 * 2.0**-11, "E4M3"))
    # an underflow's rule is the zero it gives (FNUZ: +0, there being no -0)
    lines = str(explain(-(2.0**-12), "E4M3FNUZ")).splitlines()
    assert "  zero        E4M3FNUZ has no -0 (its pattern is NaN): +0" in lines
    # 470 lies (470 - 448) / 32 = 0.6875 of a spacing above 448: up, to 480, which is beyond max
    assert "past the midpoint, up to 480 > max" in str(explain(470, "E4M3"))
    # 1 = 0 0111 000 (0x38): the neighbour's code is the magnitude's, whatever the sign of x
    for x in (1.0, -1.0):
        assert "  neighbours  none needed: 1 is a value of E4M3 (0x38)" in str(explain(x, "E4M3")).splitlines()


@pytest.mark.parametrize("argv, first_line", [
    (["-nan", "E5M2"], "E5M2 encoding of -nan (nearest_even): 0xFE, case nan"),  # a negative VALUE, with no "--"
    # an upper-case hex float: 1.5 x 2^-3 = 0.1875, exponent field -3 + 7 = 0100, mantissa 100
    (["0X1.8P-3", "E4M3"], "E4M3 encoding of 0.1875 (nearest_even): 0x24, case exact"),
    # a decimal exponent of 100,000 is not beyond +-100,000: read exactly (10^-100000 lies between 2^-332193 and
    # 2^-332192, as 100000 x log2(10) = 332192.8...)
    (["1e-100000", "E4M3"], "E4M3 encoding of ~2^-332193 (nearest_even): 0x00, case underflow"),
    (["1e100000", "E4M3", "--rounding", "toward_zero"],
     "E4M3 encoding of ~2^332192 (toward_zero): 0x7E, case overflow"),
])
def test_cli_reads_a_minus_nan_an_upper_case_hex_float_and_a_decimal_exponent_at_the_limit(argv, first_line, capsys):
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0] == first_line


def test_cli_refuses_an_integer_longer_than_python_reads_as_a_value_error(capsys):
    limit = sys.get_int_max_str_digits()
    if limit == 0:
        pytest.skip("this interpreter reads integers of any length")
    with pytest.raises(SystemExit) as exit_info:
        main(["1" * (limit + 1), "E4M3"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("python -m minifp8.explain: error: VALUE: "), err
