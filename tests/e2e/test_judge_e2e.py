"""judge.py end to end against a stand-in judge on 127.0.0.1 (tests/helpers/judge_standin.py) whose preference is
known, with two tiny random runs that use different tokenizers: the win rate, the ties under order swapping and
the cost worked out from the saved continuations and the rule; retries; a judging stopped midway resumes asking
no question twice; bad input is one error line (docs/judge.md, docs/faults.md)."""
import json
import os

import pytest

from conftest import REPO, run_script
from helpers.judge_standin import USAGE, JudgeStandin, prefer_first, prefer_longer

N = 5  # prompts
COMMON = ["--limit", N, "--max_tokens", 24, "--tries", 2, "--backoff_s", 0, "--timeout_s", 20]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(baseline run, experiment run): random 2-layer models, the experiment's tokenizer has 200 merges, the
    baseline's 300."""
    from helpers.eval_tasks import tiny_checkpoint
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import read_docs, save_tiny_tokenizer

    from conftest import FINEWEB_150

    root = tmp_path_factory.mktemp("judge_runs")
    baseline, experiment = root / "20261127_baseline", root / "20261127_experiment"
    (baseline / "checkpoints").mkdir(parents=True)
    (experiment / "checkpoints").mkdir(parents=True)
    ckpt, _ = tiny_checkpoint(str(root))
    os.replace(ckpt, baseline / "checkpoints" / "step_000010.pt")
    tok = save_tiny_tokenizer(str(root / "tok_200.pkl"), read_docs(FINEWEB_150)[:20], 200)
    save_random_checkpoint(str(experiment / "checkpoints" / "step_000020.pt"), tok, num_layers=2, num_heads=2,
                           model_dim=64, window_size=128, seed=1)
    return str(baseline), str(experiment)


def judge(baseline, experiment, url, *extra, env_extra=None):
    return run_script(["judge.py", baseline, experiment, "--judge_url", url, *COMMON, *extra], timeout=300,
                      env_extra={"OPENAI_API_KEY": None, **(env_extra or {})})


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_the_longer_answer_wins_each_run_samples_with_its_own_tokenizer_and_the_key_stays_secret(runs, tmp_path):
    from scipy.stats import binomtest

    baseline, experiment = runs
    with JudgeStandin(rule=prefer_longer, key="sk-secret-4242") as standin:
        proc = judge(baseline, experiment, standin.url, "--judge_model", "stand-in", "--price_in", "1.5",
                     "--price_out", "4", env_extra={"OPENAI_API_KEY": "sk-secret-4242"})
    assert proc.returncode == 0, proc.stderr
    out = os.path.join(experiment, "judge", "20261127_baseline__stand-in")
    samples = read_lines(os.path.join(out, "prompts.jsonl"))
    with open(os.path.join(REPO, "data", "judge", "fineweb_edu_openings.jsonl")) as f:
        assert [s["prompt"] for s in samples] == [json.loads(line)["prompt"] for line in f][:N]
    # by the rule: the experiment wins where its continuation is longer, in both orders
    expected = ["win" if len(s["experiment"]) > len(s["baseline"]) else
                "loss" if len(s["experiment"]) < len(s["baseline"]) else "tie" for s in samples]
    wins, losses = expected.count("win"), expected.count("loss")
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert (summary["wins"], summary["losses"], summary["ties"], summary["ties_inconsistent"]) == \
        (wins, losses, N - wins - losses, 0)
    assert summary["win_rate"] == pytest.approx((wins + 0.5 * (N - wins - losses)) / N)
    assert summary["sign_test_p"] == (pytest.approx(binomtest(wins, wins + losses).pvalue) if wins + losses else None)
    assert summary["ci95"][0] <= summary["win_rate"] <= summary["ci95"][1]
    # 2 questions a prompt, each once, the continuations swapped between them
    assert len(standin.questions) == 2 * N == len(set(standin.questions))
    for s in samples:
        assert (s["prompt"], s["baseline"], s["experiment"]) in standin.questions
        assert (s["prompt"], s["experiment"], s["baseline"]) in standin.questions
    assert summary["judge_prompt_tokens"] == 2 * N * USAGE["prompt_tokens"]
    assert summary["cost_usd"] == pytest.approx(2 * N * (USAGE["prompt_tokens"] * 1.5 + USAGE["completion_tokens"] * 4)
                                                / 1e6)
    assert f"experiment wins {wins}, loses {losses}" in proc.stdout
    verdict_lines = read_lines(os.path.join(out, "verdicts.jsonl"))
    assert {v["status"] for v in verdict_lines} == {"verdict"} and len(verdict_lines) == 2 * N
    # each run's continuation is what sample.py prints for that prompt and seed (its own model and tokenizer)
    for run, name in [(baseline, "baseline"), (experiment, "experiment")]:
        s = samples[1]
        checkpoint = os.path.join(run, "checkpoints", os.listdir(os.path.join(run, "checkpoints"))[0])
        shown = run_script(["sample.py", checkpoint, "--prompt", s["prompt"], "--max_tokens", 24, "--temperature", 0.8,
                            "--top_k", 40, "--seed", s["seed"]], check=True)
        assert shown.stdout == s["prompt"] + s[name] + "\n"
    assert samples[1]["seed"] == 1
    for name in os.listdir(out):  # the key is sent, never written
        assert b"sk-secret-4242" not in open(os.path.join(out, name), "rb").read()
    assert "sk-secret-4242" not in proc.stdout + proc.stderr


def test_a_judge_that_always_picks_the_first_position_gives_all_ties(runs):
    baseline, experiment = runs
    with JudgeStandin(rule=prefer_first) as standin:
        proc = judge(baseline, experiment, standin.url, "--judge_model", "first")
    assert proc.returncode == 0, proc.stderr
    summary = json.load(open(os.path.join(experiment, "judge", "20261127_baseline__first", "summary.json")))
    assert (summary["wins"], summary["losses"], summary["ties"], summary["ties_inconsistent"]) == (0, 0, N, N)
    assert (summary["win_rate"], summary["ci95"], summary["sign_test_p"]) == (0.5, [0.5, 0.5], None)
    assert "win rate of" in proc.stdout and ": 50.0% (95% CI 50.0% to 50.0%" in proc.stdout


def test_refusals_and_unparseable_replies_are_recorded_not_guessed_and_left_out(runs, tmp_path):
    baseline, experiment = runs
    out = str(tmp_path / "judging")

    def rule(text, a, b):
        if text.startswith("The Independent Jane"):  # prompt 0: refused in one order only
            return {"role": "assistant", "content": None, "refusal": "I can't help with that."} \
                if len(a) < len(b) else "[[A]]"
        if text.startswith("How do you get HIV?"):  # prompt 2: no verdict tag
            return "Both continuations are equally poor; I cannot decide."
        return prefer_first(text, a, b)

    with JudgeStandin(rule=rule) as standin:
        proc = judge(baseline, experiment, standin.url, "--judge_model", "m", "--out", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert (summary["n"], summary["refusals"], summary["unparseable"], summary["ties"], summary["win_rate"]) == \
        (N - 2, 1, 1, N - 2, 0.5)
    statuses = {(v["id"], v["status"]) for v in read_lines(os.path.join(out, "verdicts.jsonl"))}
    assert ("fineweb-edu-000", "refusal") in statuses and ("fineweb-edu-002", "unparseable") in statuses
    assert "left out: 1 refused, 1 unparseable, 0 not judged yet" in proc.stdout
    with JudgeStandin() as again:  # an answer, even a refusal, is not asked again
        assert judge(baseline, experiment, again.url, "--judge_model", "m", "--out", out).returncode == 0
    assert again.questions == []


def test_a_judging_stopped_midway_resumes_asking_no_question_twice(runs, tmp_path):
    baseline, experiment = runs
    out = str(tmp_path / "judging")
    with JudgeStandin(stop_after=3) as first:
        proc = judge(baseline, experiment, first.url, "--judge_model", "m", "--out", out)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and f"cannot reach the judge at {first.url}" in errors[0], \
        proc.stderr
    assert len(read_lines(os.path.join(out, "verdicts.jsonl"))) == 3 and "Traceback" not in proc.stderr
    with JudgeStandin() as second:  # another port: the URL may change between runs
        proc = judge(baseline, experiment, second.url, "--judge_model", "m", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "sampling" not in proc.stderr  # the samples were saved: not made again
    assert len(first.questions[:3]) + len(second.questions) == 2 * N
    assert not set(first.questions[:3]) & set(second.questions) and len(set(second.questions)) == 2 * N - 3
    assert len(read_lines(os.path.join(out, "prompts.jsonl"))) == N
    assert json.load(open(os.path.join(out, "summary.json")))["n"] == N
    with JudgeStandin() as third:  # done: nothing asked again
        assert judge(baseline, experiment, third.url, "--judge_model", "m", "--out", out).returncode == 0
    assert third.questions == []
    proc = judge(baseline, experiment, third.url, "--judge_model", "m", "--out", out, "--max_tokens", 8)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith(
        f"error: {out} holds a judging with other settings (max_tokens: 24 there, 8 now)")
    with JudgeStandin() as fourth:  # --overwrite starts again
        proc = judge(baseline, experiment, fourth.url, "--judge_model", "m", "--out", out, "--max_tokens", 8,
                     "--overwrite")
    assert proc.returncode == 0 and len(fourth.questions) == 2 * N, proc.stderr
    assert {s["baseline_tokens"] <= 8 for s in read_lines(os.path.join(out, "prompts.jsonl"))} == {True}
    assert len(read_lines(os.path.join(out, "verdicts.jsonl"))) == 2 * N


def test_server_errors_are_retried_and_what_still_fails_is_recorded_then_asked_again(runs, tmp_path):
    baseline, experiment = runs
    out = str(tmp_path / "judging")
    # question 1: 429 then an answer; question 2: malformed twice (--tries 2): recorded as an error, the run goes on
    with JudgeStandin(failures=[429, None, "malformed", "malformed"]) as standin:
        proc = judge(baseline, experiment, standin.url, "--judge_model", "m", "--out", out)
    assert proc.returncode == 0, proc.stderr
    lines = read_lines(os.path.join(out, "verdicts.jsonl"))
    assert lines[0]["status"] == "verdict" and lines[0]["tries"] == 2
    assert lines[1]["status"] == "error" and lines[1]["kind"] == "malformed" and lines[1]["tries"] == 2
    assert len(lines) == 2 * N and len(standin.questions) == 2 * N + 2
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert (summary["n"], summary["pending"], summary["errors"]) == (N - 1, 1, 1)
    with JudgeStandin() as again:
        assert judge(baseline, experiment, again.url, "--judge_model", "m", "--out", out).returncode == 0
    assert again.questions == [standin.questions[2]] == [standin.questions[3]]  # only the question that failed
    assert json.load(open(os.path.join(out, "summary.json")))["n"] == N


def test_bad_input_is_one_error_line(runs, tmp_path):
    from conftest import free_port

    baseline, experiment = runs
    untrained = tmp_path / "20261127_untrained"
    untrained.mkdir()
    (untrained / "config.json").write_text("{}")
    url = f"http://127.0.0.1:{free_port()}/v1"
    cases = [
        ([baseline, str(untrained), "--judge_url", url, "--judge_model", "m"],
         f"error: run folder {untrained} has no checkpoint ({untrained}/checkpoints does not exist); train with "
         "--save_model, or pass a checkpoint file"),
        ([baseline, experiment, "--judge_url", url, "--judge_model", "m"],
         f"error: cannot reach the judge at {url} (Connection refused); start the server or correct --judge_url"),
        ([baseline, experiment, "--judge_url", "https://judge.example.invalid/v1", "--judge_model", "m"],
         "error: the judge's API key is missing: $OPENAI_API_KEY is not set; export it (or name another variable "
         "with --api_key_env); only a judge on 127.0.0.1 or localhost may go without a key"),
        ([baseline, experiment, "--judge_url", url, "--judge_model", "m", "--price_in", "1"],
         "error: --price_in and --price_out go together; give both (USD per million tokens), or neither"),
    ]
    for args, expected in cases:
        proc = run_script(["judge.py", *args], timeout=120, env_extra={"OPENAI_API_KEY": None})
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [expected], proc.stderr
    assert not os.path.exists(os.path.join(experiment, "judge", "20261127_baseline__m"))  # nothing made


def test_a_judging_stopped_by_sigterm_resumes_asking_no_answered_question_again(runs, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from conftest import script_env

    def slow(text, a, b):
        time.sleep(0.3)
        return prefer_longer(text, a, b)

    baseline, experiment = runs
    out = tmp_path / "judging"
    with JudgeStandin(rule=slow) as first:
        proc = subprocess.Popen([sys.executable, "judge.py", baseline, experiment, "--judge_url", first.url,
                                 "--judge_model", "m", "--out", str(out), *map(str, COMMON)], cwd=REPO,
                                env=script_env({"OPENAI_API_KEY": None}), stderr=subprocess.PIPE, text=True)
        verdicts = out / "verdicts.jsonl"
        deadline = time.time() + 120
        while not (verdicts.exists() and verdicts.read_text().count("\n") >= 3) and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    recorded = read_lines(verdicts)
    assert 3 <= len(recorded) < 2 * N
    assert json.load(open(out / "summary.json"))["pending"] >= 1  # written on the way out
    with JudgeStandin() as second:
        proc = judge(baseline, experiment, second.url, "--judge_model", "m", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    answered = set(first.questions[:len(recorded)])
    assert len(second.questions) == 2 * N - len(recorded) and not answered & set(second.questions)
    assert len(read_lines(verdicts)) == 2 * N
