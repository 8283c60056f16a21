"""Optimizer and schedule edits travel like model edits (issue 39): a checkpoint made by an AdamW edit of
train_gpt.py, resumed in a checkout with today's train_gpt.py, is refused before any run folder with one line that
names the file and how to resume it with its own code (the command it prints then resumes it, as the run would
have gone on); moved out of its run folder (no code backup tells), its optimizer states are refused as not of
this code's optimizers (it was `KeyError: 'ns_steps'` and a traceback after a run folder)."""
import glob
import os
import shlex
import shutil

import pytest

from conftest import SHARED_DATA, run_script
from test_model_edits import copy_repository, losses, train

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")

MUON = "    muon = Muon(hidden_matrices, lr=0.05, momentum=0.95, rank=rank, world_size=world_size)\n"
ADAMW = "    muon = torch.optim.AdamW(hidden_matrices, lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)\n"


@pytest.fixture(scope="module")
def adamw_run(tiny, tmp_path_factory):
    """(run folder, step-3 checkpoint) of 6 steps of the AdamW edit, in a repository of its own."""
    root = tmp_path_factory.mktemp("adamw")
    repo = copy_repository(str(root / "repo"))
    path = os.path.join(repo, "train_gpt.py")
    with open(path) as f:
        text = f.read()
    assert text.count(MUON) == 1
    with open(path, "w") as f:
        f.write(text.replace(MUON, ADAMW))
    ckpts = train(repo, tiny, root / "exps", steps=6, extra=["--checkpoint_every", "3"])
    return os.path.dirname(os.path.dirname(ckpts[0])), ckpts[0]


def test_a_checkpoint_of_other_training_code_is_refused_in_one_line_then_resumes_with_its_own(adamw_run, tmp_path):
    run_dir, ckpt = adamw_run
    repo = copy_repository(str(tmp_path / "repo"))  # today's train_gpt.py (Muon)
    out = tmp_path / "resumed"
    proc = run_script(["train_gpt.py", "--resume", ckpt, "--experiments_dir", str(out)], cwd=repo,
                      env_extra={"TMPDIR": str(tmp_path)})  # where the line says to rebuild the run's code
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --resume checkpoint was made by other training code") and "train_gpt.py" in line
    assert "(+1 −1 from this checkout's)" in line  # the one line the edit changed
    assert not os.path.exists(out)  # no run folder
    # the command the line gives resumes it with its own code: steps 4-6 as the uninterrupted run had them
    command = line.split("resume it with its own code: ")[1].split(" (or check out")[0]
    rebuild, resume = command.split(" && cd ")
    run_script(shlex.split(rebuild)[1:], cwd=repo, check=True)
    folder, resume_cmd = resume.split(" && ")
    run_script(shlex.split(resume_cmd)[1:] + ["--experiments_dir", str(out)], cwd=folder, check=True)
    (resumed_dir,) = glob.glob(str(out / "*"))
    full, resumed = losses(run_dir), losses(resumed_dir)
    assert sorted(resumed) == [4, 5, 6]
    assert all(abs(resumed[s] - full[s]) <= 1e-6 * abs(full[s]) for s in resumed), (resumed, full)


def test_its_optimizer_states_outside_its_run_folder_are_refused_not_a_key_error(adamw_run, tmp_path):
    _, ckpt = adamw_run
    moved = str(tmp_path / "step_3.pt")
    shutil.copy(ckpt, moved)  # no run folder around it: nothing tells which code made it but its states
    repo = copy_repository(str(tmp_path / "repo"))
    out = tmp_path / "resumed"
    proc = run_script(["train_gpt.py", "--resume", moved, "--experiments_dir", str(out)], cwd=repo)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --resume checkpoint does not fit this model and optimizers") and "ns_steps" in line
    assert not os.path.exists(out)
