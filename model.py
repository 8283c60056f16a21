"""The GPT: the one definition of gptlab's architecture (modded-nanogpt style, FlexAttention era, record #26).

Torch only, on purpose: every checkpoint carries this file's source and every tool (sample.py, export_hf.py,
evaluations, --resume) builds its model from the checkpoint's copy, so edit the architecture here and the
experiment flows through all of them; old checkpoints keep the code that made them.

The interface the tools use (keep it when you edit; add what you like around it):
    GPTConfig(**fields), GPT(config)           the fields are the only list of architecture settings; train_gpt.py
                                               makes a --flag of each
    model(idx, masks, targets)                 summed cross-entropy (nats); model(idx, masks): logits
    model.attention_masks(idx, eot, windows, flex=False), model.final_windows(), SEQ_MULTIPLE
    model.predict(tokens, eot, windows=None, positions=None, tree=None)
                                               logits of rows of any length, or at some positions only
                                               (evaluations, export checks); tree: rows of shared contexts and
                                               their branches (evaluations; optional: older sources lack it)
    KVCache(model, eot), cache.forward(tokens) generation, one token at a time
    training_flops(model, tokens, pairs), attention_pairs(idx, eot, blocks)   MFU in the training log
    MEMORY_PASSES, memory_widths(config), activation_bytes_per_token(config, padded_vocab, act_bytes)
                                               the analytical step estimate and the memory probe's first guess
    model.fp8_head = True                      training forwards run the LM head's matmul in FP8 (--fp8_head)
    model.store_embeddings_in(dtype)           embeddings held in bfloat16 under bfloat16 training
    tp_plan(model), tp_sizes(config)           --tp: how the weights split, what --tp must divide (optional)
    pp_stage(model, stage, n_stages)           --pp: a pipeline stage's module (optional)

On CUDA attention is FlexAttention with a document-causal sliding-window block mask, built from per-block
document bounds; on CPU the very same mask function is evaluated densely and fed to scaled_dot_product_attention,
so the same model runs anywhere.
"""
import functools
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint
from torch.nn.attention.flex_attention import BlockMask, flex_attention

BLOCK_SIZE = 128  # FlexAttention's block size: every sequence length is a multiple of it, on every device
SEQ_MULTIPLE = BLOCK_SIZE
# --tp: the plan splits the residual stream along the sequence between blocks (tp_plan), so the rows' length must
# divide by --tp
SEQUENCE_PARALLEL = True
# fixed attention temperature for QK-normed heads: 0.12 at head_dim 128 (modded-nanogpt, early-2025 records),
# scaled so the largest logit (q = k: head_dim x scale = 15.36) is the same at any head_dim
ATTN_SCALE_AT_128 = 0.12
LOSS_CHUNK_ELEMENTS = 2**26  # eager loss: logits of at most this many elements alive (256 MiB in fp32)
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2  # FP8 head: operands in e4m3, gradients in e5m2 (more range)


@dataclass
class GPTConfig:
    """The architecture. `help` becomes the --flag's help in train_gpt.py; arch=False marks a field that does not
    change the weights' meaning (a resumed run may differ in it)."""
    vocab_size: int = field(default=None, metadata={"help": "embedding rows (>= the tokenizer's n_vocab incl. "
                                                    "specials; default: the tokenizer's n_vocab); padded to a "
                                                    "multiple of 128 inside the model"})
    num_layers: int = field(default=12, metadata={"help": "transformer blocks"})
    num_heads: int = field(default=6, metadata={"help": "attention heads per block"})
    model_dim: int = field(default=384, metadata={"help": "width of the residual stream"})
    head_dim: int = field(default=None, metadata={"help": "per-head width (default: model_dim // num_heads)"})
    mlp_ratio: float = field(default=4.0, metadata={"help": "MLP hidden width / model_dim"})
    num_val_emb: int = field(default=2, metadata={"help": "value embeddings, mixed into the first and last layers"})
    window_size: int = field(default=1792, metadata={"help": "final long sliding-window size in tokens (multiple "
                                                     "of 128; warms up from 128 during training; short windows "
                                                     "are half)"})
    max_seq_len: int = field(default=1024, metadata={"flag": False, "arch": False,
                                                     "help": "initial rotary table length (it grows on demand)"})
    # muP (train_gpt.py --mup, gptlab/train/mup.py): the base model's width and heads; None: standard. The
    # attention scale (attention_scale) is already c / head_dim, muP's form, so only the logits read them
    mup_base_width: int = field(default=None, metadata={"flag": False, "help": "muP base model_dim"})
    mup_base_heads: int = field(default=None, metadata={"flag": False, "help": "muP base num_heads"})

    def __post_init__(self):
        """ValueError naming the field and the fix, for a configuration no model can have."""
        if self.head_dim is None:
            if self.num_heads > 0 and self.model_dim % self.num_heads:
                raise ValueError(f"--model_dim {self.model_dim} is not divisible by --num_heads {self.num_heads}; "
                                 "choose num_heads dividing model_dim or pass --head_dim explicitly")
            self.head_dim = self.model_dim // max(1, self.num_heads)
        for name in ("vocab_size", "num_layers", "num_heads", "model_dim", "window_size"):
            if getattr(self, name) is None or getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be a positive integer, got {getattr(self, name)}")
        if self.head_dim <= 0 or self.head_dim % 4:
            raise ValueError(f"head_dim {self.head_dim} must be a positive multiple of 4 (rotary embeddings rotate "
                             "half of each head's dims in pairs); change --head_dim, --model_dim or --num_heads")
        if not 0 <= self.num_val_emb <= self.num_layers:
            raise ValueError(f"--num_val_emb {self.num_val_emb} must be between 0 and --num_layers "
                             f"{self.num_layers}")
        if not math.isfinite(self.mlp_ratio) or self.mlp_ratio <= 0 or int(self.mlp_ratio * self.model_dim) < 1:
            raise ValueError(f"--mlp_ratio {self.mlp_ratio} gives no MLP hidden units; use e.g. 4")
        if self.window_size % BLOCK_SIZE:
            raise ValueError(f"--window_size {self.window_size} is not a multiple of {BLOCK_SIZE} (FlexAttention's "
                             f"block size); use {next_multiple(self.window_size, BLOCK_SIZE)}")


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


def fp8_scale(t, fp8_dtype):
    """Per-tensor scale of t for fp8_dtype: the power of two bringing max |t| to at most the format's largest value
    (448 for e4m3, 57344 for e5m2). Dividing by a power of two is exact, so t / scale rounds once, in the cast; and
    no scale is fixed in advance, so it fits any loss normalisation (train_gpt.py divides by the global batch: a
    fixed gradient scale such as modded-nanogpt's 1/448 would flush our gradients to zero)."""
    # an all-zero tensor (the zero-initialised head, its first gradient) still gets a finite scale
    amax = t.detach().abs().amax().float().clamp(min=2.0 ** -100)
    return torch.exp2(torch.ceil(torch.log2(amax / torch.finfo(fp8_dtype).max)))


def to_fp8(t, scale, fp8_dtype):
    """t / scale in fp8_dtype, rounded to nearest (ties to even), row-major."""
    return (t.float() / scale).to(fp8_dtype).contiguous()


def scaled_mm(a, b, scale_a, scale_b, out_dtype, fast_accum=False):
    """(a x scale_a) @ (b x scale_b) in out_dtype for FP8 a (M, K) row-major and b (K, N) column-major:
    torch._scaled_mm on CUDA (FP8 tensor cores, float32 accumulation); elsewhere the reference it computes: both
    dequantised (exactly) and multiplied in float32."""
    if a.is_cuda:
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, use_fast_accum=fast_accum)
    return ((a.float() * scale_a) @ (b.float() * scale_b)).to(out_dtype)


class _FP8Matmul(torch.autograd.Function):
    """x (N, K) @ w (M, K).T with x and w in float8_e4m3fn and the output's gradient in float8_e5m2, each with its
    own scale (fp8_scale); the backward multiplies the quantised tensors, straight through the rounding (FP8 head
    of modded-nanogpt by @YouJiacheng, 2025). Output and x's gradient in bfloat16, w's in float32."""

    @staticmethod
    def forward(ctx, x, w):
        x_scale, w_scale = fp8_scale(x, E4M3), fp8_scale(w, E4M3)
        x8, w8 = to_fp8(x, x_scale, E4M3), to_fp8(w, w_scale, E4M3)
        ctx.save_for_backward(x8, w8, x_scale, w_scale)
        ctx.dtypes = x.dtype, w.dtype
        return scaled_mm(x8, w8.t(), x_scale, w_scale, torch.bfloat16, fast_accum=True)

    @staticmethod
    def backward(ctx, grad):
        x8, w8, x_scale, w_scale = ctx.saved_tensors
        g_scale = fp8_scale(grad, E5M2)
        g8 = to_fp8(grad, g_scale, E5M2)
        grad_x = scaled_mm(g8, w8.t().contiguous().t(), g_scale, w_scale, torch.bfloat16)
        # (K, N) @ (N, M), transposed back: modded-nanogpt found it faster than grad.T @ x at the GPT-2 head's shape
        grad_w = scaled_mm(x8.t().contiguous(), g8.t().contiguous().t(), x_scale, g_scale, torch.float32).t()
        return grad_x.to(ctx.dtypes[0]), grad_w.to(ctx.dtypes[1])


def fp8_linear(x, w):
    """x (..., K) @ w (M, K).T through FP8 (_FP8Matmul): bfloat16 (..., M). K and M multiples of 16."""
    return _FP8Matmul.apply(x.reshape(-1, x.size(-1)), w).view(*x.shape[:-1], w.size(0))


def _float32_weight(module, state_dict, prefix, local_metadata):
    # state_dict post-hook of embeddings held in bfloat16 (GPT.store_embeddings_in): checkpoints keep float32
    state_dict[prefix + "weight"] = state_dict[prefix + "weight"].float()


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

    def forward(self, x, start=0, positions=None):  # x: (B, T, H, D) at positions start, ..., start + T - 1
        # positions: (B, T) each token's own position instead (tree rows: GPT.predict), none beyond its column
        end = start + x.size(1)
        if end > self.cos.size(0):  # longer than ever seen (e.g. a long HellaSwag row): extend the table
            self._build(next_multiple(end, BLOCK_SIZE), x.device)
        if positions is None:
            cos, sin = self.cos[None, start:end, None, :], self.sin[None, start:end, None, :]
        else:
            cos, sin = self.cos[positions][:, :, None, :], self.sin[positions][:, :, None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        y = torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)
        return y.type_as(x)


def attention_scale(head_dim):
    return ATTN_SCALE_AT_128 * 128 / head_dim


@functools.cache
def _compiled_flex_attention():
    return torch.compile(flex_attention, dynamic=False)


def attend(q, k, v, mask):
    """q, k, v: (B, H, T, D). mask: a FlexAttention BlockMask, or a dense bool (B, 1, T, T) mask for SDPA."""
    scale = attention_scale(q.size(-1))
    if isinstance(mask, BlockMask):
        # inside a compiled model the plain function is traced into the graph; eager CUDA needs its own compile
        flex = _compiled_flex_attention() if q.is_cuda and not torch.compiler.is_compiling() else flex_attention
        return flex(q, k, v, block_mask=mask, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


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

    def forward(self, x, ve, mask, cache=None, positions=None):  # x: (B, T, dim); ve: (B, T, hdim) or None
        # cache (generation): this layer's entry of a KVCache, which holds the earlier tokens' keys and values; x
        # then holds only the new tokens
        B, T = x.shape[:2]
        # (tensor parallelism holds this rank's heads of q, k and v: local_part; the view counts the heads it has)
        qkv = F.linear(x, local_part(self.qkv_w).flatten(end_dim=1)).view(B, T, -1, self.head_dim)
        q, k, v = qkv.chunk(3, dim=2)  # each (B, T, H, D)
        q, k = norm(q), norm(k)  # QK-norm (modded-nanogpt 2024-10 "ModernArch" record)
        start = 0 if cache is None else cache.start
        q, k = self.rotary(q, start, positions), self.rotary(k, start, positions)
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


def local_part(w):
    """w as this rank holds it: its block of a DTensor (tensor parallelism, gptlab/train/tensor_parallel.py: the
    gradient flows back into the DTensor's block), else w itself."""
    return w.to_local() if hasattr(w, "to_local") else w


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

    def forward(self, x, x0, ve, mask, cache=None, positions=None, read_at=None):
        a, b = self.lambdas.to(x.dtype)  # keep the residual stream in its (autocast) dtype
        x = a * x + b * x0
        x = x + self.attn(norm(x), ve, mask, cache, positions)
        if read_at is not None:  # (rows, columns): the only outputs read (GPT.predict's last block), (N, dim)
            x = x[read_at[0], read_at[1]]
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        c = config
        self.vocab_size = c.vocab_size
        # vocab padded to a multiple of 128 for efficient matmuls (modded-nanogpt: 50257 → 50304)
        self.padded_vocab = next_multiple(c.vocab_size, 128)
        self.num_layers = c.num_layers
        hdim = c.num_heads * c.head_dim
        self.embed = nn.Embedding(self.padded_vocab, c.model_dim)
        # value embeddings: token embeddings mixed into the values of the first and last layers (modded-nanogpt
        # value-embedding record, 2024-12); layer i of the first num_val_emb and of the last num_val_emb layers
        # uses embedding i (for a shallow net the last layers' assignment wins where the two ranges overlap)
        self.value_embeds = nn.ModuleList([nn.Embedding(self.padded_vocab, hdim) for _ in range(c.num_val_emb)])
        self.ve_index = [None] * c.num_layers
        for i in range(c.num_val_emb):
            self.ve_index[i] = i
        for i in range(c.num_val_emb):
            self.ve_index[c.num_layers - c.num_val_emb + i] = i
        self.blocks = nn.ModuleList([Block(c.model_dim, c.num_heads, c.head_dim, c.mlp_ratio, c.max_seq_len)
                                     for _ in range(c.num_layers)])
        # long windows on every 4th layer of the first half, mirrored in the second half (U-net symmetric), short
        # elsewhere: for 12 layers long at 0, 4, 7, 11 (modded-nanogpt long/short windows, 2025, after Gemma 2's
        # global/local alternation)
        self.layer_window = ["long" if min(i, c.num_layers - 1 - i) % 4 == 0 else "short"
                             for i in range(c.num_layers)]
        # U-net skips: the first half's outputs are added (learned weights) to the second half's inputs in
        # reverse order (modded-nanogpt U-net skip-connection record by Brendan Hogan, 2024-11)
        self.num_skips = c.num_layers // 2
        self.skip_weights = nn.Parameter(torch.ones(self.num_skips))
        self.lm_head = CastedLinear(c.model_dim, self.padded_vocab, zero_init=True)

    def forward(self, idx, masks, targets=None, cache=None):
        """idx: (B, T) token ids; masks: {"long": mask, "short": mask} (see attention_masks).
        With targets: the SUM of the cross-entropy over all B*T positions (nats).
        Without: logits (B, T, padded_vocab).
        Generation: cache (a KVCache) holds the earlier tokens; idx holds the next ones, masks is None."""
        x = self.hidden_states(idx, masks, cache)
        if targets is None:
            return self.logits(x)
        return self.cross_entropy_sum(x, targets)

    def hidden_states(self, idx, masks, cache=None):
        """The final normed hidden states (B, T, dim) that logits() and cross_entropy_sum() read: forward's
        arguments, without the head."""
        # the residual stream in the autocast dtype (bf16 on GPUs) from the embeddings on, as modded-nanogpt casts
        # its embeddings: half the bytes in every elementwise and norm kernel and in saved activations
        # (without autocast: the weights' dtype); embeddings held in bfloat16 are normed in the weights' dtype, as
        # CUDA autocast's rms_norm does anyway
        x0 = self.embed_tokens(idx)
        x, _ = self.run_blocks(x0, x0, self.value_embeddings(idx, x0.dtype), masks, [], range(self.num_layers), cache)
        return norm(x)

    def embed_tokens(self, idx):
        """x0: the normed token embeddings in the residual stream's dtype (the autocast dtype, else the weights')."""
        weights = self.lm_head.weight.dtype
        autocast = torch.is_autocast_enabled(idx.device.type)
        dtype = torch.get_autocast_dtype(idx.device.type) if autocast else weights
        return norm(self.embed(idx).to(weights)).to(dtype)

    def value_embeddings(self, idx, dtype):
        return [emb(idx).to(dtype) for emb in self.value_embeds]

    def run_blocks(self, x, x0, ve, masks, skips, layers, cache=None):
        """Blocks `layers` (consecutive) on x; skips: the U-net skip stack on entry, pushed and popped in place.
        Returns (x, skips)."""
        first_decoder = self.num_layers - self.num_skips
        for i in layers:
            if i >= first_decoder:
                x = x + self.skip_weights[i - first_decoder].to(x.dtype) * skips.pop()
            x = self.blocks[i](x, x0, None if self.ve_index[i] is None else ve[self.ve_index[i]],
                               None if masks is None else masks[self.layer_window[i]],
                               None if cache is None else cache.layer(i),
                               None if masks is None else masks.get("positions"),  # (tree rows: GPT.predict)
                               masks.get("read_at") if masks is not None and i == self.num_layers - 1 else None)
            if i < self.num_skips:
                skips.append(x)
        return x, skips

    # train_gpt.py's --fp8_head sets it: training forwards then run the LM head's matmul in FP8 (fp8_linear), as
    # modded-nanogpt's record #26 does; evaluation and generation keep the plain head
    fp8_head = False

    def store_embeddings_in(self, dtype):
        """Hold the token and value embeddings in dtype: train_gpt.py passes bfloat16 under bfloat16 training, as
        modded-nanogpt stores its embeddings (half their memory, their lookups' bytes and their Adam state). A
        checkpoint still holds them in float32 (state_dict casts them up, exactly), so every tool loads it as
        before."""
        for emb in (self.embed, *self.value_embeds):
            emb.to(dtype)
            emb.register_state_dict_post_hook(_float32_weight)

    def logits(self, x):
        """Final hidden states (..., dim) → soft-capped float32 logits (..., padded_vocab)."""
        if self.fp8_head and self.training:
            logits = fp8_linear(x, self.lm_head.weight).float()
        else:
            logits = self.lm_head(x).float()
        # logit soft-cap 30*sigmoid(z/(7.5*sqrt(d))) (modded-nanogpt 2025; earlier a Gemma-2-style 30*tanh(z/30));
        # muP: the base's cap times the readout multiplier base/d, so z/(7.5*sqrt(base)*(d/base))
        base = self.config.mup_base_width
        temperature = 7.5 * x.size(-1) ** 0.5 if base is None else 7.5 * base ** 0.5 * (x.size(-1) / base)
        return 30 * torch.sigmoid(logits / temperature)

    def _cross_entropy_sum(self, x, targets):  # float32 logits, softmax statistics and loss
        return F.cross_entropy(self.logits(x), targets, reduction="sum")

    def cross_entropy_sum(self, x, targets):
        """The summed cross-entropy (nats) of x (B, T, dim) against targets (B, T). Compiled, inductor fuses the
        soft-cap into the loss; eager, rows go in chunks recomputed in backward, so only one chunk's logits (at
        most LOSS_CHUNK_ELEMENTS) are alive instead of ~5 tensors of tokens x vocab."""
        x, targets = x.flatten(0, 1), targets.flatten()
        rows = max(1, LOSS_CHUNK_ELEMENTS // self.padded_vocab)
        if self.fp8_head and self.training:  # the FP8 weight gradient sums over the rows: _scaled_mm wants 16k
            rows = max(16, rows // 16 * 16)
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

    @torch.no_grad()
    def predict(self, tokens, eot, windows=None, positions=None, tree=None):
        """Float logits (B, T, vocab_size) of tokens (B, T) of any length, with dense masks and the given (long,
        short) windows (default: final_windows()). T is padded to a multiple of SEQ_MULTIPLE with <|endoftext|>:
        causal attention keeps tokens after T from changing the logits before it. positions: (rows, columns), two
        LongTensors (N,): only the logits there, (N, vocab_size) (evaluations score a few positions of each row,
        so the head and the float32 logits cost N rows, not B x T). tree: (position ids, branch ids), two
        LongTensors (B, T): see tree_masks (evaluations score an example's choices after one copy of its
        context)."""
        B, T = tokens.shape
        padded = next_multiple(T, SEQ_MULTIPLE)
        if padded != T:
            tokens = torch.cat([tokens, tokens.new_full((B, padded - T), eot)], dim=1)
            if tree is not None:  # each padding <|endoftext|> is a document of its own: any position will do
                tree = [F.pad(t, (0, padded - T)) for t in tree]
        windows = windows or self.final_windows()
        masks = self.attention_masks(tokens, eot, windows) if tree is None else tree_masks(tokens, eot, windows, *tree)
        if positions is not None:  # the last block's MLP runs at these positions only (it sees no other token)
            masks["read_at"] = positions
        x = self.hidden_states(tokens, masks)
        x = x[:, :T] if positions is None else x  # ((N, dim) already)
        return self.logits(x)[..., :self.vocab_size].float()

    def attention_masks(self, idx, eot, windows, flex=False):
        """The masks forward() takes for a batch idx (B, T): see build_attention_masks; windows: (long, short)."""
        return build_attention_masks(idx, eot, *windows, flex)

    def final_windows(self):
        """(long, short) attention windows in blocks at the end of training: the ones a trained model uses."""
        return window_pair(self.config.window_size // BLOCK_SIZE)


def tp_sizes(config):
    """{what: size} that --tp must divide: every rank holds whole heads, an equal share of the MLP's hidden units
    and of the (padded) vocabulary (gptlab/train/config.py refuses other layouts before any process group)."""
    return {"--num_heads": config.num_heads, "the MLP width (--mlp_ratio x --model_dim)":
            int(config.mlp_ratio * config.model_dim), "the vocabulary's padding": 128}


def tp_plan(model):
    """Tensor parallelism (Megatron-style, gptlab/train/tensor_parallel.py applies it with DTensor):
    {submodule path: how its weight splits over the TP ranks}. Attention: each rank holds whole heads: its rows of
    q, k and v ("heads": qkv_w split along its dim 1, the input replicated), its value-embedding columns (the same
    heads) and its columns of c_proj ("rowwise": the outputs summed over the TP ranks). MLP: c_fc's rows
    ("colwise"), c_proj's columns ("rowwise"). The token embedding splits its vocabulary rows ("rowwise"; a rank's
    look-up is zero outside its rows, so the sum is exact). The head, norms (parameter-free) and scalars stay whole
    on every rank. "partial": parameters used on this rank's heads only, whose gradient is a sum over the TP ranks
    (the value/value-embedding mix).
    Sequence parallelism (Korthikanti et al. 2022): between the blocks, and in the x0 mixing and norms inside them,
    each TP rank holds its share of the positions of the residual stream (and of x0): the token embedding's sum is
    reduce-scattered to it, attention's and the MLP's inputs are gathered whole from it (their gradients'
    sums reduce-scattered back) and their row-split outputs reduce-scattered into it; the last block's output is
    gathered whole for the final norm and the head. So the scalars that mix the stream (the blocks' x0 lambdas, the
    skip weights) see only a rank's positions: "partial" too. The value embeddings read the whole token ids."""
    plan = {"embed": "rowwise_to_sequence", f"blocks.{len(model.blocks) - 1}": "gather_sequence"}
    plan.update({f"value_embeds.{i}": "colwise" for i in range(len(model.value_embeds))})
    for i in range(len(model.blocks)):
        plan.update({f"blocks.{i}.attn": ("heads", "qkv_w", 1, 1, True), f"blocks.{i}.attn.c_proj":
                     "rowwise_to_sequence", f"blocks.{i}.mlp.c_fc": "colwise_from_sequence",
                     f"blocks.{i}.mlp.c_proj": "rowwise_to_sequence"})
    partial = [f"blocks.{i}.{name}" for i in range(len(model.blocks)) for name in ("attn.lambdas", "lambdas")]
    return plan, partial + (["skip_weights"] if model.num_skips else [])


class PipelineStage(nn.Module):
    """Pipeline parallelism (gptlab/train/pipeline.py, torch.distributed.pipelining): stage `stage` of n_stages runs
    an equal share of the blocks of `model` (whose weights it uses, not owns). What crosses a stage boundary: the
    residual stream x, x0 (every block mixes it in), the token ids (each stage builds its attention masks and value
    embeddings from them) and the U-net skips still waiting for their decoder layer. The first stage takes the token
    ids; the last returns the final normed hidden states (the loss applies the head). mask_args: (eot, windows,
    flex) of the current step, set by the trainer."""

    def __init__(self, model, stage, n_stages):
        super().__init__()
        per = model.num_layers // n_stages
        self.layers = range(stage * per, (stage + 1) * per)
        self.first, self.last = stage == 0, stage == n_stages - 1
        self._model = [model]  # (a list: the stage must not own the model's parameters)
        self.mask_args = None

    def forward(self, *inputs):
        model = self._model[0]
        if self.first:
            (idx,) = inputs
            x = x0 = model.embed_tokens(idx)
            skips = []
        else:
            x, x0, idx, *skips = inputs
            skips = list(skips)
        masks = model.attention_masks(idx, *self.mask_args)
        x, skips = model.run_blocks(x, x0, model.value_embeddings(idx, x0.dtype), masks, skips, self.layers)
        return norm(x) if self.last else (x, x0, idx, *skips)


def pp_stage(model, stage, n_stages):
    return PipelineStage(model, stage, n_stages)


def window_pair(long_blocks):
    """(long, short) windows in blocks: short windows are half the long ones (modded-nanogpt, 2025)."""
    return long_blocks, max(1, long_blocks // 2)


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


def document_block_masks(docs):
    """Which 128-token key blocks each query block of docs (B, T) (document index of every position) attends to
    under the document-causal rule, from each block's first and last document index alone: (B, n, n) bool
    matrices (partial, full) over n = T/128 blocks. Full: every (query, key) pair allowed; partial: some. So the
    masks cost (T/128)^2 cells, not the T^2 points create_block_mask evaluates the mask function at (modded-nanogpt
    builds its block masks so, by @YouJiacheng, 2025)."""
    B, T = docs.shape
    n = T // BLOCK_SIZE
    blocks = docs.view(B, n, BLOCK_SIZE)
    first, last = blocks[..., 0], blocks[..., -1]  # document indices never decrease along a row
    q = torch.arange(n, device=docs.device).view(n, 1)
    kv = torch.arange(n, device=docs.device).view(1, n)
    # a key block at or before the query block shares a document with it iff the key block's last document is
    # the query block's first (the diagonal always does), and every pair does iff both blocks lie in one document
    # (the diagonal never: its upper triangle is in the future)
    full = (kv < q) & (last[:, :, None] == first[:, None, :])
    partial = (kv <= q) & (first[:, :, None] <= last[:, None, :]) & ~full
    return partial, full


def _nearest_first(allowed):
    """A (B, n, n) bool block matrix as FlexAttention's (counts (B, 1, n) int32, indices (B, 1, n, n) int32) with
    each query block's allowed key blocks first, nearest first: the first k are then the k nearest, so a sliding
    window is a clamp of the counts."""
    kv = torch.arange(allowed.size(-1), dtype=torch.int32, device=allowed.device)
    indices = torch.where(allowed, kv, -1).sort(dim=-1, descending=True).values.clamp_(min=0)
    return allowed.sum(dim=-1, dtype=torch.int32)[:, None], indices[:, None]


def window_block_mask(partial, full, window_blocks, mask_mod):
    """The BlockMask of a window of window_blocks blocks from _nearest_first's (counts, indices) of the partial and
    full blocks. A query block sees the key blocks fewer than window_blocks back: its nearest full ones (at most
    window_blocks - 1, all before the diagonal), and its partial ones, nearest first: the diagonal, always, and the
    block where its document starts when that is still inside the window."""
    (partial_num, partial_idx), (full_num, full_idx) = partial, full
    return BlockMask.from_kv_blocks(torch.minimum(partial_num, (window_blocks - full_num).clamp(min=1)), partial_idx,
                                    full_num.clamp(max=window_blocks - 1), full_idx, BLOCK_SIZE=BLOCK_SIZE,
                                    mask_mod=mask_mod)


def build_attention_masks(idx, eot_id, long_blocks, short_blocks, use_flex):
    """Document-causal sliding-window masks for a batch idx (B, T) whose documents start at <|endoftext|>.

    Returns {"long": mask, "short": mask}: BlockMasks for FlexAttention (both windows from one block structure,
    document_block_masks), or dense bool masks for SDPA."""
    B, T = idx.shape
    if T % BLOCK_SIZE:
        raise ValueError(f"sequence length {T} is not a multiple of {BLOCK_SIZE} (FlexAttention's block size)")
    docs = (idx == eot_id).cumsum(dim=1)  # (B, T): each <|endoftext|> starts a new document (the real id, not 50256)
    if use_flex:
        partial, full = (_nearest_first(blocks) for blocks in document_block_masks(docs))
    masks = {}
    for name, blocks in (("long", long_blocks), ("short", short_blocks)):
        # a fill, not torch.tensor(blocks, device=...): copying a host value to the GPU would stall its queue
        mask_mod = document_window_mask_mod(docs, torch.full((), blocks, dtype=torch.long, device=idx.device))
        if use_flex:  # mask_mod runs in the partial blocks only, where the window holds for every pair
            masks[name] = window_block_mask(partial, full, blocks, mask_mod)
        else:
            masks[name] = dense_mask(mask_mod, B, T, idx.device)
    return masks


def tree_masks(idx, eot_id, windows, positions, branches):
    """Dense masks (and "positions", which the rotary embeddings then read) of rows whose documents are trees: a
    shared start (branch 0) followed by branches 1, 2, ... that each see the start and themselves, not each other.
    A token at position p (its index in the sequence it belongs to, never more than its column) sees what it sees
    at p in that sequence alone: the window counts blocks of positions, not columns."""
    docs = (idx == eot_id).cumsum(dim=1)
    col = torch.arange(idx.size(1), device=idx.device)
    sees = ((col[:, None] >= col[None, :]) & (docs[:, :, None] == docs[:, None, :])
            & ((branches[:, None, :] == 0) | (branches[:, :, None] == branches[:, None, :])))
    apart = positions[:, :, None] // BLOCK_SIZE - positions[:, None, :] // BLOCK_SIZE
    return {"positions": positions, **{name: (sees & (apart < blocks))[:, None]
                                       for name, blocks in zip(("long", "short"), windows)}}


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


# ---- the analytical step estimate's architecture-dependent parts (gptlab/train/perf_estimate.py, batching.py):
# memory-bound traffic of one forward, in passes (one read or one write of a tensor of that width per token; the
# backward's is a multiple of it, perf_estimate.BACKWARD_BYTES_RATIO). Our estimates of the kernels' traffic (not
# measured), compiled (inductor fuses chains of elementwise ops into one read and one write) and eager (each op
# reads and writes; CUDA autocast runs norms in float32).
MEMORY_PASSES = {
    "compiled": dict(
        residual=9,          # per layer, model_dim wide: x0 mixing + norm (read x, x0; write x, normed), the
        #                      attention's residual add + norm (read 2, write 2), the MLP's add (read 1)
        attention_inputs=2,  # per layer, q/k/v width (3 x heads x head_dim): read the projection, write q, k, v
        #                      after QK-norm, rotary and the value mixing (one fused kernel)
        attention_output=2,  # per layer, heads x head_dim: the (B, H, T, D) -> (B, T, H x D) copy
        mlp_hidden=2,        # per layer, the MLP's hidden width: the activation reads and writes it once
        embeddings=2,        # per token and nn.Embedding table: the look-up reads a row and writes it
        logits=2,            # per token, the padded vocabulary, in the activation dtype: the fused soft-cap and
        #                      cross-entropy reads the logits twice (max, then sum)
    ),
    "eager": dict(
        residual=27,         # mixing (3 ops: 7 passes), two norms in float32 (~6 each), two residual adds (3
        #                      each), the skip adds (~1.5 averaged over layers)
        attention_inputs=16,  # QK-norm (float32), rotary (float32 upcast, 4 products, 2 sums, cat, cast back),
        #                      value mixing and casts: ~16 passes of the q/k/v width
        attention_output=2,  # as compiled
        mlp_hidden=4,        # relu, then square: two kernels
        embeddings=2,        # as compiled
        logits=20,           # float32 (4 bytes): upcast, divide, sigmoid, scale, log-softmax (~10 passes), twice:
        #                      the chunked loss (model.cross_entropy_sum) recomputes its forward in backward
    ),
}


def memory_widths(config):
    """Per layer, the widths MEMORY_PASSES counts passes over."""
    return dict(residual=config.model_dim, attention_inputs=3 * config.num_heads * config.head_dim,
                attention_output=config.num_heads * config.head_dim,
                mlp_hidden=int(config.mlp_ratio * config.model_dim))


def activation_bytes_per_token(config, padded_vocab, act_bytes=2):
    """A first guess of a forward+backward's activation memory per token, so train_gpt.py's memory probe can
    measure the size training will use first: per block 34 bytes x model_dim at 2-byte activations with an MLP of
    4 x model_dim and attention that keeps no T x T scores (Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models", eq. 1 without its 5as/h term), the MLP's share (16 of the 34)
    scaled with mlp_ratio; plus the logits (2-byte) with their float32 copy and gradient: 10 bytes per vocabulary
    entry. A guess only: the probe measures before it trusts it."""
    per_block = (18 + 16 * config.mlp_ratio / 4) * config.model_dim * act_bytes / 2
    return config.num_layers * per_block + padded_vocab * (act_bytes + 8)


class KVCache:
    """Keys and values of the tokens fed so far, one entry per layer (GPT.forward(idx, None, cache=cache) passes
    cache.layer(i) to block i's attention, which calls extend()), for generation one token at a time.

    The masks follow the very rule training used (document_window_mask_mod: causal, same document, within the
    window's blocks), with the model's final windows. After each forward every layer drops the keys no later token
    can see: those before its window's first block and those of finished documents, so the keys and values stay
    within the window however long the generation runs (the document index of every position, 8 bytes a token, is
    kept whole: the mask rule reads it by position)."""

    def __init__(self, model, eot, windows=None):
        self.model, self.eot = model, eot
        blocks = dict(zip(("long", "short"), windows or model.final_windows()))
        self.layers = [_LayerCache(self, torch.tensor(blocks[kind])) for kind in model.layer_window]
        self.docs = None  # (B, positions so far): document index of every position (attention masks read it)
        self.start = 0  # position of the first token of the forward in progress
        self.end = 0  # one past its last token

    def layer(self, i):
        return self.layers[i]

    def forward(self, tokens):
        """tokens (B, T): the next tokens → the model's logits (B, T, padded vocab) at their positions."""
        last_doc = self.docs[:, -1:] if self.docs is not None else tokens.new_zeros(tokens.size(0), 1)
        new_docs = last_doc + (tokens == self.eot).cumsum(dim=1)
        self.docs = new_docs if self.docs is None else torch.cat([self.docs, new_docs], dim=1)
        self.end = self.start + tokens.size(1)
        logits = self.model(tokens, None, cache=self)
        self.start = self.end
        # the first position of the last document of each row (a document starts at its <|endoftext|>)
        positions = torch.arange(self.end, device=tokens.device)
        doc_start = int(torch.where(self.docs == self.docs[:, -1:], positions, self.end).amin())
        for layer in self.layers:
            layer.drop_before(max(doc_start, (self.end // BLOCK_SIZE - int(layer.window_blocks) + 1) * BLOCK_SIZE))
        return logits


class _LayerCache:
    """One layer's keys and values of positions first, ..., the last one fed; held as (B, H, n, D), the layout
    attention reads (SDPA on CPU is many times slower on the transposed one)."""

    def __init__(self, cache, window_blocks):
        self.cache, self.window_blocks = cache, window_blocks
        self.k = self.v = None
        self.first = 0

    @property
    def start(self):  # the position of the first new token (rotary embeddings)
        return self.cache.start

    def extend(self, k, v):
        """Append the new tokens' k, v (B, T, H, D) → (all keys, all values as (B, n, H, D) views, their bool mask
        (B, 1, T, n))."""
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        cache, device = self.cache, k.device
        q_idx = torch.arange(cache.start, cache.end, device=device).view(1, 1, -1, 1)
        kv_idx = torch.arange(self.first, cache.end, device=device).view(1, 1, 1, -1)
        b = torch.arange(k.size(0), device=device).view(-1, 1, 1, 1)
        mask = document_window_mask_mod(cache.docs, self.window_blocks)(b, None, q_idx, kv_idx)
        return self.k.transpose(1, 2), self.v.transpose(1, 2), mask

    @property
    def size(self):
        return 0 if self.k is None else self.k.size(2)

    def drop_before(self, position):
        if self.k is not None and position > self.first:
            self.k, self.v = self.k[:, :, position - self.first:], self.v[:, :, position - self.first:]
            self.first = position
