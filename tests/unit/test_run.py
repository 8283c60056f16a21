"""gptlab.train.run on its own: a run's records from a few calls (finished, failed, interrupted, diverged) and the flags
a --resume run takes from its checkpoint. Expected figures are worked out by hand from the inputs."""
import argparse
import json
import math
import os

import pytest
import torch

from conftest import REPO
from gptlab.checkpoint import checkpointing
from gptlab.train import records
from gptlab.dataset.selection import RunShards
from gptlab.core.distributed import DistContext
from gptlab.core.errors import UserError
from gptlab.train.flags import add_run_flags, parse_flags
from gptlab.train.run import Run

CTX = DistContext(0, 0, 1, torch.device("cpu"), None)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from helpers.tiny_data import save_tiny_tokenizer

    from gptlab.tokenizer.format import open_tokenizer

    path = str(tmp_path_factory.mktemp("tok") / "runtest_v276.pkl")
    save_tiny_tokenizer(path, ["to be or not to be, that is the question " * 20], n_merges=20)
    return open_tokenizer(path)


class FakeLoader:
    counts = [1000, 500]  # tokens per train shard

    def state_dict(self):
        return {"pos": 7}


def make_run(tmp_path, tokenizer, **overrides):
    cfg = argparse.Namespace(experiments_dir=str(tmp_path), model_name="unit", train_steps=4, batch_size=256,
                             grad_acc_steps=1, device_batch_size=256, dtype="float32", compile=False,
                             attention="sdpa", resume=None, from_checkpoint=[], log_every=0, seed=3,
                             train_files=["shards/t*.bin"], val_files=["shards/v*.bin"], tokenizer="runtest",
                             hellaswag_path="elsewhere/hs.jsonl")
    vars(cfg).update(overrides)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))  # 40 + 40 params
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.param_groups[0]["initial_lr"] = 0.1
    shards = RunShards(["t*.bin"], ["v*.bin"], ["t1.bin", "t2.bin"], ["v.bin"], [])
    run = Run(cfg, CTX, repo_root=REPO, model=model,
              model_config={"dims": 4}, optimizers=[optimizer], train_loader=FakeLoader(), tokenizer=tokenizer,
              shards=shards, extra_config={"padded_vocab": 128}, warnings=["warning: a test warning"])
    return run, model, optimizer


def read(run_dir, name):
    with open(os.path.join(run_dir, name)) as f:
        return json.load(f) if name.endswith(".json") else f.read()


def test_a_finished_run_records_config_metrics_checkpoint_and_results(tmp_path, tokenizer):
    run, model, optimizer = make_run(tmp_path, tokenizer)
    with run:
        run.log_eval(0, val_loss=2.0, val_bpb=1.5)
        run.log_step(1, train_loss=3.0, lr=1.0, step_time_s=0.5, flops=2e12)
        run.log_step(2, train_loss=2.5, lr=0.5, step_time_s=0.25, flops=2e12)
        run.save_checkpoint(2, model, [optimizer], FakeLoader())
        results = run.finish(val_loss=1.9, val_bpb=1.4, hellaswag=None)
    config = read(run.dir, records.CONFIG_FILE)
    assert (config["n_params"], config["n_params_embeddings"], config["padded_vocab"]) == (80, 40, 128)
    assert config["tokenizer_name"] == "runtest_v276" and config["train_shards"] == ["t1.bin", "t2.bin"]
    assert config["lr_column"].endswith("base learning rates: SGD matrices 0.1")
    rows = records.read_metrics(os.path.join(run.dir, records.METRICS_FILE))
    assert [(r["step"], r["tokens"], r["val_bpb"], r["train_loss"]) for r in rows] == [
        (0, 0, 1.5, None), (1, 256, None, 3.0), (2, 512, None, 2.5)]
    assert rows[1]["tokens_per_s"] == 512 and rows[2]["tokens_per_s"] == 1024  # 256 tokens in 0.5 s, 0.25 s
    assert rows[1]["tflops_per_gpu"] == 4 and rows[2]["tflops_per_gpu"] == 8 and rows[2]["mfu"] is None
    assert rows[2]["elapsed_s"] == 0.75
    # results: the speed leaves out the first step (2e12 FLOPs in 0.25 s = 8 TFLOP/s)
    on_disk = read(run.dir, records.RESULTS_FILE)
    assert on_disk == json.loads(json.dumps({"status": "finished", **results}))
    assert (results["steps"], results["tokens"], results["train_time_s"]) == (2, 512, 0.75)
    assert results["tflops_per_gpu"] == 8 and results["n_params"] == 80 and results["seed"] == 3
    ckpt = checkpointing.load_checkpoint(results["checkpoint"])
    assert ckpt["step"] == 2 and ckpt["model_config"] == {"dims": 4} and ckpt["dataloader"] == {"pos": 7}
    assert ckpt["extra"]["elapsed_s"] == 0.75 and ckpt["tokenizer"]["ranks_sha256"] == tokenizer.ranks_sha256
    # paths absolute, so --resume PATH alone works from another folder
    assert ckpt["args"]["train_files"] == [os.path.join(os.getcwd(), "shards", "t*.bin")]
    assert ckpt["args"]["tokenizer"] == os.path.abspath(tokenizer.path)
    assert ckpt["args"]["hellaswag_path"] == os.path.join(os.getcwd(), "elsewhere", "hs.jsonl")
    assert ckpt["args"]["experiments_dir"] == str(tmp_path)
    log = read(run.dir, records.LOG_FILE)
    assert "warning: a test warning" in log and "step 0/4 val_loss 2.0000 val_bpb 1.5000 train_time 0.0s" in log
    assert "1,500 tokens in 2 shard(s); 4 steps x 256 tokens = 0.68 pass(es)" in log  # 1024 / 1500
    assert "parameters: 80 total, 40 in embeddings" in log
    from gptlab.train.code_backup import rebuild_sources

    with open(os.path.join(REPO, "gptlab", "train", "run.py"), "rb") as f:  # the code is kept: whole, or commit + patch
        assert rebuild_sources(run.dir)["gptlab/train/run.py"] == f.read()


def test_an_exception_records_a_failed_run_with_its_message(tmp_path, tokenizer):
    run, _, _ = make_run(tmp_path, tokenizer)
    with pytest.raises(ValueError, match="boom"):
        with run:
            run.log_step(1, train_loss=3.0, lr=1.0, step_time_s=0.5, flops=1e9)
            raise ValueError("boom")
    results = read(run.dir, records.RESULTS_FILE)
    assert results == {"status": "failed", "error": "ValueError: boom", "model_name": "unit", "world_size": 1,
                       "tokenizer": "runtest_v276", "seed": 3}
    assert "run failed: ValueError: boom" in read(run.dir, records.LOG_FILE)


def test_ctrl_c_records_an_interrupted_run_naming_the_checkpoint(tmp_path, tokenizer):
    run, model, optimizer = make_run(tmp_path, tokenizer)
    with pytest.raises(KeyboardInterrupt):
        with run:
            run.log_step(1, train_loss=3.0, lr=1.0, step_time_s=0.5, flops=1e9)
            run.save_checkpoint(1, model, [optimizer], FakeLoader())
            run.log_step(2, train_loss=2.0, lr=1.0, step_time_s=0.5, flops=1e9)
            raise KeyboardInterrupt
    results = read(run.dir, records.RESULTS_FILE)
    path = os.path.join(run.dir, records.CHECKPOINT_DIR, "step_000001.pt")
    assert (results["status"], results["steps"], results["checkpoint"]) == ("interrupted", 2, path)
    assert f"run interrupted (Ctrl-C) after step 2; resume with --resume {path}" in read(run.dir, records.LOG_FILE)


def test_a_non_finite_loss_stops_the_run_with_one_clear_error(tmp_path, tokenizer):
    run, _, _ = make_run(tmp_path, tokenizer)
    with pytest.raises(UserError, match=r"training loss became nan at step 3; stopped \(no checkpoint was saved\)"):
        with run:
            run.check_loss(2, 1.5)  # finite: nothing happens
            run.check_loss(3, math.nan)
    assert read(run.dir, records.RESULTS_FILE)["status"] == "failed"


def build_parser():
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=8)  # a research flag
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--device", default="auto")  # a hardware flag: worked out afresh on resume
    add_run_flags(p)
    return p


def test_resume_takes_the_checkpoints_flags_unless_given_again_or_hardware(tmp_path):
    path = str(tmp_path / "c.pt")
    old_args = {"width": 32, "lr": 0.5, "device": "cuda", "model_name": "Old", "log_every": 1, "resume": "x.pt"}
    checkpointing.save_checkpoint(path, model_state={}, model_config={}, step=3, args=old_args)
    args, ckpt = parse_flags(build_parser, ["--resume", path, "--lr", "2"], fresh_on_resume=("device",))
    assert ckpt["step"] == 3
    assert (args.width, args.lr, args.device, args.model_name, args.log_every, args.resume) == (
        32, 2.0, "auto", "Old", 10, path)
    assert sorted(args.from_checkpoint) == ["model_name", "width"]
    args, ckpt = parse_flags(build_parser, ["--width", "4"])
    assert ckpt is None and args.width == 4 and args.from_checkpoint == []


def test_the_resume_command_repeats_each_hardware_flag_the_run_chose_and_no_auto():
    """Each of train_gpt.FRESH_ON_RESUME shapes a run's numbers or memory (dtype, compile, attention kernels, the
    micro-batch split, sharding; the device type decides their auto values): the words a resume command repeats,
    in the parser's order; --device keeps its type (cuda:1 numbers one machine's GPUs)."""
    from gptlab.train.flags import chosen_flags
    from helpers.tiny_runs import train_gpt

    parser = train_gpt.build_parser()
    argv = ["--device", "cuda:1", "--dtype", "float32", "--no-compile", "--attention", "sdpa", "--device_batch_size",
            "512", "--grad_acc_steps", "2", "--shard_params", "--log_every", "1", "--wandb", "proj"]
    assert chosen_flags(parser, parser.parse_args(argv), train_gpt.FRESH_ON_RESUME) == [
        "--device_batch_size", "512", "--grad_acc_steps", "2", "--device", "cuda", "--dtype", "float32",
        "--no-compile", "--attention", "sdpa", "--shard_params"]
    assert chosen_flags(parser, parser.parse_args(["--compile"]), train_gpt.FRESH_ON_RESUME) == ["--compile"]
    assert chosen_flags(parser, parser.parse_args([]), train_gpt.FRESH_ON_RESUME) == []  # auto: the machine's
    args, _ = parse_flags(train_gpt.build_parser, ["--preset", "gpt-1b"], presets=train_gpt.PRESETS)
    assert chosen_flags(parser, args, train_gpt.FRESH_ON_RESUME) == ["--shard_params"]  # a preset's choice too


def test_an_interrupted_run_records_its_final_figures_and_the_full_resume_command(tmp_path, tokenizer):
    run, model, optimizer = make_run(tmp_path / "a b", tokenizer, train_steps=2)
    run.resume_flags = ["--dtype", "bfloat16"]
    hellaswag = {"acc": 0.25, "acc_ci95": [0.1, 0.5], "acc_norm": 0.5, "acc_norm_ci95": [0.2, 0.8], "n": 8}
    with pytest.raises(KeyboardInterrupt):
        with run:
            run.log_step(1, train_loss=3.0, lr=1.0, step_time_s=0.5, flops=1e9)
            run.log_eval(1, val_loss=2.5, val_bpb=1.8)  # not the final one
            run.log_step(2, train_loss=2.0, lr=1.0, step_time_s=0.5, flops=1e9)
            run.save_checkpoint(2, model, [optimizer], FakeLoader())
            run.log_eval(2, val_loss=1.9, val_bpb=1.4)
            run.log_hellaswag(2, hellaswag)
            raise KeyboardInterrupt  # while results.json is written, say
    results = read(run.dir, records.RESULTS_FILE)
    assert (results["final_val_loss"], results["final_val_bpb"], results["hellaswag"]) == (1.9, 1.4, hellaswag)
    path = os.path.join(run.dir, records.CHECKPOINT_DIR, "step_000002.pt")
    assert results["resume_command"].endswith(f" --resume '{path}' --dtype bfloat16")  # quoted: a space in it
