"""Every flag of a training run in one place: the model's (one per field of the architectures' GPTConfig), the
parallel layout's, the run's bookkeeping (folder, checkpoints, resume, console), and parsing them (a --config file,
a --preset, a --resume checkpoint's flags). What the flags then mean together is gptlab/train/config.py's."""
import argparse
import dataclasses
import sys
import unicodedata

from gptlab.checkpoint import checkpointing
from gptlab.core.cli import FlagValueError, float_in, non_negative_int, path
from gptlab.core.config_file import expand_config
from gptlab.core.errors import UserError
from gptlab.train import records, resume_code


_TYPES = {"int": int, "float": float, "bool": bool, "str": str}  # annotations written as strings


def _flag_type(f):
    return f.type if isinstance(f.type, type) else _TYPES.get(str(f.type), str)


def model_flags(config_class):
    """The config dataclass's fields that are flags (metadata flag=False leaves one out)."""
    return [f for f in dataclasses.fields(config_class) if f.metadata.get("flag", True)]


def add_model_flags(parser, config_class, *others, names=None):
    """A --flag per field of the model's config dataclass, with its default and help (bool fields get
    --name / --no-name). With other config classes (the other architectures', named by `names`, the first
    class's first), the flags of them all, each defaulting to None, their help naming each architecture's value:
    apply_model_flags then fills in the chosen architecture's defaults and refuses the flags it does not have."""
    classes = (config_class, *others)
    names = list(names or [c.__module__ for c in classes])
    if not others:
        g = parser.add_argument_group("model (fields of GPTConfig in model.py)")
    else:
        g = parser.add_argument_group("model (fields of the --arch module's GPTConfig, each with that module's value "
                                      "unless given)")
    seen = set()
    for f in [f for c in classes for f in model_flags(c)]:
        if f.name in seen:
            continue
        seen.add(f.name)
        kind = _flag_type(f)
        default = None if others or f.default is dataclasses.MISSING else f.default
        text = f.metadata.get("help")
        if others:
            text = _help_with_values(text, f.name, classes, names)
        if kind is bool:
            g.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction, default=default, help=text)
        else:
            g.add_argument(f"--{f.name}", type=kind, default=default, help=text)


def _help_with_values(text, name, classes, names):
    """A flag's help with each architecture's value: "... (gpt2: 12) (default: 12)", the default architecture's
    last; "(gpt2 only)" for a field of one architecture; switches say on or off."""
    values = {}
    for arch, c in zip(names, classes):
        field = next((f for f in dataclasses.fields(c) if f.name == name), None)
        if field is not None:
            values[arch] = None if field.default is dataclasses.MISSING else field.default
    shown = lambda v: ("on" if v else "off") if isinstance(v, bool) else v  # noqa: E731
    parts = [f"{arch}: {shown(v)}" for arch, v in values.items() if arch != names[0] and v is not None]
    text = (text or "") + (f" ({', '.join(values)} only)" if len(values) < len(names) else "")
    text += f" ({'; '.join(parts)})" if parts else ""
    first = values.get(names[0])
    if first is not None:
        text += f" (default: {shown(first)})" if not isinstance(first, bool) else f" ({names[0]}: {shown(first)})"
    return text


def apply_model_flags(args, config_class, all_classes, arch_name, preset=None):
    """After add_model_flags(parser, *all_classes): the chosen architecture's fields get its defaults where not
    set; a field of another architecture set (on the command line or by --config) is one UserError, and unset or
    at the value the --preset gave it (`preset`: its settings) it is dropped from args (so the run records only its
    own architecture's fields)."""
    own = {f.name: f for f in model_flags(config_class)}
    for name in dict.fromkeys(f.name for c in all_classes for f in model_flags(c)):
        value = getattr(args, name, None)
        if name in own:
            if value is None and own[name].default is not dataclasses.MISSING:
                setattr(args, name, own[name].default)
        elif value is not None and (preset or {}).get(name) != value:
            raise UserError(f"--{name} is not a setting of --arch {arch_name} (its GPTConfig has no {name}); drop "
                            f"it, or choose the architecture that has it")
        elif hasattr(args, name):
            delattr(args, name)


LAYOUT_FLAGS = ("tp", "pp", "pp_microbatches")  # they depend on the machine: fresh on --resume (train_gpt.py)


def add_layout_flags(group):
    """--tp, --pp, --pp_microbatches (docs/training.md "Tensor and pipeline parallelism")."""
    from gptlab.core.cli import positive_int

    group.add_argument("--tp", type=positive_int, default=1,
                       help="tensor parallelism: ranks that split every block's heads and MLP between them "
                       "(DTensor; the ranks divide by it, the rest is data parallel)")
    group.add_argument("--pp", type=positive_int, default=1,
                       help="pipeline parallelism: stages the blocks are split into (torch.distributed.pipelining)")
    group.add_argument("--pp_microbatches", type=positive_int, default=None,
                       help="--pp: micro-batches per step through the pipeline (at least --pp; default: 2 x --pp)")


def add_run_flags(parser):
    """The flags of the run's bookkeeping (folder, checkpoints, resume, console)."""
    g = parser.add_argument_group("run")
    g.add_argument("--model_name", type=run_name, default="GPT",
                   help="the run folder is experiments_dir/{YYYYmmdd_HHMMSS}_{model_name}")
    g.add_argument("--experiments_dir", type=path, default=records.EXPERIMENTS_DIR, help="where run folders go")
    g.add_argument("--save_model", action="store_true", help="save a checkpoint at the end")
    g.add_argument("--checkpoint_every", type=non_negative_int, default=0,
                   help="save a checkpoint every N steps (0: never)")
    g.add_argument("--resume", type=path, default=None, metavar="PATH",
                   help="continue from a checkpoint (.pt, or a --shard_params folder)")
    g.add_argument("--log_every", type=non_negative_int, default=10, help="print a train line every N steps (the loop "
                   "reads its figures back from the GPU only then, at evaluations and at checkpoints)")
    g.add_argument("--trust_model_code", action="store_true", help="--resume from a checkpoint whose model code "
                   "differs from model.py and was trained on another machine: run its code (read it first)")
    g.add_argument("--allow_new_data", action="store_true", help="--resume on shards other than the checkpoint's "
                   "(refused by default: its curve would continue on other data)")
    g.add_argument("--dry_run", action="store_true", help="print the resolved configuration as JSON and exit: no "
                   "run folder, no data read")
    g.add_argument("--usd_per_gpu_hour", type=float_in(0, message="{value} must be a price >= 0 (dollars per GPU-hour, "
                                                                  "e.g. 2.5)"), default=None, help="price of one GPU (on CPU: one process) for "
                   "an hour: results.json gets cost_usd = GPU-hours x price (default: gptlab/train/cost.py's table of "
                   "typical rental prices by GPU name; none on CPU)")
    g.add_argument("--tensorboard", action="store_true", default=None, help="also write the run's scalars as "
                   "TensorBoard events in its folder (tensorboard --logdir experiments; pip install tensorboard)")
    g.add_argument("--wandb", default=None, metavar="PROJECT", help="also log the run's scalars to this Weights & "
                   "Biases project (offline when not logged in or WANDB_MODE=offline; pip install wandb)")


MODEL_NAME_MAX_BYTES = 200  # the folder's name adds a 15-character stamp and maybe _N: within a file name's 255 bytes


def run_name(text):
    """--model_name: a plain folder name (no slashes, not hidden, no control characters such as a newline, which
    would split a LEADERBOARD.md row), at most MODEL_NAME_MAX_BYTES bytes of UTF-8."""
    shown = repr(text) if len(text) <= 60 else repr(text[:40]) + f"... ({len(text)} characters)"
    if not text or any(c in text for c in "/\\") or text.startswith("."):
        raise FlagValueError(f"{shown} must be a plain folder name (no slashes, not hidden)")
    if any(unicodedata.category(c)[0] == "C" for c in text):
        raise FlagValueError(f"{shown} must not hold control characters (a newline, a tab...)")
    if len(text.encode("utf-8", "surrogatepass")) > MODEL_NAME_MAX_BYTES:
        raise FlagValueError(f"{shown} is too long: the run folder's name must fit a file name; use at most "
                             f"{MODEL_NAME_MAX_BYTES} bytes")
    return text


# run flags that a --resume run never takes from its checkpoint
_FRESH_RUN_FLAGS = ("config", "resume", "log_every", "dry_run", "allow_new_data", "usd_per_gpu_hour", "tensorboard", "wandb",
                    "trust_model_code")


# flags a --resume run cannot change: the checkpoint's state was made with them and the record would misname it
_RUN_IDENTITY_FLAGS = ("seed",)


def chosen_flags(parser, args, names):
    """The flags among `names` (those a resume works out afresh: fresh_on_resume) that this run set, on its command
    line or by a --preset, to other than their default (auto), as command-line words: a resume command repeats them
    so the resumed run has this run's numbers and memory, and the resuming machine may still give others. --device
    keeps its type only (cuda:N numbers one machine's GPUs)."""
    words = []
    for action in parser._actions:
        key = action.dest
        value = getattr(args, key, action.default)
        if key not in names or not action.option_strings or value == action.default:
            continue
        flag = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            words.append(flag if value else "--no-" + flag[2:])
        elif action.nargs == 0:  # store_true
            words += [flag] if value else []
        else:
            words += [flag, str(value).split(":")[0] if key == "device" else str(value)]
    return words


def explicit_flags(build_parser, argv):
    """Names of the flags given on the command line (not left at their defaults)."""
    probe = build_parser()
    for action in probe._actions:
        action.default = argparse.SUPPRESS
    return set(vars(probe.parse_args(argv)))


def parse_flags(build_parser, argv=None, fresh_on_resume=(), presets=None):
    """(args, checkpoint or None). --config FILE (when the parser has it) puts the file's flags before the command
    line (gptlab.core.config_file). --preset NAME (when the parser has it) sets the defaults from presets[NAME], so
    flags given beside it win. With --resume PATH every flag not given again is taken from the checkpoint's
    run, except `fresh_on_resume` (hardware-dependent flags, worked out afresh for the machine resuming);
    args.from_checkpoint lists the flags taken."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if any(a.dest == "config" for a in parser._actions):  # --config FILE: its flags first, the command line wins
        argv = expand_config(parser, argv)
    args = parser.parse_args(argv)
    if getattr(args, "preset", None):
        parser.set_defaults(**presets[args.preset])
        args = parser.parse_args(argv)
    args.from_checkpoint = []
    if not args.resume:
        return args, None
    # a sharded checkpoint's weights are read by each rank's share later (restore_training_state)
    ckpt = checkpointing.load_checkpoint(args.resume, load_weights=False,
                                         trust_code=getattr(args, "trust_model_code", False))
    resume_code.check_training_code(args.resume)  # its optimizers and schedule are its train_gpt.py's
    given = explicit_flags(build_parser, argv)  # a --config file's flags count as given
    for key in _RUN_IDENTITY_FLAGS:  # the checkpoint's weights and data order already follow its value
        if key in given and key in ckpt["args"] and getattr(args, key) != ckpt["args"][key]:
            raise UserError(f"--{key} {getattr(args, key)} differs from the --resume checkpoint's {ckpt['args'][key]}: "
                            f"a resumed run continues its run (initialisation, data order, seed group); drop --{key}, "
                            "or start a new run without --resume")
    fresh = set(fresh_on_resume) | set(_FRESH_RUN_FLAGS)
    for action in parser._actions:
        key = action.dest
        if (action.option_strings and key not in fresh and key not in given and key in ckpt["args"]
                and getattr(args, key) != ckpt["args"][key]):
            setattr(args, key, ckpt["args"][key])
            args.from_checkpoint.append(key)
    return args, ckpt


