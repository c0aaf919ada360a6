"""Encode, decode and quantize for every `FloatFormat`.

One generic codec serves every format a `FloatFormat` describes. It comes in two forms that the
tests hold equal:

- `encode_scalar` is the *definition*: plain Python on exact rationals, one value at a time,
  written to be read top to bottom.
- `encode` is the vectorised NumPy twin people use. Its exact core works in float64 with
  power-of-two scaling only, so no step rounds; float32 and float16 inputs (and float64 inputs
  whose every value is a float32) take a faster route, two 2^16-entry lookup tables indexed by
  the upper half of the float32 bits: one for inputs whose lower half is zero (they include every
  rounding boundary), one for the rest, which lie inside an interval (the tables themselves are
  built by the exact core and proved by the tests). It serves every format whose rounding
  boundaries have a zero lower half (`_float32_table_is_exact`: all catalogued formats); any
  other format, and stochastic rounding, take the exact core.

Semantics (OFP8 rev 1.0 section 5; ONNX Cast-24):

- Round first, to the destination precision with an unbounded exponent, then check for overflow
  (onnx/onnx#4805). E4M3: 464 rounds to 448 (tie to even); the next float32 above 464 overflows.
- ``saturate=False``: overflow and +-Inf give Inf (E5M2) or NaN (E4M3, FNUZ), as ml_dtypes casts.
- ``saturate=True``: overflow and +-Inf give +-max, and NaN stays NaN. This holds for the FNUZ
  formats too, as ONNX Cast-24 says (onnx/onnx PR 7130; Cast-19 to Cast-23 gave them NaN for Inf).
- FP6/FP4 have no Inf or NaN: overflow and +-Inf always saturate; a NaN input raises ValueError.
- E8M0 (unsigned, no zero): zero, negative numbers and NaN give 0xFF (NaN); values below 2^-127
  give 2^-127; overflow gives 0xFF, or 0xFE (2^127) with ``saturate=True``.
- Every format without mantissa bits (E8M0, or one made by hand such as a signed E3M0): a tie
  between two normal values (1.5 * 2^k) rounds up under ``nearest_even``, as ml_dtypes'
  ``float8_e8m0fnu`` does, so there ``nearest_even`` and ``nearest_away`` differ only on the tie
  between 0 and the smallest value. IEEE 754's ties-to-even cannot decide them (both neighbours'
  one significand digit is 1); gfloat's ``TiesToEven`` takes the even exponent code instead (3.0
  gives 2 there, 4 here).
- ``rounding="toward_zero"`` never turns a finite input into Inf/NaN: a finite overflow gives
  +-max, as IEEE 754-2019 section 7.4 specifies for roundTowardZero.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .formats import FloatFormat, _check_bool, _check_str_choice, _is_int, _plain_array, get

ROUNDING_MODES = ("nearest_even", "nearest_away", "toward_zero", "stochastic")
_EXACT_INTEGER_LIMIT = 2**53  # integers up to this magnitude convert to float64 exactly


# ================================================================================================
# The scalar reference: the definition, one value at a time, in exact arithmetic.
# ================================================================================================
def _floor_log2(value: Fraction) -> int:
    """The integer e with 2**e <= value < 2**(e + 1), for a positive rational: its binade."""
    e = value.numerator.bit_length() - value.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > value else e


def encode_scalar(x: int | float | Fraction | np.generic, fmt: str | FloatFormat, rounding: str = "nearest_even",
                  saturate: bool = False, random_bits: int | None = None,
                  random_bit_count: int | None = None) -> int:
    """Encode one number exactly; the readable definition that `encode` must equal.

    Parameters
    ----------
    x : float, int or fractions.Fraction
        The value (NumPy float16/32/64 and integer scalars too, and ml_dtypes float and integer
        scalars, as in `encode`). Floats (including NaN, Inf and -0.0) are taken exactly.
    fmt : FloatFormat or str
    rounding, saturate, random_bits, random_bit_count
        As in `encode`; ``random_bits`` is one int in ``[0, 2**random_bit_count)``, and both are
        required for (and only allowed with) ``rounding="stochastic"``.

    Returns
    -------
    int
        The code.

    Raises
    ------
    TypeError, ValueError
        As `encode` raises them: for bool, complex, str or other non-numeric x, a non-bool
        ``saturate``, and random bits that are missing, unused or out of range. (Unlike `encode`,
        it takes an int of any size, exactly: a Python int is no float64.)
    """
    fmt = get(fmt)
    random_bits, random_bit_count = _check_scalar_rounding(rounding, random_bits, random_bit_count)
    _check_bool(saturate, "saturate")
    value: int | float | Fraction
    if isinstance(x, np.generic):
        value = _as_numeric_array(x).item()  # exact for float16/32/64, ml_dtypes and integers; encode's TypeErrors
    elif isinstance(x, bool) or not isinstance(x, (int, float, Fraction)):
        raise TypeError(f"x must be a float, int or fractions.Fraction, got {type(x).__name__} {x!r}")
    else:
        value = x
    if isinstance(value, float) and value != value:  # NaN
        if not fmt.has_nan:
            raise ValueError(f"NaN cannot be encoded in {fmt.name}, which has no NaN")
        return fmt.nan_code(negative=np.signbit(value) and fmt.nan_style != "negative_zero")
    negative = bool(np.signbit(value)) if isinstance(value, float) else value < 0
    sign = fmt.sign_mask if negative else 0
    if not fmt.signed and (negative or value == 0):
        return fmt.nan_code()  # E8M0 has neither zero nor negative numbers
    if isinstance(value, float) and abs(value) == float("inf"):
        return _overflow_code(fmt, sign, saturate=saturate or not fmt.has_nan)
    magnitude = abs(Fraction(value))
    if magnitude == 0:
        return sign if fmt.has_negative_zero else 0

    # 1. Find the binade: 2**e <= magnitude < 2**(e+1).
    e = _floor_log2(magnitude)
    # (Far outside the range the answer is known without the exact arithmetic below, which for a
    # Fraction like 10**999999 would work on million-bit integers: above 2**(emax+1) even rounding
    # toward zero leaves a value over max; below a quarter of the smallest subnormal's k random bits'
    # share, the fraction of a quantum rounds to 0 and nothing carries.)
    if e > fmt.emax:
        return _overflow_code(fmt, sign, saturate=saturate or rounding == "toward_zero" or not fmt.has_nan)
    negligible = fmt.emin - fmt.mantissa_bits - (random_bit_count or 0) - 2  # (binades below round as one)
    if e < negligible:
        e = negligible - 1
        magnitude = Fraction(2) ** e  # (the same result)
    # 2. The spacing of representable values there (subnormals share the spacing of the lowest binade).
    quantum = Fraction(2) ** (max(e, fmt.emin) - fmt.mantissa_bits)
    # 3. magnitude = (n + fraction) * quantum, with n an integer and 0 <= fraction < 1.
    n = int(magnitude // quantum)
    fraction = magnitude / quantum - n
    # 4. Round n to an integer: decide whether to move one quantum away from zero.
    if rounding == "nearest_even":
        away = fraction > Fraction(1, 2) or (fraction == Fraction(1, 2) and n % 2 == 1)
    elif rounding == "nearest_away":
        away = fraction >= Fraction(1, 2)
    elif rounding == "toward_zero":
        away = False
    else:  # stochastic, IEEE P3109: the fraction rounded to k bits, plus k random bits, carries out
        assert random_bits is not None and random_bit_count is not None  # (checked above for "stochastic")
        scaled = fraction * 2**random_bit_count
        whole = int(scaled)
        rest = scaled - whole
        whole += rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1)
        away = whole + random_bits >= 2**random_bit_count
    rounded = (n + away) * quantum
    if rounded == 0:
        return sign if fmt.has_negative_zero else 0  # FNUZ: a negative number that rounds to 0 is +0
    if not fmt.has_subnormals and rounded < fmt.min_normal:
        rounded = Fraction(fmt.min_normal)  # E8M0 has no zero: everything tiny is 2**-127
    # 5. Overflow is checked after rounding.
    if rounded > Fraction(fmt.max):
        return _overflow_code(fmt, sign, saturate=saturate or rounding == "toward_zero" or not fmt.has_nan)
    # 6. The code is the one whose decoded value is the rounded value.
    return _code_of_value(fmt)[rounded] | sign


def _overflow_code(fmt: FloatFormat, sign: int, saturate: bool) -> int:
    """The code for a value beyond the format's range (a finite overflow, or +-Inf)."""
    if not fmt.signed and saturate:
        return fmt.max_code
    if not fmt.signed:
        return fmt.nan_code()
    if saturate:
        return fmt.max_code | sign
    return fmt.inf_code(sign != 0) if fmt.has_infinity else fmt.nan_code(sign != 0 and fmt.nan_style != "negative_zero")


@lru_cache(maxsize=256)  # (about 12 KiB a format: a sweep of custom formats must not keep them all)
def _code_of_value(fmt: FloatFormat) -> dict:
    """Exact value -> code for the non-negative finite codes (the reverse of the decode table)."""
    table = fmt.values()
    return {Fraction(float(table[c])): c for c in range(fmt.max_code + 1) if table[c] >= 0 or not fmt.signed}


# ================================================================================================
# The vectorised twin.
# ================================================================================================
def encode(x: ArrayLike, fmt: str | FloatFormat, *, rounding: str = "nearest_even", saturate: bool = False,
           random_bits: ArrayLike | None = None, random_bit_count: int | None = None) -> np.ndarray:
    """Encode numbers to the codes of a low-precision format.

    Parameters
    ----------
    x : array_like
        float16, float32, float64 or integer values (|int| <= ``2**53``), any shape, views included.
        float64 is rounded once, exactly (no double rounding through float32). ml_dtypes floats
        (bfloat16, ``float8_*``, ``float6_*``, ``float4_*``) are taken as their float32 values, which are
        exact: the codes are those of ``x.astype(np.float32)``; ml_dtypes' int4, uint4, int2, ...
        are integers. Anything that is not an ndarray (a Python scalar, a list) is converted by
        ``np.asarray`` first, so NumPy picks one dtype for all of it: ``[True, 0.5]`` becomes
        float64 ``[1.0, 0.5]`` and its ``True`` encodes as 1.0, whereas a bool array (or a list of
        bools only) is refused. So is a NumPy masked array, whose mask ``np.asarray`` would drop
        (pass ``x.filled(value)``), here and wherever minifp8 takes a caller's array.
    fmt : FloatFormat or str
        Destination format, e.g. ``"E4M3"`` or ``"float8_e5m2"``.
    rounding : {"nearest_even", "nearest_away", "toward_zero", "stochastic"}
        ``nearest_away`` is microxcaling's "nearest". ``stochastic`` needs ``random_bits``. With no
        mantissa bits, ``nearest_even`` rounds a tie between two normal values up (module docstring).
    saturate : bool
        Clamp overflow to +-max instead of producing Inf/NaN (see the module docstring).
    random_bits : numpy.ndarray of uint8, uint16, uint32 or uint64, optional
        For ``stochastic``: one uniform random integer in ``[0, 2**random_bit_count)`` per element,
        with x's shape. Rounds away from zero when the discarded fraction, rounded to
        ``random_bit_count`` bits, plus ``random_bits`` reaches ``2**random_bit_count``
        (IEEE P3109 "Stochastic"), so the probability is that fraction.
    random_bit_count : int, optional
        Width of ``random_bits``, in ``[1, 32]``; defaults to the width of its unsigned dtype.
        uint64 bits need an explicit count (at most 32).

    Returns
    -------
    numpy.ndarray of uint8
        One code per element, x's shape, in the low ``fmt.bits`` bits. The elements of a view are
        encoded in the order they lie in memory, so the codes of a transposed (or Fortran-order)
        ``x`` are laid out as ``x`` is: ``np.ascontiguousarray`` gives them in C order.

    Raises
    ------
    TypeError
        For bool, complex (ml_dtypes' complex32 too), object or other non-numeric input, a masked
        array, a non-str ``rounding``, a non-bool ``saturate``, or non-unsigned random bits.
    ValueError
        For an unknown format or rounding mode, NaN into a format without NaN, integers too large
        to convert exactly, random bits of the wrong shape or range, or random bits (or their
        count) without ``rounding="stochastic"``.
    """
    fmt = get(fmt)
    _check_rounding(rounding)
    saturate = _check_bool(saturate, "saturate")
    array = _as_numeric_array(x)
    bits = count = None
    if rounding == "stochastic":
        bits, count = _check_random_bits(random_bits, random_bit_count, array.shape)
    else:
        _check_no_random_bits(rounding, random_bits, random_bit_count)
    order = _memory_order(array)
    if order is not None:  # (a transposed view: encoded in the order its elements lie, without a copy)
        codes = _encode_checked(array.transpose(order), fmt, rounding, saturate,
                                None if bits is None else bits.transpose(order), count)
        return codes.transpose(_inverse_order(order))
    return _encode_checked(array, fmt, rounding, saturate, bits, count)


def _encode_checked(array: np.ndarray, fmt: FloatFormat, rounding: str, saturate: bool, bits, count) -> np.ndarray:
    """`encode` of checked arguments: float32 and float16 by table where it is exact, the rest exactly."""
    if rounding != "stochastic" and _float32_table_is_exact(fmt):
        as_float32 = _as_float32_exactly(array)
        if as_float32 is not None:
            if not fmt.has_nan and array.size and np.isnan(as_float32).any():
                raise ValueError(f"NaN cannot be encoded in {fmt.name}, which has no NaN")
            return _encode_float32_by_table(as_float32, fmt, rounding, saturate)
    return _encode_exact_in_slices(_to_float64(array), fmt, rounding, saturate, bits, count)


def _as_float32_exactly(array: np.ndarray) -> np.ndarray | None:
    """``array`` as float32 where every value converts exactly (float16 and float32 always; float64
    holding float32 values, as a float32 tensor widened does, NaNs keeping their sign), else None:
    then the table serves it, 30-40 times faster than the exact path."""
    if array.dtype in (np.float32, np.float16):
        return array.astype(np.float32, copy=False)
    if array.dtype != np.float64 or not array.size:
        return None

    def narrowed_if_exact(values: np.ndarray) -> np.ndarray | None:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # (Inf or 0 then, not equal)
            narrowed = values.astype(np.float32)
        return narrowed if ((narrowed == values) | np.isnan(values)).all() else None

    # the first 4,096 values first: a float64 tensor of other values fails there, at no cost in memory
    return None if narrowed_if_exact(array.flat[:4096]) is None else narrowed_if_exact(array)


def decode(codes: ArrayLike, fmt: str | FloatFormat) -> np.ndarray:
    """Decode codes to float32 values by table lookup (every format's values fit float32 exactly).

    Parameters
    ----------
    codes : array_like of unsigned int
        Codes in ``[0, 2**fmt.bits)``, any shape. An empty array of any real dtype is accepted
        (``np.asarray([])`` is float64): it holds no code to check. A ``bytearray`` or
        ``memoryview`` reads as uint8, one code a byte; ``bytes`` must go through
        ``np.frombuffer(codes, np.uint8)``, since NumPy takes it as one string.
    fmt : FloatFormat or str

    Returns
    -------
    numpy.ndarray of float32
        The codes' shape (a 0-d array for a single code), laid out as they are (see `encode`).

    Raises
    ------
    TypeError
        For codes that are not integers (a non-empty float array, bool, complex, object,
        ``bytes``) or a masked array.
    ValueError
        For an unknown format, or codes outside ``[0, 2**fmt.bits)``.
    """
    fmt = get(fmt)
    _check_float_environment()  # (as encode; and its float32 table, built on first use and kept, would hold
    # flushed values: a review found E8M0's 2**-127 cached as 0 for the rest of the process)
    if isinstance(codes, bytes):  # (bytearray and memoryview already read as uint8)
        raise TypeError("codes is a bytes object, which NumPy reads as one string: "
                        "np.frombuffer(codes, np.uint8) reads it as one code a byte")
    codes = _plain_array(codes, "codes")
    if _ml_dtypes_kind(codes.dtype) == "int":  # (ml_dtypes' uint4, int2, ...: integers, as encode takes them)
        codes = _from_ml_dtypes(codes, "int")
    if codes.size == 0 and codes.dtype.kind in "fiu":
        return np.zeros(codes.shape, np.float32)
    if codes.dtype.kind not in "ui":
        hint = (": codes.view(np.uint8) gives an ml_dtypes array's codes" if codes.dtype.itemsize == 1
                and _ml_dtypes_kind(codes.dtype) == "float" else "")
        raise TypeError(f"codes must be an integer array (uint8), got dtype {codes.dtype}{hint}")
    every_code_valid = codes.dtype == np.uint8 and fmt.bits == 8
    if codes.size and not every_code_valid and (codes.min() < 0 or codes.max() >= (1 << fmt.bits)):
        hint = (" (int8 bytes: codes.view(np.uint8) reads them as codes)" if codes.dtype == np.int8
                and fmt.bits == 8 else "")
        raise ValueError(f"{fmt.name} codes lie in [0, {1 << fmt.bits}), got values in "
                         f"[{codes.min()}, {codes.max()}]{hint}")
    order = _memory_order(codes)
    if order is not None:  # (a transposed view: decoded in the order its codes lie, without a copy)
        return _float32_table(fmt)[codes.transpose(order)].transpose(_inverse_order(order))
    return _float32_table(fmt)[codes.reshape(-1)].reshape(codes.shape)  # indexing would give a scalar for 0-d


def quantize(x: ArrayLike, fmt: str | FloatFormat, **encode_options: Any) -> np.ndarray:
    """The value each input becomes: ``decode(encode(x, fmt, **encode_options), fmt)``, the nearest
    representable one under the default rounding (``nearest_even``), else the one ``rounding`` picks."""
    return decode(encode(x, fmt, **encode_options), fmt)


# ---- input checking ----------------------------------------------------------------------------
def _check_rounding(rounding) -> None:
    _check_str_choice(rounding, "rounding", ROUNDING_MODES)
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {rounding!r}; choose one of {', '.join(ROUNDING_MODES)}")


def _ml_dtypes_kind(dtype: np.dtype) -> str:
    """``"float"``, ``"int"`` or ``"complex"`` for a dtype of ml_dtypes (JAX's narrow types, which
    register with NumPy), ``""`` for any other dtype.

    Recognised without importing ml_dtypes (the package needs NumPy only): by the module of the
    dtype's scalar type, then by name. ``"float"``: bfloat16, float8_*, float6_*, float4_* (16
    bits or fewer; their dtype kind is 'V', except float8_e5m2's 'f'). ``"int"``: int1/2/4 and
    uint1/2/4. ``"complex"``: complex32, bcomplex32.
    """
    if getattr(dtype.type, "__module__", None) != "ml_dtypes":
        return ""
    name = dtype.name
    if name.startswith(("bfloat16", "float")) and dtype.itemsize <= 2:
        return "float"
    if re.fullmatch(r"u?int[1-7]", name):
        return "int"
    return "complex" if "complex" in name else ""


def _from_ml_dtypes(array: np.ndarray, kind: str) -> np.ndarray:
    """An ml_dtypes float array as float32, an ml_dtypes integer array as int8, exactly: every
    computation then sees the very numbers the array holds.

    float32 holds every value of every ml_dtypes float of at most 16 bits: they have at most 8
    exponent bits and 7 mantissa bits (bfloat16, the widest, is float32's upper half), and their
    range lies inside float32's: the largest is bfloat16's (2 - 2**-7) * 2**127 (the float32
    0x7F7F0000), the smallest nonzero bfloat16's subnormal 2**-133 (float32 reaches 2**-149), and
    float8_e8m0fnu spans 2**-127 to 2**127. NaN, Inf and -0 become float32's (float8_e8m0fnu's
    0xFF is NaN). An n-bit integer with n <= 7 lies in [-64, 127]: int8 holds it.
    """
    with np.errstate(invalid="ignore"):  # (ml_dtypes 0.6 flags nothing here, but a cast of a signalling NaN may)
        return array.astype(np.float32 if kind == "float" else np.int8)


def _ml_floats_as_float32(array: np.ndarray) -> np.ndarray:
    """``array`` as float32 if it holds ml_dtypes floats (exactly, `_from_ml_dtypes`), else as it is:
    for the entry points that take floats only."""
    return _from_ml_dtypes(array, "float") if _ml_dtypes_kind(array.dtype) == "float" else array


def _from_ml_dtypes_scalar(value):
    """An ml_dtypes float or integer scalar as the Python float or int of the same value (exact);
    any other ``value`` as it is."""
    if isinstance(value, np.generic) and _ml_dtypes_kind(value.dtype) in ("float", "int"):
        return _as_numeric_array(value).item()
    return value


# (variables, not literals: a constant expression would be folded when the module is compiled)
_SMALLEST_SUBNORMAL, _ONE, _HALF_ULP_OF_ONE, _THREE_QUARTER_ULP_OF_ONE = 5e-324, 1.0, 2.0**-53, 3 * 2.0**-54


def _check_float_environment() -> None:
    """A FloatingPointError unless this thread's CPU keeps subnormals and rounds to nearest even,
    as IEEE 754 arithmetic does by default and minifp8's NumPy arithmetic assumes.

    NumPy computes in the CPU's floating-point mode (x86's MXCSR, Arm's FPCR). Loading a library
    built with ``-ffast-math`` sets flush-to-zero for the whole process (FTZ and DAZ; B. Dolan-Gavitt,
    "Someone's been messing with my subnormals!", 2022, found thousands of PyPI packages that pull
    one in), and so does ``torch.set_flush_denormal(True)``; a C library's ``fesetround`` changes the
    rounding direction. MX and scaled casts would then read float32 subnormals as zero, and the
    training casts (`minifp8.fastcast`, which round by float32 arithmetic) would round about half
    their elements wrongly, without a word. The exact references (``encode``, ``decode``) do not
    compute in floats, but their inputs may already be flushed: they refuse too.
    """
    # In Python floats: the same SSE/Neon arithmetic as NumPy's, without NumPy's error state
    # (np.errstate(under="raise") would turn FTZ's underflow into another error)
    if _SMALLEST_SUBNORMAL * _ONE == 0:  # FTZ flushes the product, DAZ the operand
        raise FloatingPointError(
            "this thread's CPU flushes subnormal floats to zero (FTZ/DAZ), so NumPy would compute float32 "
            "subnormals as 0 and minifp8's answers would be wrong. Something in this process set it: "
            "torch.set_flush_denormal(True), or a library built with -ffast-math (its import sets it "
            "for the whole process). Turn it off (torch.set_flush_denormal(False)), or use that library "
            "in another process.")
    # Round to nearest even: the ties 1 + 2**-53 and -1 - 2**-53 go to 1 and -1 (even), and
    # 1 + 3 * 2**-54 rounds up. Rounding up breaks the first, down the second, toward zero the third
    if _ONE + _HALF_ULP_OF_ONE != _ONE:
        direction = "up"
    elif -_ONE - _HALF_ULP_OF_ONE != -_ONE:
        direction = "down"
    elif _ONE + _THREE_QUARTER_ULP_OF_ONE == _ONE:
        direction = "toward zero"
    else:
        return
    raise FloatingPointError(
        f"this thread's CPU rounds floats {direction} instead of to nearest even, so minifp8's float32 "
        f"arithmetic would round its casts wrongly. Something in this process changed the rounding mode "
        f"(fesetround in a C library): restore it (fesetround(FE_TONEAREST)), or use that library in "
        f"another process.")


def _as_numeric_array(x, name: str = "x") -> np.ndarray:
    """``np.asarray(x)``, or a TypeError naming the argument unless it holds real numbers.

    ml_dtypes floats come back as float32 and ml_dtypes integers as int8, exactly (`_from_ml_dtypes`).
    A FloatingPointError where the CPU flushes subnormals or rounds other than to nearest
    (`_check_float_environment`).
    """
    _check_float_environment()
    array = _plain_array(x, name)
    if isinstance(x, (list, tuple)) and array.dtype == np.float64:
        _check_listed_ints(x, array)
    ml_kind = _ml_dtypes_kind(array.dtype)
    if ml_kind in ("float", "int"):
        return _from_ml_dtypes(array, ml_kind)
    kind = array.dtype.kind
    if kind == "b":
        raise TypeError(f"{name} must hold float16/32/64 or integer values, got "
                        f"{'a NumPy bool scalar' if isinstance(x, np.generic) else 'a bool array'}")
    if kind == "c" or ml_kind == "complex":
        raise TypeError(f"{name} must hold real numbers, got complex values ({array.dtype})")
    if kind == "O" and array.size and all(type(value) in (int, float) for value in array.flat):
        # Python ints beyond int64/uint64 (2**64) leave NumPy with an object array: a range error, not a type error
        _check_exact_ints(array.flat)
    if kind not in "fiu" or array.dtype.itemsize > 8:
        raise TypeError(f"{name} must hold float16, float32, float64 or integer values, got dtype {array.dtype} "
                        f"(ml_dtypes' bfloat16, float8_*, ... and int4, ... are accepted too)")
    if not array.dtype.isnative:  # (big-endian data, read from a file): the same values in this machine's order
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def _check_listed_ints(x, array: np.ndarray) -> None:
    """A ValueError where ``np.asarray`` rounded an int beyond 2**53 (Python's or NumPy's) into ``array``,
    float64 because ``x``, a list or tuple, mixes it with floats: the codec would round it a second
    time (a review's find: ``[3 * 2**52 - 1, 1.0]`` encoded to E8M0's 2**54, not 2**53), where an int
    array is refused. Only where some value of ``array`` lies beyond 2**53, so ordinary lists pay one
    comparison."""
    if (np.abs(array) > _EXACT_INTEGER_LIMIT).any():
        _check_exact_ints(np.asarray(x, dtype=object).flat)


def _check_exact_ints(values: Iterable) -> None:
    """A ValueError naming the int of largest magnitude among ``values`` (Python's or NumPy's; bools
    are not ints here) where it lies beyond 2**53, which float64 cannot hold exactly."""
    largest = max((int(value) for value in values if isinstance(value, (int, np.integer))
                   and not isinstance(value, (bool, np.bool_))), key=abs, default=0)
    if abs(largest) > _EXACT_INTEGER_LIMIT:
        raise ValueError(f"integer inputs must satisfy |x| <= 2**53 to convert exactly, got {largest}")


def _memory_order(x: np.ndarray) -> tuple[int, ...] | None:
    """The axis order in which the elements of a view ``x`` lie in memory (strides decreasing), where
    it is not x's own: transposed to it, x is C-contiguous (a transposed tensor) or copies to
    C order by whole rows (a transposed slice, such as the heads of q split from qkv). None for a
    C-contiguous x, or one already in that order. An elementwise computation on ``x.transpose(order)``,
    transposed back by `_inverse_order`, reads x's elements in memory order instead of copying them."""
    if x.ndim < 2 or x.flags.c_contiguous:
        return None
    order = tuple(sorted(range(x.ndim), key=lambda axis: -abs(x.strides[axis])))  # (a stable sort)
    return None if order == tuple(range(x.ndim)) else order


def _inverse_order(order: tuple[int, ...]) -> list[int]:
    """The axis order that undoes ``transpose(order)``."""
    return sorted(range(len(order)), key=order.__getitem__)


def _to_float64(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind in "iu" and array.size:
        # compared as integers: in float64, 2**53 + 1 would round to 2**53 and pass
        outside = (array > _EXACT_INTEGER_LIMIT) | (array < -_EXACT_INTEGER_LIMIT)
        if outside.any():
            raise ValueError(f"integer inputs must satisfy |x| <= 2**53 to convert exactly, "
                             f"got {array.flat[int(np.argmax(outside))]}")
    with np.errstate(invalid="ignore"):  # signalling NaNs are quieted, as every cast does
        return array.astype(np.float64, copy=False)


def _to_float32(x, name: str = "x") -> np.ndarray:
    """``x`` as float32, for the computations that work in float32 (scaling.py, NVFP4): ml_dtypes
    floats and integers exactly (`_from_ml_dtypes`); bool, complex and object arrays are a
    TypeError, integers beyond 2**53 and finite values beyond float32's range a ValueError
    (`_check_fits`); float64 rounds once."""
    array = _as_numeric_array(x, name)
    if array.dtype.kind in "iu":
        array = _to_float64(array)  # |x| <= 2**53 or a clear error
    with np.errstate(over="ignore", under="ignore"):  # (under: the caller's np.errstate may raise on it)
        converted = array.astype(np.float32, copy=False)
    _check_fits(array, converted, name)
    return converted


def _check_fits(array: np.ndarray, converted: np.ndarray, name: str = "x", consequence: str | None = None) -> None:
    """ValueError where a finite value of ``array`` became Inf in ``converted``, its narrower float copy
    (float32 for the computations that work in float32, the scaled casts, as TransformerEngine's: a
    finite tensor would get amax Inf, scale 1 and values 36 orders of magnitude off, without a word).
    ``consequence`` ends the message (default: the computation works in that dtype)."""
    if converted is array or not converted.size or np.isfinite(converted).all():
        return
    overflowed = np.isinf(converted) & np.isfinite(array)
    if overflowed.any():
        dtype = converted.dtype
        raise ValueError(f"{name} holds finite values beyond {dtype}'s range (|x| <= "
                         f"{float(np.finfo(dtype).max):.8g}), e.g. {array[overflowed].flat[0]!s}: "
                         f"{consequence or f'this computation works in {dtype}, where it would become Inf'}")


def _check_scalar_rounding(rounding, random_bits, random_bit_count) -> tuple[int | None, int | None]:
    """`encode_scalar`'s rounding arguments: ``random_bits`` (one int) and ``random_bit_count`` are
    required for, and only allowed with, ``rounding="stochastic"``. Returns both as Python ints
    (NumPy integers wrap: ``np.uint8(200) + 128`` is 72), or both None."""
    _check_rounding(rounding)
    if rounding != "stochastic":
        _check_no_random_bits(rounding, random_bits, random_bit_count)
        return None, None
    if random_bits is None or random_bit_count is None:
        missing = " and ".join(name for name, value in (("random_bits", random_bits),
                                                        ("random_bit_count", random_bit_count)) if value is None)
        why = " (a Python int carries no width)" if random_bit_count is None else ""
        raise ValueError(f"rounding='stochastic' needs random_bits and random_bit_count: {missing} not given{why}")
    random_bit_count = _check_random_bit_count(random_bit_count, 32)
    if not _is_int(random_bits):
        raise TypeError(f"random_bits must be an int, got {type(random_bits).__name__} {random_bits!r}")
    if not 0 <= random_bits < 1 << random_bit_count:
        raise ValueError(f"random_bits must lie in [0, 2**{random_bit_count}), got {random_bits}")
    return int(random_bits), random_bit_count


def _check_random_bits(random_bits, random_bit_count, shape):
    if random_bits is None:
        raise ValueError("rounding='stochastic' needs random_bits: an unsigned integer array of x's shape")
    bits = _plain_array(random_bits, "random_bits")
    if bits.dtype.kind != "u":
        name = bits.dtype.name
        hint = (f" (ml_dtypes' {name}: .astype(np.uint8), with random_bit_count, the bits per value)"
                if bits.dtype.kind == "V" and name.startswith(("int", "uint"))
                else f" (signed integers, as a list of ints becomes: pass np.asarray(bits, np.uint32) with "
                     f"random_bit_count, the bits per value, or the count defaults to 32)" if bits.dtype.kind == "i"
                else "")
        raise TypeError(f"random_bits must be a NumPy uint8, uint16, uint32 or uint64 array, got dtype "
                        f"{bits.dtype}{hint}")
    if bits.shape != shape:
        raise ValueError(f"random_bits must have x's shape {shape}, got {bits.shape}")
    width = bits.dtype.itemsize * 8
    if random_bit_count is None and width > 32:
        raise ValueError(f"{bits.dtype} random_bits need an explicit random_bit_count <= 32 (their width, {width}, "
                         f"is more than the 32 bits supported), got random_bit_count=None")
    count = _check_random_bit_count(width if random_bit_count is None else random_bit_count, min(width, 32),
                                    f" for {bits.dtype} bits")
    if bits.size and int(bits.max()) >= 1 << count:
        raise ValueError(f"random_bits must lie in [0, 2**{count}), got a value {int(bits.max())}")
    return bits, count  # (their own dtype: the exact path adds them to a float64, a slice at a time)


def _check_random_bit_count(random_bit_count, largest: int, bits_description: str = "") -> int:
    if not _is_int(random_bit_count):
        raise TypeError(f"random_bit_count must be an int, got {type(random_bit_count).__name__} "
                        f"{random_bit_count!r}")
    if not 1 <= random_bit_count <= largest:
        raise ValueError(f"random_bit_count must be an int in [1, {largest}]{bits_description}, "
                         f"got {random_bit_count!r}")
    return int(random_bit_count)


def _check_no_random_bits(rounding, random_bits, random_bit_count) -> None:
    for name, value in (("random_bits", random_bits), ("random_bit_count", random_bit_count)):
        if value is not None:
            raise ValueError(f"{name} is only used with rounding='stochastic', not {rounding!r}")


# ---- the exact core ----------------------------------------------------------------------------
_EXACT_SLICE_ELEMENTS = 1 << 18  # the exact path's temporaries take ~100 bytes an element: big tensors go in slices


def _encode_exact_in_slices(x: np.ndarray, fmt: FloatFormat, rounding, saturate, random_bits,
                            random_bit_count) -> np.ndarray:
    """`_encode_exact`, `_EXACT_SLICE_ELEMENTS` elements at a time (each with its own random bits), so
    that a float64 tensor of 2**26 elements needs megabytes of temporaries, not gigabytes."""
    if x.size <= _EXACT_SLICE_ELEMENTS:
        return _encode_exact(x, fmt, rounding, saturate, random_bits, random_bit_count)
    flat = x.reshape(-1)
    bits = None if random_bits is None else random_bits.reshape(-1)
    codes = np.empty(x.size, np.uint8)
    for start in range(0, x.size, _EXACT_SLICE_ELEMENTS):
        part = slice(start, start + _EXACT_SLICE_ELEMENTS)
        codes[part] = _encode_exact(flat[part], fmt, rounding, saturate, None if bits is None else bits[part],
                                    random_bit_count)
    return codes.reshape(x.shape)


def _encode_exact(x: np.ndarray, fmt: FloatFormat, rounding, saturate, random_bits, random_bit_count) -> np.ndarray:
    """The vectorised twin of `encode_scalar` on float64 input.

    Every step is exact in float64: frexp/ldexp only move the binary point, and the integer
    significand and discarded fraction of a float64 need at most 53 bits.
    """
    if not fmt.has_nan and np.isnan(x).any():
        raise ValueError(f"NaN cannot be encoded in {fmt.name}, which has no NaN")
    negative = np.signbit(x)
    magnitude = np.abs(x)
    finite = np.isfinite(magnitude)
    safe = np.where(finite & (magnitude > 0), magnitude, 1.0)

    # Binade e with 2**e <= |x| < 2**(e+1), then |x| = (n + fraction) * 2**(max(e, emin) - M).
    _, exponent = np.frexp(safe)
    e = np.maximum(exponent.astype(np.int64) - 1, fmt.emin)
    scaled = np.ldexp(safe, (fmt.mantissa_bits - e).astype(np.int32))
    n = np.floor(scaled)
    fraction = scaled - n
    if rounding == "nearest_even":
        away = (fraction > 0.5) | ((fraction == 0.5) & (np.fmod(n, 2) == 1))
    elif rounding == "nearest_away":
        away = fraction >= 0.5
    elif rounding == "toward_zero":
        away = np.zeros(x.shape, dtype=bool)
    else:
        one = float(1 << random_bit_count)
        rounded_fraction = np.rint(fraction * one)  # rint rounds half to even; the product is exact
        away = rounded_fraction + random_bits >= one
    n = n + away
    if not fmt.has_subnormals:
        n = np.maximum(n, float(1 << fmt.mantissa_bits))
    # Assemble the code magnitude: ((e + bias) << M) + n - 2**M is the usual field layout for a
    # normal number and gives exactly n for a subnormal; a carry into the next binade just works.
    magnitude_code = ((e + fmt.bias) << fmt.mantissa_bits) + n.astype(np.int64) - (1 << fmt.mantissa_bits)
    overflow = magnitude_code > fmt.max_code

    sign = np.where(negative, fmt.sign_mask, 0)
    if not fmt.has_negative_zero:
        sign = np.where(finite & (magnitude_code == 0), 0, sign)  # FNUZ: what rounds to zero is +0
    codes = np.where(overflow, 0, magnitude_code) | sign
    saturate_finite = saturate or rounding == "toward_zero" or not fmt.has_nan
    codes = np.where(overflow, _overflow_codes(fmt, sign, saturate_finite), codes)
    codes = np.where(~finite & ~np.isnan(x), _overflow_codes(fmt, sign, saturate or not fmt.has_nan), codes)
    zero = magnitude == 0
    if fmt.signed:
        codes = np.where(zero, sign if fmt.has_negative_zero else 0, codes)
    else:
        codes = np.where(zero | negative, fmt.nan_code(), codes)
    if fmt.has_nan:
        nan_codes = fmt.nan_code() if fmt.nan_style == "negative_zero" or not fmt.signed else fmt.nan_code() | sign
        codes = np.where(np.isnan(x), nan_codes, codes)
    return codes.astype(np.uint8)


def _overflow_codes(fmt: FloatFormat, sign: np.ndarray, saturate: bool):
    """Vectorised `_overflow_code`."""
    if fmt.signed:
        return np.where(sign != 0, _overflow_code(fmt, fmt.sign_mask, saturate), _overflow_code(fmt, 0, saturate))
    return _overflow_code(fmt, 0, saturate)


# ---- the float32 fast path ---------------------------------------------------------------------
def _float32_table_is_exact(fmt: FloatFormat) -> bool:
    """Whether every rounding boundary of ``fmt`` is a float32 whose lower 16 bits are zero.

    The boundaries are the values, their midpoints and the overflow threshold: multiples of
    ``2**(emin - mantissa_bits - 1)`` with at most ``mantissa_bits + 2`` significant bits. A float32
    with a zero lower half keeps 7 fraction bits, and below 2**-126 (its subnormals) it is a multiple
    of 2**-133. Every catalogued format qualifies; a format with 7 mantissa bits, or with a bias
    above 130 (E4M3), does not, and goes through the exact float64 path instead.
    """
    return fmt.mantissa_bits + 1 <= 7 and fmt.emin - fmt.mantissa_bits - 1 >= -133


@lru_cache(maxsize=64)  # 128 KiB each: 8 MiB at most, however many custom formats a sweep makes
def _float32_tables(fmt: FloatFormat, rounding: str, saturate: bool) -> tuple[np.ndarray, np.ndarray]:
    """Codes for every float32 upper half ``u``: when the lower half is zero, and when it is not.

    For a format where `_float32_table_is_exact`, every rounding boundary is a float32 whose lower
    16 bits are zero. Hence all float32s ``(u << 16) | low`` with ``low != 0`` lie strictly inside
    one rounding interval and share one code, and only ``low == 0`` can sit exactly on a boundary.
    """
    upper = np.arange(1 << 16, dtype=np.uint32) << 16
    with np.errstate(invalid="ignore"):  # the NaN patterns are cast too
        exact = upper.view(np.float32).astype(np.float64)
        inside = (upper | 1).view(np.float32).astype(np.float64)
    if not fmt.has_nan:  # NaN rows are never looked up (NaN input raises first)
        exact, inside = np.where(np.isnan(exact), 0.0, exact), np.where(np.isnan(inside), 0.0, inside)
    on_boundary = _encode_exact(exact, fmt, rounding, saturate, None, None)
    inside_interval = _encode_exact(inside, fmt, rounding, saturate, None, None)
    on_boundary.flags.writeable = inside_interval.flags.writeable = False  # shared by every caller
    return on_boundary, inside_interval


def _encode_float32_by_table(x: np.ndarray, fmt: FloatFormat, rounding, saturate) -> np.ndarray:
    on_boundary, inside_interval = _float32_tables(fmt, rounding, saturate)
    halves = np.ascontiguousarray(x).reshape(-1).view(np.uint16)
    if np.little_endian:
        lower, upper = halves[0::2], halves[1::2]
    else:
        upper, lower = halves[0::2], halves[1::2]
    codes = inside_interval[upper]
    exact = np.flatnonzero(lower == 0)
    codes[exact] = on_boundary[upper[exact]]
    return codes.reshape(x.shape)


@lru_cache(maxsize=256)
def _float32_table(fmt: FloatFormat) -> np.ndarray:
    table = fmt.values().astype(np.float32)
    table.flags.writeable = False
    return table
