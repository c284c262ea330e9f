"""``chartgen leader``: what it refuses to lead, and its /readyz and /metrics."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from config import Settings
from daemon.leader.command import LeaderRole, leader_app, leader_problem, main

KEYS = {"binance_api_key": SecretStr("k"), "binance_api_secret": SecretStr("s")}
DSN = {"postgres_dsn": SecretStr("postgresql://u:p@127.0.0.1:5432/db")}


@pytest.fixture(autouse=True)
def _no_env_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BINANCE_API_KEY", "BINANCE_API_SECRET"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({**KEYS}, "no postgres_dsn"),
        ({**DSN, **KEYS, "broker": "paper"}, "broker=paper cannot be led from a cluster"),
        ({**DSN, **KEYS, "broker": "ccxt"}, "broker=ccxt cannot be led from a cluster"),
        ({**DSN}, "needs BINANCE_API_KEY and BINANCE_API_SECRET"),
        ({**DSN, **KEYS, "binance_rest_url": "https://api.binance.com"}, "mainnet need --live"),
    ],
)
def test_what_a_leader_refuses_to_lead(settings: dict[str, Any], problem: str) -> None:
    found = leader_problem(Settings(**settings))
    assert found is not None and problem in found


def test_a_leader_may_lead_the_testnet_and_mainnet_with_live() -> None:
    assert leader_problem(Settings(**DSN, **KEYS, binance_rest_url="https://testnet.binance.vision")) is None
    assert leader_problem(Settings(**DSN, **KEYS, binance_rest_url="https://api.binance.com", live=True)) is None


def test_the_command_refuses_a_data_dir_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data-dir", "/tmp/x"]) == 2
    assert "a leader keeps its state in the cluster's PostgreSQL" in capsys.readouterr().err


def _role(*, leading: bool, degraded: str | None) -> LeaderRole:
    leader = SimpleNamespace(
        member_id="leader@h/1/ab", account="main", leading=leading, degraded=degraded,
        lease=SimpleNamespace(token=7) if leading else None, sent=3, refused=1, unrecorded=[],
    )  # fmt: skip
    return LeaderRole(leader, membership=None)  # type: ignore[arg-type]


def test_readyz_is_ready_when_leading_or_standing_by_and_not_when_degraded() -> None:
    for leading in (True, False):
        with TestClient(leader_app(_role(leading=leading, degraded=None))) as client:
            r = client.get("/readyz")
            assert r.status_code == 200 and r.json()["leading"] is leading
    with TestClient(leader_app(_role(leading=False, degraded="PostgreSQL unreachable: x"))) as client:
        r = client.get("/readyz")
        assert r.status_code == 503 and "PostgreSQL unreachable" in r.json()["reasons"][0]


def test_metrics_say_who_leads_and_what_was_sent() -> None:
    with TestClient(leader_app(_role(leading=True, degraded=None))) as client:
        text = client.get("/metrics").text
    assert "chartgen_leader_leading 1.0" in text
    assert "chartgen_leader_orders_sent_total 3.0" in text and "chartgen_leader_orders_refused_total 1.0" in text
