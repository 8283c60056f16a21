"""train_gpt.py --init_from HUB_ID_OR_FOLDER: start a run from a transformers checkpoint (continued pre-training, or
a public model in our tools) instead of a random initialisation.

The checkpoint is a folder holding config.json and model.safetensors (or model.safetensors.index.json and its
shards), as save_pretrained writes it, or a Hub repository id (org/name) whose files huggingface_hub fetches
through its usual settings (HF_ENDPOINT, HF_HUB_OFFLINE, HF_HOME, HF_TOKEN). Its config.json's model_type picks
the architecture: the module of ARCHITECTURES whose TRANSFORMERS_MODEL_TYPE it is; that module's
transformers_config gives the model's fields and transformers_import its weights. Nothing here names an
architecture. Every problem (no such folder or repository, another model type, a setting the module cannot hold,
a flag that contradicts the checkpoint, a vocabulary the tokenizer does not fill) is one UserError.
"""
import json
import os
import re
from dataclasses import dataclass

from gptlab.core.errors import UserError, one_line

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
VOCAB_PADDING = 128  # a checkpoint's vocabulary may pad the tokenizer's ids up to a multiple of this (nanoGPT's 50304)
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


@dataclass
class Checkpoint:
    spec: str  # the --init_from value
    arch: str  # the --arch name whose module reads it
    config: dict  # its config.json
    fields: dict  # the module's GPTConfig fields (and max_seq_len) for it


def open_checkpoint(spec, modules):
    """The Checkpoint at `spec` (a folder or a Hub id); modules: {arch name: module} (ARCHITECTURES' modules)."""
    with open(_fetch(spec, CONFIG_FILE), encoding="utf-8") as f:
        try:
            config = json.load(f)
        except ValueError as err:
            raise UserError(f"--init_from {spec}: its {CONFIG_FILE} is not JSON ({one_line(err, 120)})") from None
    if not isinstance(config, dict):
        raise UserError(f"--init_from {spec}: its {CONFIG_FILE} is not a transformers model configuration")
    model_type = config.get("model_type")
    readable = {getattr(m, "TRANSFORMERS_MODEL_TYPE", None): arch for arch, m in modules.items()}
    readable.pop(None, None)
    arch = readable.get(model_type)
    if arch is None:
        raise UserError(f"--init_from {spec} is a {model_type!r} model; train_gpt.py starts from transformers' "
                        f"{', '.join(map(repr, readable))} checkpoints")
    try:
        fields = modules[arch].transformers_config(config)
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"--init_from {spec}: {one_line(err, 300)}") from None
    return Checkpoint(spec, arch, config, fields)


def apply_flags(args, init, flag_names, preset=None):
    """Set args' model flags (flag_names: the chosen module's) to the checkpoint's values. A flag given with
    another value (not the --preset's) is one UserError; --arch likewise."""
    if getattr(args, "arch", None) not in (None, init.arch) and (preset or {}).get("arch") != args.arch:
        raise UserError(f"--arch {args.arch} differs from the --init_from checkpoint's {init.arch} ({init.spec} is "
                        f"a {init.config.get('model_type')!r} model); drop --arch")
    args.arch = init.arch
    for name in flag_names:
        if name not in init.fields:
            continue
        value, theirs = getattr(args, name, None), init.fields[name]
        if value is not None and value != theirs and (preset or {}).get(name) != value:
            raise UserError(f"--{name} {value} differs from the --init_from checkpoint's {theirs}: the model's shape "
                            f"is the checkpoint's; drop --{name}")
        setattr(args, name, theirs)


def check_vocabulary(init, n_vocab, tokenizer_name):
    """The checkpoint's embedding rows must be the tokenizer's ids (padded at most to a multiple of 128)."""
    rows = init.fields.get("vocab_size")
    if not isinstance(rows, int) or not n_vocab <= rows <= -(-n_vocab // VOCAB_PADDING) * VOCAB_PADDING:
        raise UserError(f"--init_from {init.spec} has a vocabulary of {rows} ids and the tokenizer {tokenizer_name} "
                        f"{n_vocab}: the model was trained with another tokenizer; pass --tokenizer with its own")


def model_config(init, model_config, weights_positions):
    """The run's model config with what the checkpoint's weights fix and the flags do not: a learned position
    table's length (weights_positions), which the rows must fit in."""
    theirs = init.fields.get("max_seq_len")
    if weights_positions and theirs is not None:
        if model_config["max_seq_len"] > theirs:
            raise UserError(f"--init_from {init.spec} has {theirs} learned positions, fewer than the rows of "
                            f"{model_config['max_seq_len']} tokens; pass --train_seq_len and --val_seq_len of at most "
                            f"{theirs}")
        model_config = dict(model_config, max_seq_len=theirs)
    return model_config


def load_weights(init, module, model):
    """Put the checkpoint's weights into `model` (built from its fields) through module.transformers_import."""
    import safetensors.torch  # heavy: only when a run starts from a checkpoint

    try:
        single = _fetch(init.spec, WEIGHTS_FILE, missing_ok=True)
        if single is not None:
            paths = [single]
        else:  # a sharded checkpoint: the index names its files
            with open(_fetch(init.spec, INDEX_FILE), encoding="utf-8") as f:
                paths = [_fetch(init.spec, name) for name in sorted(set(json.load(f)["weight_map"].values()))]
        state = {}
        for path in paths:
            state.update(safetensors.torch.load_file(path))
    except (OSError, ValueError, KeyError, TypeError) as err:  # (safetensors' own errors are ValueError / OSError)
        raise UserError(f"--init_from {init.spec}: cannot read its weights ({one_line(err, 200)})") from None
    try:
        model.load_state_dict(module.transformers_import(init.config, state, model))
    except (KeyError, ValueError, RuntimeError) as err:
        raise UserError(f"--init_from {init.spec}: its weights do not fit its configuration ({one_line(err, 200)}); "
                        "it is damaged or not a standard transformers checkpoint") from None


def _fetch(spec, filename, missing_ok=False):
    """The local path of `filename` of the folder or Hub repository `spec`; None for a missing optional file."""
    if os.path.isdir(spec):
        path = os.path.join(spec, filename)
        if os.path.isfile(path):
            return path
        if missing_ok:
            return None
        raise UserError(f"--init_from {spec} has no {filename}; pass a folder written by transformers' "
                        "save_pretrained (config.json and model.safetensors) or a Hub id")
    if os.path.exists(spec) or not _REPO_ID.fullmatch(spec):
        raise UserError(f"--init_from {spec} is neither a folder nor a Hub repository id (org/name)")
    from huggingface_hub import constants, hf_hub_download  # only for the Hub (it reads HF_* when imported)
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError

    from gptlab.text.sources import hub_unreachable, proxy_hint

    if not constants.HF_HUB_OFFLINE:  # one quick request first: the client retries a dead endpoint for ~30 s
        problem = hub_unreachable(spec)
        if problem:
            raise UserError(f"--init_from {spec}: {problem}; {proxy_hint([constants.ENDPOINT])}, or set "
                            "HF_HUB_OFFLINE=1 to read the HF_HOME cache")
    try:
        return hf_hub_download(spec, filename)
    except LocalEntryNotFoundError as err:  # offline (HF_HUB_OFFLINE) and not in the cache, or unreachable
        if missing_ok:
            return None
        raise UserError(f"--init_from {spec}: cannot fetch {filename} from the Hub ({one_line(err, 160)}); check "
                        "the network or HF_ENDPOINT (HF_HUB_OFFLINE=1 reads only what HF_HOME's cache holds)"
                        ) from None
    except RepositoryNotFoundError:
        raise UserError(f"--init_from {spec}: no such Hub repository (or a private or gated one: set HF_TOKEN)"
                        ) from None
    except EntryNotFoundError:
        if missing_ok:
            return None
        raise UserError(f"--init_from {spec}: the Hub repository has no {filename}") from None
    except Exception as err:  # noqa: BLE001 (the HTTP client's connection and timeout errors)
        raise UserError(f"--init_from {spec}: cannot fetch {filename} from the Hub ({one_line(err, 160)})") from None
