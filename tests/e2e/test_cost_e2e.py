"""What runs cost, through compare_experiments.py as a subprocess: --sort cost and the cost flags. gptlab.train.cost
and the leaderboard's cost columns in process: tests/unit/test_cost.py."""
from conftest import run_script
from helpers.run_folders import priced  # noqa: F401 (a fixture)


def test_cost_sorts_and_the_cli_flags(priced):
    proc = run_script(["compare_experiments.py", "--experiments", priced, "--sort", "cost", "--desc", "--no-write",
                       "--usd_per_gpu_hour", "2", "--overhead"])
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line[:1].isdigit()]
    assert "_Wide" in rows[0] and "$16.16" in rows[0]  # 8 x (36 s + 60 min) x $2
    for args, message in [(["--usd_per_gpu_hour", "-1"], "--overhead and --usd_per_gpu_hour must be >= 0"),
                          (["--alpha", "1.5"], "--alpha 1.5 must be between 0 and 1"),
                          (["--budget", "1e18"], "--budget goes with --scaling")]:
        proc = run_script(["compare_experiments.py", "--experiments", priced, "--no-write", *args])
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
