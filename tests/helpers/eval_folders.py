"""evaluate.py-shaped output folders (summary.json + <task>.jsonl) for the paired comparison's tests."""
import json
import os


def write_eval(folder, tasks, fewshot=0):
    """An evaluate.py-shaped folder: tasks {name: (baseline, [correct], [gold_bpb])} (two choices per example)."""
    os.makedirs(folder, exist_ok=True)
    for name, (base, correct, bpb) in tasks.items():
        with open(os.path.join(folder, f"{name}.jsonl"), "w") as f:
            for i, (c, b) in enumerate(zip(correct, bpb)):
                f.write(json.dumps({"index": i, "gold": i % 2, "logprob": [-1.0, -2.0], "tokens": [1, 1],
                                    "bytes": [3 + i, 4], "chars": [2 + i, 3], "correct": bool(c),
                                    "correct_norm": bool(c), "gold_bpb": b, "baseline": base}) + "\n")
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump({"fewshot": fewshot, "per_task": {name: {} for name in tasks}}, f)
    return str(folder)
