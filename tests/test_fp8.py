"""FP8 casts in the graph (minifp8.fp8) against the scaling.py / mx.py / codec functions they stand for.

References: each recipe's cast must equal, bit for bit, the function named in DESIGN.md section 6
applied to the same tensor (``codec.quantize``, ``scaling.quantize_current``,
``scaling.DelayedScaling``, ``mx.quantize``, ``scaling.quantize_blockwise``), with E5M2 gradients not
saturating; the FP8 GEMM's output and gradients must equal float32 GEMMs of operands assembled here
from those functions; statistics are checked on tensors whose counts are worked out by hand from
the format tables (E4M3 max 448, overflow beyond 464; E5M2 max 57344, 61440 overflows).
"""
import copy
import math
import zlib

import numpy as np
import pytest

from minifp8 import codec, fastcast, formats, fp8, mx, nn, scaling
from minifp8 import functional as F
from minifp8.autograd import Tensor, default_dtype, make_op, no_grad
from minifp8.testing import gradcheck

RECIPES_WITH_CASTS = ("fp8", "unit", "current", "delayed", "mxfp8", "blockwise")
MAX = {"E4M3": 448.0, "E5M2": 57344.0}
THRESHOLD = {"E4M3": 464.0, "E5M2": 61440.0}  # the end of max's rounding interval (E5M2's tie overflows)


# ---- helpers -----------------------------------------------------------------------------------
@pytest.fixture(autouse=True, params=["default", "table", "in-range", "outliers", "dense"])
def cast_path(request, monkeypatch):
    """Every test runs five times: with the casts' own choice of path per tensor, with every
    element through the rounding table, with every tensor through the fast path (rounding in
    place, the elements outside the normal range cast on their own, however many, with only
    their tiles' amax taken where the rule allows), the same with every tile's amax and the
    tiles of the largest normal-range bounds always searched on their own (and the marked
    elements' positions found by NumPy's loop over every mark, not its search), and with block casts
    cast whole, tile grids broadcast (`fastcast._cast_in_tiles`), wherever an element needs a fix."""
    if request.param == "table":
        monkeypatch.setattr(fastcast, "_IN_RANGE_MIN_SIZE", 2**62)
    elif request.param == "dense":
        monkeypatch.setattr(fastcast, "_IN_RANGE_MIN_SIZE", 0)
        monkeypatch.setattr(fastcast, "_DENSE_FRACTION", 0.0)
        monkeypatch.setattr(fastcast, "_DENSE_BLOCK_FRACTION", 0.0)
    elif request.param in ("in-range", "outliers"):
        monkeypatch.setattr(fastcast, "_IN_RANGE_MIN_SIZE", 0)
        monkeypatch.setattr(fastcast, "_FIXUP_FRACTION", 1.0)
        monkeypatch.setattr(fastcast, "_DENSE_FRACTION", 2.0)
        monkeypatch.setattr(fastcast, "_DENSE_BLOCK_FRACTION", 2.0)
        monkeypatch.setattr(fastcast, "_OUTLIER_FRACTION", 0.0 if request.param == "outliers" else 1.0)
        # in-range: the amax of the candidates' tiles alone (unless their tiles hold 16 times the
        # tensor); outliers: of every tile
        monkeypatch.setattr(fastcast, "_SPARSE_TILES_FRACTION", 0.0 if request.param == "outliers" else 16.0)
        # outliers: the positions of up to 10% marks through NumPy's branch-free loop (`_true_positions`)
        monkeypatch.setattr(fastcast, "_SEARCHED_FRACTION", 0.0 if request.param == "outliers" else 2.0)
    return request.param


def rng_for(*key):
    """A generator seeded from a test's parameters, the same in every process (``hash`` of a
    string is randomised per process, so a failure drawn from it could not be drawn again)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def bits(a):
    """float32 bit patterns, so that -0.0 != 0.0 and NaN payloads count."""
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_same(actual, expected):
    """Equal bit for bit, NaNs' signs and payloads included."""
    actual, expected = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    assert actual.shape == expected.shape
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan)
    np.testing.assert_array_equal(bits(actual)[~nan], bits(expected)[~nan])
    np.testing.assert_array_equal(bits(actual)[nan], bits(expected)[nan], err_msg="NaN bits differ")


def midpoints(name):
    """Every exact midpoint between neighbouring positive values of a format (the ties)."""
    values = np.unique(codec.decode(np.arange(256, dtype=np.uint8), name).astype(np.float64))
    values = values[np.isfinite(values) & (values >= 0)]
    return ((values[1:] + values[:-1]) / 2).astype(np.float32)


def wide_tensor(rng, shape, low=-16, high=10, ties="E4M3"):
    """Normal values times 2**k for k in [low, high): underflow, rounding and saturation all
    happen, plus planted exact ties of ``ties`` and zeros of both signs."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(low, high, shape))
    flat = x.reshape(-1)
    planted = rng.choice(flat.size, size=min(flat.size, 600), replace=False)
    ties_values = midpoints(ties)
    flat[planted[:500]] = rng.choice(ties_values, 500) * rng.choice([-1.0, 1.0], 500)
    flat[planted[500:550]] = 0.0
    flat[planted[550:]] = -0.0
    return x.astype(np.float32)


def expand(scale, shape, block_shape, axis):
    """One scale per tile (scaling.quantize_blockwise layout) -> one per element."""
    rows, columns = block_shape
    for a in range(len(shape)):
        scale = np.repeat(scale, columns if a == axis % len(shape) else rows, axis=a)
        scale = np.take(scale, np.arange(shape[a]), axis=a)
    return scale


def mx_scaled(x, quantized, axis):
    """``x`` times ``2**-shared_exp`` of its block, from ``quantized = mx.quantize(x, ...)`` (float64, exact)."""
    shared_exp = quantized.scales.astype(np.int32) - 127
    return x * np.exp2(-expand(shared_exp, x.shape, (1, 32), axis).astype(np.float64))


def beyond_max(scaled, fmt):
    """Scaled inputs beyond the rounding interval of max: above 464 (E4M3), from 61440 up (E5M2)."""
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(scaled)
        return (magnitude > THRESHOLD[fmt]) | (magnitude == THRESHOLD[fmt]) & (fmt == "E5M2")


def non_saturating(x32, scale_per_element, scale_inv_per_element):
    """E5M2 with scaling.py's scales but without clamping: overflow and Inf give Inf."""
    with np.errstate(invalid="ignore"):  # (a signalling NaN signals as it is quieted)
        scaled = np.multiply(x32, scale_per_element, dtype=np.float32)
    return codec.quantize(scaled, "E5M2", saturate=False) * scale_inv_per_element


def reference(x, recipe, fmt, axis=-1, weight=False, scaler=None, saturate_gradients=None):
    """What a cast point of ``recipe`` must produce, from the reference functions; E5M2 casts clamp or
    overflow by ``saturate_gradients`` (default: the recipe's default, `fp8.RECIPE_OPTIONS`)."""
    if saturate_gradients is None:
        saturate_gradients = fp8.RECIPE_OPTIONS[recipe].get("saturate_gradients", False)
    x32 = np.asarray(x, np.float32)
    if recipe in ("fp8", "unit"):
        return codec.quantize(x32, fmt, saturate=fmt == "E4M3" or saturate_gradients)
    if recipe == "mxfp8":
        return mx.quantize(x32, "MXFP8_" + fmt, axis=axis).dequantize()
    if recipe == "current":
        scaled = scaling.quantize_current(x32, fmt)
        tile_shape = None
    elif recipe == "delayed":
        scaled = scaler.quantize(x32, update=False)
        tile_shape = None
    else:
        tile_shape = (128, 128) if weight else (1, 128)
        scaled = scaling.quantize_blockwise(x32, fmt, block_shape=tile_shape, axis=axis)
    if fmt == "E4M3" or saturate_gradients:
        return scaled.dequantize()
    scale, scale_inv = scaled.scale, scaled.scale_inv
    if tile_shape is not None:
        scale, scale_inv = (expand(s, x32.shape, tile_shape, axis) for s in (scale, scale_inv))
    expected = non_saturating(x32, scale, scale_inv)
    # It is scaling.py's own result wherever that did not clamp.
    unclamped = (scaled.codes & 0x7F) < 0x7B
    assert_same(expected[unclamped], scaled.dequantize()[unclamped])
    return expected


def primed_scaler(fmt, amaxes=(3.0, 0.75)):
    """A DelayedScaling whose scale came from earlier steps (not 1)."""
    scaler = scaling.DelayedScaling(fmt, history_len=4)
    for amax in amaxes:
        scaler.quantize(np.array([amax], np.float32))
    return scaler


# ================================================================================================
# Must-show 4: every cast point equals its reference function, bit for bit.
# ================================================================================================
@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("shape, axis", [((256, 384), -1), ((256, 384), 0),   # whole blocks and tiles
                                         ((50, 80), -1), ((50, 80), 0),       # partial ones (padding)
                                         ((2, 3, 64, 96), -2)])               # attention-shaped
def test_fake_quantize_equals_reference(recipe, fmt, shape, axis):
    rng = rng_for(recipe, fmt, shape, axis)
    x = wide_tensor(rng, shape, high=10 if fmt == "E4M3" else 18, ties=fmt)
    takes_option = fmt == "E5M2" and "saturate_gradients" in fp8.RECIPE_OPTIONS[recipe]
    for options in [{}] + ([{"saturate_gradients": False}, {"saturate_gradients": True}] if takes_option else []):
        scaler = primed_scaler(fmt) if recipe == "delayed" else None
        reference_scaler = copy.deepcopy(scaler)
        values, stats = fp8.fake_quantize(x, recipe, fmt, axis=axis, scaler=scaler, **options)
        assert_same(values, reference(x, recipe, fmt, axis, scaler=reference_scaler, **options))
        assert stats.size == x.size and stats.amax == np.max(np.abs(x))
        if recipe == "delayed":  # the amax went into the history exactly as scaler.quantize(x) puts it
            np.testing.assert_array_equal(scaler.amax_history, reference_scaler.amax_history)
            assert scaler.scale == reference_scaler.scale


def extreme_blocks(rng, fmt, rows, columns, high=120):
    """Rows from every float32 binade, each holding the values a block scale can get wrong.

    Row r is ``2**e_r`` times a mix of: the format's exact ties and their float32 neighbours, values
    in the format's subnormal range and around its smallest normal, its overflow threshold (464 or
    61440) and neighbours, zeros, and plain normal values. e_r is drawn from [-150, high): with
    the default, float32's whole range, so blocks sit among float32 subnormals (the MX scale
    clamped at 2**-127) and next to float32's max; ``high=90`` keeps every magnitude below 2**100,
    where the fast path casts blocks (`fastcast._HUGE`).
    """
    ties = midpoints(fmt).astype(np.float64)
    threshold = THRESHOLD[fmt]
    min_normal = 2.0 ** (-6 if fmt == "E4M3" else -14)
    specials = np.concatenate([ties, [threshold, min_normal, min_normal / 2, min_normal * 0.75, 0.0]])
    values = rng.choice(specials, (rows, columns)) * rng.choice([-1.0, 1.0], (rows, columns))
    plain = rng.random((rows, columns)) < 0.3
    values[plain] = rng.standard_normal(np.count_nonzero(plain)) * 8
    values = values.astype(np.float32)
    nudge = rng.integers(-1, 2, (rows, columns))  # one float32 ulp down, none, one up
    towards = np.where(nudge > 0, np.inf, -np.inf).astype(np.float32)
    values = np.where(nudge == 0, values, np.nextafter(values, towards))
    exponents = rng.integers(-150, high, (rows, 1)).astype(np.float64)
    with np.errstate(over="ignore"):
        return np.clip(values * np.exp2(exponents - 8), -3.4e38, 3.4e38).astype(np.float32)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("scale_mode", mx.SCALE_MODES)
def test_block_casts_at_the_edges_of_every_binade(fmt, scale_mode, cast_path, monkeypatch):
    """mxfp8 (every scale mode) and blockwise casts against mx.quantize and
    scaling.quantize_blockwise, along both axes, with their statistics: ties, near ties, the
    format's subnormals and overflow threshold, in blocks from float32's subnormals up.

    The first tensor stays below 2**100, where the fast path casts blocks: it must, wherever the
    fixture forces it ("in-range", "outliers"), and by its own choice wherever no block can
    saturate (blockwise, MX under ceil and rceil); MX under floor and even may leave a tensor with
    many elements to fix to the fallback. The second reaches float32's max, which every path leaves
    to the fallback (`fastcast._cast_mx`, `fastcast._cast_blockwise`), as it does wherever the table
    is forced. Which path ran is checked, so that each is held to the references."""
    fallbacks = []
    for name in ("_cast_mx", "_cast_blockwise"):
        fallback = getattr(fastcast, name)
        monkeypatch.setattr(fastcast, name, lambda *args, _fallback=fallback: fallbacks.append(1) or _fallback(*args))
    rng = rng_for(fmt, scale_mode)
    in_range, huge = extreme_blocks(rng, fmt, 512, 256, high=90), extreme_blocks(rng, fmt, 512, 256)
    assert np.abs(in_range).max() < 2.0**100 <= np.abs(huge).max()

    def check_path(x, never_saturates):
        if x is huge or cast_path == "table":
            assert fallbacks
        elif cast_path in ("in-range", "outliers") or never_saturates:
            assert not fallbacks
        fallbacks.clear()

    for x in (in_range, huge):
        for axis in (-1, 0):
            values, stats = fp8.fake_quantize(x, "mxfp8", fmt, axis=axis, scale_mode=scale_mode)
            check_path(x, scale_mode in ("ceil", "rceil"))
            quantized = mx.quantize(x, "MXFP8_" + fmt, axis=axis, scale_mode=scale_mode)
            expected = quantized.dequantize()
            assert_same(values, expected)
            assert stats.saturation_count == np.count_nonzero(beyond_max(mx_scaled(x, quantized, axis), fmt))
            assert stats.underflow_count == np.count_nonzero((expected == 0) & (x != 0)) > 0
            if scale_mode == "floor":
                assert stats.saturation_count > 0
                values, stats = fp8.fake_quantize(x, "blockwise", fmt, axis=axis)
                check_path(x, True)
                assert_same(values, reference(x, "blockwise", fmt, axis))
                assert stats.underflow_count == np.count_nonzero((values == 0) & (x != 0)) > 0


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_block_casts_of_a_tensor_whose_largest_magnitude_lies_between_2_pow_100_and_float32_max(fmt):
    """A mutation audit's gap: no block-cast tensor had its largest magnitude between 2**100 and
    float32's max, where `fastcast._round_normal`'s Veltkamp split overflows (from about 2**107 for
    E5M2, 2**108 for E4M3), so raising `fastcast._HUGE` to 2**110 passed every test while such a
    tensor came out NaN or a step off. Each tensor: normal values and one element of 1.75 * 2**k or
    -1.3 * 2**k (and one just below 2**100), against mx.quantize and scaling.quantize_blockwise."""
    rng = rng_for(fmt, "huge")
    base = rng.standard_normal((64, 256)).astype(np.float32)
    bigs = [np.nextafter(np.float32(2.0**100), np.float32(0))]
    bigs += [np.float32(sign * 2.0**k) for k in (100, 104, 107, 108, 109, 110, 116, 122, 127)
             for sign in (1.75, -1.3)]
    for big in bigs:
        x = base.copy()
        x[rng.integers(64), rng.integers(256)] = big
        for axis in (-1, 0):
            for scale_mode in mx.SCALE_MODES:
                values, stats = fp8.fake_quantize(x, "mxfp8", fmt, axis=axis, scale_mode=scale_mode)
                quantized = mx.quantize(x, "MXFP8_" + fmt, axis=axis, scale_mode=scale_mode)
                assert_same(values, quantized.dequantize())
                assert stats.saturation_count == np.count_nonzero(beyond_max(mx_scaled(x, quantized, axis), fmt))
            values, stats = fp8.fake_quantize(x, "blockwise", fmt, axis=axis)
            assert_same(values, reference(x, "blockwise", fmt, axis))
            assert stats.underflow_count == np.count_nonzero((values == 0) & (x != 0))


@pytest.mark.parametrize("recipe", ["mxfp8", "blockwise"])
def test_a_tensor_of_float32_subnormals_is_cast_on_the_format_grid(recipe):
    """Every magnitude below 2**-126, so every tile's scale is 2**127: blockwise's 448 / amax
    overflows float32 (FLT_MAX, rounded down to a power of two), MX's floor(log2(amax)) - 8 lies below
    the smallest shared exponent, -127. The scaled elements are E4M3 normals, but float32
    subnormals carry fewer significant bits than their scaled values, so they cannot be rounded in
    place. By hand, in every row (so along either axis):
    1.75 * 2**-127 -> 1.75 exactly; (1.5 + 2**-22) * 2**-127 -> 1.5; -1.3125 * 2**-127, a tie between
    1.25 and 1.375 (mantissas 010 and 011), -> -1.25 (even); the rest are random float32
    subnormals, checked against the reference."""
    rng = np.random.default_rng(43)
    x = (rng.integers(1, 2**23, (64, 128)) * rng.choice([-1, 1], (64, 128)) * 2.0**-149).astype(np.float32)
    x[:, :3] = np.array([1.75, 1.5 + 2.0**-22, -1.3125]) * 2.0**-127
    assert (np.abs(x) < 2.0**-126).all()
    for axis in (-1, 0):
        values, stats = fp8.fake_quantize(x, recipe, "E4M3", axis=axis)
        assert_same(values, reference(x, recipe, "E4M3", axis))
        assert_same(values[:, :3], np.broadcast_to(np.array([1.75, 1.5, -1.25]) * 2.0**-127, (64, 3)))
        assert stats.underflow_count == np.count_nonzero((values == 0) & (x != 0))


@pytest.mark.parametrize("recipe", ["fp8", "current", "delayed", "mxfp8", "blockwise"])
def test_views_are_cast_like_copies(recipe):
    """Transposed and strided views (attention's heads are transposed views): the same values."""
    x = wide_tensor(np.random.default_rng(21), (4, 64, 3, 128))
    for view in (x.transpose(0, 2, 1, 3), x[:, ::2], x.transpose(2, 0, 3, 1)):
        for fmt in ("E4M3", "E5M2"):
            scaler = primed_scaler(fmt) if recipe == "delayed" else None
            values, stats = fp8.fake_quantize(view, recipe, fmt, axis=-1, scaler=scaler)
            assert values.shape == view.shape
            assert_same(values, reference(np.ascontiguousarray(view), recipe, fmt, -1,
                                          scaler=primed_scaler(fmt) if scaler else None))


@pytest.mark.parametrize("shape", [(256, 384), (200, 300), (200, 64), (300, 128), (9, 100)])
def test_blockwise_weight_tiles(shape):
    """128x128 weight tiles; the columnwise copy is the same tiles, so the GEMM reuses the rowwise one.
    With at most 128 columns a tile spans every column (the cast reads it as a run of whole rows)."""
    w = wide_tensor(np.random.default_rng(1), shape)
    for fmt in ("E4M3", "E5M2"):
        values, _ = fp8.fake_quantize(w, "blockwise", fmt, weight=True)
        assert_same(values, reference(w, "blockwise", fmt, weight=True))
    assert_same(scaling.quantize_blockwise(w, block_shape=(128, 128), axis=0).dequantize(),
                scaling.quantize_blockwise(w, block_shape=(128, 128), axis=-1).dequantize())


@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
def test_special_values(recipe):
    """NaN, +-Inf and overflow, as each reference treats them; E5M2 gradients give Inf, not max (but
    under delayed, whose E5M2 casts clamp by default).
    NaNs of either sign, with payloads, quiet or signalling, come out with the reference's bits."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    x[3, 5], x[10, 100], x[20, 7], x[40, 64] = np.nan, np.inf, -np.inf, 1e30
    nans = np.array([0xFFC00000, 0x7FC00001, 0x7F800001, 0xFF800123], np.uint32).view(np.float32)
    x[[30, 50, 60, 62], [3, 40, 77, 127]] = nans
    for fmt in ("E4M3", "E5M2"):
        scaler = primed_scaler(fmt) if recipe == "delayed" else None
        expected = reference(x, recipe, fmt, scaler=copy.deepcopy(scaler))
        values, stats = fp8.fake_quantize(x, recipe, fmt, scaler=scaler)
        assert_same(values, expected)
        assert np.isnan(stats.amax)
        if recipe != "mxfp8":  # E4M3 clamps Inf to +-max*scale_inv; E5M2 keeps it unless it saturates
            assert np.isinf(values[10, 100]) == (fmt == "E5M2" and recipe != "delayed")
        else:  # OCP MX: a block holding NaN or Inf is all NaN
            assert np.isnan(values[10, 96:128]).all() and np.isnan(values[3, 0:32]).all()


@pytest.mark.parametrize("recipe", ["fp8", "current", "delayed", "blockwise"])
def test_saturate_gradients_option_gives_the_reference_itself(recipe):
    """With saturate_gradients=True the E5M2 casts are scaling.py's / the codec's saturating
    casts exactly (TransformerEngine), overflow included; the statistics still count it."""
    rng = np.random.default_rng(13)
    g = rng.standard_normal((64, 256)).astype(np.float32) * 1e4
    g[0, 0] = np.inf
    scaler = scaling.DelayedScaling("E5M2", history_len=2) if recipe == "delayed" else None
    if scaler is not None:
        scaler.quantize(np.array([100.0], np.float32))  # a history far below this gradient: overflow
    reference_scaler = copy.deepcopy(scaler)
    values, stats = fp8.fake_quantize(g, recipe, "E5M2", scaler=scaler, saturate_gradients=True)
    if recipe == "fp8":
        expected = codec.quantize(g, "E5M2", saturate=True)
    elif recipe == "current":
        expected = scaling.quantize_current(g, "E5M2").dequantize()
    elif recipe == "delayed":
        expected = reference_scaler.quantize(g, update=False).dequantize()
    else:
        expected = scaling.quantize_blockwise(g, "E5M2").dequantize()
    assert_same(values, expected)
    assert np.isfinite(values).all() and stats.saturation_count >= 1
    unclamped = fp8.fake_quantize(g, recipe, "E5M2", scaler=copy.deepcopy(reference_scaler), saturate_gradients=False)
    assert np.isinf(unclamped[0]).any()
    default = fp8.fake_quantize(g, recipe, "E5M2", scaler=copy.deepcopy(reference_scaler))[0]
    assert_same(default, values if recipe == "delayed" else unclamped[0])  # (delayed clamps by default)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("recipe, options", [("current", {"power_of_2": True}), ("blockwise", {"power_of_2": False})])
def test_power_of_2_option_gives_its_reference(recipe, options, fmt):
    """The recipes' power_of_2 option reaches the cast: ``current`` with power-of-two scales is
    scaling.quantize_current(power_of_2=True), ``blockwise`` without them
    scaling.quantize_blockwise(power_of_2=False) (1x128 along either axis, 128x128 weight tiles);
    E5M2 without saturating. The statistics are a direct count on the scaled input."""
    rng = np.random.default_rng(47)
    x = wide_tensor(rng, (200, 300), high=10 if fmt == "E4M3" else 18, ties=fmt)
    for axis, weight in [(-1, False), (0, False), (-1, True)] if recipe == "blockwise" else [(-1, False)]:
        values, stats = fp8.fake_quantize(x, recipe, fmt, axis=axis, weight=weight, **options)
        tile = (128, 128) if weight else (1, 128)
        other = {"power_of_2": not options["power_of_2"]}
        if recipe == "current":
            scaled, unwanted = (scaling.quantize_current(x, fmt, **o) for o in (options, other))
            scale, scale_inv = scaled.scale, scaled.scale_inv
        else:
            scaled, unwanted = (scaling.quantize_blockwise(x, fmt, block_shape=tile, axis=axis, **o)
                                for o in (options, other))
            scale, scale_inv = (expand(s, x.shape, tile, axis) for s in (scaled.scale, scaled.scale_inv))
        expected = scaled.dequantize() if fmt == "E4M3" else non_saturating(x, scale, scale_inv)
        assert_same(values, expected)
        assert not np.array_equal(bits(values), bits(unwanted.dequantize()))  # the option changes the cast
        assert stats.saturation_count == np.count_nonzero(beyond_max(np.multiply(x, scale, dtype=np.float32), fmt))
        assert stats.underflow_count == np.count_nonzero((expected == 0) & (x != 0)) > 0


def test_float64_inputs_round_once():
    """float64 (gradcheck) inputs: the naive cast rounds once (codec), mxfp8 exactly (mx.py), and
    the scaling.py recipes round to float32 first, as TransformerEngine reads float32."""
    x = wide_tensor(np.random.default_rng(3), (64, 96)).astype(np.float64) * (1 + 2.0**-30)
    assert_same(fp8.fake_quantize(x, "fp8", "E4M3")[0], codec.quantize(x, "E4M3", saturate=True))
    assert_same(fp8.fake_quantize(x, "mxfp8", "E4M3")[0], mx.quantize(x, "MXFP8_E4M3").dequantize())
    assert_same(fp8.fake_quantize(x, "current", "E4M3")[0], scaling.quantize_current(x).dequantize())


@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
def test_a_float64_input_that_float32_rounds_to_zero_underflows(recipe):
    """1e-50 is nonzero in float64 but lies below half of float32's smallest subnormal (2**-150,
    about 7e-46): where a recipe reads float32 it is 0 before any scaling, and it comes out as 0
    in every recipe. It is a nonzero input cast to zero, an underflow; the zeros are not."""
    x = np.zeros((4, 128))
    x[0, :5] = [1.0, 1e-50, 0.0, -0.5, -0.0]
    scaler = scaling.DelayedScaling("E4M3") if recipe == "delayed" else None  # scale 1
    values, stats = fp8.fake_quantize(x, recipe, "E4M3", scaler=scaler)
    assert values[0, 1] == 0 and values[0, 0] == 1.0 and values[0, 3] == -0.5
    assert stats.underflow_count == 1 and stats.saturation_count == 0


@pytest.mark.parametrize("recipe", fp8.RECIPES)
def test_an_all_zero_tensor_neither_underflows_nor_saturates(recipe):
    """A mutation audit's gap: an ``underflow_fraction`` that counted a tensor whose amax is 0 as
    wholly underflowed (1.0, where ``underflow_count`` says 0) passed every test, which checked the
    counts alone. Underflow is a nonzero input cast to zero (`minifp8.fastcast.CastStats`): an
    all-zero tensor, of +0 or of -0, comes back bit for bit with both fractions 0, in every recipe
    and format."""
    for fmt in ("E4M3", "E5M2"):
        for zero in (0.0, -0.0):
            x = np.full((4, 128), zero, np.float32)
            scaler = scaling.DelayedScaling(fmt) if recipe == "delayed" else None
            values, stats = fp8.fake_quantize(x, recipe, fmt, scaler=scaler)
            assert_same(values, x)
            assert (stats.amax, stats.size, stats.underflow_count, stats.saturation_count) == (0.0, x.size, 0, 0)
            assert stats.underflow_fraction == 0.0 and stats.saturation_fraction == 0.0, (fmt, zero, stats)


def test_fp32_is_the_identity():
    rng = np.random.default_rng(0)
    x = wide_tensor(rng, (16, 32))
    values, stats = fp8.fake_quantize(x, "fp32")
    assert_same(values, x)
    assert stats.underflow_count == stats.saturation_count == 0

    model, inputs, grad = small_model(rng), rng.standard_normal((4, 8, 32)), rng.standard_normal((4, 8, 32))
    plain = copy.deepcopy(model)
    state = fp8.apply_recipe(model, "fp32")
    assert state.points == {} and model.layers[0].gemm is F.linear
    assert model.attention.attention_core is F.scaled_dot_product_attention
    outputs = [run(m, inputs, grad) for m in (model, plain)]
    for a, b in zip(*outputs):
        assert_same(a, b)
    # fp32 after another recipe restores the plain hooks
    fp8.apply_recipe(model, "mxfp8")
    assert isinstance(model.layers[0].gemm, fp8.FP8Linear)
    fp8.apply_recipe(model, "fp32")
    assert model.layers[0].gemm is F.linear and model.attention.attention_core is F.scaled_dot_product_attention
    for a, b in zip(run(model, inputs, grad), outputs[1]):
        assert_same(a, b)


# ================================================================================================
# The FP8 GEMM: forward and both gradients are float32 GEMMs of the fake-quantised copies.
# ================================================================================================
@pytest.mark.parametrize("dtypes", [("float32", "float64", "float32"), ("float64", "float32", "float32"),
                                    ("float32", "float32", "float64"), ("float64", "float64", "float64")])
@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS + ("fp32",))
def test_fp8_gemm_output_dtype_is_the_one_functional_linear_promotes_to(recipe, dtypes):
    """Found in a review: the FP8 GEMM's output took x's dtype alone, so a float32 x through float64
    weights (a model built under default_dtype(np.float64)) came out float32, where F.linear, and the
    same layer without a recipe, gives float64. Each operand's gradient keeps its own dtype."""
    rng = np.random.default_rng(5)
    x_dtype, weight_dtype, bias_dtype = map(np.dtype, dtypes)
    layer = nn.Linear(40, 24, rng=rng)
    with default_dtype(weight_dtype):  # (a tensor's floating data takes the default dtype)
        layer.weight.data = rng.standard_normal((24, 40))
    with default_dtype(bias_dtype):
        layer.bias.data = rng.standard_normal(24)
    for fprop in ("fp8", "float32"):  # (the GEMM left in float32 too)
        fp8.apply_recipe(layer, recipe, exclude=("Linear:fprop",) if fprop == "float32" and recipe != "fp32" else ())
        with default_dtype(x_dtype):
            x = Tensor(rng.standard_normal((3, 40)), requires_grad=True)
        expected = F.linear(x, layer.weight, layer.bias).dtype
        assert expected == np.result_type(x_dtype, weight_dtype, bias_dtype)
        layer.zero_grad()
        y = layer(x)
        assert y.dtype == expected, (fprop, y.dtype, expected)
        y.backward(np.ones(y.shape, y.dtype))
        assert (x.grad.dtype, layer.weight.grad.dtype, layer.bias.grad.dtype) == (x_dtype, weight_dtype, bias_dtype)
        fp8.apply_recipe(layer, "fp32")


@pytest.mark.parametrize("needs_grad", ["x weight bias", "x weight", "x", "weight bias"])
@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
def test_fp8_gemm_equals_gemm_of_quantized_operands(recipe, needs_grad):
    """``needs_grad``: the operands that require grad ("x weight": a layer without bias); the others
    get no gradient, and only the GEMMs and casts of the gradients asked for run."""
    rng = np.random.default_rng(11)
    layer = nn.Linear(256, 384, bias="bias" in needs_grad or needs_grad == "x", rng=rng)
    layer.weight.data = wide_tensor(rng, (384, 256), low=-12, high=2)  # scales that differ block to block
    x_data = wide_tensor(rng, (2, 64, 256), low=-12, high=9)
    grad_data = wide_tensor(rng, (2, 64, 384), low=-30, high=-2)
    state = fp8.apply_recipe(layer, recipe, **({"history_len": 4} if recipe == "delayed" else {}))
    references = {}
    if recipe == "delayed":  # one step first, so that the scales come from a history
        references = {role: scaling.DelayedScaling(fmt, history_len=4)
                      for role, fmt in (("x", "E4M3"), ("w", "E4M3"), ("grad", "E5M2"))}
        # x this step is twice the history's amax (E4M3 saturates); the gradient half of it
        warm_x, warm_grad = x_data[::-1] * 0.5, grad_data[::-1] * 2
        layer(Tensor(warm_x)).backward(warm_grad)
        for role, tensor in (("x", warm_x), ("w", layer.weight.data), ("grad", warm_grad)):
            references[role].quantize(tensor.reshape(-1, tensor.shape[-1]))  # and update
        state.step()
    x = Tensor(x_data, requires_grad="x" in needs_grad)
    for p in layer.parameters():
        p.grad, p.requires_grad = None, "weight" in needs_grad
    y = layer(x)
    y.backward(grad_data)

    x2, g2, w = x_data.reshape(-1, 256), grad_data.reshape(-1, 384), layer.weight.data

    def ref(t, fmt, axis=-1, weight=False, role=None):
        return reference(t, recipe, fmt, axis, weight, scaler=references.get(role))

    x_q, w_q, g_q = ref(x2, "E4M3", role="x"), ref(w, "E4M3", weight=True, role="w"), ref(g2, "E5M2", role="grad")
    if recipe in ("mxfp8", "blockwise"):  # columnwise copies along each backward GEMM's contraction axis
        w_t = ref(w, "E4M3", axis=0, weight=True)
        g_t, x_t = ref(g2, "E5M2", axis=0), ref(x2, "E4M3", axis=0)
        assert not np.array_equal(g_t, g_q) and not np.array_equal(x_t, x_q)
        assert np.array_equal(w_t, w_q) == (recipe == "blockwise")  # 128x128 tiles: the same either way
    else:  # one scale per tensor: the copies coincide
        w_t, g_t, x_t = w_q, g_q, x_q
    y_expected = x_q @ w_q.T
    if layer.bias is not None:  # (adding 0.0 instead would turn -0.0 into 0.0)
        y_expected = y_expected + layer.bias.data
    assert_same(y.data, y_expected.reshape(2, 64, 384))
    assert (x.grad is None, layer.weight.grad is None) == ("x" not in needs_grad, "weight" not in needs_grad)
    if "x" in needs_grad:
        assert_same(x.grad, (g_q @ w_t).reshape(x_data.shape))
    if "weight" in needs_grad:
        assert_same(layer.weight.grad, g_t.T @ x_t)
    if layer.bias is not None:
        assert (layer.bias.grad is None) == ("bias" not in needs_grad)
    if "bias" in needs_grad:
        assert_same(layer.bias.grad, g2.sum(axis=0))  # the bias gradient is not quantised
    roles = {"x", "w"}  # forward
    if "x" in needs_grad:  # dgrad: grad and w_t (blockwise reuses w's 128x128 tiles; per-tensor: w itself)
        roles |= {"grad", "w_t"} if recipe == "mxfp8" else {"grad"}
    if "weight" in needs_grad:  # wgrad: grad_t and x_t (per-tensor recipes: grad and x themselves)
        roles |= {"grad_t", "x_t"} if recipe in ("mxfp8", "blockwise") else {"grad"}
    assert set(state.points["Linear"].stats) == roles


@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
def test_fp8_gemm_bias_gradcheck(recipe):
    """The bias is added after the GEMM and never cast, so its gradient is a true gradient: float64
    central differences (x and W fixed, so their casts do not move; their straight-through gradients
    are checked against the GEMMs of the quantised operands above)."""
    rng = np.random.default_rng(13)
    layer = nn.Linear(32, 6, rng=rng)
    layer.weight.requires_grad = False
    fp8.apply_recipe(layer, recipe)
    x = Tensor(wide_tensor(rng, (4, 8, 32), low=-4, high=4))
    gradcheck(lambda t, *params: layer(t), x, *layer.parameters(), names=["x", "weight", "bias"])


@pytest.mark.parametrize("turned_on", ["x", "weight"])
@pytest.mark.parametrize("recipe", ["mxfp8", "blockwise"])
def test_block_gemm_casts_in_backward_the_columnwise_copies_forward_skipped(recipe, turned_on):
    """An operand that starts requiring grad between forward and backward (``turned_on``, unfrozen
    after the forward pass): forward cast no columnwise copy for its gradient's GEMM, so backward
    must cast it then, along that GEMM's contraction axis (module docstring): x_t along the tokens
    for wgrad, w_t along out_features for dgrad (mxfp8; blockwise's 128x128 tiles serve both axes),
    never the forward's rowwise copy."""
    rng = np.random.default_rng(23)
    layer = nn.Linear(256, 128, bias=False, rng=rng)
    layer.weight.data = wide_tensor(rng, (128, 256), low=-12, high=2)
    x_data = wide_tensor(rng, (64, 256), low=-12, high=9)
    grad_data = wide_tensor(rng, (64, 128), low=-30, high=-2)
    fp8.apply_recipe(layer, recipe)
    x = Tensor(x_data, requires_grad=turned_on != "x")
    layer.weight.requires_grad = turned_on != "weight"
    y = layer(x)
    (x if turned_on == "x" else layer.weight).requires_grad = True
    y.backward(grad_data)

    w = layer.weight.data
    x_t, w_t = reference(x_data, recipe, "E4M3", axis=0), reference(w, recipe, "E4M3", axis=0, weight=True)
    assert not np.array_equal(x_t, reference(x_data, recipe, "E4M3"))  # the axis matters for these operands
    assert np.array_equal(w_t, reference(w, recipe, "E4M3", weight=True)) == (recipe == "blockwise")
    assert_same(x.grad, reference(grad_data, recipe, "E5M2") @ w_t)
    assert_same(layer.weight.grad, reference(grad_data, recipe, "E5M2", axis=0).T @ x_t)


@pytest.mark.parametrize("recipe", ["fp8", "current", "mxfp8", "blockwise"])
def test_a_weight_updated_in_place_is_cast_again(recipe):
    """Optimizers update ``weight.data`` in place, the same array: the next step's GEMMs must use the
    cast of the new values (and record its statistics), never a cast kept from the step before."""
    rng = np.random.default_rng(37)
    layer = nn.Linear(256, 128, bias=False, rng=rng)
    state = fp8.apply_recipe(layer, recipe)
    x = wide_tensor(rng, (64, 256), low=-8, high=4)
    grad = rng.standard_normal((64, 128)).astype(np.float32)
    weight = layer.weight.data
    layer(Tensor(x)).backward(grad)
    state.step()
    weight += rng.standard_normal(weight.shape).astype(np.float32) * np.float32(0.1)  # in place
    assert layer.weight.data is weight
    layer.zero_grad()
    y = layer(Tensor(x))
    y.backward(grad)
    x_q, w_q = reference(x, recipe, "E4M3"), reference(weight, recipe, "E4M3", weight=True)
    assert_same(y.data, x_q @ w_q.T)
    columnwise = 0 if recipe in ("mxfp8", "blockwise") else -1  # per-tensor: the copies coincide
    g_t, x_t = reference(grad, recipe, "E5M2", axis=columnwise), reference(x, recipe, "E4M3", axis=columnwise)
    assert_same(layer.weight.grad, g_t.T @ x_t)
    assert state.points["Linear"].stats["w"].amax == np.max(np.abs(weight))


@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
def test_attention_casts(recipe):
    """q, k (along head_dim) and v (along the sequence) in E4M3; the output gradient in E5M2 along
    head_dim; gradients pass straight through the forward casts."""
    rng = np.random.default_rng(5)
    shape = (2, 3, 64, 96)
    q, k, v = (Tensor(wide_tensor(rng, shape, low=-8, high=4), requires_grad=True) for _ in range(3))
    grad = rng.standard_normal(shape).astype(np.float32) * 2.0 ** rng.integers(-20, 0, shape)
    seen = {}

    def core(q_in, k_in, v_in, causal):
        seen.update(q=q_in.data, k=k_in.data, v=v_in.data, causal=causal)
        out = F.scaled_dot_product_attention(q_in, k_in, v_in, causal)
        return make_op(out.data, (out,), lambda g: (seen.setdefault("grad", g),), "record")

    module = AttentionModule(core)
    state = fp8.apply_recipe(module, recipe, **({"history_len": 4} if recipe == "delayed" else {}))
    scalers = {}
    if recipe == "delayed":  # one step first, so that the scales come from a history (as for the GEMM)
        scalers = {role: scaling.DelayedScaling(fmt, history_len=4)
                   for role, fmt in (("q", "E4M3"), ("k", "E4M3"), ("v", "E4M3"), ("grad", "E5M2"))}
        warm = {"q": q.data * 0.5, "k": k.data * 4, "v": v.data[::-1] * 0.25, "grad": grad * 2}
        module(*(Tensor(warm[name], requires_grad=True) for name in "qkv")).backward(warm["grad"])
        for role, tensor in warm.items():
            scalers[role].quantize(tensor)  # and update
        state.step()
        seen.clear()
    module(q, k, v).backward(grad)
    assert seen["causal"] is True
    for name, t, fmt, axis in (("q", q.data, "E4M3", -1), ("k", k.data, "E4M3", -1), ("v", v.data, "E4M3", -2),
                               ("grad", grad, "E5M2", -1)):
        assert_same(seen[name], reference(t, recipe, fmt, axis=axis, scaler=scalers.get(name)))
    # straight through: the gradients are the core's, computed on the quantised values
    leaves = [Tensor(seen[name], requires_grad=True) for name in ("q", "k", "v")]
    F.scaled_dot_product_attention(*leaves, causal=True).backward(seen["grad"])
    for leaf, t in zip(leaves, (q, k, v)):
        assert_same(t.grad, leaf.grad)
    assert set(state.points["AttentionModule"].stats) == {"q", "k", "v", "grad"}


# ================================================================================================
# Statistics: exact counts on crafted tensors.
# ================================================================================================
def test_statistics_naive_casts_by_hand():
    # E4M3: min subnormal 2**-9, so 2**-10 is a tie that rounds to 0 (even) and underflows while
    # the next float32 above it rounds up; 448 is max, 464 a tie that rounds to 448 (even) and
    # does not saturate; anything above 464 saturates.
    x = np.array([0.0, -0.0, 1.0, 2.0**-10, -(2.0**-10), np.nextafter(np.float32(2.0**-10), np.float32(1)), 2.0**-12,
                  448.0, 464.0, -464.0, np.nextafter(np.float32(464), np.float32(1e9)), 1e6, -np.inf],
                 np.float32)
    values, stats = fp8.fake_quantize(x, "fp8", "E4M3")
    assert stats.underflow_count == 3            # +-2**-10 and 2**-12
    assert stats.saturation_count == 3           # next float32 above 464, 1e6, -Inf
    assert values[-1] == -448 and values[8] == 448 and values[5] == 2.0**-9
    assert stats.size == 13 and stats.underflow_fraction == 3 / 13 and stats.saturation_fraction == 3 / 13
    assert stats.amax == np.inf
    # E5M2: min subnormal 2**-16, 2**-17 is a tie to 0; max 57344 and 61440 is a tie that rounds up
    # to 65536, beyond max: Inf. NaN stays NaN and counts as saturated (it is not a finite value).
    g = np.array([2.0**-17, 2.0**-16, 3 * 2.0**-18, 57344, 61439, 61440, -70000, np.nan, 5.0], np.float32)
    values, stats = fp8.fake_quantize(g, "fp8", "E5M2")
    assert stats.underflow_count == 1            # 2**-17 (3 * 2**-18 rounds up to 2**-16)
    assert stats.saturation_count == 3           # 61440, -70000 (both Inf) and NaN
    assert values[5] == np.inf and values[6] == -np.inf and values[4] == 57344 and np.isnan(values[7])


def test_statistics_scaled_recipes_by_hand():
    # current: amax 4 -> scale 112; 1e-7 * 112 < 2**-10: underflows; nothing can saturate.
    x = np.array([4.0, -2.0, 1e-7, 0.0, 3e-5], np.float32)  # 3e-5 * 112 = 0.00336 > 2**-9: kept
    stats = fp8.fake_quantize(x, "current", "E4M3")[1]
    assert (stats.underflow_count, stats.saturation_count, stats.amax) == (1, 0, 4.0)

    # delayed: the history holds amax 1, so scale 448; this step's 1.04 * 448 = 465.9 > 464
    # saturates, 1.03 * 448 = 461.4 rounds to 448 and does not.
    scaler = scaling.DelayedScaling("E4M3", history_len=2)
    scaler.quantize(np.array([1.0], np.float32))
    assert scaler.scale == 448
    x = np.array([2.0, -1.5, 1.04, 1.03, 0.5], np.float32)
    values, stats = fp8.fake_quantize(x, "delayed", "E4M3", scaler=scaler)
    assert (stats.underflow_count, stats.saturation_count) == (0, 3)
    assert values[0] == values[2] == np.float32(448) * np.float32(1 / 448)
    assert scaler.amax_history[0] == 2.0  # recorded for the next update
    # ...and in E5M2 the same overflow clamps (the default) or gives Inf: history amax 1 -> scale 57344;
    # 1.1 * 57344 > 61440
    for saturate, expected in ((True, 1.0), (False, np.inf)):
        scaler = scaling.DelayedScaling("E5M2", history_len=2)
        scaler.quantize(np.array([1.0], np.float32))
        values, stats = fp8.fake_quantize(np.array([1.1, 1.0, -1.2], np.float32), "delayed", "E5M2", scaler=scaler,
                                          **({} if saturate else {"saturate_gradients": False}))
        assert values[0] == -values[2] == np.float32(expected) and stats.saturation_count == 2
        assert values[1] == np.float32(57344) * (np.float32(1) / np.float32(57344))

    # mxfp8 (floor): block amax 500 -> shared exponent 8 - 8 = 0, scale 1: 500 and 470 lie beyond
    # 464 and clamp to 448, 460 rounds to 448; 2**-20 underflows. The second block holds an Inf:
    # all its 32 values become NaN (saturated), its zero is not an underflow.
    block = np.zeros(64, np.float32)
    block[:6] = [500, -470, 460, 1, 2.0**-20, 3]
    block[32:35] = [np.inf, 1, 0]
    values, stats = fp8.fake_quantize(block, "mxfp8", "E4M3")
    assert (stats.underflow_count, stats.saturation_count) == (1, 2 + 32)
    assert values[0] == 448 and values[1] == -448 and np.isnan(values[32:]).all()

    # blockwise: one 1x128 tile with amax 1: scale 448 rounded down to a power of two, 256;
    # 2**-19 * 256 = 2**-11 underflows, 2**-17 * 256 = 2**-9 survives.
    tile = np.zeros(128, np.float32)
    tile[:4] = [1.0, -0.5, 2.0**-19, 2.0**-17]
    stats = fp8.fake_quantize(tile, "blockwise", "E4M3")[1]
    assert (stats.underflow_count, stats.saturation_count, stats.amax) == (1, 0, 1.0)


@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_statistics_equal_a_direct_count(recipe, fmt, axis, monkeypatch):
    """Counts over many slices (and threads) equal a direct count on the reference: underflow is
    a zero output from a nonzero input; saturation a scaled input beyond the rounding interval of
    max (E4M3: above 464, a tie at 464 rounds down to 448; E5M2: from 61440 up, a tie that rounds
    up to 65536) or a NaN."""
    monkeypatch.setattr(fastcast, "_CHUNK_ELEMENTS", 4096)
    rng = rng_for(recipe, fmt, axis)
    x = wide_tensor(rng, (256, 384), high=12 if fmt == "E4M3" else 19, ties=fmt)
    x[5, :7] = [np.nan, 0, 0, 0, 0, 0, 0] if recipe != "mxfp8" else [0] * 7  # (mx: see test_special_values)
    scaler = primed_scaler(fmt, amaxes=(1e4,)) if recipe == "delayed" else None
    expected_values = reference(x, recipe, fmt, axis, scaler=copy.deepcopy(scaler))
    values, stats = fp8.fake_quantize(x, recipe, fmt, axis=axis, scaler=scaler)
    if recipe in ("fp8", "unit"):
        scaled = x
    elif recipe in ("current", "delayed"):
        scaled = x * (scaling.quantize_current(x, fmt).scale if recipe == "current" else scaler.scale)
    elif recipe == "blockwise":
        scaled = x * expand(scaling.quantize_blockwise(x, fmt, axis=axis).scale, x.shape, (1, 128), axis)
    else:
        scaled = mx_scaled(x, mx.quantize(x, "MXFP8_" + fmt, axis=axis), axis)
    beyond = beyond_max(scaled, fmt) | np.isnan(scaled)
    assert stats.saturation_count == np.count_nonzero(beyond) > 0
    assert stats.underflow_count == np.count_nonzero((expected_values == 0) & (x != 0)) > 0
    assert stats.size == x.size



@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
def test_statistics_amax_is_the_largest_over_every_slice(recipe, monkeypatch):
    """A tensor cast in many slices (and threads): its amax is the largest magnitude of all of them,
    here in the last slice (-3.5; everything else lies in [-1, 1]); a NaN in a middle slice makes it NaN."""
    monkeypatch.setattr(fastcast, "_CHUNK_ELEMENTS", 4096)
    x = np.random.default_rng(41).uniform(-1, 1, (256, 384)).astype(np.float32)
    x[-1, -1] = -3.5
    for fmt in ("E4M3", "E5M2"):
        for axis in (-1, 0):
            scaler = scaling.DelayedScaling(fmt) if recipe == "delayed" else None
            assert fp8.fake_quantize(x, recipe, fmt, axis=axis, scaler=scaler)[1].amax == 3.5
    x[130, 7] = np.nan
    scaler = scaling.DelayedScaling("E4M3") if recipe == "delayed" else None
    assert np.isnan(fp8.fake_quantize(x, recipe, "E4M3", scaler=scaler)[1].amax)


@pytest.mark.parametrize("recipe", ["mxfp8", "blockwise"])
@pytest.mark.parametrize("shape, axis", [((40, 16), -1), ((40, 80), -1), ((100, 208), 0), ((3, 5, 48), -1)])
def test_partial_blocks_statistics_with_special_values(recipe, shape, axis):
    """Blocks and tiles longer than their axis, or cut short at its end (zero-padded by the
    references): the values and a direct count of the statistics, NaN and Inf blocks included
    (an MX NaN block counts its own elements as saturated, not the padding)."""
    rng = rng_for(recipe, shape, axis)
    x = wide_tensor(rng, shape, high=12)
    flat = x.reshape(-1)
    flat[[-1, 7, flat.size // 2]] = [np.nan, np.inf, -np.inf]
    for fmt in ("E4M3", "E5M2"):
        for weight in ([False, True] if recipe == "blockwise" and x.ndim == 2 else [False]):
            values, stats = fp8.fake_quantize(x, recipe, fmt, axis=axis, weight=weight)
            expected = reference(x, recipe, fmt, axis, weight=weight)
            assert_same(values, expected)
            if recipe == "mxfp8":
                scaled = mx_scaled(x, mx.quantize(x, "MXFP8_" + fmt, axis=axis), axis)
                in_nan_block = np.isnan(expected)
            else:
                tile_shape = (128, 128) if weight else (1, 128)
                scale = scaling.quantize_blockwise(x, fmt, block_shape=tile_shape, axis=axis).scale
                scaled = x * expand(scale, x.shape, tile_shape, axis)
                in_nan_block = np.isnan(x)
            beyond = beyond_max(scaled, fmt)
            assert stats.saturation_count == np.count_nonzero(beyond & ~in_nan_block | in_nan_block)
            assert stats.underflow_count == np.count_nonzero((expected == 0) & (x != 0))


@pytest.mark.parametrize("recipe", ["fp8", "unit", "delayed", "mxfp8"])  # the recipes that cast it with scale 1
def test_e5m2_overflow_tie_counts_as_saturated(recipe):
    """61440 lies halfway between E5M2's max 57344 and 65536, and the tie rounds up: it overflows."""
    x = np.ones((4, 128), np.float32)
    x[1, 3] = 61440
    scaler = scaling.DelayedScaling("E5M2", history_len=2) if recipe == "delayed" else None
    if scaler is not None:
        scaler.quantize(np.array([57344.0], np.float32))  # scale 1
    options = {"saturate_gradients": False} if recipe == "delayed" else {}  # (delayed clamps by default)
    values, stats = fp8.fake_quantize(x, recipe, "E5M2", scaler=copy.deepcopy(scaler), **options)
    assert stats.saturation_count == 1
    assert np.isinf(values[1, 3]) or recipe == "mxfp8"  # MX elements saturate inside a block
    if recipe == "delayed":
        values, stats = fp8.fake_quantize(x, recipe, "E5M2", scaler=scaler)
        assert stats.saturation_count == 1 and values[1, 3] == 57344


@pytest.mark.parametrize("fmt, scale_mode, big, tiny", [("E4M3", "floor", 2.0**20, 1e-36),
                                                        ("E4M3", "even", 2.0**20, 1e-36),
                                                        ("E5M2", "floor", 2.0**40, 1e-31)])
def test_mx_saturation_in_a_block_far_below_the_largest_counts(fmt, scale_mode, big, tiny):
    """Found by a review: a block of 1.9 beside blocks of ``big`` lies far below the largest block's
    normal range, so its elements are cast one by one; a block of ``tiny`` (amax below 2**-112,
    E4M3, or 2**-97, E5M2) has its bound raised to 2**-126, which sent all of them through the
    table. The table clamps 1.9's elements to max itself, where the count of values beyond max
    never saw them, and none was counted. By hand: 1.9's shared exponent is -8 (E4M3: floor, and
    even, which rounds 1.9 to 1.875) or -15 (E5M2), and 1.9 * 2**8 = 486.4 lies beyond 464,
    1.9 * 2**15 = 62259.2 beyond 61440: all 32 saturate, to max * 2**shared_exp. The big blocks
    scale their amax to 256 (E4M3) or 32768 (E5M2): none does. So for the rowwise copy of the pair
    cast (training's statistics); in the columnwise one each column's 8 rows are one block, with
    big's scale, where nothing saturates."""
    x = np.full((8, 32), big, np.float32)
    x[1], x[2] = 1.9, tiny
    values, stats = fp8.fake_quantize(x, "mxfp8", fmt, scale_mode=scale_mode)
    quantized = mx.quantize(x, "MXFP8_" + fmt, scale_mode=scale_mode)
    assert_same(values, quantized.dequantize())
    assert stats.saturation_count == np.count_nonzero(beyond_max(mx_scaled(x, quantized, -1), fmt)) == 32
    assert values[1, 0] == MAX[fmt] * 2.0 ** (-8 if fmt == "E4M3" else -15)
    options = fp8._recipe_options("mxfp8", {"scale_mode": scale_mode})
    pair = fastcast.cast_pair(x, "mxfp8", options, formats.get(fmt))
    if pair is not None:  # (the table path, where forced, declines it)
        assert pair[0][1] == stats and pair[1][1].saturation_count == 0
        assert_same(pair[0][0], values)


def test_statistics_recorded_per_role_and_summary():
    rng = np.random.default_rng(2)
    layer = nn.Linear(128, 64, bias=False, rng=rng)
    state = fp8.apply_recipe(layer, "fp8")
    assert state.summary() == {"max_underflow": 0.0, "max_underflow_at": None,
                               "max_saturation": 0.0, "max_saturation_at": None}
    x = np.full((32, 128), 0.25, np.float32)
    x[0, :4] = [1000, -1000, 2.0**-11, 0]  # 2 saturate, 1 underflows (the 0 does not)
    layer(Tensor(x)).backward(np.full((32, 64), 2.0**-20, np.float32))  # every gradient underflows
    stats = state.points["Linear"].stats
    assert set(stats) == {"x", "w", "grad"}
    assert (stats["x"].saturation_count, stats["x"].underflow_count, stats["x"].amax) == (2, 1, 1000)
    assert stats["grad"].underflow_fraction == 1.0 and stats["grad"].amax == 2.0**-20
    assert state.summary() == {"max_underflow": 1.0, "max_underflow_at": "Linear:grad",
                               "max_saturation": 2 / x.size, "max_saturation_at": "Linear:x"}
    # only the gradient casts: the saturated forward cast is left out (train_tiny names the gradient
    # cast when the gradients overflow: a forward E4M3 cast clamps, it cannot have made them Inf)
    assert state.summary(fp8.GRADIENT_ROLES) == {"max_underflow": 1.0, "max_underflow_at": "Linear:grad",
                                                 "max_saturation": 0.0, "max_saturation_at": None}
    assert state.summary(["x"]) == {"max_underflow": 1 / x.size, "max_underflow_at": "Linear:x",
                                    "max_saturation": 2 / x.size, "max_saturation_at": "Linear:x"}
    assert state.summary(()) == {"max_underflow": 0.0, "max_underflow_at": None,
                                 "max_saturation": 0.0, "max_saturation_at": None}


@pytest.mark.parametrize("roles, error, message", [
    ("grad", TypeError, "roles must be a collection of role names such as ('grad', 'grad_t'), got 'grad'"),
    (5, TypeError, "got 5"),
    (["grad", 1], TypeError, "got ['grad', 1]"),
    (["gradient"], ValueError, "unknown role(s) ['gradient']; the roles are x, w, grad, x_t, w_t, grad_t, q, k, v"),
])
def test_summary_refuses_roles_that_are_not_role_names(roles, error, message):
    state = fp8.apply_recipe(nn.Linear(4, 4, rng=np.random.default_rng(0)), "fp8")
    with pytest.raises(error) as caught:
        state.summary(roles)
    assert message in str(caught.value)


def test_roles_are_every_role_cast_and_gradient_roles_the_backward_casts():
    """Collected from a tiny GPT under every recipe (linears and attention, both block recipes): the
    roles recorded by the forward pass are ROLES less GRADIENT_ROLES, and the backward pass adds
    exactly GRADIENT_ROLES."""
    from minifp8.model import GPT, GPTConfig
    forward, backward = set(), set()
    tokens = np.random.default_rng(1).integers(0, 14, size=(2, 8))
    for recipe in RECIPES_WITH_CASTS:
        model = GPT(GPTConfig(vocab_size=14, block_size=8, n_layer=1, n_head=2, n_embd=32),
                    rng=np.random.default_rng(0))
        state = fp8.apply_recipe(model, recipe)
        _, loss = model(tokens, tokens)
        before = {role for point in state.points.values() for role in point.stats}
        loss.backward()
        after = {role for point in state.points.values() for role in point.stats}
        forward |= before
        backward |= after - before
    assert forward == set(fp8.ROLES) - set(fp8.GRADIENT_ROLES)
    assert backward == set(fp8.GRADIENT_ROLES)


# ================================================================================================
# Delayed scaling: one history per role per point, advanced once per state.step().
# ================================================================================================
def test_delayed_gradients_clamp_by_default_so_plain_training_stays_finite():
    """A review's find: with E5M2 gradient casts that overflowed by default, ``apply_recipe(model,
    "delayed")`` and plain AdamW gave a small GPT Inf gradients at its second step (step 1 counted from 0
    here) and a NaN loss at its third (early gradients outgrow last step's scale by more than 7%). They
    clamp by default now, as TransformerEngine's do; ``saturate_gradients=False``, for dynamic loss
    scaling, still shows the overflow."""
    from minifp8 import optim
    from minifp8.model import GPT, GPTConfig

    def train(**options):
        model = GPT(GPTConfig(vocab_size=32, block_size=32, n_layer=2, n_head=4, n_embd=64),
                    rng=np.random.default_rng(0))
        state = fp8.apply_recipe(model, "delayed", **options)
        optimizer = optim.AdamW(list(model.parameters()), lr=3e-3)
        rng, stream = np.random.default_rng(1), np.arange(10_000) % 29
        for step in range(4):
            starts = rng.integers(0, len(stream) - 33, 16)
            ids = np.stack([stream[start:start + 33] for start in starts])
            optimizer.zero_grad()
            loss = model(ids[:, :-1], ids[:, 1:])[1]
            loss.backward()
            if not all(np.isfinite(p.grad).all() for p in model.parameters()):
                return step, state.summary(fp8.GRADIENT_ROLES)["max_saturation"]
            optimizer.step()
            state.step()
        return None, state.summary(fp8.GRADIENT_ROLES)["max_saturation"]

    assert train()[0] is None
    with np.errstate(over="ignore", invalid="ignore"):  # (the Inf gradients' products, NaN)
        step, saturation = train(saturate_gradients=False)
    assert step == 1 and saturation > 0


def test_delayed_history_advances_once_per_step():
    rng = np.random.default_rng(4)
    layer = nn.Linear(64, 32, bias=False, rng=rng)
    state = fp8.apply_recipe(layer, "delayed", history_len=4)
    scalers = state.points["Linear"].scalers
    assert set(scalers) == {"x", "w", "grad"}
    assert scalers["grad"].fmt.name == "E5M2" and scalers["x"].fmt.name == "E4M3"
    x_amaxes = [2.0, 8.0, 0.5]
    for step, amax in enumerate(x_amaxes):
        x = rng.uniform(-0.25, 0.25, (16, 64)).astype(np.float32)
        x[0, 0] = amax
        scale_before = scalers["x"].scale
        for micro_batch in range(2):  # two forward+backward passes in one step: one history entry
            out = layer(Tensor(x * (0.5 if micro_batch else 1.0)))
            out.backward(np.ones(out.shape, np.float32))
            assert scalers["x"].scale == scale_before  # casts within a step never move the scale
        # this step's casts used the scale from the amaxes of the steps before
        expected_scale = np.float32(448) / np.float32(max(x_amaxes[:step])) if step else np.float32(1)
        assert scale_before == expected_scale
        assert scalers["x"].amax_history[0] == amax  # the running max of the step's two casts
        state.step()
        assert state.steps == step + 1
    # after three steps the history holds each step's amax once, oldest first, ending at the newest
    np.testing.assert_array_equal(scalers["x"].amax_history, [0.0, 2.0, 8.0, 0.5])
    # a step with no casts advances every history by one entry: the slot of the step that just
    # ended (0, nothing cast) goes to the end, the oldest amax (2) leaves, the new slot 0 is empty
    state.step()
    np.testing.assert_array_equal(scalers["x"].amax_history, [0.0, 8.0, 0.5, 0.0])
    assert scalers["w"].amax_history[-1] == 0 and scalers["w"].amax_history[-2] != 0


@pytest.mark.parametrize("margin", [-119, -113, 9, 15])
def test_delayed_margin_that_one_format_refuses_is_refused_before_any_module_changes(margin):
    """Found in a review: a margin in E4M3's range but not E5M2's ([-119, -113]) passed the first
    check and failed at the first E5M2 scaler, after earlier modules (their gradient excluded) had
    been given FP8 GEMMs tied to a state nobody held."""
    first, second = (nn.Linear(8, 8, rng=np.random.default_rng(seed)) for seed in (0, 1))
    model = nn.Sequential(first, second)
    plain = [type(module.gemm) for module in (first, second)]
    with pytest.raises(ValueError, match=rf"apply_recipe: delayed's margin must lie in \[-112, 8\], which suits both "
                                         rf"E4M3 and E5M2 .*got {margin}"):
        fp8.apply_recipe(model, "delayed", margin=margin, exclude=("0:grad",))
    assert [type(module.gemm) for module in (first, second)] == plain


def test_apply_recipe_gives_every_scaler_the_delayed_options():
    """margin and amax_compute_algo reach the histories of every role. x's amax is 4 at step 1 and 1
    at step 2; with margin 2 the scale is (448 * 2**-2) / amax: 112 / 4 = 28 after step 1, and
    with "most_recent" 112 / 1 = 112 after step 2 (the window's max, 4, would give 28 again;
    margin 0 would give 448 / 4 = 112 after step 1)."""
    layer = nn.Linear(8, 4, bias=False, rng=np.random.default_rng(3))
    state = fp8.apply_recipe(layer, "delayed", history_len=4, margin=2, amax_compute_algo="most_recent")
    scalers = state.points["Linear"].scalers
    assert {(s.history_len, s.margin, s.amax_compute_algo) for s in scalers.values()} == {(4, 2, "most_recent")}
    for amax, scale in ((4.0, 28.0), (1.0, 112.0)):
        x = np.full((3, 8), amax / 4, np.float32)
        x[1, 2] = -amax
        layer(Tensor(x))
        state.step()
        assert scalers["x"].scale == scale


def test_delayed_state_dict_resumes_bit_exactly():
    def fresh():
        rng = np.random.default_rng(8)
        return nn.Sequential(nn.Linear(32, 48, rng=rng), nn.GELU(), nn.Linear(48, 16, rng=rng))

    rng = np.random.default_rng(9)
    batches = [(rng.standard_normal((8, 32)) * 2.0 ** -i, rng.standard_normal((8, 16))) for i in range(4)]
    model = fresh()
    state = fp8.apply_recipe(model, "delayed", history_len=3)
    for x, g in batches[:2]:
        model(Tensor(x)).backward(g)
        state.step()
    saved = state.state_dict()
    resumed = fresh()
    resumed.load_state_dict(model.state_dict())
    resumed_state = fp8.apply_recipe(resumed, "delayed", history_len=3)
    resumed_state.load_state_dict(saved)
    assert resumed_state.steps == 2
    for x, g in batches[2:]:
        model.zero_grad()
        resumed.zero_grad()
        outputs = [m(Tensor(x)) for m in (model, resumed)]
        assert_same(outputs[0].data, outputs[1].data)
        for out, s in zip(outputs, (state, resumed_state)):
            out.backward(g)
            s.step()
        for a, b in zip(model.parameters(), resumed.parameters()):
            assert_same(a.grad, b.grad)
    with pytest.raises(KeyError, match="missing keys"):
        resumed_state.load_state_dict({"recipe": np.array("delayed"), "steps": np.array(0)})
    with pytest.raises(ValueError, match="recipe 'current'"):
        resumed_state.load_state_dict({**saved, "recipe": np.array("current")})
    current = fp8.apply_recipe(fresh(), "current").state_dict()  # another recipe's whole state, other keys
    with pytest.raises(ValueError, match="the state is for recipe 'current', this model uses 'delayed'"):
        resumed_state.load_state_dict(current)  # (it was a KeyError listing the keys; found in an API review)


# ================================================================================================
# Hooks, errors, determinism.
# ================================================================================================
class AttentionModule(nn.Module):
    def __init__(self, core=F.scaled_dot_product_attention):
        self.attention_core = core

    def forward(self, q, k, v):
        return self.attention_core(q, k, v, True)


@pytest.mark.parametrize("recipe", ["delayed", "current", "blockwise"])
def test_an_attention_core_that_refuses_its_inputs_leaves_no_cast_recorded(recipe):
    """q, k and v are cast (their amaxes recorded in the delayed histories, their statistics set)
    before the core checks their shapes: a call that raised still moved the next step's scales
    (a review's find). Now a raising call leaves the point as it was."""
    model = AttentionModule()
    state = fp8.apply_recipe(model, recipe, **({"history_len": 4} if recipe == "delayed" else {}))
    point = state.points["AttentionModule"]
    q = np.ones((1, 2, 4, 8), np.float32)
    k = np.full((1, 2, 4, 16), 3.0, np.float32)   # head_dim 16 against q's 8
    with pytest.raises(ValueError):
        model.attention_core(q, k, k, True)
    assert point.stats == {}
    assert all(scaler.amax_history.tolist() == [0.0] * 4 for scaler in point.scalers.values())
    state.step()
    assert all(scaler.scale == 1.0 for scaler in point.scalers.values())
    model.attention_core(q, np.full_like(q, 3.0), np.full_like(q, 3.0), True)   # a good call records as before
    assert sorted(point.stats) == ["k", "q", "v"]
    if recipe == "delayed":
        assert [point.scalers[role].amax_history[0] for role in "qkv"] == [1.0, 3.0, 3.0]


def test_a_linear_whose_second_cast_refuses_keeps_the_first_ones_amax_out():
    """Under float64 (gradcheck's dtype) a finite value beyond float32's range became Inf in the
    hooks' casts, so the amax was Inf, the scale 1 and the output wrong without a word, where
    fake_quantize refuses it (a review's find). It is refused here too; x's cast, already
    recorded when the weight's refuses, is put back."""
    with default_dtype(np.float64):
        layer = nn.Linear(2, 1, bias=False, rng=np.random.default_rng(0))
        state = fp8.apply_recipe(layer, "delayed", history_len=2)
        point = state.points[""] if "" in state.points else next(iter(state.points.values()))
        layer.weight.data = np.array([[1e39, 1.0]])
        with pytest.raises(ValueError, match="beyond float32's range .* e.g. 1e[+]39"):
            layer(Tensor(np.array([[2.0, 1.0]])))
        assert point.stats == {} and point.scalers["x"].amax_history.tolist() == [0.0, 0.0]
        layer.weight.data = np.array([[1.0, 1.0]])
        with pytest.raises(ValueError, match="beyond float32's range"):
            layer(Tensor(np.array([[1e39, 1.0]])))
        assert layer(Tensor(np.array([[2.0, 1.0]]))).data.tolist() == [[3.0]]
        assert point.scalers["x"].amax_history.tolist() == [2.0, 0.0]


class SmallModel(nn.Module):
    """Linears at several depths (a list, a Sequential, a nested module) and an attention core."""

    def __init__(self, rng):
        self.layers = [nn.Linear(32, 32, rng=rng), nn.Linear(32, 96, bias=False, rng=rng)]
        self.attention = AttentionModule()
        self.mlp = nn.Sequential(nn.Linear(32, 64, rng=rng), nn.GELU(), nn.Linear(64, 32, rng=rng))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = F.split(self.layers[1](self.layers[0](x)), 32, axis=-1)
        heads = [t.reshape(b, s, 2, 16).transpose(0, 2, 1, 3) for t in (q, k, v)]
        y = self.attention(*heads).transpose(0, 2, 1, 3).reshape(b, s, d)
        return self.mlp(y)


def small_model(rng):
    return SmallModel(rng)


def run(model, inputs, grad):
    model.zero_grad()
    x = Tensor(inputs, requires_grad=True)
    out = model(x)
    out.backward(grad)
    return [out.data, x.grad] + [p.grad for p in model.parameters()]


def test_fp8_attention_refuses_integer_and_1d_inputs():
    model = AttentionModule()
    fp8.apply_recipe(model, "fp8")
    q = Tensor(np.ones((2, 4, 8), np.float32))
    with pytest.raises(TypeError, match="FP8 attention 'AttentionModule': k must be a floating tensor, got dtype int64"):
        model(q, Tensor(np.ones((2, 4, 8), np.int64)), q)
    with pytest.raises(ValueError, match=r"v must have shape \(..., seq, head_dim\), got shape \(8,\)"):
        model(q, q, Tensor(np.ones(8, np.float32)))


def test_apply_recipe_finds_every_linear_and_attention():
    rng = np.random.default_rng(0)
    model = small_model(rng)
    state = fp8.apply_recipe(model, "current")
    linears = {"layers.0": model.layers[0], "layers.1": model.layers[1], "mlp.0": model.mlp[0], "mlp.2": model.mlp[2]}
    assert set(state.points) == set(linears) | {"attention"}
    for name, layer in linears.items():
        assert isinstance(layer.gemm, fp8.FP8Linear) and layer.gemm.point is state.points[name]
        assert state.points[name].kind == "gemm"
    assert isinstance(model.attention.attention_core, fp8.FP8Attention)
    assert model.attention.attention_core.core is F.scaled_dot_product_attention
    assert set(model.state_dict()) == {"layers.0.weight", "layers.0.bias", "layers.1.weight", "mlp.0.weight",
                                       "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"}  # hooks are not state
    run(model, rng.standard_normal((2, 8, 32)), rng.standard_normal((2, 8, 32)))
    for name in linears:
        assert set(state.points[name].stats) == {"x", "w", "grad"}
    # a second recipe replaces the hooks (and wraps the original core, not the FP8 one)
    state = fp8.apply_recipe(model, "mxfp8")
    assert model.attention.attention_core.core is F.scaled_dot_product_attention
    assert model.layers[0].gemm.state is state


def test_apply_recipe_exclude_leaves_the_named_modules_in_float32():
    """exclude: the named modules keep the plain hooks (an earlier recipe's are taken off) and get no
    cast point, so their outputs and gradients are those of an untouched copy, while every other
    module still casts."""
    rng = np.random.default_rng(0)
    model = small_model(rng)
    plain = copy.deepcopy(model)
    fp8.apply_recipe(model, "current")  # (hooks everywhere first: exclude must take them off)
    state = fp8.apply_recipe(model, "current", exclude=["mlp.2", "attention"])
    assert set(state.points) == {"layers.0", "layers.1", "mlp.0"}
    assert model.mlp[2].gemm is F.linear and model.attention.attention_core is F.scaled_dot_product_attention
    inputs = rng.standard_normal((2, 8, 32)).astype(np.float32)
    run(model, inputs, rng.standard_normal((2, 8, 32)))
    assert all(set(state.points[name].stats) == {"x", "w", "grad"} for name in state.points)
    hidden = rng.standard_normal((2, 8, 64)).astype(np.float32)
    copies = [Tensor(hidden, requires_grad=True) for _ in range(2)]
    outputs = [module(x) for module, x in zip((model.mlp[2], plain.mlp[2]), copies)]
    assert_same(outputs[0].data, outputs[1].data)
    for output in outputs:
        output.sum().backward()
    assert_same(copies[0].grad, copies[1].grad)
    # under fp32 the names are still checked; the exclusion changes nothing there
    assert fp8.apply_recipe(model, "fp32", exclude=("mlp.2",)).points == {}


def test_apply_recipe_exclude_takes_shell_style_patterns():
    """An exclude entry may be an fnmatch pattern: ``*`` spans the dots of a module path, ``?`` and
    ``[...]`` match one character, case counts, and the union of every entry's matches is left
    uncast."""
    model = small_model(np.random.default_rng(0))
    for exclude, uncast in [(["mlp.*"], {"mlp.0", "mlp.2"}),
                            (["*.?"], {"layers.0", "layers.1", "mlp.0", "mlp.2"}),
                            (["layers.[1-9]", "attention"], {"layers.1", "attention"}),
                            (["mlp.2", "mlp.*"], {"mlp.0", "mlp.2"})]:
        state = fp8.apply_recipe(model, "current", exclude=exclude)
        assert set(state.points) == {"attention", "layers.0", "layers.1", "mlp.0", "mlp.2"} - uncast, exclude
        modules = dict(model.named_modules())
        assert all(modules[name].gemm is F.linear for name in uncast - {"attention"})
    for exclude, unmatched in [(["MLP.*"], "'MLP.*'"), (["mlp.0", "*.mlp.*", "lay*rs"], "'\\*.mlp.\\*', 'lay\\*rs'")]:
        with pytest.raises(ValueError, match=f"exclude matches no module with a gemm or an attention core: "
                                             f"{unmatched}; such modules are attention, layers.0"):
            fp8.apply_recipe(model, "current", exclude=exclude)


def test_apply_recipe_exclude_errors_leave_the_model_as_it_was():
    model = small_model(np.random.default_rng(0))
    state = fp8.apply_recipe(model, "current")
    hooks = [model.layers[0].gemm, model.attention.attention_core]
    for exclude, error, message in [
            ("mlp.2", TypeError, "exclude must be an iterable of module names, such as \\('lm_head',\\), got the str"),
            (3, TypeError, "exclude must be an iterable of module names, got int"),
            ([b"mlp.2"], TypeError, "exclude must hold module names \\(str\\), got b'mlp.2' \\(bytes\\)"),
            (["mlp.1"], ValueError, "exclude matches no module with a gemm or an attention core: 'mlp.1'; such "
                                    "modules are attention, layers.0, layers.1, mlp.0, mlp.2"),
            (["attention", "layers.0", "layers.1", "mlp.0", "mlp.2"], ValueError,
             "found no linear .* in SmallModel outside exclude \\(attention, layers.0, layers.1, mlp.0, mlp.2\\)"),
            (["mlp.2:"], ValueError, "exclude entry 'mlp.2:' names no tensor after ':'; write the module alone for "
                                     "all its tensors"),  # (it left every tensor of mlp.2 uncast)
            (["mlp.2:x_t"], ValueError, "exclude entry 'mlp.2:x_t' names the tensor 'x_t'; after ':' comes x, w, grad, "
                                        "fprop, dgrad or wgrad \\(a gemm's tensors and GEMMs\\) or q, k, v or grad "
                                        "\\(an attention core's\\)"),
            (["mlp.2:grad", "attention:x", "mlp.*:q"], ValueError,
             "exclude matches no module with a gemm or an attention core that has the tensor named after ':' "
             "\\(a gemm has x, w and grad and the GEMMs fprop, dgrad and wgrad, an attention core q, k, v and grad\\): 'attention:x', 'mlp.\\*:q'; "
             "such modules are attention, layers.0"),
            (["attention:q", "attention:k", "attention:v", "attention:grad", "layers.*", "mlp.*"], ValueError,
             "found no linear .* outside exclude \\(attention, layers.0, layers.1, mlp.0, mlp.2\\)")]:
        with pytest.raises(error, match=message):
            fp8.apply_recipe(model, "delayed", exclude=exclude)
        assert [model.layers[0].gemm, model.attention.attention_core] == hooks  # (untouched)
        assert model.layers[0].gemm.state is state


class _Holder(nn.Module):
    """One linear and one attention core, named ``proj`` and ``attention``."""

    def __init__(self, rng, core=F.scaled_dot_product_attention):
        self.proj = nn.Linear(256, 128, bias=False, rng=rng)
        self.attention = AttentionModule(core)


@pytest.mark.parametrize("tensor", ["x", "w", "grad"])
@pytest.mark.parametrize("recipe", ["fp8", "current", "mxfp8", "blockwise"])
def test_exclude_one_tensor_of_a_gemm_leaves_it_in_float32_and_casts_the_rest(recipe, tensor):
    """``exclude=["proj:tensor"]``: that tensor enters all three GEMMs unrounded (its columnwise copy
    too) and records no statistics; the other operands are cast exactly as before."""
    rng = np.random.default_rng(41)
    model = _Holder(rng)
    model.proj.weight.data = wide_tensor(rng, (128, 256), low=-12, high=2)
    x_data = wide_tensor(rng, (64, 256), low=-12, high=9)
    grad_data = wide_tensor(rng, (64, 128), low=-30, high=-2)
    state = fp8.apply_recipe(model, recipe, exclude=[f"proj:{tensor}"])
    x = Tensor(x_data, requires_grad=True)
    y = model.proj(x)
    y.backward(grad_data)

    w = model.proj.weight.data
    columnwise = 0 if recipe in ("mxfp8", "blockwise") else -1  # per-tensor: the copies coincide
    operands = {}
    for name, data, fmt in (("x", x_data, "E4M3"), ("w", w, "E4M3"), ("grad", grad_data, "E5M2")):
        operands[name], operands[name + "_t"] = (
            data if name == tensor else reference(data, recipe, fmt, axis=axis, weight=name == "w")
            for axis in (-1, columnwise))
    assert_same(y.data, operands["x"] @ operands["w"].T)
    assert_same(x.grad, operands["grad"] @ operands["w_t"])
    assert_same(model.proj.weight.grad, operands["grad_t"].T @ operands["x_t"])
    point = state.points["proj"]
    assert point.uncast == {tensor, tensor + "_t"}
    cast = {"x", "w", "grad"} | ({"x_t", "grad_t"} if columnwise == 0 else set()) | (
        {"w_t"} if recipe == "mxfp8" else set())  # (blockwise's weight tiles serve both axes)
    assert set(point.stats) == cast - point.uncast
    assert f"uncast=['{tensor}', '{tensor}_t']" in repr(point)
    assert set(state.points["attention"].stats) == set() and not state.points["attention"].uncast  # (not run)


# Which GEMMs of a linear read each cast (the module docstring's table): per-tensor recipes cast a
# tensor once for every GEMM, and blockwise's 128x128 weight tiles serve fprop and dgrad alike.
_READERS = {
    "per tensor": {"x": {"fprop", "wgrad"}, "w": {"fprop", "dgrad"}, "grad": {"dgrad", "wgrad"}},
    "mxfp8": {"x": {"fprop"}, "x_t": {"wgrad"}, "w": {"fprop"}, "w_t": {"dgrad"}, "grad": {"dgrad"},
              "grad_t": {"wgrad"}},
    "blockwise": {"x": {"fprop"}, "x_t": {"wgrad"}, "w": {"fprop", "dgrad"}, "grad": {"dgrad"}, "grad_t": {"wgrad"}},
}


@pytest.mark.parametrize("gemms", [("fprop",), ("dgrad",), ("wgrad",), ("dgrad", "wgrad"), ("fprop", "wgrad")])
@pytest.mark.parametrize("recipe", ["fp8", "current", "delayed", "mxfp8", "blockwise"])
def test_exclude_gemms_of_a_linear_runs_them_on_the_unrounded_operands(recipe, gemms):
    """``exclude=["proj:wgrad"]`` (TransformerEngine's override_linear_precision): that GEMM reads x, W
    and dy as they are, the other GEMMs their casts exactly as before, and a cast that no FP8 GEMM
    reads is not made (no statistics, no amax history); in no_grad, only fprop's casts are made."""
    rng = np.random.default_rng(47)
    model = _Holder(rng)
    model.proj.weight.data = wide_tensor(rng, (128, 256), low=-12, high=2)
    tensors = {"x": wide_tensor(rng, (64, 256), low=-12, high=9), "w": model.proj.weight.data,
               "grad": wide_tensor(rng, (64, 128), low=-30, high=-2)}
    state = fp8.apply_recipe(model, recipe, exclude=[f"p*:{gemm}" for gemm in gemms])
    point = state.points["proj"]
    scalers = copy.deepcopy(point.scalers)  # (delayed: what the first step's casts scale by)
    x = Tensor(tensors["x"], requires_grad=True)
    with no_grad():
        model.proj(x)
    readers = _READERS.get(recipe, _READERS["per tensor"])
    assert set(point.stats) == ({"x", "w"} - point.uncast if "fprop" not in gemms else set())
    point.stats.clear()
    y = model.proj(x)
    y.backward(tensors["grad"])

    def operand(gemm, role):
        tensor = role.removesuffix("_t")
        if gemm in gemms:
            return tensors[tensor]
        axis = 0 if role.endswith("_t") and recipe in ("mxfp8", "blockwise") else -1
        return reference(tensors[tensor], recipe, "E5M2" if tensor == "grad" else "E4M3", axis=axis,
                         weight=tensor == "w", scaler=scalers.get(tensor))

    (x_f, w_f), (g_d, w_d), (g_w, x_w) = ([operand(gemm, role) for role in roles] for gemm, roles in fp8.GEMMS.items())
    assert_same(y.data, x_f @ w_f.T)
    assert_same(x.grad, g_d @ w_d)
    assert_same(model.proj.weight.grad, g_w.T @ x_w)
    cast = {role for role, gemms_reading in readers.items() if gemms_reading - set(gemms)}
    assert set(point.stats) == cast and point.uncast.isdisjoint(cast) and point.float32_gemms == set(gemms)
    assert set(point.scalers) == (cast if recipe == "delayed" else set())
    assert f"float32_gemms={[gemm for gemm in fp8.GEMMS if gemm in gemms]}" in repr(point)


@pytest.mark.parametrize("turned_on", ["x", "weight"])
@pytest.mark.parametrize("recipe", ["current", "mxfp8", "blockwise"])
def test_with_fprop_in_float32_backward_casts_what_an_operand_turned_on_later_needs(recipe, turned_on):
    """``exclude=["proj:fprop"]``: forward casts only what a backward GEMM will read, so an operand
    that starts requiring grad after forward finds no copy for its gradient's GEMM, which backward
    must then cast along that GEMM's contraction axis, as with every GEMM in FP8."""
    rng = np.random.default_rng(59)
    model = _Holder(rng)
    model.proj.weight.data = wide_tensor(rng, (128, 256), low=-12, high=2)
    x_data = wide_tensor(rng, (64, 256), low=-12, high=9)
    grad_data = wide_tensor(rng, (64, 128), low=-30, high=-2)
    point = fp8.apply_recipe(model, recipe, exclude=["proj:fprop"]).points["proj"]
    x = Tensor(x_data, requires_grad=turned_on != "x")
    model.proj.weight.requires_grad = turned_on != "weight"
    y = model.proj(x)
    # (forward casts the copies the other backward GEMM reads: a per-tensor cast serves it, a blockwise
    # weight tile dgrad; mxfp8's columnwise copies wait for backward)
    cast_in_forward = {"current": {"weight": {"w"}, "x": {"x"}}, "blockwise": {"weight": {"w"}, "x": set()},
                       "mxfp8": {"weight": set(), "x": set()}}
    assert set(point.stats) == cast_in_forward[recipe][turned_on]
    (x if turned_on == "x" else model.proj.weight).requires_grad = True
    y.backward(grad_data)

    w, columnwise = model.proj.weight.data, 0 if recipe in ("mxfp8", "blockwise") else -1
    assert_same(y.data, x_data @ w.T)
    assert_same(x.grad, reference(grad_data, recipe, "E5M2") @ reference(w, recipe, "E4M3", axis=0, weight=True))
    assert_same(model.proj.weight.grad, reference(grad_data, recipe, "E5M2", axis=columnwise).T
                @ reference(x_data, recipe, "E4M3", axis=columnwise))


def test_exclude_every_gemm_of_a_linear_is_excluding_the_linear():
    rng = np.random.default_rng(53)
    holder = _Holder(rng)
    x = Tensor(rng.standard_normal((8, 256)), requires_grad=True)
    for recipe in ("current", "mxfp8", "blockwise"):
        state = fp8.apply_recipe(holder, recipe, exclude=["proj:fprop", "proj:dgrad", "proj:wgrad"])
        assert list(state.points) == ["attention"] and holder.proj.gemm is F.linear
    state = fp8.apply_recipe(holder, "blockwise", exclude=["proj:fprop", "proj:dgrad", "proj:grad"])
    assert state.points["proj"].uncast == {"x", "w", "w_t", "grad", "grad_t"}  # (x_t: wgrad reads it)
    holder.proj(x).sum().backward()
    assert set(state.points["proj"].stats) == {"x_t"}
    with pytest.raises(ValueError, match="found no linear .* outside exclude \\(attention, proj\\)"):
        fp8.apply_recipe(holder, "delayed", exclude=["proj:x", "proj:grad", "proj:fprop", "proj:dgrad", "attention"])
    state = fp8.apply_recipe(holder, "delayed", exclude=["proj:x", "proj:grad", "proj:fprop", "attention"])
    assert list(state.points) == ["proj"] and set(state.points["proj"].scalers) == {"w"}  # (dgrad reads w)


@pytest.mark.parametrize("tensor", ["q", "k", "v", "grad"])
@pytest.mark.parametrize("recipe", ["current", "mxfp8"])
def test_exclude_one_tensor_of_an_attention_core_leaves_it_in_float32(recipe, tensor):
    rng = np.random.default_rng(43)
    shape = (2, 3, 64, 96)
    data = {name: wide_tensor(rng, shape, low=-8, high=4) for name in ("q", "k", "v", "grad")}
    seen = {}

    def core(q_in, k_in, v_in, causal):
        seen.update(q=q_in.data, k=k_in.data, v=v_in.data)
        out = F.scaled_dot_product_attention(q_in, k_in, v_in, causal)
        return make_op(out.data, (out,), lambda g: (seen.setdefault("grad", g),), "record")

    model = _Holder(rng, core)
    state = fp8.apply_recipe(model, recipe, exclude=(f"att*:{tensor}",))
    model.attention(*(Tensor(data[name], requires_grad=True) for name in "qkv")).backward(data["grad"])
    for name, fmt, axis in (("q", "E4M3", -1), ("k", "E4M3", -1), ("v", "E4M3", -2), ("grad", "E5M2", -1)):
        expected = data[name] if name == tensor else reference(data[name], recipe, fmt, axis=axis)
        assert_same(seen[name], expected)
    assert set(state.points["attention"].stats) == {"q", "k", "v", "grad"} - {tensor}


def test_exclude_tensors_under_delayed_and_in_a_module_with_two_cast_points():
    """An uncast tensor gets no amax history (nor state_dict keys); ``grad`` names both cast points'
    gradient casts in a module with a gemm and an attention core, ``q`` only the core's; a point
    whose every tensor is uncast is not made, and its module keeps the plain hook."""
    rng = np.random.default_rng(0)
    model = _FusedAttention(16, rng)
    state = fp8.apply_recipe(model, "delayed", exclude=["*:grad"])
    gemm, core = state.points["_FusedAttention"], state.points["_FusedAttention.attention_core"]
    assert gemm.uncast == core.uncast == {"grad", "grad_t"}
    assert set(gemm.scalers) == {"x", "w"} and set(core.scalers) == {"q", "k", "v"}
    assert not any(".grad." in key for key in state.state_dict())
    x = Tensor(rng.standard_normal((1, 8, 16)) * 1000)
    model(x).sum().backward()
    state.step()
    assert set(gemm.stats) == {"x", "w"} and set(core.stats) == {"q", "k", "v"}
    state = fp8.apply_recipe(model, "delayed", exclude=["*:q"])
    assert state.points["_FusedAttention"].uncast == set() and state.points["_FusedAttention.attention_core"].uncast == {"q"}
    holder = _Holder(rng)
    fp8.apply_recipe(holder, "current")
    state = fp8.apply_recipe(holder, "current", exclude=["proj:x", "proj:w", "p*:grad"])
    assert list(state.points) == ["attention"] and holder.proj.gemm is F.linear
    assert fp8.apply_recipe(holder, "current", exclude=["proj:w", "proj"]).points["attention"].uncast == set()


def test_unknown_recipe_and_bad_options():
    model = small_model(np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown FP8 recipe 'fp16'; choose one of fp32, fp8, unit, current, "
                                         "delayed, mxfp8, blockwise"):
        fp8.apply_recipe(model, "fp16")
    with pytest.raises(ValueError, match="unknown FP8 recipe"):
        fp8.fake_quantize(np.ones(4), "e4m3")
    with pytest.raises(TypeError, match="recipe 'fp8' takes the options saturate_gradients; got 'margin'"):
        fp8.apply_recipe(model, "fp8", margin=1)
    with pytest.raises(TypeError, match="recipe 'fp32' takes no options; got 'margin'"):
        fp8.apply_recipe(model, "fp32", margin=1)
    with pytest.raises(TypeError, match="saturate_gradients must be a bool"):
        fp8.apply_recipe(model, "current", saturate_gradients=1)
    with pytest.raises(TypeError, match="takes the options history_len, amax_compute_algo, margin"):
        fp8.apply_recipe(model, "delayed", history=16)
    with pytest.raises(ValueError, match="history_len"):
        fp8.apply_recipe(model, "delayed", history_len=0)
    with pytest.raises(ValueError, match="unknown scale_mode 'round'"):
        fp8.apply_recipe(model, "mxfp8", scale_mode="round")
    with pytest.raises(TypeError, match="power_of_2 must be a bool"):
        fp8.apply_recipe(model, "current", power_of_2="yes")
    with pytest.raises(TypeError, match="needs scaler="):
        fp8.fake_quantize(np.ones(4), "delayed")
    with pytest.raises(ValueError, match="E4M3 .* or E5M2"):
        fp8.fake_quantize(np.ones(4), "fp8", "E2M1")
    with pytest.raises(TypeError, match="float16, float32 or float64 array"):
        fp8.fake_quantize(np.ones(4, np.int32), "fp8")
    with pytest.raises(ValueError, match="0-d array"):
        fp8.fake_quantize(np.float32(1), "mxfp8")
    with pytest.raises(TypeError, match="needs a Module"):
        fp8.apply_recipe([nn.Linear(2, 2, rng=np.random.default_rng(0))], "fp8")
    layer = nn.Linear(8, 4, rng=np.random.default_rng(0))
    fp8.apply_recipe(layer, "fp8")
    with pytest.raises(ValueError, match="in_features=8"):
        layer(Tensor(np.ones((3, 5))))


@pytest.mark.parametrize("recipe", ["fp8", "mxfp8"])
def test_later_casts_never_overwrite_a_live_graph(recipe):
    """Cast points reuse their output arrays only once nothing else holds them: a graph kept
    alive still backpropagates through its own quantised operands after later steps."""
    rng = np.random.default_rng(6)
    layer = nn.Linear(64, 32, rng=rng)
    fp8.apply_recipe(layer, recipe)
    x1, x2 = (rng.standard_normal((32, 64)) * scale for scale in (1.0, 300.0))
    grad = rng.standard_normal((32, 32))
    kept = layer(Tensor(x1))
    kept.backward(grad)
    expected = layer.weight.grad.copy()
    for _ in range(2):  # later steps at the same cast point
        layer.zero_grad()
        layer(Tensor(x2)).backward(grad)
    layer.zero_grad()
    kept.backward(grad)
    assert_same(layer.weight.grad, expected)


def test_cast_points_reuse_an_output_array_once_no_graph_holds_it():
    """The reuse test counts references; what an unshared array counts is measured on the running
    interpreter (fp8._UNSHARED_REFERENCE_COUNT), so that a Python that counts one fewer (3.14
    borrows locals) neither overwrites a live graph's array nor stops reusing."""
    rng = np.random.default_rng(7)
    layer = nn.Linear(16, 8, rng=rng)
    state = fp8.apply_recipe(layer, "fp8")
    (point,) = state.points.values()
    x = Tensor(rng.standard_normal((4, 16)))
    import weakref

    layer(x).sum().backward()
    first = weakref.ref(point._outputs["x"])  # (a reference of its own would block the reuse)
    layer(x).sum().backward()  # the first graph is gone: its array is taken again
    assert point._outputs["x"] is first()
    kept = layer(x)  # a live graph holds it now: the next cast gets a new one
    layer(x)
    assert point._outputs["x"] is not first() and kept.data.shape == (4, 8)


def test_determinism_and_thread_count(monkeypatch):
    """Same seeds, same bits: across runs, and for any number of cast threads (3 and 4 whatever the
    machine's count: a mutation audit found a slab placement wrong from 3 threads on, which this test
    missed on 2 cores, where CAST_THREADS is 2)."""
    monkeypatch.setattr(fastcast, "_CHUNK_ELEMENTS", 4096)  # many slices per tensor
    results = []
    for threads in (fastcast.CAST_THREADS, 1, 3, 4, fastcast.CAST_THREADS):
        previous, fastcast.CAST_THREADS = fastcast.CAST_THREADS, threads
        try:
            rng = np.random.default_rng(12)
            model = small_model(rng)
            state = fp8.apply_recipe(model, "mxfp8")
            grads = run(model, rng.standard_normal((4, 512, 32)) * 100, rng.standard_normal((4, 512, 32)))
            results.append((grads, {(p, r): s for p, point in state.points.items() for r, s in point.stats.items()}))
        finally:
            fastcast.CAST_THREADS = previous
    for grads, stats in results[1:]:
        for a, b in zip(grads, results[0][0]):
            assert_same(a, b)
        assert stats == results[0][1]


def test_filled_arrays_are_read_only_and_few():
    """`fastcast._filled` (the constant operand of a whole per-tensor cast's maximum): the value at
    every element, never writable, and no more than `_FILLED_VALUES` values kept per thread however
    many a run asks for (a block cast of one tile asks for its scale's)."""
    array = fastcast._filled(np.uint32(0x4B40_0000))
    assert array.dtype == np.uint32 and array.shape == (fastcast._FILLED_SIZE,) and (array == 0x4B40_0000).all()
    assert not array.flags.writeable
    assert fastcast._filled(np.uint32(0x4B40_0000)) is array  # reused, not refilled
    for value in range(3 * fastcast._FILLED_VALUES):
        assert (fastcast._filled(np.uint32(value)) == value).all()
    assert len(fastcast._work.filled) <= fastcast._FILLED_VALUES


def test_maximum_with_a_value_at_every_size():
    """`fastcast._maximum_with`: ``np.maximum(array, value)`` for sizes below, at, between and above
    multiples of `_FILLED_SIZE` (whole rows and a rest), in place too."""
    rng = np.random.default_rng(3)
    block = fastcast._FILLED_SIZE
    for size in (0, 1, block - 1, block, block + 1, 3 * block, 3 * block + 17):
        array = rng.integers(0, 2**32, size, dtype=np.uint32)
        value = np.uint32(2**31)
        out = np.empty_like(array)
        fastcast._maximum_with(array, value, out)
        assert np.array_equal(out, np.maximum(array, value))
        fastcast._maximum_with(array, value, array)
        assert np.array_equal(array, out)


def test_true_positions_are_flatnonzero_at_every_density():
    """`fastcast._true_positions` (the positions of a cast's marked elements, through NumPy's search
    or, with the tail of Trues, its loop): ``np.flatnonzero`` of the marks, at densities on both
    sides of `_SEARCHED_FRACTION` and of NumPy's 10%, with the count given and counted, for
    sizes that the tail's ``size // 9 + 1`` rounds differently."""
    rng = np.random.default_rng(7)
    for size in (1, 8, 9, 100, 4095, 65536):
        for fraction in (0.0, 0.01, fastcast._SEARCHED_FRACTION, 0.07, 0.1, 0.11, 0.5, 1.0):
            marks = fastcast._marks(size)
            assert marks.size == size + size // 9 + 1
            marks[:] = rng.random(marks.size) < fraction  # (the room after the marks holds anything)
            expected = np.flatnonzero(marks[:size])
            for count in (expected.size, None):
                positions = fastcast._true_positions(marks, size, count)
                assert positions.dtype == np.intp and np.array_equal(positions, expected)


# ================================================================================================
# Scale tracking
# ================================================================================================
def test_track_records_std_and_mean_abs_of_value_and_gradient():
    data = np.array([[1.0, -1.0], [3.0, -3.0]])  # std sqrt(5) (population), mean |x| 2
    x = Tensor(data, requires_grad=True)
    assert fp8.track("x", x) is x  # no tracker: the tensor itself, no graph node
    with fp8.ScaleTracker() as tracker:
        y = fp8.track("x", x)
        z = fp8.track("x", y * 2.0)  # the same name again gets a suffix
        constant = fp8.track("constant", Tensor(data))  # no gradient flows: backward stays None
    (z * Tensor(np.array([[0.5, 0.5], [-0.5, 4.5]]))).sum().backward()  # after the context: still recorded
    first, second = tracker.records["x"], tracker.records["x#2"]
    assert list(tracker.records) == ["x", "x#2", "constant"]
    assert [fp8.ScaleTracker.record_name("x", occurrence) for occurrence in (1, 2)] == ["x", "x#2"]
    for bad, error in ((0, ValueError), (-3, ValueError), ("2", TypeError)):  # ('x#0', a key that never exists)
        with pytest.raises(error, match="record_name: occurrence"):
            fp8.ScaleTracker.record_name("x", bad)
    assert first.forward_std == pytest.approx(np.sqrt(5), rel=1e-12) and first.forward_mean_abs == 2
    assert second.forward_std == pytest.approx(2 * np.sqrt(5), rel=1e-12) and second.forward_mean_abs == 4
    # dz = [[.5, .5], [-.5, 4.5]]: mean 1.25, deviations -.75, -.75, -1.75, 3.25, so the std is
    # sqrt((.5625 + .5625 + 3.0625 + 10.5625) / 4) = sqrt(3.6875); mean |dz| = 6 / 4 = 1.5
    assert second.backward_std == pytest.approx(np.sqrt(3.6875), rel=1e-12) and second.backward_mean_abs == 1.5
    assert first.backward_std == pytest.approx(2 * np.sqrt(3.6875), rel=1e-12) and first.backward_mean_abs == 3
    assert tracker.records["constant"].backward_std is None and constant.requires_grad is False
    np.testing.assert_array_equal(x.grad, 2 * np.array([[0.5, 0.5], [-0.5, 4.5]]))  # identity op
    assert fp8.track("x", x) is x  # the context has exited


def test_track_records_the_share_every_position_shares():
    """forward_shared_fraction: the mean square of the mean over every axis but the last, over the
    mean square. A shared vector plus per-position parts that cancel over the positions: the
    vector's mean square over the vector's plus the parts'. A 1-D or 0-d tensor is one position."""
    rng = np.random.default_rng(0)
    shared = np.array([3.0, -1.0, 0.5, 2.0])  # mean square (9 + 1 + .25 + 4) / 4 = 3.5625
    parts = 10 * rng.standard_normal((3, 5, 4))
    data = shared + np.concatenate([parts, -parts])  # (6, 5, 4): the parts cancel over 30 positions
    expected = 3.5625 / (3.5625 + np.mean(parts**2))  # (the cross terms cancel with the parts)
    with fp8.ScaleTracker() as tracker:
        with default_dtype(np.float64):
            fp8.track("positions", Tensor(data))
            fp8.track("transposed", Tensor(data.transpose(1, 0, 2)))  # (a non-contiguous view)
            fp8.track("one position", Tensor(shared))
            fp8.track("scalar", Tensor(np.array(-2.5)))
            fp8.track("opposed", Tensor(np.stack([shared, -shared])))  # mean 0: nothing shared
        fp8.track("float32", Tensor(np.array([[1.0, -1.0], [3.0, -3.0]], np.float32)))
        fp8.track("zeros", Tensor(np.zeros((3, 4), np.float32)))
    records = tracker.records
    assert 0.02 < expected < 0.05
    assert records["positions"].forward_shared_fraction == pytest.approx(expected, rel=1e-12)
    assert records["transposed"].forward_shared_fraction == pytest.approx(expected, rel=1e-12)
    assert records["one position"].forward_shared_fraction == 1.0 == records["scalar"].forward_shared_fraction
    assert records["opposed"].forward_shared_fraction == 0.0
    assert records["float32"].forward_shared_fraction == 0.8  # mean row (2, -2): 4 of a mean square of 5
    assert isinstance(records["float32"].forward_shared_fraction, float)
    assert math.isnan(records["zeros"].forward_shared_fraction)  # (no mean square to share)


def test_track_gradcheck():
    """track is the identity both ways: float64 central differences, alone and inside a graph."""
    x = Tensor(np.random.default_rng(3).standard_normal((3, 4)), requires_grad=True)
    with fp8.ScaleTracker() as tracker:
        gradcheck(lambda t: fp8.track("x", t), x)
        gradcheck(lambda t: fp8.track("y", t * t).tanh() * fp8.track("z", t), x)
    assert tracker.records["y"].backward_std is not None  # the gradient went through track's backward


def test_scale_plot_rows():
    pytest.importorskip("matplotlib")
    from minifp8 import plots

    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((64, 32)), requires_grad=True)
    with fp8.ScaleTracker() as tracker:
        h = fp8.track("input", x)
        h = fp8.track("scaled down", h * 1e-4)
        h = fp8.track("zero", h * 0.0)
    h.sum().backward()
    figure = plots.scale_plot(tracker.records, title="test")
    ax = figure.axes[0]
    assert [label.get_text() for label in ax.get_yticklabels()] == ["input", "scaled down", "zero"]
    assert ax.get_title() == "test"
    assert plots.scale_plot(tracker).axes[0].get_yticklabels()[0].get_text() == "input"


# ================================================================================================
# The pair cast
# ================================================================================================
@pytest.mark.parametrize("recipe, scale_mode", [("mxfp8", "floor"), ("mxfp8", "ceil"), ("mxfp8", "rceil"), ("blockwise", None)])
@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("shape", [(256, 384), (1024, 64), (192, 64), (1024, 14), (600, 500)])
def test_rowwise_and_columnwise_pair_equals_two_casts(recipe, scale_mode, fmt, shape):
    """The pair cast of a GEMM operand (`fastcast.cast_pair`, which shares the rounding of the normal
    range between the two copies) gives each copy's values and statistics exactly as its own cast
    (`fastcast.cast`) does, or declines (the table path forced, NaN blocks), leaving them to it. The
    1e30 element makes one tile's normal range lie far above all others'. 600 x 500 is cast in
    slabs, with partial blocks and tiles along both axes."""
    rng = rng_for(recipe, fmt, shape)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-3, 4, (shape[0], 1)))).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, 40, replace=False)] = rng.choice(midpoints(fmt), 40) * 2.0**-4
    x[0, :3] = [0.0, -0.0, 1e30]  # zeros, and an element that overflows
    fmt_ = formats.get(fmt)
    options = fp8._recipe_options(recipe, {} if scale_mode is None else {"scale_mode": scale_mode})
    pair = fastcast.cast_pair(x, recipe, options, fmt_)
    assert (pair is None) == (x.size < fastcast._IN_RANGE_MIN_SIZE)  # padded blocks and the outlier tile too
    for axis, cast in zip((-1, 0), pair or []):
        values, stats = fastcast.cast(x, recipe, options, fmt_, axis, False, None)
        assert_same(cast[0], values)
        if recipe == "mxfp8":
            assert_same(cast[0], mx.quantize(x, "MXFP8_" + fmt, axis=axis, scale_mode=scale_mode).dequantize())
        else:
            assert_same(cast[0], reference(x, recipe, fmt, axis))
        assert cast[1] == stats
    if recipe == "mxfp8" and pair is not None:
        x[5, 7] = np.nan
        assert fastcast.cast_pair(x, recipe, options, fmt_) is None


@pytest.mark.parametrize("recipe, scale_mode", [("mxfp8", "floor"), ("mxfp8", "ceil"), ("mxfp8", "rceil"), ("blockwise", None)])
@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_block_casts_with_many_elements_below_the_range(recipe, scale_mode, fmt, cast_path, monkeypatch):
    """A tensor like a GELU output late in training: a third of it far below its tiles' normal
    ranges (by default cast whole, `fastcast._cast_in_tiles`), with ties on the
    subnormal grids, an all-zero block of both signs, float32 subnormals; in a second tensor, a
    tile of tiny nonzero values whose bound is raised to 2**-126 (there blockwise, and MX under
    ceil and rceil, cast the tensor whole and those tiles again, through the table; under MX
    floor, whose blocks may saturate, the whole cast declines, and the one by one cast takes the
    tensor where forced to, every element below the largest block's bound through the table,
    saturating ones too; by default it declines too: too many elements to fix); in a third, 60%
    zeros with few elements to fix, which the search leaves out. Each copy of the pair equals its
    reference, and its statistics the single cast's and a count from the references' scaled
    inputs."""
    fixes = []
    cast_in_tiles = fastcast._cast_in_tiles
    monkeypatch.setattr(fastcast, "_cast_in_tiles", lambda *args: fixes.append(args[3]) or cast_in_tiles(*args))
    rng = rng_for(recipe, fmt)
    x = rng.standard_normal((256, 384)).astype(np.float32)
    tiny = rng.random(x.shape) < 1 / 3
    x[tiny] *= np.float32(2.0**-18 if fmt == "E4M3" else 2.0**-34)
    ties = rng.choice(x.size, 64, replace=False)
    x.reshape(-1)[ties] = rng.choice(midpoints(fmt)[:8], 64) * np.float32(2.0**-8 if fmt == "E4M3" else 2.0**-16)
    x[:32, :32] = 0.0
    x[3:9, 5:20] = -0.0
    x[100, 200:210] = np.float32(1e-40)  # float32 subnormals
    raised = x.copy()
    raised[64:96, 128:256] = rng.standard_normal((32, 128)).astype(np.float32) * np.float32(1e-36)
    # The amax of its blocks along both axes, their bounds still raised: under MX floor, beyond max's
    # rounding interval once scaled (its shared exponent, 2**-125 or 2**-115, not clamped at 2**-127).
    raised[70, 140] = np.float32(1.9 * 2.0**(-117 if fmt == "E4M3" else -100))
    zeros = np.where(rng.random(x.shape) < 0.6, np.float32(0), x)  # mostly zeros, few to fix
    zeros[tiny] = np.where(rng.random(x.shape) < 0.05, x, 0)[tiny]
    fmt_ = formats.get(fmt)
    options = fp8._recipe_options(recipe, {} if scale_mode is None else {"scale_mode": scale_mode})
    # (tensor, cast whole by default, cast whole where forced, declined by the one by one cast);
    # tiles of tiny values are cast again where no tile can saturate (blockwise, and MX under ceil and rceil)
    raised_whole = recipe == "blockwise" or scale_mode in ("ceil", "rceil")
    for tensor, by_default, where_forced, too_many in ((x, True, True, True), (raised, raised_whole, raised_whole, True),
                                                       (zeros, False, True, False)):
        fixes.clear()
        pair = fastcast.cast_pair(tensor, recipe, options, fmt_)
        whole = by_default if cast_path == "default" else where_forced if cast_path == "dense" else False
        assert bool(fixes) == whole
        assert (pair is None) == (cast_path == "table" or (too_many and not whole and cast_path in ("default", "dense")))
        singles = [fastcast.cast(tensor, recipe, options, fmt_, axis, False, None) for axis in (-1, 0)]
        for axis, (values, stats), single in zip((-1, 0), pair or singles, singles):
            if recipe == "mxfp8":
                assert_same(values, mx.quantize(tensor, "MXFP8_" + fmt, axis=axis, scale_mode=scale_mode).dequantize())
            else:
                assert_same(values, reference(tensor, recipe, fmt, axis))
            assert stats == single[1]
            assert stats.underflow_count == np.count_nonzero((values == 0) & (tensor != 0)) > 0
            saturated = np.count_nonzero(beyond_max(reference_scaled(tensor, recipe, fmt, axis, scale_mode), fmt))
            assert stats.saturation_count == saturated
            assert (saturated > 0) == (scale_mode == "floor")


def reference_scaled(x, recipe, fmt, axis, scale_mode=None):
    """The scaled inputs of a block cast's reference: x times its block's ``2**-shared_exp``
    (mx.quantize, float64, exact), or times its tile's scale in float32 (scaling.quantize_blockwise,
    1x128 tiles)."""
    if recipe == "mxfp8":
        return mx_scaled(x, mx.quantize(x, "MXFP8_" + fmt, axis=axis, scale_mode=scale_mode), axis)
    quantized = scaling.quantize_blockwise(x, fmt, block_shape=(1, 128), axis=axis)
    return np.multiply(x, expand(quantized.scale, x.shape, (1, 128), axis), dtype=np.float32)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_blockwise_tiles_of_tiny_values_in_partial_tiles_are_cast_again_exactly(fmt):
    """Partial 1x128 tiles along both axes (200 x 300), a fifth of the tensor far below its tiles'
    ranges (so blockwise casts it whole by default), and rows of tiny values from the middle of a
    tile on, float32 subnormals among them: their tiles' bounds are raised to 2**-126 and cast
    again through the table (`fastcast._recast_raised_tiles`). Values and statistics as the
    references."""
    rng = np.random.default_rng(7 if fmt == "E4M3" else 8)
    x = rng.standard_normal((200, 300)).astype(np.float32)
    tiny = rng.random(x.shape) < 0.2
    x[tiny] *= np.float32(2.0**-18 if fmt == "E4M3" else 2.0**-34)
    x[150:170, 140:] = rng.standard_normal((20, 160)).astype(np.float32) * np.float32(1e-37)
    x[151, 140:145] = np.float32(1e-41)
    options, fmt_ = fp8._recipe_options("blockwise", {}), formats.get(fmt)
    pair = fastcast.cast_pair(x, "blockwise", options, fmt_)
    singles = [fastcast.cast(x, "blockwise", options, fmt_, axis, False, None) for axis in (-1, 0)]
    for axis, (values, stats), single in zip((-1, 0), pair or singles, singles):
        assert_same(values, reference(x, "blockwise", fmt, axis))
        assert stats == single[1] and stats.underflow_count == np.count_nonzero((values == 0) & (x != 0))


@pytest.mark.parametrize("scale_mode", mx.SCALE_MODES)
@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_mx_special_values_in_every_scale_mode(scale_mode, fmt):
    """NaN and +-Inf blocks under each MX scale rule: a NaN block is all NaN; rceil gives an Inf
    block the largest scale (0xFE), where Inf saturates to max and dequantizes to Inf, and the
    other rules give it 0xFF (all NaN). Along both axes, against mx.quantize."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    x[3, 5], x[10, 100], x[20, 7], x[40, 64] = np.nan, np.inf, -np.inf, 1e30
    for axis in (-1, 0):
        values, stats = fp8.fake_quantize(x, "mxfp8", fmt, axis=axis, scale_mode=scale_mode)
        quantized = mx.quantize(x, "MXFP8_" + fmt, axis=axis, scale_mode=scale_mode)
        assert_same(values, quantized.dequantize())
        assert np.isnan(stats.amax)
        if scale_mode == "rceil":  # the Inf elements saturate (counted), their block stays finite elsewhere
            assert np.isinf(values[10, 100]) and np.isinf(values[20, 7])
            assert np.isfinite(values[11, 100]) and np.isfinite(values[21, 7])


@pytest.mark.parametrize("axis", [-1, 0])
def test_a_partial_tile_takes_its_amax_from_its_own_elements(axis):
    """The last 1x128 tile of a 192-long row holds 64 elements: its amax, and so its scale, comes
    from them alone, though the tensor's largest element lies at position 0, where the missing
    elements of a partial tile are read."""
    x = np.full((512, 192), 2.0**9, np.float32)
    x[0, 0] = 2.0**10
    x[1, 128:] = 2.0**-6  # one partial tile of small elements: the only ones to check
    x[1, 150] = 1.125 * 2.0**-18  # scale 2**14 in its tile: 1.125 * 2**-4, normal; under 2**10's: 0
    x = x if axis == -1 else x.T.copy()
    values, stats = fp8.fake_quantize(x, "blockwise", "E4M3", axis=axis)
    assert_same(values, reference(x, "blockwise", "E4M3", axis))
    assert values[(1, 150) if axis == -1 else (150, 1)] == np.float32(1.125 * 2.0**-18)
    assert stats.underflow_count == 0


@pytest.mark.parametrize("recipe", ["current", "delayed"])
def test_a_product_that_underflows_to_zero_counts(recipe):
    """A scale below 1 can take a nonzero input to zero before the cast (float32 underflow): that
    element underflowed, where a zero input did not. (2**3 lands among E4M3's subnormals, so that
    the whole-tensor cast, where forced, takes this tensor.)"""
    x = np.array([2.0**20, 1e-44, 0.0, -0.0, 2.0**10, 2.0**3], np.float32)  # current: scale 448 / 2**20
    scaler = None
    if recipe == "delayed":  # the history holds amax 2**20
        scaler = scaling.DelayedScaling("E4M3", history_len=2)
        scaler.quantize(np.array([2.0**20], np.float32))
    expected = reference(x, recipe, "E4M3", scaler=copy.deepcopy(scaler))
    values, stats = fp8.fake_quantize(x, recipe, "E4M3", scaler=scaler)
    assert_same(values, expected)
    assert values[1] == 0 and values[5] != 0 and stats.underflow_count == 1


@pytest.mark.parametrize("recipe", ["mxfp8", "blockwise"])
def test_an_outlier_tile_keeps_its_own_underflow(recipe):
    """One tile a million times larger than the rest (an outlier row): its normal range lies far
    above every other tile's, so its small elements are searched on their own; they underflow in
    it, where everywhere else the same values would be cast normally."""
    rng = np.random.default_rng(23)
    x = (rng.uniform(1, 2, (256, 128)) * rng.choice([-1, 1], (256, 128))).astype(np.float32)  # nothing small
    x[7] *= 1e6
    x[7, 3] = 1e-3  # below the outlier tile's normal range: underflows to 0
    for axis in (-1, 0):
        values, stats = fp8.fake_quantize(x, recipe, "E4M3", axis=axis)
        assert_same(values, reference(x, recipe, "E4M3", axis))
        if axis == -1:  # the row is the tile
            assert values[7, 3] == 0 and stats.underflow_count >= 1


def test_an_outlier_partial_tile_searches_only_its_own_elements():
    """A partial 1x128 tile (64 elements) a million times larger than the rest, searched on its own
    (the "outliers" path): the missing elements of the tile are not elements, though position 0,
    where they are read, holds a value that would lie below the tile's normal range."""
    rng = np.random.default_rng(31)
    x = (rng.uniform(1, 2, (256, 192)) * rng.choice([-1, 1], (256, 192))).astype(np.float32)
    x[7, 128:] *= 1e6
    x[0, 0] = 1.3  # cast in its own tile: 1.25; at the outlier tile's scale it would be 0
    values, stats = fp8.fake_quantize(x, "blockwise", "E4M3")
    assert_same(values, reference(x, "blockwise", "E4M3"))
    assert values[0, 0] == 1.25 and stats.underflow_count == 0


@pytest.mark.parametrize("recipe", ["mxfp8", "blockwise"])
def test_a_pair_with_nothing_to_fix_is_one_array(recipe, cast_path):
    """Magnitudes within [1, 1.75] sit in the normal range of every tile and below max once scaled,
    so neither copy has an element to fix: both are the rounded tensor (one array; the table
    path casts them one by one), each equal to its reference, with nothing underflowed or saturated."""
    rng = np.random.default_rng(29)
    x = (rng.uniform(1, 1.75, (256, 128)) * rng.choice([-1, 1], (256, 128))).astype(np.float32)
    x[:, 0] = 1.75  # every block's amax 1.75: E4M3 MX scales it to 448, max itself
    options = fp8._recipe_options(recipe, {})
    pair = fastcast.cast_pair(x, recipe, options, formats.E4M3)
    if cast_path == "table":
        assert pair is None
        pair = [fastcast.cast(x, recipe, options, formats.E4M3, axis, False, None) for axis in (-1, 0)]
    else:
        assert pair[0][0] is pair[1][0]
    for axis, (values, stats) in zip((-1, 0), pair):
        assert_same(values, reference(x, recipe, "E4M3", axis))
        assert (stats.underflow_count, stats.saturation_count, stats.amax) == (0, 0, 1.75)


# ================================================================================================
# Misuse: clear errors, and nothing changed by a call that raises.
# ================================================================================================
def bits_equal(a, b):
    """Same dtype, shape and bytes (NaN payloads and signs of zero included)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def delayed_state_after_two_steps(history_len=3):
    rng = np.random.default_rng(12)
    model = nn.Sequential(nn.Linear(16, 8, rng=rng), nn.GELU(), nn.Linear(8, 4, rng=rng))
    state = fp8.apply_recipe(model, "delayed", history_len=history_len)
    for _ in range(2):
        model(Tensor(rng.standard_normal((5, 16)))).backward(np.ones((5, 4), np.float32))
        state.step()
    return state


def test_fp8_state_load_state_dict_checks_everything_before_loading_anything():
    saved = delayed_state_after_two_steps().state_dict()
    state = fp8.apply_recipe(nn.Sequential(nn.Linear(16, 8, rng=np.random.default_rng(0)), nn.GELU(),
                                           nn.Linear(8, 4, rng=np.random.default_rng(1))), "delayed", history_len=3)
    untouched = state.state_dict()
    last = sorted(key for key in saved if key.endswith(".amax_history"))[-1]  # checked after the others
    prefix = last[:-len("amax_history")]
    for key, value, error, message in [
            (last, np.zeros(5, np.float32), ValueError, r"amax_history has shape \(5,\), expected \(3,\)"),
            (last, np.array(["a", "b", "c"]), TypeError, "amax_history must be a floating array, got dtype <U1"),
            (last, np.array([1.0, -2.0, 0.0], np.float32), ValueError, "amax_history holds a negative amax"),
            # (a review's find: a finite float64 beyond float32's range became an Inf amax, one below it 0)
            (last, np.array([1e39, 0.0, 0.0]), ValueError, r"amax_history holds 1e\+39, which float32 cannot hold"),
            (last, np.array([1e-50, 0.0, 0.0]), ValueError, r"amax_history holds 1e-50, which float32 cannot hold"),
            (prefix + "scale", np.float64(1e39), ValueError, r"scale holds 1e\+39, which float32 cannot hold"),
            (prefix + "scale", np.array([1.0, 2.0], np.float32), ValueError, r"scale has shape \(2,\), expected \(\)"),
            (prefix + "scale", np.float32(np.nan), ValueError, "scale must be finite and > 0, got nan"),
            (prefix + "scale_inv", np.float32(-1.0), ValueError, "scale_inv must be finite and > 0, got -1.0"),
            # the casts use 1 / scale, DelayedScaling's reference its scale_inv: one that is not
            # 1 / scale made them disagree by four orders of magnitude (an audit's find)
            (prefix + "scale_inv", np.float32(123.0), ValueError, r"scale_inv must be float32\(1 / scale\)"),
            ("options.margin", np.array(1), ValueError, "the state is for delayed with margin=1, this model uses margin=0"),
            ("options.amax_compute_algo", np.array("most_recent"), ValueError, "amax_compute_algo='most_recent'"),
            ("options.saturate_gradients", np.array(0), ValueError, "saturate_gradients=0, this model uses .*=True"),
            ("options.history_len", np.array([3]), ValueError, r"history_len=array\(\[3\]\)"),
            ("steps", np.array(2.7), ValueError, r"steps must be an integer in \[0, 2\*\*63\)"),
            ("steps", np.array(-1), ValueError, r"steps must be an integer in \[0, 2\*\*63\)"),
            ("steps", np.array(2**63, np.uint64), ValueError, r"steps must be an integer in \[0, 2\*\*63\)"),
            ("steps", np.array([1, 2]), ValueError, r"steps must be an integer in \[0, 2\*\*63\)")]:
        with pytest.raises(error, match=message):
            state.load_state_dict({**saved, key: value})
        now = state.state_dict()
        assert now.keys() == untouched.keys() and all(bits_equal(now[k], untouched[k]) for k in now), key
    with pytest.raises(TypeError, match="mapping"):
        state.load_state_dict(None)
    state.load_state_dict(saved)  # the valid state still loads
    assert state.steps == 2 and all(bits_equal(state.state_dict()[k], saved[k]) for k in saved)


def test_apply_recipe_option_of_the_wrong_type_is_a_type_error():
    """As the Raises section says: a value of the wrong type is a TypeError, a bad value of the
    right type a ValueError."""
    model = small_model(np.random.default_rng(0))
    for recipe, options, message in [("delayed", {"history_len": 2.0}, "history_len must be an int, got float 2.0"),
                                     ("delayed", {"margin": True}, "margin must be an int, got bool True"),
                                     ("delayed", {"amax_compute_algo": ["max"]}, "amax_compute_algo must be a str"),
                                     ("mxfp8", {"scale_mode": None}, "scale_mode must be a str, got NoneType"),
                                     ("blockwise", {"power_of_2": 1}, "power_of_2 must be a bool, got int 1")]:
        with pytest.raises(TypeError, match=message):
            fp8.apply_recipe(model, recipe, **options)
    with pytest.raises(ValueError, match="amax_compute_algo"):
        fp8.apply_recipe(model, "delayed", amax_compute_algo="mean")
    state = fp8.apply_recipe(model, "delayed", history_len=np.int64(4), margin=np.int32(1))
    assert state.points["layers.0"].scalers["x"].history_len == 4


def test_apply_recipe_to_a_model_without_linears_or_attention_is_an_error():
    """Nothing would be cast: training would silently stay in float32."""
    with pytest.raises(ValueError, match="no linear .* or attention core"):
        fp8.apply_recipe(nn.Sequential(nn.GELU(), nn.LayerNorm(4)), "current")
    assert fp8.apply_recipe(nn.Sequential(nn.GELU()), "fp32").points == {}  # fp32 casts nothing anyway


def test_fake_quantize_rejects_ill_typed_arguments():
    x = np.ones((4, 256), np.float32)
    with pytest.raises(TypeError, match="axis must be an int, got float 1.0"):
        fp8.fake_quantize(x, "mxfp8", axis=1.0)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        fp8.fake_quantize(x, "blockwise", axis=2)
    with pytest.raises(TypeError, match="weight must be a bool, got str 'no'"):
        fp8.fake_quantize(x, "blockwise", weight="no")  # (a truthy str would have meant 128x128 tiles)
    with pytest.raises(ValueError, match=r"128x128 weight tiles need a 2-d array, got shape \(2, 2, 256\)"):
        fp8.fake_quantize(x.reshape(2, 2, 256), "blockwise", weight=True)  # (an internal TypeError when unchecked)
    # found by a review: weight=True was ignored by every recipe but blockwise, whose tiles it chooses
    for recipe in (r for r in fp8.RECIPES if r != "blockwise"):
        with pytest.raises(ValueError, match=f"weight=True .* recipe 'blockwise' only, got recipe '{recipe}'"):
            fp8.fake_quantize(x, recipe, weight=np.bool_(True))
        if recipe not in ("fp32", "delayed"):  # (the identity; one that needs a scaler)
            assert_same(fp8.fake_quantize(x * 1.3, recipe, weight=False)[0], reference(x * 1.3, recipe, "E4M3"))
    with pytest.raises(TypeError, match="scaler is only used by recipe 'delayed'"):
        fp8.fake_quantize(x, "current", scaler=scaling.DelayedScaling("E4M3"))
    # found by an audit: the scaler's own options were accepted and ignored (the scaler kept margin 0)
    scaler = scaling.DelayedScaling("E4M3")
    with pytest.raises(TypeError, match=r"takes no history_len, margin; set them on the scaler: "
                                        r"scaler=scaling.DelayedScaling\(fmt, history_len=..., margin=...\)"):
        fp8.fake_quantize(x, "delayed", scaler=scaler, margin=5, history_len=3)
    assert scaler.margin == 0 and not scaler.amax_history.any()  # refused before anything was recorded
    with pytest.raises(TypeError, match="takes no amax_compute_algo"):
        fp8.fake_quantize(x, "delayed", amax_compute_algo="most_recent")
    values, _ = fp8.fake_quantize(x, "blockwise", axis=np.int64(0), weight=np.bool_(False))
    assert_same(values, reference(x, "blockwise", "E4M3", axis=0))
    # per-tensor recipes do not use the axis, but took any (the Raises section promises an error)
    for recipe in ("fp32", "fp8", "current"):
        with pytest.raises(TypeError, match="axis must be an int, got str 'a'"):
            fp8.fake_quantize(x, recipe, axis="a")
        with pytest.raises(ValueError, match="axis 7 is out of range"):
            fp8.fake_quantize(x, recipe, axis=7)
    with pytest.raises(TypeError, match="axis must be an int, got float 1.5"):
        fp8.fake_quantize(np.float32(2.0), "fp8", axis=1.5)
    assert fp8.fake_quantize(np.float32(2.0), "fp8", axis=3)[0] == 2.0  # a 0-d tensor has no axis to check


@pytest.mark.parametrize("recipe", [r for r in fp8.RECIPES if r != "fp32"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_amax_of_signed_zeros_is_plus_zero(recipe, dtype):
    """amax is max|x|: +0.0 for a tensor of zeros, whatever their signs (its sign is not the input's)."""
    options = {"scaler": scaling.DelayedScaling("E4M3")} if recipe == "delayed" else {}
    _, stats = fp8.fake_quantize(np.array([[-0.0, -0.0], [-0.0, 0.0]], dtype), recipe, **options)
    assert stats.amax == 0 and math.copysign(1.0, stats.amax) == 1.0


# ---- found in a review of fp8.py: each failed before its fix ------------------------------------------
class _FusedAttention(nn.Module):
    """A qkv projection and an attention core in one module: two hooks, two cast points."""

    def __init__(self, d, rng):
        self.weight = nn.Parameter(rng.standard_normal((3 * d, d)) * 0.1)
        self.gemm, self.attention_core = F.linear, F.scaled_dot_product_attention

    def forward(self, x):
        d = x.shape[-1]
        qkv = self.gemm(x, self.weight, None)
        return self.attention_core(qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:], True)


def test_a_module_with_a_gemm_and_an_attention_core_keeps_both_cast_points():
    rng = np.random.default_rng(0)
    model = _FusedAttention(16, rng)
    state = fp8.apply_recipe(model, "delayed")
    assert sorted(state.points) == ["_FusedAttention", "_FusedAttention.attention_core"]
    x = Tensor(rng.standard_normal((1, 8, 16)) * 1000)
    for _ in range(3):
        model(x).sum().backward()
        state.step()
    gemm = state.points["_FusedAttention"]
    assert gemm.scalers["x"].scale != 1.0  # its history advanced: the scale follows x's amax
    assert any(key.startswith("_FusedAttention.x.") for key in state.state_dict())


def test_a_module_named_options_round_trips_through_state_dict():
    """The recipe's options are saved as "options.<name>"; a module called "options" has keys of
    the same prefix, which must still be checked and loaded."""
    class Net(nn.Module):
        def __init__(self, rng):
            self.proj, self.options = nn.Linear(8, 8, rng=rng), nn.Linear(8, 4, rng=rng)

        def forward(self, x):
            return self.options(self.proj(x))

    rng = np.random.default_rng(0)
    trained = Net(rng)
    state = fp8.apply_recipe(trained, "delayed", history_len=4)
    for _ in range(2):
        trained(Tensor(rng.standard_normal((3, 8)))).sum().backward()
        state.step()
    saved = state.state_dict()
    fresh = fp8.apply_recipe(Net(np.random.default_rng(1)), "delayed", history_len=4)
    fresh.load_state_dict(saved)
    assert all(bits_equal(fresh.state_dict()[key], saved[key]) for key in saved)


def test_fake_quantize_names_itself_in_option_errors():
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="^fake_quantize: recipe 'current' takes the options"):
        fp8.fake_quantize(x, "current", margin=1)
    with pytest.raises(TypeError, match="^fake_quantize: power_of_2 must be a bool"):
        fp8.fake_quantize(x, "current", power_of_2=1)
    with pytest.raises(ValueError, match="^fake_quantize: unknown scale_mode 'round'"):
        fp8.fake_quantize(x.reshape(1, 4), "mxfp8", scale_mode="round")


@pytest.mark.parametrize("algo, held_steps", [("max", 4), ("most_recent", 1)])
def test_an_overflowing_gradient_cast_holds_the_delayed_scales_below_it(algo, held_steps):
    """Documents (fp8.py, scaling.DelayedScaler) what a review found undocumented: with non-saturating
    E5M2 gradient casts, one cast that overflows sends its Inf down to the cast below it, which
    records an Inf amax and holds its old scale while the Inf stays in its history: history_len steps
    under "max", one under "most_recent". (Behaviour unchanged: TransformerEngine's rule.)"""
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(8, 8, rng=rng), nn.Linear(8, 8, rng=rng))
    state = fp8.apply_recipe(model, "delayed", history_len=4, amax_compute_algo=algo, saturate_gradients=False)
    lower = state.points["0"].scalers["grad"]
    x = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    scales, finite = [], []
    for step in range(8):
        gradient = np.full((4, 8), 0.5 if step >= 3 else 1.0, np.float32)  # smaller after the overflow
        gradient[0, 0] = 1e6 if step == 2 else gradient[0, 0]  # the top cast overflows at step 2 alone
        model.zero_grad()
        with np.errstate(invalid="ignore", over="ignore"):  # (Inf times 0 in the backward GEMMs)
            model(x).backward(gradient)
        finite.append(bool(np.isfinite(model[0].weight.grad).all()))
        state.step()
        scales.append(float(lower.scale))
    assert finite == [True, True, False] + [True] * 5
    # the scale after step 2 is held for held_steps steps, then follows the halved gradients (twice the scale)
    assert scales[2:2 + held_steps] == [scales[1]] * held_steps
    assert scales[2 + held_steps] > 1.5 * scales[1]
