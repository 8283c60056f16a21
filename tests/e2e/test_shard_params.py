"""--shard_params (FSDP2) and sharded checkpoints, on CPU with gloo: the same curve as one rank, resumes from a
2-rank sharded checkpoint on 1 and on 3 ranks, the whole model for every tool, and damaged folders refused.

Tolerances. The runs take the same 768-token steps (6 rows of 128), so in exact arithmetic every curve is the
same; float32 makes them differ by summation order only: gradients accumulate over 6, 3 or 2 micro-batches per
rank and are summed over 1, 2 or 3 ranks, and Newton–Schulz runs on stacks of other sizes. Measured on this model:
at most 2.8e-5 relative between 2 sharded ranks and 1 rank over 8 steps, 1e-7 between a resumed and the straight
run. The bounds (1e-4 between world sizes over a whole run, as the
unsharded 1-vs-2-rank test uses; 1e-5 for the four steps after a resume, as the unsharded 2-to-1 resume test) sit
far below what a real bug moves (an averaged instead of summed gradient halves every update: the step-2 loss
moves by ~1e-2 relative; a lost micro-batch or rank, a row block in the wrong place move it more).
"""
import glob
import json
import math
import os
import shutil

import pytest
import torch

from conftest import HELLASWAG_VAL, REPO, free_port, run_script
from helpers.tiny_runs import only_run_dir, run_json, run_main_expecting, run_metric, tiny_args
from gptlab.core.errors import UserError
from gptlab.checkpoint import checkpointing
from gptlab.train import records

# 3 layers: an odd number of matrices per shape (an idle owner rank on 2 ranks); 640-token validation = 5 rows,
# which 2 and 3 ranks share unevenly (the FSDP forward must still run equally often on every rank)
FLAGS = dict(num_layers=3, batch_size=768, device_batch_size=128, val_batch_size=640, val_steps=1, train_steps=8,
             val_loss_every=4, hellaswag_limit=10, hellaswag_path=HELLASWAG_VAL, sample_tokens=12)


def torchrun(n, argv):
    return run_script(["torchrun", f"--nproc_per_node={n}", "--master_port", str(free_port()), "train_gpt.py"] + argv,
                      check=True)


metrics = run_metric


def config(run_dir):
    return run_json(run_dir, records.CONFIG_FILE)


@pytest.fixture(scope="module")
def runs(tiny, tmp_path_factory):
    """One rank unsharded, and two ranks --shard_params with sharded checkpoints at steps 4 and 8."""
    base = tmp_path_factory.mktemp("shard_params")
    run_script(["train_gpt.py"] + tiny_args(tiny, base / "one", checkpoint_every=4, **FLAGS), check=True)
    torchrun(2, tiny_args(tiny, base / "two", shard_params=True, checkpoint_every=4, **FLAGS))
    return {"one": only_run_dir(base / "one"), "two": only_run_dir(base / "two"), "base": base}


def close(a, b, rel):
    return abs(a - b) <= rel * abs(b)


def test_two_sharded_ranks_follow_the_one_rank_curve(runs):
    one, two = runs["one"], runs["two"]
    assert (config(two)["world_size"], config(two)["grad_acc_steps"], config(two)["shard_params"]) == (2, 3, True)
    a, b = metrics(one, "train_loss"), metrics(two, "train_loss")
    assert sorted(a) == sorted(b) == list(range(1, 9))
    # step 1 by hand: the zero-initialised head gives uniform logits over 640 padded ids
    assert b[1] == pytest.approx(math.log(640), rel=1e-6)
    assert b[8] < b[1] - 0.5  # it trains
    for step in a:
        assert close(b[step], a[step], 1e-4), (step, a[step], b[step])
    va, vb = metrics(one, "val_loss"), metrics(two, "val_loss")
    assert sorted(vb) == [0, 4, 8]
    for step in va:
        assert close(vb[step], va[step], 1e-4), (step, va[step], vb[step])
    # HellaSwag (shares of different sizes per rank) and the samples (rank 0 alone) run on a whole copy of the
    # sharded weights: the same answers and the same text as the unsharded run
    results = [json.load(open(os.path.join(d, records.RESULTS_FILE))) for d in (one, two)]
    assert results[1]["hellaswag"]["n"] == 10
    assert [r["hellaswag"]["acc"] for r in results] == [results[0]["hellaswag"]["acc"]] * 2
    assert [r["hellaswag"]["acc_norm"] for r in results] == [results[0]["hellaswag"]["acc_norm"]] * 2
    samples = [[line for line in open(os.path.join(d, records.LOG_FILE)) if line.startswith("sample: ")]
               for d in (one, two)]
    assert len(samples[1]) == 3 and samples[0] == samples[1]


def test_the_checkpoint_is_a_folder_of_shards_written_by_every_rank(runs):
    import torch.distributed.checkpoint as dcp

    folder = os.path.join(runs["two"], records.CHECKPOINT_DIR, "step_000004")
    names = sorted(os.listdir(folder))
    assert names == [".metadata", "__0_0.distcp", "__1_0.distcp", "checkpoint.pt"]
    metadata = dcp.FileSystemReader(folder).read_metadata().state_dict_metadata
    # each rank wrote its own row block of a matrix: the MLP's 256 x 64 input matrix as rows 0-127 and 128-255...
    chunks = metadata["model.blocks.0.mlp.c_fc.weight"].chunks
    assert sorted((c.offsets[0], c.sizes[0]) for c in chunks) == [(0, 128), (128, 128)]
    # ...and of the Muon momentum and the Adam moments: the optimizer state is sharded too
    assert len(metadata["optim.1.blocks.0.mlp.c_fc.weight.momentum_buffer"].chunks) == 2
    assert len(metadata["optim.0.lm_head.weight.exp_avg_sq"].chunks) == 2
    assert not glob.glob(folder + ".partial-*")  # the temporary folder was renamed


@pytest.mark.parametrize("source, ranks, shard", [
    ("two", 1, False),  # a sharded folder, one process, unsharded
    ("two", 3, True),   # a sharded folder on 3 sharded ranks (rows cut in thirds, not halves)
    ("two", 2, False),  # a sharded folder on 2 unsharded ranks (whole tensors on each)
    ("one", 2, True),   # a one-file checkpoint into 2 sharded ranks (each cuts its blocks)
])
def test_a_checkpoint_resumes_on_another_world_size_with_or_without_sharding(runs, tiny, source, ranks, shard):
    ckpt = os.path.join(runs[source], records.CHECKPOINT_DIR, "step_000004" + (".pt" if source == "one" else ""))
    out = runs["base"] / f"resumed_{source}_{ranks}_{shard}"
    argv = ["--resume", ckpt, "--experiments_dir", str(out)] + (["--shard_params"] if shard else [])
    if ranks == 1:
        run_script(["train_gpt.py"] + argv, check=True)
    else:
        torchrun(ranks, argv)
    resumed = only_run_dir(out)
    assert (config(resumed)["world_size"], config(resumed)["shard_params"]) == (ranks, shard)
    a, b = metrics(runs[source], "train_loss"), metrics(resumed, "train_loss")
    assert sorted(b) == [5, 6, 7, 8]
    for step in b:
        assert close(b[step], a[step], 1e-5), (step, a[step], b[step])
    assert close(metrics(resumed, "val_loss")[8], metrics(runs[source], "val_loss")[8], 1e-5)


def test_every_tool_reads_the_whole_model_from_a_sharded_checkpoint(runs, tiny):
    """The weights the tools load from the folder give back the validation loss the 2-rank run measured with its
    sharded model at step 8 (another code path: FSDP's forward, summed over ranks)."""
    from gptlab.dataset.loader import ValidationSet
    from gptlab.evals.bpb import evaluate_val, token_byte_lengths
    from gptlab.tokenizer.format import open_tokenizer
    from gptlab.checkpoint.model_source import load_model

    folder = os.path.join(runs["two"], records.CHECKPOINT_DIR, "step_000008")
    model, _, ckpt = load_model(folder)
    assert ckpt["step"] == 8 and all(t.device.type == "cpu" and t.numel() for t in ckpt["model"].values())
    tok = open_tokenizer(tiny["tokenizer"])
    val = ValidationSet(sorted(glob.glob(tiny["val"])), 128, 5)
    windows = model.final_windows()

    def loss_fn(x, y):
        return model(x, model.attention_masks(x, tok.eot, windows), y)

    class Ctx:
        device, rank, world_size, is_distributed = torch.device("cpu"), 0, 1, False

    loss, _ = evaluate_val(loss_fn, val, 1, token_byte_lengths(tok.encoding, model.padded_vocab), Ctx())
    assert close(loss, metrics(runs["two"], "val_loss")[8], 1e-5)
    proc = run_script(["sample.py", folder, "--prompt", "The", "--max_tokens", "5"], check=True)
    assert proc.stdout.startswith("The") and "[5 tokens in" in proc.stderr and "Warning" not in proc.stderr


@pytest.mark.parametrize("damage, words", [
    ("flip", ["__1_0.distcp", "damaged", "its content changed"]),
    ("truncate", ["__0_0.distcp", "damaged", "bytes instead of"]),
    ("remove", [".metadata", "incomplete", "is missing"]),
    ("no_meta", ["not a complete sharded checkpoint", "checkpoint.pt"]),
])
def test_a_damaged_or_incomplete_sharded_checkpoint_is_refused_by_name(runs, tmp_path, damage, words):
    folder = str(tmp_path / "step_000004")
    shutil.copytree(os.path.join(runs["two"], records.CHECKPOINT_DIR, "step_000004"), folder)
    if damage == "flip":
        path = os.path.join(folder, "__1_0.distcp")
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
    elif damage == "truncate":
        path = os.path.join(folder, "__0_0.distcp")
        os.truncate(path, os.path.getsize(path) - 1)
    elif damage == "remove":
        os.remove(os.path.join(folder, ".metadata"))
    else:
        os.remove(os.path.join(folder, "checkpoint.pt"))
    with pytest.raises(UserError) as info:
        checkpointing.load_checkpoint(folder)
    for word in words:
        assert word in str(info.value), str(info.value)
    if damage == "flip":  # the trainer says the same in one line, before any run folder
        proc = run_script(["train_gpt.py", "--resume", folder, "--experiments_dir", str(tmp_path / "exps")])
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and lines == [f"error: {info.value}"], proc.stderr
        assert not os.path.exists(tmp_path / "exps")


def test_shard_params_on_one_process_is_refused(tiny, tmp_path):
    run_main_expecting(tiny, tmp_path, ["--shard_params", "torchrun --nproc_per_node"], shard_params=True)


def test_whole_matrices_reach_their_owners_and_come_back_in_row_blocks(tmp_path):
    run_script(["torchrun", "--nproc_per_node=3", "--master_port", str(free_port()),
                os.path.join(REPO, "tests", "helpers", "whole_matrices_ranks.py"), str(tmp_path)], check=True)
    # owners by hand (matrix i of a shape and group belongs to rank i % 3): (7,5)x4 in group 0 → ranks 0,1,2,0;
    # (2,3)x2 → 0,1; (9,4)x1 → 0; (7,5)x2 in group 1 → 0,1
    expected_calls = {0: [[[2, 7, 5], 0], [[1, 2, 3], 0], [[1, 9, 4], 0], [[1, 7, 5], 1]],
                      1: [[[1, 7, 5], 0], [[1, 2, 3], 0], [[1, 7, 5], 1]],
                      2: [[[1, 7, 5], 0]]}
    for rank in range(3):
        with open(tmp_path / f"rank{rank}.json") as f:
            verdict = json.load(f)
        assert verdict["all_equal"] and verdict["n"] == 9, verdict
        assert verdict["calls"] == expected_calls[rank]
