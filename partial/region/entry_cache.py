"""The per-function cache of compiled entries: keyed by the call's guard key, bounded (least
recently used entries are dropped first), and counted for `cache_info()`.

A region with graph breaks caches pieces in the same store (one per distinct op sequence
between breaks, keyed by that sequence). Both are compiled segments with a `key` and the
`seconds` spent on them; an entry also carries the guards and write-back of a whole region,
which a piece (exactly its op sequence, run where it was recorded) does not need."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .guards import Same
from .key import Call


class Cached(Protocol):
    """What the cache needs of an entry (a `compiled.Entry`, made above this layer)."""

    key: tuple

    @property
    def seconds(self) -> float:
        """Time spent capturing and compiling it."""

    def check(self, call: Call) -> str | None:
        """None if the entry serves `call`, else why not."""


Entry = TypeVar("Entry", bound=Cached)


@dataclass(frozen=True)
class CacheInfo:
    """What a traced function's cache holds and has done.

    Attributes:
        captures: how many times the function was captured and compiled anew.
        hits: calls served by a cached entry.
        entries: guard keys (compiled specializations) held now.
        compile_seconds: time spent capturing and compiling, in total.
        maxsize: the most entries kept (least recently used dropped first).
        segments: compiled segments the last call ran (1 for a region without breaks).
        breaks: why the last call's region broke, one line per break ("exclude_from_trace()
            at file.py:12"); empty for a region without breaks.
        ops: ops the last call recorded lazily (0 for a region without breaks, whose Python
            does not run on cached calls).

    In a region with graph breaks each distinct op sequence between two breaks is an entry:
    `captures` counts the sequences compiled and `hits` the segments served from the cache.
    """

    captures: int
    hits: int
    entries: int
    compile_seconds: float
    maxsize: int
    segments: int = 0
    breaks: tuple[str, ...] = ()
    ops: int = 0


_HISTORY = 32  # captures whose reason explain() keeps
_PIECE = "piece"  # heads the key of a piece (a guard key never starts with a string)


class Cache(Generic[Entry]):
    """Entries by guard key; several entries may share a key (e.g. train and eval mode)."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self.by_key: dict[tuple, list] = {}  # entries by guard key, pieces by op sequence
        self.lru: OrderedDict[Any, None] = OrderedDict()  # entries and pieces, oldest first
        self.captures = 0
        self.hits = 0
        self.dropped_seconds = 0.0
        self.reasons: list[str] = []
        # why each capture happened, most recent last (bounded: a region that recompiles
        # forever must not grow it)
        self.history: deque[str] = deque(maxlen=_HISTORY)
        self.recent: Entry | None = None  # the most recently used entry
        self.deaths: list = []  # weak references to entries whose guarded objects died
        # Held for a whole call: calls of one function run one at a time, so concurrent calls
        # give the results of some serial order (and never share a half-written state).
        self.lock = threading.RLock()
        self.runner: Any = None  # how calls run: compiled.WholeRegion, or lazy.Breaks once it broke
        self.family: Any = None  # the `Family` of caches of the same code
        self.watch: list = []  # weak references that drop this cache from its family

    def lookup(self, call: Call) -> Entry | None:
        """The entry that serves `call`, or None (`self.reasons` then says why each entry of
        its key did not)."""
        if self.deaths:
            self._drop_dead()
        recent = self.recent
        if recent is not None and recent.key == call.key and recent.check(call) is None:
            return recent  # already the most recently used: nothing to reorder
        entries = self.by_key.get(call.key)
        if entries:
            for entry in entries:
                if entry.check(call) is None:
                    self.lru.move_to_end(entry)
                    self.recent = entry
                    return entry
            self.reasons = [entry.check(call) for entry in entries]
        else:
            self.reasons = []
        return None

    def _drop_dead(self) -> None:
        """Drop the entries whose Module arguments or lifted tensors died (so their
        executables and residual references go with them)."""
        while self.deaths:
            entry = self.deaths.pop()()
            if entry is not None and entry in self.lru:
                self.remove(entry)

    def entries(self) -> list[Entry]:
        """The entries of the whole region (not the pieces), least recently used first."""
        return [e for e in self.lru if e.key[0] is not _PIECE]

    def most_recent(self) -> Entry | None:
        """The most recently used entry of the whole region (not a piece)."""
        return next((e for e in reversed(self.lru) if e.key[0] is not _PIECE), None)

    def add(self, entry: Entry) -> None:
        self.by_key.setdefault(entry.key, []).append(entry)
        self.lru[entry] = None
        self.recent = entry
        self._bound()

    def piece(self, key: tuple) -> Any:
        """The compiled piece of a region with breaks for op sequence `key`, or None."""
        found = self.by_key.get((_PIECE, key))
        if not found:
            return None
        self.lru.move_to_end(found[0])
        return found[0]

    def add_piece(self, key: tuple, piece: Any) -> None:
        self.captures += 1
        piece.key = (_PIECE, key)
        self.by_key[piece.key] = [piece]
        self.lru[piece] = None
        self._bound()

    def drop_piece(self, piece: Any) -> None:
        if piece in self.lru:
            self.remove(piece)

    def _bound(self) -> None:
        while len(self.lru) > self.maxsize:
            self.remove(next(iter(self.lru)))

    def remove(self, entry: Any) -> None:
        if self.lru.pop(entry, 0) is None:
            if self.recent is entry:
                self.recent = None
            self.dropped_seconds += entry.seconds
            same_key = self.by_key[entry.key]
            same_key.remove(entry)
            if not same_key:
                del self.by_key[entry.key]

    def clear(self) -> None:
        for entry in list(self.lru):
            self.remove(entry)

    def info(self, segments: int = 0, breaks: tuple[str, ...] = (), ops: int = 0) -> CacheInfo:
        seconds = self.dropped_seconds + sum(e.seconds for e in self.lru)
        return CacheInfo(self.captures, self.hits, len(self.lru), seconds,
                         self.maxsize, segments, breaks, ops)


class Family:
    """The caches of every wrapper of one piece of code, by settings and function token, and
    how often they captured in all: wrappers of the same code made anew for other objects (a
    lambda over a new model in every loop iteration) each capture once, and the recompile
    warning counts them here."""

    def __init__(self) -> None:
        self.caches: dict[tuple, Cache[Any]] = {}
        self.captures = 0


_FAMILIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # code -> Family
_LOCK = threading.Lock()
_dead_tokens: list = []  # (family, key) whose token names an object that died


def shared_cache(fn: Any, settings: Any, token: tuple) -> Cache[Any]:
    """The cache shared by every wrapper of `fn`'s code with these `settings` (kind, options)
    and function token (`key.function_token`: closure values, defaults, bound object), made on
    first use. It is dropped when an object of the token dies (or with the code)."""
    target = getattr(fn, "__func__", fn)
    code = getattr(target, "__code__", None)
    if code is None:  # a Module or callable object: its class's code, told apart by `self`
        method = getattr(type(fn), "forward", None) or type(fn).__call__
        code = getattr(method, "__code__", None)
    if code is None:
        alone: Cache[Any] = Cache(settings.cache_size)
        alone.family = Family()
        return alone
    with _LOCK:
        while _dead_tokens:
            family, key = _dead_tokens.pop()
            family.caches.pop(key, None)
        family = _FAMILIES.get(code)
        if family is None:
            family = _FAMILIES[code] = Family()
        key = (settings, token)
        cache = family.caches.get(key)
        if cache is None:
            cache = family.caches[key] = Cache(settings.cache_size)
            cache.family = family
            cache.watch = _watch_token(token, family, key)
        return cache


def _watch_token(token: Any, family: Family, key: tuple) -> list:
    """Weak references, to the objects `token` names, that drop the cache when one dies."""
    family_ref = weakref.ref(family)

    def died(_: Any) -> None:
        f = family_ref()
        if f is not None:
            _dead_tokens.append((f, key))

    refs = []
    stack = [token]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(item)
        elif isinstance(item, Same):
            obj = item.ref()
            if obj is not None and not isinstance(item.ref, weakref.ref):
                continue  # held strongly by the token itself: lives as long as the cache
            if obj is not None:
                refs.append(weakref.ref(obj, died))
    return refs
