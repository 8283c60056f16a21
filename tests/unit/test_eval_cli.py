"""evaluate.py's CHECKPOINT_OR_RUN and its default output folder, by hand."""
import os

import pytest

import evaluate
from gptlab.core.errors import UserError


def test_a_run_folder_means_its_highest_step(tmp_path):
    run = tmp_path / "20261127_Quickstart"
    (run / "checkpoints").mkdir(parents=True)
    for name in ["step_000020.pt", "step_000120.pt", "step_000100", "step_000300.pt.tmp.1.x", "notes.txt"]:
        (run / "checkpoints" / name).write_text("")
    assert evaluate.resolve_checkpoint(str(run)) == str(run / "checkpoints" / "step_000120.pt")
    (run / "checkpoints" / "step_000200").mkdir()  # a sharded checkpoint is a folder
    assert evaluate.resolve_checkpoint(str(run)) == str(run / "checkpoints" / "step_000200")
    assert evaluate.resolve_checkpoint("x/step_000010.pt") == "x/step_000010.pt"  # a checkpoint: itself
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    with pytest.raises(UserError, match="has no checkpoint"):
        evaluate.resolve_checkpoint(str(empty))


def test_default_out():
    assert evaluate.default_out("experiments/R/checkpoints/step_000120.pt") == os.path.join("experiments", "R", "evals",
                                                                                          "step_000120")
    assert evaluate.default_out("experiments/R/checkpoints/step_000200/") == os.path.join("experiments", "R", "evals",
                                                                                        "step_000200")
    assert evaluate.default_out("models/step_000120.pt") == "models/step_000120_evals"


def test_scoring_dtype_is_bfloat16_on_cuda_only_when_left_to_auto():
    assert evaluate.scoring_dtype("auto", "cuda") == "bfloat16"  # as training and --evals run the model
    assert evaluate.scoring_dtype("auto", "cpu") == "float32"  # lm-eval's float32 figures (docs/evals.md)
    assert evaluate.scoring_dtype("auto", "mps") == "float32"
    assert evaluate.scoring_dtype("float32", "cuda") == "float32"
    assert evaluate.scoring_dtype("bfloat16", "cpu") == "bfloat16"


def test_a_run_folder_trained_without_save_model_says_so(tmp_path):
    """A run folder (config.json, no checkpoints/) is no sharded checkpoint: the error names the missing folder and
    --save_model (gptlab.train.records.latest_checkpoint, which judge.py shares)."""
    run = tmp_path / "20261127_NoCheckpoints"
    run.mkdir()
    (run / "config.json").write_text("{}")
    with pytest.raises(UserError, match=r"run folder .* has no checkpoint \(.*checkpoints does not exist\); train "
                                        r"with --save_model"):
        evaluate.resolve_checkpoint(str(run))
    assert evaluate.resolve_checkpoint(str(tmp_path)) == str(tmp_path)  # not a run: taken as a (sharded) checkpoint


def test_threads_is_one_unless_omp_num_threads_or_the_flag_says_otherwise(tmp_path, monkeypatch):
    """On a CPU the forwards run on one thread by default: on shared cores torch's default (one per core) cost
    the quickstart suite several times the CPU and wall time (docs/evals.md). $OMP_NUM_THREADS (torch read it at
    start-up) is kept, and --threads N wins over both."""
    import torch

    from helpers.eval_tasks import data_dir_with, tiny_checkpoint

    ckpt, _ = tiny_checkpoint(str(tmp_path))
    data = data_dir_with(tmp_path / "data", ["copa"], limit=2)
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    for n, (env, flag, want) in enumerate([(None, [], [1]), ("3", [], []), ("3", ["--threads", "2"], [2]),
                                           ("junk", [], [1])]):
        if env is None:
            monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OMP_NUM_THREADS", env)
        calls.clear()
        evaluate.main([ckpt, "--tasks", "copa", "--data_dir", data, "--out", str(tmp_path / f"out{n}"), "--quiet",
                       "--device", "cpu", *flag])
        assert calls == want, (env, flag)
    with pytest.raises(UserError, match=r"^--threads must be auto or a positive integer, got '0' \(see "):
        evaluate.build_parser().parse_args(["c.pt", "--threads", "0"])
