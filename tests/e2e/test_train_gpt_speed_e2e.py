"""train_gpt.py's GPU-path choices, checked on CPU in subprocesses: quiet steps read nothing back and issue a stated
number of collectives (2 ranks, gloo), the eager loss's peak memory does not scale with the logits, and a preset
resolves beside a flag. The in-process checks: tests/unit/test_train_gpt_speed.py."""
import json
import os
import subprocess
import sys
import textwrap

from conftest import REPO, free_port, run_script


def test_quiet_steps_read_nothing_back_and_issue_a_stated_number_of_collectives(tiny, tmp_path):
    """8 steps on 2 ranks, reporting every 4 (and after steps 1 and 2: a first line and the time estimate): steps
    3, 5, 6 and 7 make no host read and no .item() at the dispatcher.
    Every step issues the collectives GradientSync and the sharded optimizers state: for Adam (sharded), a
    reduce-scatter and an all-gather per flat, one flat per param group of one dtype (head, embeddings, scalars,
    all float32: 3); for Muon, a reduce-scatter and an all-gather per chunk (4 matrix shapes x 4 layers / 2 ranks
    = 8 chunks); no all-reduce."""
    out = str(tmp_path / "work.json")
    flags = ["--tokenizer", tiny["tokenizer"], "--train_files", tiny["train"], "--val_files", tiny["val"],
             "--train_seq_len", "128", "--val_seq_len", "128", "--model_dim", "64", "--num_heads", "2",
             "--num_layers", "4", "--batch_size", "1024", "--device_batch_size", "256", "--train_steps", "8",
             "--val_loss_every", "0", "--val_steps", "1", "--window_size", "256", "--hellaswag_limit", "0",
             "--experiments_dir", str(tmp_path / "exps"), "--log_every", "4", "--sample_tokens", "0"]
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "tests/helpers/step_work.py",
                out, "--"] + flags, check=True)
    per_step_collectives = {"reduce_scatter_tensor": 3 + 8, "all_gather_into_tensor": 3 + 8}
    for rank in range(2):
        with open(f"{out}.rank{rank}") as f:
            steps = json.load(f)
        assert len(steps) == 8
        for i in (2, 4, 5, 6):  # steps 3, 5, 6, 7
            assert steps[i] == {"host_reads": 0, "item": 0, "collectives": per_step_collectives}, (rank, i + 1)
        # step 4 reports steps 3-4: one all-reduce of their figures and one host read
        assert steps[3] == {"host_reads": 1, "item": 0, "collectives": dict(per_step_collectives, all_reduce=1)}


def test_the_eager_loss_peak_memory_does_not_scale_with_the_logits():
    """8192 tokens x 8192 vocab: one fp32 logits tensor is 256 MiB, and the plain path holds ~5 of them. Chunked,
    the forward+backward's peak (process max RSS, in a fresh process whose large blocks glibc maps and unmaps, so
    RSS follows the live tensors) stays under one logits tensor."""
    script = textwrap.dedent("""
        import resource, sys, torch
        sys.path.insert(0, %r)
        import model as arch
        arch.LOSS_CHUNK_ELEMENTS = 2 ** 22  # 16 MiB of fp32 logits per chunk
        torch.manual_seed(0)
        model = arch.GPT(arch.GPTConfig(vocab_size=8192, num_layers=1, num_heads=1, head_dim=16, model_dim=16, num_val_emb=0,
                              max_seq_len=1024))
        idx = torch.randint(0, 8191, (8, 1024))
        masks = arch.build_attention_masks(idx, 8191, 1, 1, use_flex=False)
        model(idx[:1, :128], arch.build_attention_masks(idx[:1, :128], 8191, 1, 1, False), idx[:1, :128]).backward()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        model(idx, masks, idx).backward()
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
    """ % REPO)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536"))
    assert proc.returncode == 0, proc.stderr
    peak_growth = int(proc.stdout.split()[-1])
    one_logits_tensor = 8192 * 8192 * 4
    assert peak_growth < one_logits_tensor, peak_growth / 2**20


def test_a_preset_with_a_flag_beside_it_resolves_without_a_folder_or_data(tmp_path):
    proc = run_script(["train_gpt.py", "--preset", "record26", "--train_steps", "10", "--dry_run", "--device", "cpu",
                       "--experiments_dir", str(tmp_path / "exps")], check=True)
    cfg = json.loads(proc.stdout)
    # record #26: 12 x 768 with 6 heads of 128, 3 value embeddings, 48K-token rows, 393,216 tokens per step,
    # cooldown 0.45, windows up to 1,792; --train_steps given beside the preset wins over its 1,750
    assert (cfg["num_layers"], cfg["model_dim"], cfg["head_dim"], cfg["num_val_emb"]) == (12, 768, 128, 3)
    assert (cfg["train_seq_len"], cfg["batch_size"], cfg["cooldown_frac"], cfg["window_size"]) == (
        49152, 393216, 0.45, 1792)
    assert cfg["train_steps"] == 10 and cfg["preset"] == "record26"
    # on CPU, auto cuts micro-batches of one 49,152-token row: 8 per step
    assert (cfg["device_batch_size"], cfg["grad_acc_steps"]) == (49152, 8)
    assert not (tmp_path / "exps").exists()
    small = json.loads(run_script(["train_gpt.py", "--preset", "gpt2-small", "--dry_run", "--device", "cpu"],
                                  check=True).stdout)
    assert (small["batch_size"], small["device_batch_size"], small["grad_acc_steps"]) == (524288, 4096, 128)
