"""Tests for one-line bugs the suite once missed (issue 27), each against an expectation worked out here by hand or
taken from a reference outside the product: lone surrogates become U+FFFD (the Unicode standard's replacement
character, bytes EF BF BD, as tiktoken's own encode_ordinary does), the tokenizer unpickler refuses every builtin
that runs code, the validation shard stops at a document end that --val_tokens lands on exactly, and Muon's
Newton–Schulz runs its 5 quintic steps (the scalar recurrence on the singular values of diag(1, 0.01))."""
import glob
import json
import math
import os
import signal
import struct
import time

import numpy as np
import pytest
import torch

import train_gpt
from gptlab.core.errors import UserError
from gptlab.dataset import shards as shard_format
from gptlab.dataset.fineweb import ShardWriter, encode_document
from gptlab.tokenizer.format import EOT, PATTERNS, load_tokenizer, read_tokenizer_file, safe_unpickle, save_tokenizer
from gptlab.tokenizer.pretokenize import clean_document, count_documents, pretokenize

REPLACEMENT_UTF8 = b"\xef\xbf\xbd"  # U+FFFD in UTF-8 (Unicode standard)


@pytest.fixture
def byte_tokenizer(tmp_path):
    """A tokenizer without merges: token id = byte value, <|endoftext|> = 256 (token counts by hand)."""
    path = str(tmp_path / "bytes_v257.pkl")
    save_tokenizer(path, pat_str=PATTERNS["gpt4"], pattern_name="gpt4", merges=[],
                   mergeable_ranks={bytes([i]): i for i in range(256)}, special_tokens={EOT: 256}, metadata={},
                   script_content="")
    return path


# ---------------------------------------------------------------------------- lone surrogates → U+FFFD
def test_clean_document_replaces_a_lone_surrogate_with_u_fffd():
    assert clean_document("ab\ud800cd") == "ab\ufffdcd"
    assert clean_document("x\udcff") == "x\ufffd"
    assert clean_document("\ud83d\ude00") == "\U0001F600"  # a high + low pair is one character (UTF-16)
    assert clean_document("plain é") == "plain é"


@pytest.mark.parametrize("workers", [1, 2])
def test_pretokenize_sees_u_fffd_for_a_lone_surrogate(workers):
    # gpt4 splits "ab\ufffdcd x" into "ab", "\ufffdcd" (a symbol may lead letters), " x"
    table, chars, docs = pretokenize(["ab\ud800cd x", "ok"], PATTERNS["gpt4"], workers=workers)
    assert table == {b"ab": 1, REPLACEMENT_UTF8 + b"cd": 1, b" x": 1, b"ok": 1}
    assert (chars, docs) == (9, 2)  # 7 + 2 characters


def test_count_documents_sees_u_fffd_for_a_lone_surrogate():
    assert dict(count_documents(["ab\udcffcd x"], PATTERNS["gpt4"])) == {"ab": 1, "\ufffdcd": 1, " x": 1}


def test_shard_encoding_replaces_a_lone_surrogate_as_tiktoken_does(byte_tokenizer):
    enc = load_tokenizer(byte_tokenizer)
    expected = [97, 98, 0xEF, 0xBF, 0xBD, 99, 100]  # bytes of "ab\ufffdcd"
    assert encode_document(enc, "ab\ud800cd").tolist() == expected
    assert enc.encode_ordinary("ab\ud800cd") == expected  # tiktoken itself, the reference


# ---------------------------------------------------------------------------- the unpickler refuses code
def _global_pickle(module, name, protocol):
    """A pickle that names module.name and returns it (no call): enough to be refused."""
    if protocol == 2:  # GLOBAL opcode: 'c' module '\n' name '\n'
        return b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n."
    # protocol 4: SHORT_BINUNICODE module, SHORT_BINUNICODE name, STACK_GLOBAL
    return (b"\x80\x04\x8c" + bytes([len(module)]) + module.encode() + b"\x8c" + bytes([len(name)]) + name.encode()
            + b"\x93.")


DANGEROUS_BUILTINS = ["exec", "eval", "compile", "getattr", "setattr", "__import__", "open", "globals", "vars",
                      "breakpoint", "input", "delattr", "type", "object", "print"]


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("name", DANGEROUS_BUILTINS)
def test_unpickler_refuses_every_builtin_that_is_not_a_container(name, protocol):
    with pytest.raises(UserError, match=f"not a safe tokenizer pickle .*refusing to load global builtins.{name}:"):
        safe_unpickle(_global_pickle("builtins", name, protocol), "t.pkl")


@pytest.mark.parametrize("builtin", ["exec", "eval"])
def test_a_pickle_calling_exec_or_eval_is_refused_and_never_runs(tmp_path, builtin):
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').close()".encode()
    # GLOBAL builtins.<builtin>, BINUNICODE code, TUPLE1, REDUCE: exec(code) / eval(code) on load
    data = (b"\x80\x02cbuiltins\n" + builtin.encode() + b"\nX" + struct.pack("<I", len(code)) + code + b"\x85R.")
    path = tmp_path / "evil.pkl"
    path.write_bytes(data)
    with pytest.raises(UserError, match=f"refusing to load global builtins.{builtin}"):
        read_tokenizer_file(str(path))
    assert not marker.exists()


def test_the_allowed_containers_and_a_real_tokenizer_still_load(byte_tokenizer):
    assert safe_unpickle(_global_pickle("builtins", "set", 2)).__name__ == "set"
    # bytearray(str, 'latin-1'), as protocols 0-1 write it without fix_imports: GLOBAL, 2 x BINUNICODE, TUPLE2, REDUCE
    text = "\x00\xff".encode()
    data = (b"\x80\x02cbuiltins\nbytearray\nX" + struct.pack("<I", len(text)) + text + b"X\x07\x00\x00\x00latin-1"
            + b"\x86R.")
    loaded = safe_unpickle(data)
    assert loaded == bytearray(b"\x00\xff") and type(loaded) is bytearray
    enc = load_tokenizer(byte_tokenizer)
    assert enc.encode_ordinary("hi") == [104, 105] and enc.eot_token == 256


# ---------------------------------------------------------------------------- the validation shard's last document
DOCS = ["abc", "de", "fghij", "kl"]  # 4, 3, 6, 3 tokens with <|endoftext|>: ends at 4, 7, 13, 16
EOT_ID = 256


def _tokens(docs):
    return [t for d in docs for t in [EOT_ID] + list(d.encode())]


@pytest.mark.parametrize("val_tokens, val_docs", [(7, 2), (4, 1), (13, 3), (5, 2), (6, 2), (8, 3)])
def test_the_validation_shard_stops_at_the_document_end_val_tokens_falls_on(tmp_path, byte_tokenizer, val_tokens,
                                                                                val_docs):
    import download_fineweb

    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    download_fineweb.main(["--quiet", "--input", str(inp), "--tokenizer", byte_tokenizer, "--out", str(tmp_path),
                           "--num_shards", "1", "--shard_size", "1000", "--val_tokens", str(val_tokens),
                           "--shuffle_buffer", "0", "--workers", "1"])
    (out_dir,) = glob.glob(str(tmp_path / "local_in_*"))
    val = shard_format.read_shard(os.path.join(out_dir, "val_000000.bin")).tolist()
    train = shard_format.read_shard(os.path.join(out_dir, "train_000001.bin")).tolist()
    assert val == _tokens(DOCS[:val_docs])
    assert train == _tokens(DOCS[val_docs:])


def test_the_validation_shard_stops_at_a_document_end_in_a_later_chunk(tmp_path):
    manifest = {"shard_version": 1, "shards": [], "rank": 0, "world_size": 1}
    writer = ShardWriter(str(tmp_path), manifest, [("val", "val_000000.bin"), ("train", "train_000001.bin")], (0, 0), EOT_ID, np.uint16,
                         shard_size=100, val_tokens=7, progress=None)
    for chunk in (DOCS[:1], DOCS[1:]):  # "abc" alone, then the rest: val_tokens = 7 is the end of "de"
        writer.consume(np.array(_tokens(chunk), dtype=np.uint32), np.array([len(d) + 1 for d in chunk]))
    writer.flush()
    val, train = manifest["shards"]
    assert (val["tokens"], val["docs"], val["end"]) == (7, 2, [2, 0])
    assert shard_format.read_shard(str(tmp_path / "val_000000.bin")).tolist() == _tokens(DOCS[:2])
    assert (train["tokens"], train["start"], train["end"]) == (9, [2, 0], [4, 0])


# ---------------------------------------------------------------------------- Newton–Schulz: 5 quintic steps
def _quintic_reference(singular_values, steps=5):
    """Muon's iteration acts on each singular value alone: s ← a s + b s³ + c s⁵ after dividing by the Frobenius
    norm (Keller Jordan's coefficients)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    norm = math.sqrt(sum(s * s for s in singular_values)) + 1e-7
    out = []
    for s in singular_values:
        s /= norm
        for _ in range(steps):
            s = a * s + b * s ** 3 + c * s ** 5
        out.append(s)
    return out


def test_newton_schulz_runs_five_quintic_steps_on_diag_1_and_0_01():
    G = torch.diag(torch.tensor([1.0, 0.01]))
    expected = _quintic_reference([1.0, 0.01])
    assert abs(expected[0] - 0.6965) < 1e-3 and abs(expected[1] - 0.6989) < 1e-3  # 4 steps give 1.09, 1.093
    for X in (train_gpt.zeropower_via_newtonschulz5(G), train_gpt.orthogonalize(G, compiled=False)):
        assert torch.allclose(torch.diagonal(X), torch.tensor(expected), atol=1e-4), X
        assert abs(float(X[0, 1])) < 1e-6 and abs(float(X[1, 0])) < 1e-6
    # a tall matrix runs transposed: the same values
    tall = train_gpt.zeropower_via_newtonschulz5(torch.cat([G, torch.zeros(1, 2)]))
    assert torch.allclose(torch.diagonal(tall[:2]), torch.tensor(expected), atol=1e-4)


def test_a_muon_step_moves_a_matrix_by_lr_times_the_five_step_iteration():
    p = torch.nn.Parameter(torch.zeros(2, 2))
    muon = train_gpt.Muon([p], lr=0.1, momentum=0.9)
    p.grad = torch.diag(torch.tensor([1.0, 0.01]))
    muon.step()
    expected = [-0.1 * s for s in _quintic_reference([1.0, 0.01])]  # momentum and Nesterov only scale the gradient
    assert torch.allclose(torch.diagonal(p.detach()), torch.tensor(expected), atol=1e-5), p


def test_muons_momentum_and_nesterov_look_ahead_by_hand():
    # momentum 0.9, buffer 1, gradient 2: the buffer becomes 1 + 0.1 (2 - 1) = 1.1, and the step direction is the
    # look-ahead 2 + 0.9 (1.1 - 2) = 1.19 (plain momentum would step along 1.1). A first step from a zero buffer
    # only scales the gradient, which Newton–Schulz normalises away: this is what tells them apart.
    buf = torch.tensor([1.0])
    step = train_gpt.nesterov_look_ahead(torch.tensor([2.0]), buf, 0.9)
    assert torch.allclose(buf, torch.tensor([1.1])) and torch.allclose(step, torch.tensor([1.19]))


@pytest.mark.parametrize("shape, factor", [((8, 2), 2.0), ((2, 8), 1.0), ((5, 5), 1.0), ((3, 16, 4), 2.0)])
def test_muons_lr_factor_is_the_square_root_of_rows_over_columns_for_tall_matrices(shape, factor):
    assert train_gpt.muon_lr_factor(shape) == factor  # sqrt(max(1, rows / cols)), worked out by hand


# ============================================================================ survivors of bench/mutants.py
# Each test below was written for a one-line bug of bench/mutants.py that the suite did not catch.
def test_a_long_holder_command_is_shown_in_200_characters_and_on_one_line():
    from gptlab.core.files import describe_holder

    command = "python train_gpt.py " + "--flag value " * 30  # 410 characters
    shown = describe_holder({"pid": 7, "host": "h", "command": command, "since": "t"})
    assert shown == f"pid 7 on h (`{command[:197]}...`), since t"
    assert describe_holder({"pid": 7, "host": "h", "command": "a\n  b", "since": "t"}) == "pid 7 on h (`a b`), since t"


def test_help_default_is_appended_once_and_not_to_a_help_that_states_it():
    from gptlab.core.cli import ArgumentParser, HelpFormatter

    p = ArgumentParser(prog="x.py", formatter_class=HelpFormatter)
    p.add_argument("--steps", type=int, default=3, help="steps (default 3, or 1 on CPU)")
    p.add_argument("--lr", type=float, default=0.5, help="learning rate")
    text = " ".join(p.format_help().split())
    assert "steps (default 3, or 1 on CPU)" in text and "(default: 3)" not in text
    assert "learning rate (default: 0.5)" in text


def _send(signum):
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary


def test_a_signal_in_nested_checkpoint_writes_waits_for_the_outer_one():
    from gptlab.core.errors import StopRequested
    from gptlab.train import stop

    reached = []
    with stop.StopSignals() as stopper:
        with pytest.raises(StopRequested):
            with stopper.deferred():
                with stopper.deferred():
                    _send(signal.SIGTERM)
                reached.append("inner write done")  # the outer write still goes on
        assert reached == ["inner write done"]


def test_end_steps_during_a_checkpoint_write_stops_after_the_write():
    from gptlab.core.errors import StopRequested
    from gptlab.train import stop

    written = []
    with stop.StopSignals() as stopper:
        stopper.begin_steps()
        with pytest.raises(StopRequested):
            with stopper.deferred():
                _send(signal.SIGTERM)
                stopper.end_steps()  # not yet: the checkpoint is being written
                written.append("complete")
        assert written == ["complete"]


@pytest.mark.parametrize("given", [float("nan"), -0.5])
def test_a_price_that_is_not_a_number_at_least_0_is_refused(given):
    from gptlab.train.cost import usd_per_gpu_hour

    with pytest.raises(UserError, match="must be a price >= 0"):
        usd_per_gpu_hour("NVIDIA H100 80GB HBM3", given)
    assert usd_per_gpu_hour(None, 0) == (0.0, "--usd_per_gpu_hour")


def test_pooled_noise_weights_each_group_by_its_degrees_of_freedom():
    from types import SimpleNamespace

    from gptlab.compare.stats import SeedGroup, bpb_noise

    def runs(values):
        return [SimpleNamespace(final=True, val_bpb=v, seed=i) for i, v in enumerate(values)]

    groups = [SeedGroup(runs([1.0, 1.2])), SeedGroup(runs([2.0, 2.1, 2.3]))]
    reference = SimpleNamespace(final=True, val_bpb=1.5, seed=9)
    noise = bpb_noise(reference, groups)
    # by hand: variances 0.02 (1 dof) and 0.046667 / 2 = 0.023333 (2 dof); pooled (0.02 + 0.046667) / 3
    assert noise.df == 3
    assert noise.std == pytest.approx(math.sqrt(0.0666667 / 3), rel=1e-5)


def test_verdict_at_p_equal_to_alpha_is_not_significant():
    from gptlab.compare.stats import _verdict

    assert _verdict(-0.01, 0.05, 0.05, lower_is_better=True).startswith("not distinguishable")
    assert _verdict(-0.01, 0.0499, 0.05, lower_is_better=True).startswith("better")


def test_validation_rows_need_seq_len_plus_one_tokens_each(tmp_path):
    from gptlab.dataset.loader import ValidationSet

    path = str(tmp_path / "val_000000.bin")
    shard_format.write_shard(path, np.arange(2 * 16, dtype=np.uint16))  # 32 tokens: one row of 16 + 1, not two
    assert len(ValidationSet([path], 16, 1).my_rows()) == 1
    with pytest.raises(UserError, match="validation needs 2 rows of 16 tokens .* hold only 1 rows"):
        ValidationSet([path], 16, 2)


def test_checkpoint_hash_tells_shapes_and_lists_from_tuples_apart():
    from gptlab.checkpoint.format import payload_sha256

    t = torch.arange(6, dtype=torch.float32)
    base = payload_sha256({"w": t.view(2, 3), "v": [1, 2]})
    assert payload_sha256({"w": t.view(3, 2), "v": [1, 2]}) != base  # the same bytes in another shape
    assert payload_sha256({"w": t.view(2, 3), "v": (1, 2)}) != base
    assert payload_sha256({"w": t.view(2, 3).clone(), "v": [1, 2]}) == base


def test_resume_refuses_a_checkpoint_past_train_steps_and_takes_one_at_it():
    """A checkpoint at --train_steps is a run stopped in its final evaluations: its resume runs them
    (docs/faults.md, 'Checkpoints and resume')."""
    from types import SimpleNamespace

    from gptlab.checkpoint.checkpointing import check_resume_compatible

    ckpt = {"model_config": {}, "tokenizer": {}, "step": 100}
    tok = SimpleNamespace(ranks_sha256="x", name="t")
    with pytest.raises(UserError, match="at step 100, past --train_steps 99"):
        check_resume_compatible(ckpt, {}, tok, 99, [])
    check_resume_compatible(ckpt, {}, tok, 100, [])
    check_resume_compatible(ckpt, {}, tok, 101, [])


@pytest.mark.parametrize("name", [".hidden", "a/b", "", "a\\b"])
def test_run_dir_names_that_are_no_plain_visible_folder_are_refused(tmp_path, name):
    from gptlab.train.records import create_run_dir

    with pytest.raises(UserError, match="must be a plain folder name"):
        create_run_dir(str(tmp_path), name)
    assert os.listdir(tmp_path) == []


def test_tolerant_metrics_read_infinite_and_nan_cells_as_none(tmp_path):
    from gptlab.train.records import read_metrics

    path = tmp_path / "metrics.csv"
    path.write_text("step,train_loss,val_loss\n1,inf,-inf\n2,nan,3.5\n")
    rows = list(read_metrics(str(path), strict=False))
    assert [(r["step"], r["train_loss"], r["val_loss"]) for r in rows] == [(1, None, None), (2, None, 3.5)]


def test_overlap_of_train_and_val_shards_is_found_through_a_symlink(tmp_path):
    from gptlab.dataset.selection import select_run_shards

    train = tmp_path / "train" / "train_000001.bin"
    train.parent.mkdir()
    shard_format.write_shard(str(train), np.arange(100, dtype=np.uint16))
    link = tmp_path / "val" / "val_000000.bin"
    link.parent.mkdir()
    link.symlink_to(train)
    with pytest.raises(UserError, match="share 1 shard"):
        select_run_shards([str(train)], [str(link)], "t", None, 300)


def test_data_fingerprint_changes_with_a_shard_s_token_count(tmp_path):
    from gptlab.dataset.selection import ShardPrint, fingerprint_of

    a = ShardPrint(path="d/train_000001.bin", real="x", size=10, tokens=100, sha256="s")
    b = ShardPrint(path="d/train_000001.bin", real="x", size=10, tokens=101, sha256="s")
    c = ShardPrint(path="e/train_000001.bin", real="y", size=10, tokens=100, sha256="s")
    assert fingerprint_of([a]) != fingerprint_of([b])
    assert fingerprint_of([a]) == fingerprint_of([c])  # by file name, not folder


def test_loader_takes_a_shard_s_last_row_when_it_ends_exactly_at_the_shard_end(tmp_path):
    from gptlab.dataset.loader import BOSAlignedLoader

    paths = []
    for i, first in enumerate((0, 100)):
        paths.append(str(tmp_path / f"train_{i + 1:06d}.bin"))
        shard_format.write_shard(paths[-1], np.arange(first, first + 17, dtype=np.uint16))  # 2 rows of 8 + 1
    loader = BOSAlignedLoader(paths, 8, 16, bos_id=999)  # no <|endoftext|> in the data: rows are not moved
    ((x, y),) = loader.next_batch()
    assert x.tolist() == [list(range(0, 8)), list(range(8, 16))]  # rows overlap their neighbours by one token
    assert y.tolist() == [list(range(1, 9)), list(range(9, 17))]
    ((x, _),) = loader.next_batch()
    assert x.tolist() == [list(range(100, 108)), list(range(108, 116))]
