"""compare_experiments.py on crafted, damaged and unusual run folders, and on numeric flags out of range (issue 24,
items 5, 16, 19): a damaged run is left out with a line naming it and the field while the others still compare;
reads are bounded; every division and log survives ties, zeros and negatives; bad flags are one error line."""
import json
import math
import os
import sys

import pytest

from conftest import REPO, run_script
from gptlab import compare as cmp
from gptlab.compare import tables
from gptlab.core.errors import UserError
from gptlab.train.records import CONFIG_FILE, METRICS_FILE, RESULTS_FILE
from helpers.run_folders import BASE_CODE, cells_by_run, finished_results, make_run, metrics_rows, variant

sys.path.insert(0, REPO)
import compare_experiments  # noqa: E402


def _lab(root, runs=(("A", 1.30), ("B", 1.20), ("C", 1.25))):
    paths = {}
    for i, (name, bpb) in enumerate(runs):
        config = variant(model_name=name, num_layers=i + 2)
        paths[name] = make_run(str(root), f"2026010{i + 1}_000000_{name}", config, metrics_rows(10, bpb, 0.3),
                               finished_results(config, bpb, 0.3), code=BASE_CODE)
    return paths


def _edit_results(path, **changes):
    file = os.path.join(path, RESULTS_FILE)
    with open(file) as f:
        results = json.load(f)
    results.update(changes)
    with open(file, "w") as f:
        json.dump(results, f)


def _board(root, **kwargs):
    return cmp.compare([], experiments_dir=str(root), no_plot=True, write=False, **kwargs)["board"]


@pytest.mark.parametrize("changes, field", [
    ({"gpu_name": {"x": 1}}, "'gpu_name' must be text"),
    ({"model_name": ["a"]}, "'model_name' must be text"),
    ({"hellaswag": {"acc_norm": 2, "n": 10042}}, "'hellaswag.acc_norm' must be between 0 and 1"),
    ({"hellaswag": {"acc_norm": 0.3, "n": -5}}, "'hellaswag.n' must be between 0 and"),
    ({"hellaswag": [1, 2]}, "'hellaswag' must be an object"),
    ({"train_flops": -1e15}, "'train_flops' must be 0 or more"),
    ({"final_val_bpb": -3}, "'final_val_bpb' must be 0 or more"),
    ({"n_params": {"a": 1}}, "'n_params' must be a number"),
    ({"world_size": 1e300}, "'world_size' must be an integer, got 1e+300"),
])
def test_a_crafted_field_skips_that_run_and_names_it(tmp_path, changes, field):
    paths = _lab(tmp_path)
    _edit_results(paths["C"], **changes)
    board = _board(tmp_path)
    assert [r.model_name for r in board.runs] == ["B", "A"]
    skipped = [n for n in board.notes if n.startswith("skipped")]
    assert len(skipped) == 1 and paths["C"] in skipped[0] and field in skipped[0], skipped
    text = cmp.render_text(board)
    assert field in text and "20260101_000000_A" in text


def _edit_json(path, filename, **changes):
    file = os.path.join(path, filename)
    with open(file) as f:
        data = json.load(f)
    data.update(changes)
    with open(file, "w") as f:
        json.dump(data, f)  # nan and inf as JSON's NaN / Infinity, as Python writes them


@pytest.mark.parametrize("filename, changes, field", [
    (RESULTS_FILE, {"seed": -5}, "field 'seed' must be between 0 and 9223372036854775807, got -5"),
    (RESULTS_FILE, {"seed": 2**63}, "field 'seed' must be between 0 and 9223372036854775807, got 9223372036854775808"),
    (CONFIG_FILE, {"seed": "3"}, "field 'seed' must be an integer, got text"),
    (RESULTS_FILE, {"seed": 1.5}, "field 'seed' must be an integer, got 1.5"),
    (RESULTS_FILE, {"seed": True}, "field 'seed' must be an integer, got true/false"),
    (RESULTS_FILE, {"world_size": 0}, "field 'world_size' must be between 1 and 10000000, got 0"),
    (CONFIG_FILE, {"world_size": 2.5}, "field 'world_size' must be an integer, got 2.5"),
    (CONFIG_FILE, {"gpu_count": -1}, "field 'gpu_count' must be between 0 and 10000000, got -1"),
    (RESULTS_FILE, {"steps": -3}, "field 'steps' must be 0 or more, got -3"),
    (CONFIG_FILE, {"train_steps": 0}, "field 'train_steps' must be 1 or more, got 0"),
    (RESULTS_FILE, {"hellaswag": {"acc_norm": 0.3, "n": 10.5}}, "field 'hellaswag.n' must be an integer, got 10.5"),
    (RESULTS_FILE, {"wall_time_s": math.inf}, "field 'wall_time_s' must be a finite number, got inf"),
    (RESULTS_FILE, {"n_params": math.nan}, "field 'n_params' must be a finite number, got nan"),
    (RESULTS_FILE, {"gpu_hours": -math.inf}, "field 'gpu_hours' must be a finite number, got -inf"),
    (RESULTS_FILE, {"seed": 7}, "field 'seed' is 7 but config.json says 1"),
])
def test_an_impossible_record_is_skipped_naming_the_run_and_the_field(tmp_path, filename, changes, field):
    """Issue 37, item 12 (docs/faults.md): a seed, a count or a figure no run can have is one note naming the run
    and the field, and the run is left out."""
    paths = _lab(tmp_path)
    _edit_json(paths["C"], filename, **changes)
    board = _board(tmp_path)
    assert [r.model_name for r in board.runs] == ["B", "A"]
    skipped = [n for n in board.notes if n.startswith("skipped")]
    assert skipped == [f"skipped {paths['C']}: {filename} {field}"], skipped


def test_an_impossible_record_is_never_counted_in_its_seed_group(tmp_path):
    """Issue 37, item 12: a fourth run of a three-seed group whose results.json says seed -5 and world_size 0 was
    counted as a fourth seed; it is left out, with a note naming it and both fields."""
    paths = []
    for i, (seed, bpb) in enumerate([(1, 1.300), (2, 1.304), (3, 1.296), (4, 1.100)]):
        config = variant(seed=seed, start_time=f"2026-01-01T10:0{i}:00")
        paths.append(make_run(str(tmp_path), f"2026010{i + 1}_000000_Base", config, metrics_rows(10, bpb, 0.3),
                              finished_results(config, bpb, 0.3)))
    _edit_json(paths[3], RESULTS_FILE, seed=-5, world_size=0)
    board = _board(tmp_path)
    groups = cmp.seed_groups(board.runs)
    assert len(groups) == 1 and sorted(r.seed for r in groups[0].runs) == [1, 2, 3]
    assert groups[0].stats("val_bpb")[2] == 3
    skipped = [n for n in board.notes if n.startswith("skipped")]
    assert len(skipped) == 1 and paths[3] in skipped[0], skipped
    assert "'seed' must be between 0 and" in skipped[0] and "'world_size' must be between 1 and" in skipped[0]


def test_deeply_nested_json_and_huge_numbers_are_read_safely(tmp_path):
    paths = _lab(tmp_path)
    with open(os.path.join(paths["C"], RESULTS_FILE), "w") as f:
        f.write("[" * 100_000 + "]" * 100_000)  # RecursionError in json
    with open(os.path.join(paths["A"], "config.json"), "w") as f:
        json.dump({"model_name": "A", "deep": json.loads("[" * 200 + "]" * 200)}, f)  # deeper than it is read
    _edit_results(paths["B"], tokens=10 ** 400)  # an integer beyond a float: not recorded
    board = _board(tmp_path)
    notes = "\n".join(board.notes)
    assert "results.json is unreadable (RecursionError" in notes and "config.json nests deeper than 32" in notes
    assert len(board.runs) == 3


def test_a_huge_csv_field_and_special_files_are_not_fatal(tmp_path):
    paths = _lab(tmp_path)
    with open(os.path.join(paths["C"], METRICS_FILE), "a") as f:
        f.write('1,"' + "x" * (140 << 10) + '"\n')  # over the csv module's field limit
    os.remove(os.path.join(paths["A"], METRICS_FILE))
    os.symlink("/dev/zero", os.path.join(paths["A"], METRICS_FILE))
    board = _board(tmp_path)
    notes = "\n".join(board.notes)
    assert "metrics.csv is unreadable (Error: field larger than field limit" in notes
    assert "metrics.csv is not a regular file" in notes
    assert {r.model_name for r in board.runs} == {"A", "B", "C"}  # their results.json still count


def test_measured_figures_out_of_range_in_metrics_skip_the_run(tmp_path):
    config = variant(model_name="Odd")
    rows = metrics_rows(10, 1.3, 0.3)
    rows[-1]["hellaswag_acc_norm"] = 2.0
    make_run(str(tmp_path), "20260101_000000_Odd", config, rows, {"status": "finished", "hellaswag": {"n": 100}})
    _lab(tmp_path / "x")
    with pytest.raises(UserError, match="metrics.csv column 'hellaswag_acc_norm' must be between 0 and 1"):
        _board(tmp_path)  # the only run: nothing to compare is one error


def test_a_tie_at_a_lower_cost_does_not_crash_the_leaderboard(tmp_path):
    paths = _lab(tmp_path, (("A", 1.20), ("B", 1.20)))
    _edit_results(paths["B"], wall_time_s=10.0)  # same val bpb as the reference, half the cost
    cells = cells_by_run(_board(tmp_path, baseline=os.path.basename(paths["A"])))
    assert cells[os.path.basename(paths["B"])]["Cost per 0.01 bpb vs baseline"] == "same bpb, cheaper"


def test_a_newline_or_bar_in_a_model_name_stays_in_its_row(tmp_path):
    paths = _lab(tmp_path)
    _edit_results(paths["C"], model_name="two\nlines | and a bar")
    result = cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, write=True)
    text = cmp.render_text(result["board"])
    assert "two\\nlines | and a bar" in text
    rows = [line for line in text.splitlines() if line[:1].isdigit()]
    assert len(rows) == 3
    with open(result["written"][0]) as f:
        markdown = f.read()
    table = [line for line in markdown.splitlines() if line.startswith("| ") and "_C" in line]
    assert len(table) == 1 and "two\\nlines \\| and a bar" in table[0]
    assert table[0].count(" | ") == markdown.splitlines()[4].count(" | ")  # as many cells as the header


def test_diff_never_reads_special_files_in_code(tmp_path):
    paths = _lab(tmp_path)
    os.symlink("/dev/zero", os.path.join(paths["B"], "code", "zero.py"))
    text = cmp.diff_runs(paths["A"], paths["B"])
    assert "cannot compare code: not reading code/" in text and "code/zero.py is not a regular file" in text
    with open(os.path.join(paths["A"], "config.json"), "w") as f:
        f.write("[" * 100_000 + "]" * 100_000)
    assert "config.json is unreadable (RecursionError" in cmp.diff_runs(paths["A"], paths["C"])


def test_scaling_refuses_budgets_it_cannot_speak_for(tmp_path):
    from gptlab.compare import scaling

    for text in ["1e400", "1e400gpuh", "$1e999"]:
        with pytest.raises(UserError, match="beyond a float's range"):
            scaling.parse_budget(text)
    # a law whose irreducible term is negative: far enough out its prediction goes below 0
    for i, flops in enumerate([1e12, 2e12, 4e12, 8e12, 1.6e13]):
        config = variant(model_name=f"S{i}", num_layers=i + 2)
        bpb = -1.0 + 4.0 * (flops / 1e12) ** -0.1
        make_run(str(tmp_path), f"2026010{i + 1}_000000_S{i}", config, metrics_rows(10, bpb, 0.3),
                 dict(finished_results(config, bpb, 0.3), train_flops=flops))
    ok = cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, scaling=True, budget="2e13")["scaling"]
    assert ok.budget[0] == 2e13
    with pytest.raises(UserError, match="refusing to extrapolate L\\(C\\) to 1e\\+20 FLOPs: the fit gives val bpb "
                                        "-.* not a positive number"):
        cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, scaling=True, budget="1e20")
    with pytest.raises(UserError, match="too far from the fitted runs"):
        cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, scaling=True, budget="1e300")
    with pytest.raises(UserError, match="too far from the fitted runs"):
        cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, scaling=True, budget="1e-5")


def test_scaling_leaves_out_runs_without_positive_flops(tmp_path):
    from gptlab.compare.scaling import scaling_points

    run = cmp.Run(path="x", config={}, results={}, metrics=None, status="finished", notes=[], val_bpb=1.0,
                  train_flops=-5.0)
    points, notes = scaling_points([run])
    assert points == [] and "not a positive number" in notes[0]


@pytest.mark.parametrize("flag, value", [("--usd_per_gpu_hour", "nan"), ("--usd_per_gpu_hour", "inf"),
                                         ("--overhead", "nan"), ("--overhead", "-1"), ("--detect_bpb", "0"),
                                         ("--detect_bpb", "nan"), ("--detect_bpb", "1e-300"),
                                         ("--detect_bpb", "-0.01"), ("--alpha", "nan")])
def test_numeric_flags_refuse_nan_inf_and_out_of_range(flag, value):
    with pytest.raises(UserError, match=f"{flag} "):
        compare_experiments.parse_args([flag, value])


def test_runs_needed_is_safe_for_any_difference():
    from gptlab.compare.stats import runs_needed

    assert runs_needed(1e-300, 0.01) is None and runs_needed(0.0, 0.01) is None
    assert runs_needed(float("nan"), 0.01) is None and runs_needed(0.01, 0.001) >= 2


def test_cli_damaged_run_among_good_ones_exits_0(tmp_path):
    paths = _lab(tmp_path)
    _edit_results(paths["C"], gpu_name={"a": 1}, hellaswag={"acc_norm": 2, "n": -1})
    proc = run_script(["compare_experiments.py", "--experiments", str(tmp_path), "--no-write"])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "skipped" in proc.stdout and "gpu_name" in proc.stdout and "20260102_000000_B" in proc.stdout
    proc = run_script(["compare_experiments.py", "--experiments", str(tmp_path), "--no-write", "--baseline",
                       os.path.basename(paths["C"]), os.path.basename(paths["A"])])
    assert proc.returncode == 2 and proc.stderr.startswith("error: --baseline") and "gpu_name" in proc.stderr


def test_markdown_and_text_escape_control_characters():
    assert tables.one_line("a\nb\r\tc\x1b") == "a\\nb\\r\\tc\\x1b"
    assert tables.markdown_table(["h"], [["x|y\nz"]]).splitlines()[2] == "| x\\|y\\nz |"
