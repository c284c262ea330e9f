"""The chartgen process: CLI, process modes, wiring, logging and (later) supervision.

Only this package wires concrete objects together (design.md §1).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.commands.cluster import CLUSTER_MIGRATIONS
    from daemon.database import ALL_MIGRATIONS, open_database
    from daemon.http_server import serving
    from daemon.logging import configure_logging
    from daemon.parts.cluster_actions import CHECKED_WHEN_FIRED, ClusterActionExecutor
    from daemon.parts.engine import running_engine
    from daemon.parts.orders import EngineQuotes
    from daemon.parts.push_bus import BusPushListener, BusSettingsError, PushAnnouncer, connect_bus
    from daemon.parts.services import daemon_services
    from daemon.single.modes import token_authenticator
    from daemon.trades_log import TradesLog
    from daemon.worker.channels import LEASE_NAME, ChannelDelivery
    from daemon.worker.handover import hand_over, missed_by_closes, missed_by_signals, missed_by_trades, signal_request

_HOMES = {
    "ALL_MIGRATIONS": "daemon.database",
    "BusPushListener": "daemon.parts.push_bus",
    "BusSettingsError": "daemon.parts.push_bus",
    "CHECKED_WHEN_FIRED": "daemon.parts.cluster_actions",
    "CLUSTER_MIGRATIONS": "daemon.commands.cluster",
    "ChannelDelivery": "daemon.worker.channels",
    "ClusterActionExecutor": "daemon.parts.cluster_actions",
    "EngineQuotes": "daemon.parts.orders",
    "LEASE_NAME": "daemon.worker.channels",
    "PushAnnouncer": "daemon.parts.push_bus",
    "TradesLog": "daemon.trades_log",
    "configure_logging": "daemon.logging",
    "connect_bus": "daemon.parts.push_bus",
    "daemon_services": "daemon.parts.services",
    "hand_over": "daemon.worker.handover",
    "missed_by_closes": "daemon.worker.handover",
    "missed_by_signals": "daemon.worker.handover",
    "missed_by_trades": "daemon.worker.handover",
    "open_database": "daemon.database",
    "running_engine": "daemon.parts.engine",
    "serving": "daemon.http_server",
    "signal_request": "daemon.worker.handover",
    "token_authenticator": "daemon.single.modes",
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
    "ALL_MIGRATIONS",
    "CHECKED_WHEN_FIRED",
    "CLUSTER_MIGRATIONS",
    "LEASE_NAME",
    "BusPushListener",
    "BusSettingsError",
    "ChannelDelivery",
    "ClusterActionExecutor",
    "EngineQuotes",
    "PushAnnouncer",
    "TradesLog",
    "configure_logging",
    "connect_bus",
    "daemon_services",
    "hand_over",
    "missed_by_closes",
    "missed_by_signals",
    "missed_by_trades",
    "open_database",
    "running_engine",
    "serving",
    "signal_request",
    "token_authenticator",
]
