"""Round-4 mutants (issue 40, bench/mutants.py) that need several processes or an exported Hugging Face folder.
Expectations: the random draws each rank recorded itself before saving; the checkpoint's own model run over whole
sequences (no cache) for the exported model's beam search."""
import json
import os

import pytest
import torch

from conftest import FINEWEB_150, REPO, SHARED_DATA, free_port, run_script

pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.usefixtures("one_torch_thread")]


def test_a_sharded_checkpoint_gives_each_rank_back_its_own_random_generators(tmp_path):
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()),
                os.path.join(REPO, "tests", "helpers", "sharded_rng_ranks.py"), str(tmp_path)], check=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["expected"] != ranks[1]["expected"]  # the ranks' generators differ: which one comes back shows
    for r, seen in enumerate(ranks):
        assert seen["after_resume"] == seen["expected"], r


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(transformers model, checkpoint logits_fn, encoding) of a random 6-layer checkpoint exported by the CLI."""
    transformers = pytest.importorskip("transformers")
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import read_docs, save_tiny_tokenizer
    from gptlab.checkpoint.model_source import checkpoint_logits_fn

    folder = tmp_path_factory.mktemp("hf_r4")
    tok_path = save_tiny_tokenizer(str(folder / "tok_v556.pkl"), read_docs(FINEWEB_150)[:40], 300)
    ckpt_path = str(folder / "step_000010.pt")
    save_random_checkpoint(ckpt_path, tok_path, window_size=256)
    out_dir = str(folder / "hf_model")
    run_script(["export_hf.py", ckpt_path, out_dir], check=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(out_dir, trust_remote_code=True).float().eval()
    logits_fn, enc, _ = checkpoint_logits_fn(ckpt_path)
    return model, logits_fn, enc


def log_probs(logits_fn, tokens):
    with torch.no_grad():
        return torch.log_softmax(logits_fn(torch.tensor([tokens]))[0].double(), dim=-1)


def test_a_beam_chosen_twice_gets_its_own_copy_of_the_cache(exported):
    # reorder the cache of one prompt to [0, 0] (both beams continue row 0), feed each beam another token: each
    # beam's logits are those of the checkpoint's model over its whole sequence, without any cache
    model, logits_fn, enc = exported
    prompt = [enc.eot_token] + enc.encode_ordinary("The water cycle")
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        cache = out.cache if hasattr(out, "cache") else out.past_key_values
        cache = model._reorder_cache(cache, torch.tensor([0, 0]))
        nxt = torch.tensor([[11], [200]])
        logits = model(nxt, **{"past_key_values": cache, "use_cache": True}).logits
    for b in range(2):
        want = logits_fn(torch.tensor([prompt + [int(nxt[b, 0])]]))[0, -1]
        assert torch.allclose(logits[b, -1], want, atol=1e-4), b


def test_beam_search_scores_are_the_models_log_probabilities_after_beams_share_a_parent(exported):
    # two beams, length penalty 0: each returned sequence's score is the sum of its new tokens' log-probabilities
    # under the checkpoint's model run over the whole sequence (no cache). Among these prompts, some give two
    # beams that share their first new token (one parent chosen twice) and then part
    model, logits_fn, enc = exported
    eot, shared = enc.eot_token, 0
    for text in ["The water cycle", "Once upon a time", "In this lesson", "Students learn", "The history of"]:
        prompt = [eot] + enc.encode_ordinary(text)
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 max_new_tokens=6, num_beams=2, num_return_sequences=2, do_sample=False,
                                 length_penalty=0.0, early_stopping=True, output_scores=True,
                                 return_dict_in_generate=True)
        beams = [seq[len(prompt):].tolist() for seq in out.sequences]
        for beam, score in zip(beams, out.sequences_scores.tolist()):
            new = beam[:beam.index(eot) + 1] if eot in beam else beam
            lp = log_probs(logits_fn, prompt + new)
            want = sum(float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(new))
            assert score == pytest.approx(want, abs=1e-3), (text, beam)
        shared += beams[0][0] == beams[1][0] and beams[0] != beams[1]
    assert shared >= 1
