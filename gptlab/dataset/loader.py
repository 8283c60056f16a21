"""Batches for training and validation: BOS-aligned rows of documents for each rank (resumable), and a
fixed validation set split over ranks.

Data cannot change under a run: both read shards through the ShardPrints taken when the run started
(gptlab.dataset.selection): a training shard is read whole into memory when the loader reaches it and checked against
its print as it is read (size, the manifest's sha256), and the validation rows are read once, at start, and kept
in memory, so a folder rebuilt (or a symlink flipped) mid-run is an error naming the shard, never other data.
"""
import os

import numpy as np
import torch

from gptlab.core.errors import UserError
from gptlab.dataset.selection import shard_prints


def to_device(array, device):
    """A numpy batch as a tensor on `device`; on CUDA through pinned memory, so the copy is truly asynchronous."""
    tensor = torch.from_numpy(array)
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


class BOSAlignedLoader:
    """Training batches: `next_batch()` → this rank's `grad_acc_steps` micro-batches [(inputs, targets), ...],
    each a pair of int64 numpy arrays of shape (rows_per_micro, seq_len)."""

    def __init__(self, paths, seq_len, batch_size, bos_id, rank=0, world_size=1, grad_acc_steps=1, seed=0,
                 align_to_bos=True, prints=None):
        if batch_size % seq_len:
            raise UserError(f"--batch_size {batch_size} is not a multiple of --train_seq_len {seq_len}; "
                            f"use e.g. {max(1, batch_size // seq_len) * seq_len}")
        self.rows_per_step = batch_size // seq_len
        self.seq_len, self.world_size = seq_len, world_size
        self.set_grad_acc_steps(grad_acc_steps)
        self.paths = list(paths)
        # what each shard is now (select_run_shards took them at start; else here)
        self.prints = list(prints) if prints is not None else shard_prints(self.paths)
        self.counts = [p.tokens for p in self.prints]
        usable = [n for n in self.counts if n >= seq_len + 1]
        if not usable:
            raise UserError(f"no training shard holds one row of {seq_len + 1} tokens (largest: {max(self.counts)}); "
                            "use a smaller --train_seq_len or more data")
        if sum(usable) < batch_size + 1:
            raise UserError(f"the training shards hold {sum(usable)} tokens, fewer than one global batch of "
                            f"{batch_size} (+1); use a smaller --batch_size or more data")
        self.bos_id = int(bos_id)
        self.rank = rank
        self.seed = seed
        self.align_to_bos = align_to_bos
        self.epoch, self.order_pos, self.pos = 0, 0, 0
        self._cache = (None, None)  # (index, tokens) of the shard being read

    def set_grad_acc_steps(self, grad_acc_steps):
        """Cut each step's rows into world_size x grad_acc_steps micro-batches (the rows a step reads, and so the
        loss curve, do not change)."""
        n_micro = self.world_size * grad_acc_steps
        if self.rows_per_step % n_micro:
            raise UserError(f"--batch_size {self.rows_per_step * self.seq_len} = {self.rows_per_step} rows of "
                            f"{self.seq_len} tokens cannot be split into world_size {self.world_size} x "
                            f"grad_acc_steps {grad_acc_steps} equal micro-batches; use a batch_size that is a "
                            f"multiple of {n_micro * self.seq_len} tokens")
        self.grad_acc_steps = grad_acc_steps
        self.rows_per_micro = self.rows_per_step // n_micro

    # --- position -----------------------------------------------------------------------------------------
    def state_dict(self):
        return {"epoch": self.epoch, "order_pos": self.order_pos, "pos": self.pos, "paths": list(self.paths),
                "seq_len": self.seq_len, "rows_per_step": self.rows_per_step, "seed": self.seed}

    def load_state_dict(self, state, new_data=False):
        """Continue at the checkpoint's position. new_data (--allow_new_data): shards with other names than the
        checkpoint's have no position in them, so the run starts at their beginning (returns a note saying so)."""
        for key in ("seq_len", "rows_per_step"):
            if state[key] != getattr(self, key):
                raise UserError(f"the checkpoint's data position was recorded with {key}={state[key]} but this run "
                                f"uses {getattr(self, key)}; resume with the same --train_seq_len/--batch_size")
        if [os.path.basename(p) for p in state["paths"]] != [os.path.basename(p) for p in self.paths]:
            if new_data:
                return (f"note: --allow_new_data: the training shards' names differ from the checkpoint's "
                        f"({len(state['paths'])} then, {len(self.paths)} now), so the data starts at their beginning")
            raise UserError("the checkpoint was trained on different --train_files (shard names differ); "
                            "resume with the same training shards, or pass --allow_new_data to start on these")
        self.epoch, self.order_pos, self.pos = state["epoch"], state["order_pos"], state["pos"]
        # the position indexes that seed's shard orders: a resume given another --seed keeps the run's data order
        self.seed = state.get("seed", self.seed)
        return None

    # --- reading ------------------------------------------------------------------------------------------
    def _order(self, epoch):
        if epoch == 0:
            return list(range(len(self.paths)))
        return [int(i) for i in np.random.default_rng(self.seed + epoch).permutation(len(self.paths))]

    def _tokens(self, index):
        if self._cache[0] != index:
            self._cache = (None, None)  # the old shard's memory goes first
            self._cache = (index, self.prints[index].read())
        return self._cache[1]

    def _next_row_start(self):
        """Advance (epoch, order_pos, pos) to the next row start; return (tokens, start)."""
        span = self.seq_len + 1
        while True:
            tokens = self._tokens(self._order(self.epoch)[self.order_pos])
            start = self.pos
            if self.align_to_bos and start + span <= len(tokens):
                window = np.asarray(tokens[start:start + self.seq_len])
                hits = np.flatnonzero(window == self.bos_id)
                if hits.size:  # else: a document longer than a row continues
                    start += int(hits[0])
            if start + span <= len(tokens):
                return tokens, start
            self.pos = 0  # the shard is used up: next shard, next epoch
            self.order_pos += 1
            if self.order_pos == len(self.paths):
                self.order_pos, self.epoch = 0, self.epoch + 1

    def next_batch(self):
        """This rank's micro-batches for one optimizer step; advances the position by one global batch."""
        mine = {}  # global row index within the step → row tokens
        owner_of = {}
        for m in range(self.grad_acc_steps):
            g = m * self.world_size + self.rank
            for j in range(self.rows_per_micro):
                owner_of[g * self.rows_per_micro + j] = (m, j)
        for row in range(self.rows_per_step):
            tokens, start = self._next_row_start()
            if row in owner_of:
                mine[owner_of[row]] = np.asarray(tokens[start:start + self.seq_len + 1], dtype=np.int64)
            self.pos = start + self.seq_len
        batches = []
        for m in range(self.grad_acc_steps):
            rows = np.stack([mine[(m, j)] for j in range(self.rows_per_micro)])
            batches.append((np.ascontiguousarray(rows[:, :-1]), np.ascontiguousarray(rows[:, 1:])))
        return batches


class ValidationSet:
    """The fixed validation rows: n_rows windows of seq_len + 1 tokens, this rank's share via `batches()`. This
    rank's rows are read once, here, checked against the shards' prints, and kept in memory (they are small), so
    every evaluation sees the same tokens whatever happens to the files."""

    def __init__(self, paths, seq_len, n_rows, rank=0, world_size=1, prints=None):
        self.paths = list(paths)
        self.seq_len = seq_len
        self.n_rows = n_rows
        prints = list(prints) if prints is not None else shard_prints(self.paths)
        counts = [p.tokens for p in prints]
        available = sum((n - 1) // seq_len for n in counts if n > seq_len)
        if available < n_rows:
            raise UserError(f"validation needs {n_rows} rows of {seq_len} tokens ({n_rows * seq_len} tokens) but "
                            f"--val_files hold only {available} rows; lower --val_steps or --val_batch_size, "
                            "or make more validation data")
        if n_rows < world_size:
            raise UserError(f"{world_size} ranks but only {n_rows} validation rows: every rank needs at least one; "
                            "raise --val_batch_size/--val_steps or use fewer ranks")
        self.rank = rank
        self.world_size = world_size
        self.locations = []  # (path, start) of every row, global order
        where = []  # (shard index, start) of every row
        for i, (path, n) in enumerate(zip(self.paths, counts)):
            for start in range(0, n - seq_len, seq_len):
                if len(self.locations) == n_rows:
                    break
                self.locations.append((path, start))
                where.append((i, start))
        mine = where[rank::world_size]
        self._rows = [None] * len(mine)  # this rank's rows, in the shards' dtype
        for i in sorted({i for i, _ in mine}):
            tokens = prints[i].read()
            for k, (j, start) in enumerate(mine):
                if j == i:
                    self._rows[k] = np.array(tokens[start:start + seq_len + 1])
            del tokens

    def my_rows(self):
        return self.locations[self.rank::self.world_size]

    def batches(self, rows_per_batch):
        """Yield (inputs, targets) int64 arrays of shape (<=rows_per_batch, seq_len) for this rank's rows."""
        for i in range(0, len(self._rows), rows_per_batch):
            rows = np.stack([np.asarray(row, dtype=np.int64) for row in self._rows[i:i + rows_per_batch]])
            yield np.ascontiguousarray(rows[:, :-1]), np.ascontiguousarray(rows[:, 1:])
