"""export_hf.py: a checkpoint as a Hugging Face folder. The references are independent of the export: train_gpt's
own model (logits), our tiktoken Encoding (tokens and text), GPT-2's byte map and a tiktoken merge order worked
out by hand, and gptlab.evals.hellaswag's scorer against lm-eval's loglikelihood computation reproduced below
(and, where lm-eval is installed, lm-eval itself)."""
import contextlib
import json
import os
import re
import sys

import numpy as np
import pytest
import torch

from conftest import FINEWEB_150, HELLASWAG_VAL, REPO, SHARED_DATA, TINY_SHAKESPEARE, run_script
from gptlab.errors import UserError

sys.path.insert(0, REPO)
import train_gpt  # noqa: E402

pytest.importorskip("transformers")
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
    """(logits_fn, tiktoken Encoding, checkpoint): the checkpoint through train_gpt."""
    return train_gpt.checkpoint_logits_fn(export[1])


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


# ------------------------------------------------------------------------------------------------ tokenizer
def test_bytes_to_unicode_is_gpt2s_map():
    from gptlab.hf_export import bytes_to_unicode

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

    from gptlab.hf_export import tiktoken_merges, tokenizer_json

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
        assert tokenizer(text)["input_ids"] == expected, text[:80]
        assert tokenizer.decode(expected) == enc.decode(expected)
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


# ------------------------------------------------------------------------------------------------ model
def test_the_cli_checks_its_export_and_refuses_to_overwrite(export):
    out_dir, ckpt_path, stdout = export
    assert sorted(os.listdir(out_dir)) == ["config.json", "generation_config.json", "model.safetensors",
                                           "modeling_gptlab.py", "tokenizer.json", "tokenizer_config.json"]
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
    # transformers 4 would strip spaces before punctuation when decoding (5 ignores the flag for BPE)
    assert json.load(open(os.path.join(out_dir, "tokenizer_config.json")))["clean_up_tokenization_spaces"] is False


def test_the_exported_model_is_self_contained():
    with open(os.path.join(REPO, "gptlab", "modeling_gptlab.py")) as f:
        imports = {line.split()[1].split(".")[0] for line in f if line.startswith(("import ", "from "))}
    assert imports == {"torch", "transformers"}


def test_hf_logits_equal_train_gpts_on_the_sample_documents(export, ours, hf):
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
        no_windows = train_gpt.make_logits_fn(train_gpt.load_model(export[1])[0], eot, (5, 5), False,
                                              contextlib.nullcontext, enc.n_vocab)
        assert (no_windows(torch.tensor([rows[1]])) - model(torch.tensor([rows[1]])).logits).abs().max() > 1e-2


def test_padding_with_an_attention_mask_leaves_each_rows_logits_alone(ours, hf):
    logits_fn, enc, _ = ours
    model, _ = hf
    eot = enc.eot_token
    rows = [[eot] + enc.encode_ordinary(doc)[:n] for doc, n in zip(sample_documents()[20:23], (260, 140, 30))]
    width = max(map(len, rows))
    from gptlab.modeling_gptlab import attention_masks

    for side in ("left", "right"):
        ids = torch.full((3, width), eot)
        mask = torch.zeros(3, width, dtype=torch.long)
        for i, row in enumerate(rows):
            cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
            ids[i, cols], mask[i, cols] = torch.tensor(row), 1
        with torch.no_grad():
            got = model(ids, attention_mask=mask).logits
        # every query sees at least one key, padding too (a fully masked row is NaN in SDPA before torch 2.5, and
        # NaN values poison the real rows' attention through 0 x NaN)
        assert all(m.any(dim=-1).all() for m in attention_masks(ids, mask, model.config)[1].values())
        for i, row in enumerate(rows):
            cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
            assert (got[i, cols] - logits_fn(torch.tensor([row]))[0]).abs().max() <= 1e-4, (side, i)


def test_generate_continues_greedily_as_our_sampler_does(ours, hf):
    from gptlab.generate import generate, uncached_next_logits

    logits_fn, enc, _ = ours
    model, tokenizer = hf
    prompt = tokenizer("<|endoftext|>The water cycle", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=20, do_sample=False)
    hf_tokens = out[0, prompt["input_ids"].size(1):].tolist()
    expected = list(generate(uncached_next_logits(logits_fn), prompt["input_ids"][0].tolist(), 20, temperature=0,
                             stop_token=enc.eot_token))
    assert hf_tokens[:len(expected)] == expected and len(expected) >= 1


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
    """lm-eval's HFLM.loglikelihood for a causal model, step by step (api/model.py _encode_pair, then
    models/huggingface.py _loglikelihood_tokens): trailing spaces of the context move to the continuation; the
    continuation's tokens are those of encode(context + continuation) after len(encode(context)); the input is
    (context + continuation)[-(max_length + 1):][:-1], right-padded with id 0 to the batch's longest, through
    model(inputs).logits with no attention mask; log_softmax in float32; the continuation's log-probabilities are
    read at its last len(continuation) input positions and summed. Returns (log-likelihoods, continuation token
    lists)."""
    encoded = []
    for context, continuation in requests:
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole, context_ids = tokenizer.encode(context + continuation), tokenizer.encode(context)
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
    train_gpt's model on the same texts (prepend_eot=False: lm-eval adds no <|endoftext|> in front). They must give
    the same log-likelihood per ending, hence the same acc; acc_norm is computed from each side's numbers with
    lm-eval's rule (log-likelihood / characters of the ending; gptlab's own acc_norm divides by tokens)."""
    from gptlab.evals.hellaswag import score_examples

    logits_fn, enc, _ = ours
    model, tokenizer = hf
    docs = lm_eval_hellaswag_docs(100)
    requests = [(d["query"], " " + choice) for d in docs for choice in d["choices"]]
    lls, continuations = lm_eval_loglikelihoods(model, tokenizer, requests, model.config.max_position_embeddings)
    # lm-eval's split of the joint encoding is ours for every ending (no merge across the context's end)
    assert continuations == [enc.encode_ordinary(cont) for _, cont in requests]
    scores = score_examples(logits_fn, enc, [{"ctx": d["query"], "endings": d["choices"], "label": d["gold"]}
                                             for d in docs], prepend_eot=False, batch_size=25)
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
