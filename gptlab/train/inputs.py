"""A training run's inputs, each opened and checked by its owner before a run folder exists: the tokenizer, the
model's configuration, the token shards, the loaders, and one collective that makes every rank agree on them (the
evaluations' files are train_gpt.py's: gptlab.evals comes after training in the pipeline)."""
import dataclasses

from gptlab.checkpoint import checkpointing
from gptlab.core.errors import UserError
from gptlab.core.files import check_folder_creatable
from gptlab.dataset.loader import BOSAlignedLoader, ValidationSet
from gptlab.dataset.selection import select_run_shards
from gptlab.tokenizer.format import open_tokenizer
from gptlab.train import init_from, mup
from gptlab.train.config import (arch_fields, check_model_fits, check_ranks_agree, model_config_of,
                                 positions_are_weights)


@dataclasses.dataclass
class RunInputs:
    tok: object              # the tokenizer (gptlab.tokenizer.format)
    model_config: dict       # the architecture module's GPTConfig fields
    shards: object           # the chosen token shards (gptlab.dataset.selection)
    train_loader: BOSAlignedLoader
    val_set: ValidationSet
    warnings: list           # lines for the console now and the run's log later
    init: object = None      # --init_from: the transformers checkpoint whose weights start the run (init_from.py)


def open_run_inputs(cfg, ctx, module, source, ckpt=None, data_ctx=None):
    """Everything a run reads, checked now (a bad input is one error line before any training); sets
    cfg.vocab_size from the tokenizer and cfg.train_files / val_files to the shards chosen. data_ctx: the ranks that
    read different rows (--tp's and --pp's ranks of one replica read the same; default: ctx's)."""
    if not cfg.tokenizer:
        raise UserError("pass --tokenizer NAME (a .pkl in tokenizers/ or a path); train one with train_tokenizer.py")
    check_folder_creatable(cfg.experiments_dir)  # writes a probe file: catches /sys, a full disk, read-only folders
    tok = open_tokenizer(cfg.tokenizer)
    init = None
    if ckpt is None and cfg.init_from:  # (choose_module took its shape; its weights replace the initialisation)
        init = init_from.open_checkpoint(cfg.init_from, {cfg.arch: module})
        init_from.check_vocabulary(init, tok.encoding.n_vocab, tok.name)
    cfg.vocab_size = tok.model_vocab_size(cfg.vocab_size)
    model_config = mup.model_config(cfg, model_config_of(cfg, module.GPTConfig), module)  # --mup's fields
    if init is not None:
        model_config = init_from.model_config(init, model_config, positions_are_weights(module.GPTConfig))
    check_model_fits(module, model_config, ctx.device)
    shards = select_run_shards(cfg.train_files, cfg.val_files, tok.name, tok.ranks_sha256, tok.encoding.n_vocab)
    cfg.train_files, cfg.val_files = shards.train_files, shards.val_files
    # one collective: every rank runs the same flags on the same data, or all stop naming what differs
    check_ranks_agree(ctx, cfg, tokenizer=tok, shards=shards, checkpoint=ckpt, model_source=source)
    data_ctx = data_ctx or ctx
    train_loader = BOSAlignedLoader(shards.train_paths, cfg.train_seq_len, cfg.batch_size, tok.eot, data_ctx.rank,
                                    data_ctx.world_size, cfg.grad_acc_steps or 1, seed=cfg.seed,
                                    prints=shards.train_prints)
    val_set = ValidationSet(shards.val_paths, cfg.val_seq_len, cfg.val_steps * (cfg.val_batch_size // cfg.val_seq_len),
                            data_ctx.rank, data_ctx.world_size, prints=shards.val_prints)
    if ckpt is not None:
        checkpointing.check_resume_compatible(ckpt, model_config, tok, cfg.train_steps, arch_fields(module.GPTConfig),
                                              shards, cfg.allow_new_data)
    return RunInputs(tok, model_config, shards, train_loader, val_set, list(shards.warnings), init)
