"""alerts package."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alerts.action_runner import ActionRunner
    from alerts.action_store import ActionOutcomes, strip_actions_in
    from alerts.actions import ActionRefused, action_client_id, refused_outcome
    from alerts.channels.messages import verify_signature
    from alerts.channels.sender import OutboxSender, RateBucket
    from alerts.evaluator import AlertEvaluator
    from alerts.feed import NotificationFeed
    from alerts.fired_history import recent_fired
    from alerts.front_alerts import StoredAlerts
    from alerts.models import ALERT_KINDS, Alert, Firing, Subscription, notification_payload
    from alerts.outbox_store import ChannelRouting, Outbox, OutboxRow, OutboxStore
    from alerts.pg_action_outcomes import PgActionOutcomes
    from alerts.pg_actions import strip_actions
    from alerts.pg_changes import ALERTS_CHANNEL, AlertChange, parse_change
    from alerts.pg_outbox import OUTBOX_CHANNEL, PgOutboxStore, enqueue, set_action
    from alerts.pg_push import PUSH_CHANNEL, PushRelay, pushed_payload
    from alerts.pg_schema import PG_MIGRATIONS
    from alerts.pg_store import PgAlertStore
    from alerts.push import PushHub
    from alerts.repository import AlertRepository
    from alerts.requests import AlertInputError, AlertSpec, parse_filter, parse_set_alert
    from alerts.service import AlertService
    from alerts.store import MIGRATIONS, AlertStore, Fired, QueueLimits, alert_of, alert_row
    from alerts.worker_evaluator import WorkerEvaluator

_HOMES = {
    "ALERTS_CHANNEL": "alerts.pg_changes",
    "ALERT_KINDS": "alerts.models",
    "ActionOutcomes": "alerts.action_store",
    "ActionRefused": "alerts.actions",
    "ActionRunner": "alerts.action_runner",
    "Alert": "alerts.models",
    "AlertChange": "alerts.pg_changes",
    "AlertEvaluator": "alerts.evaluator",
    "AlertInputError": "alerts.requests",
    "AlertRepository": "alerts.repository",
    "AlertService": "alerts.service",
    "AlertSpec": "alerts.requests",
    "AlertStore": "alerts.store",
    "ChannelRouting": "alerts.outbox_store",
    "Fired": "alerts.store",
    "Firing": "alerts.models",
    "MIGRATIONS": "alerts.store",
    "NotificationFeed": "alerts.feed",
    "OUTBOX_CHANNEL": "alerts.pg_outbox",
    "Outbox": "alerts.outbox_store",
    "OutboxRow": "alerts.outbox_store",
    "OutboxSender": "alerts.channels.sender",
    "OutboxStore": "alerts.outbox_store",
    "PG_MIGRATIONS": "alerts.pg_schema",
    "PUSH_CHANNEL": "alerts.pg_push",
    "PgActionOutcomes": "alerts.pg_action_outcomes",
    "PgAlertStore": "alerts.pg_store",
    "PgOutboxStore": "alerts.pg_outbox",
    "PushHub": "alerts.push",
    "PushRelay": "alerts.pg_push",
    "QueueLimits": "alerts.store",
    "RateBucket": "alerts.channels.sender",
    "StoredAlerts": "alerts.front_alerts",
    "Subscription": "alerts.models",
    "WorkerEvaluator": "alerts.worker_evaluator",
    "action_client_id": "alerts.actions",
    "alert_of": "alerts.store",
    "alert_row": "alerts.store",
    "enqueue": "alerts.pg_outbox",
    "notification_payload": "alerts.models",
    "parse_change": "alerts.pg_changes",
    "parse_filter": "alerts.requests",
    "parse_set_alert": "alerts.requests",
    "pushed_payload": "alerts.pg_push",
    "recent_fired": "alerts.fired_history",
    "refused_outcome": "alerts.actions",
    "set_action": "alerts.pg_outbox",
    "strip_actions": "alerts.pg_actions",
    "strip_actions_in": "alerts.action_store",
    "verify_signature": "alerts.channels.messages",
}
"""Where each public name lives, imported on first use (PEP 562) so that importing the package stays
cheap and its modules free of circles through it; a name whose home is itself a module is that module."""


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    home, _, attr = home.partition(":")  # "module:attr": the name the module gives it, when two would clash
    module = importlib.import_module(home)
    value = module if home.endswith(f".{name}") and not hasattr(module, name) else getattr(module, attr or name)
    globals()[name] = value
    return value


__all__ = [
    "ALERTS_CHANNEL",
    "ALERT_KINDS",
    "MIGRATIONS",
    "OUTBOX_CHANNEL",
    "PG_MIGRATIONS",
    "PUSH_CHANNEL",
    "ActionOutcomes",
    "ActionRefused",
    "ActionRunner",
    "Alert",
    "AlertChange",
    "AlertEvaluator",
    "AlertInputError",
    "AlertRepository",
    "AlertService",
    "AlertSpec",
    "AlertStore",
    "ChannelRouting",
    "Fired",
    "Firing",
    "NotificationFeed",
    "Outbox",
    "OutboxRow",
    "OutboxSender",
    "OutboxStore",
    "PgActionOutcomes",
    "PgAlertStore",
    "PgOutboxStore",
    "PushHub",
    "PushRelay",
    "QueueLimits",
    "RateBucket",
    "StoredAlerts",
    "Subscription",
    "WorkerEvaluator",
    "action_client_id",
    "alert_of",
    "alert_row",
    "enqueue",
    "notification_payload",
    "parse_change",
    "parse_filter",
    "parse_set_alert",
    "pushed_payload",
    "recent_fired",
    "refused_outcome",
    "set_action",
    "strip_actions",
    "strip_actions_in",
    "verify_signature",
]
