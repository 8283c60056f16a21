"""Mutation check: apply one-line bugs to a copy of the repository, one at a time, and see whether the tests meant
to guard each one catch it.

    python bench/mutants.py                 # every mutant: killed (and by which test) or SURVIVED
    python bench/mutants.py --list          # the mutants, their files and tests
    python bench/mutants.py --only NAME     # one mutant (repeat the flag, or NAME,NAME, for several)

The working tree (tracked files and untracked files git does not ignore) is copied once into a temporary folder;
each mutant replaces one exact piece of text there (it must occur exactly once), runs its few named tests
(`pytest -x`), and puts the file back. A kill counts only where those same tests pass on the unmutated copy (run
once per test selection first): a selection that fails unmutated is reported as BASELINE FAILS, not as a kill.
Each mutant names a small selection, so a full run takes minutes. Exit status 1 when a mutant survives."""
import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from gptlab.core.cli import ArgumentParser  # noqa: E402
from gptlab.core.errors import UserError, run_cli  # noqa: E402

SHARED_DATA = os.environ.get("GPTLAB_SHARED_DATA") or os.path.join(os.path.dirname(REPO), "shared", "data")
TIMEOUT_S = 900


@dataclass
class Mutant:
    name: str
    path: str  # relative to the repository root
    original: str  # exact text, found exactly once in the file
    mutated: str
    tests: tuple  # pytest arguments: files, node ids, -k expressions


U = "tests/unit/"
E = "tests/e2e/"
GUARDS = U + "test_missed_mutants.py"

MUTANTS = [
    # ---- --shard_params (FSDP2) and sharded checkpoints (issue 29)
    Mutant("fsdp-row-split-floor", "gptlab/train/comm.py",
           "    per = -(-rows // world_size)\n", "    per = rows // world_size\n",
           (U + "test_shard_params_logic.py", E + "test_shard_params.py", "-k", "whole_matrices")),
    Mutant("fsdp-blocks-returned-in-reverse", "gptlab/train/comm.py",
           "reshape(-1) for s in range(self.world_size)])",
           "reshape(-1) for s in reversed(range(self.world_size))])",
           (E + "test_shard_params.py", "-k", "whole_matrices")),
    # (Muon's momentum and lr factor are shared by the sharded and unsharded steps: the curves of one against the
    # other cannot see a bug there, the hand-worked values can)
    Mutant("muon-plain-momentum", "train_gpt.py",
           "    return grad.lerp(buf, momentum)\n", "    return buf.clone()\n",
           (GUARDS, "-k", "nesterov")),
    Mutant("muon-lr-factor-inverted", "train_gpt.py",
           "    return max(1, rows / cols) ** 0.5\n", "    return max(1, cols / rows) ** 0.5\n",
           (GUARDS, "-k", "lr_factor")),
    Mutant("fsdp-muon-lr-factor-of-the-block", "train_gpt.py",
           'alpha=-group["lr"] * muon_lr_factor(p.shape))', 'alpha=-group["lr"] * muon_lr_factor(updates[p].shape))',
           (E + "test_shard_params.py", "-k", "follow")),
    Mutant("fsdp-gradients-averaged", "gptlab/train/fsdp.py", "        divide(1.0)\n", "        pass\n",
           (E + "test_grad_sync_micro_batches.py",)),
    Mutant("fsdp-sync-on-the-wrong-micro-batch", "gptlab/train/fsdp.py",
           "self.model.set_requires_gradient_sync(bool(value))", "self.model.set_requires_gradient_sync(not value)",
           (E + "test_grad_sync_micro_batches.py",)),
    Mutant("sharded-checkpoint-hash-not-compared", "gptlab/train/sharded_checkpoint.py",
           'if size != record["bytes"] or _file_record(file)["sha256"] != record["sha256"]:',
           'if size != record["bytes"]:',
           (E + "test_shard_params.py", "-k", "damaged")),
    Mutant("sharded-checkpoint-one-share-hashed", "gptlab/train/sharded_checkpoint.py",
           "if i % ctx.world_size == ctx.rank}", "if i % ctx.world_size == 0}",
           (E + "test_shard_params.py", "-k", "damaged")),
    Mutant("sharded-checkpoint-without-optimizer-state", "gptlab/train/sharded_checkpoint.py",
           "                    if isinstance(value, torch.Tensor):\n                        optim[",
           "                    if False:\n                        optim[",
           (E + "test_shard_params.py", "-k", "resumes")),
    Mutant("one-file-into-sharded-not-cut", "gptlab/train/sharded_checkpoint.py",
           "    if param is None or not is_sharded(param) or tuple(whole.shape) != tuple(param.shape):",
           "    if True:",
           (E + "test_shard_params.py", "-k", "resumes and one")),
    # ---- the six of issue 27
    Mutant("surrogate-to-question-mark", "gptlab/tokenizer/pretokenize.py",
           'return doc.encode("utf-16", "surrogatepass").decode("utf-16", "replace")',
           'return doc.encode("utf-8", "replace").decode("utf-8")',
           (GUARDS, "-k", "surrogate", U + "test_bpe.py", "-k", "surrogate or hand10")),
    Mutant("unpickler-lets-builtins-through", "gptlab/tokenizer/format.py",
           "        if (module, name) in _ALLOWED_GLOBALS:\n            return _ALLOWED_GLOBALS[module, name]",
           '        if (module, name) in _ALLOWED_GLOBALS or module == "builtins":\n'
           "            return _ALLOWED_GLOBALS.get((module, name)) or super().find_class(module, name)",
           (GUARDS, "-k", "unpickler or pickle", U + "test_tokenizer.py", "-k", "refuses")),
    Mutant("val-shard-one-more-document", "gptlab/data/fineweb.py",
           'k = int(np.searchsorted(ends, used + need, side="left"))',
           'k = int(np.searchsorted(ends, used + need, side="right"))',
           (GUARDS, "-k", "validation_shard")),
    Mutant("newton-schulz-4-steps", "train_gpt.py",
           "    for _ in range(steps):\n        A = X @ X.mT", "    for _ in range(steps - 1):\n        A = X @ X.mT",
           (GUARDS, "-k", "newton_schulz or muon_step", U + "test_train_gpt.py", "-k", "newton_schulz")),
    Mutant("muon-default-4-steps", "train_gpt.py", "momentum=0.95, ns_steps=5,", "momentum=0.95, ns_steps=4,",
           (GUARDS, "-k", "muon_step")),
    Mutant("export-padding-mask-dropped", "gptlab/export/modeling_gptlab.py",
           "        real = attention_mask.bool()", "        real = torch.ones_like(attention_mask, dtype=torch.bool)",
           (E + "test_hf_export.py", "-k", "padding")),
    Mutant("export-cached-padding-mask-dropped", "gptlab/export/modeling_gptlab.py",
           "if attention_mask is None\n", "if True\n",
           (E + "test_hf_export.py", "-k", "padding_is_masked")),
    Mutant("grad-sync-armed-on-first-micro-batch", "train_gpt.py",
           "grad_sync.armed = micro == len(batches) - 1", "grad_sync.armed = micro == 0",
           (E + "test_grad_sync_micro_batches.py",)),
    # ---- our own, across the modules touched in this round
    Mutant("read-json-bound-off-by-one", "gptlab/core/files.py", "if st.st_size > max_bytes:",
           "if st.st_size >= max_bytes:", (U + "test_read_json_file.py",)),
    Mutant("read-json-reads-devices", "gptlab/core/files.py", "    if not stat.S_ISREG(st.st_mode):\n",
           "    if stat.S_ISDIR(st.st_mode):\n", (U + "test_read_json_file.py",)),
    Mutant("atomic-write-ignores-umask", "gptlab/core/files.py", "os.fchmod(fd, 0o666 & ~_umask())",
           "os.fchmod(fd, 0o600)", (GUARDS, "-k", "atomic_write", E + "test_data_integrity.py", "-k", "atomic_write")),
    Mutant("atomic-write-leaves-temp-on-error", "gptlab/core/files.py",
           "            os.remove(tmp_path)\n        raise\n\n\ndef _umask", "            pass\n        raise\n\n\ndef _umask",
           (U + "test_shards.py", "-k", "failed_write", U + "test_tokenizer.py", "-k", "failed_save")),
    Mutant("output-dir-follows-a-link-with-overwrite", "gptlab/core/files.py", "    if os.path.islink(path):\n",
           "    if os.path.islink(path) and not overwrite:\n", (U + "test_output_dir.py",)),
    Mutant("lock-holder-command-not-shortened", "gptlab/core/files.py", "command[:197] + \"...\"", "command",
           (GUARDS, "-k", "holder")),
    Mutant("float-flag-accepts-inf", "gptlab/core/cli.py", "lambda value: math.isfinite(value) and accept(value)",
           "lambda value: accept(value)", (U + "test_flag_types.py",)),
    Mutant("open-lower-bound-closed", "gptlab/core/cli.py", "(value > low if low_open else value >= low)",
           "(value >= low if low_open else value >= low)", (U + "test_flag_types.py",)),
    Mutant("help-shows-a-stated-default-twice", "gptlab/core/cli.py",
           'or default == argparse.SUPPRESS or "default" in text):', "or default == argparse.SUPPRESS):",
           (GUARDS, "-k", "help_default", U + "test_flag_types.py")),
    Mutant("repeat-ctrl-c-window-inverted", "gptlab/train/stop.py", "now - self._first_at > REPEAT_WINDOW_S",
           "now - self._first_at < REPEAT_WINDOW_S", (U + "test_stop_signals.py",)),
    Mutant("sigint-overrides-sigterm", "gptlab/train/stop.py", "elif signum == signal.SIGTERM:",
           "elif signum == signal.SIGINT:", (U + "test_stop_signals.py",)),
    Mutant("deferred-stop-ignores-nesting", "gptlab/train/stop.py",
           "if not self._deferring and not self._in_steps and self.requested is not None:",
           "if not self._in_steps and self.requested is not None:", (U + "test_stop_signals.py", GUARDS, "-k", "nested")),
    Mutant("end-steps-ignores-a-checkpoint-write", "gptlab/train/stop.py",
           "if self.requested is not None and not self._deferring:", "if self.requested is not None:",
           (U + "test_stop_signals.py", GUARDS, "-k", "end_steps")),
    Mutant("overhead-minutes-as-hours", "gptlab/train/cost.py", "+ 60.0 * overhead_minutes", "+ 3600.0 * overhead_minutes",
           (U + "test_cost.py", "-k", "gpu_hours")),
    Mutant("nan-price-accepted", "gptlab/train/cost.py", "if not given >= 0:", "if given < 0:",
           (U + "test_cost.py", GUARDS, "-k", "price")),
    Mutant("two-proportion-unpooled-mean", "gptlab/compare/stats.py", "pooled = (k_a + k_b) / (n_a + n_b)",
           "pooled = (p_a + p_b) / 2", (U + "test_significance.py", "-k", "proportion")),
    Mutant("pooled-noise-dof-counts-runs", "gptlab/compare/stats.py", "dof = sum(n - 1 for _, n in variances)",
           "dof = sum(n for _, n in variances)", (U + "test_significance.py", GUARDS, "-k", "pooled")),
    Mutant("power-one-sided-critical-value", "gptlab/compare/stats.py", "stats.t.ppf(1.0 - alpha / 2.0, df)",
           "stats.t.ppf(1.0 - alpha, df)", (U + "test_significance.py", "-k", "power or runs_needed")),
    Mutant("verdict-at-p-equal-alpha", "gptlab/compare/stats.py", "    if p >= alpha:\n", "    if p > alpha:\n",
           (U + "test_significance.py", GUARDS, "-k", "verdict")),
    Mutant("loader-skips-a-token-per-row", "gptlab/data/loader.py", "self.pos = start + self.seq_len\n",
           "self.pos = start + self.seq_len + 1\n", (U + "test_dataloader.py",)),
    Mutant("loader-drops-the-last-row-of-a-shard", "gptlab/data/loader.py",
           "            if start + span <= len(tokens):\n                return tokens, start",
           "            if start + span < len(tokens):\n                return tokens, start",
           (U + "test_dataloader.py", GUARDS, "-k", "last_row")),
    Mutant("validation-rows-counted-one-token-short", "gptlab/data/loader.py",
           "available = sum((n - 1) // seq_len for n in counts if n > seq_len)",
           "available = sum(n // seq_len for n in counts if n > seq_len)", (U + "test_dataloader.py", GUARDS, "-k", "validation_rows")),
    Mutant("second-epoch-unshuffled", "gptlab/data/loader.py", "if epoch == 0:", "if epoch <= 1:",
           (U + "test_dataloader.py", GUARDS, "-k", "epoch")),
    Mutant("checkpoint-hash-ignores-shape", "gptlab/train/checkpointing.py",
           'digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())', 'digest.update(f"T{tensor.dtype}".encode())',
           (U + "test_use_faults.py", "-k", "checksum or flipped", GUARDS, "-k", "checkpoint_hash")),
    Mutant("checkpoint-hash-list-is-tuple", "gptlab/train/checkpointing.py",
           'digest.update(b"[" if isinstance(value, list) else b"(")', 'digest.update(b"[")',
           (U + "test_use_faults.py", "-k", "checksum or flipped", GUARDS, "-k", "checkpoint_hash")),
    Mutant("resume-at-the-last-step-allowed", "gptlab/train/checkpointing.py", 'if ckpt["step"] >= train_steps:',
           'if ckpt["step"] > train_steps:', (U + "test_train_gpt.py", "-k", "resume", GUARDS, "-k", "resume")),
    Mutant("run-dir-allows-hidden-names", "gptlab/train/records.py", ' or model_name.startswith("."):', ":",
           (U + "test_experiment.py", "-k", "run_dirs", GUARDS, "-k", "run_dir")),
    Mutant("metrics-keep-infinite-values", "gptlab/train/records.py",
           "    if not strict and not math.isfinite(value):\n", "    if not strict and math.isnan(value):\n",
           (U + "test_experiment.py", "-k", "metrics", GUARDS, "-k", "metrics")),
    Mutant("overlap-by-name-not-real-path", "gptlab/data/selection.py",
           "overlap = sorted(set(map(os.path.realpath, train_paths)) & set(map(os.path.realpath, val_paths)))",
           "overlap = sorted(set(train_paths) & set(val_paths))",
           (U + "test_train_gpt.py", "-k", "overlapping", GUARDS, "-k", "overlap")),
    Mutant("fingerprint-ignores-token-count", "gptlab/data/selection.py",
           'digest.update(f"{os.path.basename(p.path)} {p.tokens} {p.sha256 or p.sample}\\n".encode())',
           'digest.update(f"{os.path.basename(p.path)} {p.sha256 or p.sample}\\n".encode())',
           (GUARDS, "-k", "fingerprint")),
    # ---- this session's: progress to logs, the memory probe, sharded Adam, the allocator
    Mutant("log-progress-keeps-carriage-return", "gptlab/core/progress.py", 'self.file.write(self.line() + "\\n")',
           'self.file.write("\\r" + self.line())', (U + "test_progress.py",)),
    Mutant("log-progress-ignores-interval", "gptlab/core/progress.py",
           "time.monotonic() - self._last >= self.interval_s", "True", (U + "test_progress.py",)),
    Mutant("terminal-check-inverted", "gptlab/core/progress.py", "    if is_terminal(file):\n",
           "    if not is_terminal(file):\n", (U + "test_progress.py",)),
    Mutant("probe-batch-views", "gptlab/train/batching.py",
           "return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()", "return rows[:, :-1], rows[:, 1:]",
           (U + "test_memory_probe.py",)),
    Mutant("probe-ignores-a-measured-peak", "gptlab/train/batching.py",
           "per_token = max(per_token, (peak - fixed_bytes) / tokens)", "per_token = per_token",
           (U + "test_memory_probe.py",)),
    Mutant("allocator-overrides-the-users", "gptlab/train/environment.py",
           "if any(environ.get(name) for name in ALLOCATOR_VARIABLES):", "if False:", (U + "test_memory_probe.py",)),
    Mutant("flat-shard-slice-from-rank-0", "gptlab/train/comm.py",
           "        start = self.rank * self.part[k]\n        offset = 0\n",
           "        start = 0\n        offset = 0\n", (E + "test_sharded_adam.py",)),
    Mutant("flat-shard-params-not-refreshed", "gptlab/train/comm.py",
           "            self._fill_my_part(k, [p.detach() for p in self.params[k]], self.slices[k].detach())",
           "            pass", (E + "test_sharded_adam.py",)),
    Mutant("sharded-adam-keeps-first-lr", "train_gpt.py",
           "            inner_group.update(self._settings(g))  # the schedule sets the outer groups' lr\n",
           "            pass\n",
           (E + "test_sharded_adam.py",)),
]


def mutants_by_name(names):
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserError(f"unknown mutant(s) {', '.join(unknown)}; see bench/mutants.py --list for the names")
    return [known[n] for n in names]


def copy_tree(dest):
    """The working tree as git sees it (tracked + untracked, not ignored) into dest."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                         check=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = os.path.join(REPO, rel)
        if not os.path.isfile(src):  # deleted but still tracked
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel), follow_symlinks=False)


def run_tests(copy, tests):
    """(passed, first failing test id or a reason) for pytest -x on `tests` in the copy."""
    env = dict(os.environ, GPTLAB_SHARED_DATA=SHARED_DATA, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *tests]
    try:
        proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TIMEOUT_S} s"
    if proc.returncode in (0, 5):  # 5: no test matched the selection (nothing to fail)
        return True, None
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    return False, failed[0] if failed else (proc.stdout + proc.stderr).strip().splitlines()[-1:]


def split_selections(tests):
    """A mutant's pytest arguments as separate runs: each file (or node id) with the -k that follows it."""
    runs, i = [], 0
    while i < len(tests):
        if i + 2 < len(tests) and tests[i + 1] == "-k":
            runs.append(tuple(tests[i:i + 3]))
            i += 3
        else:
            runs.append((tests[i],))
            i += 1
    return runs


def main(argv=None):
    p = ArgumentParser(prog="bench/mutants.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these mutants")
    p.add_argument("--keep", action="store_true", help="keep the temporary copy (its path is printed)")
    args = p.parse_args(argv)
    chosen = mutants_by_name([n for names in args.only for n in names.split(",") if n]) if args.only else MUTANTS
    if args.list:
        for m in chosen:
            print(f"{m.name:42s} {m.path:36s} {' '.join(m.tests)}")
        return 0
    copy = tempfile.mkdtemp(prefix="gptlab-mutants-")
    try:
        copy_tree(copy)
        baseline, results = {}, []
        for m in chosen:
            t0 = time.time()
            target = os.path.join(copy, m.path)
            with open(target) as f:
                source = f.read()
            if source.count(m.original) != 1:
                results.append((m, "STALE", f"the original text occurs {source.count(m.original)} times"))
                print(f"{m.name}: STALE (the original text occurs {source.count(m.original)} times)", flush=True)
                continue
            try:  # a mutant must be a bug, not a syntax error every import would catch
                ast.parse(source.replace(m.original, m.mutated))
            except SyntaxError as err:
                results.append((m, "INVALID", f"the mutated file does not parse ({err.msg})"))
                print(f"{m.name}: INVALID (the mutated file does not parse)", flush=True)
                continue
            selections = split_selections(m.tests)
            for sel in selections:
                if sel not in baseline:
                    baseline[sel] = run_tests(copy, sel)
            broken = [sel for sel in selections if not baseline[sel][0]]
            if broken:
                verdict, detail = "BASELINE FAILS", f"{' '.join(broken[0])}: {baseline[broken[0]][1]}"
            else:
                with open(target, "w") as f:
                    f.write(source.replace(m.original, m.mutated))
                try:
                    verdict, detail = "SURVIVED", ""
                    for sel in selections:
                        passed, failing = run_tests(copy, sel)
                        if not passed:
                            verdict, detail = "killed", failing
                            break
                finally:
                    with open(target, "w") as f:
                        f.write(source)
            results.append((m, verdict, detail))
            print(f"{m.name}: {verdict} {detail or ''} ({time.time() - t0:.0f} s)", flush=True)
        print("\nmutant → verdict (first failing test)")
        for m, verdict, detail in results:
            print(f"  {m.name:42s} {verdict:14s} {detail or ''}")
        killed = sum(v == "killed" for _, v, _ in results)
        print(f"{killed}/{len(results)} killed")
        return 0 if killed == len(results) else 1
    finally:
        if args.keep:
            print(f"copy kept at {copy}")
        else:
            shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_cli(main))
