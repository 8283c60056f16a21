"""Training speed on one GPU: modded-nanogpt record #26 (the anchor) against train_gpt.py --preset record26.

    python bench/bench_anchor.py                          # anchor 128 steps, ours 16 steps (the same tokens)
    python bench/bench_anchor.py --steps 1750             # both whole runs: every attention window (slower)
    python bench/bench_anchor.py --step_matched           # also ours at the anchor's 1-GPU step (49,152 tokens)
    python bench/bench_anchor.py --prepare_only --out DIR # shards, tokenizer and patched anchor only (any machine)

What runs. The anchor is ../shared/anchors/modded-nanogpt-345b2fb9/train_gpt.py (read ../shared/anchors/README.md),
copied to OUT/anchor_run/train_gpt.py with one line changed, its `assert world_size == 8` (lifted: on one GPU each
step is one 48K-token row, the per-GPU work of the 8-GPU record), and started with
`torchrun --standalone --nproc_per_node=1` in that folder; it is stopped once its log shows step --steps (its
1,750-step schedule is its own and is not edited). Ours is `python train_gpt.py --preset record26` (or
--ours_flags) on the same GPU. The anchor's code never enters gptlab: the copy lives under OUT only.

The data: one stream of random documents, written twice: for the anchor in the llm.c format it reads
(OUT/anchor_run/data/fineweb10B/fineweb_{train_000001,val_000000}.bin: 256 int32 header, magic 20240520,
version 1, token count, then uint16 tokens) and for ours with gptlab.dataset.shards.write_shard (OUT/ours_data/, no
manifest: train_gpt.py then checks that every id is below the tokenizer's n_vocab). Each document is <|endoftext|>
(50256) then ids drawn uniformly below 50256, with geometric lengths of mean --doc_len (1000): random ids cost
the GPU what real ones do, and both programs see the same documents. (Ids drawn uniformly below 50257 would put
<|endoftext|> once per ~50K tokens, and the anchor's loader asserts that it finds a document start within two
rows.) Validation: the anchor's fixed 10,485,760 tokens (+ a margin its loader needs).

The tokenizer: ours needs one with the anchor's 50,257 ids, and no network is assumed (no GPT-2 download). So a
synthetic but valid BPE tokenizer is written: the 256 bytes, 50,000 merges each joining two single bytes (the
first 50,000 byte pairs in order), <|endoftext|> = 50256. It encodes and decodes any text exactly, but it was
trained on nothing: it serves this throughput benchmark only (no HellaSwag, no meaningful loss).

Fairness:
- Same tokens. The anchor on one GPU takes 49,152 tokens per step (one row; no gradient accumulation), ours at
  record26 393,216 (8 micro-batches of 49,152). Ours runs ceil(steps x 49,152 / 393,216) steps, so --steps 128
  gives anchor 128 x 49,152 = ours 16 x 393,216 = 6.29M tokens.
- Same attention windows per token. The anchor's window grows over its 1,750 steps (128 → 1792 tokens,
  next_multiple(1728 x step/1750, 128); short windows are half). The anchor's whole 1-GPU run is
  1750 x 49,152 = 86M tokens, so ours gets --train_steps ceil(86M / 393,216) = 219 (its window, 1792 at the
  end, then grows over the same tokens) and is stopped after its share of steps. The learning-rate and momentum
  schedules are squeezed with it, which does not change the speed. Ours rounds its window up in whole blocks of
  the final 14 (ceil(14 x progress)), the anchor in 128-token steps of 1728 (ceil(13.5 x progress)): ours' window
  is at most one block larger (3% on average over a run), which the FLOP count below credits. The default 128
  steps stay where both windows are one block (128 tokens), so attention is a small share there;
  --steps 1750 measures every window.
- Warm-up excluded: ours' first step (compilation) and the anchor's first 8 steps (the same 393,216 tokens; the
  anchor also compiles in 10 untimed warm-up steps of its own before its clock starts).
- Timing: the anchor's train_time difference between two logged steps (its clock stops during validation; its
  step lines are not synchronised with the GPU, which shifts both ends alike in steady state; at the last step
  of a whole run its synchronised validation line is used); ours: the sum of metrics.csv step_time_s (each step
  synchronised at both ends).
- FLOPs: one count for both sides, model.training_flops of our GPT built from our run's config (6 x tokens x
  multiplied parameters + 12 x head_dim x heads x allowed query-key pairs per layer), with each side's window at
  each measured step and pairs per token counted exactly (model.attention_pairs) on rows of the benchmark's
  own data: the average over the measured steps, not the end-of-training windows. MFU = those FLOPs / time /
  the GPU's dense bf16 peak. The anchor's figure with its own architecture (no attention in layer 7, long windows
  in layers 0, 4, 11) is reported beside it.
- One asymmetry remains: the anchor's optimizer runs every 49,152 tokens on one GPU (on 8 GPUs every 393,216,
  its Muon work split 8 ways); ours every 393,216. --step_matched also runs ours at --batch_size 49152 on the
  anchor's own 1,750-step schedule (the anchor's exact per-step work) to show that share.
- GPU memory: the largest `nvidia-smi` memory.used seen while each program runs (polled every 2 s; includes
  the CUDA context and the caching allocator's reserve), the same method for both.

Writes OUT/bench_anchor.json and prints a table; OUT defaults to bench/out/anchor/ (git-ignored). Without CUDA
only --prepare_only works (any other use exits with status 2 and one line).
"""
import argparse
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from gptlab.core.cli import ArgumentParser, flag_type, int_in  # noqa: E402
from gptlab.core.errors import UserError, run_cli  # noqa: E402
from gptlab.core.files import atomic_write_text  # noqa: E402
from gptlab.dataset.shards import read_header, read_shard, write_shard  # noqa: E402
from gptlab.tokenizer.format import EOT as EOT_TEXT, PATTERNS, open_tokenizer, save_tokenizer  # noqa: E402
from gptlab.train.environment import gpu_bf16_peak_tflops  # noqa: E402
from gptlab.train.records import read_metrics  # noqa: E402

DEFAULT_ANCHOR = os.path.join(os.path.dirname(REPO), "shared", "anchors", "modded-nanogpt-345b2fb9", "train_gpt.py")
ANCHOR_ASSERT = "assert world_size == 8 # this code is designed for 8xH100"
ANCHOR_ASSERT_LIFTED = ("assert world_size >= 1  # gptlab bench/bench_anchor.py lifted the 8-GPU assert "
                        "(was: assert world_size == 8) for a 1-GPU benchmark")
# The anchor's fixed settings (read from its Hyperparameters and GPT; not flags there)
ANCHOR_STEPS = 1750
ANCHOR_SEQ_LEN = 48 * 1024  # tokens per GPU per step: one row
ANCHOR_VAL_TOKENS = 10_485_760
ANCHOR_VAL_SEQ_LEN = 4 * 64 * 1024
ANCHOR_WINDOW_GROWTH = 1728  # window = next_multiple(1728 * step / 1750, 128): 128 → 1792
VOCAB = 50257
EOT = 50256
BLOCK = 128
LLMC_MAGIC = 20240520

RECORD26_BATCH = 393_216  # ours at --preset record26: tokens per optimizer step
# Explicit flags equal to --preset record26 with flags train_gpt.py has had all along (used when it has no
# --preset yet). Learning rates, betas and the momentum warm-up are train_gpt's defaults, already the anchor's.
RECORD26_FLAGS = ("--num_layers 12 --model_dim 768 --num_heads 6 --head_dim 128 --num_val_emb 3 "
                  "--train_seq_len 49152 --batch_size 393216 --device_batch_size 49152 --cooldown_frac 0.45 "
                  "--window_size 1792")
TOKENIZER_FILE = "bench_anchor_bytepairs_v50256.pkl"
LOG_LINE = re.compile(r"^step:(\d+)/(\d+) (?:val_loss:(\S+) )?train_time:(\d+)ms step_avg:([0-9.]+)ms\s*$")
PEAK_LINE = re.compile(r"^peak memory allocated: (\d+) MiB reserved: (\d+) MiB")


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default=128,
                   type=int_in(1, ANCHOR_STEPS, f"{{value}} must be between 1 and the anchor's {ANCHOR_STEPS}"),
                   help="anchor steps (of its 1,750) before it is stopped; ours runs the same tokens (default 128: "
                        "the first 7%% of the run, where both windows are 128 tokens; 1750: whole runs)")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "out", "anchor"), help="work folder and report")
    p.add_argument("--anchor", default=DEFAULT_ANCHOR, help="the anchor's train_gpt.py (left unchanged)")
    p.add_argument("--ours_flags", default=None,
                   help="train_gpt.py flags for ours (default: --preset record26 when train_gpt.py has it, else "
                        f"the explicit equivalent: {RECORD26_FLAGS})")
    p.add_argument("--ours_batch_size", default=RECORD26_BATCH,
                   type=flag_type(lambda n: n > 0 and n % ANCHOR_SEQ_LEN == 0,
                                  f"must be a positive multiple of {ANCHOR_SEQ_LEN} (the anchor's rows), got {{value}}",
                                  int),
                   help="tokens per optimizer step that --ours_flags give (checked against the run's config)")
    p.add_argument("--step_matched", action="store_true",
                   help="also run ours at --batch_size 49152 on the anchor's 1,750-step schedule for --steps steps")
    p.add_argument("--warmup_steps", type=int_in(1), default=1,
                   help="ours' first steps left out of the speed (the anchor leaves out the same tokens)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds each program may run")
    p.add_argument("--seed", type=int, default=0, help="seed of the random documents")
    p.add_argument("--doc_len", type=int_in(2), default=1000, help="mean document length of the random data")
    p.add_argument("--val_tokens", type=int, default=ANCHOR_VAL_TOKENS,
                   help="validation tokens to write (the anchor reads exactly 10,485,760; smaller only for tests "
                        "with --prepare_only)")
    p.add_argument("--prepare_only", action="store_true",
                   help="write shards, tokenizer and the patched anchor copy, then stop (works without a GPU)")
    return p


# ------------------------------------------------------------------------------------------------ data
def random_documents(n_tokens, seed, doc_len):
    """uint16 array: documents that each start with <|endoftext|> (50256), then ids uniform below 50256;
    geometric document lengths of mean doc_len."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, EOT, size=n_tokens, dtype=np.uint16)
    starts, pos = [np.zeros(1, dtype=np.int64)], 0
    while pos < n_tokens:
        gaps = rng.geometric(1.0 / doc_len, size=max(16, 2 * n_tokens // doc_len)).astype(np.int64)
        more = pos + np.cumsum(gaps)
        starts.append(more)
        pos = int(more[-1])
    starts = np.concatenate(starts)
    tokens[starts[starts < n_tokens]] = EOT
    return tokens


def write_llmc_shard(path, tokens):
    """The anchor's input format (llm.c): 256 little-endian int32 (magic 20240520, version 1, token count, zeros),
    then the tokens as little-endian uint16. Written beside and renamed into place."""
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = LLMC_MAGIC, 1, len(tokens)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        np.ascontiguousarray(tokens, dtype="<u2").tofile(f)
    os.replace(tmp, path)


def plan(steps, ours_batch, warmup_steps, doc_len=1000):
    """Steps and token counts of both sides (see Fairness in the module docstring)."""
    ours_steps = math.ceil(steps * ANCHOR_SEQ_LEN / ours_batch)  # ours' steps for the anchor's tokens
    ours_train_steps = math.ceil(ANCHOR_STEPS * ANCHOR_SEQ_LEN / ours_batch)  # the anchor's whole 1-GPU run
    anchor_warmup = math.ceil(warmup_steps * ours_batch / ANCHOR_SEQ_LEN)
    rows = max(steps, ours_steps * ours_batch // ANCHOR_SEQ_LEN) + 16
    return {"anchor_steps": steps, "anchor_warmup": anchor_warmup, "ours_steps": min(ours_steps, ours_train_steps),
            "ours_train_steps": ours_train_steps, "ours_warmup": warmup_steps,
            # each row (ours and the anchor's) starts at a document start, so a row uses seq_len + about one
            # document; 4 documents of margin per row, and the anchor's loader looks two rows ahead
            "train_tokens": rows * (ANCHOR_SEQ_LEN + 4 * doc_len) + 4 * 2 * ANCHOR_SEQ_LEN}


def prepare(out, train_tokens, val_tokens, seed, doc_len):
    """Write (or reuse, when an earlier call wrote the same) both shard layouts; returns their paths."""
    anchor_data = os.path.join(out, "anchor_run", "data", "fineweb10B")
    ours_data = os.path.join(out, "ours_data")
    paths = {"anchor_train": os.path.join(anchor_data, "fineweb_train_000001.bin"),
             "anchor_val": os.path.join(anchor_data, "fineweb_val_000000.bin"),
             "ours_train": os.path.join(ours_data, "train_000001.bin"),
             "ours_val": os.path.join(ours_data, "val_000000.bin")}
    # the anchor's validation loader wants one token beyond its last row, and a little more before it moves on
    val_total = val_tokens + 4096
    settings = {"seed": seed, "doc_len": doc_len, "train_tokens": train_tokens, "val_tokens": val_total}
    stamp = os.path.join(out, "prepared.json")
    try:
        with open(stamp) as f:
            reuse = json.load(f) == settings and all(
                read_header(paths[k])[1] == (train_tokens if "train" in k else val_total) for k in paths)
    except (OSError, ValueError, UserError):
        reuse = False
    if reuse:
        print(f"shards: reusing {out} ({train_tokens:,} train + {val_total:,} val tokens, seed {seed})", flush=True)
        return paths
    os.makedirs(anchor_data, exist_ok=True)
    os.makedirs(ours_data, exist_ok=True)
    if os.path.exists(stamp):
        os.remove(stamp)
    t0 = time.perf_counter()
    for split, n, split_seed in (("train", train_tokens, seed), ("val", val_total, seed + 1_000_003)):
        tokens = random_documents(n, split_seed, doc_len)
        write_llmc_shard(paths[f"anchor_{split}"], tokens)
        write_shard(paths[f"ours_{split}"], tokens, version=1, overwrite=True)
    with open(stamp, "w") as f:
        json.dump(settings, f)
    print(f"shards: {train_tokens:,} train + {val_total:,} val tokens of random documents (mean length {doc_len}), "
          f"in the anchor's layout ({anchor_data}) and ours ({ours_data}), {time.perf_counter() - t0:.1f} s",
          flush=True)
    return paths


# ------------------------------------------------------------------------------------------------ tokenizer
def byte_pair_merges(n_merges=EOT - 256):
    """The first n_merges byte pairs (a, b) in order: each joins two single-byte tokens, so every merge is
    reachable and the ranks form a valid BPE vocabulary."""
    return [(a, b) for a in range(256) for b in range(256)][:n_merges]


def write_tokenizer(path):
    """A synthetic, valid BPE tokenizer with the anchor's 50,257 ids (see the module docstring); returns path."""
    merges = byte_pair_merges()
    ranks = {bytes([i]): i for i in range(256)}
    for k, (a, b) in enumerate(merges):
        ranks[bytes([a, b])] = 256 + k
    with open(os.path.abspath(__file__)) as f:
        source = f.read()
    save_tokenizer(path, pat_str=PATTERNS["gpt2"], pattern_name="gpt2", merges=merges, mergeable_ranks=ranks,
                   special_tokens={EOT_TEXT: EOT},
                   metadata={"synthetic": True, "source": "bench/bench_anchor.py",
                             "purpose": "throughput benchmark against modded-nanogpt record #26: the anchor's 50,257 "
                                        "ids without a network download; trained on nothing (no HellaSwag)",
                             "merges": "the first 50,000 byte pairs (a, b) in order of 256 * a + b"},
                   script_content=source, overwrite=True)
    tok = open_tokenizer(path)  # our loader: tiktoken builds the encoder and every check passes
    if tok.encoding.n_vocab != VOCAB or tok.eot != EOT:
        raise RuntimeError(f"synthetic tokenizer has {tok.encoding.n_vocab} ids, <|endoftext|> {tok.eot}")
    return path


# ------------------------------------------------------------------------------------------------ the anchor
def patch_anchor(src, dst):
    """Copy the anchor to dst with its world-size assert lifted: exactly that one line changes. Its LICENSE (MIT)
    is copied beside it."""
    if not os.path.isfile(src):
        raise UserError(f"anchor {src} not found; pass --anchor PATH (the modded-nanogpt-345b2fb9/train_gpt.py of "
                        "../shared/anchors, copied to the GPU machine)")
    with open(src, encoding="utf-8") as f:
        lines = f.read().split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == ANCHOR_ASSERT]
    if len(hits) != 1:
        raise UserError(f"{src}: expected exactly one line {ANCHOR_ASSERT!r}, found {len(hits)}; this is not the "
                        "record-#26 script bench_anchor.py knows (modded-nanogpt 345b2fb9)")
    i = hits[0]
    lines[i] = lines[i][:len(lines[i]) - len(lines[i].lstrip())] + ANCHOR_ASSERT_LIFTED
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    license_path = os.path.join(os.path.dirname(src), "LICENSE")
    if os.path.isfile(license_path):
        with open(license_path, encoding="utf-8") as f, open(os.path.join(os.path.dirname(dst), "LICENSE"), "w",
                                                             encoding="utf-8") as g:
            g.write(f.read())
    return dst


def parse_anchor_log(text):
    """The anchor's log → {"train": {step: train_time_ms}, "val": {step: (val_loss, train_time_ms)},
    "total_steps": N, "peak_mib": (allocated, reserved) or None}. Lines as the anchor prints them:
    `step:5/1750 train_time:612ms step_avg:122.40ms` and `step:125/1750 val_loss:4.5 train_time:...ms step_avg:...ms`
    (its source code, at the top of the log, never matches: those lines are indented f-strings)."""
    out = {"train": {}, "val": {}, "total_steps": None, "peak_mib": None}
    for line in text.splitlines():
        m = LOG_LINE.match(line)
        if m:
            step, total, val_loss, train_ms = int(m[1]), int(m[2]), m[3], float(m[4])
            out["total_steps"] = total
            if val_loss is None:
                out["train"][step] = train_ms
            else:
                out["val"][step] = (float(val_loss), train_ms)
            continue
        m = PEAK_LINE.match(line)
        if m:
            out["peak_mib"] = (int(m[1]), int(m[2]))
    return out


def anchor_speed(log, first, last):
    """(steps, seconds) between the anchor's logged steps `first` and `last` (train_time excludes validation); at
    `last`, its synchronised validation line when there is one."""
    if first not in log["train"] or last not in log["train"]:
        raise UserError(f"the anchor's log lacks step {first if first not in log['train'] else last}")
    end_ms = log["val"][last][1] if last in log["val"] else log["train"][last]
    return last - first, (end_ms - log["train"][first]) / 1000


def anchor_window_blocks(step):
    """The anchor's (long, short) window in 128-token blocks at loop step `step` (its get_window_size_blocks: the
    long window next_multiple(1728 * step / 1750, 128) tokens, the short one half; a half of 0 blocks still
    attends within its own block, so 1)."""
    long_blocks = max(BLOCK, math.ceil(ANCHOR_WINDOW_GROWTH * step / ANCHOR_STEPS / BLOCK) * BLOCK) // BLOCK
    return long_blocks, max(1, long_blocks // 2)


# ------------------------------------------------------------------------------------------------ running
class GpuMemoryPoller:
    """Largest nvidia-smi memory.used (MiB, all GPUs summed) seen while running; None without nvidia-smi."""

    def __init__(self, every_s=2.0):
        self.every_s, self.max_mib, self._stop = every_s, None, threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=20).stdout
                used = sum(int(x) for x in out.split())
                self.max_mib = used if self.max_mib is None else max(self.max_mib, used)
            except (OSError, ValueError, subprocess.SubprocessError):
                return
            self._stop.wait(self.every_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(proc, sig, grace_s=60):
    """Send sig to the process group we started (the program, torchrun's worker, compile workers), wait until every
    member has gone, and SIGKILL the group if some are left after grace_s: the next program gets a free GPU."""
    deadline = time.perf_counter() + grace_s
    if sig is not None and group_alive(proc.pid):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    while time.perf_counter() < deadline:
        if proc.poll() is not None and not group_alive(proc.pid):
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def watch(cmd, cwd, output_path, done, timeout_s, stop_signal, name, env=None, poll_s=1.0, let_finish=False):
    """Run cmd (its own process group, output to output_path) until done() is true, then stop it with
    stop_signal; or until it exits by itself (let_finish: done() is still polled, for its checks, but the program
    is left to end on its own). Returns (returncode, stopped_by_us, seconds). A timeout, or an exit before done(),
    is a UserError showing the end of its output."""
    t0 = time.perf_counter()
    with open(output_path, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)
        try:
            while True:
                if done() and not let_finish:
                    stop_group(proc, stop_signal)
                    return proc.returncode, True, time.perf_counter() - t0
                if proc.poll() is not None:
                    if done():
                        return proc.returncode, False, time.perf_counter() - t0
                    raise UserError(f"{name} exited with status {proc.returncode} before the steps it was run for; "
                                    f"the end of its output ({output_path}):\n{tail(output_path)}")
                if time.perf_counter() - t0 > timeout_s:
                    raise UserError(f"{name} did not reach its steps within --timeout {timeout_s:g} s; the end of "
                                    f"its output ({output_path}):\n{tail(output_path)}")
                time.sleep(poll_s)
        finally:  # stopped, exited, failed or interrupted: nothing of it outlives this call
            stop_group(proc, signal.SIGKILL if proc.poll() is None else None, grace_s=30)


def new_files(folder, before, suffix=""):
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    paths = (os.path.join(folder, n) for n in names if n.endswith(suffix))
    return sorted(p for p in paths if p not in before)


def run_anchor(anchor_dir, steps, timeout_s, launcher=None):
    """Run the patched anchor in anchor_dir until its log shows step `steps` (or it finishes); returns its parsed
    log, log path, wall seconds, whether we stopped it and the nvidia-smi memory maximum."""
    launcher = launcher or [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"]
    logs = os.path.join(anchor_dir, "logs")
    before = set(new_files(logs, set()))
    state = {"log": None, "parsed": None}

    def done():
        if state["log"] is None:
            found = new_files(logs, before, ".txt")
            if not found:
                return False
            state["log"] = found[-1]
        with open(state["log"], errors="replace") as f:
            state["parsed"] = parse_anchor_log(f.read())
        return steps in state["parsed"]["train"] and (steps < ANCHOR_STEPS or ANCHOR_STEPS in state["parsed"]["val"])

    with GpuMemoryPoller() as mem:
        _, stopped, seconds = watch(launcher + ["train_gpt.py"], anchor_dir, os.path.join(anchor_dir, "output.txt"),
                                    done, timeout_s, signal.SIGTERM, "the anchor", env=dict(os.environ),
                                    let_finish=steps == ANCHOR_STEPS)  # a whole run ends by itself
    return {"log": state["parsed"], "log_path": state["log"], "wall_s": seconds, "stopped": stopped,
            "gpu_mem_max_mib": mem.max_mib}


def train_gpt_has_preset():
    proc = subprocess.run([sys.executable, os.path.join(REPO, "train_gpt.py"), "--help"], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    return "--preset" in proc.stdout


def run_ours(label, flags, paths, tokenizer, exp_dir, train_steps, stop_at, batch_size, timeout_s):
    """train_gpt.py with `flags` + the benchmark's overrides, stopped (SIGINT: recorded as interrupted) once its
    metrics.csv has step stop_at, unless that is its last step. Returns rows, config, results, memory."""
    overrides = ["--tokenizer", tokenizer, "--train_files", paths["ours_train"], "--val_files", paths["ours_val"],
                 "--train_steps", str(train_steps), "--val_loss_every", "0", "--val_steps", "1",
                 "--val_seq_len", str(ANCHOR_SEQ_LEN), "--val_batch_size", str(ANCHOR_SEQ_LEN),
                 "--hellaswag_limit", "0", "--sample_tokens", "0", "--experiments_dir", exp_dir,
                 "--model_name", f"bench_anchor_{label}", "--log_every", "10"]
    cmd = [sys.executable, "train_gpt.py", *flags, *overrides]
    output = os.path.join(exp_dir, f"{label}_output.txt")
    os.makedirs(exp_dir, exist_ok=True)
    before = set(new_files(exp_dir, set()))
    state = {"dir": None, "config": None, "rows": []}

    def done():
        if state["dir"] is None:
            found = [d for d in new_files(exp_dir, before, f"_bench_anchor_{label}") if os.path.isdir(d)]
            if not found:
                return False
            state["dir"] = found[-1]
        if state["config"] is None:
            try:
                with open(os.path.join(state["dir"], "config.json")) as f:
                    state["config"] = cfg = json.load(f)
            except (OSError, ValueError):
                return False
            wrong = {k: (cfg.get(k), want) for k, want in (("train_steps", train_steps), ("batch_size", batch_size),
                                                           ("world_size", 1)) if cfg.get(k) != want}
            if wrong:
                described = ", ".join(f"{k} {got} (not {want})" for k, (got, want) in wrong.items())
                raise UserError(f"ours ({label}) runs with {described}: check --ours_flags / --ours_batch_size "
                                "(flags after --preset must override it)")
        metrics = os.path.join(state["dir"], "metrics.csv")
        if not os.path.exists(metrics):
            return False
        rows = [r for r in read_metrics(metrics, strict=False) if r.get("step_time_s") is not None]
        state["rows"] = rows
        return any(r["step"] >= stop_at for r in rows)

    print(f"ours ({label}): {shlex.join(cmd)}", flush=True)
    with GpuMemoryPoller() as mem:
        _, stopped, seconds = watch(cmd, REPO, output, done, timeout_s, signal.SIGINT, f"ours ({label})",
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                    let_finish=stop_at >= train_steps)  # a whole run ends by itself
    results = None
    try:
        with open(os.path.join(state["dir"], "results.json")) as f:
            results = json.load(f)
    except (OSError, ValueError, TypeError):
        pass
    return {"rows": state["rows"], "config": state["config"], "run_dir": state["dir"], "results": results,
            "wall_s": seconds, "stopped": stopped, "gpu_mem_max_mib": mem.max_mib, "command": cmd}


# ------------------------------------------------------------------------------------------------ FLOPs
def pairs_per_token(train_path, max_blocks, rows=8, seed=0):
    """{window blocks: allowed query-key pairs per token} of the document-causal sliding-window mask, counted
    exactly with model.attention_pairs on `rows` rows of 49,152 tokens that start at document starts."""
    import torch  # heavy (~1 s): only the GPU run needs it; --prepare_only runs without it

    import model as arch  # torch

    tokens = read_shard(train_path)
    starts = np.flatnonzero(np.asarray(tokens[: len(tokens) - ANCHOR_SEQ_LEN]) == EOT)
    pick = np.random.default_rng(seed).choice(starts, size=min(rows, len(starts)), replace=False)
    x = torch.from_numpy(np.stack([np.asarray(tokens[s:s + ANCHOR_SEQ_LEN], dtype=np.int64) for s in pick]))
    return {b: int(arch.attention_pairs(x, EOT, b)) / x.numel() for b in range(1, max_blocks + 1)}


def our_model(config, run_dir):
    """(our GPT as the run built it, on the meta device: shapes only, no memory; its module): from the model.py
    in the run's code backup (a run trained here: its source is trusted) and its config.json."""
    import torch  # heavy: as in pairs_per_token

    from gptlab.checkpoint import model_source as ms  # torch
    from gptlab.train.config import model_config_of  # torch

    from gptlab.train import code_backup

    path = os.path.join(run_dir, "code", "model.py")  # (or, not in a clone of a baseline, its commit's)
    code = code_backup.read_backup_file(os.path.dirname(path), "model.py",
                                        code_backup.repo_candidates(run_dir)).decode()
    module = ms.module_for({"file": "model.py", "code": code, "sha256": ms.sha256_text(code)}, path)
    with torch.device("meta"):
        return module.GPT(module.GPTConfig(**model_config_of(argparse.Namespace(**config), module.GPTConfig))), module


def flops(model, tokens_per_step, windows, ppt):
    """Our training_flops (the model's own count) summed over steps whose (long, short) windows are `windows`."""
    model, module = model
    total = 0.0
    for long_b, short_b in windows:
        pairs = {"long": ppt[long_b] * tokens_per_step, "short": ppt[short_b] * tokens_per_step}
        total += sum(module.training_flops(model, tokens_per_step, pairs))
    return total


def anchor_architecture_flops(tokens_per_step, windows, ppt):
    """The same count for the anchor's own model: 12 layers of 768, 6 heads of 128, MLP 4x, vocab padded to
    50,304; no attention in layer 7; long windows in layers 0, 4 and 11, short in the other eight."""
    d, hdim = 768, 6 * 128
    n_matmul = 11 * 4 * d * hdim + 12 * 2 * 4 * d * d + d * 50304
    total = 0.0
    for long_b, short_b in windows:
        attn = 12 * hdim * tokens_per_step * (3 * ppt[long_b] + 8 * ppt[short_b])
        total += 6 * tokens_per_step * n_matmul + attn
    return total


# ------------------------------------------------------------------------------------------------ main
def gpu_name():
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_name())"],
                          capture_output=True, text=True, timeout=300)
    return proc.stdout.strip() or None


def ours_summary(run, plan_, warmup, tokens_per_step, model, ppt, peak):
    import train_gpt  # heavy (torch): as in pairs_per_token

    cfg = run["config"]
    rows = [r for r in run["rows"] if warmup < r["step"] <= plan_]
    if not rows:
        raise UserError(f"ours ({run['run_dir']}) logged no step after its first {warmup}")
    seconds = sum(r["step_time_s"] for r in rows)
    windows = [train_gpt.window_blocks(r["step"] - 1, cfg["train_steps"], cfg["window_size"]) for r in rows]
    total = flops(model, tokens_per_step, windows, ppt)
    logged = [r["tflops_per_gpu"] * r["step_time_s"] for r in rows if r.get("tflops_per_gpu") is not None]
    res = run["results"] or {}
    return {"steps_run": max(r["step"] for r in run["rows"]), "train_steps": cfg["train_steps"],
            "measured_steps": [rows[0]["step"], rows[-1]["step"]], "tokens_per_step": tokens_per_step,
            "tokens": len(rows) * tokens_per_step, "time_s": seconds, "step_time_ms": 1000 * seconds / len(rows),
            "tokens_per_s": len(rows) * tokens_per_step / seconds, "flops": total,
            "mfu": total / seconds / (peak * 1e12) if peak else None,
            "logged_tflops": sum(logged) / seconds if len(logged) == len(rows) else None,
            "windows_blocks": [list(windows[0]), list(windows[-1])], "gpu_mem_max_mib": run["gpu_mem_max_mib"],
            "peak_mem_allocated_gb": res.get("peak_mem_allocated_gb"),
            "peak_mem_reserved_gb": res.get("peak_mem_reserved_gb"), "run_dir": run["run_dir"],
            "stopped_by_benchmark": run["stopped"], "wall_s": run["wall_s"], "command": shlex.join(run["command"])}


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.val_tokens < ANCHOR_SEQ_LEN or (not args.prepare_only and args.val_tokens != ANCHOR_VAL_TOKENS):
        raise UserError(f"--val_tokens other than the anchor's {ANCHOR_VAL_TOKENS:,} only with --prepare_only "
                        f"(and at least {ANCHOR_SEQ_LEN})")
    p = plan(args.steps, args.ours_batch_size, args.warmup_steps, args.doc_len)
    if not args.prepare_only:
        import torch  # heavy: --prepare_only runs without torch

        if not torch.cuda.is_available():
            raise UserError("bench_anchor.py runs the anchor and ours on a CUDA GPU and none is visible here; "
                            "--prepare_only writes the shards, tokenizer and patched anchor anywhere")
        if args.steps <= p["anchor_warmup"] or p["ours_steps"] <= args.warmup_steps:
            raise UserError(f"--steps {args.steps} leaves nothing to measure after the warm-up (anchor steps 1.."
                            f"{p['anchor_warmup']}, ours 1..{args.warmup_steps}); use at least "
                            f"{(args.warmup_steps + 1) * args.ours_batch_size // ANCHOR_SEQ_LEN}")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    anchor_dir = os.path.join(out, "anchor_run")
    patch_anchor(os.path.abspath(args.anchor), os.path.join(anchor_dir, "train_gpt.py"))
    paths = prepare(out, p["train_tokens"], args.val_tokens, args.seed, args.doc_len)
    tokenizer = write_tokenizer(os.path.join(out, "tokenizer", TOKENIZER_FILE))
    print(f"anchor copy: {anchor_dir}/train_gpt.py (the world-size assert lifted); tokenizer: {tokenizer} "
          "(synthetic, 50,257 ids)", flush=True)
    if args.prepare_only:
        return {"prepared": out, "paths": paths, "tokenizer": tokenizer, "plan": p}

    import torch  # heavy: as above

    name = gpu_name()
    peak = gpu_bf16_peak_tflops(name)
    if args.ours_flags is not None:
        ours_flags = shlex.split(args.ours_flags)
    elif train_gpt_has_preset():
        ours_flags = ["--preset", "record26"]
    else:
        ours_flags = shlex.split(RECORD26_FLAGS)
        print("train_gpt.py has no --preset yet: ours runs with the explicit record26 flags", flush=True)
    print(f"GPU {name} (dense bf16 peak {peak or 'unknown'} TFLOP/s), torch {torch.__version__}; anchor "
          f"{args.steps} of {ANCHOR_STEPS} steps, ours {p['ours_steps']} of {p['ours_train_steps']} steps",
          flush=True)

    anchor = run_anchor(anchor_dir, args.steps, args.timeout)
    exp_dir = os.path.join(out, "experiments")
    ours = run_ours("ours", ours_flags, paths, tokenizer, exp_dir, p["ours_train_steps"], p["ours_steps"],
                    args.ours_batch_size, args.timeout)
    matched = None
    if args.step_matched:
        matched = run_ours("ours_step_matched", ours_flags + ["--batch_size", str(ANCHOR_SEQ_LEN)], paths, tokenizer,
                           exp_dir, ANCHOR_STEPS, args.steps, ANCHOR_SEQ_LEN, args.timeout)

    model = our_model(ours["config"], ours["run_dir"])
    max_blocks = max(ours["config"]["window_size"], ANCHOR_WINDOW_GROWTH + BLOCK) // BLOCK
    ppt = pairs_per_token(paths["ours_train"], max_blocks)

    first, last = p["anchor_warmup"], args.steps
    n, seconds = anchor_speed(anchor["log"], first, last)
    windows = [anchor_window_blocks(k - 1) for k in range(first + 1, last + 1)]
    a_flops = flops(model, ANCHOR_SEQ_LEN, windows, ppt)
    a_own = anchor_architecture_flops(ANCHOR_SEQ_LEN, windows, ppt)
    peak_mib = anchor["log"]["peak_mib"]
    anchor_report = {"steps_run": args.steps, "train_steps": ANCHOR_STEPS, "measured_steps": [first + 1, last],
                     "tokens_per_step": ANCHOR_SEQ_LEN, "tokens": n * ANCHOR_SEQ_LEN, "time_s": seconds,
                     "step_time_ms": 1000 * seconds / n, "tokens_per_s": n * ANCHOR_SEQ_LEN / seconds,
                     "flops": a_flops, "mfu": a_flops / seconds / (peak * 1e12) if peak else None,
                     "mfu_own_architecture": a_own / seconds / (peak * 1e12) if peak else None,
                     "windows_blocks": [list(windows[0]), list(windows[-1])],
                     "gpu_mem_max_mib": anchor["gpu_mem_max_mib"],
                     "peak_mem_allocated_gb": peak_mib[0] / 1024 if peak_mib else None,
                     "peak_mem_reserved_gb": peak_mib[1] / 1024 if peak_mib else None,
                     "log": anchor["log_path"], "stopped_by_benchmark": anchor["stopped"], "wall_s": anchor["wall_s"]}
    ours_report = ours_summary(ours, p["ours_steps"], args.warmup_steps, args.ours_batch_size, model, ppt, peak)
    sides = [("anchor (record #26)", anchor_report), ("ours (record26)", ours_report)]
    if matched:
        matched_report = ours_summary(matched, args.steps, p["anchor_warmup"], ANCHOR_SEQ_LEN, model, ppt, peak)
        sides.append(("ours, anchor's step", matched_report))
    ratio = ours_report["tokens_per_s"] / anchor_report["tokens_per_s"]
    report = {"gpu_name": name, "peak_tflops": peak, "torch": torch.__version__, "plan": p,
              "ours_flags": ours_flags, "anchor": anchor_report, "ours": ours_report,
              "ours_step_matched": matched_report if matched else None, "ratio_tokens_per_s": ratio,
              "ratio_step_matched": matched_report["tokens_per_s"] / anchor_report["tokens_per_s"] if matched else None,
              "flops_note": "one FLOP count for all sides: model.training_flops of our GPT (from our run's "
                            "config), with each side's attention window at each measured step and pairs per token "
                            "counted on rows of the benchmark data (average over the measured steps); the anchor's "
                            "own-architecture figure (no attention in layer 7) in mfu_own_architecture",
              "timing_note": "anchor: train_time difference between its logged steps (validation excluded); ours: "
                             "sum of metrics.csv step_time_s; warm-up: ours' first --warmup_steps steps and the "
                             "anchor's steps holding the same tokens are left out"}
    print_table(sides, name, peak, ratio, report)
    report_path = os.path.join(out, "bench_anchor.json")
    atomic_write_text(report_path, json.dumps(report, indent=2) + "\n", overwrite=True)
    print(f"report: {report_path}", flush=True)
    return report


def _fmt(value, spec, suffix=""):
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def print_table(sides, name, peak, ratio, report):
    def gb(side):
        smi = side["gpu_mem_max_mib"]
        own = side.get("peak_mem_allocated_gb")
        return (_fmt(smi / 1024 if smi is not None else None, ".1f", " GB") + " / "
                + _fmt(own, ".1f", " GB"))

    rows = [("steps run (of the schedule)", lambda s: f"{s['steps_run']} of {s['train_steps']}"),
            ("measured steps", lambda s: f"{s['measured_steps'][0]}..{s['measured_steps'][1]}"),
            ("tokens measured", lambda s: f"{s['tokens']:,}"),
            ("tokens per step", lambda s: f"{s['tokens_per_step']:,}"),
            ("step time", lambda s: f"{s['step_time_ms']:.1f} ms"),
            ("tokens/s", lambda s: f"{s['tokens_per_s']:,.0f}"),
            ("MFU (our FLOP count)", lambda s: _fmt(None if s["mfu"] is None else 100 * s["mfu"], ".1f", "%")),
            ("windows (blocks of 128)", lambda s: "{}/{} .. {}/{}".format(*s["windows_blocks"][0],
                                                                            *s["windows_blocks"][1])),
            ("GPU memory: smi max / alloc", gb)]
    width = max(len(label) for label, _ in sides) + 2
    print(f"\nGPU {name}, dense bf16 peak {peak or 'unknown'} TFLOP/s")
    print(" " * 30 + "".join(f"{label:>{max(width, 24)}}" for label, _ in sides))
    for title, fn in rows:
        print(f"{title:<30}" + "".join(f"{fn(side):>{max(width, 24)}}" for _, side in sides))
    a = report["anchor"]
    if a["mfu_own_architecture"] is not None:
        print(f"anchor MFU with its own architecture's FLOPs (no attention in layer 7): "
              f"{100 * a['mfu_own_architecture']:.1f}%")
    if report["ours"]["logged_tflops"] is not None and peak:
        print(f"ours' own log (exact pairs of its batches): {report['ours']['logged_tflops']:.1f} TFLOP/s, MFU "
              f"{100 * report['ours']['logged_tflops'] / peak:.1f}%")
    print(f"ratio ours/anchor tokens/s: {ratio:.3f}x (goal >= 1.0x)"
          + (f"; ours at the anchor's step (49,152 tokens, optimizer every step): "
             f"{report['ratio_step_matched']:.3f}x" if report["ratio_step_matched"] else ""))


if __name__ == "__main__":
    run_cli(main)
