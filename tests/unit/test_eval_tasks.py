"""The task files (gptlab/evals/tasks/): each renders the real rows of ../shared/data/evals as lm-eval-harness does.
Expectations: the first rows worked out by hand from lm-eval's task YAMLs (literal strings below), and, where
lm_eval is installed, lm-eval's own task functions on the same rows (test_same_requests_as_lm_eval)."""
import importlib.util
import os

import pytest

from helpers.eval_tasks import LAMBADA_ROWS, LM_EVAL_FILES as LM_EVAL_YAML, SHARED_TASKS, shared_rows
from gptlab.core.errors import UserError
from gptlab.evals import task_spec
from gptlab.evals.score import move_spaces

BUILT_IN = SHARED_TASKS + ["lambada", "hellaswag"]


def first_request(name, rows=None, index=0):
    task = task_spec.load_task(name)
    rows = rows if rows is not None else shared_rows(name, index + 1)
    return task_spec.requests(task, rows, index)


def pairs(req):
    return list(zip(req["contexts"], req["continuations"]))


def test_every_file_in_the_folder_is_a_task_and_loads():
    assert task_spec.task_names() == sorted(BUILT_IN)
    for name in BUILT_IN:
        assert task_spec.load_task(name).NAME == name


def test_arc_easy_first_row_by_hand():
    req = first_request("arc_easy")
    ctx = "Question: Which technology was developed most recently?\nAnswer:"
    assert pairs(req) == [(ctx, " cellular telephone"), (ctx, " television"), (ctx, " refrigerator"),
                          (ctx, " airplane")]
    assert req["gold"] == 0


def test_arc_challenge_first_row_by_hand():
    req = first_request("arc_challenge")
    assert req["contexts"][0] == ("Question: Juan and LaKeisha roll a few objects down a ramp. They want to see which "
                                  "object rolls the farthest. What should they do so they can repeat their "
                                  "investigation?\nAnswer:")
    assert req["continuations"] == [" Put the objects in groups.", " Change the height of the ramp.",
                                    " Choose different objects to roll.", " Record the details of the investigation."]
    assert req["gold"] == 3  # answerKey D


def test_boolq_first_row_by_hand():
    req = first_request("boolq")
    assert req["contexts"][0].startswith("All biomass goes through at least some of these steps: it needs to be grown")
    assert req["contexts"][0].endswith("\nQuestion: does ethanol take more energy make that produces?\nAnswer:")
    assert req["continuations"] == [" no", " yes"] and req["gold"] == 0  # answer false


def test_piqa_first_row_by_hand():
    req = first_request("piqa")
    assert req["contexts"] == ["Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:"] * 2
    assert req["continuations"][1] == (" Provide the guinea pig with a cage full of a few inches of bedding made of "
                                       "ripped jeans material, you will also need to supply it with a water bottle "
                                       "and a food dish.")
    assert req["gold"] == 0


def test_winogrande_partial_scoring_by_hand():
    req = first_request("winogrande")
    # the option fills the blank in the context; the rest of the sentence is the (shared) continuation
    assert pairs(req) == [("Sarah was a much better surgeon than Maria so Sarah", " always got the easier cases."),
                          ("Sarah was a much better surgeon than Maria so Maria", " always got the easier cases.")]
    assert req["gold"] == 1  # answer "2"


def test_openbookqa_first_row_by_hand():
    req = first_request("openbookqa")
    ctx = ("Frilled sharks and angler fish live far beneath the surface of the ocean, which is why they are "
           "known as")
    assert pairs(req) == [(ctx, " Deep sea animals"), (ctx, " fish"), (ctx, " Long Sea Fish"),
                          (ctx, " Far Sea Animals")]
    assert req["gold"] == 0


def test_social_iqa_first_row_by_hand():
    req = first_request("social_iqa")
    ctx = "Q: Tracy didn't go home that evening and resisted Riley's attacks. What does Tracy need to do before this?\nA:"
    assert pairs(req) == [(ctx, " make a new plan"), (ctx, " Go home and see Riley"), (ctx, " Find somewhere to go")]
    assert req["gold"] == 2  # label "3"


def test_commonsense_qa_first_row_by_hand():
    req = first_request("commonsense_qa")
    ctx = ("Question: A revolving door is convenient for two direction travel, but it also serves as a security "
           "measure at a what?\nA. bank\nB. library\nC. department store\nD. mall\nE. new york\nAnswer:")
    assert pairs(req) == [(ctx, " A"), (ctx, " B"), (ctx, " C"), (ctx, " D"), (ctx, " E")]
    assert req["gold"] == 0


def test_copa_first_row_by_hand():
    req = first_request("copa")
    # lm-eval's choices start with a space and its target delimiter adds another: two spaces
    assert pairs(req) == [("The man turned on the faucet therefore", "  the toilet filled with water."),
                          ("The man turned on the faucet therefore", "  water flowed from the spout.")]
    assert req["gold"] == 1
    assert req["choices"] == [" the toilet filled with water.", " water flowed from the spout."]  # acc_norm's lengths


def test_lambada_last_word_by_hand():
    req = first_request("lambada", LAMBADA_ROWS)
    assert pairs(req) == [("He held the lantern up high so that everyone could see the path ahead. \"Follow the "
                           "light,\" said", " Tom")]
    assert req["gold"] == 0 and task_spec.load_task("lambada").KIND == "greedy"


def test_hellaswag_first_row_by_hand():
    req = first_request("hellaswag")
    ctx = "Roof shingle removal: A man is sitting on a roof. He"  # ctx_b capitalized
    assert pairs(req) == [(ctx, " is using wrap to wrap a pair of skis."), (ctx, " is ripping level tiles off."),
                          (ctx, " is holding a rubik's cube."), (ctx, " starts pulling up roofing on a roof.")]
    assert req["gold"] == 3


def test_hellaswag_wikihow_preprocessing_by_hand():
    """Row 3244 (the first WikiHow row): " [title]" → ". ", other [tags] dropped, double spaces made single; an
    ending that started with a tag keeps the space the tag left (lm-eval strips before it substitutes)."""
    req = first_request("hellaswag", index=3243)
    assert req["contexts"][0] == (
        "Personal Care and Style: How to become a fashion consultant. Obtain your high school diploma or ged. This "
        "job requires a high school diploma or equivalent, so make sure to apply yourself and finish school. If "
        "your high school offers these classes, take art, design, and sewing to familiarize yourself with "
        "foundational concepts in fashion.")
    assert req["continuations"][0] == (
        "  Many high schools have classes offered for their students who do not have a high school diploma, so be "
        "sure to register to take these classes and find a job in your field.. Search for entry-level positions in "
        "fashion industries.")
    assert req["continuations"][3] == ("  Earn a bachelor's degree in a fashion-related field. Degrees for the "
                                       "fashion industry include art, fashion merchandising, and marketing.")
    assert req["gold"] == 3


def test_fewshot_layout():
    rows = shared_rows("arc_easy", 2)
    task = task_spec.load_task("arc_easy")
    req = task_spec.requests(task, rows[1:], 0, shots=[0], pool=rows[:1])
    # a shot: its context, the delimiter, its gold answer, "\n\n"; then the row's own context
    shot = "Question: Which technology was developed most recently?\nAnswer: cellular telephone\n\n"
    assert req["contexts"][0] == shot + f"Question: {rows[1]['question']}\nAnswer:"
    # draws: tests/unit/test_eval_fewshot.py


# ---- against lm-eval's own task functions (skipped without lm_eval)


def lm_eval_task(name, rows):
    """lm-eval's task of that name over `rows` (its dataset replaced by them: nothing downloaded)."""
    import datasets
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(os.path.join(os.path.dirname(lm_eval.__file__), "tasks", LM_EVAL_YAML[name]))
    config = {k: v for k, v in config.items() if k not in ("tag", "include")}

    class Offline(ConfigurableTask):
        def download(self, *args, **kwargs):
            ds = datasets.Dataset.from_list(rows)
            self.dataset = {"train": ds, "validation": ds, "test": ds}

    return Offline(config=config)


def lm_eval_requests(task, doc):
    """(the (context, continuation) pairs lm-eval scores, its gold index) for one processed doc."""
    ctx = task.fewshot_context(doc, 0)
    out = task.construct_requests(doc, ctx, metadata=(task.config.task, 0, 1))
    args = [r.arguments for r in (out if isinstance(out, list) else [out])]
    if task.OUTPUT_TYPE == "loglikelihood":
        return args, 0
    gold = task.doc_to_text(doc) if task.multiple_input else task.doc_to_target(doc)
    return args, task.doc_to_choice(doc).index(gold) if isinstance(gold, str) else gold


@pytest.mark.parametrize("name", BUILT_IN)
def test_same_requests_as_lm_eval(name):
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm_eval is not installed (pip install lm_eval)")
    rows = LAMBADA_ROWS if name == "lambada" else shared_rows(name, 60)
    # lm-eval reads super_glue's BoolQ, whose label (0/1) is google/boolq's answer (false/true)
    theirs_rows = [{**r, "label": int(r["answer"])} for r in rows] if name == "boolq" else rows
    task = lm_eval_task(name, theirs_rows)
    docs = list(task.test_docs() if name == "lambada" else task.validation_docs())
    ours = task_spec.load_task(name)
    for i, doc in enumerate(docs):
        theirs, gold = lm_eval_requests(task, doc)
        req = task_spec.requests(ours, rows, i)
        assert [tuple(p) for p in theirs] == pairs(req), (name, i)
        assert req["gold"] == gold, (name, i)


def test_trailing_context_space_moves_to_the_continuation():
    assert move_spaces("Answer: ", "yes") == ("Answer:", " yes")
    assert move_spaces("Answer:", " yes") == ("Answer:", " yes")


def test_each_task_names_the_lm_eval_task_it_renders_as():
    """Each built-in file's LM_EVAL (what bench/bench_evals.py times it against) is lm-eval's task of that name."""
    for name in BUILT_IN:
        task = task_spec.load_task(name)
        assert task.LM_EVAL == LM_EVAL_YAML[name], name
        # our boolq rows are google/boolq's (answer: true/false), lm-eval's super_glue's (label: 1/0)
        assert task.LM_EVAL_OVERRIDES == ({"doc_to_target": "{{1 if answer else 0}}"} if name == "boolq" else None)
