"""Train a modded-nanogpt-style GPT on token shards: the one research surface (flags, model, optimizer, loop).

    python   train_gpt.py --model_name ReadmeGPT --tokenizer readmetokenizer_v1000_n100000.pkl --vocab_size 1001 \
                          --model_dim 128 --num_heads 4 --num_layers 6
    torchrun --nproc_per_node=G train_gpt.py ...same flags...
    torchrun --nnodes=N --nproc_per_node=G --rdzv_backend=c10d --rdzv_endpoint=HOST:PORT train_gpt.py ...

Baseline: KellerJordan/modded-nanogpt, FlexAttention era (record #26). On CUDA the model uses FlexAttention with a
document-causal sliding-window block mask and torch.compile; on CPU the very same mask function is evaluated
densely and fed to scaled_dot_product_attention, so the same model trains (slowly) anywhere.

`--batch_size` is the GLOBAL number of tokens per optimizer step. Each rank runs `grad_acc_steps` forward/backward
passes of `--device_batch_size` tokens, so batch_size = world_size x grad_acc_steps x device_batch_size and the
loss curve is the same for any number of ranks (exactly so in float32 on CPU, up to summation order).

Everything that is not research lives in gptlab/: the run's folder, logs, metrics, results and checkpoints
(gptlab/run.py, one Run object), input checks (beside the formats they check), data loading, evaluations.
EXPERIMENTING.md says which file to edit for which experiment.
"""
import argparse
import contextlib
import json
import math
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from gptlab import distributed as dist_utils
from gptlab import experiment as exp
from gptlab.cli import ArgumentParser, HelpFormatter, require_non_negative, require_positive
from gptlab.dataloader import (BOSAlignedLoader, ValidationSet, choose_micro_batch, micro_batch_candidates,
                               select_run_shards, split_batch, to_device)
from gptlab.errors import UserError, run_cli
from gptlab.evals.bpb import evaluate_val, token_byte_lengths
from gptlab.evals.hellaswag import check_hellaswag_file, evaluate_hellaswag_in_run
from gptlab.fileio import check_folder_creatable
from gptlab.generate import sample_continuations
from gptlab.hellaswag_data import DEFAULT_PATH as HELLASWAG_DEFAULT_PATH
from gptlab.run import Run, add_run_flags, parse_flags, restore_training_state
from gptlab.tokenizer import open_tokenizer

REPO_ROOT = os.path.dirname(os.path.abspath(__file__))
BLOCK_SIZE = 128  # FlexAttention's block size: every sequence length is a multiple of it, on every device
# fixed attention temperature for QK-normed heads: 0.12 at head_dim 128 (modded-nanogpt, early-2025 records),
# scaled so the largest logit (q = k: head_dim x scale = 15.36) is the same at any head_dim
ATTN_SCALE_AT_128 = 0.12
LOSS_CHUNK_ELEMENTS = 2**26  # eager loss: logits of at most this many elements alive (256 MiB in fp32)


# ============================================================================================== Flags
# Named configurations by scale; flags given beside --preset win. Each runs on any number and size of GPUs: the
# global batch is fixed and --device_batch_size auto picks the micro-batch (gradient accumulation fills the gap).
PRESETS = {
    # the quickstart's CPU-sized model (1.7M parameters, 0.5M tokens)
    "quickstart": dict(model_dim=128, num_heads=4, num_layers=6, train_seq_len=256, val_seq_len=256, batch_size=4096,
                       device_batch_size=4096, train_steps=120, cooldown_frac=0.4, val_loss_every=20, val_steps=4,
                       val_batch_size=4096, hellaswag_limit=1000),
    # GPT-2 small's shape (12 x 768, 6 heads of 128), ~2B tokens in 3,800 steps of 524,288
    "gpt2-small": dict(num_layers=12, num_heads=6, model_dim=768, train_seq_len=2048, val_seq_len=2048,
                       batch_size=524288, train_steps=3800, cooldown_frac=0.4, val_loss_every=250, val_steps=20,
                       hellaswag_every=1000),
    # GPT-2 medium's shape (24 x 1024, 8 heads of 128), ~4B tokens in 7,600 steps of 524,288
    "gpt2-medium": dict(num_layers=24, num_heads=8, model_dim=1024, train_seq_len=2048, val_seq_len=2048,
                        batch_size=524288, train_steps=7600, cooldown_frac=0.4, val_loss_every=250, val_steps=20,
                        hellaswag_every=2000),
    # modded-nanogpt record #26's recipe on this code: 12 x 768, 6 heads of 128, 3 value embeddings, 48K-token
    # rows, 393,216 tokens per step, 1,750 steps, cooldown 0.45, windows up to 1,792 (its learning rates are the
    # defaults); validation on ~10.6M tokens in rows of the training length (it uses 256K-token rows)
    "record26": dict(num_layers=12, num_heads=6, model_dim=768, num_val_emb=3, train_seq_len=49152,
                     val_seq_len=49152, batch_size=393216, train_steps=1750, cooldown_frac=0.45, window_size=1792,
                     val_loss_every=125, val_steps=27, val_batch_size=393216),
}


def int_or_auto(text):
    return text if text == "auto" else int(text)


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="a named configuration (see PRESETS in train_gpt.py); flags given beside it win")
    g = p.add_argument_group("data")
    g.add_argument("--train_files", nargs="+", default=None,
                   help="training shards: paths or quoted globs (default: data/*_<tokenizer stem>/train_*.bin)")
    g.add_argument("--val_files", nargs="+", default=None,
                   help="validation shards: paths or quoted globs (default: data/*_<tokenizer stem>/val_*.bin)")
    g.add_argument("--tokenizer", default=None, help="tokenizer .pkl (a path or a name inside tokenizers/)")
    g.add_argument("--train_seq_len", type=int, default=1024, help="tokens per training row (multiple of 128)")
    g.add_argument("--val_seq_len", type=int, default=1024, help="tokens per validation row (multiple of 128)")
    g = p.add_argument_group("model")
    g.add_argument("--vocab_size", type=int, default=None, help="embedding rows (>= tokenizer n_vocab incl. specials; "
                   "default: the tokenizer's n_vocab); padded to a multiple of 128 inside the model")
    g.add_argument("--num_layers", type=int, default=12, help="transformer blocks")
    g.add_argument("--num_heads", type=int, default=6, help="attention heads per block")
    g.add_argument("--model_dim", type=int, default=384, help="width of the residual stream")
    g.add_argument("--head_dim", type=int, default=None, help="per-head width (default: model_dim // num_heads)")
    g.add_argument("--mlp_ratio", type=float, default=4.0, help="MLP hidden width / model_dim")
    g.add_argument("--num_val_emb", type=int, default=2, help="value embeddings, mixed into the first and last layers")
    g.add_argument("--window_size", type=int, default=1792, help="final long sliding-window size in tokens "
                   "(multiple of 128; warms up from 128 during training; short windows are half)")
    g = p.add_argument_group("optimization")
    g.add_argument("--train_steps", type=int, default=1000, help="optimizer steps")
    g.add_argument("--batch_size", type=int, default=65536, help="GLOBAL tokens per optimizer step")
    g.add_argument("--device_batch_size", type=int_or_auto, default="auto", help="tokens per rank per forward "
                   "pass, or auto: on CUDA the largest that fits the GPU (probed before the first step), on CPU "
                   "about 4096 (ignored when --grad_acc_steps is given)")
    g.add_argument("--grad_acc_steps", type=int, default=None,
                   help="micro-batches per rank per step (default: batch_size / (world_size x device_batch_size))")
    g.add_argument("--cooldown_frac", type=float, default=0.4, help="fraction of steps of linear LR decay at the end")
    g.add_argument("--lr_scale", type=float, default=1.0, help="multiplies every learning rate")
    g.add_argument("--seed", type=int, default=0, help="initialisation, data order and sampling")
    g = p.add_argument_group("evaluation")
    g.add_argument("--val_loss_every", type=int, default=100, help="validate every N steps (0: only at the end)")
    g.add_argument("--val_steps", type=int, default=10, help="validation batches per evaluation (a fixed set)")
    g.add_argument("--val_batch_size", type=int, default=None, help="GLOBAL tokens per validation step (default: "
                   "batch_size rounded to val_seq_len)")
    g.add_argument("--hellaswag_every", type=int, default=0,
                   help="also run HellaSwag every N steps (0: only at the end)")
    g.add_argument("--hellaswag_limit", type=int, default=None, help="first N examples (default: all 10042; 0: skip)")
    g.add_argument("--hellaswag_path", default=HELLASWAG_DEFAULT_PATH,
                   help="HellaSwag validation .jsonl (python download_hellaswag.py writes it)")
    g.add_argument("--sample_tokens", type=int, default=48, help="tokens per sampled continuation at the end (0: none)")
    g = p.add_argument_group("hardware")
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="autocast dtype (auto: bfloat16 on CUDA, float32 on CPU)")
    g.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile (default: on CUDA only)")
    g.add_argument("--attention", default="auto", choices=["auto", "flex", "sdpa"],
                   help="auto: FlexAttention on CUDA, dense SDPA with the same mask on CPU")
    add_run_flags(p)  # --model_name, --experiments_dir, --save_model, --checkpoint_every, --resume, --log_every,
    #                   --dry_run
    return p


# a --resume run takes every other flag from its checkpoint unless given again; these depend on the machine
FRESH_ON_RESUME = ("device", "dtype", "compile", "attention", "device_batch_size", "grad_acc_steps")
ARCH_KEYS = ("vocab_size", "num_layers", "num_heads", "head_dim", "model_dim", "mlp_ratio", "num_val_emb")


# ============================================================================================== Model
def norm(x):
    # parameter-free RMSNorm (modded-nanogpt: affine scales and biases removed, 2024)
    return F.rms_norm(x, (x.size(-1),))


def next_multiple(n, k):
    return -(-n // k) * k


class CastedLinear(nn.Linear):
    """Linear without bias; uniform init with the std of modded-nanogpt's CastedLinear (0.5 / sqrt(in))."""

    def __init__(self, in_features, out_features, zero_init=False):
        super().__init__(in_features, out_features, bias=False)
        with torch.no_grad():
            if zero_init:  # zero-init output projections (modded-nanogpt, from muP-style "zero readout")
                self.weight.zero_()
            else:
                bound = math.sqrt(3) * 0.5 * in_features ** -0.5
                self.weight.uniform_(-bound, bound)


class Rotary(nn.Module):
    # rotary embeddings on half the head dims, the other half unrotated (modded-nanogpt "half-truncated RoPE", 2025)
    def __init__(self, head_dim, max_seq_len):
        super().__init__()
        self.head_dim = head_dim
        self._build(max_seq_len)

    def _build(self, seq_len, device=None):
        quarter = self.head_dim // 4
        freq = (1 / 1024) ** torch.linspace(0, 1, steps=quarter, dtype=torch.float32, device=device)
        freq = torch.cat([freq, freq.new_zeros(quarter)])  # (head_dim/2,)
        theta = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), freq)
        self.register_buffer("cos", theta.cos(), persistent=False)
        self.register_buffer("sin", theta.sin(), persistent=False)

    def forward(self, x, start=0):  # x: (B, T, H, D) at positions start, ..., start + T - 1
        end = start + x.size(1)
        if end > self.cos.size(0):  # longer than ever seen (e.g. a long HellaSwag row): extend the table
            self._build(next_multiple(end, BLOCK_SIZE), x.device)
        cos, sin = self.cos[None, start:end, None, :], self.sin[None, start:end, None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        y = torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)
        return y.type_as(x)


def attention_scale(head_dim):
    return ATTN_SCALE_AT_128 * 128 / head_dim


def attend(q, k, v, mask):
    """q, k, v: (B, H, T, D). mask: a FlexAttention BlockMask, or a dense bool (B, 1, T, T) mask for SDPA."""
    scale = attention_scale(q.size(-1))
    if isinstance(mask, BlockMask):
        return _flex_attention()(q, k, v, block_mask=mask, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


_FLEX = {"fn": flex_attention}  # inside a compiled model the plain function is traced into the graph


def _flex_attention():
    return _FLEX["fn"]


def use_compiled_flex_attention(compiled=True):
    """Without a compiled model, FlexAttention on CUDA still needs its own compiled kernel to be fast; a compiled
    model traces the plain function instead (compiled=False)."""
    _FLEX["fn"] = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, num_heads, head_dim, max_seq_len):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        hdim = num_heads * head_dim
        bound = math.sqrt(3) * 0.5 * dim ** -0.5
        # merged q/k/v weight (3, hdim, dim): Muon orthogonalises q, k and v separately (modded-nanogpt, 2025)
        self.qkv_w = nn.Parameter(torch.empty(3, hdim, dim).uniform_(-bound, bound))
        # learned mix of this layer's values with the value embedding (modded-nanogpt value-embedding record, 2024-12)
        self.lambdas = nn.Parameter(torch.tensor([0.5, 0.5]))
        self.rotary = Rotary(head_dim, max_seq_len)
        self.c_proj = CastedLinear(hdim, dim, zero_init=True)

    def forward(self, x, ve, mask, cache=None):  # x: (B, T, dim); ve: (B, T, hdim) or None
        # cache (generation): this layer's entry of a gptlab.generate.KVCache, which holds the earlier tokens' keys
        # and values; x then holds only the new tokens
        B, T = x.shape[:2]
        qkv = F.linear(x, self.qkv_w.flatten(end_dim=1)).view(B, T, 3 * self.num_heads, self.head_dim)
        q, k, v = qkv.chunk(3, dim=2)  # each (B, T, H, D)
        q, k = norm(q), norm(k)  # QK-norm (modded-nanogpt 2024-10 "ModernArch" record)
        start = 0 if cache is None else cache.start
        q, k = self.rotary(q, start), self.rotary(k, start)
        lambdas = self.lambdas.to(qkv.dtype)  # fp32 scalars would promote bf16 values to fp32
        v = lambdas[0] * v
        if ve is not None:
            v = v + lambdas[1] * ve.view_as(v)
        # q, k in the matmuls' dtype (bfloat16 under CUDA autocast): CUDA autocast runs rms_norm in float32, and
        # FlexAttention (unlike SDPA) is not autocast, so it would run in float32
        q, k, v = q.to(qkv.dtype), k.to(qkv.dtype), v.to(qkv.dtype)
        if cache is not None:  # attend to the cached tokens too, with the mask the cache builds by the same rule
            k, v, mask = cache.extend(k, v)
        y = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask)  # (B, H, T, D)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, dim, mlp_ratio):
        super().__init__()
        hidden = int(mlp_ratio * dim)
        self.c_fc = CastedLinear(dim, hidden)
        self.c_proj = CastedLinear(hidden, dim, zero_init=True)

    def forward(self, x):
        # ReLU² activation (modded-nanogpt 2024-10 "ModernArch" record, from Primer / So et al. 2021)
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, dim, num_heads, head_dim, mlp_ratio, max_seq_len):
        super().__init__()
        self.attn = CausalSelfAttention(dim, num_heads, head_dim, max_seq_len)
        self.mlp = MLP(dim, mlp_ratio)
        # x0 residual mixing: x = a*x + b*x0 with learned a, b (modded-nanogpt, late-2024 records)
        self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))

    def forward(self, x, x0, ve, mask, cache=None):
        a, b = self.lambdas.to(x.dtype)  # keep the residual stream in its (autocast) dtype
        x = a * x + b * x0
        x = x + self.attn(norm(x), ve, mask, cache)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, num_layers, num_heads, head_dim, model_dim, mlp_ratio=4.0, num_val_emb=2,
                 max_seq_len=1024):
        super().__init__()
        self.vocab_size = vocab_size
        # vocab padded to a multiple of 128 for efficient matmuls (modded-nanogpt: 50257 → 50304)
        self.padded_vocab = next_multiple(vocab_size, 128)
        self.num_layers = num_layers
        hdim = num_heads * head_dim
        self.embed = nn.Embedding(self.padded_vocab, model_dim)
        # value embeddings: token embeddings mixed into the values of the first and last layers (modded-nanogpt
        # value-embedding record, 2024-12); layer i of the first num_val_emb and of the last num_val_emb layers
        # uses embedding i (for a shallow net the last layers' assignment wins where the two ranges overlap)
        self.value_embeds = nn.ModuleList([nn.Embedding(self.padded_vocab, hdim) for _ in range(num_val_emb)])
        self.ve_index = [None] * num_layers
        for i in range(num_val_emb):
            self.ve_index[i] = i
        for i in range(num_val_emb):
            self.ve_index[num_layers - num_val_emb + i] = i
        self.blocks = nn.ModuleList([Block(model_dim, num_heads, head_dim, mlp_ratio, max_seq_len)
                                     for _ in range(num_layers)])
        # long windows on every 4th layer of the first half, mirrored in the second half (U-net symmetric), short
        # elsewhere: for 12 layers long at 0, 4, 7, 11 (modded-nanogpt long/short windows, 2025, after Gemma 2's
        # global/local alternation)
        self.layer_window = ["long" if min(i, num_layers - 1 - i) % 4 == 0 else "short" for i in range(num_layers)]
        # U-net skips: the first half's outputs are added (learned weights) to the second half's inputs in
        # reverse order (modded-nanogpt U-net skip-connection record by Brendan Hogan, 2024-11)
        self.num_skips = num_layers // 2
        self.skip_weights = nn.Parameter(torch.ones(self.num_skips))
        self.lm_head = CastedLinear(model_dim, self.padded_vocab, zero_init=True)

    def forward(self, idx, masks, targets=None, cache=None):
        """idx: (B, T) token ids; masks: {"long": mask, "short": mask} (see build_attention_masks).
        With targets: the SUM of the cross-entropy over all B*T positions (nats).
        Without: logits (B, T, padded_vocab).
        Generation: cache (a gptlab.generate.KVCache) holds the earlier tokens; idx holds the next ones, masks is
        None."""
        # the residual stream in the autocast dtype (bf16 on GPUs) from the embeddings on, as modded-nanogpt casts
        # its embeddings: half the bytes in every elementwise and norm kernel and in saved activations
        dtype = torch.get_autocast_dtype(idx.device.type) if torch.is_autocast_enabled(idx.device.type) else None
        ve = [emb(idx).to(dtype) for emb in self.value_embeds]
        x = x0 = norm(self.embed(idx)).to(dtype)
        skips = []
        first_decoder = self.num_layers - self.num_skips
        for i, block in enumerate(self.blocks):
            if i >= first_decoder:
                x = x + self.skip_weights[i - first_decoder].to(x.dtype) * skips.pop()
            x = block(x, x0, None if self.ve_index[i] is None else ve[self.ve_index[i]],
                      None if masks is None else masks[self.layer_window[i]], None if cache is None else cache.layer(i))
            if i < self.num_skips:
                skips.append(x)
        x = norm(x)
        if targets is None:
            return self.logits(x)
        return self.cross_entropy_sum(x, targets)

    def logits(self, x):
        """Final hidden states (..., dim) → soft-capped float32 logits (..., padded_vocab)."""
        logits = self.lm_head(x).float()
        # logit soft-cap 30*sigmoid(z/(7.5*sqrt(d))) (modded-nanogpt 2025; earlier a Gemma-2-style 30*tanh(z/30))
        return 30 * torch.sigmoid(logits / (7.5 * x.size(-1) ** 0.5))

    def _cross_entropy_sum(self, x, targets):  # float32 logits, softmax statistics and loss
        return F.cross_entropy(self.logits(x), targets, reduction="sum")

    def cross_entropy_sum(self, x, targets):
        """The summed cross-entropy (nats) of x (B, T, dim) against targets (B, T). Compiled, inductor fuses the
        soft-cap into the loss; eager, rows go in chunks recomputed in backward, so only one chunk's logits (at
        most LOSS_CHUNK_ELEMENTS) are alive instead of ~5 tensors of tokens x vocab."""
        x, targets = x.flatten(0, 1), targets.flatten()
        rows = max(1, LOSS_CHUNK_ELEMENTS // self.padded_vocab)
        if torch.compiler.is_compiling() or x.size(0) <= rows:
            return self._cross_entropy_sum(x, targets)
        total = 0
        for start in range(0, x.size(0), rows):
            chunk = (x[start:start + rows], targets[start:start + rows])
            if torch.is_grad_enabled():
                total = total + torch.utils.checkpoint.checkpoint(self._cross_entropy_sum, *chunk, use_reentrant=False)
            else:
                total = total + self._cross_entropy_sum(*chunk)
        return total


def document_window_mask_mod(docs, window_blocks):
    """FlexAttention mask_mod: causal AND same document AND at most window_blocks-1 whole blocks back
    (document-causal sliding-window attention: modded-nanogpt FlexAttention record, 2024-11).

    docs: (B, T) document index of every position; window_blocks: 0-dim integer tensor (a tensor, not an int, so a
    growing window does not recompile). The window counts 128-token blocks, as modded-nanogpt's block masks do."""
    def mask_mod(b, h, q_idx, kv_idx):
        causal = q_idx >= kv_idx
        same_doc = docs[b, q_idx] == docs[b, kv_idx]
        in_window = (q_idx // BLOCK_SIZE - kv_idx // BLOCK_SIZE) < window_blocks
        return causal & same_doc & in_window
    return mask_mod


def dense_mask(mask_mod, B, T, device):
    """Evaluate a mask_mod on every (b, q, kv): the exact dense equivalent of its block mask, (B, 1, T, T) bool."""
    b = torch.arange(B, device=device).view(B, 1, 1, 1)
    q = torch.arange(T, device=device).view(1, 1, T, 1)
    kv = torch.arange(T, device=device).view(1, 1, 1, T)
    return mask_mod(b, torch.zeros((), dtype=torch.long, device=device), q, kv)


def build_attention_masks(idx, eot_id, long_blocks, short_blocks, use_flex):
    """Document-causal sliding-window masks for a batch idx (B, T) whose documents start at <|endoftext|>.

    Returns {"long": mask, "short": mask}: BlockMasks for FlexAttention, or dense bool masks for SDPA."""
    B, T = idx.shape
    if T % BLOCK_SIZE:
        raise UserError(f"sequence length {T} is not a multiple of {BLOCK_SIZE} (FlexAttention's block size)")
    docs = (idx == eot_id).cumsum(dim=1)  # (B, T): each <|endoftext|> starts a new document (the real id, not 50256)
    masks = {}
    for name, blocks in (("long", long_blocks), ("short", short_blocks)):
        # a fill, not torch.tensor(blocks, device=...): copying a host value to the GPU would stall its queue
        mask_mod = document_window_mask_mod(docs, torch.full((), blocks, dtype=torch.long, device=idx.device))
        if use_flex:  # partial vs full blocks are found by create_block_mask itself from the mask_mod
            make = _compiled_create_block_mask() if idx.device.type == "cuda" else create_block_mask
            masks[name] = make(mask_mod, B, None, T, T, device=idx.device)
        else:
            masks[name] = dense_mask(mask_mod, B, T, idx.device)
    return masks


_CREATE_BLOCK_MASK = {}


def _compiled_create_block_mask():
    """create_block_mask compiled once (the eager version materialises (B, T, T) int64 intermediates on the GPU).
    It compiles once per batch shape: the window and the documents live in tensors the mask_mod closes over."""
    if "fn" not in _CREATE_BLOCK_MASK:
        _CREATE_BLOCK_MASK["fn"] = torch.compile(create_block_mask, dynamic=False)
    return _CREATE_BLOCK_MASK["fn"]


def attention_pairs(idx, eot_id, window_blocks):
    """How many (query, key) pairs the document-causal sliding-window mask of idx (B, T) allows: a 0-dim int64
    tensor computed in O(B*T) on idx's device, equal to the dense mask's sum (attention FLOPs for MFU)."""
    pos = torch.arange(idx.size(1), device=idx.device)
    doc_start = torch.where(idx == eot_id, pos, 0).cummax(dim=1).values  # (B, T): where each document begins
    window_start = (pos // BLOCK_SIZE - window_blocks + 1).clamp(min=0) * BLOCK_SIZE  # (T,): oldest key in window
    return (pos - torch.maximum(doc_start, window_start) + 1).sum()


def training_flops(model, tokens, pairs):
    """(matmul FLOPs, attention FLOPs) of one forward + backward over `tokens` tokens whose masks allow
    pairs["long"] / pairs["short"] query-key pairs: 6 x tokens x (parameters that are multiplied: not the
    embedding look-ups), and per layer 12 x head_dim x heads x allowed pairs (QK^T and AV: 2 multiply-adds per
    pair and head dim each; the backward costs twice the forward)."""
    n_matmul = sum(p.numel() for n, p in model.named_parameters()
                   if p.ndim >= 2 and not n.startswith(("embed.", "value_embeds.")))
    attn = sum(12 * block.attn.head_dim * block.attn.num_heads * pairs[window]
               for block, window in zip(model.blocks, model.layer_window))
    return 6 * tokens * n_matmul, attn


def window_blocks(step, train_steps, window_size):
    # sliding-window warm-up: the long window grows linearly from 1 block to window_size over training, short = half
    # (modded-nanogpt FlexAttention record 2024-11 for the warm-up, long/short windows in 2025)
    max_blocks = window_size // BLOCK_SIZE
    long_blocks = max(1, min(max_blocks, math.ceil(max_blocks * step / max(1, train_steps))))
    return long_blocks, max(1, long_blocks // 2)


# ============================================================================================== Optimizer
def zeropower_via_newtonschulz5(G, steps=5):
    """Approximately orthogonalise G (..., m, n) with a quintic Newton–Schulz iteration (Keller Jordan's Muon;
    coefficients chosen to maximise the slope at zero). bfloat16 on CUDA, float32 on CPU (exact and fast there)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16() if G.is_cuda else G.float()
    transposed = G.size(-2) > G.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)  # spectral norm <= 1
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if transposed:
        X = X.mT
    return X


_COMPILED_NS = {}


def orthogonalize(G, steps=5, compiled=None):
    """zeropower_via_newtonschulz5, compiled by default on CUDA (modded-nanogpt compiles it: the iteration's
    elementwise work fuses into the matmuls' epilogues) and eager elsewhere; `compiled` forces either."""
    if not (G.is_cuda if compiled is None else compiled):
        return zeropower_via_newtonschulz5(G, steps)
    if "fn" not in _COMPILED_NS:
        _COMPILED_NS["fn"] = torch.compile(zeropower_via_newtonschulz5, dynamic=False)
    return _COMPILED_NS["fn"](G, steps)


class Adam(torch.optim.Optimizer):
    """Adam (Kingma & Ba, 2014) without weight decay, computed as torch.optim.Adam computes it, but with the step
    count on the host (torch's Adam keeps it in tensors it reads back every step) and each group's tensors updated
    by a few foreach kernels. Gradients arrive already summed over ranks (GradientSync)."""

    def __init__(self, params, lr=1e-3, betas=(0.8, 0.95), eps=1e-10):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, step=0))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = [self.state[p] for p in params]
            for p, state in zip(params, states):
                if "exp_avg" not in state:
                    state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
            grads = [p.grad for p in params]
            exp_avg, exp_avg_sq = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
            if "step" not in group:  # a torch.optim.Adam checkpoint: its step count lives in each parameter's state
                group["step"] = max((int(s["step"]) for s in states if "step" in s), default=0)
            group["step"] += 1
            (beta1, beta2), t = group["betas"], group["step"]
            torch._foreach_lerp_(exp_avg, grads, 1 - beta1)
            torch._foreach_mul_(exp_avg_sq, beta2)
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2)
            denom = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_div_(denom, (1 - beta2 ** t) ** 0.5)
            torch._foreach_add_(denom, group["eps"])
            torch._foreach_addcdiv_(params, exp_avg, denom, -group["lr"] / (1 - beta1 ** t))


def _reduce_scatter(dist):  # torch 2.13 renamed reduce_scatter_tensor (same arguments) and warns on the old name
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _all_gather(dist):  # likewise all_gather_into_tensor
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class Muon(torch.optim.Optimizer):
    """MomentUm Orthogonalized by Newton–Schulz (Keller Jordan, modded-nanogpt Muon records, 2024-10), distributed
    as in record #26: same-shape matrices are dealt out in chunks of world_size, one per rank; each rank receives
    only the rank-summed gradients of its own matrices (a reduce-scatter, launched by GradientSync while backward
    still runs), updates their momentum, orthogonalises all of its matrices of one shape in one batched
    Newton–Schulz (few large kernels instead of many small ones) and applies the updates, then an all-gather per
    chunk hands every rank the updated matrices. No rank holds or orthogonalises a gradient it does not own.

    The update of every matrix is computed exactly as on one rank, so the result does not depend on the world size.
    Each chunk's communication buffers are allocated once, on the first step. Momentum buffers live on their owner;
    `gather_state()` (collective) copies them everywhere before a checkpoint, so any rank's checkpoint resumes on
    any world size."""

    def __init__(self, params, lr=0.05, momentum=0.95, ns_steps=5, rank=0, world_size=1):
        super().__init__(params, dict(lr=lr, momentum=momentum, ns_steps=ns_steps))
        self.rank, self.world_size = rank, world_size
        by_shape = {}
        for g, group in enumerate(self.param_groups):  # group index, not the dict: load_state_dict replaces those
            for p in group["params"]:
                by_shape.setdefault((tuple(p.shape), g), []).append((p, g))
        # chunks: ([(param, group index)] of one shape and group, at most world_size long); entry j belongs to rank j
        self.chunks, self.chunks_by_shape = [], []
        for members in by_shape.values():
            first = len(self.chunks)
            self.chunks += [members[i:i + world_size] for i in range(0, len(members), world_size)]
            self.chunks_by_shape.append(range(first, len(self.chunks)))
        self._buffers = [None] * len(self.chunks)  # per chunk: (world_size stacked matrices, this rank's matrix)
        self._reduced = [None] * len(self.chunks)  # per chunk: (summed gradient of the owned matrix or None, handle)

    def _chunk_buffers(self, c):
        """(stacked, mine): stacked (world_size x rows, cols) holds one matrix per rank, rows beyond the chunk's
        members stay zero (padding); mine is this rank's matrix. Flat along dim 0, as gloo and NCCL want them."""
        if self._buffers[c] is None:
            p = self.chunks[c][0][0]
            stacked = torch.zeros((self.world_size * p.size(0),) + tuple(p.shape[1:]), dtype=p.dtype, device=p.device)
            self._buffers[c] = (stacked, torch.empty_like(p))
        return self._buffers[c]

    def start_reduce(self, c):
        """Start summing chunk c's gradients over ranks (each rank receives its own matrix's); idempotent."""
        import torch.distributed as dist

        if self._reduced[c] is not None:
            return
        chunk = self.chunks[c]
        if self.world_size == 1:
            p = chunk[0][0]
            self._reduced[c] = (p.grad if p.grad is not None else torch.zeros_like(p), None)
            return
        stacked, mine = self._chunk_buffers(c)
        slots = stacked.view(self.world_size, *chunk[0][0].shape)
        for j, (p, _) in enumerate(chunk):
            slots[j].copy_(p.grad) if p.grad is not None else slots[j].zero_()
        handle = _reduce_scatter(dist)(mine, stacked, op=dist.ReduceOp.SUM, async_op=True)
        self._reduced[c] = (mine if self.rank < len(chunk) else None, handle)

    @torch.no_grad()
    def step(self):
        for c in range(len(self.chunks)):  # without GradientSync (or for chunks it did not start)
            self.start_reduce(c)
        gathers = []
        for chunk_ids in self.chunks_by_shape:
            owned, nesterov = [], []  # this rank's matrices of this shape, their Nesterov momenta
            for c in chunk_ids:
                grad, handle = self._reduced[c]
                if handle is not None:
                    handle.wait()
                if self.rank < len(self.chunks[c]):
                    p, g = self.chunks[c][self.rank]
                    group = self.param_groups[g]
                    buf = self._momentum(p)
                    buf.lerp_(grad, 1 - group["momentum"])
                    nesterov.append(grad.lerp(buf, group["momentum"]))
                    owned.append(p)
            if owned:
                updates = orthogonalize(torch.stack(nesterov), group["ns_steps"])
                # scale so the update RMS is shape-independent: sqrt(max(1, rows/cols)) (modded-nanogpt)
                lr = group["lr"] * max(1, owned[0].size(-2) / owned[0].size(-1)) ** 0.5
                for p, update in zip(owned, updates):
                    p.add_(update.to(p.dtype), alpha=-lr)
            if self.world_size > 1:  # the next shape's Newton–Schulz overlaps these all-gathers
                gathers += [self._start_gather(c, [p for p, _ in self.chunks[c]]) for c in chunk_ids]
        self._finish_gathers(gathers)
        self._reduced = [None] * len(self.chunks)

    def _momentum(self, p):
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
        return state["momentum_buffer"]

    def _start_gather(self, c, tensors):
        """Start giving every rank rank j's tensors[j] (tensors: one per member of chunk c; an idle rank of a short
        chunk sends its padding slot); _finish_gathers copies them in place."""
        import torch.distributed as dist

        stacked, _ = self._chunk_buffers(c)
        slots = stacked.view(self.world_size, *tensors[0].shape)
        mine = tensors[self.rank] if self.rank < len(tensors) else slots[self.rank]
        return c, tensors, _all_gather(dist)(stacked, mine.contiguous(), async_op=True)

    def _finish_gathers(self, gathers):
        for c, tensors, handle in gathers:
            handle.wait()
            slots = self._buffers[c][0].view(self.world_size, *tensors[0].shape)
            for j, tensor in enumerate(tensors):
                if j != self.rank:
                    tensor.copy_(slots[j])

    @torch.no_grad()
    def gather_state(self):
        """Collective: give every rank every matrix's momentum buffer (each owner's is the current one)."""
        if self.world_size == 1:
            return
        self._finish_gathers([self._start_gather(c, [self._momentum(p) for p, _ in chunk])
                              for c, chunk in enumerate(self.chunks)])


class GradientSync:
    """Sums gradients over ranks while backward still runs (post-accumulate-grad hooks, as in modded-nanogpt's
    2025 records). During the last micro-batch's backward each parameter reports when its gradient is final;
    Adam's gradients are all-reduced in buckets (each large tensor alone, the small ones flattened into one
    preallocated buffer) and Muon's chunks reduce-scattered (see Muon) as soon as they are complete. Collectives
    must start in the same order on every rank, so they start in one fixed order (the expected backward order:
    parameters registered last first), each only when everything before it is ready, as DistributedDataParallel
    does with its buckets. Per step: len(adam_buckets) all-reduces + one reduce-scatter and one all-gather per
    Muon chunk. Under torch.compile the whole backward is one graph and the hooks fire when it ends: no overlap
    then, but the same result."""

    SMALL_NUMEL = 1 << 15  # Adam tensors below this share one flat bucket (the scalars: lambdas, skip weights)

    def __init__(self, model, adam_params, muon, world_size):
        import torch.distributed as dist

        self.dist, self.muon, self.world_size = dist, muon, world_size
        position = {p: i for i, p in enumerate(model.parameters())}
        small = [p for p in adam_params if p.numel() < self.SMALL_NUMEL]
        self.adam_buckets = [[p] for p in adam_params if p.numel() >= self.SMALL_NUMEL] + ([small] if small else [])
        units = [(max(position[p] for p in bucket), "adam", b) for b, bucket in enumerate(self.adam_buckets)]
        units += [(min(position[p] for p, _ in chunk), "muon", c) for c, chunk in enumerate(muon.chunks)]
        self.units = [(kind, item) for _, kind, item in sorted(units, key=lambda u: -u[0])]
        self.unit_of = {}  # param → its unit
        for u, (kind, item) in enumerate(self.units):
            for p in self.adam_buckets[item] if kind == "adam" else [p for p, _ in muon.chunks[item]]:
                self.unit_of[p] = u
        self.members = [len(self.adam_buckets[item]) if kind == "adam" else len(muon.chunks[item])
                        for kind, item in self.units]
        self.flat = {}  # bucket index → its preallocated flat buffer (buckets of several tensors)
        self.armed = False  # True during the backward of the last micro-batch of a step
        self._reset()
        if world_size > 1:
            for p in self.unit_of:
                p.register_post_accumulate_grad_hook(self._grad_ready)

    def _reset(self):
        self.ready = [0] * len(self.units)
        self.next_unit = 0  # units before this one have started
        self.handles = []

    def _grad_ready(self, p):
        if not self.armed:
            return
        self.ready[self.unit_of[p]] += 1
        while self.next_unit < len(self.units) and self.ready[self.next_unit] == self.members[self.next_unit]:
            self._start(self.next_unit)

    def _start(self, u):
        kind, item = self.units[u]
        if kind == "muon":
            self.muon.start_reduce(item)
        else:
            bucket = self.adam_buckets[item]
            for p in bucket:
                if p.grad is None:  # no gradient this step: counts as zero
                    p.grad = torch.zeros_like(p)
            if len(bucket) == 1:
                self.handles.append((None, self.dist.all_reduce(bucket[0].grad, async_op=True)))
            else:
                if item not in self.flat:
                    self.flat[item] = torch.empty(sum(p.numel() for p in bucket), dtype=bucket[0].dtype,
                                                  device=bucket[0].device)
                flat = self.flat[item]
                torch.cat([p.grad.view(-1) for p in bucket], out=flat)
                self.handles.append((item, self.dist.all_reduce(flat, async_op=True)))
        self.next_unit = u + 1

    def finish(self):
        """After the last backward: start what has not started (e.g. parameters without a gradient), wait for
        Adam's all-reduces and unflatten their buckets (Muon waits for its own in step())."""
        self.armed = False
        if self.world_size > 1:
            while self.next_unit < len(self.units):
                self._start(self.next_unit)
            for item, handle in self.handles:
                handle.wait()
                if item is not None:
                    offset = 0
                    for p in self.adam_buckets[item]:
                        p.grad.view(-1).copy_(self.flat[item][offset:offset + p.numel()])
                        offset += p.numel()
        self._reset()


def build_optimizers(model, rank=0, world_size=1):
    """Muon for the hidden matrices; Adam for embeddings, head and scalars (learning rates as in modded-nanogpt's
    FlexAttention-era records)."""
    hidden_matrices = [p for n, p in model.blocks.named_parameters() if p.ndim >= 2]
    embed_params = [model.embed.weight] + [e.weight for e in model.value_embeds]
    scalar_params = [p for p in model.parameters() if p.ndim < 2]
    head_params = [model.lm_head.weight]
    n_all = sum(1 for _ in model.parameters())
    assert len(hidden_matrices) + len(embed_params) + len(scalar_params) + len(head_params) == n_all
    adam_groups = [dict(params=head_params, lr=0.22, name="head"), dict(params=embed_params, lr=0.6, name="embeddings"),
                   dict(params=scalar_params, lr=0.04, name="scalars")]
    adam = Adam(adam_groups, betas=(0.8, 0.95), eps=1e-10)
    muon = Muon(hidden_matrices, lr=0.05, momentum=0.95, rank=rank, world_size=world_size)
    optimizers = [adam, muon]
    for opt in optimizers:
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"]
    return optimizers

def lr_multiplier(step, train_steps, cooldown_frac):
    # constant, then linear decay to 0.1x over the last cooldown_frac (modded-nanogpt; trapezoidal, arXiv 2405.18392)
    x = step / train_steps
    if x < 1 - cooldown_frac:
        return 1.0
    w = (1 - x) / cooldown_frac
    return w * 1.0 + (1 - w) * 0.1


def muon_momentum(step):
    # Muon momentum warm-up 0.85 → 0.95 over the first 300 steps (modded-nanogpt, late-2024 records)
    frac = min(step / 300, 1)
    return (1 - frac) * 0.85 + frac * 0.95


# ============================================================================================== Configuration
def resolve_config(args, world_size, device):
    """Check every flag that can be checked without data; derive head_dim, the micro-batch split, dtype, compile
    and attention."""
    cfg = argparse.Namespace(**vars(args))
    require_positive(cfg, ("num_layers", "num_heads", "model_dim", "train_steps", "batch_size", "val_steps",
                           "train_seq_len", "val_seq_len", "window_size"))
    if cfg.device_batch_size != "auto":
        require_positive(cfg, ("device_batch_size",))
    require_non_negative(cfg, ("val_loss_every", "hellaswag_every", "checkpoint_every", "num_val_emb",
                               "sample_tokens", "log_every"))
    if cfg.head_dim is None:
        if cfg.model_dim % cfg.num_heads:
            raise UserError(f"--model_dim {cfg.model_dim} is not divisible by --num_heads {cfg.num_heads}; choose "
                            f"num_heads dividing model_dim (e.g. {_divisor_hint(cfg.model_dim, cfg.num_heads)}) or "
                            "pass --head_dim explicitly")
        cfg.head_dim = cfg.model_dim // cfg.num_heads
    if cfg.head_dim <= 0 or cfg.head_dim % 4:
        raise UserError(f"head_dim {cfg.head_dim} must be a positive multiple of 4 (rotary embeddings rotate half "
                        "of each head's dims in pairs); change --head_dim, --model_dim or --num_heads")
    if cfg.num_val_emb > cfg.num_layers:
        raise UserError(f"--num_val_emb {cfg.num_val_emb} exceeds --num_layers {cfg.num_layers}; use at most "
                        f"{cfg.num_layers}")
    if not math.isfinite(cfg.mlp_ratio) or cfg.mlp_ratio <= 0 or int(cfg.mlp_ratio * cfg.model_dim) < 1:
        raise UserError(f"--mlp_ratio {cfg.mlp_ratio} gives no MLP hidden units; use e.g. 4")
    for name in ("train_seq_len", "val_seq_len", "window_size"):
        value = getattr(cfg, name)
        if value % BLOCK_SIZE:
            raise UserError(f"--{name} {value} is not a multiple of {BLOCK_SIZE} (FlexAttention's block size; "
                            f"required on CPU too so configs stay portable); use {next_multiple(value, BLOCK_SIZE)}")
    if not 0 <= cfg.cooldown_frac <= 1:
        raise UserError(f"--cooldown_frac {cfg.cooldown_frac} must be between 0 and 1")
    if cfg.device_batch_size == "auto" and cfg.grad_acc_steps is None:
        split_batch(cfg.batch_size, cfg.train_seq_len, world_size, cfg.train_seq_len)  # the batch divides at all
        if device.type != "cuda":  # no memory to probe: micro-batches of about 4096 tokens, at least one row
            cfg.device_batch_size = max(t for t in micro_batch_candidates(cfg.batch_size // world_size,
                                                                          cfg.train_seq_len)
                                        if t <= max(4096, cfg.train_seq_len))
    if cfg.device_batch_size != "auto" or cfg.grad_acc_steps is not None:  # else train() probes the GPU first
        cfg.grad_acc_steps, cfg.device_batch_size = split_batch(cfg.batch_size, cfg.train_seq_len, world_size,
                                                                cfg.device_batch_size, cfg.grad_acc_steps)
    if cfg.val_batch_size is None:
        cfg.val_batch_size = max(cfg.val_seq_len, cfg.batch_size // cfg.val_seq_len * cfg.val_seq_len)
    if cfg.val_batch_size % cfg.val_seq_len:
        raise UserError(f"--val_batch_size {cfg.val_batch_size} is not a multiple of --val_seq_len {cfg.val_seq_len}")
    if cfg.dtype == "auto":
        cfg.dtype = "bfloat16" if device.type == "cuda" else "float32"
    if cfg.compile is None:
        cfg.compile = device.type == "cuda"
    if cfg.attention == "auto":
        cfg.attention = "flex" if device.type == "cuda" else "sdpa"
    if cfg.attention == "flex" and device.type != "cuda":
        raise UserError("--attention flex trains on CUDA only (FlexAttention has no CPU backward); on CPU use "
                        "--attention sdpa (the same mask, evaluated densely) or auto")
    if not math.isfinite(cfg.lr_scale) or cfg.lr_scale <= 0:
        raise UserError(f"--lr_scale {cfg.lr_scale} must be a positive number (it multiplies every learning rate; "
                        "1 keeps them)")
    if not 0 <= cfg.seed < 2**63:
        raise UserError(f"--seed {cfg.seed} must be between 0 and 2**63 - 1")
    if cfg.hellaswag_limit is not None and cfg.hellaswag_limit < 0:
        raise UserError("--hellaswag_limit must be >= 0 (0 skips HellaSwag)")
    return cfg


def _divisor_hint(n, near):
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - near))


def model_config_of(cfg):
    return {"vocab_size": cfg.vocab_size, "num_layers": cfg.num_layers, "num_heads": cfg.num_heads,
            "head_dim": cfg.head_dim, "model_dim": cfg.model_dim, "mlp_ratio": cfg.mlp_ratio,
            "num_val_emb": cfg.num_val_emb, "max_seq_len": max(cfg.train_seq_len, cfg.val_seq_len)}


def parameter_count(vocab_size, num_layers, num_heads, head_dim, model_dim, mlp_ratio=4.0, num_val_emb=2, **_):
    """GPT(...)'s parameter count, without building it (a test checks it against a built model)."""
    vocab, hdim, hidden = next_multiple(vocab_size, 128), num_heads * head_dim, int(mlp_ratio * model_dim)
    per_block = 4 * hdim * model_dim + 2 * model_dim * hidden + 4  # q, k, v, out; MLP; the two lambda pairs
    return 2 * vocab * model_dim + num_val_emb * vocab * hdim + num_layers * per_block + num_layers // 2


def check_model_fits(model_config, device):
    """Refuse a model whose weights, gradients and optimizer state (~16 bytes a parameter) exceed the device's
    memory, before anything is allocated."""
    n_params = parameter_count(**model_config)
    need, have = 16 * n_params, dist_utils.device_memory_bytes(device)
    if need > have:
        raise UserError(f"the model has {n_params:,} parameters: with gradients and optimizer state ~{need / 2**30:,.0f}"
                        f" GiB, more than the {have / 2**30:,.0f} GiB of {device}; lower --vocab_size, --model_dim "
                        "or --num_layers")


def load_model(path, device="cpu"):
    """Rebuild a trained GPT from a checkpoint: (model, checkpoint dict). See gptlab.experiment.load_checkpoint."""
    ckpt = exp.load_checkpoint(path)
    model = GPT(**ckpt["model_config"])
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval(), ckpt


def checkpoint_logits_fn(path, device="cpu"):
    """A checkpoint, ready to score: (logits_fn, encoding, checkpoint dict). logits_fn maps a LongTensor (B, T) of
    token ids to float logits (B, T, n_vocab) with the run's final attention windows (dense masks, any device), so

        logits_fn, enc, ckpt = checkpoint_logits_fn("experiments/RUN/checkpoints/step_001000.pt")
        evaluate_hellaswag(logits_fn, enc, "data/hellaswag/hellaswag_val.jsonl", limit=500)

    The tokenizer is the run's (--tokenizer as recorded, else its name in tokenizers/), checked by hash."""
    model, ckpt = load_model(path, device)
    tok = exp.checkpoint_tokenizer(ckpt, path)
    logits_fn = make_logits_fn(model, tok.eot, checkpoint_windows(ckpt), False, contextlib.nullcontext,
                               tok.encoding.n_vocab)
    return logits_fn, tok.encoding, ckpt


def checkpoint_windows(ckpt):
    """(long, short) attention windows in blocks of a checkpoint's model: those of the end of its training."""
    args = ckpt["args"]
    return window_blocks(args["train_steps"], args["train_steps"], args["window_size"])


# ============================================================================================== Evaluation
def make_loss_fn(model_fwd, eot, windows, use_flex, autocast):
    """(x, y) (B, T) → the summed cross-entropy in nats, with the masks of `windows` (gptlab.evals.bpb's loss_fn)."""
    def loss_fn(x, y):
        masks = build_attention_masks(x, eot, *windows, use_flex)
        with autocast():
            return model_fwd(x, masks, y)
    return loss_fn


def make_logits_fn(model_fwd, eot, windows, use_flex, autocast, vocab_size):
    """tokens (B, T) → float logits (B, T, vocab) over the real vocabulary; T is padded to a multiple of 128."""
    @torch.no_grad()
    def logits_fn(tokens):
        B, T = tokens.shape
        padded = next_multiple(T, BLOCK_SIZE)
        if padded != T:  # causal attention: tokens appended after T cannot change the logits at positions < T
            tokens = torch.cat([tokens, tokens.new_full((B, padded - T), eot)], dim=1)
        masks = build_attention_masks(tokens, eot, *windows, use_flex)
        with autocast():
            logits = model_fwd(tokens, masks)
        return logits[:, :T, :vocab_size].float()
    return logits_fn


# ============================================================================================== Training
def make_train_step(cfg, model, model_fwd, optimizers, grad_sync, train_loader, eot, use_flex, autocast, device):
    """The step function (bench/bench_train.py times this very function): the loader's next batch, grad_acc_steps
    forward/backward passes on this rank, gradients summed over ranks, one update. train_step(step) returns
    (this rank's summed loss and allowed attention pairs, long and short: a float64 (3,) tensor left on the
    device, so a step reads nothing back; the lr multiplier)."""
    adam, muon = optimizers

    def train_step(step):
        windows = window_blocks(step, cfg.train_steps, cfg.window_size)
        loss_total = torch.zeros((), dtype=torch.float32, device=device)
        pairs = torch.zeros(2, dtype=torch.int64, device=device)  # allowed query-key pairs: long, short windows
        batches = train_loader.next_batch()
        for micro, (x_np, y_np) in enumerate(batches):
            x, y = to_device(x_np, device), to_device(y_np, device)
            masks = build_attention_masks(x, eot, *windows, use_flex)
            pairs += torch.stack([attention_pairs(x, eot, blocks) for blocks in windows])
            with autocast():
                # normalise by the GLOBAL token count so summing over micro-batches and ranks gives the mean
                loss = model_fwd(x, masks, y) / cfg.batch_size
            grad_sync.armed = micro == len(batches) - 1  # gradients are final in the last backward: sum them
            loss.backward()
            loss_total += loss.detach()
        grad_sync.finish()
        lr_mult = lr_multiplier(step, cfg.train_steps, cfg.cooldown_frac) * cfg.lr_scale
        for opt in optimizers:
            for group in opt.param_groups:
                group["lr"] = group["initial_lr"] * lr_mult
        for group in muon.param_groups:
            group["momentum"] = muon_momentum(step)
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)
        return torch.cat([loss_total.double().view(1), pairs.double()]), lr_mult
    return train_step


def probe_micro_batch(cfg, ctx, model, model_fwd, optimizers, eot, use_flex, autocast):
    """--device_batch_size auto on CUDA: the largest micro-batch (tokens) whose forward+backward leaves 10% of the
    GPU free, found by gptlab.dataloader.choose_micro_batch from one or two probes on random tokens (the compiled
    shape of the chosen probe is the one training uses). Every rank probes its own GPU; they take the smallest."""
    device = ctx.device
    windows = window_blocks(cfg.train_steps, cfg.train_steps, cfg.window_size)  # the largest windows

    def measure(tokens):
        idx = torch.randint(0, model.vocab_size, (tokens // cfg.train_seq_len, cfg.train_seq_len + 1),
                            generator=torch.Generator(device).manual_seed(0), device=device)  # training's RNG untouched
        idx[:, 0] = eot
        torch.cuda.reset_peak_memory_stats(device)
        try:
            with autocast():
                loss = model_fwd(idx[:, :-1], build_attention_masks(idx[:, :-1], eot, *windows, use_flex), idx[:, 1:])
            loss.backward()
            return torch.cuda.max_memory_allocated(device)
        except torch.cuda.OutOfMemoryError:
            raise MemoryError from None
        finally:
            loss = None
            model.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()

    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    adam_bytes = sum(p.numel() * p.element_size() for g in optimizers[0].param_groups for p in g["params"])
    # Adam's two moments; Muon's momentum and, across ranks, its stacked send/receive buffers
    extra = 2 * adam_bytes + (param_bytes - adam_bytes) * (3 if ctx.world_size > 1 else 1)
    free, _ = torch.cuda.mem_get_info(device)
    tokens, tried = choose_micro_batch(micro_batch_candidates(cfg.batch_size // ctx.world_size, cfg.train_seq_len),
                                       measure, free + torch.cuda.memory_reserved(device), fixed_bytes=2 * param_bytes,
                                       extra_bytes=extra)
    tokens = min(dist_utils.all_gather_objects(ctx, tokens))
    if ctx.is_main:
        print("--device_batch_size auto: probed " + ", ".join(
            f"{t} tokens: {'out of memory' if peak is None else f'{peak / 2**30:.1f} GiB'}" for t, peak in tried)
            + f"; using {tokens}", flush=True)
    return tokens


def main(argv=None):
    args, ckpt = parse_flags(build_parser, argv, fresh_on_resume=FRESH_ON_RESUME, presets=PRESETS)
    if args.dry_run:  # the resolved configuration, before any process group, folder or data
        cfg = resolve_config(args, int(os.environ.get("WORLD_SIZE", "1")), dist_utils.resolve_device(args.device))
        print(json.dumps(vars(cfg), indent=2, default=str))
        return vars(cfg)
    ctx = dist_utils.setup(args.device)
    try:
        return train(args, ctx, ckpt)
    finally:
        dist_utils.cleanup(ctx)


def train(args, ctx, ckpt=None):
    """One run on this rank; `ckpt` is the --resume checkpoint parse_flags loaded. Returns the final figures."""
    device = ctx.device
    cfg = resolve_config(args, ctx.world_size, device)

    # ---- inputs: each checked by its owner in gptlab, before a run folder exists
    if not cfg.tokenizer:
        raise UserError("pass --tokenizer NAME (a .pkl in tokenizers/ or a path); train one with train_tokenizer.py")
    check_folder_creatable(cfg.experiments_dir)  # writes a probe file: catches /sys, a full disk, read-only folders
    tok = open_tokenizer(cfg.tokenizer)
    cfg.vocab_size = tok.model_vocab_size(cfg.vocab_size)
    check_model_fits(model_config_of(cfg), device)
    shards = select_run_shards(cfg.train_files, cfg.val_files, tok.name, tok.ranks_sha256, tok.encoding.n_vocab)
    cfg.train_files, cfg.val_files = shards.train_files, shards.val_files
    hellaswag_warning = check_hellaswag_file(cfg.hellaswag_path, cfg.hellaswag_limit,
                                             required=cfg.hellaswag_path != HELLASWAG_DEFAULT_PATH)
    train_loader = BOSAlignedLoader(shards.train_paths, cfg.train_seq_len, cfg.batch_size, tok.eot, ctx.rank,
                                    ctx.world_size, cfg.grad_acc_steps or 1, seed=cfg.seed)
    val_set = ValidationSet(shards.val_paths, cfg.val_seq_len, cfg.val_steps * (cfg.val_batch_size // cfg.val_seq_len),
                            ctx.rank, ctx.world_size)
    model_config = model_config_of(cfg)
    if ckpt is not None:
        exp.check_resume_compatible(ckpt, model_config, tok, cfg.train_steps, ARCH_KEYS, shards, cfg.allow_new_data)

    # ---- model and optimizers
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = GPT(**model_config).to(device)
    optimizers = build_optimizers(model, ctx.rank, ctx.world_size)
    adam, muon = optimizers
    if ckpt is not None:
        restore_training_state(ckpt, model, optimizers, train_loader)
    dist_utils.broadcast_parameters(ctx, model)  # the same seed gives the same init everywhere; this makes it certain
    grad_sync = GradientSync(model, [p for g in adam.param_groups for p in g["params"]], muon, ctx.world_size)
    use_flex = cfg.attention == "flex"
    model_fwd = torch.compile(model, dynamic=False) if cfg.compile else model
    if use_flex and not cfg.compile and device.type == "cuda":
        use_compiled_flex_attention()
    amp_dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else None

    def autocast():
        return torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()

    if cfg.device_batch_size == "auto":  # CUDA: the largest micro-batch that fits this GPU
        cfg.device_batch_size = probe_micro_batch(cfg, ctx, model, model_fwd, optimizers, tok.eot, use_flex, autocast)
        cfg.grad_acc_steps, cfg.device_batch_size = split_batch(cfg.batch_size, cfg.train_seq_len, ctx.world_size,
                                                                cfg.device_batch_size)
        train_loader.set_grad_acc_steps(cfg.grad_acc_steps)
    train_step = make_train_step(cfg, model, model_fwd, optimizers, grad_sync, train_loader, tok.eot, use_flex,
                                 autocast, device)
    byte_lengths = token_byte_lengths(tok.encoding, model.padded_vocab)
    val_rows = max(1, cfg.device_batch_size // cfg.val_seq_len)
    full_windows = window_blocks(cfg.train_steps, cfg.train_steps, cfg.window_size)

    def due(every, step):
        return every and step % every == 0

    # ---- the loop; the run's folder, logs, metrics, checkpoints and results are gptlab.run.Run's
    with Run(cfg, ctx, repo_root=REPO_ROOT, model=model, model_config=model_config, optimizers=optimizers,
             train_loader=train_loader, tokenizer=tok, shards=shards, checkpoint=ckpt,
             warnings=[hellaswag_warning, *shards.warnings], extra_config={"padded_vocab": model.padded_vocab}) as run:

        def save(step):
            muon.gather_state()  # collective: rank 0 needs every matrix's momentum
            run.save_checkpoint(step, model, optimizers, train_loader)

        unreported = []  # steps whose figures are still on the device: (step, lr, sums, timer, new data pass)

        def report():
            """One all-reduce and one host read for every unreported step, then their log lines and rows: quiet
            steps never wait for the GPU (modded-nanogpt reads nothing back between its log lines either)."""
            sums = dist_utils.all_reduce_sum(ctx, torch.stack([u[2] for u in unreported]))
            for (done, lr, _, timer, new_pass), (loss, pairs_long, pairs_short) in zip(unreported, run.read(sums)):
                if new_pass:
                    run.log(f"step {done}: the training data ran out; pass {new_pass} over it begins")
                run.check_loss(done, loss)  # NaN/inf: the run stops, recorded as failed, before any checkpoint
                flops = sum(training_flops(model, cfg.batch_size, {"long": pairs_long, "short": pairs_short}))
                run.log_step(done, loss, lr, timer.seconds(), flops)
            unreported.clear()

        for step in range(run.start_step, cfg.train_steps + 1):
            last = step == cfg.train_steps
            eval_windows = full_windows if last else window_blocks(step, cfg.train_steps, cfg.window_size)
            # -- evaluations (not counted in the train time)
            if last or due(cfg.val_loss_every, step):
                with run.evaluating(model):
                    val_loss, val_bpb = evaluate_val(make_loss_fn(model_fwd, tok.eot, eval_windows, use_flex, autocast),
                                                     val_set, val_rows, byte_lengths, ctx)
                run.log_eval(step, val_loss=val_loss, val_bpb=val_bpb)
            if last and (cfg.save_model or cfg.checkpoint_every):
                save(step)  # before the final HellaSwag: the weights are safe whatever happens there
            if last or (due(cfg.hellaswag_every, step) and step > run.start_step):
                with run.evaluating(model):
                    # eager model + dense SDPA masks: HellaSwag's varying shapes would make a compiled model recompile
                    logits_fn = make_logits_fn(model, tok.eot, eval_windows, False, autocast, model.vocab_size)
                    hellaswag = evaluate_hellaswag_in_run(logits_fn, tok.encoding, cfg.hellaswag_path,
                                                          limit=cfg.hellaswag_limit, padded_vocab=model.padded_vocab,
                                                          ctx=ctx, log=run.log, seq_multiple=BLOCK_SIZE)
                run.log_hellaswag(step, hellaswag)
            if last:
                break

            # -- one optimizer step; its figures stay on the device until the next report
            epoch = train_loader.epoch
            timer = run.step_timer()
            sums, lr_mult = train_step(step)
            timer.stop()
            done = step + 1
            unreported.append((done, lr_mult, sums, timer, train_loader.epoch + 1 if train_loader.epoch > epoch else 0))
            if (due(cfg.log_every, done) or done in (cfg.train_steps, run.start_step + 1, run.start_step + 2)
                    or due(cfg.checkpoint_every, done) or due(cfg.val_loss_every, done)
                    or due(cfg.hellaswag_every, done)):  # the first two steps: a line and the time estimate
                report()
            if due(cfg.checkpoint_every, done) and done < cfg.train_steps:
                save(done)

        run.end_training()  # peak memory, speed
        if cfg.sample_tokens and ctx.is_main:
            model.eval()
            logits_fn = make_logits_fn(model, tok.eot, full_windows, False, autocast, model.vocab_size)
            for _, text in sample_continuations(logits_fn, tok.encoding, cfg.sample_tokens, cfg.seed, device):
                run.log(f"sample: {text!r}")
        return run.finish(val_loss, val_bpb, hellaswag)


if __name__ == "__main__":
    run_cli(main)
