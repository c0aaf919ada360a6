"""Contracts of minifp8.fp8lm, minifp8.plots and minifp8.bench that the other test files left unpinned.

fp8lm
- ``store_scaled(..., "float16")`` of a tensor so small that ``65504 / amax`` passes float32's range
  keeps a finite power-of-two scale (the largest float32 one, 2**127) and reads back within
  float16's rounding; the FP8 kinds do the same through ``scaling.scale_from_amax``.
- ``fp8_all_reduce`` of gradients whose shared scale is already float32's largest power of two, so
  that ``s = N * s_g`` (Eq. 6) passes float32's max, still returns their mean (checked against the
  float64 mean, to within E4M3's rounding of each cast and of the sum).
- The saturated fraction that drives ``mu`` counts values whose *magnitude* is the format's max:
  negative ones too (FP8-LM section 2.1; MS-AMP's rule).
- ``mu`` may reach its cap, ``2**256``: a store whose ``mu`` grew there round-trips through
  ``state_dict`` / ``load_state_dict``.
- ``split_batch`` refuses 0-d arrays with a ValueError naming the shapes, whichever argument is 0-d.
- Parameter names must be unique wherever (name, Tensor) pairs are taken: a duplicate would drop a
  parameter silently.
- ``relative_error`` is 0 when error and reference are both zero and Inf when only the reference is
  (``AllReduceResult`` and the pooled ``GradientReport``).

plots (values read back from the figures' artists, against the rules the docstrings state)
- ``_log2_axis`` ticks every second power of two (its default step) from ``2**low`` to ``2**high``,
  both ends included.
- ``value_grid``: the x axis holds every positive finite value; exactly the subnormals (``2**M - 1``
  per format) are drawn in the subnormal colour.
- ``rounding_error``: the dashed line is the unit roundoff ``2**-(M+1)``; every plotted error is
  positive, also for inputs that land on powers of two (a log axis drops zeros).
- ``stochastic_rounding_bias``: the band is +-2 standard errors of a mean of ``samples`` draws,
  ``sqrt(f (1 - f) / samples)`` with ``f`` the input's fraction of its gap.
- ``delayed_scaling_outlier`` counts a clipped value when its cast *with the delayed scale*
  overflows, in E5M2 (to Inf) as in E4M3 (to NaN); the reference replays ``scaling.DelayedScaling``
  and the OCP overflow thresholds (``|v| >= max + ulp(max) / 2``).
- ``block_scaling_snr`` computes each row's SNR in float64, also for rows near float32's smallest
  normal, where float32 squares would underflow.
- ``scale_plot`` draws a statistic of exactly 0 as a hollow marker at the axis' left edge.
- ``gpt_cast_scales``: a linear layer's ``backward_std`` is that of the gradient of its *output*;
  for ``lm_head`` that is the cross-entropy's ``(softmax(z) - onehot(t)) / N``.
- ``training_curves``: each smoothed point sits at the middle of the steps it averages (to within
  half a step).
- ``fp8lm_options``: a run whose label is not its recipe's name followed by a space or `` +`` (the
  options) is its own reference; step 0 is not compared; the memory bars stack the components.
- ``train_speed`` draws each window's median at the middle of its window.

bench
- ``median_seconds`` reports the median of exactly ``repeats`` timed calls, after ``warmup`` untimed
  ones; ``best_of_rounds`` keeps each entry's lowest round median; ``report_ratios`` gives the median of the per-round ratios (not a ratio of medians) and
  the range of the FP8 entries only; ``report`` prints Melem/s and ``baseline / seconds``.
- ``main`` runs with ``--repeats`` and ``--rounds`` 5 by default (as ``-h`` says); ``-h`` lists each
  section by the first paragraph of its docstring without reST's double backquotes.
- The train section's JSON: medians of the given step times (a fake clock) over the run, its first and
  last tenth (``steps // 10``) and windows of ``steps // 20`` from the first step, and fp32's median
  over all the pairs; its lines: tokens per second of each median step, and fp32's medians over the
  first and last tenths of every pair.
- The train section steps fp32 and the recipe in turn (fp32, recipe, fp32, ...), with train_tiny's
  learning-rate schedule for its steps (the default run's where ``--steps`` is fewer).
"""
import dataclasses
import math
import re
import types

import numpy as np
import pytest

from minifp8 import bench, data, fp8lm, formats, mx, plots, scaling
from minifp8.autograd import Tensor

try:
    import matplotlib
except ImportError:  # the plots' tests skip; the fp8lm and bench tests run
    matplotlib = None
needs_matplotlib = pytest.mark.skipif(matplotlib is None, reason="draws a figure: needs matplotlib")

E4M3_MAX, E5M2_MAX = 448.0, 57344.0


# ================================================================================================
# fp8lm
# ================================================================================================
def test_float16_storage_of_a_tiny_tensor_keeps_a_finite_power_of_two_scale():
    """65504 / 1e-40 is about 2**148, beyond float32: the scale is float32's largest power of two,
    2**127, and every value reads back within float16's relative rounding, 2**-11."""
    x = np.array([1e-40, -3e-41, 7e-42, 0.0], np.float32)
    array, scale = fp8lm.store_scaled(x, "float16")
    assert array.dtype == np.float16 and scale.dtype == np.float32
    assert scale == np.float32(2.0 ** 127)
    back = fp8lm.load_scaled(array, scale, "float16")
    assert np.all(np.isfinite(back))
    np.testing.assert_allclose(back, x, rtol=2.0 ** -11, atol=0)
    for kind, fp_max in (("E4M3", E4M3_MAX), ("E5M2", E5M2_MAX)):
        codes, fp8_scale = fp8lm.store_scaled(x, kind)
        assert fp8_scale == np.float32(2.0 ** 127), kind
        np.testing.assert_allclose(fp8lm.load_scaled(codes, fp8_scale, kind)[:1], x[:1], rtol=2.0 ** -3)


def test_all_reduce_averages_gradients_whose_summed_scale_passes_float32_max():
    """Every worker's amax is about 1e-36: 448 / amax passes float32's max, so s_g = 2**127 and
    N * s_g = 2**128 is beyond float32. The result is still the mean: each of the two casts and the
    sum round to E4M3 (relative error <= 2**-4 each), so within (1 + 2**-4)**2 - 1 of the mean."""
    g0 = np.array([1e-36, -3e-37, 5e-37], np.float32)
    g1 = np.array([2e-37, 1e-36, -1e-36], np.float32)
    result = fp8lm.fp8_all_reduce([g0, g1], "E4M3")
    mean = (g0.astype(np.float64) + g1.astype(np.float64)) / 2
    assert result.shared_scale == np.float32(2.0 ** 127)
    assert np.isfinite(result.scale) and result.scale > 0
    np.testing.assert_allclose(result.gradient.astype(np.float64), mean, rtol=(1 + 2.0 ** -4) ** 2 - 1)
    assert result.relative_error < 2.0 ** -3


@pytest.mark.parametrize("fmt, fp_max", [("E4M3", E4M3_MAX), ("E5M2", E5M2_MAX)])
def test_saturated_fraction_counts_negative_values_at_the_format_max(fmt, fp_max):
    """Two workers hold [-fp_max, 1]: the shared scale is 1, the sum of the first element is
    -2 fp_max, which saturates to -fp_max: one of the two reduced values is at the max magnitude."""
    g = np.array([-fp_max, 1.0], np.float32)
    result = fp8lm.fp8_all_reduce([g, g], fmt)
    assert result.shared_scale == 1
    assert result.saturation_count == 1 and result.saturation_fraction == 0.5
    # the same fraction decides mu's halving through FP8Gradients
    weight = Tensor(np.zeros((1, 2), np.float32), requires_grad=True)
    store = fp8lm.FP8Gradients([("w", weight)], fmt)
    report = store.reduce([{"w": g.reshape(1, 2)}, {"w": g.reshape(1, 2)}])
    assert report.saturation_fraction == 0.5 and store.factor("w") == 0.5


def test_a_mu_grown_to_its_cap_round_trips_through_state_dict():
    """With window 1, 300 quiet steps take the exponent to its cap, 256: mu = 2**256 (AutoScale);
    that state must load back."""
    weight = Tensor(np.zeros((2, 2), np.float32), requires_grad=True)
    store = fp8lm.FP8Gradients([("w", weight)], window=1)
    for _ in range(300):
        store.auto_scales["w"].update(0.0)
    assert store.factor("w") == 2.0 ** fp8lm.MAX_FACTOR_LOG2
    restored = fp8lm.FP8Gradients([("w", Tensor(np.zeros((2, 2), np.float32), requires_grad=True))], window=1)
    restored.load_state_dict(store.state_dict())
    assert restored.factor("w") == 2.0 ** 256


@pytest.mark.parametrize("arrays", [(np.int64(3),), (np.zeros(()), np.zeros(4)), (np.zeros(4), np.zeros(()))])
def test_split_batch_refuses_zero_dimensional_arrays_with_a_value_error(arrays):
    with pytest.raises(ValueError, match="must share their first dimension"):
        fp8lm.split_batch(*arrays, workers=1)


def test_parameter_names_must_be_unique():
    a = Tensor(np.zeros((2, 2), np.float32), requires_grad=True)
    b = Tensor(np.ones((2, 2), np.float32), requires_grad=True)
    pairs = [("w", a), ("w", b)]
    with pytest.raises(ValueError, match="'w' appears twice"):
        fp8lm.FP8Gradients(pairs)
    with pytest.raises(ValueError, match="'w' appears twice"):
        fp8lm.memory_rows(pairs)


def test_relative_error_is_infinite_when_only_the_reference_is_zero():
    result = fp8lm.fp8_all_reduce([np.array([1.0, 2.0], np.float32)])
    only_error = dataclasses.replace(result, error_norm=1.0, reference_norm=0.0)
    both_zero = dataclasses.replace(result, error_norm=0.0, reference_norm=0.0)
    assert only_error.relative_error == math.inf and both_zero.relative_error == 0.0
    assert fp8lm.GradientReport({"w": only_error}, 1).relative_error == math.inf
    assert fp8lm.GradientReport({"w": both_zero}, 1).relative_error == 0.0


# ================================================================================================
# plots
# ================================================================================================
@needs_matplotlib
def test_log2_axis_ticks_every_second_power_of_two_from_low_to_high_inclusive():
    figure = plots.rounding_error("E4M3", low_exponent=-4, high_exponent=4, points=9)
    ticks = figure.axes[0].get_xticks()
    np.testing.assert_array_equal(ticks, [2.0 ** t for t in range(-4, 5, 2)])


@needs_matplotlib
def test_value_grid_shows_every_value_and_colours_exactly_the_subnormals():
    names = ("E4M3", "E5M2")
    figure = plots.value_grid(names)
    low, high = figure.axes[1].get_xlim()
    from matplotlib.colors import to_rgba

    subnormal_colour = to_rgba(plots.SUBNORMAL_COLOR)
    subnormal_ticks = sum(len(c.get_segments()) for c in figure.axes[0].collections
                          if tuple(c.get_colors()[0]) == subnormal_colour)
    expected_subnormals = 0
    for name in names:
        fmt = formats.get(name)
        assert low <= fmt.min_subnormal and fmt.max <= high, name
        expected_subnormals += 2 ** fmt.mantissa_bits - 1   # nonzero codes with a zero exponent field
    assert subnormal_ticks == expected_subnormals


@pytest.mark.parametrize("name, mantissa_bits", [("E4M3", 3), ("E5M2", 2)])
@needs_matplotlib
def test_rounding_error_line_is_the_unit_roundoff_and_every_error_is_drawn(name, mantissa_bits):
    """Inputs 2**-4 ... 2**4 are all powers of two: the figure nudges them off the values, so that
    each error is > 0 and shows on the log axis, and below the unit roundoff 2**-(M+1)."""
    ax = plots.rounding_error(name, low_exponent=-4, high_exponent=4, points=9).axes[0]
    error_line, roundoff_line = ax.lines[0], ax.lines[1]
    assert set(roundoff_line.get_ydata()) == {2.0 ** -(mantissa_bits + 1)}
    errors = np.asarray(error_line.get_ydata())
    assert np.all(errors > 0) and np.all(errors <= 2.0 ** -(mantissa_bits + 1))


@needs_matplotlib
def test_stochastic_rounding_band_is_two_standard_errors_of_the_mean():
    """x in [1, 1.1] lies in E4M3's binade [1, 2), gap 2**-3: fraction f = (x - 1) / 0.125, and a
    mean of n Bernoulli(f) draws has standard error sqrt(f (1 - f) / n)."""
    samples = 4
    figure = plots.stochastic_rounding_bias("E4M3", low=1.0, high=1.1, points=5, samples=samples)
    band = figure.axes[1].collections[0].get_paths()[0].vertices
    x = np.linspace(1.0, 1.1, 5)
    fraction = (x - 1.0) / 0.125
    expected = 2 * np.sqrt(fraction * (1 - fraction) / samples)
    upper = {round(float(vx), 12): vy for vx, vy in band if vy > 0}
    np.testing.assert_allclose([upper[round(float(v), 12)] for v in x[1:]], expected[1:], rtol=1e-12)


@pytest.mark.parametrize("name, overflow", [("E4M3", 464.0), ("E5M2", 61440.0)])
@needs_matplotlib
def test_delayed_scaling_outlier_counts_the_values_its_delayed_scale_overflows(name, overflow):
    """OCP FP8: a magnitude at or beyond max + ulp(max)/2 (464 for E4M3, 61440 for E5M2) does not round
    to max; without saturation it becomes NaN (E4M3) or Inf (E5M2). Replayed with DelayedScaling."""
    steps, spike, factor, history, size = 6, 3, 8.0, 2, 64
    figure = plots.delayed_scaling_outlier(steps=steps, spike_step=spike, spike_factor=factor,
                                           history_len=history, size=size, name=name, seed=0)
    rng = np.random.default_rng(0)
    recipe = scaling.DelayedScaling(name, history_len=history)
    expected = []
    for step in range(steps):
        x = rng.normal(0.0, 1.0, size).astype(np.float32)
        if step == spike:
            x *= np.float32(factor)
        scale = recipe.quantize(x).scale
        expected.append(int(np.sum(np.abs(x.astype(np.float64) * float(scale)) >= overflow)))
    assert expected[spike] > 0
    (bars,) = figure.axes[2].containers  # one bar per step
    heights = [0 if np.isnan(p.get_height()) else int(p.get_height()) for p in bars]
    assert heights == expected


@needs_matplotlib
def test_delayed_scaling_outlier_draws_each_steps_amax_and_both_recipes_scales():
    """The lines, not only the bars (a review found them unread): each step's amax; the delayed
    scale, fp8_max over the max amax of the history_len steps before it (scale 1 at step 0, no
    line drawn there), and the amax it came from, which keeps the outlier for history_len steps;
    and the current scale, fp8_max over the step's own amax. Replayed from the seed by hand."""
    steps, spike, factor, history, size = 30, 8, 8.0, 5, 256
    figure = plots.delayed_scaling_outlier(steps=steps, spike_step=spike, spike_factor=factor,
                                           history_len=history, size=size, name="E4M3", seed=3)
    rng = np.random.default_rng(3)
    amaxes = []
    for step in range(steps):
        x = rng.normal(0.0, 1.0, size).astype(np.float32)
        amaxes.append(np.max(np.abs(x * np.float32(factor) if step == spike else x)))
    amaxes = np.array(amaxes, np.float32)
    window_max = np.array([amaxes[max(0, step - history):step].max() for step in range(1, steps)])
    fp8_max = np.float32(448)
    amax_axis, scale_axis, _ = figure.axes
    lines = {line.get_label(): line for axis in (amax_axis, scale_axis) for line in axis.get_lines()}
    assert list(lines["amax of this step's tensor"].get_ydata()) == list(amaxes.astype(float))
    from_history = lines[f"amax the delayed scale came from (max of the {history} steps before)"]
    assert list(from_history.get_xdata()) == list(range(1, steps))
    np.testing.assert_allclose(from_history.get_ydata(), window_max, rtol=2**-23)
    held = np.flatnonzero(from_history.get_ydata() > 2 * amaxes[1:])  # (the outlier held in the history)
    assert list(held + 1) == list(range(spike + 1, spike + history + 1))
    delayed = lines["delayed: fp8_max / amax of the history"]
    assert list(delayed.get_xdata()) == list(range(1, steps))
    assert list(delayed.get_ydata()) == list((fp8_max / window_max).astype(float))
    current = lines["current: fp8_max / amax of this step"]
    assert list(current.get_ydata()) == list((fp8_max / amaxes).astype(float))


@needs_matplotlib
def test_block_scaling_snr_is_computed_in_float64_near_float32s_smallest_normal():
    rows, columns, low = 2, 64, -126
    figure = plots.block_scaling_snr(rows=rows, columns=columns, low_exponent=low, seed=0)
    _, x = plots._rows_at_scales(rows, columns, low, 0)
    x64 = x.astype(np.float64)
    drawn = {line.get_label().split(" (")[0]: np.asarray(line.get_ydata()) for line in figure.axes[0].lines}
    for name in ("MXFP8_E4M3", "MXFP6_E2M3", "MXFP4_E2M1"):
        q = mx.quantize(x, name).dequantize().astype(np.float64)
        snr = 10 * np.log10(np.sum(x64 ** 2, axis=1) / np.sum((q - x64) ** 2, axis=1))
        assert np.all(snr < 60), name   # a 4- to 8-bit format: tens of dB, never thousands
        np.testing.assert_allclose(drawn[name], snr, rtol=1e-9, err_msg=name)


@needs_matplotlib
def test_scale_plot_draws_a_zero_statistic_as_a_hollow_marker_at_the_left_edge():
    from minifp8.fp8 import ScaleRecord
    records = [ScaleRecord("a", (4,), 0.0, 0.0, 1.0, 1.0), ScaleRecord("b", (4,), 1.0, 1.0, 0.0, 0.0),
               ScaleRecord("c", (4,), 0.5, 0.5, 0.5, 0.5)]
    ax = plots.scale_plot(records).axes[0]
    hollow = [line for line in ax.lines if line.get_markerfacecolor() == "none"]
    points = [(float(x), float(y)) for line in hollow for x, y in zip(line.get_xdata(), line.get_ydata())]
    left = ax.get_xlim()[0]
    # one hollow marker per zero statistic, on the row of its record (a, then b), at the left edge
    assert [x for x, _ in points] == [left, left]
    assert sorted(round(y) for _, y in points) == [0, 1]


@needs_matplotlib
def test_gpt_cast_scales_records_the_gradient_of_each_linears_output():
    """lm_head's output is the logits: their gradient under the mean cross-entropy is
    (softmax(z) - onehot(t)) / N, computed here in float64 from the same model's logits."""
    from minifp8 import data
    from minifp8.model import GPT, GPTConfig

    config = GPTConfig(vocab_size=14, block_size=8, n_layer=1, n_head=2, n_embd=16)
    records = {r.name: r for r in plots.gpt_cast_scales(config, batch_size=2, seed=0)}
    model = GPT(config, rng=np.random.default_rng(0))
    ids, targets = data.load_dataset(seed=0).get_batch("train", 2, 8, np.random.default_rng(0))
    z = model(ids, targets)[0].data.astype(np.float64).reshape(-1, config.vocab_size)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(p)), targets.ravel()] -= 1
    gradient = p / len(p)
    assert math.isclose(records["lm_head"].backward_std, float(np.std(gradient)), rel_tol=1e-5)
    assert math.isclose(records["lm_head"].backward_mean_abs, float(np.mean(np.abs(gradient))), rel_tol=1e-5)


@needs_matplotlib
def test_training_curves_draw_each_window_mean_at_the_middle_of_its_steps():
    """40 losses, one per step (steps 1..40), smooth_steps 4: windows of 4 losses, whose steps average
    4 j + 2.5: each point is drawn there, at the window's mean loss."""
    losses = list(np.arange(40, dtype=float) ** 0.5)
    figure = plots.training_curves({"runs": {"a": {"train_loss": losses}}, "train_loss_every": 1}, smooth_steps=4)
    line = figure.axes[0].lines[0]
    centres = np.arange(10) * 4 + 2.5
    np.testing.assert_array_equal(line.get_xdata(), centres)
    np.testing.assert_allclose(line.get_ydata(), np.asarray(losses).reshape(10, 4).mean(axis=1))
    # headline-style results: each entry the mean of 5 steps (entry i: steps 5 i + 1 .. 5 i + 5);
    # smooth_steps 20 takes 4 entries, steps 20 j + 1 .. 20 j + 20, whose middle is 20 j + 10.5
    figure = plots.training_curves({"runs": {"a": {"train_loss": losses}}, "train_loss_every": 5}, smooth_steps=20)
    np.testing.assert_array_equal(figure.axes[0].lines[0].get_xdata(), np.arange(10) * 20 + 10.5)


def _fp8lm_run(recipe, losses, memory=None):
    run = {"recipe": recipe, "val": [{"step": s, "loss": v} for s, v in zip((0, 10, 20), losses)]}
    if memory is not None:
        run["memory"] = {"bytes_per_parameter": memory}
    return run


@needs_matplotlib
def test_fp8lm_options_compares_only_options_of_the_recipe_after_step_0():
    """``unitx`` is not ``unit`` followed by options: its own reference (changes 0). ``unit + fp8
    grads`` is compared with ``unit`` at steps 10 and 20 only (step 0 is before training)."""
    runs = {"unit": _fp8lm_run("unit", (3.0, 2.0, 1.0)), "unitx": _fp8lm_run("unit", (3.0, 4.0, 3.0)),
            "unit + fp8 grads": _fp8lm_run("unit", (6.0, 2.2, 1.5))}
    lines = {line.get_label(): line for line in plots.fp8lm_options({"runs": runs}).axes[0].lines}
    np.testing.assert_array_equal(lines["unitx"].get_xdata(), [10, 20])
    np.testing.assert_allclose(lines["unitx"].get_ydata(), [0.0, 0.0])
    np.testing.assert_allclose(lines["unit + fp8 grads"].get_ydata(), [2.2 / 2.0 - 1, 1.5 / 1.0 - 1])


@needs_matplotlib
def test_fp8lm_options_stacks_the_memory_components_of_each_run():
    components = ("weights", "master_weights", "gradients", "first_moment", "second_moment")
    memory = dict(zip(components, (4.0, 2.0, 1.0, 1.0, 2.0)))
    figure = plots.fp8lm_options({"runs": {"unit": _fp8lm_run("unit", (3.0, 2.0, 1.0), memory)}})
    bars = [bar for container in figure.axes[2].containers for bar in container]  # one container per component
    lefts = [bar.get_x() for bar in bars]
    widths = [bar.get_width() for bar in bars]
    assert widths == [memory[c] for c in components]
    assert lefts == [0.0, 4.0, 6.0, 7.0, 8.0]


@needs_matplotlib
def test_train_speed_draws_each_window_median_at_the_middle_of_its_window():
    results = {"window_steps": 10, "fp32": {"step_ms": 5.0},
               "recipes": {"fp8": {"ratio": 1.2, "window_ratios": [1.1, 1.2, 1.3]}}}
    line = plots.train_speed(results).axes[0].lines[0]
    np.testing.assert_array_equal(line.get_xdata(), [5.0, 15.0, 25.0])
    np.testing.assert_array_equal(line.get_ydata(), [1.1, 1.2, 1.3])


# ================================================================================================
# bench
# ================================================================================================
class FakeClock:
    """A ``time.perf_counter`` whose successive timed intervals are given: each call of the timed
    function advances it by the next interval."""

    def __init__(self, intervals):
        self.now, self.intervals, self.calls = 0.0, list(intervals), 0

    def perf_counter(self):
        return self.now

    def tick(self):
        self.calls += 1
        self.now += self.intervals.pop(0)


def test_median_seconds_is_the_median_of_repeats_calls_after_the_warmup(monkeypatch):
    # one warmup call (1 s, untimed), then 3 timed calls of 1, 2 and 9 s: median 2 (the mean is 4)
    clock = FakeClock([100.0, 1.0, 2.0, 9.0])
    monkeypatch.setattr(bench.time, "perf_counter", clock.perf_counter)
    assert bench.median_seconds(clock.tick, repeats=3, warmup=1) == 2.0
    assert clock.calls == 4


def test_best_of_rounds_keeps_each_entrys_lowest_round_median(monkeypatch, capsys):
    """Three rounds, each timing fp32 then fp8 once after a warmup call (``--repeats 1``): fp32's
    timed calls take 5, 1 and 2 s, fp8's 4, 9 and 6 s, so the best rounds are 1 and 4 s (the
    medians over the rounds would be 2 and 6, the means 2.67 and 6.33; found by mutation testing:
    the median over the rounds passed)."""
    # in calling order: fp32 warmup, fp32, fp8 warmup, fp8, round after round
    clock = FakeClock([7.0, 5.0, 7.0, 4.0, 7.0, 1.0, 7.0, 9.0, 7.0, 2.0, 7.0, 6.0])
    monkeypatch.setattr(bench.time, "perf_counter", clock.perf_counter)
    assert bench.best_of_rounds({"fp32": clock.tick, "fp8": clock.tick}, repeats=1, rounds=3) == {"fp32": 1.0,
                                                                                                   "fp8": 4.0}
    assert clock.calls == 12 and capsys.readouterr().out == ""


def test_report_ratios_is_the_median_of_the_per_round_ratios(capsys):
    """fp32 rounds of 1, 2, 3 ms and fp8 rounds of 3, 2.2, 3.3 ms: per-round ratios 3, 1.1, 1.1,
    median 1.1 (the ratio of the medians would be 3 / 2 = 1.5, their mean 1.73)."""
    bench.report_ratios({"fp32": [0.001, 0.002, 0.003], "fp8": [0.003, 0.0022, 0.0033]}, "step under")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].rstrip().endswith("x 1.00 fp32 step")  # fp32: no range of its own ratios
    assert "2.00 ms" in lines[0] and "3.00 ms" in lines[1]
    assert lines[1].rstrip().endswith("x 1.10 fp32 step (1.10-3.00 over 3 rounds)")


def test_report_prints_throughput_and_the_speed_against_the_baseline(capsys):
    bench.report("label", 0.002, elements=4_000_000, baseline=0.005)
    line = capsys.readouterr().out
    assert "2.00 ms" in line and "2000.0 Melem/s" in line and "x 2.50 speed of baseline" in line


def test_main_defaults_to_five_repeats_and_rounds(monkeypatch, capsys):
    seen = {}
    monkeypatch.setitem(bench.SECTIONS, "probe", lambda args: seen.update(vars(args)))
    monkeypatch.setattr(bench, "machine_line", lambda: "machine: test")
    assert bench.main(["probe"]) == 0
    assert seen["repeats"] == 5 and seen["rounds"] == 5
    help_text = bench.build_parser().format_help()
    assert "codec, block, mx and fp8 sections (default: 5)" in " ".join(help_text.split())
    assert "the median over the rounds (default: 5)" in " ".join(help_text.split())


def test_help_lists_each_section_by_the_first_paragraph_of_its_docstring_without_rest_markup(capsys):
    """_summary: the first paragraph on one line, without reST's double backquotes."""
    import inspect

    help_text = bench.build_parser().format_help()
    sections = help_text.split("Sections (all of them by default):", 1)[1].split("--json PATH writes", 1)[0]
    assert "``" not in sections
    for name, function in bench.SECTIONS.items():
        first = " ".join(inspect.cleandoc(function.__doc__).split("\n\n")[0].split())
        assert f"{name}: {first.replace('``', '')}" in " ".join(sections.split()), name


class _TimedModel:
    """A stand-in for train_tiny's model whose forward pass advances a fake clock by the next of its
    given step times, so that the train section measures exactly those."""

    def __init__(self, clock, seconds):
        self.clock, self.seconds = clock, list(seconds)

    def __call__(self, x, y):
        self.clock[0] += self.seconds.pop(0)
        return None, self

    def backward(self):
        pass

    def parameters(self):
        return []


class _Idle:
    def zero_grad(self):
        pass

    def step(self):
        pass


@pytest.mark.parametrize("steps, tenth, window", [(40, 4, 2), (45, 4, 2), (30, 3, 1)])
def test_train_section_reports_medians_over_the_run_its_tenths_and_windows(monkeypatch, tmp_path, capsys, steps,
                                                                           tenth, window):
    """Two pairs of ``steps`` steps with given step times: the JSON holds, for each recipe, the medians
    of its steps, of its partner's, and of the per-step ratios over the run, its first and last tenth
    (``steps // 10``: 4, 4 and 3 steps) and each window of ``steps // 20`` steps (2, 2 and 1; floor,
    not rounded: 30 // 20 is 1) from the first step on, a last partial window left out (45 steps:
    22 windows of steps 1-44), and for fp32 the median over both pairs' steps (not a mean), with
    tokens per second from it; every float rounded to 4 decimals. The lines print the same, with
    each step's tokens per second (tokens per step / its median step time) and fp32's medians over
    the first and the last tenth of every pair (found by mutation testing: 45 and 30 steps, the
    windows counted from the end or ``round(steps / 20)`` steps wide, the tenth ``ceil(steps / 10)``,
    or fp32's last tenths taken from the start, passed)."""
    from minifp8 import train_tiny

    tokens = train_tiny.TrainConfig().batch_size * train_tiny.TrainConfig().block_size
    rng = np.random.default_rng(0)
    seconds = [rng.integers(1, 60, steps) * 1e-3 for _ in range(4)]  # fp32, fp8, fp32, unit, in build order
    clock, built = [0.0], iter(seconds)
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])

    def untimed(*args):  # (the learning rate and the batch are set outside the timed step: a review's find)
        clock[0] += 1000.0
        return None, None

    monkeypatch.setattr(train_tiny, "_set_lr", untimed)
    monkeypatch.setattr(data, "load_dataset", lambda: types.SimpleNamespace(vocab_size=14, get_batch=untimed))
    monkeypatch.setattr(train_tiny, "_build", lambda run, config, vocab_size:
                        (_TimedModel(clock, next(built)), None, _Idle(), _Idle(), None, None))
    path = tmp_path / "speed.json"
    with monkeypatch.context() as quiet:
        quiet.setattr(bench, "machine_line", lambda: "machine: test")
        assert bench.main(["--steps", str(steps), "--recipes", "fp8,unit", "--json", str(path), "train"]) == 0
    out = capsys.readouterr().out
    document = bench.load_speed_results(path)
    assert document["steps"] == steps and document["window_steps"] == window
    for recipe, fp32_times, times in (("fp8", seconds[0], seconds[1]), ("unit", seconds[2], seconds[3])):
        ratios = times / fp32_times
        expected = {"ratio": np.median(ratios), "first_tenth": np.median(ratios[:tenth]),
                    "last_tenth": np.median(ratios[steps - tenth:]), "step_ms": np.median(times) * 1e3,
                    "fp32_step_ms": np.median(fp32_times) * 1e3}
        measured = document["recipes"][recipe]
        for key, value in expected.items():
            assert measured[key] == pytest.approx(value, abs=1e-4), (recipe, key)
        windows = [np.median(ratios[i:i + window]) for i in range(0, steps - window + 1, window)]
        assert len(windows) == steps // window
        np.testing.assert_allclose(measured["window_ratios"], windows, atol=1e-4)
        line = next(line for line in out.splitlines() if f"train step under {recipe} " in line)
        assert int(re.search(r" ([\d,]+) tok/s", line)[1].replace(",", "")) == pytest.approx(
            tokens / np.median(times), abs=0.5 + 1e-6), line
    fp32_ms = np.median(np.concatenate([seconds[0], seconds[2]])) * 1e3
    assert document["fp32"]["step_ms"] == pytest.approx(fp32_ms, abs=1e-4)
    assert document["fp32"]["tokens_per_second"] == round(tokens / fp32_ms * 1e3)
    fp32_line = next(line for line in out.splitlines() if "train step under fp32 " in line)
    first_ms, last_ms = (float(text) for text in re.search(r"first tenths ([\d.]+) ms, last ([\d.]+)\)",
                                                             fp32_line).groups())
    assert first_ms == pytest.approx(np.median(np.concatenate([seconds[0][:tenth], seconds[2][:tenth]])) * 1e3,
                                     abs=0.05 + 1e-6), fp32_line
    assert last_ms == pytest.approx(np.median(np.concatenate([seconds[0][steps - tenth:],
                                                              seconds[2][steps - tenth:]])) * 1e3,
                                    abs=0.05 + 1e-6), fp32_line


class _RecordingModel:
    """A stand-in for train_tiny's model that records, at each forward pass, its recipe and the
    learning rate that its optimizer holds then (the train section sets it before the step)."""

    def __init__(self, recipe, optimizer, calls):
        self.recipe, self.optimizer, self.calls = recipe, optimizer, calls

    def __call__(self, x, y):
        self.calls.append((self.recipe, self.optimizer.param_groups[0]["lr"]))
        return None, self

    def backward(self):
        pass

    def parameters(self):
        return []


class _Optimizer(_Idle):
    def __init__(self):
        self.param_groups = [{"lr": None}]


def _train_section_steps(monkeypatch, argv):
    """The (recipe, learning rate) of every step the train section takes with ``argv``, in the order
    taken, on stand-in models (nothing is trained; the learning rates are train_tiny's `_set_lr`'s
    for a peak of 1)."""
    from minifp8 import train_tiny

    calls = []

    def build(run, config, vocab_size):
        optimizer = _Optimizer()
        return _RecordingModel(run.recipe, optimizer, calls), None, _Idle(), optimizer, [1.0], None

    monkeypatch.setattr(train_tiny, "_build", build)
    monkeypatch.setattr(data, "load_dataset", lambda: types.SimpleNamespace(vocab_size=14,
                                                                           get_batch=lambda *args: (None, None)))
    monkeypatch.setattr(bench, "machine_line", lambda: "machine: test")
    assert bench.main(argv + ["train"]) == 0
    return calls


def test_train_section_steps_fp32_and_the_recipe_in_turn(monkeypatch, capsys):
    """One step of the pair's fp32 run, then one of the recipe's, and so on, so that both meet the
    same moments of the machine (a review's find: the loops swapped, all of fp32's steps and then all
    of the recipe's, passed every test, as the fake clock gives each model its own step times)."""
    calls = _train_section_steps(monkeypatch, ["--steps", "3", "--recipes", "fp8,unit"])
    assert [recipe for recipe, _ in calls] == ["fp32", "fp8"] * 3 + ["fp32", "unit"] * 3


@pytest.mark.parametrize("steps", [150, 1200])
def test_train_section_takes_train_tinys_learning_rate_schedule_for_its_steps(monkeypatch, capsys, steps):
    """Past the default run's 1000 steps, the schedule of ``train_tiny --steps N``: its cosine spans
    the run (a review's find: the schedule stayed the default run's, and every step past the 1000th
    trained at the minimum rate). Fewer steps follow the default run's schedule (its first steps)."""
    from minifp8 import train_tiny

    config, _ = train_tiny.parse_args(["--steps", str(max(steps, train_tiny.TrainConfig().steps))])
    expected = []
    for index in range(steps):
        optimizer = _Optimizer()
        train_tiny._set_lr(optimizer, [1.0], config, index)
        expected.append(optimizer.param_groups[0]["lr"])
    calls = _train_section_steps(monkeypatch, ["--steps", str(steps), "--recipes", "fp8"])
    for recipe in ("fp32", "fp8"):
        assert [lr for name, lr in calls if name == recipe] == expected, recipe
    decay = expected[config.warmup_steps:]
    assert all(later < earlier for earlier, later in zip(decay, decay[1:]))  # (a cosine that has not ended)
    assert expected[-1] > config.min_lr_ratio
