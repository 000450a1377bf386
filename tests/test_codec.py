"""R2 (queue-safe values) and the tolerant decode operators rely on (A2, R9)."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid

import pytest
from django.core.exceptions import ValidationError

from django_leasejobs.codec import decode, encode, encode_result
from django_leasejobs.exceptions import NotQueueSafe


class Thing:
    pass


class IntSub(int):
    """An int subclass: JSON would hand back a plain int."""


def _cycle():
    items: list = [1]
    items.append({"back": items})
    return {"items": items}


REFUSED = [
    pytest.param({"when": (1, 2)}, "payload.when", "tuple", id="tuple"),
    pytest.param({"tags": {"a"}}, "payload.tags", "set", id="set"),
    pytest.param({"blob": b"x"}, "payload.blob", "bytes", id="bytes"),
    pytest.param({"price": decimal.Decimal("1.5")}, "payload.price", "Decimal", id="Decimal"),
    pytest.param(
        {"at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)},
        "payload.at",
        "datetime",
        id="datetime",
    ),
    pytest.param({"id": uuid.UUID(int=1)}, "payload.id", "UUID", id="UUID"),
    pytest.param({"obj": Thing()}, "payload.obj", "Thing", id="object"),
    pytest.param({"x": float("nan")}, "payload.x", "nan", id="NaN"),
    pytest.param({"x": float("inf")}, "payload.x", "inf", id="inf"),
    pytest.param({"x": float("-inf")}, "payload.x", "-inf", id="-inf"),
    pytest.param({1: "one"}, "payload.1", "key of type int", id="non-str-key"),
    pytest.param(_cycle(), "payload.items.1.back", "cycle", id="cycle"),
    pytest.param(
        {"items": [{"ok": 1}, {"ok": 2}, {"ok": 3}, {"deep": [0, {"bad": {1, 2}}]}]},
        "payload.items.3.deep.1.bad",
        "set",
        id="nested",
    ),
    pytest.param(lambda: 1, "payload", "function", id="function"),
    pytest.param({"flag": True, "n": IntSub(3)}, "payload.n", "IntSub", id="int-subclass"),
]


@pytest.mark.parametrize(("value", "path", "what"), REFUSED)
def test_r2_refuses_with_exact_path(value, path, what):
    with pytest.raises(NotQueueSafe) as caught:
        encode(value, "payload")
    assert caught.value.path == path
    assert what in caught.value.what
    assert path in str(caught.value)


def test_r2_refusal_is_a_validation_error_with_code_and_path():
    with pytest.raises(ValidationError) as caught:
        encode({"a": (1,)}, "cursor")
    assert caught.value.code == "not_queue_safe"
    assert caught.value.params == {"path": "cursor.a"}


ACCEPTED = [
    None,
    True,
    0,
    -(2**70),
    1.5,
    "",
    "héllo ✓",
    [],
    {},
    {"items": [1, "two", 3.0, None, False, {"nested": []}]},
]


@pytest.mark.parametrize("value", ACCEPTED)
def test_r2_accepted_values_survive_unchanged(value):
    text = encode(value, "payload")
    assert json.loads(text) == value
    assert decode(text).value == value


def test_r2_shared_but_acyclic_values_are_accepted():
    shared = {"k": 1}
    assert json.loads(encode({"a": shared, "b": [shared, shared]}, "payload")) == {
        "a": {"k": 1},
        "b": [{"k": 1}, {"k": 1}],
    }


def test_tolerant_decode_reports_reason_and_keeps_raw_text():
    decoded = decode("{not json")
    assert not decoded.ok
    assert decoded.value is None
    assert decoded.raw == "{not json"
    assert "JSONDecodeError" in decoded.error


def test_tolerant_decode_refuses_nan_literals():
    assert not decode("NaN").ok
    assert not decode('{"x": Infinity}').ok


def test_decode_of_null_column_is_empty_not_an_error():
    assert decode(None).ok
    assert decode(None, empty={}).value == {}


def test_r5_step_results_use_django_json_encoder():
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    stored = encode_result({"at": when, "price": decimal.Decimal("1.50"), "id": uuid.UUID(int=1)})
    assert json.loads(stored) == {
        "at": "2026-01-02T03:04:05Z",
        "price": "1.50",
        "id": "00000000-0000-0000-0000-000000000001",
    }


def test_r5_step_result_that_cannot_be_encoded_names_it():
    with pytest.raises(TypeError, match="Thing"):
        encode_result({"x": Thing()})
