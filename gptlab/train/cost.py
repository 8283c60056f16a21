"""What a run costs: GPU-hours (GPUs × wall time) and, where a price is known, dollars.

    price = usd_per_gpu_hour(gpu_name, flag_value)   # the flag, else the table below by GPU name, else None
    gpu_hours(wall_time_s, world_size)               # every process counts as one device (on CPU too)
    cost_usd(hours, price)

The prices are gptlab/core/gpus.py's (the one GPU table; edit them for your provider): TYPICAL ON-DEMAND RENTAL
PRICES per GPU-hour as of 2026, rounded, from the public price lists of GPU rental clouds. A run on CPU has no
table price: pass --usd_per_gpu_hour to price its process-hours.
"""
from gptlab.core import gpus
from gptlab.core.errors import UserError
from gptlab.core.gpus import lookup_gpu

# (whole word of torch.cuda.get_device_name(), $ per GPU-hour): gptlab/core/gpus.py's price column
USD_PER_GPU_HOUR = gpus.column("usd_per_hour")
# gpt-lab prices a run as GPU $/h × (training time + 60 min): setting up the machine, downloading data, compiling
OVERHEAD_MINUTES_GPTLAB = 60.0


def table_price(gpu_name):
    """$ per GPU-hour of USD_PER_GPU_HOUR for a GPU name, or None (unknown GPU, or no GPU)."""
    return lookup_gpu(USD_PER_GPU_HOUR, gpu_name) if gpu_name else None


def usd_per_gpu_hour(gpu_name, given=None):
    """(price, where it comes from): the flag's value, else the table's by GPU name, else (None, None)."""
    if given is not None:
        if not given >= 0:
            raise UserError(f"--usd_per_gpu_hour {given} must be a price >= 0 (dollars per GPU-hour, e.g. 2.5)")
        return float(given), "--usd_per_gpu_hour"
    price = table_price(gpu_name)
    return (price, "gptlab/train/cost.py table (typical 2026 on-demand rental)") if price is not None else (None, None)


def gpu_hours(wall_time_s, world_size, overhead_minutes=0.0):
    """Processes × (wall time + overhead) in hours; each process holds one GPU (on CPU: one process = one device).
    None when the wall time is unknown."""
    if wall_time_s is None:
        return None
    return max(1, int(world_size or 1)) * (float(wall_time_s) + 60.0 * overhead_minutes) / 3600.0


def cost_usd(hours, price):
    return None if hours is None or price is None else hours * price
