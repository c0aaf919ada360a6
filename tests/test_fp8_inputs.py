"""Hostile inputs to the public FP8 casting API (fp8.fake_quantize, fp8.apply_recipe, FP8Linear,
fastcast.cast / cast_pair, fastcast.CAST_THREADS): big-endian, read-only and strided inputs, non-str
recipes, zero-feature layers, block-only helpers given other recipes and ill-typed thread counts.

References: the reference functions of test_fp8.py (codec.quantize, scaling.py, mx.py), applied to a
native-order copy of the input, and functional.linear for the GEMM.
"""
import copy

import numpy as np
import pytest

from minifp8 import fastcast, formats, fp8, nn, scaling
from minifp8 import functional as F
from minifp8.autograd import Tensor
from test_fp8 import RECIPES_WITH_CASTS, assert_same, primed_scaler, reference


def hostile_tensor(rng, shape):
    """Normal values over many binades, with NaN, +-Inf, signed zeros and a float32 subnormal."""
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 12, shape))).astype(np.float32)
    flat = x.reshape(-1)
    flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40]
    return x


@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
@pytest.mark.parametrize("dtype", [">f2", ">f4", ">f8"])
def test_a_big_endian_float_casts_as_its_native_order_copy(recipe, fmt, dtype):
    """'>f4' is a float32 in the other byte order: it casts as the native-order array does (the
    reference functions' values, bit for bit, and the same statistics), views and read-only arrays
    too, and is not written to. (It was a TypeError saying that >f4 is not a float32.)"""
    rng = np.random.default_rng(5)
    native = hostile_tensor(rng, (48, 160)).astype(dtype[1:])
    big = native.astype(dtype)
    big.flags.writeable = False
    before = big.tobytes(), native.tobytes()
    for x, x_native, axis in [(big, native, -1), (big.T, native.T, 0), (big[::3, 7:150:2], native[::3, 7:150:2], -1)]:
        scaler = primed_scaler(fmt) if recipe == "delayed" else None
        native_scaler = copy.deepcopy(scaler)
        reference_scaler = copy.deepcopy(scaler)
        values, stats = fp8.fake_quantize(x, recipe, fmt, axis=axis, scaler=scaler)
        native_values, native_stats = fp8.fake_quantize(x_native, recipe, fmt, axis=axis, scaler=native_scaler)
        assert values.dtype == np.float32 and values.dtype.isnative and values.shape == x.shape
        assert_same(values, native_values)
        if dtype != ">f8" or recipe in ("current", "delayed", "blockwise"):  # (these read float32)
            assert_same(values, reference(x_native.astype(np.float32), recipe, fmt, axis, scaler=reference_scaler))
        assert np.array_equal([*vars(stats).values()], [*vars(native_stats).values()], equal_nan=True)
        if scaler is not None:  # the same amax recorded in the history
            np.testing.assert_array_equal(scaler.amax_history, native_scaler.amax_history)
    assert (big.tobytes(), native.tobytes()) == before


@pytest.mark.parametrize("recipe", ["fp32", "fp8", "current"])
def test_a_big_endian_0d_array_casts_as_its_value(recipe):
    x = np.array(1.3, ">f4")
    values, stats = fp8.fake_quantize(x, recipe)
    expected = np.float32(1.3) if recipe == "fp32" else reference(np.float32(1.3), recipe, "E4M3")
    assert values.shape == () and values.dtype.isnative
    assert_same(values, expected)
    assert stats.amax == np.float32(1.3)


def test_a_non_float_x_names_x_and_its_dtype():
    for x in (np.zeros(3, ">i4"), np.ones(3, bool), np.zeros(3, np.complex64), np.zeros(3, ">c8")):
        with pytest.raises(TypeError, match=rf"^fake_quantize: x must be a float16, float32 or float64 array "
                                            rf"\(any byte order\), got dtype {x.dtype}$"):
            fp8.fake_quantize(x, "current")


@pytest.mark.parametrize("recipe", [None, 3, b"current", ("current",), np.array(["fp8", "fp32"])])
def test_a_recipe_that_is_not_a_str_is_a_type_error(recipe):
    """It was a ValueError ("unknown FP8 recipe None"), and an array of names an ambiguous truth value."""
    shown = type(recipe).__name__
    with pytest.raises(TypeError, match=rf"^fake_quantize: recipe must be a str, one of fp32, .*; got {shown} "):
        fp8.fake_quantize(np.ones(4, np.float32), recipe)
    with pytest.raises(TypeError, match=rf"^apply_recipe: recipe must be a str, one of fp32, .*; got {shown} "):
        fp8.apply_recipe(nn.Linear(2, 2, rng=np.random.default_rng(0)), recipe)
    assert fp8.fake_quantize(np.ones(4, np.float32), np.str_("current"))[0].tolist() == [1.0] * 4  # a str subclass


@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
@pytest.mark.parametrize("x_shape, weight_shape", [((3, 0), (4, 0)), ((2, 3, 8), (0, 8)), ((0, 8), (4, 8))])
def test_an_fp8_gemm_with_no_features_equals_the_plain_one(recipe, x_shape, weight_shape):
    """A GEMM with in_features or out_features 0 gives what functional.linear gives (zeros, or
    empty arrays), gradients included. (It raised "cannot reshape array of size 0".)"""
    rng = np.random.default_rng(3)
    x_data, w_data = rng.standard_normal(x_shape), rng.standard_normal(weight_shape)
    b_data = rng.standard_normal(weight_shape[:1])
    grad = rng.standard_normal(x_shape[:-1] + weight_shape[:1])
    state = fp8.FP8State(recipe, fp8._recipe_options(recipe, {}))
    results = []
    for gemm in (fp8.FP8Linear(state, state._add_point("p", "gemm")), F.linear):
        x, w, b = (Tensor(d, requires_grad=True) for d in (x_data, w_data, b_data))
        y = gemm(x, w, b)
        (y * Tensor(grad)).sum().backward()
        results.append((y.data, x.grad, w.grad, b.grad))
    for fp8_result, plain in zip(*results):
        assert_same(fp8_result, plain)


def test_cast_pair_and_cast_refuse_a_recipe_they_would_cast_as_another():
    """cast_pair under a per-tensor recipe gave blockwise's tiles, without a word (``current`` with
    ``power_of_2``), or a KeyError; cast under an unknown name gave an MX cast."""
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32) * 3
    for recipe in ("current", "fp8", "mxfp9"):
        options = {"power_of_2": True, "saturate_gradients": False, "scale_mode": "floor"}
        with pytest.raises(ValueError, match=f"cast_pair: recipe must be a block recipe, mxfp8 or blockwise; "
                                             f"got '{recipe}'"):
            fastcast.cast_pair(x, recipe, options, formats.E4M3)
    with pytest.raises(ValueError, match="fastcast.cast: unknown recipe 'mxfp9'"):
        fastcast.cast(x, "mxfp9", {"scale_mode": "floor"}, formats.E4M3, -1, False, None)
    pair = fastcast.cast_pair(x, "blockwise", fp8._recipe_options("blockwise", {}), formats.E4M3)
    assert_same(pair[0][0], scaling.quantize_blockwise(x, block_shape=(1, 128), axis=-1).dequantize())


@pytest.mark.parametrize("threads, error", [(2.5, TypeError), ("2", TypeError), (None, TypeError),
                                            (True, TypeError), (0, ValueError), (-1, ValueError)])
def test_cast_threads_must_be_a_positive_int(threads, error, monkeypatch):
    """A tensor cut into slabs is cast on CAST_THREADS threads. A float or a str raised an internal
    TypeError ("'float' object cannot be interpreted as an integer"), and 0 or -1 meant 1 silently."""
    x = np.random.default_rng(1).standard_normal((8, 1 << 16)).astype(np.float32)  # 2**19 > 2**18 elements
    monkeypatch.setattr(fastcast, "CAST_THREADS", threads)
    with pytest.raises(error, match="fastcast.CAST_THREADS must be"):
        fp8.fake_quantize(x, "current")
    monkeypatch.setattr(fastcast, "CAST_THREADS", np.int64(2))
    assert_same(fp8.fake_quantize(x, "current")[0], reference(x, "current", "E4M3"))


def test_a_delayed_cast_that_raises_records_no_amax(monkeypatch):
    """The fast cast recorded max|x| in the scaler's history before casting: a cast that then raised (an
    invalid CAST_THREADS, found only for tensors in slabs) left the history changed, where the reference
    scaler.quantize records nothing."""
    x = np.full(1 << 19, 7.0, np.float32)
    scaler = scaling.DelayedScaling("E4M3", history_len=4)
    monkeypatch.setattr(fastcast, "CAST_THREADS", 0)
    with pytest.raises(ValueError, match="fastcast.CAST_THREADS must be >= 1, got 0"):
        fp8.fake_quantize(x, "delayed", scaler=scaler)
    assert scaler.amax_history.tolist() == [0.0] * 4
    monkeypatch.setattr(fastcast, "CAST_THREADS", 2)
    fp8.fake_quantize(x, "delayed", scaler=scaler)
    assert scaler.amax_history.tolist() == [7.0, 0.0, 0.0, 0.0]


def test_the_amax_of_a_float64_input_is_as_each_recipe_reads_it():
    """CastStats.amax: the float32 rounding of a float64 input where the recipe works in float32,
    the float64 value itself where it rounds float64 exactly (as its docstring says)."""
    x = np.array([[1 + 2.0**-40, -1e-50]])
    for recipe in fp8.RECIPES:
        scaler = scaling.DelayedScaling("E4M3") if recipe == "delayed" else None
        _, stats = fp8.fake_quantize(x, recipe, scaler=scaler)
        assert stats.amax == (1 + 2.0**-40 if recipe in ("fp8", "unit", "mxfp8") else 1.0)


@pytest.mark.parametrize("recipe", RECIPES_WITH_CASTS)
@pytest.mark.parametrize("knobs", [{"_IN_RANGE_MIN_SIZE": 2**62},  # every element through the table
                                   {"_IN_RANGE_MIN_SIZE": 0, "_DENSE_FRACTION": 0.0, "_DENSE_BLOCK_FRACTION": 0.0},
                                   {"_IN_RANGE_MIN_SIZE": 0, "_FIXUP_FRACTION": 1.0, "_DENSE_FRACTION": 2.0,
                                    "_DENSE_BLOCK_FRACTION": 2.0}])
def test_read_only_views_are_never_written_on_any_path(recipe, knobs, monkeypatch):
    """fake_quantize's x "is never written to": read-only views (a write would raise) through each of
    fastcast's paths, and a writable array's bytes unchanged after every cast."""
    for name, value in knobs.items():
        monkeypatch.setattr(fastcast, name, value)
    x = hostile_tensor(np.random.default_rng(9), (64, 300))
    x[5, 1:40] = 1e-30  # many elements below the normal range
    before = x.tobytes()
    read_only = x.view()
    read_only.flags.writeable = False
    for view, axis in [(read_only, -1), (read_only.T, -1), (read_only[::2, ::-3], 0), (x, 0)]:
        for fmt in ("E4M3", "E5M2"):
            scaler = primed_scaler(fmt) if recipe == "delayed" else None
            values, _ = fp8.fake_quantize(view, recipe, fmt, axis=axis, scaler=copy.deepcopy(scaler))
            assert_same(values, reference(np.ascontiguousarray(view), recipe, fmt, axis, scaler=scaler))
    if recipe in ("mxfp8", "blockwise"):
        rows = x[:, :256].copy()
        rows.flags.writeable = False
        options = fp8._recipe_options(recipe, {})
        assert fastcast.cast_pair(rows, recipe, options, formats.E4M3) is None  # (a NaN: declined)
        finite = np.nan_to_num(rows, nan=1.0, posinf=2.0, neginf=-2.0)
        finite.flags.writeable = False
        fastcast.cast_pair(finite, recipe, options, formats.E4M3)
    assert x.tobytes() == before
