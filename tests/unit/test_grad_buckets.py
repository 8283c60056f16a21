"""GradientSync's all-reduce buckets: the small tensors share one flat buffer per dtype, so a float32 gradient is
never summed in a bfloat16 buffer (bf16 embeddings beside float32 scalars, under a plain optimizer)."""
import torch

from gptlab.train.comm import GradientSync


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))  # float32, small
        self.emb = torch.nn.Parameter(torch.zeros(10, 8, dtype=torch.bfloat16))  # bf16, small
        self.gate = torch.nn.Parameter(torch.zeros(3))  # float32, small
        self.big = torch.nn.Parameter(torch.zeros(1 << 15))  # alone: at the threshold


def test_small_tensors_share_a_bucket_only_with_their_own_dtype():
    model = Mixed()
    sync = GradientSync(model, [torch.optim.Adam(model.parameters())], world_size=1)
    buckets = [[n for n, p in model.named_parameters() if any(p is q for q in b)] for b in sync.buckets]
    assert sorted(buckets) == sorted([["big"], ["scale", "gate"], ["emb"]])
    assert all(len({p.dtype for p in b}) == 1 for b in sync.buckets)
