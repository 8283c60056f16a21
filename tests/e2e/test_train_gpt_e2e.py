"""train_gpt.py end to end on CPU, as a subprocess: a real tiny training run and its run folder, 1 vs 2 ranks, a
simulated two-node launch, exact resume, faults, and bad input through the command line. The model's pieces and
the in-process checks: tests/unit/test_train_gpt.py."""
import glob
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import HELLASWAG_VAL, REPO, SHARED_DATA, free_port, run_script, run_scripts, unreadable_file
from helpers.tiny_runs import only_run_dir, run_main_expecting, tiny_args
from gptlab.checkpoint import checkpointing
from gptlab.train import records
from gptlab.dataset.shards import read_shard, write_shard

sys.path.insert(0, REPO)
from gptlab.checkpoint import model_source  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")


def train_losses(run_dir):
    return {r["step"]: r["train_loss"] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
            if r["train_loss"] is not None}


def reference_hellaswag(logits_fn, enc, n):
    """(acc, acc_norm) over the first n examples of the real file, scored one ending at a time as build-nanogpt's
    hellaswag.py does: row = [<|endoftext|>] + ctx + " " + ending; the ending's loss is the sum (acc) or mean
    (acc_norm) of its tokens' cross-entropy, over the tokenizer's logits; the lowest loss wins."""
    correct = [0, 0]
    with open(HELLASWAG_VAL) as f:
        examples = [json.loads(line) for _, line in zip(range(n), f)]
    for ex in examples:
        prefix = [enc.eot_token] + enc.encode_ordinary(ex["ctx"])
        sums, means = [], []
        for ending in ex["endings"]:
            row = prefix + enc.encode_ordinary(" " + ending)
            log_probs = torch.log_softmax(logits_fn(torch.tensor([row]))[0].double(), dim=-1)
            losses = [-float(log_probs[t - 1, row[t]]) for t in range(len(prefix), len(row))]
            sums.append(sum(losses))
            means.append(sum(losses) / len(losses))
        correct[0] += sums.index(min(sums)) == ex["label"]
        correct[1] += means.index(min(means)) == ex["label"]
    return correct[0] / n, correct[1] / n


def val_losses(run_dir):
    return {r["step"]: r["val_loss"] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
            if r["val_loss"] is not None}


# ------------------------------------------------------------------------------------------------ full runs
def test_tiny_model_trains_and_writes_a_complete_run_folder(tiny, tmp_path):
    """A real run: the loss falls; config/metrics/log/results/code/checkpoint are complete and sane."""
    argv = tiny_args(tiny, tmp_path, train_steps=40, val_loss_every=20, save_model=True, hellaswag_limit=8,
                     hellaswag_every=15, hellaswag_path=HELLASWAG_VAL, sample_tokens=8)
    proc = run_script(["train_gpt.py"] + argv, check=True)
    # output to pipes, as to a log file: whole lines, no cursor moves from the nested HellaSwag bar, no \r redraws
    assert not re.search(r"[\x1b\r]", proc.stdout + proc.stderr), repr(proc.stderr[:500])
    run_dir = only_run_dir(tmp_path)
    assert os.path.basename(run_dir)[:15].replace("_", "").isdigit()
    losses = train_losses(run_dir)
    assert sorted(losses) == list(range(1, 41))
    assert np.mean([losses[s] for s in range(36, 41)]) < np.mean([losses[s] for s in range(1, 6)]) - 0.8
    vals = val_losses(run_dir)
    assert sorted(vals) == [0, 20, 40] and vals[40] < vals[0] - 0.5
    rows = records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
    with open(os.path.join(run_dir, records.METRICS_FILE)) as f:
        assert f.readline().strip().split(",") == records.METRICS_COLUMNS
    step_rows = [r for r in rows if r["train_loss"] is not None]
    assert all(r["tokens"] == r["step"] * 1024 and r["tokens_per_s"] > 0 and r["step_time_s"] > 0 for r in step_rows)
    assert all(r["val_loss"] is None and r["hellaswag_acc"] is None for r in step_rows)
    # the lr column: the row of step s holds the multiplier used for that update (computed at s - 1); by hand for
    # 40 steps and the default cooldown 0.4: 1.0 through step 25, then 0.1 + 0.9 * (40 - (s - 1)) / 16
    lr = {r["step"]: r["lr"] for r in step_rows}
    assert all(lr[s] == 1.0 for s in range(1, 26))
    for s, expected in [(26, 0.94375), (27, 0.8875), (29, 0.775), (33, 0.55), (37, 0.325), (40, 0.15625)]:
        assert lr[s] == pytest.approx(expected, abs=1e-6), s
    # model FLOPs per second: matmuls + the attention the masks allowed; no MFU without a known GPU peak
    assert all(r["tflops_per_gpu"] > 0 and r["mfu"] is None for r in step_rows)
    fastest = max(step_rows, key=lambda r: r["tokens_per_s"])
    assert fastest["tflops_per_gpu"] == max(r["tflops_per_gpu"] for r in step_rows)
    hs_rows = [r for r in rows if r["hellaswag_acc"] is not None]
    assert [r["step"] for r in hs_rows] == [15, 30, 40]  # its own schedule, independent of val_loss_every

    with open(os.path.join(run_dir, records.CONFIG_FILE)) as f:
        config = json.load(f)
    for key in ("world_size", "device", "gpu_name", "gpu_count", "n_params", "tokenizer_name",
                "tokenizer_ranks_sha256", "command", "git_commit", "versions", "start_time", "grad_acc_steps",
                "batch_size", "train_files", "seed"):
        assert key in config, key
    assert config["world_size"] == 1 and config["grad_acc_steps"] == 2 and config["device"] == "cpu"
    assert config["tokenizer_name"] == os.path.basename(tiny["tokenizer"])[:-4]
    # today's config has the committed baselines' settings keys and wording, so a quickstart run still joins
    # their seed group (gptlab.compare.seed_group_key)
    from gptlab.compare import seed_group_key

    with open(sorted(glob.glob(os.path.join(REPO, "experiments", "2*_Quickstart", records.CONFIG_FILE)))[0]) as f:
        baseline_config = json.load(f)
    assert json.loads(seed_group_key(config)).keys() == json.loads(seed_group_key(baseline_config)).keys()
    assert (config["lr_column"], config["timing"]) == (baseline_config["lr_column"], baseline_config["timing"])

    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "finished" and results["steps"] == 40 and results["tokens"] == 40 * 1024
    assert math.isclose(results["final_val_loss"], vals[40], rel_tol=1e-6)
    assert 0 < results["final_val_bpb"] < results["final_val_loss"] / math.log(2)  # > 1 byte per token
    assert results["hellaswag"]["n"] == 8
    for key in ("wall_time_s", "peak_mem_allocated_gb", "peak_mem_reserved_gb", "n_params", "gpu_name",
                "world_size", "tokenizer", "model_name", "seed"):
        assert key in results, key
    assert results["n_params"] == config["n_params"] > 0 and results["peak_mem_allocated_gb"] > 0
    assert 0 < results["train_time_s"] < results["wall_time_s"]
    assert results["tflops_per_gpu"] > 0 and results["mfu"] is None and config["gpu_bf16_peak_tflops"] is None
    assert min(r["tflops_per_gpu"] for r in step_rows) <= results["tflops_per_gpu"] <= fastest["tflops_per_gpu"]

    with open(os.path.join(run_dir, records.LOG_FILE)) as f:
        log = f.read()
    for needle in ("command:", "config:", "versions:", "hardware:", "parameters:", "step 40/40 train_loss",
                   "TFLOP/s/GPU", "peak memory (CPU: process max RSS", "speed after the first step:",
                   "(MFU: no bf16 peak known for this device)", "sample:", "hellaswag acc", "results:"):
        assert needle in log, needle

    code = os.path.join(run_dir, records.CODE_DIR)
    from gptlab.train.code_backup import rebuild_sources

    rebuilt = rebuild_sources(run_dir)  # research files whole; the rest from the commit + uncommitted.patch
    for rel in ("train_gpt.py", "model.py", "gptlab/dataset/loader.py", "gptlab/train/records.py",
                "requirements.txt"):
        with open(os.path.join(REPO, rel), "rb") as f:
            assert rebuilt[rel] == f.read(), rel
    assert os.path.isfile(os.path.join(code, "model.py")) and os.path.isfile(os.path.join(code, "train_gpt.py"))
    with open(os.path.join(code, "tokenizer_train_script.py")) as f:
        assert "def train_tiny_bpe" in f.read()

    ckpt_path = os.path.join(run_dir, records.CHECKPOINT_DIR, "step_000040.pt")
    model, _, ckpt = model_source.load_model(ckpt_path)
    assert ckpt["step"] == 40 and ckpt["tokenizer"]["ranks_sha256"] == config["tokenizer_ranks_sha256"]
    assert not any(k.startswith("_orig_mod.") for k in ckpt["model"])
    assert len(ckpt["optimizers"]) == 2 and ckpt["dataloader"]["pos"] > 0
    # the final HellaSwag figures are those of these final weights, scored one ending at a time
    logits_fn, enc, _ = model_source.checkpoint_logits_fn(ckpt_path)
    acc, acc_norm = reference_hellaswag(logits_fn, enc, 8)
    assert (results["hellaswag"]["acc"], results["hellaswag"]["acc_norm"]) == (acc, acc_norm)
    assert "error" not in proc.stderr.lower()


def test_one_and_two_ranks_and_micro_batches_give_the_same_loss_curve(tiny, tmp_path):
    """1 rank x 1 micro-batch, 1 rank x 2 and 2 ranks x 1 take the same 1024-token steps, so their curves agree.
    Comparing all three catches a loss normalised per micro-batch instead of per step (1 x 2 and 2 x 1 alone
    would agree with each other). The first step's loss is known by hand: the zero-initialised head gives
    uniform logits over the 640 padded ids (513 rounded up to a multiple of 128), ln 640."""
    flags = dict(train_steps=12, val_loss_every=6)
    run_scripts([["train_gpt.py"] + tiny_args(tiny, tmp_path / "one", device_batch_size=1024, **flags),
                 ["train_gpt.py"] + tiny_args(tiny, tmp_path / "acc", **flags)], check=True)
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"]
               + tiny_args(tiny, tmp_path / "two", **flags), check=True)
    dirs = {name: only_run_dir(tmp_path / name) for name in ("one", "acc", "two")}
    layouts = {}
    for name, run_dir in dirs.items():
        with open(os.path.join(run_dir, records.CONFIG_FILE)) as f:
            config = json.load(f)
        layouts[name] = (config["world_size"], config["grad_acc_steps"], config["device_batch_size"])
    assert layouts == {"one": (1, 1, 1024), "acc": (1, 2, 512), "two": (2, 1, 512)}
    assert tiny["n_vocab"] == 513
    curves = {name: train_losses(run_dir) for name, run_dir in dirs.items()}
    for name, losses in curves.items():
        assert sorted(losses) == list(range(1, 13)), name
        assert losses[1] == pytest.approx(math.log(640), rel=1e-6), name
        for step in losses:
            assert abs(losses[step] - curves["one"][step]) <= 1e-4 * curves["one"][step], (name, step)
    vals = {name: val_losses(run_dir) for name, run_dir in dirs.items()}
    for name, losses in vals.items():
        assert sorted(losses) == [0, 6, 12] and losses[0] == pytest.approx(math.log(640), rel=1e-6), name
        for step in losses:
            assert abs(losses[step] - vals["one"][step]) <= 1e-4 * vals["one"][step], (name, step)
    assert len(glob.glob(str(tmp_path / "two" / "*"))) == 1  # rank 1 writes no folder of its own


def test_compiled_bfloat16_two_rank_run_follows_the_eager_float32_curve(tiny, tmp_path):
    """The GPU recipe's pieces that run on CPU: torch.compile of the whole model, bfloat16 autocast, and the
    gradient hooks firing after a compiled backward on 2 ranks (gloo). FlexAttention itself needs CUDA."""
    flags = dict(train_steps=6, val_loss_every=0)
    run_scripts([["train_gpt.py"] + tiny_args(tiny, tmp_path / "eager", **flags),
                 ["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"]
                 + tiny_args(tiny, tmp_path / "compiled", compile=True, dtype="bfloat16", **flags)], check=True)
    compiled = only_run_dir(tmp_path / "compiled")
    with open(os.path.join(compiled, records.CONFIG_FILE)) as f:
        config = json.load(f)
    assert config["compile"] is True and config["dtype"] == "bfloat16" and config["world_size"] == 2
    # one graph per call signature: the training micro-batch (with grad) and validation (no_grad); the long window
    # growing over the 6 steps changes the masks' values, not their shapes, so it must not add one
    with open(os.path.join(compiled, records.RESULTS_FILE)) as f:
        assert json.load(f)["compiled_graphs"] == 2
    with open(os.path.join(compiled, records.LOG_FILE)) as f:
        assert "torch.compile: 2 graph(s) compiled" in f.read()
    a, b = train_losses(only_run_dir(tmp_path / "eager")), train_losses(compiled)
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for step in a:  # bfloat16 matmuls: close, not equal
        assert abs(a[step] - b[step]) <= 0.02 * a[step], (step, a[step], b[step])
    assert b[6] < b[1]


def test_simulated_two_node_launch_trains(tiny, tmp_path):
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    argv = tiny_args(tiny, tmp_path, train_steps=6, val_loss_every=0)
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={i}",
                               "--nproc_per_node=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                               "--rdzv_id=gptlab-test", "train_gpt.py"] + argv,
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, records.CONFIG_FILE)) as f:
        assert json.load(f)["world_size"] == 2
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        assert json.load(f)["status"] == "finished"
    assert sorted(train_losses(run_dir)) == list(range(1, 7))


def test_no_process_group_thread_outlives_main(tiny, tmp_path):
    """A group that destroy_process_group could not free kept its gloo threads into interpreter shutdown, where
    ranks sometimes died with SIGABRT after a finished run (torch.distributed.nn, imported lazily once a group
    existed, holds group.WORLD in ten default arguments; gptlab.core.distributed imports it first)."""
    out = str(tmp_path / "threads.json")
    argv = tiny_args(tiny, tmp_path, train_steps=2, val_loss_every=0)
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()),
                "tests/helpers/threads_after_main.py", out, "--"] + argv, check=True)
    for rank in range(2):
        with open(f"{out}.rank{rank}") as f:
            seen = json.load(f)
        assert any("gloo" in name for name in seen["during"]), seen  # the probe sees a live group's threads
        assert seen["after"] == [], (rank, seen)


def test_resume_reproduces_the_uninterrupted_curve(tiny, tmp_path):
    argv = tiny_args(tiny, tmp_path / "straight", train_steps=10, val_loss_every=5, checkpoint_every=5)
    run_script(["train_gpt.py"] + argv, check=True)
    straight = only_run_dir(tmp_path / "straight")
    ckpt = os.path.join(straight, records.CHECKPOINT_DIR, "step_000005.pt")
    assert os.path.isfile(ckpt) and os.path.isfile(os.path.join(straight, records.CHECKPOINT_DIR, "step_000010.pt"))
    # three resumes of the same checkpoint, side by side: with the run's flags, --resume alone, and on 2 ranks
    run_scripts([["train_gpt.py"] + tiny_args(tiny, tmp_path / "resumed", train_steps=10, val_loss_every=5,
                                              resume=ckpt),
                 ["train_gpt.py", "--resume", ckpt, "--experiments_dir", str(tmp_path / "bare")],
                 ["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"]
                 + tiny_args(tiny, tmp_path / "resumed2", train_steps=10, val_loss_every=5, resume=ckpt)],
                check=True)
    resumed = only_run_dir(tmp_path / "resumed")
    a, b = train_losses(straight), train_losses(resumed)
    assert sorted(b) == [6, 7, 8, 9, 10]
    for step in b:
        assert abs(a[step] - b[step]) <= 1e-6 * abs(a[step]), (step, a[step], b[step])
    va, vb = val_losses(straight), val_losses(resumed)
    assert abs(va[10] - vb[10]) <= 1e-6 * va[10]
    with open(os.path.join(resumed, records.CONFIG_FILE)) as f:
        config = json.load(f)
    assert config["resume_step"] == 5 and config["resumed_from"] == ckpt
    from gptlab.compare import load_run
    assert any(n.startswith(f"resumed at step 5 from {ckpt}") for n in load_run(resumed).notes)
    # --resume alone: every other setting comes from the checkpoint
    bare = only_run_dir(tmp_path / "bare")
    d = train_losses(bare)
    assert sorted(d) == [6, 7, 8, 9, 10] and all(abs(a[k] - d[k]) <= 1e-6 * abs(a[k]) for k in d)
    with open(os.path.join(bare, records.CONFIG_FILE)) as f:
        config = json.load(f)
    assert {"tokenizer", "train_files", "num_layers", "model_dim", "train_steps"} <= set(config["from_checkpoint"])
    assert config["model_dim"] == 64 and config["from_checkpoint"].count("experiments_dir") == 0
    with open(os.path.join(bare, records.LOG_FILE)) as f:
        assert f"resuming {ckpt} at step 5 with its settings: " in f.read()
    # the checkpoint holds the full optimizer state and a world-size-free data position: resume on 2 ranks too
    c = train_losses(only_run_dir(tmp_path / "resumed2"))
    assert sorted(c) == [6, 7, 8, 9, 10]
    for step in c:
        assert abs(a[step] - c[step]) <= 1e-5 * abs(a[step]), (step, a[step], c[step])


def test_two_rank_checkpoint_resumes_on_one_rank_with_accumulation_and_uneven_muon_chunks(tiny, tmp_path):
    """Muon's momentum lives on each matrix's owner rank; a 2-rank checkpoint must still hold all of it. 3 layers
    give an odd number of matrices per shape (a chunk with an idle rank), 2048 tokens/step gives 2 micro-batches
    per rank, so the gradient hooks fire only on the last one."""
    flags = dict(num_layers=3, batch_size=2048, train_steps=8, val_loss_every=0, checkpoint_every=4)
    argv = tiny_args(tiny, tmp_path / "two", **flags)
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"] + argv,
               check=True)
    two = only_run_dir(tmp_path / "two")
    with open(os.path.join(two, records.CONFIG_FILE)) as f:
        assert json.load(f)["grad_acc_steps"] == 2
    ckpt = checkpointing.load_checkpoint(os.path.join(two, records.CHECKPOINT_DIR, "step_000004.pt"))
    muon_state = ckpt["optimizers"][1]["state"]
    assert len(muon_state) == 3 * 4 and all(float(s["momentum_buffer"].abs().sum()) > 0 for s in muon_state.values())
    argv = tiny_args(tiny, tmp_path / "one", resume=os.path.join(two, records.CHECKPOINT_DIR, "step_000004.pt"),
                     **flags)
    run_script(["train_gpt.py"] + argv, check=True)
    a, b = train_losses(two), train_losses(only_run_dir(tmp_path / "one"))
    assert sorted(b) == [5, 6, 7, 8]
    for step in b:
        assert abs(a[step] - b[step]) <= 1e-5 * abs(a[step]), (step, a[step], b[step])


def test_a_checkpoint_scores_on_hellaswag_through_checkpoint_logits_fn(tiny, tmp_path):
    from gptlab.evals.hellaswag import evaluate_hellaswag

    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path, train_steps=3, val_loss_every=0, save_model=True),
               check=True)
    ckpt_path = os.path.join(only_run_dir(tmp_path), records.CHECKPOINT_DIR, "step_000003.pt")
    logits_fn, enc, ckpt = model_source.checkpoint_logits_fn(ckpt_path)
    assert enc.n_vocab == tiny["n_vocab"] and ckpt["step"] == 3
    tokens = torch.tensor([enc.encode_ordinary("The quick brown fox jumps over the lazy dog. " * 6)])
    logits = logits_fn(tokens)
    assert logits.shape == (1, tokens.shape[1], enc.n_vocab) and torch.isfinite(logits).all()
    assert torch.allclose(logits_fn(tokens[:, :50]), logits[:, :50], atol=1e-5)  # padding never leaks backwards
    result = evaluate_hellaswag(logits_fn, enc, HELLASWAG_VAL, limit=8, progress=False)
    assert result["n"] == 8
    assert (result["acc"], result["acc_norm"]) == reference_hellaswag(logits_fn, enc, 8)


def test_nan_loss_stops_the_run_and_keeps_the_good_checkpoint(tiny, tmp_path):
    """Weights that turn NaN (here: planted in a checkpoint) stop training with a message and a failed result."""
    good = tmp_path / "good"
    run_script(["train_gpt.py"] + tiny_args(tiny, good, train_steps=4, val_loss_every=0, save_model=True), check=True)
    good_ckpt = os.path.join(only_run_dir(good), records.CHECKPOINT_DIR, "step_000004.pt")
    ckpt = checkpointing.load_checkpoint(good_ckpt)
    ckpt["model"]["embed.weight"][5:50] = float("nan")
    bad_ckpt = str(tmp_path / "poisoned.pt")
    checkpointing.save_checkpoint(bad_ckpt, model_state=ckpt["model"], model_config=ckpt["model_config"], step=4,
                        args=ckpt["args"], tokenizer=ckpt["tokenizer"], optimizer_states=ckpt["optimizers"],
                        dataloader_state=ckpt["dataloader"], rng_states=ckpt["rng"], extra=ckpt["extra"],
                        model_source=ckpt["model_source"])
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "bad", train_steps=8, val_loss_every=0,
                                                   checkpoint_every=1, resume=bad_ckpt))
    assert proc.returncode == 2
    assert "training loss became nan at step 5" in proc.stderr and "Traceback" not in proc.stderr
    run_dir = only_run_dir(tmp_path / "bad")
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "failed" and "nan" in results["error"]
    assert not glob.glob(os.path.join(run_dir, records.CHECKPOINT_DIR, "*.pt"))  # nothing written after the NaN
    assert os.path.isfile(good_ckpt)


# ------------------------------------------------------------------------------------------------ bad input
def test_unreadable_shard_is_named(tiny, tmp_path):
    with open(glob.glob(tiny["train"])[0], "rb") as f:
        data = f.read()
    locked = tmp_path / "train_000001.bin"
    locked.write_bytes(data)
    locked.chmod(0)
    unreadable_file(tmp_path / "probe.txt")  # skips where root cannot give up reading everything
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "exps", train_files=str(locked)))
    assert proc.returncode == 2 and str(locked) in proc.stderr and "not readable" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not glob.glob(str(tmp_path / "exps" / "*"))


def test_cli_bad_input_is_one_clean_line(tiny, tmp_path):
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path, num_heads=3))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: --model_dim 64 is not divisible by --num_heads 3")
    assert "Traceback" not in proc.stderr and not os.listdir(tmp_path)


def test_missing_hellaswag_file_warns_how_to_get_it_and_training_finishes(tiny, tmp_path):
    """The default file missing (a folder without data/hellaswag/) only warns; see the next test for a named one."""
    from gptlab.dataset.hellaswag_file import DEFAULT_PATH as missing

    (tmp_path / "elsewhere").mkdir()
    proc = run_script([os.path.join(REPO, "train_gpt.py")] + tiny_args(
        tiny, tmp_path / "exps", train_steps=2, val_loss_every=0, hellaswag_limit=4, hellaswag_every=1),
        cwd=str(tmp_path / "elsewhere"), check=True)
    run_dir = only_run_dir(tmp_path / "exps")
    with open(os.path.join(run_dir, records.LOG_FILE)) as f:
        log = f.read()
    for shown in (proc.stdout, log):  # the trainer's messages go to stdout and the run's log
        assert f"warning: HellaSwag file {missing} not found" in shown and "python download_hellaswag.py" in shown
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "finished" and results["steps"] == 2 and results["hellaswag"] is None
    assert results["final_val_loss"] > 0
    assert all(r["hellaswag_acc"] is None for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE)))


def test_cli_asking_for_more_validation_than_the_val_shards_hold_fails_before_training(tiny, tmp_path):
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path, val_steps=100000, val_batch_size=256))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: validation needs 200000 rows of 128 tokens"), proc.stderr
    assert "lower --val_steps or --val_batch_size" in error
    assert not os.listdir(tmp_path), "nothing is created before the check"


def test_resume_with_a_different_architecture_is_refused(tiny, tmp_path):
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", train_steps=2, val_loss_every=0, save_model=True),
               check=True)
    ckpt = os.path.join(only_run_dir(tmp_path / "a"), records.CHECKPOINT_DIR, "step_000002.pt")
    run_main_expecting(tiny, tmp_path, ["--num_layers 4 (checkpoint) vs 3"], num_layers=3, resume=ckpt)
    run_main_expecting(tiny, tmp_path, ["not a gptlab checkpoint"], resume=tiny["tokenizer"])


# ------------------------------------------------------------------------------------------------ benchmark
def test_bench_runs_on_cpu(tmp_path):
    out = tmp_path / "bench.json"
    run_script(["bench/bench_train.py", "--device", "cpu", "--num_layers", "2", "--model_dim", "64", "--num_heads", "2",
                "--seq_len", "128", "--device_batch_size", "256", "--steps", "1", "--warmup", "1",
                "--peak_tflops", "1.0", "--out", str(out)], check=True)
    report = json.loads(out.read_text())
    (r,) = report["results"]
    assert report["device"] == "cpu" and r["compiled"] is False and r["tokens_per_s"] > 0
    assert math.isclose(r["mfu"], r["achieved_tflops"] / 1.0) and 0 < r["attention_flops"] < r["flops_per_step"]
    assert r["peak_mem_allocated_gb"] > 0 and (r["grad_acc_steps"], r["device_batch_size"]) == (2, 256)
    assert r["model_only"]["tokens_per_s"] > 0 and r["model_only"]["tokens"] == 256  # the model alone: one micro-batch


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups")
def test_ctrl_c_records_an_interrupted_run_and_names_the_checkpoint_to_resume(tiny, tmp_path):
    import signal
    import time

    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    argv = tiny_args(tiny, tmp_path, train_steps=5000, val_loss_every=0, checkpoint_every=3)
    proc = subprocess.Popen([sys.executable, "train_gpt.py"] + argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        dirs = glob.glob(str(tmp_path / "*_tiny"))
        if dirs and glob.glob(os.path.join(dirs[0], records.CHECKPOINT_DIR, "step_*.pt")):
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "interrupted" and results["steps"] >= 3
    assert results["checkpoint"].endswith(".pt") and os.path.isfile(results["checkpoint"])
    with open(os.path.join(run_dir, records.LOG_FILE)) as f:
        log = f.read()
    assert f"run interrupted (Ctrl-C) after step {results['steps']}; resume with --resume " in log
    assert "Traceback" not in err and "\ninterrupted" in err
    from gptlab.compare import load_run
    assert load_run(run_dir).status == "interrupted"


def test_a_hung_rank_makes_the_others_fail_within_the_collective_timeout(tiny, tmp_path):
    """Rank 1 stops answering at step 3 (tests/helpers/hung_rank_train.py); rank 0 must give up on the next
    collective after GPTLAB_DIST_TIMEOUT_S (5 s here), record the failure, and torchrun must end the group."""
    import time

    start = time.monotonic()
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()),
                       "tests/helpers/hung_rank_train.py"] + tiny_args(tiny, tmp_path, train_steps=50,
                                                                        val_loss_every=0, log_every=1),
                      timeout=300, env_extra={"GPTLAB_DIST_TIMEOUT_S": "5", "GPTLAB_TEST_HANG_RANK": "1",
                                              "GPTLAB_TEST_HANG_STEP": "2"})
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert elapsed < 120, elapsed  # not the default 600 s
    root_cause = proc.stderr[proc.stderr.index("Root Cause"):]
    assert "rank      : 0 (local_rank: 0)" in root_cause, proc.stderr[-3000:]  # rank 0 gave up first
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    # gloo says "Timed out waiting 5000ms" or "Application timeout caused pair closure", by where rank 0 waits
    assert results["status"] == "failed" and re.search("timed? ?out", results["error"].lower()), results["error"]
    assert sorted(train_losses(run_dir)) == [1, 2]  # steps 1 and 2 done, step 3 never completed


# ------------------------------------------------------------------------------------------------ faults
def test_a_damaged_checkpoint_is_refused_by_its_checksum(tiny, tmp_path):
    """Eight bytes of a checkpoint's tensor data inverted (its zip structure intact) must not resume. Inverted, not
    zeroed: zeros written over a tensor that is zero there (a momentum buffer still at 0) would change nothing."""
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", train_steps=2, val_loss_every=0, save_model=True),
               check=True)
    good = os.path.join(only_run_dir(tmp_path / "a"), records.CHECKPOINT_DIR, "step_000002.pt")
    data = bytearray(open(good, "rb").read())
    assert checkpointing.load_checkpoint(good)["step"] == 2 and len(data) > 3_000_100
    data[3_000_000:3_000_008] = bytes(b ^ 0xFF for b in data[3_000_000:3_000_008])
    flipped = tmp_path / "flip.pt"
    flipped.write_bytes(bytes(data))
    proc = run_script(["train_gpt.py", "--resume", str(flipped), "--experiments_dir", str(tmp_path / "b")])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"error: checkpoint {flipped} is damaged" in proc.stderr and not (tmp_path / "b").exists()


def test_a_full_disk_while_checkpointing_is_one_error_and_a_failed_run(tiny, tmp_path):
    """Files may not grow past 2 MB (RLIMIT_FSIZE, with SIGXFSZ ignored so writes fail as on a full disk): the
    logs fit, a checkpoint (~6 MB) does not."""
    launcher = ("import resource, runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20)); sys.argv = sys.argv[1:]; "
                "runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = run_script(["-c", launcher, "train_gpt.py"] + tiny_args(tiny, tmp_path, train_steps=4, val_loss_every=0,
                                                                   checkpoint_every=2))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "error: could not write checkpoint" in proc.stderr and "step_000002.pt" in proc.stderr
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "failed" and "could not write checkpoint" in results["error"]
    assert os.listdir(os.path.join(run_dir, records.CHECKPOINT_DIR)) == []  # no half-written file left


def test_resume_on_rebuilt_shards_is_refused_unless_asked_for(tiny, tmp_path):
    """The checkpoint records its data's fingerprint: the same file names holding other documents (as a folder
    rebuilt with another seed does) are refused, --allow_new_data goes on anyway."""
    import shutil

    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", train_steps=2, val_loss_every=0, save_model=True),
               check=True)
    ckpt = os.path.join(only_run_dir(tmp_path / "a"), records.CHECKPOINT_DIR, "step_000002.pt")
    assert set(checkpointing.load_checkpoint(ckpt)["data"]) == {"train_sha256", "val_sha256"}
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(tiny["dir"], rebuilt)
    for path in sorted(glob.glob(str(rebuilt / "train_*.bin"))):  # same names and sizes, rows in another order
        tokens = np.asarray(read_shard(path)).copy()
        write_shard(path, np.roll(tokens, 4096), overwrite=True)
    flags = dict(train_steps=4, val_loss_every=0, resume=ckpt, train_files=str(rebuilt / "train_*.bin"))
    message = run_main_expecting(tiny, tmp_path, ["trained on other train data", "--allow_new_data"], **flags)
    assert "rebuilt" in message
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "b", allow_new_data=True, **flags), check=True)


def test_resume_on_more_shards_goes_on_from_their_beginning_with_allow_new_data(tiny, tmp_path):
    """Shards of other names (three where the run had two): refused by default; --allow_new_data trains on them
    from their beginning, saying so, to the end of the run."""
    from helpers.tiny_data import make_dataset

    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", train_steps=2, val_loss_every=0, save_model=True),
               check=True)
    ckpt = os.path.join(only_run_dir(tmp_path / "a"), records.CHECKPOINT_DIR, "step_000002.pt")
    more = make_dataset(str(tmp_path / "three"), train_shards=3)
    assert len(glob.glob(more["train"])) == 3 != len(glob.glob(tiny["train"]))
    flags = dict(train_steps=4, val_loss_every=0, resume=ckpt, train_files=more["train"])
    run_main_expecting(tiny, tmp_path, ["--allow_new_data"], **flags)
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "b", allow_new_data=True, **flags), check=True)
    assert "(2 then, 3 now), so the data starts at their beginning" in proc.stdout
    with open(os.path.join(only_run_dir(tmp_path / "b"), records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "finished" and results["steps"] == 4


def test_a_run_resumed_at_a_hellaswag_step_scores_it(tiny, tmp_path):
    """A checkpoint at step 2 is written before step 2's evaluations (a run stopped there never scores them): the
    run resumed from it evaluates val and HellaSwag at 2, as the straight run did, with the same figures."""
    flags = dict(train_steps=4, val_loss_every=2, checkpoint_every=2, hellaswag_limit=4, hellaswag_every=2,
                 hellaswag_path=HELLASWAG_VAL)
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", **flags), check=True)
    straight = only_run_dir(tmp_path / "a")
    ckpt = os.path.join(straight, records.CHECKPOINT_DIR, "step_000002.pt")
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "b", resume=ckpt, **flags), check=True)

    def evaluations(run_dir):
        return {(r["step"], name): r[name] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
                for name in ("val_loss", "hellaswag_acc_norm") if r[name] is not None}

    a, b = evaluations(straight), evaluations(only_run_dir(tmp_path / "b"))
    assert sorted(a) == [(0, "val_loss"), (2, "hellaswag_acc_norm"), (2, "val_loss"), (4, "hellaswag_acc_norm"),
                         (4, "val_loss")]
    assert sorted(b) == sorted(a)[1:] and all(b[k] == a[k] for k in b)  # from its start step on, the same


def test_resume_alone_works_from_another_folder(tiny, tmp_path):
    """A run started with relative paths, resumed by `--resume PATH` alone from elsewhere: the checkpoint keeps
    its paths absolute."""
    import shutil

    work = tmp_path / "work"
    shutil.copytree(tiny["dir"], work / "shards")
    shutil.copy(tiny["tokenizer"], work / "tok.pkl")
    argv = tiny_args(tiny, "exps", train_steps=4, val_loss_every=0, checkpoint_every=2, tokenizer="tok.pkl",
                     train_files="shards/train_*.bin", val_files="shards/val_*.bin")
    run_script([os.path.join(REPO, "train_gpt.py")] + argv, cwd=str(work), check=True)
    ckpt = os.path.join(only_run_dir(work / "exps"), records.CHECKPOINT_DIR, "step_000002.pt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_script([os.path.join(REPO, "train_gpt.py"), "--resume", ckpt], cwd=str(elsewhere), check=True)
    assert len(glob.glob(str(work / "exps" / "*_tiny*"))) == 2 and not os.listdir(elsewhere)


def test_a_checkpoint_missing_a_part_or_not_fitting_the_model_is_one_error(tiny, tmp_path):
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", train_steps=2, val_loss_every=0, save_model=True),
               check=True)
    ckpt = checkpointing.load_checkpoint(os.path.join(only_run_dir(tmp_path / "a"), records.CHECKPOINT_DIR, "step_000002.pt"))
    saved = {k: v for k, v in ckpt.items() if k not in ("format", "format_version", "sha256")}
    rename = {"model_state": "model", "optimizer_states": "optimizers", "dataloader_state": "dataloader",
              "rng_states": "rng"}

    def resave(name, **changes):
        fields = {new: saved[old] for new, old in rename.items()}
        fields.update(model_config=saved["model_config"], step=2, args=saved["args"], tokenizer=saved["tokenizer"],
                      extra=saved["extra"], data=saved["data"], model_source=saved["model_source"])
        fields.update(changes)
        return checkpointing.save_checkpoint(str(tmp_path / name), **fields)

    no_optimizers = resave("no_opt.pt", optimizer_states=[])
    run_main_expecting(tiny, tmp_path, ["--resume checkpoint does not fit", "0 optimizer states for 2"],
                       train_steps=4, resume=no_optimizers)
    model = dict(saved["model"], **{"embed.weight": saved["model"]["embed.weight"][:, :32]})
    wrong_shape = resave("wrong_shape.pt", model_state=model)
    message = run_main_expecting(tiny, tmp_path, ["size mismatch for embed.weight"], train_steps=4,
                                 resume=wrong_shape)
    assert "\n" not in message


def test_the_log_estimates_the_training_time_after_the_first_two_steps(tiny, tmp_path):
    """Step 2 is the first after the warm-up step: 18 steps are left at its measured time (metrics.csv)."""
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path, log_every=5), check=True)
    run_dir = only_run_dir(tmp_path)
    step_time = {r["step"]: r["step_time_s"] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
                 if r["step_time_s"] is not None}[2]
    line = [l for l in proc.stdout.splitlines() if l.startswith("estimated training time:")][0]
    assert line.startswith(f"estimated training time: 18 more steps x {step_time:.3g}s = ")
    seconds = round(18 * step_time)
    assert line.endswith(f"= {seconds // 60}m{seconds % 60:02d}s (evaluations not included)")
    # the first step's line is shown at once, whatever --log_every
    assert "\nstep 1/20 train_loss" in "\n" + proc.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_killed_run_shows_as_crashed_at_once_through_its_heartbeat(tiny, tmp_path):
    """kill -9 leaves no results.json; the leaderboard used to wait 10 minutes of silence before calling it crashed.
    heartbeat.json names the process, so a reader on the same host knows at once."""
    import signal
    import time

    from gptlab.compare import load_run

    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, "train_gpt.py"] + tiny_args(tiny, tmp_path, train_steps=5000,
                                                                         val_loss_every=0, log_every=1),
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            dirs = glob.glob(str(tmp_path / "*_tiny"))
            if dirs and len(train_losses(dirs[0]) if os.path.exists(os.path.join(dirs[0], records.METRICS_FILE))
                            else {}) >= 3:
                break
            time.sleep(0.2)
        run_dir = only_run_dir(tmp_path)
        assert load_run(run_dir).status == "running"
        with open(os.path.join(run_dir, records.HEARTBEAT_FILE)) as f:
            assert json.load(f)["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    run = load_run(run_dir)  # at once: no waiting for the 10-minute window
    assert run.status == "crashed" and any(f"(pid {proc.pid} on " in n and "is gone" in n for n in run.notes)
