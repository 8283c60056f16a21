"""The real validation rows of ../shared/data/evals as download_evals.py writes them, and a tiny checkpoint, for the
tests of evaluate.py and download_evals.py."""
import json
import os
import shutil

from conftest import HELLASWAG_VAL, SHARED_DATA

EVALS_DIR = os.path.join(SHARED_DATA, "evals")
SHARED_TASKS = ["arc_easy", "arc_challenge", "boolq", "piqa", "winogrande", "openbookqa", "social_iqa",
                "commonsense_qa", "copa"]
# each built-in task's lm-eval task file (under lm_eval/tasks/), read off lm-eval 0.4.13's tasks folder: the task
# each must render as (its file's LM_EVAL must name it)
LM_EVAL_FILES = {"arc_easy": "arc/arc_easy.yaml", "arc_challenge": "arc/arc_challenge.yaml",
                 "boolq": "super_glue/boolq/default.yaml", "piqa": "piqa/piqa.yaml",
                 "winogrande": "winogrande/default.yaml", "openbookqa": "openbookqa/openbookqa.yaml",
                 "social_iqa": "siqa/siqa.yaml", "commonsense_qa": "commonsense_qa/default.yaml",
                 "copa": "super_glue/copa/default.yaml", "lambada": "lambada/lambada_openai.yaml",
                 "hellaswag": "hellaswag/hellaswag.yaml"}
# the Hub copy's columns and order (tests/hub_standin.py); label a string there
HELLASWAG_HUB_COLUMNS = ["ind", "activity_label", "ctx_a", "ctx_b", "ctx", "endings", "source_id", "split",
                         "split_type", "label"]


def shared_rows(name, limit=None):
    """The rows of a task as the Hub holds them (hellaswag: the upstream lines in the Hub's columns)."""
    if name == "hellaswag":
        rows = []
        with open(HELLASWAG_VAL, encoding="utf-8") as f:
            for line in f:
                if limit is not None and len(rows) >= limit:
                    break
                r = json.loads(line)
                r["label"] = str(r["label"])
                rows.append({k: r[k] for k in HELLASWAG_HUB_COLUMNS})
        return rows
    with open(os.path.join(EVALS_DIR, f"{name}.jsonl"), encoding="utf-8") as f:
        lines = f.readlines() if limit is None else [f.readline() for _ in range(limit)]
    return [json.loads(line) for line in lines if line.strip()]


def write_rows(folder, name, rows):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def data_dir_with(folder, names, limit=None):
    """A data/evals folder holding the first `limit` rows of each named task (whole files copied when no limit)."""
    os.makedirs(folder, exist_ok=True)
    for name in names:
        if name != "hellaswag" and limit is None:
            shutil.copyfile(os.path.join(EVALS_DIR, f"{name}.jsonl"), os.path.join(folder, f"{name}.jsonl"))
        else:
            write_rows(folder, name, shared_rows(name, limit))
    return str(folder)


COLORS_TASK = '''"""Color questions (made up for this test): which color is the thing?"""
NAME = "colors"
HUB_REPO = "someone/colors"
HUB_CONFIG = None
HUB_SPLIT = "test"
HUB_FILES = "data/test-*.parquet"
REVISION = "main"
SHA256 = None
COLUMNS = {"thing": str, "options": list, "answer": int}
RANDOM_BASELINE = "uniform"
CORE = False


def render(row):
    return {"context": f"The color of {row['thing']} is", "choices": row["options"], "gold": row["answer"]}
'''  # a task file as a user writes one (a benchmark we do not ship), for --tasks_dir


LAMBADA_ROWS = [  # two passages in lambada_openai's layout (one `text` column), written for the tests
    {"text": "He held the lantern up high so that everyone could see the path ahead. \"Follow the light,\" said "
             "Tom"},
    {"text": "She opened the old box and found letters from her grandmother, each tied with a red ribbon"},
]


def tiny_checkpoint(folder, window_size=128, **arch_fields):
    """(checkpoint, tokenizer) paths: a random 2-layer model, final windows 1 block, a 300-merge tokenizer
    (arch_fields: arch="gpt2" or "llama" and their settings, for save_random_checkpoint)."""
    from conftest import FINEWEB_150
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import read_docs, save_tiny_tokenizer

    tok = save_tiny_tokenizer(os.path.join(folder, "tok_v556.pkl"), read_docs(FINEWEB_150)[:20], 300)
    ckpt = os.path.join(folder, "step_000010.pt")
    save_random_checkpoint(ckpt, tok, num_layers=2, num_heads=2, model_dim=64, window_size=window_size, **arch_fields)
    return ckpt, tok


def parquet_of(rows):
    """A parquet file of rows, their columns and order as given (types as pyarrow infers them from the values)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink, row_group_size=200)
    return sink.getvalue()


def hub_path(task, fewshot=False):
    """A file name that the task's HUB_FILES (fewshot: FEWSHOT_FILES) glob matches, as the Hub names such files."""
    return (task.FEWSHOT_FILES if fewshot else task.HUB_FILES).replace("-*", "-00000-of-00001").replace("/*", "/0000")


def fewshot_rows(name):
    """Rows standing in for a task's few-shot (train) split: its first 12 validation rows, last first."""
    return shared_rows(name, 12)[::-1]


def eval_repos(names, limit=None, change=None, fewshot=True):
    """{repo: {path: bytes}} serving each named task's rows at its HUB_FILES and, with fewshot, fewshot_rows(task) at
    its FEWSHOT_FILES (tasks sharing a repo share it); change=(task, row index, column, value) alters one row."""
    from gptlab.evals import task_spec

    repos = {}
    for name in names:
        task = task_spec.load_task(name)
        rows = shared_rows(name, limit)
        if change and change[0] == name:
            rows[change[1]] = dict(rows[change[1]], **{change[2]: change[3]})
        repos.setdefault(task.HUB_REPO, {"README.md": b"---\nlicense: other\n---\n# stand-in\n"})
        repos[task.HUB_REPO][hub_path(task)] = parquet_of(rows)
        if fewshot and task.fewshot_file():
            repos[task.HUB_REPO][hub_path(task, fewshot=True)] = parquet_of(fewshot_rows(name))
    return repos


def evals_standin(repos, prefix="", revisions=("main", "refs/convert/parquet"), cut=(), listing_status=None,
                  gone=()):
    """A started tests/hub_standin.HubStandin serving `repos`, which also answers the named revisions (the Hub's
    refs/convert/parquet branch holds the converted parquet of script datasets); a file whose path is in `cut` is
    sent half, then the connection is closed (a dropped download: its Content-Length says the whole); a
    listing_status (429, 500) answers every listing of a repository's files with it (Retry-After: 0); a file in
    `gone` is listed but answered 404 (a mirror that lacks it)."""
    import socket
    import urllib.parse

    from hub_standin import HubStandin, _Handler

    class Handler(_Handler):
        def _target(self):  # the stand-in takes a revision for one path segment: keep a/b/c quoted as one
            path, query = super()._target()
            for rev in revisions:
                path = path.replace(f"/{rev}/", "/" + urllib.parse.quote(rev, safe="") + "/")
                if path.endswith(f"/{rev}"):
                    path = path[:-len(rev)] + urllib.parse.quote(rev, safe="")
            return path, query

        def _repo(self, repo_id, revision):
            revision = urllib.parse.unquote(revision)
            return super()._repo(repo_id, "main" if revision in revisions else revision)

        def _tree(self, *args):
            if listing_status is None:
                return super()._tree(*args)
            self._send(listing_status, b"stand-in: failing", {"Retry-After": "0"})

        def _resolve(self, repo_id, revision, filename):
            if filename in gone:
                return self._not_found("EntryNotFound", f"{filename} is gone")
            if filename not in cut or self.command != "GET":
                return super()._resolve(repo_id, revision, filename)
            data = self.hub.repos[repo_id][filename]
            self.send_response(200)
            for key, value in {"Content-Length": len(data), "X-Repo-Commit": self.hub.shas[repo_id],
                               "ETag": f'"{filename}"'}.items():
                self.send_header(key, str(value))
            self.end_headers()
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

    class Standin(HubStandin):
        def start(self):  # the base class builds its handler on hub_standin._Handler: this one, for the call
            import hub_standin

            base, hub_standin._Handler = hub_standin._Handler, Handler
            try:
                return super().start()
            finally:
                hub_standin._Handler = base

    return Standin(repos, prefix=prefix).start()


def loop_loglikelihood(model, enc, eot, context, continuation, max_length=2048):
    """(log-likelihood, greedy, tokens, bytes) of a continuation: lm-eval's split, by hand; the input alone in one
    forward pass, as lm-eval's HFLM._loglikelihood_tokens makes it: (context_enc + continuation_enc)[-(max_length +
    1):][:-1], context_enc starting with the BOS (<|endoftext|>), the continuation's logits the last ones."""
    import torch

    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole = enc.encode_ordinary(context + continuation)
    ctx = enc.encode_ordinary(context)
    cont = whole[len(ctx):]
    inp = ([eot] + ctx + cont)[-(max_length + 1):][:-1]
    with torch.no_grad():
        logp = torch.log_softmax(model.predict(torch.tensor([inp]), eot)[0, :, :enc.n_vocab].float(), dim=-1)
    total, greedy = 0.0, True
    for k, token in enumerate(cont):
        pos = len(inp) - len(cont) + k  # predicts the token at pos + 1
        total += float(logp[pos, token])
        greedy = greedy and int(logp[pos].argmax()) == token
    return total, greedy, len(cont), len(continuation.encode("utf-8"))


def lm_eval_built(folder, yaml_file, files, k, n, overrides=None):
    """([[(context, continuation)] per scored row], lm-eval's task) as lm-eval 0.4.13 builds them for `lm_eval
    --num_fewshot k --limit n`: its own task file `yaml_file` (under lm_eval/tasks/, included) with the data from
    local json files {split: path} (its config picks the split it scores and the one it draws shots from);
    TaskManager, set_fewshot_seed(1234) and build_all_requests, as lm_eval.evaluator runs them."""
    import lm_eval
    import yaml
    from lm_eval.tasks import TaskManager

    os.makedirs(folder, exist_ok=True)
    name = f"gptlab_ref_{os.path.basename(str(folder))}"
    cfg = {"include": os.path.join(os.path.dirname(lm_eval.__file__), "tasks", yaml_file), "task": name, "tag": [],
           "dataset_path": "json", "dataset_name": None,
           "dataset_kwargs": {"data_files": files, "cache_dir": os.path.join(str(folder), "hf_datasets")},
           **(overrides or {})}
    with open(os.path.join(folder, "task.yaml"), "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    task = TaskManager(include_path=str(folder), include_defaults=False).load(name)["tasks"][name]
    task.set_config(key="num_fewshot", value=k)  # what lm_eval.evaluator.simple_evaluate does, in its order
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests(limit=n)
    out = [[] for _ in range(n)]
    for inst in task.instances:
        out[inst.doc_id].append(tuple(inst.arguments))
    return out, task
