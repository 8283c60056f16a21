"""The model a checkpoint carries: the source of model.py as the run trained it (with its sha256), and the module
built from that source, so every tool that reads a checkpoint (sample.py, export_hf.py, evaluations, --resume)
runs the checkpoint's own architecture, whatever model.py says today.

Loading a checkpoint runs no code from a stranger. Its model source is used
- as today's module when it equals today's model.py (imported once, as `model`);
- from this machine's store when a run here trained it: train_gpt.py records the source of every model it trains
  in $GPTLAB_HOME/model_sources/<sha256>.py (default ~/.cache/gptlab), so a researcher's own experiments load
  with no flag, before and after the code moves on;
- otherwise only with trust_code=True (the tools' --trust_model_code, like transformers' trust_remote_code).
"""
import hashlib
import importlib.util
import os
import sys
import tempfile

from gptlab.core.errors import UserError, one_line
from gptlab.core.files import atomic_write_text
from gptlab.train import checkpointing

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_FILE = os.path.join(REPO_ROOT, "model.py")
MODULE_NAME = "model"  # today's model.py, as train_gpt.py imports it
TRUST_FLAG = "--trust_model_code"


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def current_source():
    """{"file": "model.py", "code": today's model.py, "sha256": its digest}: what a checkpoint records."""
    with open(MODEL_FILE, "r", encoding="utf-8") as f:
        code = f.read()
    return {"file": os.path.basename(MODEL_FILE), "code": code, "sha256": sha256_text(code)}


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


def current_module():
    """Today's model.py as a module (the one train_gpt.py imports, or imported here under the same name)."""
    return import_file(MODEL_FILE, MODULE_NAME)


def module_for(source, origin, trust_code=False):
    """The module of a recorded model source (a checkpoint's "model_source" entry); origin names where it came
    from (a checkpoint path) in the refusal."""
    if not source or "code" not in source:
        raise UserError(f"{origin} carries no model source; convert it with python -m gptlab.train.convert_checkpoint "
                        f"{origin}")
    code, sha = source["code"], source.get("sha256")
    if sha != sha256_text(code):
        raise UserError(f"the model source in {origin} does not match its sha256; the file is damaged")
    if sha == current_source()["sha256"]:
        return current_module()
    stored = os.path.join(store_dir(), f"{sha}.py")
    if os.path.isfile(stored) and _read(stored) == code:
        return import_file(stored, f"gptlab_model_{sha[:16]}")
    if not trust_code:
        raise UserError(f"{origin} carries model code (sha256 {sha[:12]}) that differs from model.py and that no "
                        f"run on this machine trained; read it (python -m gptlab.train.convert_checkpoint --show "
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


def build_model(module, model_config):
    """module.GPT(module.GPTConfig(**model_config)); a config the source does not accept is one UserError."""
    try:
        return module.GPT(module.GPTConfig(**model_config))
    except (TypeError, ValueError) as err:
        raise UserError(f"the model's source does not accept its recorded configuration ({err})") from None


def load_model(path, device="cpu", trust_code=False):
    """(model in eval mode on device, its module, the checkpoint dict) from a checkpoint file, built from the model
    source the checkpoint carries (see module_for)."""
    ckpt = checkpointing.load_checkpoint(path)
    module = module_for(ckpt.get("model_source"), path, trust_code)
    model = build_model(module, ckpt["model_config"])
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


def logits_fn(model, eot, n_vocab, windows=None):
    """tokens (B, T) → float logits (B, T, n_vocab) of a loaded model (its final windows unless given)."""
    return lambda tokens: model.predict(tokens, eot, windows)[..., :n_vocab]
