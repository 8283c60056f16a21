"""train_tokenizer.py on 1 and 2 ranks (gloo) against the textbook BPE of tests/helpers/bpe_reference.py,
on adversarial text whose --samples cut falls inside a document."""

from conftest import free_port, run_script
from helpers.bpe_reference import pretoken_table, reference_bpe, txt_documents

from gptlab.tokenizer.format import EOT, PATTERNS, read_tokenizer_file


RAW = EOT.join(["aaaaaaa abababa bbbbbbbb", "", "日本語のテキスト 👨\u200d👩\u200d👧\u200d👦👨\u200d👩\u200d👧\u200d👦 e\u0301e\u0301",
                "text <|endoftext| more ab ab", "aaaa aaaaa ab ba", "Ωμέγα ΩΩΩ 한국어 한국어"])
RAW = RAW.encode() + b"\xff\xfe ab\xe6\x97"
SAMPLES = 106  # inside the sixth document; " ab" is in documents of both ranks


def test_one_and_two_ranks_equal_the_reference_on_adversarial_text(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(RAW)
    docs = txt_documents(RAW, SAMPLES)
    assert sum(map(len, docs)) == SAMPLES and len(docs) == 6 and docs[-1] == "Ωμέγα ΩΩΩ "
    ref_merges, ref_counts, _ = reference_bpe(pretoken_table(docs, PATTERNS["gpt4"]))
    vocab = 256 + len(ref_merges)
    common = ["train_tokenizer.py", "--name", "t", "--vocabsize", str(vocab), "--samples", str(SAMPLES),
              "--workers", "1", "--device", "cpu", "--input", corpus]
    one = run_script(common + ["--out", tmp_path / "one"])
    two = run_script(["torchrun", "--nproc_per_node=2", "--master_port", free_port(), *common,
                      "--out", tmp_path / "two"], timeout=300)
    for proc, folder, world_size in ((one, "one", 1), (two, "two", 2)):
        assert proc.returncode == 0, proc.stderr[-3000:]
        data = read_tokenizer_file(str(tmp_path / folder / f"t_v{vocab}_n{SAMPLES}.pkl"))
        assert [tuple(m) for m in data["merges"]] == ref_merges
        assert data["metadata"]["merge_counts"] == ref_counts
        assert data["metadata"]["world_size"] == world_size and data["metadata"]["chars_used"] == SAMPLES
