"""A run's continuations of the judging's prompts, with its own model source and its own tokenizer (as sample.py
samples): each prompt starts a document (<|endoftext|> + its tokens, encoded as ordinary text) and is continued by
up to max_tokens tokens, stopping at <|endoftext|>. The draws of prompt i come from a CPU generator seeded with
seed + i, so both runs get the same seed for a prompt and a resumed judging samples as an uninterrupted one."""
import torch

from gptlab.export.generate import cached_next_logits, generate
from gptlab.checkpoint import checkpointing
from gptlab.checkpoint.model_source import load_model


class Sampler:
    def __init__(self, checkpoint, device="cpu", trust_code=False):
        self.model, self.module, ckpt = load_model(checkpoint, device, trust_code)
        self.tok = checkpointing.checkpoint_tokenizer(ckpt, checkpoint)
        self.device, self.step = device, ckpt.get("step")

    @property
    def tokenizer(self):
        return {"name": self.tok.name, "ranks_sha256": self.tok.ranks_sha256}

    def continue_text(self, prompt, seed, max_tokens, temperature, top_k=None, top_p=None):
        """(continuation text, tokens generated, whether the model ended the document)."""
        eot, encoding = self.tok.eot, self.tok.encoding
        generator = torch.Generator(device="cpu").manual_seed(seed)
        next_logits = cached_next_logits(self.module.KVCache(self.model, eot), self.device, encoding.n_vocab)
        new = []
        for token in generate(next_logits, [eot] + encoding.encode_ordinary(prompt), max_tokens,
                              temperature=temperature, top_k=top_k, top_p=top_p, generator=generator, stop_token=eot):
            if token == eot:
                return encoding.decode(new), len(new), True
            new.append(token)
        return encoding.decode(new), len(new), False
