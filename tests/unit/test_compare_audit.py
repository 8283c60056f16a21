"""Audit of gptlab.compare: the --alpha of the seed-group lines, a --baseline that has not finished, and HellaSwag
answers pooled over seed groups scored on other examples. Expectations worked out by hand (closed-form t p-values)."""
import math

from gptlab import compare as cmp
from gptlab.compare.tables import comparison_lines
from helpers.run_folders import cells_by_run, finished_results, make_run, metrics_rows, t_p, variant


def _group(root, name, seed_values, hellaswag_n=10042, **changes):
    for i, (seed, bpb) in enumerate(seed_values):
        config = variant(model_name=name, seed=seed, **changes)
        results = finished_results(config, bpb, 0.3)
        results["hellaswag"]["n"] = hellaswag_n
        make_run(root, f"2026010{i + 1}_0{len(name)}0000_{name}", config, metrics_rows(10, bpb, 0.3), results)


def test_the_seed_group_lines_follow_alpha(tmp_path):
    """Base [1.300, 1.310, 1.305] vs Idea [1.285, 1.295, 1.290]: both variances 2.5e-5, so Welch's df = 4 and
    t = 0.015 / sqrt(2 x 2.5e-5 / 3) = 3.674, p = 0.021 (closed form): "(lower)" at --alpha 0.05, "(not
    distinguishable)" at --alpha 0.01, as the table's cells say. Base is the baseline (the docs' name for it),
    not the better Idea."""
    root = str(tmp_path)
    _group(root, "Base", list(zip((0, 1, 2), [1.300, 1.310, 1.305])))
    _group(root, "Idea", list(zip((0, 1, 2), [1.285, 1.295, 1.290])), model_dim=192)
    p = t_p(0.015 / math.sqrt(2 * 2.5e-5 / 3), 4)
    assert 0.01 < p < 0.05
    for alpha, word in ((0.05, "lower"), (0.01, "not distinguishable")):
        board = cmp.compare([], experiments_dir=root, no_plot=True, write=False, alpha=alpha)["board"]
        (line,) = comparison_lines(board)
        assert line.startswith("Idea (1.2900 ± 0.0050, n=3) vs Base (1.3050 ± 0.0050, n=3): val bpb -0.0150")
        assert f"p = {p:.2g} ({word})" in line, (alpha, line)


def test_a_baseline_that_has_not_finished_gets_no_verdict(tmp_path):
    """--baseline a crashed run (no results.json, files 2 h old; its last val bpb 1.5): the finished runs are
    1.300 - 1.5 = -0.2000 from it, but that is not its final figure, so no 'better, p = ...' and no cost per bpb."""
    root = str(tmp_path)
    _group(root, "Base", list(zip((0, 1, 2), [1.300, 1.310, 1.305])))
    make_run(root, "20260104_080000_Crashy", variant(model_name="Crashy", num_layers=6),
             metrics_rows(10, 1.5, 0.3), age_s=7200)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False, baseline="Crashy")["board"]
    assert board.reference.status == "crashed"
    row = cells_by_run(board)["20260101_040000_Base"]
    assert row["bpb vs baseline"] == "-0.2000 (reference not final)"
    assert row["HellaSwag vs baseline"] == "+0.0000 (reference not final)"
    assert row["Cost per 0.01 bpb vs baseline"] == cmp.MISSING


def test_seed_groups_scored_on_other_hellaswag_examples_are_not_pooled_against_each_other(tmp_path):
    """Base scored on the first 1000 examples, Idea on all 10042: 3,000 answers against 30,126 are answers to other
    questions, so the seed-group line gives no HellaSwag test (the per-run cells already say 'not compared')."""
    root = str(tmp_path)
    _group(root, "Base", list(zip((0, 1, 2), [1.300, 1.310, 1.305])), hellaswag_n=1000)
    _group(root, "Idea", list(zip((0, 1, 2), [1.285, 1.295, 1.290])), model_dim=192)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False)["board"]
    (comparison,) = board.comparisons
    assert comparison.hellaswag is None and comparison.hs_answers is None
    assert "HellaSwag" not in comparison_lines(board)[0]


def test_a_sweep_over_a_switch_gives_commands_train_gpt_accepts(tmp_path, capsys):
    """--grid fp8_head=true,false: --fp8_head takes no value (argparse's BooleanOptionalAction), so each run's
    command must say --fp8_head / --no-fp8_head; train_gpt.py's own parser is the judge. A switch without an off form
    (--save_model) or a value other than true/false is one clear error."""
    import shlex
    import sys

    import pytest

    from conftest import REPO
    from gptlab.core.errors import UserError
    sys.path.insert(0, REPO)
    import sweep as sweep_cli
    from train_gpt import build_parser

    sweep_cli.main(["--name", "F", "--grid", "fp8_head=true,false", "--grid", "lr_scale=2",
                    "--experiments_dir", str(tmp_path / "e"), "--dry_run", "--", "--preset", "quickstart"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    parsed = [build_parser().parse_args(shlex.split(line)[line.split().index("--preset"):]) for line in lines]
    assert [(a.fp8_head, a.lr_scale, a.model_name) for a in parsed] == [
        (True, 2.0, "F_fp8_headtrue_lr_scale2"), (False, 2.0, "F_fp8_headfalse_lr_scale2")]
    for grid, message in (("save_model=true,false", "--save_model is a switch with no off form"),
                          ("compile=on,off", "its values are true and false")):
        with pytest.raises(UserError, match=message):
            sweep_cli.main(["--experiments_dir", str(tmp_path), "--dry_run", "--grid", grid])


def test_too_few_different_flops_for_a_scaling_fit_says_how_many(tmp_path):
    """Five finished runs at two training FLOPs (1e15 x 3 seeds, 2e15 x 2): five usable runs, but a fit needs four
    different FLOPs; the error counts both, so it does not read 'needs 4, 5 here'."""
    import pytest

    from gptlab.core.errors import UserError
    root = str(tmp_path)
    for i, (flops, seed) in enumerate([(1e15, 0), (1e15, 1), (1e15, 2), (2e15, 0), (2e15, 1)]):
        config = variant(model_name=f"S{flops:.0e}", seed=seed, num_layers=int(flops / 1e15))
        make_run(root, f"2026010{i + 1}_000000_S", config, metrics_rows(10, 1.3 - 0.01 * i, 0.3),
                 finished_results(config, 1.3 - 0.01 * i, 0.3, train_flops=flops))
    with pytest.raises(UserError, match=r"needs at least 4 finished runs with different training FLOPs; 5 usable "
                                        r"run\(s\) here, at 2 different FLOPs"):
        cmp.compare([], experiments_dir=root, no_plot=True, scaling=True)


def test_the_leaderboard_shows_a_judged_win_rate_where_judge_py_left_one(tmp_path):
    """A judge.py summary in Idea's judge/ folder (baseline: Base's checkpoint, as judge.py records it): Idea's cell
    reads its win rate, interval and the baseline's run; Base, judged by nobody, shows the missing mark; a
    damaged summary is named in the run's notes and left out."""
    import json
    import os

    root = str(tmp_path)
    _group(root, "Base", [(0, 1.300)])
    _group(root, "Idea", [(0, 1.290)], model_dim=192)
    base, idea = os.path.join(root, "20260101_040000_Base"), os.path.join(root, "20260101_040000_Idea")
    folder = os.path.join(idea, "judge", "20260101_040000_Base__judge-model")
    os.makedirs(folder)
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump({"baseline": os.path.join(base, "checkpoints", "step_000010.pt"), "win_rate": 0.625,
                   "ci95": [0.51, 0.735], "n": 40}, f)
    damaged = os.path.join(base, "judge", "x__y")
    os.makedirs(damaged)
    with open(os.path.join(damaged, "summary.json"), "w") as f:
        f.write("{not json")
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False, baseline="Base")["board"]
    cells = cells_by_run(board)
    header = "Judged win ±95% CI vs"
    assert cells["20260101_040000_Idea"][header] == "62.5% [51.0, 73.5] vs 20260101_040000_Base"
    assert cells["20260101_040000_Base"][header] == cmp.MISSING
    base_run = next(r for r in board.runs if r.name == "20260101_040000_Base")
    assert base_run.judged == [] and any("judge/x__y/summary.json" in n for n in base_run.notes)
