"""Reporting optimizer steps without waiting for the device, and the ranks' agreement on when to stop.

A step's figures (its summed loss and attention pairs) stay on the device until a report: one all-reduce and one
host read for every step since the last one, then their log lines and metrics rows (modded-nanogpt reads nothing
back between its log lines either). The same all-reduce carries one more row: each rank's stop request (a signal,
gptlab/train/stop.py) and its wall time since the last report. The sum is the same on every rank, so all ranks
stop after the same step, and all derive the same next forced report, about stop.STOP_CHECK_S later.
"""
import dataclasses
import signal
import time

import torch

from gptlab.core import distributed as dist_utils
from gptlab.train import stop


@dataclasses.dataclass
class StepFigures:
    """One optimizer step's figures, left on the device until the next report."""
    step: int             # optimizer steps done after it
    lr: float             # the schedule's multiplier x --lr_scale
    sums: torch.Tensor    # this rank's (summed loss, long-window pairs, short-window pairs), float64 (3,)
    timer: object         # its gptlab.train.run.StepTimer, stopped
    new_pass: int = 0     # the pass over the training data that began in this step (0: none)


def due(every, step):
    """Whether an `every`-step event falls on `step` (every 0 or None: never)."""
    return bool(every) and step % every == 0


class StepReports:
    """The steps not yet reported and the stop agreement (see the module's docstring). `log_step(figures, loss,
    pairs_long, pairs_short)` writes one reported step."""

    def __init__(self, cfg, ctx, stopper, start_step):
        self.cfg, self.ctx, self.stopper = cfg, ctx, stopper
        self.start_step = start_step
        self.unreported = []
        self.agreed_stop = 0  # the signal every rank agreed to stop on at the last report (0: none)
        self.next_check = start_step + 1  # the step whose end forces a report (several ranks)
        self.since = time.monotonic()

    def add(self, figures):
        self.unreported.append(figures)

    def due(self, done):
        """Whether step `done` ends with a report: a log line, the first two steps (a line and the time estimate),
        before a checkpoint or an evaluation, and on several ranks the stop check's cadence."""
        cfg = self.cfg
        return (due(cfg.log_every, done) or done in (cfg.train_steps, self.start_step + 1, self.start_step + 2)
                or due(cfg.checkpoint_every, done) or due(cfg.val_loss_every, done)
                or due(cfg.hellaswag_every, done) or (bool(getattr(cfg, "evals", None)) and due(cfg.evals_every, done))
                or (self.ctx.is_distributed and done >= self.next_check))

    def report(self, read, log_step):
        """One all-reduce and one host read (`read`) for every unreported step, then log_step for each."""
        ctx, now = self.ctx, time.monotonic()
        # a SIGTERM counts more than all ranks' SIGINTs together: the sum says whether any rank got one
        request = {None: 0, signal.SIGINT: 1}.get(self.stopper.requested, ctx.world_size + 1)
        mine = torch.tensor([[request, now - self.since, 0]], dtype=torch.float64, device=ctx.device)
        sums = dist_utils.all_reduce_sum(ctx, torch.cat([torch.stack([f.sums for f in self.unreported]), mine]))
        *rows, (requests, wall_s, _) = read(sums)
        self.agreed_stop = signal.SIGTERM if requests > ctx.world_size else signal.SIGINT if requests else 0
        step_wall_s = wall_s / ctx.world_size / len(self.unreported)
        self.next_check = self.unreported[-1].step + max(1, int(stop.STOP_CHECK_S / max(step_wall_s, 1e-6)))
        self.since = now
        for figures, (loss, pairs_long, pairs_short) in zip(self.unreported, rows):
            log_step(figures, loss, pairs_long, pairs_short)
        self.unreported.clear()

    def stop_signal(self):
        """The signal to stop on after this step: one process its own, ranks the one they agreed on."""
        return self.agreed_stop if self.ctx.is_distributed else self.stopper.requested
