"""The big grids' pairwise covers (tests/helpers.py): every two values of any two dimensions
meet in some case that every run takes, so leaving the rest to -m exhaustive loses no pair."""

from __future__ import annotations

import itertools

import pytest

from helpers import covered_product, pairwise


@pytest.mark.parametrize(
    "sizes",
    [
        (2, 4, 4, 2, 3, 2, 3, 2, 2),  # tests/engine/test_variants.py: lengths, the seven variants, dtype
        (2, 6, 2, 3, 2, 2, 2, 2),  # tests/engine/test_tiled.py: with the engine and the schedule
        (2, 2, 2, 2, 2, 2, 2, 9),  # tests/layers/test_multihead.py: the flags and the masks
    ],
    ids=["variants", "tiled", "multihead"],
)
def test_every_pair_of_values_meets_in_the_cover(sizes):
    dimensions = [list(range(n)) for n in sizes]
    cover = pairwise(dimensions)
    met = {((a, case[a]), (b, case[b])) for case in cover for a, b in itertools.combinations(range(len(sizes)), 2)}
    every = {
        ((a, x), (b, y))
        for a, b in itertools.combinations(range(len(sizes)), 2)
        for x in dimensions[a]
        for y in dimensions[b]
    }
    assert met == every
    assert len(set(cover)) == len(cover) <= 64  # distinct cases, a few dozen of the product's thousands
    assert pairwise(dimensions) == cover  # the same cases on every run


def test_the_product_is_whole_and_only_the_cover_runs_by_default():
    params = covered_product([[1, 2, 3], ["a", "b"], [True, False]])
    assert sorted(p.values for p in params) == sorted(itertools.product([1, 2, 3], ["a", "b"], [True, False]))
    running = [p.values for p in params if not p.marks]
    assert set(running) == set(pairwise([[1, 2, 3], ["a", "b"], [True, False]]))
    assert all(mark.name == "exhaustive" for p in params for mark in p.marks)
