"""Tree rows written out by hand (an example's shared context once, then each choice's rest), and the check that a
model's predict(tree=) gives, at every position of every sequence, the logits of that sequence alone in its row."""
import torch


def tree_row(sequences, shared, before=()):
    """(tokens, positions, branches, columns) of one row: the `before` tokens (another document, positions from 0,
    branch 0), then sequences[0][:shared] once (branch 0), then for k = 1, 2, ... the tokens of sequence k after
    shared (branch k, positions shared, shared + 1, ...); columns: per sequence, the column of each of its
    positions."""
    tokens, positions = list(before), list(range(len(before)))
    branches = [0] * len(before)
    trunk = list(range(len(tokens), len(tokens) + shared))
    tokens += sequences[0][:shared]
    positions += range(shared)
    branches += [0] * shared
    columns = []
    for k, seq in enumerate(sequences, 1):
        assert seq[:shared] == sequences[0][:shared]
        cols = list(trunk)
        for p in range(shared, len(seq)):
            cols.append(len(tokens))
            tokens.append(seq[p])
            positions.append(p)
            branches.append(k)
        columns.append(cols)
    return tokens, positions, branches, columns


def assert_tree_scores_as_alone(predict, eot, sequences, shared, before=(), atol=1e-5):
    """predict(tokens (1, T), eot, tree=...) of the tree row, at each sequence's columns, equals predict of the
    sequence alone (1, len), position by position."""
    tokens, positions, branches, columns = tree_row(sequences, shared, before)
    row = lambda values: torch.tensor([values])  # noqa: E731
    tree = predict(row(tokens), eot, tree=(row(positions), row(branches)))[0]
    for seq, cols in zip(sequences, columns):
        torch.testing.assert_close(tree[cols], predict(row(seq), eot)[0], rtol=0, atol=atol)
