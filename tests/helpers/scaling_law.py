"""The known law that the scaling tests' synthetic runs are drawn from (tests/unit/test_scaling.py,
tests/e2e/test_scaling_e2e.py)."""
import numpy as np

# The law the synthetic runs are drawn from: L(C) = 1.5 + 40 C^-0.12 (val bpb against training FLOPs)
E, A, ALPHA = 1.5, 40.0, 0.12
FLOPS = np.geomspace(1e15, 1e18, 8)


def true_loss(flops):
    return E + A * flops ** -ALPHA
