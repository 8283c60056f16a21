"""--device_batch_size auto's pieces that run on the CPU: the probe's inputs compile into training's graph, the
micro-batch search from an estimate (one measurement when the estimate is good), the estimate itself, and the
allocator setting made before CUDA starts."""
import os

import numpy as np
import pytest
import torch

import gpt2 as gpt2_module
import model as arch
from gptlab.core.errors import UserError
from gptlab.train import environment
from gptlab.train.batching import choose_micro_batch, micro_batch_candidates, probe_batch

GiB, MiB = 2**30, 2**20


def test_probe_inputs_and_the_loaders_batches_share_one_compiled_graph():
    """dynamic=False guards on strides: views of one (B, T + 1) tensor (stride T + 1) would compile a second graph
    for the loader's contiguous rows. The control call shows the guard is real."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    model = arch.GPT(arch.GPTConfig(vocab_size=128, num_layers=2, num_heads=2, model_dim=32, num_val_emb=1))
    counter = CompileCounter()
    fwd = torch.compile(model, backend=counter, dynamic=False)
    windows = arch.window_pair(1)
    x, y = probe_batch(2 * 128, 128, model.vocab_size, 0, "cpu")
    assert x.shape == y.shape == (2, 128) and x.is_contiguous() and y.is_contiguous()
    assert (x[:, 0] == 0).all() and torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    fwd(x, model.attention_masks(x, 0, windows), y).backward()
    rows = np.random.default_rng(1).integers(1, 128, (2, 129)).astype(np.int64)
    rows[:, 0] = 0
    lx, ly = torch.from_numpy(np.ascontiguousarray(rows[:, :-1])), torch.from_numpy(np.ascontiguousarray(rows[:, 1:]))
    fwd(lx, model.attention_masks(lx, 0, windows), ly).backward()  # the loader's layout (gptlab/dataset/loader.py)
    assert counter.frame_count == 1
    views = torch.from_numpy(rows)
    fwd(views[:, :-1], model.attention_masks(views[:, :-1], 0, windows), views[:, 1:]).backward()
    assert counter.frame_count == 2  # the old probe's layout: a graph of its own
    torch._dynamo.reset()


def test_the_probe_leaves_trainings_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    probe_batch(4 * 16, 16, 100, 0, "cpu")
    assert torch.equal(torch.rand(3), expected)


def test_a_good_estimate_means_one_measurement_and_a_bad_one_is_corrected():
    """GPT-2 small's share on one GPU (256 rows of 2048); 10 GiB of weights and gradients, 1 MiB of activations per
    token; budget 80 GiB x 0.9 - 6 GiB = 66 GiB, so 56 GiB of activations: 32,768 tokens is the largest that fits."""
    candidates = micro_batch_candidates(524288, 2048)
    calls = []

    def measure(tokens):
        calls.append(tokens)
        return 10 * GiB + tokens * MiB

    def search(guess, measure=measure):
        calls.clear()
        return choose_micro_batch(candidates, measure, 80 * GiB, fixed_bytes=10 * GiB, extra_bytes=6 * GiB,
                                  per_token_guess=guess)[0], list(calls)

    assert search(1 * MiB) == (32768, [32768])  # exact: the one measurement is training's size
    assert search(1.5 * MiB) == (32768, [32768])  # cautious: 32,768 still predicted to fit (48 GiB)
    # too low: 0.5 MiB predicts 65,536 fits (32 GiB); it measures 74 GiB, which gives 1 MiB per token exactly
    assert search(0.5 * MiB) == (32768, [65536, 32768])

    def oom_above_16k(tokens):
        calls.append(tokens)
        if tokens > 16384:
            raise MemoryError
        return 10 * GiB + tokens * MiB

    # out of memory at 32,768: at least (66 - 10) GiB / 32,768 = 1.75 MiB per token, so 16,384 (38 GiB) is next
    assert search(1 * MiB, oom_above_16k) == (16384, [32768, 16384])
    with pytest.raises(Exception, match="even a micro-batch of 2048 tokens does not fit"):
        choose_micro_batch(candidates, measure, 11 * GiB, fixed_bytes=10 * GiB, per_token_guess=1 * MiB)


def test_a_peak_over_budget_replaces_the_guess_for_the_next_prediction():
    """24 rows of 2048; budget 40 GiB x 0.9 - 6 GiB = 30 GiB, so 20 GiB of activations: 16,384 tokens fits. A guess
    of 1/4 MiB per token predicts 49,152 fits (12 GiB); it measures 58 GiB, i.e. 1 MiB per token, which rules out
    24,576 (34 GiB) without measuring it and goes straight to 16,384 (26 GiB)."""
    calls = []

    def measure(tokens):
        calls.append(tokens)
        return 10 * GiB + tokens * MiB

    tokens, tried = choose_micro_batch(micro_batch_candidates(24 * 2048, 2048), measure, 40 * GiB,
                                       fixed_bytes=10 * GiB, extra_bytes=6 * GiB, per_token_guess=MiB / 4)
    assert tokens == 16384 and calls == [49152, 16384] and tried == [(49152, 58 * GiB), (16384, 26 * GiB)]


@pytest.mark.parametrize("module", [arch, gpt2_module], ids=["modded", "gpt2"])
def test_the_activation_estimate_is_the_papers_34_bytes_per_width_per_layer_plus_the_logits(module):
    # each architecture module owns its estimate (an edit updates it beside the code it counts)
    def guess(mlp_ratio=4.0, act_bytes=2):
        config = module.GPTConfig(vocab_size=50257, num_layers=12, num_heads=12, model_dim=768, mlp_ratio=mlp_ratio)
        return module.activation_bytes_per_token(config, 50304, act_bytes)
    # GPT-2 small, bf16: 12 x 34 x 768 = 313,344 bytes in the blocks, 50,304 x (2 + 8) = 503,040 for the logits
    assert guess() == 12 * 34 * 768 + 50304 * 10
    # float32 activations double the blocks' share and add 2 bytes per logit; an 8x MLP adds 16 x 768 per layer
    assert guess(act_bytes=4) == 12 * 68 * 768 + 50304 * 12
    assert guess(mlp_ratio=8) == 12 * 50 * 768 + 50304 * 10


def test_llamas_activation_guess_counts_swiglus_three_hidden_wide_tensors():
    import llama

    def guess(ffn_dim_multiplier, act_bytes=2):
        config = llama.GPTConfig(vocab_size=50257, num_layers=12, num_heads=12, num_kv_heads=4, model_dim=768,
                                 ffn_dim_multiplier=ffn_dim_multiplier)
        return llama.activation_bytes_per_token(config, 50304, act_bytes)
    # hidden int(8 x 768 / 3) = 2,048 (a multiple of 256): 3 tensors of 2,048 = GPT-2's 2 of 3,072, so the MLP's 16
    # of the paper's 34 bytes x 768 stay 16: 12 x 34 x 768 + 50,304 x 10
    assert guess(1.0) == 12 * 34 * 768 + 50304 * 10
    # x 1.5: hidden 3,072, the MLP's share 16 x 1.5 x 3,072 / 3,072 = 24: 12 x 42 x 768; float32 doubles the blocks
    assert guess(1.5) == 12 * 42 * 768 + 50304 * 10
    assert guess(1.5, act_bytes=4) == 12 * 84 * 768 + 50304 * 12


def test_expandable_segments_unless_the_user_chose_an_allocator_setting():
    env = {}
    assert environment.set_allocator_defaults(env) == "expandable_segments:True"
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    theirs = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    assert environment.set_allocator_defaults(theirs) is None and theirs == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    newer = {"PYTORCH_ALLOC_CONF": "backend:cudaMallocAsync"}
    assert environment.set_allocator_defaults(newer) is None and "PYTORCH_CUDA_ALLOC_CONF" not in newer


def test_train_gpt_sets_the_allocator_before_anything_else(monkeypatch):
    import train_gpt

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    with pytest.raises(UserError):  # a bad flag: main stops in parse_flags, after the allocator call
        train_gpt.main(["--no_such_flag"])
    assert os.environ.get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
