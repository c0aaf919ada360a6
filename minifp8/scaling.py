"""Tensor scaling recipes for FP8: current, delayed, per-row and blockwise (TransformerEngine style).

FP8 has little range, so a tensor is multiplied by a scale before the cast and divided by it
after. Every recipe here uses TransformerEngine's ``scale`` / ``scale_inv`` convention, in float32:

```text
codes       = encode(float32(x * scale), fmt, saturate=True)
dequantized = decode(codes) * scale_inv,        scale_inv = float32(1 / scale)
```

(so ``dequantized`` is ``decode(codes) / scale`` up to one float32 rounding, exactly so for the
power-of-two scales, but for one band: with ``power_of_2``, an amax at the top of float32's last
binade, at or above the value that rounds to 2^emax once scaled by the power of two below
``max / amax`` (E4M3: 1.9375 * 2^127), makes codes that decode to 2^emax and dequantize to 2^128,
which float32 holds as Inf, as `minifp8.mx.MXArray.dequantize` says of its scale modes that round
up.) Casts saturate: values beyond the format's range clip to +-max, as TransformerEngine's casts
do (NaN stays NaN in E4M3 and E5M2; a NaN cast to a format without one, such as E2M1, is a
ValueError). Inputs are converted to float32 first (float64 is
rounded once to float32), as TransformerEngine computes in float32; a finite float64 beyond
float32's range, which would become Inf there, is a ValueError. Inputs are float16/32/64 or
integer arrays (an integer beyond ``2**53``, which float64 cannot hold exactly, is a
ValueError), or ml_dtypes floats (bfloat16, float8_*, ...) and integers (int4, ...), which
convert exactly: a bfloat16 ``x`` gives what ``x.astype(np.float32)`` gives.

The recipes differ only in where ``scale`` comes from:

- `quantize_current`: one scale per tensor from the tensor's own amax (Float8CurrentScaling).
- `DelayedScaling`: one scale per tensor from a history of earlier amaxes (DelayedScaling).
- `quantize_rowwise`: one scale per row, i.e. per slice along ``axis``.
- `quantize_blockwise`: one power-of-two scale per 1x128 or 128x128 tile (Float8BlockScaling,
  whose scales are powers of two by default; the tiles are DeepSeek-V3's, arXiv:2412.19437
  section 3.3.2).

The scale from an amax follows TransformerEngine's ``compute_scale_from_amax``
(``common/recipe/recipe_common.cuh``): ``scale = fp8_max / amax`` in float32; an amax that is 0,
Inf or NaN gives ``scale = 1``; a scale that overflows float32 becomes ``FLT_MAX``; with
``power_of_2`` the float32 scale is rounded down to a power of two by clearing its mantissa bits.
The amax of a tensor, row or tile holding a NaN is NaN here, so its scale is 1 and its other
elements are cast unscaled. TransformerEngine's amax kernels skip NaN (``fmaxf``) and scale the
other elements as usual, so a backend that follows them differs from these functions there.

For FP8 training (`minifp8.fp8`) each GEMM operand is quantised along its own contraction
axis: pass that axis as ``axis`` to `quantize_rowwise` and `quantize_blockwise`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from . import codec, formats
from .formats import FloatFormat, _check_int, _described, _is_int

FLOAT32_MAX = np.float32(np.finfo(np.float32).max)
AMAX_COMPUTE_ALGOS = ("max", "most_recent")
GRANULARITIES = ("tensor", "row", "block")


@dataclass(frozen=True, eq=False)
class ScaledTensor:
    """Codes plus float32 scales, and how they map back to the tensor.

    Attributes
    ----------
    codes : numpy.ndarray of uint8
        One code per element, the input's shape.
    scale, scale_inv : numpy.ndarray of float32, or numpy.float32
        The scales multiplied in before the cast, and ``float32(1 / scale)``: finite and > 0.
        Shape ``()`` per tensor; the input's shape with ``axis`` reduced to 1 per row; one per tile
        for blocks (the input's shape with every axis replaced by its number of tiles).
    amax : numpy.ndarray of float32, or numpy.float32
        ``max |x|`` over each group that shares a scale (statistics; for delayed scaling the scale
        came from the history instead).
    fmt : FloatFormat
    granularity : {"tensor", "row", "block"}
    axis : int or None
        The axis rows run along / the axis of the 128-long side of the tiles (a negative axis is
        stored as the non-negative one it names, as in `minifp8.mx.MXArray`).
    block_shape : (int, int) or None
        ``(rows, columns)`` of a tile, the columns running along ``axis``.
    """

    codes: np.ndarray
    scale: np.ndarray | np.float32
    scale_inv: np.ndarray | np.float32
    amax: np.ndarray | np.float32
    fmt: FloatFormat
    granularity: str = "tensor"
    axis: int | None = None
    block_shape: tuple | None = None

    def __post_init__(self):
        """Check the fields against each other, so that `dequantize` never broadcasts a wrong scale."""
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {self.granularity!r}")
        if not isinstance(self.codes, np.ndarray) or self.codes.dtype != np.uint8:
            raise TypeError(f"codes must be a uint8 array (one code per element), got {_described(self.codes)}")
        if not isinstance(self.fmt, FloatFormat):
            raise TypeError(f"fmt must be a FloatFormat (e.g. minifp8.formats.E4M3), got {_described(self.fmt)}")
        expected = self._scale_shape()
        for name in ("scale", "scale_inv", "amax"):
            value = getattr(self, name)
            if not isinstance(value, (np.ndarray, np.float32)) or value.dtype != np.float32:
                raise TypeError(f"{name} must be float32 (a numpy array or np.float32), got {_described(value)}")
            if value.shape != expected:
                raise ValueError(f"{name} has shape {value.shape}, expected {expected} for codes of shape "
                                 f"{self.codes.shape} with {self.granularity} scaling"
                                 + ("" if self.axis is None else f" along axis {self.axis}")
                                 + ("" if self.block_shape is None else f" in tiles of {self.block_shape}"))
        for name in ("scale", "scale_inv"):  # (0, Inf or a negative scale dequantizes to NaN or flips signs)
            value = getattr(self, name)
            bad = ~(np.isfinite(value) & (value > 0))
            if bad.any():
                raise ValueError(f"{name} must be finite and > 0, got {float(np.reshape(value, -1)[np.argmax(bad)])}")
        inverse = _inverse(self.scale)  # (1 / FLT_MAX, the scale of a tiny amax, is a subnormal)
        wrong = np.asarray(self.scale_inv != inverse)  # (dequantize reads scale_inv alone)
        if wrong.any():
            at = int(np.argmax(wrong.reshape(-1)))
            raise ValueError(f"scale_inv must be float32(1 / scale), got {float(np.reshape(self.scale_inv, -1)[at])!r} "
                             f"for scale {float(np.reshape(self.scale, -1)[at])!r} (expected "
                             f"{float(np.reshape(inverse, -1)[at])!r})")

    def _scale_shape(self) -> tuple:
        """The shape of ``scale`` for the granularity (checking ``axis`` and ``block_shape``)."""
        shape = self.codes.shape
        if self.granularity == "tensor":
            if self.axis is not None or self.block_shape is not None:
                raise ValueError(f"per-tensor scaling has no axis or block_shape, got axis={self.axis!r}, "
                                 f"block_shape={self.block_shape!r}")
            return ()
        axis = self.axis
        if axis is None or not _is_int(axis) or not -len(shape) <= axis < len(shape):
            raise ValueError(f"{self.granularity} scaling needs axis, an int in [{-len(shape)}, {len(shape)}) for "
                             f"codes of shape {shape}, got {self.axis!r}")
        axis = int(axis) % len(shape)
        object.__setattr__(self, "axis", axis)  # stored non-negative, as MXArray's (frozen dataclass)
        if self.granularity == "row":
            if self.block_shape is not None:
                raise ValueError(f"per-row scaling has no block_shape, got {self.block_shape!r}")
            return shape[:axis] + (1,) + shape[axis + 1:]
        rows, columns = _block_shape(self.block_shape)
        if rows > 1 and len(shape) != 2:
            raise ValueError(f"tiles of {rows}x{columns} need 2-d codes, got shape {shape}")
        tiles = [-(-length // rows) if rows > 1 else length for length in shape]  # (2-d: the other axis)
        tiles[axis] = -(-shape[axis] // columns)
        return tuple(tiles)

    @property
    def shape(self) -> tuple:
        """The shape of the quantized tensor."""
        return self.codes.shape

    def dequantize(self) -> np.ndarray:
        """``decode(codes) * scale_inv`` in float32, each element with its own group's ``scale_inv``."""
        codec._check_float_environment()
        values = codec.decode(self.codes, self.fmt)
        # Products below FLT_MIN round, as they must; beyond FLT_MAX they are Inf: a saturated code times
        # the scale_inv of a scale from an earlier, larger amax (delayed scaling, margin > 0), or, with
        # power-of-two scales, an amax near FLT_MAX whose scaled values round up to 2^emax (module docstring)
        with np.errstate(over="ignore", under="ignore"):
            if self.granularity != "block":
                # per tensor: a scalar; per row: broadcasts along axis (asarray: 0-d codes give a
                # NumPy scalar, not the 0-d array fake_quantize gives)
                return np.asarray(values * self.scale_inv)
            # (block scaling, as __post_init__ checked: an axis, a block_shape and an array of scales per tile)
            assert self.axis is not None and self.block_shape is not None and isinstance(self.scale_inv, np.ndarray)
            moved = np.moveaxis(values, self.axis, -1)
            factors = _expand_tiles(np.moveaxis(self.scale_inv, self.axis, -1), moved.shape, self.block_shape)
            return np.ascontiguousarray(np.moveaxis(moved * factors, -1, self.axis))


# ---- the building blocks -----------------------------------------------------------------------
def scale_from_amax(amax: ArrayLike, fmt: str | FloatFormat, *, power_of_2: bool = False) -> np.ndarray:
    """TransformerEngine's ``compute_scale_from_amax`` (epsilon 0), elementwise, in float32.

    ``scale = fp8_max / amax``, with ``fp8_max`` the largest value of ``fmt`` (448 for E4M3); amax
    0, Inf or NaN -> 1; a quotient that overflows -> ``FLT_MAX``; ``power_of_2`` rounds the float32
    quotient down to a power of two (clears its mantissa). ``amax`` is a number or an array of
    them, each >= 0 (or NaN); a negative amax is a ValueError.
    """
    fmt = _format(fmt)
    power_of_2 = formats._check_bool(power_of_2, "power_of_2")
    if isinstance(amax, np.float32):  # (a cast's own float32 amax, on every cast: checked already)
        codec._check_float_environment()  # (float(amax) of a subnormal is 0 where the CPU flushes)
        value = float(amax)
    else:
        array = _amaxes_in_float32(amax)
        if array.ndim:
            return _scales_from_amaxes(array, fmt, power_of_2)
        value = float(array)
    # One tensor's amax, as the per-tensor recipes ask on every cast: in Python floats.
    if value < 0:
        raise ValueError(f"amax must be >= 0 (a largest magnitude), got {value}")
    if value == 0 or not math.isfinite(value):
        return np.array(1, np.float32)
    # A float64 quotient rounded to float32 is the float32 quotient (53 >= 2 * 24 + 2 bits: the
    # double rounding is innocuous, Figueroa 1995); past FLT_MAX it is FLT_MAX either way.
    scale = np.float32(min(fmt.max / value, float(FLOAT32_MAX)))
    if scale < _FLOAT32_SMALLEST_NORMAL:  # (only a format of max below 4 can: max / FLT_MAX is normal from 4)
        raise _subnormal_scale_error(fmt, value)
    if power_of_2:
        scale = (scale.view(np.uint32) & np.uint32(0xFF80_0000)).view(np.float32)
    return np.array(scale, np.float32)


def _amaxes_in_float32(amax: ArrayLike) -> np.ndarray:
    """``amax`` as float32 (`codec._to_float32`), refusing what the conversion would hide: a negative
    amax that rounds to -0.0, and a positive one that underflows to 0 (which would read as "no
    values": scale 1, not TransformerEngine's FLT_MAX for a tiny amax)."""
    array = codec._to_float32(amax, "amax")
    given = amax if isinstance(amax, np.ndarray) else np.asarray(amax)
    if given.dtype == np.float64 and not (array != 0).all():  # (only a zero can hide a value: NaN != 0 too)
        negative, vanished = given < 0, (array == 0) & (given > 0)  # (comparisons with NaN raise nothing)
        if negative.any():
            raise ValueError(f"amax must be >= 0 (a largest magnitude), got {float(given[negative].flat[0])!r}")
        if vanished.any():
            raise ValueError(f"amax {float(given[vanished].flat[0])!r} underflows float32 to 0: an amax is a float32 "
                             f"tensor's largest magnitude, so float32 holds it")
    return array


_FLOAT32_SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)


def _subnormal_scale_error(fmt: FloatFormat, amax: float) -> ValueError:
    """The error where ``fmt.max / amax`` leaves float32's normal range (a format whose max is below 4,
    as a hand-made FP4 of max 1.5, with an amax near FLT_MAX): the scale's mantissa would be cut
    short, its power of two would clear to 0, and ``1 / scale`` could overflow to Inf."""
    return ValueError(f"{fmt.name}'s max {fmt.max} over amax {amax!r} is below float32's normal range: a scale "
                      f"there loses precision (and its power of two is 0); formats whose max is 4 or more never "
                      f"meet this")


def _scales_from_amaxes(amax: np.ndarray, fmt: FloatFormat, power_of_2: bool) -> np.ndarray:
    """`scale_from_amax` of a float32 array of amaxes (at least 1-d), elementwise."""
    negative = amax < 0
    if negative.any():
        raise ValueError(f"amax must be >= 0 (a largest magnitude), got {float(amax[negative][0])}")
    with np.errstate(divide="ignore", over="ignore", invalid="ignore", under="ignore"):
        scale = np.minimum(np.float32(fmt.max) / amax, FLOAT32_MAX)  # Inf -> FLT_MAX; NaN stays NaN
    if fmt.max < 4:  # (max >= 4: max / FLT_MAX is normal, and the casts' tiles skip this)
        low = (scale < _FLOAT32_SMALLEST_NORMAL) & np.isfinite(amax) & (amax != 0)
        if low.any():
            raise _subnormal_scale_error(fmt, float(amax[low].flat[0]))
    if power_of_2:
        scale = (scale.view(np.uint32) & np.uint32(0xFF80_0000)).view(np.float32)
    return np.where(np.isfinite(amax) & (amax != 0), scale, np.float32(1))


def quantize_with_scale(x: ArrayLike, scale: ArrayLike, fmt: str | FloatFormat) -> np.ndarray:
    """``encode(float32(x * scale), fmt, saturate=True)``: the cast every recipe ends with.

    ``scale`` holds finite numbers > 0 and broadcasts to x's shape without enlarging it (a scalar,
    keepdims rows, or one scale per element); the codes have x's shape.
    """
    fmt = _format(fmt)
    array = codec._to_float32(x)
    given_scale, scale = scale, codec._to_float32(scale, "scale")
    try:
        fits = np.broadcast_shapes(array.shape, scale.shape) == array.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"scale must broadcast to x's shape {array.shape} (a scalar or keepdims rows), "
                         f"got shape {scale.shape}")
    bad = ~(np.isfinite(scale) & (scale > 0))
    if bad.any():
        first = int(np.argmax(bad.reshape(-1)))
        given = np.reshape(np.asarray(given_scale), -1)[first]  # (numeric: _to_float32 checked it)
        if scale.reshape(-1)[first] == 0 and given != 0:
            raise ValueError(f"scale must be finite and > 0, got {float(given)!r}, which underflows float32 to 0")
        raise ValueError(f"scale must be finite and > 0, got {float(scale.reshape(-1)[first])}")
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        scaled = array * scale
    return codec.encode(scaled, fmt, saturate=True)


def _inverse(scale: ArrayLike) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        return (np.float32(1) / np.asarray(scale, np.float32)).astype(np.float32)


# ---- current scaling ---------------------------------------------------------------------------
def quantize_current(x: ArrayLike, fmt: str | FloatFormat = "E4M3", *, power_of_2: bool = False) -> ScaledTensor:
    """Per-tensor current scaling: ``scale = fp8_max / max|x|`` from this very tensor.

    Parameters
    ----------
    x : array_like
        Any shape, 0-d and empty included (an empty tensor has amax 0, hence scale 1).
    fmt : FloatFormat or str
        The destination format, e.g. ``"E4M3"`` (forward) or ``"E5M2"`` (gradients).
    power_of_2 : bool
        Round the scale down to a power of two (then ``dequantize`` is exact division, but for an amax
        at the top of float32's range: the module docstring).
    """
    fmt = _format(fmt)
    array = codec._to_float32(x)
    amax = np.max(np.abs(array), initial=np.float32(0)).astype(np.float32)
    scale = scale_from_amax(amax, fmt, power_of_2=power_of_2)
    return ScaledTensor(quantize_with_scale(array, scale, fmt), scale, _inverse(scale), amax, fmt)


# ---- per-row scaling ---------------------------------------------------------------------------
def quantize_rowwise(x: ArrayLike, fmt: str | FloatFormat = "E4M3", *, axis: int = -1,
                     power_of_2: bool = False) -> ScaledTensor:
    """One scale per row: per slice of ``x`` along ``axis`` (the contraction axis of a GEMM operand).

    ``scale`` has x's shape with ``axis`` reduced to 1 (keepdims), so it broadcasts against x.
    An empty row has amax 0, hence scale 1. ``power_of_2`` rounds each scale down to a power of
    two, as `scale_from_amax` does.
    """
    fmt = _format(fmt)
    array = codec._to_float32(x)
    axis = _axis(axis, array.ndim)
    amax = np.max(np.abs(array), axis=axis, keepdims=True, initial=np.float32(0)).astype(np.float32)
    scale = scale_from_amax(amax, fmt, power_of_2=power_of_2)
    return ScaledTensor(quantize_with_scale(array, scale, fmt), scale, _inverse(scale), amax, fmt,
                        granularity="row", axis=axis)


# ---- blockwise scaling -------------------------------------------------------------------------
def quantize_blockwise(x: ArrayLike, fmt: str | FloatFormat = "E4M3", *, block_shape: tuple[int, int] = (1, 128),
                       axis: int = -1, power_of_2: bool = True) -> ScaledTensor:
    """One scale per tile: 1x128 for activations and gradients, 128x128 for weights.

    TransformerEngine's Float8BlockScaling (scales are float32 powers of two by default) after
    DeepSeek-V3's fine-grained quantization (arXiv:2412.19437 section 3.3).

    Parameters
    ----------
    x : array_like
        At least 1-d; 2-d for tiles with more than one row.
    fmt : FloatFormat or str
        The destination format, as in `quantize_current`.
    block_shape : (rows, columns)
        Tile shape. The columns run along ``axis``; ``(1, n)`` tiles are n consecutive elements
        along ``axis`` (any number of dimensions), ``(m, n)`` tiles with m > 1 need a 2-d x and
        take m along the other axis. Lengths that are not multiples are zero-padded inside.
    axis : int
        The contraction axis.
    power_of_2 : bool
        Round each scale down to a power of two (default, as TransformerEngine).

    Returns
    -------
    ScaledTensor
        ``scale`` holds one value per tile: x's shape with every axis replaced by its tile count.
    """
    fmt = _format(fmt)
    rows, columns = _block_shape(block_shape)
    array = codec._to_float32(x)
    axis = _axis(axis, array.ndim)
    if rows > 1 and array.ndim != 2:
        raise ValueError(f"tiles of {rows}x{columns} need a 2-d array, got {array.ndim}-d shape {array.shape}; "
                         f"use (1, {columns}) tiles")
    moved = np.moveaxis(array, axis, -1)
    # A tile longer than its axis is one tile of the axis' length: the same amax as the zero-padded
    # one, without the padding (a (2**20, 1) array in 1x128 tiles was padded to 128 times its size).
    tile = (max(1, min(rows, moved.shape[0])) if rows > 1 else 1, max(1, min(columns, moved.shape[-1])))
    tiles = _tiles(moved, tile)
    amax = np.max(np.abs(tiles), axis=(-3, -1), initial=np.float32(0)).astype(np.float32)
    scale = scale_from_amax(amax, fmt, power_of_2=power_of_2)
    codes = quantize_with_scale(moved, _expand_tiles(scale, moved.shape, tile), fmt)

    def back(grid):
        return np.ascontiguousarray(np.moveaxis(grid, -1, axis))

    return ScaledTensor(back(codes), back(scale), back(_inverse(scale)), back(amax), fmt, granularity="block",
                        axis=axis, block_shape=(rows, columns))


def _tiles(moved: np.ndarray, block_shape: tuple) -> np.ndarray:
    """Zero-pad ``moved`` (axis last) to whole tiles and split it into them.

    2-d tiles: shape (tile rows, rows, tile columns, columns). 1-row tiles: every leading axis is
    a row, shape (..., 1, tile columns, columns). Either way the tile axes are -3 and -1.
    """
    rows, columns = block_shape
    if rows == 1:
        padding = -moved.shape[-1] % columns  # (np.pad copies even when it adds nothing)
        padded = np.pad(moved, [(0, 0)] * (moved.ndim - 1) + [(0, padding)]) if padding else moved
        return padded.reshape(moved.shape[:-1] + (1, padded.shape[-1] // columns, columns))
    height, width = moved.shape
    padded = np.pad(moved, [(0, -height % rows), (0, -width % columns)])
    return padded.reshape(padded.shape[0] // rows, rows, padded.shape[1] // columns, columns)


def _expand_tiles(grid: np.ndarray, moved_shape: tuple, block_shape: tuple) -> np.ndarray:
    """One value per tile -> one value per element of an array of ``moved_shape`` (axis last)."""
    rows, columns = block_shape
    expanded = _repeat_cut(grid, columns, -1, moved_shape[-1])
    if rows > 1:
        expanded = _repeat_cut(expanded, rows, 0, moved_shape[0])
    return expanded


def _repeat_cut(grid: np.ndarray, repeats: int, axis: int, length: int) -> np.ndarray:
    """``np.repeat(grid, repeats, axis)`` cut to ``length`` along ``axis``, without first making the
    whole tiles where an axis is shorter than one (a 1-column tensor in 128-column tiles: 128 times
    its size, found in a review): each tile's value repeated its length, the last one's cut short."""
    full, remainder = divmod(length, repeats)
    counts = np.full(full + (remainder > 0), repeats)  # (one per tile: grid has ceil(length / repeats) along axis)
    if remainder:
        counts[-1] = remainder
    return np.repeat(grid, counts, axis=axis)


# ---- delayed scaling ---------------------------------------------------------------------------
class DelayedScaling:
    """Per-tensor delayed scaling: the scale comes from the amaxes of earlier steps.

    TransformerEngine's ``DelayedScaling`` recipe as its per-tensor update kernel computes it:
    ``amax_and_scale_update`` and its kernel ``amax_and_scale_update_impl::kernel``
    (``transformer_engine/common/recipe/delayed_scaling.cu``; C API
    ``nvte_delayed_scaling_recipe_amax_and_scale_update``), for one cast point:

    - ``amax_history`` (float32, ``history_len`` entries) starts at zeros and ``scale`` at 1.
    - `quantize` casts x with the current ``scale`` (computed from the steps before) and
      records ``max|x|`` into ``amax_history[0]`` (a running max if called again in the same step;
      a NaN in x records NaN, where TransformerEngine's amax kernels would skip it).
    - `update` ends the step:

        1. the amax to use is the max over the whole history (``"max"``; NaN entries are skipped,
           like CUDA's ``fmaxf``) or ``amax_history[0]`` (``"most_recent"``);
        2. the history rolls by -1 (entry 1 moves to 0, ..., entry 0 to the end, the oldest value
           leaves) and entry 0 is set to 0 for the next step, on every step, a zero amax included;
        3. ``scale = (fp8_max * 2**-margin) / amax`` in float32, in that order (one rounding),
           only when that amax is finite and positive (otherwise the old scale stays); a scale
           that overflows becomes ``FLT_MAX``;
        4. ``scale_inv = 1 / scale``.

    So the cast at step t uses the scale computed from the amaxes up to step t-1. An Inf amax (a
    step whose float32 tensor overflowed) holds the old scale for as long as it stays in the
    history, ``history_len`` steps under ``"max"``, as the kernel's rule does. In a graph of
    non-saturating E5M2 gradient casts (`minifp8.fp8`'s ``saturate_gradients=False``) one cast
    that overflows sends its +-Inf down to the casts below it, which record Inf too and hold their
    scales as well; ``"most_recent"`` or a short history lets them follow their gradients again
    one step later.

    TransformerEngine has two other update paths for this recipe, and they differ from this one:

    - The fused bulk path, the default in TransformerEngine's PyTorch integration:
      ``FP8GlobalStateManager.reduce_and_update_fp8_tensors`` (``transformer_engine/pytorch/fp8.py``,
      ``quantization.py`` in newer releases) calls ``tex.fused_amax_and_scale_update_after_reduction``,
      that is ``amax_and_scale_update_after_reduction`` and its ``kernel_bulk`` (same
      ``delayed_scaling.cu``). It skips a step whose amax is 0 (``if (last_amax != 0.0f)``): the
      history does not roll and the scale stays. Under ``"most_recent"`` that is the same scale;
      under ``"max"`` a zero step keeps the window's entries one step longer. For amaxes
      1, 4, 2, 0, 0.5, 0, 0, 0 (E4M3, ``history_len=3``) this class gives the scales
      448, 112, 112, 112, 224, 896, 896, 896, the bulk kernel 448, 112, 112, 112, 112, 112, 112,
      112 (the 4 is still in its window at step 5, and the zero steps after keep that scale). The
      rest of its rule is the same as here.
    - The unfused Python path (``NVTE_UNFUSED_FP8_UPDATE=1``, or a callable ``amax_compute_algo``
      or ``scaling_factor_compute_algo``): ``_amax_and_scale_update`` with
      ``_default_get_amax_and_update_history`` and ``_default_sf_compute`` (same files). It rolls
      on every step as here, but takes the window's max with ``torch.max``, which propagates NaN
      (a NaN entry holds the old scale for as long as it stays in the window, where ``fmaxf``
      skips it), and computes ``(fp8_max / amax) / 2**margin``: two roundings. That gives the
      same float32 except where ``fp8_max / amax`` overflows (a tiny amax with margin > 0: E4M3,
      margin 8, amax ``float32(1e-37)`` gives 1.75e37 here, ``FLT_MAX`` there) or the scale is
      subnormal (a huge amax with margin > 0), where its second rounding can differ by one unit.

    Parameters
    ----------
    fmt : FloatFormat or str
    history_len : int
        Window length (TransformerEngine's default 1024).
    amax_compute_algo : {"max", "most_recent"}
    margin : int
        Scale down by ``2**margin`` more than needed (headroom for growth). Limited to the margins
        for which every scale, whatever the amax, is a finite float32 > 0 with a finite inverse:
        ``[emax - 127, emax]`` (E4M3: ``[-119, 8]``). TransformerEngine does not check; beyond them
        ``fp8_max * 2**-margin`` overflows (every scale FLT_MAX) or a large amax gives a scale of
        0 or one whose inverse overflows (dequantize gives NaN or Inf).
    """

    def __init__(self, fmt: str | FloatFormat = "E4M3", *, history_len: int = 1024, amax_compute_algo: str = "max",
                 margin: int = 0):
        self.fmt = _format(fmt)
        history_len = _check_int(history_len, "history_len", 1)
        if formats._check_str_choice(amax_compute_algo, "amax_compute_algo", AMAX_COMPUTE_ALGOS) not in AMAX_COMPUTE_ALGOS:
            raise ValueError(f"unknown amax_compute_algo {amax_compute_algo!r}; "
                             f"choose one of {', '.join(AMAX_COMPUTE_ALGOS)}")
        if not _is_int(margin):
            raise TypeError(f"margin must be an int (a power-of-two exponent), got {type(margin).__name__} {margin!r}")
        lowest, highest = _margin_range(self.fmt)
        if not lowest <= margin <= highest:
            raise ValueError(f"margin must lie in [{lowest}, {highest}] for {self.fmt.name}, so that every scale is a "
                             f"finite float32 > 0 with a finite inverse, got {margin}")
        self.history_len = int(history_len)
        self.amax_compute_algo = amax_compute_algo
        self.margin = int(margin)
        self.amax_history = np.zeros(self.history_len, np.float32)
        self.scale = np.float32(1)
        self.scale_inv = np.float32(1)

    def quantize(self, x: ArrayLike, *, update: bool = True) -> ScaledTensor:
        """Cast x with the current scale and record its amax; then `update` unless told not to.

        Pass ``update=False`` to cast several tensors in one step (the recorded amax is their
        running max) and call `update` once at the end of the step.
        """
        update = formats._check_bool(update, "DelayedScaling.quantize: update")
        array = codec._to_float32(x)
        amax = np.max(np.abs(array), initial=np.float32(0)).astype(np.float32)
        scale = self._checked_scale()
        codes = quantize_with_scale(array, scale, self.fmt)  # first: a cast that raises records nothing
        result = ScaledTensor(codes, scale, np.float32(self.scale_inv), amax, self.fmt)
        self.record_amax(amax)
        if update:
            self.update()
        return result

    def _checked_scale(self) -> np.float32:
        """``scale`` as a float32, once it is checked to be finite and > 0 and ``scale_inv`` to be
        ``float32(1 / scale)``: a bad scale set by hand is refused by every cast alike (`ScaledTensor`
        would refuse it, while the training casts, which multiply by ``1 / scale``, went on: an Inf
        scale with its inverse 0 cast everything to zeros)."""
        scale = np.float32(self.scale)
        for name, value in (("scale", scale), ("scale_inv", np.float32(self.scale_inv))):
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"DelayedScaling: {name} must be finite and > 0, got {float(value)!r}: set scale "
                                 f"and scale_inv from an amax, as update does")
        inverse = _inverse(scale)  # (1 / FLT_MAX is a subnormal; 1 / a subnormal scale is Inf, refused below)
        if np.float32(self.scale_inv) != inverse:
            raise ValueError(f"DelayedScaling: scale_inv must be float32(1 / scale) = {float(inverse)!r} for scale "
                             f"{float(scale)!r}, got {float(self.scale_inv)!r}: set both (update and "
                             f"FP8State.load_state_dict do)")
        return scale

    def record_amax(self, amax: ArrayLike) -> None:
        """Record a tensor's ``max|x|`` (a float32, >= 0 or NaN) as `quantize` does: into this step's
        history entry, as a running max (NaN propagates). For a caller that casts with ``scale``
        itself. A negative amax is a ValueError, as in `scale_from_amax` (a forgotten ``abs``)."""
        if isinstance(amax, np.float32):  # (the casts pass a np.float32 on every cast)
            codec._check_float_environment()  # (as _to_float32 does for the others)
        else:
            amax = _amaxes_in_float32(amax)
            if amax.ndim:
                raise ValueError(f"amax must be one number (a tensor's max|x|), got an array of shape {amax.shape}")
        if amax < 0:
            raise ValueError(f"amax must be >= 0 (a largest magnitude), got {float(amax)}")
        self.amax_history[0] = np.maximum(self.amax_history[0], np.abs(amax))

    def update(self) -> None:
        """End of step: reduce the history to an amax, roll the history, recompute the scale."""
        codec._check_float_environment()
        history = self.amax_history
        if self.amax_compute_algo == "max":
            amax = np.fmax.reduce(history)
        else:
            amax = history[0]
        newest = history[0]  # np.roll(history, -1), in place: every step, at every cast point
        history[:-1] = history[1:]
        history[-1] = newest
        history[0] = 0  # this step's entry, emptied for the next step's amaxes
        if np.isfinite(amax) and amax > 0:
            scaled_max = np.float32(self.fmt.max * 2.0**-self.margin)
            with np.errstate(over="ignore", under="ignore"):
                scale = scaled_max / np.float32(amax)
                self.scale = FLOAT32_MAX if np.isinf(scale) else np.float32(scale)
                self.scale_inv = np.float32(1) / self.scale

    def __repr__(self) -> str:
        return (f"DelayedScaling({self.fmt.name}, history_len={self.history_len}, "
                f"amax_compute_algo={self.amax_compute_algo!r}, margin={self.margin}, scale={self.scale!r})")


def _margin_range(fmt: FloatFormat) -> tuple[int, int]:
    """The margins for which ``float32(fp8_max * 2**-margin)`` is finite and divided by any amax up
    to FLT_MAX gives a scale > 0 whose float32 inverse is finite.

    With ``fp8_max = s * 2**emax``, ``1 <= s < 2``: the first needs ``emax - margin <= 127``; the
    second ``fp8_max * 2**-margin > 1``, i.e. ``margin <= emax`` when ``s > 1`` (every catalogued
    format) and ``margin < emax`` when ``fp8_max`` is a power of two.
    """
    return fmt.emax - 127, fmt.emax - (fmt.max == 2.0**fmt.emax)


# ---- input checking ----------------------------------------------------------------------------
def _format(fmt) -> FloatFormat:
    fmt = formats.get(fmt)
    if not fmt.signed:
        raise ValueError(f"scaling recipes cast to a signed element format (E4M3, E5M2, ...), got {fmt.name}")
    return fmt


def _axis(axis, ndim: int) -> int:
    if not _is_int(axis):
        raise TypeError(f"axis must be an int, got {type(axis).__name__} {axis!r}")
    if ndim == 0:
        raise ValueError("per-row and blockwise scaling need at least one axis, got a 0-d array")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array with {ndim} dimension(s)")
    return int(axis) % ndim


def _block_shape(block_shape) -> tuple[int, int]:
    try:
        rows, columns = block_shape
    except (TypeError, ValueError):
        raise ValueError(f"block_shape must be a pair (rows, columns) such as (1, 128) or (128, 128), "
                         f"got {block_shape!r}") from None
    for size in (rows, columns):
        if not _is_int(size) or size < 1:
            raise ValueError(f"block_shape entries must be positive ints, got {block_shape!r}")
    return int(rows), int(columns)
