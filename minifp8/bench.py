"""Speed measurements: ``python -m minifp8.bench [SECTION ...]``.

Every section times minifp8 against a baseline measured in the same run, on the same data, and
reports medians of several repetitions, timed in turn with the baseline's (`best_of_rounds`,
`alternating_rounds`; the train section steps each recipe beside an fp32 run of its own), so that
a burst of load from another process lands on both sides. The machine this runs on is usually
shared and noisy, so the ratios are the numbers to quote, not the absolute times. Like
``train_tiny``, the command keeps freed memory in the process (``train_tiny._tune_malloc``), so
that it times steps as the trainer runs them.

Sections register themselves with `section`; ``python -m minifp8.bench`` with no argument
runs them all. A flag that only some sections read (`FLAG_SECTIONS`) is refused when none of them
runs, rather than silently ignored; `main` checks the sections named first, then that each flag
given applies to one of them, then the flags' values.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

import numpy as np

from ._cli import ListFlag, Parser, exit_status_of, one_line
from .formats import _check_int

_Section = Callable[[argparse.Namespace], None]  # a section: runs with the parsed command line
SECTIONS: dict[str, _Section] = {}


class BenchError(Exception):
    """A section that cannot finish (a results file that cannot be written, a training run whose
    gradients overflow); `main` prints the message as one line and exits with status 2."""
#: ``python -m minifp8.bench train --json`` of the default config, as committed (package data).
SPEED_RESULTS = Path(__file__).resolve().parent / "results" / "speed.json"


def section(name: str) -> Callable[[_Section], _Section]:
    """Register a benchmark section under ``name`` (a decorator)."""

    def register(function: _Section) -> _Section:
        SECTIONS[name] = function
        return function

    return register


def median_seconds(function: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``function()`` over ``repeats`` calls (>= 1), after ``warmup`` untimed calls."""
    repeats = _check_int(repeats, "median_seconds: repeats", 1)
    warmup = _check_int(warmup, "median_seconds: warmup", 0)
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def alternating_rounds(steps: Mapping[str, Callable[[], object]], rounds: int, repeats: int,
                       warmup: int = 1) -> dict[str, list[float]]:
    """Each round times every entry of ``steps`` once, one after another (the median of ``repeats``
    calls); returns the per-round medians of each entry. After each round but the last, a progress
    line with the time left goes to stderr."""
    rounds = _check_int(rounds, "alternating_rounds: rounds", 1)  # (0 gave empty lists, and NaN ratios)
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    started = time.perf_counter()
    for done in range(1, rounds + 1):
        for name, step in steps.items():
            seconds[name].append(median_seconds(step, repeats, warmup))
        if done < rounds:
            eta = (time.perf_counter() - started) / done * (rounds - done)
            print(f"  ... round {done}/{rounds} done, eta {eta:.0f}s", file=sys.stderr, flush=True)
    return seconds


def best_of_rounds(steps: Mapping[str, Callable[[], object]], repeats: int, rounds: int = 3) -> dict[str, float]:
    """`alternating_rounds`, then each entry's best (lowest) round median: minifp8 and its baseline
    are timed in turn, so that a burst of load from another process does not land on one side only."""
    return {name: min(medians) for name, medians in alternating_rounds(steps, rounds, repeats).items()}


def report_ratios(seconds: dict, label: str, targets: dict | None = None) -> None:
    """One line per entry of `alternating_rounds` output against its ``"fp32"`` entry: the median
    step time, and the median over the rounds of the ratio to the fp32 time of the same round (a
    slow stretch of a shared machine lands on both), with the range of those per-round ratios."""
    baseline = np.array(seconds["fp32"])
    for name, times in seconds.items():
        times = np.array(times)
        ratios = times / baseline
        line = f"  {label + ' ' + name:<44s} {np.median(times) * 1e3:9.2f} ms   x{np.median(ratios):5.2f} fp32 step"
        if len(ratios) > 1 and name != "fp32":
            line += f" ({ratios.min():.2f}-{ratios.max():.2f} over {len(ratios)} rounds)"
        if targets and name in targets:
            line += f" (target <= {targets[name]:g})"
        print(line, flush=True)


def report(label: str, seconds: float, elements: int | None = None, baseline: float | None = None) -> None:
    """Print one result line: time, throughput in Melem/s and the speed ratio against a baseline."""
    line = f"  {label:<44s} {seconds * 1e3:9.2f} ms"
    if elements is not None:
        line += f" {elements / seconds / 1e6:9.1f} Melem/s"
    if baseline is not None:
        line += f"   x{baseline / seconds:5.2f} speed of baseline"
    print(line, flush=True)


# ---- sections (each adds itself below) ---------------------------------------------------------

#: The codec section's arrays: CODEC_SIDE ** 2 = 2^24 values, a CODEC_SIDE-square for the layouts;
#: the mx section's, MX_SIDE x MX_SIDE; the block and fp8 sections' GPT block: (batch, seq, d, heads).
#: (The tests time smaller ones: they check the lines and the states, not the speed.)
CODEC_SIDE = 1 << 12
MX_SIDE = 4096
BLOCK_SHAPE = (16, 128, 256, 4)


@section("codec")
def bench_codec(args: argparse.Namespace) -> None:
    """Encode and decode 2^24 float32 values (E4M3, E5M2); baseline: ml_dtypes ``astype``. Then
    the encode of a transposed view and of a big-endian copy, against the same values in C order.
    Each keeps its best of three round medians (`best_of_rounds`).

    The ratios against ml_dtypes move with its version as much as with minifp8: on one 2-core Intel
    Xeon, minifp8's E4M3 encode ran at x1.30 the speed of ml_dtypes 0.5.1's ``astype`` and at x0.79
    of 0.7.0's, and its decode at x1.81 and x2.02. The machine line printed first names the version
    installed (`machine_line`).
    """
    from . import codec

    ml_dtypes: ModuleType | None
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
        print("  (ml_dtypes is not installed: no baseline; pip install ml_dtypes for the ratios)")
    x = np.random.default_rng(0).standard_normal(CODEC_SIDE ** 2).astype(np.float32) * 64
    for name, dtype_name in (("E4M3", "float8_e4m3fn"), ("E5M2", "float8_e5m2")):
        codes = codec.encode(x, name)
        steps: dict[str, Callable[[], object]] = {
            "encode": lambda: codec.encode(x, name), "decode": lambda: codec.decode(codes, name)}
        if ml_dtypes is not None:
            dtype = getattr(ml_dtypes, dtype_name)
            steps["astype encode"] = lambda: x.astype(dtype)
            steps["astype decode"] = lambda: codes.view(dtype).astype(np.float32)
        best = best_of_rounds(steps, args.repeats)
        if ml_dtypes is not None:
            report(f"ml_dtypes astype float32 -> {name}", best["astype encode"], x.size)
            report(f"ml_dtypes astype {name} -> float32", best["astype decode"], x.size)
        report(f"minifp8 encode {name}", best["encode"], x.size, best.get("astype encode"))
        report(f"minifp8 decode {name}", best["decode"], x.size, best.get("astype decode"))
    # The same values laid out otherwise: a transposed view is encoded in the order its elements
    # lie, and big-endian data is swapped once, so both come close to the contiguous speed (x1.00).
    square = x.reshape(CODEC_SIDE, CODEC_SIDE)
    layouts = {"a C-contiguous square": square, "its transposed view": square.T,
               "its big-endian copy": square.astype(">f4")}
    best = best_of_rounds({label: functools.partial(codec.encode, view, "E4M3") for label, view in layouts.items()},
                          args.repeats)
    contiguous = best.pop("a C-contiguous square")
    report("minifp8 encode E4M3, a C-contiguous square", contiguous, x.size)
    for label, seconds in best.items():
        report(f"minifp8 encode E4M3, {label}", seconds, x.size, contiguous)


def _gpt_block(batch: int, seq: int, d: int, heads: int, seed: int = 0):
    """The GPT-style pre-norm block that the "block" and "fp8" sections time.

    Causal attention, GELU MLP 4x. Returns ``(block, step)``: ``block`` is an ``nn.Module`` whose
    linears (``gemm``) and attention core (``attention_core``) ``fp8.apply_recipe`` finds, and
    ``step()`` runs forward+backward of a fixed input that requires grad (a middle block) against
    a fixed output gradient.
    """
    from . import functional as F
    from . import nn
    from .autograd import Tensor

    head_dim = d // heads

    def split_heads(t):
        return t.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)

    class Block(nn.Module):
        def __init__(self, rng):
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn_in, self.attn_out = nn.Linear(d, 3 * d, rng=rng), nn.Linear(d, d, rng=rng)
            self.mlp_in, self.mlp_out = nn.Linear(d, 4 * d, rng=rng), nn.Linear(4 * d, d, rng=rng)
            self.attention_core = F.scaled_dot_product_attention

        def forward(self, x):
            q, k, v = F.split(self.attn_in(self.ln_1(x)), d, axis=-1)
            y = self.attention_core(split_heads(q), split_heads(k), split_heads(v), True)
            h = x + self.attn_out(y.transpose(0, 2, 1, 3).reshape(batch, seq, d))
            return h + self.mlp_out(F.gelu(self.mlp_in(self.ln_2(h))))

    rng = np.random.default_rng(seed)
    block = Block(rng)
    params = block.parameters()
    x = Tensor(rng.standard_normal((batch, seq, d)), requires_grad=True)
    grad_out = rng.standard_normal((batch, seq, d)).astype(np.float32)

    def step():
        for p in params + [x]:
            p.grad = None
        block(x).backward(grad_out)

    return block, step


@section("block")
def bench_block(args: argparse.Namespace) -> None:
    """Forward+backward of one GPT-style pre-norm block; baseline: the same GEMMs alone in plain NumPy.

    Batch 16, seq 128, d 256, 4 heads, causal attention, GELU MLP 4x; the block input requires grad
    (a middle block). The ratio step / matmul measures autograd + elementwise overhead (target <= 2).
    Both are measured in alternating rounds; each keeps its best round median, so a burst of load
    from another process does not land on one side only.
    """
    batch, seq, d, heads = BLOCK_SHAPE
    head_dim = d // heads
    _, step = _gpt_block(batch, seq, d, heads)
    rng = np.random.default_rng(1)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    rows = batch * seq
    linears = [(f32(rows, d), f32(3 * d, d), f32(rows, 3 * d)), (f32(rows, d), f32(d, d), f32(rows, d)),
               (f32(rows, d), f32(4 * d, d), f32(rows, 4 * d)), (f32(rows, 4 * d), f32(d, 4 * d), f32(rows, d))]
    q, k, v, g = (f32(batch, heads, seq, head_dim) for _ in range(4))
    probs = f32(batch, heads, seq, seq)

    def matmuls():
        for inp, weight, grad in linears:  # forward, grad of input, grad of weight
            inp @ weight.T
            grad @ weight
            grad.T @ inp
        q @ k.swapaxes(-1, -2)                   # scores
        probs @ v                                # output
        probs.swapaxes(-1, -2) @ g               # grad v
        g @ v.swapaxes(-1, -2)                   # grad probs
        probs @ k                                # grad q
        probs.swapaxes(-1, -2) @ q               # grad k

    best = best_of_rounds({"matmuls": matmuls, "step": step}, args.repeats)
    step_seconds, matmul_seconds = best["step"], best["matmuls"]
    report("block forward+backward (autograd)", step_seconds)
    report("the same GEMMs alone (NumPy)", matmul_seconds)
    print(f"  ratio step / matmul: {step_seconds / matmul_seconds:.2f} (target <= 2)", flush=True)


@section("mx")
def bench_mx(args: argparse.Namespace) -> None:
    """MXFP8 (E4M3) quantize and dequantize of a 4096x4096 float32 array, each against the plain
    codec call it adds block scales to: quantize against ``codec.encode(x, "E4M3")``, dequantize
    against ``codec.decode`` of E4M3 codes of the same shape.

    The target is quantize <= 1.5x the time of the encode. The four are measured in three rounds,
    one after another; each keeps its best round median, so a burst of load from another process
    does not land on one side only.
    """
    from . import codec, mx

    x = np.random.default_rng(0).standard_normal((MX_SIDE, MX_SIDE), dtype=np.float32)
    quantized = mx.quantize(x, mx.MXFP8_E4M3)
    codes = codec.encode(x, "E4M3")
    best = best_of_rounds({"encode": lambda: codec.encode(x, "E4M3"),
                           "quantize": lambda: mx.quantize(x, mx.MXFP8_E4M3),
                           "decode": lambda: codec.decode(codes, "E4M3"), "dequantize": quantized.dequantize},
                          args.repeats)
    encode_seconds, quantize_seconds = best["encode"], best["quantize"]
    decode_seconds, dequantize_seconds = best["decode"], best["dequantize"]
    report("codec.encode E4M3 (baseline of quantize)", encode_seconds, x.size)
    report("mx.quantize MXFP8_E4M3", quantize_seconds, x.size, encode_seconds)
    report("codec.decode E4M3 (baseline of dequantize)", decode_seconds, x.size)
    report("MXArray.dequantize MXFP8_E4M3", dequantize_seconds, x.size, decode_seconds)
    print(f"  ratio quantize / encode: {quantize_seconds / encode_seconds:.2f} (target <= 1.5); "
          f"dequantize / decode: {dequantize_seconds / decode_seconds:.2f}", flush=True)


@section("fp8")
def bench_fp8(args: argparse.Namespace) -> None:
    """A training step of the "block" section's GPT block under every FP8 recipe: forward, backward
    and the FP8 state's step, as ``bench train`` and ``train_tiny`` step it, without the optimizer
    (the weights stay as they are).

    Each recipe has a block of its own (the same weights) with the recipe applied once, so that its
    state carries from step to step as in training: ``delayed`` casts with the scales of its amax
    history, not the 1 of a fresh state. Baseline: the same step in fp32, measured in the same
    rounds (`alternating_rounds`: each round times every recipe once; the ratio is the median over
    rounds of the recipe's time over the fp32 time of that round, printed with its range). Targets
    (issue 5): fp8 and unit <= 1.5x the fp32 step, mxfp8 <= 2x. All seven blocks live in one
    process, which `bench train` found flatters FP8 ratios on a 2-core machine (its docstring):
    read these ratios against each other, and the train section's for the verdict.
    """
    from . import fp8

    steps = {}
    for recipe in fp8.RECIPES:
        block, step = _gpt_block(*BLOCK_SHAPE)
        state = fp8.apply_recipe(block, recipe)

        def training_step(step=step, state=state):
            step()
            state.step()

        steps[recipe] = training_step
    seconds = alternating_rounds(steps, args.rounds, args.repeats)
    report_ratios(seconds, "step under", targets={"fp8": 1.5, "unit": 1.5, "mxfp8": 2.0})


@section("train")
def bench_train(args: argparse.Namespace) -> None:
    """Whole default runs of ``python -m minifp8.train_tiny``: each FP8 recipe against fp32, in pairs.

    A step is what train_tiny times: forward, backward, the check that the gradients are finite,
    AdamW and the FP8 state's step, of the default model (unit-scaled), on train_tiny's batches
    and with its learning-rate schedule (warmup, then cosine decay over the run's steps), so that
    each run follows the path of ``python -m minifp8.train_tiny --recipe R`` (its first ``--steps``
    steps, where ``--steps`` is less than the default run's; beyond, the path of ``train_tiny
    --steps N``, whose cosine spans all N steps). Each FP8 recipe trains beside its own fp32 run
    (``--recipe fp32 --family unit``), one step each in turn, for the default run's ``--steps``
    (1000), so that both meet the same machine and the same point of training (late in training
    more elements fall below the FP8 ranges and the casts cost more). Pairs, not all seven side by
    side: measured on a 2-core machine, seven models in one process took fp32 from 13.8 to 17 ms a
    step (its speed with one BLAS thread: its GEMMs lost what their second thread gains), but the
    FP8 steps, mostly single-threaded casts, far less, which flattered their ratios; beside one
    other model, fp32 steps as fast as alone. Reported per recipe, as its pair finishes: the median
    step time, and the median over the run of the step's ratio to the fp32 step of its turn, with
    the medians over the first and the last tenth of the run, and its pair's fp32 step (which
    shows the machine's state); then fp32's line, pooling its runs. Targets (issue 6, for the
    default config): every FP8 recipe <= 1.5x the fp32 step, mxfp8 <= 2x. ``--recipes`` times some
    of the recipes only; ``--n-embd`` changes the model's width (the casts grow with the
    activations, the GEMMs with their square), to see how the ratios depend on size;
    ``--family auto`` trains each recipe, and its fp32 partner, in the family that
    ``python -m minifp8.train_tiny --recipe R`` gives it (nanoGPT's, except for unit), instead of
    all on the default run's unit-scaled model. ``--json PATH`` writes the measurements, with the
    ratio's median over each window of ``steps // 20`` steps (at least 1) from the first step (a last,
    partial window is left out), for ``plots.train_speed``. ``--mx-scale-mode``
    sets the block scales of the mxfp8 runs (train_tiny's flag; mxfp8's target is stated for floor, and
    shown only under it).
    """
    from . import data, fp8
    from .optim import clip_grad_norm
    from .train_tiny import Run, TrainConfig, _build, _default_family, _set_lr, _strict_json, _write_text

    default_width = args.n_embd is None or args.n_embd == TrainConfig().n_embd
    config = TrainConfig() if args.n_embd is None else dataclasses.replace(TrainConfig(), n_embd=args.n_embd)
    if args.mx_scale_mode is not None:
        config = dataclasses.replace(config, mx_scale_mode=args.mx_scale_mode)
    steps_total = config.steps if args.steps is None else args.steps
    # the schedule of train_tiny's run of that many steps, or of the default run where it is longer
    # (the first steps of its path): not a cosine that ends at the default run's steps, then min_lr
    config = dataclasses.replace(config, steps=max(config.steps, steps_total))
    tokens = config.batch_size * config.block_size
    dataset = data.load_dataset()

    def trainer(recipe: str, family: str) -> Callable[[int], float]:
        model, _, state, optimizer, peak_lrs, _ = _build(Run(recipe, family), config, dataset.vocab_size)
        params = model.parameters()
        data_rng = np.random.default_rng((config.seed, 1))  # train_tiny's batches
        clip = config.grad_clip if family == "standard" else 0.0  # (train_tiny clips the standard model's)

        def step(index: int):  # (the learning rate and the batch are set outside the timed step)
            _set_lr(optimizer, peak_lrs, config, index)
            x, y = dataset.get_batch("train", config.batch_size, config.block_size, data_rng)
            start = time.perf_counter()
            _, loss = model(x, y)
            optimizer.zero_grad()
            loss.backward()
            if not all(np.isfinite(p.grad).all() for p in params if p.grad is not None):
                raise BenchError(f"the gradients of {recipe} overflowed at step {index + 1}: its steps cannot be "
                                 f"timed as train_tiny's (the lines above stand)")
            if clip > 0:
                clip_grad_norm(params, clip)
            optimizer.step()
            state.step()
            return time.perf_counter() - start

        return step

    def step_line(name: str, step_ms: float, ratio: float) -> str:
        return (f"  {'train step under ' + name:<44s} {step_ms:9.2f} ms {tokens / step_ms * 1e3:9,.0f} tok/s"
                f"   x{ratio:5.2f} fp32 step")

    def target(recipe: str) -> float | None:  # issue 6 states them for the default config (mxfp8: the OCP rule)
        if not default_width or (recipe == "mxfp8" and config.mx_scale_mode != TrainConfig.mx_scale_mode):
            return None
        return 2.0 if recipe == "mxfp8" else 1.5

    recipes = args.recipes or [recipe for recipe in fp8.RECIPES if recipe != "fp32"]
    label = "default config" if default_width else "default config at another width"
    auto = args.family == "auto"
    models = "each recipe in train_tiny's family for it (unit-scaled for unit, else standard)" if auto else "unit-scaled"
    print(f"  {label}: {models}, {config.n_layer} layers, n_embd {config.n_embd}, batch "
          f"{config.batch_size} x {config.block_size} tokens, {steps_total} steps per recipe, each beside an fp32 run",
          flush=True)
    machine = args.machine.removeprefix("machine: ")  # (the line main printed, read once: the load moves)
    tenth = max(1, steps_total // 10)
    window = max(1, steps_total // 20)
    baseline, families, measured = [], set(), {}
    started = time.perf_counter()
    for number, recipe in enumerate(recipes):
        family = _default_family(recipe) if auto else "unit"
        pair = {"fp32": trainer("fp32", family), recipe: trainer(recipe, family)}
        seconds = {name: np.empty(steps_total) for name in pair}
        for index in range(steps_total):
            for name, step in pair.items():
                seconds[name][index] = step(index)
        baseline.append(seconds["fp32"])
        families.add(family)
        pair_measured = measured[recipe] = _recipe_measurements(seconds[recipe], seconds["fp32"], family, tenth,
                                                                window, target(recipe))
        name = f"{recipe} ({config.mx_scale_mode} scales)" if recipe == "mxfp8" and args.mx_scale_mode else recipe
        print(f"{step_line(name, pair_measured['step_ms'], pair_measured['ratio'])} "
              f"(first tenth {pair_measured['first_tenth']:.2f}, last {pair_measured['last_tenth']:.2f}; "
              f"its fp32 {pair_measured['fp32_step_ms']:.1f} ms{', ' + family if auto else ''})"
              + (f" (target <= {target(recipe):g})" if target(recipe) else ""), flush=True)
        elapsed = time.perf_counter() - started
        if number + 1 < len(recipes):
            print(f"  ... {recipe} done, eta {elapsed / (number + 1) * (len(recipes) - number - 1):.0f}s",
                  file=sys.stderr, flush=True)
    fp32 = np.concatenate(baseline)
    first, last = np.concatenate([b[:tenth] for b in baseline]), np.concatenate([b[-tenth:] for b in baseline])
    pooled = f"all {len(baseline)} runs" + (f", {' and '.join(sorted(families))}" if auto else "")
    fp32_ms = float(np.median(fp32)) * 1e3
    print(f"{step_line('fp32', fp32_ms, 1.0)} ({pooled}; first tenths {np.median(first) * 1e3:.1f} ms, "
          f"last {np.median(last) * 1e3:.1f})", flush=True)
    if args.json is not None:
        document = _speed_document(machine, config, args.family or "unit", steps_total, window, fp32_ms, measured)
        try:  # (whole or not at all: a full disk part way left an earlier file truncated)
            _write_text(Path(args.json), _strict_json(document, digits=4))
        except OSError as error:  # (main checked that it could be opened; a full disk, say, still fails here)
            raise BenchError(f"--json {args.json}: cannot write it ({error.strerror or error}); the "
                             f"measurements above are not saved") from None
        print(f"  wrote {args.json}", flush=True)


def load_speed_results(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """A ``bench train --json`` document: by default `SPEED_RESULTS`, the committed run that
    tutorial 9's figure draws.

    Raises OSError where the file cannot be read, and ValueError (naming the file) where it is not a
    JSON object; `minifp8.plots.train_speed` checks its layout."""
    from .train_tiny import _load_json_object

    return _load_json_object(SPEED_RESULTS if path is None else path)


# The --json document of the train section (-h prints it; _speed_document builds it).
JSON_LAYOUT = """\
--json PATH writes one JSON object (minifp8.bench.load_speed_results(PATH) reads it back):
  benchmark      "python -m minifp8.bench train"
  machine        the machine line printed first, without "machine: "
  mx_scale_mode  the block scales of the mxfp8 runs (floor, ceil, even or rceil; absent from files
                 written before the flag existed, such as the committed run 22, whose were floor)
  model          {family (unit or auto), n_layer, n_embd, batch_size, block_size}
  steps          the training steps of every run
  window_steps   the steps of each window of window_ratios: steps // 20, at least 1, from
                 the first step (a last, partial window is left out)
  fp32           {step_ms: the median fp32 step over all the pairs, tokens_per_second}
  recipes        {recipe: {family: its pair's model family, target: null where none is
                 stated, ratio: the median over the steps of its step time over its fp32
                 partner's of the same turn, first_tenth and last_tenth: the same over the
                 first and last tenth of the steps, step_ms: its median step, fp32_step_ms:
                 its partner's median step, window_ratios: the median ratio of each window}}
Times are in ms; every float is rounded to 4 decimals."""


def _speed_document(machine: str, config, family: str, steps: int, window: int, fp32_ms: float,
                    measured: dict) -> dict:
    """The ``--json`` document of the train section (`JSON_LAYOUT`); ``measured`` maps each recipe
    to its `_recipe_measurements`."""
    tokens = config.batch_size * config.block_size
    return {"benchmark": "python -m minifp8.bench train", "machine": machine,
            "mx_scale_mode": config.mx_scale_mode,
            "model": {"family": family, "n_layer": config.n_layer, "n_embd": config.n_embd,
                      "batch_size": config.batch_size, "block_size": config.block_size},
            "steps": steps, "window_steps": window,
            "fp32": {"step_ms": fp32_ms, "tokens_per_second": round(tokens / fp32_ms * 1e3)},
            "recipes": measured}


def _recipe_measurements(times: np.ndarray, fp32_times: np.ndarray, family: str, tenth: int, window: int,
                         target) -> dict:
    """One recipe's pair, as its line prints it and ``bench train --json`` writes it: medians of
    its steps, of its pair's fp32 steps and of the step ratios (over the run, its first and last
    tenth, and each ``window`` steps)."""
    ratios = times / fp32_times
    windows = len(ratios) // window
    return {"family": family, "target": target,
            "ratio": float(np.median(ratios)),
            "first_tenth": float(np.median(ratios[:tenth])),
            "last_tenth": float(np.median(ratios[-tenth:])),
            "step_ms": float(np.median(times)) * 1e3,
            "fp32_step_ms": float(np.median(fp32_times)) * 1e3,
            "window_ratios": np.median(ratios[:windows * window].reshape(windows, window), axis=1).tolist()}


# (new sections go above this line)


def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The processor's name as Linux's ``cpuinfo`` gives it (``AMD EPYC``), else what
    ``platform.processor()`` gives (perhaps only the architecture), else None. Ratios differ
    between processors (the speed log's runs 24-47 met an Intel Xeon with AVX-512, run 48 an AMD
    EPYC without), so the machine line names it."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as file:
            for line in file:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    import platform

    return platform.processor() or None


def ml_dtypes_version() -> str | None:
    """The version of ml_dtypes, the codec section's baseline, where it can be imported; else None."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return str(getattr(ml_dtypes, "__version__", "(version unknown)"))


def machine_line() -> str:
    """The cores and the load before the run: the ratios move with what else the machine runs (on a
    shared 2-core machine, a busy second core slows the multithreaded fp32 GEMMs more than the
    single-threaded FP8 casts), so a quoted ratio should come with this line. It names the
    processor, minifp8's and NumPy's versions, the BLAS kernels and threads
    (`train_tiny.environment_line`) and, where it can be imported, ml_dtypes' version: the codec
    section's ratios are against its ``astype``, whose speed changed between its versions
    (`bench_codec`)."""
    from .train_tiny import environment, environment_line

    cpu = cpu_name()
    line = f"machine: {os.cpu_count()} cores{f' ({cpu})' if cpu else ''}, {environment_line(environment())}"
    ml_dtypes = ml_dtypes_version()
    if ml_dtypes is not None:
        line += f", ml_dtypes {ml_dtypes}"
    if hasattr(os, "getloadavg"):
        line += f", load average {os.getloadavg()[0]:.2f} over the last minute before the run"
    return line


#: The flags that only some sections read, and which: a flag given to a run of none of them is an
#: error rather than silently ignored.
FLAG_SECTIONS = {"repeats": ("codec", "block", "mx", "fp8"), "rounds": ("fp8",), "steps": ("train",),
                 "recipes": ("train",), "n_embd": ("train",), "family": ("train",),
                 "json": ("train",), "mx_scale_mode": ("train",)}


def _train_memory_needed(args: argparse.Namespace) -> int:
    """A lower bound on the bytes the train section holds at once: a pair of trainers at
    ``--n-embd`` (`minifp8.train_tiny._memory_needed`'s bound, twice) and the pair's step times,
    two float64 numbers a step."""
    from .data import load_dataset
    from .train_tiny import Run, TrainConfig, _memory_needed

    config = TrainConfig() if args.n_embd is None else dataclasses.replace(TrainConfig(), n_embd=args.n_embd)
    steps = config.steps if args.steps is None else args.steps
    trainer = sum(_memory_needed(config, [Run("fp32", "unit")], load_dataset().vocab_size).values())
    return 2 * trainer + 2 * 8 * steps


def _check_flags_apply(parser: argparse.ArgumentParser, args: argparse.Namespace, selected: list[str]) -> None:
    """``parser.error`` for a flag given (not None) although no selected section reads it."""
    for name, readers in FLAG_SECTIONS.items():
        if getattr(args, name) is not None and not set(readers) & set(selected):
            which = (f"the {readers[0]} section, which is not" if len(readers) == 1 else
                     f"the {', '.join(readers[:-1])} and {readers[-1]} sections, none of which is")
            parser.error(f"--{name.replace('_', '-')} applies to {which} selected (sections: {' '.join(selected)})")


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot be opened for writing (the OSError's message), or None where it can.

    Checked by opening it to append, before the measurements, so that they are not lost to a path
    found unwritable only at their end. An existing file is left as it was; a file the check
    created is removed again, so that a run interrupted before its end leaves no empty results
    file behind.
    """
    # the file, then the temporary file beside it that the results are written to first and renamed
    # from (`train_tiny._replace_whole`): 4 characters longer, a name can be too long for it alone
    for candidate in (path, path + ".tmp"):
        which = "" if candidate == path else f", for the temporary file {candidate} written first"
        with contextlib.suppress(OSError):  # (a path that cannot be stat'ed is judged by the open below)
            kind = os.stat(candidate).st_mode
            if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):  # (a folder: the open names it)
                # a FIFO blocked the open until a reader came, which it then handed an empty file
                return f"not a regular file (a pipe, socket or device){which}: give a file path"
        existed = os.path.lexists(candidate)
        try:
            with open(candidate, "a", encoding="utf-8"):
                pass
        except OSError as error:
            return f"{error.strerror or error}{which}"
        if not existed:
            with contextlib.suppress(OSError):
                os.remove(candidate)
    return None


def build_parser() -> argparse.ArgumentParser:
    """The command line: the sections, with what each times, and every flag with its default; the
    epilog gives the ``--json`` document (`JSON_LAYOUT`) and the exit statuses."""
    from .mx import SCALE_MODES
    from .train_tiny import TrainConfig

    default = TrainConfig()
    sections = "\n".join(textwrap.fill(f"{name}: {_summary(function)}", 100, subsequent_indent="    ")
                          for name, function in SECTIONS.items())
    parser = Parser(  # one-line errors, a list flag given twice refused
        prog="python -m minifp8.bench",
        description="Time minifp8 against baselines measured in the same run (medians; quote the ratios).",
        epilog=f"Sections (all of them by default):\n{sections}\n\n{JSON_LAYOUT}\n\n" + textwrap.fill(
            "Exit status: 0 done, 2 bad flags, a --json file that cannot be written or a section that cannot "
            "finish (a training run whose gradients overflow), 130 Ctrl-C (the lines printed before it stand).", 100),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sections", nargs="*", metavar="SECTION",
                        help=f"sections to run (default: all). Choices: {', '.join(SECTIONS) or 'none yet'}. On "
                             f"an idle 2-core Intel Xeon (2026-12-03) codec took about 15 s, mx 5 s, block 3 s "
                             f"(25 s beside other work) and fp8 13 s with --rounds 1 (about 40 s with the default "
                             f"5); train takes about 5 min on 2 cores at low load, 7 min at load 2 (2026-12-01). "
                             f"Progress goes to stderr")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed repetitions per measurement in the codec, block, mx and fp8 sections (default: 5)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="alternating rounds over the recipes in the fp8 section; the ratio to fp32 is the median "
                             "over the rounds (default: 5)")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"training steps per recipe in the train section, with train_tiny's learning-rate "
                             f"schedule for that many steps (train_tiny --steps N's; below {default.steps}, the "
                             f"first N steps of the default run's) (default: the default run's, {default.steps})")
    parser.add_argument("--recipes", default=None, metavar="LIST", action=ListFlag,
                        help="comma-separated FP8 recipes that the train section times, each beside its own fp32 run "
                             "(default: all but fp32)")
    parser.add_argument("--n-embd", type=int, default=None, metavar="N",
                        help=f"the train section's model width, a multiple of the default run's {default.n_head} "
                             f"heads (default: the default run's, {default.n_embd}, for which the targets are stated)")
    parser.add_argument("--family", choices=("unit", "auto"), default=None,
                        help="the train section's models: unit, every recipe and fp32 on the default run's "
                             "unit-scaled model; auto, each recipe and its fp32 partner in the family that "
                             "train_tiny --recipe R trains (standard, except for unit) (default: unit)")
    parser.add_argument("--mx-scale-mode", choices=SCALE_MODES, default=None,
                        help=f"the block scales of the train section's mxfp8 runs, as train_tiny's --mx-scale-mode "
                             f"(default: {default.mx_scale_mode}, the OCP rule, for which the targets are stated)")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="write the train section's measurements to PATH as JSON (see below), for "
                             "minifp8.plots.train_speed; checked writable before the timing starts (default: none)")
    return parser


def _summary(function) -> str:
    """The first paragraph of ``function``'s docstring on one line, without reST's double backquotes."""
    return " ".join(inspect.cleandoc(function.__doc__ or "").split("\n\n", 1)[0].split()).replace("``", "")


def main(argv: list[str] | None = None) -> int:
    """The command line (`build_parser`); returns the exit status: 0 done, 2 a results file that
    cannot be written or a section that cannot finish (bad flags exit with 2 through
    ``parser.error``), 130 Ctrl-C (one line; the results printed before it stand)."""
    from .fp8 import RECIPES
    from .train_tiny import TrainConfig, _bytes, _physical_memory, _tune_malloc

    parser = build_parser()
    args = parser.parse_args(argv)
    # the sections first, then whether each flag given applies to one of them, then its value: a
    # flag of a section not run is refused as such, not for a value the run would never read
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(map(repr, unknown))}; choose from {', '.join(SECTIONS)}")
    repeated = list(dict.fromkeys(name for name in args.sections if args.sections.count(name) > 1))
    if repeated:  # (timed twice for one report, as --recipes refuses a recipe twice)
        parser.error(f"section(s) {', '.join(repeated)} listed more than once: {' '.join(args.sections)}")
    _check_flags_apply(parser, args, args.sections or list(SECTIONS))
    if args.json is not None:
        folder = os.path.dirname(os.path.abspath(args.json))
        if not args.json or os.path.isdir(args.json) or not os.path.isdir(folder):
            parser.error(f"--json takes the path of a file in an existing folder, got {args.json!r}"
                         + ("" if not args.json else " (a folder)" if os.path.isdir(args.json)
                            else f" ({folder} is not a folder)"))
    for name in ("repeats", "rounds", "steps", "n_embd"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    heads = TrainConfig().n_head
    if args.n_embd is not None and args.n_embd % heads:
        parser.error(f"--n-embd must be a multiple of the default run's {heads} heads, got {args.n_embd}")
    if args.recipes is not None:
        args.recipes = [recipe.strip() for recipe in args.recipes.split(",")]  # (an empty entry is refused below)
        wrong = [recipe for recipe in args.recipes if recipe not in RECIPES or recipe == "fp32"]
        if wrong:
            parser.error(f"--recipes takes a comma-separated list of {', '.join(r for r in RECIPES if r != 'fp32')} "
                         f"(fp32 is the baseline each is paired with); got {', '.join(map(repr, wrong))}")
        if len(set(args.recipes)) != len(args.recipes):  # (timed twice, reported once)
            parser.error(f"--recipes lists a recipe twice: {','.join(args.recipes)}")
    if args.mx_scale_mode is not None and args.recipes is not None and "mxfp8" not in args.recipes:
        parser.error(f"--mx-scale-mode sets mxfp8's block scales, but --recipes leaves mxfp8 out: {','.join(args.recipes)}")
    available = _physical_memory() if args.steps is not None or args.n_embd is not None else None
    if available is not None:
        needed = _train_memory_needed(args)
        if needed > available:  # (else a traceback: numpy refuses the arrays, or Linux kills the process)
            given = " ".join(f"--{flag} {value}" for flag, value in (("steps", args.steps), ("n-embd", args.n_embd))
                             if value is not None)
            parser.error(f"{given}: the train section needs at least "
                         f"{_bytes(needed)} of memory, more than this machine's {_bytes(available)}; use smaller values")
    if args.json is not None:
        reason = _unwritable(args.json)
        if reason is not None:
            parser.error(f"--json {args.json}: cannot write it ({reason})")
    args.repeats = 5 if args.repeats is None else args.repeats
    args.rounds = 5 if args.rounds is None else args.rounds
    _tune_malloc()  # measure steps with the allocator the trainer runs them with
    args.machine = machine_line()  # (read once: the JSON of the train section records the line printed)
    print(args.machine, flush=True)
    for name in args.sections or list(SECTIONS):
        print(f"[{name}]", flush=True)
        try:
            SECTIONS[name](args)
        except BenchError as error:
            print(one_line(f"{parser.prog}: error: {error}"), file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # (Ctrl-C: the lines printed so far are whole measurements)
            print(f"{parser.prog}: interrupted in the {name} section; the lines above are complete", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(exit_status_of(main))  # (status 141, quietly, under `| head`)
