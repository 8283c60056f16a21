"""sweep.py in process: a dry run shows its torchrun commands and names, bad input is one clear error, and another sweep
of the same name is refused. A real sweep on CPU: tests/e2e/test_sweep_e2e.py."""
import json
import os
import re
import sys

import pytest

from conftest import REPO, SHARED_DATA
from gptlab.core.errors import UserError

sys.path.insert(0, REPO)
import sweep as sweep_cli  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")


def test_dry_run_shows_torchrun_commands_and_names(tmp_path, capsys):
    exp_dir = str(tmp_path / "e")
    sweep_cli.main(["--name", "Lr", "--grid", "lr_scale=0.5,2", "--seeds", "0,1", "--nproc_per_node", "2",
                    "--experiments_dir", exp_dir, "--dry_run", "--", "--preset", "quickstart"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(line.startswith("[would run] ") for line in lines)
    # seed-major: every setting once before the next seed
    assert [(l.split("--model_name ")[1].split()[0], l.split("--seed ")[1].split()[0]) for l in lines] == [
        ("Lr_lr_scale0.5", "0"), ("Lr_lr_scale2", "0"), ("Lr_lr_scale0.5", "1"), ("Lr_lr_scale2", "1")]
    assert "-m torch.distributed.run --standalone --nproc_per_node=2 " in lines[0]
    assert "train_gpt.py --preset quickstart --lr_scale 0.5 --seed 0" in lines[0]
    assert not os.path.exists(exp_dir)  # a dry run writes nothing


@pytest.mark.parametrize("argv, message", [
    (["--grid", "lr_scael=1,2"], "train_gpt.py has no flag --lr_scael (did you mean --lr_scale?)"),
    (["--grid", "seed=1,2"], "is set by the sweep itself; use the sweep's --seeds 0,1,2"),
    (["--grid", "lr_scale"], "is not FLAG=V1,V2,..."),
    (["--grid", "lr_scale=1,1"], "repeats a value"),
    (["--grid", "lr_scale=1", "--grid", "lr_scale=2"], "--grid lr_scale is given twice"),
    (["--seeds", "0,x", "--grid", "lr_scale=1"], "--seeds '0,x' is not a list of distinct integers"),
    (["--seeds", "0"], "nothing to sweep"),
    (["--grid", "lr_scale=1,2", "--", "--seed", "3"], "set --seed, which the sweep sets itself"),
    (["--grid", "lr_scale=1,2", "--", "--lr_scale", "3"], "set --lr_scale, which the sweep sets itself"),
    (["--grid", "lr_scale=1,2", "--name", "a/b"], "--name 'a/b' must be a plain name"),
])
def test_bad_input_is_one_clear_error(argv, message, tmp_path):
    with pytest.raises(UserError) as err:
        sweep_cli.main(["--experiments_dir", str(tmp_path)] + argv)
    assert message in str(err.value)


def test_another_sweep_of_the_same_name_is_refused_without_overwrite(tmp_path, capsys):
    exp_dir = str(tmp_path)
    with open(os.path.join(exp_dir, "sweep_Sw.json"), "w") as f:
        json.dump({"format": "gptlab-sweep", "name": "Sw", "grid": [["num_layers", ["2"]]], "seeds": [0],
                   "train_flags": [], "nproc_per_node": 1, "points": []}, f)
    argv = ["--name", "Sw", "--grid", "lr_scale=1,2", "--experiments_dir", exp_dir, "--dry_run"]
    with pytest.raises(UserError, match="records another sweep named Sw .*--overwrite to start this one afresh"):
        sweep_cli.main(argv)
    sweep_cli.main(argv + ["--overwrite"])
    assert capsys.readouterr().out.count("[would run]") == 2


@pytest.mark.parametrize("argv, message", [
    # values train_gpt.py reads as one setting (float, int, auto-or-int types; a switch's true/True)
    (["--grid", "lr_scale=1,1.0,01"], "repeats a value: 1 and 1.0 are the same --lr_scale 1.0; list each value once"),
    (["--grid", "lr_scale=2,1e0,1"], "repeats a value: 1e0 and 1 are the same --lr_scale 1.0"),
    (["--grid", "num_layers=2,3,02"], "repeats a value: 2 and 02 are the same --num_layers 2"),
    (["--grid", "device_batch_size=auto,0256,256"], "repeats a value: 0256 and 256 are the same --device_batch_size"),
    (["--grid", "compile=true,True"], "repeats a value"),
    # flags that start no new run, in the grid or after --
    (["--grid", "resume=a.pt,b.pt"], "--grid resume=...: with --resume train_gpt.py starts no new run"),
    (["--grid", "dry_run=true,false"], "--grid dry_run=...: with --dry_run train_gpt.py starts no new run"),
    (["--grid", "lr_scale=1,2", "--", "--resume", "a.pt"], "after -- set --resume, with which train_gpt.py starts no"),
    (["--grid", "lr_scale=1,2", "--", "--dry_run"], "after -- set --dry_run, with which train_gpt.py starts no"),
    # the run's bookkeeping: one experiment under several names
    (["--grid", "log_every=1,10"], "--grid log_every=...: --log_every is not an experiment setting"),
    (["--grid", "checkpoint_every=0,5"], "--checkpoint_every is not an experiment setting"),
    (["--grid", "usd_per_gpu_hour=1,2"], "--usd_per_gpu_hour is not an experiment setting"),
    (["--grid", "wandb=a,b"], "--wandb is not an experiment setting"),
])
def test_a_grid_that_is_not_distinct_experiments_is_refused_before_anything_runs(argv, message, tmp_path):
    """Issue 37, item 11 (docs/faults.md): `--grid lr_scale=1,1.0,01` ran one setting three times under three
    names, and `--grid resume=a,b` was accepted; each is one error, before any run or record."""
    with pytest.raises(UserError) as err:
        sweep_cli.main(["--experiments_dir", str(tmp_path)] + argv)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert os.listdir(tmp_path) == []


def test_values_that_differ_as_settings_all_run(tmp_path, capsys):
    sweep_cli.main(["--grid", "lr_scale=1,1.5,0.1", "--grid", "device_batch_size=auto,256", "--experiments_dir",
                    str(tmp_path), "--dry_run"])
    assert capsys.readouterr().out.count("[would run]") == 6


@pytest.mark.parametrize("folder, message", [
    ("a\nb", "--experiments_dir 'a\\nb' must be a path on one line"), ("", "--experiments_dir must not be empty")])
def test_an_experiments_dir_the_sweep_cannot_read_back_is_refused(tmp_path, monkeypatch, folder, message):
    """Each run's folder is read back from its one "run folder: PATH" line: a newline in --experiments_dir would
    cut it, and every finished run would be recorded as failed (issue 37, item 7's odd names)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="^" + re.escape(message)):
        sweep_cli.main(["--grid", "lr_scale=1,2", "--experiments_dir", folder])
    assert os.listdir(tmp_path) == []
