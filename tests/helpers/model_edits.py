"""An architecture experiment in a copy of the repository (tests/e2e/test_model_edits.py): the copy, a researcher's
edit of each architecture module, and what sample.py, the evaluations and export_hf.py make of a checkpoint there."""
import json
import os
import shutil
import subprocess

from conftest import HELLASWAG_VAL, REPO, run_scripts


# a new weight in every block of gpt2.py / llama.py (a gate on the MLP's output), as (old text, new text)
GATE_EDITS = {
    "gpt2.py": [("        self.mlp = MLP(c)\n",
                 "        self.mlp = MLP(c)\n        self.gate = nn.Parameter(torch.ones(c.model_dim))\n"),
                ("        return x + self.mlp(self.ln_2(x))\n",
                 "        return x + self.gate * self.mlp(self.ln_2(x))\n")],
    "llama.py": [("        self.mlp = MLP(c)\n",
                  "        self.mlp = MLP(c)\n        self.gate = nn.Parameter(torch.ones(c.model_dim))\n"),
                 ("        return x + self.mlp(self.mlp_norm(x))\n",
                  "        return x + self.gate * self.mlp(self.mlp_norm(x))\n")],
}


def gated(code, file):
    """`file`'s code (gpt2.py or llama.py) with a new weight in every block: a researcher's edit."""
    for old, new in GATE_EDITS[file]:
        assert code.count(old) == 1, old
        code = code.replace(old, new)
    return code


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
