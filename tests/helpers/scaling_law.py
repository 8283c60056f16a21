"""The known law that the scaling tests' synthetic runs are drawn from (tests/unit/test_scaling.py,
tests/e2e/test_scaling_e2e.py)."""
import numpy as np

# The law the synthetic runs are drawn from: L(C) = 1.5 + 40 C^-0.12 (val bpb against training FLOPs)
E, A, ALPHA = 1.5, 40.0, 0.12
FLOPS = np.geomspace(1e15, 1e18, 8)


def true_loss(flops):
    return E + A * flops ** -ALPHA


# A degenerate design built by hand like issue 39's `sweep.py --grid model_dim=64,128,192 --grid train_steps=20,40`:
# 3 sizes x 2 lengths (tokens), the smallest run far above a flat rest. Unbounded least squares makes L(C) a step
# (alpha ~5, A ~1e62, tight intervals) and cannot separate Chinchilla's B, beta and E with 2 lengths.
STEP_PARAMS = np.repeat([0.30e6, 0.85e6, 1.65e6], 2)
STEP_TOKENS = np.tile([20 * 8192, 40 * 8192], 3)
STEP_BPB = np.array([3.10, 2.745, 2.741, 2.735, 2.739, 2.736])
