"""An adversarial audit of train_gpt.py's flags and --resume: values the checks missed (a micro-batch of part of a
row, a batch too large to split, a model too large to count, a new --seed on resume, --device cuda:N)."""
import dataclasses
import sys

import pytest
import torch

from conftest import REPO
from gptlab.core.distributed import resolve_device
from gptlab.core.errors import UserError
from gptlab.checkpoint import checkpointing
from gptlab.train import config
from gptlab.train.batching import micro_batch_candidates
from gptlab.train.config import check_model_fits, resolve_config
from gptlab.train.flags import parse_flags

sys.path.insert(0, REPO)
import model as arch  # noqa: E402
import train_gpt  # noqa: E402

CPU = torch.device("cpu")


def resolved(*argv):
    args, _ = parse_flags(train_gpt.build_parser, ["--train_seq_len", "128", "--val_seq_len", "128", "--model_dim",
                                                   "64", "--num_heads", "2", "--num_layers", "2", *argv])
    return resolve_config(args, 1, CPU, arch)


def test_a_micro_batch_that_is_not_whole_rows_names_device_batch_size():
    # 1024 tokens = 8 rows of 128; 64 tokens is half a row: the old message blamed --batch_size and a
    # --grad_acc_steps 16 the user never gave
    with pytest.raises(UserError) as info:
        resolved("--batch_size", "1024", "--device_batch_size", "64")
    assert str(info.value) == ("--device_batch_size 64 is not a multiple of --train_seq_len 128 (a micro-batch "
                               "holds whole rows); use 128")
    # still accepted: a micro-batch of whole rows (4 micro-batches of 2 rows), one as large as the batch or larger
    # (one micro-batch of 8 rows), and any --device_batch_size beside --grad_acc_steps (which replaces it)
    assert (resolved("--batch_size", "1024", "--device_batch_size", "256").grad_acc_steps, ) == (4, )
    big = resolved("--batch_size", "1024", "--device_batch_size", "2000")
    assert (big.grad_acc_steps, big.device_batch_size) == (1, 1024)
    acc = resolved("--batch_size", "1024", "--device_batch_size", "64", "--grad_acc_steps", "2")
    assert (acc.grad_acc_steps, acc.device_batch_size) == (2, 512)


def test_batch_size_is_bounded_and_micro_batches_are_the_divisors_of_the_rows():
    with pytest.raises(UserError, match=r"--batch_size must be a positive number of tokens up to 2\*\*40"):
        # 2**40 + 1: one error line, not minutes spent splitting it
        train_gpt.build_parser().parse_args(["--batch_size", str(2**40 + 1)])
    assert train_gpt.build_parser().parse_args(["--batch_size", str(2**40)]).batch_size == 2**40
    # 12 rows of 128 (plus 5 stray tokens): micro-batches of 12, 6, 4, 3, 2 and 1 rows, worked out by hand
    assert micro_batch_candidates(12 * 128 + 5, 128) == [1536, 768, 512, 384, 256, 128]
    assert micro_batch_candidates(7 * 10, 10) == [70, 10]
    assert micro_batch_candidates(100, 128) == []
    # 2**40 tokens of rows of 128: 2**33 rows, whose divisors are the 34 powers of two 2**0 ... 2**33
    assert micro_batch_candidates(2**40, 128) == [2**k * 128 for k in range(33, -1, -1)]
    assert resolved("--batch_size", str(2**40)).device_batch_size == 4096  # CPU auto: about 4096 tokens


class CountedRows(int):
    """An int counting the divisibility tests made on it (rows % k)."""
    tests = 0

    def __mod__(self, other):
        CountedRows.tests += 1
        return int(self) % other


class Tokens(int):
    def __floordiv__(self, other):
        return CountedRows(int(self) // other)


def test_micro_batch_candidates_test_about_sqrt_rows_divisors_not_every_row():
    # one test per row made 2**40 tokens (2**33 rows) take minutes; pairs of divisors up to sqrt(rows) suffice
    CountedRows.tests = 0
    assert micro_batch_candidates(Tokens(2**20 * 128), 128) == [2**k * 128 for k in range(20, -1, -1)]
    assert CountedRows.tests <= 2**10 + 2


def small_config(**fields):
    return dataclasses.asdict(arch.GPTConfig(**dict(dict(vocab_size=513, model_dim=64, num_heads=2, num_layers=4),
                                                    **fields)))


def test_a_model_of_a_million_layers_is_refused_without_building_it(monkeypatch):
    built = []
    count = config.parameter_count
    monkeypatch.setattr(config, "parameter_count", lambda m, c: built.append(c["num_layers"]) or count(m, c))
    # 300 layers of width 64 hold ~15M parameters (~0.22 GiB of training state): refused on a 0.1 GiB device from
    # the counts of 64 and 128 layers, without building all 300
    monkeypatch.setattr(config, "device_memory_bytes", lambda device: 2**30 // 10)
    with pytest.raises(UserError, match=r"the model has ~[\d,]+ parameters.*lower --vocab_size, --model_dim or "
                                        "--num_layers"):
        check_model_fits(arch, small_config(num_layers=300), CPU)
    assert 300 not in built and built
    # on a device with room it is counted whole (and passes)
    monkeypatch.setattr(config, "device_memory_bytes", lambda device: 2**40)
    built.clear()
    check_model_fits(arch, small_config(num_layers=300), CPU)
    assert 300 in built


def test_an_mlp_too_wide_for_torch_is_one_error_line():
    with pytest.raises(UserError, match="too large to build.*lower --mlp_ratio"):
        check_model_fits(arch, small_config(mlp_ratio=1e300), CPU)  # was a TypeError from torch.empty


@pytest.fixture
def checkpoint_of_seed_0(tmp_path):
    path = str(tmp_path / "step_000002.pt")
    checkpointing.save_checkpoint(path, model_state={}, model_config={}, step=2,
                                  args={"seed": 0, "log_every": 10, "lr_scale": 1.0})
    return path


def test_resume_refuses_another_seed_and_takes_the_same_one_or_a_new_log_interval(checkpoint_of_seed_0):
    ckpt = checkpoint_of_seed_0
    # the checkpoint's weights come from seed 0's initialisation and its later data passes would follow seed 1's
    # order, while the record (and the seed groups of compare_experiments.py) would say seed 1
    with pytest.raises(UserError, match="--seed 1 differs from the --resume checkpoint's 0.*drop --seed"):
        parse_flags(train_gpt.build_parser, ["--resume", ckpt, "--seed", "1"])
    assert parse_flags(train_gpt.build_parser, ["--resume", ckpt, "--seed", "0"])[0].seed == 0
    args, _ = parse_flags(train_gpt.build_parser, ["--resume", ckpt, "--log_every", "1"])
    assert (args.seed, args.log_every) == (0, 1)
    # faults.md/training.md: any other flag given again wins (here the learning rates)
    assert parse_flags(train_gpt.build_parser, ["--resume", ckpt, "--lr_scale", "2"])[0].lr_scale == 2.0


@pytest.mark.parametrize("value", ["cuda:x", "cuda:-1", "cuda:", "cuda:1.0", "mps"])
def test_device_values_that_name_no_device_are_refused(value):
    with pytest.raises(UserError, match=r"is not one of auto, cpu, cuda, cuda:N"):
        resolve_device(value, local_rank=0, local_world_size=1)


def test_a_gpu_index_the_machine_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match=r"--device cuda:7: this machine shows 1 CUDA GPU\(s\), numbered 0 to 0"):
        resolve_device("cuda:7", local_rank=0, local_world_size=1)
    assert resolve_device("cuda:0", local_rank=0, local_world_size=1) == torch.device("cuda:0")
