"""Randomly drawn custom formats against an independent exact reference.

The codec is generic: every `FloatFormat` the constructor accepts must decode and encode bit-exactly.
Here a seeded generator draws formats from the whole accepted parameter space (every shape of
signedness, exponent and mantissa width, NaN style and infinity, each with biases at and between the
edges float32 allows), and each is checked against a reference written from the fields alone:

- a code's value is ``(-1)**s * 2**(1 - bias) * m / 2**M`` (subnormal, exponent field 0) or
  ``(-1)**s * 2**(E - bias) * (1 + m / 2**M)``, except the specials its NaN style and infinity name;
- rounding is to the format's value grid with an unbounded exponent (the grid continues past the
  largest value), and only then is overflow checked (DESIGN.md section 3, OFP8 section 5);
- overflow, Inf, NaN, zero and sign follow the codec's module docstring and DESIGN.md section 3.

All arithmetic is exact: every number is a Python int counting units of 2**-1074 (float64's
smallest subnormal, which divides every float16/32/64 and every format value). The reference shares
no code with minifp8; it walks the sorted grid of values where the codec computes an exponent.
"""
from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from minifp8 import codec, formats

UNIT = 1074  # every number below is an int count of 2**-UNIT
STYLES = ("ieee", "all_ones", "negative_zero", "none")
ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero", "stochastic")


def units(x) -> int:
    """A finite float (any NumPy float or Python float) as an exact int count of 2**-UNIT."""
    numerator, denominator = float(x).as_integer_ratio()  # denominator: a power of two <= 2**1074
    return (numerator << UNIT) // denominator


# ================================================================================================
# The reference
# ================================================================================================
@dataclass(frozen=True)
class Spec:
    """The fields of a format, as the constructor takes them."""
    exponent_bits: int
    mantissa_bits: int
    bias: int
    signed: bool = True
    has_subnormals: bool = True
    has_infinity: bool = False
    nan_style: str = "all_ones"

    def build(self, rng=None) -> formats.FloatFormat:
        """The FloatFormat; with ``rng``, each int field as a random int type that holds it and each
        bool as a Python or NumPy bool (the constructor accepts both)."""
        ints = [self.exponent_bits, self.mantissa_bits, self.bias]
        bools = [self.signed, self.has_subnormals, self.has_infinity]
        if rng is not None:
            kinds = [int, np.int8, np.uint8, np.int16, np.int64, np.uint64]
            ints = [rng.choice([k for k in kinds if k is int or np.iinfo(k).min <= v <= np.iinfo(k).max])(v)
                    for v in ints]
            bools = [(bool, np.bool_)[int(rng.integers(2))](b) for b in bools]
        return formats.FloatFormat(f"R{self}", *ints, signed=bools[0], has_subnormals=bools[1],
                                   has_infinity=bools[2], nan_style=self.nan_style)


class Reference:
    """Decode and encode for one `Spec`, from its fields alone, exactly."""

    def __init__(self, spec: Spec):
        self.spec = s = spec
        self.bits = int(s.signed) + s.exponent_bits + s.mantissa_bits
        self.magnitude_bits = s.exponent_bits + s.mantissa_bits
        self.sign_bit = 1 << self.magnitude_bits if s.signed else 0
        self.top_field = (1 << s.exponent_bits) - 1
        self.has_negative_zero = s.signed and s.nan_style != "negative_zero"
        # decoded[code] = (value in units, or "nan" / "inf"; negative)
        self.decoded = [self._decode(code) for code in range(1 << self.bits)]
        finite = [c for c in range(1 << self.magnitude_bits) if isinstance(self.decoded[c][0], int)]
        self.max_code = finite[-1]
        assert finite == list(range(self.max_code + 1))  # specials sit above the finite magnitudes
        # The grid: the value of every finite magnitude code and of the one after the largest, which
        # is where a value rounds when the exponent is unbounded (ignoring that that code is special).
        self.grid = [self.plain_value(c) for c in range(self.max_code + 2)]
        assert self.grid == sorted(set(self.grid))
        self.inf_magnitude = self.top_field << s.mantissa_bits

    def plain_value(self, magnitude_code: int) -> int:
        """The value a magnitude code's fields give, specials ignored, in units."""
        s = self.spec
        field, mantissa = magnitude_code >> s.mantissa_bits, magnitude_code & ((1 << s.mantissa_bits) - 1)
        if s.has_subnormals and field == 0:
            significand, exponent = mantissa, 1 - s.bias
        else:
            significand, exponent = (1 << s.mantissa_bits) + mantissa, field - s.bias
        return significand << (exponent - s.mantissa_bits + UNIT)

    def _decode(self, code: int):
        s = self.spec
        negative = bool(code & self.sign_bit)
        magnitude = code & ((1 << self.magnitude_bits) - 1)
        field, mantissa = magnitude >> s.mantissa_bits, magnitude & ((1 << s.mantissa_bits) - 1)
        if s.nan_style == "ieee" and field == self.top_field and mantissa != 0:
            return "nan", negative
        if s.nan_style == "all_ones" and magnitude == (1 << self.magnitude_bits) - 1:
            return "nan", negative
        if s.nan_style == "negative_zero" and code == self.sign_bit:
            return "nan", negative
        if s.has_infinity and field == self.top_field and mantissa == 0:
            return "inf", negative
        return self.plain_value(magnitude), negative

    # ---- special codes ------------------------------------------------------------------------
    def nan_code(self, negative: bool) -> int:
        s = self.spec
        if s.nan_style == "negative_zero":
            return self.sign_bit
        sign = self.sign_bit if negative else 0
        if s.nan_style == "all_ones":
            return sign | ((1 << self.magnitude_bits) - 1)
        return sign | self.inf_magnitude | (1 << (s.mantissa_bits - 1))  # ieee: the quiet NaN

    def overflow_code(self, negative: bool, saturate: bool) -> int:
        s = self.spec
        sign = self.sign_bit if negative else 0
        if saturate or s.nan_style == "none":  # (FNUZ's Inf too: ONNX Cast-24)
            return self.max_code | sign
        return self.inf_magnitude | sign if s.has_infinity else self.nan_code(negative)

    # ---- rounding -------------------------------------------------------------------------------
    def round_magnitude(self, magnitude: int, rounding: str, random_bits: int, random_bit_count: int) -> int:
        """The magnitude code a positive ``magnitude`` (units) rounds to; above max_code: overflow."""
        grid = self.grid
        if magnitude >= grid[-1]:
            return len(grid)  # at or past the value after max: beyond max in every mode
        if magnitude < grid[0]:
            return 0  # unsigned only (a signed grid starts at 0): below the smallest value is that value
        below = bisect.bisect_right(grid, magnitude) - 1
        low, high = grid[below], grid[below + 1]
        if magnitude == low or rounding == "toward_zero":
            return below
        if rounding == "stochastic":  # the fraction, rounded half-even to k bits, plus k random bits
            steps, rest = divmod((magnitude - low) << random_bit_count, high - low)
            steps += 2 * rest > high - low or (2 * rest == high - low and steps % 2 == 1)
            return below + (steps + random_bits >= 1 << random_bit_count)
        if 2 * magnitude != low + high:
            return below + (2 * magnitude > low + high)
        if rounding == "nearest_away":
            return below + 1
        # A tie goes to the neighbour that is an even multiple of the gap between them (low's spacing):
        # the even significand for mantissa_bits >= 1; with no mantissa bits 2**k vs 2**(k+1) goes up,
        # as ml_dtypes' E8M0 does, and 0 vs the smallest value goes to 0.
        assert low % (high - low) == 0
        return below + (low // (high - low)) % 2

    def encode(self, x, rounding="nearest_even", saturate=False, random_bits=0, random_bit_count=1) -> int:
        """The code for one number: a float (NaN, Inf and -0.0 included), an int, or a Fraction that
        is a multiple of 2**-UNIT. ValueError for NaN into a format without NaN."""
        s = self.spec
        if isinstance(x, Fraction):
            negative, magnitude = x < 0, abs(x) * (1 << UNIT)
            assert magnitude.denominator == 1
            magnitude = int(magnitude)
        else:
            x = float(x)
            negative = math.copysign(1.0, x) < 0
            if math.isnan(x):
                if s.nan_style == "none":
                    raise ValueError("no NaN")
                return self.nan_code(negative)
            magnitude = None if math.isinf(x) else units(abs(x))  # None: infinite
        if not s.signed and (negative or magnitude == 0):
            return self.nan_code(False)  # no zero and no negative numbers
        if magnitude is None:
            return self.overflow_code(negative, saturate)
        code = self.round_magnitude(magnitude, rounding, random_bits, random_bit_count) if magnitude else 0
        if code > self.max_code:  # toward_zero never turns a finite number into Inf or NaN
            return self.overflow_code(negative, saturate or rounding == "toward_zero")
        if code == 0 and s.signed and not self.has_negative_zero:
            return 0
        return code | (self.sign_bit if negative else 0)


# ================================================================================================
# The parameter space, as the constructor's docstring and checks state it
# ================================================================================================
def rule_broken(signed, exponent_bits, mantissa_bits, has_subnormals, has_infinity, nan_style):
    """The message fragment of the first rule (in formats.FloatFormat's order) these fields break,
    else None. The bias rule is checked separately (`bias_range`)."""
    if exponent_bits < 1 or mantissa_bits < 0:
        return "exponent_bits >= 1 and mantissa_bits >= 0"
    if not 1 <= int(signed) + exponent_bits + mantissa_bits <= 8:
        return "1 to 8 bits"
    if has_infinity and nan_style != "ieee":
        return "infinity is only supported with IEEE-style NaNs"
    if nan_style == "ieee" and mantissa_bits == 0:
        return "needs mantissa_bits >= 1"
    if signed and not has_subnormals:
        return "signed format needs has_subnormals=True"
    if not signed and (has_subnormals or nan_style != "all_ones"):
        return "unsigned format must be an E8M0-style scale format"
    return None


def shapes():
    """Every (signed, exponent_bits, mantissa_bits, has_subnormals, has_infinity, nan_style) the rules
    accept, whatever the bias."""
    every = itertools.product((True, False), range(1, 9), range(0, 8), (True, False), (True, False), STYLES)
    return [fields for fields in every if rule_broken(*fields) is None]


def spec_of(shape, bias) -> Spec:
    signed, exponent_bits, mantissa_bits, has_subnormals, has_infinity, nan_style = shape
    return Spec(exponent_bits, mantissa_bits, bias, signed, has_subnormals, has_infinity, nan_style)


def bias_range(shape):
    """The biases for which every value is a float32 (decode returns float32), from the values at
    bias 0: the lowest set bit of any value must stay >= 2**-149 and the largest value < 2**128.
    None when the shape has no positive finite value at all."""
    reference = Reference(spec_of(shape, 0))
    positive = [v for v in reference.grid[:-1] if v > 0]
    if not positive:
        return None
    lowest_bit = min((v & -v).bit_length() - 1 for v in positive) - UNIT
    highest_bit = max(positive).bit_length() - 1 - UNIT
    return highest_bit - 127, lowest_bit + 149


SHAPES = [shape for shape in shapes() if bias_range(shape) is not None]


def edge_biases(shape) -> dict[str, int]:
    """The ends of the shape's bias range, their neighbours, and the two biases where the finest
    rounding boundary (half the smallest gap between values) is 2**-133 and 2**-134: float32's
    subnormals with a zero lower half are the multiples of 2**-133, where a table indexed by the
    upper 16 bits of a float32 stops telling boundaries apart. Those in the range, by name."""
    low, high = bias_range(shape)
    grid = Reference(spec_of(shape, 0)).grid
    finest_half_gap = min(b - a for a, b in zip(grid, grid[1:])).bit_length() - 2 - UNIT  # at bias 0
    edges = {"low": low, "high": high, "low + 1": low + 1, "high - 1": high - 1,
             "2**-133": finest_half_gap + 133, "2**-134": finest_half_gap + 134}
    return {name: bias for name, bias in edges.items() if low <= bias <= high}


def draw_specs(seed: int, biases_per_shape: int) -> list[Spec]:
    """For every accepted shape, ``biases_per_shape`` biases: alternately one of its `edge_biases`
    and a uniform draw from its range."""
    rng = np.random.default_rng(seed)
    specs = []
    for shape in SHAPES:
        low, high = bias_range(shape)
        edges = sorted(set(edge_biases(shape).values()))
        for i in range(biases_per_shape):
            bias = edges[int(rng.integers(len(edges)))] if i % 2 == 0 else int(rng.integers(low, high + 1))
            specs.append(spec_of(shape, bias))
    return specs


# ================================================================================================
# The probes
# ================================================================================================
def probe_magnitudes(reference: Reference, rng, sample: int | None) -> np.ndarray:
    """float64 magnitudes: grid values, midpoints (ties), a random point between neighbours, values
    past the largest and below the smallest. ``sample`` limits how many neighbour pairs (plus the
    three at each end) are taken."""
    grid = [Fraction(v, 1 << UNIT) for v in reference.grid]
    pairs = list(range(len(grid) - 1))
    if sample is not None and len(pairs) > sample + 6:
        middle = rng.choice(pairs[3:-3], size=sample, replace=False)
        pairs = pairs[:3] + sorted(int(i) for i in middle) + pairs[-3:]
    points = []
    for i in pairs:
        low, high = grid[i], grid[i + 1]
        points += [low, (low + high) / 2, low + (high - low) * Fraction(int(rng.integers(1, 1 << 20)), 1 << 20)]
    smallest = grid[1] if grid[0] == 0 else grid[0]
    points += [grid[-1], grid[-1] * 3 / 2, grid[-1] * 2, grid[-1] * 1024,
               smallest / 2, smallest / 4, smallest * 3 / 4, Fraction(1, 1 << 1074), Fraction(0)]
    return np.array([float(p) for p in points])  # each exact: <= 29 significant bits, in float64's range


def inputs_in(magnitudes: np.ndarray, dtype) -> np.ndarray:
    """The magnitudes cast to ``dtype`` (rounded where they must be, Inf past its range), with each
    one's neighbours in that dtype, both signs, and NaN, Inf, 0 of both signs and the dtype's extremes."""
    with np.errstate(over="ignore"):
        x = magnitudes.astype(dtype)
    info = np.finfo(dtype)
    x = np.concatenate([x, np.nextafter(x, dtype(np.inf)), np.nextafter(x, dtype(0)),
                        [info.max, info.smallest_subnormal, info.smallest_normal, np.inf, np.nan]]).astype(dtype)
    return np.concatenate([x, -x])


def reference_codes(reference, x, rounding, saturate, random_bits=None, random_bit_count=1) -> np.ndarray:
    bits = np.zeros(x.shape, np.int64) if random_bits is None else random_bits
    return np.array([reference.encode(value, rounding, saturate, int(b), random_bit_count)
                     for value, b in zip(x.tolist(), bits.tolist())], np.uint8)


def random_bits_for(rng, size):
    """``size`` random bits of a random width (1 to 32, ends included), with the extreme values 0
    and 2**k - 1 spread through them."""
    count = int(rng.choice([1, 2, 32, int(rng.integers(1, 33))]))
    bits = rng.integers(0, 1 << count, size=size, dtype=np.uint64).astype(np.uint32)
    bits[::5], bits[1::5] = 0, (1 << count) - 1
    return bits, count


def show(reference, x, got, expected, what) -> str:
    bad = np.flatnonzero(got != expected)
    rows = ", ".join(f"{x[i]!r} -> {got[i]:#04x} (expected {expected[i]:#04x})" for i in bad[:5])
    return f"{reference.spec} {what}: {bad.size} of {x.size} wrong, e.g. {rows}"


# ================================================================================================
# The checks
# ================================================================================================
def check_decode(spec: Spec, fmt: formats.FloatFormat, reference: Reference):
    codes = np.arange(1 << reference.bits, dtype=np.uint8)
    decoded = codec.decode(codes, fmt)
    assert decoded.dtype == np.float32
    special = {"nan": math.nan, "inf": math.inf}
    expected = np.array([special[v] if v in special else float(Fraction(v, 1 << UNIT))
                         for v, _ in reference.decoded])  # each exact: at most 8 significant bits
    expected = np.where([negative for _, negative in reference.decoded], -expected, expected)
    for got in (decoded.astype(np.float64), fmt.values()):
        same = (got == expected) | (np.isnan(got) & np.isnan(expected))
        same &= np.signbit(got) == np.signbit(expected)  # -0, and the sign of NaN: the code's sign bit
        bad = np.flatnonzero(~same)
        assert bad.size == 0, f"{spec}: codes {bad[:5]} decode to {got[bad[:5]]}, expected {expected[bad[:5]]}"
    # the derived fields, as their docstrings define them
    largest = Fraction(reference.grid[-2], 1 << UNIT)
    smallest = Fraction(min(v for v in reference.grid if v > 0), 1 << UNIT)
    assert (fmt.bits, fmt.max_code, Fraction(fmt.max), Fraction(fmt.min_subnormal)) == \
        (reference.bits, reference.max_code, largest, smallest), spec
    assert fmt.emax == math.floor(math.log2(largest)), spec
    assert (fmt.has_negative_zero, fmt.has_nan, fmt.sign_mask) == \
        (reference.has_negative_zero, spec.nan_style != "none", reference.sign_bit), spec
    if spec.nan_style != "none":
        assert fmt.nan_code() == reference.nan_code(False), spec
        if spec.signed:
            assert fmt.nan_code(negative=True) == reference.nan_code(True), spec
    if spec.has_infinity:
        assert (fmt.inf_code(), fmt.inf_code(True)) == (reference.inf_magnitude, reference.inf_magnitude | reference.sign_bit)


def check_encode(spec: Spec, fmt, reference: Reference, rng, sample, dtypes, modes):
    magnitudes = probe_magnitudes(reference, rng, sample)
    for dtype in dtypes:
        if dtype is np.int64:  # the integers among the probes' neighbourhoods, and the largest allowed
            near = np.concatenate([np.floor(magnitudes), np.ceil(magnitudes), [2.0**53]])
            x = np.unique(near[near <= 2.0**53]).astype(np.int64)
            x = np.concatenate([x, -x])
        else:
            x = inputs_in(magnitudes, dtype)
        if spec.nan_style == "none" and np.isnan(x).any():
            with pytest.raises(ValueError, match="NaN cannot be encoded"):
                codec.encode(x, fmt)
            x = x[~np.isnan(x)]
        for rounding, saturate in modes:
            if rounding == "stochastic":
                bits, count = random_bits_for(rng, x.shape)
                got = codec.encode(x, fmt, rounding=rounding, saturate=saturate, random_bits=bits,
                                   random_bit_count=count)
                expected = reference_codes(reference, x, rounding, saturate, bits, count)
            else:
                got = codec.encode(x, fmt, rounding=rounding, saturate=saturate)
                expected = reference_codes(reference, x, rounding, saturate)
            assert got.dtype == np.uint8
            assert np.array_equal(got, expected), show(reference, x, got, expected,
                                                       f"{np.dtype(dtype).name} {rounding} saturate={saturate}")


ALL_MODES = [(rounding, saturate) for rounding in ROUNDINGS for saturate in (False, True)]
FAST_SPECS = draw_specs(seed=20240537, biases_per_shape=2)


def test_the_draw_covers_the_space():
    # Every accepted shape, both signednesses, each NaN style with and without infinity, the widths'
    # and biases' edges: a draw that missed part of the space would check nothing there.
    assert len(FAST_SPECS) >= 300
    seen = {(s.signed, s.nan_style, s.has_infinity) for s in FAST_SPECS}
    assert seen == {(True, style, False) for style in STYLES} | {(True, "ieee", True), (False, "all_ones", False)}
    assert {(s.exponent_bits, s.mantissa_bits) for s in FAST_SPECS if not s.signed} >= {(1, 0), (8, 0), (1, 7)}
    assert {(s.exponent_bits, s.mantissa_bits) for s in FAST_SPECS if s.signed} >= {(1, 0), (7, 0), (1, 6)}
    on_edge = dict.fromkeys(("low", "high", "2**-133", "2**-134"), 0)
    for shape in SHAPES:
        edges = edge_biases(shape)
        biases = {s.bias for s in FAST_SPECS if (s.signed, s.exponent_bits, s.mantissa_bits, s.has_subnormals,
                                                 s.has_infinity, s.nan_style) == shape}
        assert biases & set(edges.values()), shape
        for name in on_edge:
            on_edge[name] += edges.get(name) in biases
    assert min(on_edge.values()) >= 10, on_edge
    assert min(s.bias for s in FAST_SPECS) < -100 and max(s.bias for s in FAST_SPECS) > 140


def test_random_formats_decode_every_code_as_their_fields_say():
    rng = np.random.default_rng(1)
    for spec in FAST_SPECS:
        check_decode(spec, spec.build(rng), Reference(spec))


def test_random_formats_encode_float64_and_int64_exactly_in_every_mode():
    # Every rounding mode, each with saturate drawn per format (it only matters past max and for Inf).
    rng = np.random.default_rng(2)
    for spec in FAST_SPECS:
        modes = [(rounding, bool(rng.integers(2))) for rounding in ROUNDINGS]
        check_encode(spec, spec.build(), Reference(spec), rng, sample=4, dtypes=[np.float64, np.int64], modes=modes)


def test_random_formats_encode_float32_and_float16_exactly():
    # float32 and float16 may take the lookup table, built per format, rounding and saturate (some
    # milliseconds each), so here each format gets one round-to-nearest mode, where the midpoints
    # are boundaries, and saturate drawn at random; the slow sweep takes every mode.
    rng = np.random.default_rng(3)
    for spec in FAST_SPECS:
        mode = (("nearest_even", "nearest_away")[int(rng.integers(2))], bool(rng.integers(2)))
        check_encode(spec, spec.build(), Reference(spec), rng, sample=4, dtypes=[np.float32, np.float16],
                     modes=[mode])


def test_random_formats_encode_scalar_takes_fractions_between_floats():
    # encode_scalar takes exact rationals: a tie plus or minus 2**-1074 (no float holds both), the
    # same next to the overflow threshold, and values below the smallest, must round by where they lie.
    rng = np.random.default_rng(4)
    epsilon = Fraction(1, 1 << UNIT)
    for spec in FAST_SPECS[::3]:
        fmt, reference = spec.build(), Reference(spec)
        grid = [Fraction(v, 1 << UNIT) for v in reference.grid]
        i = int(rng.integers(len(grid) - 1))
        smallest = grid[1] if grid[0] == 0 else grid[0]
        points = [(grid[i] + grid[i + 1]) / 2, (grid[-2] + grid[-1]) / 2, grid[-1], smallest / 2, smallest * 3 / 4]
        for x in [p + d for p in points for d in (-epsilon, 0, epsilon)]:
            for signed_x in ((x, -x) if spec.signed else (x,)):
                for rounding in ("nearest_even", "nearest_away", "toward_zero"):
                    saturate = bool(rng.integers(2))
                    assert codec.encode_scalar(signed_x, fmt, rounding, saturate) == \
                        reference.encode(signed_x, rounding, saturate), (spec, signed_x, rounding, saturate)


def test_numpy_integer_fields_give_the_same_format_as_python_ints():
    # Fields may be NumPy integers; fixed-width arithmetic on them must not wrap (1 - uint8(7) is 250).
    for spec in (Spec(4, 3, 7), Spec(4, 3, 130), Spec(3, 4, -100, nan_style="none"),
                 Spec(8, 0, 127, signed=False, has_subnormals=False)):
        plain = spec.build()
        for kind in (np.int8, np.uint8, np.int16, np.int64):
            if not np.iinfo(kind).min <= spec.bias <= np.iinfo(kind).max:
                continue
            fmt = formats.FloatFormat("N", kind(spec.exponent_bits), kind(spec.mantissa_bits), kind(spec.bias),
                                      signed=np.bool_(spec.signed), has_subnormals=np.bool_(spec.has_subnormals),
                                      nan_style=spec.nan_style)
            assert (fmt.emin, fmt.emax, fmt.max, fmt.min_subnormal) == (plain.emin, plain.emax, plain.max,
                                                                       plain.min_subnormal), (spec, kind)
            assert all(type(getattr(fmt, name)) is int for name in ("exponent_bits", "mantissa_bits", "bias"))
            np.testing.assert_array_equal(fmt.values(), plain.values())
    with pytest.raises(ValueError, match=r"bias must lie in \[-112, 147\]"):
        formats.FloatFormat("N", np.uint8(4), np.uint8(3), np.uint8(200))  # wrapping made this pass


# ---- what the constructor rejects --------------------------------------------------------------
def test_every_field_combination_is_accepted_or_rejected_as_the_rules_say():
    # Each width one past its edges too; an accepted shape is built at the lowest bias it allows.
    for shape in itertools.product((True, False), range(-1, 10), range(-1, 10), (True, False), (True, False), STYLES):
        signed, exponent_bits, mantissa_bits, has_subnormals, has_infinity, nan_style = shape
        broken = rule_broken(*shape)
        biases = None if broken else bias_range(shape)
        options = dict(signed=signed, has_subnormals=has_subnormals, has_infinity=has_infinity, nan_style=nan_style)
        if broken or biases is None:
            with pytest.raises(ValueError, match=broken or "no positive finite value"):
                formats.FloatFormat("X", exponent_bits, mantissa_bits, 0, **options)
        else:
            assert formats.FloatFormat("X", exponent_bits, mantissa_bits, biases[0], **options).bits == \
                int(signed) + exponent_bits + mantissa_bits


def test_the_bias_range_is_exactly_where_every_value_is_a_float32():
    for shape in SHAPES:
        low, high = bias_range(shape)
        for bias in (low, high):
            fmt = spec_of(shape, bias).build()
            assert np.array_equal(fmt.values().astype(np.float32).astype(np.float64), fmt.values(), equal_nan=True)
        for bias in (low - 1, high + 1):
            with pytest.raises(ValueError, match=rf"bias {bias} .* float32 cannot hold: bias must lie in "
                                                 rf"\[{low}, {high}\]"):
                spec_of(shape, bias).build()


# ---- the wide sweep ----------------------------------------------------------------------------
@pytest.mark.slow
def test_many_random_formats_every_probe_every_dtype_every_mode():
    rng = np.random.default_rng(5)
    for spec in draw_specs(seed=7, biases_per_shape=8):
        fmt, reference = spec.build(rng), Reference(spec)
        check_decode(spec, fmt, reference)
        check_encode(spec, fmt, reference, rng, sample=None, dtypes=[np.float64, np.float32, np.float16, np.int64],
                     modes=ALL_MODES)
        codec._float32_tables.cache_clear()  # 2 x 64 KiB per format and mode
