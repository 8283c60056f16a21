"""Benchmarks we do not ship, each added as docs/evals.md's "Add a task" says (one file in a --tasks_dir,
tests/helpers/user_tasks/), score what lm-eval 0.4.13 scores for its task of the same name. Expectations: lm-eval
ITSELF (its own task file included, the rows from local json files, TaskManager and build_all_requests with its
default seed) for every request of every row at K = 0, 1, 2; the samplers and the messages worked out by hand from
lm-eval's sampler code and the docs' promises."""
import importlib.util
import os
import re

import pytest

from helpers.eval_tasks import lm_eval_built, write_rows
from helpers.user_task_rows import LM_EVAL_YAML, USER_TASKS_DIR, user_task_data
from gptlab.core.errors import UserError
from gptlab.evals import suite, task_spec

TEMPLATE = os.path.join(task_spec.TASKS_DIR, "_template.py")


def lm_eval_golds(task):
    """lm-eval's gold index of each scored doc (a multiple-input task's: its doc_to_text)."""
    docs = list(task.test_docs() if task.has_test_docs() else task.validation_docs())
    if task.OUTPUT_TYPE == "loglikelihood":  # one continuation: its own
        return [0] * len(docs)
    golds = []
    for doc in docs:
        target = task.doc_to_text(doc) if task.multiple_input else task.doc_to_target(doc)
        golds.append(task.doc_to_choice(doc).index(target) if isinstance(target, str) else target)
    return golds


@pytest.mark.parametrize("name", sorted(LM_EVAL_YAML))
def test_user_task_requests_are_lm_evals(tmp_path, monkeypatch, name):
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm_eval is not installed (pip install lm_eval)")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    data = user_task_data(tmp_path / "data", [name])
    task = task_spec.load_task(name, USER_TASKS_DIR)
    scored = os.path.join(data, f"{name}.jsonl")
    files = {split: scored for split in ("train", "validation", "test", "dev")}  # the split lm-eval scores: ours
    if task.fewshot_file():
        files[task.FEWSHOT_SPLIT] = task.fewshot_path(data)
    files[task.HUB_SPLIT] = scored
    for k in (0, 1, 2) if task.FEWSHOT_SPLIT else (0,):
        _, ours = suite.task_requests(task, k, None, data)
        theirs, reference = lm_eval_built(tmp_path / f"lm_{k}", LM_EVAL_YAML[name], files, k, len(ours))
        golds = lm_eval_golds(reference)
        for i, req in enumerate(ours):
            assert list(zip(req["contexts"], req["continuations"])) == theirs[i], (name, k, i)
            assert req["gold"] == golds[i], (name, k, i)


def task_file(folder, name, **fields):
    """A task file `name`.py in folder: the template's fields with `fields` (Python source) replacing or adding
    theirs, and the template's render."""
    with open(TEMPLATE, encoding="utf-8") as f:
        lines = f.read().replace('NAME = "my_task"', f'NAME = "{name}"').splitlines()
    for field, source in fields.items():
        lines = [line for line in lines if not line.startswith(f"{field} =")] + [f"{field} = {source}"]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.py"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return task_spec.load_task(name, str(folder))


ROWS = [{"question": f"q{i}", "options": ["x", "y"], "answer": i % 2} for i in range(6)]


def test_first_n_takes_the_first_k_rows_in_order(tmp_path):
    """lm-eval's FirstNSampler: pool[:k], no random draw; with eval_doc, every copy of the row removed first."""
    task = task_file(tmp_path, "firsts", FEWSHOT_SAMPLER='"first_n"', FEWSHOT_EXCLUDE_SELF="False")
    assert task_spec.fewshot_draws(task, ROWS[:3], ROWS[2:], 2) == [[0, 1]] * 3
    keep_out = task_file(tmp_path, "firsts_self", FEWSHOT_SAMPLER='"first_n"')
    pool = [ROWS[0], ROWS[1], ROWS[0], ROWS[2], ROWS[3]]
    assert task_spec.fewshot_draws(keep_out, [ROWS[0], ROWS[4]], pool, 2) == [[1, 3], [0, 1]]
    with pytest.raises(UserError, match=r"--fewshot 4: firsts_self row 1 has only 3 other rows in its train split"):
        task_spec.fewshot_draws(keep_out, [ROWS[0]], pool, 4)
    with pytest.raises(UserError, match="FEWSHOT_SAMPLER must be one of default, first_n"):
        task_file(tmp_path, "badsampler", FEWSHOT_SAMPLER='"balanced"')


def test_description_comes_once_before_the_shots_and_the_context(tmp_path):
    task = task_file(tmp_path, "described", DESCRIPTION='"About things.\\n\\n"', FEWSHOT_SAMPLER='"first_n"')
    req = task_spec.requests(task, ROWS, 5, shots=[0, 1], pool=ROWS)
    shot = "Question: q{}\nAnswer: {}\n\n"
    own = "Question: q5\nAnswer:"
    assert req["contexts"] == ["About things.\n\n" + shot.format(0, "x") + shot.format(1, "y") + own] * 2
    per_row = task_file(tmp_path, "per_row", DESCRIPTION='lambda row: f"On {row[\'question\']}: "')
    assert task_spec.requests(per_row, ROWS, 3)["contexts"][0] == "On q3: Question: q3\nAnswer:"
    with pytest.raises(UserError, match="DESCRIPTION must be a string or a function"):
        task_file(tmp_path, "bad_description", DESCRIPTION="3")


def test_keep_row_leaves_rows_out_of_the_examples_and_the_shots(tmp_path):
    """lm-eval's process_docs filter: --limit N counts the rows kept, and the shots come from the rows kept."""
    task = task_file(tmp_path / "tasks", "evens", KEEP_ROW="lambda row: row['answer'] == 0",
                     FEWSHOT_SAMPLER='"first_n"')
    data = tmp_path / "data"
    write_rows(data, "evens", ROWS)
    write_rows(data, "evens.fewshot", ROWS[::-1])
    _, reqs = suite.task_requests(task, 1, 2, str(data))
    # kept: q0, q2, q4 (answer 0); shots pool reversed and kept: q4, q2, q0; first_n: q4
    assert [r["contexts"][0] for r in reqs] == [f"Question: q4\nAnswer: x\n\nQuestion: q{i}\nAnswer:" for i in (0, 2)]
    for keep, message in (("lambda row: 1", "KEEP_ROW gave int; it must give True"),
                          ("lambda row: row['nope']", "KEEP_ROW failed on this row (KeyError"),
                          ("lambda row: False", "KEEP_ROW keeps none of its rows")):
        task = task_file(tmp_path / "tasks", "evens", KEEP_ROW=keep)
        with pytest.raises(UserError, match=re.escape(message)):
            suite.task_requests(task, 0, None, str(data))
    with pytest.raises(UserError, match="KEEP_ROW must be a function of a row"):
        task_file(tmp_path / "tasks", "evens", KEEP_ROW="True")


def test_a_column_that_may_be_null(tmp_path):
    strict = task_file(tmp_path, "strict", COLUMNS='{"question": str, "options": list, "answer": int}')
    row = {"question": None, "options": ["x"], "answer": 0}
    with pytest.raises(UserError) as err:
        task_spec.check_row(strict, row, "f line 1")
    assert "column 'question' must be str, got null; if the dataset has nulls in that column, allow them in " \
           f"{strict.path}: COLUMNS['question'] = (str, None)" in str(err.value)
    lenient = task_file(tmp_path, "lenient", COLUMNS='{"question": (str, None), "options": list, "answer": int}')
    task_spec.check_row(lenient, row, "f line 1")
    with pytest.raises(UserError, match="column 'question' must be str or null, got int; re-download it"):
        task_spec.check_row(lenient, {**row, "question": 3}, "f line 1")
    with pytest.raises(UserError, match=r"COLUMNS must be a non-empty"):
        task_file(tmp_path, "only_null", COLUMNS='{"question": (None,)}')


@pytest.mark.parametrize("render, fix", [
    ('{"context": "Q", "choices": ["x", "y"], "gold": "y"}', 'choices.index(answer) or "ABCD".index(letter)'),
    ('{"context": "Q", "choices": ["x", "y"], "gold": 2}', "an int from 0 to 1"),
    ('{"context": "Q", "choices": ("x", "y"), "gold": 0}', "gave choices as tuple; give a non-empty list of strings"),
    ('{"context": "Q", "choices": ["x", 1], "gold": 0}', "a list holding int; give a non-empty list of strings"),
    ('{"contxt": "Q", "choices": ["x"], "gold": 0}', 'gave a dict with contxt, choices, gold; return {"context"'),
    ('{"context": ["Q"], "choices": ["x", "y"], "gold": 0}', "give one string, or a list of 2 (one per choice"),
])
def test_a_render_that_gives_the_wrong_shape_names_the_fix(tmp_path, render, fix):
    folder = tmp_path / "tasks"
    task = task_file(folder, "shapes")
    with open(task.path, "a", encoding="utf-8") as f:
        f.write(f"\n\ndef render(row):\n    return {render}\n")
    task = task_spec.load_task("shapes", str(folder))
    with pytest.raises(UserError) as err:
        task_spec.requests(task, ROWS, 0)
    assert str(err.value).startswith(f"shapes row 1: {task.path}'s render gave") and fix in str(err.value)


def test_a_task_joins_core_only_when_its_file_says_so(tmp_path):
    """docs/evals.md: --tasks core is every task whose file says CORE = True."""
    task_file(tmp_path, "plain", CORE="False")
    (tmp_path / "silent.py").write_text((tmp_path / "plain.py").read_text().replace("CORE = False\n", "")
                                        .replace('NAME = "plain"', 'NAME = "silent"'))
    task_file(tmp_path, "joined", CORE="True")
    core = {t.NAME for t in task_spec.resolve_tasks("core", str(tmp_path))}
    assert "joined" in core and "silent" not in core and "plain" not in core
    assert {t.NAME for t in task_spec.resolve_tasks("core")} == core - {"joined"}
    with pytest.raises(UserError, match="CORE must be True or False"):
        task_file(tmp_path, "vague", CORE='"yes"')


def test_an_unknown_task_names_where_to_add_it(tmp_path):
    with pytest.raises(UserError, match=r"add one: a file sciq\.py in \S*gptlab/evals/tasks, or in a folder of "
                                        r"your own passed as --tasks_dir"):
        task_spec.resolve_tasks("sciq")
    with pytest.raises(UserError, match=rf"add one: a file sciqq\.py in {USER_TASKS_DIR} \(your --tasks_dir\)"):
        task_spec.resolve_tasks("sciqq", USER_TASKS_DIR)


def test_a_helper_file_in_the_tasks_folder_says_it_is_no_task(tmp_path):
    (tmp_path / "utils.py").write_text("def doc_to_text(doc):\n    return doc['q']\n")  # as lm-eval's beside a YAML
    task_file(tmp_path, "mine")
    assert task_spec.load_task("mine", str(tmp_path)).NAME == "mine"  # named alone: the helper is not read
    with pytest.raises(UserError, match=rf"{re.escape(str(tmp_path / 'utils.py'))} is in a tasks folder but is no "
                                        r"task file .*rename a file that is no task to start with _"):
        task_spec.resolve_tasks("all", str(tmp_path))
    (tmp_path / "utils.py").rename(tmp_path / "_utils.py")
    assert "mine" in {t.NAME for t in task_spec.resolve_tasks("all", str(tmp_path))}


def test_fewshot_on_a_task_without_a_few_shot_split_names_its_file_as_given(tmp_path):
    """A file outside the working folder is named by its own path, not a relative one of ../.. steps."""
    task = task_file(tmp_path, "zero_shot", FEWSHOT_SPLIT="None", FEWSHOT_FILES="None")
    with pytest.raises(UserError) as err:
        task_spec.check_fewshot([task], 2)
    assert (f"task zero_shot has no few-shot split (FEWSHOT_SPLIT is None in {task.path}: its lm-eval task draws "
            "no shots but from the rows it scores, or is 0-shot only)") in str(err.value)


def test_a_task_of_yours_named_as_a_built_in_one_says_how_to_rename_it(tmp_path):
    task_file(tmp_path, "mine")
    (tmp_path / "winogrande.py").write_bytes(open(task_spec.load_task("winogrande").path, "rb").read())
    with pytest.raises(UserError, match=r"task winogrande is defined twice .*rename yours: another file name, and the "
                                        r"same name as its NAME \(e\.g\. winogrande_mine\.py with NAME = "
                                        r"\"winogrande_mine\"\)"):
        task_spec.resolve_tasks("mine", str(tmp_path))


def test_lm_eval_names_the_task_file_it_renders_as(tmp_path):
    """LM_EVAL: a path under lm_eval/tasks/ ending .yaml, or None; LM_EVAL_OVERRIDES only beside it."""
    assert task_file(tmp_path, "plain").LM_EVAL is None
    named = task_file(tmp_path, "named", LM_EVAL='"sciq/sciq.yaml"', LM_EVAL_OVERRIDES='{"doc_to_target": "3"}')
    assert (named.LM_EVAL, named.LM_EVAL_OVERRIDES) == ("sciq/sciq.yaml", {"doc_to_target": "3"})
    with pytest.raises(UserError, match=r"LM_EVAL must be the path of an lm-eval task file under lm_eval/tasks/"):
        task_file(tmp_path, "bare_name", LM_EVAL='"sciq"')
    with pytest.raises(UserError, match="sets LM_EVAL_OVERRIDES but LM_EVAL is None"):
        task_file(tmp_path, "orphan", LM_EVAL_OVERRIDES='{"doc_to_target": "3"}')
    with pytest.raises(UserError, match="LM_EVAL_OVERRIDES must be a dict"):
        task_file(tmp_path, "listed", LM_EVAL='"sciq/sciq.yaml"', LM_EVAL_OVERRIDES='["doc_to_target"]')


def test_the_bench_times_a_user_task_against_the_lm_eval_task_its_file_names(tmp_path, monkeypatch):
    """bench/bench_evals.py's lm-eval task file for a --tasks_dir task (sciq, whose file says LM_EVAL): lm-eval
    itself loads it from the bench's folder and builds the requests our rendering gives, row for row."""
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm_eval is not installed (pip install lm_eval)")
    import sys

    from conftest import REPO
    from lm_eval.tasks import TaskManager

    sys.path.insert(0, os.path.join(REPO, "bench"))
    import bench_evals

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_datasets"))
    data = user_task_data(tmp_path / "data", ["sciq"])
    task = task_spec.load_task("sciq", USER_TASKS_DIR)
    assert task.LM_EVAL == LM_EVAL_YAML["sciq"]
    names = bench_evals.lm_eval_task_files(str(tmp_path / "lm_tasks"), [task], data)
    built = TaskManager(include_path=str(tmp_path / "lm_tasks"), include_defaults=False).load(names["sciq"])
    theirs = built["tasks"][names["sciq"]]
    theirs.build_all_requests(limit=None)
    _, ours = suite.task_requests(task, 0, None, data)
    got = [[] for _ in ours]
    for inst in theirs.instances:
        got[inst.doc_id].append(tuple(inst.arguments))
    assert got == [list(zip(r["contexts"], r["continuations"])) for r in ours] and ours


def test_the_bench_refuses_a_task_whose_file_names_no_lm_eval_task(tmp_path):
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm_eval is not installed (pip install lm_eval)")
    import sys

    from conftest import REPO

    sys.path.insert(0, os.path.join(REPO, "bench"))
    import bench_evals

    task_file(tmp_path / "tasks", "unnamed")
    with pytest.raises(UserError, match=r"no lm-eval task to compare with for unnamed: a task is timed when its file "
                                        r"names lm-eval's \(LM_EVAL\)"):
        bench_evals.main(["CKPT.pt", "--tasks", "unnamed", "--tasks_dir", str(tmp_path / "tasks")])
    task_file(tmp_path / "tasks", "misnamed", LM_EVAL='"no_such/task.yaml"')
    with pytest.raises(UserError, match=r"lm-eval \S+ has no task file no_such/task.yaml under its tasks folder"):
        bench_evals.main(["CKPT.pt", "--tasks", "misnamed", "--tasks_dir", str(tmp_path / "tasks")])
