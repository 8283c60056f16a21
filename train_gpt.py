"""Train a GPT on token shards: the research surface (flags, optimizers, schedules, the loop); the architecture is
the --arch module's: model.py (modded, the default: a modded-nanogpt-style GPT trained with Muon), gpt2.py (GPT-2
trained with AdamW and warm-up + cosine, nanoGPT / llm.c's recipe) or llama.py (Llama 3, the same AdamW recipe).
Each module names its recipe (OPTIMIZER). --init_from starts from a transformers GPT-2 or Llama checkpoint.

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

import torch

import model as arch
from gptlab.checkpoint import model_source
from gptlab.core import distributed as dist_utils
from gptlab.core.cli import (ArgumentParser, HelpFormatter, float_in, fraction, int_in, non_negative_int, or_auto,
                             positive_int, path)
from gptlab.core.errors import UserError, run_cli
from gptlab.dataset.hellaswag_file import DEFAULT_PATH as HELLASWAG_DEFAULT_PATH
from gptlab.dataset.loader import to_device
from gptlab.evals.bpb import evaluate_val, token_byte_lengths
from gptlab.evals.file_prints import FilePrints
from gptlab.evals.hellaswag import check_hellaswag_file, evaluate_hellaswag_in_run
from gptlab.evals.in_run import RunEvals, metrics_columns, metrics_row, write_final
from gptlab.evals.score import model_geometry
from gptlab.evals.task_spec import DATA_DIR as EVALS_DATA_DIR
from gptlab.export.generate import sample_continuations
from gptlab.train import environment, fsdp, init_from, mup, parallel, perf_estimate, pipeline, stop, tensor_parallel
from gptlab.train.batching import choose_micro_batch, micro_batch_candidates, probe_batch, split_batch
from gptlab.train.comm import MatrixOwners, ShardedAdam
from gptlab.train.config import resolve_config
from gptlab.train.flags import (LAYOUT_FLAGS, add_layout_flags, add_model_flags, add_run_flags, apply_model_flags,
                                chosen_flags, model_flags, parse_flags)
from gptlab.train.inputs import open_run_inputs
from gptlab.train.run import Run, restore_training_state
from gptlab.train.step_reports import due

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
    # the quickstart's budget for Llama 3 (llama.py): 6 x 128, 4 query heads sharing 2 key/value heads, SwiGLU 384
    # wide; AdamW 1e-3 with 12 warm-up steps, cosine to 0.1x (at 3e-3 its loss stayed on the unigram plateau,
    # val bpb 3.466 at steps 20 and 40)
    "llama-quickstart": dict(arch="llama", model_dim=128, num_heads=4, num_kv_heads=2, num_layers=6, multiple_of=128,
                             train_seq_len=256, val_seq_len=256, batch_size=4096, device_batch_size=4096,
                             train_steps=120, lr=1e-3, warmup_steps=12, final_lr_frac=0.1, val_loss_every=20,
                             val_steps=4, val_batch_size=4096, hellaswag_limit=1000),
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
    g.add_argument("--tokenizer", type=path, default=None,
                   help="tokenizer .pkl (a path or a name inside tokenizers/), or GPT-2's / Llama 3's files as "
                        "released, or hf:ORG/NAME (docs/tokenizer.md)")
    g.add_argument("--train_seq_len", type=positive_int, default=1024,
                   help="tokens per training row (multiple of 128)")
    g.add_argument("--val_seq_len", type=positive_int, default=None,
                   help="tokens per validation row (a multiple of the model's SEQ_MULTIPLE; default: 1024, or "
                        "--train_seq_len where the model learns a position table)")
    g = p.add_argument_group("architecture")
    g.add_argument("--arch", choices=list(model_source.ARCHITECTURES), default=None,
                   help="the model: " + ", ".join(f"{name} ({file})" for name, file in model_source.ARCHITECTURES.items())
                   + f" (default: {model_source.DEFAULT_ARCH}; a --resume run keeps its checkpoint's, an --init_from "
                   "run takes its checkpoint's)")
    g.add_argument("--init_from", default=None, metavar="HUB_ID_OR_FOLDER",
                   help="start from a transformers checkpoint's weights (a folder with config.json and "
                   "model.safetensors, or a Hub id through HF_ENDPOINT / HF_HUB_OFFLINE / HF_HOME): its model "
                   "type sets --arch and its config the model's shape (gptlab/train/init_from.py)")
    # --vocab_size, --num_layers, ...: one per field of the architectures' GPTConfig (each --arch takes its own)
    add_model_flags(p, *architecture_configs(), names=list(model_source.ARCHITECTURES))
    mup.add_flags(p)  # --mup, --mup_base_width, --mup_base_heads
    g = p.add_argument_group("optimization")
    g.add_argument("--optimizer", choices=list(RECIPES), default=None,
                   help="the recipe: muon (Muon for the blocks' matrices, Adam for the rest, constant then linear "
                   "cooldown) or adamw (AdamW, warm-up + cosine); default: the architecture's own (modded: muon, "
                   "gpt2 and llama: adamw)")
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
    add_layout_flags(g)  # --tp, --pp, --pp_microbatches
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
    return [module.GPTConfig for module in architecture_modules().values()]


def architecture_modules():
    """{--arch name: today's module}, the default's first."""
    return {arch: model_source.current_module(file) for arch, file in model_source.ARCHITECTURES.items()}


def recipe_of(module, args=None):
    """The optimizer recipe: --optimizer where given, else the module's own (OPTIMIZER; none: muon)."""
    return getattr(args, "optimizer", None) or getattr(module, "OPTIMIZER", "muon")


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
    recipe = recipe_of(module, args)
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
                                f"{recipe}; drop it (or pass --optimizer {other})")
            if hasattr(args, name):
                delattr(args, name)


def choose_module(args, ckpt=None):
    """(module, model source) the run trains: --arch's module file as it is today, or for --resume the source its
    checkpoint carries (whatever the files say today); args then hold that architecture's fields and recipe."""
    preset = PRESETS.get(getattr(args, "preset", None)) or {}  # (a preset's settings of the other kind: dropped)
    if ckpt is None:
        if getattr(args, "init_from", None):  # the checkpoint's architecture and shape
            init = init_from.open_checkpoint(args.init_from, architecture_modules())
            init_from.apply_flags(args, init, [f.name for f in model_flags(architecture_modules()[init.arch].GPTConfig)],
                                  preset)
        args.arch = args.arch or model_source.DEFAULT_ARCH
        source = model_source.current_source(model_source.arch_file(args.arch))
        module = model_source.current_module(source["file"])
    else:
        source = ckpt["model_source"]
        module = model_source.module_for(source, args.resume, args.trust_model_code)
        was = model_source.arch_of(source)
        if was is not None and args.arch is not None and was != args.arch:
            raise UserError(f"--arch {args.arch} differs from the --resume checkpoint's {was}: a resumed run trains "
                            "its checkpoint's model; drop --arch")
        args.arch = was or args.arch or model_source.DEFAULT_ARCH
        for key, value in ckpt["model_config"].items():
            if args.__dict__.get(key) is None:
                args.__dict__[key] = value  # a field today's module no longer has
    apply_model_flags(args, module.GPTConfig, architecture_configs(), args.arch, preset)
    apply_recipe(args, module, preset)
    mup.resolve(args, module)
    return module, source


# a --resume run takes every other flag from its checkpoint unless given again; these depend on the machine. Each
# shapes the run's numbers or memory, so a run's recorded resume command repeats those it chose (flags.chosen_flags)
FRESH_ON_RESUME = ("device", "dtype", "compile", "attention", "device_batch_size", "grad_acc_steps", "shard_params",
                   *LAYOUT_FLAGS)


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


class Muon(torch.optim.Optimizer):
    """MomentUm Orthogonalized by Newton–Schulz, distributed as in record #26: gptlab.train.comm.MatrixOwners deals
    same-shape matrices out one per rank, each rank updates only its own (receiving their rank-summed gradients)
    and the updated matrices are all-gathered. Every matrix's update is computed exactly as on one rank, so the
    result does not depend on the world size. Momentum lives on the owner; gather_state() (collective) copies it
    everywhere before a checkpoint, so any rank's checkpoint resumes on any world size."""

    def __init__(self, params, lr=0.05, momentum=0.95, ns_steps=5, rank=0, world_size=1):
        super().__init__(params, dict(lr=lr, momentum=momentum, ns_steps=ns_steps))
        # who computes which matrix, and the collectives that move them (gptlab/train/comm.py): owner ranks of whole
        # matrices, or under --shard_params / --tp whole matrices gathered from their blocks
        self.movers = (tensor_parallel.whole_matrices(self.param_groups, rank, world_size)
                       if any(fsdp.is_sharded(p) for g in self.param_groups for p in g["params"]) else
                       MatrixOwners(self.param_groups, rank, world_size))

    @torch.no_grad()
    def step(self):
        group_of = {p: group for group in self.param_groups for p in group["params"]}

        def look_ahead(p, grad):  # momentum and Nesterov look-ahead, on the gradient this rank holds of p
            return nesterov_look_ahead(grad, fsdp.local(self._momentum(p)), group_of[p]["momentum"])

        def apply(p, update):
            fsdp.local(p).add_(update.to(p.dtype), alpha=-group_of[p]["lr"] * muon_lr_factor(p.shape))

        self.movers.step(look_ahead, lambda stack, g: orthogonalize(stack, self.param_groups[g]["ns_steps"]), apply)

    def _momentum(self, p):
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
        return state["momentum_buffer"]

    def gather_state(self):
        """Collective: give every rank every matrix's momentum buffer (each owner's is the current one)."""
        if isinstance(self.movers, MatrixOwners):  # (under --shard_params / --tp each rank keeps its blocks)
            self.movers.gather(self._momentum)


MUON_ADAM_LRS = dict(head=0.22, embeddings=0.6, scalars=0.04)  # the muon recipe's Adam groups (modded-nanogpt)


def build_optimizers(model, rank=0, world_size=1):
    """Muon for the hidden matrices; Adam for embeddings, head and scalars (learning rates as in modded-nanogpt's
    FlexAttention-era records). torch's Adam: fused on CUDA (its step counts stay on the GPU: no host sync; the
    custom Adam this replaces was kept for that, but no test showed torch's syncing), foreach on CPU (bit for bit
    the update the committed baselines were trained with); on several ranks its state and update are sharded
    (ShardedAdam), as Muon's are; under --shard_params the parameters are shards already and torch's Adam updates
    them as they are. The groups come from the model's structure, so the same recipe trains any architecture
    (--optimizer muon with --arch gpt2 / llama): the blocks' matrices, the nn.Embedding tables (a head tied to one
    is held there once), the head, the vectors and scalars."""
    hidden_matrices = [p for n, p in model.blocks.named_parameters() if p.ndim >= 2]
    embed_params = [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    scalar_params = [p for p in model.parameters() if p.ndim < 2]
    head_params = [p for p in [model.lm_head.weight] if not any(p is q for q in embed_params)]
    # Adam's learning rates: modded-nanogpt's; another architecture may name its own (its module's MUON_ADAM_LRS)
    lrs = {**MUON_ADAM_LRS, **getattr(perf_estimate.model_module(model), "MUON_ADAM_LRS", {})}
    adam_groups = [dict(params=head_params, lr=lrs["head"], name="head"),
                   dict(params=embed_params, lr=lrs["embeddings"], name="embeddings"),
                   dict(params=scalar_params, lr=lrs["scalars"], name="scalars")]
    adam_groups = [g for g in adam_groups if g["params"]]  # (a tied head: no group of its own)
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
    one_kind = not tensor_parallel.mixed(params)  # (--tp: whole and split weights; torch's per-tensor loop then)
    adamw = torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8,
                              fused=cuda and one_kind, foreach=not cuda and one_kind)
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
                    module=arch, pipe=None):
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
        if pipe is not None:  # --pp: the schedule runs every micro-batch through the stages (gptlab/train/pipeline.py)
            grad_sync.armed = False  # (the sum over ranks starts after it, in finish)
            loss_total, pairs = pipe.run([tuple(to_device(a, device) for a in b) for b in batches], windows, eot,
                                         use_flex, autocast, module.attention_pairs)
            batches = []
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
            tensor_parallel.clip_grad_norm_(model.parameters(), grad_clip)  # (torch's, for --tp's mixed tensors too)
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
        # (the TP ranks of a replica each hold its whole loss: the reports' sum over ranks counts it once)
        return torch.cat([loss_total.double().view(1), pairs.double()]) / getattr(cfg, "tp", 1), lr_mult
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
    guess = perf_estimate.model_module(model).activation_bytes_per_token(model.config, model.padded_vocab,
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
    if args.dry_run or args.tp > 1 or args.pp > 1 or args.pp_microbatches is not None:
        # every flag checked, a parallel layout included, before any process group, folder or data
        checked = argparse.Namespace(**vars(args))  # (train() resolves its own from args)
        module, _ = choose_module(checked, ckpt)
        cfg = resolve_config(checked, int(os.environ.get("WORLD_SIZE", "1")), dist_utils.resolve_device(args.device),
                             module)
        if args.dry_run:  # the resolved configuration
            print(json.dumps(vars(cfg), indent=2, default=str))
            return vars(cfg)
    with stop.StopSignals():  # SIGTERM / Ctrl-C: stop after a step, with a checkpoint (gptlab/train/stop.py)
        ctx = dist_utils.setup(args.device)
        try:
            return train(args, ctx, ckpt)
        finally:
            dist_utils.cleanup(ctx)


def open_evaluations(cfg, tok, warnings):
    """(the --evals suite or None, HellaSwag's file fingerprint), each file read and checked now: a missing or bad
    one is refused before training (a missing default HellaSwag file only warns: appended to warnings)."""
    warnings.append(check_hellaswag_file(cfg.hellaswag_path, cfg.hellaswag_limit,
                                         required=cfg.hellaswag_path != HELLASWAG_DEFAULT_PATH))
    eval_files = FilePrints([cfg.hellaswag_path] if cfg.hellaswag_limit != 0 else [])  # each eval checks its file
    suite = (RunEvals(cfg.evals, limit=cfg.evals_limit, data_dir=cfg.evals_data_dir, tasks_dir=cfg.evals_tasks_dir,
                      encoding=tok.encoding) if cfg.evals else None)
    return suite, eval_files


def autocast_for(device, amp_dtype):
    """The forward passes' autocast: to amp_dtype (bf16 under --dtype bfloat16), nothing when it is None."""
    if amp_dtype is not None:
        return torch.autocast(device.type, dtype=amp_dtype)
    return contextlib.nullcontext()


def whole_model(model, rebuild):
    """The model for evaluations whose work differs between ranks (HellaSwag, samples): under --shard_params a plain
    copy with the whole weights, built by rebuild() (collective), else the model itself."""
    return fsdp.evaluation_copy(model, rebuild) if fsdp.is_sharded_model(model) else contextlib.nullcontext(model)


def log_samples(run, model, rebuild, tok, windows, amp_dtype, cfg):
    """cfg.sample_tokens tokens after each of sample_continuations' prompts, in the run's log (rank 0)."""
    model.eval()
    with whole_model(model, rebuild) as plain:
        if run.ctx.is_main:
            scorer = model_source.logits_fn(plain, tok.eot, model.vocab_size, windows, amp_dtype)
            for _, text in sample_continuations(scorer, tok.encoding, cfg.sample_tokens, cfg.seed, run.ctx.device):
                run.log(f"sample: {text!r}")


def train(args, ctx, ckpt=None):
    """One run on this rank; `ckpt` is the --resume checkpoint parse_flags loaded. Returns the final figures."""
    device = ctx.device
    # --arch's module; a resumed run trains the model its checkpoint carries (today's file when it is the same)
    module, source = choose_module(args, ckpt)
    if ckpt is not None:  # its weights must be the ones that model builds, before anything is allocated
        model_source.check_weights_fit(module, ckpt["model_config"], ckpt["model"], args.resume)
    cfg = resolve_config(args, ctx.world_size, device, module)
    dp_ctx = tensor_parallel.data_parallel(ctx, cfg.tp * cfg.pp)  # the data's ranks (TP ranks, PP stages share)
    data = open_run_inputs(cfg, ctx, module, source, ckpt, dp_ctx)  # tokenizer, shards, loaders: checked, before a
    tok, model_config = data.tok, data.model_config                 # run folder exists
    suite, eval_files = open_evaluations(cfg, tok, data.warnings)
    model_source.record_trained_source(source)  # this machine's tools then load the run's checkpoints as they are

    # ---- model and optimizers
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(module, model_config, cfg, device)
    if data.init is not None:  # --init_from: a transformers checkpoint's weights
        init_from.load_weights(data.init, module, model)
    dist_utils.broadcast_parameters(ctx, model)  # the same seed gives the same init everywhere; this makes it certain
    layout = parallel.distribute(model, module, ctx, cfg)  # --tp: heads and MLP units; --shard_params: row blocks
    optimizers = build_recipe_optimizers(cfg, model, ctx.rank, ctx.world_size)
    if ckpt is not None:
        restore_training_state(ckpt, model, optimizers, data.train_loader, ctx, cfg.allow_new_data)
    grad_sync = parallel.gradient_sync(model, optimizers, ctx, cfg, layout)  # sums gradients over ranks
    use_flex, amp_dtype = cfg.attention == "flex", torch.bfloat16 if cfg.dtype == "bfloat16" else None
    model_fwd = torch.compile(model, dynamic=False) if cfg.compile else model
    autocast = functools.partial(autocast_for, device, amp_dtype)
    if cfg.device_batch_size == "auto":  # CUDA: the largest micro-batch that fits this GPU
        cfg.grad_acc_steps, cfg.device_batch_size = split_batch(cfg.batch_size, cfg.train_seq_len, dp_ctx.world_size, (
            probe_micro_batch(cfg, dp_ctx, model, model_fwd, optimizers, tok.eot, use_flex, autocast)))
        data.train_loader.set_grad_acc_steps(cfg.grad_acc_steps)
    pipe = pipeline.Pipeline(model, module, ctx, cfg, tok.eot, use_flex, autocast) if cfg.pp > 1 else None
    train_step = make_train_step(cfg, model, model_fwd, optimizers, grad_sync, data.train_loader, tok.eot, use_flex,
                                 autocast, device, module, pipe)
    byte_lengths = token_byte_lengths(tok.encoding, model.padded_vocab)
    val_rows = max(1, cfg.device_batch_size // cfg.val_seq_len)
    rebuild = functools.partial(build_model, module, model_config, cfg, device)  # (whole_model)

    # ---- the loop; the run's folder, logs, metrics, checkpoints, reports and stops are gptlab.train.run.Run's
    with Run(cfg, ctx, repo_root=REPO_ROOT, model=model, model_config=model_config, model_source=source,
             optimizers=optimizers, train_loader=data.train_loader, tokenizer=tok, shards=data.shards,
             checkpoint=ckpt, warnings=data.warnings, extra_config={"padded_vocab": model.padded_vocab},
             resume_flags=chosen_flags(build_parser(), args, FRESH_ON_RESUME),
             metrics_columns=metrics_columns(suite.names()) if suite else (),
             flops_of=functools.partial(module.training_flops, model, cfg.batch_size)) as run:
        for step in run.steps():
            last = step == cfg.train_steps
            if last:
                run.begin_final_evaluations(step)  # the final checkpoint; a signal now stops at once
            windows = model.final_windows() if last else step_windows(step, cfg, model, module)
            # -- evaluations (not counted in the train time); HellaSwag and --evals: a resume redoes its start step's
            if last or due(cfg.val_loss_every, step):
                with run.evaluating(model):
                    loss_fn = make_loss_fn(model, model_fwd, tok.eot, windows, use_flex, autocast)
                    val_loss, val_bpb = evaluate_val(loss_fn, data.val_set, val_rows, byte_lengths, dp_ctx,
                                                     lockstep=cfg.shard_params)
                run.log_eval(step, val_loss=val_loss, val_bpb=val_bpb)
            if last or (due(cfg.hellaswag_every, step) and step > 0):
                with run.evaluating(model), whole_model(model, rebuild) as plain:
                    # eager model + dense SDPA masks: HellaSwag's varying shapes would make a compiled model recompile
                    scorer = model_source.logits_fn(plain, tok.eot, model.vocab_size, windows, amp_dtype)
                    hellaswag = evaluate_hellaswag_in_run(scorer, tok.encoding, cfg.hellaswag_path,
                                                          limit=cfg.hellaswag_limit, padded_vocab=model.padded_vocab,
                                                          ctx=ctx, log=run.log, seq_multiple=module.SEQ_MULTIPLE,
                                                          prints=eval_files)
                run.log_hellaswag(step, hellaswag)
            if suite and (last or (due(cfg.evals_every, step) and step > 0)):
                with run.evaluating(model), whole_model(model, rebuild) as plain:
                    scorer = model_source.logits_fn(plain, tok.eot, model.vocab_size, windows, amp_dtype)
                    figures = suite.score(scorer, device=device, block=model_geometry(plain)[0], window=min(windows),
                                          padded_vocab=model.padded_vocab, ctx=ctx, progress=ctx.is_main)
                run.log_evals(step, figures, metrics_row(figures), write_examples=write_final)
            if last:
                break
            # -- one optimizer step; its figures stay on the device until the run reports them
            timer = run.step_timer()
            sums, lr_mult = train_step(step)
            timer.stop()
            run.end_step(step + 1, lr_mult, sums, timer)  # reports, checkpoints and stops when due

        run.end_training()  # peak memory, speed
        if cfg.sample_tokens:  # a few continuations in the log
            log_samples(run, model, rebuild, tok, windows, amp_dtype, cfg)
        return run.finish(val_loss, val_bpb, hellaswag)


if __name__ == "__main__":
    run_cli(main)
