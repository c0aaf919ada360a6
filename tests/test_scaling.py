"""Tensor scaling recipes against TransformerEngine's semantics, worked by hand or composed.

References: hand-derived numbers from the recipe rules (DESIGN.md section 4; TransformerEngine's
compute_scale_from_amax and amax_and_scale_update), exact rational arithmetic rounded to float32
by ``test_mx.f32``, and composition: per-row and per-tile results must equal per-tensor current
scaling applied to each row or tile on its own.
"""
import re
from fractions import Fraction

import numpy as np
import pytest

from minifp8 import codec, formats, fp8, mx, scaling
from test_mx import f32

FLT_MAX = np.finfo(np.float32).max


# ================================================================================================
# Current scaling and the scale rule.
# ================================================================================================
def test_current_scaling_hand_example():
    x = np.array([2, -1, 0.5, 0.0, -0.0], np.float32)
    q = scaling.quantize_current(x)
    # amax 2 -> scale 448 / 2 = 224; x * 224 = 448, -224, 112, 0, -0, all E4M3 values:
    # 448 = 1.75 * 2**8 (0x7E), 224 = 1.75 * 2**7 (0x76, negative 0xF6), 112 = 1.75 * 2**6 (0x6E).
    assert q.amax == 2 and q.scale == 224
    assert q.codes.tolist() == [0x7E, 0xF6, 0x6E, 0x00, 0x80]
    # scale_inv = float32(1/224) = 9586981 * 2**-31. 448 * scale_inv = 2 + 192 * 2**-31 rounds to 2
    # (ulp 2**-22 = 512 * 2**-31), 224 * scale_inv = 1 + 96 * 2**-31 to 1, 112 * scale_inv to 0.5:
    # the round trip is exact here although scale_inv is not.
    assert Fraction(float(q.scale_inv)) == Fraction(9586981, 2**31)
    np.testing.assert_array_equal(q.dequantize(), x)
    # amax 1.75 -> scale 256: 1.25 * 256 = 320 = 1.25 * 2**8 (0x7A), -1 -> -256 (0xF8), 0.5 -> 128 (0x70)
    q = scaling.quantize_current(np.array([1.75, 1.25, -1, 0.5], np.float32))
    assert q.scale == 256 and q.codes.tolist() == [0x7E, 0x7A, 0xF8, 0x70]


def test_current_scaling_non_power_of_two_scale_follows_float32_steps():
    x = np.array([3, 1.1, -0.7], np.float32)
    q = scaling.quantize_current(x)
    scale = f32(Fraction(448) / 3)  # one float32 division
    assert Fraction(float(q.scale)) == scale
    for value, code in zip(x, q.codes):  # x * scale rounded to float32, then E4M3 saturating
        assert code == codec.encode_scalar(f32(Fraction(float(value)) * scale), "E4M3", saturate=True)
    scale_inv = f32(1 / scale)
    assert Fraction(float(q.scale_inv)) == scale_inv
    expected = [f32(Fraction(float(v)) * scale_inv) for v in codec.decode(q.codes, "E4M3")]
    assert [Fraction(float(v)) for v in q.dequantize()] == expected


@pytest.mark.parametrize("amax, scale, scale_pow2", [
    (3.0, None, 128.0),             # 448/3 = 149.3 -> 2**7
    (0.001, None, 2.0**18),         # 448000 lies in [2**18, 2**19)
    (448.0, 1.0, 1.0),
    (1000.0, None, 0.25),           # 0.448 -> 2**-2
    (0.0, 1.0, 1.0),                # amax 0 -> 1
    (np.nan, 1.0, 1.0),             # non-finite -> 1
    (np.inf, 1.0, 1.0),
    (1e-45, FLT_MAX, 2.0**127),     # 448 / 2**-149 overflows float32 -> FLT_MAX, rounded down: 2**127
])
def test_scale_from_amax(amax, scale, scale_pow2):
    got = scaling.scale_from_amax(amax, "E4M3")
    if scale is None:  # one float32 division of 448 by the float32 amax
        assert Fraction(float(got)) == f32(Fraction(448) / Fraction(float(np.float32(amax))))
    else:
        assert got == scale
    assert scaling.scale_from_amax(amax, "E4M3", power_of_2=True) == scale_pow2
    assert scaling.scale_from_amax(57344, "E5M2") == 1


def test_current_scaling_special_inputs():
    x = np.array([1.0, np.nan, -3.0], np.float32)
    q = scaling.quantize_current(x)
    assert q.scale == 1 and q.codes[1] == 0x7F  # NaN amax -> scale 1; NaN stays NaN
    q = scaling.quantize_current(np.array([1000.0, 1.0]), fmt="E4M3")
    assert q.codes[0] == 0x7E  # 448/1000 * 1000 = 448 (or just below it): never NaN
    assert scaling.quantize_with_scale(np.float32(1000), 1, "E4M3") == 0x7E  # saturating cast
    empty = scaling.quantize_current(np.zeros(0))
    assert empty.scale == 1 and empty.codes.shape == (0,)
    zero_d = scaling.quantize_current(np.float32(-3), "E5M2", power_of_2=True)
    assert zero_d.codes.shape == () and zero_d.dequantize() == -3
    x64 = np.random.default_rng(0).standard_normal(50)
    np.testing.assert_array_equal(scaling.quantize_current(x64).codes,
                                  scaling.quantize_current(x64.astype(np.float32)).codes)  # float32 first


def test_amaxes_that_float32_would_hide_or_scales_below_its_normals_are_refused():
    """Review's finds: a float64 amax that underflows float32 (1e-50) gave scale 1, as "no values" (TE's rule
    for a tiny amax is FLT_MAX), and -1e-46, which rounds to -0.0, passed as 0; a hand-made format of max 1.5
    with an amax near FLT_MAX gave a subnormal scale, whose power of two cleared to 0 and whose inverse
    dequantised a finite input to Inf. Formats of max 4 or more meet none of this."""
    for amax in (1e-50, np.array([1.0, 1e-50]), np.float64(1e-46)):
        with pytest.raises(ValueError, match=r"^amax 1e-(50|46) underflows float32 to 0"):
            scaling.scale_from_amax(amax, "E4M3")
    for amax in (-1e-46, np.array([1.0, -1e-46])):
        with pytest.raises(ValueError, match=r"^amax must be >= 0 \(a largest magnitude\), got -1e-46"):
            scaling.scale_from_amax(amax, "E4M3")
    scaler = scaling.DelayedScaling("E4M3")
    with pytest.raises(ValueError, match="underflows float32 to 0"):
        scaler.record_amax(1e-50)
    assert scaling.scale_from_amax(np.float32(2.0**-149), "E4M3") == np.float32(3.4028235e38)  # (TE: FLT_MAX)
    small = formats.FloatFormat("E2M1b3", 2, 1, 3, nan_style="none")  # max 1.5
    big = np.float32(3.4e38)
    assert np.float32(small.max) / big < np.finfo(np.float32).tiny  # (the quotient is subnormal)
    for call in (lambda: scaling.scale_from_amax(big, small),
                 lambda: scaling.scale_from_amax(big, small, power_of_2=True),
                 lambda: scaling.scale_from_amax(np.array([1.0, big], np.float32), small),
                 lambda: scaling.quantize_current(np.array([big, 1.0], np.float32), small),
                 lambda: scaling.quantize_rowwise(np.array([[big, 1.0], [1.0, 1.0]], np.float32), small)):
        with pytest.raises(ValueError, match=r"E2M1b3's max 1.5 over amax 3.39999\d*e\+38 is below float32's "
                                             r"normal range"):
            call()
    assert scaling.scale_from_amax(np.float32(2.0), small) == np.float32(0.75)  # (ordinary amaxes: as ever)
    smallest_safe = min((f for f in formats.CATALOGUE.values() if f.name != "E8M0"), key=lambda f: f.max)
    assert smallest_safe.max >= 4 and scaling.scale_from_amax(np.float32(3.4028235e38), smallest_safe) > 0


def test_rows_and_tiles_with_nan_or_inf_get_scale_one_and_leave_the_others_alone():
    """The module docstring's rule (a review found it pinned for per-tensor scaling only): a row or tile
    whose amax is NaN or Inf gets scale 1; every other row or tile gets fp8_max / its own amax, computed
    here from the definition, and its codes are encode(x * scale) with saturation."""
    x = np.full((3, 256), 0.01, np.float32)
    x[0, 5], x[1, 200] = np.nan, np.inf
    x[2, 7] = 0.5
    rowwise = scaling.quantize_rowwise(x)
    np.testing.assert_array_equal(rowwise.scale[:, 0], [1.0, 1.0, np.float32(448) / np.float32(0.5)])
    np.testing.assert_array_equal(rowwise.codes[2], codec.encode(x[2] * (np.float32(448) / np.float32(0.5)), "E4M3",
                                                                saturate=True))
    blockwise = scaling.quantize_blockwise(x, block_shape=(1, 128), power_of_2=False)
    tile_amax = np.abs(x.reshape(3, 2, 128)).max(axis=2)  # (NaN where a tile holds one)
    expected = np.where(np.isfinite(tile_amax), np.float32(448) / tile_amax.astype(np.float32), np.float32(1))
    np.testing.assert_array_equal(blockwise.scale, expected.astype(np.float32))
    assert blockwise.scale[0, 0] == blockwise.scale[1, 1] == 1 and blockwise.scale[2, 0] == np.float32(896)


def test_quantize_with_scale_keeps_x_shape_for_every_scale_that_broadcasts_into_it():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for scale in (2, np.float32(2), np.full((3, 1), 2.0), np.full((1, 4), 2.0), np.full((3, 4), 2.0)):
        np.testing.assert_array_equal(scaling.quantize_with_scale(x, scale, "E4M3"), codec.encode(x * 2, "E4M3"))
    for scale, shape in ((np.ones((3, 1)), (3, 1)), (np.ones(3), (3,)), (np.ones((2, 3, 4)), (2, 3, 4))):
        message = rf"scale must broadcast to x's shape \(4,\).*got shape {re.escape(str(shape))}"
        with pytest.raises(ValueError, match=message):
            scaling.quantize_with_scale(np.ones(4), scale, "E4M3")


def test_power_of_two_scales_make_dequantize_an_exact_division():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((20, 30)).astype(np.float32) * 37
    q = scaling.quantize_current(x, "E5M2", power_of_2=True)
    mantissa, _ = np.frexp(q.scale)
    assert mantissa == 0.5
    np.testing.assert_array_equal(q.dequantize(), codec.decode(q.codes, "E5M2") / q.scale)


# ================================================================================================
# Per-row and blockwise scaling: each group behaves as current scaling on its own.
# ================================================================================================
@pytest.mark.parametrize("shape, axis", [((6, 50), -1), ((6, 50), 0), ((3, 4, 20), 1), ((5,), 0)])
def test_rowwise_equals_current_scaling_per_row(shape, axis):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, shape)).astype(np.float32)
    x[(0,) * (len(shape) - 1)] = 0  # an all-zero row (when there is more than one row)
    q = scaling.quantize_rowwise(x, "E4M3", axis=axis)
    expected_shape = list(shape)
    expected_shape[axis] = 1
    assert q.scale.shape == tuple(expected_shape) and q.codes.shape == shape
    moved_x, moved_codes = np.moveaxis(x, axis, -1), np.moveaxis(q.codes, axis, -1)
    moved_scale = np.moveaxis(q.scale, axis, -1)
    for index in np.ndindex(moved_x.shape[:-1]):
        row = scaling.quantize_current(moved_x[index])
        assert moved_scale[index][0] == row.scale
        np.testing.assert_array_equal(moved_codes[index], row.codes)
    np.testing.assert_array_equal(q.dequantize(), codec.decode(q.codes, "E4M3") * q.scale_inv)


@pytest.mark.parametrize("shape, block_shape, axis", [
    ((3, 300), (1, 128), -1), ((300, 3), (1, 128), 0), ((2, 130, 3), (1, 128), 1), ((1000,), (1, 128), 0),
    ((200, 300), (128, 128), -1), ((200, 300), (64, 128), -1), ((200, 300), (64, 128), 0), ((5, 7), (2, 3), 1),
])
def test_blockwise_equals_current_scaling_per_tile(shape, block_shape, axis):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-10, 10, shape)).astype(np.float32)
    q = scaling.quantize_blockwise(x, "E4M3", block_shape=block_shape, axis=axis)
    rows, columns = block_shape
    axis = axis % len(shape)
    tile = [1] * len(shape)  # tile extent along every axis of x
    tile[axis] = columns
    if rows > 1:
        tile[1 - axis] = rows
    assert q.scale.shape == tuple(-(-n // t) for n, t in zip(shape, tile))
    expanded = np.zeros(shape, np.float32)
    for grid_index in np.ndindex(q.scale.shape):
        part = tuple(slice(i * t, (i + 1) * t) for i, t in zip(grid_index, tile))
        alone = scaling.quantize_current(x[part], "E4M3", power_of_2=True)
        assert q.scale[grid_index] == alone.scale and q.amax[grid_index] == alone.amax
        np.testing.assert_array_equal(q.codes[part], alone.codes)
        expanded[part] = q.scale_inv[grid_index]
    assert (np.frexp(q.scale)[0] == 0.5).all()  # powers of two
    np.testing.assert_array_equal(q.dequantize(), codec.decode(q.codes, "E4M3") * expanded)


def test_blockwise_without_power_of_two_and_empty_inputs():
    x = np.linspace(-3, 5, 256, dtype=np.float32).reshape(2, 128)
    q = scaling.quantize_blockwise(x, block_shape=(1, 128), power_of_2=False)
    assert q.scale[0, 0] == np.float32(448) / np.abs(x[0]).max() and q.scale[1, 0] == np.float32(448) / np.float32(5)
    empty = scaling.quantize_blockwise(np.zeros((0, 300)), block_shape=(128, 128))
    assert empty.scale.shape == (0, 3) and empty.dequantize().shape == (0, 300)
    assert scaling.quantize_rowwise(np.zeros((3, 0)), axis=1).scale.tolist() == [[1], [1], [1]]


def test_blockwise_without_power_of_two_dequantizes_with_the_float32_inverse():
    # Without power_of_2 a tile's scale 448 / amax is not a power of two, so the way back matters:
    # decode(code) * float32(1 / scale), rounded to float32 (TransformerEngine's scale_inv), which
    # differs from decode(code) / scale in the last bit for many elements. Worked in exact rationals:
    # tile 0 has amax 3 (scale f32(448 / 3)), tile 1 amax 5 (scale f32(448 / 5)).
    x = np.linspace(-3, 5, 256, dtype=np.float32).reshape(2, 128)
    q = scaling.quantize_blockwise(x, block_shape=(1, 128), power_of_2=False)
    values = q.dequantize()
    divided_differs = 0
    for row, amax in enumerate((3, 5)):
        scale = f32(Fraction(448, amax))
        assert Fraction(float(q.scale[row, 0])) == scale
        for column in range(128):
            element = Fraction(float(codec.decode(q.codes[row, column], "E4M3")))
            assert Fraction(float(values[row, column])) == f32(element * f32(1 / scale)), (row, column)
            divided_differs += f32(element / scale) != f32(element * f32(1 / scale))
    assert divided_differs > 0  # (so the test tells the two apart)


# ================================================================================================
# Must show 5: DelayedScaling against TransformerEngine's amax_and_scale_update.
# ================================================================================================
# History length 3, E4M3 (448), one cast per step. Before each update the step's amax sits in
# entry 0; "max" takes the max of the three entries, then the history rolls by -1 and entry 0 is
# zeroed. The cast at step t uses the scale left by step t-1 (initially 1).
#   step  amax   history at update   max-amax -> scale       rolled history
#    1    1      [1, 0, 0]           1 -> 448                [0, 0, 1]
#    2    4      [4, 0, 1]           4 -> 112                [0, 1, 4]
#    3    2      [2, 1, 4]           4 -> 112                [0, 4, 2]
#    4    0      [0, 4, 2]           4 -> 112                [0, 2, 0]
#    5    0.5    [0.5, 2, 0]         2 -> 224                [0, 0, 0.5]
#    6    0      [0, 0, 0.5]         0.5 -> 896              [0, 0.5, 0]
#    7    0      [0, 0.5, 0]         0.5 -> 896              [0, 0, 0]
#    8    0      [0, 0, 0]           0: keep 896             [0, 0, 0]
# "most_recent" uses entry 0 alone: 1 -> 448, 4 -> 112, 2 -> 224, 0 keeps 224, 0.5 -> 896, then
# zeros keep 896.
AMAXES = [1, 4, 2, 0, 0.5, 0, 0, 0]
MAX_SCALES = [448, 112, 112, 112, 224, 896, 896, 896]
MOST_RECENT_SCALES = [448, 112, 224, 224, 896, 896, 896, 896]
ROLLED = [[0, 0, 1], [0, 1, 4], [0, 4, 2], [0, 2, 0], [0, 0, 0.5], [0, 0.5, 0], [0, 0, 0], [0, 0, 0]]


@pytest.mark.parametrize("algo, scales", [("max", MAX_SCALES), ("most_recent", MOST_RECENT_SCALES)])
def test_delayed_scaling_history_roll_and_algorithms(algo, scales):
    recipe = scaling.DelayedScaling("E4M3", history_len=3, amax_compute_algo=algo)
    used = 1.0  # the scale before the first update
    for step, amax in enumerate(AMAXES):
        x = np.array([amax, -amax / 3, amax / 7], np.float32)
        q = recipe.quantize(x)
        assert q.scale == used  # cast with the previous step's scale ...
        assert q.amax == amax
        expected_codes = codec.encode(x * np.float32(used), "E4M3", saturate=True)
        np.testing.assert_array_equal(q.codes, expected_codes)  # ... including the saturation at step 2
        assert recipe.scale == scales[step] and recipe.scale_inv == np.float32(1) / np.float32(scales[step])
        if algo == "max":
            assert recipe.amax_history.tolist() == ROLLED[step]
        used = scales[step]


def test_delayed_scaling_rolls_the_history_on_zero_amax_steps_too():
    """The per-tensor kernel (amax_and_scale_update) rolls on every step; TransformerEngine's bulk
    kernel (kernel_bulk, PyTorch's default) skips a zero-amax step. Same amaxes as above,
    history_len 3, "max", E4M3 (448), history entry 0 first:
      step  amax  at update      window max -> scale   ours, rolled     the bulk kernel instead
       1    1     [1, 0, 0]      1 -> 448              [0, 0, 1]
       2    4     [4, 0, 1]      4 -> 112              [0, 1, 4]
       3    2     [2, 1, 4]      4 -> 112              [0, 4, 2]
       4    0     [0, 4, 2]      4 -> 112              [0, 2, 0]        skips: [0, 4, 2], 112
       5    0.5   [0.5, 2, 0]    2 -> 224              [0, 0, 0.5]      [0.5, 4, 2]: 4 -> 112, [0, 2, 0.5]
       6    0     [0, 0, 0.5]    0.5 -> 896            [0, 0.5, 0]      skips: 112
       7    0     [0, 0.5, 0]    0.5 -> 896            [0, 0, 0]        skips: 112
       8    0     [0, 0, 0]      0: keep 896           [0, 0, 0]        skips: 112
    The 4 of step 2 has left our window by step 5's update (three rolls later, one of them at the
    zero step 4); the bulk kernel's window still holds it then, and its zero steps keep that scale."""
    recipe = scaling.DelayedScaling("E4M3", history_len=3)
    scales, histories = [], []
    for amax in (1, 4, 2, 0, 0.5, 0, 0, 0):
        recipe.quantize(np.array([amax, -amax / 2], np.float32))
        scales.append(float(recipe.scale))
        histories.append(recipe.amax_history.tolist())
    assert scales == [448, 112, 112, 112, 224, 896, 896, 896]
    assert histories[3] == [0, 2, 0] and histories[5] == [0, 0.5, 0]  # the zero steps 4 and 6 rolled


def test_delayed_scaling_divides_the_margin_scaled_maximum_by_the_amax_in_one_rounding():
    """scale = float32((fp8_max * 2**-margin) / amax), the kernel's order, not the unfused Python
    path's float32(float32(fp8_max / amax) / 2**margin)."""
    # E4M3, margin 8: fp8_max * 2**-8 = 448 / 256 = 1.75 exactly. amax = float32(1e-37):
    #   1.75 / amax is about 1.75e37, a finite float32: that, rounded once, is the scale;
    #   448 / amax is about 4.48e39 > FLT_MAX: the other order overflows (its path then gives FLT_MAX).
    amax = Fraction(float(np.float32(1e-37)))
    recipe = scaling.DelayedScaling("E4M3", margin=8)
    recipe.quantize(np.array([1e-37], np.float32))
    assert Fraction(float(recipe.scale)) == f32(Fraction(7, 4) / amax)
    assert f32(Fraction(7, 4) / amax) < Fraction(float(FLT_MAX)) < Fraction(448) / amax
    # A huge amax with margin 8 gives a subnormal scale: 1.75 / 1.7703371e38 is about 9.89e-39 < 2**-126.
    # One rounding to the subnormal grid (spacing 2**-149) differs from rounding to 24 bits first.
    amax32 = np.float32(1.7703371e38)
    amax = Fraction(float(amax32))
    recipe = scaling.DelayedScaling("E4M3", margin=8)
    recipe.quantize(np.array([amax32]))
    assert Fraction(float(recipe.scale)) == f32(Fraction(7, 4) / amax)
    assert f32(Fraction(7, 4) / amax) != f32(f32(Fraction(448) / amax) / 256)  # (so the case tells them apart)


def test_delayed_scaling_margin_and_defaults():
    default = scaling.DelayedScaling()
    assert default.history_len == 1024 and default.amax_compute_algo == "max" and default.margin == 0
    assert default.amax_history.shape == (1024,) and default.scale == 1 and default.fmt is formats.E4M3
    for margin, expected in ((0, 448 / 3), (1, 224 / 3), (3, 56 / 3)):
        recipe = scaling.DelayedScaling("E4M3", margin=margin)
        recipe.quantize(np.array([3.0], np.float32))
        assert Fraction(float(recipe.scale)) == f32(Fraction(448, 2**margin) / 3)  # (448 * 2**-margin) / amax
        assert recipe.scale == np.float32(expected)
    e5m2 = scaling.DelayedScaling("E5M2", margin=2)
    e5m2.quantize(np.array([7.0]))
    assert e5m2.scale == np.float32(57344 / 4 / 7)


def test_delayed_scaling_margin_range_keeps_every_scale_finite_and_positive():
    for fmt, lowest, highest in (("E4M3", -119, 8), ("E5M2", -112, 15), ("E2M1", -125, 2)):
        for margin in (lowest, highest):
            for amax in (FLT_MAX, np.float32(2.0**-149), np.float32(1)):
                recipe = scaling.DelayedScaling(fmt, margin=margin)
                recipe.quantize(np.array([amax]))
                assert 0 < recipe.scale <= FLT_MAX and 0 < recipe.scale_inv < np.inf, (fmt, margin, amax)
        for margin in (lowest - 1, highest + 1):
            message = rf"margin must lie in \[{lowest}, {highest}\] for {fmt}.*got {margin}"
            with pytest.raises(ValueError, match=message):
                scaling.DelayedScaling(fmt, margin=margin)


def test_delayed_scaling_a_cast_that_raises_leaves_the_state_untouched():
    for algo in ("most_recent", "max"):
        recipe = scaling.DelayedScaling("E2M1", history_len=4, amax_compute_algo=algo)
        recipe.quantize(np.array([3.0]))
        history, scale = recipe.amax_history.copy(), recipe.scale
        for update in (False, True):
            with pytest.raises(ValueError, match="NaN cannot be encoded in E2M1"):
                recipe.quantize(np.array([np.nan, 1.0]), update=update)
            np.testing.assert_array_equal(recipe.amax_history, history)
            assert recipe.scale == scale


def test_delayed_scaling_keeps_the_scale_on_zero_or_non_finite_amax():
    recent = scaling.DelayedScaling(history_len=4, amax_compute_algo="most_recent")
    window = scaling.DelayedScaling(history_len=4, amax_compute_algo="max")
    for recipe in (recent, window):
        recipe.quantize(np.array([2.0]))
        assert recipe.scale == 224
    for bad in (np.nan, np.inf):
        recent.quantize(np.array([1.0, bad]))
        assert recent.scale == 224  # most recent amax is non-finite: keep
    window.quantize(np.array([1.0, np.nan]))
    assert window.scale == 224 and np.isnan(window.amax_history[-1])  # NaN entries skipped (fmaxf)
    window.quantize(np.array([1.0, np.inf]))
    assert window.scale == 224
    for _ in range(3):  # Inf stays in the window for history_len = 4 updates: the scale is kept
        window.quantize(np.array([0.5]))
        assert window.scale == 224
    window.quantize(np.array([0.5]))
    assert window.scale == 896  # Inf has left the window: the max is 0.5
    tiny = scaling.DelayedScaling()
    tiny.quantize(np.array([1e-45], np.float32))
    assert tiny.scale == FLT_MAX  # 448 / 2**-149 overflows float32


def test_delayed_scaling_max_skips_nan_entries_of_the_window():
    # history_len 4, "max" (fmaxf: a NaN entry is skipped, not propagated):
    #   step 1 amax 2            window max 2 -> 448 / 2 = 224
    #   step 2 amax NaN          NaN skipped, max 2 -> 224
    #   step 3 amax 4            entries 4, NaN, 2 (and 0): max 4 -> 112, NaN still in the window
    # A max that propagated NaN would see NaN at step 3 and keep 224.
    recipe = scaling.DelayedScaling(history_len=4)
    for x, scale in (([2.0], 224), ([1.0, np.nan], 224), ([4.0], 112)):
        recipe.quantize(np.array(x, np.float32))
        assert recipe.scale == scale
    assert np.isnan(recipe.amax_history).sum() == 1


def test_delayed_scaling_several_casts_in_one_step():
    recipe = scaling.DelayedScaling(history_len=2)
    a = recipe.quantize(np.array([-5.0]), update=False)
    b = recipe.quantize(np.array([3.0]), update=False)
    assert a.scale == b.scale == 1 and recipe.amax_history[0] == 5  # running max within the step
    recipe.update()
    assert recipe.scale == np.float32(448 / 5) and recipe.amax_history.tolist() == [0, 5]


def test_a_scale_set_without_its_inverse_is_refused_by_every_cast_and_records_nothing():
    """A review's find: ``scaler.scale`` set by hand without ``scale_inv`` made quantize record the
    amax and then raise (ScaledTensor refuses the pair), while fake_quantize, which multiplies by
    ``1 / scale``, cast as if nothing were wrong."""
    x = np.array([3.0, 5.0], np.float32)
    for cast in (lambda scaler: scaler.quantize(x, update=False),
                 lambda scaler: fp8.fake_quantize(x, "delayed", scaler=scaler)):
        scaler = scaling.DelayedScaling("E4M3", history_len=4)
        scaler.scale = np.float32(4.0)
        with pytest.raises(ValueError, match=r"scale_inv must be float32\(1 / scale\) = 0.25 for scale 4.0, got 1.0"):
            cast(scaler)
        assert scaler.amax_history.tolist() == [0.0] * 4
        scaler.scale_inv = np.float32(0.25)   # set as a pair, the scale casts
        assert cast(scaler) is not None and scaler.amax_history.tolist() == [5.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("scale, scale_inv", [(np.inf, 0.0), (0.0, np.inf), (-2.0, -0.5)])
def test_a_bad_scale_set_by_hand_is_refused_by_every_cast_and_records_nothing(scale, scale_inv):
    """A consistent but bad pair: quantize refused it, while fake_quantize and the training casts cast
    with it (an Inf scale gave zeros, a zero one NaN) and recorded the amax."""
    x = np.array([3.0, 5.0, -1.0], np.float32)
    for cast in (lambda scaler: scaler.quantize(x, update=False),
                 lambda scaler: fp8.fake_quantize(x, "delayed", scaler=scaler)):
        scaler = scaling.DelayedScaling("E4M3", history_len=2)
        scaler.scale, scaler.scale_inv = np.float32(scale), np.float32(scale_inv)
        with pytest.raises(ValueError, match=f"DelayedScaling: scale must be finite and > 0, got {float(scale)!r}"):
            cast(scaler)
        assert scaler.amax_history.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("strict", [False, True])
def test_a_subnormal_scale_set_by_hand_is_refused_without_a_floating_point_error(strict):
    """A subnormal scale with its (Inf) inverse passed the pair check, and fake_quantize cast to NaN and
    recorded the amax; with scale_inv 1.0, 1 / scale overflowed under all="raise" (a FloatingPointError,
    not the ValueError)."""
    x = np.array([3.0, 5.0], np.float32)
    for scale_inv, message in ((np.inf, "scale_inv must be finite and > 0, got inf"),
                               (1.0, r"scale_inv must be float32\(1 / scale\) = inf")):
        for cast in (lambda scaler: scaler.quantize(x, update=False),
                     lambda scaler: fp8.fake_quantize(x, "delayed", scaler=scaler)):
            scaler = scaling.DelayedScaling("E4M3", history_len=2)
            scaler.scale, scaler.scale_inv = np.float32(1e-45), np.float32(scale_inv)
            with np.errstate(all="raise" if strict else "warn"), pytest.raises(ValueError, match=message):
                cast(scaler)
            assert scaler.amax_history.tolist() == [0.0, 0.0]


def test_mxfp8_training_casts_refuse_float64_values_beyond_float32():
    """fake_quantize refused them, but an FP8 linear under mxfp8 in float64 mode went through fastcast
    alone: an output of Inf, and a saturation count for an element that did not saturate."""
    from minifp8 import nn
    from minifp8.autograd import default_dtype
    with default_dtype(np.float64):
        linear = nn.Linear(32, 2, rng=np.random.default_rng(0))
        linear.weight.data[0, 0] = 1e39
        fp8.apply_recipe(linear, "mxfp8")
        with pytest.raises(ValueError, match="beyond float32's range"):
            linear(np.ones((1, 32)))
        with pytest.raises(ValueError, match="beyond float32's range"):
            fp8.fake_quantize(linear.weight.data, "mxfp8")


def test_zero_dimensional_dequantize_is_an_array():
    """A 0-d tensor dequantized to a NumPy scalar (``values * scale_inv`` of a 0-d array), where
    fake_quantize, documented as equal to it, gives a 0-d array (a review's find)."""
    for scaled in (scaling.quantize_current(np.float32(3)), scaling.DelayedScaling().quantize(np.float32(3))):
        values = scaled.dequantize()
        assert type(values) is np.ndarray and values.shape == () and values.dtype == np.float32
        assert type(fp8.fake_quantize(np.float32(3), "current")[0]) is np.ndarray


# ================================================================================================
# Bad inputs.
# ================================================================================================
@pytest.mark.parametrize("call, error, match", [
    (lambda: scaling.DelayedScaling(history_len=0), ValueError, "history_len"),
    (lambda: scaling.DelayedScaling(history_len="1024"), TypeError, "history_len must be an int, got str"),
    (lambda: scaling.DelayedScaling(history_len=True), TypeError, "history_len must be an int, got bool"),
    (lambda: scaling.DelayedScaling(history_len=2.0), TypeError, "history_len must be an int, got float"),
    (lambda: scaling.DelayedScaling(amax_compute_algo="mean"), ValueError, "amax_compute_algo"),
    # an array compared elementwise: NumPy's "truth value of an array ... is ambiguous" (a review's find)
    (lambda: scaling.DelayedScaling(amax_compute_algo=np.array(["max", "most_recent"])), TypeError,
     r"amax_compute_algo must be a str, one of max, most_recent; got ndarray"),
    (lambda: scaling.DelayedScaling(margin=0.5), TypeError, "margin"),
    (lambda: scaling.DelayedScaling("E8M0"), ValueError, "signed"),
    (lambda: scaling.quantize_current(np.ones(3), "fp7"), ValueError, "unknown format"),
    (lambda: scaling.quantize_current(np.ones(3, bool)), TypeError, "bool"),
    (lambda: scaling.quantize_current(np.ones(3, complex)), TypeError, "complex"),
    (lambda: scaling.quantize_rowwise(np.float32(1)), ValueError, "0-d"),
    (lambda: scaling.quantize_rowwise(np.ones((2, 3)), axis=2), ValueError, "out of range"),
    (lambda: scaling.quantize_rowwise(np.ones((2, 3)), axis=None), TypeError, "axis"),
    (lambda: scaling.quantize_blockwise(np.ones((2, 3, 4)), block_shape=(128, 128)), ValueError, "2-d"),
    (lambda: scaling.quantize_blockwise(np.ones((2, 3)), block_shape=(0, 128)), ValueError, "positive"),
    (lambda: scaling.quantize_blockwise(np.ones((2, 3)), block_shape=(128,)), ValueError, "pair"),
    (lambda: scaling.quantize_blockwise(np.ones((2, 3)), block_shape=(1.0, 128)), ValueError, "positive"),
    (lambda: scaling.quantize_blockwise(np.float32(2)), ValueError, "0-d"),
    (lambda: scaling.quantize_blockwise(np.ones((2, 3)), axis=-3), ValueError, "out of range"),
    # (anchored at both ends: the "which underflows" clause belongs only to a scale float32 makes 0)
    (lambda: scaling.quantize_with_scale(np.ones(2), np.nan, "E4M3"), ValueError,
     r"^scale must be finite and > 0, got nan$"),
    (lambda: scaling.quantize_with_scale(np.ones(2), [1.0, -1.0], "E4M3"), ValueError,
     r"^scale must be finite and > 0, got -1\.0$"),
    (lambda: scaling.quantize_with_scale(np.ones(2), 0, "E4M3"), ValueError,
     r"^scale must be finite and > 0, got 0\.0$"),
    (lambda: scaling.quantize_with_scale(np.ones(2), np.inf, "E4M3"), ValueError,
     r"^scale must be finite and > 0, got inf$"),
    # found by a review: it said "got 0.0" for a scale the caller gave as 1e-50
    (lambda: scaling.quantize_with_scale(np.ones(2), 1e-50, "E4M3"), ValueError,
     r"^scale must be finite and > 0, got 1e-50, which underflows float32 to 0$"),
    (lambda: scaling.quantize_with_scale(np.ones(2), [2.0, 1e-46], "E4M3"), ValueError,
     r"^scale must be finite and > 0, got 1e-46, which underflows float32 to 0$"),
    (lambda: scaling.quantize_with_scale(np.ones(2), "2", "E4M3"), TypeError, "scale must hold .* got dtype <U1"),
    (lambda: scaling.scale_from_amax(-2.0, "E4M3"), ValueError, r"amax must be >= 0 \(a largest magnitude\), got -2.0"),
    (lambda: scaling.scale_from_amax([1.0, -3.0], "E4M3"), ValueError, "got -3.0"),
    (lambda: scaling.scale_from_amax(None, "E4M3"), TypeError, "amax must hold .* got dtype object"),
    (lambda: scaling.scale_from_amax("3", "E4M3"), TypeError, "amax must hold .* got dtype <U1"),
    (lambda: scaling.scale_from_amax(3 + 4j, "E4M3"), TypeError, "amax must hold real numbers"),
    (lambda: scaling.DelayedScaling().record_amax(None), TypeError, "amax must hold .* got dtype object"),
    (lambda: scaling.DelayedScaling().record_amax("5"), TypeError, "amax must hold .* got dtype <U1"),
    (lambda: scaling.DelayedScaling().record_amax(np.array([1.0, 2.0])), ValueError,
     r"amax must be one number .* shape \(2,\)"),
    # found by an audit: it recorded |-5| (a forgotten abs hidden), where scale_from_amax refuses
    (lambda: scaling.DelayedScaling().record_amax(-5.0), ValueError, r"amax must be >= 0 .* got -5.0"),
    # and a np.float32 (the type the casts pass) was let through unchecked, its abs recorded
    (lambda: scaling.DelayedScaling().record_amax(np.float32(-5)), ValueError, r"amax must be >= 0 .* got -5.0"),
    # finite float64 beyond float32 became Inf: amax Inf, scale 1, values 36 orders of magnitude off
    (lambda: scaling.quantize_current(np.array([1e39, 1.0])), ValueError,
     r"x holds finite values beyond float32's range .* e.g. 1e\+39"),
    (lambda: scaling.DelayedScaling().quantize(np.array([-1e39])), ValueError, "beyond float32's range"),
    (lambda: scaling.quantize_blockwise(np.array([[1e39, 1.0]])), ValueError, "beyond float32's range"),
    (lambda: scaling.scale_from_amax(1e39, "E4M3"), ValueError, "amax holds finite values beyond float32's range"),
    (lambda: mx.quantize_nvfp4(np.array([1e39, 1.0])), ValueError, "beyond float32's range"),
    (lambda: fp8.fake_quantize(np.array([1e39, 1.0]), "current"), ValueError, "beyond float32's range"),
    (lambda: fp8.fake_quantize(np.array([[1e39, 1.0]]), "blockwise"), ValueError, "beyond float32's range"),
    (lambda: fp8.fake_quantize(np.array([1e300, 1.0]), "fp32"), ValueError, "beyond float32's range"),
    # mxfp8 rounds float64 exactly, but its float32 values of a block of 1e39 were Inf, with no saturation counted
    (lambda: fp8.fake_quantize(np.array([1e39, 1.0]), "mxfp8"), ValueError, "beyond float32's range"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_one_amax_is_scaled_as_an_array_of_them(fmt):
    """A single amax (the per-tensor recipes' case, computed in Python floats) gets exactly the
    scale the elementwise float32 path gives: every float32 binade, the mantissas that round the
    quotient either way, subnormals, zero, Inf and NaN, with and without power_of_2."""
    rng = np.random.default_rng(5)
    exponents = np.arange(-149, 128, dtype=np.float64)
    amaxes = np.concatenate([(np.exp2(exponents)[:, None] * rng.uniform(1, 2, (exponents.size, 16))).ravel(),
                             [0.0, np.inf, np.nan, 2.0**-149, np.finfo(np.float32).max, 448.0, 57344.0, 1.75]])
    amaxes = amaxes[np.isfinite(amaxes.astype(np.float32)) | ~np.isfinite(amaxes)].astype(np.float32)
    for power_of_2 in (False, True):
        elementwise = scaling.scale_from_amax(amaxes, fmt, power_of_2=power_of_2)
        one_by_one = np.array([scaling.scale_from_amax(a, fmt, power_of_2=power_of_2) for a in amaxes])
        np.testing.assert_array_equal(one_by_one.view(np.uint32), elementwise.view(np.uint32))


# ================================================================================================
# ScaledTensor checks its fields, so that dequantize never broadcasts a wrong scale.
# ================================================================================================
def test_scaled_tensors_from_every_recipe_pass_their_own_checks():
    x = np.random.default_rng(0).standard_normal((5, 260)).astype(np.float32)
    for scaled in (scaling.quantize_current(x), scaling.quantize_rowwise(x, axis=0),
                   scaling.quantize_rowwise(x[0], axis=0), scaling.DelayedScaling().quantize(x),
                   scaling.quantize_blockwise(x), scaling.quantize_blockwise(x, axis=0),
                   scaling.quantize_blockwise(x, block_shape=(128, 128)),
                   scaling.quantize_blockwise(x.reshape(5, 2, 130), axis=1)):
        rebuilt = scaling.ScaledTensor(scaled.codes, scaled.scale, scaled.scale_inv, scaled.amax, scaled.fmt,
                                       scaled.granularity, scaled.axis, scaled.block_shape)
        assert np.array_equal(rebuilt.dequantize(), scaled.dequantize(), equal_nan=True)


def test_scaled_tensor_stores_a_negative_axis_non_negative_as_mx_arrays_do():
    """Found in a review: ScaledTensor refused axis=-1 (which every quantize_* function takes) while
    MXArray and NVFP4Array normalise it; now it is stored as the non-negative axis it names."""
    x = np.random.default_rng(1).standard_normal((3, 260)).astype(np.float32)
    for scaled in (scaling.quantize_rowwise(x, axis=-1), scaling.quantize_blockwise(x, axis=-1),
                   scaling.quantize_blockwise(x, axis=-2, block_shape=(128, 128))):
        negative = scaled.axis - x.ndim
        rebuilt = scaling.ScaledTensor(**{**_fields(scaled), "axis": negative})
        assert rebuilt.axis == scaled.axis and type(rebuilt.axis) is int
        assert np.array_equal(rebuilt.dequantize(), scaled.dequantize())
    rebuilt = scaling.ScaledTensor(**{**_fields(scaling.quantize_rowwise(x, axis=0)), "axis": np.int64(-2)})
    assert rebuilt.axis == 0 and type(rebuilt.axis) is int


def _fields(scaled):
    return dict(codes=scaled.codes, scale=scaled.scale, scale_inv=scaled.scale_inv, amax=scaled.amax,
                fmt=scaled.fmt, granularity=scaled.granularity, axis=scaled.axis, block_shape=scaled.block_shape)


@pytest.mark.parametrize("make, change, error, match", [
    # found by an audit: a per-tile scale_inv of the wrong shape raised NumPy's broadcast error, and
    # an oversized one (4 x 5 for 4 x 2 tiles) was accepted
    ("row", dict(scale_inv=np.ones((5, 1), np.float32)), ValueError,
     r"scale_inv has shape \(5, 1\), expected \(4, 1\) for codes of shape \(4, 8\) with row scaling along axis 1"),
    ("block", dict(scale_inv=np.ones((4, 5), np.float32)), ValueError,
     r"scale_inv has shape \(4, 5\), expected \(4, 2\) .* in tiles of \(1, 4\)"),
    ("block", dict(axis=None), ValueError, r"block scaling needs axis, an int in \[-2, 2\) .* got None"),
    ("block", dict(block_shape=(0, 4)), ValueError, "block_shape entries must be positive ints"),
    ("row", dict(axis=2), ValueError, r"an int in \[-2, 2\)"),
    ("block", dict(axis=-3), ValueError, r"an int in \[-2, 2\) .* got -3$"),
    # an axis that is not an int is refused, True (== 1, so that it would pass) and 1.0 alike
    ("row", dict(axis=True), ValueError, r"row scaling needs axis, an int in \[-2, 2\) .* got True$"),
    ("block", dict(axis=1.0), ValueError, r"block scaling needs axis, an int in \[-2, 2\) .* got 1\.0$"),
    ("row", dict(block_shape=(1, 4)), ValueError, "per-row scaling has no block_shape"),
    ("tensor", dict(axis=0), ValueError, "per-tensor scaling has no axis"),
    ("tensor", dict(scale=np.ones(1, np.float32)), ValueError, r"scale has shape \(1,\), expected \(\)"),
    ("tensor", dict(amax=np.float64(1.0)), TypeError, "amax must be float32 .* got float64"),
    ("tensor", dict(scale_inv=1.0), TypeError, "scale_inv must be float32 .* got float 1.0"),
    ("tensor", dict(codes=np.zeros((4, 8), np.int8)), TypeError, r"codes must be a uint8 array .* dtype int8"),
    ("tensor", dict(codes=[[0] * 8] * 4), TypeError, "codes must be a uint8 array .* got list"),
    ("tensor", dict(fmt="E4M3"), TypeError, "fmt must be a FloatFormat .* got str 'E4M3'"),
    ("tensor", dict(granularity="tile"), ValueError, "granularity must be one of"),
    # found by a review: dequantize() then gave NaN (0 * inf) or sign-flipped values
    ("tensor", dict(scale=np.float32(0)), ValueError, r"scale must be finite and > 0, got 0\.0"),
    ("tensor", dict(scale_inv=np.float32(np.inf)), ValueError, "scale_inv must be finite and > 0, got inf"),
    ("row", dict(scale=np.full((4, 1), -2, np.float32), scale_inv=np.full((4, 1), -0.5, np.float32)), ValueError,
     r"scale must be finite and > 0, got -2\.0"),
    ("block", dict(scale_inv=np.array([[1, 1], [1, np.nan], [1, 1], [1, 1]], np.float32)), ValueError,
     "scale_inv must be finite and > 0, got nan"),
    # dequantize reads scale_inv alone, so a scale_inv that is not float32(1 / scale) decoded the codes to
    # other values than the scale had cast them from
    ("tensor", dict(scale_inv=np.float32(123.0)), ValueError, r"scale_inv must be float32\(1 / scale\), got 123\.0"),
    ("block", dict(scale_inv=np.array([[1, 1], [1, 2], [1, 1], [1, 1]], np.float32),
                   scale=np.ones((4, 2), np.float32)), ValueError,
     r"scale_inv must be float32\(1 / scale\), got 2\.0 for scale 1\.0 \(expected 1\.0\)"),
])
def test_scaled_tensor_with_inconsistent_fields_is_an_error(make, change, error, match):
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    scaled = {"tensor": lambda: scaling.quantize_current(x), "row": lambda: scaling.quantize_rowwise(x),
              "block": lambda: scaling.quantize_blockwise(x, block_shape=(1, 4))}[make]()
    with pytest.raises(error, match=match):
        scaling.ScaledTensor(**{**_fields(scaled), **change})


def test_power_of_two_scales_dequantize_the_top_of_float32_to_inf_as_documented():
    """Found in a review: the docs said power-of-two scales make dequantize exact division, and the
    comment in ScaledTensor.dequantize named delayed scaling as the only source of Inf. An E4M3
    amax of 1.9375 * 2^127 gets the scale 2^-120 (448 / amax is 1.36e-36, and 2^-119 is 1.5e-36),
    which takes it to 248, the tie between 240 (mantissa 111) and 256 (mantissa 000): it rounds to
    256, and 256 * 2^120 = 2^128 is Inf in float32. One float32 step below, 247.99... rounds to 240."""
    edge = np.float32(1.9375 * 2.0**127)
    below = np.nextafter(edge, np.float32(0))
    for quantize in (lambda x: scaling.quantize_current(x, "E4M3", power_of_2=True),
                     lambda x: scaling.quantize_rowwise(x[None], "E4M3", power_of_2=True),
                     lambda x: scaling.quantize_blockwise(x, "E4M3", block_shape=(1, 1))):
        for amax, expected in ((edge, np.inf), (below, np.float32(240.0 * 2.0**120))):
            q = quantize(np.array([amax, 1.0], np.float32))
            assert float(np.ravel(q.scale)[0]) == 2.0**-120
            assert np.ravel(q.dequantize())[0] == expected
    q = scaling.quantize_current(np.array([edge], np.float32), "E4M3")  # (a scale that is not a power of two)
    assert np.isfinite(q.dequantize()).all()
    assert "1.9375 * 2^127" in scaling.__doc__


# ---- a third mutation audit (stop 65) -----------------------------------------------------------------
def test_a_negative_amax_between_minus_one_and_zero_is_refused_and_minus_zero_is_zero():
    """Only -3.0 and -5.0 were tested (< -1 for < 0 passed: a scale of -896 for -0.5, which flips every
    sign, and a DelayedScaling that recorded 0.5). -0.0 is an amax of 0: scale 1."""
    for amax in (-0.5, np.float32(-0.5), -1e-30):
        with pytest.raises(ValueError, match="amax must be >= 0"):
            scaling.scale_from_amax(amax, "E4M3")
    assert scaling.scale_from_amax(-0.0, "E4M3") == 1.0
    delayed = scaling.DelayedScaling()
    with pytest.raises(ValueError, match="amax must be >= 0"):
        delayed.record_amax(-0.5)
    assert not delayed.amax_history.any()


def test_delayed_scaling_of_an_empty_tensor_records_an_amax_of_zero():
    delayed = scaling.DelayedScaling(history_len=2)
    quantized = delayed.quantize(np.zeros((0, 4), np.float32))
    assert quantized.codes.shape == (0, 4) and delayed.amax_history.tolist() == [0.0, 0.0] and delayed.scale == 1


def test_weight_tiles_of_a_one_dimensional_array_say_what_they_need():
    with pytest.raises(ValueError, match=r"tiles of 128x128 need a 2-d array, got 1-d shape \(5,\)"):
        scaling.quantize_blockwise(np.ones(5, np.float32), block_shape=(128, 128))
