"""A gptlab checkpoint as a Hugging Face folder that transformers and lm-eval load:

    model.safetensors, config.json, generation_config.json   the weights (as "model.<name>") and GptlabConfig
    gptlab_model.py     the model source the checkpoint carries (its model.py), verbatim: the architecture
    modeling_gptlab.py  a thin transformers wrapper around it (AutoModelForCausalLM, trust_remote_code=True)
    tokenizer.json, tokenizer_config.json                     the tokenizer (AutoTokenizer)

The export ships the checkpoint's own code rather than a second copy of the forward pass, so whatever model.py
trained the checkpoint is what transformers runs, and an architecture edit needs no change here.

The tokenizer.json is byte-level BPE that encodes as our tiktoken Encoding does. tiktoken repeatedly merges the
adjacent pair whose concatenation has the lowest id, and takes a whole pre-token that is itself a token as is; a
Hugging Face BPE merges by the rank of (left, right) pairs. So the merges list holds every split of every token
into two tokens, ranked by the id of the token they make (the trainer's own merges are among them), and
ignore_merges is on. The pre-tokenizer is the tokenizer's own split regex, then the GPT-2 byte-to-unicode mapping
(ByteLevel without its regex); <|endoftext|> is a special token with its id. Encoding puts <|endoftext|> first
(the post-processor), as training starts every document with it: tokenizer(text) is [eot] + tiktoken's ids of text
(text that already starts with <|endoftext|> wants add_special_tokens=False, as lm-eval passes for it), and
add_special_tokens=False gives tiktoken's ids alone.
"""
import contextlib
import importlib.machinery
import importlib.util
import itertools
import json
import os
import shutil
import sys
import tempfile

import torch

from gptlab.core.errors import UserError, one_line
from gptlab.core.files import atomic_output_dir, umasked
from gptlab.train.records import write_json

MODELING_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "modeling_gptlab.py")
MODEL_SOURCE_FILE = "gptlab_model.py"  # what modeling_gptlab.py imports
HF_FILES_HINT = "pip install transformers safetensors"
_import_count = itertools.count()


def bytes_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable unicode characters (tokenizer.json's vocab
    strings): printable Latin-1 bytes map to themselves, the others to chr(256 + n) in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def tiktoken_merges(mergeable_ranks):
    """Every (left, right) pair of tokens whose concatenation is a token, ranked as tiktoken merges them: by the
    id of the concatenation, then by the ids of left and right."""
    merges = []
    for token, rank in mergeable_ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in mergeable_ranks and right in mergeable_ranks:
                merges.append((rank, mergeable_ranks[left], mergeable_ranks[right], left, right))
    merges.sort()
    return [(left, right) for _, _, _, left, right in merges]


def tokenizer_json(pat_str, mergeable_ranks, special_tokens, bos=None):
    """tokenizer.json's content (a dict) for a gptlab tokenizer (gptlab.tokenizer.format.read_tokenizer_file's fields).
    bos: (text, id) of the token that encoding puts before every sequence (None: nothing added)."""
    to_str = bytes_to_unicode()

    def text(token):
        return "".join(to_str[b] for b in token)

    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for s, i in sorted(special_tokens.items(), key=lambda kv: kv[1])]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pat_str}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None if bos is None else bos_template(*bos),
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {text(token): rank for token, rank in sorted(mergeable_ranks.items(), key=lambda kv: kv[1])},
                  "merges": [[text(left), text(right)] for left, right in tiktoken_merges(mergeable_ranks)]},
    }


def bos_template(text, token_id):
    """TemplateProcessing that puts the token before a sequence, and before each of a pair (each its own
    document): the template transformers 5 builds for add_bos_token."""
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": text, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": text, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": text, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {text: {"id": text, "ids": [token_id], "tokens": [text]}}}


def hf_config(model_config, windows, eot_id, n_vocab, padded_vocab=None):
    """GptlabConfig's fields for a checkpoint: model_config (its GPTConfig fields) goes whole, so the architecture is
    spelt only by the model source; windows: the model's final (long, short) windows in blocks
    (model.final_windows()); n_vocab: the tokenizer's ids, which the logits cover; padded_vocab: the model's logits
    rows, for the record."""
    return {"model_config": dict(model_config), "vocab_size": n_vocab, "eot_token_id": eot_id,
            "long_window_blocks": windows[0], "short_window_blocks": windows[1], "padded_vocab_size": padded_vocab,
            "max_position_embeddings": model_config.get("max_seq_len")}


def _require_transformers():
    try:  # optional packages, for the export only: checked here, imported where used
        import safetensors  # noqa: F401 (optional)
        import transformers  # noqa: F401 (optional)

        import tokenizers  # noqa: F401 (optional)
    except ImportError as err:
        raise UserError(f"exporting to Hugging Face needs {err.name}: {HF_FILES_HINT}") from None


def _write_code(folder, model_source):
    """modeling_gptlab.py and the model source as gptlab_model.py, both verbatim."""
    shutil.copyfile(MODELING_FILE, os.path.join(folder, "modeling_gptlab.py"))
    with open(os.path.join(folder, MODEL_SOURCE_FILE), "w", encoding="utf-8", newline="") as f:
        f.write(model_source["code"])


@contextlib.contextmanager
def _imported_wrapper(folder):
    """The modeling_gptlab module of a folder holding it and gptlab_model.py, imported as a package of its own
    (as transformers does), without writing bytecode there, and forgotten by sys.modules afterwards."""
    name = f"_gptlab_hf_export_{next(_import_count)}"
    package = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(name, None, is_package=True))
    package.__path__ = [folder]
    sys.modules[name] = package
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        try:
            module = importlib.import_module(f"{name}.modeling_gptlab")
        except Exception as err:
            raise UserError(f"the checkpoint's model source does not import ({type(err).__name__}: {err})") from None
        finally:
            sys.dont_write_bytecode = dont_write
        yield module
    finally:
        for key in [key for key in sys.modules if key == name or key.startswith(name + ".")]:
            del sys.modules[key]


def _save_model(folder, wrapper, model_state, config_fields):
    """config.json, generation_config.json and model.safetensors of the wrapper's model holding model_state."""
    config = wrapper.GptlabConfig(**config_fields)
    config.auto_map = {"AutoConfig": "modeling_gptlab.GptlabConfig",
                       "AutoModelForCausalLM": "modeling_gptlab.GptlabForCausalLM"}
    config.architectures = ["GptlabForCausalLM"]
    model = wrapper.GptlabForCausalLM(config)
    try:
        model.model.load_state_dict(model_state, strict=True)
    except RuntimeError as err:
        problems = one_line(err)
        raise UserError(f"the weights do not fit the model the checkpoint's source builds ({problems})") from None
    try:
        model.save_pretrained(folder, safe_serialization=True)
    except RuntimeError as err:
        if "shared tensors" not in str(err):
            raise
        raise UserError("the checkpoint's model ties weights (one tensor under two names), which the custom-code "
                        "export cannot hold; its model source has no transformers_export (today's gpt2.py has one: "
                        "a GPT-2 checkpoint trained with it exports as GPT2LMHeadModel)") from None


def _write_failure(err):
    """The reason of a failed write (a full disk, a file-size limit, an unwritable folder), or None for another
    error. safetensors reports the OS error inside its own SafetensorError."""
    if isinstance(err, OSError):
        return err.strerror or str(err)
    if type(err).__name__ == "SafetensorError" or isinstance(err, RuntimeError):
        text = str(err)
        for words in ("No space left on device", "File too large", "Permission denied", "Read-only file system",
                      "Disk quota exceeded"):
            if words in text:
                return words
        if "IoError" in text or "os error" in text.lower():
            return one_line(err, 200)
    return None


def write_hf_folder(out_dir, *, model_state, model_source, config_fields, tokenizer_data, overwrite=False,
                    native=None):
    """Write the Hugging Face folder out_dir (atomically: built beside it, then renamed into place); a failed
    write (a full disk) is one UserError and leaves nothing half-written. native: (a transformers config's fields
    with "model_type" and "architectures", that model's state dict) from the model module's transformers_export:
    the folder then holds that standard model, no code."""
    try:
        if native is not None:
            return _write_native_folder(out_dir, native, eot=config_fields["eot_token_id"],
                                        tokenizer_data=tokenizer_data, overwrite=overwrite)
        return _write_hf_folder(out_dir, model_state=model_state, model_source=model_source,
                                config_fields=config_fields, tokenizer_data=tokenizer_data, overwrite=overwrite)
    except UserError:
        raise
    except Exception as err:
        reason = _write_failure(err)
        if reason is None:
            raise
        raise UserError(f"could not write {out_dir}: {reason}. Nothing half-written was left; free some space (or "
                        "fix the folder) and export again") from None


def _write_hf_folder(out_dir, *, model_state, model_source, config_fields, tokenizer_data, overwrite=False):
    """Write the Hugging Face folder out_dir (atomically: built beside it, then renamed into place).

    model_state: the GPT's state dict (stored under "model."); model_source: the checkpoint's {"code", ...} (the
    model that made model_state); config_fields: hf_config's; tokenizer_data: the dict of
    gptlab.tokenizer.format.read_tokenizer_file."""
    _require_transformers()
    tokenizer_text, eot_text = _checked_tokenizer(tokenizer_data, config_fields["eot_token_id"])
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp_dir, \
            tempfile.TemporaryDirectory(prefix="gptlab-hf-") as code_dir:
        _write_code(code_dir, model_source)  # imported from a copy: no __pycache__ in the export
        with _imported_wrapper(code_dir) as wrapper:
            _save_model(tmp_dir, wrapper, model_state, config_fields)
        _write_code(tmp_dir, model_source)
        _write_tokenizer(tmp_dir, tokenizer_text, eot_text)
    return out_dir


class NotNative(UserError):
    """The model's weights are not those of the standard transformers model its module maps it onto (an edit)."""


def native_model(native):
    """The transformers model (e.g. GPT2LMHeadModel) holding native = (config fields with model_type and
    architectures, its state dict; tied weights left out); NotNative when the weights do not fit it."""
    _require_transformers()
    import transformers  # optional: export only

    fields, state = native
    fields = dict(fields)
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    model = getattr(transformers, config.architectures[0])(config)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # a shape that differs
        raise NotNative(f"its weights do not fit transformers' {config.architectures[0]} ({one_line(err, 200)})") \
            from None
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if unexpected or set(missing) - tied:
        raise NotNative(f"its weights do not fit transformers' {config.architectures[0]} (missing "
                        f"{sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})")
    return model


def _write_native_folder(out_dir, native, *, eot, tokenizer_data, overwrite=False):
    """A standard transformers model folder (config.json, model.safetensors, generation_config.json) and the
    tokenizer: native = (config fields with model_type, its model's state dict; tied weights left out)."""
    model = native_model(native)
    tokenizer_text, eot_text = _checked_tokenizer(tokenizer_data, eot)
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp_dir:
        model.save_pretrained(tmp_dir, safe_serialization=True)
        _write_tokenizer(tmp_dir, tokenizer_text, eot_text)
    return out_dir


def _checked_tokenizer(tokenizer_data, eot):
    """(tokenizer.json's text, <|endoftext|>'s text), refused as one UserError when Rust tokenizers cannot read it."""
    from tokenizers import Tokenizer  # optional: export only

    eot_text = next(s for s, i in tokenizer_data["special_tokens"].items() if i == eot)
    tokenizer_text = json.dumps(tokenizer_json(tokenizer_data["pat_str"], tokenizer_data["mergeable_ranks"],
                                               tokenizer_data["special_tokens"], bos=(eot_text, eot)),
                                ensure_ascii=False)
    try:  # the Rust tokenizer must accept it (e.g. a custom split regex Oniguruma cannot compile)
        Tokenizer.from_str(tokenizer_text)
    except Exception as err:
        raise UserError(f"Hugging Face tokenizers cannot read this tokenizer ({err}), so it cannot be "
                        "exported; a tokenizer trained with --pattern gpt4 or gpt2 can be") from None
    return tokenizer_text, eot_text


def _write_tokenizer(tmp_dir, tokenizer_text, eot_text):
    """tokenizer.json and tokenizer_config.json into the folder being built; then every file's mode as open()
    makes one."""
    with open(os.path.join(tmp_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tokenizer_text)
    # PreTrainedTokenizerFast: the name both transformers 4 and 5 know. tokenizer.json's post-processor adds
    # <|endoftext|> (transformers drops add_bos_token/add_eos_token when a tokenizer.json is there): these say
    # so. No token_type_ids: transformers 4's generate() refuses an input the model does not take
    write_json(os.path.join(tmp_dir, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": eot_text, "eos_token": eot_text,
        "pad_token": eot_text, "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False, "model_input_names": ["input_ids", "attention_mask"]})
    for name in os.listdir(tmp_dir):  # safetensors writes 0600: each file as open() makes one, like the folder
        os.chmod(os.path.join(tmp_dir, name), umasked(0o666))


CHECK_TEXT = ("The water cycle moves water between the oceans, the air and the land. Évaporation 🌊,\n\n  rain   "
              "and snow.<|endoftext|>Once upon a time, there was a lesson about fractions: 3/4 + 1/8.")


def check_export(out_dir, logits_fn, encoding, text=CHECK_TEXT, trust_remote_code=True):
    """Load out_dir with transformers' Auto classes and compare with the checkpoint on a document (text: two,
    the second after an <|endoftext|>) as training feeds it, ids = [eot] + tiktoken's ids of text. Returns
    {"tokens": len(ids), "same_tokens": the HF tokenizer gives ids (ids[1:] with add_special_tokens=False) and
    decodes them as tiktoken does (without the <|endoftext|>s when skipping special tokens), "max_abs_diff":
    float32 logits of ids against logits_fn's, "generated": generate()'s greedy continuation of "The", as text}."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # optional and heavy: the check only

    hf_tokenizer = AutoTokenizer.from_pretrained(out_dir, trust_remote_code=trust_remote_code)  # (reads config.json)
    hf_model = AutoModelForCausalLM.from_pretrained(out_dir, trust_remote_code=trust_remote_code).float().eval()
    eot = encoding.eot_token
    ids = [eot] + encoding.encode(text, allowed_special="all")
    same = (hf_tokenizer(text)["input_ids"] == ids
            and hf_tokenizer(text, add_special_tokens=False)["input_ids"] == ids[1:]
            and hf_tokenizer.decode(ids) == encoding.decode(ids)
            and hf_tokenizer.decode(ids, skip_special_tokens=True) == encoding.decode([i for i in ids if i != eot]))
    with torch.no_grad():
        diff = (hf_model(torch.tensor([ids])).logits - logits_fn(torch.tensor([ids]))).abs().max()
        prompt = hf_tokenizer("The", return_tensors="pt")
        out = hf_model.generate(**prompt, max_new_tokens=12, do_sample=False)
    return {"tokens": len(ids), "same_tokens": same, "max_abs_diff": float(diff),
            "generated": hf_tokenizer.decode(out[0], skip_special_tokens=True)}
