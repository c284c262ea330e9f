"""The open-order count filters of a symbol: MAX_NUM_ORDERS, MAX_NUM_ALGO_ORDERS, MAX_NUM_ORDER_LISTS.

filters.md: MAX_NUM_ORDERS caps the orders an account has open on a symbol (algo orders and
pending list legs included; an OCO or OTO adds 2, an OTOCO 3), MAX_NUM_ALGO_ORDERS its open
STOP_LOSS / TAKE_PROFIT (…_LIMIT) orders, MAX_NUM_ORDER_LISTS its open order lists.  A new
order or list past one is refused with -2010 and errors.md's text ("Filter failure:
MAX_NUM_ORDERS"…), before anything is placed.  The limits appear in exchangeInfo and can be
tightened by ``POST /sim/v1/faults {"max_num_orders": 5, "max_num_algo_orders": 2,
"max_num_order_lists": 1}`` (faults.py).  The exchange owns one instance (``SimExchange.count_filters``,
shown by ``GET /sim/v1/state``); conditional.py and order_lists.py read MAX_NUM_ALGO_ORDERS from
it, so the knob loosens as well as tightens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from brokers import trigger_rules as tr

if TYPE_CHECKING:
    from simulator.accounts import SimAccount
    from simulator.order_lists import OrderLists

MAX_NUM_ORDERS = 200
MAX_NUM_ALGO_ORDERS = 5
MAX_NUM_ORDER_LISTS = 20
OPEN = frozenset({"NEW", "PARTIALLY_FILLED", "PENDING_NEW"})

TOO_MANY_ORDERS = tr.Refusal(-2010, "Filter failure: MAX_NUM_ORDERS")
"""Account has too many open orders on the symbol (errors.md, filter failures)."""
TOO_MANY_ORDER_LISTS = tr.Refusal(-2010, "Filter failure: MAX_NUM_ORDER_LISTS")
"""Account has too many open order lists on the symbol."""


@dataclass
class CountFilters:
    """The limits in force for every symbol (Binance's unless a fault tightened them)."""

    max_num_orders: int = MAX_NUM_ORDERS
    max_num_algo_orders: int = MAX_NUM_ALGO_ORDERS
    max_num_order_lists: int = MAX_NUM_ORDER_LISTS

    def reset(self) -> None:
        self.max_num_orders = MAX_NUM_ORDERS
        self.max_num_algo_orders = MAX_NUM_ALGO_ORDERS
        self.max_num_order_lists = MAX_NUM_ORDER_LISTS

    def exchange_filters(self) -> list[dict[str, Any]]:
        """The three entries of a symbol's exchangeInfo ``filters``."""
        return [
            {"filterType": "MAX_NUM_ORDERS", "maxNumOrders": self.max_num_orders},
            {"filterType": "MAX_NUM_ALGO_ORDERS", "maxNumAlgoOrders": self.max_num_algo_orders},
            {"filterType": "MAX_NUM_ORDER_LISTS", "maxNumOrderLists": self.max_num_order_lists},
        ]

    def state(self, account: SimAccount, lists: OrderLists) -> dict[str, Any]:
        """The limits in force and, per symbol with anything open, the open orders, algo orders and lists."""
        open_now: dict[str, dict[str, int]] = {}
        for o in account.orders.values():
            if o.status in OPEN:
                row = open_now.setdefault(o.symbol, {"orders": 0, "algo_orders": 0, "order_lists": 0})
                row["orders"] += 1
                row["algo_orders"] += o.type in tr.CONDITIONAL_TYPES and o.status != "PENDING_NEW"
        for lst in lists.lists.values():
            if not lst.done:
                open_now.setdefault(lst.symbol, {"orders": 0, "algo_orders": 0, "order_lists": 0})["order_lists"] += 1
        limits = {
            "max_num_orders": self.max_num_orders,
            "max_num_algo_orders": self.max_num_algo_orders,
            "max_num_order_lists": self.max_num_order_lists,
        }
        return {"limits": limits, "open": open_now}

    def check(
        self,
        account: SimAccount,
        lists: OrderLists,
        symbol: str,
        *,
        orders: int,
        algo: int = 0,
        order_lists: int = 0,
    ) -> tr.Refusal | None:
        """Whether ``orders`` new orders (``algo`` of them conditional) and ``order_lists`` new lists fit."""
        open_orders = [o for o in account.orders.values() if o.symbol == symbol and o.status in OPEN]
        if len(open_orders) + orders > self.max_num_orders:
            return TOO_MANY_ORDERS
        if algo:
            open_algo = sum(1 for o in open_orders if o.type in tr.CONDITIONAL_TYPES and o.status != "PENDING_NEW")
            refusal = tr.algo_limit(open_algo, algo, self.max_num_algo_orders)
            if refusal is not None:
                return refusal
        if order_lists:
            open_lists = sum(1 for lst in lists.lists.values() if lst.symbol == symbol and not lst.done)
            if open_lists + order_lists > self.max_num_order_lists:
                return TOO_MANY_ORDER_LISTS
        return None
