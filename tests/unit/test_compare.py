"""gptlab.compare in process, on synthetic run folders laid out like train_gpt.py writes them (tests/helpers/
run_folders.py): the noise a comparison uses, readers of damaged and older files, the plot's panels. Through
compare_experiments.py's command line: tests/e2e/test_compare_e2e.py."""
import math
import os

import pytest

from gptlab import compare as cmp
from helpers.run_folders import BASE_CODE, BASE_CONFIG, cells_by_run, finished_results, make_run, metrics_rows, t_p, variant
from helpers.run_folders import lab  # noqa: F401 (a fixture)


def shown_p(p):
    return "p < 0.0001" if p < 1e-4 else f"p = {p:.2g}"


def test_baseline_uses_noise_of_runs_not_shown(lab):
    board = cmp.compare(["20260101_100000_Baseline", "BetterIdea", "TinyTweak"], experiments_dir=lab,
                        baseline="20260101_100000_Baseline", no_plot=True, match="tokens")["board"]
    cells = cells_by_run(board)
    # The other two seeds of Baseline are not in the table but still measure its noise (std 0.004, 2 dof).
    assert board.noise.std == pytest.approx(0.004) and "3 seeds of Baseline" in board.noise.source
    assert board.noise.df == 2
    # BetterIdea (one run, 1.250) against Baseline's seed group (mean 1.300, n=3): t = -0.05 / (0.004 sqrt(1 + 1/3))
    p = t_p(-0.05 / (0.004 * math.sqrt(1 + 1 / 3)), 2)
    better = cells["20260102_090000_BetterIdea"]
    # two tests (BetterIdea, TinyTweak 1.255), the smaller p first: Holm multiplies it by 2; BetterIdea has another
    # size (9M parameters), compared because --match tokens asks, and marked
    assert better["bpb vs baseline"] == (f"-0.0500 better, Holm {shown_p(2 * p)} [other size: 9M vs "
                                         "7.34M params]") and 0.005 < p < 0.01
    # HellaSwag 0.330 of 10042 vs Baseline's 0.300 (3 seeds pooled, 30126 answers): Pearson's chi-square on the 2x2
    # table gives p ~ 1e-6; two HellaSwag tests (TinyTweak's too), so Holm's p is at most 2e-6
    assert better["HellaSwag vs baseline"] == "+0.0300 better, Holm p < 0.0001 [other size: 9M vs 7.34M params]"
    assert cells["20260101_100000_Baseline"]["bpb vs baseline"] == "reference"
    assert "HellaSwag vs baseline" in board.headers and len(board.groups) == 1


def test_noise_unknown_without_seed_group(tmp_path):
    for folder, name, bpb in [("20260101_000000_A", "A", 1.30), ("20260101_000001_B", "B", 1.301)]:
        config = variant(model_name=name)
        make_run(str(tmp_path), folder, config, metrics_rows(10, bpb, 0.3), finished_results(config, bpb, 0.3))
    board = cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, write=False)["board"]
    assert board.noise is None and board.groups == []
    # no run is named Base and neither has more seeds: the first started (A) is the baseline, not the better one
    assert cells_by_run(board)["20260101_000001_B"]["bpb vs baseline"] == "+0.0010 (higher; noise unknown)"
    assert any("noise is unknown: repeat a run with another --seed" in n for n in board.notes)


def test_half_written_csv_keeps_complete_rows(lab):
    run = cmp.load_run(os.path.join(lab, "20260104_080000_Crashy"))
    assert run.metrics.truncated and run.status == "crashed"
    assert len(run.metrics.rows) == 29  # 30 written, the last one cut off mid-row
    assert run.val_bpb is not None and run.tokens == run.metrics.rows[-1]["tokens"]


def test_readers_tolerate_missing_keys_and_ci_forms(tmp_path):
    assert cmp.ci_interval(0.3, 0.01) == pytest.approx((0.29, 0.31))
    assert cmp.ci_interval(0.3, [0.31, 0.29]) == (0.29, 0.31)
    assert cmp.ci_interval(0.3, "n/a") is None and cmp.ci_interval(None, 0.01) is None
    # results.json with almost nothing in it, config without most keys: every missing figure shows as "—"
    make_run(str(tmp_path), "20260101_000000_Bare", {"seed": 0}, metrics_rows(10, 2.0, 0.26, eval_every=5),
             {"status": "finished", "hellaswag": None})
    board = cmp.compare([], experiments_dir=str(tmp_path), no_plot=True)["board"]
    row = dict(zip(board.headers, board.rows[0]))
    assert row["Model"] == "Bare" and row["Params"] == cmp.MISSING and row["GPU"] == cmp.MISSING
    assert row["Val bpb"] == "2.0000" and row["Status"] == "finished"
    assert row["HellaSwag acc_norm ±95% CI"] == "0.2600"  # from metrics.csv, no interval known


def test_a_rerun_of_the_same_seed_does_not_shrink_the_noise(lab):
    # A reproduction of seed 1 (as a user's quickstart run reproduces a committed baseline) is not a new sample.
    config = variant(seed=1, command="train_gpt.py --seed 1", start_time="2026-01-06T10:00:00")
    make_run(lab, "20260106_100000_Baseline", config, metrics_rows(40, 1.300, 0.300),
             finished_results(config, 1.300, 0.300), BASE_CODE)  # the same code too: the same setting
    board = cmp.compare([], experiments_dir=lab, no_plot=True, write=False)["board"]
    assert board.noise.std == pytest.approx(0.004) and "3 seeds of Baseline" in board.noise.source
    group = next(g for g in board.groups if len(g.runs) == 4)
    assert group.stats("val_bpb")[2] == 3


def test_reruns_of_one_seed_measure_no_noise(tmp_path):
    for i in range(2):
        config = variant(seed=7, start_time=f"2026-01-01T10:0{i}:00")
        make_run(str(tmp_path), f"20260101_10000{i}_Baseline", config, metrics_rows(10, 1.3, 0.3),
                 finished_results(config, 1.3, 0.3))
    board = cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, write=False)["board"]
    assert board.noise is None


def _finished_run(root, folder, bpb, **changes):
    config = variant(**changes)
    make_run(root, folder, config, metrics_rows(10, bpb, 0.3), finished_results(config, bpb, 0.3))


def test_single_runs_are_judged_with_the_noise_pooled_over_seed_groups(tmp_path):
    """The reference has no seed group of its own, so the noise is pooled over the two groups there are:
    A (1.0, 1.2: variance 0.02, 1 degree of freedom) and B (2.0, 2.1, 2.2: variance 0.01, 2 degrees of freedom),
    by hand sqrt((1 * 0.02 + 2 * 0.01) / 3) = 0.115470 with 3 degrees of freedom. Two single runs differ by d:
    t = d / (0.115470 sqrt(2)); p < 0.05 needs t > 3.1824 (t(0.975, 3)), d > 0.5197: 0.5100 is not
    distinguishable, 0.5300 is."""
    root = str(tmp_path)
    for seed, bpb in [(1, 1.0), (2, 1.2)]:
        _finished_run(root, f"20260101_00000{seed}_A", bpb, model_name="A", num_layers=2, seed=seed)
    for seed, bpb in [(1, 2.0), (2, 2.1), (3, 2.2)]:
        _finished_run(root, f"20260102_00000{seed}_B", bpb, model_name="B", num_layers=3, seed=seed)
    _finished_run(root, "20260103_000000_Ref", 0.9, model_name="Ref", num_layers=5)
    _finished_run(root, "20260103_000001_Under", 0.9 + 0.5100, model_name="Under", num_layers=6)
    _finished_run(root, "20260103_000002_Over", 0.9 + 0.5300, model_name="Over", num_layers=7)
    _finished_run(root, "20260103_000003_Below", 0.9 - 0.5300, model_name="Below", num_layers=8)
    board = cmp.compare([], experiments_dir=root, baseline="20260103_000000_Ref", no_plot=True,
                        write=False)["board"]
    std = math.sqrt(0.04 / 3)
    assert board.noise.std == pytest.approx(std, rel=1e-9) and board.noise.df == 3
    assert board.noise.source == "std pooled over 2 seed group(s)"
    verdict = {name: cells["bpb vs baseline"] for name, cells in cells_by_run(board).items()}
    p_under, p_over = t_p(0.51 / (std * math.sqrt(2)), 3), t_p(0.53 / (std * math.sqrt(2)), 3)
    assert 0.05 < p_under < 0.06 and 0.04 < p_over < 0.05
    # Holm over the 5 tests (A's group and B's against Ref too), by hand: B (mean 2.1, t = 1.2 / (std sqrt(1/3 + 1)))
    # has the smallest p, then p_over = p_below, p_under, A's (t = 0.2 / (std sqrt(1/2 + 1))); Over's 4 p_over,
    # Below's max(4 p_over, 3 p_over), Under's max(4 p_over, 2 p_under): all 4 p_over = 0.18, none below 0.05
    # (uncorrected, Over and Below were)
    p_b, p_a = t_p(1.2 / (std * math.sqrt(4 / 3)), 3), t_p(0.2 / (std * math.sqrt(1.5)), 3)
    assert p_b < p_over < p_under < p_a and 5 * p_b < 4 * p_over and 2 * p_under < 4 * p_over < p_a
    holm = 4 * p_over
    assert verdict["20260103_000001_Under"] == f"+0.5100 not distinguishable, Holm {shown_p(holm)}"
    assert verdict["20260103_000002_Over"] == f"+0.5300 not distinguishable, Holm {shown_p(holm)}"
    assert verdict["20260103_000003_Below"] == f"-0.5300 not distinguishable, Holm {shown_p(holm)}"


def test_a_single_run_against_the_reference_s_seed_group(tmp_path):
    """Noise from the reference's own group (1.30, 1.31, 1.32: mean 1.31, std 0.01, 2 degrees of freedom). A single
    run x is compared with the group's mean: t = (x - 1.31) / (0.01 sqrt(1 + 1/3)); p < 0.05 needs |t| > 4.3027
    (t(0.975, 2)), a difference over 0.04968: 0.0490 is not distinguishable, 0.0505 is."""
    root = str(tmp_path)
    for seed, bpb in [(1, 1.30), (2, 1.31), (3, 1.32)]:
        _finished_run(root, f"20260101_00000{seed}_Base", bpb, model_name="Base", seed=seed)
    _finished_run(root, "20260102_000000_Near", 1.31 + 0.0490, model_name="Near", num_layers=6)
    _finished_run(root, "20260102_000001_Far", 1.31 + 0.0505, model_name="Far", num_layers=7)
    board = cmp.compare([], experiments_dir=root, baseline="20260101_000002_Base", no_plot=True,
                        write=False)["board"]
    assert board.noise.std == pytest.approx(0.01) and "3 seeds of Base" in board.noise.source
    verdict = {name: cells["bpb vs baseline"] for name, cells in cells_by_run(board).items()}
    scale = 0.01 * math.sqrt(1 + 1 / 3)
    p_near, p_far = t_p(0.0490 / scale, 2), t_p(0.0505 / scale, 2)
    assert p_near > 0.05 > p_far
    # Holm over the 2 tests, by hand: p_far < p_near, so 2 p_far, then max(2 p_far, p_near)
    assert verdict["20260102_000000_Near"] == (f"+0.0490 not distinguishable, Holm {shown_p(max(2 * p_far, p_near))}")
    assert verdict["20260102_000001_Far"] == f"+0.0505 not distinguishable, Holm {shown_p(2 * p_far)}"
    assert verdict["20260101_000001_Base"] == "-0.0100 same config (seed noise)"


def test_keeping_checkpoints_does_not_split_a_seed_group():
    """quickstart.sh passes --save_model; a run without it (save_model false, checkpoint_every 0) or with periodic
    checkpoints is the same experiment: saving weights changes no figure, so all join one group; a real setting
    still splits it. Built on a committed baseline's whole config."""
    import glob
    import json

    from conftest import REPO
    from gptlab.compare.stats import seed_group_key

    (path, *_) = sorted(glob.glob(os.path.join(REPO, "experiments", "2026*_Quickstart", "config.json")))
    with open(path) as f:
        committed = dict(json.load(f), save_model=False, checkpoint_every=0)
    saving = dict(committed, save_model=True, checkpoint_every=50, seed=committed["seed"] + 7)
    assert seed_group_key(saving) == seed_group_key(committed)
    assert seed_group_key(dict(saving, train_steps=committed["train_steps"] + 1)) != seed_group_key(committed)
    assert seed_group_key(dict(committed, model_dim=2 * committed["model_dim"])) != seed_group_key(committed)


def test_plot_draws_each_setting_s_mean_and_band_with_a_y_range_from_the_end_of_training(tmp_path, monkeypatch):
    """What the PNG holds, read back from the figure (issue 39: one colour per run, folder names in the legend, the
    y-axis stretched by step 0): panels val bpb / train loss / HellaSwag / learning rate against tokens; one line
    per setting, the mean over its 3 seeds, and a band mean ± std. Worked out from the fixture's formulas: evals
    every 10 of 40 steps of 2048 tokens, val bpb = final + 1.5 (1 - step/40)^2, lr 0.01; finals 1.300, 1.310,
    1.305 (std 0.005) and 0.015 lower."""
    from gptlab.compare import plots

    root = str(tmp_path)
    finals = {"Base": [1.300, 1.310, 1.305], "Idea": [1.285, 1.295, 1.290]}
    for day, (name, values) in enumerate(finals.items(), start=1):
        for seed, bpb in enumerate(values):
            config = variant(model_name=name, seed=seed, num_layers=day + 3)
            make_run(root, f"2026010{day}_0{seed}0000_{name}", config, metrics_rows(40, bpb, 0.30),
                     finished_results(config, bpb, 0.30))
    figures = []
    real_draw = plots._draw_curves
    monkeypatch.setattr(plots, "_draw_curves", lambda *a, **k: figures.append(real_draw(*a, **k)) or figures[-1])
    runs = [cmp.load_run(os.path.join(root, n)) for n in sorted(os.listdir(root))]
    cmp.plot_runs(runs, [os.path.join(root, "p.png")], size=(1000, 800))
    (fig,) = figures
    bpb, loss, hellaswag, lr = fig.axes[:4]
    assert [ax.get_xlabel() for ax in (bpb, loss, hellaswag, lr)] == ["tokens seen"] * 4
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["Base (3 seeds)", "Idea (3 seeds)"]
    steps = [0, 10, 20, 30, 40]
    assert len(bpb.lines) == 2 and len(bpb.collections) == 2  # a line and a band per setting
    for line, values in zip(bpb.lines, finals.values()):
        assert list(line.get_xdata()) == [s * 2048 for s in steps]
        mean = sum(values) / 3
        assert list(line.get_ydata()) == pytest.approx([mean + 1.5 * (1 - s / 40) ** 2 for s in steps])
    band = bpb.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(1.305 + 0 - 0.005) and band.max() == pytest.approx(1.305 + 1.5 + 0.005)
    # y from the second half of training (steps 20-40): Idea's 1.290 - 0.005 to Base's 1.305 + 0.375 + 0.005, 10%
    # margin; step 0 (1.305 + 1.5) is off the top
    low, high = 1.285, 1.685
    assert bpb.get_ylim() == pytest.approx((low - 0.1 * (high - low), high + 0.1 * (high - low)))
    assert [list(line.get_ydata()) for line in lr.lines] == [[0.01] * 40] * 2
    assert list(hellaswag.lines[0].get_ydata()) == pytest.approx([0.30 - 0.05 * (1 - s / 40) for s in steps])


def test_a_partial_hellaswag_is_marked_and_not_compared_with_the_full_set(tmp_path):
    """A run scored on the first 100 examples beside one scored on all 10042: its cell says so, and its "vs best"
    HellaSwag verdict is withheld (other examples, not a difference of models)."""
    full = dict(BASE_CONFIG, model_name="Full")
    make_run(tmp_path, "20260101_100000_Full", full, metrics_rows(40, 1.20, 0.30),
             {"status": "finished", "final_val_bpb": 1.20, "hellaswag": {"acc_norm": 0.30, "n": 10042}})
    make_run(tmp_path, "20260101_110000_Part", dict(BASE_CONFIG, model_name="Part"), metrics_rows(40, 1.25, 0.40),
             {"status": "finished", "final_val_bpb": 1.25, "hellaswag": {"acc_norm": 0.40, "n": 100}})
    runs = [cmp.load_run(p) for p in cmp.resolve_runs([str(tmp_path / "*")], str(tmp_path))]
    board = cmp.build_leaderboard(runs)
    cells = {row[board.headers.index("Model")]: row for row in board.rows}
    hs = board.headers.index("HellaSwag acc_norm ±95% CI")
    assert cells["Part"][hs].endswith("(first 100)") and "(first" not in cells["Full"][hs]
    versus = [h for h in board.headers if h.startswith("HellaSwag vs")][0]
    assert cells["Part"][board.headers.index(versus)] == "+0.1000 not compared (n = 100 vs 10042: other examples)"


def test_two_tokenizers_with_one_name_are_told_apart_by_hash(tmp_path):
    for i, sha in enumerate(("aaa11111ffff", "bbb22222ffff")):
        config = dict(BASE_CONFIG, model_name=f"T{i}", tokenizer_ranks_sha256=sha)
        make_run(tmp_path, f"2026010{i + 1}_100000_T{i}", config, metrics_rows(40, 1.2 + i / 10, 0.3),
                 {"status": "finished", "final_val_bpb": 1.2 + i / 10})
    runs = [cmp.load_run(p) for p in cmp.resolve_runs([str(tmp_path / "*")], str(tmp_path))]
    board = cmp.build_leaderboard(runs)
    assert any("2 different tokenizers (gpt2 (aaa11111), gpt2 (bbb22222))" in note for note in board.notes)


def test_the_default_architecture_and_recipe_join_the_runs_recorded_before_the_arch_flag():
    """Runs before train_gpt.py's --arch trained model.py with Muon and recorded neither: a run recording
    arch modded / optimizer muon is in their seed group, a GPT-2 run is not."""
    from gptlab.compare import seed_group_key

    before = {"model_dim": 64, "seed": 0}
    assert seed_group_key(dict(before, arch="modded", optimizer="muon", seed=1)) == seed_group_key(before)
    assert seed_group_key(dict(before, arch="gpt2", optimizer="adamw")) != seed_group_key(before)
    assert seed_group_key(dict(before, optimizer="adamw")) != seed_group_key(before)
