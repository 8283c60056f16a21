"""The --evals suite's figures in compare_experiments.py (issue 38): the leaderboard's core and gold bpb columns
(with their 95% intervals, another task set or --evals_limit marked), their sorting, the settings' summary (mean ±
std over the seeds) and the plot's two extra panels; hand-written run folders, figures worked out by hand."""
import csv
import io
import os

import pytest

from gptlab import compare as cmp
from gptlab.compare import tables
from gptlab.compare.runs import BadRunFolder
from helpers.run_folders import cells_by_run, drawn_figure, finished_results, make_run, metrics_rows, variant

CORE, GOLD = "Core ±95% CI", "Gold bpb ±95% CI"
TASKS = ["copa", "arc_easy"]  # as a run may list them: the table sorts them


def suite(core, core_ci, gold, gold_ci, tasks=TASKS, limit=None):
    """results.json's "evals" as train_gpt.py writes it (gptlab/train/run.py _evals_results)."""
    return {"core": core, "core_ci95": core_ci, "gold_bpb": gold, "gold_bpb_ci95": gold_ci, "tasks": tasks,
            "limit": limit, "per_task": {}}


def add_run(root, folder, name, bpb, evals=None, seed=1, layers=4, rows=None):
    config = variant(model_name=name, seed=seed, num_layers=layers)
    extra = {} if evals is None else {"evals": evals}
    return make_run(root, folder, config, rows or metrics_rows(40, bpb, 0.3), finished_results(config, bpb, 0.3,
                                                                                                **extra))


def three_runs(root, idea_tasks=TASKS, idea_limit=None):
    """Baseline (val bpb 1.300, core 0.1 ± 0.05, gold 2.5 ± 0.1), Idea (1.280, core 0.2 in [0.12, 0.30], gold 2.25 ±
    0.05) and NoEvals (1.290, no suite)."""
    add_run(root, "20260101_000000_Baseline", "Baseline", 1.300, suite(0.1, [0.05, 0.15], 2.5, [2.4, 2.6]))
    add_run(root, "20260101_000001_Idea", "Idea", 1.280,
            suite(0.2, [0.12, 0.30], 2.25, [2.2, 2.3], idea_tasks, idea_limit), layers=5)
    add_run(root, "20260101_000002_NoEvals", "NoEvals", 1.290, layers=6)


def board_of(root, **kw):
    return cmp.compare([], experiments_dir=root, no_plot=True, write=False, out=io.StringIO(), **kw)["board"]


def test_core_and_gold_bpb_cells_with_their_intervals(tmp_path):
    root = str(tmp_path)
    three_runs(root)
    board = board_of(root)
    cells = cells_by_run(board)
    base, idea, none = (cells[f"20260101_00000{i}_{n}"] for i, n in enumerate(("Baseline", "Idea", "NoEvals")))
    assert (base[CORE], base[GOLD]) == ("0.1000 ± 0.0500", "2.5000 ± 0.1000")  # symmetric: ± half the width
    assert (idea[CORE], idea[GOLD]) == ("0.2000 [0.1200, 0.3000]", "2.2500 ± 0.0500")  # asymmetric: [lo, hi]
    assert (none[CORE], none[GOLD]) == ("—", "—")
    # one task set, all examples: nothing to mark
    assert not any("[tasks" in c for row in board.rows for c in row)
    assert not any("Core" in n for n in board.notes)
    # in the text priority right after HellaSwag, and in LEADERBOARD.md
    assert tables.TEXT_PRIORITY.index("core") == tables.TEXT_PRIORITY.index("hellaswag") + 1
    assert tables.TEXT_PRIORITY.index("gold_bpb") == tables.TEXT_PRIORITY.index("core") + 1
    md = tables.render_markdown(board, root, "t").splitlines()
    header = next(x for x in md if x.startswith("| #"))
    assert f"| HellaSwag acc_norm ±95% CI | {CORE} | {GOLD} |" in header
    assert any("| 0.1000 ± 0.0500 | 2.5000 ± 0.1000 |" in x for x in md)


def test_sorting_and_picking_the_suite_columns(tmp_path):
    root = str(tmp_path)
    three_runs(root)
    names = lambda board: [r.model_name for r in board.runs]  # noqa: E731
    assert names(board_of(root)) == ["Idea", "NoEvals", "Baseline"]  # by val bpb
    for alias in ("core", "evals_core", "Centred"):
        assert names(board_of(root, sort=alias)) == ["Baseline", "Idea", "NoEvals"]  # 0.1 < 0.2, missing last
        assert names(board_of(root, sort=alias, descending=True)) == ["Idea", "Baseline", "NoEvals"]
    for alias in ("gold_bpb", "gold", "evals_gold_bpb", "gold-bpb"):
        assert names(board_of(root, sort=alias)) == ["Idea", "Baseline", "NoEvals"]  # 2.25 < 2.5
    assert tables.text_columns("run,core,gold_bpb") == ["run", "core", "gold_bpb"]
    text = tables.render_text(board_of(root), columns=tables.text_columns("run, core ,gold"))
    assert [h.strip() for h in text.splitlines()[0].split("  ") if h.strip()] == ["#", "Run", "Core ±95% CI",
                                                                                  "Gold bpb ±95% CI"]


def test_a_pipe_gets_core_only_when_a_run_has_it(tmp_path):
    with_suite, without = str(tmp_path / "a"), str(tmp_path / "b")
    three_runs(with_suite)
    add_run(without, "20260101_000000_Baseline", "Baseline", 1.300)
    add_run(without, "20260101_000001_Idea", "Idea", 1.280, layers=5)
    header = lambda root: " ".join(tables.render_text(board_of(root), compact=True).split("\n")[0].split())  # noqa
    assert header(with_suite).endswith("HellaSwag acc_norm ±95% CI Core ±95% CI Cost")
    assert header(without).endswith("HellaSwag acc_norm ±95% CI Cost")


def test_another_task_set_is_marked_and_named(tmp_path):
    root = str(tmp_path)
    three_runs(root, idea_tasks=["boolq", "arc_easy"], idea_limit=5)
    board = board_of(root)
    cells = cells_by_run(board)
    # the baseline's tasks are A, though Idea's row comes first; another limit is "(first N)", as for HellaSwag
    assert cells["20260101_000000_Baseline"][CORE] == "0.1000 ± 0.0500 [tasks A]"
    assert cells["20260101_000000_Baseline"][GOLD] == "2.5000 ± 0.1000 [tasks A]"
    assert cells["20260101_000001_Idea"][CORE] == "0.2000 [0.1200, 0.3000] (first 5) [tasks B]"
    assert cells["20260101_000001_Idea"][GOLD] == "2.2500 ± 0.0500 (first 5) [tasks B]"
    assert cells["20260101_000002_NoEvals"][CORE] == "—"
    assert "Core / gold bpb tasks: A: arc_easy, copa (2 tasks); B: arc_easy, boolq (2 tasks)." in board.notes
    assert any(n.startswith("Core and gold bpb are means over a run's tasks and examples") for n in board.notes)


def test_another_limit_alone_is_marked_by_first_n(tmp_path):
    root = str(tmp_path)
    three_runs(root, idea_limit=5)
    board = board_of(root)
    cells = cells_by_run(board)
    assert cells["20260101_000000_Baseline"][CORE] == "0.1000 ± 0.0500"
    assert cells["20260101_000001_Idea"][CORE] == "0.2000 [0.1200, 0.3000] (first 5)"
    assert any(n.startswith("Core and gold bpb are means over a run's tasks and examples") for n in board.notes)
    assert not any(n.startswith("Core / gold bpb tasks") for n in board.notes)


def evals_rows(values, tasks=("arc_easy", "copa"), every=20, tokens_per_step=2048):
    """metrics.csv rows of the suite at steps every, 2 every, ...: (core, gold_bpb) each."""
    rows = []
    for i, (core, gold) in enumerate(values, start=1):
        row = {"step": i * every, "tokens": i * every * tokens_per_step, "elapsed_s": 1.0 * i,
               "evals_core": core, "evals_gold_bpb": gold}
        for task in tasks:
            row.update({f"evals_{task}_{f}": 0.5 for f in ("acc", "acc_norm", "centred", "gold_bpb")})
        rows.append(row)
    return rows


def test_a_running_run_shows_its_last_suite_row_marked(tmp_path):
    root = str(tmp_path)
    add_run(root, "20260101_000000_Baseline", "Baseline", 1.300, suite(0.1, [0.05, 0.15], 2.5, [2.4, 2.6]))
    config = variant(model_name="Going", num_layers=7, evals="arc_easy,copa", evals_limit=4)
    make_run(root, "20260101_000001_Going", config, metrics_rows(40, 1.3, 0.3)[:30] + evals_rows([(0.25, 2.7),
                                                                                                   (0.3, 2.6)]))
    board = board_of(root)
    run = next(r for r in board.runs if r.model_name == "Going")
    assert run.status == "running" and run.evals_tasks == ("arc_easy", "copa") and run.evals_limit == 4
    cells = cells_by_run(board)["20260101_000001_Going"]
    assert (cells[CORE], cells[GOLD]) == ("0.3000 (first 4)*", "2.6000 (first 4)*")  # the last row, not final
    assert not any("[tasks" in c for row in board.rows for c in row)  # one task set; the limit differs
    assert any(n.startswith("Core and gold bpb are means") for n in board.notes)


@pytest.mark.parametrize("evals, field", [("core", "'evals' must be an object"),
                                          ({"core": "high"}, "'evals.core' must be a finite number"),
                                          ({"core": 1.5}, "'evals.core' must be 1 or less"),
                                          ({"core": 0.1, "gold_bpb": -1.0}, "'evals.gold_bpb' must be 0 or more"),
                                          ({"core": 0.1, "limit": 0}, "'evals.limit' must be between 1"),
                                          ({"core": 0.1, "tasks": "copa"}, "'evals.tasks' must be a list")])
def test_a_damaged_suite_record_leaves_the_run_out_naming_the_field(tmp_path, evals, field):
    path = add_run(str(tmp_path), "20260101_000000_Baseline", "Baseline", 1.3, evals)
    with pytest.raises(BadRunFolder, match=field.replace("(", r"\(")):
        cmp.load_run(path)


def test_summary_has_core_and_gold_bpb_over_the_seeds(tmp_path):
    root = str(tmp_path)
    # Base: 3 seeds, core 0.10 / 0.12 / 0.14 (mean 0.12, std 0.02), gold 2.0 / 2.2 / 2.4 (mean 2.2, std 0.2)
    for seed, (core, gold) in enumerate([(0.10, 2.0), (0.12, 2.2), (0.14, 2.4)]):
        add_run(root, f"20260101_00000{seed}_Base", "Base", 1.300 + 0.005 * seed,
                suite(core, [core - 0.05, core + 0.05], gold, [gold - 0.1, gold + 0.1]), seed=seed)
    # Idea: 2 seeds, one without the suite: no figure
    add_run(root, "20260102_000000_Idea", "Idea", 1.29, suite(0.2, [0.1, 0.3], 2.0, [1.9, 2.1]), seed=0, layers=5)
    add_run(root, "20260102_000001_Idea", "Idea", 1.28, seed=1, layers=5)
    # Mixed: 2 seeds scored on other tasks: no figure (not one suite)
    add_run(root, "20260103_000000_Mixed", "Mixed", 1.27, suite(0.2, [0.1, 0.3], 2.0, [1.9, 2.1]), seed=0, layers=6)
    add_run(root, "20260103_000001_Mixed", "Mixed", 1.26, suite(0.2, [0.1, 0.3], 2.0, [1.9, 2.1], ["boolq"]), seed=1,
            layers=6)
    # Solo: one run: its figures, no std
    add_run(root, "20260104_000000_Solo", "Solo", 1.31, suite(0.3, [0.2, 0.4], 1.9, [1.8, 2.0]), layers=7)
    out = io.StringIO()
    cmp.compare([], experiments_dir=root, out=out, summary="csv")
    rows = {r["setting"]: r for r in csv.DictReader(io.StringIO(out.getvalue()))}
    base = rows["Base"]
    assert float(base["core_mean"]) == pytest.approx(0.12) and float(base["core_std"]) == pytest.approx(0.02)
    assert float(base["gold_bpb_mean"]) == pytest.approx(2.2) and float(base["gold_bpb_std"]) == pytest.approx(0.2)
    for name in ("Idea", "Mixed"):
        assert [rows[name][k] for k in ("core_mean", "core_std", "gold_bpb_mean", "gold_bpb_std")] == [""] * 4
    solo = rows["Solo"]
    assert (float(solo["core_mean"]), solo["core_std"], float(solo["gold_bpb_mean"]), solo["gold_bpb_std"]) == \
        (pytest.approx(0.3), "", pytest.approx(1.9), "")
    md = io.StringIO()
    cmp.compare([], experiments_dir=root, out=md, summary="md")
    lines = md.getvalue().splitlines()
    assert lines[0].endswith("| Verdict | Core mean ± std | Gold bpb mean ± std |")
    cells = {x.split(" | ")[0].lstrip("| "): x for x in lines[2:] if x.startswith("|")}
    assert cells["Base"].endswith("| 0.1200 ± 0.0200 | 2.2000 ± 0.2000 |")
    assert cells["Idea"].endswith("| — | — |") and cells["Mixed"].endswith("| — | — |")
    assert cells["Solo"].endswith("| 0.3000 | 1.9000 |")
    tex = io.StringIO()
    cmp.compare([], experiments_dir=root, out=tex, summary="tex")
    assert r"\begin{tabular}{lrllrrrlll}" in tex.getvalue() and r"0.1200 $\pm$ 0.0200" in tex.getvalue()


def test_the_plot_gets_core_and_gold_bpb_panels_only_when_a_run_has_them(tmp_path, monkeypatch):
    root = str(tmp_path)
    # Base, 2 seeds: core 0.05 / 0.07 at step 20 (mean 0.06), 0.10 / 0.12 at 40 (0.11); gold 3.0 / 3.2 (3.1), then
    # 2.0 / 2.2 (2.1). Idea, 1 run: core 0.2 then 0.3, gold 2.5 then 1.5.
    for seed, values in enumerate([[(0.05, 3.0), (0.10, 2.0)], [(0.07, 3.2), (0.12, 2.2)]]):
        add_run(root, f"20260101_00000{seed}_Base", "Base", 1.3, seed=seed,
                rows=metrics_rows(40, 1.3, 0.3) + evals_rows(values))
    add_run(root, "20260102_000000_Idea", "Idea", 1.28, layers=5,
            rows=metrics_rows(40, 1.28, 0.3) + evals_rows([(0.2, 2.5), (0.3, 1.5)]))
    add_run(root, "20260103_000000_Plain", "Plain", 1.29, layers=6)  # no suite: no line there
    runs = [cmp.load_run(os.path.join(root, n)) for n in sorted(os.listdir(root))]
    fig = drawn_figure(monkeypatch, runs)
    assert len(fig.axes) == 6
    bpb, core, gold = fig.axes[0], fig.axes[4], fig.axes[5]
    assert "core" in core.get_title() and "gold-answer bpb" in gold.get_title()
    assert core.get_xlabel() == gold.get_xlabel() == "tokens seen"
    for ax, expected in ((core, [[0.06, 0.11], [0.2, 0.3]]), (gold, [[3.1, 2.1], [2.5, 1.5]])):
        assert len(ax.lines) == 2  # Plain has no suite rows
        for line, ys, ref in zip(ax.lines, expected, bpb.lines):
            assert list(line.get_xdata()) == [20 * 2048, 40 * 2048]  # tokens, as the val bpb panel
            assert list(line.get_ydata()) == pytest.approx(ys)
            assert line.get_color() == ref.get_color()  # each setting's colour in every panel
    # no run with suite rows: the four panels as before
    assert len(drawn_figure(monkeypatch, [r for r in runs if r.model_name == "Plain"]).axes) == 4
