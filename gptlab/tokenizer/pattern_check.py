"""A static check that a split pattern cannot backtrack catastrophically or match the empty string.

Probing a pattern with sample texts is unsound: it misses blow-ups on characters the probe does not try. This
module reasons about the pattern's structure instead, on `regex`'s own parse of it, and accepts a class of
patterns whose backtracking is bounded whatever the text:

- An unbounded repetition (`*`, `+`, `{n,}`, greedy or lazy) that can be backtracked into repeats a
  *deterministic* body only: one character class, a fixed string, or anything made possessive/atomic, so the ways
  to split a run among its iterations are at most the run's length. `(a+)+`, `(\\p{L}+)*`, `(x|xy)*` and
  `(\\w|\\w\\w)+` are refused; `(?:x|xy)++` and `(?>x|xy)*` are accepted.
- From one start position the work is at most linear in the text: two variable repetitions in a row that both
  can be backtracked into (`\\d*\\d*x`, O(n²) per start) are refused, unless only the first can fail
  (`[A]*[B]+` at the end of a branch, as in o200k).
- The bounded choices (alternatives, `?`, `{m,n}` of a group) multiply to at most MAX_WAYS per start, so
  `(a|a){30}` is refused.
- No path through the pattern is empty (lookarounds and anchors count as empty): tiktoken panics on an empty match.

Constructs the check does not model (recursion, conditionals, fuzzy matching, backtracking verbs) are refused.
GPT-2's, cl100k's and o200k's patterns and the project's built-in ones pass.
"""
from dataclasses import dataclass

MAX_WAYS = 10_000  # bounded choices explored from one start position
MAX_SMALL_RANGE = 16  # {m,n} of one character with n - m < this counts as choices, above as a repetition
MAX_DEGREE = 1  # work per start position: O(n ** MAX_DEGREE)


class PatternRefused(Exception):
    """The pattern is outside the accepted class: args[0] is "slow", "empty" or "unsupported", args[1] says why."""


@dataclass(frozen=True)
class _Cost:
    outcomes: int  # degree in n of the number of ways it can match from one position (backtracking points)
    time: int  # degree in n of the time to try all of them
    ways: int  # bounded choices (a constant factor)
    nullable: bool  # may match the empty string (assertions count as empty)
    infallible: bool  # always matches (the empty string, with no assertion on the way)
    scan: bool  # one character, or a repetition of one: fails in constant time when its continuation cannot

    @property
    def deterministic(self):
        return self.outcomes == 0 and self.ways == 1


_ONE_CHAR = _Cost(0, 0, 1, False, False, True)
_EMPTY_ASSERTION = _Cost(0, 0, 1, True, False, False)


def _parse(pattern):
    from regex import _regex_core as core  # the parser `regex.compile` itself uses

    flags = 0
    while True:  # as regex.compile does: a global flag found late restarts the parse with it
        source = core.Source(pattern)
        info = core.Info(flags, source.char_type, {})
        info.guess_encoding = core.UNICODE
        source.ignore_space = bool(info.flags & core.VERBOSE)
        try:
            return core._parse_pattern(source, info), core
        except core._UnscopedFlagSet:
            flags = info.global_flags


def check_pattern(pattern):
    """None when `pattern` (which `regex` compiles) is in the accepted class, else raise PatternRefused."""
    tree, core = _parse(pattern)
    cost = _Analysis(core).cost(tree, True)
    if cost.nullable:
        raise PatternRefused("empty", "at some position: an alternative can match without consuming a "
                                        "character, as a lookaround or an anchor alone does")
    if cost.time > MAX_DEGREE:
        raise PatternRefused("slow", "two variable-length repetitions in a row can both be backtracked into "
                                     "(such as \\d*\\d*x): O(n²) work from each position")
    if cost.ways > MAX_WAYS:
        raise PatternRefused("slow", f"its alternatives and bounded repetitions give over {MAX_WAYS:,} ways to "
                                     "try from each position (such as (a|a){30})")


class _Analysis:
    def __init__(self, core):
        self.core = core

    def cost(self, node, tail_infallible):
        """The cost of `node`; tail_infallible: what follows it always matches (so it is never backtracked into)."""
        c = self.core
        if isinstance(node, (c.Keep, c.Prune, c.Skip, c.Failure, c.Fuzzy, c.CallGroup, c.Conditional,
                             c.LookAroundConditional, c.StringSet)):
            raise PatternRefused("unsupported", f"the check does not handle {type(node).__name__} constructs "
                                                "(\\K, verbs, recursion, conditionals, fuzzy matching, named lists)")
        if isinstance(node, (c.Character, c.Property, c.Range, c.SetBase, c.Any, c.AnyAll, c.AnyU)):  # [a-z] alone is a Range
            return _ONE_CHAR
        if isinstance(node, c.String):  # a fixed string (also one that case-folds)
            return _Cost(0, 0, 1, False, False, False)
        if isinstance(node, c.ZeroWidthBase):  # anchors and word boundaries
            return _EMPTY_ASSERTION
        if isinstance(node, c.Grapheme):  # \X: atomic, one way to match from a position
            return _Cost(0, 0, 1, False, False, False)
        if isinstance(node, c.RefGroup):  # a back-reference: one way, time up to the group's length
            return _Cost(0, 1, 1, True, False, False)
        if isinstance(node, c.Group):
            return self.cost(node.subpattern, tail_infallible)
        if isinstance(node, c.Atomic):
            inner = self.cost(node.subpattern, True)
            return _Cost(0, inner.time, 1, inner.nullable, inner.infallible, False)
        if isinstance(node, c.LookAround):
            inner = self.cost(node.subpattern, True)
            return _Cost(0, inner.time, 1, True, False, False)
        if isinstance(node, c.Sequence):
            return self.sequence(node.items, tail_infallible)
        if isinstance(node, c.Branch):
            costs = [self.cost(b, tail_infallible) for b in node.branches]
            return _Cost(max(x.outcomes for x in costs), max(x.time for x in costs),
                         min(sum(x.ways for x in costs), MAX_WAYS + 1), any(x.nullable for x in costs),
                         any(x.infallible for x in costs), False)
        if isinstance(node, c.GreedyRepeat):  # also PossessiveRepeat and LazyRepeat
            return self.repeat(node, tail_infallible)
        raise PatternRefused("unsupported", f"the check does not handle {type(node).__name__} constructs")

    def sequence(self, items, tail_infallible):
        # the tail of item i is items i+1.. and then this sequence's own tail
        tails, infallible = [], tail_infallible
        costs = [None] * len(items)
        for i in range(len(items) - 1, -1, -1):
            tails.append(infallible)
            costs[i] = self.cost(items[i], infallible)
            infallible = infallible and costs[i].infallible
        tails.reverse()
        time = outcomes = 0
        ways = 1
        for cost, tail in zip(costs, tails):
            if tail and cost.infallible:  # never fails: runs once, on the way to the match
                step = cost.time
            elif tail and cost.scan:  # fails at once (its minimum is not there), else the match is found
                step = max(outcomes, cost.time)
            else:  # tried again for every way the items before it matched
                step = outcomes + cost.time
            time = max(time, step)
            outcomes += cost.outcomes
            ways = min(ways * cost.ways, MAX_WAYS + 1)
        return _Cost(outcomes, time, ways, all(x.nullable for x in costs), all(x.infallible for x in costs),
                     len(costs) == 1 and costs[0].scan)

    def repeat(self, node, tail_infallible):
        c = self.core
        lo, hi = node.min_count, node.max_count  # hi None: unbounded
        possessive = isinstance(node, c.PossessiveRepeat)
        # a possessive repetition is atomic: its iterations are followed by more iterations or by its end
        body = self.cost(node.subpattern, tail_infallible or possessive)
        nullable = lo == 0 or body.nullable
        infallible = lo == 0 or body.infallible
        if hi == lo:  # {m}: m copies in a row
            return _Cost(lo * body.outcomes, max(lo - 1, 0) * body.outcomes + body.time,
                         min(body.ways ** min(lo, 64), MAX_WAYS + 1), nullable, infallible, False)
        one_char = body.scan and not body.nullable and body.time == 0 and body.outcomes == 0
        if hi is not None and one_char and hi - lo < MAX_SMALL_RANGE:  # x?, x{1,3}: a few choices
            return _Cost(0, 0, hi - lo + 1, nullable, infallible, not possessive)
        if possessive:  # one outcome; each iteration's own backtracking stays inside it
            return _Cost(0, 1 + body.time, 1, nullable, infallible, one_char)
        if body.deterministic and not body.nullable:  # the run splits among iterations in one way each
            return _Cost(1, 1 + body.time, 1, nullable, infallible, one_char)
        if hi is None:
            raise PatternRefused("slow", "an unbounded repetition repeats a group that can match in more than "
                                         "one way (nested repetition such as (a+)+ or (\\p{L}+)*, or overlapping "
                                         "alternatives such as (x|xy)* or (\\w|\\w\\w)+)")
        # {m,n} of a group with choices: up to n copies, each optional past the m-th
        ways = sum(min(body.ways ** k, MAX_WAYS + 1) for k in range(lo, min(hi, 64) + 1))
        return _Cost(hi * body.outcomes, max(hi - 1, 0) * body.outcomes + body.time, min(ways, MAX_WAYS + 1),
                     nullable, infallible, False)
