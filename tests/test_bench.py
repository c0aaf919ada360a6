"""``python -m minifp8.bench`` runs: smoke tests of every section (their lines, and ratios that
are positive finite numbers consistent with the times printed beside them; no speed is asserted
here, speed is read from the benchmark's own output)."""
import argparse
import contextlib
import inspect
import io
import math
import os
import re

import numpy as np
import pytest

from minifp8 import bench, fp8


def test_train_section_reports_every_recipe(capsys):
    assert bench.main(["--steps", "3", "train"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and " cores" in out.splitlines()[0]  # the context to read ratios with
    for recipe in fp8.RECIPES:
        assert f"train step under {recipe} " in out
    assert out.count("fp32 step") == len(fp8.RECIPES) and "3 steps per recipe, each beside an fp32 run" in out


def test_machine_line_names_the_processor(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD   EPYC 7B13\n\nprocessor\t: 1\n"
                       "model name\t: AMD EPYC 7B13\n")
    cpu_name = bench.cpu_name
    assert cpu_name(str(cpuinfo)) == "AMD EPYC 7B13"  # the first, its spaces collapsed
    monkeypatch.setattr(bench, "cpu_name", lambda: "Some CPU")
    assert bench.machine_line().startswith("machine: ") and " cores (Some CPU), minifp8 " in bench.machine_line()
    monkeypatch.setattr(bench, "cpu_name", lambda: None)
    assert "(" not in bench.machine_line().split(", minifp8")[0]
    import platform

    monkeypatch.setattr(platform, "processor", lambda: "")
    assert cpu_name(str(tmp_path / "absent")) is None
    cpuinfo.write_text("processor\t: 0\nmodel name\t:   \n")
    assert cpu_name(str(cpuinfo)) is None  # an empty name is no name


def test_machine_line_names_the_ml_dtypes_version_where_it_can_be_imported(monkeypatch):
    """The codec section's ratios are against ml_dtypes' ``astype``, whose speed changed between its
    versions (minifp8's encode at x1.30 the speed of 0.5.1's, x0.79 of 0.7.0's, on one machine): a
    review found that the line, and the JSON that records it, named no version."""
    import sys
    import types

    monkeypatch.setattr(bench, "cpu_name", lambda: "Some CPU")
    monkeypatch.setitem(sys.modules, "ml_dtypes", types.SimpleNamespace(__version__="9.8.7"))
    line = bench.machine_line()
    assert re.fullmatch(r"machine: \d+ cores \(Some CPU\), minifp8 \S+, numpy \S+, .*, ml_dtypes 9\.8\.7"
                        r"(, load average \d+\.\d\d over the last minute before the run)?", line), line
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # (not installed: its import raises ImportError)
    assert "ml_dtypes" not in bench.machine_line() and bench.ml_dtypes_version() is None


def test_train_section_times_the_recipes_and_width_asked_for(capsys):
    assert bench.main(["--steps", "2", "--recipes", "blockwise, mxfp8", "--n-embd", "32", "train"]) == 0
    out = capsys.readouterr().out
    timed = [line.split("train step under ")[1].split()[0] for line in out.splitlines() if "train step under" in line]
    assert timed == ["blockwise", "mxfp8", "fp32"]
    assert "default config at another width: unit-scaled, 2 layers, n_embd 32," in out
    assert "target" not in out  # the targets are stated for the default width


def test_family_auto_pairs_each_recipe_with_fp32_in_train_tinys_family_for_it(capsys, monkeypatch):
    from minifp8 import train_tiny
    built = []
    real_build = train_tiny._build
    monkeypatch.setattr(train_tiny, "_build", lambda run, *args: built.append((run.recipe, run.family)) or
                        real_build(run, *args))
    assert bench.main(["--steps", "2", "--recipes", "unit,blockwise", "--family", "auto", "train"]) == 0
    assert built == [("fp32", "unit"), ("unit", "unit"), ("fp32", "standard"), ("blockwise", "standard")]
    out = capsys.readouterr().out
    assert "each recipe in train_tiny's family for it" in out and "all 2 runs, standard and unit;" in out
    assert "its fp32" in out and ", standard) (target <= 1.5)" in out
    built.clear()
    assert bench.main(["--steps", "1", "--recipes", "blockwise", "train"]) == 0  # the default: unit-scaled
    assert built == [("fp32", "unit"), ("blockwise", "unit")]


def test_bad_arguments_exit_with_a_message(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["nonsense"])
    assert exit_.value.code == 2 and "unknown section" in capsys.readouterr().err


def test_rounds_and_repeats_must_be_positive(capsys):
    for flag, section in (("--repeats", "codec"), ("--rounds", "fp8"), ("--steps", "train"), ("--n-embd", "train")):
        with pytest.raises(SystemExit):
            bench.main([flag, "0", section])  # (a section that reads the flag: else that is the error)
        assert f"{flag} must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--n-embd", "66"], "--n-embd must be a multiple of the default run's 4 heads, got 66"),
    (["--recipes", "fp32"], "got 'fp32'"),
    (["--recipes", "unit,nope"], "got 'nope'"),
    (["--recipes", ","], "got '', ''"),
    (["--recipes", "fp8,,current"], "got ''"),  # (an empty entry was dropped without a word; train_tiny refuses it)
    (["--recipes", "fp8, unit,fp8"], "--recipes lists a recipe twice: fp8,unit,fp8"),  # (timed twice, reported once)
    (["--json", "no/such/folder/speed.json"], "--json takes the path of a file in an existing folder, got "
                                              "'no/such/folder/speed.json'"),
    (["--json", "."], "--json takes the path of a file in an existing folder, got '.' (a folder)"),
    (["--mx-scale-mode", "up"], "invalid choice: 'up'"),
    (["--recipes", "unit,current", "--mx-scale-mode", "rceil"],
     "--mx-scale-mode sets mxfp8's block scales, but --recipes leaves mxfp8 out: unit,current"),
])
def test_bad_train_flags_exit_with_a_message(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv + ["train"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--steps", "-1", "train"], ["nonsense"], ["--repeats", "x"],
                                  ["--recipes", "nope", "train"], ["--n-embd", "30", "train"]])
def test_errors_are_one_line(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("python -m minifp8.bench: error: ") and err.rstrip().endswith("(see -h)")


@pytest.mark.parametrize("argv, message", [
    (["--steps", "2", "--repeats", "1", "mx"], "--steps applies to the train section, which is not selected"),
    (["--recipes", "unit", "--repeats", "1", "mx"], "--recipes applies to the train section"),
    (["--n-embd", "32", "--repeats", "1", "mx"], "--n-embd applies to the train section"),
    (["--family", "auto", "--repeats", "1", "mx"], "--family applies to the train section"),
    (["--rounds", "2", "--repeats", "1", "mx"], "--rounds applies to the fp8 section"),
    (["--json", "speed.json", "--repeats", "1", "mx"], "--json applies to the train section"),
    (["--mx-scale-mode", "rceil", "--repeats", "1", "mx"], "--mx-scale-mode applies to the train section"),
    (["--repeats", "2", "--steps", "1", "--recipes", "unit", "train"],
     "--repeats applies to the codec, block, mx and fp8 sections"),
])
def test_flags_of_sections_not_run_are_refused_not_ignored(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and message in captured.err and captured.out == ""


@pytest.mark.parametrize("argv, message", [
    (["codec", "--recipes", "fp32"], "--recipes applies to the train section, which is not selected (sections: codec)"),
    (["codec", "--json", "/no/such/x.json"], "--json applies to the train section"),
    (["codec", "--json", ""], "--json applies to the train section"),
    (["mx", "--steps", "0"], "--steps applies to the train section"),
    (["mx", "--n-embd", "30"], "--n-embd applies to the train section"),
    (["codec", "--recipes", "unit", "--mx-scale-mode", "rceil"], "--recipes applies to the train section"),
    (["train", "--repeats", "0"], "--repeats applies to the codec, block, mx and fp8 sections"),
    (["nonsense", "--repeats", "0"], "unknown section(s) 'nonsense'; choose from "),
    (["nonsense", "--recipes", "fp32"], "unknown section(s) 'nonsense'"),
    (["codec", "codec", "--repeats", "0"], "section(s) codec listed more than once: codec codec"),
    (["codec", "codec", "--steps", "1"], "section(s) codec listed more than once"),
])
def test_sections_are_checked_first_then_whether_each_flag_applies_then_its_value(capsys, argv, message):
    """A review's find: the flags' values were checked before the sections, so ``bench codec --recipes
    fp32`` complained about the recipe, not that the codec section reads no --recipes, and ``bench
    nonsense --repeats 0`` about the repeats."""
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.out == "" and len(captured.err.splitlines()) == 1, captured.err
    assert captured.err.startswith("python -m minifp8.bench: error: ") and message in captured.err, captured.err
    assert captured.err.rstrip().endswith("(see -h)")


def test_alternating_rounds_report_progress_on_stderr(capsys):
    seconds = bench.alternating_rounds({"fp32": lambda: None, "fp8": lambda: None}, rounds=3, repeats=1)
    assert [len(times) for times in seconds.values()] == [3, 3]
    captured = capsys.readouterr()
    assert captured.out == ""
    progress = [line.split(",")[0] for line in captured.err.splitlines()]
    assert progress == ["  ... round 1/3 done", "  ... round 2/3 done"]
    assert "eta" in captured.err


@pytest.mark.parametrize("family", ["unit", "standard"])
def test_train_section_follows_the_path_of_train_tiny(capsys, monkeypatch, family):
    """The bench's steps are train_tiny's: the same batches, learning-rate schedule and (in the
    standard family, ``--family auto``) gradient clipping, so the same losses, bit for bit, as
    ``python -m minifp8.train_tiny --recipe R`` (its first steps). Before, the bench drew other
    batches and trained at the peak learning rate from step 0, and did not clip. The recipe is
    delayed, whose losses move if a step skips the FP8 state's step (current's do not: a review
    found a bench without ``state.step()`` passed)."""
    from minifp8 import train_tiny
    from minifp8.autograd import is_grad_enabled

    losses = {}
    real_build = train_tiny._build

    def recording_build(run, config, vocab_size):  # records the training steps' losses (not evaluations)
        built = real_build(run, config, vocab_size)
        model, forward = built[0], built[0].forward
        record = losses.setdefault((run.recipe, "bench" if "bench" in losses else "train_tiny"), [])

        def recorded(*args):
            logits, loss = forward(*args)
            if is_grad_enabled():
                record.append(float(loss.data))
            return logits, loss

        model.forward = recorded
        return built

    monkeypatch.setattr(train_tiny, "_build", recording_build)
    losses["bench"] = True
    assert bench.main(["--steps", "4", "--recipes", "delayed", "train"] + (["--family", "auto"] if family == "standard"
                                                                          else [])) == 0
    del losses["bench"]
    for recipe in ("fp32", "delayed"):  # (delayed: its casts read the amax history its state's step keeps)
        config, runs = train_tiny.parse_args(["--recipe", recipe, "--family", family, "--stop-after", "4"])
        with pytest.raises(train_tiny.Interrupted):
            train_tiny.train(runs[0], config, train_tiny.data_module.load_dataset(), stop_after=4,
                             print_fn=lambda *args: None)
        assert losses[(recipe, "bench")] == losses[(recipe, "train_tiny")] and len(losses[(recipe, "bench")]) == 4


def test_the_default_width_asked_for_is_the_default_config(capsys):
    assert bench.main(["--steps", "2", "--recipes", "fp8", "--n-embd", "64", "train"]) == 0
    out = capsys.readouterr().out
    assert "default config: unit-scaled" in out and "(target <= 1.5)" in out


def test_json_holds_what_the_train_section_printed(capsys, tmp_path):
    import json
    path = tmp_path / "speed.json"
    assert bench.main(["--steps", "40", "--recipes", "mxfp8,unit", "--json", str(path), "train"]) == 0
    out = capsys.readouterr().out
    document = bench.load_speed_results(path)
    assert document == json.loads(path.read_text())
    assert out.rstrip().endswith(f"wrote {path}")
    assert document["machine"] in out.splitlines()[0] and document["steps"] == 40 and document["window_steps"] == 2
    assert document["model"] == {"family": "unit", "n_layer": 2, "n_embd": 64, "batch_size": 32, "block_size": 32}
    assert document["mx_scale_mode"] == "floor"
    assert list(document["recipes"]) == ["mxfp8", "unit"]
    for recipe, target in (("mxfp8", 2.0), ("unit", 1.5)):
        measured = document["recipes"][recipe]
        line = next(line for line in out.splitlines() if f"train step under {recipe} " in line)
        printed = re.search(r"([\d.]+) ms .* x ?([\d.]+) fp32 step \(first tenth ([\d.]+), last ([\d.]+); "
                            r"its fp32 ([\d.]+) ms", line).groups()
        # (the file keeps 4 decimals, the line 2 (1 for the pair's fp32): equal to within the rounding)
        for key, text in zip(("step_ms", "ratio", "first_tenth", "last_tenth", "fp32_step_ms"), printed):
            assert abs(measured[key] - float(text)) <= 0.5 * 10.0 ** -len(text.split(".")[1]) + 1e-3, (key, text)
        assert measured["target"] == target and measured["family"] == "unit" and len(measured["window_ratios"]) == 20
        assert min(measured["window_ratios"]) <= measured["ratio"] <= max(measured["window_ratios"])
    fp32_line = next(line for line in out.splitlines() if "train step under fp32 " in line)
    step_ms, tokens_per_second = re.search(r"([\d.]+) ms +([\d,]+) tok/s", fp32_line).groups()
    assert abs(document["fp32"]["step_ms"] - float(step_ms)) <= 0.006
    assert document["fp32"]["tokens_per_second"] == int(tokens_per_second.replace(",", ""))


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where no file can be created")
def test_json_that_cannot_be_written_is_refused_before_the_timing(capsys):
    """The train section timed every recipe, then open() raised FileNotFoundError with a traceback."""
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--steps", "2", "--recipes", "fp8", "--json", "/proc/x.json", "train"])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.out == "" and len(captured.err.splitlines()) == 1, captured
    assert captured.err.startswith("python -m minifp8.bench: error: --json /proc/x.json: cannot write it (")



@pytest.mark.skipif(not hasattr(os, "pathconf"), reason="needs os.pathconf for the file system's longest name")
def test_json_whose_temporary_file_cannot_be_written_is_refused_before_the_timing(capsys, tmp_path):
    """A review's find: the check opened the file, but the results are written to ``NAME.tmp`` first
    and renamed (`train_tiny._replace_whole`): a name of the file system's longest length passed the
    check, and the measurements were lost after the timing (File name too long)."""
    longest = os.pathconf(tmp_path, "PC_NAME_MAX")
    path = tmp_path / ("s" * (longest - len(".json")) + ".json")
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--steps", "1", "--recipes", "fp8", "--json", str(path), "train"])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.out == "", captured
    assert captured.err == (f"python -m minifp8.bench: error: --json {path}: cannot write it (File name too long, "
                            f"for the temporary file {path}.tmp written first) (see -h)\n")
    assert list(tmp_path.iterdir()) == []  # (the check's own file removed again)


def test_gradients_that_overflow_in_the_train_section_end_it_with_one_line(capsys, monkeypatch):
    """A review's find: a RuntimeError and its traceback (exit status 1); the help promises 2. The
    fp8 model's first weight gradient is made Inf after its backward."""
    from minifp8 import train_tiny
    from minifp8.autograd import Tensor

    real_build, real_backward, pending = train_tiny._build, Tensor.backward, []

    def overflowing_build(run, config, vocab_size):
        built = real_build(run, config, vocab_size)
        model, forward = built[0], built[0].forward
        if run.recipe == "fp8":
            model.forward = lambda *args: pending.append(model) or forward(*args)
        return built

    def backward(self, *args, **kwargs):
        real_backward(self, *args, **kwargs)
        if pending:
            pending.pop().parameters()[0].grad[...] = float("inf")

    monkeypatch.setattr(train_tiny, "_build", overflowing_build)
    monkeypatch.setattr(Tensor, "backward", backward)
    assert bench.main(["--steps", "1", "--recipes", "fp8", "train"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("python -m minifp8.bench: error: the gradients of fp8 overflowed at step 1: its steps "
                            "cannot be timed as train_tiny's (the lines above stand)\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_json_that_is_a_pipe_is_refused_before_the_timing(capsys, tmp_path):
    """A review's find: the check opened a FIFO to append, which blocked until a reader came and then
    handed it an empty file, and the write at the end blocked for ever. A path that exists and is no
    regular file (a pipe, a device) is refused with one line, before any timing; so is a pipe in
    the place of the temporary file written first (the check of it blocked before any line)."""
    fifo = tmp_path / "speed.json"
    os.mkfifo(fifo)
    for path in (str(fifo), os.devnull):
        with pytest.raises(SystemExit) as exit_:
            bench.main(["--steps", "1", "--recipes", "fp8", "--json", path, "train"])
        captured = capsys.readouterr()
        assert exit_.value.code == 2 and captured.out == "", captured
        assert captured.err == (f"python -m minifp8.bench: error: --json {path}: cannot write it (not a regular "
                                f"file (a pipe, socket or device): give a file path) (see -h)\n")
    path = tmp_path / "other.json"
    os.mkfifo(tmp_path / "other.json.tmp")
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--steps", "1", "--recipes", "fp8", "--json", str(path), "train"])
    assert exit_.value.code == 2 and capsys.readouterr().err == (
        f"python -m minifp8.bench: error: --json {path}: cannot write it (not a regular file (a pipe, socket or "
        f"device), for the temporary file {path}.tmp written first: give a file path) (see -h)\n")

def test_json_that_fails_at_the_end_gives_one_line_and_an_interrupted_run_leaves_no_file(capsys, tmp_path,
                                                                                        monkeypatch):
    """A write that fails after the timing (a full disk) is one line and exit status 2, not a
    traceback; the check before the timing leaves no empty file behind a run stopped early, and an
    existing file as it was."""
    from minifp8 import train_tiny

    from pathlib import Path
    path = tmp_path / "speed.json"
    write_text = Path.write_text

    def full_disk(self, text, *args, **kwargs):  # (part of the text written, then the disk is full)
        write_text(self, text[:100], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    # (the file was opened "w" and written in place: a full disk left an earlier file truncated)
    for earlier in (None, "an earlier run's measurements"):
        if earlier is not None:
            path.write_bytes(earlier.encode())
        assert bench.main(["--steps", "1", "--recipes", "fp8", "--json", str(path), "train"]) == 2
        captured = capsys.readouterr()
        assert "train step under fp8 " in captured.out
        assert (not path.exists()) if earlier is None else path.read_text() == earlier
        assert sorted(p.name for p in tmp_path.iterdir()) == ([] if earlier is None else ["speed.json"])
        assert captured.err == (f"python -m minifp8.bench: error: --json {path}: cannot write it (No space left "
                                f"on device); the measurements above are not saved\n")
    monkeypatch.undo()
    path.unlink()

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_tiny, "_build", interrupted)
    for earlier in (None, "an earlier run's measurements"):
        if earlier is not None:
            path.write_text(earlier)
        assert bench.main(["--steps", "1", "--recipes", "fp8", "--json", str(path), "train"]) == 130  # (Ctrl-C)
        assert capsys.readouterr().err == ("python -m minifp8.bench: interrupted in the train section; the lines "
                                           "above are complete\n")
        assert (path.read_text() if path.exists() else None) == earlier
        assert sorted(p.name for p in tmp_path.iterdir()) == ([] if earlier is None else ["speed.json"])


def test_mx_scale_mode_sets_the_block_scales_of_the_mxfp8_runs(capsys, tmp_path, monkeypatch):
    from minifp8 import fp8 as fp8_module
    applied, apply_recipe = [], fp8_module.apply_recipe
    monkeypatch.setattr(fp8_module, "apply_recipe",
                        lambda model, recipe, **options: applied.append((recipe, options))
                        or apply_recipe(model, recipe, **options))
    path = tmp_path / "speed.json"
    assert bench.main(["--steps", "3", "--recipes", "mxfp8", "--mx-scale-mode", "rceil", "--json", str(path),
                       "train"]) == 0
    printed = capsys.readouterr().out
    assert "train step under mxfp8 (rceil scales) " in printed and "target" not in printed  # (stated for floor)
    document = bench.load_speed_results(path)
    assert ("mxfp8", {"exclude": (), "scale_mode": "rceil"}) in applied and document["mx_scale_mode"] == "rceil"
    assert document["recipes"]["mxfp8"]["target"] is None


def test_json_of_another_width_states_no_target(tmp_path):
    path = tmp_path / "speed.json"
    assert bench.main(["--steps", "3", "--recipes", "blockwise", "--n-embd", "32", "--json", str(path), "train"]) == 0
    measured = bench.load_speed_results(path)["recipes"]["blockwise"]
    assert measured["target"] is None and len(measured["window_ratios"]) == 3  # windows of 1 step


def test_committed_speed_results_are_a_default_config_run_of_every_recipe():
    document = bench.load_speed_results()
    assert document["steps"] == 1000 and document["model"]["n_embd"] == 64 and document["model"]["family"] == "unit"
    assert list(document["recipes"]) == [recipe for recipe in fp8.RECIPES if recipe != "fp32"]



def test_only_no_path_reads_the_committed_speed_results():
    """None is the default; an empty path is no file, not the committed run (found by mutation
    testing: ``path or SPEED_RESULTS`` passed)."""
    with pytest.raises(OSError):
        bench.load_speed_results("")

# ---- the codec, block, mx and fp8 sections -----------------------------------------------------

#: A `bench.report` line: label, ms, optionally Melem/s and the speed ratio against a baseline.
REPORT_LINE = re.compile(r"  (?P<label>\S.*?) +(?P<ms>\d+\.\d\d) ms(?: +(?P<melem>\d+\.\d) Melem/s)?"
                         r"(?:   x ?(?P<speed>\d+\.\d\d) speed of baseline)?")
ROUNDS = 2
#: The sections' sizes here: the codec's and mx's arrays a sixteenth and a quarter of theirs, the
#: smallest whose steps take some milliseconds (the lines print ms to 2 decimals), and the GPT
#: block's batch a quarter: about 8 s of the test run, not 32.
CODEC_SIDE, MX_SIDE, BLOCK_SHAPE = 1 << 10, 2048, (4, 128, 256, 4)


@pytest.fixture(scope="module")
def short_run():
    """One run of the codec, block, mx and fp8 sections with the fewest repetitions (about 8 s on
    a 2-core machine): each section's stdout lines, and the (recipe, FP8State) of every
    ``fp8.apply_recipe`` call the fp8 section made."""
    applied, apply_recipe = [], fp8.apply_recipe

    def recording(model, recipe, **options):
        state = apply_recipe(model, recipe, **options)
        applied.append((recipe, state))
        return state

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(io.StringIO()):
        patch.setattr(fp8, "apply_recipe", recording)
        patch.setattr(bench, "CODEC_SIDE", CODEC_SIDE)
        patch.setattr(bench, "MX_SIDE", MX_SIDE)
        patch.setattr(bench, "BLOCK_SHAPE", BLOCK_SHAPE)
        assert bench.main(["--repeats", "1", "--rounds", str(ROUNDS), "codec", "block", "mx", "fp8"]) == 0
    sections, name = {}, None
    for line in out.getvalue().splitlines()[1:]:
        if re.fullmatch(r"\[\w+\]", line):
            name = line[1:-1]
            sections[name] = []
        else:
            sections[name].append(line)
    assert list(sections) == ["codec", "block", "mx", "fp8"]
    return sections, applied


def report_lines(lines: list) -> dict:
    """``{label: (ms, Melem/s or None, speed ratio or None)}`` of `bench.report` lines, each checked
    whole: positive finite numbers (an Inf or NaN prints as "inf" or "nan", which fails the match)."""
    parsed = {}
    for line in lines:
        match = REPORT_LINE.fullmatch(line)
        assert match, line
        numbers = [None if text is None else float(text) for text in match.group("ms", "melem", "speed")]
        assert all(number is None or (math.isfinite(number) and number > 0) for number in numbers), line
        parsed[match["label"]] = tuple(numbers)
    return parsed


def assert_consistent(parsed: dict, label: str, elements: int, baseline: str | None) -> None:
    """The Melem/s and the speed ratio of ``label``'s line agree with the times printed (to within
    their rounding): the ratio is the time of ``baseline``'s line over this one's."""
    ms, melem, speed = parsed[label]
    assert math.isclose(melem, elements / ms / 1e3, rel_tol=0.01, abs_tol=0.06), (label, melem)
    if baseline is None:
        assert speed is None, label
    else:
        assert math.isclose(speed, parsed[baseline][0] / ms, rel_tol=0.01, abs_tol=0.006), (label, speed)


def test_codec_section_reports_encode_and_decode_against_ml_dtypes(short_run):
    lines = short_run[0]["codec"]
    try:
        import ml_dtypes  # noqa: F401  (a test dependency; without it the section says so and has no ratios)
    except ImportError:
        assert lines[0].startswith("  (ml_dtypes is not installed: no baseline;")
        lines = lines[1:]
        have_baseline = False
    else:
        have_baseline = True
    parsed = report_lines(lines)
    expected = []
    for name in ("E4M3", "E5M2"):
        if have_baseline:
            expected += [f"ml_dtypes astype float32 -> {name}", f"ml_dtypes astype {name} -> float32"]
        expected += [f"minifp8 encode {name}", f"minifp8 decode {name}"]
    square = "minifp8 encode E4M3, a C-contiguous square"
    layouts = ["minifp8 encode E4M3, its transposed view", "minifp8 encode E4M3, its big-endian copy"]
    assert list(parsed) == expected + [square] + layouts
    for name in ("E4M3", "E5M2"):
        for label, baseline in ((f"minifp8 encode {name}", f"ml_dtypes astype float32 -> {name}"),
                                (f"minifp8 decode {name}", f"ml_dtypes astype {name} -> float32")):
            assert_consistent(parsed, label, CODEC_SIDE ** 2, baseline if have_baseline else None)
    assert_consistent(parsed, square, CODEC_SIDE ** 2, None)
    for label in layouts:
        assert_consistent(parsed, label, CODEC_SIDE ** 2, square)


def test_block_section_reports_the_step_against_its_gemms(short_run):
    lines = short_run[0]["block"]
    parsed = report_lines(lines[:2])
    assert list(parsed) == ["block forward+backward (autograd)", "the same GEMMs alone (NumPy)"]
    assert all(melem is None and speed is None for _, melem, speed in parsed.values())
    ratio = float(re.fullmatch(r"  ratio step / matmul: (\d+\.\d\d) \(target <= 2\)", lines[2])[1])
    step_ms, matmul_ms = parsed["block forward+backward (autograd)"][0], parsed["the same GEMMs alone (NumPy)"][0]
    assert ratio > 0 and math.isclose(ratio, step_ms / matmul_ms, rel_tol=0.01, abs_tol=0.006)
    assert len(lines) == 3


def test_mx_section_reports_quantize_against_encode_and_dequantize_against_decode(short_run):
    """Dequantize's baseline is the decode of E4M3 codes (the table lookup it adds block scales to),
    not the encode, as it once was."""
    lines = short_run[0]["mx"]
    parsed = report_lines(lines[:4])
    encode, quantize = "codec.encode E4M3 (baseline of quantize)", "mx.quantize MXFP8_E4M3"
    decode, dequantize = "codec.decode E4M3 (baseline of dequantize)", "MXArray.dequantize MXFP8_E4M3"
    assert list(parsed) == [encode, quantize, decode, dequantize]
    for label, baseline in ((encode, None), (quantize, encode), (decode, None), (dequantize, decode)):
        assert_consistent(parsed, label, MX_SIDE ** 2, baseline)
    ratios = re.fullmatch(r"  ratio quantize / encode: (\d+\.\d\d) \(target <= 1\.5\); "
                          r"dequantize / decode: (\d+\.\d\d)", lines[4]).groups()
    for text, (numerator, denominator) in zip(ratios, ((quantize, encode), (dequantize, decode))):
        assert float(text) > 0
        assert math.isclose(float(text), parsed[numerator][0] / parsed[denominator][0], rel_tol=0.01, abs_tol=0.006)
    assert len(lines) == 5


def test_fp8_section_reports_every_recipe_against_fp32(short_run):
    lines = short_run[0]["fp8"]
    line = re.compile(r"  step under (?P<recipe>\S+) +(?P<ms>\d+\.\d\d) ms   x ?(?P<ratio>\d+\.\d\d) fp32 step"
                      rf"(?: \((?P<low>\d+\.\d\d)-(?P<high>\d+\.\d\d) over {ROUNDS} rounds\))?"
                      r"(?: \(target <= (?P<target>[\d.]+)\))?")
    matches = [line.fullmatch(text) for text in lines]
    assert all(matches), lines
    assert [match["recipe"] for match in matches] == list(fp8.RECIPES)
    for match in matches:
        ms, ratio = float(match["ms"]), float(match["ratio"])
        assert math.isfinite(ms) and ms > 0 and math.isfinite(ratio) and ratio > 0, match[0]
        if match["recipe"] == "fp32":
            assert ratio == 1 and match["low"] is None and match["target"] is None
        else:
            assert float(match["low"]) <= ratio <= float(match["high"]), match[0]
        assert match["target"] == {"fp8": "1.5", "unit": "1.5", "mxfp8": "2"}.get(match["recipe"]), match[0]


def test_fp8_section_steps_each_recipes_state_as_training_does(short_run):
    """Each recipe is applied once, and every timed step ends with the FP8 state's step, so that
    delayed casts with the scales of its amax history. Before, the section applied each recipe again
    every round and never stepped the state: delayed cast with scale 1 throughout."""
    applied = short_run[1]
    assert [recipe for recipe, _ in applied] == list(fp8.RECIPES)
    calls = ROUNDS * (1 + 1)  # each round: one warmup call and one timed (--repeats 1)
    assert all(state.steps == calls for _, state in applied)
    delayed = dict(applied)["delayed"]
    scalers = [scaler for point in delayed.points.values() for scaler in point.scalers.values()]
    assert scalers and all(scaler.scale != 1 and math.isfinite(scaler.scale) for scaler in scalers)


# ---- a mutation audit's finds: the arithmetic of the reports with injected times, and each step's work ----------

class _Clock:
    """A fake ``time.perf_counter`` that `tick` advances by ``seconds`` a call."""

    def __init__(self, seconds: float):
        self.now, self.seconds, self.calls = 0.0, seconds, 0

    def perf_counter(self) -> float:
        return self.now

    def tick(self) -> None:
        self.calls += 1
        self.now += self.seconds


def test_alternating_rounds_eta_is_the_time_per_round_so_far_times_the_rounds_left(monkeypatch, capsys):
    """Two entries of 1 s a call, each a warmup and a timed call a round: 4 s a round. After round 1
    of 3, 4 s x 2 rounds left = 8 s; after round 2, 8 s / 2 rounds x 1 left = 4 s (found by mutation
    testing: an eta of the time per round times all 3 rounds passed)."""
    clock = _Clock(1.0)
    monkeypatch.setattr(bench.time, "perf_counter", clock.perf_counter)
    bench.alternating_rounds({"fp32": clock.tick, "fp8": clock.tick}, rounds=3, repeats=1)
    assert capsys.readouterr().err.splitlines() == ["  ... round 1/3 done, eta 8s", "  ... round 2/3 done, eta 4s"]


@pytest.mark.parametrize("warmup", [0, 2])
def test_alternating_rounds_passes_its_warmup_on(monkeypatch, capsys, warmup):
    """2 rounds of 3 timed calls, after ``warmup`` untimed ones each round: 2 x (3 + warmup) calls
    (found by mutation testing: a warmup left at median_seconds' default of 1 passed)."""
    clock = _Clock(1.0)
    monkeypatch.setattr(bench.time, "perf_counter", clock.perf_counter)
    assert bench.alternating_rounds({"fp32": clock.tick}, rounds=2, repeats=3, warmup=warmup) == {"fp32": [1.0, 1.0]}
    assert clock.calls == 2 * (3 + warmup)


def test_report_ratios_of_one_round_print_no_range(capsys):
    """``--rounds 1``: a 3 ms step against a 2 ms fp32 step is x1.50, with no range over one round
    (found by mutation testing: a "(1.50-1.50 over 1 rounds)" passed)."""
    bench.report_ratios({"fp32": [0.002], "fp8": [0.003]}, "step under", targets={"fp8": 1.5})
    fp32, fp8_line = capsys.readouterr().out.splitlines()
    assert fp32 == "  " + "step under fp32".ljust(44) + "      2.00 ms   x 1.00 fp32 step"
    assert fp8_line == "  " + "step under fp8".ljust(44) + "      3.00 ms   x 1.50 fp32 step (target <= 1.5)"


@pytest.fixture
def stepped_once(monkeypatch):
    """Replaces `bench.best_of_rounds`: each step is called once (its result kept) and the given
    ``seconds`` of its name are returned, so that a section's lines can be checked against times
    chosen by hand. Returns ``(times, calls)``: fill ``times`` before the run; ``calls`` gets one
    ``{name: result}`` per call, and ``encoded[name]`` the arrays each step passed to codec.encode."""
    from minifp8 import codec

    times, calls, seen = {}, [], [[]]  # seen[0]: where codec.encode's input goes (the step being called's list)
    real_encode = codec.encode

    def fake_best_of_rounds(steps, repeats, rounds=3):
        results, encoded = {}, {}
        for name, step in steps.items():
            seen[0] = encoded[name] = []
            results[name] = step()
        seen[0] = []
        calls.append({"results": results, "encoded": encoded})
        return {name: times[name] for name in steps}

    def recording_encode(x, *args, **kwargs):
        seen[0].append(x)
        return real_encode(x, *args, **kwargs)

    monkeypatch.setattr(codec, "encode", recording_encode)
    monkeypatch.setattr(bench, "best_of_rounds", fake_best_of_rounds)
    return times, calls


def test_codec_section_times_each_formats_casts_and_the_layouts_it_names(stepped_once, monkeypatch, capsys):
    """With times set by hand (encode 4 ms against ml_dtypes' 5, decode 2 ms against its 1; the C
    square 4 ms, its transposed view 5 and its big-endian copy 10) on 2^16 values, every line's
    Melem/s and speed ratio are these times' (2^16 / 4 ms = 16.4 Melem/s; x 5 / 4 = 1.25). Each
    format's steps cast in that format, ml_dtypes' to and from its dtype of the same name; the
    layouts are the C square, a transposed view of it and a big-endian copy (found by mutation
    testing: the E5M2 decode of E4M3, ml_dtypes' dtypes swapped, an astype to float16, an
    untransposed "transposed view", a little-endian "big-endian copy", the layouts encoded to E5M2
    and E5M2's decode step given E4M3 codes passed)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from minifp8 import codec

    times, calls = stepped_once
    times.update({"encode": 0.004, "decode": 0.002, "astype encode": 0.005, "astype decode": 0.001,
                  "a C-contiguous square": 0.004, "its transposed view": 0.005, "its big-endian copy": 0.010})
    monkeypatch.setattr(bench, "CODEC_SIDE", 1 << 8)
    bench.bench_codec(argparse.Namespace(repeats=1))
    expected = {}
    for name in ("E4M3", "E5M2"):
        expected.update({f"ml_dtypes astype float32 -> {name}": (5.0, 13.1, None),
                         f"ml_dtypes astype {name} -> float32": (1.0, 65.5, None),
                         f"minifp8 encode {name}": (4.0, 16.4, 1.25), f"minifp8 decode {name}": (2.0, 32.8, 0.5)})
    expected.update({"minifp8 encode E4M3, a C-contiguous square": (4.0, 16.4, None),
                     "minifp8 encode E4M3, its transposed view": (5.0, 13.1, 0.8),
                     "minifp8 encode E4M3, its big-endian copy": (10.0, 6.6, 0.4)})
    assert report_lines(capsys.readouterr().out.splitlines()) == expected
    assert len(calls) == 3
    for call, name, dtype in zip(calls, ("E4M3", "E5M2"), (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)):
        results = call["results"]
        (values,) = call["encoded"]["encode"]
        assert values.shape == ((1 << 8) ** 2,) and values.dtype == np.float32
        np.testing.assert_array_equal(results["encode"], codec.encode(values, name))
        np.testing.assert_array_equal(results["decode"], codec.decode(results["encode"], name))
        assert results["astype encode"].dtype == dtype and results["astype decode"].dtype == np.float32
        # (|values| < 448: no overflow, where ml_dtypes' E4M3 gives NaN and minifp8 saturates)
        np.testing.assert_array_equal(results["astype encode"].view(np.uint8), results["encode"])
        np.testing.assert_array_equal(results["astype decode"], results["decode"])
    layouts = {label: arrays[0] for label, arrays in calls[2]["encoded"].items()}
    square, transposed, big_endian = (layouts[label] for label in
                                      ("a C-contiguous square", "its transposed view", "its big-endian copy"))
    assert square.shape == (1 << 8, 1 << 8) and square.flags.c_contiguous and square.dtype == np.float32
    np.testing.assert_array_equal(square.reshape(-1), calls[0]["encoded"]["encode"][0])
    assert transposed.flags.f_contiguous and not transposed.flags.c_contiguous and np.shares_memory(transposed, square)
    np.testing.assert_array_equal(transposed, square.T)
    assert big_endian.dtype == np.dtype(">f4") and not np.shares_memory(big_endian, square)
    np.testing.assert_array_equal(big_endian, square)
    layout_codes = calls[2]["results"]  # (E4M3, as the lines say)
    for label, values in (("a C-contiguous square", square), ("its transposed view", square.T),
                         ("its big-endian copy", square)):
        np.testing.assert_array_equal(layout_codes[label], codec.encode(values, "E4M3"), err_msg=label)


def test_mx_section_quantizes_to_mxfp8_e4m3_against_the_e4m3_codec(stepped_once, monkeypatch, capsys):
    """With times set by hand on a 128 x 128 array (encode 2 ms, quantize 3, decode 1, dequantize
    4): quantize runs at x 2 / 3 = 0.67 the speed of the encode, 1.50 times its time, dequantize
    x 0.25, 4.00 times the decode's. The quantize is MXFP8_E4M3 of the array encoded, the decode
    of its E4M3 codes, the dequantize of its MXFP8_E4M3 quantization (found by mutation testing:
    a quantize to MXFP8_E5M2 and a decode of E5M2 passed)."""
    from minifp8 import codec, mx

    times, calls = stepped_once
    times.update({"encode": 0.002, "quantize": 0.003, "decode": 0.001, "dequantize": 0.004})
    monkeypatch.setattr(bench, "MX_SIDE", 128)
    bench.bench_mx(argparse.Namespace(repeats=1))
    lines = capsys.readouterr().out.splitlines()
    assert report_lines(lines[:4]) == {"codec.encode E4M3 (baseline of quantize)": (2.0, 8.2, None),
                                       "mx.quantize MXFP8_E4M3": (3.0, 5.5, 0.67),
                                       "codec.decode E4M3 (baseline of dequantize)": (1.0, 16.4, None),
                                       "MXArray.dequantize MXFP8_E4M3": (4.0, 4.1, 0.25)}
    assert lines[4:] == ["  ratio quantize / encode: 1.50 (target <= 1.5); dequantize / decode: 4.00"]
    (call,) = calls
    results, (values,) = call["results"], call["encoded"]["encode"]
    assert values.shape == (128, 128) and values.dtype == np.float32
    np.testing.assert_array_equal(results["encode"], codec.encode(values, "E4M3"))
    np.testing.assert_array_equal(results["decode"], codec.decode(results["encode"], "E4M3"))
    quantized = mx.quantize(values, mx.MXFP8_E4M3)
    assert results["quantize"].elem == quantized.elem and results["quantize"].block_size == quantized.block_size
    np.testing.assert_array_equal(results["quantize"].codes, quantized.codes)
    np.testing.assert_array_equal(results["quantize"].scales, quantized.scales)
    np.testing.assert_array_equal(results["dequantize"], quantized.dequantize())


class _CountedGemms(np.ndarray):
    """An array whose matmuls add their multiply-adds (2 flops each) to `flops`."""

    flops: list = []

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [item.view(np.ndarray) if isinstance(item, _CountedGemms) else item for item in inputs]
        result = getattr(ufunc, method)(*plain, **kwargs)
        if ufunc is np.matmul:
            _CountedGemms.flops.append(2 * result.size * plain[0].shape[-1])
        return result


def test_block_section_times_the_gemms_of_the_block_against_its_step(stepped_once, monkeypatch, capsys):
    """The baseline does the block's GEMMs, counted by hand for batch b, seq s, width d (any number
    of heads): four linears of d -> 3d, d -> d, d -> 4d and 4d -> d, each a forward, an input
    gradient and a weight gradient, 3 x 2 b s (3 + 1 + 4 + 4) d^2 flops; attention's scores,
    output and the gradients of v, probs, q and k, 6 x 2 b s^2 d. With the step 5 ms and the GEMMs
    2 ms (times set by hand), the ratio is 2.50 (found by mutation testing: a baseline without the
    gradient of q passed)."""
    times, calls = stepped_once
    times.update({"matmuls": 0.002, "step": 0.005})
    batch, seq, d, heads = 2, 8, 16, 2
    monkeypatch.setattr(bench, "BLOCK_SHAPE", (batch, seq, d, heads))
    stepped = []
    monkeypatch.setattr(bench, "_gpt_block", lambda *shape: (None, lambda: stepped.append(shape)))
    real_rng = np.random.default_rng

    class CountingRng:  # (the section's only generator draws the baseline's operands)
        def __init__(self, seed):
            self.rng = real_rng(seed)

        def standard_normal(self, shape):
            return self.rng.standard_normal(shape).view(_CountedGemms)

    monkeypatch.setattr(np.random, "default_rng", CountingRng)
    monkeypatch.setattr(_CountedGemms, "flops", [])
    bench.bench_block(argparse.Namespace(repeats=1))
    assert stepped == [(batch, seq, d, heads)]
    assert len(_CountedGemms.flops) == 4 * 3 + 6
    assert sum(_CountedGemms.flops) == 3 * 2 * batch * seq * 12 * d ** 2 + 6 * 2 * batch * seq ** 2 * d
    lines = capsys.readouterr().out.splitlines()
    assert report_lines(lines[:2]) == {"block forward+backward (autograd)": (5.0, None, None),
                                       "the same GEMMs alone (NumPy)": (2.0, None, None)}
    assert lines[2:] == ["  ratio step / matmul: 2.50 (target <= 2)"]


def test_gpt_block_is_causal_with_a_4x_mlp_and_steps_from_zero_gradients():
    """The block's parameters, counted by hand: two layer norms (2d each), linears d -> 3d, d -> d,
    d -> 4d and 4d -> d with biases: 12 d^2 + 13 d. A later position does not change an earlier
    one's output (causal). Every step starts from no gradients, the input's included, so that a
    second step leaves the gradients of the first (found by mutation testing: attention that is not
    causal, a 2x MLP, and the input's gradient summed over the steps passed)."""
    from minifp8.autograd import Tensor

    batch, seq, d, heads = 2, 6, 16, 2
    block, step = bench._gpt_block(batch, seq, d, heads)
    assert sum(p.data.size for p in block.parameters()) == 12 * d ** 2 + 13 * d
    rng = np.random.default_rng(5)
    x = rng.standard_normal((batch, seq, d))
    later = x.copy()
    later[:, -1] += rng.standard_normal((batch, d))  # (not a constant, which the layer norm takes away)
    out, out_later = block(Tensor(x)).data, block(Tensor(later)).data
    np.testing.assert_allclose(out_later[:, :-1], out[:, :-1], rtol=1e-6, atol=1e-6)
    assert not np.allclose(out_later[:, -1], out[:, -1])
    block_input = inspect.getclosurevars(step).nonlocals["x"]  # (the fixed input step() differentiates)
    assert block_input.requires_grad  # (a middle block)
    step()
    first = [p.grad.copy() for p in block.parameters() + [block_input]]
    step()
    for before, p in zip(first, block.parameters() + [block_input]):
        np.testing.assert_array_equal(p.grad, before)


class _FakeTrainer:
    """train_tiny's model, optimizer and FP8 state for the train section, whose every forward pass
    advances `clock` by 1 s: each timed step takes 1 s."""

    def __init__(self, clock: _Clock):
        self.clock = clock

    def __call__(self, x, y):
        self.clock.tick()
        return None, self

    def backward(self):
        pass

    def parameters(self):
        return []

    def zero_grad(self):
        pass

    def step(self):
        pass


@pytest.fixture
def fake_train_steps(monkeypatch):
    """The train section with `_FakeTrainer`'s steps (1 s unless ``clock.seconds`` is changed) and no
    data; returns ``(built, clock)``: the (recipe, family) of every build call, and the clock."""
    import types

    from minifp8 import data, train_tiny

    clock, built = _Clock(1.0), []
    monkeypatch.setattr(bench.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(bench, "machine_line", lambda: "machine: test")
    monkeypatch.setattr(train_tiny, "_set_lr", lambda *args: None)
    monkeypatch.setattr(data, "load_dataset", lambda: types.SimpleNamespace(vocab_size=14,
                                                                            get_batch=lambda *args: (None, None)))

    def build(run, config, vocab_size):
        built.append((run.recipe, run.family))
        trainer = _FakeTrainer(clock)
        return trainer, None, trainer, trainer, None, None

    monkeypatch.setattr(train_tiny, "_build", build)
    return built, clock


def test_train_section_reports_progress_between_the_pairs_on_stderr(fake_train_steps, capsys):
    """Three pairs of 2 steps of 1 s a model: 4 s a pair. After pair 1 of 3, 4 s x 2 pairs left =
    8 s; after pair 2, 8 s / 2 pairs x 1 left = 4 s; none after the last, and none on stdout, which
    holds the measurements (found by mutation testing: the progress on stdout, after the last pair
    too, or with an eta of the pairs done passed)."""
    assert bench.main(["--steps", "2", "--recipes", "fp8,delayed,unit", "train"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["  ... fp8 done, eta 8s", "  ... delayed done, eta 4s"]
    # stdout: the machine line, "[train]", the config line, a line a pair and fp32's
    assert "..." not in captured.out and len(captured.out.splitlines()) == 1 + 1 + 1 + 3 + 1


def test_json_of_family_auto_says_so_and_names_each_pairs_family(fake_train_steps, tmp_path, capsys):
    """``--family auto``: the document's model family is auto, and each recipe's pair is in train_tiny's
    family for it, standard for fp8, unit-scaled for unit (found by mutation testing: a document
    that said unit passed)."""
    path = tmp_path / "speed.json"
    assert bench.main(["--steps", "2", "--recipes", "fp8,unit", "--family", "auto", "--json", str(path), "train"]) == 0
    assert fake_train_steps[0] == [("fp32", "standard"), ("fp8", "standard"), ("fp32", "unit"), ("unit", "unit")]
    document = bench.load_speed_results(path)
    assert document["model"]["family"] == "auto"
    assert {recipe: measured["family"] for recipe, measured in document["recipes"].items()} == {"fp8": "standard",
                                                                                               "unit": "unit"}
    assert document["recipes"]["fp8"]["ratio"] == 1.0 and document["fp32"]["step_ms"] == 1000.0  # (1 s steps)


def test_json_rounds_every_float_to_4_decimals(fake_train_steps, tmp_path, capsys):
    """As the layout in -h says: steps of 1/3 s are 333.3333 ms in the file (found by mutation
    testing: 6 decimals passed)."""
    fake_train_steps[1].seconds = 1 / 3
    path = tmp_path / "speed.json"
    assert bench.main(["--steps", "2", "--recipes", "fp8", "--json", str(path), "train"]) == 0
    document = bench.load_speed_results(path)
    measured = document["recipes"]["fp8"]
    assert measured["step_ms"] == measured["fp32_step_ms"] == document["fp32"]["step_ms"] == 333.3333
    assert measured["ratio"] == 1.0 and measured["window_ratios"] == [1.0, 1.0]


@pytest.mark.parametrize("available, refused", [(2 * 1000 + 2 * 8 * 10 - 1, True), (2 * 1000 + 2 * 8 * 10, False)])
def test_train_section_needs_the_memory_of_two_trainers_and_their_step_times(fake_train_steps, monkeypatch, capsys,
                                                                             available, refused):
    """A trainer said to need 1000 bytes: a pair of them and 10 steps of two float64 times need
    2 x 1000 + 10 x 2 x 8 = 2160 bytes, refused on a machine of 2159, run on one of 2160 (found by
    mutation testing: a bound of one trainer passed)."""
    from minifp8 import train_tiny

    monkeypatch.setattr(train_tiny, "_memory_needed", lambda *args: {"model": 600, "optimizer": 400})
    monkeypatch.setattr(train_tiny, "_physical_memory", lambda: available)
    if not refused:
        assert bench.main(["--steps", "10", "--recipes", "fp8", "train"]) == 0
        return
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--steps", "10", "--recipes", "fp8", "train"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(
        "python -m minifp8.bench: error: --steps 10: the train section needs at least 2.11 KiB of memory, more than "
        "this machine's 2.11 KiB; use smaller values")  # (2160 and 2159 bytes / 1024, to 3 digits)


def test_help_gives_only_the_first_paragraph_of_each_sections_docstring():
    """A docstring of two paragraphs gives its first on one line, without reST's double backquotes;
    the help lists no section's second paragraph (found by mutation testing: the whole docstring,
    which holds the first paragraph, passed)."""

    def documented():
        """Times ``this``
        over two lines.

        The details, which -h leaves out."""

    assert bench._summary(documented) == "Times this over two lines."
    help_text = " ".join(bench.build_parser().format_help().split())
    assert "The details" not in help_text
    # (the codec section's second paragraph: the ratios against ml_dtypes move with its version)
    assert "move with its version" not in help_text and "The ratios against ml_dtypes" in bench.bench_codec.__doc__


def test_machine_line_gives_the_load_average_over_the_last_minute(monkeypatch):
    """os.getloadavg() gives the 1-, 5- and 15-minute averages; the line quotes the first (found by
    mutation testing: the 15-minute average passed)."""
    monkeypatch.setattr(bench, "cpu_name", lambda: None)
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (1.5, 2.25, 3.125), raising=False)
    assert bench.machine_line().endswith(", load average 1.50 over the last minute before the run")
