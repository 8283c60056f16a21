"""train_tokenizer.py end to end: output files, exactness across engines and ranks, and every bad input."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import FINEWEB_150, REPO, TINY_SHAKESPEARE, free_port, run_script, unreadable_file
from helpers import faults

from gptlab.tokenizer.format import EOT, load_tokenizer, read_tokenizer_file, training_script

ROUND_TRIP_TEXTS = ["aaaa aaa !!!!! \n\n\n   x", "héllo wörld 日本語 🙂👨‍👩‍👧‍👦", "don't I'm 1234567 3.14",
                    "line\r\nline\r\n\r\n", "text " + EOT + " more", ""]


def train(tmp_path, *extra, name="t", vocab=400, samples=60_000, inputs=(FINEWEB_150,), check=True, env=None):
    args = ["train_tokenizer.py", "--name", name, "--vocabsize", str(vocab), "--samples", str(samples),
            "--out", str(tmp_path), "--workers", "1", "--device", "cpu"]
    if inputs:
        args += ["--input", *map(str, inputs)]
    proc = run_script(args + list(extra), check=check, env_extra=env)
    return proc, tmp_path / f"{name}_v{vocab}_n{samples}.pkl"


def test_trains_a_loadable_exact_tokenizer(tmp_path):
    proc, path = train(tmp_path, "--workers", "2", vocab=600, samples=200_000)
    data = read_tokenizer_file(str(path))
    assert data["vocabsize"] == 600 and len(data["merges"]) == 344
    assert data["special_tokens"] == {EOT: 600}
    meta = data["metadata"]
    assert meta["chars_used"] == 200_000 and meta["world_size"] == 1 and meta["pattern_name"] == "gpt4"
    assert meta["source"] == {"input": [FINEWEB_150]} and len(meta["merge_counts"]) == 344
    assert {"python", "regex", "numpy", "tiktoken"} <= set(meta["versions"])
    script = training_script(data)  # stored once beside the pickle, by its sha256
    assert "# ===== train_tokenizer.py =====" in script and not data["script_content"]  # (not in the pickle)
    assert "# ===== gptlab/tokenizer/merges.py =====" in script
    assert "# ===== gptlab/tokenizer/job.py =====" in script
    with open(os.path.join(REPO, "gptlab", "tokenizer", "merge_loop.c")) as f:  # the default engine's C source
        assert "# ===== gptlab/tokenizer/merge_loop.c =====\n" + f.read() in script
    assert (tmp_path / "t_v600_n200000.merges.txt").read_text().count("\n") == 345
    enc = load_tokenizer(str(path))
    with open(FINEWEB_150) as f:
        real = [json.loads(line)["text"] for line in f][-10:]
    for text in ROUND_TRIP_TEXTS + real:
        tokens = enc.encode_ordinary(text)
        assert enc.decode(tokens) == text
        assert all(t < 600 for t in tokens)
    assert enc.eot_token == 600
    assert len(enc.encode_ordinary(real[0])) < 0.5 * len(real[0].encode())  # it compresses real text


def test_engines_and_worker_counts_agree(tmp_path):
    engines = ["python", "torch", "native"]  # native needs a C compiler: tests/unit/test_bpe.py says so if it is missing
    results = {}
    for i, engine in enumerate(engines):
        _, path = train(tmp_path / engine, "--engine", engine, "--workers", str(1 + i % 2), "--pattern", "gpt2",
                        samples=50_000)
        results[engine] = read_tokenizer_file(str(path))
        assert results[engine]["metadata"]["engine"] == engine
    for engine in engines[1:]:
        assert results[engine]["merges"] == results["python"]["merges"]
        assert results[engine]["mergeable_ranks"] == results["python"]["mergeable_ranks"]
        assert results[engine]["metadata"]["merge_counts"] == results["python"]["metadata"]["merge_counts"]
    assert "torch" in results["torch"]["metadata"]["versions"]


def test_one_and_two_ranks_and_two_nodes_give_identical_merges(tmp_path):
    # --samples well below the input (417 kB): every launch trains on the same first 60 000 characters, the ranks
    # only split those documents between them, so the summed table and the merges are byte-identical
    _, single = train(tmp_path / "one", samples=60_000)
    port = free_port()
    common = ["train_tokenizer.py", "--name", "t", "--vocabsize", "400", "--samples", "60000", "--workers",
              "1", "--device", "cpu", "--input", FINEWEB_150]
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(port), *common,
                       "--out", str(tmp_path / "two")], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # two "nodes" on this machine, one process each, started concurrently with a c10d rendezvous
    port = free_port()
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={i}",
                               "--nproc_per_node=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                               "--rdzv_id=bpe-test", *common, "--out", str(tmp_path / "nodes")],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outputs = [node.communicate(timeout=300) for node in nodes]
    assert all(node.returncode == 0 for node in nodes), outputs[0][1][-3000:] + outputs[1][1][-3000:]
    ref = read_tokenizer_file(str(single))
    assert ref["metadata"]["chars_used"] == 60_000 and ref["metadata"]["world_size"] == 1
    for folder in ("two", "nodes"):
        other = read_tokenizer_file(str(tmp_path / folder / "t_v400_n60000.pkl"))
        assert other["merges"] == ref["merges"] and other["mergeable_ranks"] == ref["mergeable_ranks"]
        assert other["metadata"]["merge_counts"] == ref["metadata"]["merge_counts"]
        assert other["metadata"]["world_size"] == 2
        assert other["metadata"]["chars_used"] == 60_000 and other["metadata"]["docs"] == ref["metadata"]["docs"]


def test_a_rank_that_dies_ends_the_run(tmp_path):
    start = time.time()
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_tokenizer.py",
                       "--vocabsize", "300", "--samples", "20000", "--workers", "1", "--device", "cpu",
                       "--input", FINEWEB_150, "--out", str(tmp_path)],
                      timeout=240, env_extra={**faults.env(die_rank=1), "GPTLAB_DIST_TIMEOUT_S": "60"})
    assert time.time() - start < 200
    # the failure is the planted one: rank 1 exits with status 1 after counting its documents, first, while rank 0
    # is still waiting for it (torchrun then ends rank 0 with SIGTERM). A bad flag (status 2 on both ranks) or an
    # import error (both ranks exit 1 at once, with a traceback) would read differently.
    assert proc.returncode == 1, proc.stderr[-3000:]
    failures, root_cause = proc.stderr.split("Root Cause (first observed failure):")
    assert "rank      : 1 (local_rank: 1)" in root_cause and "exitcode  : 1 " in root_cause, proc.stderr[-3000:]
    assert "rank      : 0 (local_rank: 0)" in failures and "(SIGTERM)" in failures, proc.stderr[-3000:]
    assert "error:" not in proc.stderr and "Error:" not in failures.split("ChildFailedError")[0]
    # no tokenizer, no temporary file; the lock file of the killed rank 0 may stay (the OS dropped its lock)
    assert [p.name for p in tmp_path.iterdir()] in ([], [".tokenizer_v300_n20000.pkl.lock"])


def test_in_process_api_matches_the_cli(tmp_path):
    from gptlab.tokenizer.job import save, train_tokenizer
    from gptlab.core.errors import UserError

    trained = train_tokenizer(inputs=[FINEWEB_150], samples=60_000, vocabsize=400, workers=1, device="cpu",
                              progress=False)
    assert trained.out_path is None and trained.is_main and not list(tmp_path.iterdir())
    assert len(trained.result.merges) == 144 and trained.metadata["chars_used"] == 60_000
    _, cli_path = train(tmp_path / "cli", vocab=400, samples=60_000)
    cli = read_tokenizer_file(str(cli_path))
    assert [tuple(m) for m in cli["merges"]] == [tuple(m) for m in trained.result.merges]
    assert cli["mergeable_ranks"] == trained.result.mergeable_ranks
    api_path = save(trained, str(tmp_path / "api.pkl"))
    api = read_tokenizer_file(api_path)
    assert api["mergeable_ranks"] == cli["mergeable_ranks"] and api["special_tokens"] == {EOT: 400}
    assert training_script(api).startswith("# ===== train_tokenizer.py =====")
    with pytest.raises(UserError, match="already exists; pass --overwrite"):
        train_tokenizer(inputs=[FINEWEB_150], samples=60_000, vocabsize=400, out_path=api_path, progress=False)
    with pytest.raises(UserError, match="below 256"):
        train_tokenizer(inputs=[FINEWEB_150], samples=60_000, vocabsize=10, progress=False)


def test_local_ranks_split_exactly_the_text_one_rank_uses(tmp_path):
    """Any world size: the ranks' documents, dealt back in order, are the one-rank documents (the last one cut)."""
    from gptlab.tokenizer.job import open_documents
    from gptlab.text.sources import ReadStats

    def rank_docs(rank, world_size, samples, stats=None):
        box = []
        docs, source = open_documents([FINEWEB_150], "fineweb", 0, samples, rank, world_size,
                                      stats or ReadStats(), box)
        return list(docs), box

    with open(FINEWEB_150) as f:
        all_docs = [json.loads(line)["text"] for line in f]
    for samples in (60_000, 1_000, 10_000_000):
        stats = ReadStats()
        one, one_box = rank_docs(0, 1, samples, stats)
        assert sum(map(len, one)) == min(samples, sum(map(len, all_docs)))
        assert one[:-1] == all_docs[:len(one) - 1] and all_docs[len(one) - 1].startswith(one[-1])
        assert stats.docs == len(one)  # reading stops at the budget: the next document is never read
        for world_size in (2, 3):
            shares = [rank_docs(rank, world_size, samples) for rank in range(world_size)]
            dealt = [shares[i % world_size][0][i // world_size] for i in range(len(one))]
            assert dealt == one and sum(len(docs) for docs, _ in shares) == len(one)
            assert all(box == one_box for _, box in shares)


def test_character_budget_and_table_combining():
    from gptlab.tokenizer.job import combine_tables, limit_chars, rank_budget

    assert [rank_budget(10, rank, 3) for rank in range(3)] == [4, 3, 3]
    assert sum(rank_budget(1_000_003, rank, 8) for rank in range(8)) == 1_000_003
    sample_box = []
    assert list(limit_chars(["  ", "abcdef", "ghi"], 7, sample_box)) == ["  ", "abcde"]
    assert sample_box == ["abcde"]  # the first non-blank document, as cut
    assert list(limit_chars(iter(["ab", "cd"]), 0, [])) == []
    read = []
    assert list(limit_chars((read.append(d) or d for d in ["abc", "def", "ghi"]), 6, [])) == ["abc", "def"]
    assert read == ["abc", "def"]  # the document after the budget is not pulled from the reader
    assert combine_tables([{b"a": 1, b"bc": 2}, {b"a": 2**40}, {}]) == {b"a": 2**40 + 1, b"bc": 2}


# ---------------------------------------------------------------------------------------------- bad input
def fails(tmp_path, *args, inputs=(FINEWEB_150,), match, env=None):
    proc, path = train(tmp_path, *args, inputs=inputs, check=False, env=env)
    assert proc.returncode == 2, proc.stderr
    assert match in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    # a failed run leaves no tokenizer, no .merges.txt and no temporary file behind, under any name
    assert not [p.name for p in tmp_path.rglob("*") if ".pkl" in p.name or p.name.endswith(".merges.txt")]
    return proc


def test_missing_and_empty_inputs(tmp_path):
    fails(tmp_path, inputs=[tmp_path / "nope.jsonl"], match="does not exist")
    fails(tmp_path, inputs=[str(tmp_path / "*.jsonl")], match="matches no file")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    fails(tmp_path, inputs=[empty], match="holds no text")
    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"text": ""}\n\n')
    fails(tmp_path, inputs=[blank], match="holds no text")
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text("not json\n")
    fails(tmp_path, inputs=[bad_json], match="not valid JSON")
    fails(tmp_path, inputs=[tmp_path], match="is a directory")
    other = tmp_path / "x.csv"
    other.write_text("a,b")
    fails(tmp_path, inputs=[other], match="unsupported file type")


def test_without_input_and_no_hub_points_to_input(tmp_path):
    # HF_ENDPOINT on a closed local port: the same "cannot reach the Hub" path as an offline machine, fast
    proc, _ = train(tmp_path, inputs=None, check=False, env={"HF_ENDPOINT": "http://127.0.0.1:9"})
    assert proc.returncode == 2 and "cannot reach the HuggingFace Hub" in proc.stderr
    assert "--input PATH" in proc.stderr and "Traceback" not in proc.stderr


def test_unreadable_file(tmp_path):
    locked = unreadable_file(tmp_path / "locked.txt")
    fails(tmp_path, inputs=[locked], match="not readable")


def test_invalid_utf8_is_replaced_and_reported(tmp_path):
    raw = tmp_path / "latin1.txt"
    raw.write_bytes("café olé ".encode("latin-1") * 200 + b"\xff\xfe plain ascii text " * 50)
    proc, path = train(tmp_path, inputs=[raw], vocab=270, samples=10_000)
    assert "not valid UTF-8" in proc.stderr and "replaced" in proc.stderr
    data = read_tokenizer_file(str(path))
    assert data["metadata"]["replaced_docs"] == 1


def test_bad_numbers_and_pattern(tmp_path):
    fails(tmp_path, "--vocabsize", "255", match="below 256")
    fails(tmp_path, "--vocabsize", str(2**31), match="too large")
    fails(tmp_path, "--samples", "0", match="--samples must be a positive")
    fails(tmp_path, "--samples", "-5", match="--samples must be a positive")
    fails(tmp_path, "--pattern", "(unclosed", match="neither gpt4, gpt2 nor a valid regex")
    fails(tmp_path, "--pattern", "x*", match="matches the empty string")
    fails(tmp_path, "--workers", "0", match="--workers must be at least 1")
    proc = fails(tmp_path, "--name", "", match="--name '' is empty; give a file name prefix")
    assert "'/'" not in proc.stderr
    fails(tmp_path, "--name", "a/b", match="must be a plain file name prefix (no '/')")
    fails(tmp_path, "--device", "tpu", match="not one of auto, cpu, cuda")
    # one GPU index for every local rank of a torchrun node: refused before any text is read
    proc, _ = train(tmp_path, "--device", "cuda:1", check=False, env={"LOCAL_WORLD_SIZE": "2"})
    assert proc.returncode == 2 and "CUDA_VISIBLE_DEVICES" in proc.stderr and "Traceback" not in proc.stderr


def test_workers_beyond_the_cores_or_the_text_are_lowered_with_a_note(tmp_path):
    """20,000 characters are less than one 1 MiB chunk, the unit a worker is handed: one process does it all,
    whatever --workers asks for (it used to start ~965 processes on 2 cores)."""
    proc, path = train(tmp_path, "--workers", "1000", vocab=300, samples=20_000)
    assert "note: --workers 1000 lowered to 1: each rank uses at most its" in proc.stderr
    assert read_tokenizer_file(str(path))["metadata"]["workers_per_rank"] == 1
    cores = len(os.sched_getaffinity(0))
    # a budget of 3,000,000 characters is 3 chunks: as many workers, unless this machine has fewer cores
    proc, path = train(tmp_path / "big", "--workers", "1000", vocab=300, samples=3_000_000, inputs=[TINY_SHAKESPEARE])
    assert f"note: --workers 1000 lowered to {min(cores, 3)}:" in proc.stderr
    assert read_tokenizer_file(str(path))["metadata"]["workers_per_rank"] == min(cores, 3)


def test_too_few_pairs_for_the_vocabulary(tmp_path):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("ab ab ab abc")
    proc = fails(tmp_path, "--vocabsize", "300", inputs=[tiny], match="only allows 3 merges")
    assert "--vocabsize of at most 259" in proc.stderr


def test_samples_beyond_the_input_use_what_exists(tmp_path):
    text = tmp_path / "small.txt"
    text.write_text("hello world, hello tokenizer. " * 50 + EOT + "second document here " * 20)
    proc, path = train(tmp_path, inputs=[text], vocab=280, samples=10_000_000)
    assert "asked for more text than the input has" in proc.stderr
    meta = read_tokenizer_file(str(path))["metadata"]
    assert meta["chars_used"] == len(text.read_text()) - len(EOT) and meta["docs"] == 2
    assert meta["samples_requested"] == 10_000_000


def test_existing_output_is_refused_before_training(tmp_path):
    _, path = train(tmp_path, vocab=300, samples=20_000)
    before = path.read_bytes()
    start = time.time()
    proc, _ = train(tmp_path, vocab=300, samples=20_000, inputs=[tmp_path / "missing.jsonl"], check=False)
    assert proc.returncode == 2 and "already exists; pass --overwrite" in proc.stderr
    assert path.read_bytes() == before and time.time() - start < 30
    proc, _ = train(tmp_path, "--overwrite", vocab=300, samples=20_000)
    assert read_tokenizer_file(str(path))["vocabsize"] == 300


def test_plain_cpu_run_does_not_import_torch(tmp_path):
    code = ("import sys, train_tokenizer; train_tokenizer.main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    proc = run_script(["-c", code, "--input", TINY_SHAKESPEARE, "--vocabsize", "300", "--samples", "30000",
                       "--out", str(tmp_path), "--workers", "1"], check=True)
    assert (tmp_path / "tokenizer_v300_n30000.pkl").exists(), proc.stderr


def _start_pretokenizing(tmp_path):
    """A train_tokenizer.py process (own session, 2 workers) on ~22 MB of text, once its workers are busy."""
    with open(TINY_SHAKESPEARE) as f:
        text = f.read()
    big = tmp_path / "big.txt"
    big.write_text("<|endoftext|>".join([text] * 20))  # 20 documents: both workers stay busy for seconds
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=REPO)
    # --pretokenizer regex: the native scanner gets through these 22 MB in well under a second
    proc = subprocess.Popen([sys.executable, "train_tokenizer.py", "--input", str(big), "--samples", "30000000",
                             "--vocabsize", "2000", "--name", "big", "--out", str(tmp_path / "out"), "--workers", "2",
                             "--device", "cpu", "--pretokenizer", "regex"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    children = f"/proc/{proc.pid}/task/{proc.pid}/children"
    deadline = time.time() + 60
    while time.time() < deadline:
        with open(children) as f:
            workers = [int(pid) for pid in f.read().split()]
        if len(workers) >= 2:
            time.sleep(0.5)  # let them start counting
            return proc, workers
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the pre-tokenization workers never started")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_during_pretokenization_exits_at_once(tmp_path):
    import signal

    proc, _ = _start_pretokenizing(tmp_path)
    start = time.time()
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and time.time() - start < 15, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err, err[-2000:]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())  # no partial tokenizer


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_pretokenization_worker_is_one_clear_error(tmp_path):
    import signal

    proc, workers = _start_pretokenizing(tmp_path)
    os.kill(workers[0], signal.SIGKILL)  # what the out-of-memory killer does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "worker died" in err and "--workers" in err, err[-2000:]
    assert "Traceback" not in err


def test_an_output_folder_that_is_a_file_fails_before_training(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    proc = fails(tmp_path, "--out", str(a_file / "toks"), match="is a file, not a folder")
    assert a_file.read_text() == "keep me" and "merges" not in proc.stderr


def test_without_a_c_compiler_the_trainer_says_so_and_falls_back_to_python(tmp_path):
    """No compiler on PATH and nothing cached: a note names the reason, the pure-Python loop runs, and the merges
    are those of the C loop; --engine native asked for explicitly is a clear error instead."""
    no_compiler = {"PATH": str(tmp_path / "empty_bin"), "CC": "", "GPTLAB_CACHE": str(tmp_path / "cache")}
    (tmp_path / "empty_bin").mkdir()
    proc, path = train(tmp_path / "fallback", vocab=300, samples=20_000, env=no_compiler)
    assert ("note: the C merge loop is unavailable (no C compiler (cc, gcc or clang) found); using the slower "
            "pure-Python loop (identical results)") in proc.stderr
    data = read_tokenizer_file(str(path))
    assert data["metadata"]["engine"] == "python"
    _, native_path = train(tmp_path / "native", "--engine", "native", vocab=300, samples=20_000)
    assert data["merges"] == read_tokenizer_file(str(native_path))["merges"]
    proc = fails(tmp_path / "refused", "--engine", "native", match="--engine native is unavailable (no C compiler",
                 env=no_compiler)
    assert "install a C compiler or use --engine python" in proc.stderr


def test_demo_shows_the_sample_split_by_token_as_merges_are_learned(tmp_path):
    """--demo prints the first document's first 400 characters split into its tokens, before training and after
    1%, 10%, 50% and 100% of the 44 merges (after merge 1, 4, 22 and 44: int(44 f), at least 1). stdout is a pipe
    here, so tokens are separated by `|` and no escape code reaches it (a terminal gets colours: unit test)."""
    import re

    proc, path = train(tmp_path, "--demo", vocab=300, samples=20_000)
    assert "\x1b" not in proc.stdout and "\x1b" not in proc.stderr and "\r" not in proc.stderr
    with open(FINEWEB_150) as f:
        sample = json.loads(f.readline())["text"][:400]
    assert "|" not in sample  # so `|` marks token boundaries only
    blocks = re.split(r"^--- after (\d+) merges: (\d+) tokens for (\d+) bytes \([0-9.]+ bytes/token\) ---\n",
                      proc.stdout, flags=re.M)[1:]
    shown = [(int(blocks[i]), int(blocks[i + 1]), int(blocks[i + 2]), blocks[i + 3]) for i in range(0, len(blocks), 4)]
    assert [merges for merges, _, _, _ in shown] == [0, 1, 4, 22, 44]
    enc = load_tokenizer(str(path))
    n_bytes = len(sample.encode("utf-8"))
    assert shown[0][1:3] == (n_bytes, n_bytes)  # before any merge, one token per byte
    assert shown[-1][1:3] == (len(enc.encode_ordinary(sample)), n_bytes)  # the saved tokenizer's count
    counts = [tokens for _, tokens, _, _ in shown]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    for _, tokens, _, text in shown:
        body = re.match(r"(.*?)\n\n(?!\n)", text, flags=re.S).group(1)  # up to render's line end and print's
        segments = body.split("|")
        assert "".join(segments).replace("\\n\n", "\n") == sample
        # one segment per token, except that the pieces of a multi-byte character share one
        assert tokens - (n_bytes - len(sample)) <= len(segments) <= tokens


def test_custom_pattern_regex_decides_the_pre_tokens(tmp_path):
    """--pattern REGEX: letters-only words, every other character alone, so no learned token mixes a letter with
    anything else; the merges are exact BPE over that regex's pieces (counted here with `regex` directly)."""
    import regex
    from collections import Counter

    from gptlab.tokenizer.merges import train_merges_python

    pattern = r"[A-Za-z]+|[^A-Za-z]"
    with open(TINY_SHAKESPEARE) as f:
        text = f.read()[:20_000]
    source = tmp_path / "one_doc.txt"
    source.write_text(text)
    proc, path = train(tmp_path, "--pattern", pattern, vocab=400, samples=20_000, inputs=[source])
    data = read_tokenizer_file(str(path))
    assert data["pat_str"] == pattern
    learned = [token for token, rank in data["mergeable_ranks"].items() if rank >= 256]
    assert len(learned) == 144 and all(token.isalpha() for token in learned)
    table = Counter(piece.encode() for piece in regex.findall(pattern, text))
    assert [tuple(m) for m in data["merges"]] == train_merges_python(dict(table), 144).merges
    enc = load_tokenizer(str(path))
    assert enc.decode(enc.encode_ordinary(text[:2000])) == text[:2000]


def test_ranks_that_computed_different_merges_refuse_to_save(tmp_path):
    """Every rank runs the merge loop; their results are compared by hash before rank 0 saves. Rank 1 is made to
    differ by one merge (tests/helpers/disagreeing_rank_tokenizer.py): the job fails and writes nothing."""
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()),
                       "tests/helpers/disagreeing_rank_tokenizer.py", "--vocabsize", "300", "--samples", "20000",
                       "--workers", "1", "--device", "cpu", "--input", FINEWEB_150, "--out", str(tmp_path)],
                      timeout=240)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.count("RuntimeError: ranks disagree on the merges") == 2, proc.stderr[-3000:]  # both ranks
    assert not list(tmp_path.iterdir())
