"""Block-scaled formats: MX (OCP Microscaling v1.0) and NVIDIA's NVFP4.

A block format stores a tensor as small codes plus one scale per block of neighbouring elements,
so that every block uses the full range of its low-precision element format.

MX (OCP MX v1.0 section 6.3; Rouhani et al., arXiv:2310.10537, Algorithm 1)
---------------------------------------------------------------------------
A block of ``block_size`` (32) elements shares an E8M0 scale ``2**shared_exp``:

1. ``amax`` = the largest magnitude in the block.
2. ``shared_exp = floor(log2(amax)) - emax_elem`` (``scale_mode="floor"``, the OCP rule), read
   from the exponent bits of ``amax`` (never from a float ``log2``, which rounds: the float32 just
   below 2**20 has ``float32(log2) == 20``). ``emax_elem`` is the exponent of the element format's
   largest value: E4M3 8, E5M2 15, E3M2 4, E2M3 2, E2M1 2. Clamped to [-127, 127]: a float64
   amax of ``2**(128 + emax_elem)`` or more gets the largest scale, ``2**127``, and its elements
   saturate (microxcaling gives such a block the NaN scale; no float32 amax gets there).
3. Each element is scaled exactly, ``x * 2**-shared_exp``, and encoded with ``saturate=True``
   (values above the element maximum clamp to it).

The scale modes (torchao ``ScaleCalculationMode``, ``torchao/prototype/mx_formats/config.py``):

- ``floor``: ``floor(log2(amax)) - emax`` (OCP). The largest element may exceed the element
  maximum (448 < amax * 2**-shared_exp < 512 for E4M3); beyond max's rounding interval (above 464
  for E4M3, where the tie 464 rounds to 448) it saturates.
- ``ceil``: ``ceil(log2(amax)) - emax``, i.e. floor plus one when ``amax`` is not a power of two.
  Never saturates, but spends up to one binade of range.
- ``even``: ``floor(log2(round(amax))) - emax``, where ``round`` rounds ``amax``'s significand to
  the element's mantissa width, ties away from zero (torchao adds half an element ulp to the float
  bits and truncates). It clips less than floor: never beyond the element rounding for FP6/FP4,
  whose largest significand is all ones. For E4M3 (largest significand 1.75 of 3 fraction bits)
  amaxes with significands in (1.75, 1.9375) keep floor's exponent and scale past 448: those in
  (1.8125, 1.9375) saturate, those up to 1.8125 round to 448 anyway. For E5M2 the same range,
  (1.75, 1.875), scales to below 61440 and rounds to 57344: nothing saturates beyond the element
  rounding. (Within half an element ulp of FLT_MAX, torchao's bit trick carries into the
  all-ones exponent, the bits of Inf, which it reads as exponent 128 and not as NaN: it gives
  ``128 - emax`` too, as the definition here does; tests/test_crosscheck_torchao.py checks
  torchao 0.18.)
- ``rceil``: NVIDIA's rule, ``ceil(log2(amax / max_elem))`` (cuBLAS "1D block quantization",
  ``cvt.rp.ue8m0`` of ``amax / max_elem``). We compute it exactly, from the bits of amax.
  TransformerEngine's MXFP8 casts round the quotient to float32 first:
  ``float_to_e8m0(amax * max_norm_rcp)`` with ``max_norm_rcp = 1.0f / max_elem``, then
  ``cvt.rp.satfinite.ue8m0x2.f32`` (or its software twin). Those float32 steps (or a float32
  quotient ``amax / max_elem``) change the scale for exactly one float32 amax per element format:
  the amax just above ``max_elem * 2**-127`` (E4M3: ``nextafter(float32(448 * 2**-127), 1)``,
  about 2.6331e-36), whose exact quotient lies just above ``2**-127`` but whose float32 product
  rounds down to ``2**-127`` in float32's subnormal range. We give 0x01 there, TransformerEngine
  0x00; the tests pin our value. (torchao's emulation ``_to_mx_rceil`` also rounds
  ``amax / max_pos`` to float32, and then takes a float32 ``log2``, which rounds further.)

Special blocks: an all-zero block gets scale 0x00 (``2**-127``) and zero codes (signs of zeros kept).
A 0x00 scale means ``2**-127`` both ways, as OCP MX defines it (section 5.4.1): elements are
scaled by ``2**127`` and decoded times ``2**-127``, so a non-zero block with scale 0x00 (under
``floor``: ``amax < 2**(emax_elem - 126)``; under ``rceil``: ``amax <= max_elem * 2**-127``)
keeps its values. Libraries differ here: TransformerEngine's MXFP8 cast multiplies the elements
by ``exp2f_rcp(0x00) = 1`` instead (they then round to zero codes), and its dequantize kernel
reads 0x00 as ``ptx::exp2f(0x00) = 0.0``; torchao's ``_to_mx_rceil`` also multiplies by 1 for
0x00, and its ``to_mx`` (the other modes) divides by ``2**-126``, as it clamps the float32 scale
to the smallest normal number (pytorch/pytorch#125557).
A NaN or Inf in a block gives the NaN scale 0xFF (E8M0's NaN, OCP MX v1.0 section 5.4.1), and the
whole block decodes to NaN, as in Microsoft's microxcaling (``mx/mx_ops.py``: the shared exponent,
log2 of the amax, is NaN there, or Inf, which lies above the largest scale exponent, 127, and is
set to NaN); section 6.3's scale rule has no case for such a block. Its element codes carry no
information and are written as 0. For ``rceil`` the scale follows NVIDIA's conversion of
``amax / max_elem``: NaN -> 0xFF, Inf -> 0xFE (``2**127``, the elements are then encoded as
usual: Inf saturates to the element maximum), zero -> 0x00.

NVFP4 (TransformerEngine's NVFP4 recipe, arXiv:2509.25149)
----------------------------------------------------------
16-element E2M1 blocks with an E4M3 block scale and one float32 tensor scale; see
`quantize_nvfp4` for the exact order of float32 operations.

Layout
------
``codes`` has the input's shape, one code per uint8 in the low bits (as ml_dtypes stores FP6/FP4).
``scales`` has the input's shape with the blocked axis replaced by the number of blocks. A length
that is not a multiple of the block size is zero-padded inside (zeros never change a block's
amax); the padding is not stored. ``packed()`` gives the two-per-byte FP4 layout, low nibble first.

0-d inputs raise ``ValueError`` (a block needs an axis; reshape to ``(1,)``). Empty inputs are
fine: they give empty codes and scales of the documented shapes, and dequantize to an empty array.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from . import codec, formats
from .codec import _floor_log2
from .formats import FloatFormat, _check_int, _described, _is_int, _is_real, _plain_array

SCALE_MODES = ("floor", "ceil", "even", "rceil")
ELEMENT_FORMATS = ("E4M3", "E5M2", "E3M2", "E2M3", "E2M1")  # OCP MX v1.0 section 5
E8M0_BIAS = formats.E8M0.bias  # 127
E8M0_NAN = formats.E8M0.nan_code()  # 0xFF
SHARED_EXP_MIN = formats.E8M0.emin
"""The smallest shared exponent, -127: E8M0 code 0x00 is 2**-127 (OCP MX v1.0 section 5.4.1)."""
SHARED_EXP_MAX = formats.E8M0.emax
"""The largest shared exponent, 127: E8M0 code 0xFE is 2**127, and 0xFF is NaN (OCP MX v1.0 section 5.4.1)."""
NVFP4_BLOCK_SIZE = 16
_CHUNK_ELEMENTS = 1 << 19  # work through big arrays in cache-sized slices of whole blocks


# ================================================================================================
# The formats, as data.
# ================================================================================================
def _check_element(element) -> None:
    """TypeError unless ``element`` is a FloatFormat, ValueError unless MX uses it for elements."""
    if not isinstance(element, FloatFormat):
        raise TypeError(f"elem must be a FloatFormat (e.g. formats.E4M3), got {_described(element)}")
    if element not in [formats.get(name) for name in ELEMENT_FORMATS]:  # (its name and every field)
        got = (f"{element!r}, whose fields are not MX's {element.name}" if element.name in ELEMENT_FORMATS
               else element.name)
        raise ValueError(f"MX elements must be one of {', '.join(ELEMENT_FORMATS)} (OCP MX v1.0), got {got}")


def _check_block_size(block_size) -> None:
    _check_int(block_size, "block_size")
    if block_size < 1 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two (1, 2, 4, ..., 32, ...), got {block_size}")


@dataclass(frozen=True)
class MXFormat:
    """A named MX format: an element format, the block size and the E8M0 scale (OCP MX v1.0 Table 1,
    less its MXINT8, whose integer elements minifp8 does not implement).

    Construction checks the fields: TypeError for a wrong type, ValueError for an element format
    MX does not use or a block size that is not a power of two.

    Attributes
    ----------
    name : str
    elem : FloatFormat
        An MX element format (OCP MX v1.0 section 5): E4M3, E5M2, E3M2, E2M3 or E2M1.
    block_size : int
        A power of two, as `quantize` accepts (stored as a Python int). OCP MX v1.0 Table 1 gives
        32 for every concrete MX format.
    """

    name: str
    elem: FloatFormat
    block_size: int = 32

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {_described(self.name)}")
        _check_element(self.elem)
        _check_block_size(self.block_size)
        object.__setattr__(self, "block_size", int(self.block_size))  # (frozen dataclass)

    @property
    def scale(self) -> FloatFormat:
        """The scale format, E8M0."""
        return formats.E8M0

    # ---- copying and pickling: as formats.FloatFormat's ------------------------------------------------
    def __reduce_ex__(self, protocol):
        """A named format of `FORMATS` pickles by name and loads as that very object; any other by its fields."""
        if FORMATS.get(self.name) is self:
            return get, (self.name,)
        return super().__reduce_ex__(protocol)

    def __copy__(self) -> "MXFormat":
        return self

    def __deepcopy__(self, memo) -> "MXFormat":
        return self


MXFP8_E4M3 = MXFormat("MXFP8_E4M3", formats.E4M3)
MXFP8_E5M2 = MXFormat("MXFP8_E5M2", formats.E5M2)
MXFP6_E3M2 = MXFormat("MXFP6_E3M2", formats.E3M2)
MXFP6_E2M3 = MXFormat("MXFP6_E2M3", formats.E2M3)
MXFP4_E2M1 = MXFormat("MXFP4_E2M1", formats.E2M1)

FORMATS: dict[str, MXFormat] = {f.name: f for f in (MXFP8_E4M3, MXFP8_E5M2, MXFP6_E3M2, MXFP6_E2M3, MXFP4_E2M1)}


def get(name: str | MXFormat) -> MXFormat:
    """Look up a named MX format (case-insensitive), e.g. ``get("mxfp8_e4m3")``."""
    if isinstance(name, MXFormat):
        return name
    if not isinstance(name, str):
        raise TypeError(f"an MX format must be an MXFormat or a name (str), got {type(name).__name__}")
    for key, mx_format in FORMATS.items():
        if key.lower() == name.lower():
            return mx_format
    raise ValueError(f"unknown MX format {name!r}; known: {', '.join(FORMATS)}")


def _element_and_block_size(elem, block_size) -> tuple[FloatFormat, int]:
    """Resolve ``elem`` (an MXFormat, an MX name, a FloatFormat or an element name) and the block size."""
    if isinstance(elem, str) and elem.upper().startswith("MX"):
        elem = get(elem)
    if isinstance(elem, MXFormat):
        element, default_block_size = elem.elem, elem.block_size
    elif isinstance(elem, (str, FloatFormat)):
        try:
            element, default_block_size = formats.get(elem), 32
        except ValueError as error:  # (a mistyped name: say which element and MX names are taken)
            if not isinstance(elem, str):
                raise
            if formats._block_format_hint(elem):  # (NVFP4: its own advice)
                raise ValueError(f"{error}; or an MX format: {', '.join(FORMATS)}") from None
            raise ValueError(f"unknown format {elem!r}; MX elements: {', '.join(ELEMENT_FORMATS)} (or another of "
                             f"their names, e.g. 'float8_e4m3fn'); or an MX format: {', '.join(FORMATS)}") from None
    else:
        raise TypeError(f"elem must be an MXFormat, a FloatFormat or a format name (str), got "
                        f"{_described(elem)}")
    _check_element(element)
    block_size = default_block_size if block_size is None else block_size
    _check_block_size(block_size)
    return element, int(block_size)


def _check_scale_mode(scale_mode) -> None:
    formats._check_str_choice(scale_mode, "scale_mode", SCALE_MODES)
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"unknown scale_mode {scale_mode!r}; choose one of {', '.join(SCALE_MODES)}")


def _normalize_axis(axis, ndim: int) -> int:
    _check_int(axis, "axis")
    if ndim == 0:
        raise ValueError("block scaling needs at least one axis, got a 0-d array; reshape it to (1,) first")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array with {ndim} dimension(s)")
    return int(axis) % ndim


# ================================================================================================
# The scalar reference: the definition, one block at a time, in exact arithmetic.
# ================================================================================================
def quantize_block_reference(block: Sequence[int | float | Fraction | np.generic] | np.ndarray,
                             elem: str | FloatFormat | MXFormat, *, scale_mode: str = "floor",
                             rounding: str = "nearest_even", random_bits: Sequence[int] | np.ndarray | None = None,
                             random_bit_count: int | None = None) -> tuple[int, list[int]]:
    """Quantize one block exactly: the readable definition that `quantize` must equal.

    Parameters
    ----------
    block : 1-d sequence or numpy array of numbers
        The block's values: floats (taken exactly; NaN, Inf and -0.0 allowed; ml_dtypes floats
        too), ints (ml_dtypes' int4, ... too) or Fractions.
        An empty block is all zeros, vacuously: scale 0x00 and no codes.
    elem : FloatFormat, str or MXFormat
        The element format.
    scale_mode, rounding
        As in `quantize`.
    random_bits : sequence of int, optional
        For ``rounding="stochastic"``: one int in ``[0, 2**random_bit_count)`` per element.
    random_bit_count : int, optional
        The width of each of ``random_bits``, in ``[1, 32]``. Python ints carry no width, so it
        is required with them (and only allowed with ``rounding="stochastic"``), as in
        `minifp8.codec.encode_scalar`; an unsigned NumPy array's default is its dtype's width, as
        in `quantize`.

    Returns
    -------
    (int, list of int)
        The E8M0 scale code and the element codes.
    """
    element, _ = _element_and_block_size(elem, None)
    _check_scale_mode(scale_mode)
    if isinstance(block, np.ndarray) and block.ndim != 1:
        raise ValueError(f"block must be a 1-d sequence or array of numbers, got a {block.ndim}-d array of "
                         f"shape {block.shape}")
    if not isinstance(block, (np.ndarray, Sequence)) or isinstance(block, (str, bytes)):
        raise TypeError(f"block must be a 1-d sequence or array of numbers, got {type(block).__name__} {block!r}")
    codec._check_float_environment()  # (float(np.float32) of a subnormal is 0 where the CPU flushes)
    values = [_exact_number(v) for v in block]
    element_bits: Sequence[int | None] | np.ndarray
    if random_bits is not None and (np.ndim(random_bits) != 1 or isinstance(random_bits, (str, bytes))):
        raise TypeError(f"random_bits must be a 1-d sequence or array of ints, one per element, got "
                        f"{type(random_bits).__name__} {random_bits!r}")
    if random_bit_count is None and isinstance(random_bits, np.ndarray) and random_bits.dtype.kind == "u":
        random_bit_count = random_bits.dtype.itemsize * 8  # (as quantize: the array carries its width)
    if random_bits is None:
        element_bits = [None] * len(values)
    elif len(random_bits) != len(values):  # (zip would drop elements or bits without a word)
        raise ValueError(f"random_bits must hold one int per element: the block has {len(values)} elements, "
                         f"got {len(random_bits)} bits")
    else:
        element_bits = random_bits
    # The rounding arguments, checked here as encode_scalar checks them: a block that is empty, or
    # made NaN by a NaN, encodes no element
    if rounding != "stochastic":
        codec._check_scalar_rounding(rounding, random_bits, random_bit_count)
    elif random_bits is None:
        raise ValueError("rounding='stochastic' needs random_bits (one int per element) and random_bit_count")
    else:
        for bits in [*random_bits] or [0]:  # (an empty block: its random_bit_count alone)
            codec._check_scalar_rounding(rounding, bits, random_bit_count)

    has_nan = any(isinstance(v, float) and v != v for v in values)
    has_inf = any(isinstance(v, float) and abs(v) == float("inf") for v in values)
    if has_nan or (has_inf and scale_mode != "rceil"):
        return E8M0_NAN, [0] * len(values)  # the whole block is NaN (see the module docstring)
    if has_inf:
        shared_exp = SHARED_EXP_MAX  # rceil: amax / max_elem = Inf rounds to the largest scale, 2**127
    else:
        amax = max((abs(Fraction(v)) for v in values), default=Fraction(0))
        shared_exp = _reference_shared_exponent(amax, element, scale_mode)
        shared_exp = min(max(shared_exp, SHARED_EXP_MIN), SHARED_EXP_MAX)

    codes = []
    for value, bits in zip(values, element_bits):
        if value == 0 or (isinstance(value, float) and abs(value) == float("inf")):
            scaled = value  # keeps the sign of zero; Inf saturates to the element maximum
        else:
            scaled = Fraction(value) / Fraction(2) ** shared_exp  # exact
        codes.append(codec.encode_scalar(scaled, element, rounding=rounding, saturate=True,
                                         random_bits=bits, random_bit_count=random_bit_count))
    return shared_exp + E8M0_BIAS, codes


def _exact_number(value):
    if isinstance(value, np.generic) and not isinstance(value, np.bool_):  # NumPy and ml_dtypes scalars, exactly
        value = codec._as_numeric_array(value, "block values").item()  # (np.longdouble: a TypeError)
    if isinstance(value, float):
        return value
    if _is_int(value):
        return int(value)
    if isinstance(value, Fraction):
        return value
    raise TypeError(f"block values must be floats, ints or Fractions, got {type(value).__name__} {value!r}")


def _reference_shared_exponent(amax: Fraction, element: FloatFormat, scale_mode: str) -> int:
    """The unclamped shared exponent of a block with largest magnitude ``amax`` (exact)."""
    if amax == 0:
        return SHARED_EXP_MIN  # log2(0) = -inf, clamped
    e = _floor_log2(amax)  # 2**e <= amax < 2**(e + 1)
    if scale_mode == "floor":
        return e - element.emax
    if scale_mode == "ceil":
        return (e if amax == Fraction(2) ** e else e + 1) - element.emax
    if scale_mode == "even":
        significand = amax / Fraction(2) ** e  # in [1, 2)
        step = Fraction(1, 2**element.mantissa_bits)
        rounded = math.floor(significand / step + Fraction(1, 2)) * step  # ties away from zero
        return (e + 1 if rounded == 2 else e) - element.emax
    ratio = amax / Fraction(element.max)  # rceil: ceil(log2(amax / max_elem))
    k = _floor_log2(ratio)
    return k if ratio == Fraction(2) ** k else k + 1


# ================================================================================================
# The vectorised twin.
# ================================================================================================
@dataclass(frozen=True, eq=False)
class MXArray:
    """An MX-quantized array: E8M0 scale codes, element codes and how to put them back together.

    Construction checks these fields (types, dtypes and shapes, not the code values): TypeError
    for a wrong type, ValueError for a wrong value.

    Attributes
    ----------
    scales : numpy.ndarray of uint8
        E8M0 codes: the input's shape with ``axis`` replaced by the number of blocks.
    codes : numpy.ndarray of uint8
        Element codes, the input's shape, one per byte in the low bits.
    elem : FloatFormat
        The element format: E4M3, E5M2, E3M2, E2M3 or E2M1.
    block_size : int
        A power of two.
    axis : int
        The blocked axis; a negative one is normalised (stored non-negative).
    shape : tuple of int
        The input's shape, which is ``codes.shape`` (a list is stored as a tuple).
    """

    scales: np.ndarray
    codes: np.ndarray
    elem: FloatFormat
    block_size: int
    axis: int
    shape: tuple

    def __post_init__(self):
        _check_element(self.elem)
        _check_block_fields(self)

    def dequantize(self) -> np.ndarray:
        """Decode to float32: ``element value * 2**shared_exp``, NaN for the whole of a 0xFF block.

        The products are exact (an element value times an E8M0 scale is a float32 number, subnormals
        included) except where they overflow to Inf: a block whose values reach ``2**128``. The
        ``floor`` rule keeps every block of float32 input below that; ``ceil``, ``even`` and
        ``rceil`` can reach it for amax near FLT_MAX (scale ``2**120`` with E4M3 elements rounding
        up to 256), and float64 input beyond float32's range can under any rule.
        """
        codec._check_float_environment()
        blocks, moved_shape = _to_blocks(self.codes, self.axis, self.block_size)
        scale_values = np.moveaxis(self.scale_values(), self.axis, -1).reshape(-1)
        values = np.empty(blocks.shape, np.float32)
        step = max(1, _CHUNK_ELEMENTS // blocks.shape[1])
        with np.errstate(over="ignore", invalid="ignore"):
            for start in range(0, len(blocks), step):
                stop = start + step
                np.multiply(codec.decode(blocks[start:stop], self.elem), scale_values[start:stop, None],
                            out=values[start:stop])
        return _from_blocks(values, moved_shape, self.axis)

    def scale_values(self) -> np.ndarray:
        """The block scales as float32 values, laid out as ``scales``: ``2**shared_exp``, NaN for
        0xFF. What `minifp8.gemm` takes as an operand's scales."""
        return codec.decode(self.scales, formats.E8M0)

    def packed(self) -> np.ndarray:
        """The codes in the storage layout of torch's ``float4_e2m1fn_x2`` and TransformerEngine.

        FP4: two codes per byte along the last axis, the first in the low nibble; an odd last axis
        gets a zero high nibble. FP8: the codes themselves (a copy). FP6 packing (four codes in
        three bytes) is not implemented.
        """
        if self.elem.bits == 8:
            return self.codes.copy()
        if self.elem.bits != 4:
            raise ValueError(f"packed() supports 4-bit and 8-bit elements; {self.elem.name} has {self.elem.bits} bits")
        codes = self.codes
        wide = codes >= 16  # (a wider code would spill into its neighbour's nibble)
        if wide.any():
            first = np.unravel_index(np.argmax(wide), codes.shape)
            raise ValueError(f"{self.elem.name} codes lie in [0, 16), got {int(codes[first])} at index "
                             f"{tuple(map(int, first))}")
        if codes.shape[-1] % 2:
            codes = np.concatenate([codes, np.zeros(codes.shape[:-1] + (1,), np.uint8)], axis=-1)
        return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def _check_block_fields(array) -> None:
    """Check the fields MXArray and NVFP4Array share (O(1): types and shapes) and store ``axis``
    non-negative, ``block_size`` as an int and ``shape`` as ``codes.shape``."""
    for name in ("scales", "codes"):
        value = getattr(array, name)
        if not isinstance(value, np.ndarray) or value.dtype != np.uint8:
            raise TypeError(f"{name} must be a numpy array of uint8, got {_described(value)}")
    codes, scales, shape = array.codes, array.scales, array.shape
    _check_block_size(array.block_size)
    axis = _normalize_axis(array.axis, codes.ndim)
    if not isinstance(shape, (tuple, list)) or not all(map(_is_int, shape)):
        raise TypeError(f"shape must be a tuple of ints, got {type(shape).__name__} {shape!r}")
    if tuple(shape) != codes.shape:
        raise ValueError(f"shape {tuple(shape)} does not match codes, whose shape is {codes.shape}")
    expected = codes.shape[:axis] + (-(-codes.shape[axis] // array.block_size),) + codes.shape[axis + 1:]
    if scales.shape != expected:
        raise ValueError(f"scales has shape {scales.shape}, expected {expected} for codes of shape {codes.shape} "
                         f"with blocks of {array.block_size} along axis {axis}")
    object.__setattr__(array, "axis", axis)  # (frozen dataclasses)
    object.__setattr__(array, "block_size", int(array.block_size))
    object.__setattr__(array, "shape", codes.shape)


def quantize(x: ArrayLike, elem: str | FloatFormat | MXFormat, *, block_size: int | None = None, axis: int = -1,
             scale_mode: str = "floor", rounding: str = "nearest_even", random_bits: ArrayLike | None = None,
             random_bit_count: int | None = None) -> MXArray:
    """Quantize an array to an MX format along one axis (OCP MX v1.0 section 6.3).

    Parameters
    ----------
    x : array_like
        float16, float32, float64 or integer values (|int| <= 2**53), at least 1-d. float64 is
        handled exactly (no rounding through float32). ml_dtypes floats (bfloat16, float8_*, ...)
        are taken as their float32 values, exactly, and ml_dtypes' int4, uint4, ... as integers,
        as in `minifp8.codec.encode`. NaN and Inf are allowed (see the module docstring).
    elem : MXFormat, str or FloatFormat
        A named MX format (``MXFP8_E4M3`` or ``"mxfp8_e4m3"``) or an element format
        (``formats.E4M3``, ``"E4M3"``, ``"float8_e4m3fn"``; E4M3, E5M2, E3M2, E2M3 or E2M1).
    block_size : int, optional
        A power of two; default the MXFormat's own ``block_size`` (32 for the named formats and
        for a bare element format, the OCP MX v1.0 block, section 5).
    axis : int
        The axis along which consecutive elements form blocks.
    scale_mode : {"floor", "ceil", "even", "rceil"}
        How the shared exponent is chosen (module docstring).
    rounding : {"nearest_even", "nearest_away", "toward_zero", "stochastic"}
        Element rounding, as in `minifp8.codec.encode`.
    random_bits, random_bit_count
        For ``rounding="stochastic"``: unsigned ints with x's shape, as in `minifp8.codec.encode`.

    Returns
    -------
    MXArray

    Notes
    -----
    Vectorised over all blocks. Big arrays are processed in cache-sized slices of whole blocks (a
    loop over slices of 2**19 elements, not over blocks): the temporaries then stay in cache, which
    keeps MXFP8 quantization of a 4096x4096 array within about 1.5x the time of one plain encode
    of it (``python -m minifp8.bench mx``).
    """
    element, block_size = _element_and_block_size(elem, block_size)
    _check_scale_mode(scale_mode)
    codec._check_rounding(rounding)
    array = codec._as_numeric_array(x)
    axis = _normalize_axis(axis, array.ndim)
    if array.dtype in (np.float16, np.float32):
        array = array.astype(np.float32, copy=False)  # exact
    else:
        array = codec._to_float64(array)  # float64 as is; integers exactly, or a clear error
    if rounding == "stochastic":
        if random_bits is None:
            raise ValueError("rounding='stochastic' needs random_bits: an unsigned integer array of x's shape")
        codec._check_random_bits(random_bits, random_bit_count, array.shape)  # clear errors up front
        random_bits = np.asarray(random_bits)
        random_bit_count = random_bits.dtype.itemsize * 8 if random_bit_count is None else int(random_bit_count)
        bit_blocks, _ = _to_blocks(random_bits, axis, block_size)
    else:
        codec._check_no_random_bits(rounding, random_bits, random_bit_count)

    blocks, moved_shape = _to_blocks(array, axis, block_size)
    scales = np.empty(len(blocks), np.uint8)
    codes = np.empty(blocks.shape, np.uint8)
    step = max(1, _CHUNK_ELEMENTS // blocks.shape[1])
    for start in range(0, len(blocks), step):
        stop = start + step
        bits = bit_blocks[start:stop] if rounding == "stochastic" else None
        scales[start:stop], codes[start:stop] = _quantize_blocks(
            blocks[start:stop], element, scale_mode, rounding, bits, random_bit_count)
    scale_shape = moved_shape[:-1] + (-(-moved_shape[-1] // block_size),)
    return MXArray(scales=np.moveaxis(scales.reshape(scale_shape), -1, axis),
                   codes=_from_blocks(codes, moved_shape, axis), elem=element, block_size=block_size,
                   axis=axis, shape=tuple(array.shape))


def _quantize_blocks(blocks: np.ndarray, element: FloatFormat, scale_mode: str, rounding: str,
                     random_bits, random_bit_count) -> tuple[np.ndarray, np.ndarray]:
    """Scale codes and element codes of a C-contiguous (n_blocks, width) float array (`_to_blocks`)."""
    scale_codes, shared_exp = shared_exponents(block_amax(blocks), element, scale_mode)
    # 2**-shared_exp is exact in the working dtype (float32 holds 2**-127 as a subnormal), and so is
    # the product unless it falls below the smallest normal number, 2**-126 (2**-1022 for float64).
    # Such values lie far below half the smallest element subnormal (>= 2**-17), so every rounding
    # mode gives them code +-0 whether they are exact or not: the codes equal the exact ones.
    factor = np.ldexp(np.ones((), blocks.dtype), -shared_exp.astype(np.int32))
    with np.errstate(invalid="ignore", under="ignore"):
        scaled = blocks * factor[:, None]
    nan_blocks = scale_codes == E8M0_NAN
    if nan_blocks.any():
        scaled[nan_blocks] = 0  # NaN-scale blocks carry no element information
    codes = codec.encode(scaled, element, rounding=rounding, saturate=True,
                         random_bits=random_bits, random_bit_count=random_bit_count)
    return scale_codes, codes


_MAGNITUDE_BITS: dict[type[np.floating], tuple[type[np.unsignedinteger], np.unsignedinteger]] = {
    np.float32: (np.uint32, np.uint32(0x7FFF_FFFF)),
    np.float64: (np.uint64, np.uint64(0x7FFF_FFFF_FFFF_FFFF))}


def block_amax(blocks: np.ndarray) -> np.ndarray:
    """The largest magnitude of each row of a 2-d float32 or float64 array (fastest C-contiguous,
    with power-of-two rows), in its dtype (native byte order).

    IEEE magnitudes order like their bit patterns with the sign bit cleared (NaN above Inf), so the
    maximum is taken on those integers (`row_max`). A NaN anywhere in a row gives NaN.
    """
    blocks = _plain_array(blocks, "blocks")
    if blocks.dtype.type not in _MAGNITUDE_BITS:
        raise TypeError(f"blocks must be a float32 or float64 array, got dtype {blocks.dtype}")
    if blocks.ndim != 2 or blocks.shape[1] == 0:
        raise ValueError(f"blocks must be a 2-d (number of blocks, block size >= 1) array, got shape {blocks.shape}")
    blocks = blocks.astype(blocks.dtype.newbyteorder("="), copy=False)  # the bit view needs native order
    unsigned, sign_cleared = _MAGNITUDE_BITS[blocks.dtype.type]
    magnitude = np.bitwise_and(blocks.reshape(-1).view(unsigned), sign_cleared)
    return _row_max(magnitude, blocks.shape[1]).view(blocks.dtype)


def row_max(values: np.ndarray, row_length: int) -> np.ndarray:
    """The maximum of each run of ``row_length`` consecutive elements of 1-d ``values`` (whose size is
    a multiple of it).

    A reduction over a short last axis is slow in NumPy (one inner loop per row), so short rows of a
    power-of-two length are taken pairwise, in a tree of strided 1-d passes, and longer rows (32 and
    up, where it is as fast with fewer calls) with ``np.maximum.reduceat``.
    """
    if not isinstance(values, np.ndarray):
        raise TypeError(f"values must be a 1-d numpy array, got {type(values).__name__}")
    values = _plain_array(values, "values")
    if values.dtype.kind not in "fiu":  # (a complex max is lexicographic; a bool one is a logical or)
        raise TypeError(f"values must hold real numbers (float or integer), got dtype {values.dtype}")
    if values.ndim != 1:
        raise ValueError(f"values must be a 1-d numpy array, got shape {values.shape}")
    row_length = _check_int(row_length, "row_length", 1)
    if values.size % row_length:
        raise ValueError(f"values has {values.size} elements, which is not a multiple of row_length {row_length}")
    return _row_max(values, row_length)


def _row_max(values: np.ndarray, row_length: int) -> np.ndarray:
    """`row_max` without its checks (the casts call it on every block cast)."""
    if row_length >= 32 or row_length & (row_length - 1):
        return np.maximum.reduceat(values, np.arange(0, values.size, row_length))
    while row_length > 1:  # log2(row_length) levels; pairs never straddle a row boundary
        values = np.maximum(values[0::2], values[1::2])
        row_length //= 2
    return values


def shared_exponents(amax: ArrayLike, elem: str | FloatFormat | MXFormat,
                     scale_mode: str = "floor") -> tuple[np.ndarray, np.ndarray]:
    """E8M0 scale codes and shared exponents for blocks with largest magnitudes ``amax``.

    The exponent is read from the bits of ``amax`` (float32 or float64, any shape and byte order;
    float16 and integers are converted to float64, ml_dtypes floats to float32, exactly), never
    computed with ``log2``: a normal ``amax`` is ``2**e * 1.m``, so ``floor(log2(amax))`` is its
    unbiased exponent field ``e``, and the modes that round up decide on the mantissa field ``m``.
    Zero and subnormal ``amax`` lie below any E8M0 scale: -127. An ``amax`` is a magnitude: a
    negative one is a ValueError (-0.0 is zero), as in `scaling.scale_from_amax`.

    Parameters
    ----------
    amax : array_like
        Each block's largest magnitude.
    elem : FloatFormat, MXFormat or str
        The element format, whose ``emax_elem`` the scale leaves room for.
    scale_mode : {"floor", "ceil", "even", "rceil"}
        How the exponent is chosen (`SCALE_MODES`; the module docstring): OCP's ``floor`` by default.

    Returns
    -------
    (numpy.ndarray of uint8, numpy.ndarray of int32)
        Of amax's shape: the scale codes, and the exponents to scale the elements by (0 for 0xFF
        blocks, whose elements are discarded; 127 for rceil's Inf blocks).
    """
    element, _ = _element_and_block_size(elem, None)
    _check_scale_mode(scale_mode)
    amax = codec._as_numeric_array(amax, "amax")  # TypeError for bool, complex, str, ...
    amax = amax.astype(amax.dtype.newbyteorder("="), copy=False)  # the bit view needs native order
    if amax.dtype.type not in _FLOAT_FIELDS:
        amax = codec._to_float64(amax)  # float16 and integers up to 2**53, exactly
    shape = amax.shape
    if not amax.ndim:  # 1-d, so that 0-d input works like any other (an N-d view is kept as it is: no copy)
        amax = amax.reshape(1)
    negative = amax < 0
    if negative.any():
        raise ValueError(f"amax must be >= 0 (a largest magnitude), got {float(amax[negative][0])}")
    unsigned, mantissa_width, bias = _FLOAT_FIELDS[amax.dtype.type]
    bits = amax.view(unsigned)
    exponent = (bits >> unsigned(mantissa_width)).astype(np.int32)  # the sign bit lands above the top exponent
    shared = exponent - (bias + element.emax)  # floor(log2(amax)) - emax
    if scale_mode != "floor":
        mantissa = bits & unsigned((1 << mantissa_width) - 1)  # the significand is 1 + mantissa / 2**width
        if scale_mode == "ceil":  # up unless amax is a power of two
            shared += mantissa != 0
        elif scale_mode == "even":  # the significand rounded to M bits, ties away, carries to 2
            shared += mantissa >= (1 << mantissa_width) - (1 << (mantissa_width - 1 - element.mantissa_bits))
        else:  # rceil: up when the significand exceeds max_elem's, max_elem / 2**emax
            shared += mantissa > int((element.max / 2.0**element.emax - 1) * 2**mantissa_width)
    shared = np.minimum(np.maximum(shared, SHARED_EXP_MIN), SHARED_EXP_MAX)
    special = exponent > 2 * bias  # the all-ones exponent (NaN, Inf) or the sign bit (-0.0 here)
    codes = (shared + E8M0_BIAS).astype(np.uint8)
    if special.any():
        shared[special] = SHARED_EXP_MIN  # -0.0 (and nothing else here) is zero: log2(0) = -inf, clamped
        if scale_mode == "rceil":  # Inf / max_elem rounds up to the largest scale; NaN is NaN
            shared[np.isinf(amax)] = SHARED_EXP_MAX
            nan_scale = np.isnan(amax)
        else:
            nan_scale = special & (amax != 0)  # NaN or Inf
        shared[nan_scale] = 0
        codes = (shared + E8M0_BIAS).astype(np.uint8)
        codes[nan_scale] = E8M0_NAN
    return codes.reshape(shape), shared.reshape(shape)


# The unsigned integer of each float's width, its mantissa field's width and its exponent bias.
_FLOAT_FIELDS = {np.float32: (np.uint32, 23, 127), np.float64: (np.uint64, 52, 1023)}


# ---- layout: any axis, any length <-> rows of whole blocks -------------------------------------
def _to_blocks(array: np.ndarray, axis: int, block_size: int) -> tuple[np.ndarray, tuple]:
    """A C-contiguous (n_blocks, width) array of ``array``'s blocks along ``axis``, zero-padded.

    ``width`` is ``block_size``, or the axis length where that is shorter: such an axis is one
    block per row, and padding it out to a block of 2**16 (or 2**40) zeros would only cost memory
    (the zeros change no amax, and no code is kept for them).
    Returns the blocks and the shape of ``array`` with ``axis`` moved last (to undo the layout).
    A view when ``axis`` is last, the array contiguous and the length a multiple of the width.
    """
    moved = np.moveaxis(array, axis, -1)
    length = moved.shape[-1]
    width = min(block_size, length) if length else block_size
    padding = -length % width
    if padding:
        moved = np.concatenate([moved, np.zeros(moved.shape[:-1] + (padding,), moved.dtype)], axis=-1)
    return np.ascontiguousarray(moved).reshape(-1, width), moved.shape[:-1] + (length,)


def _from_blocks(blocks: np.ndarray, moved_shape: tuple, axis: int) -> np.ndarray:
    """Undo `_to_blocks`: drop the padding and move the axis back."""
    length = moved_shape[-1]
    padded = blocks.reshape(moved_shape[:-1] + (length + -length % blocks.shape[1],))
    if padded.shape[-1] != length:
        padded = padded[..., :length]
    return np.ascontiguousarray(np.moveaxis(padded, -1, axis))


# ================================================================================================
# NVFP4
# ================================================================================================
FP4_MAX = np.float32(6.0)
E4M3_MAX = np.float32(448.0)
FLOAT32_MAX = np.float32(np.finfo(np.float32).max)


@dataclass(frozen=True, eq=False)
class NVFP4Array:
    """An NVFP4-quantized array.

    Construction checks these fields as `MXArray`'s.

    Attributes
    ----------
    scales : numpy.ndarray of uint8
        E4M3 block-scale codes (``S_dec_b``), the input's shape with ``axis`` replaced by the
        number of 16-element blocks. Unsigned (UE4M3): `scale_values` and `dequantize` refuse a
        code with the sign bit set.
    codes : numpy.ndarray of uint8
        E2M1 codes, the input's shape.
    global_amax : numpy.float32
        The tensor amax the scales were computed from: finite, >= 0 (a real number is rounded to
        float32).
    encode_scale : numpy.float32
        ``S_enc``, the float32 tensor scale (`quantize_nvfp4`): finite, > 0.
    axis : int
        The blocked axis; a negative one is normalised (stored non-negative).
    shape : tuple of int
        ``codes.shape`` (a list is stored as a tuple).
    block_size : int
        16, NVFP4's block size (`NVFP4_BLOCK_SIZE`); no other is accepted.
    """

    scales: np.ndarray
    codes: np.ndarray
    global_amax: np.float32
    encode_scale: np.float32
    axis: int
    shape: tuple
    block_size: int = NVFP4_BLOCK_SIZE

    def __post_init__(self):
        object.__setattr__(self, "global_amax", _check_float32_number(self.global_amax, "global_amax"))
        object.__setattr__(self, "encode_scale",
                           _check_float32_number(self.encode_scale, "encode_scale", positive=True))
        _check_block_fields(self)
        if self.block_size != NVFP4_BLOCK_SIZE:
            raise ValueError(f"block_size must be {NVFP4_BLOCK_SIZE} for NVFP4, got {self.block_size}")

    def dequantize(self) -> np.ndarray:
        """Decode to float32 as TransformerEngine's dequantize kernel does (dequantize_nvfp4.cuh).

        ``x = e2m1 * ((float(S_dec_b) * global_amax) * float32(1 / (6 * 448)))``, in float32, left
        to right. It uses the amax, not ``1 / S_enc``. The two differ where quantize capped
        ``S_enc`` at FLT_MAX (``global_amax < 2688 / FLT_MAX``, about 7.9e-36): there the round
        trip is far off (a tensor of 1e-36 comes back as 1.25e-37), as it is in the kernel. For
        an all-zero tensor both give zeros.

        Where ``S_dec_b * global_amax`` overflows float32 (``global_amax > FLT_MAX / 448``, where
        the kernel would give Inf and NaN), the same steps run on ``global_amax * 2**-9`` and the
        result is multiplied by ``2**9``: both scalings are exact, so this is the kernel's rounding
        with a wider exponent range, and the values are finite wherever the true ones fit float32.
        """
        codec._check_float_environment()
        blocks, moved_shape = _to_blocks(self.codes, self.axis, self.block_size)
        factor = np.moveaxis(self.scale_values(), self.axis, -1).reshape(-1)
        with np.errstate(under="ignore"):
            values = codec.decode(blocks, formats.E2M1) * factor[:, None]
        return _from_blocks(values, moved_shape, self.axis)

    def scale_values(self) -> np.ndarray:
        """The factor that multiplies each block's E2M1 values in `dequantize`, float32, laid out as
        ``scales``: ``(float(S_dec_b) * global_amax) * float32(1 / 2688)`` (see `dequantize`).

        What `minifp8.gemm` takes as an operand's scales: one float32 factor per block (24
        significant bits at most), whose products with E2M1 values float64 holds exactly.
        """
        codec._check_float_environment()
        flat_scales = np.asarray(self.scales).reshape(-1)
        negative = np.flatnonzero(flat_scales >= 0x80)
        if negative.size:  # NVFP4's block scales are unsigned (UE4M3): a set sign bit would negate its block
            raise ValueError(f"scales: NVFP4 block scales are unsigned E4M3 (sign bit clear, codes < 0x80), got "
                             f"{negative.size} with the sign bit set, first {int(flat_scales[negative[0]]):#04x} "
                             f"at flat index {negative[0]}")
        nan = np.flatnonzero(flat_scales == 0x7F)
        if nan.size:  # (a review's find: it dequantised its block to NaN without a word)
            raise ValueError(f"scales: 0x7f is E4M3's NaN, which no NVFP4 block scale is (the scale cast saturates "
                             f"at 0x7e, 448), got {nan.size}, first at flat index {nan[0]}")
        block_scales = codec.decode(self.scales, formats.E4M3)
        one_over_2688 = np.float32(1 / (6 * 448))
        with np.errstate(over="ignore", under="ignore"):
            factor = (block_scales * self.global_amax) * one_over_2688
        overflow = np.isinf(factor)
        if overflow.any():  # S_dec_b <= 448 < 2**9, so the product with global_amax * 2**-9 fits float32
            shrunk_amax = self.global_amax * np.float32(2.0**-9)
            factor[overflow] = ((block_scales[overflow] * shrunk_amax) * one_over_2688) * np.float32(2.0**9)
        return factor

    def packed(self) -> np.ndarray:
        """Two E2M1 codes per byte along the last axis, the first in the low nibble."""
        return MXArray(self.scales, self.codes, formats.E2M1, self.block_size, self.axis, self.shape).packed()


def quantize_nvfp4(x: ArrayLike, *, axis: int = -1, global_amax: float | np.floating | None = None) -> NVFP4Array:
    """Quantize to NVFP4 in TransformerEngine's order of float32 operations.

    Every step is one IEEE float32 operation, rounded to nearest even, in this order
    (TransformerEngine ``common/cast/nvfp4/core_nvfp4.cuh``: ``compute_global_encode_scaling_factor_FP4``,
    ``compute_decoding_scaling_factor``, ``compute_scaling_coefficient``; and its reference
    ``pytorch/custom_recipes/quantization_nvfp4.py``):

    1. ``global_amax = max |x|`` over the whole tensor (float32), unless given.
    2. ``S_enc = (448 * 6) / global_amax``; ``S_enc = min(S_enc, FLT_MAX)``; ``S_enc = 1`` when
       ``global_amax == 0``.
    3. ``S_dec = 1 / S_enc``.
    4. Per 16-element block: ``S_dec_b = e4m3(min(block_amax * (S_enc * float32(1/6)), FLT_MAX))``,
       a saturating round-to-nearest-even cast to E4M3 (the block scale that is stored).
       TransformerEngine folds ``1/6`` into the multiplier ``S_enc * float32(1/6)``; this is not
       always the same float32 as ``S_enc / 6``, and the tests pin the difference. (Earlier
       TransformerEngine code, and kernels derived from it, compute ``block_amax / 6 * S_enc``,
       which can give a block scale one code apart.)
    5. ``encode = min(1 / (float(S_dec_b) * S_dec), FLT_MAX)`` (``1/0`` gives ``FLT_MAX``).
    6. ``q = e2m1_rne(clamp(x * encode, -6, 6))``. The product is rounded to float32 before the
       E2M1 rounding, so it is part of the definition (the tests show a code it changes). Signs
       of zero are kept, as by the codec (TransformerEngine's Python reference writes +0 for -0.0).

    Parameters
    ----------
    x : array_like
        float16/32/64 or integer values (|int| <= 2**53), or ml_dtypes floats and integers (exactly,
        as in `minifp8.codec.encode`), converted to float32 first (TransformerEngine reads its inputs in
        float32). At least 1-d. NaN and Inf raise ``ValueError``: E2M1 has neither, and
        TransformerEngine's kernel and reference disagree on them.
    axis : int
        The axis along which 16 consecutive elements form a block (zero-padded at the end).
    global_amax : float, optional
        A tensor amax to use instead of ``max |x|`` (e.g. one reduced across devices): a finite
        number >= 0 that fits float32 (an ml_dtypes scalar too), rounded to float32. Values of x
        beyond it saturate; 0 gives ``S_enc = 1`` and a dequantization of zeros.

    Returns
    -------
    NVFP4Array
    """
    array = codec._to_float32(x)  # (integers: the 2**53 check; float64: the range check)
    axis = _normalize_axis(axis, array.ndim)
    if array.size and not np.isfinite(array).all():
        raise ValueError("quantize_nvfp4 needs finite inputs (float32): E2M1 has no NaN or Inf")
    if global_amax is None:
        amax = np.float32(np.max(np.abs(array), initial=np.float32(0)))
    else:
        amax = _check_float32_number(global_amax, "global_amax")
    return _nvfp4_of(array, axis, amax, _block_scale_before_rounding)


def _block_scale_before_rounding(block_amax: np.ndarray, encode_scale: np.float32) -> np.ndarray:
    """Step 4 of `quantize_nvfp4` before its E4M3 cast, in TransformerEngine's order."""
    return block_amax * (encode_scale * (np.float32(1) / FP4_MAX))


def _nvfp4_of(array: np.ndarray, axis: int, global_amax: np.float32,
              block_scale: Callable[[np.ndarray, np.float32], np.ndarray]) -> NVFP4Array:
    """Steps 2-6 of `quantize_nvfp4` for a checked float32 ``array``, with step 4's product before its
    E4M3 cast computed by ``block_scale(block_amax, S_enc)`` (`minifp8.testing` tries other orders)."""
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        encode_scale = np.minimum(np.float32(E4M3_MAX * FP4_MAX) / global_amax, FLOAT32_MAX)  # step 2
        if global_amax == 0:  # (a finite amax gives encode_scale >= 2688 / FLT_MAX > 0: never 0)
            encode_scale = np.float32(1)
        decode_scale = np.float32(1) / encode_scale  # step 3

    blocks, moved_shape = _to_blocks(array, axis, NVFP4_BLOCK_SIZE)
    block_amax_values = np.max(np.abs(blocks), axis=1, initial=np.float32(0))
    with np.errstate(over="ignore", under="ignore"):  # step 4
        block_scale_codes = codec.encode(np.minimum(block_scale(block_amax_values, encode_scale), FLOAT32_MAX),
                                         formats.E4M3, saturate=True)
    block_scales = codec.decode(block_scale_codes, formats.E4M3)
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        element_scale = np.minimum(np.float32(1) / (block_scales * decode_scale), FLOAT32_MAX)  # step 5
        scaled = np.clip(blocks * element_scale[:, None], -FP4_MAX, FP4_MAX)  # step 6
    codes = codec.encode(scaled, formats.E2M1)
    scale_shape = moved_shape[:-1] + (-(-moved_shape[-1] // NVFP4_BLOCK_SIZE),)
    return NVFP4Array(codes=_from_blocks(codes, moved_shape, axis),
                      scales=np.moveaxis(block_scale_codes.reshape(scale_shape), -1, axis),
                      global_amax=np.float32(global_amax), encode_scale=np.float32(encode_scale),
                      axis=axis, shape=tuple(array.shape))


def _check_float32_number(value, name: str, positive: bool = False) -> np.float32:
    """``value`` (the argument ``name``: an amax or a scale) as a finite float32, >= 0 (> 0 if ``positive``);
    -0.0 as +0.0 (an amax is a magnitude: NVFP4's -0.0 flipped the sign of every dequantized value).
    A 0-d array is its number (as `minifp8.golden.load` and ``torch.Tensor.numpy()`` give one)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    value = codec._from_ml_dtypes_scalar(value)
    if isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a real number (int or float), got an array of shape {value.shape}: pass "
                        f"one number (x.item() for a 1-element array)")
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number (int or float), got {type(value).__name__} "
                        f"{value!r}")
    try:
        with np.errstate(over="ignore"):
            number = np.float32(value)  # rounds to nearest; a huge int overflows to inf or raises
    except OverflowError:
        number = np.float32(np.inf)
    if (isinstance(value, (int, np.integer)) or np.isfinite(value)) and not np.isfinite(number):
        raise ValueError(f"{name}={value!r} overflows float32 (max {np.finfo(np.float32).max:.7g})")
    if number == 0 and value > 0:  # (a review's find: global_amax 1e-46 read as 0, giving scale 1, not FLT_MAX)
        raise ValueError(f"{name}={value!r} underflows float32 to 0 (its smallest positive value is about 1.4e-45)")
    if not np.isfinite(number) or value < 0 or (positive and number == 0):  # (value: -1e-46 rounds to -0.0)
        raise ValueError(f"{name} must be a finite number {'>' if positive else '>='} 0, got {value!r}")
    return np.float32(0) if number == 0 else number
