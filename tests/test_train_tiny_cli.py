"""``python -m minifp8.train_tiny`` as a researcher runs it: a closed pipe, Ctrl-C before the
first step, a flag value JSON cannot hold, a run that blows up, a file too short to split, a
resumed run's text gone, paths that are not UTF-8, and the documented layout of ``metrics.json``."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from minifp8 import train_tiny
from minifp8.train_tiny import Run, main
from test_cli_entry_points import environment

ROOT = Path(__file__).resolve().parents[1]

# seconds for a whole run (as tests/test_train_tiny.py's TINY, shorter)
TINY = ["--steps", "4", "--batch-size", "2", "--block-size", "8", "--n-layer", "1", "--n-head", "2",
        "--n-embd", "8", "--eval-interval", "2", "--eval-batches", "1", "--log-interval", "1", "--warmup-steps", "1"]


def run_main(capsys, *argv):
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---- a closed output, Ctrl-C outside the steps -------------------------------------------------------

@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize("out", [False, True])
def test_a_closed_output_stops_the_command_quietly(tmp_path, out, unbuffered):
    """``train_tiny | head``: once the reader has gone, a write raises BrokenPipeError (Python ignores
    SIGPIPE). The command stops with SIGPIPE's status, 141, and says nothing: it printed a traceback,
    or blamed ``--out`` ("--out None: [Errno 32] Broken pipe") and exited 2. Buffered (no
    PYTHONUNBUFFERED), the write that meets the closed pipe was the flush at exit: status 120 and
    "Exception ignored ... BrokenPipeError", until main flushed before returning."""
    argv = [sys.executable, "-m", "minifp8.train_tiny", *TINY] + (["--out", str(tmp_path / "run")] if out else [])
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=environment(unbuffered))
    process.stdout.close()  # the reader goes away before the first line
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141 and err == b"", err.decode()


def test_a_pipe_closed_during_a_run_is_not_blamed_on_out(tmp_path, monkeypatch, capsys):
    """The pipe closes in the middle of a run (the 6th line): status 141 and no error about --out."""
    class ClosedAfter:
        def __init__(self, lines):
            self.lines = lines

        def write(self, text):
            self.lines -= text.count("\n")
            if self.lines < 0:
                raise BrokenPipeError(32, "Broken pipe")
            return len(text)

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", ClosedAfter(6))
    status = main([*TINY, "--out", str(tmp_path / "run")])
    monkeypatch.undo()
    assert status == 141 and capsys.readouterr().err == ""


def test_ctrl_c_while_the_data_loads_is_one_line(capsys, monkeypatch):
    """Ctrl-C before the first step (reading a big --data file) stops with status 130 and one line;
    it escaped as a KeyboardInterrupt traceback (`train` holds Ctrl-C only during a run's steps)."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_tiny.data_module, "load_dataset", interrupted)
    try:
        status, out, err = run_main(capsys, *TINY)
    except KeyboardInterrupt:  # (raised, it would stop pytest itself)
        pytest.fail("Ctrl-C escaped main as a KeyboardInterrupt")
    assert status == 130 and out == "" and err == "python -m minifp8.train_tiny: interrupted\n"


# ---- flag values -------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["inf", "Infinity", "1e400"])
def test_grad_clip_must_be_finite(capsys, value):
    """An infinite --grad-clip was taken: config.json then held ``Infinity``, which strict JSON
    parsers (jq, JavaScript) refuse, and metrics.json null, as if it were not set. Like --lr and
    --weight-decay it must be finite; 0 turns clipping off."""
    status, out, err = run_main(capsys, *TINY, "--recipe", "fp8", "--grad-clip", value)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "--grad-clip must be a finite number >= 0 (0: off), got inf" in err


def test_a_data_file_too_short_to_split_is_named(tmp_path, capsys):
    """A file of a few characters cannot be split into train and validation text: the error names
    the file, as every other --data error does."""
    path = tmp_path / "four.txt"
    path.write_text("abcd")  # round(0.1 * 4) = 0 validation characters
    status, out, err = run_main(capsys, *TINY, "--data", str(path))
    assert status == 2 and err.count("\n") == 1 and "empty train or val split" in err
    assert err.rstrip().endswith(f": {path}"), err


# ---- the summary table ---------------------------------------------------------------------------------

def test_summary_columns_stay_aligned_when_a_run_blows_up():
    """A run whose loss grew to 1e12 without becoming Inf (a learning rate far too high) finishes;
    its losses took 18 characters in columns 10 and 9 wide, shifting every column after them."""
    runs = [Run("fp32", "standard"), Run("fp8", "standard")]
    results = {"fp32": {"diverged": None, "time_s": 1.0, "final": {"train_loss": 2.65893, "val_loss": 2.64976}},
               "fp8": {"diverged": None, "time_s": 1.0, "final": {"train_loss": 9272476801433.867,
                                                                 "val_loss": 1430016.0}}}
    header, rule, normal, huge = train_tiny._summary_table(runs, results, arithmetic=False).splitlines()
    assert len(normal) == len(huge) == len(header) == len(rule)
    assert normal.split()[1:3] == ["2.6589", "2.6498"]  # 4 decimals where they fit, as before
    assert huge.split()[1:3] == ["9.272e+12", "1.430e+06"]  # 4 significant digits where they do not
    for column in ("train loss", "val loss", "vs its fp32", "time"):  # right-aligned under their headings
        end = header.index(column) + len(column)
        assert huge[end - 1] != " " and huge[end:end + 1] in ("", " "), column
    assert huge.split()[3] == "5.4e+05x"  # 1430016 / 2.64976: a ratio where a percentage would not fit


def test_summary_compares_each_runs_val_loss_with_the_fp32_run_of_its_family():
    """The README's headline column, "vs its fp32": each run's final validation loss over that of the
    plain fp32 run of its model family in the list, blank for that run itself, for a run whose family
    has none, and against a partner that diverged."""
    def finished(val_loss):
        return {"diverged": None, "time_s": 5.0, "final": {"train_loss": 1.0, "val_loss": val_loss}}

    runs = [Run("fp32", "standard"), Run("fp32", "standard", "dynamic"), Run("fp8", "standard"),
            Run("fp32", "unit"), Run("unit", "unit"), Run("current", "standard", "dynamic")]
    results = {"fp32": finished(2.0), "fp32 + loss scale dynamic": finished(1.0), "fp8": finished(3.0),
               "unit fp32": finished(1.6), "unit": finished(1.62), "current + loss scale dynamic": finished(1.9)}
    header, _, *rows = train_tiny._summary_table(runs, results, arithmetic=False).splitlines()
    start, end = header.index("val loss") + len("val loss"), header.index("vs its fp32") + len("vs its fp32")
    cells = {run.label: row[start:end].strip() for run, row in zip(runs, rows)}
    assert cells == {"fp32": "", "fp32 + loss scale dynamic": "-50.00%", "fp8": "+50.00%", "unit fp32": "",
                     "unit": "+1.25%", "current + loss scale dynamic": "-5.00%"}

    alone = train_tiny._summary_table(runs[4:5], results, arithmetic=False)  # no fp32 run: no column
    assert "vs its fp32" not in alone
    results["unit fp32"] = {"diverged": {"step": 3}, "time_s": 1.0}
    rows = train_tiny._summary_table(runs, results, arithmetic=False).splitlines()[2:]
    assert rows[3] == "unit fp32".ljust(28) + " diverged at step 3" and rows[4][start:end].strip() == ""


# ---- metrics.json as documented ---------------------------------------------------------------------

def test_metrics_json_holds_what_the_module_docstring_lists(tmp_path, capsys):
    """The module docstring's ``metrics.json`` entry names every key written, top level and per run,
    and no key that is not."""
    entry = train_tiny.__doc__.split("* ``metrics.json``:", 1)[1].split("\n* ", 1)[0]
    documented = set(re.findall(r"``(\w+)``", entry))
    status, _, _ = run_main(capsys, *TINY, "--recipe", "fp8", "--loss-scale", "dynamic", "--fp8-grads",
                            "--track-scales", "--out", str(tmp_path))
    assert status == 0
    document = json.loads((tmp_path / "metrics.json").read_text())
    run = document["runs"]["fp8 + loss scale dynamic + fp8 grads"]
    written = set(document) | set(run) | set(run["val"][-1]) | set(run["scales"][-1])
    assert set(document) | set(run) <= documented, (set(document) | set(run)) - documented
    # (``diverged``'s keys; ``continued_in``, written only where a resume ran in another environment)
    assert documented <= written | {"step", "message", "continued_in"}, documented - written
    assert run["loss_scale"] and run["fp8_grads"] and run["cast_stats"] and run["scales"]  # each log this run keeps


def test_resume_says_when_the_text_it_trained_on_is_gone(tmp_path, capsys):
    """A --resume whose --data file was moved away: the error says it is the resumed run's text
    (not "--data: ...", a flag the command line did not give)."""
    text = tmp_path / "input.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    out = tmp_path / "run"
    assert run_main(capsys, *TINY, "--recipe", "fp32", "--data", str(text), "--out", str(out),
                    "--stop-after", "2")[0] == 130
    text.unlink()
    status, printed, err = run_main(capsys, "--resume", str(out))
    assert status == 2 and printed == "" and err.count("\n") == 1
    assert err.startswith(f"python -m minifp8.train_tiny: error: --resume {out}: the run's --data: text file not "
                          f"found: {text}"), err


def test_a_run_resumes_after_its_text_moves_once_config_json_says_where(tmp_path, capsys):
    """A review's find: after the --data file moved, the error gave no way on, and with config.json's
    "data" set to the new path every checkpoint was refused as "another config or run (it differs in
    data)", though its SHA-256 proves the same text: the run was lost. The error now says what to
    edit, and a checkpoint's identity rests on the text's SHA-256, not where the file lies."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    (first / "input.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    out = tmp_path / "run"
    assert run_main(capsys, *TINY, "--recipe", "fp32", "--data", str(first / "input.txt"), "--out", str(out),
                    "--stop-after", "2")[0] == 130
    uninterrupted = tmp_path / "whole"
    assert run_main(capsys, *TINY, "--recipe", "fp32", "--data", str(first / "input.txt"),
                    "--out", str(uninterrupted))[0] == 0
    first.rename(second)
    status, _, err = run_main(capsys, "--resume", str(out))
    assert status == 2 and err.rstrip().endswith(f'(moved? set "data" under "config" in {out / "config.json"} to '
                                                 f'where it is now: the run checks the text\'s SHA-256)'), err
    config = json.loads((out / "config.json").read_text())
    config["config"]["data"] = str(second / "input.txt")
    (out / "config.json").write_text(json.dumps(config))
    status, printed, err = run_main(capsys, "--resume", str(out))
    assert status == 0, err
    resumed, whole = (json.loads((path / "metrics.json").read_text()) for path in (out, uninterrupted))
    assert resumed["runs"]["fp32"]["val"] == whole["runs"]["fp32"]["val"]
    (second / "input.txt").write_text("another text entirely, of other letters: xyz\n" * 20)
    status, _, err = run_main(capsys, "--resume", str(out))  # (the SHA-256 still guards the text)
    assert status == 2 and "is not the text this run started on" in err, err


def test_paths_that_are_not_utf8_are_printed_escaped(tmp_path):
    """A --data or --out name that is not UTF-8 (a Latin-1 "café") comes back from os.fsdecode with a
    lone surrogate, which the strict stdout of a UTF-8 locale could not print: the command died with
    a UnicodeEncodeError traceback at its first line (or, for --out, after training). It prints the
    byte escaped, and works."""
    base = os.fsencode(tmp_path)
    data, out = base + b"/caf\xe9.txt", base + b"/run\xe9"
    try:
        with open(data, "wb") as file:
            file.write(b"the quick brown fox jumps over the lazy dog\n" * 20)
    except (OSError, UnicodeError):  # (a file system that takes only UTF-8 names, as macOS's; Windows
        # decodes a bytes path as UTF-8, PEP 529)
        pytest.skip("this file system refuses names that are not UTF-8")
    result = subprocess.run([sys.executable, "-m", "minifp8.train_tiny", *TINY, "--data", os.fsdecode(data),
                             "--out", os.fsdecode(out)], cwd=ROOT, capture_output=True, timeout=120,
                            env={**os.environ, "PYTHONIOENCODING": "utf-8"})  # (as en_US.UTF-8: strict)
    assert result.returncode == 0 and result.stderr == b"", result.stderr.decode(errors="replace")
    assert b"data: Dataset(" + os.fsencode(tmp_path) + b"/caf\\udce9.txt, " in result.stdout
    assert os.path.isfile(out + b"/metrics.json")


# ---- a review of the researcher's experience (stop 65) -----------------------------------------------
def test_progress_reaches_a_pipe_line_by_line_in_order_with_the_errors(tmp_path):
    """Found by a review: stdout was block-buffered where it was a file or a pipe (nohup, | tee), so a
    run's progress came at its end, after its errors on stderr (and a Ctrl-C of | tee lost it all)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    flags = ["--steps", "6", "--batch-size", "4", "--block-size", "16", "--n-layer", "1", "--n-head", "2",
             "--n-embd", "16", "--eval-interval", "1000", "--eval-batches", "1", "--log-interval", "2",
             "--warmup-steps", "1", "--recipe", "fp32,fp8", "--lr", "1e30"]
    result = subprocess.run([sys.executable, "-m", "minifp8.train_tiny", *flags], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stdout
    errors = [i for i, line in enumerate(lines) if line.startswith("python -m minifp8.train_tiny: error: fp")]
    starts = [i for i, line in enumerate(lines) if line.startswith(("fp32: ", "fp8: "))]
    assert lines[0].startswith("data: ") and len(errors) == 2 and len(starts) == 2, result.stdout
    assert starts[0] < errors[0] < starts[1] < errors[1]  # fp32 starts, diverges; then fp8


def test_the_resume_hint_quotes_a_directory_the_shell_would_split(tmp_path, capsys):
    """Found by a review: "continue with --resume my runs/a b" could not be pasted."""
    out = tmp_path / "my runs" / "a b"
    flags = ["--steps", "4", "--batch-size", "4", "--block-size", "16", "--n-layer", "1", "--n-head", "2",
             "--n-embd", "16", "--eval-interval", "1000", "--eval-batches", "1", "--warmup-steps", "1"]
    status = main([*flags, "--stop-after", "2", "--out", str(out)])
    assert status == 130
    assert f"stopped after step 2; continue with --resume {shlex.quote(str(out))}\n" in capsys.readouterr().out
    assert main(["--resume", str(out)]) == 0


def test_help_lists_the_exit_statuses_and_the_output_files(capsys):
    """Found by a review: -h said nothing of --stop-after's status 130 (which stops a set -e script)
    nor of what --out writes, where bench -h and explain -h do."""
    assert main(["-h"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    statuses = text.split("Exit status:")[1]
    for status in ("0 done", "1 a run diverged", "2 bad flags", "130 stopped (--stop-after", "143 SIGTERM",
                   "141 output closed"):
        assert status in statuses
    assert set(re.findall(r"\b(\d+) [a-zA-Z]", statuses)) == {"0", "1", "2", "130", "143", "141"}
    for name in (*train_tiny._OUT_FILES[:4], "<experiment>.json", "checkpoints/"):  # (what --out holds)
        assert name in text.split("With --out DIR:")[1]


def test_the_environment_records_minifp8_s_version(tmp_path):
    """Found by a review: a results file could not say which code made it, though the README lists
    changes between versions that changed a run's numbers; an older directory (no version) resumes."""
    from minifp8 import __version__

    assert train_tiny.environment()["minifp8"] == __version__
    assert train_tiny.environment_line(train_tiny.environment()).startswith(f"minifp8 {__version__}, numpy ")
    older = {key: value for key, value in train_tiny.environment().items() if key != "minifp8"}
    assert train_tiny.environment_line(older).startswith("numpy ")
    assert not train_tiny._environment_changed(older, train_tiny.environment())
    assert train_tiny._environment_changed({**older, "minifp8": "0.3.1"}, train_tiny.environment())
