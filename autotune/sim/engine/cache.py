"""The simulated engine's prefix cache: SGLang's radix tree in miniature (private to the engine).

What it models (SGLang ``srt/mem_cache/radix_cache.py``, page size 1):

* Keys are token ids. A request's prompt is matched against the tree at admission
  (at most ``input_len - 1`` tokens: the last token is always computed, as SGLang's
  ``adjust_max_prefix_ids`` does); the matched tokens are not prefilled again, and
  the request reports them as ``cached_tokens``.
* The matched path is *locked* while the request holds it (SGLang's ``lock_ref``):
  it cannot be evicted under a running request.
* A finished request inserts its whole sequence (prompt + output) into the tree; the
  part the tree already held is freed, the rest moves from the request's private KV
  into the cache. So the cache and the running requests share one KV pool.
* Eviction is LRU over unlocked leaves, by token count, only when an allocation
  needs room (SGLang's ``evict(num_tokens)``); ``flush`` empties the tree.

Edges are compressed (one node holds a run of tokens); matching compares slices
with a binary search, so a 2,048-token prompt costs a few dozen slice compares.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

_ROOT_KEY: tuple[int, ...] = ()


class _Node:
    __slots__ = ("children", "key", "lock", "parent", "stamp")

    def __init__(self, key: tuple[int, ...], parent: _Node | None, stamp: int) -> None:
        self.key = key
        self.children: dict[int, _Node] = {}
        self.parent = parent
        self.lock = 0
        self.stamp = stamp


def _common(a: tuple[int, ...], b: Sequence[int], start: int) -> int:
    """Length of the common prefix of ``a`` and ``b[start:]`` (binary search on slice equality)."""
    n = min(len(a), len(b) - start)
    lo, hi = 0, n
    while lo < hi:  # invariant: a[:lo] == b[start:start+lo]
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == tuple(b[start + lo:start + mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo


class PrefixMatch:
    """A locked match: ``length`` tokens of the prompt are in the cache until :meth:`RadixCache.release`."""

    __slots__ = ("length", "node")

    def __init__(self, length: int, node: _Node) -> None:
        self.length = length
        self.node = node


class RadixCache:
    """Token-level radix tree with lock counts and LRU eviction by token budget."""

    def __init__(self) -> None:
        self._clock = itertools.count(1)
        self.root = _Node(_ROOT_KEY, None, 0)
        self.root.lock = 1  # never evicted
        self.size = 0  # tokens held by the tree
        self.locked = 0  # tokens on locked paths (not evictable)

    @property
    def evictable(self) -> int:
        return self.size - self.locked

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut ``node``'s edge after ``at`` tokens; returns the new upper node."""
        parent = node.parent
        assert parent is not None
        upper = _Node(node.key[:at], parent, node.stamp)
        upper.lock = node.lock
        parent.children[upper.key[0]] = upper
        node.key = node.key[at:]
        node.parent = upper
        upper.children[node.key[0]] = node
        return upper

    def _walk(self, key: Sequence[int], limit: int) -> tuple[int, _Node]:
        """Deepest node whose path is a prefix of ``key[:limit]`` (splitting a partly matched edge)."""
        node, i = self.root, 0
        stamp = next(self._clock)
        view = key[:limit] if limit < len(key) else key
        while i < limit:
            child = node.children.get(view[i])
            if child is None:
                break
            m = _common(child.key, view, i)
            if m == 0:
                break
            if m < len(child.key):
                child = self._split(child, m)
            child.stamp = stamp
            node, i = child, i + m
        return i, node

    def match(self, key: Sequence[int], *, max_len: int) -> PrefixMatch:
        """The longest cached prefix of ``key`` (at most ``max_len`` tokens), not yet locked."""
        limit = max(min(max_len, len(key)), 0)
        length, node = self._walk(key, limit)
        return PrefixMatch(length, node)

    def unlocked_on(self, m: PrefixMatch) -> int:
        """Tokens of the matched path that nothing locks yet (locking them takes them off the evictable)."""
        n: _Node | None = m.node
        free = 0
        while n is not None and n is not self.root:
            if n.lock == 0:
                free += len(n.key)
            n = n.parent
        return free

    def lock(self, m: PrefixMatch) -> None:
        """Hold a match for a request admitted with it."""
        self._lock(m.node, +1)

    def release(self, m: PrefixMatch) -> None:
        """Unlock a match (request finished, retracted or aborted)."""
        self._lock(m.node, -1)

    def _lock(self, node: _Node, delta: int) -> None:
        n: _Node | None = node
        while n is not None and n is not self.root:
            if delta > 0 and n.lock == 0:
                self.locked += len(n.key)
            n.lock += delta
            if delta < 0 and n.lock == 0:
                self.locked -= len(n.key)
            n = n.parent

    def insert(self, key: Sequence[int]) -> int:
        """Insert ``key``; returns how many of its tokens the tree already held (those are freed)."""
        length, node = self._walk(key, len(key))
        if length < len(key):
            rest = tuple(key[length:])
            leaf = _Node(rest, node, next(self._clock))
            node.children[rest[0]] = leaf
            self.size += len(rest)
        return length

    def evict(self, tokens: int) -> int:
        """Free at least ``tokens`` tokens from unlocked leaves, least recently used first."""
        if tokens <= 0:
            return 0
        heap = [(n.stamp, id(n), n) for n in self._leaves() if n.lock == 0]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < tokens:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            freed += len(leaf.key)
            self.size -= len(leaf.key)
            if parent is not self.root and not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.stamp, id(parent), parent))
        return freed

    def _leaves(self) -> list[_Node]:
        out, stack = [], [self.root]
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            elif n is not self.root:
                out.append(n)
        return out

    def flush(self) -> bool:
        """Empty the tree (SGLang's ``/flush_cache``); False while any path is locked."""
        if self.locked:
            return False
        self.root = _Node(_ROOT_KEY, None, 0)
        self.root.lock = 1
        self.size = 0
        return True
