"""MCP prompts ``trading_analysis`` and ``portfolio_risk``: their arguments, output and error codes.

``trading_analysis {symbol, strategy?, risk_tolerance?}`` renders the market's 24-hour
picture (price, change, high, low, volume) with entry, stop and target levels derived from
it for the chosen strategy and risk tolerance; ``portfolio_risk {}`` renders the account's
non-zero balances as a table with estimated USD values, the composition by volatility
class and a diversification assessment.  Both are markdown in one user message, ending with
a UTC timestamp.  Errors are JSON-RPC errors with the contract's codes: -32602 invalid
arguments, -32003 invalid symbol (with examples and a recovery hint), -32001 rate limited
(with ``retry_after_secs``), -32002 invalid credentials (key masked), -32603 internal.
The data comes through :class:`PromptData`, which the daemon implements over the engine's
market data and the running broker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol

import mcp_types as types
from mcp.shared.exceptions import MCPError

SYMBOL_PATTERN = re.compile(r"^[A-Z]{2,10}USDT$")
STRATEGIES = ("aggressive", "balanced", "conservative")
RISK_LEVELS = ("low", "medium", "high")
STABLES = frozenset({"USDT", "USDC", "BUSD", "FDUSD", "TUSD", "DAI"})
VOLATILITY = {"BTC": "High volatility", "ETH": "Medium-high volatility", "BNB": "Medium volatility"}
NAMES = {
    "BTC": "Bitcoin",
    "ETH": "Ethereum",
    "BNB": "Binance Coin",
    "USDT": "Tether",
    "SOL": "Solana",
    "USDC": "USD Coin",
}


@dataclass(frozen=True, slots=True)
class Quote:
    symbol: str
    price: Decimal
    change: Decimal
    change_percent: Decimal
    high: Decimal
    low: Decimal
    volume: Decimal


@dataclass(frozen=True, slots=True)
class Holding:
    asset: str
    free: Decimal
    locked: Decimal

    @property
    def total(self) -> Decimal:
        return self.free + self.locked


class PromptRateLimited(Exception):
    def __init__(self, retry_after_secs: int, current_weight: int | None = None, weight_limit: int | None = None):
        super().__init__(f"retry after {retry_after_secs} s")
        self.retry_after_secs = retry_after_secs
        self.current_weight = current_weight
        self.weight_limit = weight_limit


class PromptCredentialsError(Exception):
    def __init__(self, masked_key: str):
        super().__init__("invalid credentials")
        self.masked_key = masked_key


class PromptData(Protocol):
    """What the prompts need from the daemon (market data and the account)."""

    async def quote(self, symbol: str) -> Quote | None:
        """The 24-hour picture of ``symbol``, or None if the exchange does not list it."""

    async def holdings(self) -> list[Holding] | None:
        """Non-zero balances of the account, or None when no broker runs."""


PROMPTS = [
    types.Prompt(
        name="trading_analysis",
        description="Analyze market conditions for a specific cryptocurrency and provide trading recommendations",
        arguments=[
            types.PromptArgument(
                name="symbol", description="Trading pair symbol (e.g., BTCUSDT, ETHUSDT)", required=True
            ),
            types.PromptArgument(
                name="strategy",
                description="Trading strategy preference: aggressive, balanced, or conservative",
                required=False,
            ),
            types.PromptArgument(
                name="risk_tolerance", description="Risk tolerance level: low, medium, or high", required=False
            ),
        ],
    ),
    types.Prompt(
        name="portfolio_risk",
        description="Assess portfolio risk and provide diversification recommendations based on current holdings",
        arguments=[],
    ),
]


def _stamp() -> str:
    return f"*Last updated: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC*"


def _usd(x: Decimal) -> str:
    return f"${x:,.2f}"


def _qty(x: Decimal) -> str:
    return f"{x:,.8f}".rstrip("0").rstrip(".") if x != x.to_integral_value() else f"{x:,.4f}"


def _escape(text: str) -> str:
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|])", r"\\\1", text)


def _message(text: str, description: str) -> types.GetPromptResult:
    return types.GetPromptResult(
        description=description,
        messages=[types.PromptMessage(role="user", content=types.TextContent(text=text))],
    )


def _invalid_symbol(symbol: str) -> MCPError:
    return MCPError(
        -32003,
        f"Invalid trading symbol '{symbol[:40]}'. Expected format: BTCUSDT, ETHUSDT",
        {
            "provided_symbol": symbol[:40],
            "valid_examples": ["BTCUSDT", "ETHUSDT", "BNBUSDT"],
            "recovery_suggestion": "Use uppercase symbols without separators (e.g., BTCUSDT, not BTC-USDT)",
        },
    )


def _choice(args: dict[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = args.get(name)
    if value is None or value == "":
        return default
    if not isinstance(value, str) or value.lower() not in allowed:
        raise MCPError(
            -32602, f"Invalid {name} {str(value)[:40]!r}: use one of {', '.join(allowed)}", {"argument": name}
        )
    return value.lower()


def _levels(q: Quote, strategy: str, risk: str) -> tuple[Decimal, Decimal, Decimal, Decimal]:
    """(entry low, entry high, stop, take profit) from the day's range, by strategy and risk tolerance."""
    span = max(q.high - q.low, q.price * Decimal("0.005"))
    width = {"low": Decimal("0.5"), "medium": Decimal(1), "high": Decimal("1.5")}[risk]
    if strategy == "aggressive":
        entry_lo, entry_hi = q.price - span * Decimal("0.1"), q.price
        target = q.high + span * Decimal("0.5")
    elif strategy == "conservative":
        entry_lo, entry_hi = q.low, q.low + span * Decimal("0.25")
        target = q.price + span * Decimal("0.25")
    else:
        entry_lo, entry_hi = q.low + span * Decimal("0.25"), q.price
        target = q.high
    stop = q.low - span * Decimal("0.25") * width
    return entry_lo, entry_hi, stop, target


async def trading_analysis(args: dict[str, Any], data: PromptData) -> types.GetPromptResult:
    symbol = args.get("symbol")
    if not isinstance(symbol, str) or not symbol:
        raise MCPError(-32602, "Missing required argument: symbol (e.g. BTCUSDT)", {"argument": "symbol"})
    if not SYMBOL_PATTERN.match(symbol):
        raise _invalid_symbol(symbol)
    strategy = _choice(args, "strategy", STRATEGIES, "balanced")
    risk = _choice(args, "risk_tolerance", RISK_LEVELS, "medium")
    q = await _guard(data.quote(symbol))
    if q is None:
        raise _invalid_symbol(symbol)
    base = symbol.removesuffix("USDT")
    sign = "+" if q.change >= 0 else "-"
    entry_lo, entry_hi, stop, target = _levels(q, strategy, risk)
    mood = (
        "positive momentum" if q.change_percent > 0 else "negative momentum" if q.change_percent < 0 else "a flat day"
    )
    position = "above the daily low" if q.price > q.low else "at the daily low"
    text = "\n".join(
        [
            f"# Market Analysis: {symbol}",
            "",
            f"**Current Price**: {_usd(q.price)}",
            f"**24h Change**: {sign}{abs(q.change_percent):.2f}% ({sign}{_usd(abs(q.change))})",
            f"**24h High**: {_usd(q.high)}",
            f"**24h Low**: {_usd(q.low)}",
            f"**24h Volume**: {q.volume:,.2f} {_escape(base)}",
            "",
            f"**Strategy Preference**: {strategy.capitalize()}",
            f"**Risk Tolerance**: {risk.capitalize()}",
            "",
            f"*Based on current market conditions, {_escape(NAMES.get(base, base))} is showing {mood} with a "
            f"{sign}{abs(q.change_percent):.2f}% move over 24 hours, trading {position}. For a {strategy} strategy "
            f"with {risk} risk tolerance, consider:*",
            "",
            f"*- Entry Point: Around {_usd(entry_lo)}-{_usd(entry_hi)}*",
            f"*- Stop Loss: {_usd(stop)} (below the 24h low)*",
            f"*- Take Profit: {_usd(target)}*",
            "",
            _stamp(),
        ]
    )
    return _message(text, f"Market analysis for {symbol}")


async def portfolio_risk(args: dict[str, Any], data: PromptData) -> types.GetPromptResult:
    if args:
        raise MCPError(-32602, "portfolio_risk takes no arguments", {"arguments": sorted(map(str, args))[:5]})
    holdings = await _guard(data.holdings())
    if holdings is None:
        raise MCPError(-32603, "No broker is running: start the daemon with --trade", None)
    holdings = [h for h in holdings if h.total > 0]
    if not holdings:
        text = "\n".join(
            [
                "# Portfolio Risk Assessment",
                "",
                "## Current Holdings",
                "",
                "No active balances found in your account.",
                "",
                "**Recommendation**: Deposit funds to begin trading. Start with a diversified allocation:",
                "- 30% stablecoins (USDT/BUSD) for liquidity",
                "- 40% major cryptocurrencies (BTC/ETH)",
                "- 30% diversified altcoins based on risk tolerance",
                "",
                _stamp(),
            ]
        )
        return _message(text, "Portfolio risk assessment")
    values: dict[str, Decimal | None] = {}
    for h in holdings:
        if h.asset in STABLES:
            values[h.asset] = h.total
        else:
            q = await _guard(data.quote(f"{h.asset}USDT"))
            values[h.asset] = None if q is None else h.total * q.price
    total = sum((v for v in values.values() if v is not None), Decimal(0))
    rows = [
        "| Asset | Free Balance | Locked Balance | Total | Est. USD Value |",
        "|-------|--------------|----------------|-------|----------------|",
    ]
    for h in sorted(holdings, key=lambda h: -(values[h.asset] or Decimal(0))):
        value = values[h.asset]
        rows.append(
            f"| {_escape(h.asset)} | {_qty(h.free)} | {_qty(h.locked)} | {_qty(h.total)} | "
            f"{_usd(value) if value is not None else 'n/a'} |"
        )
    lines = [
        "# Portfolio Risk Assessment",
        "",
        "## Current Holdings",
        "",
        *rows,
        "",
        f"**Total Portfolio Value**: ~{_usd(total)}",
        "",
    ]
    lines.append("**Portfolio Composition**:")
    volatile = Decimal(0)
    for h in sorted(holdings, key=lambda h: -(values[h.asset] or Decimal(0))):
        value = values[h.asset]
        if value is None or total == 0:
            continue
        share = value / total * 100
        kind = "Stable" if h.asset in STABLES else VOLATILITY.get(h.asset, "Higher volatility (altcoin)")
        if h.asset not in STABLES:
            volatile += share
        lines.append(f"- {_escape(NAMES.get(h.asset, h.asset))} ({_escape(h.asset)}): {share:.1f}% ({kind})")
    lines.append("")
    if volatile > 60:
        lines.append(
            f"**Risk Assessment**: Your portfolio is heavily weighted toward volatile assets ({volatile:.1f}%). "
            "Consider the following for balanced diversification:"
        )
        advice = [
            "Increase stablecoin allocation to 25-30% to reduce volatility",
            "Spread the volatile part over more than one asset",
            "Consider setting stop-loss orders on high-value positions",
        ]
    elif volatile < 20:
        lines.append(
            f"**Risk Assessment**: Your portfolio is mostly in stablecoins ({100 - volatile:.1f}%): low volatility, "
            "little exposure to upside. Consider:"
        )
        advice = [
            "Deploy part of the stablecoins gradually (dollar-cost averaging)",
            "Keep 20-30% in stablecoins for liquidity",
        ]
    else:
        lines.append(
            f"**Risk Assessment**: A mix of volatile assets ({volatile:.1f}%) and stablecoins. To keep it balanced:"
        )
        advice = [
            "Rebalance when one asset drifts more than 10 points from its target",
            "Use stop-losses on the largest positions",
        ]
    lines += ["", *[f"*- {a}*" for a in advice], "", _stamp()]
    return _message("\n".join(lines), "Portfolio risk assessment")


async def _guard(awaitable: Any) -> Any:
    try:
        return await awaitable
    except PromptRateLimited as exc:
        data: dict[str, Any] = {
            "retry_after_secs": exc.retry_after_secs,
            "recovery_suggestion": "Reduce request frequency or wait for rate limit window to reset",
        }
        if exc.current_weight is not None:
            data["current_weight"] = exc.current_weight
        if exc.weight_limit is not None:
            data["weight_limit"] = exc.weight_limit
        raise MCPError(
            -32001, f"Rate limit exceeded. Please wait {exc.retry_after_secs} seconds before retrying.", data
        ) from None
    except PromptCredentialsError as exc:
        raise MCPError(
            -32002,
            "Invalid API credentials. Please check your BINANCE_API_KEY and BINANCE_API_SECRET environment variables.",
            {
                "masked_api_key": exc.masked_key,
                "help_url": "https://testnet.binance.vision/",
                "recovery_suggestion": "Verify credentials at https://testnet.binance.vision/ and ensure correct "
                "environment variables",
            },
        ) from None


async def get_prompt(name: str, arguments: dict[str, Any] | None, data: PromptData) -> types.GetPromptResult:
    args = dict(arguments or {})
    if name == "trading_analysis":
        return await trading_analysis(args, data)
    if name == "portfolio_risk":
        return await portfolio_risk(args, data)
    raise MCPError(-32602, f"Unknown prompt: {name[:60]}; available: trading_analysis, portfolio_risk", None)
