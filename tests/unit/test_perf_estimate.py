"""gptlab/train/perf_estimate.py: the analytical step time and MFU bench_train.py prints beside the measured MFU.
Every expected number below is worked out by hand in the comments, for one tiny model."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import model as arch
import train_gpt
from gptlab.train import perf_estimate as pe

# The tiny model: 2 layers, model_dim 64, 2 heads of 32, MLP 256, vocabulary 128 (already a multiple of 128),
# one value embedding. Its parameters (elements, float32):
#   embed 128x64 = 8,192; value embedding 128x64 = 8,192; lm_head 128x64 = 8,192
#   per layer: qkv_w 3x64x64 = 12,288, attention c_proj 64x64 = 4,096, c_fc 256x64 = 16,384,
#              MLP c_proj 64x256 = 16,384 (matrices: 49,152); lambdas 2 + 2 (scalars)
#   skip_weights: 1 (num_layers // 2)
#   multiplied (matmul) weights: 2 x 49,152 + 8,192 = 106,496; all: 106,496 + 2 x 8,192 + 2 x 4 + 1 = 122,889
TINY = dict(vocab_size=128, num_layers=2, num_heads=2, model_dim=64, num_val_emb=1, window_size=128)
# round constants, so the hand arithmetic stays readable (not a real GPU)
HW = dict(bf16_tflops=1.0, fp8_tflops=2.0, fp32_tflops=0.5, hbm_bytes_s=1e11, link_bytes_s=1e10, memory_gib=1,
          matmul_efficiency=0.5, attention_efficiency=0.25, hbm_efficiency=0.5, link_efficiency=0.5)
# pass counts: distinct primes, so a term dropped or counted twice changes the total
PASSES = dict(residual=3, attention_inputs=5, attention_output=7, mlp_hidden=11, embeddings=13, logits=17)
MATMUL_FLOPS_1024 = 654_311_424  # 6 x 1,024 tokens x 106,496 multiplied weights


def tiny(world_size=1, fp8_head=False):
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(**TINY))
    model.fp8_head = fp8_head
    return model, train_gpt.build_optimizers(model, 0, world_size)


def test_tiny_model_has_the_hand_counted_parameters():
    model, _ = tiny()
    assert sum(p.numel() for p in model.parameters()) == 122_889
    assert arch.training_flops(model, 1024, {"long": 0, "short": 0})[0] == MATMUL_FLOPS_1024


def test_newton_schulz_flops_match_torch_flop_counter_on_train_gpts_iteration():
    # torch's own FLOP counter on the very function Muon runs: an independent count of its matmuls
    for shape in [(48, 80), (80, 48), (3, 32, 32)]:
        with FlopCounterMode(display=False) as counter:
            train_gpt.zeropower_via_newtonschulz5(torch.randn(shape), steps=5)
        assert pe.newton_schulz_flops(shape, 5) == counter.get_total_flops()
    # by hand, (256, 64): m = 64, n = 256: 4 m^2 n + 2 m^3 = 4,194,304 + 524,288 = 4,718,592 per iteration
    assert pe.newton_schulz_flops((256, 64), 5) == 5 * 4_718_592


def test_memory_bound_bytes_of_the_tiny_model_by_hand():
    model, _ = tiny()
    got = pe.memory_bound_bytes(model, tokens=1024, micro_batches=2, activation_bytes=2, compiled=True,
                                passes=PASSES)
    # per token, forward: layers x 2 bytes x (3 x 64 residual + 5 x 192 q/k/v + 7 x 64 attention output
    #   + 11 x 256 MLP hidden) = 2 x 2 x (192 + 960 + 448 + 2,816) = 4 x 4,416 = 17,664
    #   + embeddings 2 bytes x 13 x (64 + 64) = 3,328 → 20,992; forward + backward (2x): x 3
    assert got["activations"] == 1024 * 20_992 * 3 == 64_487_424
    # logits: 1,024 tokens x 128 x 17 passes x 2 bytes (compiled: the activation dtype) x 3 = 13,369,344
    assert got["logits"] == 13_369_344
    # per micro-batch: autocast copies of the 106,496 multiplied weights (read 4 + write 2 bytes) = 638,976, x 2;
    # gradients of all 122,889 parameters (4 bytes = 491,556): written once, then read twice and written once
    # (1 + 3) = 1,966,224; total 1,277,952 + 1,966,224 = 3,244,176
    assert got["parameters"] == 3_244_176
    # eager: the logits in float32 (4 bytes): twice the compiled 13,369,344
    eager = pe.memory_bound_bytes(model, 1024, 2, 2, compiled=False, passes=PASSES)
    assert eager["logits"] == 26_738_688 and eager["activations"] == got["activations"]
    # float32 training: no autocast copies; gradients as before: 1,966,224; activations twice (4 bytes)
    fp32 = pe.memory_bound_bytes(model, 1024, 2, 4, compiled=True, passes=PASSES)
    assert fp32["parameters"] == 1_966_224 and fp32["activations"] == 2 * got["activations"]


def test_widths_and_passes_come_from_the_models_own_module():
    """An architecture's memory traffic is stated next to it (gpt2.py's MEMORY_PASSES and memory_widths), not here:
    a GPT-2 of 2 layers x 64 with an MLP of 2 x 64 = 128 (one flag, mlp_ratio, that model.py reads too)."""
    import gpt2

    torch.manual_seed(0)
    model = gpt2.GPT(gpt2.GPTConfig(vocab_size=128, num_layers=2, num_heads=2, model_dim=64, mlp_ratio=2.0,
                                    max_seq_len=64))
    got = pe.memory_bound_bytes(model, tokens=1024, micro_batches=1, activation_bytes=2, compiled=True,
                                passes=PASSES)
    # per token: 2 layers x 2 bytes x (3 x 64 + 5 x 192 + 7 x 64 + 11 x 128) = 4 x 3,008 = 12,032, plus two
    # nn.Embedding tables (tokens, positions) of 64: 2 x 13 x 128 = 3,328 → 15,360; forward + backward: x 3
    assert got["activations"] == 1024 * 15_360 * 3 == 47_185_920
    # gpt2.py's own compiled row (residual 10, q/k/v 2, output 2, MLP 2, embeddings 2):
    # 4 x (640 + 384 + 128 + 256) = 5,632, plus 2 x 2 x 128 = 512 → 6,144 per token, x 3
    own = pe.memory_bound_bytes(model, tokens=1024, micro_batches=1, activation_bytes=2, compiled=True)
    assert own["activations"] == 1024 * 6_144 * 3 == 18_874_368


def test_llamas_grouped_query_widths_come_from_llama_py():
    """Llama: q has the query heads' width, k and v the kv heads'; the MLP's is SwiGLU's hidden width."""
    import llama

    torch.manual_seed(0)
    model = llama.GPT(llama.GPTConfig(vocab_size=128, num_layers=2, num_heads=4, num_kv_heads=2, model_dim=64,
                                      multiple_of=32))
    got = pe.memory_bound_bytes(model, tokens=1024, micro_batches=1, activation_bytes=2, compiled=True,
                                passes=PASSES)
    # head_dim 16; q + k + v = (4 + 2 x 2) x 16 = 128; output 4 x 16 = 64; SwiGLU: int(8 x 64 / 3) = 170, rounded
    # up to a multiple of 32: 192. Per token: 2 layers x 2 bytes x (3 x 64 + 5 x 128 + 7 x 64 + 11 x 192)
    # = 4 x 3,392 = 13,568, plus one nn.Embedding of 64: 2 x 13 x 64 = 1,664 → 15,232; forward + backward: x 3
    assert got["activations"] == 1024 * 15_232 * 3 == 46_792_704


def test_optimizer_and_communication_of_the_tiny_model_by_hand():
    _, one = tiny(world_size=1)
    # Newton-Schulz per layer (5 iterations, 4 m^2 n + 2 m^3 per matrix): qkv_w 3 matrices 64x64: 3 x 5 x
    # 1,572,864 = 23,592,960; c_proj 64x64: 7,864,320; c_fc 256x64 and 64x256: 23,592,960 each
    # → 78,643,200 per layer, 157,286,400 for two
    # elementwise: Muon 98,304 elements x 4 bytes x 12 passes = 4,718,592; Adam (embed, value embedding, head:
    # 24,576, plus 9 scalars = 24,585 elements) x 4 bytes x 7 passes = 688,380
    assert pe.optimizer_work(one, 1) == (157_286_400, 4_718_592 + 688_380)
    assert pe.communication_bytes(one, 1) == 0
    _, two = tiny(world_size=2)
    # two ranks: each shape has 2 matrices, one per rank: half the Newton-Schulz work and Muon bytes; Adam sharded
    assert pe.optimizer_work(two, 2) == (78_643_200, 2_359_296 + 344_190)
    # sent per rank: reduce-scatter + all-gather, each (world_size - 1) = 1 slot of the buffer:
    # Muon, one matrix per shape: (12,288 + 4,096 + 16,384 + 16,384) x 4 = 196,608;
    # Adam flats per group: head 8,192 / 2 = 4,096 elements, embeddings 16,384 / 2 = 8,192, scalars ceil(9 / 2) = 5
    # → 12,293 x 4 = 49,172; total 245,780 x 2 collectives = 491,560
    assert pe.communication_bytes(two, 2) == 491_560


def step_by_hand(world_size):
    """The estimate's terms for the tiny model, 1,024 tokens per rank in 2 micro-batches, compiled, bf16."""
    matmul = MATMUL_FLOPS_1024 / 0.5e12          # 1.308622848 ms at 0.5 x 1 TFLOP/s
    attention = 1e8 / 0.25e12                    # 0.4 ms: 1e8 attention FLOPs per rank at 0.25 x 1 TFLOP/s
    memory = (64_487_424 + 13_369_344 + 3_244_176) / 0.5e11  # 81,100,944 bytes: 1.62201888 ms
    if world_size == 1:
        optimizer = 157_286_400 / 0.5e12 + (4_718_592 + 688_380) / 0.5e11   # 0.42271224 ms
        communication = 0.0
    else:
        optimizer = 78_643_200 / 0.5e12 + (2_359_296 + 344_190) / 0.5e11    # 0.21135612 ms
        communication = 491_560 / 0.5e10                                     # 0.098312 ms
    return dict(matmul=matmul, attention=attention, memory_bound=memory, optimizer=optimizer,
                communication=communication)


@pytest.mark.parametrize("world_size", [1, 2])
def test_estimate_step_sums_the_hand_computed_terms(world_size):
    model, opts = tiny(world_size)
    est = pe.estimate_step(model, opts, HW, tokens=1024 * world_size, micro_batches=2, world_size=world_size,
                           matmul_flops=MATMUL_FLOPS_1024 * world_size, attention_flops=1e8 * world_size,
                           activation_bytes=2, compiled=True, passes=PASSES)
    expect = step_by_hand(world_size)
    for term, seconds in expect.items():
        assert est["seconds"][term] == pytest.approx(seconds, rel=1e-12), term
    step = sum(expect.values())  # one rank: 3.753353968 ms; two: 3.640309848 ms
    assert step == pytest.approx({1: 3.753353968e-3, 2: 3.640309848e-3}[world_size], rel=1e-9)
    assert est["step_time_s"] == pytest.approx(step, rel=1e-12)
    # MFU: per-rank model FLOPs (654,311,424 + 1e8) / (step x 1e12): 20.1% on one rank
    assert est["mfu"] == pytest.approx((MATMUL_FLOPS_1024 + 1e8) / (step * 1e12), rel=1e-12)
    if world_size == 1:
        assert round(100 * est["mfu"], 1) == 20.1
        # shares: 1.3086 / 3.7534 = 35%, 0.4 / 3.7534 = 11%, 1.6220 / 3.7534 = 43%, 0.4227 / 3.7534 = 11%, 0%
        assert pe.describe(est) == ("20.1%: matmul 35%, attention 11%, memory-bound 43%, optimizer 11%, "
                                    "communication 0% of the estimated step")


def test_fp8_head_runs_the_head_matmul_at_the_fp8_rate_and_adds_its_casts():
    model, opts = tiny(fp8_head=True)
    est = pe.estimate_step(model, opts, HW, tokens=1024, micro_batches=2, world_size=1,
                           matmul_flops=MATMUL_FLOPS_1024, attention_flops=1e8, activation_bytes=2, compiled=True,
                           passes=PASSES)
    # the head: 6 x 1,024 x 8,192 = 50,331,648 FLOPs at 0.5 x 2 TFLOP/s (0.050331648 ms); the rest,
    # 603,979,776, at 0.5 x 1 TFLOP/s (1.207959552 ms)
    assert est["seconds"]["matmul"] == pytest.approx(1.258291200e-3, rel=1e-12)
    # the gradient's scale and cast: 1,024 x 128 logits x (2 reads x 2 bytes + 3 bytes) = 917,504 more bytes
    assert est["work"]["memory_bytes"]["logits"] == 13_369_344 + 917_504


def test_hardware_constants_are_the_datasheets_and_cpu_has_none():
    h100 = pe.hardware_constants("NVIDIA H100 80GB HBM3")  # H100 SXM: 989.4 TFLOP/s bf16, 3.35 TB/s HBM3
    assert (h100["bf16_tflops"], h100["hbm_bytes_s"], h100["link_bytes_s"]) == (989.4, 3.35e12, 450e9)
    assert pe.hardware_constants("NVIDIA H200")["hbm_bytes_s"] == 4.8e12  # H200: 4.8 TB/s HBM3e
    assert pe.hardware_constants("NVIDIA H100 PCIe")["bf16_tflops"] == 756.0
    assert pe.hardware_constants(None) is None and pe.hardware_constants("NVIDIA GH200 480GB") is None
    # H200 NVL (the PCIe card; its datasheet): 835.5 TFLOP/s bf16 dense, 4.8 TB/s, 141 GB; not H200 SXM's 989
    nvl = pe.hardware_constants("NVIDIA H200 NVL")
    assert (nvl["bf16_tflops"], nvl["hbm_bytes_s"], nvl["memory_gib"]) == (835.5, 4.8e12, 141)
    assert pe.hardware_constants("NVIDIA H100 80GB HBM3", peak_tflops=500.0)["bf16_tflops"] == 500.0
    assert pe.estimate_step(None, [], None, tokens=1, micro_batches=1, world_size=1, matmul_flops=1,
                            attention_flops=0, activation_bytes=2, compiled=True) is None
    assert pe.describe(None, "no GPU constants for CPU") == "n/a: no GPU constants for CPU"


def test_one_gpu_table_gives_the_mfu_peak_the_estimate_and_the_price():
    """Every GPU name resolves to one row of gptlab/core/gpus.py in all three uses (a second table that disagrees,
    as the H200 NVL once did, fails here): MFU's peak, the estimate's constants and the rental price."""
    from gptlab.core import gpus
    from gptlab.train import cost, environment

    for g in gpus.GPUS:
        name = f"NVIDIA {g.key}"
        assert gpus.find_gpu(name) is g, g.key
        assert environment.gpu_bf16_peak_tflops(name) == g.bf16_tflops, g.key
        assert cost.table_price(name) == g.usd_per_hour, g.key
        hw = pe.hardware_constants(name)
        if g.step_constants() is None:
            assert hw is None, g.key
        else:
            assert (hw["bf16_tflops"], hw["hbm_bytes_s"], hw["fp32_tflops"]) == (g.bf16_tflops, g.hbm_bytes_s,
                                                                               g.fp32_tflops), g.key
