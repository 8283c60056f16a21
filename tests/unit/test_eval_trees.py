"""Scoring an example's choices after one copy of its context (model.predict(tree=), score.units_of and the
scorer's tree rows): a tree row gives each sequence the logits it has alone (rows written out by hand,
tests/helpers/tree_rows.py), and the scorer lays out exactly the rows worked out here by hand. The figures of whole
tasks against a plain loop, through this path: tests/unit/test_eval_score.py."""
import math
import sys

import pytest
import torch

from conftest import REPO
from helpers.tree_rows import assert_tree_scores_as_alone
from gptlab.evals import score

sys.path.insert(0, REPO)
import model as arch  # noqa: E402

EOT = 99


@pytest.fixture(scope="module")
def gpt():
    """model.py's GPT with random weights everywhere (its zero-initialised projections too), windows of one
    128-token block."""
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=100, num_layers=2, num_heads=2, model_dim=32, window_size=128)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def random_tokens(seed, n):
    return torch.randint(0, EOT, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_a_tree_row_scores_each_branch_as_its_sequence_alone(gpt):
    """A 90-token context and branches of 20, 30 and 40 tokens behind another document: the third branch sits at
    columns 150-189 but at positions 90-129; with one-block windows it sees its context as it does alone only if
    the window counts positions, not columns; and it must not see the branches before it."""
    context = [EOT] + random_tokens(1, 89)
    sequences = [context + random_tokens(2 + k, 20 + 10 * k) for k in range(3)]
    assert gpt.final_windows() == (1, 1)
    assert_tree_scores_as_alone(gpt.predict, EOT, sequences, 90, before=[EOT] + random_tokens(9, 9))


def test_a_branch_that_saw_its_sibling_would_be_told_apart(gpt):
    """The check above is sharp: a row where the second branch is marked as the first (so it sees the first's
    tokens) fails it."""
    from helpers.tree_rows import tree_row

    context = [EOT] + random_tokens(1, 19)
    sequences = [context + random_tokens(2, 10), context + random_tokens(3, 10)]
    tokens, positions, branches, columns = tree_row(sequences, 20)
    leaky = [1 if b == 2 else b for b in branches]
    row = lambda values: torch.tensor([values])  # noqa: E731
    seen = gpt.predict(row(tokens), EOT, tree=(row(positions), row(leaky)))[0]
    alone = gpt.predict(row(sequences[1]), EOT)[0]
    assert (seen[columns[1]][20:] - alone[20:]).abs().max() > 1e-2


def test_logits_at_positions_are_the_whole_logits_there(gpt):
    """predict(positions=) runs the last block's MLP and the head at those positions only: the logits equal the
    whole row's at those (row, column) pairs, in any order and with repeats, on plain and tree rows."""
    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, EOT, (3, 200), generator=g)
    tokens[:, 0], tokens[1, 77], tokens[2, 150] = EOT, EOT, EOT
    rows = torch.tensor([2, 0, 1, 1, 0, 2, 2])
    cols = torch.tensor([199, 0, 77, 76, 130, 5, 199])
    torch.testing.assert_close(gpt.predict(tokens, EOT, positions=(rows, cols)),
                               gpt.predict(tokens, EOT)[rows, cols], rtol=0, atol=1e-5)
    tree = (torch.arange(200).repeat(3, 1), torch.zeros(3, 200, dtype=torch.long))
    tree[1][:, 120:] = 1
    torch.testing.assert_close(gpt.predict(tokens, EOT, positions=(rows, cols), tree=tree),
                               gpt.predict(tokens, EOT, tree=tree)[rows, cols], rtol=0, atol=1e-5)


class Recorder:
    """A logits_fn with .at and .trees (as model_source.ModelLogits of a model whose predict takes tree=): records
    the rows, positions and branches it is given, and answers logits that favour token 4 everywhere."""

    def __init__(self, trees=True):
        self.trees, self.asked = trees, []

    def __call__(self, tokens):
        raise AssertionError("the whole logits were asked for")

    def at(self, tokens, rows, cols, tree=None):
        self.asked.append((tokens.tolist(), rows.tolist(), cols.tolist(),
                           None if tree is None else [t.tolist() for t in tree]))
        out = torch.zeros(len(rows), 10)
        out[:, 4] = 5.0
        return out


def test_an_examples_choices_share_one_copy_of_their_context():
    """Two examples: [0 5 6 7] + [8] / [9 3] (context 4 tokens, choices of 1 and 2) and a lone [0 4 4]. Rows of 8
    (longest unit first, best fit): row 0 = the first example's tree, 4 + 1 + 2 = 7 tokens, then padding
    <|endoftext|> (0); row 1 = the lone sequence, padded. Worked out by hand."""
    seqs = [([0, 5, 6, 7, 8], 4), ([0, 5, 6, 7, 9, 3], 4), ([0, 4, 4], 1)]
    fn = Recorder()
    got = score.score_sequences(fn, seqs, eot=0, n_vocab=10, row_len=8, groups=[2, 1])
    (tokens, rows, cols, (positions, branches)), = fn.asked
    assert tokens == [[0, 5, 6, 7, 8, 9, 3, 0], [0, 4, 4, 0, 0, 0, 0, 0]]
    assert positions == [[0, 1, 2, 3, 4, 4, 5, 0], [0, 1, 2, 0, 0, 0, 0, 0]]
    assert branches == [[0, 0, 0, 0, 1, 2, 2, 0], [0, 0, 0, 0, 0, 0, 0, 0]]
    # scored: sequence 0's token 8 from column 3; sequence 1's 9 from column 3 and 3 from column 5 (its 9's);
    # sequence 2's two 4s from columns 0 and 1 of row 1
    assert sorted(zip(rows, cols)) == [(0, 3), (0, 3), (0, 5), (1, 0), (1, 1)]
    other, lp4 = -math.log(math.exp(5.0) + 9), 5.0 - math.log(math.exp(5.0) + 9)
    assert got[0][0] == pytest.approx(other) and got[1][0] == pytest.approx(2 * other)
    assert got[2] == (pytest.approx(2 * lp4), True)


def test_without_trees_or_groups_each_sequence_is_laid_out_alone():
    """A logits_fn without .trees (a model source whose predict takes no tree=) and the scorer without groups lay
    every sequence out whole, as before, and pass no tree."""
    seqs = [([0, 5, 6, 7, 8], 4), ([0, 5, 6, 7, 9, 3], 4)]
    for fn, groups in ((Recorder(trees=False), [2]), (Recorder(), None)):
        score.score_sequences(fn, seqs, eot=0, n_vocab=10, row_len=16, groups=groups)
        (tokens, _, _, tree), = fn.asked
        assert tokens == [[0, 5, 6, 7, 9, 3, 0, 5, 6, 7, 8, 0, 0, 0, 0, 0]] and tree is None


def test_units_by_hand():
    seqs = [([0, 1, 2, 3], 3), ([0, 1, 2, 5, 6], 3), ([0, 1, 9], 2), ([0, 7], 1), ([0, 7], 1)]
    first, counts, shared = score.units_of(seqs, [3, 2])
    assert (first.tolist(), counts.tolist(), shared.tolist()) == ([0, 3], [3, 2], [2, 2])  # [0 1], [0 7]
    first, counts, shared = score.units_of(seqs)
    assert (first.tolist(), counts.tolist(), shared.tolist()) == ([0, 1, 2, 3, 4], [1] * 5, [4, 5, 3, 2, 2])
    with pytest.raises(ValueError):
        score.units_of(seqs, [3, 3])
