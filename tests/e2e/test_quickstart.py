"""The README's first command, end to end: quickstart.sh in a copy of the repository (short run), then the three
commands its closing lines print, run as printed on the run's checkpoint."""
import csv
import importlib.util
import itertools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import REPO


def test_quickstart_runs_the_whole_pipeline(tmp_path):
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    copy = tmp_path / "repo"
    for rel in tracked:
        if not os.path.exists(os.path.join(REPO, rel)):
            continue
        dest = copy / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(REPO, rel), dest)
    env = dict(os.environ, STEPS="6", HELLASWAG_LIMIT="20", OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(["bash", "quickstart.sh"], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    committed = {rel.split("/")[1] for rel in tracked if rel.startswith("experiments/2")}
    runs = sorted(p for p in (copy / "experiments").iterdir() if p.is_dir() and p.name not in committed)
    assert len(runs) == 1 and runs[0].name.endswith("_Quickstart")
    assert f"This run: experiments/{runs[0].name}" in proc.stdout  # not a committed baseline's folder
    for name in committed:  # the committed baselines' files are left alone
        for rel in ("compare.png", "results.json"):
            if (copy / "experiments" / name / rel).exists():
                assert (copy / "experiments" / name / rel).read_bytes() == \
                    open(os.path.join(REPO, "experiments", name, rel), "rb").read()
    results = json.loads((runs[0] / "results.json").read_text())
    assert results["status"] == "finished" and results["steps"] == 6
    assert results["hellaswag"]["n"] == 20
    # The untrained model is known by hand: its zero-initialised head gives uniform logits over the 1024 padded
    # ids, val loss ln 1024, which on this validation set is the committed baselines' step-0 val bpb, 3.9362.
    # Six steps must bring val bpb well below that.
    with open(runs[0] / "metrics.csv") as f:
        evals = [row for row in csv.DictReader(f) if row["val_bpb"]]
    assert [int(row["step"]) for row in evals] == [0, 6]
    assert float(evals[0]["val_loss"]) == pytest.approx(math.log(1024), abs=1e-6)
    assert float(evals[0]["val_bpb"]) == pytest.approx(3.9362, abs=1e-4)
    assert results["final_val_bpb"] == pytest.approx(float(evals[1]["val_bpb"]), abs=1e-6)
    assert results["final_val_bpb"] < 3.9362 - 0.5  # 3.10 on the 2-core CI machine
    assert (runs[0] / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert runs[0].name in (copy / "experiments" / "LEADERBOARD.md").read_text()
    assert "Done. This run: experiments/" in proc.stdout
    first_export = _check_sample_and_export(proc.stdout, copy, env, runs[0], results)
    # a second run reuses the tokenizer, shards and HellaSwag file instead of failing or rewriting them (its
    # training is not what is checked here: one step, no HellaSwag); lm_eval on the first run's export runs beside
    # it (it reads hf/ and data/hellaswag/, which the second run leaves alone)
    with ThreadPoolExecutor(2) as pool:
        lm_eval_checked = pool.submit(_check_lm_eval, proc.stdout, copy, env)
        again = subprocess.run(["bash", "quickstart.sh"], cwd=copy, env=dict(env, STEPS="1", HELLASWAG_LIMIT="0"),
                               capture_output=True, text=True, timeout=600)
        lm_eval_checked.result()
    assert again.returncode == 0, again.stderr[-3000:]
    assert "is already there" in again.stdout and "nothing to do" in again.stderr
    # its export line names a folder of its own, so it works as printed although the first run's folder exists
    second_export = _next_commands(again.stdout)[1][-1]
    assert second_export != first_export and not (copy / second_export).exists()


def _next_commands(stdout):
    """The commands under the closing "Next, on this run's model:" line, split as a shell would."""
    lines = stdout.splitlines()
    start = lines.index("Next, on this run's model:") + 1
    return [shlex.split(line) for line in itertools.takewhile(lambda l: l.startswith("  "), lines[start:])]


def _check_sample_and_export(stdout, copy, env, run, results):
    """sample.py and export_hf.py, each run as printed in the copy, side by side; returns the export folder."""
    sample, export, _ = _next_commands(stdout)
    # the checkpoint of the run's last step (train_gpt.py names it step_NNNNNN.pt), recorded in its results.json
    checkpoint = f"experiments/{run.name}/checkpoints/step_000006.pt"
    assert results["checkpoint"] == checkpoint and (copy / checkpoint).is_file()
    assert sample[:3] == ["python", "sample.py", checkpoint] and export[:3] == ["python", "export_hf.py", checkpoint]

    out_dir = export[3]
    assert out_dir == f"hf/{run.name}" and not (copy / out_dir).exists()
    with ThreadPoolExecutor(2) as pool:
        proc, exported = pool.map(lambda cmd: subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True,
                                                             timeout=300), (sample, export))
    assert proc.returncode == 0, proc.stderr[-3000:]
    prompt = sample[sample.index("--prompt") + 1]
    assert proc.stdout.startswith(prompt) and len(proc.stdout.strip()) > len(prompt)  # the prompt, then new text
    assert re.search(r"\[\d+ tokens in ", proc.stderr)

    assert exported.returncode == 0, exported.stderr[-3000:]
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (copy / out_dir / name).stat().st_size > 0, name
    assert json.loads((copy / out_dir / "config.json").read_text())["vocab_size"] >= 1001  # 1000 merges + EOT
    return out_dir


def _check_lm_eval(stdout, copy, env):
    """lm_eval, run as printed in the copy on the export of _check_sample_and_export (when it is installed)."""
    _, export, lm_eval = _next_commands(stdout)
    out_dir = export[3]
    assert lm_eval[0] == "lm_eval" and f"pretrained={out_dir}," in lm_eval[lm_eval.index("--model_args") + 1]
    assert lm_eval[lm_eval.index("--limit") + 1] == "20"  # the run's HELLASWAG_LIMIT: the same examples
    task_dir = copy / lm_eval[lm_eval.index("--include_path") + 1]
    assert (task_dir / "hellaswag_local.yaml").is_file() and (copy / "data/hellaswag/hellaswag_val.jsonl").is_file()
    assert "lm_eval and accelerate come with requirements.txt" in stdout  # the printed lm_eval line needs them
    if not (importlib.util.find_spec("lm_eval") and importlib.util.find_spec("accelerate")):
        return  # not in requirements.txt; tests/unit/test_lm_eval_task.py checks the task's files
    proc = subprocess.run(lm_eval, cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # |hellaswag_local|      1|none  |     0|acc     |↑  | 0.25|±  |0.0693| then the acc_norm row
    scores = dict(re.findall(r"\|(acc|acc_norm) *\|[^|]*\| *([0-9.]+)\|", proc.stdout))
    assert "hellaswag_local" in proc.stdout and set(scores) == {"acc", "acc_norm"}, proc.stdout[-3000:]
    for value in scores.values():  # a fraction of the 20 examples (printed to 4 decimals)
        assert float(value) * 20 == pytest.approx(round(float(value) * 20), abs=0.01)


# A stand-in `python` for quickstart.sh: it logs each command line and answers the two `python -c` reads (GPUs: 0;
# results.json's checkpoint), so the script's commands are checked without training anything.
PYTHON_STANDIN = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/commands.log"
case "$1 $2" in
  "-c import torch"*) echo 0 ;;
  -c*) echo experiments/run/checkpoints/step_000120.pt ;;
  train_gpt.py*) echo "run folder: experiments/run" ;;
esac
"""


def _quickstart_commands(tmp_path, **env_extra):
    """(exit status, stderr, the python command lines) of quickstart.sh alone in a folder, `python` a stand-in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").write_text(PYTHON_STANDIN)
    (bin_dir / "python").chmod(0o755)
    (bin_dir / "commands.log").write_text("")
    shutil.copy2(os.path.join(REPO, "quickstart.sh"), tmp_path / "quickstart.sh")
    env = dict(os.environ, PATH=str(bin_dir) + os.pathsep + os.environ["PATH"], **env_extra)
    for name in ("ARCH", "SEED", "STEPS", "HELLASWAG_LIMIT"):
        if name not in env_extra:
            env.pop(name, None)
    proc = subprocess.run(["bash", "quickstart.sh"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    return proc.returncode, proc.stderr, (bin_dir / "commands.log").read_text().splitlines()


def test_quickstart_arch_picks_each_architectures_recipe(tmp_path):
    """ARCH=gpt2 / llama train the quickstart's budget on gpt2.py / llama.py; no ARCH (or ARCH=modded) runs the
    command quickstart.sh ran before ARCH existed, word for word (the committed modded baselines' seed group)."""
    budget = "--tokenizer quickstart_v1000_n400000.pkl --train_steps 120 --hellaswag_limit 1000 --seed 0 --save_model"
    before = f"train_gpt.py --preset quickstart --model_name Quickstart {budget}"
    for env in ({}, {"ARCH": "modded"}):
        status, err, commands = _quickstart_commands(tmp_path, **env)
        assert status == 0, err
        assert [c for c in commands if c.startswith("train_gpt.py")] == [before]
    status, err, commands = _quickstart_commands(tmp_path, ARCH="llama", SEED="2")
    assert status == 0, err
    assert [c for c in commands if c.startswith("train_gpt.py")] == \
        ["train_gpt.py --preset llama-quickstart --model_name Quickstart-Llama " + budget.replace("seed 0", "seed 2")]
    # GPT-2 takes the quickstart's shape with llama-quickstart's warm-up and cosine (the AdamW default's 700
    # warm-up steps would outlast the 120 steps) at 1e-3
    status, err, commands = _quickstart_commands(tmp_path, ARCH="gpt2")
    assert status == 0, err
    assert [c for c in commands if c.startswith("train_gpt.py")] == \
        ["train_gpt.py --preset quickstart --arch gpt2 --lr 1e-3 --warmup_steps 12 --final_lr_frac 0.1 "
         f"--model_name Quickstart-GPT2 {budget}"]


def test_quickstart_refuses_an_unknown_arch(tmp_path):
    """ARCH=gpt3: one error line naming the choices, exit 2, before any step runs."""
    status, err, commands = _quickstart_commands(tmp_path, ARCH="gpt3")
    assert status == 2 and commands == []
    assert err.splitlines() == [err.strip()] and err.startswith("error: ARCH=gpt3 ")
    assert all(name in err for name in ("modded", "gpt2", "llama"))
