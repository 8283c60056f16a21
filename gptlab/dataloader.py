"""Token batches for train_gpt.py: BOS-aligned, split across ranks, resumable, identical for any world size.

Which shards a run reads (select_run_shards): the flags' globs or the default folder, checked before training.

Training rows. The train shards are read in order (epoch 0 in sorted file order, later epochs in an order
shuffled with the seed) as one stream of rows of `seq_len + 1` tokens (inputs = row[:-1], targets = row[1:]).
A row starts at an `<|endoftext|>` (BOS) token where possible, as in modded-nanogpt's BOS-aligned loader: the next
row starts at the first BOS at or after the end of the previous row, unless that is a whole row away (a document
longer than a row), in which case it simply continues the document. A row never crosses a shard boundary.

One optimizer step consumes `rows_per_step = batch_size // seq_len` consecutive rows of that global stream,
whatever the world size. The step's rows are cut into `world_size * grad_acc_steps` micro-batches; rank r gets
micro-batches r, r + world_size, ... so the union over ranks is always the same set of rows. Every rank walks the
row boundaries (cheap: a small window per row on a memory-mapped shard) but copies only its own rows' tokens.
The position in the stream is the whole state (`state_dict` / `load_state_dict`), so a resumed run continues
exactly, on any world size.

Validation rows are the first `n_rows` contiguous windows of the validation shards (no alignment: the
document-causal attention mask already separates documents), dealt to ranks round-robin: the same fixed set
for every world size.
"""
import glob
import os
from dataclasses import dataclass

import numpy as np

from gptlab.errors import UserError
from gptlab.shards import MANIFEST_GLOB, check_manifest, read_header, read_manifest_parts, read_shard


def expand_shard_files(patterns, what="--train_files"):
    """Paths and globs (a string or a list of them) → list of shard paths, each header-validated."""
    paths = []
    for part in [patterns] if isinstance(patterns, str) else list(patterns):
        matches = sorted(glob.glob(part)) if glob.has_magic(part) else ([part] if os.path.exists(part) else [])
        if not matches:
            raise UserError(f"{what} {part!r} matches no shard file; create shards with download_fineweb.py "
                            "or point the flag at existing .bin files")
        paths.extend(m for m in matches if m not in paths)
    for path in paths:
        read_header(path)  # names the broken file before any training starts
    return paths


@dataclass
class RunShards:
    """The shards a training run reads, checked (see select_run_shards)."""
    train_files: list  # the globs/paths as given, or the default folder's
    val_files: list
    train_paths: list  # expanded, header-checked
    val_paths: list
    unfinished: list  # folders whose manifest says download_fineweb.py has not finished them
    train_sha256: str = None  # data_fingerprint of the train shards (a checkpoint records it; resume compares)
    val_sha256: str = None

    @property
    def warnings(self):
        return [f"warning: the manifest in {folder} says download_fineweb.py has not finished writing it; training "
                "on the shards written so far" for folder in self.unfinished]


def select_run_shards(train_files, val_files, tokenizer_name, tokenizer_sha256, n_vocab, data_dir="data"):
    """Expand and check a run's shard flags before any training: without flags, the one folder
    data/*_<tokenizer name>/ that download_fineweb.py wrote; every file's header; train and validation disjoint;
    the manifests' tokenizer hash (or, for hand-made shards, token ids within the vocabulary)."""
    if not (train_files and val_files):
        folder = default_shard_folder(tokenizer_name, data_dir)
        train_files = train_files or [os.path.join(folder, "train_*.bin")]
        val_files = val_files or [os.path.join(folder, "val_*.bin")]
    train_paths = expand_shard_files(train_files, "--train_files")
    val_paths = expand_shard_files(val_files, "--val_files")
    overlap = sorted(set(map(os.path.realpath, train_paths)) & set(map(os.path.realpath, val_paths)))
    if overlap:
        more = ", ..." if len(overlap) > 1 else ""
        raise UserError(f"--train_files and --val_files share {len(overlap)} shard(s) ({overlap[0]}{more}): the "
                        "model would be validated on text it trained on. Match only train_*.bin with --train_files "
                        "(e.g. 'data/<folder>/train_*.bin')")
    unfinished = (check_shards_match_tokenizer(train_paths, tokenizer_sha256, n_vocab, "--train_files")
                  + check_shards_match_tokenizer(val_paths, tokenizer_sha256, n_vocab, "--val_files"))
    def as_list(patterns):
        return [patterns] if isinstance(patterns, str) else list(patterns)
    return RunShards(as_list(train_files), as_list(val_files), train_paths, val_paths, sorted(set(unfinished)),
                     data_fingerprint(train_paths), data_fingerprint(val_paths))


def data_fingerprint(paths):
    """sha256 naming the data in `paths`, whatever folder it sits in: each shard's file name, token count and
    content digest (the sha256 its manifest records, else a hash of its first and last MiB). A folder rebuilt
    with another seed or other text gets another fingerprint."""
    import hashlib

    recorded = {}
    for folder in sorted({os.path.dirname(os.path.abspath(p)) for p in paths}):
        if glob.glob(os.path.join(folder, MANIFEST_GLOB)):
            for part in read_manifest_parts(folder).values():
                recorded.update({(folder, s["name"]): s.get("sha256") for s in part.get("shards", [])})
    digest = hashlib.sha256()
    for path in paths:
        name = os.path.basename(path)
        content = recorded.get((os.path.dirname(os.path.abspath(path)), name))
        if content is None:
            with open(path, "rb") as f:
                head = f.read(1 << 20)
                f.seek(max(0, os.path.getsize(path) - (1 << 20)))
                content = hashlib.sha256(head + f.read()).hexdigest()
        digest.update(f"{name} {read_header(path)[1]} {content}\n".encode())
    return digest.hexdigest()


def split_batch(batch_size, seq_len, world_size, device_batch_size, grad_acc_steps=None):
    """How a GLOBAL batch of `batch_size` tokens is cut: (grad_acc_steps, tokens per micro-batch), so that
    batch_size = world_size x grad_acc_steps x micro-batch and every micro-batch holds whole rows of seq_len.
    grad_acc_steps defaults to batch_size / (world_size x device_batch_size)."""
    if batch_size % seq_len:
        raise UserError(f"--batch_size {batch_size} is not a multiple of --train_seq_len {seq_len}; "
                        f"use {max(1, batch_size // seq_len) * seq_len}")
    if batch_size < world_size * seq_len:
        raise UserError(f"--batch_size {batch_size} tokens holds fewer than one row of {seq_len} per "
                        f"rank for {world_size} ranks; raise --batch_size to at least "
                        f"{world_size * seq_len} or use fewer ranks")
    if grad_acc_steps is None:
        per_rank = batch_size // world_size
        if batch_size % world_size or per_rank % device_batch_size and device_batch_size < per_rank:
            raise UserError(f"--batch_size {batch_size} is not world_size {world_size} x a whole number of "
                            f"--device_batch_size {device_batch_size}; pick sizes that divide, or pass "
                            "--grad_acc_steps")
        grad_acc_steps = max(1, per_rank // device_batch_size)
    if grad_acc_steps <= 0:
        raise UserError("--grad_acc_steps must be a positive integer")
    micro_tokens, rem = divmod(batch_size, world_size * grad_acc_steps)
    if rem or micro_tokens % seq_len or micro_tokens == 0:
        raise UserError(f"--batch_size {batch_size} cannot be split into world_size {world_size} x "
                        f"grad_acc_steps {grad_acc_steps} micro-batches of whole {seq_len}-token rows; "
                        f"use a multiple of {world_size * grad_acc_steps * seq_len}")
    return grad_acc_steps, micro_tokens


def micro_batch_candidates(per_rank_tokens, seq_len):
    """Micro-batch sizes (tokens) that cut a rank's share of the global batch into whole micro-batches of whole
    rows, largest first."""
    rows = per_rank_tokens // seq_len
    return [rows // k * seq_len for k in range(1, rows + 1) if rows % k == 0]


def choose_micro_batch(candidates, measure, capacity_bytes, fixed_bytes=0, extra_bytes=0, headroom=0.1):
    """The largest micro-batch (tokens) whose forward+backward fits the device with headroom, for
    --device_batch_size auto; the global batch stays fixed (gradient accumulation fills the gap), so the choice
    never changes the loss curve.

    measure(tokens) runs one forward+backward and returns its peak bytes, or raises MemoryError when it does not
    fit; fixed_bytes is the part of a peak that does not grow with the batch (weights and their gradients),
    extra_bytes what the peak lacks (optimizer states, made at the first step). One probe at the smallest size
    gives the cost per token; the largest candidate predicted to fit is then measured itself and, if it does not
    fit after all, the next smaller one. Returns (tokens, [(tokens, measured peak or None for out of memory)])."""
    budget = capacity_bytes * (1 - headroom) - extra_bytes
    candidates = sorted(set(candidates), reverse=True)
    smallest = candidates[-1]
    tried = []

    def fits(tokens):
        try:
            peak = measure(tokens)
        except MemoryError:
            tried.append((tokens, None))
            return None
        tried.append((tokens, peak))
        return peak if peak <= budget else None

    base = fits(smallest)
    if base is None:
        raise UserError(f"even a micro-batch of {smallest} tokens does not fit the device's memory "
                        f"({capacity_bytes / 2**30:.1f} GiB with {headroom:.0%} headroom); lower --train_seq_len or "
                        "use a smaller model")
    per_token = max(0, base - fixed_bytes) / smallest
    for tokens in candidates:
        if tokens == smallest:
            return smallest, tried
        if fixed_bytes + per_token * tokens > budget:
            continue
        if fits(tokens) is not None:
            return tokens, tried
    return smallest, tried


def to_device(array, device):
    """A numpy batch as a tensor on `device`; on CUDA through pinned memory, so the copy is truly asynchronous."""
    import torch

    tensor = torch.from_numpy(array)
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def default_shard_folder(tokenizer_name, data_dir="data"):
    """The single data_dir/*_<tokenizer name>/ folder written by download_fineweb.py, or a UserError."""
    dirs = sorted(d for d in glob.glob(os.path.join(data_dir, f"*_{tokenizer_name}")) if os.path.isdir(d))
    if len(dirs) > 1:  # the suffix also matches another tokenizer's folder (e.g. "a_qs" for "qs"): ask the manifests
        def made_with_this_tokenizer(folder):
            parts = read_manifest_parts(folder).values()
            return any(part.get("tokenizer", {}).get("name") == tokenizer_name for part in parts)
        dirs = [d for d in dirs if made_with_this_tokenizer(d)] or dirs
    if not dirs:
        raise UserError(f"no --train_files/--val_files given and no shard folder {data_dir}/*_{tokenizer_name}/ "
                        f"exists; create one with download_fineweb.py --tokenizer {tokenizer_name}, or pass "
                        "--train_files 'DIR/train_*.bin' --val_files 'DIR/val_*.bin'")
    if len(dirs) != 1:
        found = f"found {len(dirs)}: {', '.join(dirs)}"
        raise UserError(f"no --train_files/--val_files given and {data_dir}/*_{tokenizer_name}/ is ambiguous "
                        f"({found}); pass --train_files 'DIR/train_*.bin' --val_files 'DIR/val_*.bin' or run "
                        f"download_fineweb.py --tokenizer {tokenizer_name}")
    return dirs[0]


def check_shards_match_tokenizer(paths, tokenizer_sha256, n_vocab, flag):
    """Refuse shards made with another tokenizer, naming the folder or file; returns the folders whose manifest
    says the writer has not finished (still running, or killed) so the caller can warn.

    A folder written by download_fineweb.py has a manifest (manifest.json, or manifest.rank{r}.json parts from split
    jobs): gptlab.shards.check_manifest compares its tokenizer ranks_sha256 with ours and checks every listed shard's
    header. Hand-made shards without a manifest are still checked for token ids beyond the vocabulary."""
    unfinished = []
    for folder in sorted({os.path.dirname(os.path.abspath(p)) for p in paths}):
        if not glob.glob(os.path.join(folder, MANIFEST_GLOB)):
            continue
        try:
            manifest = check_manifest(folder, tokenizer_sha256, verify_files=True)
        except UserError as err:
            raise UserError(f"{flag}: {err}") from None
        if not manifest["complete"]:
            unfinished.append(folder)
    for path in paths:
        head = np.asarray(read_shard(path)[: 1 << 20])
        if head.size and int(head.max()) >= n_vocab:
            raise UserError(f"shard {path} holds token id {int(head.max())} but the tokenizer has only {n_vocab} ids: "
                            "it was made with a different tokenizer; pass the right --tokenizer or re-tokenize")
    return unfinished


def shard_token_counts(paths):
    return [read_header(p)[1] for p in paths]


class BOSAlignedLoader:
    """Training batches: `next_batch()` → this rank's `grad_acc_steps` micro-batches [(inputs, targets), ...],
    each a pair of int64 numpy arrays of shape (rows_per_micro, seq_len)."""

    def __init__(self, paths, seq_len, batch_size, bos_id, rank=0, world_size=1, grad_acc_steps=1, seed=0,
                 align_to_bos=True):
        if batch_size % seq_len:
            raise UserError(f"--batch_size {batch_size} is not a multiple of --train_seq_len {seq_len}; "
                            f"use e.g. {max(1, batch_size // seq_len) * seq_len}")
        self.rows_per_step = batch_size // seq_len
        self.seq_len, self.world_size = seq_len, world_size
        self.set_grad_acc_steps(grad_acc_steps)
        self.paths = list(paths)
        self.counts = shard_token_counts(self.paths)
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
        self._cache = (None, None)  # (path, memmap) of the shard being read

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

    def load_state_dict(self, state):
        for key in ("seq_len", "rows_per_step"):
            if state[key] != getattr(self, key):
                raise UserError(f"the checkpoint's data position was recorded with {key}={state[key]} but this run "
                                f"uses {getattr(self, key)}; resume with the same --train_seq_len/--batch_size")
        if [os.path.basename(p) for p in state["paths"]] != [os.path.basename(p) for p in self.paths]:
            raise UserError("the checkpoint was trained on different --train_files (shard names differ); "
                            "resume with the same training shards")
        self.epoch, self.order_pos, self.pos = state["epoch"], state["order_pos"], state["pos"]

    # --- reading ------------------------------------------------------------------------------------------
    def _order(self, epoch):
        if epoch == 0:
            return list(range(len(self.paths)))
        return [int(i) for i in np.random.default_rng(self.seed + epoch).permutation(len(self.paths))]

    def _tokens(self, path):
        if self._cache[0] != path:
            self._cache = (path, read_shard(path, mmap=True))
        return self._cache[1]

    def _next_row_start(self):
        """Advance (epoch, order_pos, pos) to the next row start; return (tokens, start)."""
        span = self.seq_len + 1
        while True:
            tokens = self._tokens(self.paths[self._order(self.epoch)[self.order_pos]])
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
    """The fixed validation rows: n_rows windows of seq_len + 1 tokens, this rank's share via `batches()`."""

    def __init__(self, paths, seq_len, n_rows, rank=0, world_size=1):
        self.paths = list(paths)
        self.seq_len = seq_len
        self.n_rows = n_rows
        counts = shard_token_counts(self.paths)
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
        for path, n in zip(self.paths, counts):
            for start in range(0, n - seq_len, seq_len):
                if len(self.locations) == n_rows:
                    break
                self.locations.append((path, start))

    def my_rows(self):
        return self.locations[self.rank::self.world_size]

    def batches(self, rows_per_batch):
        """Yield (inputs, targets) int64 arrays of shape (<=rows_per_batch, seq_len) for this rank's rows."""
        mine = self.my_rows()
        shards = {p: read_shard(p) for p in {p for p, _ in mine}}
        for i in range(0, len(mine), rows_per_batch):
            rows = np.stack([np.asarray(shards[p][s:s + self.seq_len + 1], dtype=np.int64)
                             for p, s in mine[i:i + rows_per_batch]])
            yield np.ascontiguousarray(rows[:, :-1]), np.ascontiguousarray(rows[:, 1:])
