"""The one table of GPUs: what each can do (NVIDIA's datasheets) and what an hour of it costs to rent.

Every figure a tool prints about a GPU comes from here: the bf16 peak under MFU (train_gpt.py's log,
bench/bench_train.py), the constants of the step estimate (gptlab/train/perf_estimate.py) and the price of a run
(gptlab/train/cost.py). A GPU is found by the first row whose key is a whole word of its name as
torch.cuda.get_device_name() prints it ("L4" does not match "NVIDIA L40"), so specific names come first.

Columns (None: not known here, and nothing is estimated from it):
    bf16_tflops   dense bf16 tensor-core peak, TFLOP/s (no sparsity)
    fp8_tflops    dense FP8 tensor-core peak, TFLOP/s
    fp32_tflops   the non-tensor fp32 rate (train_gpt.py sets no TF32)
    hbm_bytes_s   HBM bandwidth, bytes/s
    link_bytes_s  NVLink bandwidth per direction, bytes/s (half the datasheet's bidirectional figure)
    memory_gib    memory, GiB (bench_train.py --estimate_only's micro-batch guess)
    usd_per_hour  TYPICAL ON-DEMAND RENTAL PRICE per GPU-hour as of 2026, rounded, from public price lists of GPU
                  rental clouds (8-GPU nodes divided by 8; e.g. nanochat prices 8xH100 at $24/h). Spot, reserved
                  and hyperscaler prices differ by 2x either way: edit it for your provider.
"""
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    key: str
    bf16_tflops: float = None
    fp8_tflops: float = None
    fp32_tflops: float = None
    hbm_bytes_s: float = None
    link_bytes_s: float = None
    memory_gib: float = None
    usd_per_hour: float = None

    def step_constants(self):
        """The estimate's constants (fp8, fp32, HBM, link, memory), or None where the chip's are not all known."""
        row = dict(fp8_tflops=self.fp8_tflops, fp32_tflops=self.fp32_tflops, hbm_bytes_s=self.hbm_bytes_s,
                   link_bytes_s=self.link_bytes_s, memory_gib=self.memory_gib)
        known = (self.fp32_tflops, self.hbm_bytes_s, self.link_bytes_s, self.memory_gib)
        return row if all(v is not None for v in known) else None


_H100_SXM = dict(bf16_tflops=989.4, fp8_tflops=1978.9, fp32_tflops=66.9, hbm_bytes_s=3.35e12, link_bytes_s=450e9,
                 memory_gib=80, usd_per_hour=3.00)  # NVLink 4: 900 GB/s bidirectional
_A100_SXM = dict(bf16_tflops=312.0, fp32_tflops=19.5, hbm_bytes_s=2.039e12, link_bytes_s=300e9,
                 memory_gib=80)  # A100 SXM4 80GB: NVLink 3, 600 GB/s bidirectional; no FP8

GPUS = [
    # H200 NVL: the PCIe card, 600 W; NVLink bridge 900 GB/s bidirectional
    GPU("H200 NVL", bf16_tflops=835.5, fp8_tflops=1671.0, fp32_tflops=60.0, hbm_bytes_s=4.8e12, link_bytes_s=450e9,
        memory_gib=141, usd_per_hour=3.80),
    GPU("GH200", bf16_tflops=989.0, usd_per_hour=3.20),
    # H200 SXM: H100 SXM's chip with 141 GB of HBM3e at 4.8 TB/s
    GPU("H200", bf16_tflops=989.0, fp8_tflops=1978.9, fp32_tflops=66.9, hbm_bytes_s=4.8e12, link_bytes_s=450e9,
        memory_gib=141, usd_per_hour=3.80),
    GPU("H100 SXM", **_H100_SXM),
    GPU("H100 80GB HBM3", **_H100_SXM),  # how torch names an H100 SXM
    GPU("H100 PCIe", bf16_tflops=756.0, fp8_tflops=1513.0, fp32_tflops=51.2, hbm_bytes_s=2.0e12, link_bytes_s=300e9,
        memory_gib=80, usd_per_hour=2.40),  # NVLink bridge 600 GB/s bidirectional
    GPU("H100 NVL", bf16_tflops=835.0, fp8_tflops=1671.0, fp32_tflops=60.0, hbm_bytes_s=3.9e12, link_bytes_s=300e9,
        memory_gib=94, usd_per_hour=3.00),  # NVLink bridge 600 GB/s bidirectional
    GPU("H100", **_H100_SXM),
    GPU("B200", bf16_tflops=2250.0, usd_per_hour=6.00),
    GPU("A100-SXM4-80GB", **_A100_SXM, usd_per_hour=1.80),
    GPU("A100 80GB", **_A100_SXM, usd_per_hour=1.80),
    GPU("A100", **_A100_SXM, usd_per_hour=1.40),
    GPU("L40S", bf16_tflops=362.05, usd_per_hour=1.00),
    GPU("L40", bf16_tflops=181.05, usd_per_hour=0.90),
    GPU("RTX 6000 Ada", usd_per_hour=0.90),
    GPU("A6000", usd_per_hour=0.60),
    GPU("RTX 4090", bf16_tflops=165.2, usd_per_hour=0.50),
    GPU("RTX 3090", bf16_tflops=71.0, usd_per_hour=0.30),
    GPU("A10G", bf16_tflops=70.0, usd_per_hour=1.00),
    GPU("A10", usd_per_hour=0.75),
    GPU("L4", bf16_tflops=121.0, usd_per_hour=0.60),
    GPU("V100", bf16_tflops=125.0, usd_per_hour=0.60),
    GPU("T4", usd_per_hour=0.35),
]


def lookup_gpu(table, gpu_name):
    """The value of the first (key, value) of `table` whose key is a whole word of `gpu_name` (case-insensitive;
    "L4" does not match "NVIDIA L40"), or None."""
    name = (gpu_name or "").lower()
    for key, value in table:
        if re.search(r"(?<![a-z0-9])" + re.escape(key.lower()) + r"(?![a-z0-9])", name):
            return value
    return None


def find_gpu(gpu_name):
    """GPUS' row for a GPU named as torch.cuda.get_device_name() prints it, or None."""
    return lookup_gpu([(g.key, g) for g in GPUS], gpu_name)


def column(name):
    """[(key, value)] of one column over the rows that know it, in the table's order (for lookup_gpu)."""
    return [(g.key, getattr(g, name)) for g in GPUS if getattr(g, name) is not None]
