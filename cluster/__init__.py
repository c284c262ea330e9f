"""Scale-out building blocks on PostgreSQL (design.md §11): leader leases with fencing, membership
by heartbeats, markets assigned to live workers by rendezvous hashing."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cluster import bracket_exits, order_leader
    from cluster.account_mirror import ACCOUNT_MIGRATIONS, MIRROR_S, AccountMirror, AccountView
    from cluster.bus import Bus, Subscription
    from cluster.bus_commands import Command, CommandName, CommandSubscription, send_command
    from cluster.bus_errors import BusError
    from cluster.bus_prices import BusPrices, TickMessage
    from cluster.bus_streams import BusLimits
    from cluster.bus_subjects import SUBJECT_ROOT, encode_token, market_subject, notify_subject
    from cluster.followed import FOLLOWED_MIGRATIONS, UNIVERSE_SQL, FollowedMarkets
    from cluster.front_desk import FrontLegs, FrontSimulation
    from cluster.front_orders import FrontOrders, placed_result
    from cluster.halt import HALT_MIGRATIONS, ClusterHalt, PrincipalCancels, read_in
    from cluster.lease import LEASE_MIGRATIONS, Lease, LeaseLost, Leases
    from cluster.marks import MARK_MIGRATIONS, MarketMarks
    from cluster.membership import MEMBER_MIGRATIONS, MarketAssignment, Membership, assign, new_member_id, owner_of
    from cluster.order_leader import ORDER_PATH_MIGRATIONS, OrderLeader, run_leader
    from cluster.orders import INTENTS_CHANNEL, ORDER_MIGRATIONS, Answer, OrderIntents, lease_name, record_intent_in
    from cluster.schedule_runs import IntentRuns

_HOMES = {
    "ACCOUNT_MIGRATIONS": "cluster.account_mirror",
    "AccountMirror": "cluster.account_mirror",
    "AccountView": "cluster.account_mirror",
    "Answer": "cluster.orders",
    "Bus": "cluster.bus",
    "BusError": "cluster.bus_errors",
    "BusLimits": "cluster.bus_streams",
    "BusPrices": "cluster.bus_prices",
    "ClusterHalt": "cluster.halt",
    "Command": "cluster.bus_commands",
    "CommandName": "cluster.bus_commands",
    "CommandSubscription": "cluster.bus_commands",
    "FOLLOWED_MIGRATIONS": "cluster.followed",
    "FollowedMarkets": "cluster.followed",
    "FrontLegs": "cluster.front_desk",
    "FrontOrders": "cluster.front_orders",
    "FrontSimulation": "cluster.front_desk",
    "HALT_MIGRATIONS": "cluster.halt",
    "INTENTS_CHANNEL": "cluster.orders",
    "IntentRuns": "cluster.schedule_runs",
    "LEASE_MIGRATIONS": "cluster.lease",
    "Lease": "cluster.lease",
    "LeaseLost": "cluster.lease",
    "Leases": "cluster.lease",
    "MARK_MIGRATIONS": "cluster.marks",
    "MEMBER_MIGRATIONS": "cluster.membership",
    "MIRROR_S": "cluster.account_mirror",
    "MarketAssignment": "cluster.membership",
    "MarketMarks": "cluster.marks",
    "Membership": "cluster.membership",
    "ORDER_MIGRATIONS": "cluster.orders",
    "ORDER_PATH_MIGRATIONS": "cluster.order_leader",
    "OrderIntents": "cluster.orders",
    "OrderLeader": "cluster.order_leader",
    "PrincipalCancels": "cluster.halt",
    "SUBJECT_ROOT": "cluster.bus_subjects",
    "Subscription": "cluster.bus",
    "TickMessage": "cluster.bus_prices",
    "UNIVERSE_SQL": "cluster.followed",
    "assign": "cluster.membership",
    "bracket_exits": "cluster.bracket_exits",
    "encode_token": "cluster.bus_subjects",
    "lease_name": "cluster.orders",
    "market_subject": "cluster.bus_subjects",
    "new_member_id": "cluster.membership",
    "notify_subject": "cluster.bus_subjects",
    "order_leader": "cluster.order_leader",
    "owner_of": "cluster.membership",
    "placed_result": "cluster.front_orders",
    "read_in": "cluster.halt",
    "record_intent_in": "cluster.orders",
    "run_leader": "cluster.order_leader",
    "send_command": "cluster.bus_commands",
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
    "ACCOUNT_MIGRATIONS",
    "FOLLOWED_MIGRATIONS",
    "HALT_MIGRATIONS",
    "INTENTS_CHANNEL",
    "LEASE_MIGRATIONS",
    "MARK_MIGRATIONS",
    "MEMBER_MIGRATIONS",
    "MIRROR_S",
    "ORDER_MIGRATIONS",
    "ORDER_PATH_MIGRATIONS",
    "SUBJECT_ROOT",
    "UNIVERSE_SQL",
    "AccountMirror",
    "AccountView",
    "Answer",
    "Bus",
    "BusError",
    "BusLimits",
    "BusPrices",
    "ClusterHalt",
    "Command",
    "CommandName",
    "CommandSubscription",
    "FollowedMarkets",
    "FrontLegs",
    "FrontOrders",
    "FrontSimulation",
    "IntentRuns",
    "Lease",
    "LeaseLost",
    "Leases",
    "MarketAssignment",
    "MarketMarks",
    "Membership",
    "OrderIntents",
    "OrderLeader",
    "PrincipalCancels",
    "Subscription",
    "TickMessage",
    "assign",
    "bracket_exits",
    "encode_token",
    "lease_name",
    "market_subject",
    "new_member_id",
    "notify_subject",
    "order_leader",
    "owner_of",
    "placed_result",
    "read_in",
    "record_intent_in",
    "run_leader",
    "send_command",
]
