"""Train a GPT on token shards: the research surface (flags, optimizers, schedules, the loop); the architecture is
the --arch module's: model.py (modded, the default: a modded-nanogpt-style GPT trained with Muon) or gpt2.py (GPT-2
trained with AdamW and warm-up + cosine, nanoGPT / llm.c's recipe). Each module names its recipe (OPTIMIZER).

    python   train_gpt.py --model_name ReadmeGPT --tokenizer readmetokenizer_v1000_n100000.pkl --vocab_size 1001 \
                          --model_dim 128 --num_heads 4 --num_layers 6
    torchrun --nproc_per_node=G train_gpt.py ...same flags...
    torchrun --nnodes=N --nproc_per_node=G --rdzv_backend=c10d --rdzv_endpoint=HOST:PORT train_gpt.py ...

Baseline: KellerJordan/modded-nanogpt, FlexAttention era (record #26). On CUDA: FlexAttention and torch.compile;
on CPU the same masks, evaluated densely, so the same model trains (slowly) anywhere.

`--batch_size` is the GLOBAL number of tokens per optimizer step. Each rank runs `grad_acc_steps` forward/backward
passes of `--device_batch_size` tokens, so batch_size = world_size x grad_acc_steps x device_batch_size and the
loss curve is the same for any number of ranks (exactly so in float32 on CPU, up to summation order).

Everything that is not research lives in gptlab/: flag checks (gptlab/train/config.py), gradient communication
(gptlab/train/comm.py), the run's folder, logs, metrics and checkpoints (gptlab/train/run.py, one Run object), data
loading, evaluations. EXPERIMENTING.md says which file to edit for which experiment.
"""
import argparse
import contextlib
import functools
import json
import math
import os
import random
import signal
import time

import torch

import model as arch
from gptlab.core import distributed as dist_utils
from gptlab.core.cli import (ArgumentParser, HelpFormatter, float_in, fraction, int_in, non_negative_int, or_auto,
                             positive_int, path)
from gptlab.core.errors import StopRequested, UserError, run_cli
from gptlab.core.files import check_folder_creatable
from gptlab.data.hellaswag import DEFAULT_PATH as HELLASWAG_DEFAULT_PATH
from gptlab.data.loader import BOSAlignedLoader, ValidationSet, to_device
from gptlab.data.selection import select_run_shards
from gptlab.evals.bpb import evaluate_val, token_byte_lengths
from gptlab.evals.file_prints import FilePrints
from gptlab.evals.hellaswag import check_hellaswag_file, evaluate_hellaswag_in_run
from gptlab.evals.in_run import RunEvals, metrics_columns, metrics_row, write_final
from gptlab.evals.score import model_geometry
from gptlab.evals.task_spec import DATA_DIR as EVALS_DATA_DIR
from gptlab.export.generate import sample_continuations
from gptlab.tokenizer.format import open_tokenizer
from gptlab.train import checkpointing, environment, fsdp, model_source, mup, stop
from gptlab.train.batching import (activation_bytes_per_token, choose_micro_batch, micro_batch_candidates,
                                   probe_batch, split_batch)
from gptlab.train.comm import FlatShards, GradientSync, MatrixShards, WholeMatrices
from gptlab.train.config import (add_model_flags, apply_model_flags, arch_fields, check_model_fits, check_ranks_agree,
                                 model_config_of, resolve_config)
from gptlab.train.run import Run, add_run_flags, chosen_flags, parse_flags, restore_training_state

REPO_ROOT = os.path.dirname(os.path.abspath(__file__))


# ============================================================================================== Flags
# Named configurations by scale; flags given beside --preset win. Each runs on any number and size of GPUs: the
# global batch is fixed and --device_batch_size auto picks the micro-batch (gradient accumulation fills the gap).
PRESETS = {
    # the quickstart's CPU-sized model (1.7M parameters, 0.5M tokens)
    "quickstart": dict(model_dim=128, num_heads=4, num_layers=6, train_seq_len=256, val_seq_len=256, batch_size=4096,
                       device_batch_size=4096, train_steps=120, cooldown_frac=0.4, val_loss_every=20, val_steps=4,
                       val_batch_size=4096, hellaswag_limit=1000),
    # GPT-2 small's shape (12 x 768, 6 heads of 128), ~2B tokens in 3,800 steps of 524,288
    "gpt2-small": dict(num_layers=12, num_heads=6, model_dim=768, train_seq_len=2048, val_seq_len=2048,
                       batch_size=524288, train_steps=3800, cooldown_frac=0.4, val_loss_every=250, val_steps=20,
                       hellaswag_every=1000),
    # GPT-2 medium's shape (24 x 1024, 8 heads of 128), ~4B tokens in 7,600 steps of 524,288
    "gpt2-medium": dict(num_layers=24, num_heads=8, model_dim=1024, train_seq_len=2048, val_seq_len=2048,
                        batch_size=524288, train_steps=7600, cooldown_frac=0.4, val_loss_every=250, val_steps=20,
                        hellaswag_every=2000),
    # ~1B parameters (24 x 1536, 12 heads of 128: 989M with GPT-2's vocabulary) on 24 GB cards: its fp32 weights,
    # gradients and optimizer state (~13 GB) are sharded over the ranks (--shard_params); ~10B tokens in 19,000 steps
    "gpt-1b": dict(num_layers=24, num_heads=12, model_dim=1536, train_seq_len=2048, val_seq_len=2048,
                   batch_size=524288, train_steps=19000, cooldown_frac=0.4, val_loss_every=500, val_steps=20,
                   hellaswag_every=4000, shard_params=True),
    # llm.c's GPT-2 124M run (karpathy/llm.c discussion #481; its train_gpt2.cu flags -b 64 -t 1024 -d 524288 -l
    # 0.0006 -u 700 -q 0.0 -c 0.1, 10B FineWeb tokens: 19,073 steps of 524,288): GPT-2 small (12 x 768, 12 heads),
    # rows of 1,024, AdamW 6e-4 with 700 warm-up steps and cosine to 0, weight decay 0.1, gradient clipping 1.0
    "gpt2-124m-llmc": dict(arch="gpt2", num_layers=12, num_heads=12, model_dim=768, train_seq_len=1024,
                           val_seq_len=1024, batch_size=524288, train_steps=19073, lr=6e-4, warmup_steps=700,
                           final_lr_frac=0.0, weight_decay=0.1, grad_clip=1.0, val_loss_every=250, val_steps=20,
                           hellaswag_every=4000),
    # modded-nanogpt record #26's recipe on this code: 12 x 768, 6 heads of 128, 3 value embeddings, 48K-token
    # rows, 393,216 tokens per step, 1,750 steps, cooldown 0.45, windows up to 1,792 (its learning rates are the
    # defaults); validation on ~10.6M tokens in rows of the training length (it uses 256K-token rows); its FP8 head
    # where the GPU has FP8 (auto)
    "record26": dict(num_layers=12, num_heads=6, model_dim=768, num_val_emb=3, train_seq_len=49152,
                     val_seq_len=49152, batch_size=393216, train_steps=1750, cooldown_frac=0.45, window_size=1792,
                     val_loss_every=125, val_steps=27, val_batch_size=393216, fp8_head="auto"),
}


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="a named configuration (see PRESETS in train_gpt.py); flags given beside it win")
    p.add_argument("--config", type=path, default=None,
                   help="a TOML file of flags (name = value, as on the command line; docs/training.md); flags given "
                        "on the command line win")
    g = p.add_argument_group("data")
    g.add_argument("--train_files", type=path, nargs="+", default=None,
                   help="training shards: paths or quoted globs (default: data/*_<tokenizer stem>/train_*.bin)")
    g.add_argument("--val_files", type=path, nargs="+", default=None,
                   help="validation shards: paths or quoted globs (default: data/*_<tokenizer stem>/val_*.bin)")
    g.add_argument("--tokenizer", type=path, default=None, help="tokenizer .pkl (a path or a name inside tokenizers/)")
    g.add_argument("--train_seq_len", type=positive_int, default=1024,
                   help="tokens per training row (multiple of 128)")
    g.add_argument("--val_seq_len", type=positive_int, default=None,
                   help="tokens per validation row (a multiple of the model's SEQ_MULTIPLE; default: 1024, or "
                        "--train_seq_len where the model learns a position table)")
    g = p.add_argument_group("architecture")
    g.add_argument("--arch", choices=list(model_source.ARCHITECTURES), default=next(iter(model_source.ARCHITECTURES)),
                   help="the model: " + ", ".join(f"{name} ({file})" for name, file in model_source.ARCHITECTURES.items())
                   + "; a --resume run keeps its checkpoint's")
    # --vocab_size, --num_layers, ...: one per field of the architectures' GPTConfig (each --arch takes its own)
    add_model_flags(p, *architecture_configs(), names=list(model_source.ARCHITECTURES))
    mup.add_flags(p)  # --mup, --mup_base_width, --mup_base_heads
    g = p.add_argument_group("optimization")
    g.add_argument("--train_steps", type=positive_int, default=1000, help="optimizer steps")
    # at most 2**40 (~1.1e12, ~300,000x GPT-3's batch): beyond that only a typo, and splitting it would take minutes
    g.add_argument("--batch_size", type=int_in(1, 2**40, "must be a positive number of tokens up to 2**40, got {value}"),
                   default=65536, help="GLOBAL tokens per optimizer step (at most 2**40)")
    g.add_argument("--device_batch_size", type=or_auto(positive_int), default="auto", help="tokens per rank per forward "
                   "pass, or auto: on CUDA the largest that fits the GPU (probed before the first step), on CPU "
                   "about 4096 (ignored when --grad_acc_steps is given)")
    g.add_argument("--grad_acc_steps", type=positive_int, default=None,
                   help="micro-batches per rank per step (default: batch_size / (world_size x device_batch_size))")
    g.add_argument("--cooldown_frac", type=fraction, default=None,
                   help="Muon recipe: fraction of steps of linear LR decay at the end (default 0.4)")
    g.add_argument("--lr", type=float_in(0, 1, low_open=True, message="{value} must be a learning rate in (0, 1]"),
                   default=None, help="AdamW recipe: peak learning rate (default 6e-4)")
    g.add_argument("--warmup_steps", type=non_negative_int, default=None,
                   help="AdamW recipe: steps of linear warm-up (default 700)")
    g.add_argument("--final_lr_frac", type=fraction, default=None,
                   help="AdamW recipe: the cosine decay's final learning rate / --lr (default 0)")
    g.add_argument("--weight_decay", type=float_in(0, 1, message="{value} must be between 0 and 1"), default=None,
                   help="AdamW recipe: decoupled weight decay of the matrices and embeddings (default 0.1)")
    g.add_argument("--grad_clip", type=float_in(0, 1e6, message="{value} must be 0 (off) or a positive norm"),
                   default=None, help="AdamW recipe: clip the gradients' global norm to this (default 1.0; 0: off)")
    # at most 1e6: a learning rate a million times the tuned one only diverges, and from ~1e38 the optimizers' float32
    # learning rates overflow (a traceback from inside torch)
    g.add_argument("--lr_scale", type=float_in(0, 1e6, low_open=True, message="{value} must be a positive number up "
                                                                     "to 1e6 (it multiplies every learning rate; 1 "
                                                                     "keeps them)"),
                   default=1.0, help="multiplies every learning rate (at most 1e6)")
    g.add_argument("--seed", type=int_in(0, 2**63 - 1, "{value} must be between 0 and 2**63 - 1"), default=0,
                   help="initialisation, data order and sampling")
    g = p.add_argument_group("evaluation")
    g.add_argument("--val_loss_every", type=non_negative_int, default=100,
                   help="validate every N steps (0: only at the end)")
    g.add_argument("--val_steps", type=positive_int, default=10,
                   help="validation batches per evaluation (a fixed set)")
    g.add_argument("--val_batch_size", type=positive_int, default=None,
                   help="GLOBAL tokens per validation step (default: batch_size rounded to val_seq_len)")
    g.add_argument("--hellaswag_every", type=non_negative_int, default=0,
                   help="also run HellaSwag every N steps (0: only at the end)")
    g.add_argument("--hellaswag_limit", type=int_in(0, message="must be 0 or more (0 skips HellaSwag), got {value}"),
                   default=None, help="first N examples (default: all 10042; 0: skip)")
    g.add_argument("--hellaswag_path", type=path, default=HELLASWAG_DEFAULT_PATH,
                   help="HellaSwag validation .jsonl (python download_hellaswag.py writes it)")
    g.add_argument("--evals", default=None, metavar="core|all|NAME,...",
                   help="also score this benchmark suite (docs/evals.md; python download_evals.py fetches its rows) "
                   "at the end and every --evals_every steps (default: none)")
    g.add_argument("--evals_every", type=non_negative_int, default=0, help="--evals every N steps (0: only at the end)")
    g.add_argument("--evals_limit", type=positive_int, default=None, help="--evals: the first N examples of each task "
                   "(default: all)")
    g.add_argument("--evals_data_dir", type=path, default=EVALS_DATA_DIR,
                   help="--evals: where download_evals.py wrote the tasks' rows")
    g.add_argument("--evals_tasks_dir", type=path, default=None,
                   help="--evals: a folder of your own task files, besides gptlab/evals/tasks/")
    g.add_argument("--sample_tokens", type=non_negative_int, default=48,
                   help="tokens per sampled continuation at the end (0: none)")
    g = p.add_argument_group("hardware")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="autocast dtype (auto: bfloat16 on CUDA, float32 on CPU)")
    g.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile (default: on CUDA only)")
    g.add_argument("--attention", default="auto", choices=["auto", "flex", "sdpa"],
                   help="auto: FlexAttention on CUDA, dense SDPA with the same mask on CPU")
    g.add_argument("--fp8_head", action=argparse.BooleanOptionalAction, default=False,
                   help="the LM head's matmul in FP8 while training (CUDA compute capability >= 8.9; --preset "
                   "record26: on where the GPU has it)")
    g.add_argument("--shard_params", action=argparse.BooleanOptionalAction, default=False,
                   help="FSDP2: parameters, gradients and optimizer state sharded across ranks, for models whose "
                   "training state does not fit one GPU (checkpoints are then sharded folders)")
    add_run_flags(p)  # --model_name, --experiments_dir, --save_model, --checkpoint_every, --resume, --log_every,
    #                   --dry_run, --trust_model_code
    return p


# The optimizer recipes: each architecture's module names its own (OPTIMIZER; none: Muon, model.py's), and these
# are the flags of each, with their defaults. A flag of the other recipe is refused (apply_recipe).
RECIPES = {
    "muon": dict(cooldown_frac=0.4),
    "adamw": dict(lr=6e-4, warmup_steps=700, final_lr_frac=0.0, weight_decay=0.1, grad_clip=1.0),
}


def architecture_configs():
    """The GPTConfig classes of today's architecture modules, the default's first (their fields are the flags)."""
    return [model_source.current_module(file).GPTConfig for file in model_source.ARCHITECTURES.values()]


def recipe_of(module):
    return getattr(module, "OPTIMIZER", "muon")


def fill_recipe(cfg):
    """cfg's recipe (cfg.optimizer; none named: muon) with its flags' defaults where unset; the recipe's name."""
    cfg.optimizer = recipe = getattr(cfg, "optimizer", None) or "muon"
    for name, default in RECIPES[recipe].items():
        if getattr(cfg, name, None) is None:
            setattr(cfg, name, default)
    return recipe


def apply_recipe(args, module, preset=None):
    """args.optimizer from the module; its recipe's flags get their defaults, another recipe's set is one UserError
    and unset (or at the value the --preset gave it) dropped (the run records only its own)."""
    recipe = recipe_of(module)
    if recipe not in RECIPES:
        raise UserError(f"the model module asks for optimizer {recipe!r}; train_gpt.py has {', '.join(RECIPES)}")
    args.optimizer = recipe
    fill_recipe(args)
    for other, flags in RECIPES.items():
        for name in flags:
            if other == recipe or name in RECIPES[recipe]:
                continue
            if getattr(args, name, None) is not None and (preset or {}).get(name) != getattr(args, name):
                raise UserError(f"--{name} is a setting of the {other} recipe, and --arch {args.arch} trains with "
                                f"{recipe}; drop it")
            if hasattr(args, name):
                delattr(args, name)


def choose_module(args, ckpt=None):
    """(module, model source) the run trains: --arch's module file as it is today, or for --resume the source its
    checkpoint carries (whatever the files say today); args then hold that architecture's fields and recipe."""
    if ckpt is None:
        source = model_source.current_source(model_source.arch_file(args.arch))
        module = model_source.current_module(source["file"])
    else:
        source = ckpt["model_source"]
        module = model_source.module_for(source, args.resume, args.trust_model_code)
        was = model_source.arch_of(source)
        if was is not None and was != args.arch:
            raise UserError(f"--arch {args.arch} differs from the --resume checkpoint's {was}: a resumed run trains "
                            "its checkpoint's model; drop --arch")
        args.arch = was or args.arch
        for key, value in ckpt["model_config"].items():
            if args.__dict__.get(key) is None:
                args.__dict__[key] = value  # a field today's module no longer has
    preset = PRESETS.get(getattr(args, "preset", None)) or {}  # (a preset's settings of the other kind: dropped)
    apply_model_flags(args, module.GPTConfig, architecture_configs(), args.arch, preset)
    apply_recipe(args, module, preset)
    mup.resolve(args, module)
    return module, source


# a --resume run takes every other flag from its checkpoint unless given again; these depend on the machine. Each
# shapes the run's numbers or memory, so a run's recorded resume command repeats those it chose (run.chosen_flags)
FRESH_ON_RESUME = ("device", "dtype", "compile", "attention", "device_batch_size", "grad_acc_steps", "shard_params")


# ============================================================================================== Optimizer
def zeropower_via_newtonschulz5(G, steps=5):
    """Approximately orthogonalise G (..., m, n) with a quintic Newton–Schulz iteration (Keller Jordan's Muon;
    coefficients chosen to maximise the slope at zero). bfloat16 on CUDA, float32 on CPU (exact and fast there)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16() if G.is_cuda else G.float()
    transposed = G.size(-2) > G.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)  # spectral norm <= 1
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if transposed:
        X = X.mT
    return X


@functools.cache
def _compiled_newtonschulz():
    return torch.compile(zeropower_via_newtonschulz5, dynamic=False)


def orthogonalize(G, steps=5, compiled=None):
    """zeropower_via_newtonschulz5, compiled by default on CUDA (modded-nanogpt compiles it: the iteration's
    elementwise work fuses into the matmuls' epilogues) and eager elsewhere; `compiled` forces either."""
    if not (G.is_cuda if compiled is None else compiled):
        return zeropower_via_newtonschulz5(G, steps)
    return _compiled_newtonschulz()(G, steps)


def nesterov_look_ahead(grad, buf, momentum):
    """Muon's momentum (buf, updated in place) and the Nesterov look-ahead it steps with; elementwise, so the same
    on a whole matrix or on a rank's row block of it."""
    buf.lerp_(grad, 1 - momentum)
    return grad.lerp(buf, momentum)


def muon_lr_factor(shape):
    """sqrt(max(1, rows/cols)) of a (..., rows, cols) matrix: the update RMS is then shape-independent."""
    rows, cols = shape[-2:]
    return max(1, rows / cols) ** 0.5


def muon_update(grads, momenta, momentum, ns_steps):
    """Muon's step for same-shape matrices (Keller Jordan, modded-nanogpt Muon records, 2024-10): momentum
    (updated in place), Nesterov look-ahead, one batched Newton–Schulz over the stack. Returns (updates
    (n, rows, cols), muon_lr_factor)."""
    nesterov = torch.stack([nesterov_look_ahead(grad, buf, momentum) for grad, buf in zip(grads, momenta)])
    return orthogonalize(nesterov, ns_steps), muon_lr_factor(grads[0].shape)


class Muon(torch.optim.Optimizer):
    """MomentUm Orthogonalized by Newton–Schulz, distributed as in record #26: gptlab.train.comm.MatrixShards deals
    same-shape matrices out one per rank, each rank updates only its own (receiving their rank-summed gradients)
    and the updated matrices are all-gathered. Every matrix's update is computed exactly as on one rank, so the
    result does not depend on the world size. Momentum lives on the owner; gather_state() (collective) copies it
    everywhere before a checkpoint, so any rank's checkpoint resumes on any world size."""

    def __init__(self, params, lr=0.05, momentum=0.95, ns_steps=5, rank=0, world_size=1):
        super().__init__(params, dict(lr=lr, momentum=momentum, ns_steps=ns_steps))
        if any(fsdp.is_sharded(p) for g in self.param_groups for p in g["params"]):  # --shard_params
            self.whole = WholeMatrices(self.param_groups, rank, world_size)
        else:
            self.shards = MatrixShards(self.param_groups, rank, world_size)

    @torch.no_grad()
    def step(self):
        if hasattr(self, "whole"):
            return self._sharded_step()
        for params, grads, g in self.shards.owned():  # this rank's matrices of one shape
            group = self.param_groups[g]
            updates, lr_factor = muon_update(grads, [self._momentum(p) for p in params], group["momentum"],
                                             group["ns_steps"])
            for p, update in zip(params, updates):
                p.add_(update.to(p.dtype), alpha=-group["lr"] * lr_factor)

    def _momentum(self, p):
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
        return state["momentum_buffer"]

    def _sharded_step(self):
        """--shard_params: momentum and Nesterov look-ahead on this rank's row blocks (elementwise, so as on whole
        matrices), Newton–Schulz on whole matrices at their owner ranks (gptlab.train.comm.WholeMatrices)."""
        nesterov = {}
        for group in self.param_groups:
            for p in group["params"]:
                grad = fsdp.local(p.grad) if p.grad is not None else torch.zeros_like(fsdp.local(p))
                nesterov[p] = nesterov_look_ahead(grad, fsdp.local(self._momentum(p)), group["momentum"])
        updates = self.whole.map_owned(nesterov, lambda whole, g: orthogonalize(whole, self.param_groups[g]["ns_steps"]))
        for group in self.param_groups:
            for p in group["params"]:
                fsdp.local(p).add_(updates[p].to(p.dtype), alpha=-group["lr"] * muon_lr_factor(p.shape))

    def gather_state(self):
        """Collective: give every rank every matrix's momentum buffer (each owner's is the current one)."""
        if hasattr(self, "shards"):  # (under --shard_params each rank keeps its row blocks: nothing to gather)
            self.shards.gather(self._momentum)


class ShardedAdam(torch.optim.Adam):
    """torch's Adam with its state and update sharded across ranks (ZeRO stage 1; record #26 shards Adam too):
    gptlab.train.comm.FlatShards gives each rank one slice of each group's flattened parameters, reduce-scattered
    gradients in, all-gathered parameters out, and an inner torch Adam updates the slices. Adam is elementwise, so
    the update is the unsharded one, bit for bit. state_dict() is torch Adam's for the whole parameters (after the
    collective gather_state()), so a checkpoint resumes on any world size, with or without sharding."""

    def __init__(self, param_groups, rank=0, world_size=1, **adam_kwargs):
        super().__init__(param_groups, **adam_kwargs)
        self.flat_shards = FlatShards(self.param_groups, rank, world_size)
        self.inner = torch.optim.Adam([dict(self._settings(g), params=[piece]) for (g, _), piece in
                                       zip(self.flat_shards.keys, self.flat_shards.slices)], **adam_kwargs)
        self._gathered = None  # whole-parameter state from gather_state(), until the next step

    def _settings(self, g):
        return {k: v for k, v in self.param_groups[g].items() if k != "params"}

    @torch.no_grad()
    def step(self):
        self.flat_shards.wait_reduced()
        for (g, _), inner_group in zip(self.flat_shards.keys, self.inner.param_groups):
            inner_group.update(self._settings(g))  # the schedule sets the outer groups' lr
        self.inner.step()
        self.flat_shards.gather_params()
        self._gathered = None

    def gather_state(self):
        """Collective: every rank's slices of the moments, as torch Adam's per-parameter state (for state_dict)."""
        shards, whole = self.flat_shards, {}
        for k, piece in enumerate(shards.slices):
            state = self.inner.state.get(piece)
            if state:
                moments = zip(shards.gather_tensors(k, state["exp_avg"]), shards.gather_tensors(k, state["exp_avg_sq"]))
                for p, (exp_avg, exp_avg_sq) in zip(shards.params[k], moments):
                    whole[p] = {"step": state["step"].clone(), "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        self._gathered = whole

    def state_dict(self):
        if self._gathered is None:
            if self.flat_shards.world_size > 1 and any(self.inner.state.values()):
                raise RuntimeError("ShardedAdam.state_dict() needs gather_state() (a collective) after the last step")
            self.gather_state()
        self.state.clear()
        self.state.update(self._gathered)
        try:
            return super().state_dict()
        finally:
            self.state.clear()

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)  # whole-parameter state, cast as torch Adam casts it
        shards = self.flat_shards
        for k, piece in enumerate(shards.slices):
            states = [self.state.get(p) for p in shards.params[k]]
            self.inner.state.pop(piece, None)
            if any(states):
                if not all(states):
                    raise ValueError("the Adam state covers only some parameters of a group")
                self.inner.state[piece] = {"step": states[0]["step"].clone(),
                                           "exp_avg": shards.my_part(k, [st["exp_avg"] for st in states]),
                                           "exp_avg_sq": shards.my_part(k, [st["exp_avg_sq"] for st in states])}
        self.state.clear()  # (the inner groups take the loaded settings at each step)
        self._gathered = None


def build_optimizers(model, rank=0, world_size=1):
    """Muon for the hidden matrices; Adam for embeddings, head and scalars (learning rates as in modded-nanogpt's
    FlexAttention-era records). torch's Adam: fused on CUDA (its step counts stay on the GPU: no host sync; the
    custom Adam this replaces was kept for that, but no test showed torch's syncing), foreach on CPU (bit for bit
    the update the committed baselines were trained with); on several ranks its state and update are sharded
    (ShardedAdam), as Muon's are; under --shard_params the parameters are shards already and torch's Adam updates
    them as they are."""
    hidden_matrices = [p for n, p in model.blocks.named_parameters() if p.ndim >= 2]
    embed_params = [model.embed.weight] + [e.weight for e in model.value_embeds]
    scalar_params = [p for p in model.parameters() if p.ndim < 2]
    head_params = [model.lm_head.weight]
    adam_groups = [dict(params=head_params, lr=0.22, name="head"), dict(params=embed_params, lr=0.6, name="embeddings"),
                   dict(params=scalar_params, lr=0.04, name="scalars")]
    adam_groups = mup.split_groups(adam_groups, model)  # --mup: matrix-like parameters' LR x 1/m (Muon's: none)
    cuda = model.lm_head.weight.is_cuda
    adam_kwargs = dict(betas=(0.8, 0.95), eps=1e-10, fused=cuda, foreach=not cuda)
    shard_adam = world_size > 1 and not fsdp.is_sharded_model(model)  # (FSDP's parameters are shards already)
    adam = (ShardedAdam(adam_groups, rank, world_size, **adam_kwargs) if shard_adam else
            torch.optim.Adam(adam_groups, **adam_kwargs))
    muon = Muon(hidden_matrices, lr=0.05, momentum=0.95, rank=rank, world_size=world_size)
    optimizers = [adam, muon]
    for opt in optimizers:
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"]
    return optimizers


def build_adamw(model, cfg):
    """The AdamW recipe (nanoGPT's configure_optimizers, llm.c): decoupled weight decay on every parameter of 2 or
    more dimensions (matrices and embeddings), none on biases and LayerNorm; betas 0.9 / 0.95, eps 1e-8. torch's
    AdamW, fused on CUDA, foreach elsewhere; each rank updates whole parameters (gradients all-reduced)."""
    params = [p for p in model.parameters() if p.requires_grad]  # (a tied weight once)
    groups = [dict(params=[p for p in params if p.ndim >= 2], weight_decay=cfg.weight_decay, name="decayed"),
              dict(params=[p for p in params if p.ndim < 2], weight_decay=0.0, name="not decayed")]
    groups = mup.split_groups(groups, model, cfg.lr)  # --mup: matrix-like parameters' LR x 1/m
    cuda = params[0].is_cuda
    adamw = torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8,
                              fused=cuda, foreach=not cuda)
    for group in adamw.param_groups:
        group["initial_lr"] = group["lr"]
    return [adamw]


def build_recipe_optimizers(cfg, model, rank=0, world_size=1):
    if fill_recipe(cfg) == "adamw":
        return build_adamw(model, cfg)
    return build_optimizers(model, rank, world_size)


def warmup_cosine(step, train_steps, warmup_steps, final_lr_frac):
    # llm.c's cosine scheduler (llmc/schedulers.h): (step + 1) / warmup_steps during the warm-up, then a cosine from
    # 1 at warmup_steps to final_lr_frac at train_steps
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    ratio = min(1.0, (step - warmup_steps) / max(1, train_steps - warmup_steps))
    return final_lr_frac + 0.5 * (1 + math.cos(math.pi * ratio)) * (1 - final_lr_frac)


def lr_multiplier(step, train_steps, cooldown_frac):
    # constant, then linear decay to 0.1x over the last cooldown_frac (modded-nanogpt; trapezoidal, arXiv 2405.18392)
    x = step / train_steps
    if x < 1 - cooldown_frac:
        return 1.0
    w = (1 - x) / cooldown_frac
    return w * 1.0 + (1 - w) * 0.1


def muon_momentum(step):
    # Muon momentum warm-up 0.85 → 0.95 over the first 300 steps (modded-nanogpt, late-2024 records)
    frac = min(step / 300, 1)
    return (1 - frac) * 0.85 + frac * 0.95


def window_blocks(step, train_steps, window_size, module=arch):
    # sliding-window warm-up: the long window grows linearly from 1 block to window_size over training, short = half
    # (modded-nanogpt FlexAttention record 2024-11 for the warm-up, long/short windows in 2025)
    max_blocks = window_size // module.BLOCK_SIZE
    return module.window_pair(max(1, min(max_blocks, math.ceil(max_blocks * step / max(1, train_steps)))))


def step_windows(step, cfg, model, module=arch):
    """The attention windows at `step`: the window warm-up where the model has sliding windows (a window_size
    field), else the model's own (final) windows throughout."""
    if getattr(cfg, "window_size", None) is None:
        return model.final_windows()
    return window_blocks(step, cfg.train_steps, cfg.window_size, module)


# ============================================================================================== Evaluation
def make_loss_fn(model, model_fwd, eot, windows, use_flex, autocast):
    """(x, y) (B, T) → the summed cross-entropy in nats, with the masks of `windows` (gptlab.evals.bpb's loss_fn)."""
    def loss_fn(x, y):
        masks = model.attention_masks(x, eot, windows, use_flex)
        with autocast():
            return model_fwd(x, masks, y)
    return loss_fn


# ============================================================================================== Training
def make_train_step(cfg, model, model_fwd, optimizers, grad_sync, train_loader, eot, use_flex, autocast, device,
                    module=arch):
    """The step function (bench/bench_train.py times this very function): the loader's next batch, grad_acc_steps
    forward/backward passes on this rank, gradients summed over ranks, one update. train_step(step) returns
    (this rank's summed loss and allowed attention pairs, long and short: a float64 (3,) tensor left on the
    device, so a step reads nothing back; the lr multiplier)."""
    muons = [opt for opt in optimizers if isinstance(opt, Muon)]
    adamw = fill_recipe(cfg) == "adamw"
    grad_clip = getattr(cfg, "grad_clip", None)

    def train_step(step):
        windows = step_windows(step, cfg, model, module)
        loss_total = torch.zeros((), dtype=torch.float32, device=device)
        pairs = torch.zeros(2, dtype=torch.int64, device=device)  # allowed query-key pairs: long, short windows
        batches = train_loader.next_batch()
        for micro, (x_np, y_np) in enumerate(batches):
            x, y = to_device(x_np, device), to_device(y_np, device)
            masks = model.attention_masks(x, eot, windows, use_flex)
            pairs += torch.stack([module.attention_pairs(x, eot, blocks) for blocks in windows])
            with autocast():
                # normalise by the GLOBAL token count so summing over micro-batches and ranks gives the mean
                loss = model_fwd(x, masks, y) / cfg.batch_size
            grad_sync.armed = micro == len(batches) - 1  # gradients are final in the last backward: sum them
            loss.backward()
            loss_total += loss.detach()
        grad_sync.finish()
        if grad_clip:  # the gradients are whole and rank-summed here (AdamW's are all-reduced), so every rank agrees
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True)
        if adamw:
            lr_mult = warmup_cosine(step, cfg.train_steps, cfg.warmup_steps, cfg.final_lr_frac) * cfg.lr_scale
        else:
            lr_mult = lr_multiplier(step, cfg.train_steps, cfg.cooldown_frac) * cfg.lr_scale
        for opt in optimizers:
            for group in opt.param_groups:
                group["lr"] = group["initial_lr"] * lr_mult
        for group in (g for muon in muons for g in muon.param_groups):
            group["momentum"] = muon_momentum(step)
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)
        return torch.cat([loss_total.double().view(1), pairs.double()]), lr_mult
    return train_step


def probe_micro_batch(cfg, ctx, model, model_fwd, optimizers, eot, use_flex, autocast):
    """--device_batch_size auto on CUDA: the largest micro-batch (tokens) whose forward+backward leaves 10% of the
    GPU free, found by gptlab.train.batching.choose_micro_batch from probes on random tokens, the first at the size
    an estimate of the activations predicts (its inputs laid out as the loader's, so the compiled graph of the chosen
    probe is the one training uses). Every rank probes its own GPU; they take the smallest."""
    device = ctx.device
    windows = step_windows(cfg.train_steps, cfg, model)  # the largest windows

    def measure(tokens):
        x, y = probe_batch(tokens, cfg.train_seq_len, model.vocab_size, eot, device)  # contiguous, as the loader's
        torch.cuda.reset_peak_memory_stats(device)
        try:
            with autocast():
                loss = model_fwd(x, model.attention_masks(x, eot, windows, use_flex), y)
            loss.backward()
            return torch.cuda.max_memory_allocated(device)
        except torch.cuda.OutOfMemoryError:
            raise MemoryError from None
        finally:
            loss = None
            model.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()

    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    adam_bytes = sum(p.numel() * p.element_size() for g in optimizers[0].param_groups for p in g["params"])
    # Adam's two moments; Muon's momentum and, across ranks, its stacked send/receive buffers
    extra = 2 * adam_bytes + (param_bytes - adam_bytes) * (3 if ctx.world_size > 1 else 1)
    free, _ = torch.cuda.mem_get_info(device)
    c = model.config
    guess = activation_bytes_per_token(c.num_layers, c.model_dim, model.padded_vocab, c.mlp_ratio,
                                       2 if cfg.dtype == "bfloat16" else 4)
    # headroom 10%: the probe's peak misses what later steps add (the allocator's rounding, NCCL buffers, a
    # validation batch's workspace); expandable segments (environment.set_allocator_defaults) keep the rest usable
    tokens, tried = choose_micro_batch(micro_batch_candidates(cfg.batch_size // ctx.world_size, cfg.train_seq_len),
                                       measure, free + torch.cuda.memory_reserved(device), fixed_bytes=2 * param_bytes,
                                       extra_bytes=extra, headroom=0.1, per_token_guess=guess)
    tokens = min(dist_utils.all_gather_objects(ctx, tokens))
    if ctx.is_main:
        print("--device_batch_size auto: probed " + ", ".join(
            f"{t} tokens: {'out of memory' if peak is None else f'{peak / 2**30:.1f} GiB'}" for t, peak in tried)
            + f"; using {tokens}", flush=True)
    return tokens


def build_model(module, model_config, cfg, device):
    """module.GPT(model_config) on device as training holds it: embeddings stored in bf16 under bf16 training, the
    FP8 head where asked (bench/bench_train.py builds its model here too)."""
    built = module.GPT(module.GPTConfig(**model_config))
    mup.init_(built)  # --mup: hidden matrices' init at the base's std x 1/sqrt(width multiplier)
    built = built.to(device)
    if cfg.dtype == "bfloat16" and hasattr(built, "store_embeddings_in"):  # (an older model.py keeps its own)
        built.store_embeddings_in(torch.bfloat16)  # as record #26; checkpoints still hold float32
    built.fp8_head = cfg.fp8_head  # resolve_config checked the device and the model source
    return built


def main(argv=None):
    environment.set_allocator_defaults()  # before CUDA starts: expandable segments unless the user chose otherwise
    args, ckpt = parse_flags(build_parser, argv, fresh_on_resume=FRESH_ON_RESUME, presets=PRESETS)
    if args.dry_run:  # the resolved configuration, before any process group, folder or data
        module, _ = choose_module(args, ckpt)
        cfg = resolve_config(args, int(os.environ.get("WORLD_SIZE", "1")), dist_utils.resolve_device(args.device),
                             module)
        print(json.dumps(vars(cfg), indent=2, default=str))
        return vars(cfg)
    with stop.StopSignals():  # SIGTERM / Ctrl-C: stop after a step, with a checkpoint (gptlab/train/stop.py)
        ctx = dist_utils.setup(args.device)
        try:
            return train(args, ctx, ckpt)
        finally:
            dist_utils.cleanup(ctx)


def train(args, ctx, ckpt=None):
    """One run on this rank; `ckpt` is the --resume checkpoint parse_flags loaded. Returns the final figures."""
    device = ctx.device
    stopper = stop.installed()  # main's signal handlers (a fresh, uninstalled one when called without main)
    # --arch's module; a resumed run trains the model its checkpoint carries (today's file when it is the same)
    module, source = choose_module(args, ckpt)
    if ckpt is not None:  # its weights must be the ones that model builds, before anything is allocated
        model_source.check_weights_fit(module, ckpt["model_config"], ckpt["model"], args.resume)
    cfg = resolve_config(args, ctx.world_size, device, module)

    # ---- inputs: each checked by its owner in gptlab, before a run folder exists
    if not cfg.tokenizer:
        raise UserError("pass --tokenizer NAME (a .pkl in tokenizers/ or a path); train one with train_tokenizer.py")
    check_folder_creatable(cfg.experiments_dir)  # writes a probe file: catches /sys, a full disk, read-only folders
    tok = open_tokenizer(cfg.tokenizer)
    cfg.vocab_size = tok.model_vocab_size(cfg.vocab_size)
    model_config = mup.model_config(cfg, model_config_of(cfg, module.GPTConfig), module)
    check_model_fits(module, model_config, device)
    shards = select_run_shards(cfg.train_files, cfg.val_files, tok.name, tok.ranks_sha256, tok.encoding.n_vocab)
    cfg.train_files, cfg.val_files = shards.train_files, shards.val_files
    # one collective: every rank runs the same flags on the same data, or all stop naming what differs
    check_ranks_agree(ctx, cfg, tokenizer=tok, shards=shards, checkpoint=ckpt, model_source=source)
    hellaswag_warning = check_hellaswag_file(cfg.hellaswag_path, cfg.hellaswag_limit,
                                             required=cfg.hellaswag_path != HELLASWAG_DEFAULT_PATH)
    eval_files = FilePrints([cfg.hellaswag_path] if cfg.hellaswag_limit != 0 else [])  # each eval checks its file
    # --evals: its rows read, checked, fingerprinted and encoded now; a missing or bad file refused before training
    suite = (RunEvals(cfg.evals, limit=cfg.evals_limit, data_dir=cfg.evals_data_dir, tasks_dir=cfg.evals_tasks_dir,
                      encoding=tok.encoding) if cfg.evals else None)
    train_loader = BOSAlignedLoader(shards.train_paths, cfg.train_seq_len, cfg.batch_size, tok.eot, ctx.rank,
                                    ctx.world_size, cfg.grad_acc_steps or 1, seed=cfg.seed, prints=shards.train_prints)
    val_set = ValidationSet(shards.val_paths, cfg.val_seq_len, cfg.val_steps * (cfg.val_batch_size // cfg.val_seq_len),
                            ctx.rank, ctx.world_size, prints=shards.val_prints)
    if ckpt is not None:
        checkpointing.check_resume_compatible(ckpt, model_config, tok, cfg.train_steps, arch_fields(module.GPTConfig), shards,
                                    cfg.allow_new_data)
    model_source.record_trained_source(source)  # this machine's tools then load the run's checkpoints as they are

    # ---- model and optimizers
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(module, model_config, cfg, device)
    dist_utils.broadcast_parameters(ctx, model)  # the same seed gives the same init everywhere; this makes it certain
    if cfg.shard_params:  # FSDP2 (gptlab/train/fsdp.py): from here on each rank holds row blocks of every parameter
        fsdp.shard_model(model, ctx)
    optimizers = build_recipe_optimizers(cfg, model, ctx.rank, ctx.world_size)
    if ckpt is not None:
        restore_training_state(ckpt, model, optimizers, train_loader, ctx, cfg.allow_new_data)
    grad_sync = (fsdp.ShardedGradients(model, optimizers) if cfg.shard_params else
                 GradientSync(model, optimizers, ctx.world_size))
    use_flex = cfg.attention == "flex"
    model_fwd = torch.compile(model, dynamic=False) if cfg.compile else model
    amp_dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else None

    def autocast():
        return torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()

    if cfg.device_batch_size == "auto":  # CUDA: the largest micro-batch that fits this GPU
        cfg.device_batch_size = probe_micro_batch(cfg, ctx, model, model_fwd, optimizers, tok.eot, use_flex, autocast)
        cfg.grad_acc_steps, cfg.device_batch_size = split_batch(cfg.batch_size, cfg.train_seq_len, ctx.world_size,
                                                                cfg.device_batch_size)
        train_loader.set_grad_acc_steps(cfg.grad_acc_steps)
    train_step = make_train_step(cfg, model, model_fwd, optimizers, grad_sync, train_loader, tok.eot, use_flex,
                                 autocast, device, module)
    byte_lengths = token_byte_lengths(tok.encoding, model.padded_vocab)
    val_rows = max(1, cfg.device_batch_size // cfg.val_seq_len)
    full_windows = model.final_windows()  # what window_blocks gives at the last step

    def due(every, step):
        return every and step % every == 0

    def whole_model():
        """The model for evaluations whose work differs between ranks (HellaSwag, samples): under --shard_params
        a plain copy with the whole weights (collective), else the model itself."""
        return (fsdp.evaluation_copy(model, functools.partial(build_model, module, model_config, cfg, device))
                if cfg.shard_params else contextlib.nullcontext(model))

    # ---- the loop; the run's folder, logs, metrics, checkpoints and results are gptlab.train.run.Run's
    with Run(cfg, ctx, repo_root=REPO_ROOT, model=model, model_config=model_config, model_source=source,
             optimizers=optimizers, train_loader=train_loader, tokenizer=tok, shards=shards, checkpoint=ckpt,
             warnings=[hellaswag_warning, *shards.warnings], extra_config={"padded_vocab": model.padded_vocab},
             resume_flags=chosen_flags(build_parser(), args, FRESH_ON_RESUME),
             metrics_columns=metrics_columns(suite.names()) if suite else ()) as run:

        def save(step):
            with stopper.deferred():  # a signal waits for the checkpoint to be complete
                for opt in optimizers:  # collective: rank 0 needs every rank's share of the optimizer state
                    if hasattr(opt, "gather_state"):
                        opt.gather_state()
                run.save_checkpoint(step, model, optimizers, train_loader)

        unreported = []  # steps whose figures are still on the device: (step, lr, sums, timer, new data pass)
        # the stop agreement (gptlab/train/stop.py): a row of every report's all-reduce carries each rank's stop
        # request and its wall time since the last report; the sum is the same on every rank, so all stop after the
        # same step, and all derive the same next forced report, about stop.STOP_CHECK_S later
        control = {"stop": 0, "next_check": run.start_step + 1, "since": time.monotonic()}

        def report():
            """One all-reduce and one host read for every unreported step, then their log lines and rows: quiet
            steps never wait for the GPU (modded-nanogpt reads nothing back between its log lines either)."""
            now = time.monotonic()
            # a SIGTERM counts more than all ranks' SIGINTs together: the sum says whether any rank got one
            request = {None: 0, signal.SIGINT: 1}.get(stopper.requested, ctx.world_size + 1)
            mine = torch.tensor([[request, now - control["since"], 0]], dtype=torch.float64, device=device)
            sums = dist_utils.all_reduce_sum(ctx, torch.cat([torch.stack([u[2] for u in unreported]), mine]))
            *rows, (requests, wall_s, _) = run.read(sums)
            control["stop"] = signal.SIGTERM if requests > ctx.world_size else signal.SIGINT if requests else 0
            step_wall_s = wall_s / ctx.world_size / len(unreported)
            control["next_check"] = unreported[-1][0] + max(1, int(stop.STOP_CHECK_S / max(step_wall_s, 1e-6)))
            control["since"] = now
            for (done, lr, _, timer, new_pass), (loss, pairs_long, pairs_short) in zip(unreported, rows):
                if new_pass:
                    run.log(f"step {done}: the training data ran out; pass {new_pass} over it begins")
                run.check_loss(done, loss)  # NaN/inf: the run stops, recorded as failed, before any checkpoint
                flops = sum(module.training_flops(model, cfg.batch_size, {"long": pairs_long, "short": pairs_short}))
                run.log_step(done, loss, lr, timer.seconds(), flops)
            unreported.clear()

        stopper.begin_steps()
        for step in range(run.start_step, cfg.train_steps + 1):
            last = step == cfg.train_steps
            if last:
                if (cfg.save_model or cfg.checkpoint_every) and step > run.start_step:
                    save(step)  # before the final evaluations: a stop in them resumes here and runs only them
                stopper.end_steps()  # a signal from here on stops at once (the final evaluations)
            eval_windows = full_windows if last else step_windows(step, cfg, model, module)
            # -- evaluations (not counted in the train time)
            if last or due(cfg.val_loss_every, step):
                with run.evaluating(model):
                    loss_fn = make_loss_fn(model, model_fwd, tok.eot, eval_windows, use_flex, autocast)
                    val_loss, val_bpb = evaluate_val(loss_fn, val_set, val_rows, byte_lengths, ctx,
                                                     lockstep=cfg.shard_params)
                run.log_eval(step, val_loss=val_loss, val_bpb=val_bpb)
            if last or (due(cfg.hellaswag_every, step) and step > 0):  # a resume redoes its start step's, as val
                with run.evaluating(model), whole_model() as plain:
                    # eager model + dense SDPA masks: HellaSwag's varying shapes would make a compiled model recompile
                    scorer = model_source.logits_fn(plain, tok.eot, model.vocab_size, eval_windows, amp_dtype)
                    hellaswag = evaluate_hellaswag_in_run(scorer, tok.encoding, cfg.hellaswag_path,
                                                          limit=cfg.hellaswag_limit, padded_vocab=model.padded_vocab,
                                                          ctx=ctx, log=run.log, seq_multiple=module.SEQ_MULTIPLE,
                                                          prints=eval_files)
                run.log_hellaswag(step, hellaswag)
            if suite and (last or (due(cfg.evals_every, step) and step > 0)):  # as HellaSwag: a resume redoes its
                with run.evaluating(model), whole_model() as plain:               # start step's
                    scorer = model_source.logits_fn(plain, tok.eot, model.vocab_size, eval_windows, amp_dtype)
                    figures = suite.score(scorer, device=device, block=model_geometry(plain)[0],
                                          window=min(eval_windows), padded_vocab=model.padded_vocab, ctx=ctx,
                                          progress=ctx.is_main)
                    run.log_evals(step, figures, metrics_row(figures), write_examples=write_final)
            if last:
                break

            # -- one optimizer step; its figures stay on the device until the next report
            epoch = train_loader.epoch
            timer = run.step_timer()
            sums, lr_mult = train_step(step)
            timer.stop()
            done = step + 1
            unreported.append((done, lr_mult, sums, timer, train_loader.epoch + 1 if train_loader.epoch > epoch else 0))
            if (due(cfg.log_every, done) or done in (cfg.train_steps, run.start_step + 1, run.start_step + 2)
                    or due(cfg.checkpoint_every, done) or due(cfg.val_loss_every, done)
                    or due(cfg.hellaswag_every, done) or (suite and due(cfg.evals_every, done))
                    or (ctx.is_distributed and done >= control["next_check"])):
                report()  # the first two steps: a line and the time estimate; the rest: see `control`
            periodic = due(cfg.checkpoint_every, done) and done < cfg.train_steps  # the last step's: see `last`
            if periodic:
                save(done)
            # a signal: one process stops after the step it arrived in, ranks after the step they agreed on (the
            # last step too: its checkpoint resumes into the final evaluations alone)
            stop_now = control["stop"] if ctx.is_distributed else stopper.requested
            if stop_now:
                if unreported:
                    report()
                run.log(f"{signal.Signals(stop_now).name} received: stopping after step {done} with a checkpoint")
                if not periodic:
                    save(done)
                raise StopRequested(stop_now)

        run.end_training()  # peak memory, speed
        if cfg.sample_tokens:
            model.eval()
            with whole_model() as plain:
                if ctx.is_main:
                    scorer = model_source.logits_fn(plain, tok.eot, model.vocab_size, full_windows, amp_dtype)
                    for _, text in sample_continuations(scorer, tok.encoding, cfg.sample_tokens, cfg.seed, device):
                        run.log(f"sample: {text!r}")
        return run.finish(val_loss, val_bpb, hellaswag)


if __name__ == "__main__":
    run_cli(main)
