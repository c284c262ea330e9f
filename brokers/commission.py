"""Commission rates: what a fill costs on the account, for trade_simulate's fee estimates.

Binance charges a fill ``received amount × (role rate + side rate)`` for each of its three rate kinds
— standard, tax and special — where the role rate is ``maker`` (the order rested on the book) or
``taker``, and the side rate ``buyer`` or ``seller`` (reference/binance/commission_faq.md).
:class:`FeeRates` keeps the sums over the three kinds, so :meth:`FeeRates.rate` is the one number a
fill pays.  Sources, best first:

- ``GET /api/v3/account/commission?symbol=…`` — the account's rates on that symbol (promotions
  included): :func:`rates_from_symbol` (the Binance broker asks once an hour per symbol);
- the ``commissionRates`` of ``GET /api/v3/account`` — the account's own tier, every symbol alike:
  :func:`rates_from_account` (the cluster's order leader publishes it with its mirror of the
  account, so fronts, which hold no keys, estimate with it too);
- Binance's default, 0.1 % for every role and side (:data:`DEFAULT_RATES`).

The BNB discount is never applied: it lowers only the standard part, and only when the fee is paid
in BNB with enough BNB on the account, which a simulation cannot know in advance — so an estimate
is never below what the exchange charges.  The source says when a discount was left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal

import orjson

BINANCE_DEFAULT_FEE = Decimal("0.001")
KINDS = ("standardCommission", "taxCommission", "specialCommission")


@dataclass(frozen=True, slots=True)
class FeeRates:
    """The account's rates summed over standard, tax and special commission (fractions)."""

    maker: Decimal
    taker: Decimal
    source: str
    buyer: Decimal = Decimal(0)
    seller: Decimal = Decimal(0)

    def rate(self, *, maker: bool, side: Literal["BUY", "SELL"]) -> Decimal:
        """The fraction of the received amount one fill pays."""
        return (self.maker if maker else self.taker) + (self.buyer if side == "BUY" else self.seller)


DEFAULT_RATES = FeeRates(BINANCE_DEFAULT_FEE, BINANCE_DEFAULT_FEE, "binance default 0.1%")


def _fraction(value: object, where: str) -> Decimal:
    try:
        rate = Decimal(str(value))
    except InvalidOperation:
        rate = Decimal("NaN")
    if not rate.is_finite() or not Decimal(0) <= rate < 1:
        raise ValueError(f"{where} is not a commission rate: {value!r}")
    return rate


def _rates(block: Mapping[str, object], where: str) -> dict[str, Decimal]:
    return {k: _fraction(block.get(k, "0"), f"{where}.{k}") for k in ("maker", "taker", "buyer", "seller")}


def rates_from_symbol(res: Mapping[str, object]) -> FeeRates:
    """``GET /api/v3/account/commission``'s answer (ValueError when it is not one)."""
    total = dict.fromkeys(("maker", "taker", "buyer", "seller"), Decimal(0))
    for kind in KINDS:
        block = res.get(kind)
        if kind == "standardCommission" and not isinstance(block, dict):
            raise ValueError("the commission answer has no standardCommission")
        if isinstance(block, dict):
            for k, v in _rates(block, kind).items():
                total[k] += v
    discount = res.get("discount")
    source = "account commission"
    if isinstance(discount, dict) and discount.get("enabledForAccount") and discount.get("enabledForSymbol"):
        source += f" ({discount.get('discountAsset', 'BNB')} discount not applied)"
    return FeeRates(total["maker"], total["taker"], source, total["buyer"], total["seller"])


def rates_from_account(rates: object) -> FeeRates | None:
    """The ``commissionRates`` of ``GET /api/v3/account``; None when the answer has none (ValueError
    when they are not rates)."""
    if not isinstance(rates, dict):
        return None
    r = _rates(rates, "commissionRates")
    return FeeRates(r["maker"], r["taker"], "account commission (account tier)", r["buyer"], r["seller"])


def rates_json(rates: FeeRates) -> str:
    return orjson.dumps(
        {
            "maker": format(rates.maker, "f"),
            "taker": format(rates.taker, "f"),
            "buyer": format(rates.buyer, "f"),
            "seller": format(rates.seller, "f"),
            "source": rates.source,
        }
    ).decode()


def rates_of(text: str) -> FeeRates:
    body = orjson.loads(text)
    r = _rates(body, "fees")
    return FeeRates(r["maker"], r["taker"], str(body["source"]), r["buyer"], r["seller"])
