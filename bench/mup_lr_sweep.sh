#!/usr/bin/env bash
# muP's LR-transfer sweep (docs/mup.md): GPT-2 (AdamW) at widths 16..128 (8x), learning rate x 1/8..8 (of 4e-3), 2 seeds,
# under SP and under --mup with base width 16. The muP sweep skips width 16: there --mup is SP bit for bit
# (tests/unit/test_mup.py), so bench/mup_lr_plot.py reads SP's width-16 runs for both. The two sweeps run side
# by side; then: python bench/mup_lr_plot.py
set -euo pipefail
export OMP_NUM_THREADS=1  # one thread a run: two runs side by side on a busy 2-core machine
cd "$(dirname "$0")/.."
COMMON="--arch gpt2 --tokenizer quickstart_v1000_n400000.pkl --num_layers 2 --num_heads 2 --train_seq_len 128
        --batch_size 1024 --train_steps 100 --lr 4e-3 --warmup_steps 10 --val_loss_every 0 --val_steps 4
        --val_batch_size 2048 --hellaswag_limit 0 --sample_tokens 0 --log_every 0"
SWEEP="--grid lr_scale=0.125,0.25,0.5,1,2,4,8 --seeds 0,1 --experiments_dir experiments/mup_lr"
python sweep.py --name MupLrSP --grid model_dim=16,32,64,128 $SWEEP -- $COMMON > experiments/mup_lr_sp.log 2>&1 &
python sweep.py --name MupLrMuP --grid model_dim=32,64,128 $SWEEP -- $COMMON --mup --mup_base_width 16 \
  > experiments/mup_lr_mup.log 2>&1 &
wait
