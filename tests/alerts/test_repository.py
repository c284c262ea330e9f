"""Both alert stores implement alerts.repository.AlertRepository, method for method, with the same
signatures — the evaluator, the service and the push streams can be given either."""

from __future__ import annotations

import inspect

import pytest

from alerts.pg_store import PgAlertStore
from alerts.repository import AlertRepository
from alerts.store import AlertStore

METHODS = sorted(name for name, value in vars(AlertRepository).items() if callable(value) and not name.startswith("_"))


def test_the_interface_lists_what_the_alert_engine_calls() -> None:
    assert {"fire", "fire_synced_later", "insert_capped", "drain", "queued", "remove", "expired"} <= set(METHODS)


@pytest.mark.parametrize("impl", [AlertStore, PgAlertStore])
@pytest.mark.parametrize("name", METHODS)
def test_each_store_has_the_method_with_the_interface_signature(impl: type, name: str) -> None:
    wanted = inspect.signature(getattr(AlertRepository, name))
    got = inspect.signature(getattr(impl, name))
    assert list(got.parameters) == list(wanted.parameters), f"{impl.__name__}.{name}"
    for param, spec in wanted.parameters.items():
        assert got.parameters[param].kind == spec.kind, f"{impl.__name__}.{name}({param})"
        assert got.parameters[param].default == spec.default, f"{impl.__name__}.{name}({param})"
    is_async = inspect.iscoroutinefunction(getattr(AlertRepository, name))
    assert inspect.iscoroutinefunction(getattr(impl, name)) == is_async, f"{impl.__name__}.{name}"
