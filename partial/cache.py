"""The per-function cache of compiled entries: keyed by the call's guard key, bounded (least
recently used entries are dropped first), and counted for `cache_info()`.

A region with graph breaks caches pieces instead (one per distinct op sequence between breaks,
keyed by that sequence); they share the bound and the counts."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .guards import Call
from .program import Entry


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


class Cache:
    """Entries by guard key; several entries may share a key (e.g. train and eval mode)."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self.by_key: dict[tuple, list[Entry]] = {}
        self.lru: OrderedDict[Entry, None] = OrderedDict()
        self.captures = 0
        self.hits = 0
        self.dropped_seconds = 0.0
        self.reasons: list[str] = []
        self.recent: Entry | None = None  # the most recently used entry
        self.pieces: OrderedDict[tuple, Any] = OrderedDict()  # op sequence -> lazy.Piece

    def lookup(self, call: Call) -> Entry | None:
        """The entry that serves `call`, or None (`self.reasons` then says why each entry of
        its key did not)."""
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

    def most_recent(self) -> Entry | None:
        return next(reversed(self.lru), None)

    def add(self, entry: Entry) -> None:
        self.by_key.setdefault(entry.key, []).append(entry)
        self.lru[entry] = None
        self.recent = entry
        self._bound()

    def piece(self, key: tuple) -> Any:
        """The compiled piece of a region with breaks for op sequence `key`, or None."""
        piece = self.pieces.get(key)
        if piece is not None:
            self.pieces.move_to_end(key)
        return piece

    def add_piece(self, key: tuple, piece: Any) -> None:
        self.captures += 1
        self.pieces[key] = piece
        self._bound()

    def drop_piece(self, piece: Any) -> None:
        for key, held in list(self.pieces.items()):
            if held is piece:
                del self.pieces[key]

    def _bound(self) -> None:
        while len(self.lru) + len(self.pieces) > self.maxsize:
            if self.pieces:
                self.dropped_seconds += self.pieces.popitem(last=False)[1].seconds
            else:
                self.remove(next(iter(self.lru)))

    def remove(self, entry: Entry) -> None:
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
        while self.pieces:
            self.dropped_seconds += self.pieces.popitem()[1].seconds

    def info(self, segments: int = 0, breaks: tuple[str, ...] = (), ops: int = 0) -> CacheInfo:
        seconds = (self.dropped_seconds + sum(e.seconds for e in self.lru)
                   + sum(p.seconds for p in self.pieces.values()))
        return CacheInfo(self.captures, self.hits, len(self.lru) + len(self.pieces), seconds,
                         self.maxsize, segments, breaks, ops)
