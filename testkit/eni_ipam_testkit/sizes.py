"""The memory an object holds: :func:`deep_size` walks it and adds up what it references.

Role: the measure behind the tests and benchmarks that bound what the controller keeps per cluster
object. ``sys.getsizeof`` counts one object's own header and table, not what it points to; this
follows containers (dicts, lists, tuples, sets), ``__slots__`` and ``__dict__`` attributes, and
counts every object once however often it is referenced.

Invariant: the figure is an upper bound of what keeping the object costs: objects it shares with
the rest of the process (interned strings, small ints, ``True``) are counted as if it owned them,
except the singletons ``None``, ``True``, ``False`` and ``Ellipsis``, which nothing ever frees.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterable, Iterator
from typing import Any

_SINGLETONS = (None, True, False, Ellipsis, NotImplemented)


def _referents(obj: Any) -> Iterator[Any]:
    if isinstance(obj, dict):
        yield from obj.keys()
        yield from obj.values()
    elif isinstance(obj, list | tuple | set | frozenset):
        yield from obj
    elif isinstance(obj, str | bytes | int | float):
        return
    else:
        dict_slot = False
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if slot == "__dict__":
                    dict_slot = True
                elif slot != "__weakref__" and hasattr(obj, slot):
                    yield getattr(obj, slot)
        if dict_slot:
            # Reading ``obj.__dict__`` would make the dict a slotted object only has once something
            # is set there (and count it): the collector's view gives what is set there, if anything
            # (the attribute values themselves, or the dict where one exists).
            yield from (r for r in gc.get_referents(obj) if not isinstance(r, type))
        elif hasattr(obj, "__dict__"):
            yield obj.__dict__


def deep_size(obj: Any) -> int:
    """Bytes held by ``obj`` and everything it references (each object counted once)."""
    return deep_sizes(obj)[0]


def deep_sizes(*roots: Any, skip: Iterable[Any] = ()) -> list[int]:
    """What each of ``roots`` adds, in order: bytes it reaches that no root before it reached (so
    the figures add up to the whole, and what the roots share is counted with the first).

    ``skip``: objects not followed on the way unless they are a root themselves (what a part
    references but does not own: a shared service, the registry everything reports to).
    """
    skipped = {id(o) for o in skip}
    seen: set[int] = set(skipped)
    sizes = []
    for root in roots:
        if id(root) in skipped:  # a root is counted, even one skipped on the way to others
            skipped.discard(id(root))
            seen.discard(id(root))
        total = 0
        stack = [root]
        while stack:
            item = stack.pop()
            if any(item is s for s in _SINGLETONS) or id(item) in seen:
                continue
            seen.add(id(item))
            total += sys.getsizeof(item)
            stack.extend(_referents(item))
        sizes.append(total)
    return sizes
