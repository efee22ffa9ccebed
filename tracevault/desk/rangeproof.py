"""One inclusion proof for all of a run's leaves: what a report carries instead of one per leaf.

Why: a run's leaves share most of their RFC 6962 audit paths, and the browser recomputes
every node above the leaves anyway. The hashes it cannot recompute are the maximal subtrees
of the tree that hold none of the run's leaves; given those, in the order a left-to-right
walk of the tree meets them, the run's leaves (at their indexes) lead to one root, which must
be the signed checkpoint's. A 10,000-event run alone in its log needs a few dozen hashes where
its per-leaf proofs had 20,000 distinct nodes. ``assets/report.js`` walks the tree the same
way (docs/desk.md, "What the browser checks").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tracevault.transparency import HASH_SIZE

__all__ = ["path_ranges", "run_proof", "run_root"]


def _split(n: int) -> int:
    """The largest power of two below ``n`` (n > 1): where RFC 6962 splits ``n`` leaves."""
    return 1 << ((n - 1).bit_length() - 1)


def path_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` leaves of each subtree in leaf ``index``'s audit path in a tree
    of ``size`` leaves, from the leaf up: the order of its inclusion proof's hashes."""
    out: list[tuple[int, int]] = []
    s, e = 0, size
    while e - s > 1:
        k = _split(e - s)
        if index < s + k:
            out.append((s + k, e))
            e = s + k
        else:
            out.append((s, s + k))
            s += k
    out.reverse()
    return out


def _walk(
    indexes: Sequence[int],
    size: int,
    empty: Callable[[int, int], None],
    leaf: Callable[[int], None],
    join: Callable[[], None],
) -> None:
    """Walk the tree of ``size`` leaves left to right: ``empty(s, e)`` for each maximal
    subtree with none of ``indexes`` (strictly increasing, below ``size``), ``leaf(k)`` for
    the k-th of them, ``join()`` after both halves of a subtree holding one of them."""
    k = 0
    stack: list[tuple[int, int, bool]] = [(0, size, False)]
    while stack:
        s, e, joined = stack.pop()
        if joined:
            join()
        elif k >= len(indexes) or indexes[k] >= e:
            empty(s, e)
        elif e - s == 1:
            leaf(k)
            k += 1
        else:
            m = s + _split(e - s)
            stack += [(s, e, True), (m, e, False), (s, m, False)]


def run_proof(
    indexes: Sequence[int], size: int, known: Mapping[tuple[int, int], bytes]
) -> list[bytes]:
    """The hashes of the subtrees beside ``indexes`` (strictly increasing leaf indexes below
    ``size``), in walk order, from ``known`` (``[start, end)`` -> hash, e.g. the leaves'
    own proofs placed by :func:`path_ranges`). A subtree ``known`` lacks is written as zeros:
    the proof then fails in the browser, never passes."""
    out: list[bytes] = []
    _walk(
        indexes,
        size,
        lambda s, e: out.append(known.get((s, e), bytes(HASH_SIZE))),
        lambda k: None,
        lambda: None,
    )
    return out


def run_root(
    indexes: Sequence[int],
    size: int,
    leaves: Sequence[bytes],
    proof: Sequence[bytes],
    hash_children: Callable[[bytes, bytes], bytes],
) -> bytes:
    """The root the leaf hashes ``leaves`` at ``indexes`` and ``proof`` (:func:`run_proof`)
    lead to, as the browser computes it; ValueError when ``proof`` has too few or too many
    hashes."""
    stack: list[bytes] = []
    given = iter(proof)

    def empty(s: int, e: int) -> None:
        got = next(given, None)
        if got is None:
            raise ValueError(f"the proof has too few hashes (none for leaves {s}..{e - 1})")
        stack.append(got)

    def join() -> None:
        right = stack.pop()
        stack.append(hash_children(stack.pop(), right))

    _walk(indexes, size, empty, lambda k: stack.append(leaves[k]), join)
    if next(given, None) is not None:
        raise ValueError("the proof has more hashes than the run's leaves need")
    return stack[0]
