"""A gptlab checkpoint's own model as a Hugging Face transformers model: a thin wrapper, no second forward pass.

export_hf.py copies this file into the exported folder beside `gptlab_model.py`, the model source the checkpoint
carries (its model.py, verbatim), and transformers copies both when it loads the folder:

    AutoModelForCausalLM.from_pretrained(OUT_DIR, trust_remote_code=True)

So an architecture edit in model.py reaches the export with the checkpoint, and this file never changes with it. It
uses only the model source's interface: GPTConfig(**fields), GPT, GPT.predict(tokens, eot) (logits of rows of any
length with the model's final windows) and KVCache(model, eot).forward(new tokens). It imports torch, transformers
and its sibling only, so it cannot be imported from the gptlab package itself (the sibling exists in an export).

- attention_mask (left or right padding, or holes) is honoured exactly: each row's real tokens are moved to the
  front, in order, and the batch runs as one, its padding behind them, where causal attention keeps it from them;
  the logits go back to the real positions. So a padded row gets the logits it would get alone.
- generate() keeps one model.py KVCache per row (rows with different padding need their own positions), fed only
  the row's real new tokens; it is returned as past_key_values (cache in transformers >= 5.24). Plain forward
  calls run without it.
- The model runs under no_grad (GPT.predict): this wrapper is for inference and evaluation; train with gptlab.
"""
import copy
import sys

import torch
import torch.nn.functional as F
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

# the sibling afresh whenever this file runs: transformers 4 names the module after the folder alone, and runs this
# file again for another folder of that name, but would keep the first folder's gptlab_model
sys.modules.pop(f"{__package__}.gptlab_model", None)
from .gptlab_model import GPT, GPTConfig, KVCache  # noqa: E402

# transformers 5.24 renamed past_key_values to cache (in generate's kwargs and in the outputs); older ones know only
# the old name: take either, return the one this version's outputs have
_CACHE_FIELD = "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) else "past_key_values"


def _our_cache(past_key_values, kwargs):
    """The GptlabCache given under either name, or None (transformers' own caches are not ours)."""
    given = kwargs.pop("cache", None) if past_key_values is None else past_key_values
    return given if isinstance(given, GptlabCache) else None


class GptlabConfig(PretrainedConfig):
    """model_config: the checkpoint's GPTConfig fields, whole (the architecture is the model source's business);
    vocab_size: the tokenizer's ids (the logits are cut to these); eot_token_id: <|endoftext|>, which starts every
    document; long/short_window_blocks and padded_vocab_size: the model's final windows and logits rows, as
    recorded at export (for reading: the model source computes its own); max_position_embeddings: the model's
    max_seq_len (lm-eval's context length)."""
    model_type = "gptlab"

    def __init__(self, model_config=None, vocab_size=None, eot_token_id=None, long_window_blocks=None,
                 short_window_blocks=None, padded_vocab_size=None, max_position_embeddings=None, use_cache=True,
                 **kwargs):
        self.model_config = dict(model_config or {})
        self.vocab_size = vocab_size
        self.eot_token_id = eot_token_id
        self.long_window_blocks, self.short_window_blocks = long_window_blocks, short_window_blocks
        self.padded_vocab_size = padded_vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.use_cache = use_cache
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            kwargs.setdefault(name, eot_token_id)
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)


class GptlabCache:
    """past_key_values of generate(): one KVCache per row; `seen` counts the input columns fed so far."""
    is_compileable = is_croppable = False  # what generate() asks of a cache

    def __init__(self, rows):
        self.rows = rows
        self.seen = 0

    def get_seq_length(self, layer_idx=0):
        return self.seen


class GptlabForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = GptlabConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"

    def __init__(self, config):
        super().__init__(config)
        # built for real even inside transformers' meta-device context, so that the buffers the model source
        # computes and no checkpoint holds (non-persistent: rotary tables) have values to keep
        with torch.device("cpu"):
            self.model = GPT(GPTConfig(**config.model_config))
        # one tensor under two names (GPT-2's head is its embedding): transformers saves it once and ties it back
        # on loading ({tied name: the name kept}, transformers 5's form; a list of the tied names before)
        first, tied = {}, {}
        for name, p in self.model.named_parameters(remove_duplicate=False):
            if p in first:
                tied[f"model.{name}"] = f"model.{first[p]}"
            first.setdefault(p, name)
        if tied:
            self._tied_weights_keys = tied
            self.config.tie_word_embeddings = True  # (transformers 5 ties only then)
        self._computed_buffers = {module: {name: getattr(module, name).detach().clone()
                                           for name in module._non_persistent_buffers_set}
                                  for module in self.model.modules() if module._non_persistent_buffers_set}
        self.post_init()

    def _init_weights(self, module):
        # every weight comes from the checkpoint; transformers 5 empties the non-persistent buffers when it loads
        # one, and asks for them here: they get the values GPT's __init__ computed
        for name, value in self._computed_buffers.get(module, {}).items():
            getattr(module, name).copy_(value)

    @classmethod
    def _supports_default_dynamic_cache(cls):
        return False  # our own cache (GptlabCache), made by the first forward with use_cache

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None, labels=None,
                return_dict=None, **kwargs):  # the cache as past_key_values or cache (transformers >= 5.24)
        """logits (B, T, vocab_size) in float32. With use_cache=True or a GptlabCache in past_key_values, input_ids
        are the columns after the cache's (attention_mask may cover all columns) and the cache comes back."""
        cache = _our_cache(past_key_values, kwargs)
        if cache is not None or use_cache:
            logits, cache = self._cached_logits(input_ids, attention_mask, cache)
        else:
            logits = self._logits(input_ids, attention_mask)
        loss = None
        if labels is not None:  # transformers' convention: labels are the inputs, shifted here
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        out = CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache})
        return out if return_dict is not False else out.to_tuple()

    def _logits(self, input_ids, attention_mask):
        eot, n_vocab = self.config.eot_token_id, self.config.vocab_size
        if attention_mask is None or bool(attention_mask.all()):
            return self.model.predict(input_ids, eot)[..., :n_vocab]
        real = attention_mask.bool()
        # real columns first, in order; the padding behind them is invisible to them (causal attention)
        order = torch.argsort((~real).to(torch.int8), dim=1, stable=True)
        logits = self.model.predict(input_ids.gather(1, order), eot)[..., :n_vocab]
        return torch.empty_like(logits).scatter_(1, order[..., None].expand_as(logits), logits)

    @torch.no_grad()
    def _cached_logits(self, input_ids, attention_mask, cache):
        B, T = input_ids.shape
        if cache is None:
            cache = GptlabCache([KVCache(self.model, self.config.eot_token_id) for _ in range(B)])
        if len(cache.rows) != B:
            raise ValueError(f"the cache holds {len(cache.rows)} rows, the input {B}")
        real = (torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None
                else attention_mask[:, -T:].bool())
        n_vocab = self.config.vocab_size
        logits = torch.zeros(B, T, n_vocab, device=input_ids.device)  # padding columns: zeros
        for b, row in enumerate(cache.rows):
            cols = real[b].nonzero().squeeze(1)
            if len(cols):
                logits[b, cols] = row.forward(input_ids[b, cols][None])[0, :, :n_vocab].float()
        cache.seen += T
        return logits, cache

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, use_cache=None,
                                      **kwargs):
        cache = _our_cache(past_key_values, kwargs)
        if cache is not None:
            input_ids = input_ids[:, cache.seen:]  # only the new columns
        return {"input_ids": input_ids, "attention_mask": attention_mask, _CACHE_FIELD: cache, "use_cache": use_cache}

    def _reorder_cache(self, past_key_values, beam_idx):
        """Beam search: row i takes beam_idx[i]'s cache; a row taken twice is copied (the model is shared)."""
        taken, rows = set(), []
        for i in beam_idx.tolist():
            row = past_key_values.rows[i]
            rows.append(row if i not in taken else copy.deepcopy(row, {id(self.model): self.model}))
            taken.add(i)
        cache = GptlabCache(rows)
        cache.seen = past_key_values.seen
        return cache
