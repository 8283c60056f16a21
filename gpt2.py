"""GPT-2 (Radford et al. 2019) as nanoGPT and Hugging Face's GPT2LMHeadModel define it, beside model.py: a known
baseline with the same small interface, so the same tools can train, score and sample it (issue 42).

Torch only, like model.py: a checkpoint carries its module's source, so a researcher's edit here flows through.

The architecture: learned absolute position embeddings added to the token embeddings; pre-LayerNorm blocks
(LayerNorm with biases, eps 1e-5); multi-head attention and a 4x MLP with GELU (tanh approximation, HF's gelu_new),
every linear layer with a bias (bias=False: nanoGPT's bias-free variant, which GPT2LMHeadModel cannot hold); a
final LayerNorm; the LM head tied to the token embedding. Init as GPT-2: normal(0, 0.02) weights and embeddings,
zero biases, the residual projections (attn.c_proj, mlp.c_proj) at 0.02 / sqrt(2 x num_layers). No dropout:
pre-training at this scale uses none (nanoGPT, llm.c). The weights hold HF's under other names, with nn.Linear's
(out, in) layout where HF's Conv1D has (in, out), and padded_vocab rows where HF has vocab_size (the test
tests/unit/test_gpt2_module.py maps one onto the other).

Documents: each <|endoftext|> starts a document that the tokens before it cannot see (document-causal masks, as
model.py's), and position embeddings restart at 0 there, so a document packed mid-row gives exactly the logits it
gives alone in its own row (gptlab/evals/score.py packs scored sequences so and relies on it). Tokens before a
row's first <|endoftext|> (a document continued from the previous row) count from 0 at the row's start. A row
with a single document therefore has GPT2LMHeadModel's positions 0, 1, ...; a packed row does not (HF counts
from the row's start). No document may be longer than max_seq_len (the position table): ValueError.

The interface the tools use (model.py's; see its docstring):
    GPTConfig(**fields), GPT(config)           fields: the architecture settings (train_gpt.py makes a --flag of
                                               each flag=True field)
    model(idx, masks, targets)                 summed cross-entropy (nats); model(idx, masks): logits
    model.attention_masks(idx, eot, windows, flex=False), model.final_windows(), SEQ_MULTIPLE, BLOCK_SIZE
    model.predict(tokens, eot, windows=None, positions=None, tree=None)
    KVCache(model, eot), cache.forward(tokens) generation
    training_flops(model, tokens, pairs), attention_pairs(idx, eot, blocks)
    MEMORY_PASSES, memory_widths(config), activation_bytes_per_token(config, padded_vocab, act_bytes)
    model.fp8_head, model.store_embeddings_in(dtype)   accepted, and do nothing (see GPT)
    tp_plan(model), tp_sizes(config)           --tp: how the weights split, what --tp must divide
    pp_stage(model, stage, n_stages), model.cross_entropy_sum(x, targets)   --pp: a pipeline stage's function,
                                               and the loss on the last stage's output
    model.context_limit                        the longest sequence it reads (max_seq_len): the evaluations cut
                                               a longer one's context from the left, keeping <|endoftext|> first
GPT-2 has no sliding windows: windows are accepted and ignored, and attention is dense, with a boolean
document-causal mask, through scaled_dot_product_attention on every device (flex=True too). The mask holds
B x T x T bools: train GPT-2 in rows of about its context (1,024 tokens), not model.py's rows of 48K.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

# no block structure: any row length works, and a "window" of the tools counts single tokens (evaluations then
# pack sequences anywhere in a row)
BLOCK_SIZE = 1
SEQ_MULTIPLE = 1
# --tp: the plan splits the residual stream along the sequence between blocks (sequence_parallel_plan), so the
# rows' length must divide by --tp
SEQUENCE_PARALLEL = True
VOCAB_MULTIPLE = 128  # embedding rows padded to a multiple of this for efficient matmuls (nanoGPT: 50257 -> 50304)
LAYER_NORM_EPS = 1e-5  # GPT-2's layer_norm_epsilon
INIT_STD = 0.02  # GPT-2's initializer_range
OPTIMIZER = "adamw"  # train_gpt.py's recipe for it: AdamW, warm-up + cosine (nanoGPT, llm.c); model.py's is Muon
# --optimizer muon: Adam's learning rates for the tied table (embedding and head) and the vectors; modded's 0.6 for a
# table that is also the head makes the logits explode. Starting points from a 30-step sweep of a 2 x 64 model on
# bytes (0.6 / 0.22 / 0.05 / 0.01 tried): tune them with sweep.py
MUON_ADAM_LRS = dict(embeddings=0.01, scalars=0.01)
TRANSFORMERS_MODEL_TYPE = "gpt2"  # config.json's model_type of the checkpoints transformers_import reads


@dataclass
class GPTConfig:
    """The architecture (defaults: GPT-2 small, 124M). `help` becomes the --flag's help in train_gpt.py; flag=False
    leaves a field to the tools. head_dim is derived (model_dim / num_heads), as in GPT-2."""
    vocab_size: int = field(default=None, metadata={"help": "embedding rows (>= the tokenizer's n_vocab incl. "
                                                    "specials; default: the tokenizer's n_vocab); padded to a "
                                                    "multiple of 128 inside the model"})
    num_layers: int = field(default=12, metadata={"help": "transformer blocks (GPT-2's n_layer)"})
    num_heads: int = field(default=12, metadata={"help": "attention heads per block (n_head); must divide "
                                                 "model_dim"})
    model_dim: int = field(default=768, metadata={"help": "width of the residual stream (n_embd)"})
    mlp_ratio: float = field(default=4.0, metadata={"help": "MLP hidden width / model_dim (GPT-2: 4)"})
    bias: bool = field(default=True, metadata={"help": "biases in every linear layer and LayerNorm (GPT-2: yes; "
                                               "--no-bias is nanoGPT's bias-free variant, which does not export "
                                               "to GPT2LMHeadModel)"})
    max_seq_len: int = field(default=1024, metadata={"flag": False, "help": "rows of the learned position table "
                                                     "(n_positions): the longest document the model reads; "
                                                     "train_gpt.py sets it to the longest row"})
    # muP (train_gpt.py --mup, gptlab/train/mup.py): the base model's width and heads; None: standard
    mup_base_width: int = field(default=None, metadata={"flag": False, "help": "muP base model_dim"})
    mup_base_heads: int = field(default=None, metadata={"flag": False, "help": "muP base num_heads"})

    @property
    def head_dim(self):
        return self.model_dim // self.num_heads

    def __post_init__(self):
        """ValueError naming the field and the fix, for a configuration no GPT-2 can have."""
        for name in ("vocab_size", "num_layers", "num_heads", "model_dim", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"--{name} must be a positive integer, got {value!r}")
        if self.model_dim % self.num_heads:
            raise ValueError(f"--model_dim {self.model_dim} is not divisible by --num_heads {self.num_heads} (GPT-2's "
                             "heads split the width); choose num_heads dividing model_dim")
        if not math.isfinite(self.mlp_ratio) or int(self.mlp_ratio * self.model_dim) < 1:
            raise ValueError(f"--mlp_ratio {self.mlp_ratio} gives no MLP hidden units; use e.g. 4")


def local_part(w):
    """w as this rank holds it: its block of a DTensor (tensor parallelism, gptlab/train/tensor_parallel.py), else
    w itself (None too)."""
    return w.to_local() if hasattr(w, "to_local") else w


def tp_sizes(config):
    """{what: size} that --tp must divide: every rank holds whole heads and an equal share of the MLP."""
    return {"--num_heads": config.num_heads, "the MLP width (--mlp_ratio x --model_dim)":
            int(config.mlp_ratio * config.model_dim)}


def tp_plan(model):
    """Tensor parallelism (gptlab/train/tensor_parallel.py; see model.py's tp_plan for the styles): each rank holds
    whole heads: its rows of q, k and v in the fused c_attn (weight and bias split along dim 0 into 3 groups, each
    split over the ranks: "heads" with 3 groups), its columns of c_proj ("rowwise"); the MLP's c_fc rows and c_proj
    columns. The tied embedding/head, the position table and the LayerNorms stay whole on every rank, the
    activations between blocks split along the sequence (sequence_parallel_plan)."""
    plan = {}
    for i in range(len(model.blocks)):
        plan.update({f"blocks.{i}.attn": ("heads", ("c_attn.weight", "c_attn.bias"), 0, 3),
                     f"blocks.{i}.attn.c_proj": "rowwise", f"blocks.{i}.mlp.c_fc": "colwise",
                     f"blocks.{i}.mlp.c_proj": "rowwise"})
    plan.update(sequence_parallel_plan(model))
    return plan, []


def sequence_parallel_plan(model):
    """Sequence parallelism on top of tp_plan (gptlab/train/tensor_parallel.py's styles): between the blocks each
    TP rank holds its share of the positions of the residual stream; the norms run on it, their outputs gathered
    whole for the column-split layers and the head; attn.c_proj and mlp.c_proj reduce-scatter their sums into it;
    the whole embed and pos_embed look-ups are cut to it."""
    plan = {"embed": "split_sequence", "pos_embed": "split_sequence", "ln_f": "sequence_norm"}
    for i in range(len(model.blocks)):
        plan.update({f"blocks.{i}.{n}": "sequence_norm" for n in ("ln_1", "ln_2")})
        plan.update({f"blocks.{i}.{n}": "rowwise_to_sequence" for n in ("attn.c_proj", "mlp.c_proj")})
    return plan


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_heads, self.head_dim = c.num_heads, c.head_dim
        # muP: 1/head_dim, scaled to be GPT-2's 1/sqrt(head_dim) at the base's head dim; None: SDPA's 1/sqrt(head_dim)
        base_head_dim = c.mup_base_width // c.mup_base_heads if c.mup_base_width else None
        self.scale = None if base_head_dim in (None, c.head_dim) else base_head_dim ** 0.5 / c.head_dim
        self.c_attn = nn.Linear(c.model_dim, 3 * c.model_dim, bias=c.bias)  # q, k, v side by side, as HF's
        self.c_proj = nn.Linear(c.model_dim, c.model_dim, bias=c.bias)

    def forward(self, x, mask, cache=None):
        """x (B, T, dim); mask: bool (B, 1, T, keys), True where a query may attend, or None for plain causal;
        cache: this layer's _LayerCache in generation (x then holds only the new tokens)."""
        B, T, _ = x.shape
        # (tensor parallelism holds this rank's heads of q, k and v: local_part; the view counts the heads it has)
        qkv = F.linear(x, local_part(self.c_attn.weight), local_part(self.c_attn.bias))
        q, k, v = qkv.view(B, T, 3, -1, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, D)
        if cache is not None:
            k, v, mask = cache.extend(k, v)
        # scale 1/sqrt(head_dim), as GPT-2's (muP: self.scale)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden = int(c.mlp_ratio * c.model_dim)
        self.c_fc = nn.Linear(c.model_dim, hidden, bias=c.bias)
        self.c_proj = nn.Linear(hidden, c.model_dim, bias=c.bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.model_dim, eps=LAYER_NORM_EPS, bias=c.bias)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.model_dim, eps=LAYER_NORM_EPS, bias=c.bias)
        self.mlp = MLP(c)

    def forward(self, x, mask, cache=None):
        x = x + self.attn(self.ln_1(x), mask, cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = c = config
        self.vocab_size = c.vocab_size
        self.padded_vocab = -(-c.vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
        self.num_layers, self.max_seq_len = c.num_layers, c.max_seq_len
        self.context_limit = c.max_seq_len  # the scorers cut a longer sequence's context to this (model.py: none)
        self.embed = nn.Embedding(self.padded_vocab, c.model_dim)  # HF: transformer.wte
        self.pos_embed = nn.Embedding(c.max_seq_len, c.model_dim)  # HF: transformer.wpe
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.num_layers)])  # HF: transformer.h
        self.ln_f = nn.LayerNorm(c.model_dim, eps=LAYER_NORM_EPS, bias=c.bias)
        self.lm_head = nn.Linear(c.model_dim, self.padded_vocab, bias=False)
        self.lm_head.weight = self.embed.weight  # tied, as GPT-2's
        # the tools set it (train_gpt.py's --fp8_head); GPT-2's head stays in the autocast dtype whatever it says.
        # An instance attribute, not a class one, so train_gpt.py's check (hasattr(GPT, "fp8_head")) finds no FP8
        # head and refuses --fp8_head with its one error line
        self.fp8_head = False
        self._init_weights()

    def _init_weights(self):
        residual_std = INIT_STD / math.sqrt(2 * self.num_layers)  # GPT-2: residual projections scaled by depth
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)) and module is not self.lm_head:  # (tied: embed's)
                std = residual_std if name.endswith("c_proj") else INIT_STD
                nn.init.normal_(module.weight, mean=0.0, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def store_embeddings_in(self, dtype):
        """Does nothing: the token embedding is also the LM head's weight (tied), whose training needs float32
        master weights; model.py holds its untied embeddings in bfloat16 under bfloat16 training."""

    def forward(self, idx, masks, targets=None, cache=None):
        """idx: (B, T) token ids; masks: what attention_masks() returns for idx (None: one causal document from
        position 0, as GPT2LMHeadModel reads a row). With targets: the SUM of the cross-entropy over all B*T
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
        """The final LayerNormed hidden states (B, T, dim) that logits() reads: forward's arguments, without the
        head."""
        if cache is not None:
            positions, mask = cache.positions, None  # each layer's cache gives its mask
        elif masks is None:
            positions, mask = torch.arange(idx.size(1), device=idx.device), None
            _check_positions(idx.size(1), self.max_seq_len)
        else:
            positions, mask = masks["positions"], masks["mask"]
        x = self.embed(idx) + self.pos_embed(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, None if cache is None else cache.layers[i])
        return self.ln_f(x)

    def logits(self, x):
        """Final hidden states (..., dim) → float32 logits (..., padded_vocab)."""
        if self.config.mup_base_width is not None:  # muP's readout multiplier base/d (the head is the embedding)
            x = x * (self.config.mup_base_width / x.size(-1))
        return self.lm_head(x).float()

    @torch.no_grad()
    def predict(self, tokens, eot, windows=None, positions=None, tree=None):
        """Float logits (B, T, vocab_size) of tokens (B, T) of any length (at most max_seq_len tokens a document);
        windows: ignored. positions: (rows, columns), two LongTensors (N,): only the logits there, (N,
        vocab_size). tree: (position ids, branch ids), two LongTensors (B, T): documents that are a shared start
        (branch 0) and branches 1, 2, ... that each see the start and themselves only, each token at its position
        (below max_seq_len) in the sequence it belongs to (evaluations: an example's choices after one copy of its
        context)."""
        if tree is None:
            masks = self.attention_masks(tokens, eot, windows)
        else:  # document-causal, and a branch token sees no other branch (a tree may be longer than max_seq_len)
            pos, branches = tree
            docs, col = (tokens == eot).cumsum(dim=1), torch.arange(tokens.size(1), device=tokens.device)
            mask = ((col[:, None] >= col[None, :]) & (docs[:, :, None] == docs[:, None, :])
                    & ((branches[:, None, :] == 0) | (branches[:, :, None] == branches[:, None, :])))
            masks = {"mask": mask[:, None], "positions": pos}
        x = self.hidden_states(tokens, masks)
        if positions is not None:
            x = x[positions[0], positions[1]]
        return self.logits(x)[..., :self.vocab_size]

    def attention_masks(self, idx, eot, windows=None, flex=False):
        """What forward() takes for a batch idx (B, T) whose documents start at <|endoftext|> (eot):
        {"mask": bool (B, 1, T, T), True where query q may attend to key k (k <= q, same document),
        "positions": (B, T) each token's position in its document}. windows and flex: ignored (dense masks on
        every device). ValueError for a document longer than max_seq_len."""
        B, T = idx.shape
        docs = (idx == eot).cumsum(dim=1)
        pos = torch.arange(T, device=idx.device)
        positions = pos - document_starts(idx, eot)
        if T > self.max_seq_len:  # only then can a document be too long (a host sync, so only then)
            _check_positions(int(positions.max()) + 1, self.max_seq_len)
        mask = (pos[:, None] >= pos[None, :]) & (docs[:, :, None] == docs[:, None, :])
        return {"mask": mask[:, None], "positions": positions}

    def final_windows(self):
        """(long, short) windows in BLOCK_SIZE blocks for the tools that ask: GPT-2 has none, and a window of
        max_seq_len tokens covers every key a document can have, so it is the same as none."""
        return self.max_seq_len, self.max_seq_len


def pp_stage(model, stage, n_stages):
    """Pipeline parallelism (gptlab/train/pipeline.py, torch.distributed.pipelining): stage `stage` of n_stages as a
    function forward(mask_args, *inputs) running an equal share of the blocks of `model` (mask_args: the step's
    (eot, windows, flex)). What crosses a stage boundary: the residual stream and the token ids (each stage builds its
    masks from them). The first stage takes the token ids and adds the token and position embeddings; the last
    returns the final LayerNormed hidden states (the loss, model.cross_entropy_sum, applies the head: the embedding,
    tied, so its gradient comes from the first and the last stage and the trainer's sum over ranks adds them)."""
    per = model.num_layers // n_stages

    def forward(mask_args, *inputs):
        idx = inputs[-1]
        masks = model.attention_masks(idx, *mask_args)
        x = model.embed(idx) + model.pos_embed(masks["positions"]) if stage == 0 else inputs[0]
        for block in model.blocks[stage * per:(stage + 1) * per]:
            x = block(x, masks["mask"])
        return model.ln_f(x) if stage == n_stages - 1 else (x, idx)
    return forward


def _check_positions(length, max_seq_len):
    if length > max_seq_len:
        raise ValueError(f"a document of {length} tokens is longer than the {max_seq_len} learned positions "
                         "(max_seq_len) of this GPT-2; cut the text or train with longer rows")


def document_starts(idx, eot):
    """(B, T): the position where each token's document starts (its last <|endoftext|> at or before it; 0 before
    a row's first)."""
    pos = torch.arange(idx.size(1), device=idx.device)
    return torch.where(idx == eot, pos, 0).cummax(dim=1).values


def attention_pairs(idx, eot, window_blocks=None):
    """How many (query, key) pairs the document-causal mask of idx (B, T) allows: a 0-dim int64 tensor computed
    in O(B*T) (attention FLOPs for MFU). window_blocks: ignored (GPT-2 has no windows)."""
    pos = torch.arange(idx.size(1), device=idx.device)
    return (pos - document_starts(idx, eot) + 1).sum()


def training_flops(model, tokens, pairs):
    """(matmul FLOPs, attention FLOPs) of one forward + backward over `tokens` tokens whose masks allow `pairs`
    query-key pairs: 6 x tokens x (weight matrices that multiply: all but the position table; the token
    embedding once, as the tied head: its look-up costs nothing), and per layer 12 x head_dim x heads x pairs (QK^T
    and AV). pairs: a count, or the tools' {"long": n, "short": n} (one mask here: "long" is read)."""
    n_matmul = sum(p.numel() for n, p in model.named_parameters() if p.ndim >= 2 and not n.startswith("pos_embed."))
    if isinstance(pairs, dict):
        pairs = pairs["long"]
    c = model.config
    return 6 * tokens * n_matmul, 12 * c.head_dim * c.num_heads * c.num_layers * pairs


# ---- the analytical step estimate's architecture-dependent parts (gptlab/train/perf_estimate.py, batching.py):
# memory-bound traffic of one forward, in passes over tensors of memory_widths' widths (one read or one write per
# token). Our estimates of the kernels' traffic (not measured), as model.py's.
MEMORY_PASSES = {
    "compiled": dict(
        residual=10,         # per layer, model_dim wide: two LayerNorms (read, write) and two residual adds (read
        #                      2, write 1), the bias adds fused into the matmuls
        attention_inputs=2,  # per layer, q/k/v width: read the projection, write q, k, v in the heads' layout
        attention_output=2,  # per layer: the (B, H, T, D) -> (B, T, H x D) copy
        mlp_hidden=2,        # per layer, the MLP's hidden width: GELU reads and writes it once
        embeddings=2,        # per token and table (tokens, positions): the look-up reads a row and writes it
        logits=2,            # per token, the padded vocabulary: the fused cross-entropy reads the logits twice
    ),
    "eager": dict(
        residual=16,         # two LayerNorms in float32 under autocast (~3 passes each) and two residual adds
        #                      (3 each), the embeddings' sum (~1 per layer averaged)
        attention_inputs=4,  # split and transpose q, k, v (views, then SDPA's contiguous copies)
        attention_output=2,  # as compiled
        mlp_hidden=2,        # GELU (tanh): one kernel
        embeddings=2,        # as compiled
        logits=10,           # float32 (4 bytes): the upcast and cross-entropy's log-softmax forward and backward
    ),
}


def memory_widths(config):
    """Per layer, the widths MEMORY_PASSES counts passes over."""
    return dict(residual=config.model_dim, attention_inputs=3 * config.model_dim, attention_output=config.model_dim,
                mlp_hidden=int(config.mlp_ratio * config.model_dim))


def activation_bytes_per_token(config, padded_vocab, act_bytes=2):
    """A first guess of a forward+backward's activation memory per token for train_gpt.py's memory probe: GPT-2's
    block keeps 34 bytes x model_dim at 2-byte activations with an MLP of 4 x model_dim and attention without T x T
    scores (Korthikanti et al. 2022, eq. 1 without its 5as/h term), the MLP's share (16 of the 34) scaled with
    mlp_ratio; plus the logits with their float32 copy and gradient: 10 bytes per vocabulary entry."""
    per_block = (18 + 16 * config.mlp_ratio / 4) * config.model_dim * act_bytes / 2
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
        positions = pos - starts
        _check_positions(int(positions.max()) + 1, self.model.max_seq_len)
        self.docs = new_docs if self.docs is None else torch.cat([self.docs, new_docs], dim=1)
        keys = torch.arange(self.first, self.end + T, device=tokens.device)
        self.mask = ((pos[:, None] >= keys[None, :]) & (new_docs[:, :, None] == self.docs[:, None, :]))[:, None]
        self.positions = positions
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
    """One layer's keys and values (B, H, keys, D) of positions cache.first, ..., the last one fed."""

    def __init__(self, cache):
        self.cache = cache
        self.k = self.v = None

    def extend(self, k, v):
        """Append the new tokens' k, v (B, H, T, D) → (all keys, all values, their bool mask (B, 1, T, keys))."""
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v, self.cache.mask


# transformers' names of this module's weights (GPT2LMHeadModel), for export_hf.py's native export
_HF_PREFIXES = (("embed.", "transformer.wte."), ("pos_embed.", "transformer.wpe."), ("blocks.", "transformer.h."),
                ("ln_f.", "transformer.ln_f."))
_CONV1D = ("c_attn.weight", "c_proj.weight", "c_fc.weight")  # HF's Conv1D holds (in, out): nn.Linear's transposed


def transformers_export(model, n_vocab, eot):
    """(GPT2Config's fields, GPT2LMHeadModel's state dict) holding this model: the tokenizer's n_vocab embedding
    rows (the padding rows cut: the logits of real ids are unchanged), Conv1D weights transposed, the head tied
    (left out: GPT2LMHeadModel ties it to transformer.wte). Logits equal on a row holding one document from
    <|endoftext|> at position 0 (HF counts positions from the row's start). ValueError for --no-bias (GPT-2 has
    biases everywhere)."""
    c = model.config
    if not c.bias:
        raise ValueError("a GPT-2 trained with --no-bias has no biases, which GPT2LMHeadModel needs")
    if c.mup_base_width is not None:
        raise ValueError("a GPT-2 trained with --mup scales its logits and attention, which GPT2LMHeadModel does not")
    config = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], vocab_size=n_vocab, n_positions=c.max_seq_len,
                  n_embd=c.model_dim, n_layer=c.num_layers, n_head=c.num_heads, n_inner=int(c.mlp_ratio * c.model_dim),
                  activation_function="gelu_new", layer_norm_epsilon=LAYER_NORM_EPS, initializer_range=INIT_STD,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
                  bos_token_id=eot, eos_token_id=eot, tie_word_embeddings=True)
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            continue
        hf = next(new + name[len(old):] for old, new in _HF_PREFIXES if name.startswith(old))
        if name.endswith(_CONV1D):
            tensor = tensor.t()
        if name == "embed.weight":
            tensor = tensor[:n_vocab]
        state[hf] = tensor.detach().float().contiguous().clone()
    return config, state


def transformers_config(hf):
    """GPTConfig's fields (and max_seq_len: the position table) of a GPT2LMHeadModel config.json (a dict), or
    ValueError naming what this module cannot hold."""
    dim = hf["n_embd"]
    problems = [what for what, bad in (
        (f"activation {hf.get('activation_function')!r}", hf.get("activation_function", "gelu_new") != "gelu_new"),
        (f"layer_norm_epsilon {hf.get('layer_norm_epsilon')}", hf.get("layer_norm_epsilon", 1e-5) != LAYER_NORM_EPS),
        ("unscaled attention", not hf.get("scale_attn_weights", True)),
        ("attention scaled by layer", hf.get("scale_attn_by_inverse_layer_idx")),
        ("an untied head", hf.get("tie_word_embeddings", True) is False)) if bad]
    if problems:
        raise ValueError(f"this GPT-2 has {', '.join(problems)}, which gpt2.py does not have")
    return dict(vocab_size=hf["vocab_size"], num_layers=hf["n_layer"], num_heads=hf["n_head"], model_dim=dim,
                mlp_ratio=(hf.get("n_inner") or 4 * dim) / dim, bias=True, max_seq_len=hf["n_positions"])


def transformers_import(hf_config, hf_state, model):
    """This module's state dict for `model` (built from transformers_config's fields) from GPT2LMHeadModel's
    weights: Conv1D weights transposed, the token embedding padded with zero rows to padded_vocab, the head tied
    to it (HF's files leave the tied lm_head out). KeyError / ValueError for a missing weight or a wrong shape."""
    state = {}
    for name, want in model.state_dict().items():
        hf = ("transformer.wte.weight" if name == "lm_head.weight" else
              next(new + name[len(old):] for old, new in _HF_PREFIXES if name.startswith(old)))
        tensor = hf_state[hf] if hf in hf_state else hf_state[hf[len("transformer."):]]  # (older files: no prefix)
        if name.endswith(_CONV1D):
            tensor = tensor.t()
        if name in ("embed.weight", "lm_head.weight"):
            tensor = torch.cat([tensor, tensor.new_zeros(want.size(0) - tensor.size(0), tensor.size(1))])
        if tuple(tensor.shape) != tuple(want.shape):
            raise ValueError(f"{hf} has shape {tuple(tensor.shape)}, the model's {name} {tuple(want.shape)}")
        state[name] = tensor.to(want.dtype).contiguous()
    return state
