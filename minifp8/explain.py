"""Why a number became its code: the derivation of one encoding, step by step.

``explain(0.3, "E4M3")`` says how the scalar encoder `codec.encode_scalar` encodes one number:
the binade and spacing of representable values there, the two representable neighbours of |x|,
where |x| lies between them, the rounding decision, any overflow or special-value rule, and the
bit fields of the resulting code. ``describe_code(0x2A, "E4M3")`` takes one code apart.

The explanation is a second derivation of the encoder, not a transcript of it. It works on the
format's *value grid* (the sorted finite non-negative values of ``fmt.values()``) in exact
`fractions.Fraction` arithmetic: it finds the neighbours of |x| by bisection, measures the
position of |x| between them in units of their spacing and decides from the rounding rule alone.
Above the largest value it also considers ``max + spacing``, the value that an unbounded
exponent would give next: OFP8 rounds first, to the destination precision, and only then checks
for overflow (so 464, the midpoint of 448 and 480, rounds to 448 in E4M3). The derived code is
then checked against `codec.encode_scalar`'s; a difference is a bug and raises RuntimeError.

The cases (`Explanation.case`), exactly one per explanation:

- ``"nan"``: NaN input; NaN stays NaN (a format without NaN raises ValueError, as the codec does).
- ``"not positive"``: zero or a negative number (-Inf too) into E8M0, which is unsigned and has
  no zero (OCP MX v1.0 section 5.4.1): NaN 0xFF, as ml_dtypes casts them.
- ``"infinity"``: +-Inf input: Inf (E5M2), NaN (E4M3; FNUZ, which cannot spell Inf, 0x80), +-max
  when saturating (FNUZ too: ONNX Cast-24) or for a format without NaN (FP6, FP4).
- ``"zero"``: +-0 input; -0.0 keeps its sign where the format has -0 (not FNUZ: +0).
- ``"exact"``: |x| is a value of the format.
- ``"overflow"``: |x| rounds beyond the largest finite value: Inf or NaN, or +-max with
  ``saturate=True``, for ``rounding="toward_zero"`` (IEEE 754-2019 section 7.4) and for formats
  without NaN (no Inf or NaN: OCP MX v1.0 section 5.3; clamped to the largest normal: section
  6.3).
- ``"underflow"``: a non-zero number that rounds to zero (a negative one to -0, or +0 in FNUZ).
- ``"below smallest"``: E8M0 below 2^-127, its smallest value: 2^-127 in every rounding mode
  (E8M0 has no zero to round to).
- ``"tie"``: |x| lies exactly halfway between its neighbours and the mode rounds to nearest:
  ``nearest_even`` takes the neighbour that is an even multiple of the spacing (the one whose
  last mantissa bit is 0; for E8M0, with no mantissa bits, always the one above, as ml_dtypes
  does), ``nearest_away`` the one above.
- ``"round"``: any other rounding to a neighbour.

Whether |x| lies in the subnormal range, where the spacing is that of the lowest normal binade,
is a separate field, `Explanation.subnormal`.

Sources: OCP 8-bit Floating Point Specification (OFP8) rev 1.0, section 5 (E4M3, E5M2: values,
NaN, Inf, saturation); OCP Microscaling Formats (MX) v1.0, sections 5.3 (FP6, FP4) and 5.4.1
(E8M0); ONNX Cast-19 and Cast-24 (the FNUZ formats); the IEEE P3109 interim report (stochastic rounding).

Command line::

    python -m minifp8.explain 0.3 E4M3
    python -m minifp8.explain 3/10 E4M3 --rounding toward_zero
    python -m minifp8.explain 1.1 E4M3 --rounding stochastic --random-bits 11 --random-bit-count 4
    python -m minifp8.explain 0x2A E4M3 --code

From Python: ``from minifp8.explain import explain, describe_code``.
"""
from __future__ import annotations

import math
import re
import sys
from bisect import bisect_left
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from . import formats
from ._cli import Parser, exit_status_of
from .codec import ROUNDING_MODES, _as_numeric_array, _check_scalar_rounding, _floor_log2, encode_scalar
from .formats import FloatFormat

__all__ = ["Explanation", "describe_code", "explain", "main"]

_NAMED_OPTIONS = "(nearest_even, nearest_away, toward_zero, stochastic)"


@dataclass(frozen=True)
class Explanation:
    """How one number encodes: the facts of the derivation (`explain` builds it; ``str()`` narrates).

    Magnitudes are exact (`fractions.Fraction`) and non-negative; the codes of the neighbours are
    those of the magnitudes (sign bit clear); `code` carries the sign.

    Attributes
    ----------
    fmt : FloatFormat
        The format.
    format_name : str
        Its name, e.g. ``"E4M3"`` (a property).
    x : int, float or fractions.Fraction
        The input as a Python number (NumPy and ml_dtypes scalars converted exactly).
    input_text : str
        The input as it prints (``str(x)`` of what was passed: ``"0.3"`` for ``np.float32(0.3)``).
    input_type : str
        The input's type: ``"float"``, ``"int"``, ``"Fraction"`` or a NumPy dtype name.
    rounding : str
        The rounding mode.
    saturate : bool
        Whether overflow clamps to +-max.
    random_bits, random_bit_count : int or None
        The random bits of stochastic rounding and their width (None for the other modes).
    negative : bool
        Whether the input has its sign bit set (-0.0 and -NaN too).
    exact : fractions.Fraction or None
        The input exactly (None for NaN and +-Inf).
    lower, upper : fractions.Fraction or None
        The neighbouring magnitudes below and above |x| that the rounding chooses from (both |x|
        itself when it is exact). `upper` may be ``max + spacing``, the value an unbounded
        exponent would give next, which the format cannot spell (its code is then None). None
        where there is no neighbour: NaN and Inf, zero; `lower` for E8M0 below 2^-127, `upper`
        from ``max + spacing`` on (every mode overflows there).
    lower_code, upper_code : int or None
        The codes of `lower` and `upper` (None where they are None or beyond max).
    spacing : fractions.Fraction or None
        The gap between representable values around |x| (the lowest normal binade's in the
        subnormal range; for an exact |x|, the gap to the next value above).
    position : fractions.Fraction or None
        ``(|x| - lower) / spacing``, in [0, 1) (0 when exact; None without both neighbours).
    position_bits : int or None
        For stochastic rounding: `position` rounded to ``random_bit_count`` bits (to nearest,
        ties to even), out of ``2**random_bit_count``; it rounds up when it plus `random_bits`
        reaches ``2**random_bit_count``.
    subnormal : bool
        Whether 0 < |x| < the smallest normal value, where the spacing is the lowest binade's.
    rounded : fractions.Fraction or None
        The magnitude the rounding chose, before the overflow check (None without a choice).
    case : str
        One of ``"nan"``, ``"not positive"``, ``"infinity"``, ``"zero"``, ``"exact"``,
        ``"overflow"``, ``"underflow"``, ``"below smallest"``, ``"tie"``, ``"round"`` (see the
        module docstring).
    rule : str
        The rule that decided a special case, with its source (empty for ordinary rounding).
    code : int
        The code, equal to `codec.encode_scalar`'s.
    value : float
        The code's value, ``fmt.values()[code]`` (NaN for a NaN code).
    """

    fmt: FloatFormat
    x: int | float | Fraction
    input_text: str
    input_type: str
    rounding: str
    saturate: bool
    random_bits: int | None
    random_bit_count: int | None
    negative: bool
    exact: Fraction | None
    lower: Fraction | None
    lower_code: int | None
    upper: Fraction | None
    upper_code: int | None
    spacing: Fraction | None
    position: Fraction | None
    position_bits: int | None
    subnormal: bool
    rounded: Fraction | None
    case: str
    rule: str
    code: int
    value: float

    @property
    def format_name(self) -> str:
        """The format's name, e.g. ``"E4M3"``."""
        return self.fmt.name

    def __str__(self) -> str:
        return _narrative(self)


# ---- the value grid --------------------------------------------------------------------------------
@lru_cache(maxsize=64)
def _grid(fmt: FloatFormat) -> tuple[tuple[Fraction, ...], tuple[int, ...]]:
    """The finite non-negative values of ``fmt`` (exact, ascending) and their codes (sign bit clear)."""
    table = fmt.values()
    pairs = sorted((Fraction(float(table[code])), code) for code in range(1 << fmt.bits)
                   if not code & fmt.sign_mask and math.isfinite(table[code]))
    return tuple(value for value, _ in pairs), tuple(code for _, code in pairs)


@lru_cache(maxsize=64)
def _spacing_above_max(fmt: FloatFormat) -> Fraction:
    """The spacing in the binade of the format's max: ``max`` plus it is the value an unbounded
    exponent would give next (a binade's spacing is ``2**(e - mantissa_bits)``; below the smallest
    normal binade, that binade's)."""
    return Fraction(2) ** (max(_floor_log2(_grid(fmt)[0][-1]), fmt.emin) - fmt.mantissa_bits)


# ---- explain ---------------------------------------------------------------------------------------
def explain(x: int | float | Fraction | np.generic, fmt: str | FloatFormat, *, rounding: str = "nearest_even",
            saturate: bool = False, random_bits: int | None = None,
            random_bit_count: int | None = None) -> Explanation:
    """Explain how one number encodes in ``fmt``: neighbours, position, rounding, code.

    The derivation works on the format's value grid in exact arithmetic (see the module docstring
    for the method and the cases) and is checked against `codec.encode_scalar`.

    Parameters
    ----------
    x : int, float, fractions.Fraction or NumPy scalar
        One number, as `codec.encode_scalar` takes it: a Python int, float or Fraction, or a NumPy
        or ml_dtypes scalar (taken exactly). Arrays are refused, a 0-d one too: pass ``x.item()``.
    fmt : FloatFormat or str
        The format, e.g. ``"E4M3"``.
    rounding : {"nearest_even", "nearest_away", "toward_zero", "stochastic"}
        The rounding mode, as in `codec.encode`.
    saturate : bool
        Clamp overflow to +-max instead of Inf or NaN.
    random_bits : int, optional
        For ``rounding="stochastic"`` only (and required there): one int in
        ``[0, 2**random_bit_count)``.
    random_bit_count : int, optional
        The width of ``random_bits``, in [1, 32] (stochastic only, and required there).

    Returns
    -------
    Explanation
        The facts as fields; ``str()`` gives a short narrative.

    Raises
    ------
    TypeError
        For an array, a str, a bool or another non-number ``x``, and the other TypeErrors of
        `codec.encode_scalar`.
    ValueError
        For an unknown format or rounding mode, NaN into a format without NaN, and random bits
        that are missing, unused or out of range (`codec.encode_scalar`'s checks).
    RuntimeError
        If the derived code differs from `codec.encode_scalar`'s (a bug in one of them).

    Examples
    --------
    >>> from minifp8.explain import explain
    >>> why = explain(1.0625, "E4M3")
    >>> why.case, why.lower, why.upper, why.position, hex(why.code)
    ('tie', Fraction(1, 1), Fraction(9, 8), Fraction(1, 2), '0x38')
    >>> print(explain(0.3, "E4M3"))  # doctest: +NORMALIZE_WHITESPACE
    E4M3 encoding of 0.3 (nearest_even): 0x2A, case round
      input       0.3 (float, exactly 5404319552844595/18014398509481984)
      binade      [2^-2, 2^-1): spacing 2^-5 = 0.03125
      neighbours  0.28125 (0x29) and 0.3125 (0x2A); |x| lies 0.6 of a spacing above 0.28125
      rounding    nearest_even: past the midpoint, up to 0.3125
      code        0x2A = 0 0101 010: +2^(5-7) x (1 + 2/8) = 0.3125
      error       +0.0125 (+4.17% of |x|)
    """
    if isinstance(x, np.ndarray):
        raise TypeError(f"explain takes one number, got an array of shape {x.shape} (dtype {x.dtype}): pass "
                        f"x.item() for a 0-d or 1-element array, or explain each element on its own")
    expected = encode_scalar(x, fmt, rounding, saturate, random_bits, random_bit_count)  # every input check
    random_bits, random_bit_count = _check_scalar_rounding(rounding, random_bits, random_bit_count)  # (as ints)
    fmt = formats.get(fmt)
    number: int | float | Fraction
    if isinstance(x, np.generic):
        number = _as_numeric_array(x).item()  # exact: float16/32/64, ml_dtypes (via float32), integers
        input_type = x.dtype.name
    else:
        number = x
        input_type = type(x).__name__
    facts = _derive(number, fmt, rounding, saturate, random_bits, random_bit_count)
    if facts["code"] != expected:
        raise RuntimeError(f"explain derived code {_hex(facts['code'], fmt)} for {x!r} in {fmt.name} "
                           f"(rounding={rounding!r}, saturate={saturate}), but codec.encode_scalar gives "
                           f"{_hex(expected, fmt)}: a bug in one of them")
    return Explanation(fmt=fmt, x=number, input_text=_input_text(x), input_type=input_type, rounding=rounding,
                       saturate=bool(saturate), random_bits=random_bits, random_bit_count=random_bit_count,
                       value=float(fmt.values()[facts["code"]]), **facts)


def _derive(number: int | float | Fraction, fmt: FloatFormat, rounding: str, saturate: bool,
            random_bits: int | None, random_bit_count: int | None) -> dict:
    """The derivation from the value grid: every field of `Explanation` from ``negative`` to ``code``."""
    is_float = isinstance(number, float)
    negative = bool(np.signbit(number)) if isinstance(number, float) else number < 0
    facts: dict = dict(negative=negative, exact=None, lower=None, lower_code=None, upper=None, upper_code=None,
                       spacing=None, position=None, position_bits=None, subnormal=False, rounded=None, rule="")
    sign = fmt.sign_mask if negative else 0
    if is_float and math.isnan(number):
        keeps_sign = fmt.signed and fmt.nan_style != "negative_zero"
        rule = (f"NaN stays NaN: {_nan_spelling(fmt)}" + ("" if keeps_sign or not negative else
                                                          "; its sign is not kept"))
        return {**facts, "case": "nan", "rule": rule, "code": fmt.nan_code(negative and keeps_sign)}
    if not fmt.signed and (negative or number == 0):
        rule = (f"{fmt.name} is unsigned and has no zero (OCP MX v1.0 section 5.4.1): x <= 0 gives NaN, as "
                f"ml_dtypes casts it")
        return {**facts, "case": "not positive", "rule": rule, "code": fmt.nan_code()}
    values, codes = _grid(fmt)
    largest, largest_code = values[-1], codes[-1]
    if is_float and math.isinf(number):
        code, rule = _beyond_range(fmt, negative, largest_code, infinite=True, rounding=rounding, saturate=saturate)
        return {**facts, "case": "infinity", "rule": rule, "code": code}
    facts["exact"] = exact = Fraction(number)
    magnitude = abs(exact)
    if magnitude == 0:
        zero_code = codes[0] | (sign if fmt.has_negative_zero else 0)
        rule = "" if not negative or fmt.has_negative_zero else f"{fmt.name} has no -0 (its pattern is NaN): +0"
        return {**facts, "case": "zero", "rule": rule, "code": zero_code, "rounded": magnitude}
    facts["subnormal"] = fmt.has_subnormals and magnitude < Fraction(fmt.min_normal)
    index = bisect_left(values, magnitude)
    top_spacing = _spacing_above_max(fmt)
    if index < len(values) and values[index] == magnitude:  # on the grid
        above = values[index + 1] if index + 1 < len(values) else largest + top_spacing
        return {**facts, "case": "exact", "lower": magnitude, "upper": magnitude, "lower_code": codes[index],
                "upper_code": codes[index], "spacing": above - magnitude, "position": Fraction(0),
                "rounded": magnitude, "code": codes[index] | sign}
    if index == 0:  # below the smallest value, with no zero below it (E8M0)
        rule = (f"{fmt.name} has no zero: every mode gives its smallest value, {_power(values[0])} "
                f"(OCP MX v1.0 section 5.4.1)")
        return {**facts, "case": "below smallest", "rule": rule, "upper": values[0], "upper_code": codes[0],
                "rounded": values[0], "code": codes[0] | sign}
    if index == len(values) and magnitude >= largest + top_spacing:  # every rounding lands beyond max
        code, rule = _beyond_range(fmt, negative, largest_code, infinite=False, rounding=rounding, saturate=saturate)
        return {**facts, "case": "overflow", "rule": rule, "lower": largest, "lower_code": largest_code,
                "spacing": top_spacing, "code": code}
    lower, lower_code = values[index - 1], codes[index - 1]
    if index < len(values):
        upper, upper_code = values[index], codes[index]
    else:  # between max and max + spacing: round first, then check for overflow (OFP8 section 5)
        upper, upper_code = largest + top_spacing, None
    spacing = upper - lower
    position = (magnitude - lower) / spacing
    facts.update(lower=lower, lower_code=lower_code, upper=upper, upper_code=upper_code, spacing=spacing,
                 position=position)
    half = Fraction(1, 2)
    if rounding == "nearest_even":
        up = position > half or (position == half and (upper / spacing).numerator % 2 == 0)
    elif rounding == "nearest_away":
        up = position >= half
    elif rounding == "toward_zero":
        up = False
    else:  # stochastic (IEEE P3109): the position rounded to k bits, plus the k random bits, carries out or not
        assert random_bits is not None and random_bit_count is not None  # (encode_scalar checked them)
        facts["position_bits"] = round(position * 2**random_bit_count)  # Fraction rounds half to even
        up = facts["position_bits"] + random_bits >= 2**random_bit_count
    rounded = upper if up else lower
    facts["rounded"] = rounded
    if rounded > largest:
        code, rule = _beyond_range(fmt, negative, largest_code, infinite=False, rounding=rounding, saturate=saturate)
        return {**facts, "case": "overflow", "rule": rule, "code": code}
    if rounded == 0:
        rule = "" if not negative or fmt.has_negative_zero else f"{fmt.name} has no -0 (its pattern is NaN): +0"
        return {**facts, "case": "underflow", "rule": rule, "code": codes[0] | (sign if fmt.has_negative_zero else 0)}
    tie = position == half and rounding in ("nearest_even", "nearest_away")
    chosen_code = upper_code if up else lower_code
    assert chosen_code is not None  # (only an upper beyond max has none, and it overflowed above)
    return {**facts, "case": "tie" if tie else "round", "code": chosen_code | sign}


def _beyond_range(fmt: FloatFormat, negative: bool, largest_code: int, *, infinite: bool, rounding: str,
                  saturate: bool) -> tuple[int, str]:
    """The code of +-Inf or of a finite number that rounds beyond max, and the rule that gives it."""
    sign = fmt.sign_mask if negative else 0
    sign_text = "-" if negative else "+"
    if not fmt.has_nan:
        return largest_code | sign, (f"{fmt.name} has no Inf or NaN (OCP MX v1.0 section 5.3): it saturates "
                                     f"to {sign_text}max (section 6.3)")
    if saturate and infinite and fmt.nan_style == "negative_zero":
        return largest_code | sign, (f"saturate=True: {sign_text}max; {fmt.name} has no Inf, and a saturating "
                                     f"cast takes Inf to max too (ONNX Cast-24, onnx/onnx PR 7130)")
    if saturate:  # (OFP8 defines saturation for its two formats, ONNX Cast-24 for FNUZ; minifp8 extends it)
        source = ("OCP OFP8 rev 1.0 section 5" if fmt.name in ("E4M3", "E5M2") else
                  "ONNX Cast-24's saturate" if fmt.nan_style == "negative_zero" else
                  "the rule OCP OFP8 rev 1.0 section 5 gives E4M3 and E5M2, which minifp8 applies to every format")
        return largest_code | sign, f"saturate=True: {sign_text}max ({source})"
    if not infinite and rounding == "toward_zero":
        return largest_code | sign, (f"toward_zero never turns a finite number into Inf or NaN: {sign_text}max "
                                     f"(IEEE 754-2019 section 7.4)")
    if fmt.has_infinity:
        return fmt.inf_code(negative), f"saturate=False: {sign_text}Inf (OCP OFP8 rev 1.0 section 5)"
    keeps_sign = fmt.signed and fmt.nan_style != "negative_zero"
    where = ("OCP MX v1.0 section 5.4.1" if not fmt.signed else "ONNX Cast-19" if fmt.nan_style == "negative_zero"
             else "OCP OFP8 rev 1.0 section 5")
    lost_sign = "" if keeps_sign or not negative else (
        f"; its sign is not kept ({_hex(fmt.nan_code(), fmt)} is {fmt.name}'s only NaN)")
    return fmt.nan_code(negative and keeps_sign), f"saturate=False and {fmt.name} has no Inf: NaN ({where}){lost_sign}"


def _nan_spelling(fmt: FloatFormat) -> str:
    """How ``fmt`` spells NaN, with the source."""
    if fmt.nan_style == "negative_zero":
        return (f"{fmt.name} spells it {_hex(fmt.nan_code(), fmt)}, the pattern of -0 (the FNUZ formats, as "
                f"ml_dtypes defines them)")
    if fmt.nan_style == "ieee":
        return f"{fmt.name} spells it with an all-ones exponent and a non-zero mantissa (OCP OFP8 rev 1.0 section 5)"
    if not fmt.signed:
        return (f"{fmt.name} spells it {_hex(fmt.nan_code(), fmt)}, its all-ones code (OCP MX v1.0 section "
                f"5.4.1, for E8M0)")
    return f"{fmt.name} spells it S.{'1' * fmt.exponent_bits}.{'1' * fmt.mantissa_bits} (OCP OFP8 rev 1.0 section 5)"


# ---- describing a code -----------------------------------------------------------------------------
def _hex(code: int, fmt: FloatFormat) -> str:
    return f"0x{code:0{(fmt.bits + 3) // 4}X}"


def _fields(code: int, fmt: FloatFormat) -> tuple[int | None, int, int]:
    """The sign bit (None for an unsigned format), exponent field and mantissa field of ``code``."""
    mantissa = code & ((1 << fmt.mantissa_bits) - 1)
    exponent = (code >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    return (code >> (fmt.bits - 1) if fmt.signed else None), exponent, mantissa


def _bit_string(code: int, fmt: FloatFormat) -> str:
    """The code's bits, grouped as sign, exponent, mantissa: ``0 0101 010``."""
    sign, exponent, mantissa = _fields(code, fmt)
    groups = [] if sign is None else [str(sign)]
    groups.append(f"{exponent:0{fmt.exponent_bits}b}")
    if fmt.mantissa_bits:
        groups.append(f"{mantissa:0{fmt.mantissa_bits}b}")
    return " ".join(groups)


def _special(code: int, fmt: FloatFormat) -> str:
    """``"NaN"``, ``"+Inf"`` or ``"-Inf"`` for a special code of ``fmt``, else ``""`` (from the fields
    and the format's NaN style, as OFP8 section 5, MX section 5.4.1 and ONNX Cast-19 spell them)."""
    sign, exponent, mantissa = _fields(code, fmt)
    all_ones_exponent = exponent == (1 << fmt.exponent_bits) - 1
    if fmt.nan_style == "negative_zero" and code == fmt.sign_mask:
        return "NaN"
    if fmt.nan_style == "all_ones" and all_ones_exponent and mantissa == (1 << fmt.mantissa_bits) - 1:
        return "NaN"
    if fmt.nan_style == "ieee" and all_ones_exponent and mantissa:
        return "NaN"
    if fmt.has_infinity and all_ones_exponent:  # (has_infinity needs nan_style "ieee"; without it, a number)
        return "-Inf" if sign else "+Inf"
    return ""


def _formula(code: int, fmt: FloatFormat) -> tuple[str, Fraction | None]:
    """The formula of a finite code's value and the value (exact), or the special's name and None."""
    special = _special(code, fmt)
    if special:
        return special, None
    sign, exponent, mantissa = _fields(code, fmt)
    sign_text = "" if sign is None else "-" if sign else "+"
    subnormal = fmt.has_subnormals and exponent == 0
    exponent_text = f"2^({1 if subnormal else exponent}-{fmt.bias})"
    power = Fraction(2) ** ((1 if subnormal else exponent) - fmt.bias)
    if fmt.mantissa_bits == 0 and not subnormal:
        text, value = f"{sign_text}{exponent_text}", power
    else:
        lead = 0 if subnormal else 1
        text = f"{sign_text}{exponent_text} x ({lead} + {mantissa}/{1 << fmt.mantissa_bits})"
        value = power * (lead + Fraction(mantissa, 1 << fmt.mantissa_bits))
    return text, -value if sign else value


def _code_line(code: int, fmt: FloatFormat) -> str:
    """``0x2A = 0 0101 010: +2^(5-7) x (1 + 2/8) = 0.3125``."""
    formula, value = _formula(code, fmt)
    shown = formula if value is None else f"{formula} = {_show(value, negative_zero=formula.startswith('-'))}"
    return f"{_hex(code, fmt)} = {_bit_string(code, fmt)}: {shown}"


def describe_code(code: int, fmt: str | FloatFormat) -> str:
    """The bit fields of one code and the formula that gives its value.

    Sign, exponent field (with its unbiased exponent), mantissa field, whether the code is normal,
    subnormal, zero or special (NaN, Inf), and its value: ``(-1)^s x 2^(E - bias) x (1 + m/2^M)``
    for a normal code, ``(-1)^s x 2^(1 - bias) x (0 + m/2^M)`` for a subnormal one (OCP OFP8 rev
    1.0 section 5; MX v1.0 section 5.3), ``2^(E - 127)`` for E8M0 (unsigned, no mantissa, no zero;
    0xFF is NaN: MX v1.0 section 5.4.1).

    Parameters
    ----------
    code : int
        One code, in ``[0, 2**fmt.bits)``.
    fmt : FloatFormat or str
        The format.

    Returns
    -------
    str
        A few aligned lines; the last reads ``value  <bits>: <formula> = <value>`` (or the special).

    Raises
    ------
    TypeError
        For a code that is not an int (a bool is not one).
    ValueError
        For an unknown format or a code outside ``[0, 2**fmt.bits)``.

    Examples
    --------
    >>> print(describe_code(0x2A, "E4M3"))
    E4M3 code 0x2A: sign 0, exponent 0101, mantissa 010
      sign      0: +
      exponent  0101 = 5: normal: 2^(5-7) = 2^-2
      mantissa  010 = 2: significand 1 + 2/8
      value     0x2A = 0 0101 010: +2^(5-7) x (1 + 2/8) = 0.3125
    """
    fmt = formats.get(fmt)
    code = formats._check_int(code, "code")
    if not 0 <= code < 1 << fmt.bits:
        raise ValueError(f"{fmt.name} codes lie in [0, {1 << fmt.bits}) (0x0 to {_hex((1 << fmt.bits) - 1, fmt)}), "
                         f"got {code}")
    sign, exponent, mantissa = _fields(code, fmt)
    exponent_bits = f"{exponent:0{fmt.exponent_bits}b}"
    mantissa_bits = f"{mantissa:0{fmt.mantissa_bits}b}" if fmt.mantissa_bits else ""
    header = ([] if sign is None else [f"sign {sign}"]) + [f"exponent {exponent_bits}"]
    header += [f"mantissa {mantissa_bits}"] if fmt.mantissa_bits else ["no mantissa"]
    lines = [f"{fmt.name} code {_hex(code, fmt)}: {', '.join(header)}" + (" (unsigned)" if sign is None else "")]
    special = _special(code, fmt)
    if sign is not None and special == "NaN" and fmt.nan_style == "negative_zero":  # (FNUZ: one NaN, 0x80)
        lines.append(f"  sign      {sign}: none (the format's one NaN, whose pattern has this bit set)")
    elif sign is not None:
        lines.append(f"  sign      {sign}: {'-' if sign else '+'}")
    if special:
        kind = f"special ({special})"
    elif fmt.has_subnormals and exponent == 0:
        kind = (f"{'zero' if mantissa == 0 else 'subnormal'}: 2^(1-{fmt.bias}) = 2^{1 - fmt.bias}, as the lowest "
                f"normal binade")
    else:
        kind = f"normal: 2^({exponent}-{fmt.bias}) = 2^{exponent - fmt.bias}"
    lines.append(f"  exponent  {exponent_bits} = {exponent}: {kind}")
    if fmt.mantissa_bits:
        lead = 0 if fmt.has_subnormals and exponent == 0 else 1
        significand = "" if special else f": significand {lead} + {mantissa}/{1 << fmt.mantissa_bits}"
        lines.append(f"  mantissa  {mantissa_bits} = {mantissa}{significand}")
    if special == "NaN":
        lines.append(f"  value     {_code_line(code, fmt)}: {_nan_spelling(fmt)}")
    elif special:
        lines.append(f"  value     {_code_line(code, fmt)}: all-ones exponent, zero mantissa (OCP OFP8 rev 1.0 "
                     f"section 5)")
    else:
        lines.append(f"  value     {_code_line(code, fmt)}")
    return "\n".join(lines)


# ---- the narrative ---------------------------------------------------------------------------------
_LONGEST_EXACT_BITS = 1024  # (a numerator or denominator longer than this prints as a power of two)


def _about(value: Fraction) -> str:
    """A non-zero value too long to print exactly, or beyond float64: ``~2^1993``."""
    return f"{'-' if value < 0 else ''}~2^{_floor_log2(abs(value))}"


def _too_long(value: Fraction) -> bool:
    return max(value.numerator.bit_length(), value.denominator.bit_length()) > _LONGEST_EXACT_BITS


def _show(value: Fraction, negative_zero: bool = False) -> str:
    """A value as a learner reads it: ``448``, ``0.3125``, ``5.877471754111438e-39``, ``3/10``, ``-0``
    (``~2^-1329`` where it is too long to print exactly)."""
    if value == 0:
        return "-0" if negative_zero else "0"
    if _too_long(value):
        return _about(value)
    if value.denominator == 1 and abs(value) < 10**16:
        return str(value.numerator)
    as_float = float(value)
    return repr(as_float) if Fraction(as_float) == value else f"{value.numerator}/{value.denominator}"


def _decimal(value: Fraction, digits: int, sign: bool = True) -> str:
    """``value`` to ``digits`` significant digits (with its sign); ``~2^e`` beyond float64's range."""
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if value != 0 and (as_float == 0 or math.isinf(as_float)):
        return ("+" if sign and value > 0 else "") + _about(value)
    return f"{as_float:{'+' if sign else ''}.{digits}g}"


def _input_text(x: object) -> str:
    """The input as it prints; ``~2^e`` for an int or Fraction too long to print (`_LONGEST_EXACT_BITS`)."""
    if isinstance(x, (int, Fraction)) and not isinstance(x, bool) and _too_long(Fraction(x)):
        return _about(Fraction(x))
    if isinstance(x, (float, np.generic)) and not isinstance(x, (np.integer, np.bool_)):
        number = float(x)  # (ml_dtypes' scalars, such as bfloat16, are np.generic but not np.floating)
        if math.isnan(number) and math.copysign(1.0, number) < 0:
            return "-nan"  # (str drops a NaN's sign, which its code keeps)
    return str(x)


def _power(value: Fraction) -> str:
    """``2^-5 = 0.03125`` for a power of two, else the value."""
    e = _floor_log2(value)
    return f"2^{e} = {_show(value)}" if Fraction(2) ** e == value else _show(value)


def _narrative(why: Explanation) -> str:
    fmt = why.fmt
    options = why.rounding + (", saturate" if why.saturate else "")
    if why.rounding == "stochastic":
        options += f", random_bits={why.random_bits}, random_bit_count={why.random_bit_count}"
    hex_code = _hex(why.code, fmt)
    lines = [f"{why.format_name} encoding of {why.input_text} ({options}): {hex_code}, case {why.case}"]
    described = f"{why.input_text} ({why.input_type}"
    if why.exact is not None and not _too_long(why.exact) and _exactly_as_written(why) != why.exact:
        # (an integer in full: _show writes a large one as its float, "1e+30", the text it differs from)
        exactly = (_show(why.exact) if _too_long(why.exact)
                   else str(why.exact.numerator) if why.exact.denominator == 1 else str(why.exact))
        described += f", exactly {exactly}"
    lines.append(f"  input       {described})")
    code_text = _code_line(why.code, fmt)
    if why.case in ("nan", "not positive", "infinity", "zero"):
        if why.rule:
            lines.append(f"  rule        {why.rule}")
        lines.append(f"  code        {code_text}")
        return "\n".join(lines)
    assert why.exact is not None  # (every other case is a finite non-zero number)
    magnitude = abs(why.exact)
    if why.spacing is not None:  # (E8M0 below its smallest value has no binade of its own)
        e = _floor_log2(magnitude)
        where = f"subnormal range (0, 2^{fmt.emin})" if why.subnormal else f"[2^{e}, 2^{e + 1})"
        lowest = ", the lowest normal binade's" if why.subnormal else ""
        if why.case == "overflow" and why.upper is None:  # (beyond max + spacing: max's binade's spacing)
            top = _floor_log2(why.lower) if why.lower else e
            lowest = f", that of max's binade [2^{top}, 2^{top + 1})"
        lines.append(f"  binade      {where}: spacing {_power(why.spacing)}{lowest}")
    lines.append(f"  neighbours  {_neighbours(why)}")
    decision = _decision(why)
    if decision:
        lines.append(f"  rounding    {decision}")
    if why.rule:
        label = {"overflow": "overflow", "underflow": "zero"}.get(why.case, "rule")
        lines.append(f"  {label:<10}  {why.rule}")
    lines.append(f"  code        {code_text}")
    if math.isfinite(why.value):
        error = Fraction(why.value) - why.exact
        percent = f" ({_decimal(error / magnitude * 100, 3)}% of |x|)" if error else ""
        lines.append(f"  error       {'0 (exact)' if not error else _decimal(error, 6)}{percent}")
    return "\n".join(lines)


def _exactly_as_written(why: Explanation) -> Fraction | None:
    """The input's text read as an exact number, when it is one (``"0.3"`` -> 3/10)."""
    try:
        return Fraction(why.input_text)
    except (ValueError, ZeroDivisionError):
        return None


def _neighbour(value: Fraction | None, code: int | None, why: Explanation) -> str:
    if value is None:
        return "none"
    if code is None:
        return f"{_show(value)} (beyond max: no code)"
    return f"{_show(value)} ({_hex(code, why.fmt)})"


def _neighbours(why: Explanation) -> str:
    if why.case == "exact":
        assert why.lower is not None and why.lower_code is not None
        return f"none needed: {_show(why.lower)} is a value of {why.format_name} ({_hex(why.lower_code, why.fmt)})"
    if why.case == "below smallest":
        return f"none below; {_neighbour(why.upper, why.upper_code, why)} is the smallest value"
    if why.upper is None:  # from max + spacing on
        assert why.lower is not None and why.spacing is not None
        return (f"{_neighbour(why.lower, why.lower_code, why)} is the largest value; |x| >= "
                f"{_show(why.lower + why.spacing)} = max + spacing")
    assert why.position is not None and why.lower is not None
    return (f"{_neighbour(why.lower, why.lower_code, why)} and {_neighbour(why.upper, why.upper_code, why)}; "
            f"|x| lies {_position_text(why.position)} of a spacing above {_show(why.lower)}")


def _position_text(position: Fraction) -> str:
    """Where |x| lies between its neighbours, in spacings, to 4 digits; a position that would print
    as ``0.5`` or ``1`` without being it is written against it (``1/2 + 2^-41``, ``1 - 2^-40``), so
    that "past the midpoint" and "short of it" can be read off it (float64 golden inputs lie there)."""
    text = _decimal(position, 4, sign=False)
    if text.startswith("~"):  # (~2^-2984: beyond float64, nowhere near 1/2 or 1)
        return text
    anchor = Fraction(float(text))
    if position == anchor or anchor not in (Fraction(1, 2), 1):
        return text
    offset = abs(position - anchor)
    e = _floor_log2(offset)
    amount = f"2^{e}" if Fraction(2) ** e == offset else _decimal(offset, 4, sign=False)
    return f"{'1/2' if anchor < 1 else '1'} {'+' if position > anchor else '-'} {amount}"


def _decision(why: Explanation) -> str:
    """The rounding decision in words (empty where there is nothing to decide)."""
    if why.case in ("exact", "below smallest"):
        return ""
    if why.rounded is None:
        assert why.lower is not None and why.spacing is not None
        return f"{why.rounding}: every mode rounds to {_show(why.lower + why.spacing)} or beyond, past max"
    assert why.lower is not None and why.upper is not None and why.position is not None and why.spacing is not None
    up = why.rounded == why.upper and why.rounded != why.lower
    target = f"{'up' if up else 'down'} to {_show(why.rounded)}"
    if up and why.upper_code is None:
        target += " > max"
    if why.rounding == "toward_zero":
        return f"toward_zero: truncated, {target}"
    if why.rounding == "stochastic":
        k = why.random_bit_count
        assert k is not None and why.random_bits is not None and why.position_bits is not None
        total = why.position_bits + why.random_bits
        carry = f">= {2**k}: carries" if total >= 2**k else f"< {2**k}: no carry"
        return (f"stochastic: {_decimal(why.position, 4, sign=False)} of a spacing is {why.position_bits}/{2**k} in {k} bits; "
                f"{why.position_bits} + {why.random_bits} = {total} {carry}, {target}")
    if why.position == Fraction(1, 2):
        if why.rounding == "nearest_away":
            return f"nearest_away: exactly halfway, away from zero: {target}"
        multiple = why.rounded / why.spacing
        return (f"nearest_even: exactly halfway, to the even multiple of the spacing ({multiple} x "
                f"{_show(why.spacing)}): {target}")
    side = "past the midpoint" if why.position > Fraction(1, 2) else "short of the midpoint"
    return f"{why.rounding}: {side}, {target}"


# ---- the command line ------------------------------------------------------------------------------
#: The largest decimal exponent `_parse_number` reads exactly (1e100000 is a 332,000-bit integer).
_LARGEST_DECIMAL_EXPONENT = 100_000


def _parse_number(text: str) -> int | float | Fraction:
    """A VALUE of the command line: an integer (``448``, ``0x1C0``), a float (``0.3``, ``-0.0``, ``inf``,
    ``nan``, ``1e-3``), a hex float (``0x1.8p-3``) or an exact fraction (``3/10``). A decimal beyond
    float64's range (``1e999``, ``1e-999``) is read exactly, as a Fraction, not as Inf or 0."""
    stripped = text.strip()
    unreadable = (f"VALUE: cannot read {stripped!r} as a number: give a float (0.3, -0.0, inf, nan, 0x1.8p-3), "
                  f"an integer (448) or a fraction (3/10)")
    if "/" in stripped:
        try:
            return Fraction(stripped)
        except (ValueError, ZeroDivisionError) as error:
            raise ValueError(f"VALUE: cannot read {stripped!r} as a fraction p/q ({error})") from None
    try:
        integer = int(stripped, 0)
        return -0.0 if integer == 0 and stripped.startswith("-") else integer  # ("-0": the negative zero)
    except ValueError as error:
        if "limit" in str(error):  # (more digits than sys.get_int_max_str_digits() lets Python read)
            raise ValueError(f"VALUE: {error}") from None
    if stripped.lstrip("+-")[:2].lower() == "0x":  # (float.fromhex alone would read "abc" as 0xabc)
        try:
            value = float.fromhex(stripped)
        except OverflowError:
            raise ValueError(f"VALUE: {stripped!r} lies beyond float64's range: write it as an integer or "
                             f"a fraction") from None
        except ValueError:
            raise ValueError(unreadable) from None
        return value if value != 0 else _exact_hex_below_float64(stripped, value)
    try:
        value = float(stripped)
    except ValueError:
        raise ValueError(unreadable) from None
    if (value == 0 or math.isinf(value)) and "inf" not in stripped.lower():
        exponent = re.search(r"[eE]([+-]?\d+)$", stripped)
        if exponent is not None and abs(int(exponent.group(1))) > _LARGEST_DECIMAL_EXPONENT:
            # (read exactly it would be an integer of millions of digits: minutes of arithmetic)
            raise ValueError(f"VALUE: {stripped!r} has a decimal exponent beyond +-{_LARGEST_DECIMAL_EXPONENT:,}; "
                             f"every format's range lies far inside that (float64's ends at 1e+-308): write a "
                             f"smaller one")
        exact = Fraction(stripped)  # a decimal beyond float64's range (1e999, 1e-999): exactly
        if exact != 0:
            return exact
    return value


def _exact_hex_below_float64(text: str, rounded: float) -> Fraction | float:
    """A hex float that ``float.fromhex`` rounded to 0 (``0x1p-1080``): its exact value, as decimals
    below float64's range are read (a positive one is E8M0's 2**-127, not its NaN for 0); ``rounded``
    (a signed zero) where it is zero itself."""
    match = re.fullmatch(r"([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?\d+))?", text)
    if match is None:
        return rounded
    sign, whole, fraction, exponent = match.groups()
    mantissa = int((whole + (fraction or "")) or "0", 16)
    if mantissa == 0:
        return rounded
    power = int(exponent or 0) - 4 * len(fraction or "")
    if abs(power) > 4 * _LARGEST_DECIMAL_EXPONENT:
        raise ValueError(f"VALUE: {text!r} has a binary exponent beyond +-{4 * _LARGEST_DECIMAL_EXPONENT:,}; "
                         f"every format's range lies far inside that: write a smaller one")
    return (-1 if sign == "-" else 1) * mantissa * Fraction(2) ** power


def _looks_negative_number(token: str) -> bool:
    """Whether a token that starts with "-" is meant as a negative VALUE (``-inf``, ``-1e5``, ``-3/10``,
    ``-1/0``), which argparse would take for a flag: a digit, a point, "inf", "nan" or "0x" follows."""
    return re.match(r"-(\d|\.|inf|nan)", token, re.IGNORECASE) is not None


_FLOAT_BITS: dict[int, np.dtype] = {4: np.dtype(np.float16), 8: np.dtype(np.float32),  # hex digits -> float
                                    16: np.dtype(np.float64)}


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status 0 (explained). Bad input or flags print a one-line
    error and raise ``SystemExit(2)``, as argparse does; ``-h`` raises ``SystemExit(0)``."""
    parser = Parser(
        prog="python -m minifp8.explain",
        description="Explain how one number encodes in a format (or, with --code, what one code means): the "
                    "binade, the two representable neighbours, the rounding decision and the code's bit fields.",
        epilog="VALUE: a float (0.3, -0.0, inf, -inf, nan, 1e-3, 0x1.8p-3), read as a float64 (a Python float; "
               "beyond its range, exactly; a kernel's float32 constant may be another number: give its float32 "
               "value, e.g. as a hex float), an "
               "integer (448) or an exact fraction (3/10). FORMAT: " + ", ".join(formats.CATALOGUE)
               + " or an ml_dtypes name (float8_e4m3fn, ...). Exit status: 0 explained, 2 bad input.",
    )
    parser.add_argument("value", metavar="VALUE", help="the number (with --code: the code, decimal or 0x hex)")
    parser.add_argument("format", metavar="FORMAT", help="the format, e.g. E4M3")
    parser.add_argument("--rounding", default="nearest_even", choices=ROUNDING_MODES,
                        help="the rounding mode (default: nearest_even)")
    parser.add_argument("--saturate", action="store_true", help="clamp overflow to +-max instead of Inf or NaN")
    parser.add_argument("--random-bits", type=int, default=None, metavar="N",
                        help="stochastic rounding's random bits, in [0, 2**K) (needs --rounding stochastic)")
    parser.add_argument("--random-bit-count", type=int, default=None, metavar="K",
                        help="the width of --random-bits, in [1, 32] (needs --rounding stochastic)")
    parser.add_argument("--code", action="store_true", help="VALUE is a code: print its bit fields and value")
    arguments = list(sys.argv[1:] if argv is None else argv)
    # A leading space keeps a negative VALUE (-inf, -1e5, -3/10) from being read as a flag; VALUE ignores it.
    args = parser.parse_args([" " + token if _looks_negative_number(token) else token for token in arguments])
    try:
        fmt = formats.get(args.format)
    except ValueError as error:
        parser.error(f"FORMAT: {error}")
    if args.code:
        if args.rounding != "nearest_even" or args.saturate or args.random_bits is not None \
                or args.random_bit_count is not None:
            parser.error("--code describes a code: it takes no --rounding, --saturate or --random-bits")
        try:
            code = int(args.value.strip(), 0)
        except ValueError:
            parser.error(f"--code: VALUE must be an integer code (decimal or 0x hex), got {args.value.strip()!r}")
        try:
            print(describe_code(code, fmt))
        except ValueError as error:
            parser.error(f"--code: {error}")
        return 0
    try:
        number = _parse_number(args.value)
        why = explain(number, fmt, rounding=args.rounding, saturate=args.saturate, random_bits=args.random_bits,
                      random_bit_count=args.random_bit_count)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    print(why)
    hex_text = args.value.strip().lstrip("+-")[:2].lower() == "0x"
    if hex_text and isinstance(number, int) and abs(number) < 1 << fmt.bits:  # (a code pasted from a report)
        print(f"note: {args.value.strip()} was read as the number {number}; for what the code "
              f"{args.value.strip()} means, add --code", file=sys.stderr)
    digits = args.value.strip().lstrip("+")[2:]  # (a float's bits carry no minus sign: "-0x..." is a number)
    if hex_text and isinstance(number, int) and number >= 0 and len(digits) in _FLOAT_BITS \
            and (number >= 1 << fmt.bits or len(digits) > fmt.bits // 4):  # (0x00000001: a float32's bits too)
        # (the bits of a float, as a report's "input bits" column shows them: the value they hold, exactly)
        dtype = _FLOAT_BITS[len(digits)]
        held = float(np.array(number, f"u{dtype.itemsize}").view(dtype))
        text = _input_text(held) if math.isnan(held) else held.hex()  # (float.hex drops a NaN's sign)
        print(f"note: {args.value.strip()} was read as the number {number}; if it is the bits of a {dtype.name} (a "
              f"report's input bits), explain the value they hold: python -m minifp8.explain {text} "
              f"{args.format}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(exit_status_of(main))  # (status 141, quietly, under `| head`)
