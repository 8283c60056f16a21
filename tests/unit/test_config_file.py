"""--config FILE (gptlab/core/config_file.py): a TOML file of flags read as the command line would read them, the
command line winning, a preset beneath both; every bad file one error naming the file and the key."""
import pytest

from gptlab.core.errors import UserError
from gptlab.train.flags import parse_flags


def parse(tmp_path, text, *argv):
    from train_gpt import PRESETS, build_parser
    path = tmp_path / "run.toml"
    path.write_text(text, encoding="utf-8")
    args, _ = parse_flags(build_parser, ["--config", str(path), *argv], presets=PRESETS)
    return args


def test_the_file_sets_flags_as_the_command_line_does(tmp_path):
    args = parse(tmp_path, 'train_steps = 7\nseed = 3\nlr_scale = 0.5\ncompile = false\nfp8_head = true\n'
                           'train_files = ["a.bin", "b.bin"]\nmodel_name = "from_file"\n')
    assert (args.train_steps, args.seed, args.lr_scale, args.model_name) == (7, 3, 0.5, "from_file")
    assert args.compile is False and args.fp8_head is True
    assert args.train_files == ["a.bin", "b.bin"]


def test_the_command_line_wins_and_a_preset_lies_beneath_both(tmp_path):
    # quickstart's preset: num_layers 6, model_dim 128, train_steps 120 (train_gpt.PRESETS)
    args = parse(tmp_path, 'preset = "quickstart"\nnum_layers = 3\ntrain_steps = 50\n', "--train_steps", "9")
    assert args.preset == "quickstart"
    assert args.model_dim == 128  # the preset's, set by neither
    assert args.num_layers == 3  # the file over the preset
    assert args.train_steps == 9  # the command line over the file
    assert args.config.endswith("run.toml")


def test_without_a_file_nothing_changes(tmp_path):
    from train_gpt import PRESETS, build_parser
    args, _ = parse_flags(build_parser, ["--train_steps", "9"], presets=PRESETS)
    assert args.config is None and args.train_steps == 9


@pytest.mark.parametrize("text, words", [
    ("train_step = 3\n", ["train_step is not a flag", "did you mean train_steps"]),
    ('train_steps = "x"\n', ["train_steps = 'x'", "invalid literal"]),
    ("train_steps = -3\n", ["train_steps = '-3'", "positive"]),
    ('preset = "nope"\n', ["preset = 'nope'", "not one of"]),
    ("compile = 1\n", ["compile is a switch", "true or false"]),
    ("seed = [1, 2]\n", ["seed takes one value"]),
    ("train_steps = \n", ["not valid TOML", "line 1"]),
    ("[data]\ntrain_steps = 3\n", ["data is not a flag"]),
    ('config = "other.toml"\n', ["cannot name another"]),
    ("train_files = []\n", ["train_files needs at least one value"]),
    ("train_files = [[1]]\n", ["train_files has a value of the wrong kind"]),
])
def test_a_bad_file_is_one_error_naming_the_file_and_the_key(tmp_path, text, words):
    with pytest.raises(UserError) as err:
        parse(tmp_path, text)
    message = str(err.value)
    assert "\n" not in message and f"--config {tmp_path / 'run.toml'}" in message
    for w in words:
        assert w in message, message


def test_a_missing_or_unreadable_file_is_one_error(tmp_path):
    from train_gpt import PRESETS, build_parser
    for path, words in ((tmp_path / "none.toml", "no such file"), (tmp_path, "cannot be read")):
        with pytest.raises(UserError, match=words):
            parse_flags(build_parser, ["--config", str(path)], presets=PRESETS)
    (tmp_path / "bin.toml").write_bytes(b"seed = \xff\n")
    with pytest.raises(UserError, match="not valid TOML|cannot be read"):
        parse_flags(build_parser, ["--config", str(tmp_path / "bin.toml")], presets=PRESETS)


def sweep_commands(tmp_path, text, *argv):
    """sweep.py --config FILE --dry_run: the commands it would run are printed."""
    import sweep
    path = tmp_path / "sweep.toml"
    path.write_text(text, encoding="utf-8")
    sweep.main(["--config", str(path), "--dry_run", "--experiments_dir", str(tmp_path / "exp"), *argv])


SWEEP = ('name = "Depth"\nseeds = "0,1"\n[grid]\nnum_layers = [2, 3]\n'
         '[train]\npreset = "quickstart"\ntrain_steps = 5\ncompile = false\n')


def test_a_sweep_file_gives_the_grid_the_seeds_and_the_runs_flags(tmp_path, capsys):
    sweep_commands(tmp_path, SWEEP)
    lines = [line for line in capsys.readouterr().out.splitlines() if "train_gpt.py" in line]
    assert len(lines) == 4  # 2 depths x 2 seeds
    for layers in (2, 3):
        for seed in (0, 1):
            assert sum(f"--num_layers {layers} " in x and f"--seed {seed} " in x and
                       f"--model_name Depth_num_layers{layers}" in x for x in lines) == 1
    assert all("--preset quickstart --train_steps 5 --no-compile" in x for x in lines)


def test_the_sweep_command_line_wins_over_its_file(tmp_path, capsys):
    sweep_commands(tmp_path, SWEEP, "--seeds", "4", "--", "--train_steps", "6")
    lines = [line for line in capsys.readouterr().out.splitlines() if "train_gpt.py" in line]
    assert len(lines) == 2 and all("--seed 4 " in x for x in lines)
    # train_gpt.py reads the last --train_steps: the command line's, after the file's
    assert all(x.index("--train_steps 5") < x.index("--train_steps 6") for x in lines)


@pytest.mark.parametrize("text, words", [
    ('name = "A"\n[grid]\nnum_layers = []\n', "grid.num_layers needs a list"),
    ('grid = 3\n', "grid and train are tables"),
    ('seed = "0"\n', "seed is not a flag here (did you mean seeds?)"),
    ('[grid]\nnum_layers = [2, 3]\n[train]\ntrain_step = 5\n', "train.train_step is not a flag"),
    ('[grid]\nnum_layers = [2, 3]\n[train]\ncompile = "yes"\n', "train.compile is a switch"),
])
def test_a_bad_sweep_file_is_one_error(tmp_path, text, words):
    with pytest.raises(UserError) as err:
        sweep_commands(tmp_path, text)
    assert words in str(err.value) and "\n" not in str(err.value)
