"""export_hf.py: a checkpoint as a Hugging Face folder. The references are independent of the export: the
checkpoint's own model built by gptlab.checkpoint.model_source (logits; greedy tokens by full forward passes or by
model.py's KVCache, as sample.py decodes), our tiktoken Encoding (tokens and text), GPT-2's byte map and a tiktoken
merge order worked out by hand, and gptlab.evals.hellaswag's scorer against lm-eval's loglikelihood computation
reproduced below (and, where lm-eval is installed, lm-eval itself)."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import FINEWEB_150, HELLASWAG_VAL, REPO, SHARED_DATA, TINY_SHAKESPEARE, run_script
from gptlab.core.errors import UserError
from gptlab.checkpoint.model_source import checkpoint_logits_fn, load_model

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.usefixtures("one_torch_thread")]

ODD_TEXTS = ["", " ", "   leading and trailing spaces   ", "tabs\tand\nnew\r\nlines\n\n\n", "émigré naïve café",
             "emoji 🌊🔥👩‍👩‍👧 and ZWJ", "中文字符和日本語のテキスト", "Ελληνικά κείμενα", "numbers 1234567 3.14159 1/8",
             "it's we'll they've I'M DON'T", "spaced out : a , b . c ! d ? it 's they n't", "<|endoftext|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>",
             "text <|endoftext|> inside", "<|endoftext", "<|endoftext|", "\u00a0\u2003nbsp and em space",
             "\x00\x01 control bytes \x7f", "x" * 300, "!!!???...,,,;;;", "CamelCaseWordsAndURLs http://a.b/c?d=e"]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """(out_dir, checkpoint path, CLI stdout): a random 6-layer checkpoint (final windows 2 and 1 blocks) with a
    2000-merge tokenizer trained on the bundled documents and Tiny Shakespeare, exported by the CLI."""
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import read_docs, save_tiny_tokenizer

    folder = tmp_path_factory.mktemp("hf")
    tok_path = save_tiny_tokenizer(str(folder / "tok_v2256.pkl"), read_docs(FINEWEB_150)
                                   + read_docs(TINY_SHAKESPEARE)[:500], 2000)
    ckpt_path = str(folder / "step_000010.pt")
    save_random_checkpoint(ckpt_path, tok_path, window_size=256)
    out_dir = str(folder / "hf_model")
    proc = run_script(["export_hf.py", ckpt_path, out_dir], check=True)
    return out_dir, ckpt_path, proc.stdout


@pytest.fixture(scope="module")
def ours(export):
    """(logits_fn, tiktoken Encoding, checkpoint): the checkpoint's own model (gptlab.checkpoint.model_source)."""
    return checkpoint_logits_fn(export[1])


@pytest.fixture(scope="module")
def hf(export):
    """(model, tokenizer) loaded back by transformers' Auto classes, as a user would."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir = export[0]
    return (AutoModelForCausalLM.from_pretrained(out_dir, trust_remote_code=True).float().eval(),
            AutoTokenizer.from_pretrained(out_dir))


def sample_documents():
    with open(FINEWEB_150) as f:
        return [json.loads(line)["text"] for line in f]


def greedy_uncached(logits_fn, tokens, n, eot):
    """Up to n greedy tokens after tokens, each from a full forward pass over all so far; stops after eot."""
    tokens, new = list(tokens), []
    with torch.no_grad():
        for _ in range(n):
            new.append(int(logits_fn(torch.tensor([tokens + new]))[0, -1].argmax()))
            if new[-1] == eot:
                break
    return new


def greedy_kv_cache(model, module, tokens, n, eot, n_vocab):
    """sample.py's decoding at temperature 0: the prompt, then each new token, through model.py's KVCache."""
    cache, new = module.KVCache(model, eot), []
    with torch.no_grad():
        logits = cache.forward(torch.tensor([tokens]))[0, -1, :n_vocab]
        for _ in range(n):
            new.append(int(logits.argmax()))
            if new[-1] == eot:
                break
            logits = cache.forward(torch.tensor([new[-1:]]))[0, -1, :n_vocab]
    return new


# ------------------------------------------------------------------------------------------------ tokenizer
def test_bytes_to_unicode_is_gpt2s_map():
    from gptlab.export.hf_folder import bytes_to_unicode

    mapping = bytes_to_unicode()
    # printable Latin-1 stays; the 68 others get 256, 257, ... in byte order (GPT-2's encoder.py)
    assert mapping[ord("a")] == "a" and mapping[ord("!")] == "!" and mapping[0xFF] == "ÿ" and mapping[0xAE] == "®"
    assert mapping[0] == "Ā" and mapping[ord(" ")] == "Ġ" and mapping[ord("\n")] == "Ċ"  # 256, 256+32, 256+10
    # DEL follows bytes 0-32; the soft hyphen (0xAD) follows those 33 and bytes 127-160 (34): 'Ń', as in GPT-2
    assert mapping[0x7F] == chr(256 + 33) and mapping[0xAD] == chr(256 + 33 + 34) == "Ń"
    assert len(set(mapping.values())) == 256


def test_merges_follow_tiktoken_where_the_trainers_merge_list_would_not():
    """A vocabulary where "abc" was made as (ab, c) but "bc" outranks "ab": tiktoken turns "abcd" into [abc, d]
    (bc first, then a+bc = abc, whose id is what counts), which a merge list of (ab, c) alone cannot reach."""
    import tiktoken
    from tokenizers import Tokenizer

    from gptlab.export.hf_folder import tiktoken_merges, tokenizer_json

    ranks = {bytes([i]): i for i in range(256)}
    ranks.update({b"bc": 256, b"ab": 257, b"abc": 258})
    special = {"<|endoftext|>": 259}
    pat = r"\p{L}+|\s+|[^\s\p{L}]+"
    enc = tiktoken.Encoding("hand", pat_str=pat, mergeable_ranks=ranks, special_tokens=special)
    assert enc.encode_ordinary("abcd") == [258, ord("d")]
    assert tiktoken_merges(ranks) == [(b"b", b"c"), (b"a", b"b"), (b"a", b"bc"), (b"ab", b"c")]
    hf = Tokenizer.from_str(json.dumps(tokenizer_json(pat, ranks, special)))
    for text in ["abcd", "abc", "xabcabcbcab", "ab c<|endoftext|>bcd"]:
        assert hf.encode(text).ids == enc.encode(text, allowed_special="all"), text
    # a token no merging reaches: "bc", then a + bc and bc + d are not tokens; tiktoken takes a pre-token that is
    # a token whole (so "wxyz" → [257]), which is what ignore_merges does
    ranks = {**{bytes([i]): i for i in range(256)}, b"xy": 256, b"wxyz": 257}
    enc = tiktoken.Encoding("hand2", pat_str=pat, mergeable_ranks=ranks, special_tokens=special)
    hf = Tokenizer.from_str(json.dumps(tokenizer_json(pat, ranks, special)))
    for text, expected in [("wxyz", [257]), ("wxyzw", [ord("w"), 256, ord("z"), ord("w")])]:
        assert enc.encode_ordinary(text) == expected and hf.encode(text).ids == expected, text


def test_auto_tokenizer_encodes_and_decodes_like_tiktoken(export, ours, hf):
    _, enc, _ = ours
    _, tokenizer = hf
    texts = ["<|endoftext|>" + doc for doc in sample_documents()] + ODD_TEXTS
    for text in texts:
        expected = enc.encode(text, allowed_special="all")
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == expected, text[:80]
        # by default every text starts a document, as in training and sample.py: <|endoftext|> first, even before
        # a text that starts with one (lm-eval then passes add_special_tokens=False)
        assert tokenizer(text)["input_ids"] == [enc.eot_token] + expected, text[:80]
        assert tokenizer.decode(expected) == enc.decode(expected)
        if "<|endoftext|>" not in text:  # skipping special tokens drops the added one: the text comes back
            assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == enc.decode(expected)
    # every id alone, including those that end inside a UTF-8 character
    ids = list(range(enc.n_vocab))
    assert [tokenizer.decode([i]) for i in ids] == [enc.decode([i]) for i in ids]
    assert tokenizer.eos_token_id == enc.eot_token and tokenizer.bos_token_id == enc.eot_token
    # tokenizer.json alone (the `tokenizers` library) knows <|endoftext|> is special: decoding can drop it
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(os.path.join(export[0], "tokenizer.json"))
    ids = enc.encode(texts[0] + "<|endoftext|>" + texts[1], allowed_special="all")
    assert raw.decode(ids, skip_special_tokens=False) == enc.decode(ids)
    assert raw.decode(ids, skip_special_tokens=True) == enc.decode([i for i in ids if i != enc.eot_token])
    # ... and puts it first by itself, one before each text of a pair: transformers 4 and 5 both use this
    # post-processor (5 drops tokenizer_config.json's add_bos_token when there is a tokenizer.json: it says so)
    assert raw.encode("The water").ids == [enc.eot_token] + enc.encode_ordinary("The water")
    assert raw.encode("The", "water").ids == [enc.eot_token, *enc.encode_ordinary("The"), enc.eot_token,
                                              *enc.encode_ordinary("water")]
    assert raw.encode("The water", add_special_tokens=False).ids == enc.encode_ordinary("The water")
    config = json.load(open(os.path.join(export[0], "tokenizer_config.json")))
    assert (config["add_bos_token"], config["add_eos_token"], config["bos_token"]) == (True, False, "<|endoftext|>")
    assert sorted(tokenizer("The water")) == ["attention_mask", "input_ids"]  # what the model takes


# ------------------------------------------------------------------------------------------------ model
def test_the_cli_checks_its_export_and_refuses_to_overwrite(export):
    out_dir, ckpt_path, stdout = export
    assert sorted(os.listdir(out_dir)) == ["config.json", "generation_config.json", "gptlab_model.py",
                                           "model.safetensors", "modeling_gptlab.py", "tokenizer.json",
                                           "tokenizer_config.json"]
    checked = re.search(r"checked with transformers: (\d+) tokens, tokenizer (\w+), max \|logits difference\| (\S+);",
                        stdout)
    assert checked and checked.group(2) == "identical" and float(checked.group(3)) <= 1e-4, stdout
    again = run_script(["export_hf.py", ckpt_path, out_dir])
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: {out_dir} already exists; pass --overwrite to replace it, or choose " \
                                   "another folder"
    config = json.load(open(os.path.join(out_dir, "config.json")))
    assert config["vocab_size"] == 2257 and config["padded_vocab_size"] == 2304  # 256 + 2000 + 1, padded to 128s
    assert (config["long_window_blocks"], config["short_window_blocks"]) == (2, 1)
    # the architecture is the checkpoint's, whole: its GPTConfig fields and its model source, verbatim
    from gptlab.checkpoint.checkpointing import load_checkpoint

    ckpt = load_checkpoint(ckpt_path)
    assert config["model_config"] == ckpt["model_config"]
    with open(os.path.join(out_dir, "gptlab_model.py"), encoding="utf-8", newline="") as f:
        assert f.read() == ckpt["model_source"]["code"]
    # transformers 4 would strip spaces before punctuation when decoding (5 ignores the flag for BPE)
    assert json.load(open(os.path.join(out_dir, "tokenizer_config.json")))["clean_up_tokenization_spaces"] is False


def test_the_exported_model_is_self_contained(export, hf):
    """The wrapper imports torch, transformers and the model source beside it (nothing from gptlab), and
    transformers runs that very source: it copies the relatively imported gptlab_model.py with the wrapper."""
    with open(os.path.join(REPO, "gptlab", "export", "modeling_gptlab.py")) as f:
        imports = {line.split()[1] for line in f if line.startswith(("import ", "from "))}
    absolute = {name.split(".")[0] for name in imports if not name.startswith(".")}
    assert absolute == {"copy", "sys", "torch", "transformers"}
    assert {name for name in imports if name.startswith(".")} == {".gptlab_model"}
    model, _ = hf
    gpt_module = sys.modules[type(model.model).__module__]
    assert gpt_module.__name__.endswith(".gptlab_model") and "gptlab.train" not in gpt_module.__name__
    with open(gpt_module.__file__) as f, open(os.path.join(export[0], "gptlab_model.py")) as g:
        assert f.read() == g.read()


def test_hf_logits_equal_the_checkpoints_on_the_sample_documents(export, ours, hf):
    """Rows of real documents with <|endoftext|> in the middle, lengths off the 128 grid and longer than both
    windows (so windows and documents both cut attention), float32, max |difference| <= 1e-4."""
    logits_fn, enc, _ = ours
    model, _ = hf
    eot = enc.eot_token
    docs = [enc.encode_ordinary(doc) for doc in sample_documents()[:6]]
    rows = [[eot] + docs[0][:150] + [eot] + docs[1][:149],  # 300 tokens
            [eot] + docs[2][:200] + [eot] + docs[3][:250] + [eot] + docs[4][:64],  # 517
            docs[5][100:229],  # 129, starting mid-document
            docs[5][:1]]
    worst = 0.0
    with torch.no_grad():
        for row in rows:
            expected = logits_fn(torch.tensor([row]))
            got = model(torch.tensor([row])).logits
            assert got.shape == expected.shape == (1, len(row), enc.n_vocab)
            worst = max(worst, float((got - expected).abs().max()))
        assert worst <= 1e-4
        # the agreement means something: the same model without the windows (5 blocks cover the row) differs
        gpt = load_model(export[1])[0]

        def no_windows(tokens):
            return gpt.predict(tokens, eot, windows=(5, 5))[..., :enc.n_vocab]
        assert (no_windows(torch.tensor([rows[1]])) - model(torch.tensor([rows[1]])).logits).abs().max() > 1e-2


def test_padding_with_an_attention_mask_leaves_each_rows_logits_alone(ours, hf):
    """Left or right padding, with <|endoftext|> or another id (lm-eval pads with 0): the real positions get the
    logits of the row alone."""
    logits_fn, enc, _ = ours
    model, _ = hf
    eot = enc.eot_token
    rows = [[eot] + enc.encode_ordinary(doc)[:n] for doc, n in zip(sample_documents()[20:23], (260, 140, 30))]
    expected = [logits_fn(torch.tensor([row]))[0] for row in rows]
    width = max(map(len, rows))
    for side in ("left", "right"):
        for pad in (eot, 0):
            ids = torch.full((3, width), pad)
            mask = torch.zeros(3, width, dtype=torch.long)
            for i, row in enumerate(rows):
                cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
                ids[i, cols], mask[i, cols] = torch.tensor(row), 1
            with torch.no_grad():
                got = model(ids, attention_mask=mask).logits
            # no NaN anywhere, padding positions included (a fully masked query is NaN in SDPA before torch 2.5,
            # and NaN values poison the real rows' attention through 0 x NaN)
            assert torch.isfinite(got).all()
            for i, row in enumerate(rows):
                cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
                assert (got[i, cols] - expected[i]).abs().max() <= 1e-4, (side, pad, i)


def test_padding_is_masked_for_rows_that_do_not_start_with_endoftext(ours, hf):
    """Rows whose first real token is not <|endoftext|>: the document mask no longer hides left padding from them,
    only the attention mask does; each row's real positions must still get the logits of the row alone."""
    logits_fn, enc, _ = ours
    model, _ = hf
    eot = enc.eot_token
    rows = [enc.encode_ordinary(doc)[:n] for doc, n in zip(sample_documents()[30:33], (90, 40, 12))]
    assert all(len(row) == n and eot not in row for row, n in zip(rows, (90, 40, 12)))
    expected = [logits_fn(torch.tensor([row]))[0] for row in rows]
    width = max(map(len, rows))
    for side in ("left", "right"):
        for pad in (eot, 0, rows[0][0]):
            ids = torch.full((3, width), pad)
            mask = torch.zeros(3, width, dtype=torch.long)
            for i, row in enumerate(rows):
                cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
                ids[i, cols], mask[i, cols] = torch.tensor(row), 1
            for use_cache in (False, True):
                with torch.no_grad():
                    got = model(ids, attention_mask=mask, use_cache=use_cache).logits
                for i, row in enumerate(rows):
                    cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
                    assert (got[i, cols] - expected[i]).abs().max() <= 1e-4, (side, pad, use_cache, i)


def test_the_buffers_the_model_source_computes_survive_loading(export):
    """Non-persistent buffers (rotary tables) are in no checkpoint: transformers 5 loads a model built on the meta
    device, empties them and asks _init_weights for them, which gives back the values GPT's __init__ computed."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(export[0], trust_remote_code=True)  # untouched by other tests
    fresh = dict(load_model(export[1])[0].named_buffers())
    buffers = dict(model.model.named_buffers())
    assert buffers and buffers.keys() == fresh.keys()
    assert all(torch.equal(buffers[name], fresh[name]) for name in fresh)
    emptied = [(module, name) for module in model.model.modules() for name in module._non_persistent_buffers_set]
    assert emptied
    try:
        for module, name in emptied:
            getattr(module, name).fill_(float("nan"))
    finally:
        for module in model.model.modules():
            model._init_weights(module)
    assert all(torch.equal(dict(model.model.named_buffers())[name], fresh[name]) for name in fresh)


def test_generate_continues_greedily_as_our_sampler_does(ours, hf):
    from gptlab.export.generate import generate, uncached_next_logits

    logits_fn, enc, _ = ours
    model, tokenizer = hf
    prompt = tokenizer("The water cycle", return_tensors="pt")  # <|endoftext|> first, as sample.py starts
    assert prompt["input_ids"][0].tolist() == [enc.eot_token] + enc.encode_ordinary("The water cycle")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=20, do_sample=False)
    hf_tokens = out[0, prompt["input_ids"].size(1):].tolist()
    expected = list(generate(uncached_next_logits(logits_fn), prompt["input_ids"][0].tolist(), 20, temperature=0,
                             stop_token=enc.eot_token))
    assert hf_tokens[:len(expected)] == expected and len(expected) >= 1


def test_generate_with_its_kv_cache_decodes_a_left_padded_batch_as_each_row_alone(ours, hf):
    """Three prompts of different lengths, left-padded: generate() (its KV cache) gives each row the greedy tokens
    that full forward passes of the checkpoint's model give the row alone, and generate(use_cache=False) the
    same; after the prompts, the model only ever sees one new token of one row at a time."""
    logits_fn, enc, _ = ours
    model, tokenizer = hf
    eot, n_new = enc.eot_token, 24
    prompts = ["The water cycle moves water between the oceans", "Once", "In this lesson we will learn"]
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        batch = tokenizer(prompts, return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = side
    width = batch["input_ids"].size(1)
    assert len({int(n) for n in batch["attention_mask"].sum(dim=1)}) == 3 and batch["attention_mask"][:, 0].sum() == 1
    shapes = []
    hook = model.model.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    try:
        with torch.no_grad():
            cached = model.generate(**batch, max_new_tokens=n_new, do_sample=False)
    finally:
        hook.remove()
    with torch.no_grad():
        uncached = model.generate(**batch, max_new_tokens=n_new, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)
    assert shapes[:3] == [(1, int(n)) for n in batch["attention_mask"].sum(dim=1)]  # each prompt, unpadded
    assert len(shapes) > 3 and set(shapes[3:]) == {(1, 1)}
    for i, prompt in enumerate(prompts):
        expected = greedy_uncached(logits_fn, [eot] + enc.encode_ordinary(prompt), n_new, eot)
        assert cached[i, width:width + len(expected)].tolist() == expected, i
    # beam search reorders the per-row caches (a row chosen twice gets a copy)
    with torch.no_grad():
        beams = [model.generate(**batch, max_new_tokens=8, num_beams=3, do_sample=False, use_cache=use_cache)
                 for use_cache in (True, False)]
    assert torch.equal(beams[0], beams[1])


def test_the_text_generation_pipeline_continues_a_prompt_as_sample_py_does(export, ours, hf):
    """pipeline("text-generation") with greedy decoding: the tokens are [<|endoftext|>] + the prompt's, then what
    sample.py's decoding (model.py's KVCache on the checkpoint's own model) gives; the text is the prompt and the
    continuation's text."""
    from transformers import pipeline

    _, enc, _ = ours
    model, tokenizer = hf
    eot, prompt = enc.eot_token, "Once upon a time, there was"
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    tokens = generator(prompt, max_new_tokens=20, do_sample=False, return_tensors=True)[0]["generated_token_ids"]
    gpt, module, _ = load_model(export[1])
    prompt_tokens = [eot] + enc.encode(prompt, allowed_special="all")  # sample.py's prompt
    expected = greedy_kv_cache(gpt, module, prompt_tokens, 20, eot, enc.n_vocab)
    assert list(tokens) == prompt_tokens + expected
    text = generator(prompt, max_new_tokens=20, do_sample=False)[0]["generated_text"]
    assert text == prompt + enc.decode([t for t in expected if t != eot])


TOKENIZER_PROBE = """import json, sys, transformers
how, out_dir = sys.argv[1], sys.argv[2]
if how == "auto":
    tokenizer = transformers.AutoTokenizer.from_pretrained(out_dir)
elif how == "auto_trusted":
    tokenizer = transformers.AutoTokenizer.from_pretrained(out_dir, trust_remote_code=True)
else:
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(out_dir)
print("\\nids:", json.dumps(tokenizer("The water")["input_ids"]))
"""


def load_tokenizer_without_stdin(out_dir, how):
    """(exit code, stdout, stderr) of loading the exported tokenizer in a fresh process whose stdin is closed."""
    proc = subprocess.run([sys.executable, "-c", TOKENIZER_PROBE, how, out_dir], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=REPO))
    return proc.returncode, proc.stdout, proc.stderr


TRUST_QUESTION = "Do you wish to run the custom code?"


@pytest.mark.parametrize("how", ["auto", "auto_trusted", "fast"])
def test_the_tokenizer_loads_without_trusting_code_and_with_stdin_closed(export, ours, how):
    """AutoTokenizer with trust_remote_code unset (or True), and PreTrainedTokenizerFast, load the tokenizer and
    put <|endoftext|> first; with trust_remote_code=True and PreTrainedTokenizerFast nothing asks to trust code."""
    _, enc, _ = ours
    code, out, err = load_tokenizer_without_stdin(export[0], how)
    assert code == 0, err
    assert json.loads(out.rsplit("ids:", 1)[-1]) == [enc.eot_token] + enc.encode_ordinary("The water")
    if how != "auto":
        assert TRUST_QUESTION not in out + err


@pytest.mark.skipif(int(transformers.__version__.split(".")[0]) >= 5,
                    reason="transformers 5's AutoTokenizer.from_pretrained loads config.json through AutoConfig "
                           "before it reads tokenizer_config.json, and AutoConfig asks to trust any config whose "
                           "auto_map names remote code for an unregistered model_type: no file of the folder can "
                           "avoid it (4.x reads tokenizer_config.json's tokenizer_class first); pass "
                           "trust_remote_code=True or use PreTrainedTokenizerFast")
def test_auto_tokenizer_does_not_ask_to_trust_code(export):
    code, out, err = load_tokenizer_without_stdin(export[0], "auto")
    assert code == 0 and TRUST_QUESTION not in out + err


# ------------------------------------------------------------------------------------------------ lm-eval's path
def lm_eval_hellaswag_docs(n):
    """The first n HellaSwag validation examples as lm-eval's `hellaswag` task (v0.4, tasks/hellaswag/utils.py)
    poses them: query = preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize()), the four endings
    preprocessed, gold = label; each ending is scored as the continuation " " + ending (target_delimiter)."""
    def preprocess(text):
        text = text.strip().replace(" [title]", ". ")
        text = re.sub("\\[.*?\\]", "", text)
        return text.replace("  ", " ")

    with open(HELLASWAG_VAL) as f:
        rows = [json.loads(line) for _, line in zip(range(n), f)]
    return [{"query": preprocess(r["activity_label"] + ": " + r["ctx_a"] + " " + r["ctx_b"].capitalize()),
             "choices": [preprocess(e) for e in r["endings"]], "gold": int(r["label"])} for r in rows]


def lm_eval_loglikelihoods(model, tokenizer, requests, max_length, batch_size=16):
    """lm-eval's HFLM.loglikelihood for a causal model, step by step (v0.4.13: api/model.py _encode_pair, then
    models/huggingface.py tok_encode and _loglikelihood_tokens): trailing spaces of the context move to the
    continuation; encode is the tokenizer's own default (add_bos_token unset), with add_special_tokens=False for a
    string that starts with the prefix token's text; the continuation's tokens are those of
    encode(context + continuation) after len(encode(context)); the input is
    (context + continuation)[-(max_length + 1):][:-1], right-padded with id 0 to the batch's longest, through
    model(inputs).logits with no attention mask; log_softmax in float32; the continuation's log-probabilities are
    read at its last len(continuation) input positions and summed. Returns (log-likelihoods, continuation token
    lists)."""
    prefix = tokenizer.decode(tokenizer.bos_token_id)

    def encode(text):
        return tokenizer.encode(text, **({"add_special_tokens": False} if text.startswith(prefix) else {}))

    encoded = []
    for context, continuation in requests:
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole, context_ids = encode(context + continuation), encode(context)
        encoded.append((context_ids, whole[len(context_ids):]))
    lls = []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start:start + batch_size]
        inputs = [(ctx + cont)[-(max_length + 1):][:-1] for ctx, cont in chunk]
        batch = torch.zeros(len(inputs), max(map(len, inputs)), dtype=torch.long)
        for i, inp in enumerate(inputs):
            batch[i, :len(inp)] = torch.tensor(inp)
        with torch.no_grad():
            log_probs = torch.log_softmax(model(batch).logits, dim=-1, dtype=torch.float32)
        for i, (inp, (_, cont)) in enumerate(zip(inputs, chunk)):
            picked = log_probs[i, len(inp) - len(cont):len(inp)]
            lls.append(float(picked.gather(1, torch.tensor(cont)[:, None]).sum()))
    return lls, [cont for _, cont in encoded]


def test_lm_evals_hellaswag_path_through_the_export_agrees_with_our_scorer(ours, hf):
    """The first 100 examples, posed as lm-eval poses them, scored two independent ways: lm-eval's loglikelihood
    computation through the exported HF model and HF tokenizer, and gptlab.evals.hellaswag.score_examples through
    the checkpoint's own model on the same texts (prepend_eot=True, its default: the exported tokenizer puts
    <|endoftext|> in front, and lm-eval keeps it). They must give the same log-likelihood per ending, hence the same
    acc; acc_norm is computed from each side's numbers with lm-eval's rule (log-likelihood / characters of the
    ending; gptlab's own acc_norm divides by tokens)."""
    from gptlab.evals.hellaswag import score_examples

    logits_fn, enc, _ = ours
    model, tokenizer = hf
    docs = lm_eval_hellaswag_docs(100)
    requests = [(d["query"], " " + choice) for d in docs for choice in d["choices"]]
    lls, continuations = lm_eval_loglikelihoods(model, tokenizer, requests, model.config.max_position_embeddings)
    # lm-eval's split of the joint encoding is ours for every ending (no merge across the context's end)
    assert continuations == [enc.encode_ordinary(cont) for _, cont in requests]
    scores = score_examples(logits_fn, enc, [{"ctx": d["query"], "endings": d["choices"], "label": d["gold"]}
                                             for d in docs], prepend_eot=True, batch_size=25)
    ours_ll = np.array([[-s for s in score["loss_sum"]] for score in scores])
    theirs_ll = np.array(lls).reshape(100, 4)
    assert np.abs(ours_ll - theirs_ll).max() < 1e-3
    chars = np.array([[len(c) for c in d["choices"]] for d in docs], dtype=float)
    gold = np.array([d["gold"] for d in docs])
    acc = {name: float(np.mean(ll.argmax(1) == gold)) for name, ll in (("ours", ours_ll), ("lm-eval", theirs_ll))}
    acc_norm = {name: float(np.mean((ll / chars).argmax(1) == gold))
                for name, ll in (("ours", ours_ll), ("lm-eval", theirs_ll))}
    assert acc["ours"] == acc["lm-eval"] == float(np.mean([s["pred"] == s["label"] for s in scores]))
    assert acc_norm["ours"] == acc_norm["lm-eval"]


def test_lm_eval_itself_gives_the_loglikelihoods_reproduced_here(export, hf):
    """Where lm-eval is installed (not in CI: it is heavy), its HFLM on the exported folder gives the numbers of
    lm_eval_loglikelihoods above, so the reproduction that CI runs is lm-eval's computation."""
    pytest.importorskip("lm_eval")
    pytest.importorskip("accelerate")
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    model, tokenizer = hf
    docs = lm_eval_hellaswag_docs(8)
    requests = [(d["query"], " " + choice) for d in docs for choice in d["choices"]]
    lm = HFLM(pretrained=export[0], trust_remote_code=True, batch_size=16, device="cpu")
    theirs = [ll for ll, _ in lm.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=r, idx=i)
                                                for i, r in enumerate(requests)], disable_tqdm=True)]
    reproduced, _ = lm_eval_loglikelihoods(model, tokenizer, requests, lm.max_length)
    assert lm.max_length == model.config.max_position_embeddings
    assert np.abs(np.array(theirs) - np.array(reproduced)).max() < 1e-4


def test_export_to_a_log_has_no_progress_bar_redraws(export, tmp_path):
    """stderr redirected (a pipe, as `> log 2>&1`): transformers' own "Loading weights" bar in the check step must
    not leave \\r redraws there (read as bytes: text mode would turn them into newlines)."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "export_hf.py"), export[1], str(tmp_path / "again")],
                          cwd=REPO, capture_output=True, env=dict(os.environ, PYTHONPATH=REPO), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert b"\r" not in proc.stderr + proc.stdout and b"\x1b" not in proc.stderr + proc.stdout, proc.stderr[-500:]
    assert b"checked with transformers" in proc.stdout
