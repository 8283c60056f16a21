#!/usr/bin/env bash
# muP's LR-transfer sweep (docs/mup.md): GPT-2 (AdamW) at widths 16..128 (8x), learning rate x 1/4..16 (of 4e-3),
# 2 seeds, under SP and under --mup with base width 16: one sweep.py sweep per width and parametrisation (records
# experiments/mup_lr/sweep_MupLr{SP,MuP}W<width>.json), all side by side, each run on one thread. The muP sweeps
# skip width 16: there --mup is SP bit for bit (tests/unit/test_mup.py), so bench/mup_lr_plot.py reads SP's
# width-16 runs for both. Then: python bench/mup_lr_plot.py
set -euo pipefail
export OMP_NUM_THREADS=1  # one thread a run: many runs side by side on a busy 2-core machine
cd "$(dirname "$0")/.."
COMMON="--arch gpt2 --tokenizer quickstart_v1000_n400000.pkl --num_layers 2 --num_heads 2 --train_seq_len 128
        --batch_size 512 --train_steps 30 --lr 4e-3 --warmup_steps 3 --val_loss_every 0 --val_steps 4
        --val_batch_size 2048 --hellaswag_limit 0 --sample_tokens 0 --log_every 0"
SWEEP="--grid lr_scale=0.25,0.5,1,2,4,8,16 --seeds 0,1 --experiments_dir experiments/mup_lr"
mkdir -p experiments/mup_lr
for width in 16 32 64 128; do
  python sweep.py --name MupLrSPW$width --grid model_dim=$width $SWEEP -- $COMMON \
    > experiments/mup_lr/sp_$width.log 2>&1 &
  if [ $width != 16 ]; then
    python sweep.py --name MupLrMuPW$width --grid model_dim=$width $SWEEP -- $COMMON --mup --mup_base_width 16 \
      > experiments/mup_lr/mup_$width.log 2>&1 &
  fi
done
wait
