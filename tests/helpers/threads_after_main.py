"""Run train_gpt.main on this rank, then record which process-group threads (gloo/NCCL) are still alive.

    torchrun --nproc_per_node=2 tests/helpers/threads_after_main.py OUT.json -- <train_gpt.py flags>

Each rank writes OUT.json.rank{r}: {"during": threads while training, "after": threads once main returned}. After
main every process group must be gone (tests/e2e/test_train_gpt_e2e.py)."""
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def live_process_group_threads():
    """Names of this process's gloo/NCCL threads (Linux /proc); [] once every process group is really gone."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if "gloo" in name or "nccl" in name.lower():
            names.append(name)
    return sorted(names)


def main():
    import train_gpt
    from gptlab.core import distributed as dist_utils

    out, flags = sys.argv[1], sys.argv[3:]
    seen = {"during": []}
    cleanup = dist_utils.cleanup

    def observed_cleanup(ctx):  # the threads a group has, just before main tears it down
        seen["during"] = live_process_group_threads()
        cleanup(ctx)
    dist_utils.cleanup = observed_cleanup
    train_gpt.main(flags)
    seen["after"] = live_process_group_threads()
    with open(f"{out}.rank{os.environ['RANK']}", "w") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    main()
