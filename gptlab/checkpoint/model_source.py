"""The model a checkpoint carries: the source of its architecture's module (model.py, gpt2.py, llama.py: ARCHITECTURES) as
the run trained it (with its file name and sha256), and the module built from that source, so every tool that reads a checkpoint (sample.py, export_hf.py, evaluations, --resume)
runs the checkpoint's own architecture, whatever model.py says today.

Loading a checkpoint runs no code from a stranger. Its model source is used
- as today's module when it equals today's file of the same name (model.py imported once as `model`, gpt2.py as
  `gpt2`; a source without a file name is model.py's, as every checkpoint before the --arch flag);
- from this machine's store when a run here trained it: train_gpt.py records the source of every model it trains
  in $GPTLAB_HOME/model_sources/<sha256>.py (default ~/.cache/gptlab), so a researcher's own experiments load
  with no flag, before and after the code moves on;
- otherwise only with trust_code=True (the tools' --trust_model_code, like transformers' trust_remote_code).
"""
import contextlib
import hashlib
import importlib.util
import inspect
import os
import sys
import tempfile
import types

import torch

from gptlab.core.errors import UserError, one_line
from gptlab.core.files import atomic_write_text
from gptlab.core.paths import REPO_ROOT
from gptlab.checkpoint import checkpointing

# train_gpt.py's --arch choices: the module file of each (the first is the default). The one place that names them:
# everything else reads the chosen module's interface
ARCHITECTURES = {"modded": "model.py", "gpt2": "gpt2.py", "llama": "llama.py"}
DEFAULT_ARCH = next(iter(ARCHITECTURES))  # --arch when none is given
DEFAULT_FILE = ARCHITECTURES[DEFAULT_ARCH]
MODEL_FILE = os.path.join(REPO_ROOT, DEFAULT_FILE)
MODULE_NAME = "model"  # today's model.py, as train_gpt.py imports it
TRUST_FLAG = "--trust_model_code"


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def arch_file(arch):
    """The module file of an --arch name (ARCHITECTURES); UserError naming the choices otherwise."""
    if arch not in ARCHITECTURES:
        raise UserError(f"--arch {arch} is not an architecture here; choose one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def arch_of(source):
    """The --arch name of a recorded model source, by its file name (no name: model.py's, as older checkpoints);
    None for a file that is no architecture's."""
    name = (source or {}).get("file") or DEFAULT_FILE
    return next((arch for arch, file in ARCHITECTURES.items() if file == name), None)


def source_file(source):
    """The architecture file a recorded model source stands for (model.py for a name that is none of theirs)."""
    return (source or {}).get("file") if arch_of(source) else DEFAULT_FILE


def current_source(file=DEFAULT_FILE):
    """{"file": "model.py", "code": today's model.py, "sha256": its digest} (or another architecture's file of
    ARCHITECTURES): what a checkpoint records."""
    with open(os.path.join(REPO_ROOT, _known_file(file)), "r", encoding="utf-8") as f:
        code = f.read()
    return {"file": file, "code": code, "sha256": sha256_text(code)}


def _known_file(file):
    if file not in ARCHITECTURES.values():  # (a recorded name never reaches the file system)
        raise ValueError(f"{file!r} is no architecture's module file")
    return file


def store_dir():
    """This machine's store of model sources that runs here trained: $GPTLAB_HOME/model_sources."""
    home = os.environ.get("GPTLAB_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gptlab")
    return os.path.join(home, "model_sources")


def record_trained_source(source):
    """Remember that a run on this machine trains this model source (idempotent; any rank may call it)."""
    path = os.path.join(store_dir(), f"{source['sha256']}.py")
    if os.path.isfile(path):
        return path
    try:
        atomic_write_text(path, source["code"], overwrite=True)
    except (OSError, UserError) as err:
        raise UserError(f"cannot record the model source in {store_dir()} ({err}); set GPTLAB_HOME to a writable "
                        "folder") from None
    return path


def current_module(file=DEFAULT_FILE):
    """Today's model.py (or another architecture's file) as a module, imported under its file's stem (model.py:
    the one train_gpt.py imports as `model`)."""
    return import_file(os.path.join(REPO_ROOT, _known_file(file)), os.path.splitext(file)[0])


def module_for(source, origin, trust_code=False):
    """The module of a recorded model source (a checkpoint's "model_source" entry); origin names where it came
    from (a checkpoint path) in the refusal."""
    if not source or "code" not in source:
        raise UserError(f"{origin} carries no model source; convert it with python -m gptlab.checkpoint.convert_checkpoint "
                        f"{origin}")
    code, sha = source["code"], source.get("sha256")
    if sha != sha256_text(code):
        raise UserError(f"the model source in {origin} does not match its sha256; the file is damaged")
    file = source.get("file") or DEFAULT_FILE
    if file not in ARCHITECTURES.values():
        file = "every architecture's module"  # (named in the refusal below; it never matches)
    elif sha == current_source(file)["sha256"]:
        return current_module(file)
    stored = os.path.join(store_dir(), f"{sha}.py")
    if os.path.isfile(stored) and _read(stored) == code:
        return import_file(stored, f"gptlab_model_{sha[:16]}")
    if not trust_code:
        raise UserError(f"{origin} carries model code (sha256 {sha[:12]}) that differs from {file} and that no "
                        f"run on this machine trained; read it (python -m gptlab.checkpoint.convert_checkpoint --show "
                        f"{origin}) and pass {TRUST_FLAG} to run it")
    folder = tempfile.mkdtemp(prefix="gptlab-model-")
    path = os.path.join(folder, f"{sha}.py")
    atomic_write_text(path, code)
    return import_file(path, f"gptlab_model_{sha[:16]}")


def _read(path):
    with open(path, "r", encoding="utf-8") as f:
        return f.read()


def import_file(path, name):
    """Import the file at path as module `name`, once: a module of that name from the same file is reused."""
    module = sys.modules.get(name)
    if module is not None and os.path.realpath(getattr(module, "__file__", "") or "") == os.path.realpath(path):
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and torch.compile look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise UserError(f"the model source {path} does not import ({type(err).__name__}: {err})") from None
    return module


def model_from_config(module, model_config, origin=None):
    """module.GPT(module.GPTConfig(**model_config)); a config the source does not accept is one UserError."""
    try:
        return module.GPT(module.GPTConfig(**model_config))
    except (TypeError, ValueError, OverflowError) as err:
        where = f" in {origin}" if origin else ""
        raise UserError(f"the model's source does not accept its recorded configuration{where} "
                        f"({one_line(err, 300)})") from None


# What building a checkpoint's model may create beyond its saved weights: as many elements again plus this many
# (unsaved buffers such as rotary tables), and twice as many parameters (tied weights count twice). A crafted
# configuration (num_layers 10**6, max_seq_len 10**12) is refused while the model is built on the meta device.
_EXTRA_ELEMENTS = 2**26


class _BeyondTheWeights(Exception):
    pass


@contextlib.contextmanager
def _dynamo_not_imported():
    """Within: torch's `_disable_dynamo`-wrapped functions (the Python meta kernels of ops such as normal_, cos or
    torch.cat) call through without importing torch._dynamo (~1.5 s of CPU, at every start of evaluate.py and
    sample.py), from a stand-in whose disable(fn) is fn: what dynamo's gives outside torch.compile (it only turns
    off compilation within fn). Afterwards they import the real one again. Nothing changes where it is imported."""
    if "torch._dynamo" in sys.modules:
        yield
        return
    passed = []

    def disable(fn=None, recursive=True, **_):
        passed.append(fn)
        return fn

    stand_in = types.ModuleType("torch._dynamo")
    stand_in.disable = disable
    sys.modules["torch._dynamo"] = stand_in
    try:
        yield
    finally:
        if sys.modules.get("torch._dynamo") is stand_in:
            del sys.modules["torch._dynamo"]
        for fn in passed:  # (torch caches what disable gave on the function)
            getattr(fn, "__dict__", {}).pop("__dynamo_disable", None)


def _meta_model(module, model_config, state):
    """module.GPT(config) on torch's meta device (no memory), aborted as soon as it registers more parameters or
    elements than the checkpoint's weights could belong to (so its Python-side cost is bounded too)."""
    saved = sum(t.numel() for t in state.values())
    limits = {"params": 2 * len(state) + 16, "elements": 2 * saved + _EXTRA_ELEMENTS}
    seen = {"params": 0, "elements": 0}

    def count(tensor, is_param):
        if tensor is None:
            return
        seen["params"] += is_param
        seen["elements"] += tensor.numel()
        if seen["params"] > limits["params"] or seen["elements"] > limits["elements"]:
            raise _BeyondTheWeights()

    hooks = [torch.nn.modules.module.register_module_parameter_registration_hook(
                 lambda _module, _name, param: count(param, True)),
             torch.nn.modules.module.register_module_buffer_registration_hook(
                 lambda _module, _name, buffer: count(buffer, False))]
    try:
        try:
            with _dynamo_not_imported(), torch.device("meta"):
                return module.GPT(module.GPTConfig(**model_config))
        except _BeyondTheWeights:
            raise
        except Exception:  # noqa: BLE001 (whatever it was, the build as torch makes it says it)
            seen.update(params=0, elements=0)
            with torch.device("meta"):
                return module.GPT(module.GPTConfig(**model_config))
    finally:
        for hook in hooks:
            hook.remove()


def check_weights_fit(module, model_config, state, origin):
    """Refuse, before the model is allocated, a checkpoint whose weights (names, shapes, dtypes) are not the ones
    its model source builds from its configuration, or whose configuration makes a model far larger than its
    weights. The model is built on torch's meta device (no memory); a source that cannot be built there is left
    to the real build."""
    try:
        meta = _meta_model(module, model_config, state)
    except _BeyondTheWeights:
        raise UserError(f"the configuration recorded in {origin} makes a model far larger than the "
                        f"{sum(t.numel() for t in state.values()):,} weights it holds; it is damaged or was "
                        "edited") from None
    except (TypeError, ValueError, OverflowError) as err:
        raise UserError(f"the model's source does not accept the configuration recorded in {origin} "
                        f"({one_line(err, 300)})") from None
    except Exception:  # noqa: BLE001 (model code that only runs on real tensors: the real build checks)
        return
    expected = meta.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    problems = []
    if missing:
        problems.append(f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if unexpected:
        problems.append(f"unexpected {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''}")
    for key, want in expected.items():
        got = state.get(key)
        if got is None:
            continue
        if tuple(got.shape) != tuple(want.shape):
            problems.append(f"size mismatch for {key}: shape {tuple(got.shape)} in the checkpoint, "
                            f"{tuple(want.shape)} in the model")
        elif got.dtype != want.dtype:
            problems.append(f"{key} is {got.dtype}, the model's is {want.dtype}")
        if len(problems) >= 3:
            break
    if problems:
        raise UserError(f"the weights in {origin} do not fit the model its source builds from its configuration "
                        f"({'; '.join(problems)}); it is damaged or was edited")


def load_model(path, device="cpu", trust_code=False):
    """(model in eval mode on device, its module, the checkpoint dict) from a checkpoint file, built from the model
    source the checkpoint carries (see module_for)."""
    ckpt = checkpointing.load_checkpoint(path, trust_code=trust_code)  # (a sharded folder's index is a pickle)
    if not ckpt["model"]:
        raise UserError(f"checkpoint {path} has a malformed 'model' entry (an empty dict; it must be a non-empty dict "
                        "of parameter names to tensors); it is damaged or not a gptlab checkpoint")
    module = module_for(ckpt.get("model_source"), path, trust_code)
    check_weights_fit(module, ckpt["model_config"], ckpt["model"], path)
    model = model_from_config(module, ckpt["model_config"], path)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as err:
        problems = one_line(err)
        raise UserError(f"the weights in {path} do not fit the model its source builds ({problems})") from None
    return model.to(device).eval(), module, ckpt


def checkpoint_logits_fn(path, device="cpu", trust_code=False):
    """A checkpoint, ready to score: (logits_fn, encoding, checkpoint dict). logits_fn maps a LongTensor (B, T) of
    token ids to float logits (B, T, n_vocab) with the model's final attention windows (dense masks, any device):

        logits_fn, enc, ckpt = checkpoint_logits_fn("experiments/RUN/checkpoints/step_001000.pt")
        evaluate_hellaswag(logits_fn, enc, "data/hellaswag/hellaswag_val.jsonl", limit=500)

    The tokenizer is the run's (--tokenizer as recorded, else its name in tokenizers/), checked by hash."""
    model, _, ckpt = load_model(path, device, trust_code)
    tok = checkpointing.checkpoint_tokenizer(ckpt, path)
    return logits_fn(model, tok.eot, tok.encoding.n_vocab), tok.encoding, ckpt


def logits_fn(model, eot, n_vocab, windows=None, autocast_dtype=None):
    """A loaded model's scorer (its final windows unless given), under torch.autocast to autocast_dtype where one
    is given (bfloat16: the matrix products as training ran them): see ModelLogits."""
    return ModelLogits(model, eot, n_vocab, windows, autocast_dtype)


class ModelLogits:
    """fn(tokens (B, T)) → float logits (B, T, n_vocab); fn.at(tokens, rows, columns) → float logits (N, n_vocab)
    at those positions only, which evaluations use (the head and the float32 logits then cost N rows, not B x T).
    A model source whose predict() takes no positions (older checkpoints) gets them cut from the whole logits.
    fn.trees: whether predict() takes tree= (rows of shared contexts and their branches; model.py's tree_masks),
    which .at(..., tree=) then passes on; the scorers use it only where it is True (older sources: False)."""

    def __init__(self, model, eot, n_vocab, windows=None, autocast_dtype=None):
        self.model, self.eot, self.n_vocab, self.windows = model, eot, n_vocab, windows
        self.autocast_dtype = autocast_dtype
        params = inspect.signature(model.predict).parameters
        self.selects = "positions" in params
        self.trees = self.selects and "tree" in params
        self.max_len = getattr(model, "context_limit", None)  # a learned position table's length (gpt2.py)

    def _predict(self, tokens, positions=None, tree=None):
        kw = {"positions": positions} if positions is not None else {}
        if tree is not None:
            kw["tree"] = tree
        precision = (contextlib.nullcontext() if self.autocast_dtype is None
                     else torch.autocast(tokens.device.type, dtype=self.autocast_dtype))
        with attention_kernels(tokens.device.type), precision:
            return self.model.predict(tokens, self.eot, self.windows, **kw)[..., :self.n_vocab]

    def __call__(self, tokens):
        return self._predict(tokens)

    def at(self, tokens, rows, columns, tree=None):
        if self.selects:
            return self._predict(tokens, (rows, columns), tree)
        return self._predict(tokens)[rows, columns]


def attention_kernels(device_type):
    """The scaled_dot_product_attention kernels a scorer's forwards may use: on CUDA all but cuDNN's, which builds
    an execution plan on the host for every new shape and spends ~1.7 ms of host time a call after that (measured
    on an H200), where evaluations run forwards of many shapes; the memory-efficient kernel takes the dense masks
    as they are. Elsewhere: every kernel, as before."""
    if device_type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
