"""model.py's FlexAttention masks built block by block (document_block_masks: per-block document bounds, both
windows clamped from one structure) against the reference, torch's create_block_mask, which evaluates the mask
function at every (query, key) point; and against the dense mask the CPU path feeds SDPA."""
import sys

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

from conftest import REPO

sys.path.insert(0, REPO)
import model as arch  # noqa: E402

EOT = 7


def block_sets(num, indices):
    """FlexAttention's (counts (B, H, n), indices (B, H, n, m)) as a (B, H, n, n) bool matrix: the order inside a
    row does not matter to the mask (create_block_mask lists ascending, ours nearest first); no index twice."""
    B, H, n = num.shape
    out = torch.zeros(B, H, n, n, dtype=torch.bool)
    for b in range(B):
        for h in range(H):
            for row in range(n):
                listed = indices[b, h, row, :int(num[b, h, row])].tolist()
                assert len(set(listed)) == len(listed)
                out[b, h, row, listed] = True
    return out


def same_blocks(ours, reference):
    for kind in ("kv", "full_kv", "q", "full_q"):  # q: the transposed lists FlexAttention's backward reads
        a = block_sets(getattr(ours, f"{kind}_num_blocks"), getattr(ours, f"{kind}_indices"))
        b = block_sets(getattr(reference, f"{kind}_num_blocks"), getattr(reference, f"{kind}_indices"))
        if not torch.equal(a, b):
            return False
    return torch.equal(ours.to_dense(), reference.to_dense()) and ours.seq_lengths == reference.seq_lengths


def random_rows(generator, B, T, layout):
    idx = torch.randint(0, EOT, (B, T), generator=generator)
    if layout == "long documents":
        p = 0.003
    elif layout == "short documents":
        p = 0.05
    else:
        p = 0.3 if layout == "many tiny documents" else 0.0
    idx[torch.rand(B, T, generator=generator) < p] = EOT
    if layout == "block-aligned":  # documents starting exactly at, and right after, block boundaries
        idx[:, ::128] = EOT
        idx[:, 129::256] = EOT
    return idx


LAYOUTS = ["one document", "long documents", "short documents", "many tiny documents", "block-aligned"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_block_masks_equal_create_block_masks_point_by_point_reference(layout):
    generator = torch.Generator().manual_seed(LAYOUTS.index(layout))
    for B, blocks in ((1, 1), (1, 7), (3, 5), (2, 12)):
        T = blocks * 128
        idx = random_rows(generator, B, T, layout)
        docs = (idx == EOT).cumsum(dim=1)
        # windows of one block, smaller and larger than the documents, and longer than the row
        for long_blocks in sorted({1, 2, 3, 5, blocks, blocks + 3}):
            short_blocks = max(1, long_blocks // 2)
            ours = arch.build_attention_masks(idx, EOT, long_blocks, short_blocks, use_flex=True)
            for name, window in (("long", long_blocks), ("short", short_blocks)):
                reference = create_block_mask(arch.document_window_mask_mod(docs, torch.tensor(window)), B, None,
                                              T, T, device="cpu")
                assert same_blocks(ours[name], reference), (layout, B, T, name, window)


def test_block_structure_of_a_layout_worked_out_by_hand():
    """Documents start at 0 and 300 in 640 tokens: blocks 0-1 hold document 1, block 2 both (first 1, last 2),
    blocks 3-4 document 2. Full: query block 1 x key block 0 and 4 x 3 (both wholly one document). Partial: the
    diagonal, block 2's query rows over blocks 0 and 1 (its rows from 300 on may not look back there), and query
    blocks 3 and 4 over block 2 (its keys before 300 belong to document 1)."""
    idx = torch.zeros(1, 640, dtype=torch.long)
    idx[0, [0, 300]] = EOT
    partial, full = arch.document_block_masks((idx == EOT).cumsum(dim=1))
    expected_full = {(1, 0), (4, 3)}
    expected_partial = {(0, 0), (1, 1), (2, 0), (2, 1), (2, 2), (3, 2), (3, 3), (4, 2), (4, 4)}
    assert {tuple(p) for p in full[0].nonzero().tolist()} == expected_full
    assert {tuple(p) for p in partial[0].nonzero().tolist()} == expected_partial
    masks = arch.build_attention_masks(idx, EOT, 2, 1, use_flex=True)
    # a window of 2 blocks: key blocks at most one back; of 1: the diagonal alone
    assert {tuple(p) for p in masks["long"].to_dense()[0, 0].nonzero().tolist()} == \
        {(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (3, 3), (4, 3), (4, 4)}
    assert masks["long"].full_kv_num_blocks[0, 0].tolist() == [0, 1, 0, 0, 1]
    assert masks["short"].full_kv_num_blocks[0, 0].tolist() == [0] * 5
    assert masks["short"].kv_num_blocks[0, 0].tolist() == [1] * 5


def point_mask(block_mask, T):
    """A BlockMask as the (B, 1, T, T) bool mask FlexAttention applies: full blocks wholly, partial blocks through
    the mask_mod at each of their points, other blocks not at all."""
    B = block_mask.kv_num_blocks.size(0)
    out = torch.zeros(B, 1, T, T, dtype=torch.bool)
    for b in range(B):
        for qb in range(T // 128):
            q = torch.arange(qb * 128, (qb + 1) * 128).view(-1, 1)
            for kind, full in (("kv", False), ("full_kv", True)):
                num, indices = getattr(block_mask, f"{kind}_num_blocks"), getattr(block_mask, f"{kind}_indices")
                for kb in indices[b, 0, qb, :int(num[b, 0, qb])].tolist():
                    kv = torch.arange(kb * 128, (kb + 1) * 128).view(1, -1)
                    tile = torch.ones(128, 128, dtype=torch.bool) if full else \
                        block_mask.mask_mod(torch.tensor(b), torch.tensor(0), q, kv)
                    out[b, 0, qb * 128:(qb + 1) * 128, kb * 128:(kb + 1) * 128] = tile
    return out


@pytest.mark.parametrize("long_blocks", [1, 2, 4])
def test_block_masks_with_their_mask_mod_are_the_dense_sdpa_masks(long_blocks):
    generator = torch.Generator().manual_seed(long_blocks)
    B, T = 2, 768
    idx = random_rows(generator, B, T, "short documents")
    idx[1, 130] = EOT
    flex = arch.build_attention_masks(idx, EOT, long_blocks, max(1, long_blocks // 2), use_flex=True)
    dense = arch.build_attention_masks(idx, EOT, long_blocks, max(1, long_blocks // 2), use_flex=False)
    docs = (idx == EOT).cumsum(dim=1)
    q, kv = torch.arange(T).view(T, 1), torch.arange(T).view(1, T)
    for name, window in (("long", long_blocks), ("short", max(1, long_blocks // 2))):
        # the rule written out: causal, one document, fewer than `window` whole blocks back
        rule = (q >= kv) & (docs[:, :, None] == docs[:, None, :]) & (q // 128 - kv // 128 < window)
        assert torch.equal(dense[name][:, 0], rule)
        assert torch.equal(point_mask(flex[name], T), dense[name])
