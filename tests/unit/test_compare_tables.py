"""The leaderboard's tables (issue 39): columns chosen by importance in a narrow terminal (a column the same in every
row is named once, not given room), and the settings' summary as CSV, Markdown and LaTeX with figures worked out
by hand (mean, std, Student t interval from a t table, Welch p in closed form, Holm)."""
import csv
import io
import math

import pytest

from gptlab import compare as cmp
from helpers.run_folders import finished_results, make_run, metrics_rows, t_p, variant

BASE = [1.300, 1.310, 1.305]


def _lab(root, shifts=(("My_Idea & 50%", -0.015),)):
    for day, (name, shift) in enumerate((("Base", 0.0),) + tuple(shifts), start=1):
        for seed, bpb in enumerate(BASE):
            config = variant(model_name=name, seed=seed, num_layers=day + 3)
            make_run(root, f"2026010{day}_0{seed}0000_{name.split()[0]}", config,
                     metrics_rows(40, bpb + shift, 0.30 + 0.001 * seed),
                     finished_results(config, bpb + shift, 0.30 + 0.001 * seed))


def _board(root, **kw):
    return cmp.compare([], experiments_dir=root, no_plot=True, write=False, **kw)["board"]


def test_summary_csv_has_mean_std_ci_and_corrected_p(tmp_path):
    root = str(tmp_path)
    _lab(root, (("A", -0.015), ("C", 0.020)))
    out = io.StringIO()
    cmp.compare([], experiments_dir=root, out=out, summary="csv")
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [r["setting"] for r in rows] == ["Base", "A", "C"]
    half = 4.303 * 0.005 / math.sqrt(3)  # t(0.975, 2) = 4.303 from a t table; std of BASE is 0.005
    base = rows[0]
    assert (float(base["val_bpb_mean"]), float(base["val_bpb_std"]), base["n"]) == (pytest.approx(1.305),
                                                                                   pytest.approx(0.005), "3")
    assert float(base["ci95_low"]) == pytest.approx(1.305 - half, abs=2e-5)
    assert float(base["ci95_high"]) == pytest.approx(1.305 + half, abs=2e-5)
    assert base["verdict"] == "baseline" and base["p"] == ""
    p_a, p_c = (t_p(s / math.sqrt(2 * 2.5e-5 / 3), 4) for s in (0.015, 0.020))  # Welch, df 4
    a, c = rows[1], rows[2]
    assert float(a["p"]) == pytest.approx(p_a, rel=1e-5) and float(c["p"]) == pytest.approx(p_c, rel=1e-5)
    # Holm by hand: p_c < p_a, so C gets 2 p_c and A max(2 p_c, p_a)
    assert float(c["p_holm"]) == pytest.approx(2 * p_c, rel=1e-5)
    assert float(a["p_holm"]) == pytest.approx(max(2 * p_c, p_a), rel=1e-5)
    assert float(a["diff_vs_baseline"]) == pytest.approx(-0.015) and a["verdict"] == "better"


def test_summary_markdown_and_latex(tmp_path):
    root = str(tmp_path)
    _lab(root)
    md = io.StringIO()
    cmp.compare([], experiments_dir=root, out=md, summary="md")
    lines = md.getvalue().splitlines()
    assert lines[0] == "| Setting | n | Val bpb mean ± std | 95% CI of the mean | Δ vs baseline | p | Holm p | Verdict |"
    assert lines[2].startswith("| Base | 3 | 1.3050 ± 0.0050 | [1.2926, 1.3174] | — |")
    tex = io.StringIO()
    cmp.compare([], experiments_dir=root, out=tex, summary="tex")
    text = tex.getvalue()
    assert r"\begin{tabular}{lrllrrrl}" in text and r"Base & 3 & 1.3050 $\pm$ 0.0050 & [1.2926, 1.3174] & --" in text
    assert r"My\_Idea \& 50\% & 3 & 1.2900 $\pm$ 0.0050" in text and "verdict at p $<$ 0.05" in text


def test_a_narrow_terminal_keeps_hellaswag_and_names_the_columns_that_never_change(tmp_path):
    root = str(tmp_path)
    _lab(root, (("Idea", -0.015), ("Other", 0.020)))
    out = io.StringIO()
    cmp.compare([], experiments_dir=root, no_plot=True, write=False, out=out, width=120)
    text = out.getvalue()
    header = text.splitlines()[0].split("  ")
    header = [h.strip() for h in header if h.strip()]
    assert header[:4] == ["#", "Run", "Val bpb", "Setting bpb ± std"] and "HellaSwag acc_norm ±95% CI" in header
    for same in ("Tokens", "Params", "Status", "Model", "Tokenizer"):
        assert same not in header
    assert "Same in every row: " in text and "Status finished" in text and "Params 7.34M" in text
    assert max(len(line) for line in text.split("\n\nnote:")[0].splitlines()) <= 120


def test_the_summary_under_pairs_says_its_holm_p_is_over_every_pair(tmp_path):
    """--pairs --summary: A vs Base's Holm p is over the 3 pairs (Base-A, Base-C, A-C, shifts 0.015, 0.020, 0.035),
    by hand: sorted A-C, C-Base, A-Base; A-Base gets max(3 p_AC, 2 p_C, p_A); the caption says over which tests."""
    root = str(tmp_path)
    _lab(root, (("A", -0.015), ("C", 0.020)))
    p_a, p_c, p_ac = (t_p(s / math.sqrt(2 * 2.5e-5 / 3), 4) for s in (0.015, 0.020, 0.035))
    out = io.StringIO()
    cmp.compare([], experiments_dir=root, out=out, summary="csv", pairs=True)
    a = list(csv.DictReader(io.StringIO(out.getvalue())))[1]
    assert a["setting"] == "A" and float(a["p_holm"]) == pytest.approx(max(3 * p_ac, 2 * p_c, p_a), rel=1e-5)
    md = io.StringIO()
    cmp.compare([], experiments_dir=root, out=md, summary="md", pairs=True)
    assert "Holm's correction over the 3 tests of every pair of settings (--pairs)" in md.getvalue()
    md = io.StringIO()
    cmp.compare([], experiments_dir=root, out=md, summary="md")
    assert "Holm's correction over the 2 tests against the baseline" in md.getvalue()
