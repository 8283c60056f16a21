"""The run folder (one owner for its layout): experiments/{YYYYmmdd_HHMMSS}_{model_name}/

    config.json        every flag and derived setting, command line, versions, hardware (written at start)
    metrics.csv        one row per train step and per eval (METRICS_COLUMNS; empty cell = not measured)
    training_log.txt   human-readable log
    results.json       written at the end: status "finished" (or "failed" with an error), final figures
    code/              backup of every project source the run used + requirements.txt + tokenizer_train_script.py
    checkpoints/       --save_model checkpoints (git-ignored)

A folder with no results.json is a run still in progress, or one that was killed.
"""
EXPERIMENTS_DIR = "experiments"
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.csv"
LOG_FILE = "training_log.txt"
RESULTS_FILE = "results.json"
CODE_DIR = "code"
CHECKPOINT_DIR = "checkpoints"
METRICS_COLUMNS = ["step", "tokens", "train_loss", "val_loss", "val_bpb", "lr", "step_time_s", "elapsed_s",
                   "tokens_per_s", "hellaswag_acc", "hellaswag_acc_norm"]
