"""evaluate.py end to end: 1 and 2 ranks (torchrun, gloo) write the same figures; a task added as one file (a
benchmark we do not ship) scores; bad input is one error line and writes nothing. The scorer against a plain loop:
tests/unit/test_eval_score.py."""
import hashlib
import json
import os
import shutil

import pytest

from conftest import free_port, run_script
from helpers.eval_tasks import COLORS_TASK, LAMBADA_ROWS, data_dir_with, shared_rows, tiny_checkpoint, write_rows
from helpers.user_task_rows import LM_EVAL_YAML, USER_TASKS_DIR, user_task_data

SCRIPT = "evaluate.py"
TASKS = ["arc_easy", "boolq", "winogrande", "copa", "hellaswag"]
LIMIT = 7  # odd: the rows do not divide evenly between two ranks

NEW_TASK = COLORS_TASK


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("evaluate")
    ckpt, _ = tiny_checkpoint(str(folder), window_size=256)
    data = data_dir_with(folder / "data", TASKS, limit=LIMIT)
    write_rows(data, "lambada", LAMBADA_ROWS)
    return folder, ckpt, data


def evaluate(ckpt, data, out, *extra, torchrun=False):
    args = [SCRIPT, ckpt, "--tasks", ",".join(TASKS + ["lambada"]), "--data_dir", data, "--out", out, "--quiet",
            *extra]
    if torchrun:
        args = ["torchrun", "--nproc_per_node=2", "--master_port", str(free_port())] + args
    return run_script(args, timeout=400)


def test_two_ranks_write_what_one_rank_writes(setup):
    folder, ckpt, data = setup
    one = evaluate(ckpt, data, folder / "one")
    two = evaluate(ckpt, data, folder / "two", torchrun=True)
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    names = sorted(os.listdir(folder / "one"))
    assert names == sorted([f"{t}.jsonl" for t in TASKS] + ["lambada.jsonl", "summary.json"])
    assert sorted(os.listdir(folder / "two")) == names
    for name in [n for n in names if n.endswith(".jsonl")]:
        assert (folder / "one" / name).read_bytes() == (folder / "two" / name).read_bytes(), name
    s1, s2 = (json.loads((folder / d / "summary.json").read_text()) for d in ("one", "two"))
    assert (s1.pop("ranks"), s2.pop("ranks")) == (1, 2)
    s1.pop("seconds"), s2.pop("seconds")
    assert s1 == s2
    assert s1["per_task"]["copa"]["n"] == LIMIT and s1["per_task"]["lambada"]["n"] == len(LAMBADA_ROWS)
    first = json.loads((folder / "one" / "arc_easy.jsonl").read_text().splitlines()[0])
    assert set(first) >= {"logprob", "tokens", "bytes", "gold", "pred", "pred_norm"} and len(first["logprob"]) == 4
    assert first["bytes"] == [len(" cellular telephone"), len(" television"), len(" refrigerator"), len(" airplane")]
    assert "core (mean centred accuracy over 6 tasks)" in one.stdout


def test_a_task_added_as_one_file_scores(setup, tmp_path):
    folder, ckpt, data = setup
    tasks_dir = tmp_path / "my_tasks"
    tasks_dir.mkdir()
    (tasks_dir / "colors.py").write_text(NEW_TASK)
    write_rows(data, "colors", [{"thing": "grass", "options": ["green", "red"], "answer": 0},
                                {"thing": "the sky", "options": ["pink", "blue", "black"], "answer": 1}])
    proc = run_script([SCRIPT, ckpt, "--tasks", "colors", "--data_dir", data, "--tasks_dir", tasks_dir,
                       "--out", tmp_path / "out", "--quiet"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["per_task"]["colors"]["n"] == 2
    assert summary["per_task"]["colors"]["baseline"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    rows = [json.loads(line) for line in (tmp_path / "out" / "colors.jsonl").read_text().splitlines()]
    assert [r["bytes"] for r in rows] == [[6, 4], [5, 5, 6]]  # " green", " red"; " pink", " blue", " black"


def test_benchmarks_added_as_the_docs_say_score_with_their_own_shots(setup, tmp_path):
    """docs/evals.md's "Add a task" followed for thirteen benchmarks we do not ship (tests/helpers/user_tasks/, a
    --tasks_dir; their rendering against lm-eval's: tests/unit/test_eval_user_tasks.py): each scores, summary.json
    records MMLU's shots as its dev split's by the first_n sampler, and a test-only task refuses --fewshot."""
    _, ckpt, _ = setup
    data = user_task_data(tmp_path / "data")
    names = ",".join(sorted(LM_EVAL_YAML))
    proc = run_script([SCRIPT, ckpt, "--tasks_dir", USER_TASKS_DIR, "--tasks", names, "--data_dir", data, "--limit",
                       "3", "--out", tmp_path / "zero", "--quiet"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "zero" / "summary.json").read_text())
    assert {name: s["n"] for name, s in summary["per_task"].items()} == {name: 3 for name in LM_EVAL_YAML}
    assert summary["per_task"]["truthfulqa_mc1"]["baseline"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    proc = run_script([SCRIPT, ckpt, "--tasks_dir", USER_TASKS_DIR, "--tasks", "mmlu_anatomy,sciq", "--data_dir",
                       data, "--fewshot", "2", "--out", tmp_path / "two", "--quiet"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    source = json.loads((tmp_path / "two" / "summary.json").read_text())["fewshot_source"]
    assert (source["mmlu_anatomy"]["sampler"], source["sciq"]["sampler"]) == ("first_n", "default")
    assert source["mmlu_anatomy"]["split"] == "dev" and source["mmlu_anatomy"]["file"] == "mmlu_anatomy.fewshot.jsonl"
    line = run_script([SCRIPT, ckpt, "--tasks_dir", USER_TASKS_DIR, "--tasks", "race", "--data_dir", data,
                       "--fewshot", "1", "--out", tmp_path / "race"], timeout=300)
    assert "task race has no few-shot split" in one_error(line)


def one_error(proc):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_bad_input_is_one_error_line_and_writes_nothing(setup, tmp_path):
    folder, ckpt, data = setup
    out = tmp_path / "out"

    def run(*args):
        return run_script([SCRIPT, ckpt, "--data_dir", data, "--out", out, "--quiet", *args], timeout=300)

    assert "unknown task 'arc_hard'" in one_error(run("--tasks", "arc_easy,arc_hard"))
    two_ranks = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), SCRIPT, ckpt,
                            "--tasks", "arc_hard", "--data_dir", data, "--out", out], timeout=300)
    assert two_ranks.returncode != 0 and two_ranks.stderr.count("error: unknown task 'arc_hard'") == 1
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "colors.py").write_text(NEW_TASK.replace('RANDOM_BASELINE = "uniform"\n', ""))
    line = one_error(run("--tasks", "colors", "--tasks_dir", broken))
    assert "colors.py has no RANDOM_BASELINE" in line
    wrong = tmp_path / "wrong"
    write_rows(wrong, "arc_easy", [{"goal": "g", "sol1": "a", "sol2": "b", "label": 0}])  # PIQA's columns
    line = one_error(run_script([SCRIPT, ckpt, "--tasks", "arc_easy", "--data_dir", wrong, "--out", out],
                                timeout=300))
    assert "arc_easy.jsonl line 1: no column 'question'" in line
    row = {"premise": "It rained \ud800.", "choice1": "A.", "choice2": "B.", "question": "effect", "idx": 0, "label": 0}
    (wrong / "copa.jsonl").write_text(json.dumps(row) + "\n")  # a lone surrogate: valid JSON, no UTF-8 for it
    line = one_error(run_script([SCRIPT, ckpt, "--tasks", "copa", "--data_dir", wrong, "--out", out], timeout=300))
    assert "tokenizer cannot encode copa row 1" in line
    assert "data/evals" not in line and not out.exists()
    out.mkdir()
    assert "already exists; pass --overwrite" in one_error(run("--tasks", "copa"))
    assert os.listdir(out) == []



def test_sloppy_input_that_once_ran_or_crashed_is_one_error_line(setup, tmp_path):
    """Each of these exited 0 with figures (or with status 3 and no line) before docs/faults.md promised otherwise."""
    folder, ckpt, data = setup
    out = tmp_path / "out"

    def run(tasks, *extra, data_dir=data):
        return run_script([SCRIPT, ckpt, "--tasks", tasks, "--data_dir", data_dir, "--out", out, "--quiet", *extra],
                          timeout=300)

    assert "--tasks names copa more than once" in one_error(run("copa,arc_easy,copa"))
    assert "--out must not be empty" in one_error(run_script([SCRIPT, ckpt, "--tasks", "copa", "--data_dir", data,
                                                              "--out", ""], timeout=300))
    assert not (folder / "step_000010_evals").exists()  # what --out '' wrote: the default folder
    rows = shared_rows("copa", 3)
    write_rows(tmp_path / "extra", "copa", rows[:2] + [dict(rows[2], note="pasted")])
    line = one_error(run("copa", data_dir=tmp_path / "extra"))
    assert "copa.jsonl line 3: its columns differ from line 1's (extra 'note')" in line
    assert line.endswith(f"python download_evals.py --tasks copa --data_dir {tmp_path / 'extra'} --overwrite")
    arc = shared_rows("arc_easy", 2)
    arc[1]["choices"]["text"][3] = ""
    write_rows(tmp_path / "blank", "arc_easy", arc)
    assert "arc_easy row 2: choice 4 of 4 is '', with no text to score" in one_error(run("arc_easy",
                                                                                         data_dir=tmp_path / "blank"))
    exits = tmp_path / "exits"
    exits.mkdir()
    (exits / "colors.py").write_text("import sys\nsys.exit(3)\n" + NEW_TASK)
    assert "colors.py does not load (SystemExit: 3)" in one_error(run("colors", "--tasks_dir", exits))
    assert not out.exists()
    # --overwrite of a folder that holds what is read (the checkpoint, the rows) would delete it with the folder
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(ckpt, run_dir / "step_000010.pt")
    shutil.copytree(data, run_dir / "data")
    for checkpoint, held in ((run_dir / "step_000010.pt", run_dir / "step_000010.pt"), (ckpt, run_dir / "data")):
        line = one_error(run_script([SCRIPT, checkpoint, "--tasks", "copa", "--data_dir", run_dir / "data", "--out",
                                     run_dir, "--overwrite", "--quiet"], timeout=300))
        assert f"is or holds {held}; --overwrite would delete it with the folder" in line
        assert sorted(os.listdir(run_dir)) == ["data", "step_000010.pt"]


def test_fewshot_draws_from_the_few_shot_file_and_records_it(setup, tmp_path):
    folder, ckpt, _ = setup
    data = data_dir_with(tmp_path / "data", ["arc_easy", "copa"], limit=LIMIT)
    write_rows(data, "lambada", LAMBADA_ROWS)
    out = tmp_path / "out"

    def run(tasks, *extra):
        return run_script([SCRIPT, ckpt, "--tasks", tasks, "--data_dir", data, "--out", out, "--quiet", "--fewshot",
                           "2", *extra], timeout=300)

    line = one_error(run("arc_easy,copa"))  # no few-shot rows downloaded: named, with the command that fetches them
    assert "arc_easy.fewshot.jsonl not found" in line and "python download_evals.py --tasks arc_easy" in line
    write_rows(data, "arc_easy.fewshot", shared_rows("arc_easy", 30)[10:])
    write_rows(data, "copa.fewshot", shared_rows("copa", 30)[10:])
    assert "task lambada has no few-shot split" in one_error(run("arc_easy,copa,lambada"))
    assert not out.exists()
    proc = run("arc_easy,copa")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fewshot"] == 2
    sha = hashlib.sha256((tmp_path / "data" / "arc_easy.fewshot.jsonl").read_bytes()).hexdigest()
    assert summary["fewshot_source"]["arc_easy"] == {"split": "train", "file": "arc_easy.fewshot.jsonl", "rows": 20,
                                                     "sha256": sha, "seed": 1234, "sampler": "default",
                                                     "exclude_self": False}
    assert summary["fewshot_source"]["copa"]["exclude_self"] is True
    zero = run_script([SCRIPT, ckpt, "--tasks", "copa", "--data_dir", data, "--out", tmp_path / "zero", "--quiet"],
                      timeout=300)
    assert zero.returncode == 0, zero.stderr
    assert json.loads((tmp_path / "zero" / "summary.json").read_text())["fewshot_source"] == {"copa": None}


@pytest.mark.parametrize("script", ["evaluate.py", "download_evals.py"])
def test_help_and_a_bad_flag(script):
    text = run_script([script, "--help"], check=True).stdout
    assert "(default: None)" not in text and "--tasks" in text
    for entry in text.split("\n  -"):
        assert entry.count("default") <= 1, entry
    proc = run_script([script, "--no_such_flag"] + (["c.pt"] if script == "evaluate.py" else []))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: unrecognized arguments: --no_such_flag (see {script} --help)", proc.stderr


PROBE = """
import sys
import evaluate
evaluate.main(sys.argv[1:])
print("dynamo after evaluate:", "torch._dynamo" in sys.modules)
import torch
torch.empty(2, device="meta").cos()  # a meta op whose kernel runs under dynamo's disable: the real one now
print("real dynamo after a meta op:", hasattr(sys.modules.get("torch._dynamo"), "reset"))
"""


def test_evaluate_never_imports_torch_dynamo_and_leaves_it_to_import_later(setup, tmp_path):
    """Checking the weights on torch's meta device pulled in torch._dynamo (~1.5 s of CPU at every start); the
    figures are those of a run that imports it (test_two_ranks_write_what_one_rank_writes: every other test)."""
    _, ckpt, data = setup
    proc = run_script(["-c", PROBE, ckpt, "--tasks", "copa", "--data_dir", data, "--out", tmp_path / "out", "--quiet"],
                      timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "dynamo after evaluate: False" in proc.stdout
    assert "real dynamo after a meta op: True" in proc.stdout
