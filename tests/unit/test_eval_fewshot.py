"""--fewshot K: shots drawn from each task's few-shot split as lm-eval-harness 0.4.13 draws them.

Expectations: lm-eval ITSELF (its own task files, pointed at local json files, its TaskManager, sampler and
build_all_requests with its default fewshot seed) on small train rows written here and real validation rows; and
draws worked out by hand from random.Random(1234) and lm-eval's sampler rules (sample K, or K + 1 and drop the row)."""
import importlib.util
import os
import random

import pytest

from helpers.eval_tasks import LM_EVAL_FILES, lm_eval_built, shared_rows, write_rows
from gptlab.core.errors import UserError
from gptlab.evals import suite, task_spec

# lm-eval reads super_glue's BoolQ (label 0/1); google/boolq's answer is the same bit (boolq.py's LM_EVAL_OVERRIDES)
OVERRIDES = {"boolq": {"doc_to_target": "{{1 if answer else 0}}"}}
N_SCORED = 12


def train_rows(name, rows, n, start, copies=()):
    """n rows for a task's train split: real rows from `start` with their first text column marked (so none equals
    a scored row), then exact copies of the scored rows at the indices `copies` (lm-eval drops those from a row's
    shots when it passes the row as eval_doc)."""
    task = task_spec.load_task(name)
    column = next(c for c, kind in task.COLUMNS.items() if kind is str)
    out = [{**r, column: f"(train {k}) {r[column]}"} for k, r in enumerate(rows[start:start + n])]
    return out + [dict(rows[i]) for i in copies]


def lm_eval_contexts(tmp_path, name, train, scored, k):
    """[[(context, continuation)] per scored row] as lm-eval builds them for `lm_eval --num_fewshot k` on these
    rows: its own task file, train = `train`, validation and test = `scored` (its config picks which split it
    scores and which it draws shots from)."""
    folder = tmp_path / f"{name}_{k}"
    write_rows(folder, "train", train)
    write_rows(folder, "scored", scored)
    files = {"train": str(folder / "train.jsonl"), "validation": str(folder / "scored.jsonl"),
             "test": str(folder / "scored.jsonl")}
    return lm_eval_built(folder, LM_EVAL_FILES[name], files, k, len(scored), OVERRIDES.get(name))[0]


def our_contexts(tmp_path, name, train, scored, k):
    data = tmp_path / f"ours_{name}_{k}"
    write_rows(data, name, scored)
    write_rows(data, f"{name}.fewshot", train)
    _, reqs = suite.task_requests(task_spec.load_task(name), k, None, str(data))
    return [list(zip(r["contexts"], r["continuations"])) for r in reqs]


CASES = {  # task: (train rows, their first real row, copies of scored rows among them)
    "arc_easy": (30, 100, (0,)),  # lm-eval's arc_easy draws K (its test_split is another split): copies stay
    "boolq": (5, 100, (0, 0, 0, 1)),  # mostly copies: K + 1 drawn often leaves fewer than K, so K are drawn again
    "winogrande": (25, 100, (0, 3)),  # partial scoring: one context per option, the shots shared
    "hellaswag": (40, 100, (2,)),
    "copa": (8, 60, ()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fewshot_contexts_are_lm_evals_byte_for_byte(tmp_path, monkeypatch, name):
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm_eval is not installed (it is in requirements.txt)")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    n, start, copies = CASES[name]
    rows = shared_rows(name, start + n)
    scored = rows[:N_SCORED]
    train = train_rows(name, rows, n, start, copies)
    for k in (1, 2, 3):
        theirs = lm_eval_contexts(tmp_path, name, train, scored, k)
        ours = our_contexts(tmp_path, name, train, scored, k)
        assert len(ours) == N_SCORED
        for i in range(N_SCORED):
            assert ours[i] == theirs[i], (name, k, i)
        assert all(ours[i][0][0].count(task_spec.load_task(name).FEWSHOT_DELIMITER) >= k for i in range(N_SCORED))


# ---- by hand


def sample_k_plus_one(pool_size, k, rows_drawn):
    rnd = random.Random(1234)
    return [rnd.sample(range(pool_size), k + 1) for _ in range(rows_drawn)]


def test_draws_by_hand_for_both_lm_eval_rules(tmp_path):
    arc, piqa = task_spec.load_task("arc_easy"), task_spec.load_task("piqa")
    pool = [{"i": j} for j in range(10)]
    rows = [{"i": 100 + j} for j in range(4)]
    rnd = random.Random(1234)
    assert task_spec.fewshot_draws(arc, rows, pool, 2) == [rnd.sample(range(10), 2) for _ in rows]
    assert task_spec.fewshot_draws(piqa, rows, pool, 2) == [d[:2] for d in sample_k_plus_one(10, 2, 4)]
    # the row itself (every copy of it) is never its own shot; the others keep their order
    row = pool[sample_k_plus_one(10, 2, 1)[0][0]]
    drawn = task_spec.fewshot_draws(piqa, [row], pool, 2)[0]
    assert drawn == sample_k_plus_one(10, 2, 1)[0][1:]
    assert task_spec.fewshot_draws(piqa, rows, pool, 0) == [[]] * 4


def test_fewshot_limit_gives_the_first_rows_what_a_full_run_gives_them(tmp_path):
    data = tmp_path / "evals"
    rows = shared_rows("piqa", 40)
    write_rows(data, "piqa", rows[:20])
    write_rows(data, "piqa.fewshot", rows[20:])
    task = task_spec.load_task("piqa")
    full = suite.task_requests(task, 3, None, str(data))[1]
    assert suite.task_requests(task, 3, 5, str(data))[1] == full[:5]
    shot = rows[20:][sample_k_plus_one(20, 3, 1)[0][0]]
    assert full[0]["contexts"][0].startswith(f"Question: {shot['goal']}\nAnswer: {shot[('sol1', 'sol2')[shot['label']]]}"
                                             "\n\n")


def test_no_fewshot_split_missing_rows_and_too_few_rows_are_one_error_each(tmp_path):
    data = tmp_path / "evals"
    write_rows(data, "piqa", shared_rows("piqa", 5))
    write_rows(data, "lambada", [{"text": "a b c"}] * 5)
    piqa, lambada = task_spec.load_task("piqa"), task_spec.load_task("lambada")
    assert suite.task_requests(piqa, 0, None, str(data))[1]  # 0-shot needs no few-shot rows
    with pytest.raises(UserError, match=r"python download_evals.py --tasks piqa --data_dir") as err:
        suite.task_requests(piqa, 1, None, str(data))
    assert "piqa.fewshot.jsonl not found" in str(err.value) and "train split" in str(err.value)
    with pytest.raises(UserError, match="task lambada has no few-shot split"):
        suite.task_requests(lambada, 1, None, str(data))
    write_rows(data, "piqa.fewshot", shared_rows("piqa", 3))
    assert suite.task_requests(piqa, 2, None, str(data))[1]  # K + 1 = 3 rows: enough
    with pytest.raises(UserError, match="draws 4 rows per example, but piqa's train split has 3 rows"):
        suite.task_requests(piqa, 3, None, str(data))


def test_a_task_whose_shots_come_from_its_scored_split_never_shows_a_row_itself(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    source = open(os.path.join(task_spec.TASKS_DIR, "piqa.py")).read()
    own = source.replace('NAME = "piqa"', 'NAME = "piqa_self"').replace('FEWSHOT_SPLIT = "train"',
                                                                         'FEWSHOT_SPLIT = "validation"')
    (folder / "piqa_self.py").write_text(own.replace('FEWSHOT_FILES = "plain_text/train/*.parquet"',
                                                     "FEWSHOT_FILES = None"))
    task = task_spec.load_task("piqa_self", str(folder))
    data = tmp_path / "evals"
    rows = shared_rows("piqa", 6)
    write_rows(data, "piqa_self", rows)
    reqs = suite.task_requests(task, 5, None, str(data))[1]  # every other row, in the drawn order
    draws = sample_k_plus_one(6, 5, 6)
    for i, req in enumerate(reqs):
        order = [j for j in draws[i] if j != i][:5]
        assert req["contexts"][0].count("Question: ") == 6
        assert req["contexts"][0].split("\n\n")[:5] == [f"Question: {rows[j]['goal']}\nAnswer: "
                                                        f"{rows[j][('sol1', 'sol2')[rows[j]['label']]]}"
                                                        for j in order]
    with pytest.raises(UserError, match="draws 7 rows per example"):
        suite.task_requests(task, 6, None, str(data))
    (folder / "piqa_self.py").write_text(own + "\nFEWSHOT_EXCLUDE_SELF = False\n")
    with pytest.raises(UserError, match="FEWSHOT_FILES and FEWSHOT_SHA256 must be None"):
        task_spec.load_task("piqa_self", str(folder))


@pytest.mark.parametrize("fields, problem", [
    ('FEWSHOT_SPLIT = ""', "FEWSHOT_SPLIT must be a non-empty string or None"),
    ("FEWSHOT_FILES = None", "FEWSHOT_SPLIT is 'train' but FEWSHOT_FILES is None"),
    ('FEWSHOT_SHA256 = "abc"', "FEWSHOT_SHA256 must be 64 lower-case hex digits or None"),
    ("FEWSHOT_EXCLUDE_SELF = 1", "FEWSHOT_EXCLUDE_SELF must be True or False"),
    ("FEWSHOT_SPLIT = None", "sets FEWSHOT_FILES or FEWSHOT_SHA256 but FEWSHOT_SPLIT is None"),
])
def test_bad_fewshot_fields_are_named(tmp_path, fields, problem):
    folder = tmp_path / "tasks"
    folder.mkdir()
    source = open(os.path.join(task_spec.TASKS_DIR, "piqa.py")).read().replace('NAME = "piqa"', 'NAME = "mine"')
    (folder / "mine.py").write_text(source + "\n" + fields + "\n")
    with pytest.raises(UserError, match=problem):
        task_spec.load_task("mine", str(folder))
