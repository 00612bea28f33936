"""How often a draft model's token turns out to be the target's, by the draft model's own
probability of it: what a tree's node is worth.

A draft model's probabilities are not the target's: a token it gives 0.5 may be the target's
greedy choice four times in five, and a runner-up at 0.2 once in ten. A tree ranks its nodes by
chance (`core.budget`), so those chances should be the observed rates. Under greedy decoding every
drafted node can be judged once the context has gone on: a node under an accepted parent is the
target's exactly when its token is the next one in the context, whether or not the step scored it.
"""

from __future__ import annotations

BINS = 10  # of the draft model's probability, [0, 1) in equal steps
PRIOR = 4.0  # pseudo-observations at a bin's middle: until judged, a probability is its own rate
MEMORY = 2000.0  # a bin's observations are halved past this: the rates follow the text


class Calibration:
    """Rates of acceptance by the draft model's probability, learned from judged nodes."""

    def __init__(self) -> None:
        self.reached = [0.0] * BINS  # nodes judged (their parent was accepted)
        self.accepted = [0.0] * BINS  # of them, the target's token

    def rate(self, p: float) -> float:
        """The chance that a token the draft model gives probability p is the target's, given
        that its parent is."""
        b = min(int(p * BINS), BINS - 1)
        return (self.accepted[b] + PRIOR * (b + 0.5) / BINS) / (self.reached[b] + PRIOR)

    def judge(self, tokens: list[int], parents: list[int], probs: list[float],
              continuation: list[int]) -> None:
        """A tree's nodes (tokens, parent indices with -1 for the root's children, the draft
        model's probabilities) against the tokens the context went on with."""
        node = -1
        for token in continuation:
            following = None
            for child, parent in enumerate(parents):
                if parent == node:
                    self._record(probs[child], tokens[child] == token)
                    following = child if tokens[child] == token else following
            if following is None:
                return
            node = following

    def _record(self, p: float, accepted: bool) -> None:
        b = min(int(p * BINS), BINS - 1)
        if self.reached[b] >= MEMORY:
            self.reached[b] /= 2
            self.accepted[b] /= 2
        self.reached[b] += 1
        self.accepted[b] += accepted
