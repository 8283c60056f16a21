"""A gptlab model as a Hugging Face folder: model.safetensors, config.json, modeling_gptlab.py (the architecture,
loaded with trust_remote_code=True) and the tokenizer as Hugging Face tokenizer files (tokenizer.json, ...).

The tokenizer.json is byte-level BPE that encodes as our tiktoken Encoding does. tiktoken repeatedly merges the
adjacent pair whose concatenation has the lowest id, and takes a whole pre-token that is itself a token as is; a
Hugging Face BPE merges by the rank of (left, right) pairs. So the merges list holds every split of every token
into two tokens, ranked by the id of the token they make (the trainer's own merges are among them), and
ignore_merges is on. The pre-tokenizer is the tokenizer's own split regex, then the GPT-2 byte-to-unicode mapping
(ByteLevel without its regex); <|endoftext|> is a special token with its id.
"""
import json
import os
import shutil

from gptlab.errors import UserError
from gptlab.experiment import write_json
from gptlab.fileio import atomic_output_dir

MODELING_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "modeling_gptlab.py")
HF_FILES_HINT = "pip install transformers safetensors"


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


def tokenizer_json(pat_str, mergeable_ranks, special_tokens):
    """tokenizer.json's content (a dict) for a gptlab tokenizer (gptlab.tokenizer.read_tokenizer_file's fields)."""
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
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {text(token): rank for token, rank in sorted(mergeable_ranks.items(), key=lambda kv: kv[1])},
                  "merges": [[text(left), text(right)] for left, right in tiktoken_merges(mergeable_ranks)]},
    }


def hf_config(model_config, padded_vocab, windows, attn_scale, eot_id, n_vocab):
    """The GptlabConfig fields of a checkpoint's model (model_config: train_gpt.model_config_of's dict;
    padded_vocab: its embedding rows; windows: the final (long, short) window in blocks; attn_scale:
    train_gpt.attention_scale(head_dim)). vocab_size is the tokenizer's n_vocab: the logits cover its ids only."""
    return {"vocab_size": n_vocab, "padded_vocab_size": padded_vocab, "num_layers": model_config["num_layers"],
            "num_heads": model_config["num_heads"], "head_dim": model_config["head_dim"],
            "model_dim": model_config["model_dim"], "mlp_ratio": model_config["mlp_ratio"],
            "num_val_emb": model_config["num_val_emb"], "long_window_blocks": windows[0],
            "short_window_blocks": windows[1], "attn_scale": attn_scale, "eot_token_id": eot_id,
            "max_position_embeddings": model_config["max_seq_len"]}


def _require_transformers():
    try:
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as err:
        raise UserError(f"exporting to Hugging Face needs {err.name}: {HF_FILES_HINT}") from None


def write_hf_folder(out_dir, *, model_state, config_fields, tokenizer_data, overwrite=False):
    """Write the Hugging Face folder out_dir (atomically: built beside it, then renamed into place).

    model_state: train_gpt.GPT's state dict (its names are the exported model's); tokenizer_data: the dict of
    gptlab.tokenizer.read_tokenizer_file; config_fields: hf_config's."""
    _require_transformers()
    from tokenizers import Tokenizer

    from gptlab.modeling_gptlab import GptlabConfig, GptlabForCausalLM

    eot = config_fields["eot_token_id"]
    eot_text = next(s for s, i in tokenizer_data["special_tokens"].items() if i == eot)
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp_dir:
        config = GptlabConfig(**config_fields)
        config.auto_map = {"AutoConfig": "modeling_gptlab.GptlabConfig",
                           "AutoModelForCausalLM": "modeling_gptlab.GptlabForCausalLM"}
        config.architectures = ["GptlabForCausalLM"]
        model = GptlabForCausalLM(config)
        model.load_state_dict(model_state, strict=True)
        model.save_pretrained(tmp_dir, safe_serialization=True)
        shutil.copyfile(MODELING_FILE, os.path.join(tmp_dir, "modeling_gptlab.py"))
        tokenizer_text = json.dumps(tokenizer_json(tokenizer_data["pat_str"], tokenizer_data["mergeable_ranks"],
                                                   tokenizer_data["special_tokens"]), ensure_ascii=False)
        try:  # the Rust tokenizer must accept it (e.g. a custom split regex Oniguruma cannot compile)
            Tokenizer.from_str(tokenizer_text)
        except Exception as err:
            raise UserError(f"Hugging Face tokenizers cannot read this tokenizer ({err}), so it cannot be "
                            "exported; a tokenizer trained with --pattern gpt4 or gpt2 can be") from None
        with open(os.path.join(tmp_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tokenizer_text)
        # PreTrainedTokenizerFast: the name both transformers 4 and 5 know; no tokens added around the text
        write_json(os.path.join(tmp_dir, "tokenizer_config.json"), {
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": eot_text, "eos_token": eot_text,
            "pad_token": eot_text, "add_bos_token": False, "add_eos_token": False,
            "clean_up_tokenization_spaces": False})
        for name in os.listdir(tmp_dir):  # safetensors writes 0600; the folder is meant to be shared
            os.chmod(os.path.join(tmp_dir, name), 0o644)
    return out_dir


CHECK_TEXT = ("<|endoftext|>The water cycle moves water between the oceans, the air and the land. Évaporation "
              "🌊,\n\n  rain   and snow.<|endoftext|>Once upon a time, there was a lesson about fractions: 3/4 + 1/8.")


def check_export(out_dir, logits_fn, encoding, text=CHECK_TEXT):
    """Load out_dir with transformers' Auto classes and compare with the checkpoint: {"tokens", "same_tokens"
    (encode and decode as tiktoken does), "max_abs_diff" (float32 logits against logits_fn's), "generated" (a
    greedy continuation of "The" by generate())}."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf_tokenizer = AutoTokenizer.from_pretrained(out_dir, trust_remote_code=True)  # (transformers 5 reads config.json)
    hf_model = AutoModelForCausalLM.from_pretrained(out_dir, trust_remote_code=True).float().eval()
    ids = encoding.encode(text, allowed_special="all")
    same = hf_tokenizer(text)["input_ids"] == ids and hf_tokenizer.decode(ids) == encoding.decode(ids)
    with torch.no_grad():
        diff = (hf_model(torch.tensor([ids])).logits - logits_fn(torch.tensor([ids]))).abs().max()
        prompt = hf_tokenizer("<|endoftext|>The", return_tensors="pt")
        out = hf_model.generate(**prompt, max_new_tokens=12, do_sample=False)
    return {"tokens": len(ids), "same_tokens": same, "max_abs_diff": float(diff),
            "generated": hf_tokenizer.decode(out[0, 1:])}
