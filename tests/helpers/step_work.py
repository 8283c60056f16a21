"""Count, per optimizer step, what train_gpt.py asks of the device: host reads (gptlab.train.run.HOST_READS), `.item()`-
style reads seen at the dispatcher (aten._local_scalar_dense) and collectives (torch.distributed calls).

torch.optim.Adam (foreach, as on CPU) reads its per-parameter step counters with .item(); those tensors live in
host memory even on a GPU run (and fused Adam, the CUDA choice, does not read them), so they are no device sync:
they are counted apart, as "adam_step_counter_reads", by the identity of the very tensors Adam keeps.

    torchrun --nproc_per_node=2 tests/helpers/step_work.py OUT.json -- <train_gpt.py flags>

Each rank writes OUT.json.rank{r}: a list with one entry per call of the loader's next_batch (the start of a step),
holding what happened from that call to the next one (the last entry runs to the end of the run)."""
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def main():
    import torch
    import torch.distributed as dist
    from torch.utils._python_dispatch import TorchDispatchMode

    import train_gpt
    from gptlab.dataset import loader as data_loader
    from gptlab.train import run as run_module
    from gptlab.train import comm

    out, flags = sys.argv[1], sys.argv[3:]
    counts = {"host_reads": 0, "item": 0, "collectives": {}, "adam_step_counter_reads": 0}
    adam_counters = set()  # ids of the step-count tensors in torch.optim.Adam's state

    adam_step = torch.optim.Adam.step

    def noting_adam_step(self, *args, **kwargs):
        out = adam_step(self, *args, **kwargs)
        adam_counters.update(id(state["step"]) for state in self.state.values() if "step" in state)
        return out
    torch.optim.Adam.step = noting_adam_step
    steps = []

    def snapshot():
        return {"host_reads": run_module.HOST_READS["count"], "item": counts["item"],
                "collectives": dict(counts["collectives"])}

    # the Muon collectives under the name train_gpt calls (torch 2.13 renamed them), counted under the old one
    renamed = {comm.REDUCE_SCATTER: "reduce_scatter_tensor", comm.ALL_GATHER: "all_gather_into_tensor"}
    for name in ("all_reduce", *renamed, "reduce_scatter", "all_gather", "broadcast", "barrier", "all_gather_object",
                 "broadcast_object_list"):
        original = getattr(dist, name)

        def counted(*args, _original=original, _name=renamed.get(name, name), **kwargs):
            counts["collectives"][_name] = counts["collectives"].get(_name, 0) + 1
            return _original(*args, **kwargs)
        setattr(dist, name, counted)

    next_batch = data_loader.BOSAlignedLoader.next_batch

    def marked_next_batch(self):
        steps.append(snapshot())
        return next_batch(self)
    data_loader.BOSAlignedLoader.next_batch = marked_next_batch

    class CountScalarReads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                host_counter = id(args[0]) in adam_counters and args[0].device.type == "cpu"
                counts["adam_step_counter_reads" if host_counter else "item"] += 1
            return func(*args, **(kwargs or {}))

    with CountScalarReads():
        train_gpt.main(flags)
    steps.append(snapshot())
    per_step = []
    for before, after in zip(steps, steps[1:]):
        per_step.append({"host_reads": after["host_reads"] - before["host_reads"], "item": after["item"] - before["item"],
                         "collectives": {k: v - before["collectives"].get(k, 0)
                                         for k, v in after["collectives"].items() if v - before["collectives"].get(k, 0)}})
    with open(f"{out}.rank{int(os.environ.get('RANK', '0'))}.adam_step_counter_reads", "w") as f:
        f.write(str(counts["adam_step_counter_reads"]))
    with open(f"{out}.rank{int(os.environ.get('RANK', '0'))}", "w") as f:
        json.dump(per_step, f)


if __name__ == "__main__":
    main()
