"""Contracts of the training CLI and its data that the other tests left open.

Found by mutation testing of ``minifp8/train_tiny.py`` and ``minifp8/data.py``; each test pins a
rule the docstrings state, against a hand computation or an independent reference:

- data: ``val_fraction`` is refused outside (0, 1) with that message; a held-out split never
  leaves the training split empty; ``Dataset.text_sha256`` of a file is what ``sha256sum`` prints,
  and of a text longer than one hashed slice too; ``load_dataset`` checks ``val_fraction`` first.
- loss scaling: the gradients are multiplied by ``float32(1 / N)``, not divided by ``N``.
- data-parallel workers: a step's loss is the whole batch's mean, not one shard's.
- schedule: ``--lr`` and ``--min-lr-ratio`` set the warmup + cosine rates; the unit-scaled model's
  default base rate is the 1.0 its help states.
- delayed scaling: every training step advances each amax history exactly once, a step that dynamic
  loss scaling skips too.
- progress and evaluation: a progress line's loss is the mean of the steps since the previous line,
  steps before a resume included; the last step is always logged and evaluated, so the summary
  row describes the final weights; the answer accuracy pools every validation batch.
- timing, on a fake clock: a progress line's ms, tok/s and eta by hand (the evaluations left
  counted, the last one too); after a resume, the eta times this session's steps and ``time_s``
  keeps the sessions before.
- outputs: ``_strict_json`` writes every non-finite float (Inf too, not only NaN) as null;
  ``headline_results`` averages the training loss over consecutive windows of ``every`` steps.
"""
import hashlib
import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

from minifp8 import autograd, data, train_tiny
from minifp8.optim import AdamW
from minifp8.train_tiny import LossScaler, Run, parse_args

# A model small enough that a few steps take well under a second.
SMALL = ["--batch-size", "4", "--block-size", "16", "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
         "--eval-batches", "2"]


def quiet(*args):
    pass


TINY = dict(steps=2, eval_interval=2, log_interval=2, n_layer=1, n_head=2, n_embd=16, batch_size=4, block_size=16,
            eval_batches=1)  # (train()'s config of a run of well under a second)


@pytest.fixture(scope="module")
def corpus():
    return data.load_dataset()


def built(monkeypatch):
    """Record what `train_tiny._build` builds (model, generator, FP8 state, optimizer, ...)."""
    real, records = train_tiny._build, []

    def recording(*args, **kwargs):
        records.append(real(*args, **kwargs))
        return records[-1]

    monkeypatch.setattr(train_tiny, "_build", recording)
    return records


# ---- data ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fraction", [0, 0.0, 1, 1.0])
def test_val_fraction_is_refused_outside_the_open_unit_interval(tmp_path, fraction):
    """The documented rule, ``strictly between 0 and 1``, is what the error says, for the corpus,
    a text and a file: a share of 0 is not a text too short to split."""
    path = tmp_path / "text.txt"
    path.write_text("abcdefghij" * 100)
    for call in (lambda: data.arithmetic_corpus(0, val_fraction=fraction),
                 lambda: data.Dataset.from_text("abcdefghij" * 100, val_fraction=fraction),
                 lambda: data.load_dataset(path, val_fraction=fraction)):
        with pytest.raises(ValueError, match="val_fraction must be strictly between 0 and 1"):
            call()


def test_a_held_out_share_that_takes_every_line_is_refused():
    """4 problems (0..1 + 0..1) with val_fraction 0.9: round(3.6) = 4 lines would be held out and
    the training split left empty, which `arithmetic_corpus` refuses (at least one line each)."""
    with pytest.raises(ValueError, match="leaves an empty train or val split"):
        data.arithmetic_corpus(0, max_operand=1, operators="+", val_fraction=0.9)
    with pytest.raises(ValueError, match="leaves an empty train or val split"):
        data.Dataset.from_text("abcd", val_fraction=0.9)
    train_text, val_text = data.arithmetic_corpus(0, max_operand=1, operators="+", val_fraction=0.6)
    assert (train_text.count("\n"), val_text.count("\n")) == (2, 2)  # round(2.4): one of each at least


def test_text_sha256_of_a_file_is_its_sha256sum(tmp_path):
    """Dataset.text_sha256 hashes the training text, then the validation text: for a UTF-8 file
    without a byte-order mark or \\r, exactly the bytes of the file (what ``sha256sum`` prints)."""
    path = tmp_path / "text.txt"
    path.write_bytes("".join(f"line {i}: {i * i}\n" for i in range(300)).encode())
    assert data.load_dataset(path).text_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_text_sha256_hashes_every_character_of_a_text_longer_than_one_hashed_slice():
    """The text is hashed a slice of 2**20 characters at a time; the digest is still the SHA-256 of
    the training text then the validation text in UTF-8 (found by mutation testing: a slice one
    character short went unnoticed, as every text hashed was shorter than a slice)."""
    train_text = "".join(f"{i}+{i}={2 * i}\n" for i in range(120_000))  # 2,242,225 characters
    assert len(train_text) > 2**20 + 1
    dataset = data.Dataset(train_text, "1+1=2\n")
    assert dataset.text_sha256 == hashlib.sha256((train_text + "1+1=2\n").encode("utf-8")).hexdigest()


def test_load_dataset_checks_val_fraction_before_it_reads_the_file(tmp_path):
    """`load_dataset` checks ``val_fraction`` before a file is read: a bad share is named as such, for a
    path that does not exist too (found by mutation testing: without the check, FileNotFoundError)."""
    with pytest.raises(ValueError, match="val_fraction must be strictly between 0 and 1"):
        data.load_dataset(tmp_path / "missing.txt", val_fraction=1.5)


# ---- loss scaling --------------------------------------------------------------------------------

def test_loss_scaled_gradients_are_multiplied_by_the_float32_reciprocal(monkeypatch, corpus):
    """Module docstring: the gradients are multiplied by ``float32(1 / N)`` before clipping. For
    N = 3 that differs in the last bit from dividing by 3, so the two are told apart."""
    records = built(monkeypatch)
    raw, unscaled = [], []
    backward = autograd.Tensor.backward

    def recording_backward(self, grad=None):
        backward(self, grad)
        raw.append([p.grad.copy() for p in records[-1][0].parameters()])

    clip = train_tiny.clip_grad_norm

    def recording_clip(params, max_norm):
        unscaled.append([p.grad.copy() for p in params])
        return clip(params, max_norm)

    monkeypatch.setattr(autograd.Tensor, "backward", recording_backward)
    monkeypatch.setattr(train_tiny, "clip_grad_norm", recording_clip)
    config = parse_args([*SMALL, "--steps", "1", "--eval-interval", "1", "--recipe", "fp32"])[0]
    train_tiny.train(Run("fp32", "standard", "3"), config, corpus, print_fn=quiet)
    assert len(raw) == len(unscaled) == 1
    inverse = np.float32(1 / 3)
    assert any((g / np.float32(3) != g * inverse).any() for g in raw[0])  # the two rules differ here
    for scaled, after in zip(raw[0], unscaled[0]):
        assert after.dtype == scaled.dtype == np.float32
        np.testing.assert_array_equal(after, scaled * inverse)


def test_the_loss_of_a_step_split_over_workers_is_the_whole_batch_mean(corpus):
    """--fp8-allreduce 2 splits each batch into 2 equal shards: the step's training loss is the mean
    of the shards' mean losses, so the first step (same weights, same batch) records the loss a
    one-worker run records, to float32 rounding. In fp32 no cast depends on the shard."""
    flags = [*SMALL, "--steps", "1", "--eval-interval", "1", "--recipe", "fp32"]
    config = parse_args(flags)[0]
    whole = train_tiny.train(Run("fp32", "standard"), config, corpus, print_fn=quiet)
    split = train_tiny.train(Run("fp32", "standard", fp8_grads=True, workers=2), config, corpus, print_fn=quiet)
    assert split["train_loss"][0] == pytest.approx(whole["train_loss"][0], rel=1e-6)


# ---- learning-rate schedule ----------------------------------------------------------------------

def recorded_rates(monkeypatch):
    rates = []
    step = AdamW.step

    def recording(self):
        rates.append([group["lr"] for group in self.param_groups])
        step(self)

    monkeypatch.setattr(AdamW, "step", recording)
    return rates


def test_lr_and_min_lr_ratio_set_the_warmup_cosine_rates(monkeypatch, corpus):
    """--lr 0.02 --min-lr-ratio 0.5 --warmup-steps 2 --steps 6: step s (from 0) runs at
    0.02 (s + 1) / 2 while s < 2, then 0.02 (0.5 + 0.5 (1 + cos(pi (s - 2) / 4)) / 2)."""
    rates = recorded_rates(monkeypatch)
    config = parse_args([*SMALL, "--steps", "6", "--eval-interval", "6", "--warmup-steps", "2", "--recipe", "fp32",
                         "--lr", "0.02", "--min-lr-ratio", "0.5"])[0]
    train_tiny.train(Run("fp32", "standard"), config, corpus, print_fn=quiet)
    factors = [(s + 1) / 2 if s < 2 else 0.5 + 0.5 * (1 + math.cos(math.pi * (s - 2) / 4)) / 2 for s in range(6)]
    assert [group[0] for group in rates] == [pytest.approx(0.02 * f, rel=1e-12) for f in factors]


def test_unit_model_default_peak_rate_is_the_documented_one(monkeypatch, corpus):
    """--lr's help: the default peak is 1.0 for the unit-scaled model, which u-muP's per-parameter
    rule (`minifp8.model.GPT.optimizer_groups`) scales; the last warmup step runs at the peak."""
    records, rates = built(monkeypatch), recorded_rates(monkeypatch)
    assert "1.0 unit" in train_tiny.TrainConfig.__dataclass_fields__["lr"].metadata["help"]
    config = parse_args([*SMALL, "--steps", "2", "--eval-interval", "2", "--warmup-steps", "2"])[0]
    train_tiny.train(Run("unit", "unit"), config, corpus, print_fn=quiet)
    model = records[-1][0]
    assert rates[1] == [group["lr"] for group in model.optimizer_groups(1.0, config.weight_decay)]


# ---- delayed scaling -----------------------------------------------------------------------------

def test_each_training_step_advances_every_delayed_scaling_history_once(monkeypatch, corpus):
    """fp8.FP8State.step ends an optimizer step. After 3 steps of the delayed recipe (and the
    evaluations, which leave the state as they found it) each amax history holds the 3 amaxes,
    oldest first, at its end, and zeros before them (scaling.DelayedScaling: record into entry 0,
    then roll by -1 and clear entry 0)."""
    records = built(monkeypatch)
    config = parse_args([*SMALL, "--steps", "3", "--eval-interval", "1", "--recipe", "delayed"])[0]
    train_tiny.train(Run("delayed", "standard"), config, corpus, print_fn=quiet)
    for scaler in assert_every_history_advanced(records[-1][2], 3):
        assert scaler.scale != 1


def assert_every_history_advanced(state, steps):
    """Assert that ``state`` ended ``steps`` steps and that each amax history holds ``steps`` amaxes
    at its end and zeros before them; returns the scalers."""
    assert state.steps == steps
    scalers = [scaler for point in state.points.values() for scaler in point.scalers.values()]
    assert scalers
    for scaler in scalers:
        history = scaler.amax_history
        assert (history[-steps:] > 0).all() and not history[:-steps].any(), history[-steps - 1:]
    return scalers


def test_a_step_that_dynamic_loss_scaling_skips_advances_every_delayed_scaling_history_too(monkeypatch, corpus):
    """A mutation audit's gap: no test had a step skipped under the delayed recipe, so `fp8.FP8State.step`
    run on applied steps alone (``if finite: state.step()``) went unnoticed. The skipped step still ran
    its casts, so it ends as any other (`fp8.FP8State.step`'s docstring). An Inf put into one gradient
    at step 1 of 4 (--saturate-gradients no, which --loss-scale dynamic requires under delayed): one
    step skipped (or more), the loss scale halved, and ``state.steps`` is 4, each history holding 4 amaxes."""
    records = built(monkeypatch)
    backward, calls = autograd.Tensor.backward, []

    def poisoning_backward(self, grad=None):
        backward(self, grad)
        calls.append(None)
        if len(calls) == 1:
            p = records[-1][0].parameters()[0]
            p.grad = np.array(p.grad, copy=True)
            p.grad.flat[0] = np.inf

    monkeypatch.setattr(autograd.Tensor, "backward", poisoning_backward)
    config = parse_args([*SMALL, "--steps", "4", "--eval-interval", "4", "--log-interval", "1", "--recipe", "delayed",
                         "--loss-scale", "dynamic", "--saturate-gradients", "no"])[0]
    result = train_tiny.train(Run("delayed", "standard", "dynamic"), config, corpus, print_fn=quiet)
    assert len(calls) == 4 and len(result["train_loss"]) == 4
    # (step 1 skipped; a lagging delayed scale may overflow a later step too, which ends the same way)
    assert result["skipped_steps"] >= 1 and result["loss_scale"][0] == {"step": 1, "scale": 2.0**15, "skipped": 1}
    assert_every_history_advanced(records[-1][2], 4)


# ---- progress lines, evaluations, summary --------------------------------------------------------

PROGRESS = re.compile(r"step (\d+)/\d+ \| loss (\d+\.\d{4}) \| ")
VALIDATION = re.compile(r"step (\d+)/\d+ \| val loss ")


def test_progress_lines_average_their_window_and_the_last_step_is_logged_and_evaluated(tmp_path, corpus):
    """--steps 10 --log-interval 4 --eval-interval 4: progress lines at steps 4, 8 and 10 (the last
    step always), each with the mean training loss of the steps since the line before; evaluations
    at 0, 4, 8 and 10, and the summary's validation loss is step 10's. A run stopped after step 6 and
    resumed prints step 8's line over steps 5 to 8, the two before the resume included."""
    config = parse_args([*SMALL, "--steps", "10", "--log-interval", "4", "--eval-interval", "4",
                         "--recipe", "fp32"])[0]
    lines = []
    whole = train_tiny.train(Run("fp32", "standard"), config, corpus, print_fn=lines.append)
    losses = whole["train_loss"]
    progress = [match.groups() for match in map(PROGRESS.match, lines) if match]
    windows = {4: losses[0:4], 8: losses[4:8], 10: losses[8:10]}
    assert progress == [(str(step), f"{np.mean(window):.4f}") for step, window in windows.items()]
    assert [int(m[1]) for m in map(VALIDATION.match, lines) if m] == [0, 4, 8, 10]
    assert [entry["step"] for entry in whole["val"]] == [0, 4, 8, 10]
    assert whole["final"]["val_loss"] == whole["val"][-1]["loss"]

    with pytest.raises(train_tiny.Interrupted):
        train_tiny.train(Run("fp32", "standard"), config, corpus, out=tmp_path, stop_after=6, print_fn=quiet)
    lines.clear()
    resumed = train_tiny.train(Run("fp32", "standard"), config, corpus, out=tmp_path, resume=True,
                               print_fn=lines.append)
    assert resumed["train_loss"] == losses
    assert [match.groups() for match in map(PROGRESS.match, lines) if match] == progress[1:]


def test_answer_accuracy_of_an_evaluation_pools_every_validation_batch(corpus):
    """The evaluation's answer accuracy counts the answers of all its batches together (and its loss
    is the mean of the batches' losses): a model right on every even batch and wrong everywhere on
    the odd ones scores the even batches' share of the answer characters and of the answers."""
    config = parse_args([*SMALL, "--block-size", "32", "--eval-batches", "4", "--recipe", "fp32"])[0]
    batches = train_tiny._eval_batches(corpus, config)
    vocab = corpus.vocab_size

    class Oracle:
        calls = 0

        def eval(self):
            pass

        def train(self):
            pass

        def __call__(self, x, y):
            right = self.calls % 2 == 0
            predicted = y if right else (y + 1) % vocab
            self.calls += 1
            return (SimpleNamespace(data=np.eye(vocab, dtype=np.float32)[predicted]),
                    SimpleNamespace(data=np.float32(self.calls)))

    state = train_tiny._build(Run("fp32", "standard"), config, vocab)[2]
    result = train_tiny._evaluate(Oracle(), state, batches, corpus)
    chars = [int(data.answer_mask(x, y, corpus.tokenizer).sum()) for x, y in batches]
    answers = [data.answer_accuracy(x, y, y, corpus.tokenizer).total_answers for x, y in batches]
    assert min(chars) > 0
    assert result["loss"] == pytest.approx(np.mean([1, 2, 3, 4]))
    assert result["char_accuracy"] == pytest.approx((chars[0] + chars[2]) / sum(chars))
    assert result["exact_match"] == pytest.approx((answers[0] + answers[2]) / sum(answers))


def fake_clock(monkeypatch, evaluation_seconds):
    """time.perf_counter stands still, but for 1 s inside each training step (in LossScaler.update,
    which every step calls between the readings that time it) and ``evaluation_seconds`` in each
    evaluation."""
    clock = [0.0]
    monkeypatch.setattr(train_tiny.time, "perf_counter", lambda: clock[0])
    update, evaluate = train_tiny.LossScaler.update, train_tiny._evaluate

    def timed_update(self, finite):
        clock[0] += 1.0
        update(self, finite)

    def timed_evaluate(*args):
        clock[0] += evaluation_seconds
        return evaluate(*args)

    monkeypatch.setattr(train_tiny.LossScaler, "update", timed_update)
    monkeypatch.setattr(train_tiny, "_evaluate", timed_evaluate)


ETA = re.compile(r"\| (\d+) ms \| ([\d,]+) tok/s \| eta (\S+)")


def test_progress_lines_give_the_step_time_tokens_per_second_and_an_eta_by_hand(monkeypatch, corpus):
    """Steps of 1 s, evaluations of 10 s; --steps 5 --eval-interval 2 --log-interval 2: evaluations at
    steps 0, 2, 4 and 5 (the last step always), progress lines at 2, 4 and 5, each before its step's
    evaluation. A step of 4 x 16 tokens in 1 s: 1000 ms and 64 tok/s (found by mutation testing: tok/s
    counted 4 tokens a step). The eta is the steps left at 1 s plus the evaluations left at 10 s:
    3 + 30 s at step 2 (evaluations 2, 4 and 5 left: found by mutation testing, the last one, off the
    --eval-interval grid, went uncounted), 1 + 20 s at step 4, 0 + 10 s at step 5."""
    fake_clock(monkeypatch, evaluation_seconds=10.0)
    config = parse_args([*SMALL, "--steps", "5", "--eval-interval", "2", "--log-interval", "2", "--recipe", "fp32"])[0]
    lines = []
    train_tiny.train(Run("fp32", "standard"), config, corpus, print_fn=lines.append)
    assert [match.groups() for match in map(ETA.search, lines) if match] == [
        ("1000", "64", "33s"), ("1000", "64", "21s"), ("1000", "64", "10s")]


def test_a_resumed_run_times_its_own_steps_and_keeps_the_time_of_the_sessions_before(tmp_path, monkeypatch, corpus):
    """Steps of 1 s, evaluations of 10 s; --steps 6 --eval-interval 6 --log-interval 2, stopped after
    step 3 and resumed. The resumed session's eta at step 4 is its own steps' time per step (1 s)
    times the 2 steps left: 2 s (it has timed no evaluation yet, so counts none; found by mutation
    testing: dividing by every step done, those before the resume too, gave 1 / 4 s a step). The run's
    time_s is both sessions' time: 6 steps and 2 evaluations, 26 s, as without the stop (found by
    mutation testing: the checkpoint written at the end kept the last session's time alone)."""
    fake_clock(monkeypatch, evaluation_seconds=10.0)
    config = parse_args([*SMALL, "--steps", "6", "--eval-interval", "6", "--log-interval", "2", "--recipe", "fp32"])[0]
    whole = train_tiny.train(Run("fp32", "standard"), config, corpus, print_fn=quiet)
    assert whole["time_s"] == 26.0
    with pytest.raises(train_tiny.Interrupted):
        train_tiny.train(Run("fp32", "standard"), config, corpus, out=tmp_path, stop_after=3, print_fn=quiet)
    lines = []
    resumed = train_tiny.train(Run("fp32", "standard"), config, corpus, out=tmp_path, resume=True,
                               print_fn=lines.append)
    assert [match.group(3) for match in map(ETA.search, lines) if match] == ["2s", "0s"]
    assert resumed["time_s"] == 26.0


# ---- metrics.json and the headline results -------------------------------------------------------

def test_strict_json_writes_every_non_finite_number_as_null():
    """JSON has no NaN or Infinity: NaN, +Inf and -Inf all become null, anywhere in the document."""
    document = {"a": math.nan, "b": [math.inf, {"c": -math.inf}], "d": (1.5, 2)}
    assert json.loads(train_tiny._strict_json(document)) == {"a": None, "b": [None, {"c": None}], "d": [1.5, 2]}


def test_headline_results_average_the_training_loss_over_consecutive_windows():
    """``train_loss_every`` = 10: the means of steps 1-10 and 11-20; the 5 steps of an incomplete
    window are dropped (25 losses 0..24 give 4.5 and 14.5)."""
    run = {"recipe": "fp32", "family": "standard", "loss_scale_mode": "none",
           "train_loss": [float(i) for i in range(25)], "val": [], "diverged": None, "time_s": 1.0,
           "skipped_steps": 0, "cast_stats": [], "loss_scale": []}
    document = {"config": {"experiment": None}, "data": "d", "loss_floor": None, "runs": {"fp32": run}}
    results = train_tiny.headline_results(document, every=10)
    assert results["train_loss_every"] == 10
    assert results["runs"]["fp32"]["train_loss"] == [4.5, 14.5]


# ---- train() and LossScaler check what main checks (found in an API review) -----------------------

@pytest.mark.parametrize("run, config, message", [
    (Run("bogus", "standard"), {}, "train: unknown run"),
    (Run("current", "standard", workers=2), {}, r"workers an int >= 1 \(> 1 only with fp8_grads\)"),
    (Run("current", "standard"), {"steps": -1}, "train: --steps must be >= 1, got -1"),
    (Run("current", "standard", fp8_optimizer="O3"), {"center_lm_head": True},
     "--center-lm-head cannot be used with --fp8-optimizer O3"),
    # a docs review's find: the API trained it, the factor doubling without a skipped step until the
    # LM head's gradient cast was 100% saturated
    (Run("fp8", "standard", "dynamic"), {"saturate_gradients": "yes"},
     r"train: --loss-scale dynamic finds an overflow by the Inf .* \(fp8 \+ loss scale dynamic\)"),
])
def test_train_refuses_what_main_refuses(corpus, run, config, message):
    # (train trained the first three: a KeyError deep inside, a batch split over workers without fp8_grads,
    # and a run of no steps; the last centred the model's LM head while O3's float16 masters kept the mean row)
    with pytest.raises(ValueError, match=message):
        train_tiny.train(run, train_tiny.TrainConfig(**config), corpus, print_fn=quiet)


def test_train_names_a_run_or_config_of_the_wrong_type(corpus):
    with pytest.raises(TypeError, match="train: run must be a Run, got str"):
        train_tiny.train("current", train_tiny.TrainConfig(), corpus)
    with pytest.raises(TypeError, match="train: config must be a TrainConfig, got dict"):
        train_tiny.train(Run("current", "standard"), {}, corpus)


@pytest.mark.parametrize("run, config, message", [
    # (center_lm_head="no" centred the LM head; steps=2.0 trained to the first evaluation, then failed in
    # range(); the others failed in a comparison or an attribute that named no field)
    ({}, {"center_lm_head": "no"}, "train: config.center_lm_head must be bool, got 'no'"),
    ({}, {"track_scales": "no"}, "train: config.track_scales must be bool, got 'no'"),
    ({}, {"steps": 2.0}, "train: config.steps must be int, got 2.0"),
    ({}, {"steps": "2"}, "train: config.steps must be int, got '2'"),
    ({}, {"steps": True}, "train: config.steps must be int, got True"),
    ({}, {"dropout": "0"}, "train: config.dropout must be float, got '0'"),
    ({}, {"grad_clip": None}, "train: config.grad_clip must be float, got None"),
    ({}, {"fp32_modules": 3}, "train: config.fp32_modules must be str or None, got 3"),
    ({}, {"seed": 1.0}, "train: config.seed must be int, got 1.0"),
    ({"fp8_grads": "no"}, {}, "train: run.fp8_grads must be bool, got 'no'"),
    ({"workers": 2.0}, {}, "train: run.workers must be int, got 2.0"),
])
def test_train_checks_the_types_of_the_fields_as_the_command_line_gives_them(corpus, run, config, message):
    printed = []
    with pytest.raises(TypeError, match=re.escape(message)):
        train_tiny.train(Run("fp8", "standard", **run), train_tiny.TrainConfig(**{**TINY, **config}), corpus,
                         print_fn=printed.append)
    assert printed == []  # (refused before anything is printed or trained)


def test_train_names_a_dataset_or_out_of_the_wrong_type(corpus, tmp_path):
    config = train_tiny.TrainConfig(**TINY)
    with pytest.raises(TypeError, match=r"train: dataset must be a minifp8.data.Dataset \(data.load_dataset\(\)\), got str"):
        train_tiny.train(Run("fp8", "standard"), config, "abc")
    with pytest.raises(TypeError, match="train: out must be a path .* got int"):
        train_tiny.train(Run("fp8", "standard"), config, corpus, out=3)
    metrics = train_tiny.train(Run("fp8", "standard"), config, corpus, out=str(tmp_path), print_fn=quiet)
    assert metrics["train_loss"] and (tmp_path / "checkpoints").is_dir()  # (a str path works as a Path)


def test_the_command_line_refuses_center_lm_head_with_float16_master_weights(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--recipe", "current", "--fp8-optimizer", "O3", "--center-lm-head"])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(error.splitlines()) == 1 and "float16 master weights" in error


@pytest.mark.parametrize("arguments, error, message", [
    (("-1",), ValueError, "LossScaler: mode must be none, dynamic or a number .* got '-1'"),
    (("nan",), ValueError, "got 'nan'"),
    (("bogus",), ValueError, "got 'bogus'"),
    ((1024,), TypeError, "LossScaler: mode must be a str .* got int 1024"),
    (("dynamic", 0), ValueError, "growth_interval must be >= 1, got 0"),
    (("dynamic", 100, math.inf), ValueError, "init_scale must be a float32 normal number, .* got inf"),
])
def test_loss_scaler_refuses_what_load_state_dict_refuses(arguments, error, message):
    # (it took -1 and nan as scales, and 'bogus' failed in float())
    with pytest.raises(error, match=message):
        train_tiny.LossScaler(*arguments)


def test_train_takes_a_loss_scale_as_the_flag_writes_it_and_checks_stop_after(corpus):
    # (the new checks refused '1e3', which --loss-scale takes, and left stop_after unchecked; found in a review)
    config = train_tiny.TrainConfig(steps=2, eval_interval=2, **{"batch_size": 4, "block_size": 16, "eval_batches": 2})
    metrics = train_tiny.train(Run("current", "standard", "1e3"), config, corpus, print_fn=quiet)
    assert metrics["loss_scale_mode"] == "1000"
    with pytest.raises(ValueError, match="train: stop_after must be >= 1, got 0"):
        train_tiny.train(Run("current", "standard"), config, corpus, stop_after=0, print_fn=quiet)
    with pytest.raises(TypeError, match="train: stop_after must be an int, got str '3'"):
        train_tiny.train(Run("current", "standard"), config, corpus, stop_after="3", print_fn=quiet)


def test_loss_scaler_takes_numpy_scalars_as_load_state_dict_does():
    assert train_tiny.LossScaler("dynamic", np.int64(10), np.float32(1024.0)).scale == 1024.0
    with pytest.raises(TypeError, match="init_scale must be a real number, got str '1024'"):
        train_tiny.LossScaler("dynamic", 100, "1024")


def test_dynamic_loss_scaling_stops_doubling_at_float32s_largest_power_of_two():
    """A review's find: the factor doubled to 2^128, which float32 cannot hold: the backward's float32
    seed was Inf, so every other step was skipped for an overflow no gradient had. init_scale and
    load_state_dict took factors that --loss-scale N refuses (1e300, 1e-45)."""
    scaler = LossScaler("dynamic", growth_interval=1)
    for _ in range(200):
        scaler.update(True)
    assert scaler.scale == 2.0 ** 127 and np.isfinite(np.float32(scaler.scale)) and scaler.skipped == 0
    for bad in (1e300, 1e-45, float("nan"), float(np.finfo(np.float32).max) * 1.0001):
        with pytest.raises(ValueError, match="init_scale must be a float32 normal number, 2\\^-126 to FLT_MAX"):
            LossScaler("dynamic", init_scale=bad)
        with pytest.raises(ValueError, match="scale must be a float32 normal number, 2\\^-126 to FLT_MAX"):
            LossScaler("dynamic").load_state_dict({"scale": bad, "clean_steps": 0, "skipped": 0})
    assert LossScaler("dynamic", init_scale=float(np.finfo(np.float32).max)).scale == float(np.finfo(np.float32).max)


def test_train_takes_numpy_numbers_as_python_ones(corpus, tmp_path):
    """NumPy numbers pass the type check as the Python numbers they hold (config.json is written from the
    config): the same losses as Python numbers give."""
    python = train_tiny.train(Run("fp8", "standard", workers=1), train_tiny.TrainConfig(**TINY, seed=3), corpus,
                              print_fn=quiet)
    numpy_config = {**{k: np.int64(v) for k, v in TINY.items()}, "seed": np.int64(3), "center_lm_head": np.bool_(False)}
    numbers = train_tiny.train(Run("fp8", "standard", workers=np.int64(1)), train_tiny.TrainConfig(**numpy_config),
                               corpus, out=tmp_path, print_fn=quiet)
    assert numbers["train_loss"] == python["train_loss"]
