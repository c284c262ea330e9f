"""The descriptions of get_portfolio, trade_simulate and trade_execute (their tool units are in
mcp_bridge/tools/portfolio.py): what a client reads in ``tools/list``."""

from __future__ import annotations

from brokers import METHOD, VALUATION

GET_PORTFOLIO_TEXT = f"""
            The exchange account as a portfolio, valued in {VALUATION}: positions (every non-cash asset with a
            balance, free + locked, on its <ASSET>USDT pair) with quantity, avg_price (average entry of the
            fills this daemon recorded, null if none), current_price (the live engine's last trade when it
            follows the pair, else Binance's ticker), market_value, weight (of total_value); cash = USDT, USDC,
            FDUSD and BUSD balances counted 1:1 as USDT; total_value = cash + positions. Assets without a USDT
            pair or a price are listed under unvalued and not counted. The account is the broker's, shared by
            every principal: user_id, when given, must be your own principal unless your token has admin.
            Needs the trading engine (--trade) and the trade scope; a cluster front answers from the order
            leader's mirror of the account (refused while it is over 60 s old). Not cached."""

TRADE_SIMULATE_TEXT = f"""
            What-if trades on a copy of the account: NOTHING is sent to the exchange and nothing is recorded.
            Each leg (symbol, action buy|sell, quantity > 0, price = limit price, absent = market) passes the
            same checks as a real order in a dry run of the order guard — exchange filters (LOT_SIZE,
            PRICE_FILTER, MIN_NOTIONAL, PERCENT_PRICE_BY_SIDE), the operator's allowed symbols, per-order and
            daily notional limits (earlier legs of the call count toward the daily limit), the halt switch —
            and fills at the current price (the engine's live trade, else the venue's ticker) or at its limit
            price. Fees: the paper broker's paper_fee_rate; with Binance the account's own commission on the
            symbol (maker rate for a limit that would rest, else taker, plus the buyer/seller rate; BNB
            discount not applied; at a cluster front the account tier's rates from the leader's mirror); else
            Binance's default 0.1 %; fee_source says which. Taken from the asset received, reported in the
            quote asset. A leg is refused (status refused, error code) by a filter
            (INVALID_ARGUMENT), an unknown pair (INVALID_SYMBOL; a stock: MARKET_CLOSED while its market is
            closed, else INVALID_SYMBOL — the brokers trade exchange pairs only), missing funds in the simulated
            account (INSUFFICIENT_FUNDS) or no price (NETWORK_ERROR, fail closed); a refused leg does not change
            portfolio_after. The whole call is an error RISK_LIMIT_EXCEEDED, naming the leg and the limit, when
            any leg breaks an operator limit or trading is halted, and an error with the first leg's code when
            every leg is refused. portfolio_after as get_portfolio values it. risk_metrics over the last
            risk_lookback_days (default 365) daily closes: {METHOD}; null with a reason when undefined. Needs
            --trade, or a cluster front (the order leader's mirror of the account and its guard rails), and the
            trade scope."""

TRADE_EXECUTE_TEXT = """
            Places real orders, leg by leg, through the same path as place_order (guard rails, recorded, sent),
            owned by your principal. A batch is NOT atomic on an exchange: legs are sent in order, each stands
            alone, and a refused leg does not undo earlier ones. Each leg: symbol, action buy|sell, quantity,
            order_type market | limit (price required) | stop (stop_price required; with price a stop-limit,
            else a stop-market). Per leg: status filled | partial (partly filled) | open (accepted, resting or
            an untriggered stop, nothing filled yet) | expired (ended unfilled, e.g. IOC) | pending (the
            exchange's answer was lost; reconciled later) | rejected (with error code and reason: the guard's
            or the exchange's); order_id (null when refused before recording), price (average fill price, else
            the limit or stop price), fees (valued in the quote asset), total_cost (buy: traded value + fees;
            sell: −(traded value − fees); 0 while nothing filled). portfolio_after: total_value and cash (as
            get_portfolio) after the last leg. Retrying with the same tool_call_id does not place a leg twice:
            its client order id comes from the tool_call_id, and a leg already placed is reported as it stands.
            The call is an error only when every leg is rejected. Needs --trade, or a cluster front (each leg sent
            by the account's order leader; portfolio_after from its mirror, up to 10 s behind), and the trade
            scope."""
