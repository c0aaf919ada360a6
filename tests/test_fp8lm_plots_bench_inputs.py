"""The FP8-LM storage helpers, the delayed-scaling figure and the bench command line against
hostile input: 0-d tensors, finite float64 beyond float32, bad scales, bool and string
arguments, repeated sections. Expected values are the stated rules, not the code's own output."""
import numpy as np
import pytest

from minifp8 import bench, codec, fp8lm
from minifp8.autograd import Tensor

FLOAT32_MAX = float(np.finfo(np.float32).max)


# ---- fp8lm: store_scaled / load_scaled ------------------------------------------------------------

@pytest.mark.parametrize("kind", fp8lm.STORAGE_KINDS)
def test_store_scaled_of_a_0d_tensor_gives_a_0d_array_of_the_kinds_dtype(kind):
    array, scale = fp8lm.store_scaled(np.float32(3.0), kind)
    expected = {"E4M3": np.uint8, "E5M2": np.uint8, "float16": np.float16, "float32": np.float32}[kind]
    assert isinstance(array, np.ndarray) and array.shape == () and array.dtype == expected
    # 3 * 2**floor(log2(fp_max / 3)) is exact in every kind (a power of two times 3 = 1.5 * 2)
    fp_max = {"E4M3": 448.0, "E5M2": 57344.0, "float16": 65504.0, "float32": None}[kind]
    expected_scale = 1.0 if fp_max is None else 2.0 ** np.floor(np.log2(fp_max / 3.0))
    assert scale == expected_scale
    loaded = fp8lm.load_scaled(array, scale, kind)   # "a new array": it was a NumPy scalar (a review's find)
    assert type(loaded) is np.ndarray and loaded.shape == () and loaded.dtype == np.float32
    assert loaded == np.float32(3.0)


@pytest.mark.parametrize("second_moment", ["float16", "E4M3"])
@pytest.mark.parametrize("master_weights", ["float32", "float16"])
def test_fp8_adamw_state_of_a_0d_parameter_round_trips(second_moment, master_weights):
    # A scalar gain is a 0-d parameter; the default second moment (float16) stored it as a NumPy
    # scalar, which load_state_dict then refused ("must be a float16 array ..., got float16").
    def make():
        p = Tensor(np.array(0.5, np.float32), requires_grad=True)
        return p, fp8lm.FP8AdamW([p], lr=1e-2, second_moment=second_moment, master_weights=master_weights)

    p, optimizer = make()
    p.grad = np.array(0.25, np.float32)
    optimizer.step()
    state = optimizer.state_dict()
    q, restored = make()
    restored.load_state_dict(state)
    for key, value in state["state"][0].items():
        if isinstance(value, np.ndarray):
            assert restored.state[q][key].dtype == value.dtype and restored.state[q][key].tobytes() == value.tobytes()
    # and a step after the resume matches a step without it
    q.data[...] = p.data  # (the weights are no optimizer state; under O3 the step reads the master anyway)
    p.grad = q.grad = np.array(-0.125, np.float32)
    optimizer.step()
    restored.step()
    assert p.data.tobytes() == q.data.tobytes()


@pytest.mark.parametrize("kind", fp8lm.STORAGE_KINDS)
def test_store_scaled_refuses_values_float32_cannot_hold_and_non_numbers(kind):
    # a finite float64 beyond float32 became Inf: stored as Inf (float16) or as 448 with scale 1 (FP8)
    with pytest.raises(ValueError, match="beyond float32's range"):
        fp8lm.store_scaled(np.array([1e300, 1.0]), kind)
    with pytest.raises(TypeError, match="bool"):
        fp8lm.store_scaled(np.array([True, False]), kind)
    with pytest.raises(TypeError, match="x must hold"):
        fp8lm.store_scaled(np.array(["1.0"]), kind)


def test_store_scaled_takes_every_real_input_as_its_float32_value():
    x64 = np.array([1.0 / 3.0, -2.5e-3, 0.0])
    for given in (x64, x64.astype(">f8"), x64.tolist(), x64.astype(np.float16), np.array([3, -1, 0])):
        array, scale = fp8lm.store_scaled(given, "float32")
        assert scale == 1 and array.dtype == np.float32
        assert array.tobytes() == np.asarray(given).astype(np.float64).astype(np.float32).tobytes()


@pytest.mark.parametrize("scale, error, match", [
    (0.0, ValueError, "finite and > 0"), (-1.0, ValueError, "finite and > 0"),
    (float("nan"), ValueError, "finite and > 0"), (float("inf"), ValueError, "finite and > 0"),
    (1e-50, ValueError, "finite and > 0"),    # float32(1e-50) is 0: the inverse would be Inf
    (1e40, ValueError, "finite and > 0"),     # float32(1e40) is Inf
    ("2", TypeError, "scale must be one real number"), (True, TypeError, "scale must be one real number"),
    (np.ones(2, np.float32), TypeError, "scale must be one real number"),
])
def test_load_scaled_refuses_a_scale_it_cannot_invert(scale, error, match):
    array, _ = fp8lm.store_scaled(np.ones(3, np.float32), "float16")
    with pytest.raises(error, match=match):
        fp8lm.load_scaled(array, scale, "float16")


def test_load_scaled_takes_scales_as_store_scaled_and_state_dicts_give_them():
    array, scale = fp8lm.store_scaled(np.array([0.5, -1.5], np.float32), "E4M3")
    expected = codec.decode(array, "E4M3") * np.float32(1 / float(scale))
    for given in (scale, float(scale), np.array(scale), np.float64(scale)):
        assert fp8lm.load_scaled(array, given, "E4M3").tobytes() == expected.tobytes()


@pytest.mark.parametrize("kind, array", [
    ("float16", np.ones(3, np.float32)), ("float32", np.ones(3, np.float16)),
    ("E4M3", np.ones(3, np.float16)), ("float16", [1.0, 2.0]),
])
def test_load_scaled_refuses_an_array_of_another_kind(kind, array):
    with pytest.raises(TypeError, match="array must be a"):
        fp8lm.load_scaled(array, np.float32(1), kind)


# ---- fp8lm: all-reduce and AutoScale --------------------------------------------------------------

def test_all_reduce_names_a_float64_gradient_beyond_float32_for_what_it_is():
    # finite, so not "NaN or Inf": it overflows the float32 the all-reduce works in
    with pytest.raises(ValueError, match="worker 1's gradient holds finite values beyond float32's range"):
        fp8lm.fp8_all_reduce([np.ones(2), np.array([1.0, 1e39])])


@pytest.mark.parametrize("fraction", ["0.5", True, None, [0.0]])
def test_auto_scale_update_refuses_what_is_not_a_number(fraction):
    auto = fp8lm.AutoScale()
    with pytest.raises(TypeError, match="saturated fraction must be a real number"):
        auto.update(fraction)
    assert auto.exponent == 0


def test_auto_scale_update_takes_numpy_numbers():
    auto = fp8lm.AutoScale(threshold=0.25, window=4)
    assert auto.update(np.float32(0.5)) == 2.0 ** -1     # above the threshold: halve
    assert auto.update(np.float64(0.0)) == 2.0 ** (-3 / 4)  # below: grow by 2**(1/window)


# ---- plots.delayed_scaling_outlier ----------------------------------------------------------------

@pytest.mark.parametrize("spike_factor, amax", [(1e39, "inf"), (1e-50, "0.0")])
def test_delayed_scaling_outlier_refuses_a_spike_that_float32_cannot_hold(spike_factor, amax):
    pytest.importorskip("matplotlib")
    from minifp8 import plots

    # x * 1e39 overflowed to Inf (a warning, then a figure whose amax axis left the outlier out);
    # x * 1e-50 flushed the tensor to 0, whose amax a log axis cannot show
    with pytest.raises(ValueError, match=f"spike_factor .* amax {amax}"):
        plots.delayed_scaling_outlier(steps=4, spike_step=1, spike_factor=spike_factor, history_len=2, size=64)


# ---- bench command line ---------------------------------------------------------------------------

def test_bench_refuses_a_section_listed_twice(capsys, monkeypatch):
    ran = []
    monkeypatch.setitem(bench.SECTIONS, "codec", lambda args: ran.append("codec"))  # (nothing is timed)
    with pytest.raises(SystemExit) as exit_:
        bench.main(["codec", "codec"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and ran == []
    assert err.count("\n") == 1 and "codec listed more than once" in err


def test_bench_refuses_an_empty_json_path(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["train", "--json", ""])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert "--json takes the path of a file in an existing folder, got ''" in err


def test_median_seconds_needs_a_repeat():
    # (0 repeats gave NaN, the median of nothing; found in an API review)
    with pytest.raises(ValueError, match="median_seconds: repeats must be >= 1, got 0"):
        bench.median_seconds(lambda: None, 0)
    assert bench.median_seconds(lambda: None, 1, warmup=0) >= 0


@pytest.mark.parametrize("rounds, error, message", [(0, ValueError, "rounds must be >= 1, got 0"),
                                                     (True, TypeError, "rounds must be an int, got bool")])
def test_rounds_need_a_round(rounds, error, message):
    # (a later review's find: 0 rounds gave empty lists and NaN ratios, or min()'s "empty sequence";
    # True counted as 1)
    for call in (lambda: bench.alternating_rounds({"fp32": lambda: None}, rounds, 1),
                 lambda: bench.best_of_rounds({"fp32": lambda: None}, 1, rounds)):
        with pytest.raises(error, match=message):
            call()
