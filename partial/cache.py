"""The per-function cache of compiled entries: keyed by the call's guard key, bounded (least
recently used entries are dropped first), and counted for `cache_info()`."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

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
    """

    captures: int
    hits: int
    entries: int
    compile_seconds: float
    maxsize: int


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
        while len(self.lru) > self.maxsize:
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

    def info(self) -> CacheInfo:
        seconds = self.dropped_seconds + sum(e.seconds for e in self.lru)
        return CacheInfo(self.captures, self.hits, len(self.lru), seconds, self.maxsize)
