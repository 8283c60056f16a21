"""gptlab.train.resume_code: which --resume checkpoints this checkout's training code may continue (issue 39)."""
import os

import pytest
import torch

from gptlab.core.errors import UserError
from gptlab.train import resume_code
from gptlab.train.records import CHECKPOINT_DIR, CODE_DIR, CONFIG_FILE


class NoNewtonSchulz(torch.optim.Optimizer):  # a Muon-like optimizer whose step reads group["ns_steps"]
    def __init__(self, params):
        super().__init__(params, dict(lr=0.05, momentum=0.95, ns_steps=5))


def _params():
    return [torch.nn.Parameter(torch.zeros(2, 2))]


def test_optimizer_states_of_other_optimizer_code_are_named():
    adamw = torch.optim.AdamW(_params(), lr=0.01)
    with pytest.raises(ValueError, match="lack momentum, ns_steps"):
        resume_code.check_optimizer_states([adamw.state_dict()], [NoNewtonSchulz(_params())])
    with pytest.raises(ValueError, match="1 optimizer states for 2 optimizers"):
        resume_code.check_optimizer_states([adamw.state_dict()], [adamw, adamw])
    two_groups = torch.optim.Adam([{"params": _params()}, {"params": _params()}])
    with pytest.raises(ValueError, match="2 parameter group"):
        resume_code.check_optimizer_states([two_groups.state_dict()], [torch.optim.Adam(_params())])


def test_the_same_optimizer_from_another_torch_version_or_with_a_schedule_fits():
    adam = torch.optim.Adam(_params(), lr=0.01)
    older = adam.state_dict()
    older["param_groups"] = [{k: v for k, v in g.items() if k not in ("decoupled_weight_decay", "foreach", "fused")}
                             | {"initial_lr": 0.01} for g in older["param_groups"]]  # torch fills those in
    resume_code.check_optimizer_states([older], [torch.optim.Adam(_params(), lr=0.01)])
    muon = NoNewtonSchulz(_params())
    resume_code.check_optimizer_states([muon.state_dict()], [NoNewtonSchulz(_params())])


def _run_with_code(root, files):
    run = os.path.join(root, "20260101_000000_R")
    os.makedirs(os.path.join(run, CODE_DIR))
    os.makedirs(os.path.join(run, CHECKPOINT_DIR))
    open(os.path.join(run, CONFIG_FILE), "w").write("{}")
    for rel, text in files.items():
        with open(os.path.join(run, CODE_DIR, rel), "w") as f:
            f.write(text)
    return os.path.join(run, CHECKPOINT_DIR, "step_000003.pt")


def test_a_checkpoint_whose_run_trained_other_code_is_refused_only_then(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train_gpt.py").write_text("LR = 1\n")
    (repo / "model.py").write_text("class GPT: pass\n")
    same = _run_with_code(str(tmp_path / "a"), {"train_gpt.py": "LR = 1\n", "model.py": "class Other: pass\n"})
    resume_code.check_training_code(same, str(repo))  # model.py travels in the checkpoint: not compared
    other = _run_with_code(str(tmp_path / "b"), {"train_gpt.py": "LR = 2\nWARMUP = 3\n", "model.py": "x\n"})
    # the run's file has 2 lines where this checkout's 1: +2 −1 by hand
    with pytest.raises(UserError, match=r"train_gpt.py \(\+2 −1 from this checkout's\).*code_backup") as err:
        resume_code.check_training_code(other, str(repo))
    assert "model.py" not in str(err.value) and "\n" not in str(err.value)
    resume_code.check_training_code(str(tmp_path / "loose.pt"), str(repo))  # no run folder: nothing tells
