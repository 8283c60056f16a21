"""Bad input to the tools that use a model (issue 24): crafted checkpoints (a version field that would skip the
checksum, missing or wrong-typed entries, weights of the wrong dtype or shape, configurations that would allocate
without bound), sample.py's and download_hellaswag.py's number flags, HellaSwag rows of any length and
--hellaswag_path naming something that is not a file. Each is one UserError (one line), never a traceback. The
scripts' command lines on the same inputs: tests/e2e/test_use_faults_e2e.py."""
import os

import pytest
import torch

from helpers.sample_checkpoint import checkpoint  # noqa: F401 (a fixture)

from gptlab.core.errors import UserError
from gptlab.checkpoint import checkpointing, convert_checkpoint, model_source
from gptlab.checkpoint.format import CHECKPOINT_VERSION, payload_sha256


def craft(src, dst, change, resign=True):
    """src's payload changed by change(payload) (which may return a replacement), saved at dst; resign: with a
    checksum that matches the change (a crafted file, not a damaged one)."""
    payload = torch.load(src, weights_only=True)
    replaced = change(payload)
    payload = payload if replaced is None else replaced
    if resign and isinstance(payload, dict):
        payload["sha256"] = payload_sha256(payload)
    torch.save(payload, dst)
    return str(dst)


def refused(call, *phrases):
    with pytest.raises(UserError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    for phrase in phrases:
        assert phrase in message, message
    return message


def flip_a_weight(payload):
    weight = payload["model"]["embed.weight"]
    weight.view(torch.int32)[0, 0] ^= 1 << 20


# ---- item 6: a version field cannot opt out of the checksum

@pytest.mark.parametrize("version", [1, 2, 0, -1, "3", 3.0, True, None, 10**30])
def test_a_flipped_weight_is_refused_whatever_the_version_field_says(checkpoint, tmp_path, version):
    ckpt, _ = checkpoint

    def change(payload):
        flip_a_weight(payload)
        payload["format_version"] = version

    path = craft(ckpt, tmp_path / "c.pt", change, resign=False)
    refused(lambda: checkpointing.load_checkpoint(path), path)
    refused(lambda: checkpointing.load_checkpoint(path, allow_old=True), path)  # the converter's reading too
    refused(lambda: model_source.load_model(path), path)


def test_a_checkpoint_without_a_checksum_is_old_and_refused_by_every_reader(checkpoint, tmp_path):
    """Only format 1 had no checksum: a file without one is refused with the conversion line, and the converter
    asks for --unverified before it signs such content."""
    ckpt, _ = checkpoint

    def change(payload):
        flip_a_weight(payload)
        payload["format_version"] = 1
        del payload["sha256"]

    path = craft(ckpt, tmp_path / "c.pt", change, resign=False)
    refused(lambda: checkpointing.load_checkpoint(path), "python -m gptlab.checkpoint.convert_checkpoint", path)
    refused(lambda: convert_checkpoint.main([path]), "--unverified")
    assert not os.path.exists(tmp_path / "c_v3.pt")
    for version in (2, 3):  # formats 2 and 3 always carry one
        other = craft(ckpt, tmp_path / f"v{version}.pt",
                      lambda p, v=version: [p.update(format_version=v), p.pop("sha256"), None][2], resign=False)
        refused(lambda: checkpointing.load_checkpoint(other, allow_old=True), "damaged")


# ---- item 17 and crafted files: the structure, checked at load

@pytest.mark.parametrize("top", [[1, 2], "text", 5, None, torch.zeros(3)])
def test_a_top_level_that_is_no_dict_is_refused(checkpoint, tmp_path, top):
    ckpt, _ = checkpoint
    path = str(tmp_path / "c.pt")
    torch.save(top, path)
    refused(lambda: model_source.load_model(path), "not a gptlab checkpoint")


@pytest.mark.parametrize("key", ["model_config", "model", "args", "tokenizer", "step", "model_source", "optimizers",
                                 "rng", "data"])
def test_a_checkpoint_without_an_entry_names_it(checkpoint, tmp_path, key):
    ckpt, _ = checkpoint
    path = craft(ckpt, tmp_path / "c.pt", lambda payload: [payload.pop(key), None][1])
    refused(lambda: checkpointing.load_checkpoint(path), repr(key), path)


@pytest.mark.parametrize("key, value", [
    ("args", ["tokenizer", "x"]), ("args", "tokenizer"), ("args", None), ("model_config", [("num_layers", 6)]),
    ("model_config", None), ("model", {"embed.weight": [1.0, 2.0]}), ("model", {}), ("model", torch.zeros(2)),
    ("tokenizer", {"name": 5}), ("tokenizer", "tok"), ("step", "10"), ("step", -1), ("step", 1.5),
    ("model_source", {"code": 5}), ("model_source", "model.py"), ("optimizers", {"0": {}}), ("dataloader", [1]),
    ("rng", [1]), ("data", "x"), ("extra", None)])
def test_a_wrong_typed_entry_is_named(checkpoint, tmp_path, key, value):
    ckpt, _ = checkpoint
    path = craft(ckpt, tmp_path / "c.pt", lambda payload: payload.update({key: value}))
    refused(lambda: model_source.load_model(path), repr(key), path)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex64])
def test_weights_of_another_dtype_are_refused_by_name(checkpoint, tmp_path, dtype):
    ckpt, _ = checkpoint
    path = craft(ckpt, tmp_path / "c.pt",
                 lambda payload: payload["model"].update({"embed.weight": payload["model"]["embed.weight"].to(dtype)}))
    refused(lambda: model_source.load_model(path), "embed.weight", str(dtype), path)


@pytest.mark.parametrize("change, phrase", [
    (lambda m: m.update({"embed.weight": m["embed.weight"][:-1]}), "embed.weight"),
    (lambda m: m.update({"embed.weight": m["embed.weight"].reshape(-1)}), "embed.weight"),
    (lambda m: m.update({"embed.weight": torch.zeros(())}), "embed.weight"),
    (lambda m: [m.pop("lm_head.weight"), None][1], "lm_head.weight"),
    (lambda m: m.update({"surplus": torch.zeros(2)}), "surplus"),
])
def test_weights_of_another_shape_or_name_are_refused(checkpoint, tmp_path, change, phrase):
    ckpt, _ = checkpoint
    path = craft(ckpt, tmp_path / "c.pt", lambda payload: change(payload["model"]))
    refused(lambda: model_source.load_model(path), phrase, path)


@pytest.mark.parametrize("field, value", [("num_layers", 10**6), ("model_dim", 2**40), ("vocab_size", 10**15),
                                          ("max_seq_len", 10**12), ("num_layers", "6"), ("num_layers", [6]),
                                          ("mlp_ratio", float("nan")), ("unknown_field", 1), ("num_heads", 0)])
def test_a_crafted_configuration_is_refused_before_anything_is_allocated(checkpoint, tmp_path, field, value):
    """A configuration that would build a huge model (or rotary tables) is refused on torch's meta device, before
    memory is allocated; one that the model rejects is one line."""
    ckpt, _ = checkpoint
    path = craft(ckpt, tmp_path / "c.pt", lambda payload: payload["model_config"].update({field: value}))
    refused(lambda: model_source.load_model(path), path)


def test_the_untouched_checkpoint_still_loads(checkpoint):
    ckpt, _ = checkpoint
    model, _, payload = model_source.load_model(ckpt)
    assert payload["format_version"] == CHECKPOINT_VERSION


# ---- item 14: number flags of sample.py and download_hellaswag.py

def _script(name):
    import importlib
    import sys

    from conftest import REPO
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    return importlib.import_module(name)


@pytest.mark.parametrize("flags, phrase", [
    (["--temperature", "nan"], "--temperature"), (["--temperature", "inf"], "--temperature"),
    (["--temperature", "-1e-45"], "--temperature"), (["--seed", str(10**23)], "--seed"), (["--seed", "-1"], "--seed"),
    (["--seed", str(2**63)], "--seed"), (["--top_p", "nan"], "--top_p"), (["--top_p", "inf"], "--top_p"),
    (["--top_k", "0"], "--top_k"), (["--max_tokens", "-5"], "--max_tokens")])
def test_sample_refuses_numbers_it_cannot_use(flags, phrase):
    sample = _script("sample")

    def parse():
        sample.check_flags(sample.build_parser().parse_args(["c.pt"] + flags))

    refused(parse, phrase)


def test_sample_takes_the_largest_seed():
    sample = _script("sample")
    args = sample.build_parser().parse_args(["c.pt", "--seed", str(2**63 - 1)])
    torch.Generator().manual_seed(args.seed)  # the generator takes it


@pytest.mark.parametrize("value", ["inf", "nan", "1e300", "1e10", "0", "-1"])
def test_download_hellaswag_refuses_a_timeout_no_socket_can_hold(value):
    refused(lambda: _script("download_hellaswag").parse_args(["--timeout", value]), "--timeout")


@pytest.mark.parametrize("temperature", [1e-45, 1e-38, 1e-20, 1e-7, 1e30, 1e300])
def test_any_accepted_temperature_gives_a_distribution(temperature):
    """A temperature near 0 is greedy in the limit (the largest logits share the probability); a huge one is
    uniform over the tokens top-k keeps; never nan or inf."""
    from gptlab.export.generate import next_token_probs, sample_next

    logits = torch.tensor([1.0, 3.0, 3.0, -2.0, 0.5])
    for top_k, top_p in ((None, None), (3, None), (None, 0.9), (2, 0.5)):
        probs = next_token_probs(logits, temperature, top_k, top_p)
        assert torch.isfinite(probs).all() and abs(float(probs.sum()) - 1) < 1e-5, (temperature, top_k, top_p, probs)
    if temperature < 1e-6:
        assert next_token_probs(logits, temperature).tolist() == [0.0, 0.5, 0.5, 0.0, 0.0]
    generator = torch.Generator().manual_seed(0)
    assert sample_next(logits, temperature, generator=generator) in range(5)


# ---- item 15: HellaSwag rows of any length; item 21: --hellaswag_path that is not a file

def _write_rows(path, rows):
    import json

    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(path)


def _row(ctx="A man walks", endings=("in.", "out.", "up.", "down."), label=0):
    return {"ctx": ctx, "endings": list(endings), "label": label}


def test_a_long_context_is_cut_from_the_left_and_memory_stays_bounded(checkpoint, tmp_path):
    """A 20k-word context is scored on its last DEFAULT_MAX_SEQ_LEN tokens, in a forward pass no wider than that
    (the attack's 200k-word row made a 160 GB allocation): the score is the truncated row's."""
    from gptlab.evals import hellaswag as hs
    from gptlab.tokenizer.format import open_tokenizer

    enc = open_tokenizer(checkpoint[1]).encoding
    long_ctx = " ".join(["word"] * 20_000)
    widths = []

    def model_fn(tokens):
        widths.append(tuple(tokens.shape))
        return torch.zeros(tokens.shape[0], tokens.shape[1], enc.n_vocab)

    path = _write_rows(tmp_path / "h.jsonl", [_row(long_ctx), _row()])
    result = hs.evaluate_hellaswag(model_fn, enc, path, progress=False)
    assert result["n"] == 2
    assert max(w[1] for w in widths) <= hs.DEFAULT_MAX_SEQ_LEN
    assert max(w[0] * w[1] for w in widths) <= hs.DEFAULT_BATCH_SIZE * 4 * hs.BATCH_ROW_TOKENS
    rows, starts = hs.encode_example(enc, _row(long_ctx), max_seq_len=hs.DEFAULT_MAX_SEQ_LEN)
    assert all(len(r) <= hs.DEFAULT_MAX_SEQ_LEN for r in rows)
    assert rows[0][starts[0]:] == enc.encode_ordinary(" in.")  # the ending whole


@pytest.mark.parametrize("row, phrase", [
    (_row(" ".join(["word"] * 200_000)), "line 2 is longer than"),
    (_row(endings=("x" * 5000, "a", "b", "c")), "line 2: an ending is 5,000 bytes"),
])
def test_a_row_beyond_any_hellaswag_row_is_refused_at_load_naming_it(tmp_path, row, phrase):
    from gptlab.dataset.hellaswag_file import load_hellaswag
    from gptlab.evals.hellaswag import check_hellaswag_file

    path = _write_rows(tmp_path / "h.jsonl", [_row(), row])
    refused(lambda: load_hellaswag(path), phrase, path)
    refused(lambda: check_hellaswag_file(path), phrase)  # before a training run starts


def test_a_hellaswag_path_that_is_no_file_says_what_it_is(tmp_path):
    from gptlab.dataset.hellaswag_file import load_hellaswag
    from gptlab.evals.hellaswag import check_hellaswag_file

    folder = tmp_path / "folder"
    folder.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, phrase in ((folder, "is a directory"), (fifo, "is not a regular file (a FIFO)"),
                         ("/dev/null", "is not a regular file (a device)")):
        for required in (True, False):
            refused(lambda: check_hellaswag_file(str(path), required=required), phrase, str(path))
        refused(lambda: load_hellaswag(str(path)), phrase)
    refused(lambda: check_hellaswag_file(str(tmp_path / "missing"), required=True), "does not exist")
    assert "not found" in check_hellaswag_file(str(tmp_path / "missing"))  # a missing default only warns
