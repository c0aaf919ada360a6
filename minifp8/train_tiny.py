"""Train the mini-GPT under FP8 recipes: ``python -m minifp8.train_tiny``.

With no flags it trains a small unit-scaled GPT (`minifp8.model`) in simulated FP8 (the ``unit``
recipe) on the bundled arithmetic corpus (`minifp8.data`), on 2 CPU cores in under two minutes,
and prints progress, validation loss and answer accuracy, and a summary table that gives each run's
validation loss against the plain fp32 run of its model family (no loss scale, no FP8-LM option),
where the list has one ("vs its fp32"; a flag that applies to every run, such as ``--loss-scale``,
leaves none):

    python -m minifp8.train_tiny                         # unit-scaled model, FP8 casts
    python -m minifp8.train_tiny --recipe fp32,fp8,unit  # several recipes, same data and seed
    python -m minifp8.train_tiny --recipe fp8 --loss-scale dynamic
    python -m minifp8.train_tiny --data input.txt --out runs/shakespeare
    python -m minifp8.train_tiny --experiment headline --out runs/headline
    python -m minifp8.train_tiny --recipe current --fp8-grads --fp8-optimizer O3 --report-memory
    python -m minifp8.train_tiny -h                      # every flag with its default

What it does
------------
``--recipe`` takes one `minifp8.fp8` recipe or a comma-separated list, trained one after another
from the same initial weights and on the same batches. ``fp32``, ``fp8``, ``current``,
``delayed``, ``mxfp8`` and ``blockwise`` train the standard (nanoGPT) model, ``unit`` the
unit-scaled one; ``--family unit`` trains the unit-scaled model under any recipe (``--recipe fp32
--family unit`` is the unit-scaled model in FP32). ``--fp32-lm-head`` leaves the LM head's GEMM in
float32 under every recipe, as DeepSeek-V3 (section 3.3.1) keeps its output head in higher precision,
and ``--fp32-modules`` any other GEMMs and attention cores, named or matched by shell-style patterns
(``'*.mlp.*'``: every MLP linear of either model), or one tensor of them (``lm_head:grad``: the LM
head's gradient cast alone), to find which casts cost a run its accuracy. ``--center-lm-head``
removes the mean of the LM head's weight rows after every step, a direction the softmax ignores
but a rounded gradient can move.

Every ``--log-interval`` steps a progress line shows the mean training loss of those steps, the
mean step time, the throughput and the time left in this run (its steps left at their wall time
so far, and its evaluations left, with their checkpoints, at theirs); FP8 recipes add the worst
underflow and saturation fractions among the cast points in the latest step
(`minifp8.fp8.FP8State.summary`; with ``--fp8-allreduce N``, in the last worker's shard of it, as
each shard's casts replace the one before's, and so in ``metrics.json``'s ``cast_stats`` and a
divergence's message), then the worst among the gradient casts alone (``:grad``, the
backward pass's E5M2 casts, which a forward cast's ``:x`` or ``:w`` can outrank), loss scaling the
current factor and the skipped steps:

    step 120/500 | loss 2.3114 | 41 ms | 24,976 tok/s | eta 16s | underflow 0.2% (blocks.1.mlp.linear_2:x)
      | saturation 0% | gradients: underflow 0.1% (blocks.0.attn:grad), saturation 0%

(one line on the screen).

Before the first step and every ``--eval-interval`` steps it prints the validation loss on a fixed
set of validation windows (the same for every recipe and every evaluation) and, on the arithmetic
corpus, the answer accuracy
(`minifp8.data.answer_accuracy`: answer characters predicted exactly, and whole answers right).
Evaluation runs through the recipe's casts (the model's numerics) and leaves the FP8 state as it
found it. The last step always gets a progress line and an evaluation, whatever the intervals.

The optimizer is AdamW with betas (0.9, 0.99) and eps 1e-8 (nanoGPT's character-level config also
takes beta2 = 0.99, for its few tokens per step), weight decay on 2-D weights only, and a learning
rate that warms up linearly for ``--warmup-steps`` and then decays along a cosine to
``--min-lr-ratio`` times its peak (`minifp8.optim.warmup_cosine_lr`).

Loss scaling (``--loss-scale N`` or ``dynamic``; Micikevicius et al. 2018, "Mixed precision
training", arXiv:1710.03740, section 3.2): the backward pass starts from ``N`` instead of 1, so
every gradient is ``N`` times larger when the FP8 casts see it, and the gradients are multiplied by
``float32(1 / N)`` before clipping and the optimizer (exactly a division where N is a power of
two). ``dynamic`` starts at 2^16 and, like ``torch.amp.GradScaler``, skips a step whose gradients
overflowed and halves the factor, and doubles it after ``--loss-scale-interval`` clean steps in a
row, up to 2^127, the largest power of two float32 holds. The summary and ``metrics.json`` count
the skipped steps. Halving stops at float32's smallest
normal number, 2^-126 (the least ``--loss-scale N`` takes: below it the factor loses bits and its
reciprocal may overflow): a step that overflows there stops the run as a divergence does (below).

FP8-LM (``--fp8-grads``, ``--fp8-optimizer [O2|O3]``, ``--fp8-allreduce N``, ``--report-memory``;
Peng et al. 2023, arXiv:2310.18313; `minifp8.fp8lm`) composes with every recipe. ``--fp8-grads``
stores each weight gradient in E4M3 with a per-tensor scale and the automatic factor ``mu`` (the
local cast, `minifp8.fp8lm.FP8Gradients`); ``--fp8-allreduce N`` splits every batch into N equal
shards, one per simulated data-parallel worker, and averages their gradients with the FP8
all-reduce (so ``--fp8-allreduce 1`` is ``--fp8-grads``); ``--fp8-optimizer`` keeps AdamW's first
moment in E4M3 and its second moment in FP16 (O2), plus FP16 master weights (O3)
(`minifp8.fp8lm.FP8AdamW`). The progress line then adds the FP8 gradients' relative error against
the FP32 all-reduce of the same gradients, their underflow and the range of ``mu``;
``--report-memory`` prints the bytes per parameter of every combination and of each run's own
arrays. ``--experiment fp8lm`` trains each option, and all three, on the unit and current recipes.

Overflow. An E5M2 gradient cast that overflows either clamps to +-57344 or gives Inf
(``--saturate-gradients``). By default the scaled recipes (current, delayed, blockwise) clamp, as
TransformerEngine's casts do (delayed scaling casts with last step's scale, so a gradient that grew
since would otherwise overflow), and the naive casts (fp8, unit) give Inf, as torch's float8 casts
do, so that loss scaling sees the overflow. A loss that becomes NaN or Inf stops that recipe's run,
and so do gradients that overflow without dynamic loss scaling: a one-line message names the recipe,
the step and the cast point with the worst overflow (saturation; among the gradient casts when the
gradients overflowed); the other recipes still run and the exit status is 1. mxfp8's elements always
saturate inside their block; how many do depends on its block scales (``--mx-scale-mode``). Under
the OCP MX rule, ``floor`` (the default), a scaled amax lies in [256, 512) for E4M3, and a block
whose scaled amax lies above 464 (max's rounding interval) saturates its largest elements; under
NVIDIA's ``rceil``, as TransformerEngine computes MXFP8 scales, none does.

Refusals. A flag set to another value than its default where no run reads it is refused, not
ignored: ``--loss-scale-interval`` without a run under ``--loss-scale dynamic``,
``--saturate-gradients yes|no`` where every run is fp32 or mxfp8, ``--mx-scale-mode`` without an
mxfp8 run, ``--fp32-lm-head`` or ``--fp32-modules`` where every run is fp32, ``--grad-clip`` other
than 0 (off) where every run is unit-scaled. So is a ``--fp32-modules`` pattern that matches nothing
in a run's model, or that leaves it nothing to cast, and a run that cannot fit in the machine's
memory, before it starts: a lower bound of what it holds (`_memory_needed`: the validation batches,
one step's activations, the weights and their gradients) against the physical memory.

Outputs (``--out DIR``)
-----------------------
* ``config.json``: the configuration, the list of runs, the environment they started in (a
  ``--resume`` under another one says so: its continuation may differ in the last bits) and the
  SHA-256 of the training text (`minifp8.data.Dataset.text_sha256`: of the ``--data`` file's text,
  or of the built-in corpus generated from ``--seed``), which checkpoints record too: ``--resume``
  refuses to continue on another text (directories older than it resume unchecked);
* ``metrics.json``: ``config`` (every flag), ``data`` (the text's name), ``loss_floor`` (the
  corpus' entropy rate, with whole lines of context) and ``window_loss_floor`` (the floor of the
  loss this run reports, over ``--block-size`` windows: `minifp8.data.Dataset.window_loss_floor`;
  both null but for the arithmetic corpus), the ``environment`` the runs started in (minifp8's and
  NumPy's versions, the
  BLAS kernels, `blas_kernels`, and threads, `blas_threads`: the same seed trains to the same bits
  only under the same kernels (under the Haswell ones, on as many threads), and uninterrupted
  and resumed runs compare only there; ``continued_in``, the last session's,
  where a ``--resume`` ran under another) and ``runs``, by label, each with its
  ``recipe``, ``family``, ``loss_scale_mode``, ``lr`` and ``warmup_steps`` (the peak learning rate
  it used, ``--lr`` or its family's default, and its warmup, cut to ``--steps``), ``parameters``,
  ``train_loss`` (every step's), ``val`` (every evaluation's ``step``, ``loss`` and, on the
  arithmetic corpus, ``char_accuracy`` and ``exact_match``), at every progress line ``cast_stats``
  (`minifp8.fp8.FP8State.summary`), ``gradient_cast_stats`` (the same of the gradient casts alone),
  ``loss_scale`` and ``fp8_grads`` (empty where the run has none), with ``--track-scales`` ``scales``
  (the ``forward_std``, ``forward_mean_abs``, ``forward_shared_fraction`` (the share of its
  mean square that every position shares), ``backward_std`` and ``backward_mean_abs`` of each
  tensor the model tracks, `minifp8.fp8.track`, by name; empty without it), ``memory`` (its arrays' bytes per
  parameter, after its first step), ``skipped_steps``, ``time_s``, ``diverged`` (null, or the
  ``step`` and the ``message``), ``finished`` and, once finished, ``final`` (the summary row) and
  ``cast_points`` (the last statistics of every cast point). NaN and Inf are written as null. A
  list of runs stopped before its end (``--stop-after``, Ctrl-C, SIGTERM) writes the runs it
  finished, and a ``--resume`` that ends the rest writes them all;
* ``loss.png``: the loss curves of all runs (`minifp8.plots.training_curves`), when matplotlib is
  installed;
* ``scales.png``: with ``--track-scales``, the last block's output (the residual stream the final
  norm reads) and its gradient over training in every run, against E5M2's range
  (`minifp8.plots.scale_curves`), when matplotlib is installed;
* ``checkpoints/<run>.npz`` (the run's label with each character but letters and digits made ``_``:
  ``fp8___loss_scale_dynamic.npz``): written at every evaluation after the first step, at the end, on
  Ctrl-C or SIGTERM and at ``--stop-after``. ``--resume DIR`` continues every unfinished run from
  its checkpoint bit-exactly: weights, optimizer moments, the batch and dropout generators, the
  loss-scaling state and the FP8 state (delayed-scaling histories) all come back, so the
  continuation computes exactly what an uninterrupted run computes. Ctrl-C lets the step under
  way finish first (a second Ctrl-C stops at once, and saves nothing), so a checkpoint never holds
  half a step; so does SIGTERM, which a batch scheduler sends before it kills a job (exit status
  143, as of a process that SIGTERM ends). Each checkpoint records its config and run, and
  resuming refuses one that does not match ``config.json``. A new run into a ``DIR`` that holds
  an earlier one replaces its ``config.json`` and removes its checkpoints and results
  (``metrics.json``, ``loss.png``, ``scales.png``, an experiment's ``headline.json``, ``fp8lm.json``
  or ``long.json``). A ``DIR`` that holds any of those files but no ``config.json`` written by
  train_tiny is refused, and left as it is; other files in ``DIR`` stay.

The headline experiment
-----------------------
``--experiment headline`` trains eight runs at one config (`HEADLINE_CONFIG`, flags given
explicitly override it): fp32, naive fp8, fp8 with dynamic loss scaling, the unit-scaled model in
fp32 and in fp8 (``unit``), and the current, delayed and mxfp8 recipes on the standard model. The
standard model's loss is a mean over ``batch_size * block_size`` tokens, so its gradients carry a
factor ``1/(B T)`` and fall below E5M2's range (smallest subnormal 2^-16) unless they are scaled.
The results file (`HEADLINE_RESULTS`, read by `load_results` and drawn by
`minifp8.plots.training_curves`) is what the tutorials plot.

``--experiment long`` trains the same eight runs and ``blockwise`` at the default config for 4000
steps (`LONG_CONFIG`), long enough for the fp32 runs to learn to add, and writes ``long.json``
(`LONG_RESULTS`, drawn by `minifp8.plots.validation_curves`). It takes about 30 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import fnmatch
import functools
import io
import json
import math
import os
import reprlib
import shlex
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, NoReturn

import numpy as np

from . import data as data_module
from . import __version__, codec, fp8, fp8lm, mx, scaling
from ._cli import (SIGPIPE_STATUS, ListFlag, Parser, StdoutError, brief, escape_unencodable_stdout, flush_stdout,
                   guarded_stdout, line_buffered_stdout, one_line, report_stdout_error, silence_stdout)
from .autograd import no_grad
from .formats import _check_bool, _check_int, _described, _is_int, _is_real
from .model import FAMILIES, GPT, GPTConfig
from .nn import _read_npz
from .optim import AdamW, clip_grad_norm, warmup_cosine_lr

__all__ = ["EXPERIMENTS", "EXPERIMENT_CONFIGS", "FP8LM_RESULTS", "FP8LM_RUNS", "HEADLINE_CONFIG", "HEADLINE_RESULTS",
           "HEADLINE_RUNS", "LONG_CONFIG", "LONG_RESULTS", "LONG_RUNS", "CheckpointError", "Diverged", "Interrupted",
           "LossScaler", "Run", "TrainConfig", "checkpoint_header", "load_results", "main", "train"]

#: Where the committed results of ``--experiment headline``, ``fp8lm`` and ``long`` live (package data).
HEADLINE_RESULTS = Path(__file__).resolve().parent / "results" / "headline.json"
FP8LM_RESULTS = HEADLINE_RESULTS.with_name("fp8lm.json")
LONG_RESULTS = HEADLINE_RESULTS.with_name("long.json")


# ================================================================================================
# Configuration
# ================================================================================================
_FP8_OPTIMIZERS = ("none", "O2", "O3")  # --fp8-optimizer


@dataclass
class TrainConfig:
    """Every flag of ``train_tiny``; ``--name-with-dashes`` sets ``name_with_underscores``.

    Each field's meaning and default are its flag's: ``python -m minifp8.train_tiny -h`` prints them
    (the help is the field's ``metadata["help"]``). `main` and `train` check the values (ValueError
    from `train`, a one-line error from `main`); building one checks nothing.
    """

    recipe: str = field(default="unit", metadata={
        "help": f"FP8 recipe, or a comma-separated list run one after another: {', '.join(fp8.RECIPES)}",
        "action": ListFlag})
    family: str = field(default="auto", metadata={
        "help": "model family: standard (nanoGPT), unit (unit-scaled), or auto: unit for the unit recipe, "
                "standard otherwise", "choices": ("auto",) + FAMILIES})
    loss_scale: str = field(default="none", metadata={
        "help": "loss scaling: none, a factor N (a float32 normal number, 1.2e-38 to 3.4e38), or dynamic",
        "metavar": "{none,N,dynamic}"})
    loss_scale_interval: int = field(default=100, metadata={
        "help": "dynamic loss scaling: clean steps before the factor doubles; another value than the default "
                "is refused unless a run has --loss-scale dynamic"})
    saturate_gradients: str = field(default="auto", metadata={
        "help": "E5M2 gradient casts that overflow: clamp to +-57344 (yes) or give Inf (no); auto: clamp in "
                "the scaled recipes current, delayed and blockwise (as TransformerEngine does), Inf in fp8 and "
                "unit (as torch's float8 casts do, so that loss scaling sees the overflow); yes or no is refused "
                "unless a run has such casts: mxfp8's MX casts always saturate, fp32 casts nothing; a setting "
                "that clamps (yes, or auto in current, delayed and blockwise) is refused with --loss-scale dynamic, "
                "which finds overflow by the Inf",
        "choices": ("auto", "yes", "no")})
    mx_scale_mode: str = field(default="floor", metadata={
        "help": "mxfp8's block scales: floor, the OCP MX rule (2**floor(log2 amax) / 2**emax, which lets some "
                "blocks saturate); rceil, NVIDIA's MXFP8 pre-training recipe and TransformerEngine's "
                "(2**ceil(log2(amax / max)), which never saturates); or torchao's ceil and even (tutorial 4); "
                "another mode than floor is refused unless a run is mxfp8",
        "choices": mx.SCALE_MODES})
    fp32_lm_head: bool = field(default=False, metadata={
        "help": "leave the LM head's GEMM in float32, uncast (minifp8.fp8.apply_recipe's exclude), as DeepSeek-V3 "
                "keeps its output head in higher precision; refused where every run is fp32",
        "action": "store_true"})
    fp32_modules: str | None = field(default=None, metadata={
        "help": "leave more GEMMs in float32, uncast: a comma-separated list of module names or shell-style "
                "patterns over them (fnmatch; * spans dots), such as '*.mlp.*' (every MLP linear), '*.attn.*' "
                "(attention's projections) or '*.attn' (its cores), each optionally with one tensor, so that "
                "the rest is still cast: ':x', ':w' or ':grad' of a GEMM (lm_head:grad, the LM head's E5M2 gradient "
                "cast), or one of a linear's GEMMs, ':fprop', ':dgrad' or ':wgrad' (lm_head:wgrad: the LM head's "
                "weight gradient from unrounded operands, as TransformerEngine's override_linear_precision), "
                "':q', ':k', ':v' or ':grad' of an attention core; an unmatched pattern's error lists the "
                "names; refused where every run is fp32", "metavar": "PATTERNS", "action": ListFlag})
    center_lm_head: bool = field(default=False, metadata={
        "help": "after every optimizer step, subtract the mean of the LM head's weight rows from each row "
                "(minifp8.model.GPT.center_lm_head): the softmax ignores it and an exact gradient does not push it, "
                "but a gradient cast can make it drift (tutorial 7b)", "action": "store_true"})
    track_scales: bool = field(default=False, metadata={
        "help": "at every progress line, record in metrics.json ('scales') the scale of each tensor the model "
                "tracks (minifp8.fp8.track: the embedding, q, k, v, attention, mlp_hidden and residual of each "
                "block, ln_f, logits) and of its gradient as backward carries it, loss scale included, before the "
                "casts that read it: their std and mean |x|, and the share of the value's mean square that every "
                "position shares (its mean over positions), in that line's step (with --fp8-allreduce, in the "
                "first worker's shard), and draw scales.png (changes no value)", "action": "store_true"})
    fp8_grads: bool = field(default=False, metadata={
        "help": "FP8-LM: store the weight gradients in FP8 (E4M3) with a per-tensor scale and the automatic "
                "scaling factor mu (minifp8.fp8lm.FP8Gradients)", "action": "store_true"})
    fp8_optimizer: str = field(default="none", metadata={
        "help": "FP8-LM optimizer states: O2 (AdamW's first moment in FP8 E4M3, its second moment in FP16, each "
                "with a per-tensor scale) or O3 (O2 plus FP16 master weights); a bare --fp8-optimizer means O2",
        "choices": _FP8_OPTIMIZERS, "nargs": "?", "const": "O2"})
    fp8_allreduce: int = field(default=0, metadata={
        "help": "FP8-LM: split every batch over N simulated data-parallel workers and average their gradients "
                "with the FP8 all-reduce (implies --fp8-grads; 1 is --fp8-grads; 0: off)", "metavar": "N"})
    report_memory: bool = field(default=False, metadata={
        "help": "print the bytes per parameter of weights, master weights, gradients and optimizer moments for "
                "every FP8-LM combination, and those each run holds", "action": "store_true"})
    data: str | None = field(default=None, metadata={
        "help": "UTF-8 text file to train on, its last 10%% held out for validation (default: the bundled "
                "arithmetic corpus)", "metavar": "PATH"})
    seed: int = field(default=0, metadata={"help": "seed of the weights, the batches and the corpus"})
    steps: int = field(default=1000, metadata={"help": "training steps (batches) per run, those that dynamic loss "
                                                       "scaling skips included"})
    batch_size: int = field(default=32, metadata={"help": "sequences per batch"})
    block_size: int = field(default=32, metadata={"help": "tokens per sequence (context length)"})
    n_layer: int = field(default=2, metadata={"help": "transformer blocks"})
    n_head: int = field(default=4, metadata={"help": "attention heads"})
    n_embd: int = field(default=64, metadata={"help": "width of the residual stream"})
    dropout: float = field(default=0.0, metadata={
        "help": "dropout on each residual branch's output (and, standard family, on the embedding)"})
    lr: float | None = field(default=None, metadata={
        "help": "peak learning rate (default: 3e-3 standard, 1.0 unit, where u-muP's per-parameter rule scales it)",
        "metavar": "LR"})
    min_lr_ratio: float = field(default=0.1, metadata={"help": "final learning rate as a fraction of the peak"})
    warmup_steps: int = field(default=50, metadata={
        "help": "linear warmup steps before the cosine decay (cut to --steps where larger)"})
    weight_decay: float = field(default=0.0, metadata={
        "help": "AdamW decoupled weight decay (2-D weights only), times each weight's own learning rate "
                "(in the unit family, its u-muP-scaled one: GPT.optimizer_groups)"})
    grad_clip: float = field(default=1.0, metadata={
        "help": "clip the gradient norm at this value (standard family; 0: off). Unit-scaled gradients are "
                "not true gradients, so their norm is never clipped: a value other than 0 or the default is refused "
                "when every run is unit-scaled"})
    eval_interval: int = field(default=250, metadata={"help": "steps between validation evaluations"})
    eval_batches: int = field(default=8, metadata={"help": "validation batches per evaluation (fixed windows)"})
    log_interval: int = field(default=50, metadata={"help": "steps between progress lines"})
    out: str | None = field(default=None, metadata={
        "help": "directory for config.json (the config, the runs and the training text's SHA-256), "
                "metrics.json, loss.png (and scales.png with --track-scales), checkpoints/ and an --experiment's "
                "headline.json, fp8lm.json or long.json. A new run replaces those of an earlier run there, and refuses a directory that holds "
                "such files without an earlier run's config.json", "metavar": "DIR"})
    resume: str | None = field(default=None, metadata={
        "help": "continue the runs saved in DIR (takes its config; only --stop-after may be added)",
        "metavar": "DIR"})
    stop_after: int | None = field(default=None, metadata={
        "help": "stop after this many steps in this session and, with --out, write a checkpoint (continue with "
                "--resume); a run it stops part way writes no metrics.json: its metrics so far, --track-scales' "
                "scales included, are in the checkpoint's JSON header (minifp8.train_tiny.checkpoint_header)",
        "metavar": "STEPS"})
    experiment: str | None = field(default=None, metadata={
        "help": "run a fixed experiment (flags given explicitly override its config): headline (the unit-scaling "
                "claim) or fp8lm (FP8-LM's options on the unit and current recipes), both at the headline config, "
                "or long (the headline's runs and blockwise at the default config for 4000 steps)",
        "choices": ("headline", "fp8lm", "long")})


#: The config of ``--experiment headline``: where naive FP8 breaks and the remedies show.
#: 64 sequences of 64 tokens: the mean loss divides every gradient by 4096.
HEADLINE_CONFIG = dict(steps=500, batch_size=64, block_size=64, n_layer=2, n_head=4, n_embd=64,
                       eval_interval=100, log_interval=50)


@dataclass(frozen=True)
class Run:
    """One training run: a recipe, a model family, a loss-scaling mode and the FP8-LM options.

    ``recipe`` is one of `minifp8.fp8.RECIPES`, ``family`` ``"standard"`` or ``"unit"``,
    ``loss_scale`` ``"none"``, ``"dynamic"`` or a number written as a str (``"1024"``, ``"1e3"``: as
    ``--loss-scale``), ``fp8_optimizer`` ``"none"``, ``"O2"`` or ``"O3"`` (FP8-LM's levels).
    ``workers > 1`` splits each batch over that many simulated workers whose gradients meet in the
    FP8 all-reduce (so it needs ``fp8_grads``); ``workers == 1`` with ``fp8_grads`` is the local
    cast. `train` checks these.
    """

    recipe: str
    family: str
    loss_scale: str = "none"
    fp8_grads: bool = False
    fp8_optimizer: str = "none"
    workers: int = 1

    @property
    def label(self) -> str:
        """``fp32``, ``unit``, ``unit fp32`` (unit family, another recipe), ``fp8 + loss scale dynamic``,
        ``current + fp8 all-reduce x4 + fp8 optimizer O2``."""
        label = self.recipe if self.family == _default_family(self.recipe) else f"{self.family} {self.recipe}"
        if self.loss_scale != "none":
            label += f" + loss scale {self.loss_scale}"
        if self.fp8_grads:
            label += " + fp8 grads" if self.workers == 1 else f" + fp8 all-reduce x{self.workers}"
        if self.fp8_optimizer != "none":
            label += f" + fp8 optimizer {self.fp8_optimizer}"
        return label

    @property
    def slug(self) -> str:
        """The label as a file name."""
        return "".join(c if c.isalnum() else "_" for c in self.label)


#: The runs of ``--experiment headline``.
HEADLINE_RUNS = (Run("fp32", "standard"), Run("fp8", "standard"), Run("fp8", "standard", "dynamic"),
                 Run("fp32", "unit"), Run("unit", "unit"), Run("current", "standard"),
                 Run("delayed", "standard"), Run("mxfp8", "standard"))


#: The runs of ``--experiment fp8lm``: each FP8-LM option alone, then all three, on top of the
#: unit-scaled model (``unit``) and the standard model with current scaling (``current``).
FP8LM_RUNS = tuple(Run(recipe, _family, **options) for recipe, _family in (("unit", "unit"), ("current", "standard"))
                   for options in ({}, {"fp8_grads": True}, {"fp8_optimizer": "O2"},
                                   {"fp8_grads": True, "workers": 4},
                                   {"fp8_grads": True, "workers": 4, "fp8_optimizer": "O3"}))

#: The runs of ``--experiment long``: the headline's and blockwise.
LONG_RUNS = (*HEADLINE_RUNS, Run("blockwise", "standard"))

#: The config of ``--experiment long``: the default config, trained four times as long (the
#: learning rate's cosine spans all 4000 steps), long enough for the fp32 runs to learn to add.
LONG_CONFIG = dict(steps=4000)

EXPERIMENTS = {"headline": HEADLINE_RUNS, "fp8lm": FP8LM_RUNS, "long": LONG_RUNS}

#: Each experiment's config: the flags it sets, over `TrainConfig`'s defaults.
EXPERIMENT_CONFIGS = {"headline": HEADLINE_CONFIG, "fp8lm": HEADLINE_CONFIG, "long": LONG_CONFIG}

#: The flags that make the runs, which an experiment fixes (each run records its own).
RUN_FLAGS = ("recipe", "family", "loss_scale", "fp8_grads", "fp8_optimizer", "fp8_allreduce")


def _default_family(recipe: str) -> str:
    return "unit" if recipe == "unit" else "standard"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every flag's default; a help text that names its own default is left as it is."""

    def _get_help_string(self, action):
        if "(default" in (action.help or "") or action.default is argparse.SUPPRESS:
            return action.help
        if action.default is None:
            return action.help + " (default: none)"
        return super()._get_help_string(action)


_EPILOG = ("With --out DIR: DIR/config.json, metrics.json, loss.png, scales.png (with --track-scales), "
           "<experiment>.json (with --experiment) and checkpoints/ (one per run, for --resume DIR; a new run into "
           "DIR replaces them). Exit status: 0 done, 1 a run diverged, 2 bad flags or data (or an --out or stdout "
           "that cannot be written, or a CPU that flushes subnormals), 130 stopped (--stop-after, Ctrl-C: "
           "checkpointed with --out), 143 SIGTERM (checkpointed with --out), 141 output closed (| head).")


def build_parser(argument_default: Any = None) -> argparse.ArgumentParser:
    """The command line, one flag per `TrainConfig` field, with its default in the help."""
    parser = Parser(prog="python -m minifp8.train_tiny", argument_default=argument_default,
                    formatter_class=_HelpFormatter,
                    description="Train a mini-GPT in simulated FP8 on 2 CPU cores (see the module docstring).",
                    epilog=_EPILOG)
    for f in fields(TrainConfig):
        kind = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
        options = {"help": f.metadata["help"]} if "action" in f.metadata else {"help": f.metadata["help"], "type": kind}
        for key in ("choices", "metavar", "action", "nargs", "const"):
            if key in f.metadata:
                options[key] = f.metadata[key]
        if argument_default is None:
            options["default"] = f.default
        parser.add_argument("--" + f.name.replace("_", "-"), **options)
    return parser


def parse_args(argv: list[str] | None) -> tuple[TrainConfig, list[Run]]:
    """``TrainConfig`` and the runs from the command line; flag errors exit through ``parser.error``."""
    parser = build_parser()
    config = TrainConfig(**vars(parser.parse_args(argv)))
    explicit = vars(build_parser(argparse.SUPPRESS).parse_args(argv))  # only the flags given
    if config.resume is not None:
        if config.resume == "":  # (it would read as the working directory)
            parser.error("--resume must name a directory, got an empty string")
        extra = sorted(set(explicit) - {"resume", "stop_after"})
        if extra:
            parser.error(f"--resume continues the saved config; do not combine it with "
                         f"{', '.join('--' + name.replace('_', '-') for name in extra)}")
        _check_stop_after(parser.error, config)
        return config, []
    if config.experiment is not None:
        for flag in RUN_FLAGS:
            if flag in explicit:
                parser.error(f"--experiment {config.experiment} fixes its runs; do not combine it with "
                             f"--{flag.replace('_', '-')}")
        runs = list(EXPERIMENTS[config.experiment])
        overrides: dict[str, Any] = {key: value for key, value in EXPERIMENT_CONFIGS[config.experiment].items()
                                     if key not in explicit}
        config = replace(config, **overrides)
    else:
        runs = _runs(parser, config)
    _check_config(parser.error, config, runs)
    _check_flags_apply(parser.error, config, runs)
    return config, runs


def _check_flags_apply(fail: Callable[[str], NoReturn], config: TrainConfig, runs: list[Run]) -> None:
    """Refuse a flag set to another value than its default where none of the runs reads it, rather
    than ignore it silently (as ``--mx-scale-mode`` is refused where no run is mxfp8,
    `_check_config`). Checked on the command line only: a ``config.json`` written before these
    checks still resumes."""
    which = (f"the runs of --experiment {config.experiment}" if config.experiment is not None
             else f"runs: {','.join(run.label for run in runs)}")
    if config.min_lr_ratio != TrainConfig.min_lr_ratio and config.steps - _warmup_steps(config) < 2:
        fail(f"--min-lr-ratio {config.min_lr_ratio:g} sets where the cosine decay ends, but with --steps "
             f"{config.steps} and --warmup-steps {config.warmup_steps} no step decays (the warmup, cut to --steps, "
             f"ends at the peak); lower --warmup-steps or raise --steps")
    if config.loss_scale_interval != TrainConfig.loss_scale_interval and all(run.loss_scale != "dynamic"
                                                                            for run in runs):
        fail(f"--loss-scale-interval {config.loss_scale_interval} sets when dynamic loss scaling doubles its "
             f"factor, but no run has --loss-scale dynamic ({which})")
    if config.saturate_gradients != TrainConfig.saturate_gradients and all(
            "saturate_gradients" not in fp8.RECIPE_OPTIONS[run.recipe] for run in runs):
        fail(f"--saturate-gradients {config.saturate_gradients} sets what an overflowing E5M2 gradient cast gives, "
             f"but no run has one: fp32 casts nothing, mxfp8's MX casts always saturate ({which})")
    if config.fp32_lm_head and all(run.recipe == "fp32" for run in runs):
        fail(f"--fp32-lm-head leaves the LM head's GEMM uncast, but no run casts: every run is fp32 ({which})")
    if config.fp32_modules is not None and all(run.recipe == "fp32" for run in runs):
        fail(f"--fp32-modules leaves GEMMs uncast, but no run casts: every run is fp32 ({which})")
    uncast = _uncast_modules(config)
    repeated = next((pattern for index, pattern in enumerate(uncast) if pattern in uncast[:index]), None)
    if repeated is not None:
        fail(f"--fp32-modules {config.fp32_modules} names {repeated!r} twice"
             + (" (--fp32-lm-head leaves lm_head in float32 already)" if config.fp32_lm_head and repeated == "lm_head"
                else ""))
    covered = next(((part, whole) for part in uncast if ":" in part for whole in uncast
                    if ":" not in whole and fnmatch.fnmatchcase(part.split(":", 1)[0], whole)), None)
    if covered is not None:  # (the log named both, as if the part were a choice of its own)
        part, whole = covered
        by = "--fp32-lm-head" if config.fp32_lm_head and whole == "lm_head" else repr(whole)
        fail(f"--fp32-modules {config.fp32_modules} names {part!r}, a tensor or GEMM of a module that {by} leaves "
             f"in float32 whole already")
    if config.track_scales and config.out is None:
        fail("--track-scales records the scales in metrics.json, which only --out DIR writes")
    if config.grad_clip not in (TrainConfig.grad_clip, 0.0) and all(run.family == "unit" for run in runs):
        fail(f"--grad-clip {config.grad_clip:g} clips the standard model's gradient norm, but every run is "
             f"unit-scaled, whose gradients are never clipped ({which})")


def _runs(parser, config: TrainConfig) -> list[Run]:
    recipes = [name.strip() for name in config.recipe.split(",")]
    if "" in recipes:
        parser.error(f"--recipe {config.recipe!r} has an empty entry: list recipes separated by commas, e.g. "
                     f"fp32,fp8,unit")
    unknown = [name for name in recipes if name not in fp8.RECIPES]
    if unknown:
        parser.error(f"unknown recipe {', '.join(map(repr, unknown))}; choose from {', '.join(fp8.RECIPES)}")
    if len(set(recipes)) != len(recipes):
        parser.error(f"--recipe lists a recipe twice: {config.recipe}")
    runs = []
    for recipe in recipes:
        family = _default_family(recipe) if config.family == "auto" else config.family
        if recipe == "unit" and family != "unit":
            parser.error("recipe unit is the unit-scaled model with naive FP8 casts; it needs --family unit or auto "
                         "(for naive casts of the standard model use --recipe fp8)")
        runs.append(Run(recipe, family, _loss_scale(parser.error, config.loss_scale),
                        fp8_grads=config.fp8_grads or config.fp8_allreduce > 0, fp8_optimizer=config.fp8_optimizer,
                        workers=max(config.fp8_allreduce, 1)))
    if {("fp8", "unit"), ("unit", "unit")} <= {(run.recipe, run.family) for run in runs}:
        parser.error("--recipe lists fp8 and unit, which under --family unit are the same run: naive FP8 casts of "
                     "the unit-scaled model; list one of them")
    return runs


#: The least loss scale: float32's smallest normal number, 2^-126. ``--loss-scale N`` takes no less,
#: and a dynamic factor that would fall below it stops its run (`Diverged`).
_SMALLEST_LOSS_SCALE = float(np.finfo(np.float32).tiny)
#: Where dynamic loss scaling stops doubling: 2^127, the largest power of two float32 holds.
_LARGEST_DYNAMIC_LOSS_SCALE = 2.0 ** 127


def _loss_scale(fail: Callable[[str], NoReturn], text: str) -> str:
    """``--loss-scale``: none, dynamic, or a number float32 holds as a normal number, from its
    smallest normal (below, a scale loses precision and its reciprocal may overflow) to FLT_MAX
    (the reciprocal of a scale above about 8.5e37 is a float32 subnormal: fewer significant bits,
    but nonzero)."""
    if text in ("none", "dynamic"):
        return text
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    smallest, largest = _SMALLEST_LOSS_SCALE, float(scaling.FLOAT32_MAX)  # (compared in float64)
    if math.isfinite(value) and not smallest <= value <= largest:
        with np.errstate(over="ignore", under="ignore"):
            rounded = float(np.float32(value))
        if rounded in (smallest, largest):  # (the usual spellings: 3.4028235e38, C's 1.17549435e-38)
            value = rounded
    if not (math.isfinite(value) and smallest <= value <= largest):
        fail(f"--loss-scale must be none, dynamic or a number that float32 holds as a normal number "
             f"(2^-126 = {smallest!r} to FLT_MAX = {largest!r}), got {text!r}")
    if value < 1e15:  # (repr writes 1.5e15 as 1500000000000000.0; the shortest exponent form then)
        return str(int(value)) if value.is_integer() else repr(value)
    return np.format_float_scientific(value, trim="-")


def _check_runs(fail: Callable[[str], NoReturn], runs: list[Run]) -> None:
    """What the flags guarantee of the runs, checked again for runs read from a config.json."""
    if not runs:  # (the flags always make one; a config.json may list none)
        fail("the list of runs is empty: there is nothing to train")
    for run in runs:  # (a label looks the recipe's family up: check them first)
        for name in ("recipe", "family"):
            if not isinstance(getattr(run, name), str):
                fail(f"run {asdict(run)}: {name} must be a str, got {type(getattr(run, name)).__name__}")
    labels = [run.label for run in runs]
    if len(set(labels)) != len(labels):
        fail(f"the runs {labels} list a run twice")
    for run in runs:
        if run.recipe not in fp8.RECIPES or run.family not in FAMILIES:
            fail(f"unknown run {asdict(run)}")
        if run.recipe == "unit" and run.family != "unit":
            fail(f"run {run.label!r}: recipe unit needs the unit family")
        if not isinstance(run.loss_scale, str) or _loss_scale(fail, run.loss_scale) != run.loss_scale:
            fail(f"run {run.label!r}: loss_scale must be none, dynamic or a number, got {run.loss_scale!r}")
        if run.fp8_optimizer not in _FP8_OPTIMIZERS:
            fail(f"run {run.label!r}: fp8_optimizer must be one of {', '.join(_FP8_OPTIMIZERS)}, "
                 f"got {run.fp8_optimizer!r}")
        if not isinstance(run.fp8_grads, bool) or isinstance(run.workers, bool) or not isinstance(run.workers, int) \
                or run.workers < 1 or (run.workers > 1 and not run.fp8_grads):
            fail(f"run {run.label!r}: fp8_grads must be a bool and workers an int >= 1 (> 1 only with fp8_grads), "
                 f"got {run.fp8_grads!r} and {run.workers!r}")


def _check_config(fail: Callable[[str], NoReturn], config: TrainConfig, runs: list[Run]) -> None:
    """Check the values of the flags (argparse checked their types); ``fail(message)`` raises."""
    _check_values(fail, config)
    if config.mx_scale_mode != TrainConfig.mx_scale_mode and all(run.recipe != "mxfp8" for run in runs):
        fail(f"--mx-scale-mode {config.mx_scale_mode} sets mxfp8's block scales, but no run is mxfp8: "
             f"{','.join(run.label for run in runs)}")
    _check_runs(fail, runs)
    _check_runs_with(fail, config, runs)
    _check_uncast_modules(fail, config, runs)


def _check_runs_with(fail: Callable[[str], NoReturn], config: TrainConfig, runs: list[Run]) -> None:
    """What each run needs of the config's values (`train` checks these too, for its one run)."""
    # (the resolved setting: under auto, current, delayed and blockwise clamp too, as TransformerEngine does)
    blind = [run for run in runs if run.loss_scale == "dynamic"
             and _recipe_options(run.recipe, config.saturate_gradients).get("saturate_gradients")]
    if blind:
        clamps = ("--saturate-gradients yes clamps it" if config.saturate_gradients == "yes" else
                  "--saturate-gradients auto clamps it for current, delayed and blockwise (as TransformerEngine does)")
        remedy = "no" if all(run.recipe in SATURATING_RECIPES for run in blind) else "auto or no"
        fail(f"--loss-scale dynamic finds an overflow by the Inf an overflowing gradient cast gives, but "
             f"{clamps}, so the factor would grow unchecked ({', '.join(run.label for run in blind)}); use "
             f"--saturate-gradients {remedy}")
    for run in runs:
        if config.batch_size % run.workers:
            flag = f"--fp8-allreduce {config.fp8_allreduce}" if config.fp8_allreduce > 1 else f"run {run.label!r}"
            fail(f"{flag} splits each batch over {run.workers} workers, so --batch-size "
                 f"({config.batch_size}) must be a multiple of {run.workers}")
        if config.center_lm_head and run.fp8_optimizer == "O3":
            fail(f"--center-lm-head cannot be used with --fp8-optimizer O3 (run {run.label!r}): its float16 master "
                 f"weights, which each step copies into the model, would keep the mean row it takes out")


def _check_values(fail: Callable[[str], NoReturn], config: TrainConfig) -> None:
    """The checks of the config's own values, whatever the runs."""
    for name in ("steps", "batch_size", "block_size", "n_layer", "n_head", "n_embd", "eval_interval",
                 "eval_batches", "log_interval", "loss_scale_interval"):
        if getattr(config, name) < 1:
            fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(config, name)}")
    if config.n_embd % config.n_head:
        fail(f"--n-embd ({config.n_embd}) must be a multiple of --n-head ({config.n_head})")
    if config.fp8_allreduce < 0:
        fail(f"--fp8-allreduce must be >= 0 (0: off), got {config.fp8_allreduce}")
    for f in fields(TrainConfig):  # (argparse's choices; a config.json is checked here)
        value, choices = getattr(config, f.name), f.metadata.get("choices")
        if choices is not None and value != f.default and value not in choices:
            fail(f"--{f.name.replace('_', '-')} must be one of {', '.join(choices)}, got {value!r}")
    _loss_scale(fail, config.loss_scale)  # (the runs hold it, checked by `_runs`; a config.json is checked here)
    _check_stop_after(fail, config)
    if config.out == "":
        fail("--out must name a directory, got an empty string")
    if config.data == "":  # (it would read as the working directory)
        fail("--data must name a text file, got an empty string")
    checks = [("seed", config.seed >= 0, ">= 0"),
              ("dropout", 0.0 <= config.dropout < 1.0, "in [0, 1)"),
              ("min-lr-ratio", 0.0 <= config.min_lr_ratio <= 1.0, "in [0, 1]"),
              ("warmup-steps", config.warmup_steps >= 0, ">= 0"),
              ("weight-decay", 0.0 <= config.weight_decay < math.inf, "a finite number >= 0"),
              ("grad-clip", 0.0 <= config.grad_clip < math.inf, "a finite number >= 0 (0: off)"),
              ("lr", config.lr is None or (math.isfinite(config.lr) and config.lr > 0), "a finite number > 0")]
    for name, ok, expected in checks:
        value = getattr(config, name.replace("-", "_"))
        if not ok:
            fail(f"--{name} must be {expected}, got {value}")


def _fp32_patterns(config: TrainConfig) -> tuple[str, ...]:
    """The module names and patterns of ``--fp32-modules`` (none where it is not given)."""
    return () if config.fp32_modules is None else tuple(text.strip() for text in config.fp32_modules.split(","))


def _uncast_modules(config: TrainConfig) -> tuple[str, ...]:
    """The module names and patterns that ``--fp32-lm-head`` and ``--fp32-modules`` leave in float32
    (`fp8.apply_recipe`'s ``exclude``)."""
    return ("lm_head",) * config.fp32_lm_head + _fp32_patterns(config)


def _check_uncast_modules(fail: Callable[[str], NoReturn], config: TrainConfig, runs: list[Run]) -> None:
    """Every ``--fp32-modules`` pattern must match a GEMM or an attention core, and leave one cast, in
    the model of every run that casts: checked by `fp8.apply_recipe` on a one-wide model of each such
    family (the module names depend on the family and the layers only)."""
    if config.fp32_modules is None:
        return
    if "" in _fp32_patterns(config):
        fail(f"--fp32-modules {config.fp32_modules!r} has an empty entry: list module names or patterns separated "
             f"by commas, e.g. lm_head,*.mlp.*")
    first_cast = {run.family: run.recipe for run in reversed(runs) if run.recipe != "fp32"}
    for family, recipe in sorted(first_cast.items()):
        shape = GPTConfig(vocab_size=2, block_size=1, n_layer=config.n_layer, n_head=1, n_embd=1, family=family)
        try:
            fp8.apply_recipe(GPT(shape, rng=np.random.default_rng(0)), recipe, exclude=_uncast_modules(config))
        except ValueError as error:
            fail(f"--fp32-modules {config.fp32_modules} in the {family} model: "
                 f"{str(error).removeprefix('apply_recipe: ')}")


def _check_stop_after(fail: Callable[[str], NoReturn], config: TrainConfig) -> None:
    if config.stop_after is not None and config.stop_after < 1:
        fail(f"--stop-after must be >= 1, got {config.stop_after}")


# ================================================================================================
# Loss scaling
# ================================================================================================
class LossScaler:
    """Static or dynamic loss scaling (Micikevicius et al. 2018, arXiv:1710.03740, section 3.2).

    ``mode`` is ``"none"`` (factor 1), a number (a fixed factor) or ``"dynamic"``: start at
    ``init_scale`` (2^16, as ``torch.amp.GradScaler``), halve on a step whose gradients are not
    finite (the step is skipped), double after ``growth_interval`` finite steps in a row.
    """

    def __init__(self, mode: str = "none", growth_interval: int = 100, init_scale: float = 2.0 ** 16):
        def fail(message: str) -> NoReturn:
            raise ValueError(f"LossScaler: {message.replace('--loss-scale', 'mode')}")

        if not isinstance(mode, str):
            raise TypeError(f"LossScaler: mode must be a str ('none', 'dynamic' or a number), got "
                            f"{type(mode).__name__} {mode!r}")
        _loss_scale(fail, mode)
        growth_interval = _check_int(growth_interval, "LossScaler: growth_interval", 1)
        if not _is_real(init_scale):
            raise TypeError(f"LossScaler: init_scale must be a real number, got {type(init_scale).__name__} "
                            f"{init_scale!r}")
        if not _SMALLEST_LOSS_SCALE <= init_scale <= float(scaling.FLOAT32_MAX):  # (NaN fails too)
            raise ValueError(f"LossScaler: init_scale must be a float32 normal number, 2^-126 to FLT_MAX (as "
                             f"--loss-scale N), got {init_scale!r}")
        self.mode = mode
        self.dynamic = mode == "dynamic"
        self.scale = float(init_scale) if self.dynamic else 1.0 if mode == "none" else float(mode)
        self.growth_interval = int(growth_interval)
        self.clean_steps = 0
        self.skipped = 0

    def update(self, finite: bool) -> None:
        """After a step: back off on overflow, grow after enough clean steps (dynamic only)."""
        if not self.dynamic:
            return
        if not finite:
            self.scale *= 0.5
            self.clean_steps = 0
            self.skipped += 1
            return
        self.clean_steps += 1
        if self.clean_steps == self.growth_interval:
            # (not past 2^127, the largest power of two float32 holds: the backward's float32 seed of
            # 2^128 was Inf, and every other step was skipped for an overflow no gradient had)
            self.scale = min(self.scale * 2.0, _LARGEST_DYNAMIC_LOSS_SCALE)
            self.clean_steps = 0

    def state_dict(self) -> dict:
        return {"scale": self.scale, "clean_steps": self.clean_steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict`'s values: ``scale`` a finite number > 0 (an int or float, as JSON gives
        it back), ``clean_steps`` and ``skipped`` ints >= 0; KeyError for a missing one, TypeError or
        ValueError for others."""
        if not isinstance(state, dict):
            raise TypeError(f"LossScaler.load_state_dict: state must be a dict, got {_described(state)}")
        scale = state["scale"]
        if not _is_real(scale):
            raise TypeError(f"LossScaler.load_state_dict: scale must be a number, got {_described(scale)}")
        if not _SMALLEST_LOSS_SCALE <= scale <= float(scaling.FLOAT32_MAX):  # (NaN fails too)
            raise ValueError(f"LossScaler.load_state_dict: scale must be a float32 normal number, 2^-126 to "
                             f"FLT_MAX (as --loss-scale N), got {scale!r}")
        clean_steps = _check_int(state["clean_steps"], "LossScaler.load_state_dict: clean_steps", minimum=0)
        skipped = _check_int(state["skipped"], "LossScaler.load_state_dict: skipped", minimum=0)
        self.scale, self.clean_steps, self.skipped = float(scale), clean_steps, skipped


# ================================================================================================
# One run
# ================================================================================================
class Diverged(Exception):
    """A run's loss or gradients became NaN/Inf; the message is the one-line report.

    `train` sets ``metrics``: the run's metrics up to the divergence."""

    metrics: dict


class Interrupted(Exception):
    """``--stop-after``, Ctrl-C or SIGTERM: the run stopped (checkpointed where it could be) and can be
    resumed. ``status`` is the exit status: 143 (128 + SIGTERM) after a SIGTERM, else 130; ``metrics``
    those of a run that the signal found finished (it came during the last step), else None."""

    def __init__(self, message: str, status: int = 130, metrics: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.metrics = metrics  # a run that had finished when the signal was taken: its metrics


class CheckpointError(Exception):
    """A checkpoint that cannot be resumed: unreadable, or written by another config or run."""


class _DeferredInterrupt:
    """Hold a Ctrl-C (SIGINT) or a SIGTERM (what a batch scheduler sends before it kills a job) until
    the training loop asks for it, so that a checkpoint never holds half a step; a second signal
    interrupts at once. Only in the main thread, and only for a signal with its default handler
    (Python's KeyboardInterrupt for SIGINT, termination for SIGTERM): another handler is left to act.
    ``stopped`` says what stopped the run, for its message."""

    def __enter__(self) -> "_DeferredInterrupt":
        self.requested, self.stopped, self.status, self._previous = False, "interrupted", 130, {}
        if threading.current_thread() is threading.main_thread():
            for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
                if signal.getsignal(signum) == default:
                    self._previous[signum] = signal.signal(signum, self._hold)
        return self

    def _hold(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if signum == signal.SIGTERM:
            self.stopped, self.status = "terminated (SIGTERM)", 128 + signal.SIGTERM

    def __exit__(self, *exc_info) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


def _model_config(config: TrainConfig, family: str, vocab_size: int) -> GPTConfig:
    return GPTConfig(vocab_size=vocab_size, block_size=config.block_size, n_layer=config.n_layer,
                     n_head=config.n_head, n_embd=config.n_embd, family=family, dropout=config.dropout)


def _build(run: Run, config: TrainConfig, vocab_size: int):
    """The model (weights from ``config.seed``), its FP8 state, the optimizer, its peak learning rates
    and the FP8 gradient store (None without ``fp8_grads``)."""
    model_rng = np.random.default_rng(config.seed)  # draws the weights, then the dropout masks
    model = GPT(_model_config(config, run.family, vocab_size), rng=model_rng)
    state = fp8.apply_recipe(model, run.recipe, exclude=_uncast_modules(config),
                             **_recipe_options(run.recipe, config.saturate_gradients, config.mx_scale_mode))
    groups = model.optimizer_groups(_peak_lr(config, run.family), config.weight_decay)
    if run.fp8_optimizer == "none":
        optimizer = AdamW(groups, betas=(0.9, 0.99), eps=1e-8)
    else:  # FP8-LM section 2.2: first moment FP8, second moment FP16; O3 adds FP16 master weights
        optimizer = fp8lm.FP8AdamW(groups, betas=(0.9, 0.99), eps=1e-8, first_moment="E4M3", second_moment="float16",
                                   master_weights="float16" if run.fp8_optimizer == "O3" else "float32")
    peak_lrs = [group["lr"] for group in optimizer.param_groups]
    gradients = fp8lm.FP8Gradients(model.named_parameters()) if run.fp8_grads else None
    return model, model_rng, state, optimizer, peak_lrs, gradients


#: Peak learning rate of each family when ``--lr`` is not given: nanoGPT-like Adam for the standard
#: model; u-muP's base learning rate (each parameter's is scaled by `minifp8.model.GPT.optimizer_groups`)
#: for the unit-scaled one. Chosen by short fp32 sweeps on the default config (1000 steps).
DEFAULT_LR = {"standard": 3e-3, "unit": 1.0}

#: Recipes whose E5M2 gradient casts clamp under ``--saturate-gradients auto`` (TransformerEngine's).
SATURATING_RECIPES = ("current", "delayed", "blockwise")


def _peak_lr(config: TrainConfig, family: str) -> float:
    """The peak learning rate a run of ``family`` takes: ``--lr``, or the family's `DEFAULT_LR`."""
    return config.lr if config.lr is not None else DEFAULT_LR[family]


def _warmup_steps(config: TrainConfig) -> int:
    """The warmup a run takes: ``--warmup-steps``, cut to ``--steps``."""
    return min(config.warmup_steps, config.steps)


def _set_lr(optimizer, peak_lrs: list, config: TrainConfig, step: int) -> None:
    """The learning rates of step ``step`` (from 0): each group's peak times the warmup + cosine factor."""
    factor = warmup_cosine_lr(step, max_lr=1.0, warmup_steps=_warmup_steps(config),
                              total_steps=config.steps, min_lr=config.min_lr_ratio)
    for group, peak in zip(optimizer.param_groups, peak_lrs):
        group["lr"] = peak * factor


def _recipe_options(recipe: str, saturate_gradients: str, mx_scale_mode: str = "floor") -> dict:
    """`fp8.apply_recipe` options: ``saturate_gradients`` where the recipe takes it (not fp32, mxfp8),
    and mxfp8's ``scale_mode``.

    mxfp8 has no saturation choice to make: OCP MX elements always saturate inside a block
    (`minifp8.fp8`).
    """
    if recipe == "mxfp8":
        return {"scale_mode": mx_scale_mode}
    if "saturate_gradients" not in fp8.RECIPE_OPTIONS[recipe]:
        return {}
    if saturate_gradients == "auto":
        return {"saturate_gradients": recipe in SATURATING_RECIPES}
    return {"saturate_gradients": saturate_gradients == "yes"}


def _eval_batches(dataset, config: TrainConfig):
    """The fixed validation windows: the same for every recipe and every evaluation."""
    rng = np.random.default_rng((config.seed, 2))
    return [dataset.get_batch("val", config.batch_size, config.block_size, rng) for _ in range(config.eval_batches)]


def _evaluate(model, state, batches, dataset) -> dict:
    """Mean validation loss (and answer accuracy on the arithmetic corpus); restores the FP8 state."""
    saved_state = state.state_dict()
    saved_stats = {name: dict(point.stats) for name, point in state.points.items()}
    model.eval()
    losses, accuracy = [], None
    with no_grad():
        for x, y in batches:
            logits, loss = model(x, y)
            losses.append(float(loss.data))
            if dataset.task == "arithmetic":
                batch = data_module.answer_accuracy(x, y, logits.data.argmax(-1), dataset.tokenizer)
                accuracy = batch if accuracy is None else accuracy + batch
    model.train()
    state.load_state_dict(saved_state)
    for name, point in state.points.items():
        point.stats = saved_stats[name]
    result: dict[str, float | None] = {"loss": float(np.mean(losses))}
    if accuracy is not None:  # (None where no answer was scored: windows too short to hold one)
        result.update({key: None if math.isnan(value) else value for key, value in
                       (("char_accuracy", accuracy.char_accuracy), ("exact_match", accuracy.exact_match))})
    return result


def _worst_overflow(state, gradients: bool = False) -> str:
    """The cast with the largest fraction saturated or non-finite: among the gradient casts where
    the gradients overflowed (a forward cast clamps, and cannot have made them Inf)."""
    summary = state.summary(fp8.GRADIENT_ROLES if gradients else None)
    if summary["max_saturation_at"] is None:
        if not state.points:
            return "no FP8 casts (fp32)"
        return "no gradient cast overflowed" if gradients else "no cast point overflowed"
    return (f"worst overflow at {'gradient ' if gradients else ''}cast point {summary['max_saturation_at']} "
            f"({_percent(summary['max_saturation'])} saturated or non-finite)")


def _percent(fraction: float | None) -> str:
    if fraction is None or math.isnan(fraction):  # nothing was scored
        return "n/a"
    if fraction == 0:
        return "0%"
    if fraction < 1e-4:  # (:.2g wrote 1e-7 as 1e-05%)
        return "<0.01%"
    return f"{100 * fraction:.2g}%" if fraction < 0.1 else f"{100 * fraction:.1f}%"


def _duration(seconds: float) -> str:
    """``16s``; ``3m05s`` from 100 s; ``2h05m`` from 100 minutes; ``3d04h`` from 48 hours (so that
    the eta of a huge ``--steps`` stays readable), each rounded before it is split."""
    seconds = round(seconds)
    if seconds < 100:
        return f"{seconds}s"
    if seconds < 100 * 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    minutes = round(seconds / 60)
    if minutes < 48 * 60:
        return f"{minutes // 60}h{minutes % 60:02d}m"
    hours = round(seconds / 3600)
    return f"{hours // 24}d{hours % 24:02d}h"


def train(run: Run, config: TrainConfig, dataset: data_module.Dataset, *, out: Path | None = None,
          resume: bool = False, stop_after: int | None = None, print_fn: Callable[[str], object] = print,
          steps_counter: list[int] | None = None) -> dict:
    """Train one run and return its metrics (what ``metrics.json`` holds for it).

    With ``out``, checkpoints go to ``out/checkpoints/<run>.npz``; ``resume`` continues from there
    (raising `CheckpointError` for a checkpoint of another config or run, or one that cannot be read).
    ``run`` and ``config`` are checked as `main` checks the flags (ValueError: an unknown recipe,
    ``workers > 1`` without ``fp8_grads``, ``steps < 1``, dynamic loss scaling with
    ``saturate_gradients="yes"``, ...), except where a value only has to apply to some run of
    `main`'s list (``mx_scale_mode`` without an mxfp8 run, ``loss_scale_interval`` without a dynamic
    one, ...): `main` passes every run of the list the same config, so one run cannot be refused for them.
    ``stop_after``: checkpoint and stop after that many steps of this call; ``steps_counter`` (a
    one-element list) gains one for each step trained (`main` counts a session's steps with it,
    across runs). Raises `Diverged` (the
    metrics so far are in ``error.metrics``) and `Interrupted` (Ctrl-C is held until the step under
    way ends: `_DeferredInterrupt`). Overflow is detected explicitly (the loss and every gradient are
    checked), so NumPy's floating-point warnings, which would only repeat it, are silenced.
    """
    resume = _check_bool(resume, "train: resume")
    for name, value, kind in (("run", run, Run), ("config", config, TrainConfig)):
        if not isinstance(value, kind):
            raise TypeError(f"train: {name} must be a {kind.__name__}, got {type(value).__name__}")
    # the flags' types, as argparse gives them (center_lm_head="no" centred the LM head, steps=2.0 failed
    # after the first evaluation with a message that named no field); NumPy numbers as Python ones
    run = replace(run, **_typed_fields("train: run.", {f.name: getattr(run, f.name) for f in fields(Run)}, Run))
    config = replace(config, **_typed_fields("train: config.", {f.name: getattr(config, f.name)
                                                                 for f in fields(TrainConfig)}, TrainConfig))
    if not isinstance(dataset, data_module.Dataset):
        raise TypeError(f"train: dataset must be a minifp8.data.Dataset (data.load_dataset()), got "
                        f"{type(dataset).__name__}")
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"train: out must be a path (str or os.PathLike) or None, got {type(out).__name__}")
    out = None if out is None else Path(out)

    def fail(message: str) -> NoReturn:
        raise ValueError(f"train: {message}")

    if isinstance(run.loss_scale, str):  # ("1e3" as --loss-scale writes it, "1000")
        run = replace(run, loss_scale=_loss_scale(fail, run.loss_scale))
    if stop_after is not None:
        stop_after = _check_int(stop_after, "train: stop_after", 1)
    _check_values(fail, config)  # (main checks these too, with every run of the list)
    _check_runs(fail, [run])
    _check_runs_with(fail, config, [run])
    with np.errstate(all="ignore"), _DeferredInterrupt() as interrupt:
        return _train(run, config, dataset, out, resume, stop_after, print_fn, interrupt,
                      steps_counter if steps_counter is not None else [0])


def _run_notes(run: Run, config: TrainConfig) -> str:
    """What a run's first line says of the flags that change it: the modules left in float32, the LM
    head's centring, the loss scale (on a fresh start and on a resume alike)."""
    return ((f", {_uncast_note(config)}" if _uncast_modules(config) and run.recipe != "fp32" else "")
            + (f", {_CENTRED_NOTE}" if config.center_lm_head else "")
            + (f", loss scale {run.loss_scale}" if run.loss_scale != "none" else ""))


def _train(run, config, dataset, out, resume, stop_after, print_fn, interrupt, steps_counter) -> dict:
    model, model_rng, state, optimizer, peak_lrs, gradients = _build(run, config, dataset.vocab_size)
    data_rng = np.random.default_rng((config.seed, 1))
    scaler = LossScaler(run.loss_scale, config.loss_scale_interval)
    # the schedule the run used: --lr or its family's default peak, the warmup cut to --steps
    schedule = {"lr": _peak_lr(config, run.family), "warmup_steps": _warmup_steps(config)}
    metrics = {"recipe": run.recipe, "family": run.family, "loss_scale_mode": run.loss_scale, **schedule,
               "parameters": model.num_parameters(), "train_loss": [], "val": [], "cast_stats": [],
               "gradient_cast_stats": [], "loss_scale": [], "fp8_grads": [], "scales": [], "memory": None,
               "skipped_steps": 0, "time_s": 0.0, "diverged": None, "finished": False}
    checkpoint = out / "checkpoints" / f"{run.slug}.npz" if out is not None else None
    identity = _identity(config, run, dataset.text_sha256)
    start = 0
    if resume and checkpoint is not None and checkpoint.exists():
        start, metrics = _load_checkpoint(checkpoint, identity, model, model_rng, state, optimizer, data_rng, scaler,
                                          gradients)
        if metrics["finished"] or metrics["diverged"]:
            return metrics
        print_fn(f"{run.label}: resumed at step {start}/{config.steps} from {checkpoint}" + _run_notes(run, config))
        for key, value in schedule.items():  # (checkpoints written before 2026-11-30 did not record them)
            metrics.setdefault(key, value)
    else:
        print_fn(f"{run.label}: {model.num_parameters():,} parameters, {run.family} model, recipe {run.recipe}"
                 + (f" (block scales: {config.mx_scale_mode})" if run.recipe == "mxfp8" else "")
                 + _run_notes(run, config))
    eval_batches = _eval_batches(dataset, config)
    params = model.parameters()
    tokens_per_step = config.batch_size * config.block_size
    clip = config.grad_clip if run.family == "standard" else 0.0
    # The progress line's loss averages the steps since the last line, those before a resume too;
    # its timing, this session's steps.
    window_losses = metrics["train_loss"][start - start % config.log_interval:]
    window_steps, window_time = 0, 0.0
    session_start = time.perf_counter()
    time_before = metrics["time_s"]

    def save():
        if checkpoint is not None:
            metrics["time_s"] = time_before + time.perf_counter() - session_start
            _save_checkpoint(checkpoint, identity, step_done, model, model_rng, state, optimizer, data_rng, scaler,
                             gradients, metrics)

    step_done = start
    report = None
    try:
        # The eta: this session's steps at their mean wall time so far, and the evaluations left (with
        # their checkpoints) at theirs, the one before the first step included.
        evaluations, evaluation_seconds, in_loop_seconds = 0, 0.0, 0.0
        if start == 0 and not metrics["val"]:  # where the loss starts, to read the drop against
            evaluation_began = time.perf_counter()
            metrics["val"].append({"step": 0, **_evaluate(model, state, eval_batches, dataset)})
            print_fn(_val_line(metrics["val"][-1], config))
            evaluations, evaluation_seconds = 1, time.perf_counter() - evaluation_began
        steps_start = time.perf_counter()
        for step in range(start, config.steps):
            if interrupt.requested:  # Ctrl-C came during the last step (or the first evaluation)
                save()
                raise Interrupted(f"{run.label}: {interrupt.stopped} at step {step_done}", interrupt.status)
            _set_lr(optimizer, peak_lrs, config, step)
            x, y = dataset.get_batch("train", config.batch_size, config.block_size, data_rng)
            began = time.perf_counter()
            # one shard per simulated data-parallel worker (one worker: the whole batch)
            shards = fp8lm.split_batch(x, y, workers=run.workers) if run.workers > 1 else [(x, y)]
            shard_losses, worker_grads = [], []
            # the scales of a progress line's step, in its first worker's shard
            logged = (step + 1) % config.log_interval == 0 or step + 1 == config.steps
            tracker = fp8.ScaleTracker() if config.track_scales and logged else None
            for shard, (shard_x, shard_y) in enumerate(shards):
                with tracker if tracker is not None and shard == 0 else contextlib.nullcontext():
                    _, loss = model(shard_x, shard_y)
                shard_losses.append(float(loss.data))
                if not math.isfinite(shard_losses[-1]):
                    raise Diverged(f"{run.label}: loss became {shard_losses[-1]} at step {step + 1}; "
                                   f"{_worst_overflow(state)}")
                optimizer.zero_grad()
                loss.backward(np.asarray(scaler.scale, dtype=loss.data.dtype))
                if scaler.scale != 1.0:
                    inverse = np.float32(1.0 / scaler.scale)
                    for p in params:
                        if p.grad is not None:
                            p.grad *= inverse
                if gradients is not None:
                    worker_grads.append(gradients.collect())
            loss_value = float(np.mean(shard_losses))  # equal shards: the full batch's mean loss
            if gradients is not None:  # FP8 gradients: the local cast, or the FP8 all-reduce over the workers
                report = gradients.reduce(worker_grads)
            finite = all(np.isfinite(p.grad).all() for p in params if p.grad is not None)
            if not finite and not scaler.dynamic:
                raise Diverged(f"{run.label}: gradients overflowed to Inf/NaN at step {step + 1}; "
                               f"{_worst_overflow(state, gradients=True)}")
            if not finite and scaler.scale * 0.5 < _SMALLEST_LOSS_SCALE:  # (halving it would leave float32's normals)
                raise Diverged(f"{run.label}: gradients overflowed to Inf/NaN at step {step + 1} with the dynamic "
                               f"loss scale at {scaler.scale:.4g} after {scaler.skipped} skipped steps, and halving "
                               f"it would fall below float32's smallest normal number "
                               f"({_SMALLEST_LOSS_SCALE:.4g}); {_worst_overflow(state, gradients=True)}")
            if finite:
                if clip > 0:
                    clip_grad_norm(params, clip)
                optimizer.step()
                if config.center_lm_head:
                    model.center_lm_head()
                if metrics["memory"] is None:  # what this run's arrays hold, read after its first step
                    memory = _memory(fp8lm.measure_memory(model, optimizer, gradients, configuration=run.label))
                    metrics["memory"] = memory
                    if config.report_memory:
                        print_fn(_memory_line(memory))
            scaler.update(finite)
            state.step()
            if tracker is not None:
                metrics["scales"].append({"step": step + 1, **_scales(tracker)})
            elapsed = time.perf_counter() - began
            step_done = step + 1
            steps_counter[0] += 1
            metrics["train_loss"].append(loss_value)
            metrics["skipped_steps"] = scaler.skipped
            window_losses.append(loss_value)
            window_steps, window_time = window_steps + 1, window_time + elapsed
            if step_done % config.log_interval == 0 or step_done == config.steps:
                per_step = (time.perf_counter() - steps_start - in_loop_seconds) / (step_done - start)
                # (the evaluation at step_done too: it comes after this line)
                evaluations_left = (config.steps // config.eval_interval - (step_done - 1) // config.eval_interval
                                    + (config.steps % config.eval_interval != 0))
                eta = per_step * (config.steps - step_done) + (
                    evaluation_seconds / evaluations * evaluations_left if evaluations else 0.0)
                _log_progress(print_fn, run, config, step_done, window_losses, window_time / window_steps, eta,
                              tokens_per_step, state, scaler, report, metrics)
                window_losses, window_steps, window_time = [], 0, 0.0
            if step_done % config.eval_interval == 0 or step_done == config.steps:
                evaluation_began = time.perf_counter()
                metrics["val"].append({"step": step_done, **_evaluate(model, state, eval_batches, dataset)})
                print_fn(_val_line(metrics["val"][-1], config))
                if step_done < config.steps:
                    save()
                seconds = time.perf_counter() - evaluation_began
                evaluations, evaluation_seconds, in_loop_seconds = (evaluations + 1, evaluation_seconds + seconds,
                                                                    in_loop_seconds + seconds)
            if stop_after is not None and step_done - start >= stop_after and step_done < config.steps:
                save()
                raise Interrupted(f"{run.label}: stopped after step {step_done}")
    except KeyboardInterrupt:  # a second Ctrl-C, inside a step: a checkpoint now would hold half of it
        kept = ("" if checkpoint is None else " (the run's last checkpoint stands)" if checkpoint.exists()
                else " (the run has no checkpoint yet: a resume starts it afresh)")
        raise Interrupted(f"{run.label}: {interrupt.stopped} inside step {step_done + 1}, which is not saved{kept}",
                          interrupt.status) from None
    except Diverged as error:
        metrics["diverged"] = {"step": step_done + 1, "message": str(error)}
        metrics["time_s"] = time_before + time.perf_counter() - session_start
        save()
        error.metrics = metrics
        raise
    metrics["time_s"] = time_before + time.perf_counter() - session_start
    metrics["finished"] = True
    metrics["final"] = _final(metrics)
    metrics["cast_points"] = _cast_points(state)
    save()
    if interrupt.requested:  # Ctrl-C during the last step: the run is done, the next does not start
        raise Interrupted(f"{run.label}: {interrupt.stopped} after its last step", interrupt.status, metrics)
    return metrics


def _val_line(result: dict, config: TrainConfig) -> str:
    accuracy = (f" | answers: {_percent(result['char_accuracy'])} of characters, "
                f"{_percent(result['exact_match'])} exact" if "char_accuracy" in result else "")
    return f"step {result['step']}/{config.steps} | val loss {result['loss']:.4f}{accuracy}"


def _memory(row) -> dict:
    """A `minifp8.fp8lm.MemoryRow` as plain numbers: bytes per parameter of each component, and the dtypes."""
    return {"bytes_per_parameter": {c: row.per_parameter(c) for c in fp8lm.COMPONENTS}, "total": row.total,
            "persistent": row.persistent, "dtypes": dict(row.dtypes)}


def _memory_line(memory: dict) -> str:
    parts = ", ".join(f"{c.replace('_', ' ')} {memory['bytes_per_parameter'][c]:.3g}" for c in fp8lm.COMPONENTS)
    return (f"memory held: {memory['total']:.3g} bytes per parameter ({parts}; FP32 AdamW holds "
            f"{fp8lm.FP32_ADAMW_BYTES})")


def _log_progress(print_fn, run, config, step, losses, per_step, eta, tokens_per_step, state, scaler, report,
                  metrics):
    line = (f"step {step}/{config.steps} | loss {np.mean(losses):.4f} | {per_step * 1e3:.0f} ms | "
            f"{tokens_per_step / per_step:,.0f} tok/s | eta {_duration(eta)}")
    summary = state.summary()
    if state.points:
        line += (f" | underflow {_percent(summary['max_underflow'])}"
                 + (f" ({summary['max_underflow_at']})" if summary["max_underflow_at"] else "")
                 + f" | saturation {_percent(summary['max_saturation'])}"
                 + (f" ({summary['max_saturation_at']})" if summary["max_saturation_at"] else ""))
        metrics["cast_stats"].append({"step": step, **summary})
        # the backward pass's E5M2 casts on their own: a forward cast can hide them in the worst of all
        gradient = state.summary(fp8.GRADIENT_ROLES)
        line += (f" | gradients: underflow {_percent(gradient['max_underflow'])}"
                 + (f" ({gradient['max_underflow_at']})" if gradient["max_underflow_at"] else "")
                 + f", saturation {_percent(gradient['max_saturation'])}")
        metrics["gradient_cast_stats"].append({"step": step, **gradient})
    if run.loss_scale != "none":
        scale = float(scaler.scale)  # (a whole factor whole: :g wrote 2**20 as 1.04858e+06)
        line += (f" | loss scale {int(scale) if scale.is_integer() and scale < 1e15 else format(scale, 'g')}"
                 + (f", {scaler.skipped} skipped" if scaler.dynamic else ""))
        metrics["loss_scale"].append({"step": step, "scale": scaler.scale, "skipped": scaler.skipped})
    if report is not None and not report.results:  # a step whose every FP8 gradient held Inf or NaN (skipped)
        line += f" | fp8 grads: none cast ({len(report.nonfinite)} non-finite)"
        metrics["fp8_grads"].append({"step": step, **{key: None for key in report.summary()},
                                     "workers": report.workers, "nonfinite": list(report.nonfinite)})
    elif report is not None:  # the FP8 gradients of the latest step against their FP32 all-reduce
        summary = report.summary()
        line += (f" | fp8 grads: error {summary['relative_error']:.2g}, underflow "
                 f"{_percent(summary['underflow_fraction'])}, mu {summary['min_factor']:.3g}-{summary['max_factor']:.3g}")
        metrics["fp8_grads"].append({"step": step, **summary})
    print_fn(line)


# What --track-scales records of each tracked tensor (minifp8.fp8.ScaleRecord's fields).
_SCALE_STATISTICS = ("forward_std", "forward_mean_abs", "forward_shared_fraction", "backward_std", "backward_mean_abs")


def _scales(tracker: fp8.ScaleTracker) -> dict:
    """A tracker's records as ``metrics.json`` keeps them: each statistic by tensor name (NaN where
    no gradient reached the tensor)."""
    records = tracker.records.values()
    return {statistic: {record.name: math.nan if getattr(record, statistic) is None else getattr(record, statistic)
                        for record in records}
            for statistic in _SCALE_STATISTICS}


def _final(metrics: dict) -> dict:
    """The summary numbers: mean training loss of the last 5% of steps (at least 10), last evaluation."""
    losses = metrics["train_loss"]
    tail = max(10, len(losses) // 20)
    final = {"train_loss": float(np.mean(losses[-tail:])), "steps": len(losses)}
    if metrics["val"]:
        last = metrics["val"][-1]
        final["val_loss"] = last["loss"]
        for key in ("char_accuracy", "exact_match"):
            if key in last:
                final[key] = last[key]
    return final


def _cast_points(state) -> dict:
    """The latest statistics of every cast point and role."""
    return {name: {role: {"amax": stats.amax, "underflow": stats.underflow_fraction,
                          "saturation": stats.saturation_fraction}
                   for role, stats in point.stats.items()}
            for name, point in state.points.items()}


# ================================================================================================
# Checkpoints: one .npz per run, arrays plus a JSON header
# ================================================================================================
#: Flags that may differ between the sessions of one run.
_SESSION_FLAGS = ("out", "resume", "stop_after")


def _identity(config: TrainConfig, run: Run, data_sha256: str) -> dict:
    """What a checkpoint must have been trained with to be resumed: the config (less `_SESSION_FLAGS`),
    the run, as JSON values, and the training text (`minifp8.data.Dataset.text_sha256`)."""
    return {"config": {key: value for key, value in asdict(config).items() if key not in _SESSION_FLAGS},
            "run": asdict(run), "data_sha256": data_sha256}


def _save_checkpoint(path: Path, identity: dict, step, model, model_rng, state, optimizer, data_rng, scaler,
                     gradients, metrics) -> None:
    arrays = {f"model.{name}": value for name, value in model.state_dict().items()}
    optimizer_state = optimizer.state_dict()
    # everything but the per-parameter state is JSON (param_groups; FP8AdamW's precision)
    optimizer_meta = {**{key: value for key, value in optimizer_state.items() if key != "state"}, "state": {}}
    for index, entries in optimizer_state["state"].items():
        optimizer_meta["state"][str(index)] = {}
        for name, value in entries.items():
            if isinstance(value, (np.ndarray, np.generic)):  # moments and their float32 scales keep their dtype
                arrays[f"optimizer.{index}.{name}"] = np.asarray(value)
            else:
                optimizer_meta["state"][str(index)][name] = value
    for name, value in state.state_dict().items():
        arrays[f"fp8.{name}"] = np.asarray(value)
    meta = {"identity": identity, "step": step,
            "model_rng": model_rng.bit_generator.state, "data_rng": data_rng.bit_generator.state,
            "scaler": scaler.state_dict(), "optimizer": optimizer_meta, "metrics": metrics,
            "fp8_gradients": gradients.state_dict() if gradients is not None else None}
    # UTF-8 bytes: a NumPy string array takes 4 bytes a character (UTF-32), and the metrics grow with the run
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    _replace_whole(path, lambda temporary: np.savez(temporary, **arrays), ".tmp.npz")  # (np.savez adds .npz)


def _load_checkpoint(path: Path, identity: dict, model, model_rng, state, optimizer, data_rng, scaler, gradients):
    """Restore a run from its checkpoint; `CheckpointError` where it is not this run's or cannot be read."""
    try:
        return _restore(path, identity, model, model_rng, state, optimizer, data_rng, scaler, gradients)
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, OverflowError,
            RecursionError) as error:
        # (ValueError: also bytes that are not an .npz, `_read_npz`; RecursionError: JSON nested too deeply;
        # OverflowError: an RNG state beyond 128 bits)
        raise CheckpointError(f"{path}: cannot resume from it ({brief(error)})") from None


_METRICS_KINDS: dict[str, type | tuple[type, ...]] = {
    "recipe": str, "family": str, "loss_scale_mode": str, "parameters": int, "train_loss": list, "val": list,
    "cast_stats": list, "gradient_cast_stats": list, "loss_scale": list, "fp8_grads": list, "scales": list,
    "memory": (dict, type(None)), "skipped_steps": int,
    "time_s": (int, float), "diverged": (dict, type(None)), "finished": bool}
"""What `_train` reads of a checkpoint's metrics, by key: the JSON types it must have (`_check_meta`)."""


def _check_meta(meta: dict, identity: dict) -> None:
    """Check the JSON header of a checkpoint where `_train` reads it before anything checks it again:
    one whose ``step`` is an int in [0, steps], whose ``metrics`` hold every key of
    `_METRICS_KINDS` with its type, a ``train_loss`` of one number per step, ``val``, ``cast_stats``,
    ``loss_scale`` and ``fp8_grads`` entries that are objects with an int ``step`` (``val``'s with a
    number ``loss``), a ``time_s`` >= 0, a ``final`` summary (where present) of numbers, and whose
    ``optimizer`` holds a list of ``param_groups`` and a ``state`` object (``meta`` is a dict: `_restore`
    checked it). TypeError or ValueError (`_load_checkpoint` reports them as `CheckpointError`), naming
    what is wrong; the arrays and the optimizer's and scalers' states are checked where they are
    loaded. Numbers may be NaN or Infinity: json.dumps writes a diverged run's losses so."""
    def kind(value) -> str:
        return "null" if value is None else type(value).__name__

    steps = identity["config"]["steps"]
    step = meta.get("step")
    if not _is_int(step):
        raise TypeError(f"the header's step must be an int, got {type(step).__name__} {step!r}")
    if not 0 <= step <= steps:
        raise ValueError(f"the header's step must be in [0, {steps}] (--steps), got {step}")
    metrics = meta.get("metrics")
    if not isinstance(metrics, dict):
        raise TypeError(f"the header's metrics must be a JSON object, got {kind(metrics)}")
    for key, kinds in _METRICS_KINDS.items():
        if key not in metrics:
            raise ValueError(f"the header's metrics lack {key!r}")
        value = metrics[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and kinds is not bool):
            names = " or ".join("null" if kind_ is type(None) else kind_.__name__
                                for kind_ in (kinds if isinstance(kinds, tuple) else (kinds,)))
            raise TypeError(f"the header's metrics[{key!r}] must be {names}, got {kind(value)}")
    losses = metrics["train_loss"]
    if len(losses) != step or not all(_is_real(loss) for loss in losses):
        raise ValueError(f"the header's metrics['train_loss'] must hold one number per step done ({step}), got "
                         f"{reprlib.repr(losses)}")
    for key in ("val", "cast_stats", "gradient_cast_stats", "loss_scale", "fp8_grads", "scales"):
        for entry in metrics[key]:
            if not (isinstance(entry, dict) and _is_int(entry.get("step"))
                    and (key != "val" or _is_real(entry.get("loss")))):
                raise ValueError(f"the header's metrics[{key!r}] entries must be objects with an int step"
                                 f"{' and a number loss' if key == 'val' else ''}, got {reprlib.repr(entry)}")
    if not metrics["time_s"] >= 0:
        raise ValueError(f"the header's metrics['time_s'] must be >= 0, got {metrics['time_s']!r}")
    diverged = metrics["diverged"]
    if diverged is not None and not (_is_int(diverged.get("step")) and isinstance(diverged.get("message"), str)):
        raise ValueError(f"the header's metrics['diverged'] must be null or an object with an int step and a "
                         f"message, got {reprlib.repr(diverged)}")
    final = metrics.get("final")  # (the summary of a finished run; recomputed where absent or empty)
    if final and not (isinstance(final, dict) and _is_real(final.get("train_loss"))
                      and _is_real(final.get("val_loss", 0.0)) and all(
                          value is None or _is_real(value) for value in final.values())):
        raise ValueError(f"the header's metrics['final'] must be an object of numbers with a train_loss, got "
                         f"{reprlib.repr(final)}")
    if metrics["finished"] and step != steps:
        raise ValueError(f"the header's metrics say the run finished, but its step is {step}, not {steps}")
    optimizer = meta.get("optimizer")
    if not (isinstance(optimizer, dict) and isinstance(optimizer.get("param_groups"), list)
            and isinstance(optimizer.get("state"), dict)):
        raise TypeError(f"the header's optimizer must be an object with a list of param_groups and a state "
                        f"object, got {reprlib.repr(optimizer)}")


def checkpoint_header(meta: np.ndarray) -> str:
    """The JSON text of a checkpoint's ``meta`` array: UTF-8 bytes (uint8), or the NumPy string of
    checkpoints written before 2026-11-30. Raises TypeError or ValueError for anything else.

    Its ``"metrics"`` are the run's so far (``"finished"`` false for a run stopped part way), as
    ``metrics.json`` would hold them: ``json.loads(checkpoint_header(np.load(path)["meta"]))["metrics"]``.
    """
    if meta.dtype == np.uint8 and meta.ndim == 1:
        try:
            return meta.tobytes().decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"the header (meta) is not UTF-8: {error}") from None
    if meta.dtype.kind == "U" and meta.ndim == 0:
        return str(meta)
    raise TypeError(f"the header (meta) must be UTF-8 bytes (uint8) or a string, got a {meta.ndim}-d {meta.dtype} "
                    f"array")


def _restore(path: Path, identity: dict, model, model_rng, state, optimizer, data_rng, scaler, gradients):
    archive = _read_npz(path, None)  # (every array at once; ValueError for bytes that are not an .npz)
    if "meta" not in archive:
        raise KeyError("the archive holds no meta (the JSON header)")
    meta = json.loads(checkpoint_header(archive["meta"]))
    if not isinstance(meta, dict):
        raise TypeError(f"the header (meta) must be a JSON object, got {type(meta).__name__}")
    saved = meta.get("identity", identity)  # (checkpoints of earlier versions hold none)
    # a flag added since a checkpoint was written had its default there
    defaults = {f.name: f.default for f in fields(TrainConfig) if f.name not in _SESSION_FLAGS}
    saved = {**saved, "config": {**defaults, **saved["config"]}}
    recorded = saved.get("data_sha256")  # (None in checkpoints older than it)
    if recorded is not None and recorded != identity["data_sha256"]:
        raise CheckpointError(f"{path} was trained on another text (SHA-256 {str(recorded)[:16]}..., the "
                              f"text now {identity['data_sha256'][:16]}...); start afresh without --resume")
    # where the text is, once its SHA-256 says it is the same text, may differ (a run moved with its data)
    moved = {("config", "data")} if recorded is not None else set()
    differing = sorted({key for part in ("config", "run") for key in {*saved[part], *identity[part]}
                        if (part, key) not in moved and saved[part].get(key) != identity[part].get(key)})
    if differing:
        raise CheckpointError(f"{path} was written by another config or run (it differs in "
                              f"{', '.join(differing)}); start afresh without --resume")
    metrics = meta.get("metrics")
    if isinstance(metrics, dict):  # (checkpoints written before --fp8-grads and --report-memory hold neither,
        metrics.setdefault("fp8_grads", [])  # those before 2026-11-30 no gradient_cast_stats)
        metrics.setdefault("memory", None)
        metrics.setdefault("gradient_cast_stats", [])
        metrics.setdefault("scales", [])  # (and those before --track-scales no scales)
    _check_meta(meta, identity)
    model.load_state_dict({key[len("model."):]: archive[key] for key in archive if key.startswith("model.")})
    fp8_state = {key[len("fp8."):]: archive[key] for key in archive if key.startswith("fp8.")}
    for name, value in state.options.items():  # (checkpoints of earlier versions hold no options:
        fp8_state.setdefault(f"options.{name}", np.array(value))  # the identity above compared them)
    state.load_state_dict(fp8_state)
    optimizer_state = {**meta["optimizer"], "state": {}}
    for index, entries in meta["optimizer"]["state"].items():
        optimizer_state["state"][int(index)] = dict(entries)
    for key in archive:
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            optimizer_state["state"][int(index)][name] = archive[key]
    for group in optimizer_state["param_groups"]:
        group["betas"] = tuple(group["betas"])
    optimizer.load_state_dict(optimizer_state)
    model_rng.bit_generator.state = meta["model_rng"]
    data_rng.bit_generator.state = meta["data_rng"]
    scaler.load_state_dict(meta["scaler"])
    if gradients is not None:
        gradients.load_state_dict(meta["fp8_gradients"])
    return meta["step"], meta["metrics"]


# ================================================================================================
# Summary, metrics.json, figure
# ================================================================================================
def _fp32_partner(run: Run, runs: list[Run]) -> Run | None:
    """The plain fp32 run of ``run``'s model family in ``runs`` (the first), against which the
    summary compares its validation loss; None for that run itself, or where the list has none."""
    partner = next((other for other in runs if other.recipe == "fp32" and other.family == run.family
                    and other.loss_scale == "none" and not other.fp8_grads and other.fp8_optimizer == "none"), None)
    return None if partner is None or partner == run else partner


def _versus_fp32_cell(run: Run, runs: list[Run], finals: dict, val_loss: float) -> str:
    """``+2.60%``: the run's final validation loss relative to its fp32 partner's (`_fp32_partner`),
    as the README's headline table gives it, or the ratio (``5.4e+05x``) where that would not fit
    the column; blank without a partner that finished (``finals``: the summary rows of those that did)."""
    partner = _fp32_partner(run, runs)
    baseline = finals[partner.label].get("val_loss", math.nan) if partner and partner.label in finals else math.nan
    if not (math.isfinite(val_loss) and math.isfinite(baseline) and baseline > 0):
        return ""
    text = f"{val_loss / baseline - 1:+.2%}"
    return text if len(text) <= 11 else f"{val_loss / baseline:.3g}x"


def _uncast_note(config: TrainConfig) -> str:
    """What ``--fp32-lm-head`` and ``--fp32-modules`` leave uncast, as the log, the summary and
    loss.png's title say it: "LM head in float32", "*.mlp.* in float32", "LM head and *.attn in
    float32"."""
    patterns = ", ".join(_fp32_patterns(config))
    return " and ".join(["LM head"] * config.fp32_lm_head + [patterns] * bool(patterns)) + " in float32"


_CENTRED_NOTE = "LM head centred every step"


def _every_run_note(config: TrainConfig) -> str:
    """What the flags that change every run (``--fp32-lm-head``, ``--fp32-modules``,
    ``--center-lm-head``) do, as the summary's closing line and loss.png's title say it: "LM head in
    float32 and LM head centred every step"; empty where none is given."""
    return " and ".join([_uncast_note(config)] * bool(_uncast_modules(config))
                        + [_CENTRED_NOTE] * config.center_lm_head)


def _summary_table(runs: list[Run], results: dict, arithmetic: bool) -> str:
    width = max([28] + [len(run.label) for run in runs])
    versus = any(_fp32_partner(run, runs) is not None for run in runs)
    header = f"{'run':<{width}} {'train loss':>10} {'val loss':>9}"
    if versus:  # (the README's headline column)
        header += f" {'vs its fp32':>11}"
    if arithmetic:
        header += f" {'answer chars':>12} {'exact':>7}"
    header += f" {'time':>8}"
    dynamic = any(run.loss_scale == "dynamic" for run in runs)
    if dynamic:  # the steps that dynamic loss scaling skipped (their gradients overflowed)
        header += f" {'skipped':>8}"
    lines = [header, "-" * len(header)]
    # (main returns before the table unless every run finished)
    finals = {label: metrics.get("final") or _final(metrics) for label, metrics in results.items()
              if not metrics["diverged"]}
    for run in runs:
        metrics = results[run.label]
        skipped = metrics.get("skipped_steps", 0) if run.loss_scale == "dynamic" else None
        if metrics["diverged"]:
            lines.append(f"{run.label:<{width}} diverged at step {metrics['diverged']['step']}"
                         + (f", after {skipped:,} skipped steps" if skipped is not None else ""))
            continue
        final = finals[run.label]
        line = (f"{run.label:<{width}} {_loss_cell(final['train_loss'], 10):>10} "
                f"{_loss_cell(final.get('val_loss', math.nan), 9):>9}")
        if versus:
            line += f" {_versus_fp32_cell(run, runs, finals, final.get('val_loss', math.nan)):>11}"
        if arithmetic:
            line += f" {_percent(final.get('char_accuracy', math.nan)):>12} {_percent(final.get('exact_match', math.nan)):>7}"
        line += f" {_duration(metrics['time_s']):>8}"
        if skipped is not None:
            line += f" {skipped:>8,}"
        lines.append(line)
    return "\n".join(lines)


def _loss_cell(loss: float, width: int) -> str:
    """A loss for a summary column ``width`` wide: 4 decimals, or 4 significant digits where those
    would not fit (a run that blew up: ``9.272e+12``), so that the columns stay aligned."""
    text = f"{loss:.4f}"
    return text if len(text) <= width else f"{loss:.3e}"


def _write_outputs(out: Path, config: TrainConfig, runs: list[Run], results: dict, dataset, print_fn,
                   started_in: dict | None = None) -> None:
    """``metrics.json``, ``loss.png`` and, with ``--track-scales``, ``scales.png``; ``started_in``: the
    environment config.json recorded, where this session resumed runs (None: they started in this one)."""
    now = environment()
    document = {"config": asdict(config), "data": dataset.name, "loss_floor": dataset.loss_floor,
                "window_loss_floor": dataset.window_loss_floor(config.block_size), "environment": started_in or now}
    if started_in is not None and _environment_changed(started_in, now):
        document["continued_in"] = now
    document["runs"] = {run.label: results[run.label] for run in runs if run.label in results}
    _write_text(out / "metrics.json", _strict_json(document))
    try:
        from . import plots

        note = _every_run_note(config)
        title = f"{plots.TRAINING_CURVES_TITLE}, {note}" if note else None
        loss_png = _png_bytes(plots.training_curves(document, title=title))
    except ImportError:
        figures = "loss.png or scales.png" if config.track_scales else "loss.png"
        print_fn(f"wrote {out / 'metrics.json'} (no {figures}: pip install matplotlib to get the "
                 f"figure{'s' if config.track_scales else ''})")
        return
    except Exception as error:  # (a matplotlib that fails, e.g. MPLBACKEND=bogus: the results stand, exit 0)
        figures = "loss.png or scales.png" if config.track_scales else "loss.png"
        print_fn(f"wrote {out / 'metrics.json'} (no {figures}: drawing failed: {type(error).__name__}: {error})")
        return
    # (written outside the guards: a full disk is main's --out error, as for metrics.json)
    _write_bytes(out / "loss.png", loss_png)
    written = [out / "metrics.json", out / "loss.png"]
    if any(metrics.get("scales") for metrics in document["runs"].values()):
        last = fp8.ScaleTracker.record_name("residual", config.n_layer)  # (what the final norm reads)
        try:
            scales_png = _png_bytes(plots.scale_curves(document, tensor=last,
                                                       title=f"The last block's output ({last}) and its gradient"))
        except Exception as error:  # (the loss figure and the results stand, exit 0)
            print_fn(f"wrote {written[0]} and {written[1]} (no scales.png: drawing failed: "
                     f"{type(error).__name__}: {error})")
            return
        _write_bytes(out / "scales.png", scales_png)
        written.append(out / "scales.png")
    print_fn(f"wrote {', '.join(map(str, written[:-1]))} and {written[-1]}")


def _png_bytes(figure) -> bytes:
    """``figure`` drawn as PNG bytes, in memory: a figure that fails while it is drawn writes nothing."""
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=120, format="png")
    return buffer.getvalue()


def _write_bytes(path: Path, data: bytes) -> None:
    """``data`` into ``path``, whole (`_replace_whole`)."""
    _replace_whole(path, lambda temporary: temporary.write_bytes(data))


def _write_text(path: Path, text: str) -> None:
    """``text`` into ``path``, UTF-8 with ``\n`` line ends on every OS, whole (`_replace_whole`)."""
    _replace_whole(path, lambda temporary: temporary.write_text(text, encoding="utf-8", newline="\n"))


def _replace_whole(path: Path, write: Callable[[Path], object], suffix: str = ".tmp") -> None:
    """``write(temporary)`` beside ``path``, then a rename onto it: a crash or a full disk while
    writing leaves the previous file whole, not truncated (and no temporary file behind)."""
    temporary = path.with_name(path.name + suffix)
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _strict_json(document, digits: int | None = None) -> str:
    """``document`` as JSON that every parser reads: a NaN or infinite number (the amax of a cast
    in a step that overflowed) is written as null, which JSON has, instead of Python's NaN.
    ``digits``: every other float is rounded to that many decimals."""
    def strict(value):
        if isinstance(value, float):
            return None if not math.isfinite(value) else value if digits is None else round(value, digits)
        if isinstance(value, dict):
            return {key: strict(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [strict(item) for item in value]
        return value

    return json.dumps(strict(document), indent=1, allow_nan=False) + "\n"


def headline_results(document: dict, every: int | None = None) -> dict:
    """The small results file of an experiment (``headline.json``, ``fp8lm.json``, ``long.json``)
    from its ``metrics.json`` document.

    Keeps the config (less the flags an experiment fixes, `RUN_FLAGS`: each run's label, recipe and
    family say what it ran), the environment (None in documents older than it; and
    ``continued_in`` where a resume ran under another), each run's
    summary, validation curve, loss-scale and cast-statistics log, and its training loss averaged
    over windows of ``every`` steps (``train_loss_every``; by default a fiftieth of the config's
    steps: 10 at the headline's 500, 80 at the long experiment's 4000).
    """
    if every is None:
        every = max(1, document["config"]["steps"] // 50)
    runs = {}
    for label, metrics in document["runs"].items():
        losses = np.asarray(metrics["train_loss"], dtype=np.float64)
        windows = len(losses) // every
        runs[label] = {
            "recipe": metrics["recipe"], "family": metrics["family"], "loss_scale_mode": metrics["loss_scale_mode"],
            "train_loss": [round(float(v), 5) for v in losses[:windows * every].reshape(windows, every).mean(axis=1)],
            "val": [{key: round(value, 5) if isinstance(value, float) else value for key, value in entry.items()}
                    for entry in metrics["val"]],
            "final": metrics.get("final"), "diverged": metrics["diverged"], "time_s": round(metrics["time_s"], 1),
            "skipped_steps": metrics["skipped_steps"],
            "cast_stats": [{key: round(value, 6) if isinstance(value, float) else value for key, value in entry.items()}
                           for entry in metrics["cast_stats"]],
            "loss_scale": metrics["loss_scale"],
            "fp8_grads": [{key: round(value, 6) if isinstance(value, float) else value for key, value in entry.items()}
                          for entry in metrics.get("fp8_grads", [])],
            "memory": metrics.get("memory"),
        }
    left_out = (*_SESSION_FLAGS, *(RUN_FLAGS if document["config"].get("experiment") else ()))
    config = {key: value for key, value in document["config"].items() if key not in left_out}
    return {"config": config, "data": document["data"], "loss_floor": document["loss_floor"],
            **({"window_loss_floor": document["window_loss_floor"]} if "window_loss_floor" in document else {}),
            "environment": document.get("environment"),
            **({"continued_in": document["continued_in"]} if "continued_in" in document else {}),
            "train_loss_every": every, "runs": runs}


def load_results(path: str | os.PathLike[str] | os.PathLike[bytes] | None = None) -> dict:
    """A results document: the committed headline results by default, or a ``metrics.json``,
    `FP8LM_RESULTS` or `LONG_RESULTS`."""
    return _load_json_object(HEADLINE_RESULTS if path is None else path)


def _load_json_object(path: str | os.PathLike[str] | os.PathLike[bytes]) -> dict:
    """The JSON object in the file at ``path`` (`load_results`, `minifp8.bench.load_speed_results`).

    Raises OSError where the file cannot be read (FileNotFoundError, IsADirectoryError, ...), and
    ValueError, naming the file, where it is not UTF-8, not JSON, JSON nested too deeply for
    Python's parser (which would raise RecursionError) or JSON whose top level is not an object.
    """
    shown = os.fsdecode(os.fspath(path))
    with open(path, "rb") as file:
        raw = file.read()
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{shown}: not a UTF-8 JSON file (invalid byte 0x{raw[error.start]:02X} at offset "
                         f"{error.start})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{shown}: not a JSON file ({error})") from None
    except RecursionError:
        raise ValueError(f"{shown}: its JSON is nested too deeply to read") from None
    if not isinstance(document, dict):
        raise ValueError(f"{shown}: expected a JSON object at the top level, got {type(document).__name__}")
    return document


# ================================================================================================
# main
# ================================================================================================
def _tune_malloc() -> None:
    """Keep freed activation memory in the process instead of returning it to the OS (Linux/glibc).

    Every step allocates and frees the same activation buffers (megabytes each). By default glibc
    serves big blocks with mmap and gives freed memory back to the kernel, so every step re-faults
    fresh zeroed pages. Raising the mmap threshold to its maximum and never trimming makes later
    steps reuse the memory. Only the ``train_tiny`` and ``bench`` commands do this (a library should
    not change its host's allocator), so that bench times the steps the trainer runs. It silently
    does nothing where glibc is absent.
    """
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # glibc malloc.h
        libc.mallopt(m_mmap_threshold, 32 * 1024 * 1024)  # the largest value glibc accepts on 64-bit
        libc.mallopt(m_trim_threshold, 1 << 30)


@functools.cache  # (the library, and the kernels it picked, stay those NumPy loaded: /proc/self/maps read once)
def _openblas() -> tuple[ctypes.CDLL, str, str] | None:
    """The OpenBLAS library NumPy's GEMMs run in, and the prefix and suffix of its symbols (NumPy's
    wheels name them ``scipy_openblas_..._64_``), or None where it cannot be found (another BLAS, or
    no ``/proc/self/maps``: not Linux). Best effort: among the libraries this process mapped."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(maxsplit=5)[-1].strip() for line in maps if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(paths, key=lambda path: ("numpy" not in path, path)):  # NumPy's own first (SciPy has one too)
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (("scipy_", "64_"), ("scipy_", ""), ("", "64_"), ("", "")):
            if getattr(library, f"{prefix}openblas_get_corename{suffix}", None) is not None:
                return library, prefix, suffix
    return None


def blas_kernels() -> str | None:
    """The CPU kernels OpenBLAS chose for NumPy's GEMMs (``SkylakeX``, ``Haswell``, ...), or None
    where that cannot be told (another BLAS, or no ``/proc/self/maps``: not Linux).

    They decide the order of a GEMM's sums, so one seed trains to other losses under other kernels:
    the committed results were made under ``Haswell`` (AVX2) kernels, and an AVX-512 machine picks
    ``SkylakeX`` ones. OpenBLAS takes the kernels named by ``OPENBLAS_CORETYPE`` when the variable
    is set before NumPy loads it (README, "Results and BLAS kernels"). Asked through
    ``openblas_get_corename`` (`_openblas`).
    """
    found = _openblas()
    if found is None:
        return None
    library, prefix, suffix = found
    function = getattr(library, f"{prefix}openblas_get_corename{suffix}")
    function.restype = ctypes.c_char_p
    corename = function()
    return corename.decode("ascii", "replace") if corename else None


def blas_threads() -> int | None:
    """The number of threads OpenBLAS runs NumPy's GEMMs on (``OPENBLAS_NUM_THREADS``, capped at the
    cores it finds), or None where that cannot be told (`_openblas`). Under the ``Haswell`` kernels it
    changes a GEMM's last bits (README, "Results and BLAS kernels")."""
    found = _openblas()
    if found is None:
        return None
    library, prefix, suffix = found
    function = getattr(library, f"{prefix}openblas_get_num_threads{suffix}", None)
    if function is None:
        return None
    function.restype = ctypes.c_int
    return int(function())


def environment() -> dict:
    """What decides a run's bits besides the seed: the code (minifp8's version, a coarse mark:
    CHANGELOG.md lists what changed a run's numbers, under the version after the one whose number the
    code carried), NumPy's version, the BLAS kernels (`blas_kernels`) and the number of BLAS threads
    (`blas_threads`), as ``metrics.json`` records them."""
    return {"minifp8": __version__, "numpy": np.__version__, "blas_kernels": blas_kernels(),
            "blas_threads": blas_threads()}


def environment_line(info: dict) -> str:
    """`environment` as ``minifp8 0.3.2, numpy 2.4.6, OpenBLAS SkylakeX kernels, 2 threads`` (the
    version and the threads where recorded: directories older than them record neither)."""
    kernels, threads, version = info["blas_kernels"], info.get("blas_threads"), info.get("minifp8")
    return ((f"minifp8 {version}, " if version is not None else "") + f"numpy {info['numpy']}, "
            + (f"OpenBLAS {kernels} kernels" if kernels else "BLAS kernels unknown")
            + (f", {threads} thread{'s' * (threads != 1)}" if threads is not None else ""))


def _environment_changed(started_in: dict, now: dict) -> bool:
    """Whether ``now`` differs from ``started_in`` in what ``started_in`` records (a directory older
    than `blas_threads` records no threads: its resumes are not told of a change nobody recorded)."""
    return any(started_in[key] != now.get(key) for key in started_in)


_JSON_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "None": (type(None),)}


def _typed_fields(prefix: str, values: dict[str, Any], cls: type) -> dict[str, Any]:
    """``values`` with NumPy numbers as Python ones (``.item()``: config.json is written from them), and a
    TypeError unless each field of the dataclass ``cls`` found there holds its annotated type, as the
    flags and config.json give them (an int is a float too; a bool is not an int)."""
    typed: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in values:
            continue
        value, kinds = values[f.name], str(f.type).split(" | ")
        if isinstance(value, (np.integer, np.floating, np.bool_)):
            value = value.item()
        if (not isinstance(value, tuple(python_type for kind in kinds for python_type in _JSON_TYPES[kind]))
                or isinstance(value, bool) and "bool" not in kinds):
            raise TypeError(f"{prefix}{f.name} must be {' or '.join(kinds)}, got {value!r}")
        typed[f.name] = value
    return typed


def _resumed(resume_dir: Path, stop_after: int | None) -> tuple[TrainConfig, list[Run], dict | None, str | None]:
    """The config, runs, environment and training text's SHA-256 (each of the last two None if not
    recorded: directories older than them) saved in ``resume_dir`` (its ``config.json``, checked as
    the flags are), and a check that its checkpoints are those of these runs. Raises OSError,
    ValueError or TypeError."""
    try:
        saved = json.loads((resume_dir / "config.json").read_text(encoding="utf-8"))
    except RecursionError:  # (json's own error for arrays or objects nested thousands deep)
        raise ValueError("config.json: its JSON is nested too deeply to read") from None
    if not (isinstance(saved, dict) and isinstance(saved.get("config"), dict) and isinstance(saved.get("runs"), list)):
        got = (f"config {type(saved.get('config')).__name__} and runs {type(saved.get('runs')).__name__}"
               if isinstance(saved, dict) else type(saved).__name__)
        raise TypeError(f"config.json must be a JSON object with a config object and a list of runs, got {got}")
    values = {**saved["config"], "resume": str(resume_dir), "stop_after": stop_after, "out": str(resume_dir)}
    _typed_fields("config.json: ", values, TrainConfig)
    unknown = sorted(set(values) - {f.name for f in fields(TrainConfig)})
    if unknown:  # (repr: a key may hold a newline)
        raise ValueError(f"config.json: unknown config keys {unknown}")
    config = TrainConfig(**values)
    run_keys = {f.name for f in fields(Run)}
    for run in saved["runs"]:
        if not isinstance(run, dict) or not {"recipe", "family"} <= set(run) <= run_keys:
            raise ValueError(f"config.json: each run must be an object with a recipe, a family and no keys but "
                             f"{', '.join(sorted(run_keys))}, got {reprlib.repr(run)}")
    runs = [Run(**run) for run in saved["runs"]]

    def fail(message: str) -> NoReturn:
        raise ValueError(f"config.json: {message}")

    _check_config(fail, config, runs)
    _check_checkpoints_directory(resume_dir)
    slugs = {f"{run.slug}.npz" for run in runs}
    others = sorted(path.name for path in (resume_dir / "checkpoints").glob("*.npz")
                    if path.name not in slugs and not path.name.endswith(".tmp.npz"))
    if others:
        raise ValueError(f"checkpoints/ holds {', '.join(others)}, of runs that config.json does not list")
    started_in = saved.get("environment")  # (absent in directories older than it)
    if started_in is not None and not (
            isinstance(started_in, dict) and set(started_in) - {"blas_threads", "minifp8"} == {"numpy", "blas_kernels"}
            and all(isinstance(started_in[key], (str, type(None))) for key in ("numpy", "blas_kernels"))
            and isinstance(started_in.get("minifp8", ""), str)
            and (started_in.get("blas_threads") is None or _is_int(started_in["blas_threads"]))):
        fail(f"environment must map numpy and blas_kernels to strings (and blas_threads to an int, minifp8 to a "
             f"string), got {started_in!r}")
    data_sha256 = saved.get("data_sha256")  # (absent in directories older than it)
    if data_sha256 is not None and not (isinstance(data_sha256, str) and len(data_sha256) == 64
                                        and set(data_sha256) <= set("0123456789abcdef")):
        fail(f"data_sha256 must be a SHA-256 in hex (64 digits), got {data_sha256!r}")
    return config, runs, started_in, data_sha256


#: The files a run writes in ``--out`` besides its checkpoints (``checkpoints/*.npz``).
_OUT_FILES = ("config.json", "metrics.json", "loss.png", "scales.png", *(f"{name}.json" for name in EXPERIMENTS))


def _holds_earlier_run(out: Path) -> bool:
    """Whether ``out/config.json`` is one that train_tiny wrote: a JSON object with a config and a list of runs."""
    try:
        saved = _load_json_object(out / "config.json")
    except (OSError, ValueError):
        return False
    return (isinstance(saved.get("config"), dict) and isinstance(saved.get("runs"), list)
            and {"recipe", "steps"} <= set(saved["config"]))


def _earlier_checkpoint_names(out: Path) -> set[str]:
    """The checkpoint file names of the runs ``out/config.json`` lists (``<slug>.npz``; none without
    that file). A ValueError where it lists a run this version cannot read (one written by another
    version, or edited): its checkpoints could not be told from a copy the user kept there."""
    if not os.path.lexists(out / "config.json"):
        return set()
    try:
        saved = _load_json_object(out / "config.json")
        return {f"{Run(**entry).slug}.npz" for entry in saved["runs"]}
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ValueError(f"config.json lists an earlier run this version cannot read ({error}), so its "
                         f"checkpoints cannot be told from others kept there; choose a new or empty directory, "
                         f"or move it away") from None


def _check_checkpoints_directory(out: Path) -> None:
    """A ValueError where ``out/checkpoints`` exists but is no directory: the run would train until its
    first checkpoint and fail there (and a resumed one start again from step 0, finding none)."""
    if os.path.lexists(out / "checkpoints") and not (out / "checkpoints").is_dir():
        raise ValueError("checkpoints exists and is not a directory: a run writes its checkpoints into "
                         "checkpoints/; move it away")


def _prepare_out(out: Path, config: TrainConfig, runs: list[Run], print_fn, data_sha256: str | None = None) -> None:
    """Make ``out`` and write its ``config.json`` (the config, the runs, the `environment` they
    start in and the training text's SHA-256; a resumed run keeps the one it continues). A
    new run replaces an earlier one there: its ``config.json``, its checkpoints (which could
    otherwise be resumed under the new config) and its results (``metrics.json``, ``loss.png``,
    ``scales.png``, an experiment's results file), which a new run that stops early would otherwise
    leave beside its own config. Only an earlier run's: a directory that holds any of those files but no
    ``config.json`` that train_tiny wrote, or one that lists a run this version cannot read, is refused
    (ValueError), and nothing in it is touched;
    other files (notes, an empty directory, a checkpoint copied under a name no run of either
    config takes) are no obstacle and stay."""
    if os.path.lexists(out) and not out.is_dir():
        raise ValueError("exists and is not a directory: --out names the directory a run writes into")
    if config.resume is not None:
        out.mkdir(parents=True, exist_ok=True)
        return
    if out.is_dir() and _holds_earlier_run(out):  # (without one, the check below names it with the rest)
        _check_checkpoints_directory(out)
    if out.is_dir() and not _holds_earlier_run(out):
        taken = [name for name in _OUT_FILES if os.path.lexists(out / name)]
        if (out / "checkpoints").is_dir():
            taken += [f"checkpoints/{path.name}" for path in sorted((out / "checkpoints").glob("*.npz"))]
        elif os.path.lexists(out / "checkpoints"):
            taken.append("checkpoints (not a directory)")
        if taken:
            shown = ", ".join(taken[:4]) + (f" and {len(taken) - 4} more" if len(taken) > 4 else "")
            raise ValueError(f"holds {shown}, which a run would overwrite or remove, but no config.json of an "
                             f"earlier train_tiny run; choose a new or empty directory, or move them away")
    earlier = _earlier_checkpoint_names(out)
    out.mkdir(parents=True, exist_ok=True)
    # the earlier run's checkpoints, and any under a name this run's will take; other files (a copy
    # the user kept, fp32_keep.npz) stay
    names = earlier | {f"{run.slug}.npz" for run in runs}
    stale = [path for path in sorted((out / "checkpoints").glob("*.npz")) if path.name in names]
    for path in stale:
        path.unlink()
    if stale:
        print_fn(f"--out {out}: removed {len(stale)} checkpoint(s) of an earlier run there")
    results = [out / name for name in _OUT_FILES if name != "config.json"]  # (config.json is rewritten below)
    results = [path for path in results if path.is_file()]
    for path in results:
        path.unlink()
    if results:
        print_fn(f"--out {out}: removed the results of an earlier run there ({', '.join(p.name for p in results)})")
    saved_config = {**asdict(config), "resume": None, "stop_after": None}
    _write_text(out / "config.json", json.dumps({"config": saved_config, "runs": [asdict(run) for run in runs],
                                                 "environment": environment(), "data_sha256": data_sha256},
                                                indent=1) + "\n")


def _memory_needed(config: TrainConfig, runs: list[Run], vocab_size: int) -> dict:
    """A lower bound on the bytes a run holds at once, in parts, so that `main` can refuse a run
    that cannot fit before it starts (Linux grants an allocation larger than the machine and kills
    the process, without a word, once it touches the pages).

    Counted, and nothing else: the validation batches, built before the first step and kept for
    every evaluation (``--eval-batches`` pairs of int64 arrays of ``batch_size x block_size``) and
    one training batch; one step's activations, at their fewest (per token of a worker's shard:
    each layer's attention probabilities, ``n_head * block_size`` float32 numbers, and its MLP's
    hidden and output activations, ``5 * n_embd``; and the logits, ``vocab_size``); and each of the
    ``12 n_layer n_embd^2 + vocab_size n_embd`` parameters (at least) as a float32 weight and
    gradient. A real step holds several times more (the backward's temporaries, the FP8 casts'
    copies, the optimizer's moments: 3.6x to 15x this bound, measured on runs that fit, and about
    22x for large batches of short windows, ``--block-size 8``, where the activations the bound
    counts at their fewest are nearly all): the bound only catches a run that cannot fit, and
    never refuses one that can. A run between the two can still exhaust the machine.
    """
    tokens = config.batch_size * config.block_size
    batch = 2 * 8 * tokens  # x and y, int64
    shard = tokens // max(run.workers for run in runs)  # (--fp8-allreduce runs a worker's shard at a time)
    per_token = config.n_layer * (config.n_head * config.block_size + 5 * config.n_embd) + vocab_size
    parameters = 12 * config.n_layer * config.n_embd ** 2 + vocab_size * config.n_embd
    return {"validation batches": config.eval_batches * batch, "a step's batch and activations": batch + 4 * shard
            * per_token, "weights and gradients": 8 * parameters}


#: The least memory `minifp8.data.load_dataset` holds at once per byte of a text file: at its peak,
#: ``N (2 c + 8)`` bytes for N characters stored at c bytes each (its docstring), which is 10 a byte
#: for ASCII and at least 4 for any UTF-8 (4 for characters of 3 or 4 bytes). A lower bound, so that
#: no file that fits is refused.
_TEXT_BYTES_PER_FILE_BYTE = 4


def _physical_memory() -> int | None:
    """The machine's physical memory in bytes, where the OS tells it (``os.sysconf``), else None."""
    if sys.platform == "win32":  # (no os.sysconf; said so that type checkers for Windows know it too)
        return None
    try:
        size = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # (no sysconf, or not these names: Windows, some BSDs)
        return None
    return size if size > 0 else None


def _bytes(size: int) -> str:
    """``size`` bytes in the largest binary unit that keeps the number at 1 or more: ``3.57 MiB``."""
    for exponent, unit in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 2 ** exponent:
            value = size / 2 ** exponent
            return f"{value:,.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
    return f"{size} bytes"


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status: 0 ok, 1 a run diverged, 2 bad flags or data (or a
    CPU that flushes subnormals or rounds other than to nearest,
    `minifp8.codec._check_float_environment`), 130 stopped (``--stop-after``, Ctrl-C), 143 stopped
    by SIGTERM (checkpointed), 141 its output closed (``| head``: the status of a process that
    SIGPIPE ends; Python ignores SIGPIPE, so a write raises BrokenPipeError instead); 2 too where
    stdout cannot be written (a full disk: the run stops there, its checkpoints standing, and a run
    list that has finished still writes its results to ``--out``)."""
    try:
        with guarded_stdout():
            status = _main(argv)
            flush_stdout()  # (else the buffered write that meets a closed pipe comes at exit, uncaught)
        return status
    except BrokenPipeError:  # the reader of the output went away: stop quietly, as SIGPIPE would
        silence_stdout()
        return SIGPIPE_STATUS
    except StdoutError as error:
        return report_stdout_error("python -m minifp8.train_tiny", error)
    except KeyboardInterrupt:  # Ctrl-C outside the steps of a run, which `train` handles: loading the data
        print("python -m minifp8.train_tiny: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    try:
        config, runs = parse_args(argv)
    except SystemExit as exit_:  # -h, or parser.error
        return int(exit_.code or 0)
    prog = "python -m minifp8.train_tiny"

    def say(message: str) -> None:  # an error, in one line (a path or a flag's value may hold a newline)
        print(one_line(message), file=sys.stderr)

    try:
        codec._check_float_environment()  # (in one line here, not as the first cast's traceback)
    except FloatingPointError as error:
        say(f"{prog}: {error}")
        return 2
    recorded_sha256 = started_in = None
    if config.resume is not None:
        resume_dir = Path(config.resume)
        try:
            config, runs, started_in, recorded_sha256 = _resumed(resume_dir, config.stop_after)
        except (OSError, ValueError, KeyError, TypeError) as error:
            say(f"{prog}: error: --resume {resume_dir}: not a train_tiny output directory, or not one this "
                f"version can continue ({error})")
            return 2
        now = environment()
        if started_in is not None and _environment_changed(started_in, now):
            kernels, threads = started_in.get("blas_kernels"), started_in.get("blas_threads")
            remedies = []
            if kernels and kernels != now["blas_kernels"]:
                remedies.append(f"OPENBLAS_CORETYPE={kernels} picks those kernels")
            if threads and threads != now["blas_threads"]:
                remedies.append(f"OPENBLAS_NUM_THREADS={threads} those threads")
            code_changed = started_in.get("minifp8") not in (None, now["minifp8"])
            differs = ("may differ from an uninterrupted run (CHANGELOG.md lists what changed)"
                       if code_changed else "may differ in its last bits from an uninterrupted run")
            print(f"note: --resume {resume_dir}: started with {environment_line(started_in)}, continues with "
                  f"{environment_line(now)}; the continuation {differs}"
                  + (f" ({', '.join(remedies)})" if remedies else ""))
    elif config.data is not None:  # a later --resume may run elsewhere
        config = replace(config, data=os.path.abspath(config.data))
    available = _physical_memory()
    if config.data is not None and available is not None and os.path.isfile(config.data) and \
            _TEXT_BYTES_PER_FILE_BYTE * os.path.getsize(config.data) > available:
        say(f"{prog}: error: --data {config.data}: {_bytes(os.path.getsize(config.data))}, too big to read and "
            f"tokenize in this machine's {_bytes(available)} of memory (it takes at least "
            f"{_TEXT_BYTES_PER_FILE_BYTE} bytes per byte of the file, 10 for ASCII); use a smaller file")
        return 2
    try:
        dataset = data_module.load_dataset(config.data, seed=config.seed)
    except (OSError, ValueError) as error:  # (under --resume, the --data of the run it continues)
        flag = "--data" if config.resume is None else f"--resume {resume_dir}: the run's --data"
        moved = ""
        if config.resume is not None and isinstance(error, FileNotFoundError):
            moved = (f" (moved? set \"data\" under \"config\" in {Path(resume_dir) / 'config.json'} to where it is "
                     f"now: the run checks the text's SHA-256)")
        say(f"{prog}: error: {flag}: {error}{moved}")
        return 2
    except MemoryError:  # (tokenizing holds several times the file's size at its peak: data.load_text)
        say(f"{prog}: error: --data {config.data}: out of memory while reading and tokenizing it; use a "
            f"smaller file")
        return 2
    data_sha256 = dataset.text_sha256
    if recorded_sha256 is not None and recorded_sha256 != data_sha256:
        say(f"{prog}: error: --resume {resume_dir}: the training text {dataset.name} is not the text this run "
            f"started on (SHA-256 {recorded_sha256[:16]}... in config.json, {data_sha256[:16]}... now); "
            f"restore it, or start afresh without --resume")
        return 2
    smallest = min(dataset.train.size, dataset.val.size)
    if config.block_size >= smallest:
        say(f"{prog}: error: --block-size {config.block_size} needs more than {config.block_size} tokens in each "
            f"split, but {dataset.name} has {smallest} in its smaller split")
        return 2
    if dataset.vocab_size < 2:
        say(f"{prog}: error: --data: {dataset.name} holds a single distinct character; a language model needs "
            f"at least 2")
        return 2
    needed = _memory_needed(config, runs, dataset.vocab_size)
    if available is not None and sum(needed.values()) > available:
        parts = ", ".join(f"{name} {_bytes(size)}" for name, size in needed.items())
        say(f"{prog}: error: --batch-size {config.batch_size} --block-size {config.block_size} --eval-batches "
            f"{config.eval_batches} --n-layer {config.n_layer} --n-embd {config.n_embd}: a run needs at least "
            f"{_bytes(sum(needed.values()))} of memory ({parts}), more than this machine's {_bytes(available)}; "
            f"use smaller values")
        return 2
    _tune_malloc()
    out = Path(config.out) if config.out is not None else None
    if out is not None:
        try:
            _prepare_out(out, config, runs, print, data_sha256)
        except BrokenPipeError:  # (printing, not --out: `main`)
            raise
        except (OSError, ValueError) as error:
            say(f"{prog}: error: --out {out}: {error}")
            return 2
    window_floor = dataset.window_loss_floor(config.block_size)
    if window_floor is not None:
        floors = (f", loss floor {window_floor:.3f} for {config.block_size}-character windows (entropy rate "
                  f"{dataset.loss_floor:.3f} with whole lines of context)")
    else:
        floors = "" if dataset.loss_floor is None else f", entropy rate {dataset.loss_floor:.3f}"
    print(f"data: {dataset!r}{floors}")
    print(f"environment: {environment_line(environment())} (other kernels round GEMMs differently: README, "
          f"\"Results and BLAS kernels\")")
    if config.report_memory:  # FP8-LM's memory table for each model family trained
        for family in dict.fromkeys(run.family for run in runs):
            model = GPT(_model_config(config, family, dataset.vocab_size), rng=np.random.default_rng(config.seed))
            print(f"{family} model, {fp8lm.format_memory_table(fp8lm.memory_rows(model))}\n")
    results: dict[str, dict] = {}
    status = 0
    session_steps = [0]  # --stop-after counts the steps of this session, over all its runs
    hint = f"; continue with --resume {shlex.quote(str(out))}" if out is not None else " (no --out: nothing saved)"

    def stopped(stop: Interrupted, first_waiting: int) -> int:
        """Write the runs finished so far (readable before a resume ends the rest), say where the list
        stopped and return the exit status."""
        waiting = [later.label for later in runs[first_waiting:]]  # (not started in this session)
        if out is not None and results:  # (first: a print that meets a closed pipe ends the session)
            try:
                _write_outputs(out, config, runs, results, dataset, print, started_in)
            except BrokenPipeError:  # (printing, not --out: `main`)
                raise
            except OSError as error:
                say(f"{prog}: error: --out {out}: {error}")
            except KeyboardInterrupt:  # (a second Ctrl-C: the checkpoints stand)
                pass
        print(f"{stop}{hint}" + (f" (not started yet: {', '.join(waiting)})" if waiting else ""))
        return stop.status

    for run in runs:
        budget = None if config.stop_after is None else config.stop_after - session_steps[0]
        if budget == 0:  # the last run stopped exactly at the budget, at its end: this one waits
            steps = f"{config.stop_after} step{'s' * (config.stop_after != 1)}"
            return stopped(Interrupted(f"stopped after {steps} in this session, before {run.label}"),
                           runs.index(run) + 1)
        try:
            results[run.label] = train(run, config, dataset, out=out, resume=config.resume is not None,
                                       stop_after=budget, steps_counter=session_steps)
            if results[run.label]["diverged"]:  # diverged in an earlier session (reported there)
                status = 1
        except Diverged as error:
            say(f"{prog}: error: {error}")
            results[run.label] = error.metrics
            status = 1
        except Interrupted as stop:
            if stop.metrics is not None:  # (finished when the signal was taken)
                results[run.label] = stop.metrics
            return stopped(stop, runs.index(run) + 1)
        except CheckpointError as error:
            say(f"{prog}: error: --resume: {error}")
            return 2
        except BrokenPipeError:  # (printing, not --out: `main`)
            raise
        except OSError as error:  # a checkpoint that cannot be written (disk full, a file in the way)
            say(f"{prog}: error: --out {out}: {error}")
            return 2
        except MemoryError as error:
            say(f"{prog}: error: {run.label}: out of memory ({str(error) or 'MemoryError'}); use a smaller "
                f"--batch-size, --block-size, --n-embd or --n-layer")
            return 2
    try:
        print()
        print(_summary_table(runs, results, dataset.task == "arithmetic"))
        if note := _every_run_note(config):
            flags = (["--fp32-lm-head"] * config.fp32_lm_head
                     + [f"--fp32-modules {config.fp32_modules}"] * (config.fp32_modules is not None)
                     + ["--center-lm-head"] * config.center_lm_head)
            print(f"({' '.join(flags)}: {note} in every run)")
    except StdoutError:  # (the runs have finished: their results still go to --out, unannounced)
        if out is not None:
            with contextlib.suppress(OSError, StdoutError):
                _write_outputs(out, config, runs, results, dataset, lambda *args, **kwargs: None, started_in)
        raise
    if out is not None:
        try:
            _write_outputs(out, config, runs, results, dataset, print, started_in)
            if config.experiment is not None:
                results_file = out / f"{config.experiment}.json"
                metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
                _write_text(results_file, _strict_json(headline_results(metrics)))
                committed = HEADLINE_RESULTS.with_name(results_file.name)
                print(f"wrote {results_file} (the committed copy is {committed})")
        except BrokenPipeError:  # (printing, not --out: `main`)
            raise
        except OSError as error:
            say(f"{prog}: error: --out {out}: {error}")
            return 2
        except KeyboardInterrupt:
            print(f"interrupted while writing the results to {out} (the checkpoints stand)", file=sys.stderr)
            return 130
    return status


if __name__ == "__main__":
    escape_unencodable_stdout()  # (a path that is not UTF-8, or not in stdout's encoding, prints escaped)
    line_buffered_stdout()  # (a long run under nohup or | tee shows its progress as it comes)
    sys.exit(main())
