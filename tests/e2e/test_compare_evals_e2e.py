"""compare_experiments.py --evals A B as a subprocess: the per-task paired table, and bad input in one line.
The figures themselves: tests/unit/test_compare_paired.py."""
import json
import os

from conftest import run_script
from helpers.eval_folders import write_eval


def test_evals_table_and_refusals(tmp_path):
    a = write_eval(tmp_path / "a", {"arc_easy": (0.25, [1, 0, 0, 1], [2.0, 2.5, 3.0, 2.2]),
                                    "copa": (0.5, [1, 1, 0], [1.0, 1.5, 2.0])})
    run = tmp_path / "run"
    write_eval(run / "evals" / "step_000240", {"arc_easy": (0.25, [1, 1, 1, 1], [1.8, 2.4, 2.7, 2.1]),
                                                "copa": (0.5, [1, 0, 0], [0.9, 1.6, 1.8])})
    proc = run_script(["compare_experiments.py", "--evals", a, str(run)])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("McNemar p" in x and "paired-t p" in x for x in lines)
    arc = next(x for x in lines if x.startswith("arc_easy")).split()
    # n, acc A, acc B, Δ; McNemar: 2 discordant, both B's way: 2 (1/4) = 0.5
    assert arc[1:6] == ["4", "0.5000", "1.0000", "+0.5000", "0.5000"]
    assert any(x.startswith("core (mean centred accuracy over 2 tasks)") for x in lines)
    assert str(run / "evals" / "step_000240") in proc.stdout

    # another --limit on one side: one error line, exit 2
    b = write_eval(tmp_path / "b", {"arc_easy": (0.25, [1, 0, 0], [2.0, 2.5, 3.0])})
    proc = run_script(["compare_experiments.py", "--evals", a, b])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: arc_easy:") and proc.stderr.count("\n") == 1, proc.stderr
    # --evals with run arguments: refused in one line
    proc = run_script(["compare_experiments.py", "somerun", "--evals", a, b])
    assert proc.returncode == 2 and proc.stderr.startswith("error: --evals") and proc.stderr.count("\n") == 1
    # a folder with no evaluation
    proc = run_script(["compare_experiments.py", "--evals", a, str(tmp_path)])
    assert proc.returncode == 2 and "run evaluate.py" in proc.stderr and proc.stderr.count("\n") == 1
    # a summary.json that is not JSON
    with open(os.path.join(b, "summary.json"), "w") as f:
        f.write("{")
    proc = run_script(["compare_experiments.py", "--evals", a, b])
    assert proc.returncode == 2 and "unreadable" in proc.stderr and proc.stderr.count("\n") == 1
    assert json.load(open(os.path.join(a, "summary.json")))["fewshot"] == 0  # nothing written to the inputs


def test_evals_of_two_real_checkpoints(tmp_path):
    """evaluate.py's own output for two random models (seeds 0, 1) on the same rows; McNemar's p from the files by
    scipy.stats.binomtest; another --limit on one side is refused."""
    from scipy import stats

    from helpers.eval_tasks import data_dir_with, tiny_checkpoint
    from helpers.random_checkpoint import save_random_checkpoint

    ckpt_a, tok = tiny_checkpoint(str(tmp_path))
    ckpt_b = str(tmp_path / "other" / "step_000010.pt")
    os.makedirs(os.path.dirname(ckpt_b))
    save_random_checkpoint(ckpt_b, tok, num_layers=2, num_heads=2, model_dim=64, window_size=128, seed=1)
    data = data_dir_with(tmp_path / "data", ["arc_easy", "copa"], limit=12)
    outs = {}
    for name, ckpt, limit in (("a", ckpt_a, "12"), ("b", ckpt_b, "12"), ("short", ckpt_b, "9")):
        outs[name] = str(tmp_path / f"eval_{name}")
        proc = run_script(["evaluate.py", ckpt, "--tasks", "arc_easy,copa", "--data_dir", str(data), "--limit", limit,
                           "--out", outs[name], "--quiet"], timeout=400)
        assert proc.returncode == 0, proc.stderr
    proc = run_script(["compare_experiments.py", "--evals", outs["a"], outs["b"]])
    assert proc.returncode == 0, proc.stderr
    for task in ("arc_easy", "copa"):
        a, b = ([json.loads(x) for x in open(os.path.join(outs[s], f"{task}.jsonl"))] for s in ("a", "b"))
        assert a[0]["logprob"] != b[0]["logprob"]  # two models, not one twice
        only_a = sum(x["correct"] and not y["correct"] for x, y in zip(a, b))
        only_b = sum(y["correct"] and not x["correct"] for x, y in zip(a, b))
        p = stats.binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
        row = next(x for x in proc.stdout.splitlines() if x.startswith(task)).split()
        assert row[1] == "12" and float(row[5]) == round(p, 4), (row, p)
    proc = run_script(["compare_experiments.py", "--evals", outs["a"], outs["short"]])
    assert proc.returncode == 2 and "scored 12 examples" in proc.stderr and proc.stderr.count("\n") == 1
