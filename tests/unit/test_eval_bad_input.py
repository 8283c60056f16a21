"""Bad input to evaluate.py, download_evals.py and download_hellaswag.py that once passed or crashed: each is one
UserError naming the problem and the fix (docs/faults.md, "Evaluations"). The files and task specs are written here
by hand; the subprocess side (one error line, nothing written) is in tests/e2e/test_evaluate_e2e.py."""
import json
import os

import pytest

import download_evals
import download_hellaswag
import evaluate
from helpers.eval_tasks import COLORS_TASK, shared_rows, write_rows
from gptlab.core.errors import UserError
from gptlab.evals import suite, task_spec

COLORS = COLORS_TASK + 'TARGET_DELIMITER = ""\n'  # no delimiter: an empty choice is scored as nothing


def refused(fn, *words):
    with pytest.raises(UserError) as err:
        fn()
    for word in words:
        assert word in str(err.value), str(err.value)
    return str(err.value)


def user_task(folder, source=COLORS):
    folder.mkdir(exist_ok=True)
    (folder / "colors.py").write_text(source)
    return task_spec.load_task("colors", str(folder))


def test_a_task_named_twice_in_tasks_is_refused():
    refused(lambda: task_spec.resolve_tasks("copa,piqa,copa"), "--tasks names copa more than once")
    refused(lambda: task_spec.resolve_tasks("core, core"), "core more than once")
    assert [t.NAME for t in task_spec.resolve_tasks("copa,piqa")] == ["copa", "piqa"]


def test_the_built_in_folder_as_tasks_dir_is_named_not_every_task_defined_twice():
    refused(lambda: task_spec.resolve_tasks("copa", task_spec.TASKS_DIR), "is the built-in tasks' folder")
    refused(lambda: task_spec.resolve_tasks("copa", os.path.relpath(task_spec.TASKS_DIR) + "/"), "built-in")


def test_a_row_whose_columns_differ_from_the_others_is_refused_by_line(tmp_path):
    rows = shared_rows("copa", 4)  # every row of the download has the same columns (premise ... idx, label)
    copa = task_spec.load_task("copa")
    for k, row in [("extra", dict(rows[2], note="x")), ("missing", {c: v for c, v in rows[2].items() if c != "idx"})]:
        write_rows(tmp_path / k, "copa", rows[:2] + [row] + rows[3:])
        refused(lambda: task_spec.load_rows(copa, str(tmp_path / k)), "copa.jsonl line 3: its columns differ from "
                f"line 1's ({k} ", f"--data_dir {tmp_path / k} --overwrite")
    write_rows(tmp_path / "same", "copa", rows)
    assert task_spec.load_rows(copa, str(tmp_path / "same")) == rows


LINES = {  # JSON Python's parser raises on with other errors than JSONDecodeError
    "long int": ('{"premise": "a.", "choice1": "b", "choice2": "c", "question": "cause", "label": ' + "9" * 5000 + "}",
                 "4300 digits"),  # ValueError: an int this long is refused (sys.set_int_max_str_digits)
    "deep": ("[" * 100_000 + "]" * 100_000, "nested too deep"),  # RecursionError
}


@pytest.mark.parametrize("kind", sorted(LINES))
def test_json_that_python_cannot_parse_is_one_error_naming_the_line(tmp_path, kind):
    line, words = LINES[kind]
    (tmp_path / "copa.jsonl").write_text(line + "\n")
    refused(lambda: task_spec.load_rows(task_spec.load_task("copa"), str(tmp_path)), "copa.jsonl line 1: not valid "
            "JSON", words, f"python download_evals.py --tasks copa --data_dir {tmp_path} --overwrite")


def test_the_download_command_named_finds_the_task_and_the_folder_again(tmp_path):
    task = user_task(tmp_path / "mine")
    data = tmp_path / "data"
    line = refused(lambda: task_spec.load_rows(task, str(data)))
    assert line.endswith(f"download it: python download_evals.py --tasks colors --tasks_dir {tmp_path / 'mine'} "
                         f"--data_dir {data}")
    write_rows(data, "colors", [{"thing": 1, "options": ["a"], "answer": 0}])
    refused(lambda: task_spec.load_rows(task, str(data)), "column 'thing' must be str, got int; re-download it: python "
            f"download_evals.py --tasks colors --tasks_dir {tmp_path / 'mine'} --data_dir {data} --overwrite")
    # a built-in task in the default folder: the plain command, as the README gives it
    assert task_spec.download_command(task_spec.load_task("copa"), os.path.join("data", "evals"), overwrite=True) == \
        "python download_evals.py --tasks copa --overwrite"


def test_a_spec_that_calls_sys_exit_is_the_specs_error(tmp_path):
    folder = tmp_path / "exits"
    folder.mkdir()
    (folder / "colors.py").write_text("import sys\nsys.exit(3)\n" + COLORS)
    refused(lambda: task_spec.load_task("colors", str(folder)), "colors.py does not load (SystemExit: 3)")
    task = user_task(tmp_path / "renders", COLORS.replace("def render(row):\n", "def render(row):\n    raise "
                                                          "SystemExit(5)\n"))
    refused(lambda: task_spec.render(task, {}, "colors row 1"), "render failed on this row (SystemExit: 5)")


def test_a_choice_with_no_text_is_refused_not_scored(tmp_path):
    # an empty continuation has log-probability 0 and wins every time; the delimiter alone wins almost as often
    task = user_task(tmp_path / "mine")
    write_rows(tmp_path / "data", "colors", [{"thing": "grass", "options": ["green", "red"], "answer": 0},
                                             {"thing": "snow", "options": ["white", ""], "answer": 0}])
    refused(lambda: suite.task_requests(task, data_dir=str(tmp_path / "data")),
            "colors row 2: choice 2 of 2 is '', with no text to score", "--data_dir")
    assert len(suite.task_requests(task, limit=1, data_dir=str(tmp_path / "data"))[1]) == 1  # row 1 is fine
    arc = shared_rows("arc_easy", 1)[0]
    arc["choices"]["text"][1] = " \n"
    write_rows(tmp_path / "arc", "arc_easy", [arc])
    refused(lambda: suite.task_requests(task_spec.load_task("arc_easy"), data_dir=str(tmp_path / "arc")),
            "arc_easy row 1: choice 2 of 4 is ' \\n'")


@pytest.mark.parametrize("parse, argv, words", [
    (evaluate.build_parser().parse_args, ["ckpt.pt", "--out", ""], "--out must not be empty"),
    (evaluate.build_parser().parse_args, ["ckpt.pt", "--data_dir", ""], "--data_dir must not be empty"),
    (evaluate.build_parser().parse_args, ["ckpt.pt", "--tasks_dir", ""], "--tasks_dir must not be empty"),
    (evaluate.build_parser().parse_args, [""], "CHECKPOINT_OR_RUN must not be empty"),
    (download_evals.build_parser().parse_args, ["--data_dir", ""], "--data_dir must not be empty"),
    (download_evals.build_parser().parse_args, ["--tasks_dir", ""], "--tasks_dir must not be empty"),
    (download_hellaswag.parse_args, ["--hub_repo", "a/b/c"], "--hub_repo 'a/b/c' is not a Hub repository id"),
    (download_hellaswag.parse_args, ["--hub_repo", ""], "--hub_repo '' is not a Hub repository id"),
    (download_hellaswag.parse_args, ["--revision", ""], "--revision must not be empty"),
], ids=lambda value: None if callable(value) else str(value)[:40])
def test_empty_paths_and_bad_hub_ids_are_refused_naming_the_flag(parse, argv, words):
    # '' meant the default folder (--out, --tasks_dir) or the current one (--data_dir); a bad id crashed in
    # huggingface_hub's validate_repo_id
    refused(lambda: parse(argv), words)


def test_hub_ids_that_huggingface_hub_takes_are_taken():
    for repo in ["Rowan/hellaswag", "gpt2", "org_/na.me-1", "_a/b", "a" * 10 + "/" + "b" * 90]:
        assert download_hellaswag.parse_args(["--hub_repo", repo]).hub_repo == repo


def test_hub_ids_are_judged_as_huggingface_hub_judges_them():
    """The reference: huggingface_hub's own validate_repo_id (its name part at most 96 characters), on ids near each
    of its rules."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from gptlab.core.cli import FlagValueError, hub_repo
    for repo in ["a" * 96, "a" * 97, "o/" + "n" * 96, "o/" + "n" * 97, "o" * 90 + "/" + "n" * 90, "a--b", "a..b",
                 "-a", "a-", "a.", "o/n/x", "a b", "ok.name_1"]:
        try:
            validate_repo_id(repo)
            theirs = True
        except HFValidationError:
            theirs = False
        try:
            ours = hub_repo(repo) == repo
        except FlagValueError:
            ours = False
        assert ours == theirs, repo


def test_a_pt_file_that_is_not_a_gptlab_checkpoint_says_what_to_pass(tmp_path):
    import torch

    from gptlab.checkpoint.format import read_file

    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    refused(lambda: read_file(str(tmp_path / "other.pt")), "is not a gptlab checkpoint",
            "train_gpt.py --save_model")



def test_text_the_tokenizer_cannot_encode_is_shown_where_it_is_even_in_a_few_shot_row(tmp_path):
    # the error names the scored row, whose context holds its shots: the text around the character finds it
    from helpers.tiny_data import save_tiny_tokenizer
    from gptlab.tokenizer.format import open_tokenizer

    encoding = open_tokenizer(save_tiny_tokenizer(str(tmp_path / "tok.pkl"), ["a few words of text"], 10)).encoding
    copa = task_spec.load_task("copa")
    rows = shared_rows("copa", 2)
    write_rows(tmp_path, "copa", rows[:1])
    shot = dict(rows[1], premise="The lamp flickered \ud800 all night.")  # valid JSON, no UTF-8 for it
    (tmp_path / "copa.fewshot.jsonl").write_text((json.dumps(shot) + "\n") * 2)  # whichever is drawn: this one
    requests = suite.task_requests(copa, fewshot=1, data_dir=str(tmp_path))[1]
    assert "\ud800" not in json.dumps(rows[0]) and "\ud800" in requests[0]["contexts"][0]
    refused(lambda: suite.encode_requests(encoding, [copa], {"copa": requests}), "cannot encode copa row 1",
            "'The lamp flickered \\ud800 all night")
