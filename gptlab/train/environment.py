"""What a run records about where it ran: versions, git commit, command line, CPU and GPU (with the
GPU's dense bf16 peak, MFU's denominator), peak memory.
"""
import os
import platform
import resource
import shlex
import subprocess
import sys

import numpy

from gptlab.core import gpus
from gptlab.core.gpus import lookup_gpu
from gptlab.core.paths import git_commit  # noqa: F401 (config.json's git_commit; the tokenizer records it too)


def versions():
    import torch  # heavy (~1 s): compare_experiments.py imports this module (through train.cost) without it

    out = {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
           "cuda": torch.version.cuda, "platform": platform.platform()}
    try:
        import tiktoken  # optional here: the record only
        out["tiktoken"] = tiktoken.__version__
    except Exception:  # optional for the record only
        out["tiktoken"] = None
    return out


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# dense bf16 tensor-core peaks by GPU name: the denominator of MFU in train_gpt.py's log and bench/bench_train.py
# (gptlab/core/gpus.py holds every GPU figure in one table)
GPU_BF16_PEAK_TFLOPS = gpus.column("bf16_tflops")


def gpu_bf16_peak_tflops(gpu_name):
    """The dense bf16 peak of a GPU named like torch.cuda.get_device_name() prints it, or None if unknown."""
    return lookup_gpu(GPU_BF16_PEAK_TFLOPS, gpu_name)


def hardware_info(device):
    """{gpu_name, gpu_count, gpu_bf16_peak_tflops, cpu_model, cpu_count, nvidia_smi (text or None)}."""
    import torch  # heavy: as in versions()

    info = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "gpu_name": None, "gpu_count": 0,
            "gpu_bf16_peak_tflops": None, "nvidia_smi": None}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        info["gpu_name"] = torch.cuda.get_device_name(device)
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_bf16_peak_tflops"] = gpu_bf16_peak_tflops(info["gpu_name"])
        try:
            info["nvidia_smi"] = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            pass
    return info


def peak_memory(device):
    """Peak memory in GB: CUDA allocated/reserved, or on CPU the process's max RSS for both (labelled)."""
    import torch  # heavy: as in versions()

    if str(device).startswith("cuda"):
        return {"allocated_gb": torch.cuda.max_memory_allocated(device) / 2**30,
                "reserved_gb": torch.cuda.max_memory_reserved(device) / 2**30,
                "label": "CUDA max_memory_allocated / max_memory_reserved"}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_gb = rss / 2**30 if sys.platform == "darwin" else rss / 2**20  # bytes on macOS, kilobytes on Linux
    return {"allocated_gb": rss_gb, "reserved_gb": rss_gb,
            "label": "CPU: process max RSS (ru_maxrss), reported for both allocated and reserved"}


def command_line():
    """This process's command line as a shell would take it back (shlex-quoted: a path with spaces stays one
    word), the interpreter by its name."""
    return shlex.join([os.path.basename(sys.executable)] + sys.argv)


ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # torch reads either (the second: 2.9+)
ALLOCATOR_DEFAULT = "expandable_segments:True"


def set_allocator_defaults(environ=None):
    """Before CUDA starts: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless the user set either allocator
    variable (theirs wins). Segments that grow in place keep probes of several sizes and an out-of-memory retry
    from fragmenting the cache, so step 1 fits where the --device_batch_size auto probe fit (modded-nanogpt sets
    the same). Returns the value now in force, or None where the user's own applies."""
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in ALLOCATOR_VARIABLES):
        return None
    environ["PYTORCH_CUDA_ALLOC_CONF"] = ALLOCATOR_DEFAULT
    return ALLOCATOR_DEFAULT


def compiled_graphs():
    """How many graphs torch.compile has made in this process so far (dynamo's unique graphs: one per input
    shape, stride, dtype and grad mode it was called with)."""
    import torch._dynamo.utils  # heavy: only for a compiled run

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


# ------------------------------------------------------------------------------------------------ CPU threads
def cpu_cores():
    """The CPUs this process may run on (its affinity: taskset, a container's cpuset), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average():
    """The machine's 1-, 5- and 15-minute load averages (runnable processes), or None where the OS has none."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def cpu_threads(device_type, environ=None, cores=None, local_world_size=None):
    """(threads, why) for torch's intra-op pool, or (None, why) to keep torch's own count (a GPU run). A CPU run:
    $OMP_NUM_THREADS when it is a positive integer (the user's choice; torchrun sets 1 for several ranks), else
    the cores shared out between this node's ranks (cores // LOCAL_WORLD_SIZE, at least 1): torch's default is
    every core in every rank, so ranks, or a run and the machine's other work, fight over the cores."""
    if device_type != "cpu":
        return None, "torch's default (not a CPU run)"
    environ = os.environ if environ is None else environ
    omp = environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp), "OMP_NUM_THREADS"
    cores = cpu_cores() if cores is None else cores
    if local_world_size is None:
        local_world_size = int(environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    local_world_size = max(1, local_world_size)
    return max(1, cores // local_world_size), f"cores // local ranks ({cores} // {local_world_size})"


def set_cpu_threads(device):
    """Set torch's threads for this rank (cpu_threads) and return what config.json records of it: the threads,
    why, the cores and the machine's load average at the start (compare_experiments marks timings taken on an
    overloaded machine: load above the cores)."""
    import torch  # heavy: as in versions()

    threads, why = cpu_threads(torch.device(device).type)
    if threads is not None:
        torch.set_num_threads(threads)
    return {"cpu_threads": torch.get_num_threads(), "cpu_threads_source": why, "cpu_cores": cpu_cores(),
            "load_avg_start": load_average()}
