"""brokers package."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from brokers import trigger_rules
    from brokers.binance.broker import BinanceBroker
    from brokers.binance.user_stream import UserStream, UserStreamEnded
    from brokers.ccxt.broker import CcxtBroker, build_exchange
    from brokers.commission import DEFAULT_RATES, FeeRates, rates_json, rates_of
    from brokers.filters import SymbolRules
    from brokers.halt import HALTED_MESSAGE, HaltState, HaltStore, TradingHalted, check_not_halted, held_note
    from brokers.halt import MIGRATIONS as HALT_MIGRATIONS
    from brokers.halt_authority import HaltAuthority, HaltRefused
    from brokers.halt_switch import EVERYONE, CancelOutcome, HaltSwitch, Scope, cancel_open, summary
    from brokers.models import (
        OPEN,
        Actor,
        Balance,
        BrokerError,
        ExchangeList,
        ExchangeOrder,
        Fill,
        ListRequest,
        OrderRejected,
        OrderRequest,
        RateLimitedError,
        state_name,
    )
    from brokers.orders.admission import admit_in
    from brokers.orders.args import OrderInputError, parse_entry, parse_oco, parse_order, plain_decimal
    from brokers.orders.brackets import exit_request
    from brokers.orders.checks import (
        Admitted,
        LimitExceeded,
        OrderChecks,
        OrderRefused,
        SafetyLimits,
        daily_limit_refusal,
    )
    from brokers.orders.exits import ExitProcedure, exit_quantity, utc_second
    from brokers.orders.journal import EntryEnd, EntryFill, ExitJournal, ExitSent, WaitingExit
    from brokers.orders.lifecycle import Sent, send_once
    from brokers.orders.list_store import BracketPlan, ListStore, legs_of
    from brokers.orders.lists import check_order_type, new_oco
    from brokers.orders.service import UNATTENDED_PREFIX, OrderService
    from brokers.orders.settle import Kind, Unresolved, settle_intents
    from brokers.orders.sqlite_journal import SqliteExitJournal
    from brokers.orders.store import MIGRATIONS as ORDER_MIGRATIONS
    from brokers.orders.store import OrderRow, OrderStore, fill_of
    from brokers.orders.trade_legs import (
        LegDesk,
        Outcome,
        Placed,
        ServiceLegs,
        leg_client_ids,
        place_leg,
        quote_fees,
        standing,
    )
    from brokers.orders.views import order_listing
    from brokers.paper.broker import MIGRATIONS as PAPER_MIGRATIONS
    from brokers.paper.broker import PaperBroker
    from brokers.pg_suspensions import PG_SUSPENSION_MIGRATIONS, PgSuspensionStore, check_principal_in, mark_revoked
    from brokers.portfolio_view import VALUATION, Holdings, PortfolioView, Pricer, Venue, value
    from brokers.positions import positions_from_fills
    from brokers.protocol import Broker
    from brokers.public_venue import PublicVenue
    from brokers.risk_metrics import METHOD
    from brokers.schedules.pg_store import PG_SCHEDULE_MIGRATIONS, PgScheduleStore, cancel_owners
    from brokers.schedules.service import ScheduleService, client_id
    from brokers.schedules.spec import ScheduleInputError, iso, parse_spec
    from brokers.schedules.store import ACTIVE, ScheduleRow, ScheduleStore, cancel_owners_in
    from brokers.schedules.store import MIGRATIONS as SCHEDULE_MIGRATIONS
    from brokers.suspensions import MIGRATIONS as SUSPENSION_MIGRATIONS
    from brokers.suspensions import (
        REVOKED_MESSAGE,
        SUSPENDED_MESSAGE,
        PrincipalStopped,
        SuspensionService,
        SuspensionStore,
        cancel_principal_open,
        mark_revoked_in,
    )
    from brokers.trade_simulation import Code, Leg, LegResult, ServiceAccount, SimulatedAccount, Simulator, refusal_code
    from brokers.trigger_rules import CONDITIONAL_TYPES, percent_price_by_side

_HOMES = {
    "ACTIVE": "brokers.schedules.store",
    "Actor": "brokers.models",
    "Admitted": "brokers.orders.checks",
    "Balance": "brokers.models",
    "BinanceBroker": "brokers.binance.broker",
    "BracketPlan": "brokers.orders.list_store",
    "Broker": "brokers.protocol",
    "BrokerError": "brokers.models",
    "CONDITIONAL_TYPES": "brokers.trigger_rules",
    "CancelOutcome": "brokers.halt_switch",
    "CcxtBroker": "brokers.ccxt.broker",
    "Code": "brokers.trade_simulation",
    "DEFAULT_RATES": "brokers.commission",
    "EVERYONE": "brokers.halt_switch",
    "EntryEnd": "brokers.orders.journal",
    "EntryFill": "brokers.orders.journal",
    "ExchangeList": "brokers.models",
    "ExchangeOrder": "brokers.models",
    "ExitJournal": "brokers.orders.journal",
    "ExitProcedure": "brokers.orders.exits",
    "ExitSent": "brokers.orders.journal",
    "FeeRates": "brokers.commission",
    "Fill": "brokers.models",
    "HALTED_MESSAGE": "brokers.halt",
    "HALT_MIGRATIONS": "brokers.halt:MIGRATIONS",
    "admit_in": "brokers.orders.admission",
    "HaltAuthority": "brokers.halt_authority",
    "HaltRefused": "brokers.halt_authority",
    "HaltState": "brokers.halt",
    "HaltStore": "brokers.halt",
    "HaltSwitch": "brokers.halt_switch",
    "Holdings": "brokers.portfolio_view",
    "Kind": "brokers.orders.settle",
    "Leg": "brokers.trade_simulation",
    "LegDesk": "brokers.orders.trade_legs",
    "LegResult": "brokers.trade_simulation",
    "LimitExceeded": "brokers.orders.checks",
    "ListRequest": "brokers.models",
    "ListStore": "brokers.orders.list_store",
    "METHOD": "brokers.risk_metrics",
    "OPEN": "brokers.models",
    "ORDER_MIGRATIONS": "brokers.orders.store:MIGRATIONS",
    "OrderChecks": "brokers.orders.checks",
    "OrderInputError": "brokers.orders.args",
    "OrderRefused": "brokers.orders.checks",
    "OrderRejected": "brokers.models",
    "OrderRequest": "brokers.models",
    "OrderRow": "brokers.orders.store",
    "OrderService": "brokers.orders.service",
    "OrderStore": "brokers.orders.store",
    "Outcome": "brokers.orders.trade_legs",
    "PAPER_MIGRATIONS": "brokers.paper.broker:MIGRATIONS",
    "PG_SCHEDULE_MIGRATIONS": "brokers.schedules.pg_store",
    "PG_SUSPENSION_MIGRATIONS": "brokers.pg_suspensions",
    "PaperBroker": "brokers.paper.broker",
    "PgScheduleStore": "brokers.schedules.pg_store",
    "PgSuspensionStore": "brokers.pg_suspensions",
    "Placed": "brokers.orders.trade_legs",
    "PortfolioView": "brokers.portfolio_view",
    "Pricer": "brokers.portfolio_view",
    "PrincipalStopped": "brokers.suspensions",
    "PublicVenue": "brokers.public_venue",
    "REVOKED_MESSAGE": "brokers.suspensions",
    "RateLimitedError": "brokers.models",
    "SCHEDULE_MIGRATIONS": "brokers.schedules.store:MIGRATIONS",
    "SUSPENDED_MESSAGE": "brokers.suspensions",
    "SUSPENSION_MIGRATIONS": "brokers.suspensions:MIGRATIONS",
    "SafetyLimits": "brokers.orders.checks",
    "ScheduleInputError": "brokers.schedules.spec",
    "ScheduleRow": "brokers.schedules.store",
    "ScheduleService": "brokers.schedules.service",
    "ScheduleStore": "brokers.schedules.store",
    "Scope": "brokers.halt_switch",
    "Sent": "brokers.orders.lifecycle",
    "ServiceAccount": "brokers.trade_simulation",
    "ServiceLegs": "brokers.orders.trade_legs",
    "SimulatedAccount": "brokers.trade_simulation",
    "Simulator": "brokers.trade_simulation",
    "SqliteExitJournal": "brokers.orders.sqlite_journal",
    "SuspensionService": "brokers.suspensions",
    "SuspensionStore": "brokers.suspensions",
    "SymbolRules": "brokers.filters",
    "TradingHalted": "brokers.halt",
    "UNATTENDED_PREFIX": "brokers.orders.service",
    "Unresolved": "brokers.orders.settle",
    "UserStream": "brokers.binance.user_stream",
    "UserStreamEnded": "brokers.binance.user_stream",
    "VALUATION": "brokers.portfolio_view",
    "Venue": "brokers.portfolio_view",
    "WaitingExit": "brokers.orders.journal",
    "build_exchange": "brokers.ccxt.broker",
    "cancel_open": "brokers.halt_switch",
    "cancel_owners": "brokers.schedules.pg_store",
    "cancel_owners_in": "brokers.schedules.store",
    "cancel_principal_open": "brokers.suspensions",
    "check_not_halted": "brokers.halt",
    "check_order_type": "brokers.orders.lists",
    "check_principal_in": "brokers.pg_suspensions",
    "client_id": "brokers.schedules.service",
    "daily_limit_refusal": "brokers.orders.checks",
    "exit_quantity": "brokers.orders.exits",
    "exit_request": "brokers.orders.brackets",
    "fill_of": "brokers.orders.store",
    "held_note": "brokers.halt",
    "iso": "brokers.schedules.spec",
    "leg_client_ids": "brokers.orders.trade_legs",
    "legs_of": "brokers.orders.list_store",
    "mark_revoked": "brokers.pg_suspensions",
    "mark_revoked_in": "brokers.suspensions",
    "new_oco": "brokers.orders.lists",
    "order_listing": "brokers.orders.views",
    "parse_entry": "brokers.orders.args",
    "parse_oco": "brokers.orders.args",
    "parse_order": "brokers.orders.args",
    "parse_spec": "brokers.schedules.spec",
    "percent_price_by_side": "brokers.trigger_rules",
    "place_leg": "brokers.orders.trade_legs",
    "plain_decimal": "brokers.orders.args",
    "positions_from_fills": "brokers.positions",
    "quote_fees": "brokers.orders.trade_legs",
    "rates_json": "brokers.commission",
    "rates_of": "brokers.commission",
    "refusal_code": "brokers.trade_simulation",
    "send_once": "brokers.orders.lifecycle",
    "settle_intents": "brokers.orders.settle",
    "standing": "brokers.orders.trade_legs",
    "state_name": "brokers.models",
    "summary": "brokers.halt_switch",
    "trigger_rules": "brokers.trigger_rules",
    "utc_second": "brokers.orders.exits",
    "value": "brokers.portfolio_view",
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
    "ACTIVE",
    "CONDITIONAL_TYPES",
    "DEFAULT_RATES",
    "EVERYONE",
    "HALTED_MESSAGE",
    "HALT_MIGRATIONS",
    "METHOD",
    "OPEN",
    "ORDER_MIGRATIONS",
    "PAPER_MIGRATIONS",
    "PG_SCHEDULE_MIGRATIONS",
    "PG_SUSPENSION_MIGRATIONS",
    "REVOKED_MESSAGE",
    "SCHEDULE_MIGRATIONS",
    "SUSPENDED_MESSAGE",
    "SUSPENSION_MIGRATIONS",
    "UNATTENDED_PREFIX",
    "VALUATION",
    "Actor",
    "Admitted",
    "Balance",
    "BinanceBroker",
    "BracketPlan",
    "Broker",
    "BrokerError",
    "CancelOutcome",
    "CcxtBroker",
    "Code",
    "EntryEnd",
    "EntryFill",
    "ExchangeList",
    "ExchangeOrder",
    "ExitJournal",
    "ExitProcedure",
    "ExitSent",
    "FeeRates",
    "Fill",
    "HaltAuthority",
    "HaltRefused",
    "HaltState",
    "HaltStore",
    "HaltSwitch",
    "Holdings",
    "Kind",
    "Leg",
    "LegDesk",
    "LegResult",
    "LimitExceeded",
    "ListRequest",
    "ListStore",
    "OrderChecks",
    "OrderInputError",
    "OrderRefused",
    "OrderRejected",
    "OrderRequest",
    "OrderRow",
    "OrderService",
    "OrderStore",
    "Outcome",
    "PaperBroker",
    "PgScheduleStore",
    "PgSuspensionStore",
    "Placed",
    "PortfolioView",
    "Pricer",
    "PrincipalStopped",
    "PublicVenue",
    "RateLimitedError",
    "SafetyLimits",
    "ScheduleInputError",
    "ScheduleRow",
    "ScheduleService",
    "ScheduleStore",
    "Scope",
    "Sent",
    "ServiceAccount",
    "ServiceLegs",
    "SimulatedAccount",
    "Simulator",
    "SqliteExitJournal",
    "SuspensionService",
    "SuspensionStore",
    "SymbolRules",
    "TradingHalted",
    "Unresolved",
    "UserStream",
    "UserStreamEnded",
    "Venue",
    "WaitingExit",
    "admit_in",
    "build_exchange",
    "cancel_open",
    "cancel_owners",
    "cancel_owners_in",
    "cancel_principal_open",
    "check_not_halted",
    "check_order_type",
    "check_principal_in",
    "client_id",
    "daily_limit_refusal",
    "exit_quantity",
    "exit_request",
    "fill_of",
    "held_note",
    "iso",
    "leg_client_ids",
    "legs_of",
    "mark_revoked",
    "mark_revoked_in",
    "new_oco",
    "order_listing",
    "parse_entry",
    "parse_oco",
    "parse_order",
    "parse_spec",
    "percent_price_by_side",
    "place_leg",
    "plain_decimal",
    "positions_from_fills",
    "quote_fees",
    "rates_json",
    "rates_of",
    "refusal_code",
    "send_once",
    "settle_intents",
    "standing",
    "state_name",
    "summary",
    "trigger_rules",
    "utc_second",
    "value",
]
