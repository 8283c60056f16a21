"""Seed groups keyed by what determines the numbers (issue 39): the settings and the research code (the code
backup's train_gpt.py, model.py and any file its git.json marks as research code), paths compared where they point
(a resumed run's absolute paths are its run's relative ones), a tokenizer by its ranks' hash."""
import json
import os

from gptlab import compare as cmp
from gptlab.compare import tables
from gptlab.train.records import CODE_DIR
from helpers.run_folders import finished_results, make_run, metrics_rows, variant

TRAIN = "import torch\nLR = 0.01\n\ndef lr(step):\n    return LR\n"
# the cosine-schedule edit: "import math" added, the return line changed: +2 −1 by hand
COSINE = "import math\nimport torch\nLR = 0.01\n\ndef lr(step):\n    return LR * 0.5 * (1 + math.cos(math.pi * step / 40))\n"
MODEL = "class GPT:\n    pass\n"


def _run(root, folder, bpb, code=None, **changes):
    config = variant(**changes)
    return make_run(root, folder, config, metrics_rows(10, bpb, 0.3), finished_results(config, bpb, 0.3), code=code)


def _groups(paths):
    runs = [cmp.load_run(p) for p in paths]
    return sorted(sorted(os.path.basename(r.path) for r in g.runs) for g in cmp.seed_groups(runs)), runs


def test_a_research_code_change_forms_a_new_group_named_with_its_diff(tmp_path):
    root = str(tmp_path / "experiments")
    base = {"train_gpt.py": TRAIN, "model.py": MODEL}
    paths = [_run(root, "20260101_000000_Base", 1.300, base, seed=0),
             _run(root, "20260101_000100_Base", 1.304, base, seed=1),
             _run(root, "20260101_000200_Base", 1.250, dict(base, **{"train_gpt.py": COSINE}), seed=2)]
    groups, runs = _groups(paths)
    assert groups == [["20260101_000000_Base", "20260101_000100_Base"]]  # seed 2 is not seed noise
    board = tables.build_leaderboard(runs)
    notes = [n for n in board.notes if "research code" in n]
    assert len(notes) == 1 and "train_gpt.py (+2 −1)" in notes[0] and "model.py" not in notes[0]
    assert "--diff 20260101_000000_Base 20260101_000200_Base" in notes[0]


def test_a_file_the_backup_marks_as_research_code_splits_too(tmp_path):
    root = str(tmp_path / "experiments")
    record = json.dumps({"format": 1, "commit": "abc", "research_files": ["train_gpt.py", "model.py", "optim.py"]})
    code = {"train_gpt.py": TRAIN, "model.py": MODEL, "git.json": record, "optim.py": "BETAS = (0.9, 0.95)\n"}
    paths = [_run(root, "20260101_000000_A", 1.30, code, seed=0), _run(root, "20260101_000100_A", 1.31, code, seed=1),
             _run(root, "20260101_000200_A", 1.29, dict(code, **{"optim.py": "BETAS = (0.8, 0.95)\n"}), seed=2)]
    assert _groups(paths)[0] == [["20260101_000000_A", "20260101_000100_A"]]
    # the commit + patch (other files) are not research code: a new commit of the rest keeps the group
    other_commit = dict(code, **{"git.json": record.replace('"abc"', '"def"')})
    paths[2] = _run(root, "20260101_000300_A", 1.29, other_commit, seed=2)
    assert _groups(paths)[0] == [["20260101_000000_A", "20260101_000100_A", "20260101_000300_A"]]


def test_a_resumed_run_with_absolute_paths_joins_its_runs_group(tmp_path):
    project = str(tmp_path / "proj")
    root = os.path.join(project, "experiments")
    fresh = dict(train_files=["data/tiny/train_*.bin"], val_files=["data/tiny/val_*.bin"],
                 train_shards=["data/tiny/train_000001.bin"], hellaswag_path="data/hellaswag/hellaswag_val.jsonl",
                 experiments_dir="experiments")
    # what a checkpoint's flags record (run.py _portable_args): the same files, absolute
    resumed = dict(train_files=[os.path.join(project, "data/tiny/train_*.bin")],
                   val_files=[os.path.join(project, "data", "tiny", ".", "val_*.bin")],
                   train_shards=[os.path.join(project, "data/tiny/train_000001.bin")],
                   hellaswag_path="data/hellaswag/hellaswag_val.jsonl", experiments_dir=root,
                   resume=os.path.join(root, "20260101_000000_R/checkpoints/step_20.pt"),
                   resumed_from=os.path.join(root, "20260101_000000_R/checkpoints/step_20.pt"), resume_step=20,
                   log_every=5)
    paths = [_run(root, "20260101_000000_R", 1.30, seed=0, **fresh),
             _run(root, "20260101_000100_R", 1.31, seed=1, **fresh),
             _run(root, "20260101_000200_R", 1.30, seed=0, **resumed)]
    assert _groups(paths)[0] == [["20260101_000000_R", "20260101_000100_R", "20260101_000200_R"]]
    # other data, absolute or relative, is another setting
    elsewhere = dict(resumed, train_files=[os.path.join(project, "data/other/train_*.bin")])
    paths[2] = _run(root, "20260101_000300_R", 1.30, seed=0, **elsewhere)
    assert _groups(paths)[0] == [["20260101_000000_R", "20260101_000100_R"]]


def test_one_tokenizer_at_two_paths_is_one_setting_by_its_hash(tmp_path):
    root = str(tmp_path / "experiments")
    paths = [_run(root, "20260101_000000_T", 1.30, seed=0, tokenizer="tok.pkl", tokenizer_name="tok"),
             _run(root, "20260101_000100_T", 1.31, seed=1, tokenizer="/elsewhere/copy_of_tok.pkl",
                  tokenizer_name="copy_of_tok")]
    assert _groups(paths)[0] == [["20260101_000000_T", "20260101_000100_T"]]
    paths.append(_run(root, "20260101_000200_T", 1.30, seed=2, tokenizer="tok.pkl", tokenizer_name="tok",
                      tokenizer_ranks_sha256="bbb222"))  # other merges under the same name
    assert _groups(paths)[0] == [["20260101_000000_T", "20260101_000100_T"]]
    # no hash recorded (an older run): the names still tell tokenizers apart
    no_hash = [_run(root, f"2026010{2 + i}_000000_U", 1.3, seed=i, tokenizer=t, tokenizer_ranks_sha256=None)
               for i, t in enumerate(("a.pkl", "b.pkl"))]
    assert _groups(no_hash)[0] == []


def test_a_full_copy_keys_its_group_by_the_architecture_module_the_run_trained(tmp_path):
    """A full-copy backup (no git.json) of a gpt2.py or llama.py run: its research code is train_gpt.py and the module
    whose sha256 the run's config records (model_source_sha256), not model.py, which the copy also holds."""
    import hashlib

    root = str(tmp_path / "experiments")
    for arch_file in ("gpt2.py", "llama.py"):
        module, edited = f"class GPT:  # {arch_file}\n    pass\n", f"class GPT:  # {arch_file}, edited\n    pass\n"

        def run(folder, seed, code, model=MODEL):
            sha = hashlib.sha256(code.encode()).hexdigest()
            return _run(root, folder, 1.3 + seed / 100, {"train_gpt.py": TRAIN, "model.py": model, arch_file: code},
                        seed=seed, model_source_sha256=sha, arch=arch_file[:-3])

        stem = arch_file[:-3]
        paths = [run(f"20260101_00000{i}_{stem}", i, module, model=MODEL + f"# {i}\n") for i in range(2)]  # model.py
        paths.append(run(f"20260101_000002_{stem}", 2, edited))  # differs only where the run does not train it
        assert _groups(paths)[0] == [[os.path.basename(p) for p in paths[:2]]]
        assert set(cmp.load_run(paths[0]).research_code) == {"train_gpt.py", arch_file}


def test_the_ranks_settings_check_names_the_runs_architecture_file():
    import argparse

    import torch

    from gptlab.train.config import rank_settings

    tok = argparse.Namespace(ranks_sha256="abc")
    for source, name in (({"file": "gpt2.py", "sha256": "1" * 64}, "gpt2.py"),
                         ({"file": "llama.py", "sha256": "2" * 64}, "llama.py"),
                         ({"sha256": "3" * 64}, "model.py")):  # recorded before the name was
        settings = rank_settings(argparse.Namespace(lr=1.0), torch.device("cpu"), tok, None, model_source=source)
        assert settings[name] == repr(source["sha256"]) and sum(k.endswith(".py") for k in settings) == 1
