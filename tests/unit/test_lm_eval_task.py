"""The local lm-eval task the quickstart's closing line names (gptlab/evals/lm_eval_task): its YAML reads the file
the quickstart writes, and its preprocessing gives lm-eval's HellaSwag texts, worked out by hand from lm-eval's
rules (and, where lm-eval is installed, checked against its own hellaswag utils). The printed line itself runs in
tests/e2e/test_quickstart.py."""
import gzip
import itertools
import json
import os

import pytest
import yaml

from conftest import REPO, SAMPLE_DATA
from gptlab.dataset.hellaswag_file import DEFAULT_PATH
from gptlab.evals.lm_eval_task import utils

TASK_DIR = os.path.join(REPO, "gptlab", "evals", "lm_eval_task")


def _sample_rows(start, stop):
    with gzip.open(os.path.join(SAMPLE_DATA, "hellaswag_val.jsonl.gz"), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in itertools.islice(f, start, stop)]


def _load_task_yaml():
    class Loader(yaml.SafeLoader):  # lm-eval's `!function module.name` tag, kept as its text
        pass

    Loader.add_constructor("!function", lambda loader, node: ("!function", loader.construct_scalar(node)))
    with open(os.path.join(TASK_DIR, "hellaswag_local.yaml")) as f:
        return yaml.load(f, Loader=Loader)


def test_the_task_reads_the_quickstart_s_hellaswag_file_and_names_what_utils_makes():
    task = _load_task_yaml()
    assert task["task"] == "hellaswag_local" and task["output_type"] == "multiple_choice"
    assert task["dataset_path"] == "json"
    # the quickstart's step 3 writes download_hellaswag.py's default output; lm_eval runs from the repository root
    assert task["dataset_kwargs"]["data_files"][task["validation_split"]] == DEFAULT_PATH.replace(os.sep, "/")
    assert task["process_docs"] == ("!function", "utils.process_docs") and callable(utils.process_docs)
    made = utils.process_doc(_sample_rows(0, 1)[0])
    assert task["doc_to_text"] == "{{query}}" and task["doc_to_target"] == "{{gold}}"
    assert task["doc_to_choice"] == "choices" and {"query", "gold", task["doc_to_choice"]} <= set(made)
    assert [m["metric"] for m in task["metric_list"]] == ["acc", "acc_norm"]


def test_an_activitynet_row_gets_its_label_and_a_capitalised_ctx_b():
    row = _sample_rows(0, 1)[0]  # the first row: ActivityNet, no WikiHow markup
    assert utils.process_doc(row) == {
        "query": "Roof shingle removal: A man is sitting on a roof. He",
        "choices": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                    "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
        "gold": 3}
    # str.capitalize lower-cases the rest of ctx_b as well
    assert utils.process_doc(dict(row, ctx_b="THE man"))["query"] == "Roof shingle removal: A man is sitting on a " \
                                                                     "roof. The man"
    assert utils.process_doc(dict(row, label="2"))["gold"] == 2  # the Hub's copy holds the label as a string


def test_a_wikihow_row_loses_its_markup_as_lm_eval_removes_it():
    row = _sample_rows(3243, 3244)[0]  # "How to become a fashion consultant": [header], [title], [step], [substeps]
    assert row["ctx_b"] == "" and row["activity_label"] == "Personal Care and Style"
    doc = utils.process_doc(row)
    # ctx_a + " " + "" is stripped; " [title]" -> ". "; [header] and [step] go; the double spaces left become one
    assert doc["query"] == (
        "Personal Care and Style: How to become a fashion consultant. Obtain your high school diploma or ged. This "
        "job requires a high school diploma or equivalent, so make sure to apply yourself and finish school. If your "
        "high school offers these classes, take art, design, and sewing to familiarize yourself with foundational "
        "concepts in fashion.")
    # the ending is stripped before the markup goes, so the space after "[substeps]" stays; "field." + ". " -> ".."
    assert doc["choices"][0] == (
        " Many high schools have classes offered for their students who do not have a high school diploma, so be sure "
        "to register to take these classes and find a job in your field.. Search for entry-level positions in "
        "fashion industries.")
    assert doc["gold"] == 3


def test_one_pass_of_double_spaces_as_lm_eval_does():
    assert utils.preprocess("a [x]  b") == "a  b"  # "a   b" after the bracket: one replace pass leaves two
    assert utils.preprocess("  [step] one [a] [b] two ") == " one  two"  # stripped first: " one   two" -> two left
    assert utils.preprocess("x [open\nclose] y") == "x [open\nclose] y"  # a bracket pair does not span lines


def test_the_same_texts_as_lm_eval_s_own_hellaswag_task():
    """Where lm-eval is installed: its hellaswag utils (the reference) on the first 40 rows (the quickstart test's
    HellaSwag limit) and 200 WikiHow rows."""
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (not in requirements.txt)")
    reference = pytest.importorskip("lm_eval.tasks.hellaswag.utils")
    rows = _sample_rows(0, 40) + _sample_rows(3200, 3400)
    for row in rows:
        mine = utils.process_doc(row)
        assert mine["query"] == reference.preprocess(row["activity_label"] + ": " + row["ctx_a"] + " "
                                                     + row["ctx_b"].capitalize())
        assert mine["choices"] == [reference.preprocess(e) for e in row["endings"]]
        assert mine["gold"] == int(row["label"])
    assert sum("[" in e for row in rows for e in row["endings"]) > 100  # the markup rules were exercised
