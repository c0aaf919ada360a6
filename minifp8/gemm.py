"""Scaled GEMMs: the product a kernel should approximate, and a verdict on what it returned.

A scaled GEMM multiplies operand codes (FP8, FP6, FP4) whose blocks carry scales::

    D ~= (decode(A) * scale_A) @ (decode(B) * scale_B)      A: M x K, B: K x N, D: M x N

Sections:

* ``dequantize`` and the scale layouts. One rule covers the layouts real recipes use: along each
  axis of an operand, the scale array's dimension is 1 (one scale for the whole axis) or divides
  the operand's dimension, each scale covering a contiguous block.
* ``reference_matmul``: the product in float64, with a bound on its own rounding error
  (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., 2002, section 3.1, eq. 3.5).
* ``compare_matmul`` returns a `MatmulReport` and never raises for a mismatch (check ``.ok``);
  ``assert_matmul_close`` raises ``AssertionError`` with that report. The tolerance of each output
  is a bound on what a correct kernel may differ by: accumulation rounding, output rounding and the
  reference's own error. Every output beyond it is listed and classed (NaN/Inf, overflow, sign,
  other), and the report adds hints that it has verified by recomputing: a scale applied twice,
  omitted or inverted, scales read transposed, applied along the wrong axis, shifted by one block
  or read from other entries of their array, both scales wrong at once, one block's scale off by a
  power of two, a dropped K block, a transposed output, outputs rounded in one direction, one
  factor common to every mismatched output, an output type not declared, operands rounded to
  bfloat16, float16 or TF32 before the product, an accumulator narrower than declared; and, by
  observation alone, an output of zeros (left unwritten).
* Outputs written as FP8 codes (a fused epilogue: cuBLASLt with an FP8 D, TransformerEngine):
  ``compare_matmul(codes, ..., output="E4M3", output_scale=s, saturate=True)`` checks
  ``cast(float32(S * s))`` of the kernel's hidden float32 result S. The float32 tolerance bounds S,
  the cast is monotone, so a correct kernel's code lies between the casts of the bounds (times
  ``s``, widened by the epilogue's float32 rounding): each code is checked against that range.
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from . import codec, formats, mx
from .formats import FloatFormat, _check_bool, _check_int, _is_int, _is_real, _plain_array
from .fastcast import _overflow_threshold as _format_overflow_threshold
from .testing import _check_max_rows, _codes_of, _through_bfloat16, _tolerance_ratio, _widening_hint

__all__ = ["LOOSE_RELATIVE_TOLERANCE", "MATMUL_CLASSES", "OUTPUT_TYPES", "MatmulMismatch", "MatmulReference",
           "MatmulReport", "assert_matmul_close", "compare_matmul", "dequantize", "reference_matmul"]

# IEEE binary types a kernel accumulates or writes in: significand bits p (the implicit bit
# included), emin, emax (IEEE 754-2019 table 3.5; bfloat16 is float32 with its low 16 bits cut).
_IEEE_TYPES = {"float32": (24, -126, 127), "bfloat16": (8, -126, 127), "float16": (11, -14, 15)}
OUTPUT_TYPES = tuple(_IEEE_TYPES)
_OUTPUT_CHOICES = (f"one of {', '.join(map(repr, OUTPUT_TYPES))} or, for an output written as codes, a signed format "
                   f"of minifp8 ('E4M3', 'E5M2', ...: a FloatFormat or its name)")
MATMUL_CLASSES = ("NaN/Inf", "overflow", "sign", "other")
_FLOAT64_UNIT_ROUNDOFF = 2.0**-53
# Dequantised magnitudes stay in [2**-500, 2**500]: products of two lie in float64's normal range,
# and sums of up to _MAX_INNER of them cannot overflow (2**22 * 2**1000 < 2**1023).
_DEQUANTIZED_EXPONENT_LIMIT = 500
_MAX_INNER = 2**22
_HINT_WORK_LIMIT = 2**26  # hints recompute the product a few dozen times: only up to M * K * N this large


# ================================================================================================
# Operands: codes times scales, exactly
# ================================================================================================
def dequantize(codes: ArrayLike, scales: ArrayLike, fmt: str | FloatFormat) -> np.ndarray:
    """Decode a 2-d operand and multiply each block by its scale, exactly, in float64.

    The scale layout rule: ``scales`` is 0-d (one scale for the tensor) or 2-d, and along each axis
    its dimension is 1 or divides the operand's, each scale covering a contiguous block of
    ``dim // scale_dim`` elements. For ``A`` (M x K) and ``B`` (K x N) of a GEMM:

    | recipe | A's scales | B's scales |
    |---|---|---|
    | per tensor | ``()`` | ``()`` |
    | rowwise (per token, per output channel) | ``(M, 1)`` | ``(1, N)`` |
    | DeepSeek-V3 (arXiv:2412.19437 section 3.3: 1x128 tiles, 128x128 weights) | ``(M, K/128)`` | ``(K/128, N/128)`` |
    | MX (OCP MX v1.0: 32-blocks along K) | ``(M, K/32)`` | ``(K/32, N)`` |
    | NVFP4 (16-blocks along K) | ``(M, K/16)`` | ``(K/16, N)`` |

    A kernel that stores B as N x K (the "TN" layout of cuBLAS) passes ``codes.T`` and
    ``scales.T``. A dimension that a block size does not divide is refused: pad the operand with
    zero codes (and its scales with any finite value) to a multiple of the block.

    Why the result is exact: a value of ``fmt`` has at most p = mantissa_bits + 1 significant bits
    (4 for E4M3), and a finite non-zero scale must have at most 53 - p (any float32 scale has 24;
    so has the float64 product of an E4M3 block scale and a float32 tensor scale, 4 + 24 bits).
    Their product then has at most 53 significant bits, and the range check below keeps it a normal
    float64: float64 holds it exactly. NaN and Inf, in codes or in scales (MX's NaN scale 0xFF),
    propagate as IEEE arithmetic says: ``Inf * 0`` is NaN.

    Parameters
    ----------
    codes : array_like
        2-d element codes: uint8, an ml_dtypes array of ``fmt``, or decoded values of ``fmt``
        (anything `minifp8.testing.compare` takes as ``actual``; unpack FP4 nibbles first).
    scales : array_like or float
        The values that multiply the decoded codes back to the tensor's (``x ~ decode(codes) *
        scales``): a `minifp8.scaling.ScaledTensor`'s ``scale_inv``, not its ``scale``, which
        multiplied ``x`` before encoding (TransformerEngine's convention; passing ``scale``
        raises nothing, since both are valid numbers, and gives a wrong product).
        Real scale values: float16, float32 or float64, or an ml_dtypes float array (a
        float8_e8m0fnu array of MX scales as it is), 0-d or 2-d as above (a Python float for one
        scale). Decode scale codes (uint8) first: ``minifp8.decode(e8m0_codes, "E8M0")`` for MX,
        or ``q.scale_values()`` of an `minifp8.mx.MXArray` ``q``. For an `minifp8.mx.NVFP4Array`
        ``q``, pass ``q.scale_values()``: each block's decoded E4M3 scale times the tensor's
        decode scale, ``global_amax / 2688``, the float32 factor its ``dequantize`` takes (about
        ``1 / q.encode_scale``; not ``q.encode_scale``, which multiplied ``x`` before encoding).
        (The exact float64 product of the decoded E4M3 scale, ``global_amax`` and ``float32(1 /
        2688)`` can have 52 significant bits, too many for its products with E2M1 values to be
        exact: such a scale is refused.)
    fmt : FloatFormat or str
        The element format.

    Returns
    -------
    numpy.ndarray of float64
        ``decode(codes) * scales``, the codes' shape.

    Raises
    ------
    TypeError
        For codes or scales of the wrong kind: NumPy integer scales (scale codes, not
        decoded; a Python int is one scale value, as a float is), bool, complex, a Python list of
        codes (int64: convert with ``.astype(np.uint8)``); an `minifp8.mx.MXFormat` for ``fmt`` (pass
        its ``.elem``; its name is a ValueError); a whole quantized tensor (an ``MXArray``,
        ``NVFP4Array`` or ``ScaledTensor``: pass its ``.codes`` and its scales).
    ValueError
        For a layout that does not tile the operand, a scale with too many significant bits, or one
        that could take a value of the format (not only the operand's) outside [``2**-500``,
        ``2**500``].
    """
    fmt = _element_format(fmt, "fmt")
    decoded = _decoded_operand(codes, fmt, "codes")
    return _scaled(decoded, _scale_array(scales, decoded.shape, fmt, "scales", "codes"))


def _decoded_operand(codes, fmt, name: str) -> np.ndarray:
    """A 2-d operand's decoded values (float32), or a clear error. It may be empty: with K = 0 every
    output is 0 (an empty sum), which a kernel must write."""
    codec._check_float_environment()
    _refuse_quantized(codes, name, name)
    array = _plain_array(codes, name)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array of {fmt.name} codes, got shape {array.shape}")
    return codec.decode(_codes_of(array, fmt, array.shape, name, signed_zero=False), fmt)


def _scale_array(scales, shape: tuple, fmt, name: str, operand: str) -> np.ndarray:
    """``scales`` checked against the layout rule and the exactness conditions: float64, 2-d."""
    if isinstance(scales, float) or (_is_int(scales) and not isinstance(scales, np.integer)):
        if isinstance(scales, int) and abs(scales) > 2**53 and (
                abs(scales) >= 2**1024 or int(float(scales)) != scales):  # (2**60 is exact; 2**53 + 1 is not)
            raise ValueError(f"{name} must be a real scale value, exact in float64, got the int {scales}")
        array = np.array(float(scales))
    else:
        _refuse_quantized(scales, name, operand)
        array = _plain_array(scales, name)
        array = codec._ml_floats_as_float32(array)  # float8_e8m0fnu scales, ...: exact in float32
        if array.dtype.kind != "f" or array.dtype.itemsize not in (2, 4, 8):
            hint = (": decode scale codes first, e.g. minifp8.decode(codes, 'E8M0') for MX or 'E4M3' for "
                    "NVFP4's block scales" if array.dtype.kind in "iu" else _widening_hint(array.dtype, name))
            raise TypeError(f"{name} must hold scale values as float16, float32 or float64 (or be one Python "
                            f"float or int), got dtype {array.dtype}{hint}")
    if array.ndim == 0:
        array = array.reshape(1, 1)
    elif array.ndim != 2:
        raise ValueError(f"{name} must be 0-d (one scale for {operand}) or 2-d (one scale per block of "
                         f"{operand}, shape {shape}), got shape {array.shape}; rowwise scales of A are (M, 1), "
                         f"of B (1, N)")
    for axis, (size, count) in enumerate(zip(shape, array.shape)):
        if size == 0 and count <= 1:
            continue  # (an empty axis: one scale, or none, covers it)
        if count < 1 or size % count or size == 0:
            raise ValueError(f"{name} has shape {array.shape}, which does not tile {operand} of shape {shape}: "
                             f"along axis {axis}, {count} scales for {size} elements (a scale dimension must be "
                             f"1 or divide the operand's; pad {operand} with zero codes to a multiple of the block)")
        block = size // count
        if count > 1 and block & (block - 1):
            # (2 scales over K = 48 would be read as blocks of 24, where mx.quantize meant 32 and 16)
            raise ValueError(f"{name} has shape {array.shape}: along axis {axis}, {count} scales for {size} elements "
                             f"would be blocks of {block}, but block scales cover power-of-two blocks (16, 32, 128, "
                             f"...). A length that the block does not divide gets one scale more, for its short last "
                             f"block (mx.quantize and scaling.quantize_blockwise give ceil(length / block) scales): "
                             f"pad {operand} with zero codes to a multiple of the block")
    array = array.astype(np.float64)
    nonzero = np.flatnonzero((np.isfinite(array) & (array != 0)).reshape(-1))
    magnitudes = np.abs(array.reshape(-1)[nonzero])
    precision = fmt.mantissa_bits + 1
    significand = np.ldexp(np.frexp(magnitudes)[0], 53 - precision)
    wide = np.flatnonzero(significand != np.floor(significand))
    limit = 2.0**_DEQUANTIZED_EXPONENT_LIMIT
    with np.errstate(over="ignore", under="ignore"):
        outside = np.flatnonzero((magnitudes * fmt.max > limit) | (magnitudes * fmt.min_subnormal < 1 / limit))
    for bad, why in ((wide, f"has more than {53 - precision} significant bits: times a {fmt.name} value "
                            f"({precision} bits) it would not be exact in float64 (any float32 scale is fine)"),
                     (outside, f"takes {fmt.name} values (from {fmt.min_subnormal:g} to {fmt.max:g}) outside "
                               f"[2**-{_DEQUANTIZED_EXPONENT_LIMIT}, 2**{_DEQUANTIZED_EXPONENT_LIMIT}]")):
        if bad.size:
            index = tuple(int(i) for i in np.unravel_index(nonzero[bad[0]], array.shape))
            raise ValueError(f"{name}[{index}] = {float(array[index])!r} {why}")
    return array


def _scaled(decoded: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """``decoded * scales`` in float64, each scale over its block (``scales`` is 2-d and tiles)."""
    if decoded.size == 0:
        return decoded.astype(np.float64)
    rows, columns = scales.shape
    # Splitting each axis into (blocks, block length) is a view in any layout: no copy of the
    # operand, and no M x K array of expanded scales
    blocks = decoded.astype(np.float64).reshape(rows, decoded.shape[0] // rows, columns, decoded.shape[1] // columns)
    with np.errstate(invalid="ignore"):  # Inf * 0 is NaN, as IEEE says
        return (blocks * scales[:, None, :, None]).reshape(decoded.shape)


# ================================================================================================
# The reference product
# ================================================================================================
@dataclass(frozen=True, eq=False)
class MatmulReference:
    """What `reference_matmul` returns: the float64 product and how far it can be from the exact one.

    Attributes
    ----------
    value : numpy.ndarray
        M x N float64: the product of the dequantised operands, rounded once per operation.
    magnitude : numpy.ndarray
        M x N float64: ``sum_k |a_mk b_kn|``, computed in float64 (within a relative
        ``gamma_K`` of the exact sum); the scale of every rounding error in the product.
    error_bound : numpy.ndarray
        M x N float64: ``|value - exact| <= error_bound``, element by element; 0 where ``value`` is
        NaN or Inf (those follow from the operands' NaN and Inf exactly).
    """

    value: np.ndarray
    magnitude: np.ndarray
    error_bound: np.ndarray


def reference_matmul(a_codes: ArrayLike, a_scales: ArrayLike, b_codes: ArrayLike, b_scales: ArrayLike, *,
                     a_format: str | FloatFormat, b_format: str | FloatFormat) -> MatmulReference:
    """The product of two scaled operands, in float64, with a bound on its own error.

    Each operand is dequantised exactly (`dequantize`: the codes' values times their block
    scales), then multiplied in float64. The product's error is bounded entry by entry (Higham,
    *Accuracy and Stability of Numerical Algorithms*, 2nd ed., section 3.1, eq. 3.5, which holds
    for any order of summation, with or without fused multiply-adds)::

        |value - exact| <= gamma_K * sum_k |a_mk b_kn|,   gamma_K = K u / (1 - K u),  u = 2**-53

    and ``error_bound`` is that bound with the computed ``magnitude`` (divided by ``1 - gamma_K``,
    which makes it an upper bound on the exact sum). The bound assumes no underflow and no overflow:
    dequantised magnitudes within [``2**-500``, ``2**500``] and K <= ``2**22`` guarantee it. A NaN in an operand
    (a NaN code, or MX's NaN scale) gives NaN in every output it enters; Inf gives Inf, or NaN for
    ``Inf * 0`` and ``Inf - Inf``, as IEEE arithmetic does (decided here exactly, not by BLAS).

    Parameters
    ----------
    a_codes, b_codes : array_like
        The operands' element codes, ``A`` M x K and ``B`` K x N, as `dequantize` takes them. Any of
        M, K and N may be 0 (K = 0: every output is 0, an empty sum; an empty axis takes one scale
        or none).
    a_scales, b_scales : array_like or float
        Their scale values (a ``ScaledTensor``'s ``scale_inv``: see `dequantize`), laid out as there:
        ``()``, ``(M, 1)``, ``(M, K / block)`` for A; ``()``, ``(1, N)``, ``(K / block, N)``,
        ``(K / 128, N / 128)`` for B.
    a_format, b_format : FloatFormat or str
        The element formats (a catalogue name such as ``"E4M3"`` or ``"float4_e2m1fn"``).

    Returns
    -------
    MatmulReference
        ``value``, ``magnitude`` and ``error_bound``, each M x N float64.

    Examples
    --------
    MX scales are E8M0 codes: decode them first.

    >>> import numpy as np, minifp8
    >>> from minifp8.gemm import reference_matmul
    >>> a = minifp8.encode(np.array([[1.0, 2.0]]), "E4M3")
    >>> b = minifp8.encode(np.array([[3.0], [0.5]]), "E4M3")
    >>> half = minifp8.decode(np.array(126, np.uint8), "E8M0")  # 2**(126 - 127)
    >>> reference_matmul(a, half, b, 1.0, a_format="E4M3", b_format="E4M3").value
    array([[2.]])
    """
    a, b = _operands(a_codes, a_scales, b_codes, b_scales, a_format, b_format)
    return _reference(a.values, b.values)


@dataclass(frozen=True, eq=False)
class _Operand:
    """A checked operand: decoded element values (float32), 2-d scales (float64), their product."""

    decoded: np.ndarray
    scales: np.ndarray
    values: np.ndarray


def _element_format(fmt, name: str) -> FloatFormat:
    """``formats.get(fmt)``; an MX block format is a TypeError and its name (or NVFP4's) a ValueError,
    each naming the element format to pass instead."""
    if isinstance(fmt, str) and fmt.upper() == "NVFP4":
        raise ValueError(f"{name}: NVFP4 is a block format; pass its element format, 'E2M1', and its block "
                         f"scales as values (NVFP4Array.scale_values(): each E4M3 block scale times the tensor's "
                         f"decode scale)")
    named = isinstance(fmt, str) and fmt.upper() in (key.upper() for key in mx.FORMATS)
    if named or isinstance(fmt, mx.MXFormat):
        block_format = mx.get(fmt)
        raise (ValueError if named else TypeError)(
            f"{name}: {block_format.name} is a block format; pass its element format, {block_format.elem.name!r} "
            f"({block_format.name}'s .elem), and its block scales decoded to values (MXArray.scale_values())")
    try:
        return formats.get(fmt)
    except (TypeError, ValueError) as error:  # (formats.get cannot know which argument it was)
        raise type(error)(f"{name}: {error}") from None


def _refuse_quantized(x, name: str, codes_name: str) -> None:
    """A TypeError where ``x``, an operand's codes or scales, is a whole quantized tensor (an
    `minifp8.mx.MXArray`, `minifp8.mx.NVFP4Array` or `minifp8.scaling.ScaledTensor`), saying which
    of its attributes to pass instead (NumPy would read it as a 0-d object array)."""
    if isinstance(x, (mx.MXArray, mx.NVFP4Array)):
        scales = ".scale_values()"
    elif hasattr(x, "codes") and hasattr(x, "scale_inv"):  # (scaling.ScaledTensor: scaling lies beside gemm)
        scales = ".scale_inv"
    else:
        return
    raise TypeError(f"{name} is a quantized tensor ({type(x).__name__}), not an array: pass its .codes as "
                    f"{codes_name} and its {scales} as {codes_name.replace('codes', 'scales')}")


def _operands(a_codes, a_scales, b_codes, b_scales, a_format, b_format) -> tuple[_Operand, _Operand]:
    checked = []
    for name, codes, scales, fmt in (("a", a_codes, a_scales, a_format), ("b", b_codes, b_scales, b_format)):
        fmt = _element_format(fmt, f"{name}_format")
        decoded = _decoded_operand(codes, fmt, f"{name}_codes")
        scale_array = _scale_array(scales, decoded.shape, fmt, f"{name}_scales", f"{name}_codes")
        checked.append(_Operand(decoded, scale_array, _scaled(decoded, scale_array)))
    a, b = checked
    if a.values.shape[1] != b.values.shape[0]:
        raise ValueError(f"a_codes is {a.values.shape[0]} x {a.values.shape[1]} and b_codes "
                         f"{b.values.shape[0]} x {b.values.shape[1]}: the inner dimensions (K) differ")
    if a.values.shape[1] > _MAX_INNER:
        raise ValueError(f"K = {a.values.shape[1]} is above {_MAX_INNER} (2**22), where the float64 sums "
                         f"could overflow")
    return a, b


def _gamma(count: int, unit_roundoff: float) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)`` (Lemma 3.1): the relative error of ``n`` roundings; Inf
    where ``n u >= 1`` (no bound)."""
    product = count * unit_roundoff
    return product / (1 - product) if product < 1 else np.inf


def _reference(a: np.ndarray, b: np.ndarray) -> MatmulReference:
    """The float64 product of dequantised operands, with its magnitude and error bound."""
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    a_finite, b_finite = np.where(finite_a, a, 0.0), np.where(finite_b, b, 0.0)
    value = a_finite @ b_finite
    magnitude = np.abs(a_finite) @ np.abs(b_finite)
    if not (finite_a.all() and finite_b.all()):
        value = _with_specials(value, a, b)
    gamma = _gamma(a.shape[1], _FLOAT64_UNIT_ROUNDOFF)
    error_bound = np.where(np.isfinite(value), gamma * magnitude / (1 - gamma), 0.0)
    return MatmulReference(value, magnitude, error_bound)


def _with_specials(value: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``value`` (the product of the finite entries) with the outputs that NaN and Inf enter set as
    IEEE arithmetic sets them: counted by products of 0/1 matrices, so no BLAS shortcut decides."""
    def meet(x, y):  # whether some k has x[m, k] and y[k, n]
        return (x.astype(np.float64) @ y.astype(np.float64)) > 0

    infinite_a, infinite_b = np.isinf(a), np.isinf(b)
    positive_a, negative_a, positive_b, negative_b = a > 0, a < 0, b > 0, b < 0  # (NaN is neither)
    plus = (meet(infinite_a & positive_a, positive_b) | meet(infinite_a & negative_a, negative_b)
            | meet(positive_a, infinite_b & positive_b) | meet(negative_a, infinite_b & negative_b))
    minus = (meet(infinite_a & positive_a, negative_b) | meet(infinite_a & negative_a, positive_b)
             | meet(positive_a, infinite_b & negative_b) | meet(negative_a, infinite_b & positive_b))
    nan = (np.isnan(a).any(axis=1)[:, None] | np.isnan(b).any(axis=0)[None, :]
           | meet(infinite_a, b == 0) | meet(a == 0, infinite_b) | (plus & minus))
    return np.where(nan, np.nan, np.where(plus, np.inf, np.where(minus, -np.inf, value)))


# ================================================================================================
# The comparison
# ================================================================================================
@dataclass(frozen=True)
class _Accumulator:
    """How a kernel accumulates: significand bits, products per group before promotion to float32
    (None: no promotion), and the spacing of its subnormals."""

    bits: int
    promote_every: int | None
    spacing: float

    def relative_bound(self, inner: int) -> float:
        """A bound on the relative error of a correct kernel's sum of ``inner`` products."""
        unit_roundoff = 2.0**-self.bits
        if self.promote_every is None or self.promote_every >= inner:
            return _gamma(inner + 3, unit_roundoff)
        grouped = _gamma(self.promote_every, unit_roundoff)
        promoted = _gamma(-(-inner // self.promote_every) + 3, 2.0**-24)
        return grouped + promoted + grouped * promoted

    def describe(self) -> str:
        return f"{self.bits} bits" + (f", promoted every {self.promote_every}" if self.promote_every else "")

    @property
    def format_overflow_threshold(self) -> float:
        """The smallest magnitude the accumulator's format rounds to Inf (max plus half a spacing, with
        IEEE's emax = 1 - emin): where a running sum in it overflows."""
        emin = round(math.log2(self.spacing)) + self.bits - 1
        return (2.0 - 2.0**-self.bits) * 2.0 ** (1 - emin)

    @property
    def overflow_threshold(self) -> float:
        """The smallest magnitude the kernel's final sum rounds to Inf: the accumulator's, or float32's
        where groups are promoted into float32."""
        return _overflow_threshold("float32") if self.promote_every is not None else self.format_overflow_threshold

    def may_reach_overflow(self, magnitude: np.ndarray, inner: int) -> np.ndarray:
        """Where ``magnitude`` (``sum_k |a b|``, the most a partial sum of ``inner`` products can be) may
        reach, with the rounding's growth, the overflow threshold of the accumulator's format (or
        float32's, if lower): where a running sum may overflow one way or the other."""
        threshold = min(self.format_overflow_threshold, _overflow_threshold("float32")) * (1 - 2.0**-40)
        with np.errstate(invalid="ignore", over="ignore"):
            return magnitude * (1 + self.relative_bound(inner)) >= threshold

    def running_overflows(self, a: np.ndarray, b: np.ndarray, magnitude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where a running sum of the products ``a[m, k] b[k, n]`` (dequantised, float64) may overflow the
        accumulator's format to +Inf, and where to -Inf, though the final sum need not (a NaN needs both:
        Inf - Inf). A partial sum lies between -N and P, the sums of the negative and of the positive
        products (times the rounding's growth: ``magnitude``, their sum, bounds both); with
        ``promote_every`` = n, a narrow one spans n
        consecutive products, wherever the kernel's groups start (a split-K kernel restarts them): at
        most two adjacent groups of n from k = 0, or n times the largest product, and the float32 sum of
        the groups spans all of them."""
        inner = a.shape[1]
        if inner == 0 or not self.may_reach_overflow(magnitude, inner).any():  # (no partial sum can: the usual case)
            nowhere = np.zeros(magnitude.shape, dtype=bool)
            return nowhere, nowhere
        growth = 1 + self.relative_bound(inner)
        narrow, wide = (threshold * (1 - 2.0**-40) for threshold in (self.format_overflow_threshold,
                                                                     _overflow_threshold("float32")))
        positive_a, negative_a = np.maximum(a, 0), np.maximum(-a, 0)
        positive_b, negative_b = np.maximum(b, 0), np.maximum(-b, 0)
        group = inner if self.promote_every is None else min(self.promote_every, inner)
        starts = np.arange(0, inner, group)
        reaches = []
        with np.errstate(invalid="ignore", over="ignore"):
            for left, right in ((positive_a, positive_b), (negative_a, negative_b)), \
                               ((positive_a, negative_b), (negative_a, positive_b)):
                total = left[0] @ left[1] + right[0] @ right[1]  # (P or N over all of K)
                if self.promote_every is not None and group < inner:
                    if 1 < group and starts.size <= 256:  # the largest sum of two adjacent groups, as they go
                        largest, previous = np.zeros_like(total), np.zeros_like(total)
                        for k in starts:
                            current = (left[0][:, k:k + group] @ left[1][k:k + group]
                                       + right[0][:, k:k + group] @ right[1][k:k + group])
                            np.maximum(largest, previous + current, out=largest)
                            previous = current
                    else:  # (single products, or many small groups: group times the largest product)
                        largest = np.minimum(total, group * np.maximum(
                            np.outer(left[0].max(axis=1), left[1].max(axis=0)),
                            np.outer(right[0].max(axis=1), right[1].max(axis=0))))
                    reaches.append((largest * growth >= narrow) | (total * growth >= wide))
                else:
                    reaches.append(total * growth >= (narrow if self.promote_every is None else min(narrow, wide)))
        return reaches[0], reaches[1]


def _accumulator(accumulator, promote_every) -> _Accumulator:
    if isinstance(accumulator, str):
        if accumulator not in _IEEE_TYPES:
            raise ValueError(f"accumulator must be one of {', '.join(map(repr, OUTPUT_TYPES))} or an int of "
                             f"significand bits, got {accumulator!r}")
        bits, emin, _ = _IEEE_TYPES[accumulator]
    elif _is_int(accumulator):
        bits, emin = _check_int(accumulator, "accumulator (significand bits, float32's range)", 2, 24), -126
    else:
        raise TypeError(f"accumulator must be a type name ({', '.join(map(repr, OUTPUT_TYPES))}) or an int of "
                        f"significand bits, got {type(accumulator).__name__} {accumulator!r}")
    if promote_every is not None:
        promote_every = _check_int(promote_every, "promote_every", 1)
    return _Accumulator(bits, promote_every, 2.0 ** (emin + 1 - bits))


def _output_type(output) -> str | FloatFormat:
    """An IEEE output type's name, or the `FloatFormat` of an output written as codes."""
    if isinstance(output, str) and output in _IEEE_TYPES:
        return output
    if not isinstance(output, (str, FloatFormat)):
        raise TypeError(f"output must be {_OUTPUT_CHOICES}, got {type(output).__name__} {output!r}")
    try:
        fmt = formats.get(output)
    except ValueError:
        raise ValueError(f"output must be {_OUTPUT_CHOICES}, got {output!r}") from None
    if not fmt.signed:
        raise ValueError(f"output: {fmt.name} is unsigned (a scale format, without zero or negative values): a GEMM's "
                         f"output is written in a signed format such as 'E4M3' or 'E5M2'")
    return fmt


@dataclass(frozen=True)
class _Cast:
    """How a kernel's epilogue writes its output as codes: ``encode(float32(S * scale), fmt, saturate)``."""

    fmt: FloatFormat
    scale: float
    saturate: bool

    @functools.cached_property  # (a frozen dataclass's __dict__ takes it: read for every output judged)
    def overflow_codes(self) -> np.ndarray:
        """The codes of +Inf and -Inf under this cast: where a finite overflow goes too (nearest rounding)."""
        return codec.encode(np.array([np.inf, -np.inf]), self.fmt, saturate=self.saturate)

    @functools.cached_property
    def overflow_is_nan(self) -> bool:
        """Whether an overflow gives a NaN code (E4M3 and the FNUZ formats without saturation)."""
        return bool(np.isnan(self.fmt.values()[self.overflow_codes]).any())


def _cast(output, output_scale, saturate) -> _Cast | None:
    """The cast of an output written as codes (``output`` a FloatFormat), checked; None for an IEEE output,
    which takes neither ``output_scale`` nor ``saturate``."""
    if isinstance(output, str):
        given = [name for name, value in (("output_scale", output_scale), ("saturate", saturate)) if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} describe{'s' if len(given) == 1 else ''} the cast of an output "
                             f"written as codes (output='E4M3', 'E5M2', ...), but output={output!r} is written as "
                             f"values: leave {'it' if len(given) == 1 else 'them'} out")
        return None
    if isinstance(output_scale, np.ndarray) and output_scale.size == 1 and output_scale.dtype.kind in "iuf":
        output_scale = output_scale.reshape(())[()]  # (a 0-d or 1-element scale tensor, as TransformerEngine's)
    if output_scale is None:
        scale = 1.0
    elif not _is_real(output_scale):
        raise TypeError(f"output_scale must be a real number (the kernel's float32 output scale), got "
                        f"{type(output_scale).__name__} {output_scale!r}")
    else:
        try:
            scale = float(output_scale)
        except OverflowError:  # (a Python int beyond float64's range)
            scale = math.inf
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"output_scale must be positive and finite (the scale that multiplies the float32 result "
                             f"before its cast), got {output_scale!r}")
        with np.errstate(over="ignore", under="ignore"):  # (beyond float32's range: not one of its values)
            single = float(np.float32(scale))
        wider = isinstance(output_scale, np.floating) and output_scale.dtype.itemsize > 8  # (long double)
        if single != scale or (_is_int(output_scale) and int(output_scale) != scale) or (
                wider and np.float32(output_scale) != output_scale):
            raise ValueError(f"output_scale must be a float32 value, as the scale a kernel multiplies by is, got "
                             f"{output_scale!r}: pass the float32 value the kernel was given (float(np.float32(s)))")
    return _Cast(output, scale, True if saturate is None else _check_bool(saturate, "saturate"))


def _tolerance(reference: MatmulReference, inner: int, accumulator: _Accumulator, output: str,
               carried: np.ndarray | float = 0.0) -> np.ndarray:
    """The largest error a correct kernel's output may have, element by element (see `compare_matmul`);
    ``carried`` is `_carried_underflow`'s term."""
    exact_magnitude = reference.magnitude / (1 - _gamma(inner, _FLOAT64_UNIT_ROUNDOFF))
    relative = accumulator.relative_bound(inner)
    with np.errstate(invalid="ignore"):  # no bound (Inf) times a zero magnitude: nothing to round, 0
        accumulated = np.where(exact_magnitude > 0, relative * exact_magnitude, 0.0)
    accumulated = accumulated + (4 * inner + 4) * accumulator.spacing
    if np.any(carried):
        accumulated = accumulated + (1 + relative) * carried
    bits, emin, _ = _IEEE_TYPES[output]
    with np.errstate(invalid="ignore", over="ignore"):
        before_output = np.abs(reference.value) + reference.error_bound + accumulated
        rounded = 2.0**-bits * before_output + 2.0 ** (emin - bits) + accumulated + reference.error_bound
    return np.where(np.isfinite(reference.value), rounded, 0.0)


def _carried_underflow(a: _Operand, b: _Operand, accumulator: _Accumulator) -> np.ndarray | float:
    """The underflow errors that later multiplications carry, summed per output (0.0 when none can occur).

    A term ``t = x alpha y beta`` (elements x, y; scales alpha, beta) is formed by multiplications
    in the accumulator's format in one of the ways kernels group it: ``(x alpha)(y beta)``,
    ``((x y) alpha) beta`` (a block's partial sum scaled), ``(x y)(alpha beta)``, ``((x alpha) y) beta``
    (B's scale in the epilogue), ``(x (alpha beta)) y`` (both scales folded into one operand), or
    their mirror images. ``x y`` is exact. With gradual underflow a
    product P rounds to ``P (1 + delta) + eta`` with ``|eta| <= s / 2`` (the subnormal spacing s), and
    ``eta != 0`` only where ``|P|`` is below the smallest normal number, lambda (the model of
    arithmetic with gradual underflow: Higham, 2nd ed., chapter 2), while a sum that underflows is
    exact (every float is a multiple of s, so a sum below lambda is itself a subnormal number). The
    final product's eta is in `compare_matmul`'s ``(4K + 4) s_acc``; an intermediate P's eta is multiplied by the rest of the term,
    ``t / P``, and it can be far larger. Summed over the intermediates P = ``x alpha``, ``y beta``,
    ``alpha beta``, ``x alpha y``, ``x y beta``, ``x alpha beta`` and ``y alpha beta``, each where it
    can be below lambda, this is
    ``s / 2 * sum_k (|b| [|a| < lambda] + |a| [|b| < lambda] + |x y| [alpha beta < lambda]
    + beta [|a| y < lambda] + alpha [x |b| < lambda] + y [|a| beta < lambda] + x [alpha |b| < lambda])``;
    a condition that involves both operands is widened to one on each (``alpha < lambda / min beta``),
    which keeps every sum a matrix product.
    It is 0 unless a scale or a dequantised value is small (near lambda times a few powers of two).
    """
    normal = accumulator.spacing * 2.0 ** (accumulator.bits - 1)  # lambda = 2**emin
    terms = []
    for operand in (a, b):
        finite = np.isfinite(operand.values)
        elements = np.where(finite, np.abs(operand.decoded), 0.0)
        scales = np.where(finite & (elements != 0), np.abs(_scaled(np.ones(elements.shape), operand.scales)), 0.0)
        values = elements * scales  # |a| (exact: as operand.values)
        terms.append((elements, scales, values))
    (x, alpha, abs_a), (y, beta, abs_b) = terms
    if not (abs_a.any() and abs_b.any()):
        return 0.0

    def below(array, limit):
        return (array > 0) & (array < limit)

    least = [float(array[array > 0].min()) for array in (alpha, beta, x, y)]  # (nonzero terms only)
    pairs = [(below(abs_a, normal), abs_b), (abs_a, below(abs_b, normal)),
             (x * below(alpha, normal / least[1]), y * below(beta, normal / least[0])),
             (below(abs_a, normal / least[3]), beta), (alpha, below(abs_b, normal / least[2])),
             (below(abs_a, normal / least[1]), y), (x, below(abs_b, normal / least[0]))]
    carried = 0.0
    for left, right in pairs:
        if left.any() and right.any():
            carried = carried + left.astype(np.float64) @ right.astype(np.float64)
    return accumulator.spacing / 2 * carried


def _overflow_threshold(output: str) -> float:
    """The smallest magnitude that rounds to Inf in ``output`` (round to nearest): max + half a spacing."""
    bits, _, emax = _IEEE_TYPES[output]
    return (2.0 - 2.0**-bits) * 2.0**emax


_AGREE = 255


def _judge(actual: np.ndarray, value: np.ndarray, tolerance: np.ndarray, output: str,
           model: _Accumulator, running: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per output: `_AGREE`, or the index in `MATMUL_CLASSES` of why it disagrees. An output overflows
    where the output type does, or the format the kernel's sum ends in (``model``'s), if sooner; where
    ``running`` (`_Accumulator.running_overflows`: +Inf, -Inf) says a running sum may overflow, that
    Inf agrees too, and NaN where both may."""
    plus, minus = running
    threshold = min(_overflow_threshold(output), model.overflow_threshold)
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(actual - value)
        finite_value, finite_actual = np.isfinite(value), np.isfinite(actual)
        must_overflow = finite_value & (np.abs(value) - tolerance >= threshold)
        may_overflow = finite_value & (np.abs(value) + tolerance >= threshold)
        agree = ((finite_value & finite_actual & (error <= tolerance))
                 | (np.isinf(actual) & may_overflow & (np.sign(actual) == np.sign(value)))
                 | (finite_value & (((actual == np.inf) & plus) | ((actual == -np.inf) & minus)
                                   | (np.isnan(actual) & plus & minus)))
                 | (~finite_value & ((actual == value) | (np.isnan(actual) & np.isnan(value)))))
        sign = finite_value & finite_actual & (np.abs(actual + value) <= tolerance) & (np.abs(value) > tolerance)
    return _kinds(agree, must_overflow | (np.isinf(actual) & may_overflow), ~finite_value | ~finite_actual, sign)


def _kinds(agree: np.ndarray, overflow: np.ndarray, nan_or_inf: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """`_AGREE` where ``agree``, else the first class of `MATMUL_CLASSES` whose mask holds (else "other")."""
    kinds = np.full(agree.shape, MATMUL_CLASSES.index("other"), np.uint8)
    for kind, mask in reversed((("overflow", overflow), ("NaN/Inf", nan_or_inf), ("sign", sign))):
        kinds[mask] = MATMUL_CLASSES.index(kind)  # (first match wins)
    kinds[agree] = _AGREE
    return kinds


# ---- outputs written as codes ---------------------------------------------------------------------
# The epilogue's float32 rounding of x = v * scale: |fl32(x) - x| <= 2**-24 |x| + 2**-150 (float32's unit
# roundoff; half its smallest subnormal spacing). The 2**-44 more covers the float64 roundings of the bounds.
_EPILOGUE_RELATIVE, _EPILOGUE_ABSOLUTE = 2.0**-24 + 2.0**-44, 2.0**-150


@dataclass(frozen=True, eq=False)
class _Allowed:
    """Per output, what a correct kernel's code may be: ``bounds`` (2, M, N) float64, the lowest and highest
    values its float32 ``S * scale`` may take; ``codes`` (2, M, N) uint8, their casts, the lowest and highest
    code allowed; ``keys`` (2, M, N), those codes' values, an overflow's NaN code read as the Inf of its side."""

    bounds: np.ndarray
    codes: np.ndarray
    keys: np.ndarray


def _allowed_codes(value: np.ndarray, tolerance: np.ndarray, cast: _Cast, model: _Accumulator) -> _Allowed:
    """The codes a correct kernel may write (`compare_matmul`'s rule for an output written as codes):
    its result lies within ``value +- tolerance`` (the float32 output's tolerance), or is Inf where
    that reaches the overflow threshold of the format its sum ends in (``model``'s); times
    ``cast.scale`` and rounded to float32 it lies within the bounds below; the cast is monotone, so
    its code lies between theirs."""
    finite, nan = np.isfinite(value), np.isnan(value)
    with np.errstate(invalid="ignore", over="ignore"):
        low = np.where(finite, value - tolerance, value)
        high = np.where(finite, value + tolerance, value)
        reach = model.overflow_threshold * (1 - 2.0**-40)  # (a margin for the float64 roundings)
        low = np.where(low <= -reach, -np.inf, low) * cast.scale
        high = np.where(high >= reach, np.inf, high) * cast.scale
        low = np.where(np.isfinite(low), low - (_EPILOGUE_RELATIVE * np.abs(low) + _EPILOGUE_ABSOLUTE), low)
        high = np.where(np.isfinite(high), high + (_EPILOGUE_RELATIVE * np.abs(high) + _EPILOGUE_ABSOLUTE), high)
    bounds = np.stack([np.where(nan, 0.0, low), np.where(nan, 0.0, high)])
    with np.errstate(over="ignore", under="ignore"):
        # To float32, for the cast's table: rounding is monotone, so fl32(low) <= fl32(x) for every x >= low
        # (the kernel's own rounding), and beyond float32's range an Inf casts as any value beyond the format's
        single = bounds.astype(np.float32)
    codes = codec.encode(single, cast.fmt, saturate=cast.saturate)
    if nan.any():  # (a NaN reference: the NaN code, or any code of a format without NaN)
        fmt = cast.fmt
        nan_codes = (fmt.nan_code(), fmt.nan_code()) if fmt.has_nan else (fmt.max_code | fmt.sign_mask, fmt.max_code)
        codes = np.where(nan, np.array(nan_codes, np.uint8).reshape(2, *(1,) * value.ndim), codes)
        bounds = np.where(nan, np.nan, bounds)
    decoded = cast.fmt.values()[codes]
    keys = np.where(np.isnan(decoded) & ~nan, np.copysign(np.inf, bounds), decoded)
    return _Allowed(bounds, codes.astype(np.uint8), keys)


def _judge_codes(codes: np.ndarray, value: np.ndarray, allowed: _Allowed, cast: _Cast,
                 running: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per output written as codes: `_AGREE`, or the index in `MATMUL_CLASSES` of why it disagrees
    (where ``running`` says a running sum may overflow, the cast of that Inf agrees too, and NaN's
    where both may)."""
    plus, minus = running
    fmt = cast.fmt
    got = fmt.values()[codes]
    (low, high), (low_key, high_key) = allowed.bounds, allowed.keys
    finite_value, got_nan = np.isfinite(value), np.isnan(got)
    with np.errstate(invalid="ignore"):
        inside = ~got_nan & (low_key <= got) & (got <= high_key)
        overflow_nan = cast.overflow_is_nan & got_nan & ((high_key == np.inf) | (low_key == -np.inf))
        written_overflow = np.isin(codes, cast.overflow_codes) | (cast.overflow_is_nan & got_nan)
        agree = np.where(np.isnan(value), got_nan | (not fmt.has_nan),
                         inside | overflow_nan | (finite_value & ((codes == cast.overflow_codes[0]) & plus
                                                                  | (codes == cast.overflow_codes[1]) & minus
                                                                  | got_nan & plus & minus)))
        sign = (finite_value & np.isfinite(got) & (low_key <= -got) & (-got <= high_key)
                & ((low_key > 0) | (high_key < 0)))
        beyond = _format_overflow_threshold(fmt)[0]  # (max plus half a spacing)
        must_overflow = finite_value & ((low >= beyond) | (high <= -beyond))
        may_overflow = finite_value & ((high >= beyond) | (low <= -beyond))
    return _kinds(agree, must_overflow | (written_overflow & may_overflow & ~sign),  # (-max for max: sign)
                  ~finite_value | ~np.isfinite(got), sign)


def _steps_outside(got: np.ndarray, keys: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """How many of ``fmt``'s values each code's value ``got`` lies beyond the allowed ones (``keys``:
    the lowest and highest allowed values), 0 inside; Inf for a NaN code."""
    ladder = np.unique(np.abs(fmt.values()[~np.isnan(fmt.values())]))  # (-0 and +0: one step)
    ladder = np.unique(np.concatenate([-ladder, ladder]))
    rank = np.searchsorted(ladder, np.where(np.isnan(got), 0.0, got)).astype(np.float64)
    low, high = (np.searchsorted(ladder, np.nan_to_num(key, nan=0.0)) for key in keys)
    steps = np.maximum(np.maximum(low - rank, rank - high), 0.0)
    return np.where(np.isnan(got), np.inf, steps)


@dataclass(frozen=True)
class MatmulMismatch:
    """One output of a kernel beyond its tolerance.

    Attributes
    ----------
    row, column : int
        Where it is in the M x N output.
    actual, reference : float
        The kernel's value and `reference_matmul`'s. For an output written as codes: the code's
        value, and the reference times ``output_scale`` (what the cast rounds).
    error, tolerance : float
        ``|actual - reference|`` and the most a correct kernel may differ by there (for codes: from
        the scaled reference to the end of the allowed values on the actual's side, 0 if none).
    ratio : float
        ``error / tolerance``; Inf where either side is NaN or Inf. For an output written as codes:
        how many of the format's values the code lies beyond the allowed ones (Inf for a NaN code),
        which ranks the worst.
    kind : str
        Its class, one of `MATMUL_CLASSES`.
    code : int or None
        The kernel's code, for an output written as codes (None otherwise).
    allowed_codes : tuple of int, or None
        The lowest and the highest code a correct kernel may write there, in value order: every
        code whose value lies between theirs agrees (None for an IEEE output).
    allowed_values : tuple of float, or None
        Their values (NaN for a NaN code).
    """

    row: int
    column: int
    actual: float
    reference: float
    error: float
    tolerance: float
    ratio: float
    kind: str
    code: int | None = None
    allowed_codes: tuple[int, int] | None = None
    allowed_values: tuple[float, float] | None = None


#: From this median ``tolerance / |reference|`` on, `MatmulReport.head` says that the check is loose.
LOOSE_RELATIVE_TOLERANCE = 0.01


@dataclass
class MatmulReport:
    """The result of `compare_matmul`: how many outputs lie beyond their tolerance, and why.

    ``str(report)`` is a table for a failing test's message, with the worst output and the hints
    under its first line. The property ``median_relative_tolerance`` says how loose the check is:
    the first line names it from `LOOSE_RELATIVE_TOLERANCE` (1%) up.

    Attributes
    ----------
    title : str
        The formats and shapes, e.g. ``"E4M3 x E4M3 GEMM, 16x512 @ 512x256"``.
    options : dict
        ``accumulator``, ``promote_every`` (when given) and ``output`` (a format's name for an
        output written as codes, with ``output_scale`` and ``saturate``).
    total, count : int
        How many outputs were compared, and how many lie beyond their tolerance.
    by_class : dict
        That count by class, each of `MATMUL_CLASSES`.
    mismatches : list of MatmulMismatch
        The first ``max_rows`` of them, in row-major order.
    worst : MatmulMismatch or None
        The one with the largest ``error / tolerance`` (None when all agree).
    hints : list of str
        Causes verified by recomputing the product (see `compare_matmul`).
    reference : MatmulReference
        (Keyword-only, as is ``tolerance``.) What the outputs were compared with.
    tolerance : numpy.ndarray
        M x N float64: each output's tolerance (for an output written as codes, that of the kernel's
        float32 result before its cast, which ``allowed_codes`` follows from).
    zero_would_pass : int
        (Keyword-only.) How many outputs with a nonzero reference have a tolerance of at least
        ``|reference|``, where an output of 0 would agree too (and the negated reference, where it
        reaches twice ``|reference|``): there the bound, rigorous for the worst case, cannot tell a
        dropped output. Large K with cancelling signs gets there: the accumulation bound
        ``gamma_(K+3) S`` grows as K**2, the reference as sqrt(K). For an output written as codes:
        those where 0's code is allowed (the scaled product rounds to 0 in the format, or the
        tolerance reaches it). `head` names them; `assert_matmul_close` warns when they are most
        outputs.
    allowed_codes : numpy.ndarray or None
        (Keyword-only.) For an output written as codes, 2 x M x N uint8: the lowest and the
        highest code a correct kernel may write at each output, in value order (a NaN reference's:
        the NaN code twice, or -max and max for a format without NaN, where any code agrees; where
        the range reaches an overflow to NaN, a NaN code of either sign agrees too; where a running
        sum may overflow, the cast of that Inf, or NaN's, agrees too, outside this range); None for
        an IEEE output.
    overflow_would_pass : int
        (Keyword-only.) How many outputs with a finite reference would agree as an Inf or NaN,
        since a running sum may overflow the accumulator's format there (a narrow accumulator and
        large products): the check cannot tell a kernel that overflowed there. `head` names them.
    overflow_passed : int
        (Keyword-only.) How many of those the kernel did write as an Inf or NaN (or, for codes, its
        cast), agreeing only by that allowance: `head` names them, and `assert_matmul_close` warns.
    """

    title: str
    options: dict[str, Any]
    total: int
    count: int
    by_class: dict[str, int]
    mismatches: list[MatmulMismatch] = field(default_factory=list)
    worst: MatmulMismatch | None = None
    hints: list[str] = field(default_factory=list)
    reference: MatmulReference = field(kw_only=True)  # (always given: keyword-only, after the defaults)
    tolerance: np.ndarray = field(kw_only=True)
    zero_would_pass: int = field(default=0, kw_only=True)
    allowed_codes: np.ndarray | None = field(default=None, kw_only=True)
    overflow_would_pass: int = field(default=0, kw_only=True)
    overflow_passed: int = field(default=0, kw_only=True)

    @property
    def ok(self) -> bool:
        return self.count == 0

    @property
    def median_relative_tolerance(self) -> float:
        """The median of ``tolerance / |reference|`` over the outputs with a finite nonzero reference (NaN
        where there are none). With random signs it grows as K**1.5: about 0.19% at K = 1024, 1.4% at
        4096 and 12% at 16384 for N(0, 1) E4M3 operands (per-tensor or MX scales), where a float16
        accumulator, or a 14-bit one never promoted, goes unseen at most outputs."""
        magnitude = np.abs(self.reference.value)
        counted = np.isfinite(magnitude) & (magnitude > 0)
        return float(np.median(self.tolerance[counted] / magnitude[counted])) if counted.any() else math.nan

    def head(self) -> str:
        """The first line: the GEMM, the options, the count and the classes (and how loose the check is,
        where it is: ``zero_would_pass``, and a median tolerance of `LOOSE_RELATIVE_TOLERANCE` or more)."""
        classes = ", ".join(f"{kind} {n}" for kind, n in self.by_class.items() if n)
        options = ", ".join(f"{key}={value!r}" for key, value in self.options.items())
        loose = (f"; at {self.zero_would_pass} of the {self.total} the tolerance reaches |reference| (0 would "
                 f"agree there)" if self.zero_would_pass else "")
        if self.zero_would_pass and self.allowed_codes is not None:  # (codes: 0 is among the allowed ones)
            loose = (f"; at {self.zero_would_pass} of the {self.total} the allowed codes include 0 (the scaled "
                     f"product rounds to 0 in {self.options['output']}, or the tolerance reaches it)")
        if self.overflow_would_pass:
            loose += (f"; at {self.overflow_would_pass} of the {self.total} a running sum may overflow the accumulator "
                      f"(its Inf would agree there" + (f"; the kernel wrote one at {self.overflow_passed}"
                                                       if self.overflow_passed else "") + ")")
        median = self.median_relative_tolerance
        if median >= LOOSE_RELATIVE_TOLERANCE:
            loose += (f"; the median tolerance is {100 * median:.3g}% of |reference| (a loose check: a smaller K, "
                      f"or operands of one sign, check more)")
        return (f"{self.title} ({options}): {self.count} of {self.total} outputs beyond tolerance"
                + (f" [{classes}]" if classes else "") + loose)

    def __str__(self) -> str:
        if self.ok:
            return self.head()
        lines = [self.head()]
        worst, rows = self.worst, self.mismatches
        if worst is not None and worst.code is not None:
            lines.append(f"worst: ({worst.row}, {worst.column}), code {_coded(worst)}, allowed {_allowed(worst)}, "
                         f"reference x output_scale {worst.reference!r}")
        elif worst is not None:  # (always, where an output disagrees)
            lines.append(f"worst: ({worst.row}, {worst.column}), error {worst.error:.3g} = "
                         f"{worst.ratio:.3g} x tolerance {worst.tolerance:.3g}")
        lines += [f"hint: {hint}" for hint in self.hints]
        columns = [("row", 5, [str(m.row) for m in rows]), ("column", 6, [str(m.column) for m in rows])]
        if self.allowed_codes is not None:
            columns += [("code", 4, [f"{m.code:#04x}" for m in rows]),
                        ("value", 10, [f"{m.actual:.9g}" for m in rows]),
                        ("reference x scale", 20, [repr(m.reference) for m in rows]),
                        ("allowed", 16, [_allowed(m) for m in rows])]
        else:
            columns += [("actual", 16, [f"{m.actual:.9g}" for m in rows]),
                        ("reference", 24, [repr(m.reference) for m in rows]),
                        ("error", 10, [f"{m.error:.3g}" for m in rows]),
                        ("tolerance", 10, [f"{m.tolerance:.3g}" for m in rows]),
                        ("error/tol", 10, [f"{m.ratio:.3g}" for m in rows])]
        widths = [max([minimum] + [len(text) for text in texts]) for _, minimum, texts in columns]

        def line(cells, kind):
            return " ".join(f"{cell:>{width}}" for cell, width in zip(cells, widths)) + f"  {kind}"

        lines += ["", line([name for name, _, _ in columns], "class")]
        lines += [line([texts[i] for _, _, texts in columns], m.kind) for i, m in enumerate(rows)]
        if self.count > len(rows):
            lines.append(f"... and {self.count - len(rows)} more")
        return "\n".join(lines)


def _coded(mismatch: MatmulMismatch) -> str:
    """A code and its value, e.g. ``0x5d (104)``."""
    return f"{mismatch.code:#04x} ({mismatch.actual:.9g})"


def _allowed(mismatch: MatmulMismatch) -> str:
    """The codes allowed at a mismatched output and their values, e.g. ``0x5c..0x5d (96..104)``, or one code."""
    assert mismatch.allowed_codes is not None and mismatch.allowed_values is not None  # (a code output's row)
    (low, high), (low_value, high_value) = mismatch.allowed_codes, mismatch.allowed_values
    if low == high:
        return f"{low:#04x} ({low_value:.9g})"
    return f"{low:#04x}..{high:#04x} ({low_value:.9g}..{high_value:.9g})"


def compare_matmul(actual: ArrayLike, a_codes: ArrayLike, a_scales: ArrayLike, b_codes: ArrayLike,
                   b_scales: ArrayLike, *, a_format: str | FloatFormat, b_format: str | FloatFormat,
                   accumulator: str | int = "float32", promote_every: int | None = None,
                   output: str | FloatFormat = "float32", output_scale: float | None = None,
                   saturate: bool | None = None, max_rows: int = 20) -> MatmulReport:
    """Compare a kernel's scaled GEMM output with `reference_matmul`, within a bound on rounding.

    A correct kernel differs from the exact product by rounding only, and each output's
    tolerance bounds that rounding (S = ``sum_k |a_mk b_kn|``, the dequantised operands')::

        tolerance = acc * S + (4K + 4) s_acc + (1 + acc) C               accumulation
                  + u_out * (|reference| + acc * S + ...) + s_out / 2    rounding to the output
                  + reference.error_bound                                the reference's own

    ``acc = gamma_(K+3)(u_acc)``, Higham's ``gamma_n = n u / (1 - n u)`` with ``u_acc = 2**-p`` for
    an accumulator of p significand bits (``2**-24`` for float32), rounding to nearest: each product
    passes through at most K + 3 roundings, the K - 1 additions of its dot product, the
    dequantisation of its two operands (or the two scale multiplications of a block's partial sum)
    and the product itself, and one epilogue scale (NVFP4's tensor scales). With ``promote_every=n``
    the kernel sums groups of n products in the narrow accumulator and adds each group, scaled, into
    float32 (DeepSeek-V3, arXiv:2412.19437, section 3.3.2: Hopper's FP8 tensor cores keep about 14
    bits, and promoting every 128 products to float32 restores accuracy):
    ``acc = g1 + g2 + g1 g2`` with ``g1 = gamma_n(2**-p)`` and ``g2 = gamma_(ceil(K/n)+3)(2**-24)``.
    ``s_acc`` is the accumulator's subnormal spacing: a rounding that lands in the subnormal range
    errs by up to half of it, absolutely, and a dot product holds fewer than 4K + 4 roundings
    (the factor 2 covers their growth through the later ones). ``C`` is 0 unless scales or dequantised
    values are tiny: an intermediate product (a dequantised value, a product of scales, a block's sum
    times one scale) that rounds into the subnormals errs by up to ``s_acc / 2``, and the rest of its
    term multiplies that error (`_carried_underflow` derives it). The bound assumes the kernel's
    products do not overflow: a dequantised value or scale product beyond float32's range (E8M0
    scale ``2**127`` times 448) gives Inf or NaN in a float32 kernel that forms it, and such an
    output is reported (so is one beyond a float16 accumulator's range, where a kernel forms the
    dequantised value in float16). A running sum may overflow (below); it is judged on the dequantised
    products, so a kernel that sums unscaled codes and scales later overflows elsewhere (not
    modelled). ``u_out`` is the output type's unit
    roundoff (``2**-24``, ``2**-8`` for bfloat16, ``2**-11`` for float16), ``s_out`` its subnormal spacing.

    Outputs agree when within tolerance; NaN where the reference is NaN, the same Inf where it is
    Inf; and the Inf of its sign where the reference, within tolerance, reaches the output type's
    overflow threshold (max plus half a spacing), or the accumulator's where that is lower (a float16
    sum overflows past 65520; with ``promote_every`` the sum ends in float32); and +Inf (-Inf) where
    a running sum may overflow the accumulator's format that way, even where the reference does not:
    a partial sum lies between -N and P, the sums of the negative and of the positive dequantised
    products (with ``promote_every``, of two adjacent groups from k = 0, where a kernel's groups may
    start anywhere, or of n times the largest product), and NaN (Inf - Inf) where both may
    (``MatmulReport.overflow_would_pass`` counts those outputs, and the first line names them). The
    classes of the others, first match wins: ``overflow`` (the reference is beyond the output's range and the
    kernel did not give that Inf, or the kernel gave an Inf near it of the other sign), ``NaN/Inf``
    (the reference or the output is NaN or Inf, otherwise), ``sign`` (the output is the negated
    reference), ``other``. Where a
    tolerance reaches ``|reference|`` (a large K whose signs cancel; a narrow accumulator) an output
    of 0 would agree as well: the report counts those outputs (``zero_would_pass``) and its first
    line names them, since the bound cannot check them.

    An output written as codes (``output="E4M3"``, ``"E5M2"``, or another signed format): a fused
    epilogue (cuBLASLt with an FP8 D, TransformerEngine) writes ``encode(float32(v * output_scale))``
    of its float32 result v, unseen (the scale multiplies before the cast, which rounds to nearest
    even and saturates or not). v lies within T, the float32 output's tolerance above, of the
    reference R (or is Inf where ``|R| + T`` reaches the overflow threshold of the format its sum
    ends in: the declared accumulator's, or float32's with ``promote_every``), so its product
    rounded to float32 lies in [lo, hi]: ``(R -+ T) * output_scale``, widened by ``2**-24`` of their
    magnitude plus ``2**-150`` (the product's float32 rounding: unit roundoff, half the smallest
    subnormal spacing). The cast is monotone (in value order, an overflow's Inf or NaN code beyond
    max), so the code lies between ``encode(lo)`` and ``encode(hi)`` (`minifp8.codec.encode` with
    ``saturate``): the check is sound, and a correct kernel always passes. An output agrees where its
    code's value lies between those codes' values (-0 equals +0; where they reach an overflow's NaN
    code, a NaN code of either sign). A NaN reference needs a NaN code (a format without NaN: any
    code); an Inf reference that Inf's cast, as `minifp8.codec.encode` casts it: with
    ``saturate=True``, +-max (ONNX Cast-24; E5M2 too), else E5M2's Inf or E4M3's NaN. The classes
    are as above, ``overflow`` where [lo, hi] lies beyond the format's overflow threshold (max plus
    half a spacing; or reaches it and the kernel wrote the overflow's code). ``report.allowed_codes``
    holds each output's lowest and highest allowed code, and the table each mismatched code with its
    value and the codes allowed, the worst first (the most values beyond them). Of the hints below,
    only K = 0's and the output of zeros' are given. What the rule assumes: one fused epilogue, the
    float32 result times ``output_scale`` then cast (a pipeline that first writes the result as
    bfloat16 or float16, then casts it, rounds twice: check its 16-bit result instead), and no
    product of scales that involves ``output_scale`` (a folded ``scale_a * scale_b * output_scale``)
    overflows float32 or underflows into its subnormals. Where a running sum may overflow the
    accumulator's format (above), the cast of that Inf (or of NaN) agrees too, as that Inf or NaN
    does for an IEEE output type, outside ``allowed_codes``.

    Hints, each verified by recomputing the product with the same tolerance (when M * K * N <=
    ``2**26`` and something disagrees): the output matches the product with a scale array applied
    twice, omitted (all ones) or inverted, read in transposed (column-major) order, transposed as
    the layout (``scales.T``, where its shape differs and tiles the operand: scales applied along
    the wrong axis), or shifted by one block along an axis (wrapping round, or keeping the last
    block's own), or read from other entries of the array (each block's scale fitted by least
    squares and taken to the nearest value the array holds); or both scale arrays wrong at once;
    or the product without one K block (block sizes from the scale layouts, and 16,
    32, 64, 128, 256); or the product with one scale alone times ``2**e``, e = -2, -1, 1 or 2 (tried
    where one block row of A, or one block column of B, holds every mismatched output); or the
    reference transposed; or, when nothing above matched, every mismatched output lies on one side
    of the reference within one spacing of the output type (or of the 16-bit type whose values all
    outputs are): rounded toward zero, -Inf, +Inf or away from zero, not to nearest; or every
    mismatched output is the reference times one factor beyond that rounding (a power of two is
    named as one), or, with ``output="float32"``, every output
    is a bfloat16 (or float16) value and all are within tolerance judged as that output type (an
    output type not declared), or the output matches the product of the dequantized operands each
    rounded to nearest bfloat16, float16 or TF32 (a cast after dequantizing, or TF32 inputs; a
    truncating conversion is not recognised), or the errors
    fit a narrower accumulator (only one whose bound is at most S / 8, and errors not confined to one
    row or column; where the declared accumulator is not promoted, the hint adds whether they also fit
    ``accumulator=14, promote_every=128``, which cuBLAS's FP8 GEMM passed on an H200 where float32's
    bound failed: tests/test_crosscheck_gemm.py). A cause whose product an output of
    zeros matches as well is not named; an output that is all zeros where the product is not gets
    a hint of its own (left unwritten?), as does any output where K = 0.

    Parameters
    ----------
    actual : array_like
        The kernel's output, M x N: float16, float32 or float64 values of the ``output`` type, or
        an ml_dtypes float array (a bfloat16 output as it is), read as its float32 values (exact).
        For an output written as codes: uint8 codes, or an ml_dtypes array of that format
        (``float8_e4m3fn``, ...).
    a_codes, a_scales, b_codes, b_scales
        The operands, as `reference_matmul` takes them.
    a_format, b_format : FloatFormat or str
        The element formats.
    accumulator : str or int
        ``"float32"``, ``"bfloat16"``, ``"float16"``, or the significand bits (2 to 24, the implicit
        bit included) of an accumulator with float32's exponent range, rounding to nearest (a
        truncating one of p bits errs as much as a rounding one of p - 1). Default "float32".
        One whose relative bound ``acc`` reaches 1 over K products (bfloat16 from K = 125 without
        ``promote_every``) bounds nothing, and is a ValueError.
    promote_every : int, optional
        Products summed in the accumulator before each group is added into a float32 accumulator
        (128 in DeepSeek-V3). None: no promotion. Overflow is judged on the dequantised products: a
        kernel that sums a group's unscaled codes in float16 and scales the group's sum can overflow
        where this check does not expect it (not modelled).
    output : str or FloatFormat
        The type the kernel wrote its output in, ``"float32"``, ``"bfloat16"`` or ``"float16"``;
        or, for an output written as codes, their format: a signed `FloatFormat` or its name
        (``"E4M3"``, ``"E5M2"``, ``"float8_e4m3fn"``, ...). Default "float32".
    output_scale : float, optional
        For an output written as codes: the scale that multiplied the kernel's float32 result
        before its cast (TransformerEngine's ``scale`` of the output, not ``scale_inv``), a positive
        float32 value, as the kernel has it. None: 1.0. Refused (ValueError) with an IEEE output.
    saturate : bool, optional
        For an output written as codes: whether the cast saturates (overflow and Inf give +-max)
        or not (Inf for E5M2, NaN for E4M3), as `minifp8.codec.encode`'s ``saturate`` (a format
        without Inf or NaN, FP6 or FP4, saturates either way). None: True. Refused (ValueError)
        with an IEEE output.
    max_rows : int
        How many mismatches to keep for the printed table (an int >= 0).

    Returns
    -------
    MatmulReport
        Never raises for a mismatch: check ``report.ok``, or call `assert_matmul_close`.
    """
    _check_max_rows(max_rows)
    model = _accumulator(accumulator, promote_every)
    output_type = _output_type(output)
    cast = _cast(output_type, output_scale, saturate)
    a, b = _operands(a_codes, a_scales, b_codes, b_scales, a_format, b_format)
    (rows, inner), columns = a.values.shape, b.values.shape[1]
    bound = model.relative_bound(inner)
    if not bound < 1:  # (a tolerance of S or more: an output of zeros, or any output at all, would pass)
        raise ValueError(
            f"compare_matmul: an accumulator of {model.describe()} summing K = {inner} products has no useful "
            f"error bound (" + ("none: K u >= 1" if np.isinf(bound) else f"{bound:.3g} of S") + "), so any "
            f"output would pass; declare promote_every (DeepSeek-V3 adds every 128 products into float32) or a "
            f"wider accumulator")
    reference = _reference(a.values, b.values)
    carried = _carried_underflow(a, b, model)
    allowed, codes = None, np.zeros((0, 0), np.uint8)
    running = model.running_overflows(a.values, b.values, reference.magnitude)  # (an Inf, or NaN, is correct there)
    if isinstance(output_type, str):
        got = _output_values(actual, (rows, columns), output_type)
        tolerance = _tolerance(reference, inner, model, output_type, carried)
        kinds = _judge(got, reference.value, tolerance, output_type, model, running)
        zeros_agree = _judge(np.zeros_like(got), reference.value, tolerance, output_type, model, running) == _AGREE
        scaled, row_tolerance = reference.value, tolerance
    else:
        assert cast is not None  # (an output of codes has its cast)
        codes = _output_codes(actual, (rows, columns), cast.fmt)
        got = cast.fmt.values()[codes]
        tolerance = _tolerance(reference, inner, model, "float32", carried)
        allowed = _allowed_codes(reference.value, tolerance, cast, model)
        kinds = _judge_codes(codes, reference.value, allowed, cast, running)
        zeros_agree = _judge_codes(np.zeros_like(codes), reference.value, allowed, cast, running) == _AGREE
        zeros_agree &= ~np.isnan(reference.value)  # (a NaN reference of a format without NaN: any code agrees)
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = reference.value * cast.scale  # (what the cast rounds: the rows show it)
            row_tolerance = np.maximum(np.where(got >= scaled, allowed.keys[1] - scaled, scaled - allowed.keys[0]), 0.0)
    where = np.flatnonzero(kinds.reshape(-1) != _AGREE)
    overflow_passed = 0
    if running[0].any() or running[1].any():  # (outputs that agree by the running-overflow allowance alone)
        nowhere = np.zeros_like(running[0])
        if isinstance(output_type, str):
            unallowed = _judge(got, reference.value, tolerance, output_type, model, (nowhere, nowhere))
        else:
            assert allowed is not None and cast is not None  # (an output of codes)
            unallowed = _judge_codes(codes, reference.value, allowed, cast, (nowhere, nowhere))
        overflow_passed = int(np.count_nonzero((kinds == _AGREE) & (unallowed != _AGREE)))
    zero_would_pass = int(np.count_nonzero(zeros_agree & (reference.value != 0)))
    with np.errstate(invalid="ignore"):  # (outputs whose Inf is not already required)
        overflow_would_pass = int(np.count_nonzero((running[0] | running[1]) & np.isfinite(reference.value)
                                                   & (np.abs(reference.value) < model.overflow_threshold)))
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(got - scaled)
        ratio = np.where(np.isfinite(got) & np.isfinite(scaled), _tolerance_ratio(error, row_tolerance), np.inf)
    if allowed is not None and cast is not None:  # (for codes, how far outside: in steps of the format)
        ratio = _steps_outside(got, allowed.keys, cast.fmt)

    def row_of(flat):
        i, j = divmod(int(flat), columns)
        coded: dict[str, Any] = {} if allowed is None or cast is None else dict(
            code=int(codes[i, j]), allowed_codes=(int(allowed.codes[0, i, j]), int(allowed.codes[1, i, j])),
            allowed_values=(float(cast.fmt.values()[allowed.codes[0, i, j]]),
                            float(cast.fmt.values()[allowed.codes[1, i, j]])))
        return MatmulMismatch(i, j, float(got[i, j]), float(scaled[i, j]), float(error[i, j]),
                              float(row_tolerance[i, j]), float(ratio[i, j]), MATMUL_CLASSES[kinds[i, j]], **coded)

    counts = np.bincount(kinds.reshape(-1)[where], minlength=len(MATMUL_CLASSES))
    worst = row_of(where[np.argmax(np.nan_to_num(ratio.reshape(-1)[where], nan=np.inf))]) if where.size else None
    hints = []
    if where.size:
        if inner == 0:  # (no product to recompute a cause with)
            hints = ["K = 0: every output is an empty sum, 0, and the kernel wrote other values: an output left "
                     "unwritten (uninitialised memory), or K taken from another dimension?"]
        elif not got.any() and reference.value.any():  # (no cause can be checked against an output of zeros)
            hints = ["every output is 0 and the product is not: an output left unwritten, or a kernel that did not "
                     "run?"]
        elif not isinstance(output_type, str):  # (the hints judge float outputs: a code output gets those above)
            hints = []
        elif rows * inner * columns <= _HINT_WORK_LIMIT:
            hints = _hints(got, a, b, reference, kinds, model, output_type, carried)
        else:
            hints = [f"none computed: M * K * N = {rows * inner * columns} is above 2**26; compare a smaller GEMM"]
    a_name, b_name = formats.get(a_format).name, formats.get(b_format).name
    options = {"accumulator": accumulator, **({"promote_every": promote_every} if promote_every else {}),
               "output": output_type if isinstance(output_type, str) else output_type.name,
               **({} if cast is None else {"output_scale": cast.scale, "saturate": cast.saturate})}
    return MatmulReport(f"{a_name} x {b_name} GEMM, {rows}x{inner} @ {inner}x{columns}", options,
                        int(rows * columns), int(where.size),
                        {kind: int(n) for kind, n in zip(MATMUL_CLASSES, counts)},
                        [row_of(flat) for flat in where[:max_rows]], worst, hints, reference=reference,
                        tolerance=tolerance, zero_would_pass=zero_would_pass, overflow_would_pass=overflow_would_pass,
                        overflow_passed=overflow_passed, allowed_codes=None if allowed is None else allowed.codes)


def assert_matmul_close(actual: ArrayLike, a_codes: ArrayLike, a_scales: ArrayLike, b_codes: ArrayLike,
                        b_scales: ArrayLike, *, a_format: str | FloatFormat, b_format: str | FloatFormat,
                        accumulator: str | int = "float32", promote_every: int | None = None,
                        output: str | FloatFormat = "float32", output_scale: float | None = None,
                        saturate: bool | None = None, max_rows: int = 20) -> None:
    """Raise ``AssertionError`` with the `MatmulReport` when an output lies beyond its tolerance
    (the arguments are `compare_matmul`'s).

    Warns (UserWarning) when the outputs pass but at more than half of those with a finite nonzero
    reference the tolerance reaches ``|reference|`` (``MatmulReport.zero_would_pass``): an output
    of zeros would have passed too, so the assertion checked little (a narrow accumulator, or a
    large K whose signs cancel; a smaller K checks more). Warns too when an output passed as an
    Inf or NaN only because a running sum may overflow the accumulator there
    (``MatmulReport.overflow_passed``): the check cannot tell that from a kernel that overflowed.
    """
    report = compare_matmul(actual, a_codes, a_scales, b_codes, b_scales, a_format=a_format, b_format=b_format,
                            accumulator=accumulator, promote_every=promote_every, output=output,
                            output_scale=output_scale, saturate=saturate, max_rows=max_rows)
    if not report.ok:
        raise AssertionError(str(report))
    reference = report.reference.value
    if 2 * report.zero_would_pass > np.count_nonzero(np.isfinite(reference) & (reference != 0)):
        remedy = "a larger output_scale, or a smaller K" if report.allowed_codes is not None else "a smaller K"
        warnings.warn(f"assert_matmul_close checked little: {report.head()}; an output of zeros would pass at "
                      f"{report.zero_would_pass} of them (test {remedy})", stacklevel=2)
    if report.overflow_passed:
        warnings.warn(f"assert_matmul_close passed {report.overflow_passed} outputs as an overflowed running sum (an "
                      f"Inf or NaN, or its cast) where the exact product is finite: a running sum may overflow the "
                      f"{report.options['accumulator']} accumulator there, and the check cannot tell a kernel that "
                      f"overflowed: {report.head()} (smaller operands, or a wider accumulator, check them)",
                      stacklevel=2)


def _output_values(actual, shape: tuple, output: str) -> np.ndarray:
    """The kernel's output as float64, checked: its shape, and that it holds values of ``output``."""
    codec._check_float_environment()
    array = _plain_array(actual, "actual")
    if array.dtype.itemsize == 1 and array.dtype.kind not in "bOSU":  # (uint8, int8, ml_dtypes' float8/6/4)
        named = next((fmt.name for fmt in formats.CATALOGUE.values() if fmt.signed and array.dtype.name in fmt.aliases),
                     None)
        spelled = f"output={named!r}" if named else "output='E4M3' or 'E5M2' (the format it wrote)"
        raise TypeError(f"actual is a {array.dtype} array, codes, but output={output!r} declares values (float16, "
                        f"bfloat16, float32 or float64): for a kernel that writes its output as codes (a fused "
                        f"epilogue's cast), pass {spelled}, with output_scale= (the scale that multiplied its float32 "
                        f"result before the cast) and saturate= (whether the cast saturates)")
    array = codec._ml_floats_as_float32(array)  # bfloat16, ...: float32 holds them exactly
    if array.dtype.kind != "f" or array.dtype.itemsize not in (2, 4, 8):
        raise TypeError(f"actual must be the kernel's output as float16, float32 or float64 values, got dtype "
                        f"{array.dtype}{_widening_hint(array.dtype, 'actual')}")
    if array.shape != shape:
        raise ValueError(f"actual has shape {array.shape}, but the product is {shape[0]} x {shape[1]}")
    values = array.astype(np.float64)
    representable = _values_of(values, output)
    if not representable.all():
        index = tuple(int(i) for i in np.unravel_index(np.argmin(representable), shape))
        wider = "" if _values_of(values[index], "float32") else (
            "; no output type holds it (a float64 kernel's output?): round it with .astype(np.float32) and check "
            "it as float32, whose tolerance covers that rounding")
        raise ValueError(f"actual[{index}] = {float(values[index])!r} is not a {output} value: pass output= the type "
                         f"the kernel wrote ({', '.join(map(repr, OUTPUT_TYPES))}){wider}")
    return values


def _output_codes(actual, shape: tuple, fmt: FloatFormat) -> np.ndarray:
    """The kernel's output codes (uint8), checked: codes, not values, of ``fmt``, in the product's shape."""
    codec._check_float_environment()
    array = _plain_array(actual, "actual")
    if (array.dtype.kind == "f" and array.dtype.itemsize in (2, 4, 8)) or (
            codec._ml_dtypes_kind(array.dtype) == "float" and array.dtype.itemsize > 1):
        raise TypeError(f"actual is a {array.dtype} array, but output={fmt.name!r} declares an output written as "
                        f"{fmt.name} codes: pass the kernel's codes (uint8, or its ml_dtypes array of {fmt.name}); "
                        f"an output written as {array.dtype} values is checked with output='float32', 'bfloat16' or "
                        f"'float16'")
    if array.shape != shape:
        raise ValueError(f"actual has shape {array.shape}, but the product is {shape[0]} x {shape[1]}")
    if (array.dtype.kind in "iu" and array.dtype.itemsize > 1 and array.size
            and 0 <= array.min() and array.max() < 1 << fmt.bits):  # (_codes_of's message offers values too)
        raise TypeError(f"actual must be the kernel's {fmt.name} codes as uint8 (or its ml_dtypes array), got dtype "
                        f"{array.dtype}: a Python int or list of ints becomes int64; convert with .astype(np.uint8)")
    return _codes_of(array, fmt, shape, "actual")


def _values_of(values: np.ndarray, output: str) -> np.ndarray:
    """Where ``values`` (float64) holds a value of the output type ``output`` (NaN counts as one)."""
    with np.errstate(over="ignore", invalid="ignore"):
        narrowed = values.astype(np.float16 if output == "float16" else np.float32)
        representable = (narrowed == values) | np.isnan(values)
        if output == "bfloat16":
            representable &= (narrowed.view(np.uint32) & 0xFFFF == 0) | np.isnan(values)
    return representable


# ---- hints: causes verified by recomputing ------------------------------------------------------
def _hints(got, a: _Operand, b: _Operand, reference: MatmulReference, kinds, model: _Accumulator,
           output: str, carried) -> list[str]:
    """`compare_matmul`'s hints: the causes whose recomputed product the output matches (and that an
    output of zeros would not match as well: a cause with a negligible product explains nothing)."""
    (rows, inner), columns = a.values.shape, b.values.shape[1]
    mismatched = kinds != _AGREE

    def matches_each(candidates: MatmulReference, accumulator: _Accumulator = model, carried=carried,
                     output_type: str = output) -> np.ndarray:
        """For candidates stacked on a leading axis ``(count, M, N)``: whether the output matches each."""
        tolerance = _tolerance(candidates, inner, accumulator, output_type, carried)
        reach = accumulator.may_reach_overflow(candidates.magnitude, inner)  # (each candidate's own, either sign:
        running = (reach, reach)                                             # a hint, not a verdict)
        agree = _judge(got, candidates.value, tolerance, output_type, accumulator, running) == _AGREE
        zeros = _judge(np.zeros_like(got), candidates.value, tolerance, output_type, accumulator, running)
        zeros = zeros[:, mismatched]
        return agree.reshape(len(agree), -1).all(axis=1) & (zeros != _AGREE).any(axis=1)

    def matches(candidate: MatmulReference, accumulator: _Accumulator = model, carried=carried,
                output_type: str = output) -> bool:
        stacked = MatmulReference(*(array[None] for array in (candidate.value, candidate.magnitude,
                                                              candidate.error_bound)))
        return bool(matches_each(stacked, accumulator, carried, output_type)[0])

    hints = []
    with np.errstate(all="ignore"):  # variants may overflow, divide by zero or multiply Inf by 0
        for name, operand, axes in (("a_scales", a, ("M", "K")), ("b_scales", b, ("K", "N"))):
            for scales, what in _scale_variants(operand.scales, operand.values.shape, name, axes):
                if np.array_equal(scales, operand.scales, equal_nan=True):
                    continue  # (uniform scales: the variant is the reference itself)
                variant = _Operand(operand.decoded, scales, _scaled(operand.decoded, scales))
                pair = (variant, b) if operand is a else (a, variant)
                if matches(_reference(pair[0].values, pair[1].values), carried=_carried_underflow(*pair, model)):
                    hints.append(f"the output matches the product with {what}")
        for change, what in ((lambda s: s * s, "a_scales and b_scales both applied twice (each scale squared): the "
                                               "epilogue's product of scales applied twice?"),
                             (np.ones_like, "a_scales and b_scales both all ones: both scales omitted?"),
                             (lambda s: 1 / s, "1 / a_scales and 1 / b_scales: the scales and their inverses "
                                               "confused?")):
            a_scales, b_scales = change(a.scales), change(b.scales)
            if (np.array_equal(a_scales, a.scales, equal_nan=True)
                    or np.array_equal(b_scales, b.scales, equal_nan=True)):
                continue  # (one operand's variant is the reference itself: the hints above have it)
            if _uniform_scales(a, b):
                continue  # (one factor on the whole product: _factor_hint names it, with the product's values)
            pair = (_Operand(a.decoded, a_scales, _scaled(a.decoded, a_scales)),
                    _Operand(b.decoded, b_scales, _scaled(b.decoded, b_scales)))
            if matches(_reference(pair[0].values, pair[1].values), carried=_carried_underflow(*pair, model)):
                hints.append(f"the output matches the product with {what}")
        hints += _dropped_block_hints(a, b, reference, matches_each)
        if rows > 1 and columns > 1:  # (an (M, N) output written column-major holds the reference's
            # transpose read row by row: the transpose itself when M == N)
            transposed = MatmulReference(*(array.T.reshape(rows, columns) for array in
                                           (reference.value, reference.magnitude, reference.error_bound)))
            if matches(transposed):
                hints.append("the output is the reference transposed: a transposed or column-major output?")
        hints += _one_scale_hints(got, a, b, reference, mismatched, matches)
        if not hints:
            hints += _other_entries_hints(got, a, b, matches, model)
        tolerance = _tolerance(reference, inner, model, output, carried)
        if not hints:
            hints += _directed_rounding_hint(got, reference.value, mismatched, tolerance, output)
        if not hints:
            hints += _factor_hint(got, a, b, reference.value, mismatched, tolerance, output)
    # An output rounded to a 16-bit type but declared float32: every value is one of that type, and
    # the output is within the bound of the declared accumulator with that output (before the
    # accumulators below, whose wider bounds an output rounding fits as well).
    if not hints and output == "float32":
        for narrow in ("bfloat16", "float16"):
            if _values_of(got, narrow).all() and matches(reference, output_type=narrow):
                hints.append(f"every output is a {narrow} value, and all are within tolerance judged as a "
                             f"{narrow} output (accumulator of {model.describe()}): pass output={narrow!r}, the "
                             f"type the kernel wrote?")
                break
    # Operands rounded to a 16-bit type (or TF32) after dequantization, then multiplied and summed
    # correctly: their product is checked before a narrower accumulator, whose looser bound it fits too.
    if not hints:
        with np.errstate(over="ignore"):  # (beyond float16's range: Inf, as the kernel's cast gives)
            for narrow, rounded in _ROUNDED_OPERANDS:
                a_rounded, b_rounded = (_Operand(operand.decoded, operand.scales, rounded(operand.values))
                                        for operand in (a, b))
                if (np.array_equal(a_rounded.values, a.values, equal_nan=True)
                        and np.array_equal(b_rounded.values, b.values, equal_nan=True)):
                    continue  # (the operands are exact in that type: the product is the reference)
                if matches(_reference(a_rounded.values, b_rounded.values),
                           carried=_carried_underflow(a_rounded, b_rounded, model)):
                    cause = "TF32 inputs" if narrow.startswith("TF32") else "a cast after dequantizing"
                    hints.append(f"the output matches the product of the dequantized operands each rounded to "
                                 f"{narrow}: operands rounded before the multiply ({cause}), not the accumulation?")
                    break
    # A narrower accumulator errs all over the output: not where the errors lie in one row or column,
    # nor where its bound is over an eighth of sum |a b| (a bound that loose fits many bugs too).
    hit_rows, hit_columns = (np.unique(where).size for where in np.nonzero(mismatched))
    spread = (rows == 1 or hit_rows > 1) and (columns == 1 or hit_columns > 1)
    if not hints and spread and (kinds[mismatched] == MATMUL_CLASSES.index("other")).all():  # finite errors
        for bits in range(model.bits - 1, 7, -1):  # bfloat16's 8 bits are the narrowest accumulator named
            narrower = _Accumulator(bits, None, 2.0 ** (-125 - bits))
            if narrower.relative_bound(inner) > 1 / 8:
                break
            if matches(reference, narrower, _carried_underflow(a, b, narrower)):
                # DeepSeek-V3's model of Hopper's FP8 tensor cores, which cuBLAS's FP8 GEMM (fast accumulation
                # off) passed on an H200 where float32's bound failed (tests/test_crosscheck_gemm.py); its bound
                # lies within a narrower unpromoted one's, so only errors that fit one can fit it
                hopper = _Accumulator(14, 128, 2.0 ** (-125 - 14))
                hopper_fits = (model.promote_every is None and model.bits > 14 and inner > 128
                               and matches(reference, hopper, _carried_underflow(a, b, hopper)))
                hints.append(f"the errors are within the bound of an accumulator of {bits} significand bits (or "
                             f"fewer), not of {model.describe()}: accumulation narrower than declared? (float16 has "
                             f"11 bits, bfloat16 8, Hopper's FP8 tensor cores about 14 without promotion: DeepSeek-V3, "
                             f"arXiv:2412.19437, section 3.3.2)"
                             + ("; they also fit 14-bit sums promoted to float32 every 128 products (accumulator=14, "
                                "promote_every=128), which cuBLAS's FP8 GEMM passed on an H200" if hopper_fits else ""))
                break
    return hints


def _to_significand_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """``values`` (float64) rounded to float32, as a kernel holds them, then to ``bits`` significant
    bits, to nearest even (`minifp8.testing._through_bfloat16`'s rounding in float32's bits:
    bfloat16 with 8, TF32 with 11), as float64."""
    with np.errstate(over="ignore", under="ignore"):
        single = values.astype(np.float32)
    return _through_bfloat16(single, bits).astype(np.float64)


#: The types a kernel may round its dequantized operands to before the product (`compare_matmul`'s
#: hints), each with its rounding of float64 values: bfloat16 and TF32 keep float32's range. Only
#: rounding to nearest (ties to even) is recognised: a conversion that truncates is not named.
_ROUNDED_OPERANDS = (("bfloat16", lambda values: _to_significand_bits(values, 8)),
                     ("float16 (or TF32, whose 11 significant bits are float16's within its range)",
                      lambda values: values.astype(np.float32).astype(np.float16).astype(np.float64)),
                     ("TF32 (11 significant bits)", lambda values: _to_significand_bits(values, 11)))


def _scale_variants(scales: np.ndarray, shape: tuple, name: str, axes: tuple):
    """The scale arrays a kernel may have used by mistake, each with what it is, for the hints
    (``shape``: the operand's, which the scales tile)."""
    yield scales * scales, f"{name} applied twice (each scale squared): a scale applied twice?"
    yield np.ones_like(scales), f"{name} all ones: a scale omitted?"
    yield 1 / scales, f"1 / {name}: a scale and its inverse confused?"
    rows, columns = scales.shape
    if rows > 1 and columns > 1:
        spelled = f"{name}.T" if rows == columns else f"{name}.reshape({columns}, {rows}).T"
        yield (scales.reshape(columns, rows).T,
               f"{name} read in transposed (column-major) order, {spelled}: a transposed scale layout?")
        if rows != columns:  # (the other permutation; for a square array both are the transpose)
            yield (scales.T.reshape(rows, columns),
                   f"{name} written in column-major order and read row by row, {name}.T.reshape({rows}, {columns}): "
                   f"a transposed scale layout?")
    if rows != columns and shape[0] % columns == 0 and shape[1] % rows == 0:  # (square: the variant above)
        yield (scales.T, f"{name}.T as the layout (shape ({columns}, {rows}) over {axes[0]} x {axes[1]}): "
                         f"scales applied along the wrong axis?")
    for axis, axis_name in enumerate(axes):
        count = scales.shape[axis]
        if count < 2:
            continue
        first, last = np.take(scales, [0], axis), np.take(scales, [count - 1], axis)
        head, tail = np.take(scales, range(count - 1), axis), np.take(scales, range(1, count), axis)
        for shifted, which, edge in ((np.concatenate([tail, first], axis), "i+1", "the last block the first's"),
                                     (np.concatenate([tail, last], axis), "i+1", "the last block its own"),
                                     (np.concatenate([last, head], axis), "i-1", "the first block the last's"),
                                     (np.concatenate([first, head], axis), "i-1", "the first block its own")):
            yield shifted, (f"{name} shifted by one block along {axis_name} (block i used block {which}'s scale, "
                            f"{edge}): an off-by-one block index?")


def _dropped_block_hints(a: _Operand, b: _Operand, reference: MatmulReference, matches_each) -> list[str]:
    """The K blocks whose products, taken away, give the output: a dropped K block. Block sizes: the
    scale layouts' along K, and the usual tile sizes, smallest first; finite operands only. The
    candidates are judged many blocks at a time (one at a time, a failing GEMM of K = 2**20 took
    45 s to explain)."""
    if not (np.isfinite(a.values).all() and np.isfinite(b.values).all()):
        return []
    (rows, inner), columns = a.values.shape, b.values.shape[1]
    sizes = {inner // a.scales.shape[1], inner // b.scales.shape[0], 16, 32, 64, 128, 256}
    for size in sorted(size for size in sizes if size < inner and inner % size == 0):
        count = inner // size
        a_blocks = a.values.reshape(rows, count, size).transpose(1, 0, 2)
        b_blocks = b.values.reshape(count, size, columns)
        partial, partial_magnitude = a_blocks @ b_blocks, np.abs(a_blocks) @ np.abs(b_blocks)
        error_bound = reference.error_bound + 2.0**-52 * reference.magnitude
        hints = []
        chunk = max(1, 2**18 // (rows * columns))  # (candidates judged at once: arrays of 2**18 elements)
        for start in range(0, count, chunk):
            blocks = slice(start, start + chunk)
            candidates = MatmulReference(reference.value - partial[blocks], reference.magnitude -
                                         partial_magnitude[blocks], np.broadcast_to(error_bound, partial[blocks].shape))
            for block in start + np.flatnonzero(matches_each(candidates)):
                hints.append(f"the output matches the product without K block {block} of {size} "
                             f"(k = {block * size} to {(block + 1) * size - 1}): a dropped K block?")
        if hints:
            return hints
    return []


def _scale_blocks(a: _Operand, b: _Operand):
    """For each operand's scales, ``(name, operand, along, left, right, (groups, blocks, size, width))``:
    the product seen as ``left @ right`` with the operand on the left, its scales ``groups`` block rows
    of ``size`` output rows by ``blocks`` K blocks of ``width``. B's blocks are A's in the transposed
    product D.T = B.T A.T, and ``along`` views D (or B's scales) that way."""
    for name, operand in (("a_scales", a), ("b_scales", b)):
        if operand is a:
            along, left, right = (lambda x: x), a.values, b.values
        else:
            along, left, right = np.transpose, b.values.T, a.values.T
        groups, blocks = along(operand.scales).shape  # along the output's rows (of `left`), along K
        yield name, operand, along, left, right, (groups, blocks, left.shape[0] // groups, left.shape[1] // blocks)


def _one_scale_hints(got, a: _Operand, b: _Operand, reference: MatmulReference, mismatched, matches) -> list[str]:
    """One scale of ``a_scales`` or ``b_scales`` times 2**e (e = -2, -1, 1 or 2): the output then
    differs from the reference by ``(2**e - 1)`` times that block's partial product, in the rows
    (A) or columns (B) the block covers. Tried only where one block row of A (block column of B)
    holds every mismatched output, for each K block with the e that fits the mismatched outputs
    best (least squares, rounded to a power of two); finite operands and outputs only."""
    if not (np.isfinite(a.values).all() and np.isfinite(b.values).all() and np.isfinite(got[mismatched]).all()):
        return []
    hints = []
    for name, operand, along, left, right, (groups, blocks, size, width) in _scale_blocks(a, b):
        hit = np.nonzero(along(mismatched))[0] // size  # the block row of each mismatched output
        if groups * blocks == 1 or (hit != hit[0]).any():  # (one scale: _factor_hint's case)
            continue
        group = int(hit[0])
        rows = slice(group * size, (group + 1) * size)
        left_blocks = left[rows].reshape(size, blocks, width).transpose(1, 0, 2)
        right_blocks = right.reshape(blocks, width, right.shape[1])
        partial, partial_magnitude = left_blocks @ right_blocks, np.abs(left_blocks) @ np.abs(right_blocks)
        missed = along(mismatched)[rows]
        difference, terms = (along(got) - along(reference.value))[rows][missed], partial[:, missed]
        fitted = 1 + terms @ difference / (terms * terms).sum(axis=1)  # c per block (NaN where terms are 0)
        exponents = np.round(np.log2(fitted))  # (NaN where c <= 0)
        for block in np.flatnonzero(np.isin(exponents, (-2, -1, 1, 2))):
            change = 2.0 ** exponents[block] - 1
            value, magnitude, bound = (np.array(x) for x in (reference.value, reference.magnitude,
                                                             reference.error_bound))
            along(value)[rows] += change * partial[block]
            along(magnitude)[rows] += change * partial_magnitude[block]
            # the partial's own error is within error_bound (gamma_width <= gamma_K, partial_magnitude
            # <= magnitude), times |change|; two roundings more (the product, the sum), each within 2**-53
            along(bound)[rows] += (abs(change) * along(reference.error_bound)[rows] + 2.0**-52
                                   * (along(reference.magnitude)[rows] + abs(change) * partial_magnitude[block]))
            if matches(MatmulReference(value, magnitude, bound)):
                index = (group, int(block)) if operand is a else (int(block), group)
                covered = (f"{'m' if operand is a else 'n'} = {_span(group * size, size)}, "
                           f"k = {_span(block * width, width)}")
                hints.append(f"the output matches the product with {name}[{index[0]}, {index[1]}] alone times "
                             f"2**{int(exponents[block])} ({covered}): one block's scale wrong (an exponent "
                             f"off by {int(exponents[block])})?")
    return hints


#: The most partial products (M x K blocks x N) `_other_entries_hints` forms for its fit.
_FIT_LIMIT = 2**24


def _other_entries_hints(got, a: _Operand, b: _Operand, matches, model: _Accumulator) -> list[str]:
    """Scales read from the wrong entries (a stride, offset or layout bug): the output then is the
    product with some entries of ``a_scales`` (``b_scales``) replaced by values the array holds
    elsewhere. Each scale's factor is fitted by least squares over the outputs its block row of A
    (block column of B) reaches, ``got ~ sum over K blocks of c * partial``; each fitted scale,
    ``c`` times the true one, is taken to the nearest value of the array (within 1%), and the hint is
    given only where the product with those scales matches the output. Finite operands and outputs
    only, and up to `_FIT_LIMIT` partial products."""
    if not (np.isfinite(a.values).all() and np.isfinite(b.values).all() and np.isfinite(got).all()):
        return []
    hints = []
    for name, operand, along, left, right, (groups, blocks, size, width) in _scale_blocks(a, b):
        values = np.unique(operand.scales)
        if values.size < 2 or not (values > 0).all():  # (nothing else to read, or signs: no log distance)
            continue
        if left.shape[0] * blocks * right.shape[1] > _FIT_LIMIT:
            continue
        # partial[g, k, (row, column)]: block k's share of the outputs of block row g
        left_blocks = left.reshape(groups, size, blocks, width).transpose(0, 2, 1, 3)
        partial = np.einsum("gksw,kwn->gksn", left_blocks, right.reshape(blocks, width, -1)).reshape(
            groups, blocks, -1)
        target = along(got).astype(np.float64).reshape(groups, -1)
        gram = partial @ partial.transpose(0, 2, 1)
        factors = (np.linalg.pinv(gram) @ (partial @ target[..., None]))[..., 0]  # (groups, blocks)
        fitted = factors * along(operand.scales)
        nearest = np.abs(np.log2(np.abs(fitted)[..., None]) - np.log2(values)).argmin(axis=-1)
        snapped = values[nearest]
        if not (np.abs(fitted / snapped - 1) < 0.01).all() or np.array_equal(snapped, along(operand.scales)):
            continue
        scales = along(snapped)
        variant = _Operand(operand.decoded, scales, _scaled(operand.decoded, scales))
        pair = (variant, b) if operand is a else (a, variant)
        if not matches(_reference(pair[0].values, pair[1].values), carried=_carried_underflow(*pair, model)):
            continue
        changed = np.argwhere(scales != operand.scales)
        shown = []
        for index in changed[:3]:
            source = np.argwhere(operand.scales == scales[tuple(index)])[0]
            shown.append(f"{name}[{index[0]}, {index[1]}] read as {name}[{source[0]}, {source[1]}]")
        more = f", and {len(changed) - 3} more" if len(changed) > 3 else ""
        hints.append(f"the output matches the product with {len(changed)} of {operand.scales.size} entries of "
                     f"{name} replaced by values it holds elsewhere ({'; '.join(shown)}{more}; each the first "
                     f"entry of that value): scales read from the wrong index (a stride, offset or layout bug)?")
    return hints


def _span(start: int, count: int) -> str:
    return f"{start}" if count == 1 else f"{start} to {start + count - 1}"


def _uniform_scales(a: _Operand, b: _Operand) -> bool:
    """Whether each operand has one scale value throughout (a bug in both is then one factor)."""
    return all(np.unique(operand.scales).size == 1 for operand in (a, b))


_ROUNDINGS = (  # (the direction every mismatched output takes from the reference, the rounding that gives it)
    (lambda got, value: np.abs(got) < np.abs(value), "between the reference and zero", "toward zero (truncated)"),
    (lambda got, value: got < value, "below the reference", "toward -Inf"),
    (lambda got, value: got > value, "above the reference", "toward +Inf"),
    (lambda got, value: np.abs(got) > np.abs(value), "farther from zero than the reference", "away from zero"),
)


def _directed_rounding_hint(got, value, mismatched, tolerance, output: str) -> list[str]:
    """Every mismatched output (two or more, finite, of the reference's sign) lies on one side of the
    reference, by at most one spacing of the type it is written in (plus its tolerance): the output
    was rounded in one direction, not to nearest. The type: ``output``, or the 16-bit type whose
    values every output is, where float32 was declared."""
    written = output
    if output == "float32":
        written = next((narrow for narrow in ("bfloat16", "float16") if _values_of(got, narrow).all()), output)
    got, value, tolerance = got[mismatched], value[mismatched], tolerance[mismatched]
    if value.size < 2 or not (np.isfinite(got).all() and np.isfinite(value).all()) or (got * value < 0).any():
        return []
    bits, emin, _ = _IEEE_TYPES[written]
    spacing = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(value), 2.0**emin))) + 1 - bits)
    if not (np.abs(got - value) <= spacing + tolerance).all():
        return []
    for side, where, rounding in _ROUNDINGS:
        if side(got, value).all():
            declared = "" if written == output else f" (every output is a {written} value: pass output={written!r})"
            return [f"every mismatched output lies {where}, within one {written} spacing: the output rounded "
                    f"{rounding} to {written}, not to nearest?{declared}"]
    return []


def _factor_hint(got, a: _Operand, b: _Operand, value, mismatched, tolerance, output: str) -> list[str]:
    """Every mismatched output (two or more, finite) is the reference times one factor c, within c
    times its tolerance: c a power of two, a value of the scales or its inverse, or any number (but
    one within two spacings of the output type of 1: that is rounding, `_directed_rounding_hint`)."""
    got, value, tolerance = got[mismatched], value[mismatched], tolerance[mismatched]
    if value.size < 2 or not (np.isfinite(got).all() and np.isfinite(value).all() and (value != 0).all()):
        return []
    measured = float(got[np.argmax(np.abs(value))] / value[np.argmax(np.abs(value))])
    if measured == 0 or not np.isfinite(measured) or abs(abs(measured) - 1) <= 2.0 ** (2 - _IEEE_TYPES[output][0]):
        return []
    sign = -1.0 if measured < 0 else 1.0
    power = round(np.log2(abs(measured)))
    candidates = [(sign * 2.0**power, f": a scale exponent off by {power} (an E8M0 bias?), or a scale applied "
                                      f"twice or omitted?")]
    for name, operand in (("a_scales", a), ("b_scales", b)):
        scales = np.unique(np.abs(operand.scales[np.isfinite(operand.scales) & (operand.scales != 0)]))[:256]
        candidates += [(sign * s, f" (a value of {name}): a scale applied twice?") for s in scales]
        candidates += [(sign / s, f" (the inverse of a value of {name}): a scale omitted?") for s in scales]
    if _uniform_scales(a, b):  # (per-tensor: their product)
        product = abs(float(a.scales.reshape(-1)[0]) * float(b.scales.reshape(-1)[0]))
        if np.isfinite(product) and product != 0:
            candidates += [(sign * product, " (a_scales times b_scales): the scales' product applied twice?"),
                           (sign / product, " (the inverse of a_scales times b_scales): both scales omitted?")]
    candidates.append((measured, ": a wrong scale, or an extra factor (an epilogue's alpha)?"))
    for factor, why in candidates:
        if factor not in (1.0, -1.0) and (np.abs(got - factor * value) <= abs(factor) * tolerance).all():
            mantissa, exponent = np.frexp(factor)
            spelled = f"{'-' if factor < 0 else ''}2**{exponent - 1}" if abs(mantissa) == 0.5 else repr(factor)
            return [f"every mismatched output is the reference times {spelled}{why}"]
    return []
