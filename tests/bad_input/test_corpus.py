"""The corpus itself: every file is well-formed, every surface has enough distinct defects, and no two
files of a surface hold the same input."""

from __future__ import annotations

import pytest

from tests.bad_input import corpus


@pytest.mark.parametrize("surface", sorted(corpus.SURFACES))
def test_every_surface_has_enough_well_formed_cases(surface: str) -> None:
    cases = corpus.load(surface)  # raises on a malformed file
    assert len(cases) >= corpus.MIN_CASES, [c.name for c in cases]


@pytest.mark.parametrize("surface", sorted(corpus.SURFACES))
def test_no_two_cases_of_a_surface_hold_the_same_input(surface: str) -> None:
    seen: dict[str, str] = {}
    for case in corpus.load(surface):
        key = repr(sorted((k, repr(v)) for k, v in case.data.items() if k in corpus.SURFACES[surface]))
        assert key not in seen, f"{case.name} repeats {seen[key]}"
        seen[key] = case.name


def test_every_corpus_file_belongs_to_a_surface() -> None:
    stray = [
        path.relative_to(corpus.CORPUS)
        for path in corpus.CORPUS.rglob("*")
        if path.is_file() and (path.suffix != ".yaml" or path.parent.name not in corpus.SURFACES)
    ]
    assert stray == []


def test_a_repeat_directive_expands_to_the_text_it_describes() -> None:
    assert corpus.expand({"prefix": "a: ", "repeat": "[", "times": 3, "suffix": "]"}) == "a: [[[]"
    assert corpus.expand("as is") == "as is"
    with pytest.raises(ValueError, match="repeat directive"):
        corpus.expand({"repeat": "[", "times": 3, "extra": 1})
