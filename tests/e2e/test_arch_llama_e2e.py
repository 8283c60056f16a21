"""train_gpt.py --arch llama end to end on CPU, lean (issue 42): Llama 3 (llama.py) trains with the AdamW recipe, is
recorded as such, samples, evaluates (against a plain loop), exports natively as LlamaForCausalLM; --init_from
starts a run from transformers' own GPT-2 and Llama folders (and a Hub id through the stand-in Hub) with
transformers' logits; a contradicting flag is one error line. The GPT-2 counterparts: test_arch_gpt2_e2e.py."""
import json
import os

import pytest
import torch

from conftest import REPO, SHARED_DATA, free_port, run_script, run_scripts
from helpers.eval_tasks import data_dir_with, loop_loglikelihood
from helpers.tiny_runs import only_run_dir, run_json, run_main_expecting, run_metric, tiny_args
from gptlab.checkpoint import checkpointing
from gptlab.train import records

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")

# a tiny Llama (tiny_args: dim 64, 2 heads, 4 layers, rows of 128) with 1 key/value head (grouped-query attention)
LLAMA = dict(arch="llama", window_size=None, num_kv_heads=1, multiple_of=32, lr=3e-3, warmup_steps=2, train_steps=6,
             val_loss_every=3)


@pytest.fixture(scope="module")
def run(tiny, tmp_path_factory):
    """6 steps of a tiny Llama: its run folder and final checkpoint, the same on 2 gloo ranks ("two"), and resumed
    from its step 3 ("resumed")."""
    tmp = tmp_path_factory.mktemp("llama_run")
    run_scripts([["train_gpt.py"] + tiny_args(tiny, tmp / "straight", checkpoint_every=3, sample_tokens=8, **LLAMA),
                 ["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"]
                 + tiny_args(tiny, tmp / "two", **LLAMA)], check=True)
    run_dir = only_run_dir(tmp / "straight")
    run_script(["train_gpt.py", "--resume", os.path.join(run_dir, records.CHECKPOINT_DIR, "step_000003.pt"),
                "--experiments_dir", tmp / "resumed"], check=True)
    return {"dir": run_dir, "ckpt": os.path.join(run_dir, records.CHECKPOINT_DIR, "step_000006.pt"),
            "two": only_run_dir(tmp / "two"), "resumed": only_run_dir(tmp / "resumed")}


def test_llama_trains_with_its_recipe_and_the_run_records_it(run):
    losses, vals = run_metric(run["dir"], "train_loss"), run_metric(run["dir"], "val_loss")
    assert sorted(losses) == list(range(1, 7)) and vals[6] < vals[0] - 0.3
    config = run_json(run["dir"], records.CONFIG_FILE)
    assert (config["arch"], config["optimizer"], config["num_kv_heads"], config["rope_theta"]) == (
        "llama", "adamw", 1, 500000.0)
    assert not {"window_size", "num_val_emb", "bias", "mlp_ratio", "cooldown_frac"} & set(config)
    ckpt = checkpointing.load_checkpoint(run["ckpt"])
    with open(os.path.join(REPO, "llama.py"), encoding="utf-8") as f:
        assert ckpt["model_source"]["file"] == "llama.py" and ckpt["model_source"]["code"] == f.read()
    code = os.listdir(os.path.join(run["dir"], records.CODE_DIR))
    assert "llama.py" in code and "model.py" not in code
    with open(os.path.join(run["dir"], records.LOG_FILE)) as f:
        assert "sample: " in f.read()


def test_llama_resumes_exactly_and_two_ranks_give_the_same_curve(run):
    one, two, resumed = (run_metric(run[k], "train_loss") for k in ("dir", "two", "resumed"))
    assert sorted(resumed) == [4, 5, 6] and sorted(two) == sorted(one)
    assert all(abs(one[s] - resumed[s]) <= 1e-6 * one[s] for s in resumed)
    assert all(abs(one[s] - two[s]) <= 1e-4 * one[s] for s in one)
    assert run_json(run["two"], records.CONFIG_FILE)["world_size"] == 2
    assert run_json(run["resumed"], records.CONFIG_FILE)["arch"] == "llama"


@pytest.fixture(scope="module")
def tools(run, tmp_path_factory):
    """sample.py, evaluate.py (copa, 2 rows) and export_hf.py on the run's checkpoint, side by side: {"sample":
    CompletedProcess, "data": the eval rows' folder, "out": evaluate.py's, "export": CompletedProcess, "hf": its
    folder}."""
    tmp = tmp_path_factory.mktemp("llama_tools")
    data = data_dir_with(tmp / "data", ["copa"], limit=2)
    sample, _, export = run_scripts([
        ["sample.py", run["ckpt"], "--prompt", "The king", "--max_tokens", "6"],
        ["evaluate.py", run["ckpt"], "--tasks", "copa", "--data_dir", data, "--out", tmp / "out", "--quiet"],
        ["export_hf.py", run["ckpt"], tmp / "hf"]], check=True)
    return {"sample": sample, "data": data, "out": tmp / "out", "export": export, "hf": tmp / "hf"}


def test_sample_and_evaluate_a_llama_checkpoint(run, tools):
    from gptlab.evals import suite, task_spec
    from gptlab.checkpoint.model_source import load_model

    assert tools["sample"].stdout.startswith("The king")
    data = tools["data"]
    model, _, ck = load_model(run["ckpt"])
    tok = checkpointing.checkpoint_tokenizer(ck, run["ckpt"])
    _, reqs = suite.task_requests(task_spec.load_task("copa"), 0, None, data)
    rows = [json.loads(line) for line in (tools["out"] / "copa.jsonl").read_text().splitlines()]
    for req, rec in zip(reqs, rows):
        for j, (c, cont) in enumerate(zip(req["contexts"], req["continuations"])):
            ll = loop_loglikelihood(model, tok.encoding, tok.eot, c, cont)[0]
            assert rec["logprob"][j] == pytest.approx(ll, abs=2e-4, rel=1e-5)


def test_export_writes_a_llama_run_as_transformers_llama(run, tools):
    transformers = pytest.importorskip("transformers")
    from gptlab.checkpoint.model_source import load_model

    out = tools["hf"]
    assert "LlamaForCausalLM, no custom code" in tools["export"].stdout
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["num_key_value_heads"], config["tie_word_embeddings"]) == ("llama", 1, False)
    assert "auto_map" not in config and not [f for f in os.listdir(out) if f.endswith(".py")]
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=False).float().eval()
    assert type(hf).__name__ == "LlamaForCausalLM"
    model, _, ck = load_model(run["ckpt"])
    tok = checkpointing.checkpoint_tokenizer(ck, run["ckpt"])
    x = torch.tensor([[tok.eot] + tok.encoding.encode_ordinary("Now is the winter of our discontent made glorious")])
    with torch.no_grad():
        theirs, ours = hf(x).logits, model.predict(x, tok.eot)
    assert ours.shape == theirs.shape and ours.abs().max() > 0.1 and (theirs - ours).abs().max() <= 1e-5


# ---------------------------------------------------------------------------------------------- --init_from
def hf_folders(tiny, folder):
    """transformers' own randomly initialised Llama (GQA: 4 query heads, 2 key/value heads, a SwiGLU width off
    Meta's rule) and GPT-2, saved with save_pretrained, over the tiny tokenizer's ids."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=tiny["n_vocab"], hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=128))
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=tiny["n_vocab"], n_positions=128,
                                                                n_embd=64, n_layer=2, n_head=2))
    for model, name in ((llama, "llama"), (gpt2, "gpt2")):
        with torch.no_grad():  # weights that matter (HF's init: unit norms, zero biases, std 0.02)
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p)) if p.ndim == 1 else p.mul_(5)
        model.eval().save_pretrained(folder / name)
    return {"llama": (llama, folder / "llama"), "gpt2": (gpt2, folder / "gpt2")}


@pytest.fixture(scope="module")
def hf_models(tiny, tmp_path_factory):
    return hf_folders(tiny, tmp_path_factory.mktemp("hf_models"))


# 1 step at a learning rate of 1e-9: the checkpoint holds the loaded weights (to ~1e-9 each)
UNTRAINED = dict(window_size=None, train_steps=1, lr=1e-9, warmup_steps=0, val_loss_every=0, save_model=True,
                 num_layers=None, num_heads=None, model_dim=None)


def started_from(tiny, tmp_path, spec, **overrides):
    """A 1-step run from --init_from spec: (its checkpoint's model, the run's config)."""
    from gptlab.checkpoint.model_source import load_model
    import train_gpt

    train_gpt.main(tiny_args(tiny, tmp_path, init_from=str(spec), **{**UNTRAINED, **overrides}))
    run_dir = only_run_dir(tmp_path)
    model, _, _ = load_model(os.path.join(run_dir, records.CHECKPOINT_DIR, "step_000001.pt"))
    return model, run_json(run_dir, records.CONFIG_FILE)


def same_logits(tiny, ours, hf):
    x = torch.randint(0, tiny["eot"], (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = hf(x).logits
        mine = ours(x, None)[..., :tiny["n_vocab"]]  # one document from position 0, as HF reads a row
    assert theirs.abs().max() > 0.5 and (mine - theirs).abs().max() <= 1e-5


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_init_from_a_transformers_folder_gives_its_logits(tiny, tmp_path, hf_models, arch):
    hf, folder = hf_models[arch]
    model, config = started_from(tiny, tmp_path / "exps", folder)
    assert (config["arch"], config["init_from"], config["num_layers"], config["model_dim"]) == (arch, str(folder), 2, 64)
    same_logits(tiny, model, hf)


def test_init_from_a_hub_id_through_the_standin_hub(tiny, tmp_path, hf_models):
    """The Hub path: huggingface_hub fetches config.json and model.safetensors from HF_ENDPOINT (the stand-in on
    127.0.0.1) into HF_HOME; with HF_HUB_OFFLINE=1 and the stand-in gone, the same run reads that cache."""
    from hub_standin import HubStandin, hub_env
    from gptlab.checkpoint.model_source import load_model

    hf, folder = hf_models["llama"]
    standin = HubStandin({"tiny-org/tiny-llama": {name: (folder / name).read_bytes()
                                                  for name in ("config.json", "model.safetensors")}}).start()
    env = hub_env(standin, tmp_path / "hf_home")
    try:
        for name in ("online", "offline"):
            argv = ["train_gpt.py"] + tiny_args(tiny, tmp_path / name, init_from="tiny-org/tiny-llama", **UNTRAINED)
            run_script(argv, env_extra=env, check=True)
            model, _, _ = load_model(os.path.join(only_run_dir(tmp_path / name), records.CHECKPOINT_DIR,
                                                  "step_000001.pt"))
            same_logits(tiny, model, hf)
            if name == "online":
                assert {e.get("file") for e in standin.entries()} >= {"config.json", "model.safetensors"}
                standin.stop()
                env = dict(env, HF_HUB_OFFLINE="1")
    finally:
        standin.stop()


@pytest.mark.parametrize("spec, overrides, message", [
    ("llama", dict(arch="modded"), "--arch modded differs from the --init_from checkpoint's llama"),
    ("llama", dict(num_layers=3), "--num_layers 3 differs from the --init_from checkpoint's 2"),
    ("llama", dict(num_kv_heads=4), "--num_kv_heads 4 differs from the --init_from checkpoint's 2"),
    ("gpt2", dict(train_seq_len=256), "has 128 learned positions, fewer than the rows of 256 tokens"),
    ("./no/such/folder", {}, "is neither a folder nor a Hub repository id"),
])
def test_a_contradicting_init_from_is_refused(tiny, tmp_path, hf_models, spec, overrides, message):
    spec = hf_models[spec][1] if spec in hf_models else spec
    run_main_expecting(tiny, tmp_path, [message], **{**UNTRAINED, "init_from": str(spec), **overrides})


def test_init_from_with_another_vocabulary_is_refused(tiny, tmp_path):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "big_vocab"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=tiny["n_vocab"] + 200, n_positions=128, n_embd=32,
                                                         n_layer=1, n_head=2)).save_pretrained(folder)
    name = os.path.splitext(os.path.basename(tiny["tokenizer"]))[0]
    run_main_expecting(tiny, tmp_path, [f"--init_from {folder} has a vocabulary of {tiny['n_vocab'] + 200} ids and the "
                                        f"tokenizer {name} {tiny['n_vocab']}: the model was trained with another "
                                        "tokenizer; pass --tokenizer with its own"], init_from=str(folder), **UNTRAINED)


def test_the_llama_quickstart_preset(capsys):
    import train_gpt

    cfg = train_gpt.main(["--preset", "llama-quickstart", "--dry_run"])
    assert (cfg["arch"], cfg["optimizer"], cfg["model_dim"], cfg["num_kv_heads"], cfg["train_steps"]) == (
        "llama", "adamw", 128, 2, 120)
    assert (cfg["batch_size"], cfg["train_seq_len"], cfg["warmup_steps"], cfg["lr"]) == (4096, 256, 12, 1e-3)
