"""judge.py's parts in process: the chat-completions client against a stand-in judge on 127.0.0.1 (retries of
429, 500, malformed replies and timeouts; what stops the run), the verdict format and the order-swap rule, the
statistics worked out by hand, and the JSON lines a killed judging leaves. The whole command:
tests/e2e/test_judge_e2e.py."""
import json
import os

import pytest

from helpers.judge_standin import USAGE, JudgeStandin

from gptlab.core.errors import UserError
from gptlab.core.paths import repo_path
from gptlab.judge import api, session, verdicts

MESSAGES = verdicts.messages("The cat", " sat on the mat.", " ran.")


def chat(judge, **kwargs):
    return api.chat(judge.url, "stand-in", MESSAGES, **{"tries": 3, "backoff_s": 0, "timeout_s": 5, **kwargs})


def test_a_reply_is_parsed_with_its_usage():
    with JudgeStandin() as judge:
        reply = chat(judge)
    assert reply["content"] == "A is longer. [[A]]" and reply["usage"] == USAGE and reply["tries"] == 1
    assert judge.questions == [("The cat", " sat on the mat.", " ran.")]
    assert judge.authorizations == [None]  # no key: no Authorization header at all


def test_429_and_500_are_retried_with_exponential_backoff():
    waits = []
    with JudgeStandin(failures=[429, 500]) as judge:
        reply = chat(judge, backoff_s=0.5, sleep=waits.append)
    assert reply["tries"] == 3 and len(judge.questions) == 3
    assert waits == [0.5, 1.0]


def test_a_malformed_reply_is_retried_then_an_error_for_that_item():
    with JudgeStandin(failures=["malformed"] * 3) as judge:
        with pytest.raises(api.JudgeError) as err:
            chat(judge)
        assert err.value.kind == "malformed" and err.value.tries == 3 and len(judge.questions) == 3
        assert chat(judge)["tries"] == 1  # the server answers again: so does the client


def test_a_timeout_is_retried():
    with JudgeStandin(failures=[("sleep", 1.5)]) as judge:
        reply = chat(judge, timeout_s=0.5)
    assert reply["tries"] == 2 and len(judge.questions) == 2


def test_a_timeout_every_time_is_an_error_for_that_item():
    with JudgeStandin(failures=[("sleep", 1.0)] * 2) as judge:
        with pytest.raises(api.JudgeError, match="no reply within 0.3 s") as err:
            chat(judge, timeout_s=0.3, tries=2)
    assert err.value.kind == "timeout"


def test_a_bad_key_stops_the_run_and_the_key_is_never_echoed():
    with JudgeStandin(key="sk-right") as judge:
        with pytest.raises(UserError, match=r"refused the request \(HTTP 401.*check the key in \$MY_KEY") as err:
            chat(judge, key="sk-wrong", key_name="MY_KEY")
        assert "sk-wrong" not in str(err.value)
        assert chat(judge, key="sk-right")["tries"] == 1
    assert judge.authorizations == ["Bearer sk-wrong", "Bearer sk-right"]


def test_a_judge_nobody_answers_is_one_error_naming_the_url():
    with JudgeStandin() as judge:
        url = judge.url
    with pytest.raises(UserError, match=f"cannot reach the judge at {url} .*Connection refused"):
        api.check_reachable(url)
    with pytest.raises(UserError, match=f"cannot reach the judge at {url} .*3 tries"):
        api.chat(url, "m", MESSAGES, tries=3, backoff_s=0)


def test_verdicts_are_parsed_strictly():
    def parse(content, **extra):
        return verdicts.parse_verdict({"content": content, "refusal": None, "finish_reason": "stop", **extra})

    assert parse("B is better.\n[[B]]") == ("verdict", "B")
    assert parse("[[C]]") == ("verdict", "C")
    assert parse("Between [[A]] and [[B]] I pick [[A]]") == ("unparseable", None)  # two different tags
    assert parse("A is better") == ("unparseable", None)
    assert parse("[A]") == ("unparseable", None)
    assert parse("", ) == ("refusal", None)
    assert parse(None) == ("refusal", None)
    assert parse("[[A]]", refusal="I can't help with that.") == ("refusal", None)
    assert parse("[[A]]", finish_reason="content_filter") == ("refusal", None)


def test_orders_disagreeing_make_a_tie():
    def outcome(ab, ba):
        return verdicts.prompt_outcome({"AB": {"status": "verdict", "verdict": ab},
                                        "BA": {"status": "verdict", "verdict": ba}})

    # AB shows the experiment as B; BA shows it as A
    assert outcome("B", "A") == "win" and outcome("A", "B") == "loss" and outcome("C", "C") == "tie"
    assert outcome("A", "A") == "tie_inconsistent"  # always the first position: no preference at all
    assert outcome("B", "C") == "tie_inconsistent"
    assert verdicts.prompt_outcome({"AB": {"status": "verdict", "verdict": "B"}}) == "pending"
    assert verdicts.prompt_outcome({"AB": {"status": "verdict", "verdict": "B"},
                                    "BA": {"status": "unparseable", "verdict": None}}) == "unparseable"
    assert verdicts.prompt_outcome({"AB": {"status": "refusal", "verdict": None},
                                    "BA": {"status": "error", "verdict": None}}) == "pending"


def test_the_statistics_worked_out_by_hand():
    # 3 wins, 1 loss: 75%; sign test 2 * P(X >= 3 | n=4, 1/2) = 2 * 5/16; a bootstrap mean is k/4 with
    # k ~ Binomial(4, 3/4): P(k=0) = 1/256 < 2.5% < P(k<=1) = 13/256, and P(k=4) = 81/256 > 2.5%: [25%, 100%]
    r = verdicts.win_rate(["win", "win", "loss", "win"])
    assert (r["n"], r["wins"], r["losses"], r["ties"], r["win_rate"]) == (4, 3, 1, 0, 0.75)
    assert r["sign_test_p"] == pytest.approx(10 / 16)
    assert r["ci95"] == [0.25, 1.0]
    # a win and a tie: a resample's mean is 1/2 (1/4), 3/4 (1/2) or 1 (1/4): [50%, 100%]; no loss: p = 2 * 1/2
    r = verdicts.win_rate(["win", "tie_inconsistent", "pending", "refusal"])
    assert (r["n"], r["ties"], r["ties_inconsistent"], r["win_rate"], r["ci95"]) == (2, 1, 1, 0.75, [0.5, 1.0])
    assert r["sign_test_p"] == pytest.approx(1.0)
    r = verdicts.win_rate(["tie_inconsistent"] * 5)
    assert (r["win_rate"], r["ci95"], r["sign_test_p"]) == (0.5, [0.5, 0.5], None)  # no win or loss: no test
    assert verdicts.win_rate(["pending"])["win_rate"] is None


def test_the_bootstrap_against_scipys():
    from scipy.stats import bootstrap

    outcomes = ["win"] * 30 + ["loss"] * 14 + ["tie"] * 6
    scores = [verdicts.SCORES[o] for o in outcomes]
    ours = verdicts.win_rate(outcomes)["ci95"]
    theirs = bootstrap((scores,), lambda x, axis: x.mean(axis=axis), method="percentile", n_resamples=10_000,
                       random_state=1).confidence_interval
    assert ours == pytest.approx([theirs.low, theirs.high], abs=0.02)
    assert verdicts.win_rate(outcomes)["ci95"] == ours  # a fixed seed: the same interval every time


def test_cost():
    assert verdicts.cost_usd(2_000_000, 500_000, 0.15, 0.60) == pytest.approx(0.6)
    assert verdicts.cost_usd(10, 10, None, None) is None


def test_a_torn_last_line_is_dropped_and_the_rest_kept(tmp_path):
    path = str(tmp_path / "verdicts.jsonl")
    session.append_jsonl(path, {"id": "0", "order": "AB"})
    session.append_jsonl(path, {"id": "0", "order": "BA"})
    with open(path, "ab") as f:
        f.write(b'{"id": "1", "ord')  # a kill mid-write
    assert session.read_jsonl(path) == [{"id": "0", "order": "AB"}, {"id": "0", "order": "BA"}]
    assert open(path).read().endswith('"BA"}\n')  # rewritten whole, so the next line starts on its own
    with open(path, "a") as f:
        f.write("not json\n{}\n")
    with pytest.raises(UserError, match="line 3 is not JSON"):
        session.read_jsonl(path)


def test_prompt_files(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("Once upon a time\n\nThe weather today\n")
    assert session.load_prompts(str(txt))[0] == [("0", "Once upon a time"), ("1", "The weather today")]
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "a"}\n{"text": 3}\n')
    with pytest.raises(UserError, match='line 2 is not a JSON object with a "prompt" text'):
        session.load_prompts(str(bad))
    twice = tmp_path / "t.jsonl"
    twice.write_text('{"id": "x", "prompt": "a"}\n{"id": "x", "prompt": "b"}\n')
    with pytest.raises(UserError, match="the id 'x' twice"):
        session.load_prompts(str(twice))


def test_the_shipped_prompts_are_openings_of_the_bundled_fineweb_edu_documents():
    """data/judge/SOURCES.md: each prompt is the start of the document on its source_line of
    data/sample/fineweb_edu_150docs.jsonl (ODC-By), ids unique."""
    prompts, _ = session.load_prompts(session.DEFAULT_PROMPTS)
    with open(repo_path("data", "sample", "fineweb_edu_150docs.jsonl")) as f:
        docs = [json.loads(line)["text"] for line in f]
    with open(session.DEFAULT_PROMPTS) as f:
        rows = [json.loads(line) for line in f]
    assert len(prompts) == 100 and len({i for i, _ in prompts}) == 100
    for row in rows:
        doc = docs[row["source_line"] - 1]
        assert doc.startswith(row["prompt"]) and len(row["prompt"]) < len(doc)


def test_a_run_folder_without_a_checkpoint(tmp_path):
    run = tmp_path / "20261127_x"
    run.mkdir()
    (run / "config.json").write_text("{}")
    with pytest.raises(UserError, match=f"run folder {run} has no checkpoint"):
        session.resolve_run(str(run), "BASELINE_RUN")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "step_000010.pt").write_text("")
    assert session.resolve_run(str(run), "B") == (str(run), str(run / "checkpoints" / "step_000010.pt"))
    assert session.resolve_run(str(run / "checkpoints" / "step_000010.pt"), "B")[0] == str(run)
    with pytest.raises(UserError, match="BASELINE_RUN .* does not exist"):
        session.resolve_run(str(tmp_path / "nope"), "BASELINE_RUN")
