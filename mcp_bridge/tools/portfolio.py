"""get_portfolio, trade_simulate and trade_execute: the account as a portfolio, what-if trades, and trades.

All three follow the agent convention (:mod:`mcp_bridge.tools.agent_calls`) and need the trading
engine (``--trade``) or a cluster front, and the ``trade`` scope.  A cluster front reads the order
leader's mirror of the account, priced with Binance's public market data (:func:`account_of`),
simulates with the leader's guard rails and places legs as order intents (cluster/front_desk.py).
The valuation rule is :mod:`brokers.portfolio_view`'s, the simulation
:mod:`brokers.trade_simulation`'s (guard dry run, fees, risk metrics of :mod:`brokers.risk_metrics`);
execution goes leg by leg through the one order path (:mod:`brokers.orders.trade_legs`), owned by the
calling principal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict
from decimal import Decimal
from typing import Annotated, Any, Literal, TypeVar

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from brokers import (
    METHOD,
    VALUATION,
    Holdings,
    Leg,
    LegDesk,
    LegResult,
    OrderInputError,
    OrderService,
    PortfolioView,
    Pricer,
    ServiceAccount,
    ServiceLegs,
    SimulatedAccount,
    Simulator,
    Venue,
    leg_client_ids,
    parse_order,
    place_leg,
    value,
)
from mcp_bridge.tools.agent_calls import AgentArgs, AgentCall, AgentError, Code, SourcedData, agent_unit
from mcp_bridge.tools.context import AccountReader
from mcp_bridge.tools.portfolio_texts import GET_PORTFOLIO_TEXT, TRADE_EXECUTE_TEXT, TRADE_SIMULATE_TEXT
from mcp_bridge.tools.unit import READ_REMOTE, TRADE_REMOTE, ToolContext, ToolUnit

MAX_LEGS = 25
T = TypeVar("T")
A = TypeVar("A", bound=AgentArgs)
D = TypeVar("D", bound=SourcedData)
USER_ID = "Your own principal (default); another's needs admin. The portfolio is the exchange account's either way"

Symbol = Annotated[
    str, StringConstraints(strip_whitespace=True, to_upper=True, min_length=1, max_length=20, pattern=r"^[A-Za-z0-9]+$")
]
Positive = Annotated[float, Field(gt=0, le=1e15, allow_inf_nan=False)]


def _node_or_front(ctx: ToolContext, on_node: Callable[[OrderService], T], at_front: T | None) -> T:
    """``on_node`` over the order service, else a cluster front's ``at_front``, else NOT_AVAILABLE."""
    if ctx.services.orders is not None:
        return on_node(ctx.services.orders)
    if at_front is not None:
        return at_front
    raise AgentError(Code.NOT_AVAILABLE, ctx.services.not_running_note())


def simulated_of(ctx: ToolContext) -> SimulatedAccount:
    """The account a simulation reads: the order service's, else a cluster front's."""
    return _node_or_front(ctx, ServiceAccount, ctx.services.front_simulation)


def legs_of(ctx: ToolContext) -> LegDesk:
    """Where real legs go: the order service, else a cluster front's order intents."""
    return _node_or_front(ctx, ServiceLegs, ctx.services.front_legs)


def account_of(ctx: ToolContext) -> tuple[AccountReader, Venue]:
    """The account and where its pairs are priced: the order service and its broker, else a cluster
    front's mirror of the account and Binance's public market data."""
    if ctx.services.orders is not None:
        return ctx.services.orders, ctx.services.orders.broker
    if ctx.services.front_account is not None and ctx.services.venue is not None:
        return ctx.services.front_account, ctx.services.venue
    raise AgentError(Code.NOT_AVAILABLE, ctx.services.not_running_note())


def pricer_of(ctx: ToolContext) -> Pricer:
    quotes = None
    if ctx.services.market is not None:
        from mcp_bridge.tools.market import sources

        quotes = sources(ctx.services)[0]
    return Pricer(account_of(ctx)[1], ctx.services.engine, quotes)


def _opt(x: float | None) -> Decimal | None:
    return None if x is None else dec(x)


def dec(x: float) -> Decimal:
    """A JSON number as the Decimal its shortest text spells (0.001 → Decimal('0.001'))."""
    return Decimal(repr(x))


# --- get_portfolio ---------------------------------------------------------------------------------
class GetPortfolioArgs(AgentArgs):
    user_id: str | None = Field(default=None, min_length=1, max_length=128, description=USER_ID)


class Out(BaseModel):
    """Output models read straight from the brokers' dataclasses."""

    model_config = ConfigDict(from_attributes=True)


class PositionOut(Out):
    symbol: str = Field(description="The pair the asset is valued on (BTCUSDT)")
    asset: str
    quantity: float = Field(description="Free + locked balance of the asset")
    avg_price: float | None = Field(description="Average entry of the fills this daemon recorded (null: none)")
    current_price: float
    market_value: float
    weight: float = Field(description="market_value / total_value")


class UnvaluedOut(Out):
    asset: str
    quantity: float
    reason: str


class PortfolioOut(Out):
    positions: list[PositionOut]
    cash: float = Field(description="USDT + USDC + FDUSD + BUSD balances (free + locked), 1:1 in USDT")
    total_value: float = Field(description="cash + the market value of every valued position, in USDT")
    valuation_currency: str = VALUATION
    cash_by_asset: dict[str, float]
    unvalued: list[UnvaluedOut] = Field(description="Assets without a USDT pair or a price: not in total_value")


class PortfolioData(SourcedData):
    portfolio: PortfolioOut
    account: str = Field(description="Whose account: the broker's exchange account (shared by every principal)")


async def get_portfolio(ctx: ToolContext, args: GetPortfolioArgs, call: AgentCall) -> PortfolioData:
    if args.user_id is not None and not ctx.admin and args.user_id != ctx.principal:
        raise AgentError(
            Code.INVALID_ARGUMENT,
            f"user_id {args.user_id!r} is not your principal ({ctx.principal or 'unauthenticated'}); omit user_id "
            "(the portfolio is the exchange account's, the same for every caller) or call with an admin token",
        )
    account, venue = account_of(ctx)
    try:
        positions = await account.get_positions()
    except OrderInputError as exc:  # a cluster front's mirror is missing or stale
        raise AgentError(Code.NOT_AVAILABLE, str(exc)) from exc
    avg = {
        p["symbol"]: p["entry_price"]
        for p in positions
        if p["side"] == "buy" and p["quantity"] > 0 and p["entry_price"]
    }
    call.cite(f"{venue.name}:fills")
    return PortfolioData(portfolio=PortfolioOut.model_validate(await _valued(ctx, call, avg)), account=venue.name)


# --- trade_simulate --------------------------------------------------------------------------------
class SimLegIn(BaseModel):
    model_config = {"extra": "forbid"}

    symbol: Symbol = Field(description="An exchange pair such as BTCUSDT")
    action: Literal["buy", "sell"]
    quantity: Positive = Field(description="Base-asset quantity, > 0")
    price: Positive | None = Field(default=None, description="Limit price; absent: a market order")


class SimulateArgs(AgentArgs):
    trades: list[SimLegIn] = Field(min_length=1, max_length=MAX_LEGS, description=f"1 to {MAX_LEGS} legs, in order")


class LegError(BaseModel):
    code: str
    message: str


class SimTradeOut(BaseModel):
    symbol: str
    action: str
    quantity: float
    price: float | None = Field(description="Fill price (market: the guard's reference price; limit: its price)")
    fees: float = Field(description="In the pair's quote asset")
    total_cost: float = Field(description="Buy: notional + fees; sell: −(notional − fees) (money received)")
    status: Literal["filled", "refused"]
    error: LegError | None = None
    fee_rate: float | None = None
    liquidity: Literal["maker", "taker"] | None = None
    fee_source: str | None = None
    quote_asset: str | None = None


class SimPositionOut(Out):
    symbol: str
    quantity: float
    market_value: float
    weight: float


class SimPortfolioOut(Out):
    total_value: float
    cash: float
    positions: list[SimPositionOut]
    unvalued: list[UnvaluedOut] = Field(default_factory=list)


class RiskOut(BaseModel):
    var_95_1d: float | None = Field(description="Historical 1-day VaR at 95 %, a positive fraction of value")
    max_drawdown: float | None = Field(description="Largest fall from a running peak, a positive fraction")
    sharpe_ratio: float | None = Field(description="Annualised with √365")
    reasons: dict[str, str] = Field(default_factory=dict, description="Why a metric is null")
    method: str
    lookback_days: int
    observations: int = Field(description="Daily returns used")
    risk_free_rate: float


class SimulationOut(BaseModel):
    trades: list[SimTradeOut]
    portfolio_after: SimPortfolioOut
    portfolio_before: SimPortfolioOut
    risk_metrics: RiskOut


class SimulateData(SourcedData):
    simulation: SimulationOut


def _leg_name(i: int, r: LegResult) -> str:
    return f"leg {i + 1} ({r.leg.side} {r.leg.quantity.normalize():f} {r.leg.symbol})"


def _trade_out(r: LegResult) -> SimTradeOut:
    return SimTradeOut(
        symbol=r.leg.symbol, action=r.leg.side.lower(), quantity=float(r.leg.quantity), price=r.price,
        fees=r.fees, total_cost=r.total_cost, status=r.status,
        error=None if r.code is None else LegError(code=r.code, message=r.message or ""),
        fee_rate=r.fee_rate, liquidity=r.liquidity, fee_source=r.fee_source, quote_asset=r.quote_asset,
    )  # fmt: skip


async def trade_simulate(ctx: ToolContext, args: SimulateArgs, call: AgentCall) -> SimulateData:
    account = simulated_of(ctx)
    settings = ctx.services.agent
    legs = [Leg(t.symbol, "BUY" if t.action == "buy" else "SELL", dec(t.quantity), _opt(t.price)) for t in args.trades]
    rf, days = settings.risk_free_rate, settings.risk_lookback_days
    try:
        sim = await Simulator(account, pricer_of(ctx), ctx.services.market, rf_annual=rf, days=days).run(legs)
    except OrderInputError as exc:  # a cluster front's mirror of the account missing or stale
        raise AgentError(Code.NOT_AVAILABLE, str(exc)) from exc
    refused = [(i, r) for i, r in enumerate(sim.legs) if r.status == "refused"]
    limited = [(i, r) for i, r in refused if r.code == "RISK_LIMIT_EXCEEDED"]
    if limited or (refused and len(refused) == len(sim.legs)):
        worst = limited or refused
        code = Code(worst[0][1].code or "INVALID_ARGUMENT")
        text = "; ".join(f"{_leg_name(i, r)}: [{r.code}] {r.message}" for i, r in worst)
        raise AgentError(code, f"simulation refused, nothing was sent — {text}")
    call.cite(f"{account.name}:balances")
    for ref in sim.refs:
        call.cite(ref)
    return SimulateData(
        simulation=SimulationOut(
            trades=[_trade_out(r) for r in sim.legs],
            portfolio_after=SimPortfolioOut.model_validate(sim.after),
            portfolio_before=SimPortfolioOut.model_validate(sim.before),
            risk_metrics=RiskOut(
                **asdict(sim.risk),
                method=METHOD,
                lookback_days=sim.lookback_days,
                risk_free_rate=settings.risk_free_rate,
            ),
        )
    )


# --- trade_execute ---------------------------------------------------------------------------------
class ExecuteLeg(BaseModel):
    model_config = {"extra": "forbid"}

    symbol: Symbol = Field(description="An exchange pair such as BTCUSDT")
    action: Literal["buy", "sell"]
    quantity: Positive = Field(description="Base-asset quantity, > 0")
    order_type: Literal["market", "limit", "stop"]
    price: Positive | None = Field(default=None, description="Limit price (limit; stop: makes it a stop-limit)")
    stop_price: Positive | None = Field(default=None, description="Trigger price (stop orders)")

    @model_validator(mode="after")
    def _parses(self) -> ExecuteLeg:
        parse_order(self.order_args("check"))  # the order path's own argument checks (OrderInputError)
        return self

    def order_args(self, client_order_id: str) -> dict[str, Any]:
        args: dict[str, Any] = {
            "symbol": self.symbol, "side": self.action, "type": self.order_type,
            "quantity": str(dec(self.quantity)), "client_order_id": client_order_id,
        }  # fmt: skip
        if self.price is not None:
            args["price"] = str(dec(self.price))
        if self.stop_price is not None:
            args["stop_price"] = str(dec(self.stop_price))
        return args


class ExecTradeOut(BaseModel):
    symbol: str
    action: str
    quantity: float
    order_type: str
    price: float | None = Field(description="Average fill price, else the limit (or stop) price")
    fees: float = Field(description="Commissions valued in the quote asset")
    total_cost: float = Field(description="Buy: traded value + fees; sell: −(traded value − fees)")
    order_id: str | None = Field(description="The client order id (null: refused before it was recorded)")
    status: Literal["filled", "partial", "open", "expired", "pending", "rejected"]
    filled_quantity: float = 0.0
    exchange_status: str | None = None
    error: LegError | None = None
    replayed: bool = Field(default=False, description="Placed by an earlier call with this tool_call_id")


class ExecutionOut(BaseModel):
    trades: list[ExecTradeOut]
    portfolio_after: SimPortfolioOut


class ExecuteData(SourcedData):
    execution: ExecutionOut


class ExecuteArgs(AgentArgs):
    trades: list[ExecuteLeg] = Field(
        min_length=1, max_length=MAX_LEGS, description=f"1 to {MAX_LEGS} legs, sent in order"
    )


async def _leg_out(desk: LegDesk, quotes: Any | None, leg: ExecuteLeg, cid: str, principal: str) -> ExecTradeOut:
    placed = await place_leg(desk, leg.order_args(cid), principal, quotes)
    o = placed.outcome
    code, message = placed.code, placed.message
    if o is not None and o.status == "rejected" and code is None:
        code, message = "INVALID_ARGUMENT", o.reject_reason or "rejected by the exchange"
    return ExecTradeOut(
        symbol=leg.symbol, action=leg.action, quantity=float(leg.quantity), order_type=leg.order_type,
        price=o.price if o else (leg.price or leg.stop_price), fees=o.fees if o else 0.0,
        total_cost=o.total_cost if o else 0.0, order_id=placed.client_order_id,
        status=o.status if o else "rejected",  # type: ignore[arg-type]  # brokers' Outcome.status: a plain str
        filled_quantity=o.filled if o else 0.0,
        exchange_status=placed.exchange_status, replayed=placed.replayed,
        error=None if code is None else LegError(code=code, message=message or ""),
    )  # fmt: skip


async def _valued(ctx: ToolContext, call: AgentCall, avg: dict[str, float] | None = None) -> PortfolioView:
    """The account's portfolio now (balances, prices), its sources cited."""
    (account, venue), pricer = account_of(ctx), pricer_of(ctx)
    try:
        holdings = Holdings.of(await account.balances())
    except OrderInputError as exc:
        raise AgentError(Code.NOT_AVAILABLE, str(exc)) from exc
    call.cite(f"{venue.name}:balances")
    prices = await pricer.prices([f"{a}{VALUATION}" for a in holdings.non_cash()])
    for ref in (r for p in prices.values() if not isinstance(p, str) for r in p.refs):
        call.cite(ref)
    return value(holdings, prices, avg)


async def trade_execute(ctx: ToolContext, args: ExecuteArgs, call: AgentCall) -> ExecuteData:
    desk, quotes, principal = legs_of(ctx), pricer_of(ctx).quotes, ctx.require_principal()
    ids = leg_client_ids(principal, args.tool_call_id, len(args.trades))
    out = [await _leg_out(desk, quotes, leg, cid, principal) for leg, cid in zip(args.trades, ids, strict=True)]
    if all(t.status == "rejected" for t in out):
        text = "; ".join(
            f"leg {i + 1} ({t.action} {t.quantity:g} {t.symbol}): [{t.error.code}] {t.error.message}"
            for i, t in enumerate(out)
            if t.error is not None
        )
        raise AgentError(
            Code(out[0].error.code if out[0].error else "INVALID_ARGUMENT"),
            f"every leg was rejected, nothing was executed — {text}",
        )
    for t in out:
        if t.order_id is not None:
            call.cite(f"order:{t.order_id}")
    after = SimPortfolioOut.model_validate(await _valued(ctx, call))
    return ExecuteData(execution=ExecutionOut(trades=out, portfolio_after=after))


def _unit(
    name: str,
    group: str,
    hints: types.ToolAnnotations,
    args: type[A],
    data: type[D],
    run: Callable[[ToolContext, A, AgentCall], Awaitable[D]],
    text: str,
) -> ToolUnit[Any]:
    return agent_unit(
        name=name, description=" ".join(text.split()), args=args, data=data, handler=run, group=group, annotations=hints
    )


UNITS: tuple[ToolUnit[Any], ...] = (
    _unit(
        "get_portfolio", "portfolio", READ_REMOTE, GetPortfolioArgs, PortfolioData, get_portfolio, GET_PORTFOLIO_TEXT
    ),
    _unit("trade_simulate", "portfolio", READ_REMOTE, SimulateArgs, SimulateData, trade_simulate, TRADE_SIMULATE_TEXT),
    _unit("trade_execute", "trading", TRADE_REMOTE, ExecuteArgs, ExecuteData, trade_execute, TRADE_EXECUTE_TEXT),
)
