"""A --resume checkpoint continues the training code that made it: train_gpt.py (its optimizers, schedule and loop)
and any other research file the run's code/ backup recorded, not only its model (which the checkpoint carries,
gptlab.checkpoint.model_source). A checkpoint whose run trained other code than this checkout's is refused before any
run folder is made, with the command that resumes it with its own code; a checkpoint whose optimizer states are
not of this code's optimizers (moved out of its run folder, so no backup tells) is refused as not fitting them
(check_optimizer_states).

The architecture modules (model.py, gpt2.py) are not compared here: a resumed run trains the model source its
checkpoint carries."""
import difflib
import hashlib
import os
import tempfile

from gptlab.core.errors import UserError
from gptlab.checkpoint import model_source
from gptlab.train import code_backup
from gptlab.train.records import CHECKPOINT_DIR, CODE_DIR, CONFIG_FILE

CARRIED_BY_CHECKPOINT = tuple(model_source.ARCHITECTURES.values())


def checkpoint_run_dir(resume_path):
    """The run folder a checkpoint was saved in (RUN/checkpoints/step_N.pt, or a file of a sharded step_N/), or None."""
    path = os.path.abspath(resume_path)
    for _ in range(3):
        parent = os.path.dirname(path)
        if os.path.basename(parent) == CHECKPOINT_DIR:
            run = os.path.dirname(parent)
            return run if os.path.isfile(os.path.join(run, CONFIG_FILE)) else None
        path = parent
    return None


def _sha256(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return "missing"


def _changed(old_path, code_dir, rel):
    try:
        with open(old_path, encoding="utf-8", errors="replace") as f:
            old = f.readlines()
    except OSError:
        old = []
    try:  # the run's copy, or (a copy its repository need not hold) its commit's file
        new = code_backup.read_backup_file(code_dir, rel, code_backup.repo_candidates(os.path.dirname(code_dir)))
        new = new.decode("utf-8", errors="replace").splitlines(keepends=True)
    except code_backup.CannotRebuild:
        new = []
    diff = list(difflib.unified_diff(old, new, n=0))
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    return f"+{added} −{removed}"


def check_training_code(resume_path, repo_root=code_backup.PROJECT_ROOT):
    """UserError (one line: which files differ and how to resume with the run's own code) when the run that saved
    the checkpoint recorded research files other than this checkout's; nothing when they are the same or no
    backup tells (a checkpoint outside its run folder, a run without code/)."""
    run = checkpoint_run_dir(resume_path)
    if run is None:
        return
    code_dir = os.path.join(run, CODE_DIR)
    recorded = code_backup.research_code(code_dir) or {}
    differ = [rel for rel, digest in sorted(recorded.items()) if rel not in CARRIED_BY_CHECKPOINT
              and digest != "missing" and digest != _sha256(os.path.join(repo_root, rel))]
    if not differ:
        return
    what = ", ".join(f"{rel} ({_changed(os.path.join(repo_root, rel), code_dir, rel)} from this "
                     "checkout's)" for rel in differ)
    rebuilt = os.path.join(tempfile.gettempdir(), f"gptlab_code_{os.path.basename(run.rstrip(os.sep))}")
    raise UserError(f"--resume checkpoint was made by other training code: {run}/{CODE_DIR}/ records {what}; "
                    f"resume it with its own code: python -m gptlab.train.code_backup {run} {rebuilt} && cd "
                    f"{rebuilt} && python train_gpt.py --resume {os.path.abspath(resume_path)} (or check out the "
                    f"commit in its {CODE_DIR}/git.json with those files)")


# Settings torch's own optimizers fill in when a state dict from another torch version lacks them (__setstate__)
TORCH_FILLED_KEYS = {"foreach", "fused", "capturable", "differentiable", "maximize", "amsgrad",
                     "decoupled_weight_decay"}


def check_optimizer_states(saved, optimizers):
    """ValueError naming the first difference when the saved optimizer states are not of these optimizers: another
    count, other param groups, or settings this code's optimizers read that the checkpoint's lack (an AdamW edit's
    states have no Muon ns_steps): torch's load_state_dict takes them anyway and the first step fails."""
    if len(saved) != len(optimizers):
        raise ValueError(f"it holds {len(saved)} optimizer states for {len(optimizers)} optimizers")
    for i, (state, opt) in enumerate(zip(saved, optimizers)):
        groups = opt.param_groups  # (not state_dict(): a sharded optimizer's needs a collective first)
        saved_groups = state.get("param_groups", []) if isinstance(state, dict) else []
        if len(saved_groups) != len(groups):
            raise ValueError(f"optimizer {i} ({type(opt).__name__}) has {len(saved_groups)} parameter group(s) in "
                             f"the checkpoint, {len(groups)} here (made by other optimizer code)")
        for g, (was, now) in enumerate(zip(saved_groups, groups)):
            missing = sorted(set(now) - set(was) - TORCH_FILLED_KEYS - {"params"})
            if missing:
                raise ValueError(f"optimizer {i} ({type(opt).__name__}) group {g}: the checkpoint's settings lack "
                                 f"{', '.join(missing)} (made by other optimizer code)")
