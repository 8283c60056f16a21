"""The FP8 LM head (model.py's fp8_linear, train_gpt.py's --fp8_head) on CPU: the e4m3 / e5m2 roundings and the
power-of-two scales worked out by hand, the forward and the straight-through backward on hand-picked values, the
pure-torch reference against torch._scaled_mm where this CPU build has it, the model's use of it, and the flag's
device decision with the CUDA capability injected. Its CUDA run: tests/e2e/test_gpu.py."""
import math
import sys

import pytest
import torch

from conftest import REPO
from helpers.tiny_runs import tiny_args
from gptlab.core.errors import UserError
from gptlab.train.config import fp8_supported, resolve_config, resolve_fp8_head
from gptlab.train.flags import parse_flags

sys.path.insert(0, REPO)
import model as arch  # noqa: E402
import train_gpt  # noqa: E402


def test_e4m3_and_e5m2_round_to_nearest_even_as_worked_out_by_hand():
    # e4m3: 3 mantissa bits, steps of 1/8 in [1, 2), 1/4 in [2, 4), 1/2 in [4, 8); e5m2: 2 bits, 1/4 in [1, 2) ...
    values = torch.tensor([1.0625, 1.1875, 3.3, 0.3, -5.5, 448.0])
    e4m3 = arch.to_fp8(values, torch.tensor(1.0), arch.E4M3)
    assert e4m3.dtype == torch.float8_e4m3fn
    # 1.0625 ties 1 and 1.125: even mantissa 1; 1.1875 ties 1.125 and 1.25: 1.25; 3.3 -> 3.25; 0.3 = 1.2 x 2^-2 ->
    # 1.25 x 2^-2; -5.5 exact; 448 the largest e4m3fn value
    assert e4m3.float().tolist() == [1.0, 1.25, 3.25, 0.3125, -5.5, 448.0]
    e5m2 = arch.to_fp8(torch.tensor([1.125, 1.1875, 3.3, 0.1]), torch.tensor(1.0), arch.E5M2)
    # 1.125 ties 1 and 1.25: 1; 1.1875 -> 1.25; 3.3 in steps of 1/2 -> 3.5; 0.1 = 1.6 x 2^-4 -> 1.5 x 2^-4
    assert e5m2.dtype == torch.float8_e5m2 and e5m2.float().tolist() == [1.0, 1.25, 3.5, 0.09375]
    # a scale divides first: 3.3 / 2^-7 = 422.4 -> 416 (steps of 32 in [256, 512)) = 3.25 x 2^7
    assert arch.to_fp8(torch.tensor([3.3]), torch.tensor(2.0 ** -7), arch.E4M3).float().item() == 416.0


def test_scales_are_the_powers_of_two_that_fit_the_largest_value():
    # 3.3 / 448 = 2^-7.08 -> 2^-7 (3.3 x 2^7 = 422 <= 448); 3.3 / 57344 = 2^-14.08 -> 2^-14
    assert arch.fp8_scale(torch.tensor([3.3, -1.0]), arch.E4M3).item() == 2.0 ** -7
    assert arch.fp8_scale(torch.tensor([-3.3, 1.0]), arch.E5M2).item() == 2.0 ** -14
    assert arch.fp8_scale(torch.tensor([448.0]), arch.E4M3).item() == 1.0  # exactly the largest: no halving
    assert arch.fp8_scale(torch.tensor([449.0]), arch.E4M3).item() == 2.0
    zero_scale = arch.fp8_scale(torch.zeros(4), arch.E4M3)  # the zero-initialised head
    assert 0 < zero_scale.item() < 1e-20 and arch.to_fp8(torch.zeros(4), zero_scale, arch.E4M3).float().eq(0).all()


def test_fp8_matmul_forward_and_backward_on_values_worked_out_by_hand():
    x = torch.tensor([[1.0625, 3.3]], requires_grad=True)  # scale 2^-7: quantised to [1.0, 3.25]
    w = torch.tensor([[1.0, 1.0], [2.0, -0.3]], requires_grad=True)  # scale 2^-7: -0.3 x 128 = -38.4 -> -40
    out = arch.fp8_linear(x, w)
    assert out.dtype == torch.bfloat16
    # [1 + 3.25, 2 - 3.25 x 0.3125] = [4.25, 0.984375] (exact in bfloat16)
    assert out.float().tolist() == [[4.25, 0.984375]]
    # gradient [1, 0.1] in e5m2, scale 2^-15: 0.1 x 2^15 = 3276.8 -> 3072 (steps of 512) = 0.09375
    out.backward(torch.tensor([[1.0, 0.1]], dtype=torch.bfloat16))
    # x: g @ w_q = [1 + 0.09375 x 2, 1 - 0.09375 x 0.3125] = [1.1875, 0.970703125], the latter a bfloat16 tie
    # (248.5 / 256) -> 0.96875; w: g^T x_q in float32
    assert x.grad.dtype == torch.float32 and x.grad.tolist() == [[1.1875, 0.96875]]
    assert w.grad.dtype == torch.float32 and w.grad.tolist() == [[1.0, 3.25], [0.09375, 0.3046875]]


def test_fp8_matmul_of_random_tensors_is_the_quantised_product():
    """Reference by hand in float64: each operand rounded to e4m3 at its power-of-two scale (the rounding is
    then the format's own, so .to() at scale 1 after an exact scaling), multiplied; the gradient in e5m2."""
    torch.manual_seed(0)
    x = torch.randn(64, 48, requires_grad=True)
    w = (torch.randn(32, 48) * 0.02).requires_grad_()
    g = torch.randn(64, 32) * 1e-6  # a gradient divided by the batch, as train_gpt.py's: the scale follows it

    def rounded(t, dtype):
        s = 2.0 ** torch.ceil(torch.log2(t.abs().max().double() / torch.finfo(dtype).max))
        return (t.double() / s).float().to(dtype).double() * s

    def close(ours, reference, rtol):  # float32 sums beside float64 ones: an absolute error of their size too
        return torch.allclose(ours.double(), reference, rtol=rtol, atol=1e-6 * reference.abs().max().item())

    out = arch.fp8_linear(x, w)
    reference = rounded(x.detach(), arch.E4M3) @ rounded(w.detach(), arch.E4M3).T
    assert close(out, reference, 2 ** -8)  # and bfloat16's rounding of the output
    out.backward(g.bfloat16())
    g_q = rounded(g.bfloat16().float(), arch.E5M2)
    assert close(x.grad, g_q @ rounded(w.detach(), arch.E4M3), 2 ** -8)
    assert close(w.grad, g_q.T @ rounded(x.detach(), arch.E4M3), 1e-6)
    assert (g_q != 0).float().mean() > 0.99  # the gradient kept its values: no fixed scale flushed it to zero


def test_the_reference_product_is_torchs_scaled_mm_where_this_cpu_has_it():
    torch.manual_seed(1)
    a, b = torch.randn(32, 64), torch.randn(48, 64) * 3
    sa, sb = arch.fp8_scale(a, arch.E4M3), arch.fp8_scale(b, arch.E4M3)
    a8, b8 = arch.to_fp8(a, sa, arch.E4M3), arch.to_fp8(b, sb, arch.E4M3)
    try:
        torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    except (RuntimeError, NotImplementedError) as err:
        pytest.skip(f"this torch has no CPU _scaled_mm ({err})")
    for out_dtype in (torch.float32, torch.bfloat16):
        ours = arch.scaled_mm(a8, b8.t(), sa, sb, out_dtype)
        theirs = torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype)
        assert ours.dtype == out_dtype and torch.allclose(ours.float(), theirs.float(), rtol=1e-6, atol=1e-5)


def small_model():
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=200, num_layers=2, num_heads=2, head_dim=16, model_dim=32,
                                    num_val_emb=1, max_seq_len=128))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def test_the_model_uses_the_fp8_head_in_training_forwards_only():
    model = small_model()
    idx = torch.randint(0, 200, (2, 128))
    masks = arch.build_attention_masks(idx, 199, 1, 1, use_flex=False)
    plain_loss = model(idx, masks, idx)
    plain_loss.backward()
    plain_grad = model.lm_head.weight.grad.clone()
    model.zero_grad()
    model.fp8_head = True
    fp8_loss = model(idx, masks, idx)
    fp8_loss.backward()
    assert fp8_loss != plain_loss and torch.allclose(fp8_loss, plain_loss, rtol=2e-3)
    cos = torch.nn.functional.cosine_similarity(model.lm_head.weight.grad.flatten(), plain_grad.flatten(), dim=0)
    assert 0.99 < cos < 1
    model.eval()  # evaluation, HellaSwag, sampling: the plain head, bit for bit
    with torch.no_grad():
        assert torch.equal(model(idx, masks, idx), plain_loss.detach())


def test_fp8_loss_chunks_keep_whole_16_row_tiles(monkeypatch):
    """The eager loss runs in row chunks; _scaled_mm's weight gradient reduces over the rows, which it wants in
    multiples of 16: with the FP8 head the chunks round down to one."""
    model = small_model()
    model.fp8_head = True
    shapes = []
    real = arch.scaled_mm

    def spy(a, b, *args, **kwargs):
        shapes.append((tuple(a.shape), tuple(b.shape)))
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(arch, "scaled_mm", spy)
    monkeypatch.setattr(arch, "LOSS_CHUNK_ELEMENTS", 40 * 256)  # 40 rows of the padded vocab: 32 with FP8
    x = torch.randn(2, 128, 32, requires_grad=True)
    targets = torch.randint(0, 200, (2, 128))
    model.cross_entropy_sum(x, targets).backward()
    assert shapes and all(a[1] % 16 == 0 and b[0] % 16 == 0 and b[1] % 16 == 0 for a, b in shapes)
    assert {a[0] for a, _ in shapes if a[1] == 32} == {32}  # forwards: 8 chunks of 32 rows


def test_a_compiled_model_traces_the_fp8_head():
    model = small_model()
    model.fp8_head = True
    idx = torch.randint(0, 200, (1, 128))
    masks = arch.build_attention_masks(idx, 199, 1, 1, use_flex=False)
    eager = model(idx, masks, idx)
    eager.backward()
    eager_grad = model.lm_head.weight.grad.clone()
    model.zero_grad()
    compiled = torch.compile(model, dynamic=False, fullgraph=True)(idx, masks, idx)
    compiled.backward()
    assert torch.allclose(compiled, eager, rtol=1e-4)
    assert torch.allclose(model.lm_head.weight.grad, eager_grad, rtol=1e-3, atol=1e-3 * eager_grad.abs().max())


@pytest.mark.parametrize("capability, supported", [((7, 0), False), ((8, 0), False), ((8, 6), False),
                                                   ((8, 9), True), ((9, 0), True), ((10, 0), True),
                                                   ((12, 0), True)])
def test_fp8_is_decided_by_the_cuda_capability(capability, supported):
    cuda = torch.device("cuda", 0)
    assert fp8_supported(cuda, capability) is supported
    assert fp8_supported(torch.device("cpu"), capability) is False
    assert resolve_fp8_head("auto", cuda, arch, 768, capability) is supported  # the record26 preset
    if supported:
        assert resolve_fp8_head(True, cuda, arch, 768, capability) is True
    else:
        with pytest.raises(UserError, match=r"compute capability 8\.9 or later .*this is cuda:0 has compute "
                                            rf"capability {capability[0]}\.{capability[1]}: pass --no-fp8_head"):
            resolve_fp8_head(True, cuda, arch, 768, capability)
    assert resolve_fp8_head(False, cuda, arch, 768, capability) is False


def test_the_record26_preset_turns_fp8_on_where_the_gpu_has_it(monkeypatch):
    for capability, expected in (((9, 0), True), ((8, 0), False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        args, _ = parse_flags(train_gpt.build_parser, ["--preset", "record26"], presets=train_gpt.PRESETS)
        assert args.fp8_head == "auto"
        cfg = resolve_config(args, 8, torch.device("cuda", 0), arch)
        assert cfg.fp8_head is expected
    args, _ = parse_flags(train_gpt.build_parser, ["--preset", "gpt2-small"], presets=train_gpt.PRESETS)
    assert resolve_config(args, 8, torch.device("cuda", 0), arch).fp8_head is False  # off by default


def test_fp8_head_on_a_cpu_is_one_clear_error():
    with pytest.raises(UserError) as info:
        train_gpt.main(["--preset", "quickstart", "--fp8_head", "--device", "cpu", "--dry_run"])
    assert str(info.value) == ("--fp8_head needs a CUDA GPU of compute capability 8.9 or later (FP8 matmuls: Ada, "
                               "Hopper and later); this is a CPU: pass --no-fp8_head")
    cfg = train_gpt.main(["--preset", "record26", "--device", "cpu", "--dry_run"])  # the preset: off on a CPU
    assert cfg["fp8_head"] is False


def test_a_model_source_without_an_fp8_head_refuses_the_flag():
    class OldModel:  # a checkpoint's older model.py: GPT without fp8_head
        GPT = type("GPT", (), {})

    with pytest.raises(UserError, match="has no FP8 head; pass --no-fp8_head"):
        resolve_fp8_head(True, torch.device("cuda", 0), OldModel, 768, (9, 0))
    assert resolve_fp8_head("auto", torch.device("cuda", 0), OldModel, 768, (9, 0)) is False


def test_a_model_width_off_the_fp8_tiles_refuses_the_flag_and_turns_auto_off():
    with pytest.raises(UserError, match="--fp8_head needs --model_dim a multiple of 16 .*got 200"):
        resolve_fp8_head(True, torch.device("cuda", 0), arch, 200, (9, 0))
    assert resolve_fp8_head("auto", torch.device("cuda", 0), arch, 200, (9, 0)) is False
    assert resolve_fp8_head("auto", torch.device("cuda", 0), arch, 208, (9, 0)) is True


def test_train_gpt_trains_with_the_fp8_head_where_the_device_has_it(tiny, tmp_path, monkeypatch):
    """A CPU standing in for an FP8 GPU (the reference product in place of _scaled_mm): --fp8_head reaches the
    model, every training step's head goes through FP8 and the run finishes; evaluations keep the plain head."""
    from gptlab.train import config

    monkeypatch.setattr(config, "fp8_supported", lambda device, capability=None: True)
    calls = []
    real = arch.scaled_mm
    monkeypatch.setattr(arch, "scaled_mm", lambda *args, **kwargs: calls.append(args[-1]) or real(*args, **kwargs))
    results = train_gpt.main(tiny_args(tiny, tmp_path, fp8_head=True, train_steps=3, val_loss_every=1))
    # per step: 2 micro-batches, each one forward (bfloat16 out) and two backward products (bfloat16, float32)
    assert calls == [torch.bfloat16, torch.bfloat16, torch.float32] * 2 * 3
    assert results["steps"] == 3 and math.isfinite(results["final_val_loss"])
