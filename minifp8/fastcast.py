"""The casts of the FP8 recipes, at NumPy speed: fp8.py's casts, computed without codes.

`cast` is one recipe's cast of one tensor (fp8.fake_quantize checks its arguments, then calls
it; fp8.py's cast points call it in training), and `cast_pair` the rowwise and columnwise casts of
a GEMM operand under a block recipe, as one cast. Each returns the dequantized values and
`CastStats`. They compute what the reference functions compute (codec.quantize,
scaling.quantize_current, DelayedScaling.quantize, scaling.quantize_blockwise, mx.quantize, each
then dequantized), with the same float32 operations, bit for bit, but without materialising
codes: a training step of the default model makes 35 casts (a pair counted once), and they are
all of FP8's extra cost in this simulation.

How. Inside the format's normal range a cast is round-to-nearest-even of the float32
significand, which three float32 operations do (Veltkamp's splitting); a power-of-two scale (MX
blocks, ``blockwise`` tiles) leaves that rounding unchanged, so those elements need no
multiplication at all. The few elements outside the range are found with one comparison and cast
on their own: below it, the format's subnormals are the multiples of its smallest one, which
``np.rint`` rounds to; beyond max's rounding interval, the values saturate or overflow (in a
block, clamping the rounded values to its max is the same). They alone underflow or saturate, so
they give the statistics. The rowwise and columnwise copies of a GEMM operand are one cast of two
stacked copies (`cast_pair`): they share the magnitudes, the search and the rounding, each tile's
work runs on all tiles of both at once, and where neither has an element to fix they are one
array. Blocks and tiles are described on a view of the tensor (an axis shorter than a block is
one block; a partial last block counts only its elements, as the references' zero padding does),
views are cast in the order their elements lie in memory, and big tensors are cast in
cache-sized slabs on `CAST_THREADS` threads. A tensor with many elements below the range (more
than a tenth, a 32nd under a block rule: `_DENSE_FRACTION`) is cast whole, each tile on its own
grid (`_cast_in_tiles`); where that path declines and more than a quarter of the elements are left
to fix one by one (`_FIXUP_FRACTION`), and, under a block recipe, for a tensor holding a NaN, an
Inf or a magnitude of 2**100, the codec's table (`_round_into`) casts it instead. A per-tensor
recipe casts the elements beyond max, NaN and Inf among them, on their own (`_round_beyond_max`),
Inf to +-max where the cast saturates (else to Inf, or to NaN in a format without Inf) and NaN to
the codec's NaN (its sign kept, its payload not).

Proof. tests/test_fp8.py holds every recipe equal to its reference function, bit for bit,
through each path (its fixtures set this module's knobs to force each one: the dense path, the
codec's table, the tile fixups); tests/test_fp8_rounding.py proves the arithmetic of the rounding
pieces (`_round_normal`, `_round_below_normal`, `_round_beyond_max`, the tile rounding and the
table `_round_into`) against the codec, in every binade (the first three for every float32 under
``pytest -m slow``).
"""
from __future__ import annotations

import functools
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
from numpy.typing import DTypeLike

from . import codec, formats, mx, scaling

__all__ = ["BACKWARD_FORMAT", "CAST_THREADS", "FORWARD_FORMAT", "PER_TENSOR_RECIPES", "cast", "cast_pair"]  # (CastStats: fp8.py's)

_Allocator = Callable[[tuple[int, ...], DTypeLike], np.ndarray]
"""``new(shape, dtype)``: where a cast puts its values (``np.empty``, or fp8.py's reused arrays)."""

FORWARD_FORMAT = formats.E4M3   # x, w, q, k, v
BACKWARD_FORMAT = formats.E5M2  # output gradients
PER_TENSOR_RECIPES = ("fp8", "unit", "current", "delayed")
_MX_FORMATS = {"E4M3": mx.MXFP8_E4M3, "E5M2": mx.MXFP8_E5M2}


@dataclass(frozen=True)
class CastStats:
    """What one cast did to one tensor.

    Attributes
    ----------
    amax : float
        ``max |x|`` of the input before scaling, as the recipe reads it: a float64 input rounded to
        float32 under ``fp32``, ``current``, ``delayed`` and ``blockwise``, exact under ``fp8``,
        ``unit`` and ``mxfp8`` (NaN if it held a NaN).
    size : int
        Number of elements.
    underflow_count : int
        Nonzero inputs that came out as (+-)0 (0 under ``fp32``, which reports no underflow or
        saturation: it casts nothing, but float64 inputs to float32).
    saturation_count : int
        Elements whose scaled input lay beyond the rounding interval of the largest finite value
        (clamped to +-max, or became +-Inf), or that came out as NaN. A value that fits the format
        but overflows float32 when scaled back (near float32's largest, whose power-of-two scale
        rounds it up) comes out as +-Inf uncounted, as the reference recipes give it.
    """

    amax: float
    size: int
    underflow_count: int
    saturation_count: int

    @property
    def underflow_fraction(self) -> float:
        """``underflow_count / size`` (0 for an empty tensor)."""
        return self.underflow_count / self.size if self.size else 0.0

    @property
    def saturation_fraction(self) -> float:
        """``saturation_count / size`` (0 for an empty tensor)."""
        return self.saturation_count / self.size if self.size else 0.0


# ---- max's rounding interval ---------------------------------------------------------------------
def _overflow_threshold(fmt) -> tuple[float, bool]:
    """The midpoint between ``fmt.max`` and the next value an unbounded exponent would give, and
    whether round-to-nearest-even takes that midpoint itself up (beyond max)."""
    half_ulp = 2.0 ** (math.floor(math.log2(fmt.max)) - fmt.mantissa_bits - 1)
    threshold = fmt.max + half_ulp
    tie_overflows = not np.isfinite(codec.quantize(np.float64(threshold), fmt))
    return threshold, tie_overflows


_THRESHOLDS = {fmt.name: _overflow_threshold(fmt) for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}
_E8M0_VALUES = codec.decode(np.arange(256, dtype=np.uint8), formats.E8M0)  # 2**(code - 127); 0xFF is NaN


def _beyond_max(scaled_magnitude, fmt) -> np.ndarray:
    """True where a scaled input magnitude rounds beyond ``fmt.max`` (or is NaN)."""
    threshold, tie_overflows = _THRESHOLDS[fmt.name]
    with np.errstate(invalid="ignore"):
        return ~(scaled_magnitude < threshold) if tie_overflows else ~(scaled_magnitude <= threshold)


# ---- the element cast: the codec's float32 table path, fused with decode ----------------------
@functools.lru_cache(maxsize=None)
def _value_tables(fmt, saturate: bool) -> tuple[np.ndarray, np.ndarray]:
    """``codec.quantize`` of every float32 upper half ``u``: with the lower half nonzero, and zero.

    By the codec's argument (``codec._float32_tables``; it holds for E4M3 and E5M2, the only
    formats cast here) every float32 ``(u << 16) | low`` with ``low != 0`` lies strictly inside one
    rounding interval, so ``(u << 16) | 1`` stands for all of them; only ``low == 0`` can sit on a
    boundary. Built with the public ``codec.quantize``.
    """
    upper = np.arange(1 << 16, dtype=np.uint32) << 16
    with np.errstate(invalid="ignore"):
        inside = codec.quantize((upper | 1).view(np.float32), fmt, saturate=saturate)
        boundary = codec.quantize(upper.view(np.float32), fmt, saturate=saturate)
    return inside, boundary


def _round_into(x: np.ndarray, out: np.ndarray, fmt, saturate: bool) -> None:
    """``out[...] = codec.quantize(x, fmt, saturate=saturate)`` bit for bit (C-contiguous float32
    arrays of one size), as one table lookup of the upper 16 bits: no codes, no second lookup."""
    inside, boundary = _value_tables(fmt, saturate)
    bits = x.reshape(-1).view(np.uint32)
    # The upper halves, as NumPy's index type (np.take converts other indices on every call),
    # in a reused array.
    upper = np.right_shift(bits, 16, out=_work_array("upper", bits.size, np.intp))
    flat_out = out.reshape(-1)
    np.take(inside, upper, out=flat_out, mode="wrap")  # indices below 2**16 are always in range
    exact = np.flatnonzero((bits << np.uint32(16)) == 0)  # the lower half is zero
    flat_out[exact] = boundary[upper[exact]]


_work = threading.local()


def _work_array(name: str, size: int, dtype) -> np.ndarray:
    """A 1-d scratch array of ``size`` elements, kept per thread and reused by later casts.

    A work array never leaves the function that asked for it, so no cast reads what another
    wrote. Reusing it saves the page faults of fresh memory on every cast.
    """
    array = getattr(_work, name, None)
    if array is None or array.size < size or array.dtype != dtype:
        array = np.empty(max(size, 1024), dtype)
        setattr(_work, name, array)
    return array[:size]


_FILLED_VALUES = 8
_FILLED_SIZE = 8192


def _filled(value) -> np.ndarray:
    """A read-only 1-d uint32 array of `_FILLED_SIZE` elements, all ``value``, kept per thread and
    per value. Casts ask for a few values (the magic of a per-tensor cast's one tile is one per
    format; a block cast of one tile asks for its scale's), and at most `_FILLED_VALUES` are kept."""
    arrays = getattr(_work, "filled", None)
    if arrays is None:
        arrays = _work.filled = {}
    key = int(value)
    array = arrays.get(key)
    if array is None:
        if len(arrays) >= _FILLED_VALUES:
            arrays.clear()
        array = arrays[key] = np.full(_FILLED_SIZE, key, np.uint32)
        array.flags.writeable = False
    return array


def _maximum_with(array: np.ndarray, value, out: np.ndarray) -> None:
    """``out[:] = np.maximum(array, value)`` for 1-d uint32 arrays and one value.

    NumPy 2.4.6's ``maximum`` against a scalar (or a broadcast length-1 array) took about four
    times as long as against an array. So the maximum is taken against a `_filled` array of the
    value, row by row of `_FILLED_SIZE` elements. That array stays in cache, where a filled array
    of the tensor's size (as before) was read from memory in a training step.
    """
    block = _filled(value)
    rows, rest = divmod(array.size, block.size)
    whole = rows * block.size
    if rows:
        np.maximum(array[:whole].reshape(rows, -1), block, out=out[:whole].reshape(rows, -1))
    if rest:
        np.maximum(array[whole:], block[:rest], out=out[whole:])


# ---- the element cast in the format's normal range: no table -----------------------------------
# Inside the format's normal range a cast is round-to-nearest-even of the float32 significand to
# the format's mantissa width, which float32 arithmetic does exactly (`_round_normal`). A
# power-of-two scale 2**k leaves that rounding alone (round(x * 2**k) = round(x) * 2**k while both
# are normal), so block casts with such scales round x itself, with no multiplications at all.
# The elements outside the range are few in a well-scaled tensor: below it (the format's
# subnormals and underflow, float32's subnormals) and beyond max's rounding interval (saturation,
# Inf, NaN). They are cast on their own (`_cast_elements`), and they alone can underflow or
# saturate, so they give the statistics too. Where they are many (a GELU output late in training
# holds 14% nonzero elements below its tiles' ranges, and as many exact zeros), each copy is cast
# whole instead, in a few passes that put every element on its tile's grid (`_cast_in_tiles`).
#
# At the default model's sizes a NumPy call on a few elements costs about 1 us, as much as a pass
# over 10,000 elements, and a cast inside a training step takes 1.2-1.5 times as long as run alone
# (its code and data have left the caches), so this path is written for few calls: the rowwise
# and columnwise casts of a GEMM operand are one cast of two stacked copies, whose tiles are
# handled all at once. (Measured on the default model's tensors at step 900: a 65,536-element
# pair cast takes about 57 us with nothing to fix, and about 38 us more to find and cast the
# handful of elements below their own tiles' ranges, some 35 calls.)

_FIXUP_FRACTION = 0.25
"""When more than this fraction of a tensor is left to the one by one cast (the whole cast in tiles,
`_DENSE_FRACTION`, having declined it), the whole tensor goes through the table instead."""

_IN_RANGE_MIN_SIZE = 1
"""Smaller tensors (the empty one) go through the table. Measured, the fast path wins at every size,
down to a handful of elements; tests raise this to hold the table path to the references too."""

_OUTLIER_FRACTION = 1 / 16
"""When more elements than this fraction lie below the largest lower bound of any tile, the tiles
with the top sixteenth of the bounds are searched on their own (`_cast_in_range`). (Tests set the
three knobs to hold each path to the references.)"""

_SPARSE_TILES_FRACTION = 1 / 4
"""Where the tiles of the elements below the largest tile's bound hold at most this fraction of a
tensor, only their amax is taken (rules whose scaled amax never passes max: ``blockwise``, and MX
under ``ceil`` or ``rceil``); else every tile's is, as MX under ``floor`` or ``even`` always needs
(`_cast_in_range`)."""

_DENSE_FRACTION = 1 / 10
"""Where more than this fraction of a per-tensor cast's elements are nonzero and lie below the
format's normal range, the tensor is cast whole (`_cast_in_tiles`) rather than those elements one
by one. (Measured on the default model's tensors late in training, the two cost the same at about
10%; fewer favour the one by one cast.) Timed inside training steps as well, where a replay of
captured tensors can mislead (`_true_positions`), 6% and 15% cost the same as 10%."""

_DENSE_BLOCK_FRACTION = 1 / 32
"""The same for block casts (below the normal range of the largest tile): measured on the default
model's tensors at step 950, both block recipes' pairs cost the same at 2-3% (a (1024, 256) E5M2
gradient at 2.1-2.4%: 657 against 721 us, 878 against 916 us under MX), and at 6.7% (a GELU
output) the whole cast took a quarter to a third of the time (792 against 3109 us; 1038 against
3286 us under MX). Timed inside training steps as well, 1/64 costs the same."""

_HUGE = np.float32(2.0**100).view(np.uint32)
"""Magnitude bits of 2**100. `_round_normal` would overflow on larger inputs, so block casts
holding one (or Inf, or NaN) go through the table."""


def _round_normal(x: np.ndarray, out: np.ndarray, fmt, split: np.ndarray) -> None:
    """``out`` = float32 ``x`` rounded to ``fmt.mantissa_bits``, to nearest, ties to even.

    Veltkamp's splitting (Dekker 1971, "A floating-point technique for extending the available
    precision", section 5): with ``c = x * (2**s + 1)`` rounded to float32, ``c - (c - x)`` is
    ``x`` rounded to nearest on ``24 - s`` significant bits, and float32's ties-to-even decides
    its ties too; ``s = 23 - mantissa_bits`` keeps the format's. Valid where nothing overflows and
    the result is normal in float32 and the format: ``2**-126 <= |x| < 2**100`` inside the
    format's normal range (tests/test_fp8_rounding.py holds it to the codec there, every binade).
    ``split``, a float32 array of x's size, holds ``c - x``.
    """
    np.multiply(x, np.float32(2 ** (23 - fmt.mantissa_bits) + 1), out=out)
    np.subtract(out, x, out=split)
    np.subtract(out, split, out=out)


_MAGNITUDE = np.uint32(0x7FFF_FFFF)


def _first_beyond(fmt) -> np.int32:
    """Magnitude bits of the first float32 whose cast (scale 1) lies beyond max's rounding
    interval: the threshold itself when its tie overflows, else the next float32."""
    threshold, tie_overflows = _THRESHOLDS[fmt.name]
    return np.int32(np.float32(threshold).view(np.int32) + (0 if tie_overflows else 1))


_FIRST_BEYOND = {fmt.name: _first_beyond(fmt) for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}


_MIN_NORMAL_FIELDS = {fmt.name: np.int32(127 + fmt.emin) for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}  # as float32


def _normal_range(fmt, exponent) -> tuple[np.ndarray, np.ndarray]:
    """Magnitude bits ``(lower, beyond)`` of the inputs whose cast with scale ``2**-exponent`` (int32
    arrays, or one int) lands in the format's normal range: ``lower <= |x| < beyond``.

    ``lower`` is ``fmt.min_normal * 2**exponent``, raised to float32's smallest normal (2**-126) so
    that float32 subnormals, whose significands are shorter, are cast on their own; ``beyond`` is
    `_first_beyond` times ``2**exponent``. Adding ``exponent`` to a normal float's exponent field
    multiplies it by ``2**exponent``; for exponents from -127 to 100 (the scales of tiles below
    2**100, `_HUGE`) both stay finite and normal.
    """
    return _lower_bits(fmt, exponent), _beyond_bits(fmt, exponent)


def _lower_bits(fmt, exponent):
    """`_normal_range`'s ``lower``."""
    if not isinstance(exponent, np.ndarray):  # one scale: in Python integers
        return np.uint32(max(int(exponent) + int(_MIN_NORMAL_FIELDS[fmt.name]), 1) << 23)
    return (np.maximum(exponent + _MIN_NORMAL_FIELDS[fmt.name], np.int32(1)) << np.int32(23)).view(np.uint32)


def _beyond_bits(fmt, exponent):
    """`_normal_range`'s ``beyond``."""
    if not isinstance(exponent, np.ndarray):
        return np.uint32((int(exponent) << 23) + int(_FIRST_BEYOND[fmt.name]))
    return ((exponent << np.int32(23)) + _FIRST_BEYOND[fmt.name]).view(np.uint32)


_NORMAL_RANGES = {fmt.name: _normal_range(fmt, 0) for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}
_STEPS = {fmt.name: np.float32(fmt.min_subnormal) for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}
_STEP_EXPONENTS = {fmt.name: np.int32(fmt.emin - fmt.mantissa_bits) for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}
_MAXIMA = {fmt.name: np.float32(fmt.max) for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}
# Scales 2**-k with k below this raise the lower bound of the normal range to 2**-126 (`_normal_range`).
_RAISED_BELOW = {fmt.name: -126 - fmt.emin for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}


# ---- tilings: which elements share a scale -------------------------------------------------------
class _Tiling(NamedTuple):
    """The tiles that a cast's scales cover, on a C-contiguous array seen as ``(outer, n, inner)``.

    A tile is ``length`` consecutive positions along n by ``width`` along inner, in one outer row;
    the last tile along n (or inner) is shorter when ``length`` (``width``) does not divide it, as
    the references zero-pad it. Tiles are numbered in C order of (outer, tile along n, tile along
    inner), the order of `_tile_amax`. Examples: a per-tensor scale is ``(1, size, 1, size, 1)``;
    blocks of 32 along the last axis of a (rows, columns) array ``(rows, columns, 1, 32, 1)``;
    blocks of 32 along axis 0 of it ``(1, rows, columns, 32, 1)``; 128x128 tiles of it
    ``(1, rows, columns, 128, 128)``.
    """

    outer: int
    n: int
    inner: int
    length: int
    width: int

    @property
    def tiles_along_n(self) -> int:
        return -(-self.n // self.length)

    @property
    def tiles_along_inner(self) -> int:
        return -(-self.inner // self.width)

    @property
    def tile_count(self) -> int:
        return self.outer * self.tiles_along_n * self.tiles_along_inner


def _blocks_tiling(shape: tuple, axis: int, block: int) -> _Tiling:
    """Blocks of ``block`` consecutive elements along ``axis`` (one block if the axis is shorter)."""
    n = shape[axis]
    return _Tiling(math.prod(shape[:axis]), n, math.prod(shape[axis + 1:]), max(1, min(block, n)), 1)


def _weight_tiling(shape: tuple) -> _Tiling:
    """128x128 tiles of a 2-D array (fewer rows or columns at its edges). Where one tile spans every
    column, they are runs of up to 128 whole rows: consecutive elements, read as such."""
    rows, columns = shape
    if columns <= 128:
        return _blocks_tiling((rows * columns,), 0, 128 * max(1, columns))
    return _Tiling(1, rows, columns, min(128, rows), 128)


def _tile_amax(magnitude: np.ndarray, tiling: _Tiling) -> np.ndarray:
    """The largest of the (1-d, C-order) ``magnitude`` bits in each tile, in tile order."""
    outer, n, inner, length, width = tiling
    if length == n and inner == width:  # one tile per outer row: runs of n * inner elements
        return mx._row_max(magnitude, n * inner)
    if inner == 1 and n % length == 0:  # runs of length consecutive elements
        return mx._row_max(magnitude, length)
    if inner == 1:  # rows of n, the last run of each row shorter
        return np.maximum.reduceat(magnitude.reshape(outer, n), np.arange(0, n, length), axis=1).reshape(-1)
    view = magnitude.reshape(outer, n, inner)
    if n % length == 0:
        amax = view.reshape(-1, length, inner).max(axis=1)
    else:
        amax = np.maximum.reduceat(view, np.arange(0, n, length), axis=1).reshape(-1, inner)
    if width > 1:
        amax = np.maximum.reduceat(amax, np.arange(0, inner, width), axis=1)
    return amax.reshape(-1)


def _tile_index(positions: np.ndarray, tiling: _Tiling) -> np.ndarray:
    """The tile of each flat (C-order) element position."""
    outer, n, inner, length, width = tiling
    if inner == 1:
        if n % length == 0:
            return positions // length
        row, position = np.divmod(positions, n)
        return row * tiling.tiles_along_n + position // length
    row, column = np.divmod(positions, inner)
    if n % length == 0:
        tile_row = row // length
    else:
        outer_row, position = np.divmod(row, n)
        tile_row = outer_row * tiling.tiles_along_n + position // length
    return tile_row * tiling.tiles_along_inner + (column // width if width > 1 else column)


def _tile_positions(tiles: np.ndarray, tiling: _Tiling) -> tuple:
    """``(positions, inside)``: the flat positions of the elements of ``tiles``, one row per tile, and
    which of them are elements (the missing ones of a partial tile are at position 0). Any tiling;
    `_tile_elements` reads runs and columns through views instead."""
    outer, n, inner, length, width = tiling
    tile_row, tile_column = np.divmod(tiles, tiling.tiles_along_inner)
    outer_row, tile_along_n = np.divmod(tile_row, tiling.tiles_along_n)
    rows = tile_along_n[:, None] * length + np.arange(length)  # (tiles, length) positions along n
    columns = tile_column[:, None] * width + np.arange(width)  # (tiles, width) positions along inner
    positions = ((outer_row[:, None, None] * n + rows[:, :, None]) * inner + columns[:, None, :])
    inside = ((rows < n)[:, :, None] & (columns < inner)[:, None, :]).reshape(tiles.size, -1)
    return np.where(inside, positions.reshape(tiles.size, -1), 0), inside


def _elements_between(magnitude: np.ndarray, tiling: _Tiling, tiles: np.ndarray, low, high) -> tuple:
    """The flat positions, and tiles, of the elements of ``tiles`` whose ``magnitude`` bits lie in
    ``[low, high)`` (one bound, or one per tile): ``magnitude - low < high - low`` in unsigned
    arithmetic, where a magnitude below ``low`` wraps around to a large number."""
    positions, inside = _tile_positions(tiles, tiling)
    found = magnitude[positions] - low < (np.asarray(high - low)).reshape(-1, 1)
    found &= inside
    found = found.reshape(-1).nonzero()[0]  # (1-d: NumPy's nonzero is much slower on 2-d arrays)
    return positions.reshape(-1)[found], tiles[found // positions.shape[1]]


def _tiles_are_views(tiling: _Tiling) -> bool:
    """Whether `_tile_elements` reads the tiles through a view: whole runs of consecutive elements, or
    whole columns (no partial tile)."""
    return tiling.n % tiling.length == 0 and (tiling.inner == 1 or tiling.width == 1)


def _tile_elements(values: np.ndarray, tiling: _Tiling, tiles: np.ndarray) -> tuple:
    """``(view, index, inside)``: ``view[index]`` holds the elements of ``tiles`` of the 1-d ``values``,
    one row per tile (assigning to it writes them back); ``inside`` says which are elements (None
    when all are, `_tiles_are_views`; the missing ones of a partial tile are read at position 0)."""
    outer, n, inner, length, width = tiling
    if _tiles_are_views(tiling):
        if inner == 1:  # runs of consecutive elements: rows of a (tiles, length) view
            return values.reshape(-1, length), tiles, None
        row_block, column = np.divmod(tiles, inner)  # columns of length elements, inner apart
        return values.reshape(-1, length, inner), (row_block, slice(None), column), None
    index, inside = _tile_positions(tiles, tiling)  # any tiling: the positions of each tile's elements
    return values, index, inside


def _clamp_hot_tiles(values: np.ndarray, tiling: _Tiling, tiles: np.ndarray, exponent, fmt) -> int:
    """In the rounded ``values`` (1-d) of ``tiles`` (whose amax reaches max's rounding interval), the
    elements beyond ``fmt.max * 2**exponent`` become that bound, sign kept; returns how many. They
    are exactly those whose input lay beyond max's rounding interval: rounding is monotonic and max
    is a format value, so clamping after rounding is rounding the clamped input. Elements the table
    clamped already (`_cast_elements`) equal the bound: they were counted there, not here.

    Only MX blocks reach max (`_Rule.reaches_max`), and MX elements always saturate (``cast`` and
    ``cast_pair`` pass ``saturate=True`` with an MX rule), so there is no non-saturating clamp."""
    view, index, inside = _tile_elements(values, tiling, tiles)
    block = view[index]  # (tiles, elements of a tile)
    # Each tile's bound repeated over its elements: against a (tiles, 1) operand NumPy runs one short
    # loop per tile, several times slower than one loop over arrays of a shape.
    bound = np.repeat(np.ldexp(_MAXIMA[fmt.name], exponent), block.shape[1]).reshape(block.shape)
    magnitude = np.abs(block)
    beyond = magnitude > bound
    if inside is not None:
        beyond &= inside
    count = int(np.count_nonzero(beyond))
    if count:  # a clamp of each sign (NumPy's copysign is several times slower)
        np.minimum(block, bound, out=block)
        block = np.maximum(block, np.negative(bound, out=bound), out=block)
        if inside is None:
            view[index] = block
        else:
            values[index[inside]] = block[inside]
    return count


# ---- the in-range cast -------------------------------------------------------------------------
def _cast_in_range(x: np.ndarray, tilings: list, out: np.ndarray, fmt, saturate: bool, rule=None, scale=None):
    """Cast the 1-d float32 ``x`` once per tiling, into the rows of ``out`` (``(len(tilings),
    x.size)`` float32, C-contiguous): `_round_normal` for every element, then `_cast_elements` for
    those outside the normal range of their tile's scale.

    ``rule`` (a `_Rule`) gives the exponents ``k`` (int32) of the power-of-two scales ``2**-k`` of
    the tiles from their amax bits (those of every tiling, one after another); without a rule the
    scale is 1, or the per-tensor ``scale``, which multiplies ``x`` before the
    cast (the values are multiplied by ``float32(1 / scale)`` after it), as scaling.py does. The
    copies share the rounding: a power-of-two scale leaves it unchanged, so every row of ``out``
    starts as a copy of the first (unless none has anything to fix), and is fixed at its own
    outside elements.

    Those are found in one comparison against the largest lower bound of any tile (the largest
    tile's: the exponents grow with amax, so the tensor's max gives it), zeros left out (they stay
    zero and never underflow), and then cast on their own tile's grid (`_round_in_tiles`, which
    also tells whether any lay below that tile's range): with the exponents from the amax of every
    tile, or, where the rule never reaches max and the candidates' tiles are few
    (`_SPARSE_TILES_FRACTION`), from theirs alone. Elements beyond max's rounding interval can
    only lie in tiles whose amax reaches it (MX blocks, whose every amax is taken), and are
    searched there (those cast on their own through the table, which clamps them, are counted as
    it casts them: `_cast_elements`). Every element inside the range is nonzero before and after
    the cast and lies below that interval, so the outside elements give exact statistics. Where more than
    `_DENSE_FRACTION` (`_DENSE_BLOCK_FRACTION` with a rule) of the elements are nonzero and below
    the largest tile's bound, each copy is cast whole instead (`_cast_in_tiles`), with every
    tile's amax.

    Returns
    -------
    (list of (int, int, numpy.uint32), bool) or None
        Per tiling: the underflow and saturation counts, and the largest magnitude's bits (of
        ``x * scale`` with a scale); and True where no element needed fixing, so that every copy
        equals the first, and the other rows of ``out`` were left unwritten. None, with ``out``
        unspecified, where a block cast holds a magnitude of 2**100 or more (`_HUGE`: Inf and NaN
        too), or where more than `_FIXUP_FRACTION` of the elements are left to the one by one cast.
        That cast takes what the whole cast (dense) does not: a tensor with few elements outside
        the range, or one that the whole cast declines (a nonzero tile whose bound is raised to
        2**-126 under a rule that can reach max, MX under ``floor`` or ``even``; such tiles holding
        more than `_FIXUP_FRACTION` of the elements under the other rules; one scale: an Inf, a NaN
        or a huge element). It casts those tiles too, and counts what saturates in them.
    """
    size, copies = x.size, len(tilings)
    if scale is None:
        source = x
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            source = np.multiply(x, scale, out=_work_array("scaled", size, np.float32))
    magnitude = np.bitwise_and(source.view(np.uint32), _MAGNITUDE, out=_work_array("magnitude", size, np.uint32))
    far = lower = amax = exponent = raised = None
    if rule is None:  # one scale, known; the elements beyond max's rounding interval are cast on their own
        largest = magnitude.max()
        lowest, beyond = _NORMAL_RANGES[fmt.name]
        high = (magnitude >= beyond).nonzero()[0] if largest >= beyond else np.zeros(0, np.intp)
    else:
        offsets = [0]
        for tiling in tilings:
            offsets.append(offsets[-1] + tiling.tile_count)
        if rule.reaches_max:  # the tiles that reach max are searched: every tile's amax
            amax = _every_tile_amax(magnitude, tilings)
            largest = amax.max()
        else:  # taken later, of the tiles that need it
            largest = magnitude.max()
        if largest >= _HUGE:
            return None
        # The exponents grow with amax: the largest tile's bound is the largest of all.
        lowest = _lower_bits(fmt, rule.exponent_of(largest))
    marks = _marks(size)
    below = np.less(magnitude, lowest, out=marks[:size])
    # Many nonzero elements below: every copy is cast whole (`_cast_in_tiles`), unless, with one
    # scale, an element is huge, Inf or NaN. Nonzero tiles whose bound is raised to 2**-126 (their
    # float32 subnormals need the table) are cast again after, where few and where the rule never
    # reaches max (blockwise, MX under ceil or rceil; else the whole cast is declined, as
    # `_recast_raised_tiles` counts no saturation, and the one by one cast below takes the tensor,
    # or declines it where it holds too many elements to fix).
    below_count = np.count_nonzero(below)
    dense_count = (_DENSE_FRACTION if rule is None else _DENSE_BLOCK_FRACTION) * size
    dense: bool | np.bool_ = below_count > dense_count
    zeros = None
    if dense:
        zeros = _count_zeros(magnitude)  # (of x * scale, which are x's own with a scale of 1 or more)
        dense = below_count - zeros > dense_count
    if dense and rule is None:
        dense, offsets, exponent = largest < _HUGE, [0, 1], np.zeros(1, np.int32)  # (x scaled already)
    elif dense:
        if amax is None:
            amax = _every_tile_amax(magnitude, tilings)
        exponent = rule.exponents(amax)
        raised = exponent < _RAISED_BELOW[fmt.name]
        raised = (raised & (amax != 0)).nonzero()[0] if raised.any() else None
        if raised is not None and raised.size:
            dense = not rule.reaches_max and \
                raised.size * max(tiling.length * tiling.width for tiling in tilings) <= _FIXUP_FRACTION * size
    if dense:
        assert exponent is not None  # (set above wherever dense holds)
        # x's zeros are x * scale's where no product underflows to zero: with a scale of 1 or more
        underflow = _cast_in_tiles(x, source, magnitude, out, tilings, exponent, offsets, fmt,
                                   zeros if scale is None or scale >= 1 else None)
        if rule is not None and raised is not None and raised.size:
            _recast_raised_tiles(source, out, tilings, raised, exponent, offsets, fmt, saturate, underflow)
        if rule is None:
            if high.size:
                with np.errstate(over="ignore", invalid="ignore"):
                    out[0][high] = _round_beyond_max(source[high], fmt, saturate)
            if scale is not None:
                out *= np.float32(1) / scale  # a nonzero element stays nonzero: the counts hold
            saturated = [high.size]
        else:
            hot = (amax >= _beyond_bits(fmt, exponent)).nonzero()[0] if rule.reaches_max else None
            saturated = _clamp_copies(out, tilings, hot, exponent, offsets, fmt)
        return [(underflow[copy], saturated[copy], largest) for copy in range(copies)], False
    if below_count > _DENSE_FRACTION * size and scale is None:  # mostly zeros: left out of the search
        np.less(np.subtract(magnitude, np.uint32(1), out=_work_array("own", size, np.uint32)),
                lowest - np.uint32(1), out=below)  # (a zero wraps around)
        if zeros is None:  # (counted above unless dense_count exceeds this bound)
            zeros = _count_zeros(magnitude)
        candidates = _true_positions(marks, size, below_count - zeros)
    else:
        candidates = _nonzero_of(x, marks, below_count)
    if rule is not None and amax is None and \
            candidates.size * sum(tiling.length * tiling.width for tiling in tilings) > _SPARSE_TILES_FRACTION * size:
        amax = _every_tile_amax(magnitude, tilings)
    if amax is not None and exponent is None:
        exponent = rule.exponents(amax)
    if candidates.size > _OUTLIER_FRACTION * size and exponent is not None and exponent.size > 16:
        # A few tiles with a far larger amax than the rest (an outlier) raise the bound for all:
        # take the bound below the top sixteenth of the tiles, and search those on their own.
        lower = _lower_bits(fmt, exponent)
        lowest = far = np.partition(lower, -1 - lower.size // 16)[-1 - lower.size // 16]
        np.less(magnitude, lowest, out=below)
        candidates = _nonzero_of(x, marks)
    if candidates.size > _FIXUP_FRACTION * size:
        return None
    # The elements to fix, as positions in the stacked copies, each with its tile's exponent: those
    # below the normal range (of the largest tile), then (one scale) those beyond max's interval.
    if rule is None:
        exponents = None
        positions, lows = (np.concatenate((candidates, high)) if high.size else candidates), candidates.size
        inputs = source[positions] if positions.size else None
    else:
        inputs = source[candidates] if candidates.size else None
        if copies > 1 and candidates.size:  # the copies share the candidates and their inputs
            positions = np.concatenate([candidates + copy * size for copy in range(copies)])
            inputs = np.concatenate([inputs] * copies)
        else:  # (none in any copy, or those of the one copy)
            positions = candidates
        if not candidates.size:
            exponents = np.zeros(0, np.int32)
        elif exponent is None:  # from the amax of the candidates' own tiles
            exponents = _candidate_tile_exponents(magnitude, tilings, candidates, rule)
        else:
            exponents = exponent[np.concatenate([_tile_index(candidates, tiling) + offset
                                                 for tiling, offset in zip(tilings, offsets)])]
        if far is not None:  # the tiles whose bound lies above far, from far up to their own bound
            assert lower is not None and exponent is not None  # (set with far)
            found = [(positions, exponents, source[candidates[:0]] if inputs is None else inputs)]
            for copy, mine in _by_copy((lower > far).nonzero()[0], offsets):
                if mine.size:
                    found_positions, found_tiles = _elements_between(magnitude, tilings[copy], mine - offsets[copy],
                                                                     far, lower[mine])
                    found.append((found_positions + copy * size, exponent[found_tiles + offsets[copy]],
                                  source[found_positions]))
            positions, exponents, inputs = (np.concatenate(arrays) for arrays in zip(*found))
        lows = positions.size
    # Beyond max's rounding interval in tiles: only in those whose amax reaches it (MX blocks).
    hot = (amax >= _beyond_bits(fmt, exponent)).nonzero()[0] if rule is not None and rule.reaches_max \
        else candidates[:0]
    # Every element rounded in place. The magnitudes are read for the last time above (and the tiles'
    # amax, which for blocks of one element is their very array): it holds the rounding's
    # intermediate, in cache.
    split = magnitude.view(np.float32)
    if largest < _HUGE:
        _round_normal(source, out[0], fmt, split)
    else:  # per-tensor: Inf, NaN or huge elements lie beyond max, overflow here, and are cast below
        with np.errstate(over="ignore", invalid="ignore"):
            _round_normal(source, out[0], fmt, split)
    positions, values, underflow, clamped = _cast_elements(inputs, positions, exponents, lows, fmt, saturate, copies,
                                                           size)
    if copies > 1:
        if not positions.size and not hot.size:  # nothing to fix: every copy is the rounded x
            return [(0, 0, largest)] * copies, True
        out[1:] = out[0]
    if positions.size:
        out.reshape(-1)[positions] = values
    saturated = [high.size] if rule is None else _clamp_copies(out, tilings, hot, exponent, offsets, fmt, clamped)
    if scale is not None:
        out *= np.float32(1) / scale  # a nonzero element stays nonzero: the counts hold
    return [(underflow[copy], saturated[copy], largest) for copy in range(copies)], False


def _every_tile_amax(magnitude: np.ndarray, tilings: list) -> np.ndarray:
    """The amax bits of every tile of every tiling, one tiling after another (`_tile_amax`)."""
    if len(tilings) == 1:
        return _tile_amax(magnitude, tilings[0])
    return np.concatenate([_tile_amax(magnitude, tiling) for tiling in tilings])


def _clamp_copies(out: np.ndarray, tilings: list, hot, exponent, offsets: list, fmt, saturated=None) -> list:
    """Each copy's saturation count, after `_clamp_hot_tiles` on its ``hot`` tiles (tile numbers over
    the stacked copies, sorted; None or empty: none), added to ``saturated`` (each copy's count of
    elements saturated already, `_cast_elements`; None: none)."""
    saturated = [0] * len(tilings) if saturated is None else list(saturated)
    for copy, mine in _by_copy(hot, offsets) if hot is not None and hot.size else ():
        if mine.size:
            saturated[copy] += _clamp_hot_tiles(out[copy], tilings[copy], mine - offsets[copy], exponent[mine], fmt)
    return saturated


# Bits of 1.5 * 2**(s + 23), s the spacing's exponent (`_cast_in_tiles`): for a tile's subnormal step
# s = k + emin - mantissa_bits (k added to the field), and for an element's own binade
# s = e - mantissa_bits (the element's exponent field added).
_TILE_MAGIC_FIELDS = {fmt.name: np.int32(127 + 23 + fmt.emin - fmt.mantissa_bits)
                      for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}
_OWN_MAGIC_OFFSETS = {fmt.name: np.uint32(((23 - fmt.mantissa_bits) << 23) | 0x40_0000)
                      for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}


def _cast_in_tiles(x: np.ndarray, source: np.ndarray, magnitude: np.ndarray, out: np.ndarray, tilings: list,
                   exponent: np.ndarray, offsets: list, fmt, zeros=None) -> list:
    """Cast the 1-d float32 ``source`` (``x`` scaled, or ``x``; ``magnitude`` its bits, each below
    2**100) once per tiling into the rows of ``out``, whole: each element onto its tile's grid
    (`_round_in_tiles`), with the tiles' exponents ``exponent`` (one tiling after another, from
    ``offsets``) broadcast over their elements. Returns each copy's underflow count (the nonzero
    ``x`` cast to zero; ``zeros``: how many zeros ``x`` holds, where known). Beyond max's rounding
    interval the values are the rounded ones, for the caller to clamp or replace.

    The grid's spacing ``2**s`` is the larger of the tile's subnormal step and the spacing of the
    element's own binade, and ``|x|`` is rounded to a multiple of it by adding and subtracting
    ``c = 1.5 * 2**(s + 23)``: float32 rounds ``|x| + c``, which lies in c's binade, to a multiple
    of its spacing, ``2**s``, to nearest, ties to even, and ``- c`` is exact. The larger of the two
    ``c`` is the larger of their bits. x's sign goes back on last, on zeros too. Tiles whose bound
    `_normal_range` raised to 2**-126 must hold only zeros, or be cast again after
    (`_recast_raised_tiles`): the own binade of a float32 subnormal is not its exponent field's.
    """
    magic = np.bitwise_and(source.view(np.uint32), np.uint32(0x7F80_0000), out=_work_array("own", x.size, np.uint32))
    own = np.add(magic, _OWN_MAGIC_OFFSETS[fmt.name], out=magic)
    sign_bit = np.uint32(0x8000_0000)
    # x's signs: for several copies once, in an array of their own; for one, in its grid once read
    shared_sign = np.bitwise_and(source.view(np.uint32), sign_bit, out=_work_array("sign", x.size, np.uint32)) \
        if len(tilings) > 1 else None
    tile_magic = (((exponent + _TILE_MAGIC_FIELDS[fmt.name]) << np.int32(23)) | np.int32(0x40_0000)).view(np.uint32)
    underflow = []
    for copy, tiling in enumerate(tilings):
        grid = _work_array("grid", x.size, np.uint32) if copy < len(tilings) - 1 else own  # (own, last)
        if tiling.tile_count == 1:  # one tile: its magic
            _maximum_with(own, tile_magic[offsets[copy]], grid)
        else:
            (own_view, grid_view), (tile_view,) = _tile_broadcast(tiling, (own, grid), (
                tile_magic[offsets[copy]:offsets[copy + 1]],))
            np.maximum(own_view, tile_view, out=grid_view)
        values = np.add(magnitude.view(np.float32), grid.view(np.float32), out=out[copy])
        values -= grid.view(np.float32)
        # |x| rounded (+0.0 or positive): zeros, and those that underflowed
        underflow.append(_count_zeros(values.view(np.uint32)))
        sign = shared_sign if shared_sign is not None else np.bitwise_and(source.view(np.uint32), sign_bit, out=grid)
        np.bitwise_or(values.view(np.uint32), sign, out=values.view(np.uint32))
        if zeros is None and underflow[-1]:
            zeros = _count_zeros(x)
        underflow[-1] -= zeros or 0
    return underflow


def _recast_raised_tiles(source: np.ndarray, out: np.ndarray, tilings: list, tiles: np.ndarray, exponent: np.ndarray,
                         offsets: list, fmt, saturate: bool, underflow: list) -> None:
    """After `_cast_in_tiles`: the elements of ``tiles`` (numbers over the stacked copies, sorted;
    nonzero tiles whose bound `_normal_range` raised to 2**-126) cast again, through the table
    (`_round_by_table`), into the rows of ``out``; each copy's ``underflow`` count follows. For
    rules whose scaled amax never passes max: nothing here saturates."""
    for copy, mine in _by_copy(tiles, offsets):
        if not mine.size:
            continue
        positions, inside = _tile_positions(mine - offsets[copy], tilings[copy])
        positions = positions[inside]
        exponents = np.broadcast_to(exponent[mine][:, None], inside.shape)[inside]
        values, _ = _round_by_table(source[positions], exponents, fmt, saturate)
        row = out[copy]
        underflow[copy] += int(np.count_nonzero(values == 0)) - int(np.count_nonzero(row[positions] == 0))
        row[positions] = values


def _round_by_table(inputs: np.ndarray, exponents: np.ndarray, fmt, saturate: bool) -> tuple:
    """The cast of the float32 ``inputs`` times ``2**-exponents`` (one per element), times
    ``2**exponents``, through the table (`_round_into`): any magnitude, float32 subnormals too.
    Returns the values and the scaled inputs (``inputs * 2**-exponents``).

    The scaling is exact wherever the product is a float32 normal (an element of a tile lies below
    2**(emax + 1) once scaled: no overflow), and a product below 2**-126 lies far below half the
    format's smallest subnormal, so it casts to zero, sign kept, exact or not. The rescaling of a
    format value by ``2**exponents`` (-127 and up) is exact, float32 subnormals included."""
    scaled = np.ldexp(inputs, -exponents)
    values = np.empty_like(inputs)
    _round_into(scaled, values, fmt, saturate)
    return np.ldexp(values, exponents), scaled


def _tile_broadcast(tiling: _Tiling, elements: tuple, per_tile: tuple) -> tuple:
    """Views of the 1-d ``elements`` arrays, and the ``per_tile`` arrays (one value per tile, in tile
    order) shaped to broadcast over them: each tile's value over the tile's elements. Where a
    partial tile breaks the views, a tile's value is repeated over its rows and columns."""
    outer, n, inner, length, width = tiling
    along_n, along_inner = tiling.tiles_along_n, tiling.tiles_along_inner
    if n % length == 0 and inner % width == 0:
        shape = (outer, along_n, length, along_inner, width)
        return ([a.reshape(shape) for a in elements],
                [t.reshape(outer, along_n, 1, along_inner, 1) for t in per_tile])
    expanded = []
    for t in per_tile:
        t = np.repeat(t.reshape(outer, along_n, along_inner), length, axis=1)[:, :n]
        if width > 1:
            t = np.repeat(t, width, axis=2)[:, :, :inner]
        expanded.append(t)
    return [a.reshape(outer, n, inner) for a in elements], expanded


def _count_zeros(values: np.ndarray) -> int:
    """How many of the 1-d ``values`` are zero (+-0 for floats): a comparison into a reused boolean
    array and its count, which NumPy does faster than ``count_nonzero`` of uint32 bits themselves."""
    return int(np.count_nonzero(np.equal(values, 0, out=_work_array("zero", values.size, np.bool_))))


def _marks(size: int) -> np.ndarray:
    """A reused boolean work array of ``size`` marks (its first ``size`` elements), with room after
    them for `_true_positions`' tail of ``size // 9 + 1`` Trues."""
    return _work_array("marks", size + size // 9 + 1, np.bool_)


_SEARCHED_FRACTION = 0.055
"""Up to this fraction of marks, `_true_positions` lets NumPy search for each; above it (to 10%),
it adds the tail. Measured in training steps of the default unit-scaled model: the loop took 115
us against the search's 329 on 262,144 marks with 9% True, and 87 against 53 on 196,608 with
3.4% (the search's cost per True varies with how the Trues cluster: 7 to 15 ns)."""


def _true_positions(marks: np.ndarray, size: int, count=None) -> np.ndarray:
    """``np.flatnonzero(marks[:size])`` of `_marks`, holding ``count`` Trues there (None: counted).

    NumPy's nonzero of a 1-d boolean array (numpy/_core/src/multiarray/item_selection.c,
    ``PyArray_Nonzero``; gh-4370) searches for each True with memchr when at most 10% are True,
    and runs a branch-free loop over every element above that. The search costs some 7-15 ns a
    True in a training step (mispredicted branches: each step's marks are new; a benchmark that
    repeats one array trains the predictor and shows far less), the loop about 0.4 ns an
    element: from a few percent of Trues up, the loop is faster. Counting the tail of
    Trues after the marks, the array holds more than 10%, so NumPy takes the loop, and the tail's
    positions come last, where they are cut off.
    """
    if count is None:
        count = int(np.count_nonzero(marks[:size]))
    if not _SEARCHED_FRACTION * size < count <= 0.1 * size:  # NumPy's own choice is the faster one
        return marks[:size].nonzero()[0]
    marks[size:] = True
    return marks.nonzero()[0][:count]


def _nonzero_of(x: np.ndarray, marks: np.ndarray, count=None) -> np.ndarray:
    """The positions where the `_marks` of ``x`` (``below``) hold and ``x`` is not zero. A zero stays
    zero through `_round_normal`, sign and all, and never counts as underflow, so it needs no
    fixing; a nonzero ``x`` whose scaled value is zero does."""
    candidates = _true_positions(marks, x.size, count)
    return candidates[x[candidates] != 0] if candidates.size else candidates


def _candidate_tile_exponents(magnitude: np.ndarray, tilings: list, candidates: np.ndarray, rule) -> np.ndarray:
    """The exponent of the tile that holds each element at ``candidates`` in each tiling, one tiling
    after another (`_cast_in_range`), from those tiles' amax alone."""
    amax = []
    for tiling in tilings:
        tiles = _tile_index(candidates, tiling)
        if not _tiles_are_views(tiling):  # every tile's amax (one reduceat) costs less than reading these
            amax.append(_tile_amax(magnitude, tiling)[tiles])
            continue
        view, index, _ = _tile_elements(magnitude, tiling, tiles)
        amax.append(view[index].max(axis=1))
    return rule.exponents(np.concatenate(amax) if len(amax) > 1 else amax[0])


def _by_copy(tiles: np.ndarray, offsets: list):
    """``(copy, tiles of that copy)`` for sorted tile numbers over stacked copies (`_cast_in_range`)."""
    if len(offsets) == 2:
        return [(0, tiles)]
    starts = np.searchsorted(tiles, offsets).tolist()
    return [(copy, tiles[starts[copy]:starts[copy + 1]]) for copy in range(len(offsets) - 1)]


def _cast_elements(inputs, positions, exponents, lows, fmt, saturate: bool, copies: int, size: int) -> tuple:
    """The cast of the elements at ``positions`` of the stacked copies (each copy ``size`` long):
    ``inputs``, the source's values there, times ``2**-exponents`` (one per element; None: scale 1).

    The first ``lows`` lie below the normal range of the largest tile. With exponents, each is cast
    onto its own tile's grid (`_round_in_tiles`): those that lie inside their tile's normal range
    get the value `_round_normal` gave them, so all are written, and none is where none lies below
    its tile's range. Where a tile's bound was raised to 2**-126 (then float32 subnormals may be
    normal once scaled) they take the table instead. The others (one scale only) lie beyond max's
    rounding interval (`_round_beyond_max`).

    Below the largest tile's bound an element can still lie beyond max's rounding interval of its
    own tile (an MX block under ``floor`` or ``even`` whose amax is far below the largest, or a
    tile whose bound was raised). `_round_in_tiles` leaves such an element rounded, above its
    tile's bound, for `_clamp_hot_tiles` to clamp and count; the table clamps it to the bound
    itself, where that count (of values beyond the bound) misses it, so it is counted here.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, list of int, list of int or None)
        The positions of the elements to write and their values; each copy's underflow count
        (every element here comes from a nonzero input, `_nonzero_of`, so a zero value
        underflowed); and each copy's count of elements the table took beyond max's rounding
        interval (None: none went through the table with exponents).
    """
    if not positions.size:
        return positions, None, [0] * copies, None
    clamped = None
    if exponents is None:
        values = _round_below_normal(inputs[:lows] if lows < inputs.size else inputs, fmt)
        if lows < inputs.size:  # (Inf and NaN among them, and products that overflow to Inf)
            with np.errstate(over="ignore", invalid="ignore"):
                values = np.concatenate((values, _round_beyond_max(inputs[lows:], fmt, saturate)))
    elif exponents.min() < _RAISED_BELOW[fmt.name]:
        values, scaled = _round_by_table(inputs, exponents, fmt, saturate)
        beyond = _beyond_max(np.abs(scaled), fmt)  # (few elements: those below the largest tile's bound)
        clamped = [int(np.count_nonzero(beyond))] if copies == 1 else \
            np.bincount(positions[beyond] // size, minlength=copies).tolist()
    else:
        values, below = _round_in_tiles(inputs, fmt, exponents)
        if not below:  # every one lies inside its tile's normal range: nothing to fix
            return positions[:0], None, [0] * copies, None
    zero = values[:lows] == 0
    if copies == 1:
        return positions, values, [int(np.count_nonzero(zero))], clamped
    return positions, values, np.bincount(positions[:lows][zero] // size, minlength=copies).tolist(), clamped


def _round_below_normal(scaled: np.ndarray, fmt) -> np.ndarray:
    """The cast of magnitudes below ``fmt.min_normal``, where the format's values are the multiples
    of its smallest subnormal: round to the nearest multiple, ties to even, as ``np.rint`` does
    after scaling by a power of two (each step exact in float32, the sign of zero kept)."""
    step = _STEPS[fmt.name]
    values = np.rint(scaled * (np.float32(1) / step))
    values *= step
    return values


_FIELD_OFFSETS = {fmt.name: np.int32(127 + fmt.mantissa_bits) for fmt in (FORWARD_FORMAT, BACKWARD_FORMAT)}


def _round_in_tiles(x: np.ndarray, fmt, exponents: np.ndarray) -> tuple[np.ndarray, bool]:
    """The cast of the nonzero float32 ``x`` times ``2**-exponents`` (int32, one per element), times
    ``2**exponents``, for magnitudes below max's rounding interval of their tile (those beyond it:
    below), with exponents from ``_RAISED_BELOW`` up: onto the format's grid scaled by ``2**exponents``.

    The grid's spacing at ``x`` is the larger of the subnormal step ``2**(exponents +
    log2(min_subnormal))`` (below the tile's normal range) and the spacing of x's own binade,
    ``2**(e - mantissa_bits)`` with ``2**e <= |x|`` (inside it, where it is the larger); ``x`` is
    rounded to the nearest multiple, ties to even, by ``np.rint`` between two scalings by powers
    of two (each exact; where the first underflows in float32 the result lies below half a step
    and rounds to zero, the sign kept). A float32 subnormal ``x`` always lies below its tile's
    range at these exponents, so its exponent field, 0, never decides.

    An element beyond max's rounding interval of its tile (MX under ``floor`` or ``even``: an
    element below the largest tile's bound can lie beyond its own tile's max) is ``x`` rounded to
    ``mantissa_bits`` here, above the tile's bound, for `_clamp_hot_tiles` to clamp and count.

    Returns the values, and whether any element lay below its tile's normal range (otherwise each
    value is ``x`` rounded to ``mantissa_bits``, what `_round_normal` gives).
    """
    field = ((x.view(np.uint32) >> np.uint32(23)) & np.uint32(0xFF)).view(np.int32)
    tile_steps = exponents + _STEP_EXPONENTS[fmt.name]
    own_steps = np.subtract(field, _FIELD_OFFSETS[fmt.name], out=field)
    below = bool((own_steps < tile_steps).any())
    steps = np.maximum(tile_steps, own_steps, out=own_steps)
    return np.ldexp(np.rint(np.ldexp(x, -steps)), steps), below


def _round_beyond_max(scaled: np.ndarray, fmt, saturate: bool) -> np.ndarray:
    """The cast of magnitudes beyond max's rounding interval (Inf and NaN too): +-max where the cast
    saturates, else +-Inf (an infinite product, no overflow), or NaN of that sign in a format without
    Inf (E4M3: OFP8 v1.0 section 5; the casts here always saturate E4M3, so only a caller of this
    function meets it); a NaN becomes the codec's, the quiet NaN ``+-0x7FC00000`` of its sign (a NaN
    code decodes to it, whatever the payload it came from)."""
    if not saturate:
        result = scaled * np.float32(np.inf) if fmt.has_infinity else np.copysign(np.float32(np.nan), scaled)
    else:
        largest = _MAXIMA[fmt.name]
        result = np.minimum(np.maximum(scaled, -largest), largest)
    nan = np.isnan(scaled)
    if nan.any():
        result[nan] = np.copysign(np.float32(np.nan), scaled[nan])
    return result


def _cast_fast(x: np.ndarray, tilings: list, new, fmt, saturate: bool, rule=None, scale=None):
    """`_cast_in_range` of the C-contiguous float32 ``x`` over slabs of whole tiles of about
    ``_CHUNK_ELEMENTS`` elements each on `CAST_THREADS` threads, into ``new(shape, float32)``: x's
    shape for one tiling, stacked ``(len(tilings),) + x.shape`` for several.

    Returns ``(values, results)``, the results summed over the slabs; ``values`` is that array
    for one tiling, and the list of each tiling's values for several (one array for all where
    nothing needed fixing). None where the tensor is smaller than `_IN_RANGE_MIN_SIZE` (then
    nothing is allocated) or a slab declined.
    """
    if x.size < max(_IN_RANGE_MIN_SIZE, 1):
        return None
    copies = len(tilings)
    out = new(x.shape if copies == 1 else (copies,) + x.shape, np.float32)
    flat, stacked = x.reshape(-1), out.reshape(copies, -1)
    if x.size <= _CHUNK_ELEMENTS:  # one slab: the tensor
        result = _cast_in_range(flat, tilings, stacked, fmt, saturate, rule, scale)
        if result is None:
            return None
        results, same = result
        return (out if copies == 1 else [out[0]] * copies if same else list(out)), results
    # Slabs hold whole tiles of every tiling: whole outer rows, or whole rows of tiles along n;
    # a per-tensor scale (no rule) allows any slab.
    granules = [1 if rule is None else tiling.n * tiling.inner if tiling.outer > 1 else tiling.length * tiling.inner
                for tiling in tilings]
    granule = math.lcm(*granules)

    def slab_tiling(tiling: _Tiling, elements: int) -> _Tiling:
        if rule is None:
            return _Tiling(1, elements, 1, elements, 1)
        if tiling.outer > 1:
            return tiling._replace(outer=elements // (tiling.n * tiling.inner))
        return tiling._replace(n=elements // tiling.inner)

    def kernel(start, stop):
        start, stop = start * granule, min(stop * granule, flat.size)
        # one copy: its slab of out; several: a slab of each, cast into a stacked array, then copied
        slab_out = stacked[:, start:stop] if copies == 1 else np.empty((copies, stop - start), np.float32)
        result = _cast_in_range(flat[start:stop], [slab_tiling(tiling, stop - start) for tiling in tilings], slab_out,
                              fmt, saturate, rule, scale)
        if result is None:
            return None
        if copies > 1:
            stacked[:, start:stop] = slab_out[0] if result[1] else slab_out
        return result[0]

    parts = _map_slices(kernel, -(-flat.size // granule), granule)
    if any(part is None for part in parts):
        return None
    return (out if copies == 1 else list(out)), [
        (sum(part[i][0] for part in parts), sum(part[i][1] for part in parts), max(part[i][2] for part in parts))
        for i in range(copies)]


# ---- slices on threads -------------------------------------------------------------------------
CAST_THREADS = min(4, os.cpu_count() or 1)
"""Threads that cast a tensor of more than ``_CHUNK_ELEMENTS`` (``2**18``) elements, cut into slabs of
about that many: an int >= 1 (1 for a single thread), by default the machine's CPU count, at most
4. A tensor of up to ``2**18`` elements is cast whole on the calling thread. In ``train_tiny``'s default
model (n_embd 64) that is every tensor (the largest, its GELU outputs and MLP gradients, hold
exactly ``2**18``); at n_embd 128 its GELU outputs and the output gradients of its MLP's first linear
and its q, k, v projection are split, and in ``bench fp8``'s block 12 of a step's 16 casts. NumPy
releases the GIL inside its loops, so the slabs can run in parallel. Each writes its own part of
the output, so the results are the same for any number of threads. A slab holds whole blocks or
tiles, so a block cast along axis 0 of a very wide tensor (its blocks span 32 or 128 rows) gets
fewer, larger slabs, down to one for a (64, 262144) ``blockwise`` cast; and each thread keeps the
largest scratch arrays it has used, for the next cast. The threading experiments of
the speed measurement log (tutorials/speed-log.md) cut the default model's tensors into smaller
slabs (the steps were slower); whether the threads help the wider tensors in a step is not
measured there."""

_CHUNK_ELEMENTS = 1 << 18  # 1 MiB of float32 per slice: it and its temporaries stay in cache
_pool: ThreadPoolExecutor | None = None
_pool_workers = 0
_pool_lock = threading.Lock()  # taken only to make the pool: threads casting at once make one, not one each


def _map_slices(kernel: Callable, rows: int, row_elements: int) -> list:
    """``[kernel(start, stop), ...]`` over consecutive slices of ``range(rows)`` of about
    ``_CHUNK_ELEMENTS`` elements each, on ``CAST_THREADS`` threads; the results in slice order."""
    global _pool, _pool_workers
    if rows * row_elements <= _CHUNK_ELEMENTS:
        return [kernel(0, rows)]
    step = max(1, _CHUNK_ELEMENTS // max(1, row_elements))
    slices = [(start, min(start + step, rows)) for start in range(0, rows, step)]
    threads = min(formats._check_int(CAST_THREADS, "fastcast.CAST_THREADS", minimum=1), len(slices))
    if threads < 2:
        return [kernel(start, stop) for start, stop in slices]
    if _pool_workers < threads - 1:
        with _pool_lock:
            if _pool_workers < threads - 1:  # (another thread may have made it meanwhile)
                _pool = ThreadPoolExecutor(max_workers=threads - 1, thread_name_prefix="minifp8-cast")
                _pool_workers = threads - 1  # (after _pool: a thread that reads this finds that pool)
    pool = _pool
    assert pool is not None  # (made above: threads >= 2)
    groups = [slices[i::threads] for i in range(threads)]
    # NumPy's error state is per thread: the workers take this thread's (a cast that ignores
    # overflow while it rescales did not ignore it in the slabs the workers ran)
    errors = dict(np.geterr())
    futures = [pool.submit(_run_slices, kernel, group, errors) for group in groups[1:]]
    results: list = [None] * len(slices)
    results[0::threads] = _run_slices(kernel, groups[0], errors)  # this thread works too
    for thread, future in enumerate(futures, 1):  # (thread t ran slices t, t + threads, ...: back in order)
        results[thread::threads] = future.result()
    return results


def _run_slices(kernel: Callable, slices: list, errors: dict) -> list:
    with np.errstate(**errors):
        return [kernel(start, stop) for start, stop in slices]


def _forget_pool_after_fork() -> None:
    """In a forked child (``multiprocessing``'s "fork"), only the forking thread exists: the pool's
    workers are gone, and a slab submitted to them would wait forever. The child makes its own pool
    at its first split cast (and its own lock: another thread may have held this one at the fork)."""
    global _pool, _pool_workers, _pool_lock
    _pool, _pool_workers, _pool_lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):  # (POSIX: Windows has no fork)
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


# ---- helpers -----------------------------------------------------------------------------------
def _amax(x: np.ndarray):
    """max |x| (NaN if x holds a NaN, 0 for an empty x), without a temporary |x|."""
    if x.size == 0:
        return x.dtype.type(0)
    with np.errstate(invalid="ignore"):  # (a signalling NaN as the max flags "invalid" in the scalar add)
        return np.maximum(x.max(), -x.min()) + x.dtype.type(0)  # (+ 0: -0.0 for a tensor of zeros is +0.0)


def _float32(x: np.ndarray) -> np.ndarray:
    """C-contiguous float32 of x's shape (float64 rounds once, as scaling.py converts its inputs);
    a finite value beyond float32's range is a ValueError there too (`codec._check_fits`),
    not an Inf that sets the amax."""
    if x.dtype == np.float32:
        return x if x.flags.c_contiguous else np.require(x, np.float32, "C")
    with np.errstate(over="ignore", invalid="ignore"):  # (invalid: a signalling NaN, quieted as the codec does)
        converted = np.require(x, np.float32, "C")
    codec._check_fits(x, converted)
    return converted


def _blocks_view(x: np.ndarray, axis: int, block: int) -> np.ndarray:
    """C-contiguous ``x`` as ``(rows, block, inner)``: every ``[row, :, j]`` is one block along ``axis``."""
    outer, inner = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1:])
    return x.reshape(outer * (x.shape[axis] // block), block, inner)


def _padded_to_tiles(x: np.ndarray, tile: tuple) -> tuple[np.ndarray, tuple]:
    """C-contiguous ``x`` zero-padded to whole tiles, and the tile's length along each axis.

    An axis shorter than the tile is one tile, unpadded; a longer one is zero-padded at its end to
    a multiple of the tile, as scaling.py and mx.py pad. Either way each tile holds the elements
    it holds there, plus zeros that change no tile's amax, hence no scale. ``x`` itself when
    nothing needs padding.
    """
    tile = tuple(min(length, shape) for length, shape in zip(tile, x.shape))
    padded_shape = tuple(shape + -shape % length for shape, length in zip(x.shape, tile))
    if padded_shape == x.shape:
        return x, tile
    padded = np.zeros(padded_shape, x.dtype)
    padded[tuple(map(slice, x.shape))] = x
    return padded, tile


def _cropped(padded: np.ndarray, shape: tuple, new=np.empty) -> np.ndarray:
    """The leading ``shape`` part of ``padded``, C-contiguous (``padded`` itself when it has that shape)."""
    if padded.shape == shape:
        return padded
    values = new(shape, padded.dtype)
    values[...] = padded[tuple(map(slice, shape))]
    return values


def _magnitudes(blocks: np.ndarray) -> np.ndarray:
    """The bit patterns of ``|x|`` of C-contiguous float32 ``blocks`` (the sign bit cleared), as uint32.

    IEEE magnitudes order like these integers (NaN above Inf), so integer comparisons and maxima
    on them are exact and faster than NumPy's NaN-aware float ones (as in ``mx.block_amax``).
    """
    return np.bitwise_and(blocks.view(np.uint32), np.uint32(0x7FFF_FFFF))


def _block_amax(magnitude: np.ndarray, axes: tuple) -> np.ndarray:
    """max |x| over ``axes`` (keepdims) from `_magnitudes` bits, as float32 (NaN where a block holds NaN).

    Blocks that are contiguous rows of a power-of-two length go to ``mx.row_max``'s tree of passes
    (``mx._row_max``: without the public function's argument checks).
    """
    if axes == (1,) and magnitude.shape[2] == 1 and magnitude.shape[1] & (magnitude.shape[1] - 1) == 0:
        amax = mx._row_max(magnitude.reshape(-1), magnitude.shape[1]).reshape(-1, 1, 1)
    else:
        amax = magnitude.max(axis=axes, keepdims=True)
    return amax.view(np.float32)


# ---- statistics --------------------------------------------------------------------------------
# An element saturated exactly when the scaled input the cast rounded lies beyond the rounding
# interval of max (or is Inf/NaN): a saturating cast clamped it to +-max, a non-saturating one made
# it Inf/NaN. So the count needs the scaled inputs, not the codes; and only blocks whose largest
# scaled magnitude (amax * scale, known from the scale computation) is beyond max can hold one.
def _count_beyond(scaled: np.ndarray, fmt) -> int:
    return int(np.count_nonzero(_beyond_max(np.abs(scaled), fmt)))


def _count_saturated(scaled: np.ndarray, bound, fmt, nan_blocks: bool = False) -> int:
    """Saturated elements of ``scaled``, knowing each block's largest |scaled| (``bound``).

    ``bound`` broadcasts against ``scaled`` (size-1 axes where a block spans the axis). Nothing
    can have saturated when no bound is beyond max. A NaN bound is a block holding NaN; its NaNs
    count, unless ``nan_blocks`` says they are MX NaN blocks, counted whole elsewhere (then only
    the blocks with a bound beyond max are searched).
    """
    threshold, tie_overflows = _THRESHOLDS[fmt.name]
    bound = np.asarray(bound)
    if bound.ndim == 0 and (bound < threshold if tie_overflows else bound <= threshold):
        return 0  # one bound, below the threshold (NaN is not)
    with np.errstate(invalid="ignore"):
        hot = bound >= threshold if tie_overflows else bound > threshold
        if not nan_blocks:
            hot |= np.isnan(bound)
    if not hot.any():
        return 0
    if not nan_blocks and not np.isnan(bound).any():
        # No NaN anywhere: two comparisons over the whole array, cheaper than finding the blocks.
        if tie_overflows:
            return int(np.count_nonzero(scaled >= threshold)) + int(np.count_nonzero(scaled <= -threshold))
        return int(np.count_nonzero(scaled > threshold)) + int(np.count_nonzero(scaled < -threshold))
    if hot.ndim == 0:
        return _count_beyond(scaled, fmt)
    blocks = np.nonzero(hot)
    index = tuple(slice(None) if hot.shape[a] == 1 and scaled.shape[a] != 1 else blocks[a] for a in range(scaled.ndim))
    return _count_beyond(scaled[index], fmt)


def _underflow_count(x: np.ndarray, values: np.ndarray, zeros_stay_zero: bool = True) -> int:
    """Nonzero inputs whose value became (+-)0."""
    if zeros_stay_zero:  # then the nonzero inputs that became zero are the difference of the counts
        zeros = int(np.count_nonzero(values == 0))
        return zeros - int(np.count_nonzero(x == 0)) if zeros else 0
    return int(np.count_nonzero((values == 0) & (x != 0)))


def _largest(parts: list):
    """The largest of the slices' amaxes (item 2 of each): NaN if one is NaN, 0 without slices."""
    return parts[0][2] if len(parts) == 1 else np.max([part[2] for part in parts], initial=np.float32(0))


def _stats(x: np.ndarray, values: np.ndarray, amax, parts: list) -> CastStats:
    """Sum the per-slice (underflow, saturated) counts; recount underflow against a float64 input
    (a value that became 0 already in the conversion to float32 underflowed too)."""
    if len(parts) == 1:  # (a cast in one slab: no sums to take)
        underflow, saturated = parts[0][:2]
    else:
        underflow, saturated = sum(part[0] for part in parts), sum(part[1] for part in parts)
    if x.dtype != np.float32:
        underflow = _underflow_count(x, values.reshape(x.shape))
    return CastStats(float(amax), x.size, int(underflow), int(saturated))


# ---- the recipes -------------------------------------------------------------------------------
def _cast_per_tensor(x: np.ndarray, x32: np.ndarray, amax, scale, fmt, saturate: bool, new=np.empty):
    """One scale for the whole tensor; ``scale=None`` is the naive cast ``codec.quantize`` (scale 1).

    Otherwise ``scaling.quantize_with_scale`` then ``ScaledTensor.dequantize``, fused:
    ``x * scale`` and ``elements * float32(1 / scale)`` in float32, the operations scaling.py
    performs. ``x32``: x as C-contiguous float32; ``amax``: its max |x| (None with ``scale=None``:
    then each slice finds its own, while it is in cache).
    """
    if scale is not None:
        scale = np.float32(scale)
        inverse = np.float32(1) / scale
        with np.errstate(over="ignore", invalid="ignore"):
            bound = amax * scale
    flat = x32.reshape(-1)
    values = new(flat.shape, np.float32)

    def kernel(start, stop):
        part, out = flat[start:stop], values[start:stop]
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = part if scale is None else part * scale
            part_bound = _magnitudes(scaled).max(initial=np.uint32(0)).view(np.float32) if scale is None else bound
            _round_into(scaled, out, fmt, saturate)
            counts = _underflow_count(part, out), _count_saturated(scaled, part_bound, fmt)
            if scale is not None:
                out *= inverse  # a nonzero element stays nonzero: the counts hold
        return (*counts, part_bound)

    parts = _map_slices(kernel, flat.size, 1)
    if scale is None:
        amax = _largest(parts)
    values = values.reshape(x.shape)
    return values, _stats(x, values, amax, parts)


def _cast_blockwise(x: np.ndarray, fmt, saturate: bool, axis: int, weight: bool, power_of_2: bool, new=np.empty):
    """``scaling.quantize_blockwise(...).dequantize()``, E5M2 clamps turned into Inf."""
    axis = axis % x.ndim
    if x.size == 0:
        return np.zeros(x.shape, np.float32), CastStats(0.0, 0, 0, 0)
    x32 = _float32(x)
    # Tiles as axes of a view; per slice: scaling.scale_from_amax, then x * scale and
    # elements * float32(1 / scale) in float32, as scaling.quantize_blockwise and dequantize do.
    if weight:  # 128x128 tiles: the same tiles along either axis
        padded, (rows, columns) = _padded_to_tiles(x32, (128, 128))
        tiles = padded.reshape(padded.shape[0] // rows, rows, padded.shape[1] // columns, columns)
        reduce: tuple[int, ...] = (1, 3)
    else:  # 1x128 tiles along axis
        padded, tile = _padded_to_tiles(x32, tuple(128 if a == axis else 1 for a in range(x.ndim)))
        tiles, reduce = _blocks_view(padded, axis, tile[axis]), (1,)
    values = new(tiles.shape, np.float32) if padded is x32 else np.empty(tiles.shape, np.float32)

    def kernel(start, stop):
        part, out = tiles[start:stop], values[start:stop]
        magnitude = _magnitudes(part)
        amax = _block_amax(magnitude, reduce)
        scale = scaling.scale_from_amax(amax, fmt, power_of_2=power_of_2)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            inverse = np.float32(1) / scale
            scaled = part * scale
            _round_into(scaled, out, fmt, saturate)
            out *= inverse
            bound = amax * scale
        return _underflow_count(part, out), _count_saturated(scaled, bound, fmt), amax.max(initial=np.float32(0))

    parts = _map_slices(kernel, len(tiles), math.prod(tiles.shape[1:]))
    values = _cropped(values.reshape(padded.shape), x.shape, new)
    return values, _stats(x, values, _largest(parts), parts)


def _mx_scales(amax: np.ndarray, mx_format, scale_mode: str) -> tuple:
    """``(scale_codes, scale, factor)`` of MX blocks with largest magnitudes ``amax``: the E8M0
    codes, ``2**shared_exp`` (NaN for 0xFF: NaN blocks) and ``2**-shared_exp`` (exact, from 2**-120
    to 2**127), as ``mx.quantize`` scales and ``MXArray.dequantize`` rescales."""
    scale_codes, shared_exp = mx.shared_exponents(amax, mx_format, scale_mode)
    return scale_codes, _E8M0_VALUES[scale_codes], np.ldexp(np.float32(1), -shared_exp)


def _cast_mx(x: np.ndarray, fmt, axis: int, scale_mode: str, new=np.empty):
    """``mx.quantize(x, MXFP8 with fmt elements, axis=axis, scale_mode=...).dequantize()``."""
    mx_format = _MX_FORMATS[fmt.name]
    axis = axis % x.ndim
    if x.dtype != np.float32 or x.size == 0:  # float64 (rounded exactly, not through float32): mx.py itself
        quantized = mx.quantize(x, mx_format, axis=axis, scale_mode=scale_mode)
        values = quantized.dequantize()
        shared_exp = quantized.scales.astype(np.int32) - mx.E8M0_BIAS
        shared_exp = np.repeat(shared_exp, mx_format.block_size, axis=axis)
        shared_exp = shared_exp[(slice(None),) * axis + (slice(0, x.shape[axis]),)]
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = x * np.ldexp(np.ones((), x.dtype), -shared_exp)  # exact, as mx.py scales
        in_nan_block = np.isnan(values)  # only a NaN block decodes to NaN
        nan_elements = int(np.count_nonzero(in_nan_block))
        saturated = int(np.count_nonzero(_beyond_max(np.abs(scaled), fmt) & ~in_nan_block)) + nan_elements
        underflow = _underflow_count(x, values, zeros_stay_zero=not nan_elements)
        return values, CastStats(float(_amax(x)), int(x.size), underflow, saturated)
    # Blocks as an axis of a view; per slice: mx.block_amax (or the same max over the block axis),
    # mx.shared_exponents, then x * 2**-shared_exp and elements * 2**shared_exp in float32, exactly
    # the operations of mx.quantize and MXArray.dequantize.
    x = np.require(x, requirements="C")
    padded, tile = _padded_to_tiles(x, tuple(mx_format.block_size if a == axis else 1 for a in range(x.ndim)))
    block = tile[axis]
    blocks = _blocks_view(padded, axis, block)
    values = new(blocks.shape, np.float32) if padded is x else np.empty(blocks.shape, np.float32)

    def kernel(start, stop):
        part, out = blocks[start:stop], values[start:stop]
        magnitude = _magnitudes(part)
        amax = _block_amax(magnitude, (1,))
        scale_codes, scale, factor = _mx_scales(amax, mx_format, scale_mode)
        nan_elements = int(np.count_nonzero(scale_codes == mx.E8M0_NAN)) * block
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = part * factor
            _round_into(scaled, out, fmt, saturate=True)
            out *= scale
            bound = amax * factor
        if nan_elements:  # their elements are counted whole: leave them out of the search
            bound[scale_codes == mx.E8M0_NAN] = np.nan
            # A NaN block decodes to the NaN scale's +NaN everywhere (MXArray.dequantize: element
            # codes 0 times it), not to a NaN input's own sign or payload.
            np.copyto(out, np.float32(np.nan), where=np.isnan(scale))
        saturated = _count_saturated(scaled, bound, fmt, nan_blocks=bool(nan_elements)) + nan_elements
        return (_underflow_count(part, out, zeros_stay_zero=not nan_elements), saturated,
                amax.max(initial=np.float32(0)), nan_elements)

    parts = _map_slices(kernel, len(blocks), math.prod(blocks.shape[1:]))
    padded_values = values.reshape(padded.shape)
    values = _cropped(padded_values, x.shape, new)
    stats = _stats(x, values, _largest(parts), parts)
    if padded is not x and any(part[3] for part in parts):  # the padding of NaN blocks is no element
        padding_nans = int(np.count_nonzero(np.isnan(padded_values))) - int(np.count_nonzero(np.isnan(values)))
        stats = CastStats(stats.amax, stats.size, stats.underflow_count, stats.saturation_count - padding_nans)
    return values, stats


class _Rule(NamedTuple):
    """Power-of-two tile scales, as `_cast_in_range` takes them: ``exponents(amax)`` gives, from the
    tiles' amax bits (finite, below 2**100), the exponents ``k`` (int32) of the scales ``2**-k``,
    and ``exponent_of(amax)`` the one exponent of one amax (numpy.uint32 bits) as a Python int;
    ``reaches_max`` says whether a tile's scaled amax can lie beyond max's rounding interval.
    The exponents never fall as amax grows."""

    exponents: Callable
    exponent_of: Callable
    reaches_max: bool


@functools.cache
def _blockwise_rule(fmt) -> _Rule:
    """The tile scales of ``blockwise``: `scaling.scale_from_amax` with ``power_of_2=True`` (as
    scaling.quantize_blockwise scales), spelled out in integers for finite amax: the exponent of
    ``fp8_max / amax`` in float32 (then its mantissa is cleared), Inf (a tiny amax) taken as
    FLT_MAX (2**127 once cleared), and scale 1 for a zero amax; tests/test_fp8_rounding.py holds
    it to scale_from_amax. A scaled amax never passes max (the quotient, rounded down to a power of
    two, is at most fp8_max / amax).

    With ``fp8_max = m * 2**e`` and ``amax = a * 2**f`` (m, a in [1, 2)), the quotient is
    ``(m / a) * 2**(e - f)``, one binade lower where ``a > m``, and float32's rounding never
    carries it across a binade (it would take ``m / a >= 1 - 2**-25``, but the float32 after m
    lies beyond ``m / (1 - 2**-25)``). So ``k = f - e + (a > m)``: adding ``0x7F_FFFF -
    mantissa(m)`` to amax's bits carries into its exponent field exactly when ``a > m``.
    """
    max_bits = int(np.float32(fmt.max).view(np.uint32))
    carry, max_field = np.uint32(0x7F_FFFF - (max_bits & 0x7F_FFFF)), np.int32(max_bits >> 23)
    # fp8_max * 2**-127, whose quotient is 2**127: a smaller amax's quotient lies in that binade
    # too, or overflows to Inf, which is taken as FLT_MAX (also in it); so amax is raised to it.
    smallest = np.uint32(max_bits - (127 << 23))

    def exponents(amax):
        exponent = ((np.maximum(amax, smallest) + carry) >> np.uint32(23)).view(np.int32) - max_field
        if not amax.all():
            exponent[amax == 0] = 0
        return exponent

    def exponent_of(amax):
        amax = int(amax)
        return ((max(amax, int(smallest)) + int(carry)) >> 23) - int(max_field) if amax else 0

    return _Rule(exponents, exponent_of, reaches_max=False)


@functools.cache
def _mx_rule(fmt, scale_mode: str) -> _Rule:
    """The MX block scales (`mx.shared_exponents`, as mx.quantize computes them): the shared
    exponents, ``2**-shared_exp`` scaling the elements. (Blocks holding NaN or Inf, whose scale is
    0xFF, never reach it.) The OCP rule, ``floor``, is spelled out for finite float32 amax: the
    exponent field less the bias and ``emax_elem``, at least -127 (zero and subnormal amax too);
    tests/test_fp8_rounding.py holds it to mx.shared_exponents. It lets a scaled amax pass max
    (up to 2**(emax_elem + 1)): there the elements saturate. NVIDIA's ``rceil`` and torchao's
    ``ceil`` are spelled out too, and never let it pass (no block to clamp); ``even`` calls
    mx.shared_exponents."""
    mx_format = _MX_FORMATS[fmt.name]
    offset = np.int32(mx.E8M0_BIAS + mx_format.elem.emax)
    if scale_mode == "floor":
        return _Rule(lambda amax: np.maximum((amax >> np.uint32(23)).astype(np.int32) - offset,
                                             np.int32(mx.SHARED_EXP_MIN)),
                     lambda amax: max((int(amax) >> 23) - int(offset), mx.SHARED_EXP_MIN), reaches_max=True)
    if scale_mode in ("rceil", "ceil"):
        # NVIDIA's rule, 2**ceil(log2(amax / max)): one binade up from floor's where amax's
        # significand passes max's (blockwise's power-of-two rule, on MX's exponent range); torchao's
        # ceil goes up wherever amax is not a power of two. Either way a scaled amax never passes
        # max, and no block saturates.
        significand = np.uint32(int((mx_format.elem.max / 2.0**mx_format.elem.emax - 1) * 2**23)
                                if scale_mode == "rceil" else 0)

        def rceil_exponents(amax):
            shared = (amax >> np.uint32(23)).astype(np.int32) - offset
            shared += (amax & np.uint32(0x7F_FFFF)) > significand
            return np.maximum(shared, np.int32(mx.SHARED_EXP_MIN), out=shared)

        def rceil_exponent_of(amax):
            amax = int(amax)
            return max((amax >> 23) - int(offset) + ((amax & 0x7F_FFFF) > int(significand)), mx.SHARED_EXP_MIN)

        return _Rule(rceil_exponents, rceil_exponent_of, reaches_max=False)

    def exponents(amax):
        return mx.shared_exponents(amax.view(np.float32), mx_format, scale_mode)[1]

    return _Rule(exponents, lambda amax: int(exponents(np.array([amax], np.uint32))[0]), reaches_max=True)


def cast_pair(x: np.ndarray, recipe: str, options: dict, fmt: formats.FloatFormat,
              new: _Allocator = np.empty) -> list[tuple[np.ndarray, CastStats]] | None:
    """The rowwise and columnwise casts of a 2-D ``x`` under a block recipe (scales along axis 1, then
    along axis 0), as `cast` gives them, as one cast of two stacked copies (`_cast_in_range`):
    they share the magnitudes, the search for the elements outside the normal range and, the
    scales being powers of two, its rounding. ``new(shape, dtype)`` allocates the stacked values.

    Returns ``[(values, stats), (values, stats)]``, or None where the fast path declines (not
    C-contiguous float32, not power-of-two scales, an empty tensor, NaN, Inf or huge values, many
    elements outside the range); then the caller casts them one by one. Where no element needed
    fixing, the two values may be one array (the same object): read them, do not write into them. A
    recipe other than ``mxfp8`` and ``blockwise`` is a ValueError.
    """
    if recipe not in ("mxfp8", "blockwise"):  # (a per-tensor recipe's options could pass for blockwise's)
        raise ValueError(f"fastcast.cast_pair: recipe must be a block recipe, mxfp8 or blockwise; got {recipe!r}")
    codec._check_float_environment()
    if x.dtype != np.float32 or x.ndim != 2 or not x.flags.c_contiguous:
        return None
    saturate = _saturates(fmt, options)
    if recipe == "mxfp8":
        block, rule, saturate = _MX_FORMATS[fmt.name].block_size, _mx_rule(fmt, options["scale_mode"]), True
    elif options["power_of_2"]:
        block, rule = 128, _blockwise_rule(fmt)
    else:
        return None
    with np.errstate(under="ignore", over="ignore"):  # (as in `cast`)
        fast = _cast_fast(x, [_blocks_tiling(x.shape, 1, block), _blocks_tiling(x.shape, 0, block)], new, fmt,
                          saturate, rule)
    if fast is None:
        return None
    return [_with_stats(x, (values, [result])) for values, result in zip(*fast)]


# ---- the entry point ---------------------------------------------------------------------------
def _saturates(fmt, options: dict) -> bool:
    """E4M3 forward casts saturate; E5M2 gradient casts do not, unless the recipe is told to."""
    return fmt.name == FORWARD_FORMAT.name or options.get("saturate_gradients", False)


def cast(x: np.ndarray, recipe: str, options: dict, fmt: formats.FloatFormat, axis: int, weight: bool,
         scaler: scaling.DelayedScaling | None, new: _Allocator = np.empty) -> tuple[np.ndarray, CastStats]:
    """One cast of ``recipe`` (fp8.fake_quantize, whose checks it assumes): ``(values, CastStats)``.

    ``x`` is float32 or float64 (float64 is rounded once, exactly as the references convert it);
    ``options`` the recipe's, defaults filled in; ``fmt`` the format cast to (E4M3 or E5M2);
    ``axis`` the contraction axis the row and block recipes scale along; ``weight`` whether ``x``
    is a weight (``blockwise`` tiles weights 128 x 128); ``scaler`` the `scaling.DelayedScaling` of
    ``delayed`` (None otherwise). ``new(shape, float32)`` allocates the values (fp8.py's cast
    points hand back the previous step's array). A recipe not in fp8.RECIPES is a ValueError.
    """
    codec._check_float_environment()  # (a FloatingPointError where the CPU's float mode is not IEEE's default)
    # The caller's error state may raise on what a cast must do: scaled-down values round (underflow),
    # and a value near float32's largest that rounds up on a power-of-two scale's grid overflows to
    # Inf when scaled back, as in the reference recipes (scaling.ScaledTensor.dequantize).
    with np.errstate(under="ignore", over="ignore"):
        return _cast(x, recipe, options, fmt, axis, weight, scaler, new)


def _cast(x: np.ndarray, recipe: str, options: dict, fmt, axis: int, weight: bool, scaler, new=np.empty):
    """`cast`, in the error state it sets."""
    if recipe == "fp32":
        with np.errstate(invalid="ignore"):  # (a signalling NaN)
            values = x.astype(np.float32)
        return values, CastStats(float(_amax(values)), int(values.size), 0, 0)
    saturate = _saturates(fmt, options)
    # A cast is elementwise once the scales are known, and they are known per tensor or per block
    # along axis: the elements may be cast in the order they lie in memory (no copy of a view).
    order = codec._memory_order(x)
    if order is not None:
        values, stats = _cast(x.transpose(order), recipe, options, fmt, order.index(axis % x.ndim), weight,
                              scaler, new)
        return values.transpose(codec._inverse_order(order)), stats
    if recipe in PER_TENSOR_RECIPES:
        if recipe in ("fp8", "unit") and x.dtype != np.float32:  # float64: the codec's exact path
            values = codec.quantize(x, fmt, saturate=saturate)
            amax = _amax(x)
            return values, CastStats(float(amax), int(x.size), _underflow_count(x, values),
                                     _count_saturated(x, amax, fmt))
        scale: np.ndarray | np.float32 | None  # (scale_from_amax's, or a DelayedScaling's float32)
        if recipe in ("fp8", "unit"):
            x32, amax, scale = _float32(x), None, None  # (float32 here: C-contiguous)
        else:
            x32 = _float32(x)
            amax = _amax(x32)
            if recipe == "current":
                scale = scaling.scale_from_amax(amax, fmt, power_of_2=options["power_of_2"])
            else:
                scale = scaler._checked_scale()  # (the scale of the steps before)
        fast = _cast_fast(x32, [_Tiling(1, x.size, 1, x.size, 1)], new, fmt, saturate, scale=scale)
        result = _cast_per_tensor(x, x32, amax, scale, fmt, saturate, new) if fast is None else \
            _with_stats(x, fast, None if scale is None else amax)
        if recipe == "delayed":  # max|x| into the scaler's history, as scaler.quantize(x) records it: once
            scaler.record_amax(amax)  # the cast is done (a cast that raises records nothing)
        return result
    if recipe == "blockwise":
        if options["power_of_2"] and x.ndim:
            tiling = _weight_tiling(x.shape) if weight else _blocks_tiling(x.shape, axis % x.ndim, 128)
            fast = _cast_fast(_float32(x), [tiling], new, fmt, saturate, _blockwise_rule(fmt))
            if fast is not None:
                return _with_stats(x, fast)
        return _cast_blockwise(x, fmt, saturate, axis, weight, options["power_of_2"], new)
    if recipe != "mxfp8":  # (any other name would be cast as MX blocks)
        raise ValueError(f"fastcast.cast: unknown recipe {recipe!r}")
    if x.dtype == np.float32 and x.ndim:
        tiling = _blocks_tiling(x.shape, axis % x.ndim, _MX_FORMATS[fmt.name].block_size)
        fast = _cast_fast(_float32(x), [tiling], new, fmt, True,
                          _mx_rule(fmt, options["scale_mode"]))
        if fast is not None:
            return _with_stats(x, fast)
    if x.dtype == np.float64:  # (exact in float64, but values beyond float32's range are refused, as by
        with np.errstate(invalid="ignore"):  # fake_quantize and the other recipes' casts; invalid: a signalling NaN)
            codec._check_fits(x, x.astype(np.float32))
    return _cast_mx(x, fmt, axis, options["scale_mode"], new)


def _with_stats(x: np.ndarray, fast: tuple, amax=None) -> tuple[np.ndarray, CastStats]:
    """`_cast_fast`'s result for one tiling as ``(values, CastStats)``; ``amax``: x's own, where the
    cast saw ``x * scale`` (per-tensor scales), else the largest magnitude it found."""
    values, [(underflow, saturated, largest)] = fast
    return values, _stats(x, values, largest.view(np.float32) if amax is None else amax, [(underflow, saturated)])

