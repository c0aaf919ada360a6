"""minifp8.plots: every figure from the committed results and from small synthetic inputs, the
clear errors for inputs it cannot draw, and the hint when matplotlib is missing."""
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from minifp8 import fp8, plots, quantize  # noqa: E402
from minifp8.train_tiny import FP8LM_RESULTS, HEADLINE_RESULTS, load_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run(recipe="fp8", **metrics):
    """The metrics of one synthetic train_tiny run, with the keys the figures read."""
    return {"recipe": recipe, "family": "standard", "train_loss": [2.6, 2.2, 2.0, 1.9],
            "val": [{"step": 0, "loss": 2.7}, {"step": 4, "loss": 1.9}],
            "cast_stats": [{"step": 4, "max_underflow": 0.25}], "diverged": None, **metrics}


def labelled(figure):
    """Every axes has a y label or a title, and the bottom one an x label: the figure says what it shows."""
    axes = figure.axes
    assert axes and all(ax.get_ylabel() or ax.get_title() for ax in axes)
    assert axes[-1].get_xlabel()
    return figure


# ---- training results ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [HEADLINE_RESULTS, FP8LM_RESULTS])
def test_both_results_figures_draw_both_committed_results(path):
    results = load_results(path)
    curves = labelled(plots.training_curves(results))
    assert len(curves.axes[0].get_legend().get_texts()) == len(results["runs"])
    options = labelled(plots.fp8lm_options(results))  # the headline has 6 recipes: more than 4 line styles
    assert len(options.axes) == 3 and options.axes[0].get_legend() is not None


def test_fp8lm_options_title_names_the_line_style_of_each_recipe():
    title = plots.fp8lm_options(load_results(FP8LM_RESULTS)).axes[0].get_title()
    assert title.endswith("(solid: unit, dashed: current)")
    results = {"runs": {recipe: run(recipe) for recipe in ("fp32", "fp8", "unit", "current", "delayed")}}
    title = plots.fp8lm_options(results).axes[0].get_title()
    assert "solid: fp32, dashed: fp8, dotted: unit, dash-dot: current, solid: delayed" in title


def test_training_curves_draws_diverged_nan_single_and_sparse_runs():
    nan = float("nan")
    results = {"loss_floor": 1.0, "train_loss_every": 1, "runs": {
        "fp32": run("fp32"),
        "fp8": run(train_loss=[2.6, 9.0], diverged={"step": 3, "message": "loss became nan"}),
        "first step": run(train_loss=[], val=[{"step": 0, "loss": 2.7}], diverged={"step": 1, "message": "x"}),
        "nan": run(train_loss=[2.6, nan, 2.0]),
        "bare": {"train_loss": [2.5, 2.4]},  # no val, no cast_stats, no recipe or family
        "empty lists": run(val=[], cast_stats=[]),
    }}
    figure = labelled(plots.training_curves(results, smooth_steps=1))
    assert [text.get_text() for text in figure.axes[0].get_legend().get_texts()] == list(results["runs"])
    labelled(plots.training_curves({"runs": {"only": run()}}))
    labelled(plots.fp8lm_options({"runs": {"fp8": run()}}))


@pytest.mark.parametrize("figure", [plots.training_curves, plots.fp8lm_options])
@pytest.mark.parametrize("results, error, message", [
    (None, TypeError, "results must be a dict, got NoneType"),
    ({"description": "", "commands": []}, ValueError, "results has no 'runs' (it has 'description', 'commands'): "
                                                      "pass a train_tiny results document"),
    ({"runs": []}, TypeError, "results['runs'] must be a dict of run label -> metrics, got list"),
    ({"runs": {}}, ValueError, "results holds no runs"),
    ({"runs": {"fp8": [1.0]}}, TypeError, "run 'fp8' must be a dict, got list"),
    ({"runs": {"fp8": run(val=[{"step": 1}])}}, ValueError,
     "run 'fp8': an entry of 'val' has no 'loss' (it has 'step')"),
])
def test_results_figures_say_what_they_cannot_draw(figure, results, error, message):
    with pytest.raises(error, match=re.escape(f"{figure.__name__}: {message}")):
        figure(results)


def test_seeds_results_are_not_a_training_document():
    message = ("training_curves: results has no 'runs' (it has 'description', 'commands', 'kernels', 'val_loss', "
               "'other_kernels')")
    with pytest.raises(ValueError, match=re.escape(message)):
        plots.training_curves(load_results(HEADLINE_RESULTS.with_name("seeds.json")))


@pytest.mark.parametrize("results, message", [
    ({"runs": {"fp8": {"recipe": "fp8"}}}, "run 'fp8' has no 'train_loss'"),
    ({"runs": {"fp8": run(cast_stats=[{"step": 1}])}}, "run 'fp8': an entry of 'cast_stats' has no 'max_underflow'"),
    ({"train_loss_every": 0, "runs": {"fp8": run()}}, "train_loss_every must be >= 1, got 0"),
])
def test_training_curves_names_the_missing_key(results, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plots.training_curves(results)


@pytest.mark.parametrize("results, message", [
    ({"runs": {"fp8": {"train_loss": [1.0]}}}, "run 'fp8' has no 'recipe'"),
    ({"runs": {"fp8": run(fp8_grads=[{"step": 1}])}}, "run 'fp8': an entry of 'fp8_grads' has no 'relative_error'"),
    ({"runs": {"fp8": run(memory={"bytes_per_parameter": {"weights": 1.0}})}},
     "run 'fp8': memory['bytes_per_parameter'] has no 'master_weights' (it has 'weights')"),
])
def test_fp8lm_options_names_the_missing_key(results, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plots.fp8lm_options(results)


# ---- formats, rounding, scaling ------------------------------------------------------------------
def test_format_figures_take_one_name_or_a_non_empty_list():
    assert labelled(plots.value_grid("E4M3")).axes[0].get_yticklabels()[0].get_text() == "E4M3"
    assert len(labelled(plots.rounding_error("E5M2", points=50)).axes) == 1
    assert len(plots.rounding_error(["E4M3", "E2M1", "E8M0"], points=50).axes) == 3
    for figure in (plots.value_grid, plots.rounding_error):
        with pytest.raises(ValueError, match="names must name at least one format, got an empty list"):
            figure([])
        with pytest.raises(ValueError, match="unknown format 'nope'"):
            figure(["E4M3", "nope"])


@pytest.mark.parametrize("call, error, message", [
    (lambda: plots.rounding_error(low_exponent=4, high_exponent=-4), ValueError,
     r"high_exponent must be in \[5, 1023\], got -4"),
    (lambda: plots.rounding_error(points=1), ValueError, "points must be >= 2, got 1"),
    (lambda: plots.stochastic_rounding_bias(low=-1.0, high=-0.5), ValueError, "0 < low < high, got low=-1"),
    (lambda: plots.stochastic_rounding_bias(low=0.0), ValueError, "0 < low < high, got low=0"),
    (lambda: plots.stochastic_rounding_bias(low=1.5, high=1.0), ValueError, "0 < low < high"),
    (lambda: plots.stochastic_rounding_bias(samples=0), ValueError, "samples must be >= 1, got 0"),
    (lambda: plots.stochastic_rounding_bias(points=1.5), TypeError, "points must be an int, got float"),
    (lambda: plots.delayed_scaling_outlier(steps=20, spike_step=20), ValueError, r"spike_step must be in \[0, 19\]"),
    (lambda: plots.delayed_scaling_outlier(spike_step=-1), ValueError, r"spike_step must be in \[0, 49\]"),
    (lambda: plots.delayed_scaling_outlier(size=0), ValueError, "size must be >= 1, got 0"),
    (lambda: plots.delayed_scaling_outlier(spike_factor=0.0), ValueError,
     "spike_factor must be a finite number > 0, got 0.0"),
    (lambda: plots.block_scaling_snr(low_exponent=4), ValueError, r"low_exponent must be in \[-126, -1\], got 4"),
    (lambda: plots.block_scaling_snr(rows=0), ValueError, "rows must be >= 1, got 0"),
    # found by an audit: an infinite spike was drawn, a negative seed failed inside NumPy without
    # naming the parameter, and records that are not ScaleRecords gave an AttributeError
    (lambda: plots.delayed_scaling_outlier(spike_factor=math.inf), ValueError, "finite number > 0, got inf"),
    (lambda: plots.delayed_scaling_outlier(spike_factor="8"), ValueError, "spike_factor must be a finite number"),
    (lambda: plots.stochastic_rounding_bias(seed=-1), ValueError, "seed must be >= 0, got -1"),
    (lambda: plots.delayed_scaling_outlier(seed=1.5), TypeError, "seed must be an int, got float"),
    (lambda: plots.block_scaling_snr(seed=-2), ValueError, "seed must be >= 0, got -2"),
    (lambda: plots.scale_plot([1, 2]), TypeError, "scale_plot needs ScaleRecords .* got int 1"),
])
def test_figure_parameters_are_checked(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_parameter_figures_draw_small_inputs():
    labelled(plots.stochastic_rounding_bias("E5M2", low=2.0, high=3.0, points=5, samples=8))
    labelled(plots.delayed_scaling_outlier(steps=6, spike_step=5, history_len=2, size=8))
    labelled(plots.delayed_scaling_outlier(steps=1, spike_step=0, size=8))
    labelled(plots.block_scaling_snr(rows=1, columns=10, low_exponent=-1))


def test_scale_plot_draws_records_whose_statistics_are_all_zero_or_nan():
    zero = fp8.ScaleRecord("zeros", (4,), 0.0, 0.0, 0.0, 0.0)  # e.g. a zero-initialised layer
    nan = fp8.ScaleRecord("nan", (4,), float("nan"), float("nan"), None, None)
    for records in ([zero], [zero, nan]):
        figure = labelled(plots.scale_plot(records))
        assert [label.get_text() for label in figure.axes[0].get_yticklabels()] == [r.name for r in records]


@pytest.mark.parametrize("rows", [1, 3, 30])
def test_scale_plot_legend_sits_below_the_x_label(rows):
    records = [fp8.ScaleRecord(f"t{i}", (4,), 2.0**-i, 1.0, 2.0**(-i - 5), 1.0) for i in range(rows)]
    figure = plots.scale_plot(records)
    figure.draw_without_rendering()
    ax = figure.axes[0]
    label, legend = ax.xaxis.label.get_window_extent(), ax.get_legend().get_window_extent()
    assert legend.y1 <= label.y0 and legend.y0 >= 0  # under the label, inside the figure


# ---- without matplotlib ------------------------------------------------------------------------------
def test_every_figure_says_how_to_install_matplotlib():
    code = """
import sys; sys.modules['matplotlib'] = None  # makes any matplotlib import fail
from minifp8 import fp8, plots
from minifp8.train_tiny import FP8LM_RESULTS, load_results
calls = [plots.value_grid, plots.rounding_error, plots.stochastic_rounding_bias, plots.delayed_scaling_outlier,
         plots.block_scaling_snr, lambda: plots.scale_plot([fp8.ScaleRecord("x", (1,), 1.0, 1.0, 1.0, 1.0)]),
         lambda: plots.training_curves(load_results()), lambda: plots.fp8lm_options(load_results(FP8LM_RESULTS))]
for call in calls:
    try:
        call()
    except ImportError as error:
        print(error)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.splitlines() == ['minifp8.plots needs matplotlib: pip install "minifp8[plot]"'] * 8


# ---- found in a review: each failed before its fix ----------------------------------------------------
def test_stochastic_rounding_bias_measures_subnormal_inputs_in_the_subnormal_gap():
    """Below E4M3's smallest normal (2**-6) the values are multiples of 2**-9: nearest rounding's
    bias swings within +-1/2 of that gap, as the docstring says (it was up to 4 gaps)."""
    figure = plots.stochastic_rounding_bias("E4M3", 2.0**-9, 2.0**-7, points=41, samples=64)
    nearest = [line for line in figure.axes[1].get_lines() if line.get_label() == "nearest_even"][0]
    x, bias = nearest.get_xdata(), nearest.get_ydata()
    assert max(abs(bias)) == 0.5  # at the midpoints
    np.testing.assert_array_equal(bias, (quantize(x, "E4M3").astype(np.float64) - x) / 2.0**-9)


def test_rounding_error_says_a_format_without_nan_or_inf_saturates():
    texts = [text.get_text() for text in plots.rounding_error("E2M1", -4, 5, points=50).axes[0].texts]
    assert "overflow: saturates to 6" in texts and not any("NaN" in text or "Inf" in text for text in texts)


def test_delayed_scaling_outlier_refuses_a_format_that_cannot_show_clipping():
    with pytest.raises(ValueError, match="E2M1, which saturates instead"):
        plots.delayed_scaling_outlier(name="E2M1")


def test_a_wide_log2_axis_keeps_its_labels_readable():
    figure = plots.rounding_error("E5M2", -600, 600, points=100)  # (beyond, matplotlib itself overflows)
    labels = figure.axes[-1].get_xticks()
    assert 10 <= len(labels) <= 25


def test_training_curves_tell_every_unit_family_run_apart():
    """Only "unit" and "unit fp32" share a colour; the FP8-LM runs of the unit model (and a unit
    family list of recipes) each get their own colour or style, as the fp8lm experiment needs."""
    results = {"runs": {label: run(family="unit", recipe=recipe) for label, recipe in
                        [("unit fp32", "fp32"), ("unit", "unit"), ("unit + fp8 grads", "unit"),
                         ("unit current", "current"), ("unit delayed", "delayed")]}}
    lines = {line.get_label(): line for line in plots.training_curves(results).axes[0].get_lines()
             if not line.get_label().startswith("_")}
    looks = {label: (line.get_color(), line.get_linestyle()) for label, line in lines.items()}
    assert looks["unit"][0] == looks["unit fp32"][0] and looks["unit fp32"][1] == "--"
    assert len(set(looks.values())) == len(looks)


def test_a_short_run_still_draws_a_training_line():
    """30 steps with 20-step windows gave one window, a single point without a marker."""
    results = {"runs": {"fp8": run(train_loss=list(np.linspace(2.6, 1.9, 30)))}}
    line = [line for line in plots.training_curves(results).axes[0].get_lines() if line.get_label() == "fp8"][0]
    assert len(line.get_xdata()) >= 10


# ---- speed ------------------------------------------------------------------------------------------
def test_train_speed_draws_the_committed_run():
    from minifp8.bench import load_speed_results
    results = load_speed_results()
    axis = labelled(plots.train_speed(results)).axes[0]
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    assert legend == [f"{recipe}: {m['ratio']:.2f}x" for recipe, m in results["recipes"].items()] + [
        "target 1.5x", "mxfp8 target 2x"]


@pytest.mark.parametrize("results, error, message", [
    (None, TypeError, "results must be a dict, got NoneType"),
    ({"recipes": {}, "fp32": {}}, ValueError, "results has no 'window_steps' (it has 'recipes', 'fp32')"),
    ({"window_steps": 5, "recipes": {}, "fp32": {"step_ms": 9.0}}, ValueError,
     "results['recipes'] must be a non-empty dict"),
    ({"window_steps": 5, "recipes": {"fp8": {"ratio": 1.4}}, "fp32": {"step_ms": 9.0}}, ValueError,
     "recipe 'fp8' has no 'window_ratios' (it has 'ratio')"),
    ({"window_steps": 5, "recipes": {"fp8": {"ratio": 1.4, "window_ratios": [1.4]}}, "fp32": {}}, ValueError,
     "results['fp32'] has no 'step_ms'"),
    ({"window_steps": 0, "recipes": {"fp8": {"ratio": 1.4, "window_ratios": [1.4]}}, "fp32": {"step_ms": 9.0}},
     ValueError, "window_steps must be >= 1, got 0"),
])
def test_train_speed_says_what_it_cannot_draw(results, error, message):
    with pytest.raises(error, match=re.escape(message)):
        plots.train_speed(results)
