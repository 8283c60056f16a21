"""An analytical estimate of a training step's time and MFU (bench/bench_train.py prints it beside the measured
MFU): a roofline-style sum of five terms, each its work divided by the rate the GPU is assumed to reach on it.

    hw = hardware_constants(gpu_name, peak_tflops)      # GPU_CLASSES + EFFICIENCY; None where unknown (CPU)
    est = estimate_step(model, optimizers, hw, tokens=..., micro_batches=..., world_size=..., matmul_flops=...,
                        attention_flops=..., activation_bytes=2, compiled=True)
    describe(est)  # "40.1%: matmul 55%, attention 6%, memory-bound 38%, optimizer 1%, communication 0% of the ..."

Per rank and step (the terms run one after another: one CUDA stream, and under torch.compile the gradient
collectives start only after the backward, gptlab.train.comm.GradientSync):
- matmul: the non-attention FLOPs of model.training_flops (6 x tokens x multiplied parameters) at
  matmul_efficiency x the bf16 peak; with model.fp8_head the LM head's share at the same efficiency x the FP8 peak.
- attention: model.training_flops' attention FLOPs (allowed query-key pairs only) at attention_efficiency x peak.
- memory-bound: bytes the elementwise kernels move (norms, rotary, activations, residual adds, embeddings,
  soft-cap and cross-entropy over the vocabulary, FP8 casts, weight casts and gradient accumulation) / (HBM
  bandwidth x hbm_efficiency). Bytes = passes over tensors of the widths the model's own module states
  (its MEMORY_PASSES and memory_widths: an architecture edit updates them beside the code they count).
- optimizer: Newton-Schulz FLOPs of the Muon matrices this rank owns at the matmul rate, plus Muon's and Adam's
  elementwise bytes at the HBM rate.
- communication: bytes this rank sends in the ring reduce-scatter of the gradients and all-gather of the updated
  parameters / (link bandwidth x link_efficiency); zero on one rank.
Analytical MFU = model FLOPs per rank / (estimated step time x bf16 peak): the measured MFU's definition.

Nothing here names a layer: widths and passes come from the model's module, its padded vocabulary and its
nn.Embedding tables; the optimizers from their param_groups (a group
with "ns_steps" is Newton-Schulz orthogonalised, anything else an elementwise Adam-like update). Launch overheads,
Python time, the loader and overlap are not modelled, so on small models (CPU-sized, eager) measured time is far
above the estimate; the memory-bound pass counts are the least certain constants: compare with a measurement.
"""
import math
import sys

from gptlab.train.comm import same_shape_params
from gptlab.core import gpus
from gptlab.core.gpus import lookup_gpu
from gptlab.train.environment import gpu_bf16_peak_tflops

# Per GPU (gptlab/core/gpus.py, NVIDIA's datasheets): the dense FP8 peak, the non-tensor fp32 rate, HBM and NVLink
# bandwidth, memory; None where a chip's are not all known (no estimate). The bf16 peak is the one the measured MFU
# uses too (environment.GPU_BF16_PEAK_TFLOPS, the same table).
GPU_CLASSES = [(g.key, g.step_constants()) for g in gpus.GPUS]

# The fractions of those peaks a step's kernels are assumed to reach.
EFFICIENCY = dict(
    # cuBLAS bf16 GEMMs: the best shape of a sweep reaches ~790-820 TFLOP/s on H100 SXM (80-83% of peak: Stas
    # Bekman's Maximum Achievable Matmul FLOPS finder, github.com/stas00/ml-engineering, compute/accelerator);
    # a step's GEMMs have one side of model_dim (768 for GPT-2 small), smaller: 70% is our assumption
    matmul_efficiency=0.70,
    # FlexAttention forward+backward on the counted (allowed) pairs: FlashAttention-2 reaches ~35% of H100's peak
    # at head_dim 128 (Shah et al. 2024, FlashAttention-3 paper, its FA2 baselines), FlexAttention ~85-90% of FA2
    # (PyTorch's FlexAttention blog, 2024), and the masked part of partially allowed blocks is computed but not
    # counted: 30% is our assumption
    attention_efficiency=0.30,
    # elementwise kernels reach ~90% of HBM bandwidth on large copies (STREAM-like); mixed sizes less:
    # 80% is our assumption
    hbm_efficiency=0.80,
    # NCCL ring bus bandwidth over NVLink: ~80% of the per-direction link rate (nccl-tests busbw on 8x H100 SXM is
    # ~360-480 GB/s of 450): our assumption
    link_efficiency=0.80,
)

BACKWARD_BYTES_RATIO = 2  # an elementwise op's backward reads its saved input and the output gradient and writes
#                           the input gradient: ~2x its forward's traffic (our assumption)
GRAD_PASSES_FIRST, GRAD_PASSES_LATER = 1, 3  # per micro-batch and parameter element: the first backward writes
#                           the gradient; each later one reads it and the new one and writes the sum
FP8_GRAD_EXTRA = 2  # FP8 head, per logit: the gradient's scale (amax) and cast read it twice (activation dtype),
#                     and the cast and the two transposed copies of the 1-byte result move 3 bytes
ADAM_PASSES = 7  # per parameter element: fused Adam reads param, gradient, two moments and writes param, moments
MUON_PASSES = 12  # per owned parameter element: momentum lerp (3), Nesterov lerp (3), stacking (2), cast and
#                   normalisation before Newton-Schulz (2, fused when compiled, ~ignored), update add_ (3) - rounded


def hardware_constants(gpu_name, peak_tflops=None):
    """GPU_CLASSES' row for a GPU named as torch.cuda.get_device_name() prints it, merged with EFFICIENCY, or None
    (CPU, unknown GPU). peak_tflops (bench_train's --peak_tflops) replaces the bf16 peak, as it does for the
    measured MFU, and scales the FP8 peak with it."""
    row = lookup_gpu(GPU_CLASSES, gpu_name) if gpu_name else None
    if row is None:
        return None
    # the bf16 peak is the one the measured MFU divides by (environment's table): one figure for both MFUs
    hw = dict(row, bf16_tflops=gpu_bf16_peak_tflops(gpu_name), **EFFICIENCY)
    if peak_tflops:
        if hw["fp8_tflops"]:
            hw["fp8_tflops"] *= peak_tflops / hw["bf16_tflops"]
        hw["bf16_tflops"] = peak_tflops
    return hw


def newton_schulz_flops(shape, steps):
    """FLOPs of train_gpt.zeropower_via_newtonschulz5 on a parameter of `shape` (..., rows, cols): per matrix
    (m = min(rows, cols), n = max) and iteration three matmuls, A = X X^T (2 m^2 n), A A (2 m^3), B X (2 m^2 n)."""
    *stack, rows, cols = shape
    m, n = min(rows, cols), max(rows, cols)
    return math.prod(stack) * steps * (4 * m * m * n + 2 * m ** 3)


def _embedding_weights(model):
    import torch.nn as nn  # heavy (~1 s): bench_train imports this module before its flags are parsed

    return [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]


def model_module(model):
    """The architecture module a model's class comes from (model.py, gpt2.py, a checkpoint's copy): the owner of
    its MEMORY_PASSES and memory_widths."""
    return sys.modules[type(model).__module__]


def memory_bound_bytes(model, tokens, micro_batches, activation_bytes, compiled, passes=None):
    """Bytes this rank's elementwise kernels move in one step of `tokens` tokens in `micro_batches` micro-batches:
    {"activations": ..., "logits": ..., "parameters": ...}. passes: a row like the model module's MEMORY_PASSES
    (default: its row for `compiled`); the per-layer widths are its memory_widths(config)."""
    module = model_module(model)
    p = passes or module.MEMORY_PASSES["compiled" if compiled else "eager"]
    c, b = model.config, activation_bytes
    widths = module.memory_widths(c)
    embeddings = _embedding_weights(model)
    per_token = (c.num_layers * b * sum(p[name] * width for name, width in widths.items())
                 + b * p["embeddings"] * sum(w.size(1) for w in embeddings))
    activations = tokens * per_token * (1 + BACKWARD_BYTES_RATIO)
    logit_bytes = b if compiled else 4  # eager: model.logits upcasts to float32 before the soft-cap
    logits = tokens * model.padded_vocab * p["logits"] * logit_bytes * (1 + BACKWARD_BYTES_RATIO)
    if getattr(model, "fp8_head", False):
        logits += tokens * model.padded_vocab * (FP8_GRAD_EXTRA * b + 3)
    # per micro-batch: autocast casts every multiplied weight to the activation dtype (read it, write the copy);
    # every parameter gets a dense gradient (embeddings too), accumulated over the micro-batches
    embedding_ids = {id(w) for w in embeddings}
    params = list(model.parameters())
    cast = sum(q.numel() * (q.element_size() + b) for q in params
               if q.ndim >= 2 and id(q) not in embedding_ids and q.element_size() != b)
    grads = sum(q.numel() * q.element_size() for q in params) * (
        GRAD_PASSES_FIRST + GRAD_PASSES_LATER * (micro_batches - 1))
    return {"activations": activations, "logits": logits, "parameters": micro_batches * cast + grads}


def _muon_groups(optimizers):
    """(Newton-Schulz optimizers' same-shape parameter lists with their ns_steps, every other parameter): the
    matrices MatrixOwners deals out together, found the way it finds them."""
    shapes, others = [], []
    for opt in optimizers:
        for (_, g), params in same_shape_params(opt.param_groups).items():
            if "ns_steps" in opt.param_groups[g]:
                shapes.append((opt.param_groups[g]["ns_steps"], params))
            else:
                others += params
    return shapes, others


def optimizer_work(optimizers, world_size):
    """(Newton-Schulz FLOPs, elementwise bytes) of one update on one rank. Muon (gptlab.train.comm.MatrixOwners)
    deals same-shape matrices out one per rank: a rank orthogonalises ceil(count / world_size) of each shape; Adam
    is sharded into equal slices over the ranks (ShardedAdam; one rank: all of it)."""
    shapes, others = _muon_groups(optimizers)
    flops = bytes_ = 0
    for steps, members in shapes:
        owned = math.ceil(len(members) / world_size)
        flops += owned * newton_schulz_flops(members[0].shape, steps)
        bytes_ += owned * MUON_PASSES * members[0].numel() * members[0].element_size()
    bytes_ += ADAM_PASSES * sum(q.numel() * q.element_size() for q in others) / world_size
    return flops, bytes_


def communication_bytes(optimizers, world_size):
    """Bytes one rank sends per step: a ring reduce-scatter (gradients) and all-gather (updated parameters) of a
    buffer of world_size slots each send (world_size - 1) slots. Muon: one slot per matrix, per chunk of
    world_size same-shape matrices (the last chunk padded); Adam: one flat per (group, dtype) cut in world_size
    slices. Zero on one rank."""
    if world_size == 1:
        return 0
    shapes, _ = _muon_groups(optimizers)
    total = sum(math.ceil(len(members) / world_size) * members[0].numel() * members[0].element_size()
                for _, members in shapes)
    flats = {}  # (optimizer, group, dtype) -> elements
    for opt in optimizers:
        for g, group in enumerate(opt.param_groups):
            if "ns_steps" not in group:
                for q in group["params"]:
                    key = (id(opt), g, q.dtype)
                    flats[key] = flats.get(key, 0) + q.numel()
    total += sum(math.ceil(n / world_size) * dtype.itemsize for (_, _, dtype), n in flats.items())
    return 2 * (world_size - 1) * total


def estimate_step(model, optimizers, hw, *, tokens, micro_batches, world_size, matmul_flops, attention_flops,
                  activation_bytes, compiled, passes=None):
    """The estimate for one optimizer step of `tokens` GLOBAL tokens (world_size ranks x micro_batches
    micro-batches), whose model.training_flops are (matmul_flops, attention_flops) in all: {"mfu", "step_time_s",
    "seconds" and "shares" per term, "work": the FLOPs and bytes behind them}, or None without hw (CPU)."""
    if hw is None:
        return None
    peak = hw["bf16_tflops"] * 1e12 if activation_bytes == 2 else hw["fp32_tflops"] * 1e12
    matmul_rate = hw["matmul_efficiency"] * peak
    rank_tokens = tokens / world_size
    mm_flops, attn_flops = matmul_flops / world_size, attention_flops / world_size
    fp8_flops = 6 * rank_tokens * model.lm_head.weight.numel() if getattr(model, "fp8_head", False) else 0
    memory = memory_bound_bytes(model, rank_tokens, micro_batches, activation_bytes, compiled, passes)
    ns_flops, opt_bytes = optimizer_work(optimizers, world_size)
    comm = communication_bytes(optimizers, world_size)
    hbm_rate = hw["hbm_efficiency"] * hw["hbm_bytes_s"]
    seconds = {
        "matmul": (mm_flops - fp8_flops) / matmul_rate
                  + (fp8_flops / (hw["matmul_efficiency"] * hw["fp8_tflops"] * 1e12) if fp8_flops else 0),
        "attention": attn_flops / (hw["attention_efficiency"] * peak),
        "memory_bound": sum(memory.values()) / hbm_rate,
        "optimizer": ns_flops / matmul_rate + opt_bytes / hbm_rate,
        "communication": comm / (hw["link_efficiency"] * hw["link_bytes_s"]),
    }
    step = sum(seconds.values())
    # MFU against the bf16 peak, as the measured one (bench_train's denominator), whatever the dtype
    return {"mfu": (mm_flops + attn_flops) / (step * hw["bf16_tflops"] * 1e12), "step_time_s": step,
            "tokens_per_s": tokens / step, "seconds": seconds, "shares": {k: v / step for k, v in seconds.items()},
            "work": {"matmul_flops": mm_flops, "fp8_head_flops": fp8_flops, "attention_flops": attn_flops,
                     "memory_bytes": memory, "newton_schulz_flops": ns_flops, "optimizer_bytes": opt_bytes,
                     "communication_bytes": comm}}


def describe(est, why_not="no GPU constants"):
    """'40.1%: matmul 55%, attention 6%, memory-bound 38%, optimizer 1%, communication 0% of the estimated step',
    or 'n/a: why_not' for no estimate."""
    if est is None:
        return f"n/a: {why_not}"
    names = {"matmul": "matmul", "attention": "attention", "memory_bound": "memory-bound", "optimizer": "optimizer",
             "communication": "communication"}
    parts = ", ".join(f"{names[k]} {100 * v:.0f}%" for k, v in est["shares"].items())
    return f"{100 * est['mfu']:.1f}%: {parts} of the estimated step"
