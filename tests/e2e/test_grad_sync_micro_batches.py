"""Gradient sync with several micro-batches per rank: after train_gpt's accumulation and GradientSync (2 gloo ranks),
the gradients the optimizers use equal the single-process gradient of the whole batch, computed here with plain
autograd on the concatenated rows (the loss summed over every row, over the global token count)."""
import pytest
import torch

from conftest import free_port, run_script
from helpers import grad_sync_ranks as job

import train_gpt


def reference_gradients(n_rows):
    model = job.random_model()
    data = torch.from_numpy(job.rows(n_rows))
    x, y = data[:, :-1], data[:, 1:]
    windows = train_gpt.window_blocks(0, job.TRAIN_STEPS, job.WINDOW)
    loss = model(x, model.attention_masks(x, job.EOT, windows), y) / (n_rows * job.SEQ_LEN)
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("micro_batches, shard", [(3, False), (3, True)])
def test_two_ranks_with_several_micro_batches_sum_the_whole_batch_gradient(tmp_path, micro_batches, shard):
    """shard: --shard_params (FSDP2), whose reduce-scatter must sum over ranks, not average: Muon and Adam hardly
    see the difference (both are nearly invariant to the gradient's scale), so only the gradients show it."""
    out = str(tmp_path / "grads")
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "tests/helpers/grad_sync_ranks.py",
                out, str(micro_batches)] + (["shard"] if shard else []), check=True, timeout=300)
    expected = reference_gradients(2 * micro_batches)
    ranks = [torch.load(f"{out}.rank{r}") for r in range(2)]
    muon_seen = set()
    for r, got in enumerate(ranks):
        assert got["adam"], r
        for name, grad in got["adam"].items():  # every Adam gradient, summed (gathered from the ranks' shards)
            assert torch.allclose(grad, expected[name], rtol=1e-4, atol=1e-7), (r, name)
        for name, grad in got["muon"].items():  # each Muon matrix on its owner
            assert torch.allclose(grad, expected[name], rtol=1e-4, atol=1e-7), (r, name)
        muon_seen |= set(got["muon"])
    assert muon_seen | set(ranks[0]["adam"]) == set(expected)  # every parameter checked
    assert set(ranks[0]["muon"]) and set(ranks[1]["muon"])  # both ranks own matrices (or, sharded, see them all)
    assert all(float(g.abs().max()) > 0 for g in expected.values())  # every gradient is non-trivial
