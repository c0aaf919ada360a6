"""Low-precision floating-point formats, described as data.

A `FloatFormat` is a frozen record of the fields a spec gives for a binary format: exponent
and mantissa widths, the exponent bias, whether the format has a sign bit, subnormals and
infinities, and how it spells NaN. Everything else (largest value, smallest normal, the table of
every code's value) is derived from those fields, so one generic codec serves every format that
those fields describe (`FloatFormat` refuses the shapes it cannot, with the reason).

Sources
-------
- OCP 8-bit Floating Point Specification (OFP8), rev 1.0, 2023, section 5 (E4M3, E5M2).
- OCP Microscaling Formats (MX) Specification v1.0, 2023, sections 5.3 (FP6/FP4 elements)
  and 5.4 (E8M0 scales).
- Micikevicius et al., "FP8 Formats for Deep Learning", arXiv:2209.05433, Table 1.
- The "FNUZ" variants (finite, NaN at 0x80, no negative zero, bias + 1) are those of
  Graphcore/AMD hardware as named by ml_dtypes and ONNX (Cast-19).

Examples
--------
>>> from minifp8 import formats
>>> fmt = formats.get("e4m3")
>>> fmt.max, fmt.min_normal, fmt.min_subnormal
(448.0, 0.015625, 0.001953125)
"""
from __future__ import annotations

import re
import reprlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TypeGuard

import numpy as np

NAN_STYLES = ("ieee", "all_ones", "negative_zero", "none")


def _check_bool(value, name: str) -> bool:
    """``bool(value)`` for a Python or NumPy bool, else a TypeError naming ``name``: truthiness would
    take ``"no"``, ``0.5`` or an array as True without a word. (The package's one bool check.)"""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def _is_int(value: object) -> TypeGuard[int | np.integer]:
    """Whether ``value`` is a Python or NumPy integer (a bool is not one). (The package's one int test;
    a TypeGuard, so that type checkers know what it found.)"""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real_type(kind: type) -> bool:
    """Whether ``kind`` is a type of real numbers: a Python or NumPy int or float (a bool is not one)."""
    return issubclass(kind, (int, float, np.integer, np.floating)) and not issubclass(kind, (bool, np.bool_))


def _is_real(value) -> bool:
    """Whether ``value`` is a Python or NumPy int or float (a bool is not one). (The package's one
    real-number test.)"""
    return _is_real_type(type(value))


def _check_int(value, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as a Python int in [minimum, maximum] (either bound optional); TypeError for
    anything but a Python or NumPy integer (a bool is not one), ValueError out of the bounds."""
    if not _is_int(value):
        got = _described(value) if "\n" in repr(value) else f"{type(value).__name__} {value!r}"  # (`_shown`)
        raise TypeError(f"{name} must be an int, got {got}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"<= {maximum}" if minimum is None else f">= {minimum}" if maximum is None else \
            f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be {bounds}, got {value}")
    return value


def _check_str_choice(value, name: str, choices) -> str:
    """``value`` if it is a str, else a TypeError naming ``name`` and the ``choices`` (a test ``value
    in choices`` would compare an array elementwise). Whether it is one of them is the caller's
    ValueError, worded for its context."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {', '.join(choices)}; got {_described(value)}")
    return value


def _described(value) -> str:
    """What an argument is, for an error's "got ...": an array's type, dtype and shape, else the
    value's type and (shortened) repr."""
    if isinstance(value, np.ndarray):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {value.shape}"
    return f"{type(value).__name__} {reprlib.repr(value)}"


def _shown(value) -> str:
    """``repr(value)`` for an error's "got ...", or `_described` where the repr spans lines (a 2-D or a
    long NumPy array's has one line per row), which would break a one-line error."""
    text = repr(value)
    return text if "\n" not in text else _described(value)


def _plain_array(x, name: str = "x") -> np.ndarray:
    """``np.asarray(x)``, or a TypeError for a NumPy masked array.

    ``np.asarray`` drops a mask and keeps whatever values lie under it, so a cast would work on
    values its caller had hidden and hand back a plain array; JAX refuses masked arrays for the
    same reason. ``x.filled(value)`` says what the masked elements hold.
    """
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{name} is a numpy.ma.MaskedArray, whose mask minifp8 would drop (np.asarray keeps the "
                        f"values under it): pass a plain array, such as its .filled(value), to choose what the "
                        f"masked elements hold")
    if type(x).__name__ == "Tensor" and type(x).__module__ == "minifp8.autograd":  # (autograd lies above)
        raise TypeError(f"{name} is a minifp8 autograd Tensor, not an array: pass its values, .data "
                        f"(FP8 casts inside an autograd graph: fp8.apply_recipe)")
    return np.asarray(x)


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format given by its spec fields.

    Parameters
    ----------
    name : str
        Our name for the format, e.g. ``"E4M3"``.
    exponent_bits, mantissa_bits : int
        Widths of the exponent and (explicit) mantissa fields.
    bias : int
        Exponent bias: a normal number with exponent field ``E`` has exponent ``E - bias``.
    signed : bool
        Whether there is a sign bit (the top bit of the code). E8M0 is unsigned.
    has_subnormals : bool
        Whether exponent field 0 encodes subnormals ``0.m * 2**(1 - bias)``. When False (E8M0),
        field 0 is an ordinary normal exponent and the format has no zero.
    has_infinity : bool
        Whether the all-ones exponent with zero mantissa is infinity (IEEE style, E5M2).
    nan_style : {"all_ones", "ieee", "negative_zero", "none"}
        How NaN is spelled: ``"ieee"``: all-ones exponent with a non-zero mantissa (E5M2);
        ``"all_ones"``: only the all-ones magnitude (E4M3 ``S.1111.111``, E8M0 ``0xFF``);
        ``"negative_zero"``: the code with only the sign bit set, ``0x80`` (FNUZ, which therefore
        has no -0); ``"none"``: no NaN at all (FP6, FP4).
    aliases : tuple of str
        Other spellings (ml_dtypes / PyTorch dtype names), which `get` accepts for the catalogue's
        formats; a format made by hand is not registered, so `get` knows neither its name nor these.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    signed: bool = True
    has_subnormals: bool = True
    has_infinity: bool = False
    nan_style: str = "all_ones"
    aliases: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {type(self.name).__name__} {self.name!r}")
        # Stored as Python ints and bools: NumPy's fixed-width ints would wrap (1 - uint8(7) is 250).
        for name in ("exponent_bits", "mantissa_bits", "bias"):
            value = getattr(self, name)
            if not _is_int(value):
                raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
            object.__setattr__(self, name, int(value))
        for name in ("signed", "has_subnormals", "has_infinity"):
            object.__setattr__(self, name, _check_bool(getattr(self, name), name))
        if (isinstance(self.aliases, str) or not isinstance(self.aliases, (tuple, list))
                or not all(isinstance(alias, str) and alias for alias in self.aliases)):  # ("abc" would be 3 aliases)
            raise TypeError(f"aliases must be a tuple of non-empty str, got {_described(self.aliases)}")
        object.__setattr__(self, "aliases", tuple(self.aliases))
        _check_str_choice(self.nan_style, "nan_style", NAN_STYLES)
        if self.nan_style not in NAN_STYLES:
            raise ValueError(f"nan_style must be one of {NAN_STYLES}, got {self.nan_style!r}")
        if self.exponent_bits < 1 or self.mantissa_bits < 0:
            raise ValueError(f"a format needs exponent_bits >= 1 and mantissa_bits >= 0, "
                             f"got {self.exponent_bits} and {self.mantissa_bits}")
        if not 1 <= self.bits <= 8:
            raise ValueError(f"codes are stored in uint8: a format needs 1 to 8 bits, got {self.bits}")
        if self.has_infinity and self.nan_style != "ieee":
            raise ValueError("infinity is only supported with IEEE-style NaNs")
        if self.nan_style == "ieee" and self.mantissa_bits == 0:
            raise ValueError("nan_style='ieee' spells NaN with a non-zero mantissa, so it needs mantissa_bits >= 1")
        # The codec handles two families: signed formats with subnormals and a zero (OFP8, FP6, FP4),
        # and unsigned scale formats without zero, subnormals or infinity, whose zeros and negative
        # numbers encode as NaN (E8M0). Elsewhere it would lose signs or encode zero as NaN.
        if self.signed and not self.has_subnormals:
            raise ValueError("a signed format needs has_subnormals=True (without them it has no zero)")
        if not self.signed and (self.has_subnormals or self.nan_style != "all_ones"):
            raise ValueError("an unsigned format must be an E8M0-style scale format: has_subnormals=False and "
                             f"nan_style='all_ones', got has_subnormals={self.has_subnormals}, "
                             f"nan_style={self.nan_style!r}")
        # decode returns float32: every value must be one, below 2**128 and a multiple of 2**-149.
        # The finest spacing is 2**(emin - mantissa_bits), in the lowest binade, with or without
        # subnormals (without them its values are (1 + m / 2**mantissa_bits) * 2**emin).
        top_field_is_special = self.has_infinity or (self.nan_style == "all_ones" and self.mantissa_bits == 0)
        largest_exponent = (1 << self.exponent_bits) - 1 - top_field_is_special - self.bias
        finest_spacing_exponent = self.emin - self.mantissa_bits
        if largest_exponent > 127 or finest_spacing_exponent < -149:
            raise ValueError(f"bias {self.bias} gives values spaced 2**{finest_spacing_exponent} apart at the "
                             f"bottom and up to below 2**{largest_exponent + 1}, which float32 cannot hold: "
                             f"bias must lie in [{self.bias + largest_exponent - 127}, "
                             f"{self.bias + finest_spacing_exponent + 149}]")
        if not self.max > 0:
            raise ValueError(f"{self.name} has no positive finite value")

    # ---- layout --------------------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Total code width in bits."""
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def sign_mask(self) -> int:
        """The sign bit of a code (0 for unsigned formats)."""
        return 1 << (self.bits - 1) if self.signed else 0

    @property
    def has_negative_zero(self) -> bool:
        return self.signed and self.has_subnormals and self.nan_style != "negative_zero"

    @property
    def has_nan(self) -> bool:
        return self.nan_style != "none"

    # ---- exponent range ------------------------------------------------------------------------
    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number: ``1 - bias``, or ``-bias`` without subnormals."""
        return (1 if self.has_subnormals else 0) - self.bias

    @cached_property
    def max_code(self) -> int:
        """The largest code magnitude (sign bit clear) that encodes a finite value."""
        magnitudes = np.arange(1 << (self.bits - int(self.signed)))
        return int(magnitudes[np.isfinite(self.values()[magnitudes])][-1])

    @property
    def emax(self) -> int:
        """Exponent of the largest finite value (8 for E4M3, 15 for E5M2)."""
        return (self.max_code >> self.mantissa_bits) - self.bias

    @property
    def max(self) -> float:
        """Largest finite value (448 for E4M3, 57344 for E5M2)."""
        return float(self.values()[self.max_code])

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value, ``2**emin``.

        A format whose only non-zero exponent field holds its Inf and NaN codes (a signed E1Mx with
        IEEE specials) has no normal value; ``2**emin`` is then above `max`, where its range ends.
        """
        return 2.0**self.emin

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value: ``2**(emin - mantissa_bits)``, or ``min_normal`` without subnormals."""
        return 2.0 ** (self.emin - self.mantissa_bits) if self.has_subnormals else self.min_normal

    # ---- special codes -------------------------------------------------------------------------
    def nan_code(self, negative: bool = False) -> int:
        """The code this library writes for NaN (the sign is kept where the format allows it)."""
        if self.nan_style == "none":
            raise ValueError(f"{self.name} has no NaN encoding")
        if self.nan_style == "negative_zero":
            return self.sign_mask
        magnitude = (1 << (self.bits - int(self.signed))) - 1  # all ones
        if self.nan_style == "ieee":  # quiet NaN: top mantissa bit set, the rest clear
            magnitude = (((1 << self.exponent_bits) - 1) << self.mantissa_bits) | (1 << (self.mantissa_bits - 1))
        return magnitude | (self.sign_mask if _check_bool(negative, "negative") else 0)

    def inf_code(self, negative: bool = False) -> int:
        """The code of +Inf or -Inf (formats with infinities only)."""
        if not self.has_infinity:
            raise ValueError(f"{self.name} has no infinity")
        negative = _check_bool(negative, "negative")
        return (((1 << self.exponent_bits) - 1) << self.mantissa_bits) | (self.sign_mask if negative else 0)

    # ---- the decode table ----------------------------------------------------------------------
    def values(self) -> np.ndarray:
        """The value of every code, as a read-only float64 array of length ``2**bits``.

        The table is computed from the fields alone (OFP8 section 5.1, MX section 5.3):
        subnormal ``(-1)**s * 2**emin * m / 2**M``, normal ``(-1)**s * 2**(E - bias) * (1 + m / 2**M)``.
        A NaN code decodes to a NaN with the code's sign bit, as ml_dtypes decodes it (PyTorch agrees
        for E4M3 and E5M2, but decodes the FNUZ NaN ``0x80`` to +NaN).
        """
        return _decode_table(self)

    def __repr__(self) -> str:
        """``FloatFormat(E5M2: E5M2, bias 15, Inf, IEEE NaN)``: the fields, each special trait named
        where it differs from the defaults (signed, subnormals, no Inf, NaN at all ones), so that
        two formats that differ print differently."""
        traits = [f"{self.name}: E{self.exponent_bits}M{self.mantissa_bits}", f"bias {self.bias}"]
        if not self.signed:
            traits.append("unsigned")
        if not self.has_subnormals:
            traits.append("no subnormals")
        if self.has_infinity:
            traits.append("Inf")
        nan = {"ieee": "IEEE NaN", "negative_zero": "NaN at -0", "none": "no NaN"}.get(self.nan_style)
        if nan is not None:
            traits.append(nan)
        return f"FloatFormat({', '.join(traits)})"

    # ---- copying and pickling: a format is an immutable value --------------------------------------
    def __reduce_ex__(self, protocol):
        """A catalogue format pickles by name, as an enum member does, and loads as that very object
        (``pickle.loads(pickle.dumps(E4M3)) is E4M3``); any other format by its fields."""
        if CATALOGUE.get(self.name) is self:
            return get, (self.name,)
        return super().__reduce_ex__(protocol)

    def __copy__(self) -> "FloatFormat":
        return self

    def __deepcopy__(self, memo) -> "FloatFormat":
        return self


_TABLES: dict[FloatFormat, np.ndarray] = {}
"""The catalogue's decode tables, kept for good (filled below the catalogue)."""


def _decode_table(fmt: FloatFormat) -> np.ndarray:
    table = _TABLES.get(fmt)
    return table if table is not None else _built_decode_table(fmt)


@lru_cache(maxsize=256)  # a format builds its table when it is made (`max` reads it): a sweep may make thousands
def _built_decode_table(fmt: FloatFormat) -> np.ndarray:
    codes = np.arange(1 << fmt.bits, dtype=np.int64)
    magnitude_bits = fmt.bits - int(fmt.signed)
    negative = (codes >> magnitude_bits).astype(bool) if fmt.signed else np.zeros(codes.shape, bool)
    exponent_field = (codes >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    mantissa_field = codes & ((1 << fmt.mantissa_bits) - 1)
    if fmt.has_subnormals:
        subnormal = exponent_field == 0
        significand = np.where(subnormal, mantissa_field, mantissa_field + (1 << fmt.mantissa_bits))
        exponent = np.where(subnormal, fmt.emin, exponent_field - fmt.bias)
    else:
        significand = mantissa_field + (1 << fmt.mantissa_bits)
        exponent = exponent_field - fmt.bias
    values = np.ldexp(significand.astype(np.float64), (exponent - fmt.mantissa_bits).astype(np.int32))
    values = np.where(negative, -values, values)

    all_ones_exponent = exponent_field == (1 << fmt.exponent_bits) - 1
    if fmt.nan_style == "ieee":
        nan = all_ones_exponent & (mantissa_field != 0)
    elif fmt.nan_style == "all_ones":
        nan = (codes & ((1 << magnitude_bits) - 1)) == (1 << magnitude_bits) - 1
    elif fmt.nan_style == "negative_zero":
        nan = codes == fmt.sign_mask
    else:
        nan = np.zeros(codes.shape, bool)
    # A NaN keeps its code's sign bit, as in ml_dtypes (0xFF in E4M3 is -NaN; the FNUZ NaN 0x80 too).
    values[nan] = np.where(negative[nan], -np.nan, np.nan)
    if fmt.has_infinity:
        infinite = all_ones_exponent & (mantissa_field == 0)
        values[infinite] = np.where(negative[infinite], -np.inf, np.inf)
    values.flags.writeable = False  # (shared by every caller, in every thread)
    return values


# ---- the catalogue (its sources: the module docstring) ------------------------------------------
E4M3 = FloatFormat("E4M3", 4, 3, 7, nan_style="all_ones", aliases=("float8_e4m3fn", "e4m3fn", "fp8_e4m3"))
E5M2 = FloatFormat("E5M2", 5, 2, 15, has_infinity=True, nan_style="ieee", aliases=("float8_e5m2", "fp8_e5m2"))
E4M3FNUZ = FloatFormat("E4M3FNUZ", 4, 3, 8, nan_style="negative_zero", aliases=("float8_e4m3fnuz",))
E5M2FNUZ = FloatFormat("E5M2FNUZ", 5, 2, 16, nan_style="negative_zero", aliases=("float8_e5m2fnuz",))
E3M2 = FloatFormat("E3M2", 3, 2, 3, nan_style="none", aliases=("float6_e3m2fn", "fp6_e3m2"))
E2M3 = FloatFormat("E2M3", 2, 3, 1, nan_style="none", aliases=("float6_e2m3fn", "fp6_e2m3"))
E2M1 = FloatFormat("E2M1", 2, 1, 1, nan_style="none", aliases=("float4_e2m1fn", "fp4_e2m1", "fp4"))
E8M0 = FloatFormat("E8M0", 8, 0, 127, signed=False, has_subnormals=False, nan_style="all_ones",
                   aliases=("float8_e8m0fnu", "e8m0fnu"))

CATALOGUE: dict[str, FloatFormat] = {f.name: f for f in (E4M3, E5M2, E4M3FNUZ, E5M2FNUZ, E3M2, E2M3, E2M1, E8M0)}
_TABLES.update({f: _decode_table(f) for f in CATALOGUE.values()})

_BY_SPELLING = {spelling.lower(): f for f in CATALOGUE.values() for spelling in (f.name, *f.aliases)}


def get(name: str | FloatFormat | np.dtype | type) -> FloatFormat:
    """Look a format up by our name or an ml_dtypes/PyTorch spelling (case-insensitive).

    Examples
    --------
    >>> get("float8_e4m3fn") is get("E4M3")
    True
    """
    if isinstance(name, FloatFormat):
        return name
    if _is_dtype(name):
        dtype_name = np.dtype(name).name  # (an ml_dtypes dtype, or its scalar type, names its format)
        if dtype_name.lower() in _BY_SPELLING:
            return _BY_SPELLING[dtype_name.lower()]
        raise ValueError(f"format: the dtype {dtype_name} is not a format minifp8 knows; known: "
                         f"{', '.join(sorted(_BY_SPELLING))}")
    if not isinstance(name, str):
        hint = _block_format_hint(name)  # (a block format: named by the hint; anything else: its repr)
        raise TypeError(f"format must be a FloatFormat, a name (str) or an ml_dtypes dtype, got {type(name).__name__}"
                        + (hint or f" {_shown(name)}"))
    key = name.lower().removeprefix("torch.")
    if key not in _BY_SPELLING:
        raise ValueError(f"unknown format {name!r}{_block_format_hint(name)}; known: {', '.join(sorted(_BY_SPELLING))}")
    return _BY_SPELLING[key]


def _is_dtype(name) -> TypeGuard[np.dtype | type]:
    """Whether ``name`` is a NumPy dtype or a scalar type (an ml_dtypes one names its format)."""
    return isinstance(name, np.dtype) or (isinstance(name, type) and issubclass(name, np.generic))


def _block_format_hint(name) -> str:
    """Where ``name`` is a block format (an MX name or MXFormat, or NVFP4), which takes a block cast,
    not an element format: what to use instead, else "". (From the name's spelling, MXFP<n>_<element>,
    and an MXFormat's ``elem``: `minifp8.mx` builds on this module, which does not import it.)"""
    if isinstance(name, str) and name.lower() == "nvfp4":
        return (" (NVFP4, a block format: quantize with minifp8.mx.quantize_nvfp4 and compare with "
                "testing.compare_mx(..., 'NVFP4'); 'E2M1' names its elements alone)")
    if isinstance(name, str):
        spelled = re.fullmatch(r"mxfp\d+_(e\dm\d)", name.lower())
        label, element = name, _BY_SPELLING.get(spelled.group(1)) if spelled else None
    else:
        label, element = getattr(name, "name", ""), getattr(name, "elem", None)
    if not isinstance(element, FloatFormat):
        return ""
    return (f" ({label}, a block format: quantize with minifp8.mx.quantize and compare with testing.compare_mx; "
            f"{element.name!r} names its elements alone)")


def get_list(names: str | FloatFormat | Iterable[str | FloatFormat], what: str = "names") -> list[FloatFormat]:
    """The formats ``names`` names, each once, in order: one name (or FloatFormat), or a non-empty
    sequence of them. ``what`` names the argument in the errors."""
    if isinstance(names, (bytes, bytearray, memoryview)):  # (iterating them gives ints)
        raise TypeError(f"{what} must be a format name (str) or a sequence of them, got {type(names).__name__} "
                        f"{names!r}: decode it first")
    if isinstance(names, (str, FloatFormat)) or _is_dtype(names):
        return [get(names)]
    if isinstance(names, (set, frozenset)):  # (files and figures would change with PYTHONHASHSEED)
        raise TypeError(f"{what} must be a format name or a sequence of them, got a {type(names).__name__}, whose "
                        f"order changes from run to run: pass a list or tuple")
    try:
        names = list(names)
    except TypeError:
        raise TypeError(f"{what} must be a format name or a sequence of them, got "
                        f"{type(names).__name__} {names!r}") from None
    if not names:
        raise ValueError(f"{what} must name at least one format, got an empty {type(names).__name__}")
    return list(dict.fromkeys(get(name) for name in names))
