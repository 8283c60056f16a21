"""gptlab's GPT (train_gpt.GPT, modded-nanogpt style) as a Hugging Face transformers model.

export_hf.py copies this file into the exported folder, so it must stay self-contained: torch and transformers
only, nothing from gptlab or train_gpt. Load an export with

    AutoModelForCausalLM.from_pretrained(OUT_DIR, trust_remote_code=True)

The forward is train_gpt.GPT's, operation for operation, in plain PyTorch with dense attention masks: parameter-free
RMSNorm, rotary embeddings on half of each head's dims, QK-norm, the merged (3, hdim, dim) qkv weight, value
embeddings mixed into the first and last layers, x0 mixing, U-net skips, ReLU² MLP, logits soft-capped to
30 * sigmoid(z / (7.5 * sqrt(dim))) and cut to the real vocabulary (the embeddings are padded to a multiple of
128). Attention is document-causal within sliding windows counted in 128-token blocks: each <|endoftext|>
(config.eot_token_id) starts a new document, and a token sees the tokens of its document at most
window_blocks - 1 whole blocks back (config.long_window_blocks / short_window_blocks, per layer as in training).

attention_mask (left or right padding) is honoured: padding is invisible and every row's positions count from its
first real token, so a padded row gets the logits it would get alone. There is no KV cache (use_cache is False):
generate() runs a full forward pass per new token, which is exact and fine for short generations.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput


class GptlabConfig(PretrainedConfig):
    model_type = "gptlab"

    def __init__(self, vocab_size=50257, num_layers=12, num_heads=6, head_dim=64, model_dim=384, mlp_ratio=4.0,
                 num_val_emb=2, long_window_blocks=14, short_window_blocks=7, block_size=128, attn_scale=0.24,
                 eot_token_id=50256, max_position_embeddings=1024, padded_vocab_size=None, **kwargs):
        self.vocab_size = vocab_size  # the tokenizer's ids: the logits cover these
        # embedding and output rows: training pads its vocabulary to a multiple of 128
        self.padded_vocab_size = padded_vocab_size or -(-vocab_size // 128) * 128
        self.num_layers, self.num_heads, self.head_dim = num_layers, num_heads, head_dim
        self.model_dim, self.mlp_ratio, self.num_val_emb = model_dim, mlp_ratio, num_val_emb
        self.long_window_blocks, self.short_window_blocks = long_window_blocks, short_window_blocks
        self.block_size = block_size
        self.attn_scale = attn_scale
        self.eot_token_id = eot_token_id
        self.max_position_embeddings = max_position_embeddings  # the training row length (rotary has no limit)
        self.hidden_size, self.num_hidden_layers, self.num_attention_heads = model_dim, num_layers, num_heads
        kwargs.setdefault("bos_token_id", eot_token_id)
        kwargs.setdefault("eos_token_id", eot_token_id)
        kwargs.setdefault("pad_token_id", eot_token_id)
        kwargs.setdefault("use_cache", False)
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)


def norm(x):
    return F.rms_norm(x, (x.size(-1),))


def rotary(x, positions):
    """x (B, T, H, D) turned by positions (B, T): the first quarter of frequencies rotate, the rest stay."""
    quarter = x.size(-1) // 4
    freq = (1 / 1024) ** torch.linspace(0, 1, steps=quarter, dtype=torch.float32, device=x.device)
    freq = torch.cat([freq, freq.new_zeros(quarter)])
    theta = positions.float()[:, :, None, None] * freq  # (B, T, 1, D/2)
    cos, sin = theta.cos(), theta.sin()
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads, self.head_dim, self.scale = config.num_heads, config.head_dim, config.attn_scale
        hdim = config.num_heads * config.head_dim
        self.qkv_w = nn.Parameter(torch.empty(3, hdim, config.model_dim))
        self.lambdas = nn.Parameter(torch.tensor([0.5, 0.5]))
        self.c_proj = nn.Linear(hdim, config.model_dim, bias=False)

    def forward(self, x, ve, mask, positions):
        B, T = x.shape[:2]
        qkv = F.linear(x, self.qkv_w.flatten(end_dim=1)).view(B, T, 3 * self.num_heads, self.head_dim)
        q, k, v = qkv.chunk(3, dim=2)
        q, k = rotary(norm(q), positions), rotary(norm(k), positions)
        lambdas = self.lambdas.to(qkv.dtype)
        v = lambdas[0] * v
        if ve is not None:
            v = v + lambdas[1] * ve.view_as(v)
        q, k, v = q.to(qkv.dtype), k.to(qkv.dtype), v.to(qkv.dtype)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                           scale=self.scale)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden = int(config.mlp_ratio * config.model_dim)
        self.c_fc = nn.Linear(config.model_dim, hidden, bias=False)
        self.c_proj = nn.Linear(hidden, config.model_dim, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = Attention(config)
        self.mlp = MLP(config)
        self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))

    def forward(self, x, x0, ve, mask, positions):
        a, b = self.lambdas.to(x.dtype)
        x = a * x + b * x0
        x = x + self.attn(norm(x), ve, mask, positions)
        return x + self.mlp(norm(x))


def attention_masks(input_ids, attention_mask, config):
    """(positions (B, T), {"long": bool mask (B, 1, T, T), "short": ...}) for a batch: causal, same document,
    within the window's blocks, padding invisible."""
    B, T = input_ids.shape
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    positions = (real.long().cumsum(dim=1) - 1).clamp(min=0)  # counted from each row's first real token
    docs = (input_ids == config.eot_token_id).cumsum(dim=1)
    index = torch.arange(T, device=input_ids.device)
    causal = index[:, None] >= index[None, :]
    allowed = causal & (docs[:, :, None] == docs[:, None, :]) & real[:, None, :]
    blocks_back = (positions[:, :, None] // config.block_size) - (positions[:, None, :] // config.block_size)
    itself = torch.eye(T, dtype=torch.bool, device=input_ids.device)  # padding queries see themselves: no NaN
    masks = {kind: ((allowed & (blocks_back < blocks)) | itself)[:, None]
             for kind, blocks in (("long", config.long_window_blocks), ("short", config.short_window_blocks))}
    return positions, masks


class GptlabForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = GptlabConfig
    base_model_prefix = "gptlab"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]

    def __init__(self, config):
        super().__init__(config)
        padded, hdim = config.padded_vocab_size, config.num_heads * config.head_dim
        self.embed = nn.Embedding(padded, config.model_dim)
        self.value_embeds = nn.ModuleList([nn.Embedding(padded, hdim) for _ in range(config.num_val_emb)])
        n, n_ve = config.num_layers, config.num_val_emb
        # value embedding i feeds layer i and layer n - n_ve + i (the last layers win where the two overlap)
        self.ve_index = [None] * n
        for i in range(n_ve):
            self.ve_index[i] = i
        for i in range(n_ve):
            self.ve_index[n - n_ve + i] = i
        self.blocks = nn.ModuleList([Block(config) for _ in range(n)])
        # long windows on every 4th layer from each end, short elsewhere
        self.layer_window = ["long" if min(i, n - 1 - i) % 4 == 0 else "short" for i in range(n)]
        self.num_skips = n // 2
        self.skip_weights = nn.Parameter(torch.ones(self.num_skips))
        self.lm_head = nn.Linear(config.model_dim, padded, bias=False)
        self.post_init()

    def _init_weights(self, module):
        pass  # the weights come from a gptlab checkpoint (export_hf.py); there is no training from scratch here

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        positions, masks = attention_masks(input_ids, attention_mask, self.config)
        ve = [emb(input_ids) for emb in self.value_embeds]
        x = x0 = norm(self.embed(input_ids))
        skips = []
        first_decoder = self.config.num_layers - self.num_skips
        for i, block in enumerate(self.blocks):
            if i >= first_decoder:
                x = x + self.skip_weights[i - first_decoder].to(x.dtype) * skips.pop()
            x = block(x, x0, None if self.ve_index[i] is None else ve[self.ve_index[i]], masks[self.layer_window[i]],
                      positions)
            if i < self.num_skips:
                skips.append(x)
        x = norm(x)
        logits = self.lm_head(x).float()
        logits = 30 * torch.sigmoid(logits / (7.5 * x.size(-1) ** 0.5))
        logits = logits[..., :self.config.vocab_size]
        loss = None
        if labels is not None:  # transformers' convention: labels are the inputs, shifted here
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}
