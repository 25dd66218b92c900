"""The batcher: every page exactly once, the token budget kept, similar sizes together."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ocrwatch.batching import SIMILAR, Batcher
from ocrwatch.engines.base import BatchPolicy
from ocrwatch.engines.lightonocr import MAX_IMAGE_TOKENS, image_tokens

# Estimated image tokens of real page shapes after the 1540 px resize.
A4 = image_tokens(2480, 3508)  # 300 dpi A4 scan
LETTER = image_tokens(2550, 3300)
SQUARE = image_tokens(3000, 3000)
RECEIPT = image_tokens(600, 1800)
CARD = image_tokens(1600, 260)  # a label strip: few tokens even once fitted to 1540 px
STAMP = image_tokens(200, 150)
SIZES = [A4, LETTER, SQUARE, RECEIPT, CARD, STAMP]

POLICY_16GB = BatchPolicy(max_pages=8, max_tokens=2 * MAX_IMAGE_TOKENS, size_matched=True,
                          partner_wait=0.5)


def test_image_tokens_follow_the_resize_and_the_cap() -> None:
    assert image_tokens(1088, 1540) == 39 * 55
    assert image_tokens(1088, 1540) == A4  # a 300 dpi A4 scan is scaled to 1540 first
    assert image_tokens(800, 500) == 55 * 35  # a small card is enlarged to 1540 x 963
    assert image_tokens(10000, 10000) == MAX_IMAGE_TOKENS == 3025
    assert image_tokens(1, 1) == MAX_IMAGE_TOKENS  # a tiny image is enlarged to 1540 x 1540
    assert CARD == 55 * 9


def test_a4_pages_run_in_pairs_and_cards_in_eights_on_a_16_gb_card() -> None:
    b: Batcher[str] = Batcher(POLICY_16GB, tokens=lambda name: A4 if name[0] == "a" else CARD)
    for i in range(5):
        b.add(f"a{i}", 0.0)
        b.add(f"c{i}", 0.0)
    for i in range(5, 9):
        b.add(f"c{i}", 0.0)
    batches = []
    while (batch := b.take(0.0)) is not None:
        batches.append(batch)
    # Full batches go at once; the lone fifth A4 page waits for a partner.
    assert batches == [["a0", "a1"], ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"],
                       ["a2", "a3"]]
    assert len(b) == 2
    assert b.take(0.4) is None
    assert b.next_deadline() == 0.5
    assert b.take(0.5) == ["a4"]
    assert b.take(0.5, flush=True) == ["c8"]
    assert len(b) == 0 and b.take(9.0) is None and b.next_deadline() is None


def test_a_lone_page_finds_a_partner_that_comes_in_time() -> None:
    b: Batcher[str] = Batcher(POLICY_16GB, tokens=lambda name: A4)
    b.add("first", 0.0)
    assert b.take(0.1) is None
    b.add("second", 0.3)
    assert b.take(0.3) == ["first", "second"]


def test_without_size_matching_pages_mix() -> None:
    policy = BatchPolicy(max_pages=4, max_tokens=None, size_matched=False)
    b: Batcher[int] = Batcher(policy, tokens=lambda t: t)
    for t in (A4, CARD, A4, CARD):
        b.add(t, 0.0)
    assert sorted(b.take(0.0) or []) == sorted([A4, CARD, A4, CARD])


def test_a_page_above_the_budget_runs_alone() -> None:
    policy = BatchPolicy(max_pages=8, max_tokens=1000, size_matched=True)
    b: Batcher[int] = Batcher(policy, tokens=lambda t: t)
    b.add(3025, 0.0)
    b.add(3025, 0.0)
    assert b.take(0.0) == [3025]
    assert b.take(0.0) == [3025]


arrivals = st.lists(
    st.tuples(st.sampled_from(SIZES), st.floats(min_value=0.0, max_value=2.0)),
    min_size=1, max_size=60)
policies = st.builds(
    BatchPolicy,
    max_pages=st.integers(min_value=1, max_value=10),
    max_tokens=st.one_of(st.none(), st.integers(min_value=500, max_value=4 * MAX_IMAGE_TOKENS)),
    size_matched=st.booleans(),
    partner_wait=st.sampled_from([0.0, 0.1, 0.5, 5.0]),
)


def run(policy: BatchPolicy, pages: list[tuple[int, float]]) -> list[list[int]]:
    """Feed pages in arrival order, taking batches the way the daemon's loop does."""
    tokens = {i: t for i, (t, _) in enumerate(pages)}
    b: Batcher[int] = Batcher(policy, tokens=tokens.__getitem__)
    order = sorted(range(len(pages)), key=lambda i: pages[i][1])
    batches: list[list[int]] = []
    now = 0.0
    for i in order:
        now = pages[i][1]
        b.add(i, now)
        while (batch := b.take(now)) is not None:
            batches.append(batch)
        deadline = b.next_deadline()
        # Nothing left behind waits past its partner wait.
        assert deadline is None or deadline > now
    while (batch := b.take(now, flush=True)) is not None:
        batches.append(batch)
    assert len(b) == 0
    return batches


@settings(max_examples=300, deadline=None)
@given(policies, arrivals)
def test_every_page_once_within_budget_and_sizes_matched(
        policy: BatchPolicy, pages: list[tuple[int, float]]) -> None:
    batches = run(policy, pages)
    seen = sorted(i for batch in batches for i in batch)
    assert seen == list(range(len(pages)))  # every page exactly once
    for batch in batches:
        sizes = [pages[i][0] for i in batch]
        assert 1 <= len(batch) <= policy.max_pages
        if policy.max_tokens is not None and len(batch) > 1:
            assert sum(sizes) <= policy.max_tokens  # the budget is never exceeded
        if policy.size_matched:
            assert min(sizes) >= SIMILAR * max(sizes)  # similar sizes only


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(SIZES), st.integers(min_value=1, max_value=40),
       st.integers(min_value=1, max_value=10))
def test_same_size_pages_fill_their_batches(size: int, count: int, max_pages: int) -> None:
    policy = BatchPolicy(max_pages=max_pages, max_tokens=2 * MAX_IMAGE_TOKENS, size_matched=True,
                         partner_wait=5.0)
    batches = run(policy, [(size, 0.0)] * count)
    fit = max(1, min(max_pages, (2 * MAX_IMAGE_TOKENS) // size))
    assert [len(b) for b in batches[:-1]] == [fit] * (len(batches) - 1)
    assert 1 <= len(batches[-1]) <= fit
