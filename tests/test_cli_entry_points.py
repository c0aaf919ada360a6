"""``python -m minifp8.golden`` and ``python -m minifp8.bench`` as a backend engineer and a
researcher meet them: bad flags give one line naming the flag, ``-h`` documents what the command
does, and golden.write refuses a path that is not a folder's. (No benchmark section runs here.)"""
import json
import os
import re

import numpy as np
import pytest

from minifp8 import bench, explain, golden, train_tiny
from minifp8.train_tiny import TrainConfig


# ---- python -m minifp8.golden -----------------------------------------------------------------------

def test_golden_write_refuses_an_empty_or_non_path_out_instead_of_writing_to_the_current_folder(tmp_path,
                                                                                               monkeypatch):
    """``Path("")`` is ``.``: write("") filled the current folder with golden files."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="golden.write: out must name a folder, got an empty path"):
        golden.write("", "E2M1", blocks=False)
    for out in (None, 3, ["golden"]):
        with pytest.raises(TypeError, match=r"golden.write: out must be a folder path \(str or os.PathLike\), got "
                                            + type(out).__name__):
            golden.write(out, "E2M1", blocks=False)
    assert list(tmp_path.iterdir()) == []


def test_golden_cli_names_the_flag_of_an_unknown_format(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        golden.main(["--out", str(tmp_path / "g"), "--formats", "E4M3,MXFP8_E4M3"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("python -m minifp8.golden: error: --formats: unknown format 'MXFP8_E4M3'")
    assert not (tmp_path / "g").exists()


def test_golden_cli_names_the_flag_of_a_folder_it_cannot_write(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert golden.main(["--out", str(blocker / "sub"), "--no-blocks", "--formats", "E2M1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"python -m minifp8.golden: error: --out: cannot write golden files to {blocker / 'sub'}")
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_golden_cli_help_says_what_happens_in_an_existing_folder_and_the_exit_statuses(capsys):
    with pytest.raises(SystemExit) as exit_info:
        golden.main(["-h"])
    text = " ".join(capsys.readouterr().out.split())
    assert exit_info.value.code == 0
    assert "an existing one is written into: files of the names this writes are replaced, other files stay" in text
    assert ("Exit status: 0 written, 1 the folder cannot be written (or the CPU flushes subnormals or rounds other "
            "than to nearest), 2 bad flags.") in text
    assert "File layout (schema version 2) ------------------------------ ``manifest.json``:" in text


def test_golden_cli_into_an_existing_folder_behaves_as_its_help_says(tmp_path, capsys):
    """(Documentation: the behaviour was already this, undocumented.) A re-run replaces the files it
    writes by the same bytes, leaves other files, and its manifest lists only its own files."""
    assert golden.main(["--out", str(tmp_path), "--no-blocks", "--formats", "E2M1,E3M2"]) == 0
    first = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    (tmp_path / "notes.txt").write_text("mine")
    assert golden.main(["--out", str(tmp_path), "--no-blocks", "--formats", "e2m1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (f"wrote 3 files and manifest.json (17 entries) to "
                                                        f"{tmp_path}")
    for name in ("codec_E2M1_float32.npz", "codec_E2M1_float64.npz", "decode_E2M1.npz"):
        assert (tmp_path / name).read_bytes() == first[name]
    assert (tmp_path / "codec_E3M2_float32.npz").read_bytes() == first["codec_E3M2_float32.npz"]  # left as it was
    assert (tmp_path / "notes.txt").read_text() == "mine"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert {entry["file"] for entry in manifest["entries"]} == {"codec_E2M1_float32.npz", "codec_E2M1_float64.npz",
                                                                 "decode_E2M1.npz"}


# ---- python -m minifp8.bench ------------------------------------------------------------------------

def bench_help(capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["-h"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_bench_help_documents_every_key_of_the_json_document(capsys):
    """Every key that `_speed_document` writes (measurements from `_recipe_measurements`, as the
    train section builds them) has its line in ``-h``'s layout of the ``--json`` document."""
    layout = bench_help(capsys).split("--json PATH writes one JSON object", 1)[1]
    steps = 40
    rng = np.random.default_rng(0)
    times, fp32_times = rng.uniform(1, 2, steps), rng.uniform(1, 2, steps)
    measured = {"unit": bench._recipe_measurements(times, fp32_times, "unit", 4, 2, 1.5)}
    document = bench._speed_document("2 cores", TrainConfig(), "unit", steps, 2, 10.0, measured)
    assert document["fp32"]["tokens_per_second"] == round(TrainConfig().batch_size * TrainConfig().block_size / 10.0
                                                          * 1e3)

    def keys(value, depth=0, recipe_level=False):
        for key, item in value.items():
            if not recipe_level:
                yield key, depth
            if isinstance(item, dict):
                yield from keys(item, depth + (not recipe_level), recipe_level=key == "recipes")

    columns = set(re.findall(r"^  (\w+) {2,}", layout, re.M))  # the top level: a key column
    braced = set(re.findall(r"[{,]\s*(\w+)(?=[\s:,}(])|\band (\w+):", layout))  # the nested: {a, b: ...}
    braced = {word for pair in braced for word in pair if word}
    written = list(keys(document))
    assert len(written) == 8 + 5 + 2 + 8
    assert {key for key, depth in written if depth == 0} <= columns, columns
    assert {key for key, depth in written if depth} <= braced, {key for key, depth in written if depth} - braced


def test_bench_help_lists_what_each_section_times(capsys):
    text = bench_help(capsys)
    for name, function in bench.SECTIONS.items():
        first_words = " ".join(function.__doc__.split()[:4]).replace("``", "")
        assert f"\n{name}: {first_words}" in text, name
    assert " ".join(text.split("\n\nExit status: ")[1].split()) == (
        "0 done, 2 bad flags, a --json file that cannot be written or a section that cannot finish (a training run "
        "whose gradients overflow), 130 Ctrl-C (the lines printed before it stand).")


def test_bench_help_names_the_sections_each_flag_applies_to_and_the_default_runs_values():
    """The help of every flag that some sections only read names those sections, and the defaults
    it quotes are TrainConfig's."""
    parser = bench.build_parser()
    helps = {action.dest: " ".join(action.help.split()) for action in parser._actions}
    for flag, readers in bench.FLAG_SECTIONS.items():
        named = re.search(r"\bthe ((?:\w+, )*\w+(?: and \w+)?) sections?\b", helps[flag]).group(1)
        assert re.split(r", | and ", named) == list(readers), (flag, helps[flag])
        assert "(default: " in helps[flag], flag
    config = TrainConfig()
    assert f"(default: the default run's, {config.steps})" in helps["steps"]
    assert f"default run's {config.n_head} heads (default: the default run's, {config.n_embd}," in helps["n_embd"]
    assert f"(default: {config.mx_scale_mode}, the OCP rule" in helps["mx_scale_mode"]


@pytest.mark.parametrize("argv, flags", [(["--steps", str(10**20), "train"], "--steps 100000000000000000000"),
                                         (["--steps", str(10**12)], "--steps 1000000000000"),
                                         (["--n-embd", "400000000", "train"], "--n-embd 400000000")])
def test_bench_refuses_a_train_section_larger_than_the_machine_in_one_line(argv, flags, capsys):
    """Found in a review: numpy's ValueError or MemoryError came as a traceback, before any timing."""
    from minifp8.train_tiny import _physical_memory

    if _physical_memory() is None:
        pytest.skip("the OS does not say how much memory the machine has")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"python -m minifp8.bench: error: {flags}: the train section needs at least ")
    assert "of memory, more than this machine's" in err


def test_bench_quotes_an_unknown_section_name(capsys):
    """An empty section name read "unknown section(s) ; choose from ..."."""
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["codec", ""])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert "unknown section(s) ''; choose from codec, block, mx, fp8, train" in err


@pytest.mark.parametrize("main, argv, message", [
    (train_tiny.main, ["--recipe", "fp32", "--recipe", "fp8"],
     "--recipe is given twice ('fp32', then 'fp8'); give one comma-separated list"),
    (train_tiny.main, ["--steps", "20", "--rec", "unit", "--fp32-modules", "lm_head", "--fp32-modules=*.mlp.*"],
     "--fp32-modules is given twice ('lm_head', then '*.mlp.*'); give one comma-separated list"),
    (golden.main, ["--out", "{tmp}", "--formats", "E4M3", "--formats", "E5M2"],
     "--formats is given twice ('E4M3', then 'E5M2'); give one comma-separated list"),
    (bench.main, ["train", "--recipes", "fp8", "--steps", "3", "--recipes", "mxfp8"],
     "--recipes is given twice ('fp8', then 'mxfp8'); give one comma-separated list"),
])
def test_every_command_refuses_a_list_flag_given_twice(main, argv, message, tmp_path, capsys):
    """argparse keeps the last value of a flag given twice without a word: ``--recipe fp32 --recipe fp8``
    trained fp8 alone, and golden's ``--formats E4M3 --formats E5M2`` wrote E5M2's files alone."""
    try:  # (train_tiny.main returns its status; the others raise SystemExit, as argparse does)
        status = main([token.format(tmp=tmp_path / "out") for token in argv])
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_a_flag_that_takes_one_value_given_twice_keeps_the_last_as_argparse_does():
    """The override idiom (``$BASE --steps 10``) stays: only a list flag's repeat is refused."""
    config, runs = train_tiny.parse_args(["--steps", "20", "--recipe", "fp32", "--steps", "10"])
    assert config.steps == 10 and [run.recipe for run in runs] == ["fp32"]
    assert bench.build_parser().parse_args(["--steps", "3", "--steps", "4"]).steps == 4


def test_python_m_minifp8_lists_commands_that_exist():
    import importlib
    import subprocess
    import sys

    from minifp8.__main__ import COMMANDS

    listed = subprocess.run([sys.executable, "-m", "minifp8"], capture_output=True, text=True)
    assert listed.returncode == 0 and listed.stderr == ""
    for command in COMMANDS:  # each is a module with a command line
        assert f"python -m {command}" in listed.stdout and callable(importlib.import_module(command).main)
    wrong = subprocess.run([sys.executable, "-m", "minifp8", "train"], capture_output=True, text=True)
    assert wrong.returncode == 2 and wrong.stdout == "" and "unknown arguments train" in wrong.stderr


TINY_TRAIN = ["minifp8.train_tiny", "--steps", "2", "--batch-size", "2", "--block-size", "8", "--n-layer", "1",
              "--n-head", "2", "--n-embd", "8", "--eval-interval", "2", "--eval-batches", "1", "--warmup-steps", "1"]


def environment(unbuffered: bool) -> dict:
    """This process's environment for a command's subprocess, with PYTHONUNBUFFERED set or not: a
    pipe's output is buffered unless it is set (this project's CI machine sets it)."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    return {**env, "PYTHONUNBUFFERED": "1"} if unbuffered else env


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize("argv", [["minifp8"], ["minifp8.golden", "--out", "{tmp}", "--formats", "E2M1"],
                                  ["minifp8.bench", "codec"], ["minifp8.explain", "0.3", "E4M3"],
                                  ["minifp8.golden", "--help"], ["minifp8.explain", "--help"],
                                  ["minifp8.bench", "--help"], ["minifp8.train_tiny", "--help"]])
def test_every_command_stops_quietly_when_its_output_is_closed(argv, tmp_path, unbuffered):
    """``python -m ... | head``: the reader goes away before the first line. Each command ends with
    SIGPIPE's status, 141, and prints nothing (golden, bench and ``python -m minifp8`` printed a
    BrokenPipeError traceback; train_tiny's own test is in test_train_tiny_cli.py). bench stops at its
    first line, before any section runs. A pipe's output is buffered unless PYTHONUNBUFFERED is set:
    then the write that meets the closed pipe is the flush at exit (status 120 and "Exception
    ignored ... BrokenPipeError" until the commands flushed before returning)."""
    import subprocess
    import sys

    from minifp8.__main__ import COMMANDS

    assert set(COMMANDS) == {"minifp8.train_tiny", "minifp8.golden", "minifp8.bench", "minifp8.explain"}
    command = [part.replace("{tmp}", str(tmp_path / "golden")) for part in argv]
    process = subprocess.Popen([sys.executable, "-m", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=environment(unbuffered))
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    # (argparse's --help swallows a failed write itself and exits 0: that is quiet too)
    statuses = (141, 0) if "--help" in argv else (141,)
    assert process.returncode in statuses and err == b"", (process.returncode, err.decode())


@pytest.mark.parametrize("argv", [["minifp8.golden", "--out", "{tmp}", "--formats", "E2M1"],
                                  [*TINY_TRAIN, "--out", "{tmp}"]],
                         ids=["golden", "train_tiny"])
def test_a_path_that_stdout_cannot_encode_is_printed_escaped(argv, tmp_path):
    """An ASCII stdout (or a Windows code page) cannot encode "é": golden died with a UnicodeEncodeError
    traceback at its last line, after writing every file. Each command prints it escaped."""
    import subprocess
    import sys

    out = tmp_path / "caf\u00e9"
    command = [part.replace("{tmp}", str(out)) for part in argv]
    result = subprocess.run([sys.executable, "-m", *command], capture_output=True, timeout=120,
                            env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0 and result.stderr == b"", result.stderr.decode(errors="replace")
    assert b"caf\\xe9" in result.stdout


@pytest.mark.skipif(os.name == "nt", reason="closes file descriptor 1 with a POSIX shell's >&-")
@pytest.mark.parametrize("argv", [["minifp8"], ["minifp8.explain", "0.3", "E4M3"],
                                  TINY_TRAIN,
                                  ["minifp8.golden", "--out", "{tmp}", "--formats", "E2M1", "--no-blocks"]])
def test_every_command_runs_with_no_stdout(argv, tmp_path):
    """``cmd >&-`` (or pythonw, or a Windows service): Python starts with ``sys.stdout = None``, and
    print does nothing. The commands' flush before returning raised AttributeError there."""
    import subprocess
    import sys

    command = [part.replace("{tmp}", str(tmp_path / "golden")) for part in argv]
    result = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", *command], capture_output=False,
                            stderr=subprocess.PIPE, timeout=120)
    assert result.returncode == 0 and result.stderr == b"", result.stderr.decode(errors="replace")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, whose writes fail with ENOSPC")
@pytest.mark.parametrize("argv", [["minifp8"], ["minifp8.explain", "0.3", "E4M3"], ["minifp8.bench", "--help"],
                                  ["minifp8.golden", "--out", "{tmp}", "--formats", "E2M1", "--no-blocks"],
                                  TINY_TRAIN, [*TINY_TRAIN, "--out", "{tmp}"]])
def test_every_command_says_in_one_line_that_stdout_is_full(argv, tmp_path):
    """``cmd > log`` on a full disk (found in a review): train_tiny died with a traceback at its first
    line, or reported a failed progress line as an --out error; the other commands gave tracebacks.
    Each now ends with status 2 and one line naming stdout."""
    import subprocess
    import sys

    command = [part.replace("{tmp}", str(tmp_path / "out")) for part in argv]
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", *command], stdout=full, stderr=subprocess.PIPE, timeout=120)
    err = result.stderr.decode(errors="replace")
    prog = argv[0].removesuffix(".__main__")
    assert result.returncode == 2 and err == (f"python -m {prog}: error: cannot write the output (stdout): "
                                              f"[Errno 28] No space left on device\n"), err


def test_train_tiny_writes_its_results_when_stdout_fails_at_the_summary(tmp_path, monkeypatch, capsys):
    """Every run had finished, and a stdout that failed at the summary table lost metrics.json."""
    import errno
    import io
    import sys

    from minifp8 import train_tiny

    class FullAtSummary(io.StringIO):
        def write(self, text):
            if "train loss" in text and "val loss" in text:  # (the summary table's header)
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(text)

    monkeypatch.setattr(sys, "stdout", FullAtSummary())
    out = tmp_path / "out"
    status = train_tiny.main([*TINY_TRAIN[1:], "--out", str(out)])
    assert status == 2
    assert (capsys.readouterr().err == "python -m minifp8.train_tiny: error: cannot write the output (stdout): "
                                       "[Errno 28] No space left on device\n")
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["runs"]["unit"]["final"]["steps"] == 2
