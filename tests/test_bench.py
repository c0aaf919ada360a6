"""``python -m minifp8.bench`` runs: a smoke test of the training-step section (it reports
ratios; no timing is asserted here, speed is read from the benchmark's own output)."""
import pytest

from minifp8 import bench, fp8


def test_train_section_reports_every_recipe(capsys):
    assert bench.main(["--steps", "3", "train"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and " cores" in out.splitlines()[0]  # the context to read ratios with
    for recipe in fp8.RECIPES:
        assert f"train step under {recipe} " in out
    assert out.count("fp32 step") == len(fp8.RECIPES) and "3 steps per recipe, each beside an fp32 run" in out


def test_train_section_times_the_recipes_and_width_asked_for(capsys):
    assert bench.main(["--steps", "2", "--recipes", "blockwise, mxfp8", "--n-embd", "32", "train"]) == 0
    out = capsys.readouterr().out
    timed = [line.split("train step under ")[1].split()[0] for line in out.splitlines() if "train step under" in line]
    assert timed == ["blockwise", "mxfp8", "fp32"]
    assert "default config at another width: unit-scaled, 2 layers, n_embd 32," in out
    assert "target" not in out  # the targets are stated for the default width


def test_bad_arguments_exit_with_a_message(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["nonsense"])
    assert exit_.value.code == 2 and "unknown section" in capsys.readouterr().err


def test_rounds_and_repeats_must_be_positive(capsys):
    for flag in ("--repeats", "--rounds", "--steps", "--n-embd"):
        with pytest.raises(SystemExit):
            bench.main([flag, "0", "train"])
        assert f"{flag} must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--n-embd", "66"], "--n-embd must be a multiple of the default run's 4 heads, got 66"),
    (["--recipes", "fp32"], "got 'fp32'"),
    (["--recipes", "unit,nope"], "got 'nope'"),
    (["--recipes", ","], "got none"),
])
def test_bad_train_flags_exit_with_a_message(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv + ["train"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err
