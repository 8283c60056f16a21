"""An architecture experiment in a copy of the repository (tests/e2e/test_model_edits.py for model.py,
tests/e2e/test_arch_gpt2_e2e.py for gpt2.py): the copy, and what sample.py, the evaluations and export_hf.py make of
a checkpoint there."""
import json
import os
import shutil
import subprocess

from conftest import HELLASWAG_VAL, REPO, run_scripts


def copy_repository(dest):
    """The checkout's files (tracked and untracked-not-ignored, without experiments/) in a fresh git repository."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for rel in files:
        if rel and not rel.startswith("experiments/") and os.path.isfile(os.path.join(REPO, rel)):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(os.path.join(REPO, rel), os.path.join(dest, rel))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(git + ["init", "-q"], cwd=dest, check=True)
    subprocess.run(git + ["add", "-A"], cwd=dest, check=True)
    subprocess.run(git + ["commit", "-qm", "copy"], cwd=dest, check=True)
    return dest


def sample_texts(repo, ckpt, env_extra=None, extra=()):
    """(greedy text, seeded sampled text) of sample.py in repo, or the first failed CompletedProcess."""
    procs = run_scripts([["sample.py", ckpt, "--prompt", "The", "--max_tokens", "40", *flags, *extra]
                         for flags in (["--temperature", "0"], ["--temperature", "1", "--seed", "3"])],
                        cwd=repo, env_extra=env_extra)
    failed = [proc for proc in procs if proc.returncode]
    return failed[0] if failed else tuple(proc.stdout for proc in procs)


def evaluate_and_export(repo, ckpt, out, hf_dir):
    """python -m gptlab.evals.checkpoint's figures (val loss and bpb on the run's validation set, HellaSwag), and
    the CompletedProcess of export_hf.py into hf_dir, run side by side."""
    ev, export = run_scripts([["-m", "gptlab.evals.checkpoint", ckpt, "--hellaswag_path", HELLASWAG_VAL,
                               "--hellaswag_limit", "6", "--json", str(out)],
                              ["export_hf.py", ckpt, str(hf_dir)]], cwd=repo)
    assert ev.returncode == 0, ev.stderr[-3000:]
    with open(out) as f:
        figures = json.load(f)
    figures.pop("checkpoint")
    return figures, export


def gate_every_block(code, returned):
    """An architecture module's code with a new weight in every block (a gate on the MLP's output): a researcher's
    edit. `returned`: the block's last line, `return x + self.mlp(...)`."""
    for old, new in (("        self.mlp = MLP(c)\n",
                      "        self.mlp = MLP(c)\n        self.gate = nn.Parameter(torch.ones(c.model_dim))\n"),
                     (returned, returned.replace("x + self.mlp", "x + self.gate * self.mlp"))):
        assert code.count(old) == 1, old
        code = code.replace(old, new)
    return code


def edit_flows_through_every_tool(tmp_path, file, edit, train_args):
    """test_model_edits.py's experiment on an architecture module `file` in a copy of the repository: edit(code)
    trains (train_args(experiments folder): train_gpt.py's flags, with --save_model and HellaSwag), samples,
    evaluates and exports (with its own code: no longer the standard transformers model); with the file put back,
    the checkpoint gives the same texts and figures."""
    import glob

    import pytest

    from conftest import run_script
    from gptlab.train import checkpointing, records
    from helpers.tiny_runs import only_run_dir, run_json

    repo = copy_repository(str(tmp_path / "repo"))
    path = os.path.join(repo, file)
    with open(path, encoding="utf-8") as f:
        original = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(edit(original))
    run_script(["train_gpt.py"] + train_args(tmp_path / "exps"), cwd=repo, check=True)
    run_dir = only_run_dir(tmp_path / "exps")
    ckpt = sorted(glob.glob(os.path.join(run_dir, records.CHECKPOINT_DIR, "step_*.pt")))[-1]
    saved = checkpointing.load_checkpoint(ckpt)
    assert saved["model_source"]["code"] == edit(original) and "blocks.0.gate" in saved["model"]
    with open(os.path.join(run_dir, records.CODE_DIR, file), encoding="utf-8") as f:
        assert f.read() == edit(original)
    results = run_json(run_dir, records.RESULTS_FILE)
    figures = []
    for when in ("before", "after"):
        if when == "after":
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)  # the researcher goes back
        texts = sample_texts(repo, ckpt)
        assert isinstance(texts, tuple), texts.stderr
        evaluated, export = evaluate_and_export(repo, ckpt, tmp_path / f"eval_{when}.json", tmp_path / f"hf_{when}")
        assert export.returncode == 0 and "tokenizer identical" in export.stdout, export.stderr[-3000:]
        assert "note: not exported as a standard transformers model" in export.stderr
        figures.append((texts, evaluated))
    assert figures[0] == figures[1]
    assert figures[0][1]["val_bpb"] == pytest.approx(results["final_val_bpb"], rel=1e-9)
    assert figures[0][1]["hellaswag"]["acc_norm"] == results["hellaswag"]["acc_norm"]
