"""train_gpt.py --arch gpt2 end to end on CPU (issue 42): GPT-2 (gpt2.py) trains with its AdamW recipe, is
recorded as such, resumes exactly, gives the same curve on 1 and 2 gloo ranks, and its checkpoint samples and
evaluates (against a plain loop); a flag of the other architecture or recipe is one error line. The modded runs'
counterparts: tests/e2e/test_train_gpt_e2e.py."""
import json
import math
import os

import pytest
import torch

from conftest import REPO, SHARED_DATA, free_port, run_script, run_scripts
from helpers.eval_tasks import data_dir_with, loop_loglikelihood
from helpers.model_edits import gated
from helpers.tiny_runs import only_run_dir, run_json, run_main_expecting, run_metric, tiny_args
from gptlab.checkpoint import checkpointing
from gptlab.train import records

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")

# a tiny GPT-2 (tiny_args: dim 64, 2 heads, 4 layers, rows of 128); no window_size (GPT-2 has none); a short
# warm-up so 10 steps see the whole schedule
GPT2 = dict(arch="gpt2", window_size=None, lr=3e-3, warmup_steps=2, train_steps=10, val_loss_every=5)


def gpt2_args(tiny, exp_dir, **overrides):
    return tiny_args(tiny, exp_dir, **{**GPT2, **overrides})


@pytest.fixture(scope="module")
def runs(tiny, tmp_path_factory):
    """{name: run folder}: straight (10 steps, checkpoints at 5 and 10), two (the same on 2 ranks), resumed (from
    straight's step 5)."""
    tmp = tmp_path_factory.mktemp("gpt2_runs")
    run_scripts([["train_gpt.py"] + gpt2_args(tiny, tmp / "straight", checkpoint_every=5),
                 ["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"]
                 + gpt2_args(tiny, tmp / "two")], check=True)
    straight = only_run_dir(tmp / "straight")
    ckpt = os.path.join(straight, records.CHECKPOINT_DIR, "step_000005.pt")
    run_script(["train_gpt.py", "--resume", ckpt, "--experiments_dir", tmp / "resumed"], check=True)
    return {"straight": straight, "two": only_run_dir(tmp / "two"), "resumed": only_run_dir(tmp / "resumed"),
            "ckpt": os.path.join(straight, records.CHECKPOINT_DIR, "step_000010.pt")}


def test_gpt2_trains_with_its_recipe_and_the_run_records_it(runs):
    run_dir = runs["straight"]
    losses, vals = run_metric(run_dir, "train_loss"), run_metric(run_dir, "val_loss")
    assert sorted(losses) == list(range(1, 11)) and sorted(vals) == [0, 5, 10]
    assert vals[10] < vals[5] < vals[0] - 0.3 and losses[10] < losses[1] - 0.3
    config = run_json(run_dir, records.CONFIG_FILE)
    assert (config["arch"], config["optimizer"], config["lr"], config["warmup_steps"]) == ("gpt2", "adamw", 3e-3, 2)
    assert (config["weight_decay"], config["final_lr_frac"], config["grad_clip"]) == (0.1, 0.0, 1.0)
    assert config["bias"] is True and config["val_seq_len"] == config["train_seq_len"] == 128
    assert not {"window_size", "num_val_emb", "head_dim", "cooldown_frac"} & set(config)  # modded's settings
    # llm.c's schedule by hand: step s (0-based) at (s+1)/warmup during the warm-up, then 0.5 (1 + cos(pi r)),
    # r = (s - 2) / 8; metrics.csv row `step` holds the multiplier of step - 1
    lrs = run_metric(run_dir, "lr")
    expected = {1: 0.5, 2: 1.0, 3: 1.0, 7: 0.5, 10: 0.5 * (1 + math.cos(math.pi * 7 / 8))}
    for step, value in expected.items():
        assert lrs[step] == pytest.approx(value, abs=1e-9), step
    # the checkpoint carries gpt2.py, and the code backup copies it whole in place of model.py
    ckpt = checkpointing.load_checkpoint(runs["ckpt"])
    with open(os.path.join(REPO, "gpt2.py"), encoding="utf-8") as f:
        assert ckpt["model_source"]["file"] == "gpt2.py" and ckpt["model_source"]["code"] == f.read()
    assert ckpt["args"]["arch"] == "gpt2" and "pos_embed.weight" in ckpt["model"]
    code = os.listdir(os.path.join(run_dir, records.CODE_DIR))
    assert "gpt2.py" in code and "model.py" not in code
    with open(os.path.join(run_dir, records.CODE_DIR, "git.json")) as f:
        assert json.load(f)["research_files"] == ["train_gpt.py", "gpt2.py"]


def test_gpt2_resume_reproduces_the_uninterrupted_curve(runs):
    a, b = run_metric(runs["straight"], "train_loss"), run_metric(runs["resumed"], "train_loss")
    assert sorted(b) == [6, 7, 8, 9, 10]
    for step in b:
        assert abs(a[step] - b[step]) <= 1e-6 * abs(a[step]), (step, a[step], b[step])
    va, vb = run_metric(runs["straight"], "val_loss"), run_metric(runs["resumed"], "val_loss")
    assert abs(va[10] - vb[10]) <= 1e-6 * va[10]
    config = run_json(runs["resumed"], records.CONFIG_FILE)
    assert config["arch"] == "gpt2" and "arch" in config["from_checkpoint"]


def test_gpt2_one_and_two_ranks_give_the_same_curve(runs):
    one, two = run_metric(runs["straight"], "train_loss"), run_metric(runs["two"], "train_loss")
    assert run_json(runs["two"], records.CONFIG_FILE)["world_size"] == 2
    assert sorted(two) == sorted(one) == list(range(1, 11))
    for step in one:
        assert abs(one[step] - two[step]) <= 1e-4 * one[step], (step, one[step], two[step])
    v1, v2 = run_metric(runs["straight"], "val_loss"), run_metric(runs["two"], "val_loss")
    assert all(abs(v1[s] - v2[s]) <= 1e-4 * v1[s] for s in v1)


def test_sample_runs_on_a_gpt2_checkpoint(runs):
    proc = run_script(["sample.py", runs["ckpt"], "--prompt", "The king", "--max_tokens", "12"], check=True)
    assert proc.stdout.startswith("The king") and "12 tokens in" in proc.stderr + proc.stdout


def test_evaluate_scores_a_gpt2_checkpoint_as_a_plain_loop(runs, tmp_path):
    from gptlab.evals import suite, task_spec
    from gptlab.checkpoint.model_source import load_model

    data = data_dir_with(tmp_path / "data", ["copa", "arc_easy"], limit=2)
    out = tmp_path / "out"
    run_script(["evaluate.py", runs["ckpt"], "--tasks", "copa,arc_easy", "--data_dir", data, "--out", out,
                "--quiet"], check=True)
    model, _, ck = load_model(runs["ckpt"])
    tok = checkpointing.checkpoint_tokenizer(ck, runs["ckpt"])
    checked = 0
    for name in ("copa", "arc_easy"):
        _, reqs = suite.task_requests(task_spec.load_task(name), 0, None, data)
        rows = [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
        for req, rec in zip(reqs, rows):
            for j, (c, cont) in enumerate(zip(req["contexts"], req["continuations"])):
                ll, _, n_tok, _ = loop_loglikelihood(model, tok.encoding, tok.eot, c, cont)
                assert rec["logprob"][j] == pytest.approx(ll, abs=2e-4, rel=1e-5), (name, j)
                assert rec["tokens"][j] == n_tok
                checked += 1
    assert checked == 2 * 2 + 2 * 4  # copa: 2 choices, arc_easy: 4 here


@pytest.mark.parametrize("overrides, message", [
    (dict(arch="gpt2"), "--window_size is not a setting of --arch gpt2"),  # tiny_args gives --window_size 256
    (dict(arch="gpt2", window_size=None, num_val_emb=2), "--num_val_emb is not a setting of --arch gpt2"),
    (dict(arch="gpt2", window_size=None, cooldown_frac=0.3), "--cooldown_frac is a setting of the muon recipe"),
    ({"no-bias": True}, "--bias is not a setting of --arch modded"),
    (dict(lr=1e-3), "--lr is a setting of the adamw recipe, and --arch modded trains with muon"),
])
def test_a_flag_of_the_other_architecture_or_recipe_is_refused(tiny, tmp_path, overrides, message):
    run_main_expecting(tiny, tmp_path, [message], **overrides)


def test_the_refusal_is_one_error_line_on_the_command_line(tiny, tmp_path):
    proc = run_script(["train_gpt.py"] + gpt2_args(tiny, tmp_path / "exps", num_val_emb=2))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "error: --num_val_emb is not a setting of --arch gpt2 (its GPTConfig has no num_val_emb); drop it, or "
        "choose the architecture that has it"]
    assert not os.path.exists(tmp_path / "exps") or not os.listdir(tmp_path / "exps")


def test_resuming_a_gpt2_checkpoint_as_another_architecture_is_refused(runs, tiny, tmp_path):
    run_main_expecting(tiny, tmp_path, ["--arch modded differs from the --resume checkpoint's gpt2"],
                       arch="modded", window_size=None, resume=runs["ckpt"])


def test_the_llmc_preset_is_llmc_gpt2_124m(tiny):
    """llm.c's GPT-2 124M run (karpathy/llm.c discussion #481: -b 64 -t 1024 -d 524288 -l 0.0006 -u 700 -q 0.0
    -c 0.1 on 10B tokens, 10e9 / 524288 = 19073 steps)."""
    proc = run_script(["train_gpt.py", "--preset", "gpt2-124m-llmc", "--dry_run"], check=True)
    cfg = json.loads(proc.stdout)
    assert (cfg["arch"], cfg["optimizer"], cfg["num_layers"], cfg["num_heads"], cfg["model_dim"]) == (
        "gpt2", "adamw", 12, 12, 768)
    assert (cfg["batch_size"], cfg["train_seq_len"], cfg["val_seq_len"]) == (524288, 1024, 1024)
    assert (cfg["lr"], cfg["warmup_steps"], cfg["final_lr_frac"], cfg["weight_decay"]) == (6e-4, 700, 0.0, 0.1)
    assert cfg["train_steps"] == int(10e9 // 524288) and cfg["grad_clip"] == 1.0


def test_a_modded_checkpoint_still_loads_as_model_py(tmp_path):
    """A model.py checkpoint (file "model.py", as every checkpoint before --arch) builds today's model.py."""
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import read_docs, save_tiny_tokenizer
    from conftest import FINEWEB_150
    from gptlab.checkpoint import model_source

    tok = save_tiny_tokenizer(str(tmp_path / "tok.pkl"), read_docs(FINEWEB_150)[:10], 50)
    ckpt = str(tmp_path / "step_000001.pt")
    save_random_checkpoint(ckpt, tok, num_layers=2, num_heads=2, model_dim=64, window_size=128)
    assert checkpointing.load_checkpoint(ckpt)["model_source"]["file"] == "model.py"
    _, module, _ = model_source.load_model(ckpt)
    assert module.__name__ == "model" and hasattr(module, "window_pair")
    proc = run_script(["sample.py", ckpt, "--prompt", "A", "--max_tokens", "4"])
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_export_writes_a_gpt2_run_as_transformers_gpt2(runs, tmp_path):
    """export_hf.py writes GPT2LMHeadModel natively (no code); transformers loads it without trust_remote_code and
    gives the checkpoint's logits on a row holding one document from <|endoftext|> (HF counts positions from the
    row's start, ours from each document's)."""
    transformers = pytest.importorskip("transformers")
    from gptlab.checkpoint.model_source import load_model

    out = tmp_path / "hf"
    proc = run_script(["export_hf.py", runs["ckpt"], out], check=True)
    assert "GPT2LMHeadModel, no custom code" in proc.stdout and "max |logits difference|" in proc.stdout
    assert sorted(os.listdir(out)) == ["config.json", "generation_config.json", "model.safetensors",
                                       "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["architectures"], config["n_positions"]) == ("gpt2", ["GPT2LMHeadModel"], 128)
    assert "auto_map" not in config
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=False).float().eval()
    assert type(hf).__name__ == "GPT2LMHeadModel" and hf.lm_head.weight is hf.transformer.wte.weight
    model, _, ck = load_model(runs["ckpt"])
    tok = checkpointing.checkpoint_tokenizer(ck, runs["ckpt"])
    n_vocab = tok.encoding.n_vocab
    assert hf.config.vocab_size == n_vocab
    row = [tok.eot] + tok.encoding.encode_ordinary("Now is the winter of our discontent made glorious summer")
    x = torch.tensor([row])
    with torch.no_grad():
        theirs, ours = hf(x).logits, model.predict(x, tok.eot)
    assert ours.shape == theirs.shape == (1, len(row), n_vocab)
    assert ours.abs().max() > 0.1 and (theirs - ours).abs().max() <= 1e-5


def test_sampling_stops_where_the_position_table_ends(runs):
    """tiny rows: 128 learned positions; a prompt of P tokens (with <|endoftext|>) gets at most 128 - P new ones,
    and the note says why it stopped."""
    proc = run_script(["sample.py", runs["ckpt"], "--prompt", "The", "--max_tokens", "500", "--temperature", "0.01"],
                      check=True)
    note = proc.stderr.strip().splitlines()[-1]
    prompt_tokens = int(note.split("(")[1].split(" prompt tokens")[0])
    assert f"[{128 - prompt_tokens} tokens in " in note and "the model's context of 128 tokens is full" in note


def test_hellaswag_cuts_rows_longer_than_the_position_table(runs):
    """HellaSwag rows longer than the model's 128 positions keep their last 128 tokens (hellaswag.py's rule);
    scored through the checkpoint's scorer = a hand loop over each cut row alone."""
    from conftest import HELLASWAG_VAL
    from gptlab.evals.hellaswag import evaluate_hellaswag
    from gptlab.checkpoint.model_source import load_model, logits_fn

    model, _, ck = load_model(runs["ckpt"])
    tok = checkpointing.checkpoint_tokenizer(ck, runs["ckpt"])
    enc, n = tok.encoding, 8
    figures = evaluate_hellaswag(logits_fn(model, tok.eot, enc.n_vocab), enc, HELLASWAG_VAL, limit=n, progress=False)
    with open(HELLASWAG_VAL) as f:
        examples = [json.loads(line) for _, line in zip(range(n), f)]
    correct, cut = [0, 0], 0
    for ex in examples:
        sums, means = [], []
        for ending in ex["endings"]:
            context = [tok.eot] + enc.encode_ordinary(ex["ctx"])
            row = context + enc.encode_ordinary(" " + ending)
            start = len(context)
            if len(row) > 128:
                start, row, cut = start - (len(row) - 128), row[-128:], cut + 1
            with torch.no_grad():
                logp = torch.log_softmax(model.predict(torch.tensor([row]), tok.eot)[0].double(), dim=-1)
            losses = [-float(logp[t - 1, row[t]]) for t in range(start, len(row))]
            sums.append(sum(losses))
            means.append(sum(losses) / len(losses))
        correct[0] += sums.index(min(sums)) == ex["label"]
        correct[1] += means.index(min(means)) == ex["label"]
    assert cut > 0  # the check covers cut rows
    assert (figures["acc_correct"], figures["acc_norm_correct"]) == tuple(correct)


def test_gpt2_with_sharded_parameters_follows_the_one_rank_curve(runs, tiny, tmp_path):
    """--shard_params (FSDP2) on 2 gloo ranks: the tied embedding/head stays with the root unit (a unit of its own
    would split the tie); the curve is the 1-rank one, and its sharded checkpoints are written."""
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"]
               + gpt2_args(tiny, tmp_path / "sharded", shard_params=True, checkpoint_every=5), check=True)
    sharded = only_run_dir(tmp_path / "sharded")
    one, two = run_metric(runs["straight"], "train_loss"), run_metric(sharded, "train_loss")
    assert sorted(two) == list(range(1, 11))
    for step in one:
        assert abs(one[step] - two[step]) <= 1e-4 * one[step], (step, one[step], two[step])
    assert os.path.isdir(os.path.join(sharded, records.CHECKPOINT_DIR, "step_000005"))


def test_an_edited_gpt2_exports_with_its_own_code(runs, tmp_path):
    """A researcher's gpt2.py with a new weight in every block is no GPT2LMHeadModel: export_hf.py says so in a note
    and writes the custom-code export (its tied head saved once and tied back on loading), whose logits equal the
    checkpoint's."""
    from gptlab.checkpoint import model_source

    with open(os.path.join(REPO, "gpt2.py"), encoding="utf-8") as f:
        code = gated(f.read(), "gpt2.py")
    path = tmp_path / "edited_gpt2.py"
    path.write_text(code, encoding="utf-8")
    edited = model_source.import_file(str(path), "edited_gpt2_for_export")
    ckpt = checkpointing.load_checkpoint(runs["ckpt"])
    torch.manual_seed(0)
    model = edited.GPT(edited.GPTConfig(**ckpt["model_config"]))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    out_ckpt = str(tmp_path / "step_000001.pt")
    checkpointing.save_checkpoint(out_ckpt, model_state=model.state_dict(), model_config=ckpt["model_config"], step=1,
                                  args=ckpt["args"], tokenizer=ckpt["tokenizer"],
                                  model_source={"file": "gpt2.py", "code": code,
                                                "sha256": model_source.sha256_text(code)})
    proc = run_script(["export_hf.py", out_ckpt, tmp_path / "hf", "--trust_model_code"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "note: not exported as a standard transformers model (its weights do not fit transformers' " \
           "GPT2LMHeadModel" in proc.stderr
    assert "modeling_gptlab.py" in os.listdir(tmp_path / "hf")
    diff = float(proc.stdout.split("max |logits difference| ")[1].split(";")[0])
    assert diff <= 1e-5, proc.stdout


def test_a_preset_of_the_other_architecture_gives_its_shapes_and_drops_its_own_settings():
    """--arch gpt2 --preset quickstart: the quickstart's sizes and budget, without its Muon schedule
    (--cooldown_frac), which the same flag given on the command line is refused for."""
    proc = run_script(["train_gpt.py", "--arch", "gpt2", "--preset", "quickstart", "--dry_run"], check=True)
    cfg = json.loads(proc.stdout)
    assert (cfg["arch"], cfg["optimizer"], cfg["model_dim"], cfg["num_heads"], cfg["train_steps"]) == (
        "gpt2", "adamw", 128, 4, 120)
    assert "cooldown_frac" not in cfg and "window_size" not in cfg
    proc = run_script(["train_gpt.py", "--arch", "gpt2", "--preset", "quickstart", "--cooldown_frac", "0.3",
                       "--dry_run"])
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: --cooldown_frac is a setting of the muon recipe, and --arch gpt2 trains with adamw; drop it (or pass "
        "--optimizer muon)")
