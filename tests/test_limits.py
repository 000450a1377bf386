"""Flow control's options and keys (SPEC §14, C1; §11): @job(limit=...) and limit_key.

What ``django_leasejobs.limits`` holds -- ``Limit``, ``Rate``, their checks,
the key each run is limited under -- in one process. The writes a limit
makes when a pass begins are in ``test_store_limits.py``; real processes in
``test_limits_processes.py``.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from django_leasejobs import (
    InvalidJob,
    InvalidKey,
    Limit,
    Rate,
    job,
    registry,
    start,
    start_many,
)
from django_leasejobs.models import Run
from django_leasejobs.policy import MAX_DELAY
from tests.limit_helpers import (
    LIMITED,
    QUICK,
    SECOND,
    handler,
)
from tests.utils import fresh

pytestmark = pytest.mark.django_db


# -- @job(limit=...) refused at registration (§11) ---


@pytest.mark.parametrize(
    ("limit", "says"),
    [
        (Limit(), "concurrency, rate or both"),
        (Limit(concurrency=0), "concurrency"),
        (Limit(concurrency=-1), "concurrency"),
        (Limit(concurrency=True), "concurrency"),
        (Limit(concurrency="2"), "concurrency"),
        (Limit(concurrency=2.0), "concurrency"),
        (Limit(rate=Rate(0, per=SECOND)), "rate n"),
        (Limit(rate=Rate(True, per=SECOND)), "rate n"),
        (Limit(rate=Rate(2, per=timedelta(0))), "rate per"),
        (Limit(rate=Rate(2, per=-SECOND)), "rate per"),
        (Limit(rate=Rate(2, per=2)), "rate per"),
        (Limit(rate=Rate(2, per=MAX_DELAY + SECOND)), "rate per"),
        (Limit(rate=5), "rate"),
        (Limit(concurrency=1, key="account"), "key"),
        ({"concurrency": 2}, "Limit"),
        (2, "Limit"),
    ],
    ids=[
        "neither",
        "concurrency-0",
        "concurrency-negative",
        "concurrency-bool",
        "concurrency-str",
        "concurrency-float",
        "rate-n-0",
        "rate-n-bool",
        "rate-per-0",
        "rate-per-negative",
        "rate-per-not-timedelta",
        "rate-per-too-long",
        "rate-not-a-rate",
        "key-not-callable",
        "limit-a-dict",
        "limit-an-int",
    ],
)
def test_c_a_bad_limit_is_refused_at_registration_naming_the_job(limit, says):
    """§11 + §14: a bad ``limit`` is an InvalidJob when ``@job`` runs, naming the job."""
    name = "t.limits.bad"
    with pytest.raises(InvalidJob, match=re.escape(says)) as refused:
        job(name, limit=limit)(handler)
    assert repr(name) in str(refused.value)
    assert refused.value.name == name
    assert name not in registry


def test_c_good_limits_register(define):
    both = Limit(concurrency=3, rate=Rate(10, per=timedelta(minutes=1)), key=lambda p: p["a"])
    assert define("t.limits.both", handler, limit=both).limit == both
    assert both.rate.interval == timedelta(seconds=6)
    assert define("t.limits.rate", handler, limit=Limit(rate=Rate(1, per=SECOND))).limit
    assert define("t.limits.none", handler).limit is None


# -- C1 keys ---


@pytest.fixture
def key_calls():
    """The payloads ``keyed``'s key function was called with."""
    return []


@pytest.fixture
def keyed(define, key_calls):
    """A job keyed on ``payload["account"]`` whose key function notes each call."""

    def key(payload):
        key_calls.append(payload)
        return payload["account"]

    return define("t.c1.keyed", handler, limit=Limit(concurrency=1, key=key))


def test_c1_the_key_is_evaluated_once_at_start_and_stored_in_limit_key(keyed, key_calls, drive):
    """C1: ``key(payload)`` runs at ``start()`` and its value is the run's ``limit_key``;
    the drive reads the column, never the function."""
    run = start(keyed, {"account": "acme"}).run
    assert fresh(run).limit_key == "acme"
    assert key_calls == [{"account": "acme"}]
    assert drive(keyed).completed == 1
    assert key_calls == [{"account": "acme"}]  # the drive did not call it again


def test_c1_a_join_keeps_the_live_runs_key(keyed, key_calls):
    """C1 + R1: a start that joins the live run changes none of its columns, its key too."""
    first = start(keyed, {"account": "acme"}, instance="i").run
    joined = start(keyed, {"account": "zeta"}, instance="i", again=True)
    assert joined.joined
    assert joined.run.pk == first.pk
    assert fresh(first).limit_key == "acme"
    assert len(key_calls) <= 2  # at most once per start() call


def test_c1_a_key_that_raises_is_an_invalid_key_and_nothing_is_written(keyed):
    """C1 + §11: a key function that raises refuses the start; no row is written."""
    with pytest.raises(InvalidKey) as refused:
        start(keyed, {"no account": "here"})
    assert isinstance(refused.value, ValueError)
    assert isinstance(refused.value.__cause__, KeyError)  # chained, not repeated
    assert "here" not in str(refused.value)  # the payload is not quoted
    assert not Run.objects.filter(job=keyed.name).exists()


@pytest.mark.parametrize(
    "raised", [SystemExit(3), GeneratorExit(), BaseException("odd")], ids=lambda e: type(e).__name__
)
def test_c1_s11_a_key_raising_system_exit_is_an_invalid_key_naming_the_job(define, raised):
    """§11 (revision 3): ``SystemExit`` -- any ``BaseException`` but ``KeyboardInterrupt`` --
    from a key function is an ordinary refusal naming the job, and nothing is written."""

    def key(payload):
        raise raised

    spec = define("t.c1.exits", handler, limit=Limit(concurrency=1, key=key))
    with pytest.raises(InvalidKey, match=re.escape(spec.name)) as refused:
        start(spec, {"account": "acme"})
    assert refused.value.__cause__ is raised
    with pytest.raises(InvalidKey, match=r"items\.0"):
        start_many(spec, [("a", {"account": "acme"})])
    assert not Run.objects.filter(job=spec.name).exists()


def test_c1_s11_ctrl_c_in_a_key_function_stops_the_start_and_writes_nothing(define):
    """§11 (revision 3): ``KeyboardInterrupt`` goes through as it is (docs: Ctrl-C still
    stops the caller); the key is computed before anything is written."""

    def key(payload):
        raise KeyboardInterrupt

    spec = define("t.c1.interrupted", handler, limit=Limit(concurrency=1, key=key))
    with pytest.raises(KeyboardInterrupt):
        start(spec, {"account": "acme"})
    with pytest.raises(KeyboardInterrupt):
        start_many(spec, [("a", {"account": "acme"})])
    assert not Run.objects.filter(job=spec.name).exists()


def test_c1_an_invalid_key_names_the_job(keyed):
    """§11: "a ``limit`` key function that raises or returns a non-str -- error at
    ``start()``, naming the job"; ``start_many`` names the job and the item."""
    for payload in ({}, {"account": 7}):
        with pytest.raises(InvalidKey, match=re.escape(keyed.name)):
            start(keyed, payload)
    with pytest.raises(InvalidKey, match=re.escape(keyed.name)):
        start_many(keyed, [("a", {"account": "x"}), ("b", {})])
    assert not Run.objects.filter(job=keyed.name).exists()


@pytest.mark.parametrize(
    "value",
    [5, None, b"acme", "", "x" * 201, "a\x00b", "\ud800"],
    ids=["int", "none", "bytes", "empty", "too-long", "nul", "lone-surrogate"],
)
def test_c1_a_key_that_is_not_a_short_storable_str_is_refused_and_nothing_is_written(define, value):
    """C1: ``key(payload) -> str`` of 1 to 200 storable characters, else InvalidKey (§11, §12)."""
    spec = define("t.c1.bad", handler, limit=Limit(concurrency=1, key=lambda payload: value))
    with pytest.raises(InvalidKey):
        start(spec, {"account": "acme"})
    with pytest.raises(InvalidKey):
        start_many(spec, [("a", {"account": "acme"})])
    assert not Run.objects.filter(job=spec.name).exists()


def test_c1_a_key_of_200_characters_is_kept_whole(define):
    key = "k" * 200
    spec = define("t.c1.long", handler, limit=Limit(concurrency=1, key=lambda payload: key))
    assert fresh(start(spec).run).limit_key == key


def test_c1_start_many_computes_each_items_key(keyed):
    results = start_many(keyed, [("a", {"account": "x"}), ("b", {"account": "y"})])
    assert [fresh(result.run).limit_key for result in results] == ["x", "y"]


@pytest.mark.parametrize(
    ("items", "index"),
    [
        ([("a", {"account": "x"}), ("b", {"account": "y"}), ("c", {})], 2),
        ([("a", {"account": "x"}), ("b", {"account": 7}), ("c", {"account": "z"})], 1),
        ([("a", {"account": ""}), ("b", {"account": "y"})], 0),
    ],
    ids=["raises", "not-a-str", "empty"],
)
def test_c1_start_many_refuses_a_bad_key_naming_the_item_and_writes_nothing(keyed, items, index):
    """C1 + §3 ``start_many``: one bad key names its item's index; no item is written."""
    with pytest.raises(InvalidKey) as refused:
        start_many(keyed, items)
    assert f"items.{index}" in str(refused.value)
    assert not Run.objects.filter(job=keyed.name).exists()


def test_c1_a_limit_without_a_key_or_no_limit_stores_no_key():
    """C1: ``limit_key`` is NULL when the job has no key (its own limit) or no limit."""
    assert fresh(start(LIMITED, QUICK).run).limit_key is None
    assert fresh(start("tests.noop").run).limit_key is None
    (batched,) = start_many(LIMITED, [("batched", QUICK)])
    assert fresh(batched.run).limit_key is None
