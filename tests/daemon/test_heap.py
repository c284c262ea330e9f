"""The start-up heap is frozen out of full collections (daemon/heap.py), garbage collected first."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from daemon.heap import freeze_startup_heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()  # the test process goes on collecting everything


def test_live_objects_are_frozen_and_cycles_already_garbage_are_freed_first(unfrozen: None) -> None:
    garbage_a, garbage_b = Node(), Node()
    garbage_a.other, garbage_b.other = garbage_b, garbage_a  # a cycle only the collector can free
    gone = weakref.ref(garbage_a)
    del garbage_a, garbage_b
    live = Node()
    frozen = freeze_startup_heap()
    assert gone() is None  # collected before the freeze, not kept forever in the permanent generation
    assert frozen == gc.get_freeze_count() > 0
    assert not any(o is live for o in gc.get_objects())  # skipped by every collection from now on
