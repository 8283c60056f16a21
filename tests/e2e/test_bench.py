"""The benchmark scripts keep working on CPU (their figures are in the README; timings are not asserted)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, SHARED_DATA, run_script


def test_bench_tokenizer_times_several_of_our_engines_on_one_corpus(tmp_path):
    if not os.path.isdir(SHARED_DATA):
        pytest.skip("needs ../shared (make_corpus.py)")
    proc = run_script(["bench/bench_tokenizer.py", "--mb", "0.3", "--vocab", "400", "--ours", "native:cpu",
                       "python:cpu", "--skip-hf"], check=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ours ")]
    assert [line.split(":")[0] for line in lines] == ["ours native", "ours python"], proc.stdout
    assert proc.stdout.count("(400 tokens + <|endoftext|>") == 2


def test_bench_tokenizer_compares_with_huggingface_tokenizers(tmp_path):
    """The README's headline benchmark: ours and HuggingFace `tokenizers` (a requirement, for this test) on the
    same corpus; the printed ratio is ours / HF wall time."""
    import re

    if not os.path.isdir(SHARED_DATA):
        pytest.skip("needs ../shared (make_corpus.py)")
    proc = run_script(["bench/bench_tokenizer.py", "--mb", "0.3", "--vocab", "400", "--ours", "native:cpu"],
                      check=True)
    ours = float(re.search(r"^ours native:cpu: +([0-9.]+) s", proc.stdout, re.M).group(1))
    hf = re.search(r"^HF: +([0-9.]+) s  peak RSS +\d+ MiB   \(tokenizers (\S+)\)$", proc.stdout, re.M)
    assert hf, proc.stdout
    import tokenizers
    assert hf.group(2) == tokenizers.__version__
    ratio = float(re.search(r"^ratio ours native:cpu/HF: ([0-9.]+)$", proc.stdout, re.M).group(1))
    hf_s = float(hf.group(1))  # both times are printed to 0.01 s: the ratio lies within what that rounding allows
    assert (ours - 0.005) / (hf_s + 0.005) - 0.005 <= ratio <= (ours + 0.005) / (hf_s - 0.005) + 0.005


def test_make_large_corpus_collects_text_files_once_and_never_overwrites(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "one.py").write_text("def f():\n    return 1\n")
    (src / "a" / "copy.md").write_text("def f():\n    return 1\n")  # same bytes: taken once
    (src / "b.txt").write_text("héllo wörld\n" * 100)
    (src / "bin.txt").write_bytes(b"\xff\xfe not utf-8")  # not UTF-8: skipped
    (src / "image.png").write_bytes(b"\x89PNG")  # not a text extension
    out = tmp_path / "corpus.jsonl"
    proc = run_script(["bench/make_large_corpus.py", "--mb", "1", "--out", str(out), "--roots", str(src)],
                      check=True)
    docs = [json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(docs) == sorted(["def f():\n    return 1\n", "héllo wörld\n" * 100])
    assert proc.stdout.startswith("2 files,") and "only" in proc.stderr  # asked for 1 MB, found less
    again = run_script(["bench/make_large_corpus.py", "--mb", "1", "--out", str(out), "--roots", str(src)])
    assert again.returncode != 0 and "exists" in again.stderr
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    # into a pipe its progress is whole lines (text mode above would have turned a bar's \r into newlines)
    raw = subprocess.run([sys.executable, "bench/make_large_corpus.py", "--mb", "1", "--out",
                          str(tmp_path / "again.jsonl"), "--roots", str(src)], cwd=REPO, capture_output=True,
                         env=dict(os.environ, PYTHONPATH=""), check=True)
    assert b"corpus: " in raw.stderr and b"\r" not in raw.stderr and b"\x1b" not in raw.stderr, raw.stderr


def test_bench_shards_runs_ours_against_raw_tiktoken(tmp_path):
    """bench/bench_shards.py end to end with its defaults' path: it builds a 3 MB corpus (its validation shard
    alone takes 1M tokens), trains its tokenizer, times both sides and prints the ratio (timings not asserted)."""
    import re

    if not os.path.isdir(SHARED_DATA):
        pytest.skip("needs ../shared (make_corpus.py)")
    proc = run_script(["bench/bench_shards.py", "--mb", "3", "--vocabsize", "300", "--workers", "1", "--reps", "1",
                       "--workdir", str(tmp_path)], check=True)
    with open(tmp_path / "corpus3.jsonl", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f if line.strip()]
    mb = sum(len(d.encode("utf-8", "surrogatepass")) for d in docs) / 1e6
    assert f"{len(docs)} documents, {mb:.1f} MB; tokenizer {tmp_path / 'benchshards_v300_n1000000.pkl'}" in proc.stdout
    rep = re.search(r"rep 0: raw encode_ordinary_batch ([0-9.]+) MB/s .* download_fineweb ([0-9.]+) MB/s .*"
                    r"ratio ([0-9.]+)", proc.stdout)
    assert rep and float(rep.group(3)) == pytest.approx(float(rep.group(2)) / float(rep.group(1)), rel=0.01)
    assert "ratio download_fineweb / raw tiktoken:" in proc.stdout and "median of 1 pairs" in proc.stdout
    # its shards are gone; the tokenizer's files stay (.code: its trainer's source, stored once by hash)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".code", "benchshards_v300_n1000000.merges.txt", "benchshards_v300_n1000000.pkl", "corpus3.jsonl"]


# ------------------------------------------------------------------------------------------------ bench_train.py
H100 = "NVIDIA H100 80GB HBM3"  # H100 SXM as torch names it


def test_bench_train_estimate_only_gives_gpt2_small_on_one_h100_about_the_issues_40_percent(tmp_path):
    """--estimate_only on a machine without a GPU: the analytical MFU for GPT-2 small at T=2048 on one H100,
    compiled. Issue 26's author estimated ~40% for it, independently of this code."""
    import re

    out = tmp_path / "estimate.json"
    proc = run_script(["bench/bench_train.py", "--estimate_only", "--preset", "gpt2-small", "--gpu", H100,
                       "--compile", "on", "--world_size", "1", "--out", str(out)], check=True)
    line = re.search(r"^compiled=True: analytical MFU (\d+\.\d)%: matmul \d+%, attention \d+%, memory-bound \d+%, "
                     r"optimizer \d+%, communication 0% of the estimated step; ", proc.stdout, re.M)
    assert line, proc.stdout
    report = json.loads(out.read_text())
    (r,) = report["results"]
    est = r["analytical"]
    assert 0.35 < est["mfu"] < 0.45 and f"{100 * est['mfu']:.1f}" == line.group(1)
    # GPT-2 small's multiplied weights: 12 x (3 x 768^2 + 768^2 + 2 x 768 x 3,072) + head 50,304 x 768
    # = 84,934,656 + 38,633,472 = 123,568,128, x 6 x 524,288 tokens
    assert est["work"]["matmul_flops"] == 6 * 524_288 * 123_568_128 and est["seconds"]["communication"] == 0
    # the micro-batch guess: activations 12 x 34 x 768 + 10 x 50,304 = 816,384 bytes a token; 90% of 80 GiB
    # less 16 bytes x 239,468,598 parameters leaves room for ~90,000 tokens: 32 rows of 2,048, 8 micro-batches
    assert (report["config"]["device_batch_size"], report["config"]["grad_acc_steps"]) == (65_536, 8)
    assert report["world_size"] == 1 and report["gpu_name"] == H100 and r["compiled"] is True


def test_bench_train_estimate_only_takes_record26s_fp8_head_where_the_gpu_has_fp8(tmp_path):
    out = tmp_path / "estimate.json"
    run_script(["bench/bench_train.py", "--estimate_only", "--preset", "record26", "--gpu", H100, "--compile", "on",
                "--out", str(out)], check=True)
    report = json.loads(out.read_text())
    assert report["config"]["fp8_head"] is True
    # the head's 50,304 x 768 weights, 6 FLOPs per token each, at the FP8 rate
    assert report["results"][0]["analytical"]["work"]["fp8_head_flops"] == 6 * 393_216 * 50_304 * 768
    proc = run_script(["bench/bench_train.py", "--estimate_only", "--gpu", "NVIDIA A100-SXM4-80GB", "--fp8_head"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == ("error: --fp8_head: NVIDIA A100-SXM4-80GB has no FP8 matmuls; "
                                                    "pass --no-fp8_head")
    proc = run_script(["bench/bench_train.py", "--estimate_only", "--gpu", "NVIDIA L4"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --gpu 'NVIDIA L4': no constants for it")


def test_bench_train_on_cpu_prints_n_a_for_both_mfus(tmp_path):
    out = tmp_path / "bench.json"
    proc = run_script(["bench/bench_train.py", "--device", "cpu", "--num_layers", "2", "--model_dim", "64",
                       "--num_heads", "2", "--seq_len", "128", "--device_batch_size", "256", "--steps", "1",
                       "--warmup", "1", "--out", str(out)], check=True)
    assert "MFU n/a (no peak known; analytical estimate n/a: no GPU constants for CPU), attention" in proc.stdout
    report = json.loads(out.read_text())
    assert report["hardware"] is None and report["results"][0]["analytical"] is None


def test_bench_train_reports_the_memory_per_rank_with_and_without_shard_params(tmp_path):
    """2 gloo ranks, the same model with and without --shard_params. Expected training state by hand, in float32
    bytes, from the model's parameter counts: P parameters, A of them Adam's (two moments each), M = P - A Muon's
    (one momentum each). Unsharded, every rank holds all parameters and gradients (8P) while Adam's moments
    (ShardedAdam) and Muon's momentum (each matrix on its owner) are split: about 8P + (8A + 4M) / 2. Sharded,
    everything is split: about (8P + 8A + 4M) / 2. Row blocks and matrix owners split unevenly: within 10%."""
    import torch

    import model as arch
    from conftest import free_port

    out = tmp_path / "bench.json"
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "bench/bench_train.py",
                       "--device", "cpu", "--num_layers", "2", "--model_dim", "64", "--num_heads", "2", "--seq_len",
                       "128", "--device_batch_size", "128", "--steps", "1", "--warmup", "1", "--shard_params", "both",
                       "--out", str(out)], check=True)
    report = json.loads(out.read_text())
    off, on = (next(r for r in report["results"] if r["shard_params"] is s) for s in (False, True))
    with torch.device("meta"):
        model = arch.GPT(arch.GPTConfig(vocab_size=1024, num_layers=2, model_dim=64, num_heads=2, num_val_emb=2))
    P = sum(p.numel() for p in model.parameters())
    M = sum(p.numel() for p in model.blocks.parameters() if p.ndim >= 2)
    A = P - M
    for got in off["state_gb_per_rank"]:
        assert got * 1e9 == pytest.approx(8 * P + (8 * A + 4 * M) / 2, rel=0.1)
    for got in on["state_gb_per_rank"]:
        assert got * 1e9 == pytest.approx((8 * P + 8 * A + 4 * M) / 2, rel=0.1)
    assert "--shard_params holds" in proc.stdout and "x the unsharded" in proc.stdout


def test_bench_train_reports_the_memory_per_rank_and_step_time_of_each_tp_layout(tmp_path):
    """2 gloo ranks, the same model as plain data parallelism and as --tp 2. Expected training state under TP by
    hand, in float32 bytes (tensor_parallel's split, model.py's tp_plan): each rank holds half of every block matrix
    (M, Muon's: one momentum each) and of the embeddings (E, Adam's), and the whole head (H) and scalars (S), Adam's
    too; parameters and gradients 8 bytes each, Adam 8, Muon 4. Every split is even here: within 1%."""
    import torch

    import model as arch
    from conftest import free_port

    out = tmp_path / "bench.json"
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "bench/bench_train.py",
                "--device", "cpu", "--num_layers", "2", "--model_dim", "64", "--num_heads", "2", "--seq_len", "128",
                "--device_batch_size", "128", "--steps", "1", "--warmup", "1", "--tp", "1", "2", "--out", str(out)],
               check=True)
    report = json.loads(out.read_text())
    dp, tp = (next(r for r in report["results"] if r["tp"] == n) for n in (1, 2))
    with torch.device("meta"):
        model = arch.GPT(arch.GPTConfig(vocab_size=1024, num_layers=2, model_dim=64, num_heads=2, num_val_emb=2))
    M = sum(p.numel() for p in model.blocks.parameters() if p.ndim >= 2)
    E = model.embed.weight.numel() + sum(e.weight.numel() for e in model.value_embeds)
    H = model.lm_head.weight.numel()
    S = sum(p.numel() for p in model.parameters() if p.ndim < 2)
    adam = E / 2 + H + S
    for got in tp["state_gb_per_rank"]:
        assert got * 1e9 == pytest.approx(8 * (M / 2 + adam) + 8 * adam + 4 * M / 2, rel=0.01)
    assert len(dp["state_gb_per_rank"]) == len(tp["peak_mem_allocated_gb_per_rank"]) == 2
    # one data-parallel replica (the two TP ranks read the same rows) takes the whole 512-token batch
    assert tp["step_time_s"] > 0 and tp["grad_acc_steps"] * tp["device_batch_size"] == 512


def test_bench_train_reports_the_memory_per_rank_and_step_time_of_each_pp_layout(tmp_path):
    """2 gloo ranks, plain data parallelism and --pp 2 (1F1B over 4 one-row micro-batches of the one replica's 512
    tokens). docs/training.md's promise: every PP rank holds the whole model and the optimizer state data
    parallelism holds, so the training state per rank is DP's exactly (PP splits compute and activations only)."""
    from conftest import free_port

    out = tmp_path / "bench.json"
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "bench/bench_train.py",
                       "--device", "cpu", "--num_layers", "2", "--model_dim", "64", "--num_heads", "2", "--seq_len",
                       "128", "--device_batch_size", "128", "--steps", "1", "--warmup", "1", "--pp", "1", "2",
                       "--out", str(out)], check=True)
    assert "--pp 2 compiled=False: step" in proc.stdout
    report = json.loads(out.read_text())
    dp, pp = (next(r for r in report["results"] if r["pp"] == n) for n in (1, 2))
    assert (pp["tp"], pp["pp_microbatches"], dp["pp_microbatches"]) == (1, 4, None)
    assert len(pp["state_gb_per_rank"]) == len(pp["peak_mem_allocated_gb_per_rank"]) == 2
    assert pp["state_gb_per_rank"] == dp["state_gb_per_rank"]
    assert pp["step_time_s"] > 0 and pp["grad_acc_steps"] * pp["device_batch_size"] == 512


# ------------------------------------------------------------------------------------------------ bench_anchor.py
ANCHOR = os.path.join(os.path.dirname(SHARED_DATA), "anchors", "modded-nanogpt-345b2fb9", "train_gpt.py")
ANCHOR_ASSERT = "assert world_size == 8 # this code is designed for 8xH100"


def _bench_anchor_module():
    import importlib.util

    from conftest import REPO
    spec = importlib.util.spec_from_file_location("bench_anchor", os.path.join(REPO, "bench", "bench_anchor.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_anchor_prepare_only_writes_both_shard_layouts_a_valid_tokenizer_and_a_one_line_patch(tmp_path):
    import difflib

    import numpy as np

    from gptlab.dataset.selection import select_run_shards
    from gptlab.dataset.shards import read_shard
    from gptlab.tokenizer.format import open_tokenizer

    anchor = ANCHOR
    if not os.path.isfile(anchor):  # without ../shared: a stand-in holding the line that must be lifted
        anchor = tmp_path / "anchor_train_gpt.py"
        anchor.write_text("import os\nworld_size = int(os.environ['WORLD_SIZE'])\n" + ANCHOR_ASSERT + "\nprint(1)\n")
    out = tmp_path / "out"
    proc = run_script(["bench/bench_anchor.py", "--prepare_only", "--steps", "2", "--out", str(out),
                       "--val_tokens", "65536", "--anchor", str(anchor)], check=True)
    assert "anchor copy:" in proc.stdout

    # the anchor's llm.c shards, read with numpy alone: 256 int32 header, then uint16 ids below GPT-2's 50257
    data = out / "anchor_run" / "data" / "fineweb10B"
    assert sorted(p.name for p in data.iterdir()) == ["fineweb_train_000001.bin", "fineweb_val_000000.bin"]
    anchor_tokens = {}
    for split in ("train", "val"):
        path = next(data.glob(f"fineweb_{split}_*.bin"))
        header = np.fromfile(path, dtype="<i4", count=256)
        assert header[0] == 20240520 and header[1] == 1 and not header[3:].any()
        assert header[2] == (path.stat().st_size - 1024) // 2 and (path.stat().st_size - 1024) % 2 == 0
        tokens = np.fromfile(path, dtype="<u2", offset=1024)
        assert tokens.max() < 50257 and tokens[0] == 50256  # every document starts with <|endoftext|>
        starts = np.flatnonzero(tokens == 50256)
        assert 100 < tokens.size / starts.size < 10_000  # documents, not one 50K-token run
        anchor_tokens[split] = tokens
    assert anchor_tokens["train"].size >= 2 * 49152 and anchor_tokens["val"].size > 65536
    assert not np.array_equal(anchor_tokens["train"][:1000], anchor_tokens["val"][:1000])

    # ours: the same documents, readable by gptlab.dataset.shards and accepted by train_gpt.py's shard checks
    ours_train, ours_val = out / "ours_data" / "train_000001.bin", out / "ours_data" / "val_000000.bin"
    assert np.array_equal(read_shard(str(ours_train)), anchor_tokens["train"])
    assert np.array_equal(read_shard(str(ours_val)), anchor_tokens["val"])
    tok = open_tokenizer(str(out / "tokenizer" / "bench_anchor_bytepairs_v50256.pkl"))
    shards = select_run_shards([str(ours_train)], [str(ours_val)], tok.name, tok.ranks_sha256, tok.encoding.n_vocab)
    assert shards.train_paths == [str(ours_train)] and shards.val_paths == [str(ours_val)]

    # the synthetic tokenizer: GPT-2's id count, <|endoftext|> last, exact round trips
    assert tok.encoding.n_vocab == 50257 and tok.eot == 50256 and tok.encoding.eot_token == 50256
    text = "Hello, wörld! 🚀 tabs\tand\nnewlines \x00\xff ok"
    ids = tok.encoding.encode_ordinary(text)
    assert tok.encoding.decode(ids) == text and max(ids) < 50256
    assert tok.encoding.encode_ordinary("ab") == [256 + 97 * 256 + 98]  # merge k joins byte pair k = 256a + b
    assert tok.encoding.encode("<|endoftext|>", allowed_special="all") == [50256]

    # the anchor copy differs from the original in exactly its world-size assert
    original = open(anchor, encoding="utf-8").read().splitlines()
    patched = (out / "anchor_run" / "train_gpt.py").read_text(encoding="utf-8").splitlines()
    changed = [line for line in difflib.unified_diff(original, patched, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("---", "+++"))]
    assert len(changed) == 2 and changed[0] == "-" + ANCHOR_ASSERT, changed
    assert changed[1].startswith("+assert world_size >= 1") and len(original) == len(patched)

    # without CUDA, running (not preparing) is one line and status 2
    if not __import__("torch").cuda.is_available():
        proc = run_script(["bench/bench_anchor.py", "--out", str(tmp_path / "never")])
        assert proc.returncode == 2 and "CUDA" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "never").exists()


ANCHOR_LOG = """\
import os
import subprocess
import sys
    print0(f"step:{step+1}/{train_steps} train_time:{approx_training_time_ms:.0f}ms step_avg:{...:.2f}ms")
====================================================================================================
step:0/1750 val_loss:10.8258 train_time:0ms step_avg:0.03ms
step:1/1750 train_time:101ms step_avg:101.00ms
step:8/1750 train_time:802ms step_avg:100.25ms
step:124/1750 train_time:12246ms step_avg:98.76ms
step:125/1750 train_time:12345ms step_avg:98.76ms
step:125/1750 val_loss:4.6021 train_time:12350ms step_avg:98.80ms
step:126/1750 train_time:12449ms step_avg:98.80ms
peak memory allocated: 30123 MiB reserved: 31456 MiB
"""


def test_bench_anchor_reads_the_anchors_log_lines_and_window_schedule():
    ba = _bench_anchor_module()
    log = ba.parse_anchor_log(ANCHOR_LOG)
    assert log["total_steps"] == 1750 and log["peak_mib"] == (30123, 31456)
    assert log["train"] == {1: 101, 8: 802, 124: 12246, 125: 12345, 126: 12449}
    assert log["val"] == {0: (10.8258, 0), 125: (4.6021, 12350)}
    assert ba.anchor_speed(log, 8, 124) == (116, (12246 - 802) / 1000)
    assert ba.anchor_speed(log, 8, 125) == (117, (12350 - 802) / 1000)  # the synchronised validation line
    # its window: next multiple of 128 of 1728 * step / 1750 tokens (at least 128), short = half (at least 1 block)
    assert ba.anchor_window_blocks(0) == (1, 1) and ba.anchor_window_blocks(129) == (1, 1)
    assert ba.anchor_window_blocks(130) == (2, 1) and ba.anchor_window_blocks(1750) == (14, 7)
    p = ba.plan(128, 393216, 1)
    assert (p["ours_steps"], p["ours_train_steps"], p["anchor_warmup"]) == (16, 219, 8)
    assert p["anchor_steps"] * 49152 == p["ours_steps"] * 393216


FAKE_ANCHOR = """\
import os, sys, time, uuid
os.makedirs("logs", exist_ok=True)
path = f"logs/{uuid.uuid4()}.txt"
print(path, flush=True)
with open(path, "a") as f:
    print('print0(f"step:{step}/{n}")', file=f, flush=True)
    for step in range(1, 1751):
        print(f"step:{step}/1750 train_time:{100 * step}ms step_avg:100.00ms", file=f, flush=True)
        time.sleep(0.005)
time.sleep(600)  # never reached before the benchmark stops it
"""


def test_bench_anchor_stops_the_anchor_once_its_log_shows_the_step(tmp_path):
    import sys
    import time

    ba = _bench_anchor_module()
    (tmp_path / "train_gpt.py").write_text(FAKE_ANCHOR)
    t0 = time.perf_counter()
    run = ba.run_anchor(str(tmp_path), 40, timeout_s=60, launcher=[sys.executable])
    assert run["stopped"] and time.perf_counter() - t0 < 30
    assert 40 in run["log"]["train"] and ba.anchor_speed(run["log"], 8, 40) == (32, 3.2)
    assert run["log_path"].startswith(str(tmp_path / "logs"))


def test_gpu_session_steps_stop_within_their_limit_and_name_the_steps(tmp_path):
    """bench/gpu_session.sh on this CPU machine: an unknown step prints the usage (exit 2); every step runs under
    `timeout STEP_LIMIT_S`, so a 1-second limit stops the tests step with timeout's status 124 instead of running
    on (the device tool would stop a command past 10 minutes and lose its output)."""
    import subprocess

    env = dict(os.environ, OUT=str(tmp_path))
    bad = subprocess.run(["bash", "bench/gpu_session.sh", "nope"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "usage: bash bench/gpu_session.sh all|tests|train|train-eager|tokenizer|anchor" in bad.stderr
    cut = subprocess.run(["bash", "bench/gpu_session.sh", "tests"], cwd=REPO, env=dict(env, STEP_LIMIT_S="1"),
                         capture_output=True, text=True, timeout=120)
    assert cut.returncode == 124, (cut.returncode, cut.stderr[-500:])


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")
def test_gpu_session_all_runs_each_step_under_its_own_limit_in_order(tmp_path):
    """`all`, issue 46's one call: a step that runs past its limit is stopped (124) and the next one still runs;
    the steps' lines name them in the issue's order (tests, training, evals, the anchor)."""
    import subprocess

    from helpers.tiny_data import read_docs, save_tiny_tokenizer
    from conftest import FINEWEB_150

    tok = save_tiny_tokenizer(str(tmp_path / "tok.pkl"), read_docs(FINEWEB_150)[:5], 50)
    env = dict(os.environ, OUT=str(tmp_path), TESTS_S="1", TRAIN_S="1", EVALS_S="1", ANCHOR_S="1",
               GPTLAB_SHARED_DATA=SHARED_DATA, EVAL_TOKENIZER=tok)
    proc = subprocess.run(["bash", "bench/gpu_session.sh", "all"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-500:]
    with open(tmp_path / "gpu.txt") as f:
        lines = [line.split(":")[0] for line in f if line.startswith("== ")]
    assert lines == ["== gpu_tests", "== bench_train", "== bench_eval_speed", "== bench_anchor"]
    with open(tmp_path / "gpu.txt") as f:
        assert f.read().count("exit 124 after") == 4


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")
def test_bench_eval_speed_times_evaluate_py_and_the_numeric_variants(tmp_path):
    """bench/bench_eval_speed.py on CPU at a tiny shape: evaluate.py's HellaSwag as a whole process, the variants
    in-process (float32 against itself: difference 0; bfloat16 autocast: a difference, small)."""
    from helpers.eval_tasks import data_dir_with
    from helpers.tiny_data import read_docs, save_tiny_tokenizer
    from conftest import FINEWEB_150

    tok = save_tiny_tokenizer(str(tmp_path / "tok.pkl"), read_docs(FINEWEB_150)[:20], 300)
    data = data_dir_with(tmp_path / "data", ["hellaswag"], limit=6)
    run_script(["bench/bench_eval_speed.py", "--tokenizer", tok, "--data_dir", data, "--num_layers", "2",
                "--model_dim", "64", "--num_heads", "1", "--limit", "6", "--variant_limit", "6", "--skip", "core", "--profile", "3",
                "--device", "cpu", "--out", str(tmp_path / "out")], check=True, timeout=600)
    with open(tmp_path / "out" / "bench_eval_speed.json") as f:
        report = json.load(f)
    (run,) = report["runs"]
    assert run["tasks"] == "hellaswag" and run["examples"] == 6 and run["continuations"] == 24
    assert run["wall_s"] >= run["scoring_s"] > 0
    diffs = {v["variant"]: v["max_abs_logprob_diff"] for v in report["variants"]}
    assert diffs["float32, whole logits"] == 0 and diffs["float32 (--dtype float32)"] < 1e-4
    assert 0 < diffs["bfloat16 (--dtype auto)"] < 1.0 and 0 < diffs["bfloat16, rows of 256"] < 1.0


# ------------------------------------------------------------------------------------------------ bench_evals.py
def test_bench_evals_times_ours_against_lm_eval_and_reads_its_per_example_log_likelihoods(tmp_path):
    """bench/bench_evals.py on a tiny model, 2 tasks, 3 examples, lm-eval at one batch size: both processes run,
    lm-eval reads our downloaded rows offline (HF_DATASETS_OFFLINE), and its per-example log-likelihoods agree with
    ours to the 1e-4 the agreement test holds (tests/e2e/test_evaluate_lm_eval.py)."""
    import importlib.util
    import re

    if importlib.util.find_spec("lm_eval") is None or importlib.util.find_spec("accelerate") is None:
        pytest.skip("lm_eval and accelerate are not installed")
    if not os.path.isdir(SHARED_DATA):
        pytest.skip("needs ../shared/data")
    from helpers.eval_tasks import data_dir_with, tiny_checkpoint

    ckpt, _ = tiny_checkpoint(str(tmp_path), window_size=256)
    data = data_dir_with(tmp_path / "data", ["boolq", "copa"], limit=5)
    proc = run_script(["bench/bench_evals.py", ckpt, "--tasks", "boolq,copa", "--limit", "3", "--batch_sizes", "8",
                       "--data_dir", data, "--work_dir", tmp_path / "work"], check=True, timeout=900,
                      env_extra={"HF_HOME": str(tmp_path / "hf_home")})
    assert re.search(r"^ratio ours / lm-eval \(its best, --batch_size 8\): [0-9.]+$", proc.stdout, re.M), proc.stdout
    for task in ("boolq", "copa"):
        assert re.search(rf"^  {task} +3 examples, largest", proc.stdout, re.M), proc.stdout
    worst = re.search(r"^largest per-example log-likelihood difference: (\S+) nats \(.*\) over 6 examples; acc "
                      r"predictions that differ: 0, acc_norm: 0$", proc.stdout, re.M)
    assert worst and float(worst.group(1)) <= 1e-4, proc.stdout
    # the referee: the examples furthest apart, each continuation alone through the model in float64, which both
    # float32 figures must be near (a continuation scored one token off would be nats away)
    refereed = re.findall(r"^  float64 \((\w+) example (\d+), difference \S+\): ours within (\S+) of it, lm-eval "
                          r"within (\S+)$", proc.stdout, re.M)
    assert refereed and len(refereed) <= 3, proc.stdout
    for _, _, ours, theirs in refereed:
        assert float(ours) <= 1e-4 and float(theirs) <= 2e-4, proc.stdout
    assert re.search(r"^  \(lm-eval's figure there, \S+, is a float32 sum: float32 numbers that large lie \S+ apart\)$",
                     proc.stdout, re.M), proc.stdout


# ------------------------------------------------------------------------------------------------ bench_comm.py
def test_bench_comm_trains_the_same_losses_through_ddp_zero_and_fsdp2_as_through_ours():
    """Two gloo ranks, a tiny model: torch's DDP + ZeroRedundancyOptimizer and FSDP2 run the same mathematics as
    GradientSync + MatrixOwners + ShardedAdam (sums of the same two gradients), so the losses agree to round-off."""
    import re

    proc = run_script(["bench/bench_comm.py", "--model_dim", "64", "--num_layers", "2", "--num_heads", "2",
                       "--vocab_size", "256", "--seq_len", "128", "--steps", "2", "--warmup", "1"], check=True)
    rows = dict(re.findall(r"^(ours|torch|fsdp2) +[\d.]+ms +[\d.]+ MB +(\S+)$", proc.stdout, re.M))
    assert set(rows) == {"ours", "torch", "fsdp2"}, proc.stdout
    assert all(float(diff) <= 1e-6 for diff in rows.values()), rows


def test_bench_comm_estimate_gives_owners_a_sixth_of_ddps_newton_schulz_work_at_8_ranks():
    """GPT-2 small's modded shape has 12 matrices of each hidden shape; dealt to 8 ranks a rank owns at most 2 of
    each (ceil(12 / 8)), where under DDP every rank orthogonalises all 12: 6 times the work."""
    import re

    proc = run_script(["bench/bench_comm.py", "--estimate_only"], check=True)
    ns = {name: float(value) for name, value in
          re.findall(r"^(ours|torch|fsdp2) +[\d.]+ MB +([\d.]+) ", proc.stdout, re.M)}
    assert abs(ns["torch"] / ns["ours"] - 6) < 1e-3 and ns["fsdp2"] == ns["ours"], proc.stdout
