"""WorkerPool batches (``batch_size``) and streams (``imap``, ``imap_unordered``) on CPU workers."""

from __future__ import annotations

import itertools

import placement_helpers as h
import pool_helpers as ph
import pytest

from agents.placement import BatchShrunkWarning, DPMapError, ItemFailure, WorkerPool, dp_map

CPU2 = ["cpu", "cpu"]


@pytest.fixture(scope="module")
def batch_pool():
    with WorkerPool(ph.make_batch_square, CPU2, threads_per_worker=1) as pool:
        yield pool


def test_batches_of_up_to_k_items_results_in_input_order(batch_pool):
    out = batch_pool.map(range(50), batch_size=4, progress=False)
    assert [v for v, _ in out] == [x * x for x in range(50)]
    sizes = [n for _, n in out]
    assert max(sizes) == 4 and all(1 <= n <= 4 for n in sizes)  # the callable got lists of up to 4


def test_a_bad_item_fails_alone_its_batch_neighbours_succeed(batch_pool):
    items = [0, 1, 2, -3, 4, 5, 6, 7]
    out = batch_pool.map(items, batch_size=4, on_error="collect", progress=False)
    assert isinstance(out[3], ItemFailure) and out[3].error == "ValueError: bad item -3 (batch [3])"
    assert out[3].attempts == 2  # the batch's failure cost no attempt; alone, it ran twice (retries=1)
    assert [out[i][0] for i in (0, 1, 2, 4, 5, 6, 7)] == [x * x for x in items if x >= 0]
    assert [n for v, n in out[:3]] == [1, 1, 1]  # its neighbours were run again one by one
    assert [n for v, n in out[4:]] == [4, 4, 4, 4]  # the other batch was not touched


def test_an_answer_of_another_length_is_an_error_naming_the_batch():
    out = dp_map(ph.make_short_answer, range(3), ["cpu"], batch_size=3, on_error="collect", progress=False)
    assert all(isinstance(f, ItemFailure) for f in out)
    # the batch of 3 gave 2 results, so each item ran alone and gave none: each failure says so
    assert [f.error for f in out] == [
        f"ValueError: the worker's callable returned 0 result(s) for a batch of 1 item(s); with batch_size "
        f"it must return one result per item, in order (batch [{i}])"
        for i in range(3)
    ]
    assert "returned 2 result(s) for a batch of 3" in out[0].traceback and "batch [0, 1, 2]" in out[0].traceback


def test_a_batch_out_of_memory_shrinks_the_later_batches_and_says_so():
    # each batch of 8 ran out of memory and ran again item by item, all map long, without a word
    with pytest.warns(BatchShrunkWarning, match=r"a batch of 8 items ran out of memory .*batches of 4") as caught:
        out = dp_map(ph.make_out_of_memory_above_two, list(range(40)), ["cpu"], batch_size=8, progress=False)
    assert [x for x, _ in out] == list(range(40))
    sizes = [size for _, size in out]
    assert sizes[:8] == [1] * 8  # the first batch's items, alone
    assert sizes[-1] == 2  # halved until a batch fits: 8 -> 4 -> 2
    assert [str(w.message).split("batches of ")[-1] for w in caught] == ["4", "2"]


def test_an_unpicklable_item_fails_alone(batch_pool):
    out = batch_pool.map([1, 2, lambda: 3, 4], batch_size=4, on_error="collect", progress=False)
    assert isinstance(out[2], ItemFailure) and "not picklable" in out[2].error and out[2].attempts == 0
    assert [out[i][0] for i in (0, 1, 3)] == [1, 4, 16]


def test_imap_pulls_lazily_and_yields_in_input_order(batch_pool):
    pulled = []

    def numbers():  # an endless generator: listing it would never end
        for x in itertools.count():
            pulled.append(x)
            yield x

    stream = batch_pool.imap(numbers(), batch_size=2, progress=False)
    first = [v for v, _ in itertools.islice(stream, 10)]
    assert first == [x * x for x in range(10)]
    window = max(64, 4 * 2 * batch_pool.prefetch * 2)  # documented: a window past the oldest not yielded
    assert len(pulled) <= 10 + window
    stream.close()
    # leaving a stream early keeps the pool usable
    assert [v for v, _ in batch_pool.map(range(5), batch_size=2, progress=False)] == [0, 1, 4, 9, 16]


def test_imap_unordered_yields_every_index_once(batch_pool):
    pairs = list(batch_pool.imap_unordered(iter(range(30)), batch_size=3, progress=False))
    assert sorted(i for i, _ in pairs) == list(range(30))
    assert all(v == i * i and 1 <= n <= 3 for i, (v, n) in pairs)


def test_imap_raises_at_the_failed_item_and_the_pool_goes_on(batch_pool):
    got = []
    with pytest.raises(DPMapError, match="item 2 failed.*bad item -1"):
        for v, _ in batch_pool.imap([0, 1, -1, 3], batch_size=2, progress=False):
            got.append(v)
    assert got == [0, 1]
    collected = list(batch_pool.imap([0, -1, 2], batch_size=1, on_error="collect", progress=False))
    assert isinstance(collected[1], ItemFailure) and collected[0][0] == 0 and collected[2][0] == 4


def test_one_stream_at_a_time(batch_pool):
    stream = batch_pool.imap(range(100), batch_size=1, progress=False)
    next(stream)
    with pytest.raises(RuntimeError, match="running another map"):
        batch_pool.map([1], progress=False)
    stream.close()
    assert batch_pool.map([3], batch_size=1, progress=False) == [(9, 1)]


def test_bad_batch_arguments_are_rejected():
    with pytest.raises(ValueError, match="batch_size"):
        dp_map(h.make_identity, [], CPU2, batch_size=0)
    with pytest.raises(ValueError, match="batch_size"):
        dp_map(h.make_identity, [], CPU2, batch_size=True)
    with pytest.raises(TypeError, match="journal"):
        dp_map(h.make_identity, [], CPU2, journal=3)
