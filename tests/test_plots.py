"""minifp8.plots: every figure from the committed results and from small synthetic inputs, the
clear errors for inputs it cannot draw, and the hint when matplotlib is missing."""
import math
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import matplotlib.text  # noqa: E402

from minifp8 import formats, fp8, plots, quantize  # noqa: E402
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


def _looks(axis):
    """(colour, line style) of each labelled line of an axes."""
    return {line.get_label(): (line.get_color(), line.get_linestyle()) for line in axis.get_lines()
            if not line.get_label().startswith("_")}


def test_fp8lm_options_title_names_the_line_style_of_each_recipe():
    title = plots.fp8lm_options(load_results(FP8LM_RESULTS)).axes[0].get_title()
    assert title.endswith("(solid: unit, dashed: current)")
    results = {"runs": {label: run(label.split()[0]) for label in
                        ("fp32", "fp8", "fp8 + fp8 grads", "unit", "current", "current + fp8 grads")}}
    figure = plots.fp8lm_options(results)
    assert figure.axes[0].get_title().endswith("(solid: fp32, dashed: fp8, dotted: unit, dash-dot: current)")
    looks = _looks(figure.axes[0])
    assert looks["fp8"] == ("C0", "--") and looks["fp8 + fp8 grads"] == ("C1", "--") and looks["unit"][1] == ":"


# found in a review: with more recipes than line styles the styles came round again, and the
# runs of the first and the fifth recipe (fp32 and delayed in the headline) were both solid C0
@pytest.mark.parametrize("labels", [
    ("fp32", "fp8", "unit", "current", "delayed"),
    tuple(f"{recipe}{options}" for recipe in ("fp32", "fp8", "unit", "current", "delayed", "mxfp8")
          for options in ("", " + fp8 grads")),  # 12 runs: more than the ten colours
    tuple(f"r{i}" for i in range(40)),
])
def test_fp8lm_options_tells_every_run_apart(labels):
    results = {"runs": {label: run(label.split()[0], fp8_grads=[{"step": 4, "relative_error": 0.1}])
                        for label in labels}}
    figure = plots.fp8lm_options(results)
    for axis in figure.axes[:2]:
        looks = _looks(axis)
        assert list(looks) == list(labels) and len(set(looks.values())) == len(labels)
    assert "each run its own colour and line style" in figure.axes[0].get_title()


def test_fp8lm_options_refuses_more_runs_than_it_can_tell_apart():
    with pytest.raises(ValueError, match="fp8lm_options draws at most 40 runs .* got 41"):
        plots.fp8lm_options({"runs": {f"r{i}": run(f"r{i}") for i in range(41)}})


def test_fp8lm_options_draws_each_runs_loss_change_gradient_error_and_memory():
    """The values of all three panels (a review found the error panel's unread): the validation loss
    against the recipe's run without options after step 0, the FP8 gradients' relative error where
    they were cast (None: not cast, nothing drawn), and the bytes per parameter stacked by component."""
    def memory(*values):
        names = ("weights", "master_weights", "gradients", "first_moment", "second_moment")
        return {"bytes_per_parameter": dict(zip(names, values))}

    val = [{"step": 0, "loss": 2.7}, {"step": 2, "loss": 2.0}, {"step": 4, "loss": 1.6}]
    results = {"runs": {
        "unit": run("unit", val=val, fp8_grads=[{"step": 2, "relative_error": None}],
                    memory=memory(4, 0, 4, 4, 4)),
        "unit + fp8 grads": run("unit", val=[{"step": 0, "loss": 2.7}, {"step": 2, "loss": 2.2},
                                             {"step": 4, "loss": 1.2}],
                                fp8_grads=[{"step": 2, "relative_error": 0.25}, {"step": 4, "relative_error": 0.5}],
                                memory=memory(1, 2, 1, 1, 2))}}
    loss_axis, error_axis, memory_axis = plots.fp8lm_options(results).axes
    changes = {line.get_label(): line for line in loss_axis.get_lines()}
    assert list(changes["unit"].get_xdata()) == [2, 4] and list(changes["unit"].get_ydata()) == [0, 0]
    assert list(changes["unit + fp8 grads"].get_xdata()) == [2, 4]
    np.testing.assert_allclose(changes["unit + fp8 grads"].get_ydata(), [2.2 / 2.0 - 1, 1.2 / 1.6 - 1])
    errors = {line.get_label(): line for line in error_axis.get_lines()}
    assert list(errors) == ["unit + fp8 grads"]
    assert list(errors["unit + fp8 grads"].get_xdata()) == [2, 4]
    assert list(errors["unit + fp8 grads"].get_ydata()) == [0.25, 0.5]
    bars = [(patch.get_x(), patch.get_width()) for patch in memory_axis.patches]  # (component by component)
    rows = [bars[0::2], bars[1::2]]  # (runs in order within each component)
    assert [width for _, width in rows[0]] == [4, 0, 4, 4, 4] and [width for _, width in rows[1]] == [1, 2, 1, 1, 2]
    assert [left for left, _ in rows[1]] == [0, 1, 3, 4, 5]  # stacked
    assert {"16.0 B", "7.0 B"} <= {text.get_text() for text in memory_axis.texts}  # (the totals)



def test_fp8lm_options_keeps_the_other_runs_visible_beside_one_that_blew_up():
    """A review's find: one option's loss at 90x its recipe's drew the axis from -528% to +18041%,
    and the healthy runs' 1% changes vanished; a diverged run drew no cross. The axis now stops at
    +-25% and says so, and a diverged run ends in a cross at its last finite change, on the edge."""
    values = lambda *losses: [{"step": 4 * i, "loss": loss} for i, loss in enumerate(losses)]
    results = {"runs": {
        "current": run("current", val=values(2.63, 2.5, 2.3, 2.2)),
        "current + fp8 grads": run("current", val=values(2.63, 2.52, 2.28, 2.21)),
        "current + fp8 optimizer O2": run("current", val=values(2.63, 18.6, 67.3, float("inf")),
                                          diverged={"step": 12, "message": "x"})}}
    axis = plots.fp8lm_options(results).axes[0]
    low, high = axis.get_ylim()
    kept = [0.0, 2.52 / 2.5 - 1, 2.28 / 2.3 - 1, 2.21 / 2.2 - 1, 0.25]  # (the blown-up run's cut at +25%)
    span = max(kept) - min(kept)
    assert low == pytest.approx(min(kept) - 0.05 * span)
    assert high == pytest.approx(max(kept) + 0.05 * span + 0.6 * (1.1 * span))  # (and the legend's headroom)
    assert any(text.get_text() == "changes beyond \u00b125% run off the axis" for text in axis.texts)
    crosses = [line for line in axis.get_lines() if line.get_marker() == "x"]
    assert len(crosses) == 1 and list(crosses[0].get_xdata()) == [8]
    assert list(crosses[0].get_ydata()) == [pytest.approx(max(kept) + 0.05 * span)]  # (on the top edge)
    healthy = plots.fp8lm_options({"runs": dict(list(results["runs"].items())[:2])}).axes[0]
    assert not [text for text in healthy.texts if "run off" in text.get_text()]


def test_fp8lm_options_draws_the_memory_of_the_first_recipe_that_records_it_and_fits_its_bars():
    """A review's find: the panel read only the first recipe's runs (empty, without a word, where
    they had no memory report), and its axis stopped at 19 B, cutting off a 20 B bar's label."""
    names = ("weights", "master_weights", "gradients", "first_moment", "second_moment")
    memory = {"bytes_per_parameter": dict(zip(names, (4, 4, 4, 4, 4)))}
    results = {"runs": {"unit": run("unit"), "current": run("current", memory=memory)}}
    axis = plots.fp8lm_options(results).axes[2]
    assert axis.get_ylabel() == "options (current runs)" and "20.0 B" in [text.get_text() for text in axis.texts]
    assert axis.get_xlim() == (0, pytest.approx(1.15 * 20))
    none = plots.fp8lm_options({"runs": {"unit": run("unit")}}).axes[2]
    assert "no run records the memory it held" in [text.get_text() for text in none.texts]
    assert none.get_xlim() == (0, pytest.approx(1.15 * 16))

def test_fp8lm_options_draws_the_headline_runs_apart_and_labelled_as_what_they_are():
    """The headline's "unit fp32" (recipe fp32, the unit-scaled model) is no option of the fp32
    run: it was labelled "fp32" in the memory panel and compared with the standard fp32 run."""
    results = load_results(HEADLINE_RESULTS)
    figure = plots.fp8lm_options(results)
    looks = _looks(figure.axes[0])
    assert list(looks) == list(results["runs"]) and len(set(looks.values())) == len(looks)
    assert [label.get_text() for label in figure.axes[2].get_yticklabels()] == ["baseline", "unit fp32"]
    unit_fp32 = [line for line in figure.axes[0].get_lines() if line.get_label() == "unit fp32"][0]
    assert len(unit_fp32.get_ydata()) and not np.any(unit_fp32.get_ydata())  # its own reference


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
    # found in a review: a run whose val is None (no evaluations) failed with "'NoneType' object is not iterable"
    labelled(plots.fp8lm_options({"runs": {"fp8": run(val=None)}}))
    labelled(plots.fp8lm_options({"runs": {"fp8": run(val=None), "fp8 + fp8 grads": run()}}))
    labelled(plots.training_curves({"runs": {"fp8": run(val=None, cast_stats=None)}}))


def test_a_diverged_run_is_drawn_to_its_last_step_and_crossed_where_it_diverged():
    """237 steps, then the loss of step 238 was not finite. Found in a review: only whole smoothing
    windows were drawn (the line stopped at step 210.5, the last 27 steps, where a run blows up,
    left out) and the cross sat on the line's end, not at the step that diverged."""
    losses = list(np.linspace(2.6, 1.8, 220)) + [3.0] * 17
    results = {"runs": {"fp8": run(train_loss=losses, diverged={"step": 238, "message": "loss became nan"})}}
    lines = plots.training_curves(results, smooth_steps=20).axes[0].get_lines()
    curve = [line for line in lines if line.get_label() == "fp8"][0]
    assert curve.get_xdata()[-1] == 229.0 and curve.get_ydata()[-1] == 3.0  # steps 221-237, all at 3.0
    crosses = [line for line in lines if line.get_marker() == "x"]
    assert len(crosses) == 1 and list(crosses[0].get_xdata()) == [238] and list(crosses[0].get_ydata()) == [3.0]


def test_a_run_that_diverged_in_its_first_step_is_crossed_on_its_validation_loss():
    """Found in a review: with no training loss (it diverged in step 1) the run drew nothing at all,
    neither line nor cross, its one marker hidden under the other runs'."""
    results = {"runs": {"fp32": run("fp32"), "fp8": run(train_loss=[], val=[{"step": 0, "loss": 2.7}],
                                                           diverged={"step": 1, "message": "x"})}}
    crosses = [line for line in plots.training_curves(results).axes[0].get_lines() if line.get_marker() == "x"]
    assert len(crosses) == 1 and list(crosses[0].get_xdata()) == [1] and list(crosses[0].get_ydata()) == [2.7]


def test_training_curves_draws_each_runs_validation_losses_and_worst_underflow_in_percent():
    """The values drawn, not only the legend: each run's validation markers in its colour at its
    evaluation steps, and its worst cast point's underflow as a percentage at each progress line
    (a review found no test that read them)."""
    results = {"runs": {
        "fp32": run("fp32", val=[{"step": 0, "loss": 2.7}, {"step": 2, "loss": 2.1}, {"step": 4, "loss": 1.8}],
                    cast_stats=[]),
        "fp8": run("fp8", cast_stats=[{"step": 2, "max_underflow": 0.5}, {"step": 4, "max_underflow": 0.125}]),
    }}
    loss_axis, underflow_axis = plots.training_curves(results, smooth_steps=1).axes
    curves = {line.get_label(): line for line in loss_axis.get_lines() if line.get_label() in results["runs"]}
    for label, metrics in results["runs"].items():
        markers = [(list(line.get_xdata()), list(line.get_ydata())) for line in loss_axis.get_lines()
                   if line.get_label().startswith("_") and line.get_linestyle() == "None"
                   and line.get_color() == curves[label].get_color()]
        assert markers == [([entry["step"] for entry in metrics["val"]], [entry["loss"] for entry in metrics["val"]])]
        assert curves[label].get_marker() == [line.get_marker() for line in loss_axis.get_lines()
                                              if line.get_color() == curves[label].get_color()
                                              and line.get_linestyle() == "None"][0]  # (the legend shows it)
    underflow = {line.get_label(): line for line in underflow_axis.get_lines()}
    assert list(underflow) == ["fp8"]  # (fp32 has no casts)
    assert list(underflow["fp8"].get_xdata()) == [2, 4] and list(underflow["fp8"].get_ydata()) == [50.0, 12.5]
    assert underflow["fp8"].get_color() == curves["fp8"].get_color()


def test_a_loss_that_blows_up_does_not_flatten_the_other_curves():
    """Found in a review: the loss axis fitted every loss, so one run at 1e12 drew the others as a
    flat line at 0. The axis now stops at 1.25 times the highest first loss, says so, and keeps the
    diverged run's cross on its top edge."""
    results = {"runs": {"fp32": run("fp32"), "fp8": run(train_loss=[2.6, 50.0, 1e12],
                                                           diverged={"step": 4, "message": "x"})}}
    axis = plots.training_curves(results, smooth_steps=1).axes[0]
    assert axis.get_ylim()[1] == pytest.approx(1.25 * 2.7)  # (the first validation loss)
    # the bottom fits what lies below the top (the lowest loss, 1.9), as the top alone did not: it
    # kept matplotlib's margin from 1e12, -5e10, and the other curves ran along the top edge
    assert axis.get_ylim()[0] == pytest.approx(1.9 - 0.05 * (1.25 * 2.7 - 1.9))
    floored = plots.training_curves({**results, "loss_floor": 1.2}, smooth_steps=1).axes[0]
    assert floored.get_ylim() == pytest.approx((1.2 - 0.05 * (1.25 * 2.7 - 1.2), 1.25 * 2.7))  # (the floor shows)
    assert "losses above 3.38 run off the top" in [text.get_text() for text in axis.texts]
    crosses = [line for line in axis.get_lines() if line.get_marker() == "x"]
    assert list(crosses[0].get_ydata()) == [pytest.approx(1.25 * 2.7)]
    plain = plots.training_curves({"runs": {"fp32": run("fp32")}}).axes[0]  # (runs that stay in range: fitted)
    assert plain.get_ylim()[1] < 2.8 and not [text for text in plain.texts if "run off" in text.get_text()]


def test_value_grid_draws_each_formats_last_gap_up_to_its_largest_value():
    """Found in a review: the last gap, from the largest value but one, had no width (E4M3's staircase
    stopped at 416, E5M2's at 49152)."""
    figure = plots.value_grid(("E4M3", "E5M2", "E2M1"))
    ends = {line.get_label(): line.get_xdata()[-1] for line in figure.axes[1].get_lines()
            if not line.get_label().startswith("_")}
    assert ends == {"E4M3": 448.0, "E5M2": 57344.0, "E2M1": 6.0}


def test_rounding_error_shades_the_subnormals_apart_from_what_rounds_to_zero():
    """Found in a review: the band labelled "subnormal" ran from the axis' left end (2**-19), so E4M3's
    label sat at 2**-12.5, where no E4M3 value lies and everything rounds to zero."""
    figure = plots.rounding_error(("E4M3", "E5M2"))
    for axis, (smallest, normal) in zip(figure.axes, ((2.0**-9, 2.0**-6), (2.0**-16, 2.0**-14))):
        spans = sorted(tuple(np.round(np.log2(patch.get_x() + np.array([0, patch.get_width()])), 6))
                       for patch in axis.patches)
        assert (np.log2(smallest / 2), np.log2(normal)) in spans  # the subnormals, to half the smallest
        label = next(text for text in axis.texts if text.get_text() == "subnormal")
        assert smallest / 2 < label.get_position()[0] < normal
    e4m3_texts = [text.get_text() for text in figure.axes[0].texts]
    assert "rounds to 0" in e4m3_texts


def test_rounding_error_shades_overflow_from_half_a_gap_above_the_max():
    """Found in a review: the grey overflow band began at the max (448, 57344), though inputs up to
    half a gap above it round down to the max (overflow is judged after rounding)."""
    figure = plots.rounding_error(("E4M3", "E5M2"))
    for axis, fmt in zip(figure.axes, (formats.E4M3, formats.E5M2)):
        overflows_from = min(patch.get_x() for patch in axis.patches if patch.get_x() > fmt.min_normal)
        below, above = np.nextafter(overflows_from, 0.0), np.nextafter(overflows_from, np.inf)
        assert quantize(np.array([below]), fmt)[0] == fmt.max and not np.isfinite(quantize(np.array([above]), fmt)[0])
    assert [min(p.get_x() for p in axis.patches if p.get_x() > 1) for axis in figure.axes] == [464.0, 61440.0]


def test_scale_curves_keeps_e5m2s_range_in_view_and_marks_zero_gradients():
    """Found in a review: with every gradient below 2**-17 the axis ended under E5M2's smallest
    subnormal and neither band showed; a gradient of exactly 0 vanished from the log axis."""
    results = {"runs": {"fp8": {"recipe": "fp8", "scales": [_scales(50, 1.0, 2.0**-26), _scales(100, 2.0, 0.0),
                                                              _scales(150, 2.0, 2.0**-20)]}}}
    gradient_axis = plots.scale_curves(results, tensor="residual").axes[-1]
    low, high = gradient_axis.get_ylim()
    assert low <= 2.0**-27 and high >= 2.0**-12  # (E5M2's normals begin at 2**-14)
    hollow = [line for line in gradient_axis.get_lines() if line.get_markerfacecolor() == "none"]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [100] and list(hollow[0].get_ydata()) == [low]



@pytest.mark.parametrize("std", [None, float("inf"), 0.0], ids=["NaN", "Inf", "zero"])
def test_scale_curves_of_a_tensor_without_a_finite_positive_std_saves_and_says_so(std, tmp_path):
    """A review's find: a run whose std was None (NaN) or Inf at every record returned a figure that
    raised "Data cannot be log-scaled" only when saved (train_tiny's scales.png ended in a traceback)."""
    results = {"runs": {"a": {"recipe": "fp8", "scales": [_scales(1, std, 1e-5), _scales(2, std, 1e-5)]}}}
    figure = plots.scale_curves(results, tensor="residual")
    figure.savefig(tmp_path / "scales.png")
    value_axis = figure.axes[0]
    assert value_axis.get_ylim() == (0.5, 2.0)
    assert "no run has a finite std > 0 of residual" in [text.get_text() for text in value_axis.texts]
    fine = plots.scale_curves({"runs": {"a": {"recipe": "fp8", "scales": [_scales(1, 1.0, 1e-5)]}}}, tensor="residual")
    assert not fine.axes[0].texts

@pytest.mark.parametrize("figure", [plots.training_curves, plots.fp8lm_options, plots.validation_curves])
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


def _evaluations(*exact_match):
    """A run's ``val`` list on the arithmetic corpus: one evaluation every 250 steps."""
    return [{"step": 250 * i, "loss": 2.0 - 0.1 * i, "char_accuracy": 0.5, "exact_match": share}
            for i, share in enumerate(exact_match)]


def test_validation_curves_draws_each_runs_loss_and_exact_answers():
    results = {"loss_floor": 1.0, "runs": {"fp32": run("fp32", val=_evaluations(0.0, 0.2, 0.6)),
                                           "current": run("current", val=_evaluations(0.0, None, 0.1)),
                                           "not evaluated": run(val=[])}}
    figure = labelled(plots.validation_curves(results))
    loss_axis, exact_axis = figure.axes
    assert [text.get_text() for text in exact_axis.get_legend().get_texts()] == ["fp32", "current"]
    drawn = {line.get_label(): line for line in exact_axis.get_lines()}
    assert list(drawn) == ["fp32", "current"]
    np.testing.assert_array_equal(drawn["fp32"].get_xdata(), [0, 250, 500])
    np.testing.assert_array_equal(drawn["fp32"].get_ydata(), [0.0, 0.2, 0.6])
    np.testing.assert_array_equal(drawn["current"].get_ydata(), [0.0, np.nan, 0.1])  # (null, JSON's NaN)
    losses = {line.get_label(): list(line.get_ydata()) for line in loss_axis.get_lines()}
    assert losses["fp32"] == [2.0, 1.9, 1.8]
    assert _looks(exact_axis) == {label: _looks(loss_axis)[label] for label in ("fp32", "current")}
    assert exact_axis.yaxis.get_major_formatter()(0.25, None) == "25%"


@pytest.mark.parametrize("results, error, message", [
    ({"runs": {"fp8": run()}}, ValueError,  # a run on --data text: its evaluations have no answer accuracy
     "validation_curves: run 'fp8': an entry of 'val' has no 'exact_match' (it has 'step', 'loss'): answer "
     "accuracy is measured on the bundled arithmetic corpus only, not on --data text"),
    ({"runs": {"fp8": run(val=[{"step": 4, "loss": 1.9, "exact_match": "0.5"}])}}, TypeError,
     "validation_curves: run 'fp8': an entry of 'val': 'exact_match' must be a number or None, got str '0.5'"),
    ({"runs": {"fp8": {"recipe": "fp8"}}}, ValueError, "validation_curves: run 'fp8' has no 'val' (it has 'recipe')"),
    # found in a review: a missing 'loss' beside an 'exact_match' was blamed on --data text
    ({"runs": {"fp8": run(val=[{"step": 4, "exact_match": 0.1}])}}, ValueError,
     "validation_curves: run 'fp8': an entry of 'val' has no 'loss' (it has 'step', 'exact_match')"),
    ({"loss_floor": "1.0", "runs": {"fp8": run(val=_evaluations(0.0))}}, TypeError,
     "validation_curves: results['loss_floor'] must be a number, got str '1.0'"),
])
def test_validation_curves_says_what_it_cannot_draw(results, error, message):
    with pytest.raises(error, match=re.escape(message) + "$"):  # (the whole message: no hint appended)
        plots.validation_curves(results)



def test_gap_curves_draws_each_arms_gap_to_its_fp32_run_on_a_panel_per_seed():
    """One panel per seed, in the first arm's order; each arm's line is loss / fp32 loss - 1 at
    every evaluation (None, JSON's NaN, left a gap), each arm in its own colour and marker."""
    fp32 = [{"step": 0, "loss": 2.0}, {"step": 250, "loss": 1.6}, {"step": 500, "loss": 1.25}]
    arms = {"every cast": {"1": ([{"step": 0, "loss": 2.0}, {"step": 250, "loss": 1.8}, {"step": 500, "loss": 1.5}],
                                 fp32),
                           "0": (fp32, fp32)},
            "centred": {"0": ([{"step": 0, "loss": 2.2}, {"step": 250, "loss": None}, {"step": 500, "loss": 1.0}], fp32),
                        "1": (fp32, fp32), "2": (fp32, fp32)}}  # (a seed no other arm has is not drawn)
    figure = labelled(plots.gap_curves(arms, title="gaps"))
    assert [axis.get_title() for axis in figure.axes] == ["seed 1", "seed 0"] and figure.get_suptitle() == "gaps"
    lines = {(axis.get_title(), line.get_label()): line for axis in figure.axes for line in axis.get_lines()
             if not line.get_label().startswith("_")}
    np.testing.assert_allclose(lines["seed 1", "every cast"].get_ydata(), [0.0, 0.125, 0.2])
    np.testing.assert_allclose(lines["seed 0", "centred"].get_ydata(), [0.1, np.nan, -0.2])
    np.testing.assert_array_equal(lines["seed 0", "centred"].get_xdata(), [0, 250, 500])
    looks = {label: (line.get_color(), line.get_marker()) for (_, label), line in lines.items()}
    assert len(set(looks.values())) == 2
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["every cast", "centred"]


def test_gap_curves_draws_an_arm_that_stopped_early_to_a_cross():
    """Found in a review: an arm that diverged (its val cut short) raised "at different steps"."""
    fp32 = [{"step": 0, "loss": 2.0}, {"step": 250, "loss": 1.6}, {"step": 500, "loss": 1.25}]
    arms = {"diverged": {"0": ([{"step": 0, "loss": 2.0}, {"step": 250, "loss": 2.4}], fp32)},
            "whole": {"0": (fp32, fp32)}}
    axis = plots.gap_curves(arms).axes[0]
    lines = {line.get_label(): line for line in axis.get_lines() if not line.get_label().startswith("_")}
    np.testing.assert_allclose(lines["diverged"].get_ydata(), [0.0, 0.5])
    crosses = [line for line in axis.get_lines() if line.get_marker() == "x"]
    assert len(crosses) == 1 and list(crosses[0].get_xdata()) == [250]


_VAL = [{"step": 0, "loss": 2.0}]


@pytest.mark.parametrize("arms, error, message", [
    (None, TypeError, "arms must be a dict of arm label -> {seed: (val, fp32 val)}, got NoneType"),
    ({}, ValueError, "arms holds no arm"),
    ({1: {"0": (_VAL, _VAL)}}, TypeError, "an arm's label must be a str, got int 1"),
    ({"a": [(_VAL, _VAL)]}, TypeError, "arm 'a' must be a non-empty dict of seed -> (val, fp32 val), got list"),
    ({"a": {}}, ValueError, "arm 'a' must be a non-empty dict of seed -> (val, fp32 val), got dict"),
    ({"a": {"0": (_VAL, _VAL)}, "b": {"1": (_VAL, _VAL)}}, ValueError, "arm 'b' has no '0' (it has '1')"),
    ({"a": {"0": (_VAL,)}}, TypeError, "arm 'a' at seed '0' must be a pair (its val, its fp32 run's val), got tuple"),
    ({"a": {"0": (_VAL, None)}}, TypeError, "arm 'a' at seed '0': fp32 val must be a list of evaluations"),
    ({"a": {"0": ([{"step": 0}], _VAL)}}, ValueError, "arm 'a' at seed '0': val: an evaluation has no 'loss' (it has 'step')"),
    ({"a": {"0": ([{"step": 0, "loss": "2"}], _VAL)}}, TypeError,
     "arm 'a' at seed '0': val: an evaluation: 'loss' must be a number or None, got str '2'"),
    ({"a": {"0": ([{"step": None, "loss": 2.0}], _VAL)}}, TypeError,
     "arm 'a' at seed '0': val: an evaluation: 'step' must be a number, got None"),
    ({"a": {"0": ([{"step": 250, "loss": 2.0}], _VAL)}}, ValueError,
     "arm 'a' at seed '0': its evaluations are not its fp32 run's steps, or the first of them (an arm that stopped "
     "early): steps 250 against 0"),
    ({"a": {"0": ([{"step": 0, "loss": 2.0}, {"step": 250, "loss": 2.0}], _VAL)}}, ValueError,  # (more than fp32's)
     "arm 'a' at seed '0': its evaluations are not its fp32 run's steps, or the first of them (an arm that stopped "
     "early): steps 0, 250 against 0"),
    # found in a review: a loss of 0 divided unchecked (a RuntimeWarning, an Inf gap), and arms without a single
    # evaluation drew an empty figure where validation_curves and scale_curves say so
    ({"a": {"0": (_VAL, [{"step": 0, "loss": 0.0}])}}, ValueError,
     "arm 'a' at seed '0': fp32 val: the loss at step 0 is 0: the gap divides by the fp32 run's loss, which must be "
     "a finite number > 0"),
    ({"a": {"0": (_VAL, [{"step": 0, "loss": -1.5}])}}, ValueError,
     "arm 'a' at seed '0': fp32 val: the loss at step 0 is -1.5: the gap divides"),
    ({"a": {"0": ([{"step": 0, "loss": 2.0}, {"step": 9, "loss": 2.0}], [{"step": 0, "loss": 2.0},
                                                                          {"step": 9, "loss": None}])}}, ValueError,
     "arm 'a' at seed '0': fp32 val: the loss at step 9 is None (NaN): the gap divides"),
    ({"a": {"0": ([], _VAL), "1": ([], [])}, "b": {"0": ([], []), "1": ([], _VAL)}}, ValueError,
     "no arm has an evaluation (every val list is empty): nothing to draw"),
])
def test_gap_curves_says_what_it_cannot_draw(arms, error, message):
    with pytest.raises(error, match=re.escape(f"gap_curves: {message}")):
        plots.gap_curves(arms)


def test_gap_curves_checks_only_the_fp32_losses_it_divides_by():
    """An arm that stopped early is divided by its fp32 run's first losses only: a later fp32 loss
    that could not be divided by is no reason to refuse it; an arm with no evaluation at one seed
    draws nothing there."""
    fp32 = [{"step": 0, "loss": 2.0}, {"step": 250, "loss": None}]
    axes = labelled(plots.gap_curves({"stopped": {"0": ([{"step": 0, "loss": 2.5}], fp32), "1": ([], fp32)}})).axes
    drawn = [line for line in axes[0].get_lines() if line.get_label() == "stopped"]
    np.testing.assert_allclose(drawn[0].get_ydata(), [0.25])
    assert [len(line.get_xdata()) for line in axes[1].get_lines() if line.get_label() == "stopped"] == [0]


def _scales(step, value, gradient, **more):
    return {"step": step, "forward_std": {"residual": value, **more}, "backward_mean_abs": {"residual": gradient},
            "backward_std": {"residual": None if gradient is None else 2 * gradient}}


def test_scale_curves_draws_each_runs_tensor_and_gradient_against_e5m2():
    """Top: the tensor's std; bottom: its gradient's statistic, with E5M2's normals and subnormals
    shaded; runs without scales (trained without --track-scales) are left out."""
    results = {"runs": {"fp32": {"recipe": "fp32", "scales": [_scales(50, 1.0, 1e-4), _scales(100, 2.0, None)]},
                        "fp8": {"recipe": "fp8", "scales": [_scales(50, 4.0, 1e-6)]},
                        "old": {"recipe": "current"}}}
    figure = labelled(plots.scale_curves(results, tensor="residual", title="scales"))
    value_axis, gradient_axis = figure.axes
    assert value_axis.get_title() == "scales"
    lines = {(axis is value_axis, line.get_label()): line for axis in figure.axes for line in axis.get_lines()}
    assert {label for _, label in lines} == {"fp32", "fp8"}
    np.testing.assert_array_equal(lines[True, "fp32"].get_ydata(), [1.0, 2.0])
    np.testing.assert_array_equal(lines[False, "fp32"].get_ydata(), [1e-4, np.nan])
    np.testing.assert_array_equal(lines[False, "fp8"].get_xdata(), [50])
    assert lines[True, "fp8"].get_color() == plots.RUN_STYLES["fp8"][0]
    assert len(gradient_axis.patches) == 2  # E5M2's normal and subnormal bands
    low, high = gradient_axis.get_ylim()
    assert low <= 2.0**-17 and high >= 1e-4  # E5M2's smallest subnormal and every gradient in view
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["E5M2 normal numbers", "E5M2 subnormals",
                                                                           "fp32", "fp8"]
    std = plots.scale_curves(results, tensor="residual", statistic="std")
    np.testing.assert_array_equal(std.axes[1].get_lines()[0].get_ydata(), [2e-4, np.nan])


def test_scale_curves_draws_the_shared_share_between_where_the_scales_hold_it():
    """A middle panel, from 0 to 1, of forward_shared_fraction where any entry holds it (NaN where
    an entry of a run resumed across versions does not); the other two panels as without it."""
    def shared(step, value, gradient, share):
        return {**_scales(step, value, gradient), "forward_shared_fraction": {"residual": share}}

    results = {"runs": {"fp32": {"recipe": "fp32", "scales": [_scales(50, 1.0, 1e-4), shared(100, 2.0, 1e-5, 0.25)]},
                        "fp8": {"recipe": "fp8", "scales": [shared(50, 4.0, 1e-6, None), shared(100, 8.0, 1e-7, 0.9)]}}}
    figure = labelled(plots.scale_curves(results, tensor="residual", title="scales"))
    value_axis, share_axis, gradient_axis = figure.axes
    assert value_axis.get_title() == "scales" and share_axis.get_ylim() == (0, 1.05)
    lines = {(axis, line.get_label()): line.get_ydata() for axis in (0, 1, 2)
             for line in figure.axes[axis].get_lines()}
    np.testing.assert_array_equal(lines[1, "fp32"], [np.nan, 0.25])
    np.testing.assert_array_equal(lines[1, "fp8"], [np.nan, 0.9])
    np.testing.assert_array_equal(lines[0, "fp8"], [4.0, 8.0])
    np.testing.assert_array_equal(lines[2, "fp8"], [1e-6, 1e-7])
    assert len(gradient_axis.patches) == 2 and not share_axis.patches


@pytest.mark.parametrize("kwargs, error, message", [
    ({"results": {"runs": {"fp32": {}}}}, ValueError,
     "no run has scales: train with python -m minifp8.train_tiny --track-scales --out DIR"),
    ({"results": {"runs": {"fp32": {"scales": [_scales(50, 1.0, 1e-4)]}}}, "tensor": "residual#2"}, ValueError,
     "run 'fp32': an entry of 'scales': 'forward_std' has no 'residual#2' (it has 'residual'): pass tensor= one "
     "of these names"),
    ({"results": {"runs": {"fp32": {"scales": [_scales(50, 1.0, 1e-4)]}}}, "statistic": "max"}, ValueError,
     "statistic must be 'mean_abs' or 'std', got 'max'"),
    ({"results": {"runs": {"fp32": {"scales": [_scales(50, 1.0, 1e-4)]}}}, "tensor": 2}, TypeError,
     "tensor must be a str (a tracked tensor's name), got int 2"),
    ({"results": {"runs": {"fp32": {"scales": {"step": 50}}}}, "tensor": "residual"}, TypeError,
     "run 'fp32': 'scales' must be a list of dicts, got dict"),
    ({"results": {"runs": {"fp32": {"scales": [{"step": 50, "forward_std": {}}]}}}, "tensor": "residual"}, ValueError,
     "run 'fp32': an entry of 'scales' has no 'backward_mean_abs' (it has 'step', 'forward_std')"),
    ({"results": {"runs": {"fp32": {"scales": [_scales("50", 1.0, 1e-4)]}}}, "tensor": "residual"}, TypeError,
     "run 'fp32': an entry of 'scales': 'step' must be a number, got str '50'"),
    ({"results": {"runs": {"fp32": {"scales": [_scales(50, 1.0, "1e-4")]}}}, "tensor": "residual"}, TypeError,
     "run 'fp32': an entry of 'scales': 'backward_mean_abs': 'residual' must be a number or None, got str '1e-4'"),
    ({"results": {"runs": {"fp32": {"scales": [{**_scales(50, 1.0, 1e-4), "forward_shared_fraction": {"q": 0.5}}]}}},
      "tensor": "residual"}, ValueError,
     "run 'fp32': an entry of 'scales': 'forward_shared_fraction' has no 'residual' (it has 'q'): pass tensor= one "
     "of these names"),
    ({"results": {"runs": {"fp32": {"scales": [{**_scales(50, 1.0, 1e-4), "forward_shared_fraction": {
        "residual": "0.5"}}]}}}, "tensor": "residual"}, TypeError,
     "run 'fp32': an entry of 'scales': 'forward_shared_fraction': 'residual' must be a number or None, got str '0.5'"),
    ({"results": {"config": {}}}, ValueError, "results has no 'runs' (it has 'config')"),
])
def test_scale_curves_says_what_it_cannot_draw(kwargs, error, message):
    with pytest.raises(error, match=re.escape(f"scale_curves: {message}")):
        plots.scale_curves(**{"tensor": "residual", **kwargs})


def test_seeds_results_are_not_a_training_document():
    message = ("training_curves: results has no 'runs' (it has 'description', 'commands', 'kernels', 'val_loss', "
               "'other_kernels')")
    with pytest.raises(ValueError, match=re.escape(message)):
        plots.training_curves(load_results(HEADLINE_RESULTS.with_name("seeds.json")))


@pytest.mark.parametrize("results, message", [
    ({"runs": {"fp8": {"recipe": "fp8"}}}, "run 'fp8' has no 'train_loss'"),
    ({"runs": {"fp8": run(cast_stats=[{"step": 1}])}}, "run 'fp8': an entry of 'cast_stats' has no 'max_underflow'"),
    ({"train_loss_every": 0, "runs": {"fp8": run()}},
     "training_curves: results['train_loss_every'] must be >= 1, got 0"),
])
def test_training_curves_names_the_missing_key(results, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plots.training_curves(results)


# found in a review: each was drawn silently or failed with Python's own message
@pytest.mark.parametrize("figure", [plots.training_curves, plots.fp8lm_options])
@pytest.mark.parametrize("results, error, message", [
    ({"runs": {"fp8": run(val={"step": 4, "loss": 1.9})}}, TypeError,
     "run 'fp8': 'val' must be a list of dicts, got dict"),
    ({"runs": {"fp8": run(val=[{"step": 4, "loss": "1.9"}])}}, TypeError,
     "run 'fp8': an entry of 'val': 'loss' must be a number or None, got str '1.9'"),
    ({"runs": {"fp8": run(val=[{"step": None, "loss": 1.9}])}}, TypeError,
     "run 'fp8': an entry of 'val': 'step' must be a number, got NoneType None"),
    ({"runs": {1: run()}}, TypeError, "a run's label must be a str, got int 1"),
])
def test_results_figures_check_the_types_they_read(figure, results, error, message):
    with pytest.raises(error, match=re.escape(f"{figure.__name__}: {message}")):
        figure(results)


@pytest.mark.parametrize("call, error, message", [
    (lambda: plots.training_curves({"runs": {"fp8": run()}}, smooth_steps=0), ValueError,
     "smooth_steps must be >= 1, got 0"),
    (lambda: plots.training_curves({"runs": {"fp8": run()}}, smooth_steps=-5), ValueError,
     "smooth_steps must be >= 1, got -5"),
    (lambda: plots.training_curves({"runs": {"fp8": run()}}, smooth_steps="20"), TypeError,
     "smooth_steps must be an int, got str '20'"),
    (lambda: plots.training_curves({"runs": {"fp8": run()}}, smooth_steps=math.nan), TypeError,
     "smooth_steps must be an int, got float nan"),
    (lambda: plots.training_curves({"runs": {"fp8": run(train_loss=None)}}), TypeError,
     "training_curves: run 'fp8': 'train_loss' must be a flat list of numbers, got NoneType None"),
    (lambda: plots.training_curves({"runs": {"fp8": run(train_loss=["2.6"])}}), TypeError,
     "training_curves: run 'fp8': 'train_loss' must be a flat list of numbers, got entry 0 str '2.6'"),
    (lambda: plots.training_curves({"loss_floor": "1.0", "runs": {"fp8": run()}}), TypeError,
     "training_curves: results['loss_floor'] must be a number, got str '1.0'"),
    # found in a review: the only message of the results without the figure and the field's place
    (lambda: plots.training_curves({"train_loss_every": 2.0, "runs": {"fp8": run()}}), TypeError,
     "training_curves: results['train_loss_every'] must be an int, got float 2.0"),
    (lambda: plots.training_curves({"runs": {"fp8": run(train_loss=[2.6, True])}}), TypeError,
     "training_curves: run 'fp8': 'train_loss' must be a flat list of numbers, got entry 1 bool True"),
    (lambda: plots.training_curves({"runs": {"fp8": run(cast_stats=[{"step": 4, "max_underflow": None},
                                                                    {"step": 8, "max_underflow": False}])}}),
     TypeError, "training_curves: run 'fp8': an entry of 'cast_stats': 'max_underflow' must be a number or None, "
                "got bool False"),
    (lambda: plots.fp8lm_options({"runs": {"fp8": run(recipe=None)}}), TypeError,
     "fp8lm_options: run 'fp8': 'recipe' must be a str, got NoneType None"),
    (lambda: plots.fp8lm_options({"runs": {"fp8": run(memory={"bytes_per_parameter": dict.fromkeys(
        ("weights", "master_weights", "gradients", "first_moment", "second_moment"), "1")})}}), TypeError,
     "fp8lm_options: run 'fp8': memory['bytes_per_parameter']['weights'] must be a number, got str '1'"),
])
def test_training_figures_check_their_arguments(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()


@pytest.mark.parametrize("results, message", [
    ({"runs": {"fp8": {"train_loss": [1.0]}}}, "run 'fp8' has no 'recipe'"),
    ({"runs": {"fp8": run(fp8_grads=[{"step": 1}])}}, "run 'fp8': an entry of 'fp8_grads' has no 'relative_error'"),
    ({"runs": {"fp8": run(memory={"bytes_per_parameter": {"weights": 1.0}})}},
     "run 'fp8': memory['bytes_per_parameter'] has no 'master_weights' (it has 'weights')"),
    # found in a review: an option run without its recipe's plain run vanished from the top panel
    ({"runs": {"fp8 + fp8 grads": run()}}, "run 'fp8 + fp8 grads' has no run of its recipe without options ('fp8') "
                                            "to compare its validation loss with: include that run"),
])
def test_fp8lm_options_names_the_missing_key(results, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plots.fp8lm_options(results)


def test_loss_figures_draw_the_window_floor_beside_the_entropy_rate():
    """metrics.json's loss_floor is the corpus' entropy rate, which a loss over short windows cannot
    reach (a review's find: the run printed 1.203, the figure drew 1.076 alone). Results that give
    window_loss_floor get a second line; older ones, without it, the entropy rate alone."""
    results = {k: v for k, v in load_results(HEADLINE_RESULTS).items() if k != "window_loss_floor"}
    for figure in (plots.training_curves, plots.validation_curves):
        older = figure(results).axes[0]
        newer = figure({**results, "window_loss_floor": 1.1397}).axes[0]
        floors = [line.get_ydata()[0] for line in newer.get_lines() if line.get_color() == "grey"]
        assert [line.get_ydata()[0] for line in older.get_lines() if line.get_color() == "grey"] == [
            results["loss_floor"]]
        assert floors == [results["loss_floor"], 1.1397]
        assert "floor of the loss over the run's windows" in [text.get_text() for text in newer.texts]
    with pytest.raises(TypeError, match=r"results\['window_loss_floor'\] must be a number, got str"):
        plots.training_curves({**results, "window_loss_floor": "1.14"})


# ---- formats, rounding, scaling ------------------------------------------------------------------
def test_rounding_error_draws_only_the_regions_in_view():
    """A review's find: E8M0 overflows from 1.5 * 2**127, far beyond the default 2**18, yet its grey
    band (its ends given in reverse) covered the whole axis and its labels sat in the margins."""
    def regions(*args):
        axis = plots.rounding_error(*args, points=50).axes[0]
        low, high = axis.get_xlim()
        spans = sorted((p.get_x(), p.get_x() + p.get_width()) for p in axis.patches)
        labels = {t.get_text(): t.get_position()[0] for t in axis.texts if not t.get_text().startswith("$")}
        assert all(low <= x <= high for x in labels.values()), labels
        assert all(low <= a < b <= high * (1 + 1e-12) for a, b in spans), spans
        return spans, set(labels)

    assert regions("E8M0") == ([], set())                      # no subnormals, no overflow in view
    spans, labels = regions("E4M3")
    assert spans[-1] == (464.0, 2.0**18) and labels == {"subnormal", "rounds to 0", "overflow: NaN"}
    assert spans[:2] == [(2.0**-19, 2.0**-10), (2.0**-10, 2.0**-6)]
    assert regions("E4M3", -70, -60) == ([(2.0**-70, 2.0**-60)], {"rounds to 0"})
    assert regions("E4M3", 0, 30) == ([(464.0, 2.0**30)], {"overflow: NaN"})
    assert regions("E5M2", -22, 5)[1] == {"subnormal", "rounds to 0"}
    assert regions("E5M2", -19, 5)[1] == {"subnormal"}         # (2**-19 to 2**-17: no room for its label)


def test_format_figures_take_one_name_or_a_non_empty_list():
    assert labelled(plots.value_grid("E4M3")).axes[0].get_yticklabels()[0].get_text() == "E4M3"
    assert len(labelled(plots.rounding_error("E5M2", points=50)).axes) == 1
    assert len(plots.rounding_error(["E4M3", "E2M1", "E8M0"], points=50).axes) == 3
    for figure in (plots.value_grid, plots.rounding_error):
        with pytest.raises(ValueError, match="names must name at least one format, got an empty list"):
            figure([])
        with pytest.raises(ValueError, match="unknown format 'nope'"):
            figure(["E4M3", "nope"])


def _tiny_config():
    from minifp8.model import GPTConfig

    return GPTConfig(vocab_size=14, block_size=8, n_layer=1, n_head=2, n_embd=8)


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
    (lambda: plots.delayed_scaling_outlier(spike_factor="8"), TypeError, "spike_factor must be a number, got str"),
    (lambda: plots.stochastic_rounding_bias(seed=-1), ValueError, "seed must be >= 0, got -1"),
    (lambda: plots.delayed_scaling_outlier(seed=1.5), TypeError, "seed must be an int, got float"),
    (lambda: plots.block_scaling_snr(seed=-2), ValueError, "seed must be >= 0, got -2"),
    (lambda: plots.scale_plot([1, 2]), TypeError, "scale_plot needs ScaleRecords .* got int 1"),
    # found in a review: "not iterable", NumPy's message without the parameter, a raw comparison error
    (lambda: plots.scale_plot(None), TypeError, "scale_plot needs a ScaleTracker, a dict .* got NoneType None"),
    (lambda: plots.scale_plot(5), TypeError, "scale_plot needs a ScaleTracker, a dict .* got int 5"),
    (lambda: plots.scale_plot("abc"), TypeError, "scale_plot needs a ScaleTracker, a dict .* got str 'abc'"),
    (lambda: plots.gpt_cast_scales(_tiny_config(), 2, seed=-1), ValueError, "seed must be >= 0, got -1"),
    (lambda: plots.gpt_cast_scales(_tiny_config(), 2.5), TypeError, "batch_size must be an int, got float"),
    (lambda: plots.stochastic_rounding_bias(low="1"), TypeError, "low must be a number, got str '1'"),
    (lambda: plots.stochastic_rounding_bias(high=None), TypeError, "high must be a number, got NoneType"),
    (lambda: plots.scaled_gemm_errors(seed=-1), ValueError, "seed must be >= 0, got -1"),
    (lambda: plots.scaled_gemm_errors(seed=2.0), TypeError, "seed must be an int, got float"),
])
def test_figure_parameters_are_checked(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_stochastic_rounding_bias_draws_the_bias_in_gaps():
    """A mutation audit's find: the stochastic line's units were not checked (``mean - x`` for
    ``(mean - x) / gap`` passed). 1.0625 and 1.1875 are midpoints between E4M3 neighbours 0.125
    apart, so one stochastic rounding lands half a gap away, up or down: +-0.5 gaps."""
    figure = plots.stochastic_rounding_bias("E4M3", low=1.0625, high=1.1875, points=2, samples=1)
    line, = [line for line in figure.axes[1].get_lines() if line.get_label() == "stochastic (mean)"]
    assert np.abs(line.get_ydata()).tolist() == [0.5, 0.5]


def test_parameter_figures_draw_small_inputs():
    labelled(plots.stochastic_rounding_bias("E5M2", low=2.0, high=3.0, points=5, samples=8))
    labelled(plots.delayed_scaling_outlier(steps=6, spike_step=5, history_len=2, size=8))
    labelled(plots.delayed_scaling_outlier(steps=1, spike_step=0, size=8))
    labelled(plots.block_scaling_snr(rows=1, columns=10, low_exponent=-1))


def test_fp8_linear_gemms_draws_the_casts_fp8_places_in_front_of_each_gemm():
    """The diagram is drawn from fp8.GEMMS and the two formats: each GEMM's box, and in front of it one
    cast per copy it reads, in its format and along its contraction axis; a change there changes it."""
    texts = [text.get_text() for text in plots.fp8_linear_gemms().axes[0].texts]
    axes = {"fprop": "in_features", "dgrad": "out_features", "wgrad": "tokens"}
    for gemm, copies in fp8.GEMMS.items():
        assert any(text.startswith(f"{gemm}\n") for text in texts)
        for copy in copies:
            fmt = "E5M2" if copy.startswith("grad") else "E4M3"
            assert texts.count(f"cast to {fmt}\nalong {axes[gemm]}") >= 1
            assert any(text.endswith(f"({copy} copy)") for text in texts) == copy.endswith("_t")
    assert sum(text.startswith("cast to E5M2") for text in texts) == 2
    assert sum(text.startswith("cast to ") for text in texts) == 6


@pytest.mark.parametrize("name, inputs, bits", [("E4M3", (1.0625, 1.1875, 1.28, 1.45), 8),
                                                 ("E5M2", (0.3, 0.375, 0.40625, 0.45), 3),
                                                 ("E2M1", (0.25, 2.5, 5.0, 6.0), 2)])
def test_rounding_modes_draws_each_mode_to_the_neighbour_its_rule_picks(name, inputs, bits):
    """The arrows and labels against a rule applied in exact arithmetic to the format's value table:
    the neighbours below and above each input, the nearer (a tie to the even code, or away from 0),
    the one below, and for stochastic the count of ``2**bits`` patterns, ``f * 2**bits`` rounded to
    nearest even, that pick the one above. Each case has a tie, an exact value or a subnormal."""
    fmt = formats.get(name)
    values = [Fraction(float(v)) for v in np.unique(fmt.values()[np.isfinite(fmt.values())]) if v >= 0]
    figure = plots.rounding_modes(name, inputs, random_bit_count=bits)
    for axis in figure.axes:
        mode = axis.get_title(loc="left").split(":")[0]
        arrows = [(float(a.xyann[0]), float(a.xy[0]), a.arrow_patch.get_linewidth())
                  for a in axis.texts if isinstance(a, matplotlib.text.Annotation)]
        labels = [(round(float(text.get_position()[0]), 9), text.get_text()) for text in axis.texts
                  if not isinstance(text, matplotlib.text.Annotation)]
        expected_arrows, expected_labels = [], []
        for x in map(Fraction, np.float32(inputs).astype(float)):
            low = max(v for v in values if v <= x)
            high = min((v for v in values if v > x), default=low)
            even = values.index(low) % 2 == 0  # (the codes of positive values count up from 0x00)
            nearer = low if x - low < high - x or (x - low == high - x and even) else high
            if x == low:
                choices = {"stochastic": [(low, None)]}
            else:
                up = round((x - low) / (high - low) * 2**bits)  # (Python's round: ties to even)
                split = ((low, 2**bits - up), (high, up))
                choices = {"stochastic": [(value, count) for value, count in split if count]}
            choices |= {"nearest_even": [(nearer, None)], "toward_zero": [(low, None)],
                        "nearest_away": [(low if x - low < high - x else high, None)]}
            expected_arrows += [(float(x), float(target)) for target, _ in choices[mode]]
            expected_labels += [(round(float(x + target) / 2, 9), f"{count}/{2**bits}")  # (midway along its arrow)
                                for target, count in choices[mode] if count is not None]
            if mode.startswith("nearest") and low < x and x - low == high - x:
                expected_labels.append((round(float(x), 9), "tie"))
        assert sorted(arrow[:2] for arrow in arrows) == sorted(expected_arrows), mode
        assert sorted(labels) == sorted(expected_labels), mode


def test_rounding_modes_checks_its_inputs():
    for inputs, error, message in [(1.5, TypeError, "a non-empty sequence of numbers, got float 1.5"),
                                   ((), TypeError, "a non-empty sequence of numbers, got tuple"),
                                   ("1.5", TypeError, "a non-empty sequence of numbers, got str"),
                                   ((1.0, "2"), TypeError, r"inputs\[1\] must be a number, got str '2'"),
                                   ((1.0, -1.0), ValueError, r"inputs\[1\] must be a finite number > 0, got -1.0"),
                                   ((1.0, math.nan), ValueError, "finite number > 0, got nan"),
                                   ((1.0, 500.0), ValueError, r"inputs in \(0, 448\], E4M3's largest value"),
                                   ((1e-50,), ValueError, r"as float32; got \[0.0\]"),
                                   ]:
        with pytest.raises(error, match=message):
            plots.rounding_modes("E4M3", inputs)
    with pytest.raises(ValueError, match=r"these span 57 of them, more than 40"):
        plots.rounding_modes("E4M3", (0.001, 1.0))
    for bits, error in ((0, ValueError), (17, ValueError), (2.0, TypeError)):
        with pytest.raises(error, match="random_bit_count must"):
            plots.rounding_modes(random_bit_count=bits)
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        plots.rounding_modes("nope")


def test_scale_plot_draws_records_whose_statistics_are_all_zero_or_nan():
    zero = fp8.ScaleRecord("zeros", (4,), 0.0, 0.0, 0.0, 0.0)  # e.g. a zero-initialised layer
    nan = fp8.ScaleRecord("nan", (4,), float("nan"), float("nan"), None, None)
    for records in ([zero], [zero, nan]):
        figure = labelled(plots.scale_plot(records))
        assert [label.get_text() for label in figure.axes[0].get_yticklabels()] == [r.name for r in records]


def test_scale_plot_draws_inf_and_nan_statistics_on_the_right_edge():
    """Found in a review: a 0 was drawn hollow on the left edge, but an Inf (a tensor that overflowed,
    what the plot exists to show) drew nothing, as did a NaN (the std of a tensor holding an Inf):
    neither could be told from a record without a gradient. Inf is now hollow on the right edge, NaN
    a cross there, and the legend says so; a gradient never recorded (None) still draws nothing."""
    inf, nan = math.inf, math.nan
    records = [fp8.ScaleRecord("overflowed", (4,), nan, inf, inf, inf),  # (std NaN, mean |x| Inf)
               fp8.ScaleRecord("no gradient", (4,), 1.0, 1.0, None, None),
               fp8.ScaleRecord("nan gradient", (4,), 0.5, 0.5, nan, nan)]
    for statistic, value_look in (("std", "cross"), ("mean_abs", "hollow")):
        figure = plots.scale_plot(records, statistic=statistic)
        ax = figure.axes[0]
        right = ax.get_xlim()[1]
        edge = {}  # (row, value or gradient) -> how it is drawn, for every marker on the right edge
        for line in ax.get_lines():
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                if x == right:
                    look = ("cross" if line.get_marker() == "x" else
                            "hollow" if line.get_markerfacecolor() == "none" else "filled")
                    edge[round(y), "value" if y < round(y) else "gradient"] = look
                    assert not line.get_clip_on()  # (a whole marker, not half of one)
        assert edge == {(0, "value"): value_look, (0, "gradient"): "hollow", (2, "gradient"): "cross"}, statistic
        texts = [text.get_text() for text in figure.legends[0].get_texts()]
        assert "hollow: 0 (left edge) or Inf (right edge)" in texts and "cross: NaN (right edge)" in texts
    finite = plots.scale_plot([fp8.ScaleRecord("fine", (4,), 1.0, 1.0, 0.5, 0.5)])
    assert not [text for text in finite.legends[0].get_texts() if "edge" in text.get_text()]


@pytest.mark.parametrize("rows", [1, 3, 30])
def test_scale_plot_legend_sits_below_the_x_label(rows):
    records = [fp8.ScaleRecord(f"t{i}", (4,), 2.0**-i, 1.0, 2.0**(-i - 5), 1.0) for i in range(rows)]
    figure = plots.scale_plot(records)
    figure.draw_without_rendering()
    ax = figure.axes[0]
    label, legend = ax.xaxis.label.get_window_extent(), figure.legends[0].get_window_extent()
    assert legend.y1 <= label.y0 and legend.y0 >= 0  # under the label, inside the figure


# ---- without matplotlib ------------------------------------------------------------------------------
def test_every_figure_says_how_to_install_matplotlib():
    code = """
import sys; sys.modules['matplotlib'] = None  # makes any matplotlib import fail
from minifp8 import fp8, plots
from minifp8.train_tiny import FP8LM_RESULTS, load_results
from minifp8.bench import load_speed_results
calls = [plots.value_grid, plots.rounding_error, plots.stochastic_rounding_bias, plots.delayed_scaling_outlier,
         plots.block_scaling_snr, lambda: plots.scale_plot([fp8.ScaleRecord("x", (1,), 1.0, 1.0, 1.0, 1.0)]),
         lambda: plots.training_curves(load_results()), lambda: plots.fp8lm_options(load_results(FP8LM_RESULTS)),
         lambda: plots.train_speed(load_speed_results()), plots.scaled_gemm_errors, plots.fp8_linear_gemms,
         plots.rounding_modes,
         lambda: plots.validation_curves(load_results()),
         lambda: plots.gap_curves({"arm": {"0": ([{"step": 0, "loss": 2.0}], [{"step": 0, "loss": 2.0}])}}),
         lambda: plots.scale_curves({"runs": {"fp32": {"scales": [{"step": 50, "forward_std": {"residual#2": 1.0},
                                                                   "backward_mean_abs": {"residual#2": 1e-5}}]}}})]
figures = [name for name, value in vars(plots).items() if not name.startswith("_") and callable(value)
           and getattr(value, "__module__", None) == plots.__name__ and name != "gpt_cast_scales"]  # (returns data)
assert len(calls) == len(figures), f"one call per figure function: {figures}"
for call in calls:
    try:
        call()
    except ImportError as error:
        print(error)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.splitlines() == ['minifp8.plots needs matplotlib: pip install "minifp8[plot]"'] * 15


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


def test_a_run_of_one_training_loss_is_drawn_as_a_point():
    """One window is a one-point line without markers, which draws nothing (--steps 1, or a run that
    diverged at step 2, showed only its validation markers)."""
    results = {"runs": {"fp8": run(train_loss=[2.65])}}
    drawn = [line for line in plots.training_curves(results).axes[0].get_lines()
             if list(line.get_xdata()) == [1.0] and line.get_marker() not in (None, "None", "")
             and line.get_markevery() is None]  # (markevery [] draws no marker)
    assert drawn and drawn[0].get_ydata()[0] == pytest.approx(2.65)


def test_training_curves_without_any_loss_is_an_error():
    """Found in a review: runs without a training loss or an evaluation drew an empty figure, where
    validation_curves and scale_curves say there is nothing to draw."""
    message = (r"training_curves: no run has a training loss or an evaluation \(every run's 'train_loss' and 'val' "
               r"are empty\): nothing to draw")
    with pytest.raises(ValueError, match=message):
        plots.training_curves({"runs": {"fp32": {"train_loss": []}, "fp8": run(train_loss=[], val=None)}})
    with pytest.raises(ValueError, match=message):
        plots.training_curves({"runs": {"fp8": run(train_loss=[], val=[])}})
    labelled(plots.training_curves({"runs": {"fp32": {"train_loss": []}, "fp8": run(train_loss=[2.5])}}))


def test_validation_curves_without_any_evaluation_is_an_error():
    """Every run left out drew an empty figure, with matplotlib's warning of a legend without labels."""
    with pytest.raises(ValueError, match=r"validation_curves: no run has an evaluation \(every run's 'val' is empty\)"):
        plots.validation_curves({"runs": {"fp32": {"val": []}, "fp8": {"val": []}}})


def test_block_scaling_snr_of_one_row_draws_it_as_the_top_row():
    """The x axis is the scale relative to the top row: a single row sat at low_exponent, and the title
    spoke of "1 rows" and a range of scales."""
    axis = plots.block_scaling_snr(rows=1, columns=64).axes[0]
    drawn = [line for line in axis.get_lines() if line.get_label() and not line.get_label().startswith("_")]
    assert drawn and all(list(line.get_xdata()) == [0.0] for line in drawn)
    assert axis.get_title().startswith("Quantising 1 row of 64 normal values, at scale $2^0$")


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
     ValueError, "results['window_steps'] must be >= 1, got 0"),
])
def test_train_speed_says_what_it_cannot_draw(results, error, message):
    with pytest.raises(error, match=re.escape(message)):
        plots.train_speed(results)


# ---- found in a review: train_speed drew or failed on what it could not draw ----------------------------
def speed_results(**recipe):
    """A small train_speed document with one recipe, ``fp8``, whose measurements ``recipe`` updates."""
    return {"window_steps": 5, "fp32": {"step_ms": 9.0}, "model": {"family": "unit", "n_embd": 64},
            "recipes": {"fp8": {"ratio": 1.4, "window_ratios": [1.3, 1.4, 1.5], "target": 1.5, **recipe}}}


@pytest.mark.parametrize("results, error, message", [
    (speed_results(ratio="1.4"), TypeError, "recipe 'fp8': 'ratio' must be a number, got str '1.4'"),
    (speed_results(ratio=None), TypeError, "recipe 'fp8': 'ratio' must be a number, got NoneType None"),
    (speed_results(ratio=-1.0), ValueError, "recipe 'fp8': 'ratio' must be a finite number > 0, got -1.0"),
    ({**speed_results(), "fp32": {"step_ms": None}}, TypeError,
     "results['fp32']['step_ms'] must be a number, got NoneType None"),
    ({**speed_results(), "model": "unit"}, TypeError, "results['model'] must be a dict (family, n_embd, ...), got str"),
    ({**speed_results(), "recipes": ["fp8"]}, TypeError,
     "results['recipes'] must be a dict of recipe -> measurements, got list ['fp8']"),
    (speed_results(window_ratios=[]), ValueError, "recipe 'fp8': 'window_ratios' holds no finite ratio to draw"),
    (speed_results(window_ratios=[None, math.nan]), ValueError,
     "recipe 'fp8': 'window_ratios' holds no finite ratio to draw"),
    (speed_results(window_ratios=[[1.3, 1.4], [1.5, 1.6]]), ValueError,
     "recipe 'fp8': 'window_ratios' must be a flat list of numbers, got a nested one (entry 0 is list [1.3, 1.4])"),
    (speed_results(window_ratios=np.ones((2, 2))), ValueError,
     "recipe 'fp8': 'window_ratios' must be a flat list of numbers, got ndarray of dtype float64 and shape (2, 2)"),
    (speed_results(window_ratios=["a"]), TypeError,
     "recipe 'fp8': 'window_ratios' must be a flat list of numbers, got entry 0 str 'a'"),
    (speed_results(window_ratios=None), TypeError,
     "recipe 'fp8': 'window_ratios' must be a flat list of numbers, got NoneType None"),
    (speed_results(target="x"), TypeError, "recipe 'fp8': 'target' must be a number, got str 'x'"),
    # a later review's finds: an AttributeError ('int' object has no attribute 'split'), and a
    # negative ratio drawn
    ({**speed_results(), "recipes": {1: {"ratio": 1.4, "window_ratios": [1.4]}}}, TypeError,
     "a recipe's name must be a str, got int 1"),
    (speed_results(window_ratios=[-3.0, math.nan, 1.4]), ValueError,
     "recipe 'fp8': 'window_ratios' must be > 0 (a step time over fp32's), got -3.0"),
    (speed_results(window_ratios=[0.0, 1.4]), ValueError,
     "recipe 'fp8': 'window_ratios' must be > 0 (a step time over fp32's), got 0.0"),
])
def test_train_speed_checks_the_types_and_values_it_reads(results, error, message):
    with pytest.raises(error, match=re.escape(f"train_speed: {message}")):
        plots.train_speed(results)


def test_train_speed_draws_a_small_document_and_says_what_a_family_auto_run_drew():
    axis = labelled(plots.train_speed(speed_results(window_ratios=[1.3, None, 1.5]))).axes[0]
    assert axis.get_title() == "Simulated FP8 against fp32, step by step (unit model, n_embd 64, fp32 step 9.0 ms)"
    results = speed_results(family="standard")
    results["model"] = {"family": "auto", "n_embd": 64}
    results["recipes"]["unit"] = {"family": "unit", "ratio": 1.2, "window_ratios": [1.2], "target": 1.5}
    axis = plots.train_speed(results).axes[0]
    assert "auto" not in axis.get_title()
    assert "(each recipe on its train_tiny model, n_embd 64, fp32 step 9.0 ms)" in axis.get_title()
    assert [text.get_text() for text in axis.get_legend().get_texts()] == [
        "fp8 (standard): 1.40x", "unit (unit): 1.20x", "target 1.5x"]


def test_train_speed_keeps_ratios_below_one_in_view():
    """Found in a review: the axis started at 0.95 whatever the data, so windows of 0.90-0.92 (a
    recipe faster than fp32 there, as under a noisy machine) were drawn off the figure."""
    axis = plots.train_speed(speed_results(window_ratios=[0.90, 0.92, 0.91])).axes[0]
    assert axis.get_ylim()[0] <= 0.90
    axis = plots.train_speed(speed_results(window_ratios=[1.3, 1.5])).axes[0]
    assert axis.get_ylim()[0] == 0.95  # (as before, where every ratio lies above it)


# ---- found in a review: block_scaling_snr's docstring said every value of the 2**-19 row is flushed ---
def test_block_scaling_snr_docstring_states_the_flushed_fractions_of_its_defaults():
    """The docstring's numbers, measured: the tensor the figure draws with its defaults, cast per tensor."""
    import inspect

    from minifp8.scaling import quantize_current

    parameters = inspect.signature(plots.block_scaling_snr).parameters
    defaults = {name: parameter.default for name, parameter in parameters.items()}
    exponents, x = plots._rows_at_scales(**defaults)
    columns = defaults["columns"]
    flushed = np.sum((quantize_current(x, "E4M3").dequantize() == 0) & (x != 0), axis=1)
    row = {float(e): int(count) for e, count in zip(exponents, flushed)}
    assert all(row[e] == columns for e in exponents if e <= -19.5) and 0 < columns - row[-19.0] < columns
    kept = columns - row[-19.0]
    stated = (f"the defaults: {100 * row[-16.0] / columns:.0f}% of a row's values at ``2**-16``, "
              f"{100 * row[-18.0] / columns:.0f}% at ``2**-18``, all but {'one' if kept == 1 else kept} of the "
              f"{columns} at ``2**-19``, and all of them from ``2**-19.5`` down")
    assert stated in " ".join(plots.block_scaling_snr.__doc__.split())


# ---- testing backends: scaled GEMMs (tutorial 08) ---------------------------------------------------
GEMM_OPTIONS = {"a_format": "E4M3", "b_format": "E4M3"}


def _tutorial_gemm_operands(positive: bool):
    """Tutorial 8's operands (their absolute values where ``positive``), as the tutorial makes them."""
    from minifp8 import scaling

    rng = np.random.default_rng(2)
    activations = rng.normal(0.0, 1.0, size=(16, 512)).astype(np.float32)
    weights = rng.normal(0.0, 0.05, size=(512, 256)).astype(np.float32)
    weights[:, 128:] *= 10
    if positive:
        activations, weights = np.abs(activations), np.abs(weights)
    a = scaling.quantize_blockwise(activations, "E4M3", block_shape=(1, 128), axis=1, power_of_2=False)
    b = scaling.quantize_blockwise(weights, "E4M3", block_shape=(128, 128), axis=0, power_of_2=False)
    return a, b


def _tutorial_backend_gemm(a, b, shift=0):
    """Tutorial 8's ``backend_gemm``: float32 block sums, scaled, added into float32."""
    from minifp8 import decode

    a_values, b_values = decode(a.codes, "E4M3"), decode(b.codes, "E4M3")
    out = np.zeros((a.codes.shape[0], b.codes.shape[1]), np.float32)
    blocks = a.codes.shape[1] // 128
    for j in range(blocks):
        k = slice(128 * j, 128 * (j + 1))
        out += (a_values[:, k] @ b_values[k, :]) * a.scale_inv[:, (j + shift) % blocks, None] * np.repeat(
            b.scale_inv[j], 128)
    return out


def _rounded(value, bits: int):
    """A Fraction rounded to ``bits`` significant bits, to nearest, ties to even (exact arithmetic)."""
    from fractions import Fraction

    if value == 0:
        return Fraction(0)
    magnitude = abs(value)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()  # 2**e <= |v| < 2**(e+2)
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1
    unit = Fraction(2) ** (exponent + 1 - bits)
    quotient = magnitude / unit  # in [2**(bits-1), 2**bits)
    whole, rest = divmod(quotient.numerator, quotient.denominator)
    if 2 * rest > quotient.denominator or (2 * rest == quotient.denominator and whole % 2):
        whole += 1
    return (1 if value > 0 else -1) * whole * unit


def _exact_14_bit_outputs(a, b, row: int, column: int) -> tuple:
    """The two 14-bit kernels of `plots.scaled_gemm_errors` at one output, as their docstrings
    describe them, in exact rational arithmetic: (no promotion, promoted every 128)."""
    from fractions import Fraction

    from minifp8 import decode

    x = [Fraction(float(v)) for v in decode(a.codes[row], "E4M3")]
    y = [Fraction(float(v)) for v in decode(b.codes[:, column], "E4M3")]
    alpha = [Fraction(float(s)) for s in a.scale_inv[row]]
    beta = [Fraction(float(s)) for s in b.scale_inv[:, column // 128]]
    narrow = Fraction(0)
    for k in range(512):
        narrow = _rounded(narrow + _rounded(_rounded(x[k] * y[k] * alpha[k // 128], 14) * beta[k // 128], 14), 14)
    promoted = Fraction(0)  # float32 (normal numbers here: 24 bits)
    for j in range(4):
        partial = Fraction(0)
        for k in range(128 * j, 128 * (j + 1)):
            partial = _rounded(partial + x[k] * y[k], 14)
        promoted = _rounded(promoted + _rounded(_rounded(partial * alpha[j], 24) * beta[j], 24), 24)
    return float(narrow), float(promoted)


def test_scaled_gemm_errors_draws_compare_matmuls_ratio_for_each_kernel():
    """Each curve is ``|output - reference| / tolerance`` of compare_matmul for that kernel, sorted
    from the worst: checked against tutorial 8's kernels (bfloat16 rounding by ml_dtypes) and, for
    the two 14-bit kernels, against exact rational arithmetic at a few outputs; the outputs above 1
    are the ones compare_matmul counts. Then what the page's caption says of the figure."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from minifp8 import gemm

    labels = ["float32 accumulator", "float32 accumulator, bfloat16 output", "14-bit accumulator, no promotion",
              "14 bits, promoted to float32 every 128 (DeepSeek-V3)", "bug: activation scales read one block late"]
    assert [kernel[0] for kernel in plots.GEMM_KERNELS] == labels  # (the outputs below come in this order)
    figure = labelled(plots.scaled_gemm_errors(seed=2))
    counts = {}
    for axis, positive in zip(figure.axes, (False, True)):
        lines = {line.get_label(): line for line in axis.get_lines() if not line.get_label().startswith("_")}
        tolerance = "tolerance: compare_matmul's for a float32 accumulator"
        assert list(lines) == labels + [tolerance]
        np.testing.assert_array_equal(lines[tolerance].get_ydata(), [1, 1])
        a, b = _tutorial_gemm_operands(positive)
        operands = (a.codes, a.scale_inv, b.codes, b.scale_inv)
        float32 = _tutorial_backend_gemm(a, b)
        outputs = dict(zip(labels, plots._gemm_kernel_outputs(a, b)))
        for row, column in ((0, 0), (7, 130), (15, 255)):
            narrow, promoted = _exact_14_bit_outputs(a, b, row, column)
            assert outputs[labels[2]][row, column] == narrow and outputs[labels[3]][row, column] == promoted
        outputs.update({labels[0]: float32, labels[1]: float32.astype(ml_dtypes.bfloat16).astype(np.float64),
                        labels[4]: _tutorial_backend_gemm(a, b, shift=1)})
        for label, output in outputs.items():
            options = {"output": "bfloat16"} if label == labels[1] else {}
            report = gemm.compare_matmul(output, *operands, **GEMM_OPTIONS, **options)
            expected = np.sort(np.abs(output - report.reference.value) / report.tolerance, axis=None)[::-1]
            np.testing.assert_array_equal(lines[label].get_xdata(), np.arange(1, 4097))
            np.testing.assert_array_equal(lines[label].get_ydata(), expected)
            assert np.sum(lines[label].get_ydata() > 1) == report.count
            counts[positive, label] = report.count
        # the 14-bit kernels are correct for what they are: within the bounds of the accumulators they declare
        assert gemm.compare_matmul(outputs[labels[2]], *operands, **GEMM_OPTIONS, accumulator=14).ok
        assert gemm.compare_matmul(outputs[labels[3]], *operands, **GEMM_OPTIONS, accumulator=14,
                                   promote_every=128).ok
        ratios = {label: lines[label].get_ydata() for label in labels}
        # the caption: the float32 kernel far under its bound, one rounding to bfloat16 close to its own
        assert ratios[labels[0]].max() < (1e-3 if not positive else 1e-2)
        assert 0.5 < ratios[labels[1]].max() <= 1
        # the bug orders of magnitude above, at nearly every output
        assert counts[positive, labels[4]] > 0.99 * 4096 and np.median(ratios[labels[4]]) > 100
    # the 14-bit accumulators: a few outputs beyond the float32 bound when promoted and of random sign,
    # many more without promotion or with all-positive operands
    assert 0 < counts[False, labels[3]] < 0.01 * 4096 and counts[False, labels[2]] > 10 * counts[False, labels[3]]
    assert counts[True, labels[2]] > counts[True, labels[3]] > 0.5 * 4096


def _drawn_styles(axis) -> dict:
    """label -> (colour, marker, line style) of an axis' labelled lines."""
    return {line.get_label(): (line.get_color(), line.get_marker(), line.get_linestyle())
            for line in axis.get_lines() if not line.get_label().startswith("_")}


def test_no_two_series_differ_in_colour_alone():
    """Readers who cannot tell two colours apart (about 1 in 12 men) still tell every series apart:
    the runs of the headline figure and train_tiny's loss.png, the recipes of the speed figure and
    the formats of the block-scaling figure each differ in marker or line style too. (Before, the
    speed figure's six recipes and the SNR figure's five formats shared one marker; two of each
    collapsed into one colour under simulated protanopia.)"""
    from minifp8.bench import load_speed_results

    headline = _drawn_styles(plots.training_curves(load_results()).axes[0])
    speed = {label.split(":")[0]: style for label, style in
             _drawn_styles(plots.train_speed(load_speed_results()).axes[0]).items() if "target" not in label}
    snr = _drawn_styles(plots.block_scaling_snr(rows=5, columns=64).axes[0])
    for name, drawn, count in (("headline", headline, 8), ("speed", speed, 6), ("snr", snr, 5)):
        assert len(drawn) == count, (name, drawn)
        assert len({(marker, linestyle) for _, marker, linestyle in drawn.values()}) == count, (name, drawn)
    assert len({marker for _, marker, _ in plots.RUN_STYLES.values()}) == len(plots.RUN_STYLES)
    # the runs of --experiment fp8lm, four options on each of two recipes: a marker each within a colour
    # (their validation losses are markers alone)
    fp8lm_runs = _drawn_styles(plots.training_curves(load_results(FP8LM_RESULTS)).axes[0])
    assert len(fp8lm_runs) == 10 and len({(color, marker) for color, marker, _ in fp8lm_runs.values()}) == 10
    many = plots._run_styles({f"run {i}": None for i in range(100)})
    assert len(set(many.values())) == 100
    # a recipe looks the same in every figure: its speed line as its headline run
    assert all(speed[recipe] == (headline[recipe][0], headline[recipe][1], "-") for recipe in speed if recipe in headline)


# ---- a mutation audit of plots.py: the data each figure draws, read back from its artists -------------
def _ticks_by_row(axis) -> dict[str, list[float]]:
    """value_grid's top panel: format name (its row's y label) -> the x of every tick drawn on that row."""
    rows = {label.get_text(): y for y, label in zip(axis.get_yticks(), axis.get_yticklabels())}
    drawn: dict[float, list[float]] = {}
    for collection in axis.collections:
        for (x, y0), (_, y1) in collection.get_segments():
            drawn.setdefault((y0 + y1) / 2, []).append(float(x))
    return {name: sorted(drawn.get(y, [])) for name, y in rows.items()}


def test_value_grid_draws_each_formats_values_gaps_and_landmarks_on_its_own_row():
    """Each row (by its label) holds its format's values, with its smallest subnormal, smallest normal
    and largest value labelled there; the bottom panel's staircase is the gap to the next value over
    the value, which E2M1 (0.5, 1, 1.5, 2, 3, 4, 6) gives by hand; the title counts the values
    (E4M3: 128 codes of sign 0 less zero and NaN; E5M2: less zero, three NaNs and Inf)."""
    names = ("E4M3", "E5M2", "E2M1")
    figure = plots.value_grid(names)
    grid_axis, gap_axis = figure.axes
    rows = _ticks_by_row(grid_axis)
    for name in names:
        values = formats.get(name).values()
        assert rows[name] == sorted(float(v) for v in values if np.isfinite(v) and v > 0), name
    assert grid_axis.get_title() == ("The 126 positive finite values of E4M3 and 123 of E5M2 and 7 of E2M1 "
                                     "(subnormals in orange)")
    row_of = {label.get_text(): y for y, label in zip(grid_axis.get_yticks(), grid_axis.get_yticklabels())}
    landmarks = {(text.get_text(), float(text.xy[0]), float(text.xy[1])) for text in grid_axis.texts
                 if isinstance(text, matplotlib.text.Annotation)}
    assert landmarks == {("$2^{-9}$", 2.0**-9, row_of["E4M3"] + 0.3), ("$2^{-6}$", 2.0**-6, row_of["E4M3"] + 0.3),
                         ("448", 448.0, row_of["E4M3"] + 0.3),
                         ("$2^{-16}$", 2.0**-16, row_of["E5M2"] + 0.3), ("$2^{-14}$", 2.0**-14, row_of["E5M2"] + 0.3),
                         ("57344", 57344.0, row_of["E5M2"] + 0.3),
                         ("$2^{-1}$", 0.5, row_of["E2M1"] + 0.3), ("$2^{0}$", 1.0, row_of["E2M1"] + 0.3),
                         ("6", 6.0, row_of["E2M1"] + 0.3)}
    normal = {line.get_label(): line for line in gap_axis.get_lines() if not line.get_label().startswith("_")}
    np.testing.assert_array_equal(normal["E2M1"].get_xdata(), [1, 1.5, 2, 3, 4, 6])
    np.testing.assert_allclose(normal["E2M1"].get_ydata(), [1 / 2, 1 / 3, 1 / 2, 1 / 3, 1 / 2, 1 / 2])  # (last: again)
    subnormal = [line for line in gap_axis.get_lines() if line.get_label().startswith("_")
                 and line.get_color() == plots.SUBNORMAL_COLOR]
    assert [(list(line.get_xdata()), list(line.get_ydata())) for line in subnormal][-1] == ([0.5, 1.0], [1.0, 0.5])
    e4m3 = dict(zip(normal["E4M3"].get_xdata(), normal["E4M3"].get_ydata()))
    assert min(e4m3) == 2.0**-6 and e4m3[1.0] == 0.125 and e4m3[416.0] == e4m3[448.0] == 32 / 416


def test_rounding_error_draws_the_relative_error_and_names_each_formats_bound_and_overflow():
    """One panel per format, in order, titled with its name: the line is |q(x) - x| / x, its dashed
    bound labelled 2**-(M+1) (E4M3: M=3, E5M2: M=2, E2M1: M=1), and the overflow band named after
    what quantize gives far beyond the max (E4M3: NaN, E5M2: Inf though it has NaNs too, E2M1: its max)."""
    names = ("E4M3", "E5M2", "E2M1")
    figure = plots.rounding_error(names, low_exponent=-4, high_exponent=20, points=300)
    bounds = {"E4M3": "$2^{-4}$ = 6.25%", "E5M2": "$2^{-3}$ = 12.5%", "E2M1": "$2^{-2}$ = 25%"}
    for axis, name in zip(figure.axes, names):
        assert axis.get_title().startswith(f"{name}: ")
        error = axis.get_lines()[0]
        x = np.asarray(error.get_xdata())
        with np.errstate(invalid="ignore", over="ignore"):
            expected = np.abs(quantize(x, name).astype(np.float64) - x) / x
        np.testing.assert_array_equal(error.get_ydata(), expected)
        texts = [text.get_text() for text in axis.texts]
        assert bounds[name] in texts
        far = float(quantize(np.array([2.0**20]), name)[0])
        overflow = "NaN" if np.isnan(far) else "Inf" if np.isinf(far) else f"saturates to {far:g}"
        assert f"overflow: {overflow}" in texts


def test_rounding_modes_draws_the_tutorials_number_line_by_default():
    """The defaults are tutorial 2's figure: E4M3's values 1 to 1.5 as ticks, and 8 random bits, whose
    256 patterns split each tie 128 to 128, 1.28 (f = 0.03 / 0.125 = 0.24 of its gap: 61.44) 195 to 61
    and 1.45 (f = 0.6: 153.6) 102 to 154."""
    figure = plots.rounding_modes()
    ticks = sorted(float(x) for collection in figure.axes[0].collections for (x, _), _ in collection.get_segments())
    assert ticks == [1.0, 1.125, 1.25, 1.375, 1.5]
    stochastic = figure.axes[-1]
    counts = sorted(text.get_text() for text in stochastic.texts if not isinstance(text, matplotlib.text.Annotation))
    assert counts == sorted(["128/256"] * 4 + ["195/256", "61/256", "102/256", "154/256"])
    assert "(8 random bits)" in stochastic.get_title(loc="left")


def test_rounding_modes_draws_up_to_forty_ticks():
    """E4M3 has 8 values per binade: from 1.0 (the first) 30.0 is the 40th, drawn, and 32.0 the 41st, refused."""
    ticks = [x for collection in plots.rounding_modes("E4M3", (1.0, 30.0)).axes[0].collections
             for (x, _), _ in collection.get_segments()]
    assert len(ticks) == 40 and min(ticks) == 1.0 and max(ticks) == 30.0
    with pytest.raises(ValueError, match="these span 41 of them, more than 40"):
        plots.rounding_modes("E4M3", (1.0, 32.0))


def test_stochastic_rounding_bias_draws_nearest_and_the_seeded_mean_in_both_panels():
    """Top: x, nearest_even(x) (quantize's own) and the mean of the stochastic roundings; the bias panel
    draws the same mean, in gaps (0.125 in [1, 2)). The seed decides the random bits: the same seed
    draws the same means, another seed others."""
    def drawn(seed):
        value_axis, bias_axis = plots.stochastic_rounding_bias("E4M3", 1.0, 1.5, points=9, samples=4,
                                                               seed=seed).axes
        return ({line.get_label(): np.asarray(line.get_ydata()) for line in value_axis.get_lines()},
                {line.get_label(): np.asarray(line.get_ydata()) for line in bias_axis.get_lines()})

    x = np.linspace(1.0, 1.5, 9)
    values, biases = drawn(0)
    np.testing.assert_array_equal(values["x (no rounding)"], x)
    np.testing.assert_array_equal(values["nearest_even(x)"], quantize(x, "E4M3").astype(np.float64))
    mean = values["mean of 4 stochastic roundings"]
    np.testing.assert_allclose(biases["stochastic (mean)"], (mean - x) / 0.125, atol=1e-12)
    assert np.all((mean >= np.floor(x / 0.125) * 0.125) & (mean <= np.ceil(x / 0.125) * 0.125))  # the neighbours
    again, other = drawn(0)[0]["mean of 4 stochastic roundings"], drawn(1)[0]["mean of 4 stochastic roundings"]
    np.testing.assert_array_equal(again, mean)
    assert not np.array_equal(other, mean)


def test_delayed_scaling_outlier_shades_the_steps_whose_history_holds_the_outlier_and_labels_each_bar():
    """The green window covers exactly the history_len steps after the outlier (whose delayed scale
    comes from it), in every panel; each clipped count is written on its own bar; the outlier's note
    points at that step's amax, even where it is a dip (spike_factor < 1) rather than the largest."""
    steps, spike, history = 20, 6, 4
    for factor in (8.0, 0.25):
        figure = plots.delayed_scaling_outlier(steps=steps, spike_step=spike, spike_factor=factor,
                                               history_len=history, size=256, seed=1)
        for axis in figure.axes:
            (window,) = [patch for patch in axis.patches if patch.get_width() != 0.7]  # (the bars are 0.7 wide)
            covered = [step for step in range(steps) if window.get_x() < step < window.get_x() + window.get_width()]
            assert covered == list(range(spike + 1, spike + history + 1))
        amax_axis, _, clip_axis = figure.axes
        amax = amax_axis.get_lines()[0].get_ydata()
        (note,) = [text for text in amax_axis.texts if text.get_text().startswith("outlier step")]
        assert tuple(note.xy) == (spike, amax[spike])
        (bars,) = clip_axis.containers
        heights = {bar.get_x() + bar.get_width() / 2: bar.get_height() for bar in bars
                   if np.isfinite(bar.get_height())}
        labels = {float(text.xy[0]): (text.get_text(), float(text.xy[1])) for text in clip_axis.texts
                  if isinstance(text, matplotlib.text.Annotation)}
        assert labels == {step: (f"{int(height)}", height) for step, height in heights.items()}
        assert factor < 1 or heights  # (the outlier clips)


def test_block_scaling_snr_draws_each_recipes_snr_and_its_bits_per_value():
    """Each line is its recipe's SNR per row, from the package's own casts (per-tensor E4M3, the three
    MX formats, NVFP4), labelled with its bits per value: an element's bits plus its block's share of
    the scale (MX: 8 bits per 32 elements, NVFP4: an E4M3 scale per 16)."""
    from minifp8 import mx
    from minifp8.scaling import quantize_current

    rows, columns, low = 5, 64, -20
    axis = plots.block_scaling_snr(rows=rows, columns=columns, low_exponent=low, seed=1).axes[0]
    exponents, x = plots._rows_at_scales(rows, columns, low, 1)
    np.testing.assert_array_equal(exponents, np.linspace(low, 0, rows))
    casts = {"E4M3 per tensor": (quantize_current(x, "E4M3").dequantize(), 8),
             "NVFP4": (mx.quantize_nvfp4(x).dequantize(),
                       formats.get("E2M1").bits + formats.get("E4M3").bits / mx.NVFP4_BLOCK_SIZE)}
    for name in ("MXFP8_E4M3", "MXFP6_E2M3", "MXFP4_E2M1"):
        casts[name] = (mx.quantize(x, name).dequantize(), mx.get(name).elem.bits + 8 / mx.get(name).block_size)
    drawn = {line.get_label(): line for line in axis.get_lines() if not line.get_label().startswith("_")}
    x64 = x.astype(np.float64)
    assert set(drawn) == {f"{name} ({bits:g} bits/value)" for name, (_, bits) in casts.items()}
    for name, (values, bits) in casts.items():
        line = drawn[f"{name} ({bits:g} bits/value)"]
        noise = np.sum((values.astype(np.float64) - x64) ** 2, axis=1)
        np.testing.assert_array_equal(line.get_xdata(), exponents)
        np.testing.assert_allclose(line.get_ydata(), 10 * np.log10(np.sum(x64**2, axis=1) / noise), rtol=1e-12)


def test_scale_plot_draws_each_scale_in_its_half_row_against_its_formats_ranges():
    """Each row's upper half shades E4M3's range (normals 2**-6 to 448, subnormals from 2**-9) and holds
    the value's marker; its lower half E5M2's (normals 2**-14 to 57344, subnormals from 2**-16) and the
    gradient's. The markers sit at the chosen statistic, and the axis shows both ranges whole and
    every scale, a 2**20 one included."""
    from matplotlib.colors import to_rgba

    records = [fp8.ScaleRecord("small", (4,), 2.0**-12, 2.0**-11, 2.0**-20, 2.0**-19),
               fp8.ScaleRecord("large", (4,), 2.0**20, 2.0**19, 3.0, 2.0)]
    ranges = {"E4M3": (2.0**-9, 2.0**-6, 448.0), "E5M2": (2.0**-16, 2.0**-14, 57344.0)}
    halves = {"E4M3": (-0.45, 0.0), "E5M2": (0.0, 0.45)}  # (the y axis runs down: row 0 at the top)
    for statistic in ("std", "mean_abs"):
        ax = plots.scale_plot(records, statistic=statistic).axes[0]
        bands = set()
        for collection in ax.collections:
            vertices = collection.get_paths()[0].vertices
            name = next(name for name in ranges if to_rgba(plots.FORMAT_COLORS[name])[:3]
                        == tuple(collection.get_facecolor()[0][:3]))
            bands.add((name, bool(collection.get_hatch()), float(vertices[:, 0].min()), float(vertices[:, 0].max()),
                       round(float(vertices[:, 1].min()), 9), round(float(vertices[:, 1].max()), 9)))
        expected = set()
        for name, (smallest, normal, largest) in ranges.items():
            for row in range(len(records)):
                y = (round(row + halves[name][0], 9), round(row + halves[name][1], 9))
                expected |= {(name, False, normal, largest, *y), (name, True, smallest, normal, *y)}
        assert bands == expected, statistic
        markers = {line.get_label(): line for line in ax.get_lines()}
        for label, name, field in (("value (forward)", "E4M3", "forward"), ("gradient (backward)", "E5M2", "backward")):
            line = markers[f"{label}: {statistic}"]
            assert list(line.get_xdata()) == [getattr(r, f"{field}_{statistic}") for r in records]
            assert all(row + halves[name][0] < y < row + halves[name][1] for row, y in enumerate(line.get_ydata()))
        low, high = ax.get_xlim()
        shown = [x for line in ax.get_lines() for x in line.get_xdata()]
        assert low < min([2.0**-16, *shown]) and max([57344.0, *shown]) < high
    low, high = plots.scale_plot([fp8.ScaleRecord("unit", (4,), 1.0, 1.0, 1.0, 1.0)]).axes[0].get_xlim()
    assert low < 2.0**-16 and 57344 < high  # (both ranges whole where every scale lies inside them)


def test_gpt_cast_scales_records_each_casts_input_and_output_gradient():
    """Checked against the model's own track calls in a plain ScaleTracker: lm_head reads ln_f's output
    and its output gradient is the logits'; an attention core's forward is q, k and v together (equal
    sizes: its mean |x| is the mean of theirs) and its gradient is the attention output's; the MLP's
    first linear's output gradient is mlp_hidden's, and the attention's c_proj reads the attention output."""
    from minifp8 import data
    from minifp8.model import GPT, GPTConfig

    config = GPTConfig(vocab_size=14, block_size=8, n_layer=1, n_head=2, n_embd=16)
    records = {r.name: r for r in plots.gpt_cast_scales(config, batch_size=2, seed=0)}
    assert list(records) == ["blocks.0.attn.c_attn", "blocks.0.attn", "blocks.0.attn.c_proj", "blocks.0.mlp.c_fc",
                             "blocks.0.mlp.c_proj", "lm_head"]  # (the order the forward pass reaches them)
    model = GPT(config, rng=np.random.default_rng(0))
    ids, targets = data.load_dataset(seed=0).get_batch("train", 2, 8, np.random.default_rng(0))
    with fp8.ScaleTracker() as tracker:
        model(ids, targets)[1].backward()
    tracked = tracker.records
    close = lambda a, b: math.isclose(a, b, rel_tol=1e-6)  # noqa: E731
    head = records["lm_head"]
    assert close(head.forward_std, tracked["ln_f"].forward_std)
    assert close(head.forward_mean_abs, tracked["ln_f"].forward_mean_abs)
    assert close(head.backward_std, tracked["logits"].backward_std)
    assert close(head.backward_mean_abs, tracked["logits"].backward_mean_abs)
    core = records["blocks.0.attn"]
    assert core.shape == (3, *tracked["q"].shape)
    assert close(core.forward_mean_abs, np.mean([tracked[name].forward_mean_abs for name in "qkv"]))
    assert close(core.backward_std, tracked["attention"].backward_std)
    assert close(records["blocks.0.attn.c_proj"].forward_std, tracked["attention"].forward_std)
    assert close(records["blocks.0.mlp.c_fc"].backward_mean_abs, tracked["mlp_hidden"].backward_mean_abs)


def test_loss_figures_label_each_floor_on_its_own_line():
    """The entropy rate is the dotted line and its label sits on it; the window floor the dash-dotted one."""
    results = {"loss_floor": 1.0, "window_loss_floor": 1.25,
               "runs": {"fp32": run("fp32", val=_evaluations(0.0, 0.5))}}
    for figure in (plots.training_curves, plots.validation_curves):
        axis = figure(results).axes[0]
        lines = {line.get_ydata()[0]: line.get_linestyle() for line in axis.get_lines() if line.get_color() == "grey"}
        labels = {text.get_text(): text.get_position()[1] for text in axis.texts}
        assert lines == {1.0: ":", 1.25: "-."}
        assert labels["entropy rate of the corpus (whole lines)"] == 1.0
        assert labels["floor of the loss over the run's windows"] == 1.25


def test_scale_curves_shades_e5m2s_normals_and_subnormals_where_they_lie():
    results = {"runs": {"fp8": {"recipe": "fp8", "scales": [_scales(50, 1.0, 1e-4)]}}}
    gradient_axis = plots.scale_curves(results, tensor="residual").axes[-1]
    spans = sorted((patch.get_y(), patch.get_y() + patch.get_height()) for patch in gradient_axis.patches)
    assert spans == [(2.0**-16, 2.0**-14), (2.0**-14, 57344.0)]  # subnormals, then normals


def test_fp8lm_options_marks_fp32_adamws_sixteen_bytes():
    """FP32 AdamW holds 4 bytes each of weights, gradients and both moments: the line at 16 B."""
    axis = plots.fp8lm_options({"runs": {"fp8": run()}}).axes[2]
    (line,) = axis.get_lines()
    assert list(line.get_xdata()) == [16, 16]
    assert [text.get_position()[0] for text in axis.texts if text.get_text() == "FP32 AdamW: 16 B"] == [16.25]


def test_train_speed_draws_each_target_at_its_ratio_in_its_recipes_colour():
    """A target of one recipe in its colour, one that several share in grey, each at its ratio."""
    results = speed_results(target=1.5)
    results["recipes"].update({"current": {"ratio": 1.2, "window_ratios": [1.2, 1.3], "target": 1.5},
                               "mxfp8": {"ratio": 1.8, "window_ratios": [1.7, 1.9], "target": 2.0}})
    axis = plots.train_speed(results).axes[0]
    targets = {line.get_label(): (line.get_ydata()[0], line.get_color()) for line in axis.get_lines()
               if "target" in line.get_label()}
    assert targets == {"target 1.5x": (1.5, "grey"), "mxfp8 target 2x": (2.0, plots.RUN_STYLES["mxfp8"][0])}


def test_fp8_linear_gemms_names_each_gemms_output_beside_it():
    """fprop gives Y, dgrad dX and wgrad dW, each written right of its GEMM's box, on its row."""
    texts = plots.fp8_linear_gemms().axes[0].texts
    boxes = {text.get_text().split("\n")[0]: text.get_position() for text in texts
             if text.get_text().split("\n")[0] in fp8.GEMMS}
    for gemm, output in (("fprop", "Y"), ("dgrad", "dX"), ("wgrad", "dW")):
        (beside,) = [text for text in texts if text.get_position()[1] == boxes[gemm][1]
                     and text.get_position()[0] > boxes[gemm][0] and not isinstance(text, matplotlib.text.Annotation)]
        assert beside.get_text() == output, gemm


def test_gap_curves_draws_each_arm_in_a_colour_and_marker_of_its_own():
    fp32 = [{"step": 0, "loss": 2.0}]
    axis = plots.gap_curves({label: {"0": (fp32, fp32)} for label in ("a", "b", "c")}).axes[0]
    lines = [line for line in axis.get_lines() if not line.get_label().startswith("_")]
    assert len({line.get_color() for line in lines}) == len({line.get_marker() for line in lines}) == 3
