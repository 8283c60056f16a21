"""A training run's life, from its first log line to results.json: the one object train_gpt.py talks to.

    args, ckpt = parse_flags(build_parser, argv, fresh_on_resume=(...))  # --resume PATH brings the run's flags
    with Run(cfg, ctx, model=..., optimizers=..., train_loader=..., tokenizer=..., ...) as run:
        with run.evaluating(model): ...                  # model.eval(), progress bar out of the way
        run.log_eval(step, val_loss=..., val_bpb=...)    # and run.log_hellaswag(step, figures)
        run.log_step(step, train_loss, lr, step_time_s, flops)  # per step, read in batches: run.read(...)
        run.save_checkpoint(step, model, optimizers, train_loader)
        run.finish(val_loss, val_bpb, hellaswag)         # results.json, status "finished"

Leaving the block by an exception records the run as "failed" (with the message) or "interrupted" (Ctrl-C, naming
the checkpoint to resume from). Every rank makes the same calls; only rank 0 writes. The folder's layout and file
formats belong to gptlab.train.records.
"""
import contextlib
import errno
import json
import math
import os
import shlex
import signal
import sys
import time

import torch
from tqdm import tqdm

from gptlab.checkpoint import checkpointing, sharded_checkpoint
from gptlab.checkpoint.model_source import source_file
from gptlab.core.distributed import broadcast_object
from gptlab.core.errors import StopRequested, UserError, one_line, signal_name
from gptlab.core.progress import progress_bar
from gptlab.dataset.hellaswag_file import DEFAULT_PATH as HELLASWAG_DEFAULT_PATH
from gptlab.dataset.evals_download import DATA_DIR as EVALS_DATA_DIR
from gptlab.train import code_backup, cost, dashboards, environment, fsdp, records, resume_code, stop
from gptlab.train.step_reports import StepFigures, StepReports, due


_IMPLEMENTATION_KEYS = ("foreach", "fused", "capturable", "differentiable")


def restore_training_state(ckpt, model, optimizers, train_loader, ctx=None, allow_new_data=False):
    """Put a --resume checkpoint's weights, optimizer states, data position and random generators back; a
    checkpoint that lacks a part or does not fit the model is one UserError. A sharded checkpoint (a folder) or a
    sharded model (--shard_params) goes through gptlab.checkpoint.sharded_checkpoint (collective then: pass ctx)."""
    try:
        resume_code.check_optimizer_states(ckpt["optimizers"], optimizers)  # other optimizer code: no KeyError later
        # how an optimizer runs (fused on a GPU, foreach on a CPU) belongs to this machine, not the checkpoint
        here = [[{k: g[k] for k in _IMPLEMENTATION_KEYS if k in g} for g in opt.param_groups] for opt in optimizers]
        if "sharded_path" in ckpt or fsdp.is_sharded_model(model):
            sharded_checkpoint.restore(ckpt, model, optimizers, ctx)
        else:
            model.load_state_dict(ckpt["model"])
            for opt, state in zip(optimizers, ckpt["optimizers"]):
                opt.load_state_dict(state)
        for opt, keys_of_groups in zip(optimizers, here):
            for group, keys in zip(opt.param_groups, keys_of_groups):
                group.update(keys)
        note = train_loader.load_state_dict(ckpt["dataloader"], new_data=allow_new_data)
        if note and (ctx is None or ctx.is_main):
            print(note, flush=True)
        checkpointing.set_rng_states(ckpt["rng"])
    except KeyError as err:
        raise UserError(f"--resume checkpoint has no {err} entry (an incomplete checkpoint); resume from another "
                        "checkpoint of the run") from None
    except (RuntimeError, ValueError, TypeError) as err:  # torch's size-mismatch report spans many lines
        problems = one_line(err)
        raise UserError(f"--resume checkpoint does not fit this model and optimizers ({problems}); resume from a "
                        "checkpoint of the same configuration") from None


# ------------------------------------------------------------------------------------------------ host reads
# Every read of device values by the training loop goes through read_to_host or StepTimer.seconds, and is counted
# here: a read makes the host wait for the GPU, so the loop does them only when it reports (a test pins that).
HOST_READS = {"count": 0}


def read_to_host(tensor):
    """tensor.tolist(), counted in HOST_READS."""
    HOST_READS["count"] += 1
    return tensor.tolist()


class StepTimer:
    """A step's time: CUDA events on a GPU (read only when the step is reported, so the step itself never waits
    for the GPU), time.perf_counter elsewhere (CPU work is done when the call returns)."""

    def __init__(self, device):
        self.events = None
        if device.type == "cuda":
            self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self.events[0].record()
        self.start, self.end = time.perf_counter(), None

    def stop(self):
        if self.events:
            self.events[1].record()
        self.end = time.perf_counter()

    def seconds(self):
        if not self.events:
            return self.end - self.start
        HOST_READS["count"] += 1
        self.events[1].synchronize()
        return self.events[0].elapsed_time(self.events[1]) / 1000


# ------------------------------------------------------------------------------------------------ the run
class TrainingDiverged(Exception):
    """The loss became NaN or infinite, or stayed above a uniform guess's (Run.check_loss)."""


DIVERGED_MARGIN_NATS = 1.0
DIVERGED_AFTER_STEPS = 10
DIVERGED_PATIENCE = 5


class Run:
    """One training run: experiments/{YYYYmmdd_HHMMSS}_{model_name}/ and everything written into it.

    cfg: the resolved flags (recorded whole in config.json and in every checkpoint); model_config: the model's
    config fields (a checkpoint rebuilds it from them); model_source: the model.py it trains ({file, code, sha256};
    every checkpoint carries it); extra_config: more facts for config.json;
    checkpoint: the --resume checkpoint (its step, train time and wall time carry on); warnings: lines printed
    now and logged once the folder exists; resume_flags: command-line words the resume command repeats
    (chosen_flags); metrics_columns: the --evals suite's metrics.csv columns (gptlab.evals.in_run.metrics_columns);
    flops_of: a step's model FLOPs from its attention pairs ({"long": n, "short": n} → summands), for TFLOP/s and
    MFU. The model, optimizers and loader are what its checkpoints save."""

    def __init__(self, cfg, ctx, *, repo_root, model, model_config, optimizers, train_loader, tokenizer, shards,
                 model_source=None, checkpoint=None, warnings=(), extra_config=None, resume_flags=(),
                 metrics_columns=(), flops_of=None):
        self.cfg, self.ctx = cfg, ctx
        self._model, self._optimizers, self._train_loader = model, optimizers, train_loader
        self._flops_of = flops_of or (lambda pairs: [0.0])
        self.metrics_columns = list(metrics_columns)  # metrics.csv's columns beyond METRICS_COLUMNS (--evals)
        self.model_config, self.tokenizer, self.shards = model_config, tokenizer, shards
        self.model_source = model_source
        self.repo_root, self.extra_config = repo_root, dict(extra_config or {})
        self.n_params = sum(p.numel() for p in model.parameters())
        self.n_params_embeddings = sum(p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding)
                                       for p in m.parameters())
        self.lr_description = ", ".join(f"{type(opt).__name__} {g.get('name', 'matrices')} {g['initial_lr']}"
                                        for opt in optimizers for g in opt.param_groups)
        self.train_tokens = sum(train_loader.counts)
        extra = checkpoint["extra"] if checkpoint else {}
        self.start_step = self.step = checkpoint["step"] if checkpoint else 0  # step: optimizer steps done
        self.train_time_s = float(extra.get("elapsed_s", 0.0))  # optimizer steps only (evaluations excluded)
        self.train_flops = float(extra.get("train_flops", 0.0))  # every step's model FLOPs (scaling fits)
        self._wall_before = float(extra.get("wall_time_s", 0.0))  # everything, evaluations included
        # a resume at the last step only evaluates: its checkpoint stays the run's final one
        self.last_checkpoint = (os.path.abspath(cfg.resume) if checkpoint and self.start_step >= cfg.train_steps
                                else None)
        self.resume_flags = list(resume_flags)
        self.final = {}  # the final evaluations' figures as they come (recorded even if the run stops before the end)
        self.warnings = [w for w in warnings if w]
        self.dir = self._log_file = self._metrics = self._bar = None
        self._speed_flops = self._speed_time = 0.0  # over the steps after this process's first (MFU in results)
        self._memory = None
        self._finished = False
        self._above_ceiling = 0  # steps in a row with a loss above a uniform guess's (check_loss)
        self._dashboards = None
        self._stopper = stop.installed()  # main's signal handlers (a fresh, uninstalled one without main)
        self._reports = StepReports(cfg, ctx, self._stopper, self.start_step)
        self._epoch = getattr(train_loader, "epoch", 0)  # the loader's data pass at the last step (a new one is logged)
        self._dashboard_flags = {"tensorboard": getattr(cfg, "tensorboard", None),
                                 "wandb_project": getattr(cfg, "wandb", None)}
        if ctx.is_main:
            dashboards.check_available(**self._dashboard_flags)
            for warning in self.warnings:
                print(warning, file=sys.stderr, flush=True)

    # ---- lifecycle
    def __enter__(self):
        if self.ctx.is_main:
            self.dir = records.create_run_dir(self.cfg.experiments_dir, self.cfg.model_name)
            self._log_file = records.RunLog(os.path.join(self.dir, records.LOG_FILE))
            self._metrics = records.MetricsWriter(os.path.join(self.dir, records.METRICS_FILE),
                                                  self.metrics_columns)
        self.dir = broadcast_object(self.ctx, self.dir)
        try:
            self._start()
        except BaseException as err:
            self.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def _start(self):
        cfg, ctx = self.cfg, self.ctx
        hw = self.hardware = environment.hardware_info(ctx.device)
        versions = environment.versions()
        tok = self.tokenizer
        self.price, price_source = cost.usd_per_gpu_hour(hw["gpu_name"], getattr(cfg, "usd_per_gpu_hour", None))
        self.config = {
            **vars(cfg), "world_size": ctx.world_size, "device": str(ctx.device),
            "gpu_name": hw["gpu_name"], "gpu_count": hw["gpu_count"], "cpu_model": hw["cpu_model"],
            "gpu_bf16_peak_tflops": hw["gpu_bf16_peak_tflops"], "usd_per_gpu_hour": self.price,
            "usd_per_gpu_hour_source": price_source,
            "n_params": self.n_params, "n_params_embeddings": self.n_params_embeddings, **self.extra_config,
            **environment.set_cpu_threads(ctx.device),  # threads per local rank, the load the timings saw
            "model_source_sha256": (self.model_source or {}).get("sha256"),
            "tokenizer_name": tok.name, "tokenizer_path": tok.path, "tokenizer_ranks_sha256": tok.ranks_sha256,
            "tokenizer_n_vocab": tok.encoding.n_vocab, "eot_id": tok.eot, "train_shards": self.shards.train_paths,
            "val_shards": self.shards.val_paths, "command": environment.command_line(), "git_commit": environment.git_commit(
                self.repo_root), "versions": versions, "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "resumed_from": cfg.resume, "resume_step": self.start_step,
            "lr_column": "metrics.csv lr = schedule multiplier x --lr_scale; base learning rates: "
                         + self.lr_description,
            "timing": "metrics elapsed_s and results train_time_s count optimizer steps only (the first "
                      "compiled step includes compilation); results wall_time_s is the whole run incl. "
                      "evaluations"}
        if ctx.is_main:
            records.write_config(self.dir, self.config)
            backup = code_backup.backup_code(self.repo_root, self.dir, tok.train_script, research_texts={
                source_file(self.model_source): self.model_source["code"]} if self.model_source else None)
            log = self._log_file
            log(f"command: {self.config['command']}")
            for warning in self.warnings:
                log(warning)
            if cfg.from_checkpoint:
                self.log(f"resuming {cfg.resume} at step {self.start_step} with its settings: " + ", ".join(
                    f"--{k} {getattr(cfg, k)}" for k in cfg.from_checkpoint))
            log(f"run folder: {self.dir}")
            log(code_backup.describe_backup(backup))
            log("config: " + json.dumps(self.config, indent=2, default=str))
            log(f"versions: {json.dumps(versions)}")
            log(f"hardware: cpu {hw['cpu_model']} x{hw['cpu_count']}; gpu {hw['gpu_name']} x{hw['gpu_count']}")
            if hw["nvidia_smi"]:
                log("nvidia-smi:\n" + hw["nvidia_smi"])
            log(f"parameters: {self.n_params:,} total, {self.n_params_embeddings:,} in embeddings (incl. value "
                f"embeddings), {self.n_params - self.n_params_embeddings:,} non-embedding")
            log(f"world_size {ctx.world_size}, grad_acc_steps {cfg.grad_acc_steps}, device_batch_size "
                f"{cfg.device_batch_size} tokens, batch_size {cfg.batch_size} tokens/step, device {ctx.device}, "
                f"dtype {cfg.dtype}, compile {cfg.compile}, attention {cfg.attention}")
            passes = cfg.train_steps * cfg.batch_size / max(1, self.train_tokens)
            log(f"training data: {self.train_tokens:,} tokens in {len(self.shards.train_paths)} shard(s); "
                f"{cfg.train_steps} steps x {cfg.batch_size:,} tokens = {passes:.2f} pass(es) over it"
                + (" (later passes visit the shards in a new order)" if passes > 1 else ""))
            print(f"run folder: {self.dir}", flush=True)
            records.write_heartbeat(self.dir, self.start_step)
            if any(value is not None for value in self._dashboard_flags.values()):
                self._dashboards = dashboards.Dashboards(self.dir, config=self.config, **self._dashboard_flags)
                for note in self._dashboards.notes:
                    self.log(note)
        self._wall_start = time.perf_counter() - self._wall_before
        self._bar = progress_bar(total=cfg.train_steps * cfg.batch_size, initial=self.start_step * cfg.batch_size,
                         disable=not ctx.is_main, file=sys.stderr, unit="tok", unit_scale=True, dynamic_ncols=True,
                         desc="train")

    def __exit__(self, exc_type, err, tb):
        message = None
        if err is not None and not isinstance(err, KeyboardInterrupt):
            message = _user_message(err, self.dir)
        try:
            if err is not None and self.ctx.is_main and not self._finished:
                self._record_failure(err, message if isinstance(err, OSError) else None)
        finally:
            self._close()
        if message is not None:
            raise UserError(message) from None
        return False

    def _record_failure(self, err, message=None):
        """results.json "interrupted" (a signal, naming the checkpoint to resume from) or "failed" (with the error);
        on a full disk, as much of it as still fits (the error line on the console says the rest)."""
        identity = {"model_name": self.cfg.model_name, "world_size": self.ctx.world_size,
                    "tokenizer": self.tokenizer.name, "seed": self.cfg.seed}
        if isinstance(err, KeyboardInterrupt):
            signum = getattr(err, "signum", signal.SIGINT)
            how = "Ctrl-C" if signum == signal.SIGINT else signal_name(signum)
            command = self._resume_command()
            where = (f"resume with --resume {self.last_checkpoint} ({command})" if self.last_checkpoint else
                     "no checkpoint was saved (--checkpoint_every N keeps one to resume from)")
            results = {"status": "interrupted", "signal": signal_name(signum), "steps": self.step,
                       "checkpoint": self.last_checkpoint, "resume_command": command, **self.final, **identity}
            text = f"run interrupted ({how}) after step {self.step}; {where}"
        else:
            if message is None:
                message = str(err) if isinstance(err, (UserError, TrainingDiverged)) else f"{type(err).__name__}: {err}"
            results = {"status": "failed", "error": message, **self.final, **identity}
            text = f"run failed: {message}"
        with contextlib.suppress(OSError):  # a full disk: the console still gets the line
            self.log(text)
        try:
            records.write_results(self.dir, results)
        except OSError as write_err:
            print(f"(could not write {os.path.join(self.dir, records.RESULTS_FILE)}: "
                  f"{write_err.strerror or write_err})", file=sys.stderr, flush=True)

    def _resume_command(self):
        """The command that continues this run from its last checkpoint (None without one)."""
        if not self.last_checkpoint:
            return None
        script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".py") else "train_gpt.py"
        launcher = "python" if self.ctx.world_size == 1 else (
            f"torchrun --nproc_per_node={os.environ.get('LOCAL_WORLD_SIZE', self.ctx.world_size)}")
        return " ".join([launcher, script, "--resume"] + [shlex.quote(w) for w in [self.last_checkpoint,
                                                                                     *self.resume_flags]])

    def _close(self):
        if self._bar is not None:
            self._bar.close()
        for writer in (self._log_file, self._metrics, self._dashboards):
            if writer is not None:
                with contextlib.suppress(OSError):  # a full disk: what the buffer held is lost, said already
                    writer.close()

    # ---- the loop's steps: reports, checkpoints, stopping
    def steps(self):
        """The loop's steps, start_step .. train_steps (the last one only evaluates). From here a signal waits for
        the end of a step, where every rank stops with a checkpoint (gptlab/train/stop.py)."""
        self._stopper.begin_steps()
        return range(self.start_step, self.cfg.train_steps + 1)

    def begin_final_evaluations(self, step):
        """Before the final evaluations: the final checkpoint (a stop in them resumes here and runs only them);
        from here a signal stops at once."""
        if (self.cfg.save_model or self.cfg.checkpoint_every) and step > self.start_step:
            self.save(step)
        self._stopper.end_steps()

    def save(self, step):
        """A checkpoint of the model, optimizers and loader at `step`; a signal waits for it to be complete."""
        with self._stopper.deferred():
            for opt in self._optimizers:  # collective: rank 0 needs every rank's share of the optimizer state
                if hasattr(opt, "gather_state"):
                    opt.gather_state()
            self.save_checkpoint(step, self._model, self._optimizers, self._train_loader)

    def end_step(self, step, lr, sums, timer):
        """Optimizer step `step` is done (sums: this rank's summed loss and attention pairs, still on the device;
        timer: its StepTimer, stopped). Reports when due (gptlab/train/step_reports.py), saves a periodic
        checkpoint, and when a signal asked, saves and raises StopRequested (after the last step too: its
        checkpoint resumes into the final evaluations alone)."""
        loader, reports = self._train_loader, self._reports
        reports.add(StepFigures(step, lr, sums, timer, loader.epoch + 1 if loader.epoch > self._epoch else 0))
        self._epoch = loader.epoch
        if reports.due(step):
            reports.report(self.read, self._log_reported)
        periodic = due(self.cfg.checkpoint_every, step) and step < self.cfg.train_steps  # the last: see above
        if periodic:
            self.save(step)
        stop_now = reports.stop_signal()
        if stop_now:
            if reports.unreported:
                reports.report(self.read, self._log_reported)
            self.log(f"{signal.Signals(stop_now).name} received: stopping after step {step} with a checkpoint")
            if not periodic:
                self.save(step)
            raise StopRequested(stop_now)

    def _log_reported(self, figures, loss, pairs_long, pairs_short):
        if figures.new_pass:
            self.log(f"step {figures.step}: the training data ran out; pass {figures.new_pass} over it begins")
        self.check_loss(figures.step, loss)  # NaN/inf: the run stops, recorded as failed, before any checkpoint
        flops = sum(self._flops_of({"long": pairs_long, "short": pairs_short}))
        self.log_step(figures.step, loss, figures.lr, figures.timer.seconds(), flops)

    # ---- what the training loop reports
    def log(self, text, echo=True):
        """A line in training_log.txt, and on the console unless echo=False (rank 0; a no-op elsewhere)."""
        if not self.ctx.is_main:
            return
        self._log_file(text)
        if echo:
            tqdm.write(text, file=sys.stdout)
            sys.stdout.flush()

    @contextlib.contextmanager
    def evaluating(self, model):
        """The model in eval mode and the training progress bar out of the way, for one evaluation."""
        if self._bar is not None:
            self._bar.clear()
        model.eval()
        try:
            yield
        finally:
            model.train()

    def log_eval(self, step, **figures):
        """Evaluation figures at `step` (e.g. val_loss=..., val_bpb=...): a log line and a metrics.csv row; each
        name must be a column of gptlab.train.records.METRICS_COLUMNS."""
        if step == self.cfg.train_steps:
            self.final.update({f"final_{name}": value for name, value in figures.items()})
        shown = " ".join(f"{name} {value:.4f}" for name, value in figures.items())
        self.log(f"step {step}/{self.cfg.train_steps} {shown} train_time {self.train_time_s:.1f}s")
        if self.ctx.is_main:
            self._write_metrics(step=step, tokens=step * self.cfg.batch_size, elapsed_s=self.train_time_s, **figures)

    def log_hellaswag(self, step, figures):
        """figures: gptlab.evals.hellaswag.evaluate_hellaswag_in_run's, or None (nothing was scored)."""
        if step == self.cfg.train_steps:
            self.final["hellaswag"] = figures
        if figures is None:
            return
        self.log(f"step {step} hellaswag acc {figures['acc']:.4f} (95% CI {_interval(figures['acc_ci95'])}) "
                 f"acc_norm {figures['acc_norm']:.4f} (95% CI {_interval(figures['acc_norm_ci95'])}) "
                 f"n={figures['n']}")
        if self.ctx.is_main:
            self._write_metrics(step=step, tokens=step * self.cfg.batch_size, hellaswag_acc=figures["acc"],
                                hellaswag_acc_norm=figures["acc_norm"], elapsed_s=self.train_time_s)

    def log_evals(self, step, figures, row, write_examples=None):
        """figures: gptlab.evals.in_run.RunEvals.score's (the suite of --evals), row: their metrics.csv cells
        (gptlab.evals.in_run.metrics_row): a log line per task and one for the suite, a metrics.csv row; the last
        step's go to results.json as "evals", and to write_examples(run_dir, step, figures, meta) (its per-example
        files: gptlab.evals.in_run.write_final)."""
        if step == self.cfg.train_steps:
            self.final["evals"] = _evals_results(figures)
            if self.ctx.is_main and write_examples:  # per example: paired tests between runs
                write_examples(self.dir, step, figures, {"checkpoint": None, "tokenizer": self.cfg.tokenizer,
                                                         "ranks": self.ctx.world_size,
                                                         "device": self.ctx.device.type, "dtype": self.cfg.dtype})
        for name, t in figures["per_task"].items():
            self.log(f"step {step} evals {name} acc {t['acc']:.4f} (95% CI {_interval(t['acc_ci95'])}) acc_norm "
                     f"{t['acc_norm']:.4f} centred {t['centred']:.4f} gold_bpb {t['gold_bpb']:.4f} "
                     f"(95% CI {_interval(t['gold_bpb_ci95'])}) n={t['n']}", echo=False)
        self.log(f"step {step} evals core {figures['core']:.4f} (95% CI {_interval(figures['core_ci95'])}) gold_bpb "
                 f"{figures['gold_bpb']:.4f} (95% CI {_interval(figures['gold_bpb_ci95'])}) over "
                 f"{len(figures['per_task'])} tasks ({figures['seconds']:.1f}s)")
        if self.ctx.is_main:
            self._write_metrics(step=step, tokens=step * self.cfg.batch_size, elapsed_s=self.train_time_s,
                                **row)

    def _write_metrics(self, **row):
        """A metrics.csv row (rank 0), also sent to the dashboards (--tensorboard, --wandb)."""
        self._metrics.write(**row)
        if self._dashboards is not None:
            self._dashboards.log(row["step"], row)

    def read(self, tensor):
        """Device values on the host (a list), counted: see read_to_host."""
        return read_to_host(tensor)

    def step_timer(self):
        """A started StepTimer for one optimizer step (stop() it when the step is issued)."""
        return StepTimer(self.ctx.device)

    def check_loss(self, step, train_loss):
        """Stop the run (TrainingDiverged → status failed) when the loss is NaN or infinite, or when, after the first
        DIVERGED_AFTER_STEPS steps, it has stayed above ln(vocabulary) + DIVERGED_MARGIN_NATS for DIVERGED_PATIENCE
        steps in a row: worse than guessing every token uniformly, which training never comes back from in
        practice (a learning rate far too high), so the rest of the run would only spend compute."""
        keep = (f"the last good checkpoint is {self.last_checkpoint}" if self.last_checkpoint else
                "no checkpoint was saved")
        if not math.isfinite(train_loss):
            raise TrainingDiverged(f"training loss became {train_loss} at step {step}; stopped ({keep}). Lower the "
                                   "learning rate (--lr_scale) or check the data")
        vocab = self.extra_config.get("padded_vocab") or self.tokenizer.encoding.n_vocab
        ceiling = math.log(vocab) + DIVERGED_MARGIN_NATS
        self._above_ceiling = self._above_ceiling + 1 if step > DIVERGED_AFTER_STEPS and train_loss > ceiling else 0
        if self._above_ceiling >= DIVERGED_PATIENCE:
            raise TrainingDiverged(f"training diverged: the training loss ({train_loss:.4f} at step {step}) has stayed "
                                   f"above ln(vocabulary) + {DIVERGED_MARGIN_NATS:g} = {ceiling:.2f} (worse than "
                                   f"guessing uniformly) for {DIVERGED_PATIENCE} steps; stopped ({keep}). Lower the "
                                   "learning rate (--lr_scale) or check the data")

    def log_step(self, step, train_loss, lr, step_time_s, flops):
        """Optimizer step `step` is done: its loss, lr multiplier, time and model FLOPs (for TFLOP/s and MFU)."""
        cfg = self.cfg
        self.step = step
        self.train_time_s += step_time_s
        tokens = cfg.batch_size
        # model FLOPs utilisation: this step's FLOPs per GPU-second against the GPU's dense bf16 peak
        peak = self.hardware["gpu_bf16_peak_tflops"]
        tflops = flops / step_time_s / self.ctx.world_size / 1e12
        mfu = tflops / peak if peak else None
        first = step == self.start_step + 1
        self.train_flops += flops
        if not first:  # the run's figure leaves out the first step (compilation, warm-up)
            self._speed_flops += flops
            self._speed_time += step_time_s
        if not self.ctx.is_main:
            return
        self._write_metrics(step=step, tokens=step * tokens, train_loss=train_loss, lr=lr, step_time_s=step_time_s,
                            elapsed_s=self.train_time_s, tokens_per_s=tokens / step_time_s, tflops_per_gpu=tflops,
                            mfu=mfu)
        self.log(f"step {step}/{cfg.train_steps} train_loss {train_loss:.6f} lr {lr:.4g} step_time "
                 f"{step_time_s * 1000:.0f}ms tokens/s {tokens / step_time_s:,.0f} TFLOP/s/GPU {tflops:.3g}"
                 + (f" MFU {100 * mfu:.1f}%" if mfu is not None else "")
                 + (" (includes torch.compile warm-up)" if cfg.compile and first else ""),
                 echo=cfg.log_every > 0 and (step % cfg.log_every == 0 or first))
        if step == self.start_step + 2 and step < cfg.train_steps:  # the first step after the warm-up one
            left = cfg.train_steps - step
            self.log(f"estimated training time: {left} more steps x {step_time_s:.3g}s = "
                     f"{_duration(left * step_time_s)} (evaluations not included)", echo=cfg.log_every > 0)
        records.write_heartbeat(self.dir, step)
        self._bar.set_postfix(step=step, loss=f"{train_loss:.4f}", refresh=False)
        self._bar.update(tokens)

    def save_checkpoint(self, step, model, optimizers, train_loader):
        """checkpoints/step_NNNNNN.pt: weights, optimizer states, data position, random generators (rank 0 writes;
        optimizers that keep state on other ranks must have gathered it first). Under --shard_params the folder
        checkpoints/step_NNNNNN/ instead, every rank writing its blocks (gptlab.checkpoint.sharded_checkpoint)."""
        sharded = fsdp.is_sharded_model(model)
        if not self.ctx.is_main and not sharded:
            return
        bookkeeping = dict(
            model_config=self.model_config, step=step, args=self._portable_args(),
            tokenizer={"name": self.tokenizer.name, "ranks_sha256": self.tokenizer.ranks_sha256},
            dataloader_state=train_loader.state_dict(), rng_states=checkpointing.rng_states(),
            extra={"elapsed_s": self.train_time_s, "run_dir": self.dir, "train_flops": self.train_flops,
                   "wall_time_s": time.perf_counter() - self._wall_start},
            data={"train_sha256": self.shards.train_sha256, "val_sha256": self.shards.val_sha256},
            model_source=self.model_source)
        path = os.path.join(self.dir, records.CHECKPOINT_DIR, f"step_{step:06d}")
        if sharded:
            sharded_checkpoint.save(path, self.ctx, model, optimizers, **bookkeeping)
        else:
            path += ".pt"
            checkpointing.save_checkpoint(path, model_state=model.state_dict(),
                                          optimizer_states=[opt.state_dict() for opt in optimizers], **bookkeeping)
        self.last_checkpoint = path
        self.log(f"checkpoint: {path}", echo=False)

    def _portable_args(self):
        """The flags for a checkpoint, with its paths absolute, so `--resume PATH` alone works from any folder."""
        args = dict(vars(self.cfg))
        for key in ("train_files", "val_files"):
            args[key] = [os.path.abspath(p) for p in args[key]]
        args["tokenizer"] = os.path.abspath(self.tokenizer.path)
        args["experiments_dir"] = os.path.abspath(args["experiments_dir"])
        if args["hellaswag_path"] != HELLASWAG_DEFAULT_PATH:  # the default stays the resuming checkout's own file
            args["hellaswag_path"] = os.path.abspath(args["hellaswag_path"])
        for key, default in (("evals_data_dir", EVALS_DATA_DIR), ("evals_tasks_dir", None)):  # the same, for --evals
            if args.get(key) not in (None, default):
                args[key] = os.path.abspath(args[key])
        return args

    def end_training(self):
        """After the last step: log peak memory and the run's speed after its first step."""
        self._bar.close()
        mem = self._memory = environment.peak_memory(self.ctx.device)
        self.log(f"peak memory ({mem['label']}): allocated {mem['allocated_gb']:.3f} GB, reserved "
                 f"{mem['reserved_gb']:.3f} GB")
        peak = self.hardware["gpu_bf16_peak_tflops"]
        self.tflops = (self._speed_flops / self._speed_time / self.ctx.world_size / 1e12
                       if self._speed_time else None)
        self.mfu = self.tflops / peak if self.tflops is not None and peak else None
        self.compiled_graphs = environment.compiled_graphs() if self.cfg.compile else None
        if self.compiled_graphs is not None:  # one per shape: more than training's and validation's is a recompile
            self.log(f"torch.compile: {self.compiled_graphs} graph(s) compiled")
        if self.tflops is not None:
            self.log(f"speed after the first step: {self.tflops:.3g} TFLOP/s per GPU" + (
                f", MFU {100 * self.mfu:.1f}% of the {peak:g} TFLOP/s bf16 peak" if self.mfu is not None else
                " (MFU: no bf16 peak known for this device)"))

    def finish(self, val_loss, val_bpb, hellaswag):
        """results.json with status "finished" and the run's final figures; returns them."""
        if self._memory is None:
            self.end_training()
        mem = self._memory
        wall_time_s = time.perf_counter() - self._wall_start
        gpu_hours = cost.gpu_hours(wall_time_s, self.ctx.world_size)
        results = {"final_val_loss": val_loss, "final_val_bpb": val_bpb, "hellaswag": hellaswag,
                   "tokens": self.step * self.cfg.batch_size, "steps": self.step,
                   "wall_time_s": wall_time_s, "train_time_s": self.train_time_s, "train_flops": self.train_flops,
                   "gpu_hours": gpu_hours, "usd_per_gpu_hour": self.price,
                   "cost_usd": cost.cost_usd(gpu_hours, self.price),
                   "peak_mem_allocated_gb": mem["allocated_gb"], "peak_mem_reserved_gb": mem["reserved_gb"],
                   "peak_mem_label": mem["label"], "checkpoint": self.last_checkpoint, "tflops_per_gpu": self.tflops,
                   "mfu": self.mfu, "compiled_graphs": self.compiled_graphs, "n_params": self.n_params, "gpu_name": self.hardware["gpu_name"],
                   "world_size": self.ctx.world_size, "tokenizer": self.tokenizer.name,
                   "model_name": self.cfg.model_name, "seed": self.cfg.seed, "load_avg_end": environment.load_average()}
        if "evals" in self.final:  # --evals: the suite's final figures
            results["evals"] = self.final["evals"]
        if self.ctx.is_main:
            records.write_results(self.dir, {"status": "finished", **results})
            self._finished = True  # a signal from here on must not record the finished run as interrupted
            self.log(f"results: {json.dumps(results)}")
        self._finished = True
        return results


def _duration(seconds):
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _evals_results(figures):
    """results.json's "evals": per task acc, acc_norm, centred, gold_bpb with their 95% intervals, n and baseline;
    over the tasks core and gold_bpb with theirs."""
    keep = ("n", "baseline") + tuple(k for f in ("acc", "acc_norm", "centred", "gold_bpb") for k in (f, f + "_ci95"))
    out = {k: figures[k] for k in ("core", "core_ci95", "gold_bpb", "gold_bpb_ci95", "tasks", "limit")}
    out["per_task"] = {name: {k: t[k] for k in keep} for name, t in figures["per_task"].items()}
    return out


def _interval(ci):
    return f"[{ci[0]:.4f}, {ci[1]:.4f}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else str(ci)


# a write that fails because of the disk, not the program: one error line, not a traceback
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)


def _is_out_of_memory(err):
    """CUDA or CPU out of memory (torch raises torch.OutOfMemoryError, or a RuntimeError from its CPU allocator)."""
    return (isinstance(err, (torch.OutOfMemoryError, MemoryError)) or "CUDA out of memory" in str(err)
            or "DefaultCPUAllocator" in str(err))


def _user_message(err, run_dir):
    """The one-line message for a failure the user can fix (None: a bug, reported with its traceback)."""
    if isinstance(err, (UserError, TrainingDiverged)):
        return str(err) if isinstance(err, TrainingDiverged) else None
    if _is_out_of_memory(err):
        what = "CUDA out of memory" if "CUDA" in str(err) else "out of memory on the CPU"
        return (f"{what} ({one_line(err, 300)}); lower --device_batch_size (more gradient accumulation, same "
                "results), --batch_size or --train_seq_len")
    if isinstance(err, OSError) and err.errno in _DISK_ERRNOS:
        name = f" {err.filename}" if err.filename else f" in {run_dir}"
        return (f"could not write{name}: {err.strerror or err}; free space (or fix the folder) and run again, or "
                "resume from the run's last checkpoint")
    return None
