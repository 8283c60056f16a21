"""Comparisons a reviewer would accept (issue 39): a baseline group chosen before looking at the results (not the
luckiest run), each setting against it or every pair (--pairs) with Holm's correction worked by hand, runs of
other lengths or sizes not compared as if equal unless --match asks, and val bpb at matched training FLOPs."""
import math

import pytest

from gptlab import compare as cmp
from gptlab.compare import stats
from gptlab.compare.tables import comparison_lines
from helpers.run_folders import cells_by_run, finished_results, make_run, metrics_rows, t_p, variant

BASE = [1.300, 1.310, 1.305]  # variance 2.5e-5: against a group of the same variance Welch's df is exactly 4


def _group(root, name, values, day, steps=40, acc=0.3, hellaswag_n=10042, **changes):
    for seed, bpb in enumerate(values):
        config = variant(model_name=name, seed=seed, train_steps=steps, **changes)
        make_run(root, f"2026010{day}_0{seed}0000_{name}", config, metrics_rows(steps, bpb, acc),
                 finished_results(config, bpb, acc, tokens=steps * 2048, steps=steps,
                                  train_flops=1e12 * steps / 40 * config["n_params"] / 7_340_032,
                                  hellaswag={"acc": acc - 0.01, "acc_norm": acc, "acc_norm_ci95": 0.02,
                                             "n": hellaswag_n}))


def _p_of_shift(shift):
    """Welch's two-sided p of BASE shifted by `shift` against BASE: t = shift / sqrt(2 x 2.5e-5 / 3), df = 4."""
    return t_p(shift / math.sqrt(2 * 2.5e-5 / 3), 4)


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04: x4 = 0.02, x3 = 0.03, x2 = 0.06, x1 = 0.04 -> max so far 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.3, 0.9]) == pytest.approx([0.6, 0.9]) and stats.holm([0.8, 0.7]) == pytest.approx([1.0, 1.0])


def test_the_default_baseline_is_the_docs_baseline_group_not_the_luckiest_run(tmp_path):
    root = str(tmp_path)
    _group(root, "Lucky", [1.100], 1, num_layers=6)  # one run, first started, the best val bpb
    _group(root, "Base", BASE, 2)
    _group(root, "Idea", [v - 0.015 for v in BASE], 3, num_layers=5)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False)["board"]
    assert board.reference.name == "20260102_000000_Base"
    assert any("the baseline group Base (named like the docs' baseline sweep" in n for n in board.notes)
    # no group named Base: the setting with the most seeds (Idea's 3 against Lucky's 1), not the lucky run
    board = cmp.compare(["*_Lucky", "*_Idea"], experiments_dir=root, no_plot=True, write=False)["board"]
    assert board.reference.name == "20260103_000000_Idea"


def test_every_setting_against_the_baseline_with_holm(tmp_path):
    """A (-0.015), B (-0.010) and C (+0.020) against Base, each 3 seeds: Welch p's by hand, Holm over 3."""
    root = str(tmp_path)
    _group(root, "Base", BASE, 1)
    for day, (name, shift) in enumerate((("A", -0.015), ("B", -0.010), ("C", 0.020)), start=2):
        _group(root, name, [v + shift for v in BASE], day, num_layers=day + 3)
    p_a, p_b, p_c = (_p_of_shift(s) for s in (0.015, 0.010, 0.020))
    assert p_c < p_a < p_b
    holm_c, holm_a = 3 * p_c, max(3 * p_c, 2 * p_a)
    holm_b = max(holm_a, p_b)
    assert holm_a < 0.05 < holm_b and p_b < 0.05 * 1.5
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False)["board"]
    cells = cells_by_run(board)
    shown = stats.format_p
    assert cells["20260102_000000_A"]["bpb vs baseline"] == f"-0.0150 better, Holm {shown(holm_a)}"
    assert cells["20260103_000000_B"]["bpb vs baseline"] == (f"-0.0100 not distinguishable, Holm {shown(holm_b)}")
    assert cells["20260104_000000_C"]["bpb vs baseline"] == f"+0.0200 worse, Holm {shown(holm_c)}"
    lines = comparison_lines(board)
    assert len(lines) == 3 and all(line.split(" (")[0] in "ABC" and " vs Base (" in line for line in lines)
    assert f"Holm {shown(holm_b)} (not distinguishable)" in lines[1]


def test_pairs_compares_every_pair_with_holm_over_all_of_them(tmp_path):
    """Base, A (-0.015), C (+0.020): pairs Base-A, Base-C and A-C (shift 0.035), Holm over 3."""
    root = str(tmp_path)
    _group(root, "Base", BASE, 1)
    _group(root, "A", [v - 0.015 for v in BASE], 2, num_layers=5)
    _group(root, "C", [v + 0.020 for v in BASE], 3, num_layers=6)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False, pairs=True)["board"]
    pairs = {(c.run.model_name, c.other.model_name): c for c in board.family}
    assert set(pairs) == {("A", "Base"), ("C", "Base"), ("C", "A")}
    p = {k: _p_of_shift(s) for k, s in ((("A", "Base"), 0.015), (("C", "Base"), 0.020), (("C", "A"), 0.035))}
    order = sorted(p, key=p.get)  # C-A, C-Base, A-Base
    expected = {order[0]: 3 * p[order[0]], order[1]: max(3 * p[order[0]], 2 * p[order[1]])}
    expected[order[2]] = max(expected[order[1]], p[order[2]])
    for key, c in pairs.items():
        assert c.test.p == pytest.approx(p[key], rel=1e-9) and c.p_holm == pytest.approx(expected[key], rel=1e-9)
    assert "every pair of settings" in cmp.render_text(board) and "Holm's correction over 3 test(s)" in \
        cmp.render_text(board)


def _z_p(k_a, k_b, n):
    """Two-sided p of the pooled two-proportion z-test of k_a/n against k_b/n, by hand: erfc(|z| / sqrt 2)."""
    pooled = (k_a + k_b) / (2 * n)
    z = (k_a - k_b) / n / math.sqrt(pooled * (1 - pooled) * 2 / n)
    return math.erfc(abs(z) / math.sqrt(2))


def _hellaswag_lab(root):
    """Base and A, B, C: 3 seeds each, every seed scored on the first 1000 HellaSwag examples, so each setting
    pools 3000 answers: Base 900 right (0.300), A 990 (0.330), B 975 (0.325), C 840 (0.280)."""
    _group(root, "Base", BASE, 1, acc=0.300, hellaswag_n=1000)
    for day, (name, acc) in enumerate((("A", 0.330), ("B", 0.325), ("C", 0.280)), start=2):
        _group(root, name, BASE, day, acc=acc, hellaswag_n=1000, num_layers=day + 3)


def test_hellaswag_against_the_baseline_is_holm_corrected_in_its_own_family(tmp_path):
    """Three HellaSwag tests against Base (p by hand: A 0.0124, B 0.0367, C 0.088), Holm by hand: A 3 p_A = 0.037
    (better), B max(0.037, 2 p_B = 0.073) (not distinguishable, though its raw p is below 0.05), C max(0.073, p_C)."""
    root = str(tmp_path)
    _hellaswag_lab(root)
    p_a, p_b, p_c = _z_p(990, 900, 3000), _z_p(975, 900, 3000), _z_p(840, 900, 3000)
    assert p_a < p_b < 0.05 < p_c < 0.1
    holm_a = 3 * p_a
    holm_b = max(holm_a, 2 * p_b)
    holm_c = max(holm_b, p_c)
    assert holm_a < 0.05 < holm_b
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False)["board"]
    cells, shown = cells_by_run(board), stats.format_p
    assert cells["20260102_000000_A"]["HellaSwag vs baseline"] == f"+0.0300 better, Holm {shown(holm_a)}"
    assert cells["20260103_000000_B"]["HellaSwag vs baseline"] == f"+0.0250 not distinguishable, Holm {shown(holm_b)}"
    assert cells["20260104_000000_C"]["HellaSwag vs baseline"] == f"-0.0200 not distinguishable, Holm {shown(holm_c)}"
    assert cells["20260101_010000_Base"]["HellaSwag vs baseline"] == "+0.0000 same config (seed noise)"
    for c, p, corrected in zip(board.family, (p_a, p_b, p_c), (holm_a, holm_b, holm_c)):
        assert c.hs_test.p == pytest.approx(p, rel=1e-9) and c.hs_p_holm == pytest.approx(corrected, rel=1e-9)
        assert c.hs_answers == (3000, 3000) and c.hs_m == 3
    lines = comparison_lines(board)
    assert f"HellaSwag acc_norm +0.0250, two-proportion z = " in lines[1]
    assert f"{shown(p_b)}, Holm {shown(holm_b)} (not distinguishable; 3,000 vs 3,000 answers" in lines[1]
    assert "HellaSwag: Holm's correction over its own 3 test(s)" in cmp.render_text(board)


def test_pairs_holm_corrects_hellaswag_over_every_pair(tmp_path):
    """Base (900 of 3000), A (990), C (840) under --pairs: HellaSwag pairs A-C (p by hand ~3e-5), A-Base, C-Base,
    Holm over those 3 by hand."""
    root = str(tmp_path)
    _group(root, "Base", BASE, 1, acc=0.300, hellaswag_n=1000)
    _group(root, "A", BASE, 2, acc=0.330, hellaswag_n=1000, num_layers=5)
    _group(root, "C", BASE, 3, acc=0.280, hellaswag_n=1000, num_layers=6)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False, pairs=True)["board"]
    pairs = {(c.run.model_name, c.other.model_name): c for c in board.family}
    p = {("A", "Base"): _z_p(990, 900, 3000), ("C", "Base"): _z_p(840, 900, 3000), ("C", "A"): _z_p(840, 990, 3000)}
    assert p[("C", "A")] < p[("A", "Base")] < p[("C", "Base")]
    expected = {("C", "A"): 3 * p[("C", "A")], ("A", "Base"): max(3 * p[("C", "A")], 2 * p[("A", "Base")])}
    expected[("C", "Base")] = max(expected[("A", "Base")], p[("C", "Base")])
    for key, c in pairs.items():
        assert c.hs_test.p == pytest.approx(p[key], rel=1e-9)
        assert c.hs_p_holm == pytest.approx(expected[key], rel=1e-9) and c.hs_m == 3
    line = next(line for line in comparison_lines(board) if line.startswith("C (") and " vs A (" in line)
    assert f"Holm {stats.format_p(expected[('C', 'A')])} (lower; 3,000 vs 3,000 answers" in line


def test_other_lengths_and_sizes_are_not_compared_as_if_equal_unless_asked(tmp_path):
    root = str(tmp_path)
    _group(root, "Base", BASE, 1)
    _group(root, "Long", [v - 0.2 for v in BASE], 2, steps=120)
    _group(root, "Wide", [v - 0.1 for v in BASE], 3, n_params=9_000_000)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False)["board"]
    cells = cells_by_run(board)
    assert cells["20260102_000000_Long"]["bpb vs baseline"] == "not compared: other length (120 vs 40 steps)"
    assert cells["20260103_000000_Wide"]["bpb vs baseline"] == "not compared: other size (9M vs 7.34M params)"
    assert cells["20260102_000000_Long"]["HellaSwag vs baseline"] == "not compared: other length (120 vs 40 steps)"
    assert "Long vs Base: not compared: other length (120 vs 40 steps)" in comparison_lines(board)
    # asked: --match tokens compares Wide (same length), still not Long; --match none both, each marked
    cells = cells_by_run(cmp.compare([], experiments_dir=root, no_plot=True, write=False, match="tokens")["board"])
    assert cells["20260103_000000_Wide"]["bpb vs baseline"].endswith("[other size: 9M vs 7.34M params]")
    assert cells["20260102_000000_Long"]["bpb vs baseline"].startswith("not compared: other length")
    cells = cells_by_run(cmp.compare([], experiments_dir=root, no_plot=True, write=False, match="none")["board"])
    assert cells["20260102_000000_Long"]["bpb vs baseline"].startswith("-0.2000 better")
    assert cells["20260102_000000_Long"]["bpb vs baseline"].endswith("[other length: 120 vs 40 steps]")


def test_match_flops_reads_val_bpb_off_the_curve_at_the_baselines_compute(tmp_path):
    """Long trained 80 steps (twice Base's FLOPs): at step 40 its curve (metrics_rows: final + 1.5 (1 - 40/80)²)
    is final + 0.375, exactly Base's FLOPs; Base's own runs end there. So the difference is by hand
    (final_long + 0.375) - Base's value, with Welch's test of those values."""
    root = str(tmp_path)
    _group(root, "Base", BASE, 1)
    long_final = [v - 0.4 for v in BASE]
    _group(root, "Long", long_final, 2, steps=80)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False, match="flops")["board"]
    (c,) = board.family
    assert c.diff == pytest.approx(-0.4 + 0.375, abs=1e-12)
    assert c.test.p == pytest.approx(_p_of_shift(0.025), rel=1e-9)
    cell = cells_by_run(board)["20260102_000000_Long"]["bpb vs baseline"]
    assert cell.startswith("-0.0250 better") and cell.endswith("[other length: 80 vs 40 steps]")
    assert "at the baseline's training FLOPs" in cmp.render_text(board)
    # the line under the table reports the same test (values at Base's FLOPs: 1.2800 ± 0.0050), not final val bpb's
    t = -0.025 / math.sqrt(2 * 2.5e-5 / 3)
    (line,) = comparison_lines(board)
    assert line.startswith(f"Long (1.2800 ± 0.0050, n=3) vs Base (1.3050 ± 0.0050, n=3): val bpb -0.0250, Welch "
                           f"t = {t:.2f}, df = 4.0, {stats.format_p(_p_of_shift(0.025))} (lower)"), line
    # a run that stopped short of the baseline's FLOPs is not compared
    _group(root, "Short", BASE, 3, steps=20, num_layers=7)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False, match="flops")["board"]
    assert cells_by_run(board)["20260103_000000_Short"]["bpb vs baseline"].startswith(
        "not compared: did not reach the baseline's training FLOPs (1e+12)")


def test_match_flops_without_the_baselines_flops_and_with_seeds_not_shown(tmp_path):
    """A baseline without training FLOPs (no train_flops, no per-step figures, no parameters): nothing is compared
    at matched compute, and the cell says why; seeds on disk but not named still count (no error)."""
    root = str(tmp_path)
    for seed, bpb in enumerate(BASE):
        config = variant(model_name="Base", seed=seed, n_params=None)
        results = finished_results(config, bpb, 0.3)
        results.pop("n_params")
        make_run(root, f"20260101_0{seed}0000_Base", config, [r for r in metrics_rows(40, bpb, 0.3)
                                                              if r.get("train_loss") is None], results)
    _group(root, "Idea", [v - 0.01 for v in BASE], 2, num_layers=5)
    board = cmp.compare(["20260101_000000_Base", "20260102_000000_Idea"], experiments_dir=root, no_plot=True,
                        write=False, match="flops")["board"]
    assert cells_by_run(board)["20260102_000000_Idea"]["bpb vs baseline"] == \
        "not compared: the baseline records no training FLOPs"


VAL = dict(val_steps=4, val_batch_size=4096, val_seq_len=256, val_shards=["data/fw_gpt2/val_000000.bin"])


def test_val_bpb_on_another_validation_set_is_not_compared_as_if_equal(tmp_path):
    """val bpb is measured on the first val_steps x val_batch_size / val_seq_len windows of the val shards: Idea
    scored on 8 x 16 = 128 rows against Base's 4 x 16 = 64, Other on other shards, so their val bpb differences
    are partly other text, whatever the seeds say. Not compared unless --match none (then marked); HellaSwag, which
    does not read the val shards, still is; another tokenizer (bpb across tokenizers) still is."""
    root = str(tmp_path)
    _group(root, "Base", BASE, 1, **VAL)
    _group(root, "Idea", [v - 0.015 for v in BASE], 2, acc=0.33, **dict(VAL, val_steps=8))
    _group(root, "Other", [v - 0.015 for v in BASE], 3, **dict(VAL, val_shards=["data/fw2_gpt2/val_000000.bin"]))
    _group(root, "Tok", [v - 0.015 for v in BASE], 4, tokenizer_ranks_sha256="ccc333", tokenizer_name="mytok",
           **dict(VAL, val_shards=["data/fw_mytok/val_000000.bin"]))
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False)["board"]
    cells = cells_by_run(board)
    assert cells["20260102_000000_Idea"]["bpb vs baseline"] == \
        "not compared: other validation set (128 vs 64 rows of 256 tokens)"
    assert cells["20260103_000000_Other"]["bpb vs baseline"] == \
        "not compared: other validation set (data/fw2_gpt2/val_000000.bin vs data/fw_gpt2/val_000000.bin)"
    p = _p_of_shift(0.015)  # Tok's is the one val bpb test made: its p is Holm's
    assert cells["20260104_000000_Tok"]["bpb vs baseline"] == f"-0.0150 better, {stats.format_p(p)}"
    assert cells["20260102_000000_Idea"]["HellaSwag vs baseline"].startswith("+0.0300 better")
    cells = cells_by_run(cmp.compare([], experiments_dir=root, no_plot=True, write=False, match="none")["board"])
    assert cells["20260102_000000_Idea"]["bpb vs baseline"] == (  # three tests of one p now: Holm's is 3 p
        f"-0.0150 not distinguishable, Holm {stats.format_p(3 * p)} [other validation set: 128 vs 64 rows of 256 "
        "tokens]")


def test_the_summary_under_match_flops_gives_the_values_it_tested(tmp_path):
    """--match flops --summary csv: Long's mean is its val bpb at Base's FLOPs (final + 0.375, by hand), so the
    mean, its interval and Δ vs baseline describe one quantity; Short, which never reached them, has no mean there."""
    import csv
    import io

    root = str(tmp_path)
    _group(root, "Base", BASE, 1)
    _group(root, "Long", [v - 0.4 for v in BASE], 2, steps=80)
    _group(root, "Short", BASE, 3, steps=20, num_layers=7)
    out = io.StringIO()
    cmp.compare([], experiments_dir=root, out=out, summary="csv", match="flops")
    rows = {r["setting"]: r for r in csv.DictReader(io.StringIO(out.getvalue()))}
    assert float(rows["Long"]["val_bpb_mean"]) == pytest.approx(1.305 - 0.4 + 0.375, abs=1e-9)
    assert float(rows["Long"]["diff_vs_baseline"]) == pytest.approx(-0.025, abs=1e-9)
    assert float(rows["Base"]["val_bpb_mean"]) == pytest.approx(1.305, abs=1e-9)
    assert rows["Short"]["val_bpb_mean"] == "" and rows["Short"]["verdict"].startswith(
        "not compared: did not reach the baseline's training FLOPs")
    md = io.StringIO()
    cmp.compare([], experiments_dir=root, out=md, summary="md", match="flops")  # no mean: a dash, no traceback
    assert "| Short | 3 | — |" in md.getvalue()
