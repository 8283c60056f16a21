"""Llama 3 (Meta, "The Llama 3 Herd of Models", 2024) as Meta's reference model.py and Hugging Face's
LlamaForCausalLM define it, beside model.py and gpt2.py: a known baseline with the same small interface, so the same
tools can train, score and sample it (issue 42).

Torch only, like model.py: a checkpoint carries its module's source, so a researcher's edit here flows through.

The architecture: token embeddings (no position table); pre-RMSNorm blocks (RMSNorm with a weight, eps 1e-5, in
float32 as HF's); grouped-query attention: num_heads query heads share num_kv_heads key/value heads (query head h
reads kv head h // (num_heads / num_kv_heads), HF's repeat_kv), rotary position embeddings (RoPE, θ = 500,000,
HF's rotate-half layout: the first and second half of each head's dims form the pairs; Meta's checkpoints interleave
them, and HF's converter permutes q and k, which is the layout here); a SwiGLU MLP, down(silu(gate(x)) x up(x)),
whose hidden width follows Meta's rule (ffn_hidden); a final RMSNorm; an LM head NOT tied to the embedding; no
biases anywhere; no dropout. Init: normal(0, 0.02) for every weight (HF's initializer_range), RMSNorm weights 1.
The weights hold HF's under other names (transformers_names), with padded_vocab rows where HF has vocab_size.

Documents: each <|endoftext|> starts a document that the tokens before it cannot see (document-causal masks, as
model.py's), and rotary positions restart at 0 there, so a document packed mid-row gives exactly the logits it gives
alone in its own row (gptlab/evals/score.py packs scored sequences so and relies on it). Tokens before a row's first
<|endoftext|> count from 0 at the row's start. A row holding a single document therefore has LlamaForCausalLM's
positions 0, 1, ...; a packed row does not (HF counts from the row's start). RoPE has no table to outgrow: any
length is read (context_limit None), though quality past the trained rows is the model's own business.

The interface the tools use (model.py's; see its docstring):
    GPTConfig(**fields), GPT(config)           fields: the architecture settings (train_gpt.py makes a --flag of
                                               each flag=True field)
    model(idx, masks, targets)                 summed cross-entropy (nats); model(idx, masks): logits
    model.attention_masks(idx, eot, windows, flex=False), model.final_windows(), SEQ_MULTIPLE, BLOCK_SIZE
    model.predict(tokens, eot, windows=None, positions=None)
    KVCache(model, eot), cache.forward(tokens) generation
    training_flops(model, tokens, pairs), attention_pairs(idx, eot, blocks)
    MEMORY_PASSES, memory_widths(config), activation_bytes_per_token(config, padded_vocab, act_bytes)
    model.fp8_head, model.store_embeddings_in(dtype)   accepted, and do nothing (see GPT)
    tp_plan(model), tp_sizes(config)           --tp: how the weights split, what --tp must divide
    pp_stage(model, stage, n_stages), model.cross_entropy_sum(x, targets)   --pp: a pipeline stage's function,
                                               and the loss on the last stage's output
    transformers_export / transformers_import  LlamaForCausalLM's config and weights (export_hf.py, --init_from)
No sliding windows: windows are accepted and ignored; attention is dense, with a boolean document-causal mask,
through scaled_dot_product_attention on every device. The mask holds B x T x T bools: train in rows of a few
thousand tokens at most, not model.py's rows of 48K.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

BLOCK_SIZE = 1  # no block structure: any row length works
SEQ_MULTIPLE = 1
# --tp: the plan splits the residual stream along the sequence between blocks (sequence_parallel_plan), so the
# rows' length must divide by --tp
SEQUENCE_PARALLEL = True
VOCAB_MULTIPLE = 128  # embedding rows padded to a multiple of this for efficient matmuls
INIT_STD = 0.02  # HF's initializer_range
OPTIMIZER = "adamw"  # train_gpt.py's recipe for it: AdamW, warm-up + cosine (Llama 3's pre-training, torchtitan)
# --optimizer muon: Adam's learning rates for the untied head, the embedding and the vectors (modded's 0.22 / 0.6 /
# 0.04 also train; these did better in a 30-step sweep of a 2 x 64 model on bytes): starting points, tune them
MUON_ADAM_LRS = dict(head=0.02, embeddings=0.05, scalars=0.04)
TRANSFORMERS_MODEL_TYPE = "llama"  # config.json's model_type of the checkpoints transformers_import reads


@dataclass
class GPTConfig:
    """The architecture (defaults: a small Llama 3 of ~124M parameters beside GPT-2 small's 50K vocabulary: 12 x
    768, 12 query heads sharing 4 key/value heads). `help` becomes the --flag's help in train_gpt.py; flag=False
    leaves a field to the tools. head_dim is derived (model_dim / num_heads), as in Llama."""
    vocab_size: int = field(default=None, metadata={"help": "embedding rows (>= the tokenizer's n_vocab incl. "
                                                    "specials; default: the tokenizer's n_vocab); padded to a "
                                                    "multiple of 128 inside the model"})
    num_layers: int = field(default=12, metadata={"help": "transformer blocks (Llama's n_layers)"})
    num_heads: int = field(default=12, metadata={"help": "attention (query) heads per block (n_heads); must divide "
                                                 "model_dim"})
    num_kv_heads: int = field(default=4, metadata={"help": "key/value heads (n_kv_heads; grouped-query attention: "
                                                   "must divide num_heads; = num_heads is plain multi-head)"})
    model_dim: int = field(default=768, metadata={"help": "width of the residual stream (dim)"})
    multiple_of: int = field(default=256, metadata={"help": "the SwiGLU hidden width is rounded up to a multiple "
                                                    "of this (Meta's multiple_of; Llama 3 8B: 1024)"})
    ffn_dim_multiplier: float = field(default=1.0, metadata={"help": "scales the SwiGLU hidden width 8/3 x "
                                                             "model_dim before rounding (Meta's ffn_dim_multiplier; "
                                                             "Llama 3 8B: 1.3)"})
    rope_theta: float = field(default=500000.0, metadata={"help": "RoPE base θ (Llama 3: 500000; Llama 2: 10000)"})
    norm_eps: float = field(default=1e-5, metadata={"help": "RMSNorm epsilon (Llama 3: 1e-5)"})
    max_seq_len: int = field(default=1024, metadata={"flag": False, "arch": False,
                                                     "help": "the longest row trained (RoPE has no table: "
                                                     "recorded for the export's max_position_embeddings)"})
    # muP (train_gpt.py --mup, gptlab/train/mup.py): the base model's width and heads; None: standard
    mup_base_width: int = field(default=None, metadata={"flag": False, "help": "muP base model_dim"})
    mup_base_heads: int = field(default=None, metadata={"flag": False, "help": "muP base num_heads"})

    @property
    def head_dim(self):
        return self.model_dim // self.num_heads

    @property
    def ffn_hidden(self):
        """Meta's rule (llama3 model.py FeedForward): int(2/3 x 4 x dim), x ffn_dim_multiplier, rounded up to a
        multiple of multiple_of."""
        hidden = int(2 * 4 * self.model_dim / 3)
        hidden = int(self.ffn_dim_multiplier * hidden)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)

    @property
    def mlp_ratio(self):  # the tools' activation-memory guess reads the MLP's width so
        return self.ffn_hidden / self.model_dim

    def __post_init__(self):
        """ValueError naming the field and the fix, for a configuration no Llama can have."""
        for name in ("vocab_size", "num_layers", "num_heads", "num_kv_heads", "model_dim", "multiple_of",
                     "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"--{name} must be a positive integer, got {value!r}")
        if self.model_dim % self.num_heads or self.head_dim % 2:
            raise ValueError(f"--model_dim {self.model_dim} / --num_heads {self.num_heads} must be a whole, even "
                             "head width (RoPE rotates pairs of dims); choose num_heads dividing model_dim")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"--num_kv_heads {self.num_kv_heads} does not divide --num_heads {self.num_heads} "
                             "(each key/value head serves a whole group of query heads); choose a divisor")
        for name in ("ffn_dim_multiplier", "rope_theta", "norm_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"--{name} must be a positive number, got {value!r}")
        if self.ffn_hidden < 1:
            raise ValueError(f"--ffn_dim_multiplier {self.ffn_dim_multiplier} gives no MLP hidden units; use e.g. 1")


class RMSNorm(nn.Module):
    """x / rms(x) x weight, computed in float32 (HF's LlamaRMSNorm, Meta's RMSNorm)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotary(positions, head_dim, theta):
    """(cos, sin), each (..., head_dim) in float32, of the given integer positions (any shape): the frequencies
    θ^(-2i/head_dim), i < head_dim/2, repeated for both halves (rotate-half layout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    angles = positions.float()[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x, cos, sin):
    """x (B, H, T, D) rotated by (cos, sin) (B, T, D): pairs (i, i + D/2) turn by their angle."""
    half = x.size(-1) // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    return x * cos + rotated * sin


def tp_sizes(config):
    """{what: size} that --tp must divide: every rank holds whole query and key/value heads and an equal share of
    the SwiGLU width."""
    return {"--num_heads": config.num_heads, "--num_kv_heads": config.num_kv_heads,
            "the SwiGLU width": config.ffn_hidden}


def tp_plan(model):
    """Tensor parallelism (gptlab/train/tensor_parallel.py; see model.py's tp_plan for the styles), Megatron's
    split: q, k, v and the MLP's gate and up by output rows ("colwise": each rank its query heads, the key/value
    heads they read, its SwiGLU units), o_proj and down_proj by input columns ("rowwise": the outputs summed). The
    embedding, the untied head and the RMSNorms stay whole on every rank, the activations between blocks split
    along the sequence (sequence_parallel_plan)."""
    plan = {}
    for i in range(len(model.blocks)):
        plan.update({f"blocks.{i}.attn.{n}": "colwise" for n in ("q_proj", "k_proj", "v_proj")})
        plan.update({f"blocks.{i}.mlp.{n}": "colwise" for n in ("gate_proj", "up_proj")})
        plan.update({f"blocks.{i}.attn.o_proj": "rowwise", f"blocks.{i}.mlp.down_proj": "rowwise"})
    plan.update(sequence_parallel_plan(model))
    return plan, []


def sequence_parallel_plan(model):
    """Sequence parallelism on top of tp_plan (gptlab/train/tensor_parallel.py's styles): between the blocks each
    TP rank holds its share of the positions of the residual stream; the norms run on it, their outputs gathered
    whole for the column-split layers and the head; attn.o_proj and mlp.down_proj reduce-scatter their sums into it;
    the whole embed look-up is cut to it."""
    plan = {"embed": "split_sequence", "norm": "sequence_norm"}
    for i in range(len(model.blocks)):
        plan.update({f"blocks.{i}.{n}": "sequence_norm" for n in ("attn_norm", "mlp_norm")})
        plan.update({f"blocks.{i}.{n}": "rowwise_to_sequence" for n in ("attn.o_proj", "mlp.down_proj")})
    return plan


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        # muP: 1/head_dim, scaled to be 1/sqrt(head_dim) at the base's head dim; None: SDPA's 1/sqrt(head_dim)
        base_head_dim = c.mup_base_width // c.mup_base_heads if c.mup_base_width else None
        self.scale = None if base_head_dim in (None, c.head_dim) else base_head_dim ** 0.5 / c.head_dim
        self.q_proj = nn.Linear(c.model_dim, c.num_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.model_dim, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.model_dim, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.model_dim, bias=False)

    def forward(self, x, rope, mask, cache=None):
        """x (B, T, dim); rope: (cos, sin) of each token's position; mask: bool (B, 1, T, keys), True where a query
        may attend, or None for plain causal; cache: this layer's _LayerCache in generation (x then holds only the
        new tokens)."""
        B, T, _ = x.shape
        # (-1: under tensor parallelism a rank holds its share of the query and key/value heads, tp_plan)
        q = self.q_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        if cache is not None:
            k, v, mask = cache.extend(k, v)  # (the cache holds the kv heads, rotated)
        group = self.num_heads // self.num_kv_heads  # query heads h*group ... share kv head h (HF's repeat_kv)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.model_dim, c.ffn_hidden, bias=False)  # Meta's w1
        self.up_proj = nn.Linear(c.model_dim, c.ffn_hidden, bias=False)  # w3
        self.down_proj = nn.Linear(c.ffn_hidden, c.model_dim, bias=False)  # w2

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn_norm = RMSNorm(c.model_dim, c.norm_eps)
        self.attn = Attention(c)
        self.mlp_norm = RMSNorm(c.model_dim, c.norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, rope, mask, cache=None):
        x = x + self.attn(self.attn_norm(x), rope, mask, cache)
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = c = config
        self.vocab_size = c.vocab_size
        self.padded_vocab = -(-c.vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
        self.num_layers, self.max_seq_len = c.num_layers, c.max_seq_len
        self.context_limit = None  # RoPE: no position table bounds what the scorers may feed
        self.embed = nn.Embedding(self.padded_vocab, c.model_dim)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.num_layers)])
        self.norm = RMSNorm(c.model_dim, c.norm_eps)
        self.lm_head = nn.Linear(c.model_dim, self.padded_vocab, bias=False)  # untied, as Llama 3's
        # the tools set it (train_gpt.py's --fp8_head); an instance attribute, so train_gpt.py's check
        # (hasattr(GPT, "fp8_head")) finds no FP8 head and refuses --fp8_head with its one error line
        self.fp8_head = False
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)

    def store_embeddings_in(self, dtype):
        """Does nothing: AdamW trains the embedding, and its update needs float32 master weights."""

    def forward(self, idx, masks, targets=None, cache=None):
        """idx: (B, T) token ids; masks: what attention_masks() returns for idx (None: one causal document from
        position 0, as LlamaForCausalLM reads a row). With targets: the SUM of the cross-entropy over all B*T
        positions (nats, over the padded vocabulary). Without: float32 logits (B, T, padded_vocab).
        Generation: cache (a KVCache) holds the earlier tokens; idx holds the next ones, masks is None."""
        x = self.hidden_states(idx, masks, cache)
        if targets is None:
            return self.logits(x)
        return self.cross_entropy_sum(x, targets)

    def cross_entropy_sum(self, x, targets):
        """The summed cross-entropy (nats) of final hidden states x (B, T, dim) against targets (B, T), over the
        padded vocabulary: forward's loss, and --pp's on the last stage's output."""
        return F.cross_entropy(self.logits(x).flatten(0, 1), targets.flatten(), reduction="sum")

    def hidden_states(self, idx, masks, cache=None):
        """The final RMSNormed hidden states (B, T, dim) that logits() reads: forward's arguments, without the
        head."""
        if cache is not None:
            positions, mask = cache.positions, None  # each layer's cache gives its mask
        elif masks is None:
            positions, mask = torch.arange(idx.size(1), device=idx.device).expand(idx.size(0), -1), None
        else:
            positions, mask = masks["positions"], masks["mask"]
        rope = rotary(positions, self.config.head_dim, self.config.rope_theta)
        x = self.embed(idx)
        for i, block in enumerate(self.blocks):
            x = block(x, rope, mask, None if cache is None else cache.layers[i])
        return self.norm(x)

    def logits(self, x):
        """Final hidden states (..., dim) → float32 logits (..., padded_vocab)."""
        if self.config.mup_base_width is not None:  # muP's readout multiplier base/d
            x = x * (self.config.mup_base_width / x.size(-1))
        return self.lm_head(x).float()

    @torch.no_grad()
    def predict(self, tokens, eot, windows=None, positions=None, tree=None):
        """Float logits (B, T, vocab_size) of tokens (B, T) of any length; windows: ignored. positions: (rows,
        columns), two LongTensors (N,): only the logits there, (N, vocab_size). tree: (position ids, branch ids),
        two LongTensors (B, T): documents that are a shared start (branch 0) and branches 1, 2, ... that each see
        the start and themselves only, each token at its position in the sequence it belongs to (evaluations: an
        example's choices after one copy of its context)."""
        masks = self.attention_masks(tokens, eot, windows)
        if tree is not None:  # a query sees no key of another branch (keys of the start, branch 0, it does)
            pos, branches = tree
            elsewhere = (branches[:, None, :] != 0) & (branches[:, :, None] != branches[:, None, :])
            masks = {"mask": masks["mask"] & ~elsewhere[:, None], "positions": pos}
        x = self.hidden_states(tokens, masks)
        if positions is not None:
            x = x[positions[0], positions[1]]
        return self.logits(x)[..., :self.vocab_size]

    def attention_masks(self, idx, eot, windows=None, flex=False):
        """What forward() takes for a batch idx (B, T) whose documents start at <|endoftext|> (eot):
        {"mask": bool (B, 1, T, T), True where query q may attend to key k (k <= q, same document),
        "positions": (B, T) each token's position in its document}. windows and flex: ignored."""
        docs = (idx == eot).cumsum(dim=1)
        pos = torch.arange(idx.size(1), device=idx.device)
        mask = (pos[:, None] >= pos[None, :]) & (docs[:, :, None] == docs[:, None, :])
        return {"mask": mask[:, None], "positions": pos - document_starts(idx, eot)}

    def final_windows(self):
        """(long, short) windows for the tools that ask: none; a window of max_seq_len tokens stands for that
        (documents longer than the rows trained are still read whole: the masks have no window)."""
        return self.max_seq_len, self.max_seq_len


def pp_stage(model, stage, n_stages):
    """Pipeline parallelism (gptlab/train/pipeline.py, torch.distributed.pipelining): stage `stage` of n_stages as a
    function forward(mask_args, *inputs) running an equal share of the blocks of `model` (mask_args: the step's
    (eot, windows, flex)). What crosses a stage boundary: the residual stream and the token ids (each stage builds its
    masks and rotary angles from them). The first stage takes the token ids and looks up their embeddings; the last
    returns the final RMSNormed hidden states (the loss, model.cross_entropy_sum, applies the head)."""
    per = model.num_layers // n_stages

    def forward(mask_args, *inputs):
        idx = inputs[-1]
        masks = model.attention_masks(idx, *mask_args)
        rope = rotary(masks["positions"], model.config.head_dim, model.config.rope_theta)
        x = model.embed(idx) if stage == 0 else inputs[0]
        for block in model.blocks[stage * per:(stage + 1) * per]:
            x = block(x, rope, masks["mask"])
        return model.norm(x) if stage == n_stages - 1 else (x, idx)
    return forward


def document_starts(idx, eot):
    """(B, T): the position where each token's document starts (its last <|endoftext|> at or before it; 0 before
    a row's first)."""
    pos = torch.arange(idx.size(1), device=idx.device)
    return torch.where(idx == eot, pos, 0).cummax(dim=1).values


def attention_pairs(idx, eot, window_blocks=None):
    """How many (query, key) pairs the document-causal mask of idx (B, T) allows: a 0-dim int64 tensor computed
    in O(B*T) (attention FLOPs for MFU). window_blocks: ignored."""
    pos = torch.arange(idx.size(1), device=idx.device)
    return (pos - document_starts(idx, eot) + 1).sum()


def training_flops(model, tokens, pairs):
    """(matmul FLOPs, attention FLOPs) of one forward + backward over `tokens` tokens whose masks allow `pairs`
    query-key pairs: 6 x tokens x (weight matrices that multiply: every 2-D weight but the embedding, whose
    look-up costs nothing; the untied head counts), and per layer 12 x head_dim x query heads x pairs (QK^T and
    AV: the kv heads are shared, the products are not). pairs: a count, or the tools' {"long": n, "short": n} (one
    mask here: "long" is read)."""
    n_matmul = sum(p.numel() for n, p in model.named_parameters() if p.ndim >= 2 and not n.startswith("embed."))
    if isinstance(pairs, dict):
        pairs = pairs["long"]
    c = model.config
    return 6 * tokens * n_matmul, 12 * c.head_dim * c.num_heads * c.num_layers * pairs


# ---- the analytical step estimate's architecture-dependent parts (gptlab/train/perf_estimate.py, batching.py):
# memory-bound traffic of one forward, in passes over tensors of memory_widths' widths (one read or one write per
# token). Our estimates of the kernels' traffic (not measured), as model.py's.
MEMORY_PASSES = {
    "compiled": dict(
        residual=10,         # per layer, model_dim wide: two RMSNorms (read, write) and two residual adds (read 2,
        #                      write 1)
        attention_inputs=2,  # per layer, the q + k + v width: read the projections, write q and k rotated, v
        attention_output=2,  # per layer: the (B, H, T, D) -> (B, T, H x D) copy
        mlp_hidden=3,        # per layer, the SwiGLU hidden width: silu(gate) x up reads two and writes one
        embeddings=2,        # per token: the look-up reads a row and writes it
        logits=2,            # per token, the padded vocabulary: the fused cross-entropy reads the logits twice
    ),
    "eager": dict(
        residual=18,         # two RMSNorms in float32 (cast, square, mean, rsqrt, scale, weight: ~6 passes each)
        #                      and two residual adds (3 each)
        attention_inputs=10,  # rotate-half RoPE on q and k (cat, negate, two products, a sum), repeat_kv, layouts
        attention_output=2,  # as compiled
        mlp_hidden=5,        # silu (read, write), then the product with up (read 2, write 1)
        embeddings=2,        # as compiled
        logits=10,           # float32 (4 bytes): the upcast and cross-entropy's log-softmax forward and backward
    ),
}


def memory_widths(config):
    """Per layer, the widths MEMORY_PASSES counts passes over (grouped-query attention: k and v have the kv heads')."""
    return dict(residual=config.model_dim,
                attention_inputs=(config.num_heads + 2 * config.num_kv_heads) * config.head_dim,
                attention_output=config.num_heads * config.head_dim, mlp_hidden=config.ffn_hidden)


def activation_bytes_per_token(config, padded_vocab, act_bytes=2):
    """A first guess of a forward+backward's activation memory per token for train_gpt.py's memory probe:
    Korthikanti et al. 2022's 34 bytes x model_dim per block at 2-byte activations (eq. 1 without its 5as/h term),
    whose MLP share (16 of the 34, for a 4 x model_dim GELU MLP keeping 2 tensors of its width) becomes SwiGLU's 3
    tensors of ffn_hidden (gate, up, their product); plus the logits with their float32 copy and gradient: 10 bytes
    per vocabulary entry. A guess only: the probe measures before it trusts it."""
    mlp = 16 * (3 / 2) * config.ffn_hidden / (4 * config.model_dim)
    per_block = (18 + mlp) * config.model_dim * act_bytes / 2
    return config.num_layers * per_block + padded_vocab * (act_bytes + 8)


class KVCache:
    """Keys and values of the tokens fed so far, one _LayerCache per layer, for generation: cache.forward(tokens)
    runs only the new tokens (GPT.forward(idx, None, cache=cache)). The masks and positions follow
    attention_masks()'s rule (a document starts at <|endoftext|>, where positions restart); keys of finished
    documents are dropped, since no later token can see them. windows: ignored."""

    def __init__(self, model, eot, windows=None):
        self.model, self.eot = model, eot
        self.layers = [_LayerCache(self) for _ in range(model.num_layers)]
        self.first = 0  # position of the oldest key held
        self.end = 0  # positions fed so far
        self.docs = None  # (B, end - first): document index of each key held
        self.doc_start = 0  # (B, 1) after the first forward: where each row's current document starts
        self.positions = self.mask = None  # of the forward in progress

    def forward(self, tokens):
        """tokens (B, T): the next tokens → the model's logits (B, T, padded vocab) at their positions."""
        B, T = tokens.shape
        pos = torch.arange(self.end, self.end + T, device=tokens.device)
        is_eot = tokens == self.eot
        last_doc = self.docs[:, -1:] if self.docs is not None else tokens.new_zeros(B, 1)
        new_docs = last_doc + is_eot.cumsum(dim=1)
        starts = torch.where(is_eot, pos, self.doc_start).cummax(dim=1).values
        self.docs = new_docs if self.docs is None else torch.cat([self.docs, new_docs], dim=1)
        keys = torch.arange(self.first, self.end + T, device=tokens.device)
        self.mask = ((pos[:, None] >= keys[None, :]) & (new_docs[:, :, None] == self.docs[:, None, :]))[:, None]
        self.positions = pos - starts
        logits = self.model(tokens, None, cache=self)
        self.end += T
        self.doc_start = starts[:, -1:]
        drop = int(self.doc_start.min()) - self.first  # keys before every row's current document
        if drop > 0:
            self.docs = self.docs[:, drop:]
            for layer in self.layers:
                layer.k, layer.v = layer.k[:, :, drop:], layer.v[:, :, drop:]
            self.first += drop
        return logits


class _LayerCache:
    """One layer's rotated keys and values (B, kv heads, keys, D) of positions cache.first, ..., the last fed."""

    def __init__(self, cache):
        self.cache = cache
        self.k = self.v = None

    def extend(self, k, v):
        """Append the new tokens' k, v (B, H, T, D) → (all keys, all values, their bool mask (B, 1, T, keys))."""
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v, self.cache.mask


# ---------------------------------------------------------------------------------- transformers' LlamaForCausalLM
# this module's weight names → LlamaForCausalLM's (prefixes, then the pieces inside a block)
_HF_PREFIXES = (("embed.", "model.embed_tokens."), ("blocks.", "model.layers."), ("norm.", "model.norm."),
                ("lm_head.", "lm_head."))
_HF_PIECES = ((".attn_norm.", ".input_layernorm."), (".mlp_norm.", ".post_attention_layernorm."),
              (".attn.", ".self_attn."))


def transformers_name(name):
    """LlamaForCausalLM's name of one of this module's weights."""
    hf = next(new + name[len(old):] for old, new in _HF_PREFIXES if name.startswith(old))
    for ours, theirs in _HF_PIECES:
        hf = hf.replace(ours, theirs)
    return hf


def transformers_export(model, n_vocab, eot):
    """(LlamaConfig's fields, LlamaForCausalLM's state dict) holding this model: the tokenizer's n_vocab rows of
    the embedding and the head (the padding rows cut: the logits of real ids are unchanged). Logits equal on a row
    holding one document from <|endoftext|> at position 0 (HF counts positions from the row's start)."""
    c = model.config
    if c.mup_base_width is not None:
        raise ValueError("a Llama trained with --mup scales its logits and attention, which LlamaForCausalLM does not")
    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=n_vocab,
                  hidden_size=c.model_dim, intermediate_size=c.ffn_hidden, num_hidden_layers=c.num_layers,
                  num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim,
                  hidden_act="silu", max_position_embeddings=c.max_seq_len, rms_norm_eps=c.norm_eps,
                  rope_theta=c.rope_theta, rope_scaling=None,  # (transformers < 5 reads these two)
                  rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
                  initializer_range=INIT_STD, attention_bias=False, attention_dropout=0.0, mlp_bias=False,
                  pretraining_tp=1, tie_word_embeddings=False, bos_token_id=eot, eos_token_id=eot)
    state = {}
    for name, tensor in model.state_dict().items():
        if name in ("embed.weight", "lm_head.weight"):
            tensor = tensor[:n_vocab]
        state[transformers_name(name)] = tensor.detach().float().contiguous().clone()
    return config, state


def transformers_config(hf):
    """GPTConfig's fields (and max_seq_len) of a LlamaForCausalLM config.json (a dict), or ValueError naming what
    this module cannot hold (biases, RoPE scaling, another head width)."""
    dim, heads = hf["hidden_size"], hf["num_attention_heads"]
    rope = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    kind = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    problems = [what for what, bad in (
        (f"RoPE scaling {kind!r}", kind != "default"),
        ("attention biases", hf.get("attention_bias")), ("MLP biases", hf.get("mlp_bias")),
        (f"activation {hf.get('hidden_act')!r}", hf.get("hidden_act", "silu") != "silu"),
        (f"head_dim {hf.get('head_dim')} (hidden_size / heads is {dim // heads})",
         hf.get("head_dim") not in (None, dim // heads)),
        (f"pretraining_tp {hf.get('pretraining_tp')}", hf.get("pretraining_tp") not in (None, 1))) if bad]
    if problems:
        raise ValueError(f"this Llama has {', '.join(problems)}, which llama.py does not have")
    hidden = hf["intermediate_size"]
    base = int(2 * 4 * dim / 3)
    multiple_of, multiplier = 256, 1.0
    if GPTConfig(vocab_size=1, model_dim=dim, num_heads=heads, num_kv_heads=1).ffn_hidden != hidden:
        # Meta's rule reaches any width: a multiple_of of the width itself, with the multiplier that takes 8/3 dim
        # to at most it (the rounding then gives exactly it)
        multiple_of, multiplier = hidden, hidden / base
    return dict(vocab_size=hf["vocab_size"], num_layers=hf["num_hidden_layers"], num_heads=heads,
                num_kv_heads=hf.get("num_key_value_heads") or heads, model_dim=dim, multiple_of=multiple_of,
                ffn_dim_multiplier=multiplier,
                rope_theta=float(rope.get("rope_theta") or hf.get("rope_theta") or 10000.0),
                norm_eps=float(hf.get("rms_norm_eps", 1e-6)), max_seq_len=hf.get("max_position_embeddings") or 1024)


def transformers_import(hf_config, hf_state, model):
    """This module's state dict for `model` (built from transformers_config's fields) from LlamaForCausalLM's
    weights: the embedding and head padded with zero rows to padded_vocab; a checkpoint with a tied head
    (tie_word_embeddings, no lm_head.weight) gives the head a copy of the embedding. KeyError / ValueError for a
    missing weight or a shape that does not fit."""
    state = {}
    for name, want in model.state_dict().items():
        hf = transformers_name(name)
        if hf == "lm_head.weight" and hf not in hf_state and hf_config.get("tie_word_embeddings"):
            hf = "model.embed_tokens.weight"
        tensor = hf_state[hf]
        if name in ("embed.weight", "lm_head.weight"):
            tensor = torch.cat([tensor, tensor.new_zeros(want.size(0) - tensor.size(0), tensor.size(1))])
        if tuple(tensor.shape) != tuple(want.shape):
            raise ValueError(f"{hf} has shape {tuple(tensor.shape)}, the model's {name} {tuple(want.shape)}")
        state[name] = tensor.to(want.dtype)
    return state
