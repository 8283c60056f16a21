"""A run's scalars in the dashboards people already use: TensorBoard event files in the run folder
(`tensorboard --logdir experiments` shows every run) and Weights & Biases. Both are optional packages, imported
only when their flag is given.

Each metrics.csv row goes out as it is written: every measured column but step, under its column name
(train_loss, val_bpb, lr, tokens_per_s, mfu, hellaswag_acc_norm, --evals' evals_core, evals_<task>_gold_bpb, ...), at
that step.
"""
import os

from gptlab.core.errors import UserError


def check_available(tensorboard=False, wandb_project=None):
    """Before a run starts: a flag whose package is missing is a UserError naming the pip install."""
    if tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401 (optional: needs the tensorboard package)
        except ImportError:
            raise UserError("--tensorboard needs the tensorboard package: pip install tensorboard") from None
    if wandb_project is not None:
        if not wandb_project.strip():
            raise UserError("--wandb needs a project name, e.g. --wandb gptlab")
        try:
            import wandb  # noqa: F401 (optional package)
        except ImportError:
            raise UserError("--wandb needs the wandb package: pip install wandb") from None


class Dashboards:
    """The dashboards of one run (rank 0 only): log(step, row) sends a metrics row to each, close() ends them.

    run_dir: TensorBoard's events and W&B's local files go there. W&B runs online when logged in (`wandb login`),
    else offline (`wandb sync` uploads it later); WANDB_MODE, when set, decides instead."""

    def __init__(self, run_dir, *, tensorboard=False, wandb_project=None, config=None):
        check_available(tensorboard, wandb_project)
        self.tensorboard = self.wandb_run = None
        self.notes = []
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # optional: --tensorboard only

            self.tensorboard = SummaryWriter(log_dir=run_dir, flush_secs=30)
        if wandb_project is not None:
            import wandb  # optional: --wandb only

            logged_in = None if os.environ.get("WANDB_MODE") else _wandb_logged_in(wandb)
            mode = {True: "online", False: "offline", None: None}[logged_in]  # None: WANDB_MODE or wandb decides
            # console="off": the run's own output stays untouched (training_log.txt keeps it)
            self.wandb_run = wandb.init(project=wandb_project, name=os.path.basename(run_dir), dir=run_dir,
                                        config=config, mode=mode, settings=wandb.Settings(console="off"))
            if mode == "offline":
                self.notes.append(f"wandb: not logged in, so the run is logged offline in {run_dir}/wandb; "
                                  "upload it with `wandb sync` (or `wandb login` before the next run)")

    def log(self, step, row):
        scalars = {name: float(value) for name, value in row.items()
                   if name != "step" and value is not None and isinstance(value, (int, float))}
        if self.tensorboard is not None:
            for name, value in scalars.items():
                self.tensorboard.add_scalar(name, value, global_step=step)
        if self.wandb_run is not None:
            self.wandb_run.log(scalars, step=step)

    def close(self):
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
        self.tensorboard = self.wandb_run = None


def _wandb_logged_in(wandb):
    try:  # credentials checked locally, without prompting or the network
        return bool(wandb.login(prompt=False, verify=False))
    except TypeError:  # a wandb without these arguments: let it decide
        return None
