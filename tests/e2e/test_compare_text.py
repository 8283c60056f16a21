"""compare_experiments.py's text tables: the columns that fit the terminal (COLUMNS), --wide, --columns."""
import glob
import os
import re

import pytest

from conftest import REPO, run_script
from gptlab import compare as cmp
from gptlab.compare import tables
from helpers.run_folders import finished_results, lab, make_run, metrics_rows, table_order, variant  # noqa: F401 (lab: a fixture)

ALL_HEADERS = [cmp.COLUMNS[c][0] for c in cmp.COLUMNS]
VERSUS_HEADERS = ["Setting bpb ± std", "bpb vs baseline", "HellaSwag vs baseline", "Cost per 0.01 bpb vs baseline"]


def run_compare(root, columns, *args):
    proc = run_script(["compare_experiments.py", "--experiments", root, "--no-plot", *args],
                      env_extra={"COLUMNS": str(columns)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def text_tables(stdout):
    """[(header, width), ...] of each text table, read from its header line and the dash line under it."""
    lines = stdout.splitlines()
    return [[(lines[i - 1][m.start():m.end()].strip(), m.end() - m.start()) for m in re.finditer("-+", line)]
            for i, line in enumerate(lines) if i and re.fullmatch(r"-+( +-+)*", line)]


def test_columns_have_one_priority_each():
    assert sorted(tables.TEXT_PRIORITY) == sorted(tables.COLUMN_IDS) and tables.TEXT_PRIORITY[:2] == ("rank", "run")


@pytest.mark.parametrize("width, key", [(120, ["#", "Run", "Val bpb", "Setting bpb ± std", "bpb vs baseline"]),
                                        (80, ["#", "Run", "Val bpb"])])
def test_the_default_table_fits_the_terminal_and_keeps_the_key_columns(lab, width, key):
    for seed, bpb in ((2, 1.252), (3, 1.248)):  # a second seed group: the "Settings compared" lines too
        config = variant(model_name="BetterIdea", model_dim=192, seed=seed)
        make_run(lab, f"20260102_09000{seed}_BetterIdea", config, metrics_rows(40, bpb, 0.33),
                 finished_results(config, bpb, 0.33))
    out = run_compare(lab, width)
    assert "Settings compared" in out
    # every line fits: the tables, and the notes wrapped to the width (a path is not cut: "wrote PATH", tmp paths)
    assert all(len(line) <= width for line in out.splitlines() if " " in line.strip() and "wrote " not in line)
    board, noise = text_tables(out)
    wide_board, wide_noise = text_tables(run_compare(lab, width, "--wide", "--no-write"))
    shown = [h for h, _ in board]
    # the key columns first: the rank, the run folder (what a command takes), val bpb (its verdict, HellaSwag)
    assert shown[:len(key)] == key
    assert table_order(out) == table_order(run_compare(lab, 400, "--no-write"))  # every row, with its folder
    ids = {header: i for i, header in zip(tables.COLUMN_IDS, ["#"] + ALL_HEADERS + VERSUS_HEADERS)}
    priority = [ids[h] for h in shown]
    assert priority == sorted(priority, key=tables.TEXT_PRIORITY.index)
    same = out[out.index("Same in every row:"):].split("\n\n")[0] if "Same in every row:" in out else ""
    for table, wide in ((board, wide_board), (noise, wide_noise)):
        used = sum(w for _, w in table) + 2 * (len(table) - 1)
        assert used <= width
        left_out = [(h, w) for h, w in wide if h not in dict(table) and f"{h} " not in " ".join(same.split())]
        assert left_out and all(used + 2 + w > width for _, w in left_out)  # none of them would have fitted
        assert dict(table) == {h: w for h, w in wide if h in dict(table)}  # cells whole, not cut
    left = " ".join(out[out.index("Left out to fit"):].split("\n\n")[0].split())
    assert left.startswith(f"Left out to fit {width} characters: ") and "(--wide shows every column)" in left
    assert "date" in left and "Run folders" in out[out.index("Noise"):]
    # LEADERBOARD.md keeps every column
    with open(os.path.join(lab, cmp.LEADERBOARD_FILE)) as f:
        assert "| " + " | ".join(["#"] + ALL_HEADERS + VERSUS_HEADERS) + " |" in f.read().splitlines()


def test_the_committed_baselines_fit_120_columns():
    proc = run_script(["compare_experiments.py", "--no-write", "--no-plot"], env_extra={"COLUMNS": "120"})
    assert proc.returncode == 0, proc.stderr
    assert max(map(len, proc.stdout.splitlines())) <= 120
    runs = [n for n in os.listdir(os.path.join(REPO, "experiments")) if re.match(r"\d{8}_\d{6}_", n)]
    assert sorted(table_order(proc.stdout)) == sorted(runs) and runs
    # one seed group (the modded baselines) shares tokens, parameters, status, setting mean: named once, not
    # given columns, so HellaSwag fits (issue 39: at 120 it was dropped while three identical columns stayed)
    modded = sorted(glob.glob(os.path.join(REPO, "experiments", "2026*_Quickstart")))
    proc = run_script(["compare_experiments.py", *modded, "--no-write", "--no-plot"], env_extra={"COLUMNS": "120"})
    assert proc.returncode == 0 and len(modded) == 3, proc.stderr
    assert [h for h, _ in text_tables(proc.stdout)[0]][:5] == ["#", "Run", "Val bpb", "bpb vs baseline",
                                                               "HellaSwag acc_norm ±95% CI"]
    assert "Same in every row: Setting bpb ± std 2.6925 ± 0.0247" in proc.stdout


def test_wide_shows_every_column_and_a_pipe_gets_the_compact_form(lab):
    out = run_compare(lab, 120, "--wide", "--no-write")
    board, noise = text_tables(out)
    assert [h for h, _ in board] == ["#"] + ALL_HEADERS + VERSUS_HEADERS
    assert [h for h, _ in noise] == cmp.NOISE_HEADERS and "Left out" not in out
    assert max(map(len, out.splitlines())) > 120
    # no COLUMNS, not a terminal (piped into head or less): the key columns, not all 22 hard-wrapped
    proc = run_script(["compare_experiments.py", "--experiments", lab, "--no-write"])
    assert proc.returncode == 0
    assert [h for h, _ in text_tables(proc.stdout)[0]] == ["#", "Run", "Val bpb", "Setting bpb ± std",
                                                           "bpb vs baseline", "HellaSwag acc_norm ±95% CI", "Cost"]
    assert "(compact: output is not a terminal; --wide prints every column" in proc.stdout
    proc = run_script(["compare_experiments.py", "--experiments", lab, "--no-write", "--wide"])
    assert text_tables(proc.stdout) == [board, noise]


def test_columns_picks_them_in_order_and_names_unknown_ones(lab):
    out = run_compare(lab, 60, "--columns", "run, bpb ,cost,hellaswag_vs", "--no-write")
    assert [h for h, _ in text_tables(out)[0]] == ["#", "Run", "Val bpb", "Cost", "HellaSwag vs baseline"]
    assert "Left out to fit" not in out.split("Noise")[0]
    proc = run_script(["compare_experiments.py", "--experiments", lab, "--columns", "run,speed,Foo", "--no-write"])
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown --columns column(s) 'speed', 'Foo'; "
                                                           "valid columns: model, date, params,"), proc.stderr
    assert "setting_bpb, bpb_vs, hellaswag_vs, cost_per_bpb" in proc.stderr and "Traceback" not in proc.stderr
    assert run_script(["compare_experiments.py", "--wide", "--columns", "run"]).returncode == 2


def test_fit_columns_fills_the_width_exactly():
    headers, rows = ["A", "B", "C"], [["xxxxx", "yyy", "zzzzzzz"]]  # columns 5, 3 and 7 wide, two spaces between
    assert tables.fit_columns(headers, rows, 19, [0, 1, 2]) == [0, 1, 2]
    assert max(map(len, tables.text_table(headers, rows).splitlines())) == 19
    assert tables.fit_columns(headers, rows, 18, [0, 1, 2]) == [0, 1]
    assert tables.fit_columns(headers, rows, 18, [2, 0, 1]) == [2, 0]
    assert tables.fit_columns(headers, rows, 12, [2, 0, 1]) == [2, 1]  # C and A fill 14: A is left out, B still fits
    assert tables.fit_columns(headers, rows, 4, [2, 0, 1]) == [1]


def test_the_comparison_flags_from_the_command_line(tmp_path):
    """--summary csv prints only the settings' table; --pairs and --match reach the leaderboard; a bad --match or
    --summary with --scaling is one error line."""
    root = str(tmp_path)
    for day, (name, shift) in enumerate((("Base", 0.0), ("Idea", -0.015)), start=1):
        for seed, bpb in enumerate((1.300, 1.310, 1.305)):
            config = variant(model_name=name, seed=seed, num_layers=day + 3)
            make_run(root, f"2026010{day}_0{seed}0000_{name}", config, metrics_rows(10, bpb + shift, 0.3),
                     finished_results(config, bpb + shift, 0.3))
    proc = run_script(["compare_experiments.py", "--experiments", root, "--summary", "csv"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("setting,n,val_bpb_mean") and [l.split(",")[0] for l in lines[1:]] == ["Base", "Idea"]
    assert not os.path.exists(os.path.join(root, cmp.LEADERBOARD_FILE))
    out = run_compare(root, 200, "--pairs", "--match", "flops", "--no-write")
    assert "Settings compared (every pair of settings, val bpb at the baseline's training FLOPs" in out
    for args, message in ((["--match", "bogus"], "--match"), (["--summary", "md", "--scaling"], "--summary")):
        proc = run_script(["compare_experiments.py", "--experiments", root, *args])
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
