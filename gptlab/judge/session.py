"""A judging's files and its resume. The folder (default EXPERIMENT_RUN/judge/<baseline run>__<judge model>/):

    settings.json     what makes the judging (both checkpoints, the prompt set's sha256, the sampling settings, the
                      judge model and its prompt's sha256); a resume with other settings is refused
    prompts.jsonl     one line per prompt: id, prompt, seed, and both continuations (with their token counts)
    verdicts.jsonl    one line per question asked: id, order (AB: the baseline shown as A; BA: the experiment as A),
                      the judge's raw reply, finish_reason, usage, tries, status (verdict, refusal, unparseable,
                      error) and the parsed verdict
    summary.json      the win rate, its interval, the sign test, the counts, token use and cost

Lines are appended one at a time (one write, then fsync), so a killed judging leaves whole lines, at most the last
one torn; a resume drops a torn last line (rewriting the file atomically), keeps every sample and every answer
(verdict, refusal or unparseable), and asks only the questions with no answer yet: those never asked, and those
whose last try ended in an error. summary.json is written atomically at the end of each run.
"""
import hashlib
import json
import os
import re

from gptlab.compare.judged import JUDGE_DIR, SUMMARY_FILE  # where the comparison tools read it
from gptlab.core.errors import UserError, escape_controls
from gptlab.core.paths import repo_path
from gptlab.core.files import atomic_write, atomic_write_text, read_json_file
from gptlab.judge import verdicts
from gptlab.train.records import CHECKPOINT_DIR, latest_checkpoint

PROMPTS_FILE, VERDICTS_FILE, SETTINGS_FILE = "prompts.jsonl", "verdicts.jsonl", "settings.json"
OWN_FILES = (PROMPTS_FILE, VERDICTS_FILE, SETTINGS_FILE, SUMMARY_FILE)
DEFAULT_PROMPTS_NAME = os.path.join("data", "judge", "fineweb_edu_openings.jsonl")  # in the repository
DEFAULT_PROMPTS = repo_path(DEFAULT_PROMPTS_NAME)
MAX_PROMPT_FILE_BYTES = 64 << 20


def resolve_run(path, flag):
    """(run folder, checkpoint) of a run folder (its latest checkpoint) or a checkpoint (its run: the folder above
    checkpoints/, else the checkpoint's own folder)."""
    if not os.path.exists(path):
        raise UserError(f"{flag} {path} does not exist; give a run folder (experiments/RUN) or a checkpoint")
    checkpoint = latest_checkpoint(path)  # a run folder without one: its own error line
    folder = os.path.dirname(os.path.abspath(checkpoint))
    run = os.path.dirname(folder) if os.path.basename(folder) == CHECKPOINT_DIR else folder
    return (path if checkpoint != path else run), checkpoint


def safe_name(text):
    """A judge model's name as a folder name (gpt-4o-mini, org/model:tag → org_model_tag)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "judge"


def default_out(experiment_run, baseline_run, judge_model):
    base = os.path.basename(os.path.normpath(os.path.abspath(baseline_run)))
    return os.path.join(experiment_run, JUDGE_DIR, f"{safe_name(base)}__{safe_name(judge_model)}")


# ---- the prompt set

def load_prompts(path):
    """[(id, prompt)] from a .jsonl file ({"prompt": ...} or {"text": ...} per line, an optional "id") or a text file
    (one prompt per non-empty line); and the file's sha256."""
    if not os.path.isfile(path):
        raise UserError(f"--prompts {path} is not a file; give a .jsonl ({{\"prompt\": ...}} per line) or a .txt "
                        "(one prompt per line)")
    if os.path.getsize(path) > MAX_PROMPT_FILE_BYTES:
        raise UserError(f"--prompts {path} is larger than {MAX_PROMPT_FILE_BYTES >> 20} MiB; give a smaller set")
    try:
        with open(path, "rb") as f:
            data = f.read()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"--prompts {path} cannot be read ({type(err).__name__}: {err}); give a UTF-8 text file") \
            from None
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if not path.endswith(".jsonl"):
            prompts.append((str(len(prompts)), line))
            continue
        try:
            row = json.loads(line)
            prompt = row.get("prompt", row.get("text"))
            if not isinstance(prompt, str) or not prompt.strip():
                raise ValueError('no "prompt" text')
        except (ValueError, AttributeError) as err:
            raise UserError(f"--prompts {path} line {number} is not a JSON object with a \"prompt\" text "
                            f"({escape_controls(err)[:100]}); fix the line") from None
        prompts.append((str(row.get("id", len(prompts))), prompt))
    if not prompts:
        raise UserError(f"--prompts {path} holds no prompt; give a file with one prompt per line")
    ids = [i for i, _ in prompts]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise UserError(f"--prompts {path} has the id {duplicate!r} twice; give every prompt its own id")
    return prompts, hashlib.sha256(data).hexdigest()


# ---- JSON lines, appended one at a time

def read_jsonl(path):
    """The records of a JSON lines file this module wrote ([] when missing). A torn last line (a kill mid-write) is
    dropped and the file rewritten without it; a bad line elsewhere is a UserError (the file was edited)."""
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    records, torn = [], lines[-1] != b""
    for number, line in enumerate(lines[:-1], 1):
        try:
            records.append(json.loads(line))
        except ValueError:
            raise UserError(f"{path} line {number} is not JSON (the file was edited or damaged); remove the line, or "
                            "pass --overwrite to judge again from the start") from None
    if torn:  # keep only the whole lines, atomically
        with atomic_write(path, "wb", overwrite=True) as f:
            f.write(b"".join(line + b"\n" for line in lines[:-1]))
    return records


def append_jsonl(path, record):
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- the folder

def open_folder(out, settings, overwrite):
    """Start the judging in `out` or resume the one there: (prompt records by id, last verdict record by (id, order),
    every verdict record). A folder holding another judging (different settings) is refused unless overwrite, which
    removes this module's files there first."""
    path = os.path.join(out, SETTINGS_FILE)
    if overwrite:
        for name in OWN_FILES:
            if os.path.exists(os.path.join(out, name)):
                os.remove(os.path.join(out, name))
    if not check_settings(out, settings):
        os.makedirs(out, exist_ok=True)
        atomic_write_text(path, json.dumps(settings, indent=2) + "\n")
    samples = {r["id"]: r for r in read_jsonl(os.path.join(out, PROMPTS_FILE))}
    history = read_jsonl(os.path.join(out, VERDICTS_FILE))
    answered = {}
    for record in history:
        answered[(record["id"], record["order"])] = record
    return samples, answered, history


def check_settings(out, settings, overwrite=False):
    """Whether `out` holds a judging with these settings (to resume); a judging with others is a UserError unless
    overwrite (which starts again). Reads only: call it before anything is made."""
    path = os.path.join(out, SETTINGS_FILE)
    if overwrite:
        return False
    if not os.path.exists(path):
        for name in (PROMPTS_FILE, VERDICTS_FILE):  # left by a judging whose settings.json was removed
            if os.path.exists(os.path.join(out, name)):
                raise UserError(f"{os.path.join(out, name)} exists without {SETTINGS_FILE}; pass --overwrite to judge "
                                "again from the start, or --out another folder")
        return False
    saved, why = read_json_file(path, 1 << 20)
    if not isinstance(saved, dict):
        raise UserError(f"{path} {why or 'is not a JSON object'}; pass --overwrite to judge again from the start")
    for key, value in settings.items():
        if saved.get(key) != value:
            raise UserError(f"{out} holds a judging with other settings ({key}: {_short(saved.get(key))} there, "
                            f"{_short(value)} now); run the same command to resume it, pass --overwrite to start "
                            "again, or --out another folder")
    return True


def _short(value):
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def summarize(prompt_ids, answered, history, price_in=None, price_out=None):
    """summary.json's figures from the saved records."""
    outcomes = [verdicts.prompt_outcome({o: answered[(i, o)] for o in verdicts.ORDERS if (i, o) in answered})
                for i in prompt_ids]
    stats = verdicts.win_rate(outcomes)
    replies = [r for r in history if r["status"] != "error"]
    tokens_in = sum(r.get("usage", {}).get("prompt_tokens", 0) for r in replies)
    tokens_out = sum(r.get("usage", {}).get("completion_tokens", 0) for r in replies)
    return {**stats, "prompts": len(prompt_ids),
            "refusals": outcomes.count("refusal"), "unparseable": outcomes.count("unparseable"),
            "pending": outcomes.count("pending"),
            "errors": sum(answered.get((i, o), {}).get("status") == "error"
                          for i in prompt_ids for o in verdicts.ORDERS),
            "judge_requests": len(replies), "judge_prompt_tokens": tokens_in, "judge_completion_tokens": tokens_out,
            "price_in_usd_per_mtok": price_in, "price_out_usd_per_mtok": price_out,
            "cost_usd": verdicts.cost_usd(tokens_in, tokens_out, price_in, price_out)}


def write_summary(out, summary):
    atomic_write_text(os.path.join(out, SUMMARY_FILE), json.dumps(summary, indent=2) + "\n", overwrite=True)
