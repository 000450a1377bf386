from __future__ import annotations

import time

from django_leasejobs.ids import new_id, new_owner


def test_ids_are_ulids_that_sort_by_time():
    first = new_id()
    time.sleep(0.002)
    second = new_id()
    assert len(first) == len(second) == 26
    assert first < second
    assert first[:10] < second[:10]  # the time part moved on
    assert set(first) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def test_ids_from_one_process_strictly_increase_within_a_millisecond():
    ids = [new_id() for _ in range(5_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_owner_tokens_are_never_reused():
    assert len({new_owner() for _ in range(10_000)}) == 10_000
