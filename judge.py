"""A judged win rate between two models: both runs continue the same prompts (same seeds and settings, each with
its own tokenizer and model source), an LLM judge behind an OpenAI-compatible chat-completions API compares every
pair in both orders (MT-bench style), and the experiment's win rate over the baseline comes with a 95% bootstrap
interval over prompts, a sign test, and the judge's token use and cost.

    export OPENAI_API_KEY=...            # never written anywhere; a judge on 127.0.0.1/localhost may go without
    python judge.py experiments/BASELINE experiments/EXPERIMENT --judge_url https://api.openai.com/v1 \\
        --judge_model gpt-4o-mini --price_in 0.15 --price_out 0.60
    python judge.py BASELINE EXPERIMENT --prompts my_prompts.jsonl --judge_url http://127.0.0.1:8080/v1 \\
        --judge_model local

A run folder means its latest checkpoint. Everything is saved in EXPERIMENT/judge/<baseline run>__<judge model>/
(prompts and both continuations, every reply and verdict, summary.json); run the same command again after an
interruption and it resumes, asking no question twice. The default prompts are the openings of 100 FineWeb-Edu
documents (ODC-By; data/judge/SOURCES.md). docs/judge.md.
"""
import os
import signal
import sys

from gptlab.core.cli import (ArgumentParser, HelpFormatter, int_in, non_negative_float, path, positive_float,
                             positive_int)
from gptlab.core.errors import StopRequested, UserError, run_cli
from gptlab.judge import api, session, verdicts

SEED = int_in(0, 2**62, "must be between 0 and 2**62, got {value}")  # seed + i stays a valid torch seed


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("baseline", type=path, metavar="BASELINE_RUN", help="a run folder (its latest checkpoint) or a "
                   "checkpoint")
    p.add_argument("experiment", type=path, metavar="EXPERIMENT_RUN", help="a run folder (its latest checkpoint) or "
                   "a checkpoint; the judging is saved in its folder")
    p.add_argument("--prompts", type=path, default=None,
                   help="the prompts: a .jsonl ({\"prompt\": ...} per line, an optional \"id\") or a text file "
                   "(one per line) (default: the repository's data/judge/fineweb_edu_openings.jsonl)")
    p.add_argument("--limit", type=positive_int, default=None, help="the first N prompts only (default: all)")
    p.add_argument("--judge_url", required=True, help="the API's base URL, e.g. https://api.openai.com/v1 (requests "
                   "go to URL/chat/completions)")
    p.add_argument("--judge_model", required=True, help="the judge's model name at that API")
    p.add_argument("--api_key_env", default="OPENAI_API_KEY",
                   help="the environment variable holding the API key (sent as a Bearer token)")
    p.add_argument("--price_in", type=non_negative_float, default=None, help="USD per million prompt tokens")
    p.add_argument("--price_out", type=non_negative_float, default=None, help="USD per million completion tokens")
    p.add_argument("--max_tokens", type=positive_int, default=128, help="most tokens generated per continuation")
    p.add_argument("--temperature", type=non_negative_float, default=0.8, help="sampling temperature (0: greedy)")
    p.add_argument("--top_k", type=positive_int, default=40, help="sample among the k most likely tokens")
    p.add_argument("--seed", type=SEED, default=0, help="prompt i is sampled with seed + i")
    p.add_argument("--judge_max_tokens", type=positive_int, default=1024, help="most tokens of a judge's reply")
    p.add_argument("--timeout_s", type=positive_float, default=120.0, help="seconds to wait for one reply")
    p.add_argument("--tries", type=positive_int, default=5,
                   help="tries per question on 429, 5xx, timeouts and malformed replies (exponential backoff)")
    p.add_argument("--backoff_s", type=non_negative_float, default=2.0, help="the first wait between tries "
                   "(doubled each time)")
    p.add_argument("--out", type=path, default=None,
                   help="the folder to write (default: EXPERIMENT_RUN/judge/<baseline run>__<judge model>)")
    p.add_argument("--overwrite", action="store_true", help="start again: remove the judging saved in the folder")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--trust_model_code", action="store_true", help="run the model code of a checkpoint trained on "
                   "another machine (it differs from model.py; read it first)")
    return p


def api_key(args):
    key = os.environ.get(args.api_key_env) or None
    if key is None and not api.is_local(args.judge_url):
        raise UserError(f"the judge's API key is missing: ${args.api_key_env} is not set; export it (or name another "
                        "variable with --api_key_env); only a judge on 127.0.0.1 or localhost may go without a key")
    return key


def stop_on_sigterm(signum, frame):
    """SIGTERM ends a judging as Ctrl-C does: summary.json written, the lock released, exit status 143."""
    raise StopRequested(signum)


def main(argv=None):
    previous = signal.signal(signal.SIGTERM, stop_on_sigterm)  # the caller's handler comes back after
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv):
    args = build_parser().parse_args(argv)
    api.check_url(args.judge_url)
    if (args.price_in is None) != (args.price_out is None):
        raise UserError("--price_in and --price_out go together; give both (USD per million tokens), or neither")
    baseline_run, baseline_ckpt = session.resolve_run(args.baseline, "BASELINE_RUN")
    experiment_run, experiment_ckpt = session.resolve_run(args.experiment, "EXPERIMENT_RUN")
    key = api_key(args)
    prompts, prompts_sha = session.load_prompts(args.prompts or session.DEFAULT_PROMPTS)
    prompts = prompts[:args.limit]
    out = args.out or session.default_out(experiment_run, baseline_run, args.judge_model)
    settings = {"baseline": os.path.abspath(baseline_ckpt), "experiment": os.path.abspath(experiment_ckpt),
                "prompts_sha256": prompts_sha, "max_tokens": args.max_tokens, "temperature": args.temperature,
                "top_k": args.top_k, "seed": args.seed, "judge_model": args.judge_model,
                "judge_prompt_sha256": verdicts.PROMPT_SHA256, "judge_max_tokens": args.judge_max_tokens}
    session.check_settings(out, settings, args.overwrite)
    api.check_reachable(args.judge_url)  # before any model loads
    from gptlab.core.files import exclusive_lock
    with exclusive_lock(os.path.join(out, ".judge.lock"), f"the judging in {out}"):
        samples, answered, history = session.open_folder(out, settings, args.overwrite)
        sample_missing(args, prompts, samples, baseline_ckpt, experiment_ckpt, out)
        try:
            ask_judge(args, key, prompts, samples, answered, history, out)
        finally:
            summary = session.summarize([i for i, _ in prompts], answered, history, args.price_in, args.price_out)
            summary.update(baseline=baseline_run, experiment=experiment_run, judge_model=args.judge_model,
                           judge_url=args.judge_url, prompts_file=args.prompts or session.DEFAULT_PROMPTS_NAME,
                           settings=settings)
            session.write_summary(out, summary)
    print_summary(summary, out)
    return summary


def sample_missing(args, prompts, samples, baseline_ckpt, experiment_ckpt, out):
    missing = [(i, n, p) for n, (i, p) in enumerate(prompts) if i not in samples]
    if not missing:
        return
    from gptlab.core.distributed import resolve_device
    from gptlab.judge.sampling import Sampler  # torch

    device = resolve_device(args.device)
    models = {"baseline": Sampler(baseline_ckpt, device, args.trust_model_code),
              "experiment": Sampler(experiment_ckpt, device, args.trust_model_code)}
    print(f"sampling {len(missing)} prompts x 2 models ({len(prompts) - len(missing)} saved already)",
          file=sys.stderr, flush=True)
    for i, number, prompt in missing:
        record = {"id": i, "prompt": prompt, "seed": args.seed + number}
        for name, sampler in models.items():
            text, n_tokens, ended = sampler.continue_text(prompt, args.seed + number, args.max_tokens,
                                                          args.temperature, args.top_k)
            record[name] = text
            record[f"{name}_tokens"] = n_tokens
            record[f"{name}_ended"] = ended
        session.append_jsonl(os.path.join(out, session.PROMPTS_FILE), record)
        samples[i] = record


def ask_judge(args, key, prompts, samples, answered, history, out):
    todo = [(i, o) for i, _ in prompts for o in verdicts.ORDERS
            if (i, o) not in answered or answered[(i, o)]["status"] == "error"]
    if todo:
        print(f"asking {args.judge_model} {len(todo)} questions ({2 * len(prompts) - len(todo)} answered already)",
              file=sys.stderr, flush=True)
    for i, order in todo:
        record = samples[i]
        a, b = verdicts.ORDERS[order]
        entry = {"id": i, "order": order, "A": a, "B": b}
        try:
            question = verdicts.messages(record["prompt"], record[a], record[b])
            reply = api.chat(args.judge_url, args.judge_model, question, key, max_tokens=args.judge_max_tokens,
                             timeout_s=args.timeout_s, tries=args.tries, backoff_s=args.backoff_s,
                             key_name=args.api_key_env)
            status, verdict = verdicts.parse_verdict(reply)
            entry.update(status=status, verdict=verdict, reply=reply["content"], refusal=reply["refusal"],
                         finish_reason=reply["finish_reason"], usage=reply["usage"], tries=reply["tries"])
        except api.JudgeError as err:
            print(f"warning: prompt {i} order {order}: {err}; recorded as an error (a rerun asks again)",
                  file=sys.stderr, flush=True)
            entry.update(status="error", verdict=None, error=str(err), kind=err.kind, tries=err.tries)
        session.append_jsonl(os.path.join(out, session.VERDICTS_FILE), entry)
        answered[(i, order)] = entry
        history.append(entry)


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def print_summary(s, out):
    print(f"{s['prompts']} prompts: experiment wins {s['wins']}, loses {s['losses']}, ties {s['ties']} "
          f"({s['ties_inconsistent']} from verdicts that disagree across orders); left out: {s['refusals']} refused, "
          f"{s['unparseable']} unparseable, {s['pending']} not judged yet")
    ci = s["ci95"] or [None, None]
    p = "n/a" if s["sign_test_p"] is None else f"{s['sign_test_p']:.4g}"
    print(f"win rate of {s['experiment']} over {s['baseline']}: {_pct(s['win_rate'])} (95% CI {_pct(ci[0])} to "
          f"{_pct(ci[1])}, bootstrap over {s['n']} prompts; 50% is chance); sign test p = {p}")
    cost = "" if s["cost_usd"] is None else (f"; cost ${s['cost_usd']:.4f} at ${s['price_in_usd_per_mtok']:g} in, "
                                             f"${s['price_out_usd_per_mtok']:g} out per million tokens")
    print(f"judge {s['judge_model']}: {s['judge_requests']} replies, {s['judge_prompt_tokens']:,} prompt + "
          f"{s['judge_completion_tokens']:,} completion tokens{cost}")
    print(f"wrote {os.path.join(out, session.SUMMARY_FILE)} (and {session.PROMPTS_FILE}, {session.VERDICTS_FILE})")


if __name__ == "__main__":
    run_cli(main)
