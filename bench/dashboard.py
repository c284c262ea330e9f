"""Dashboard benchmarks, measured in headless Chromium against ``chartgen --serve --trade --sim``.

- First paint of the markets page with 10 followed symbols: from the page's navigation start to
  the first chart drawn (``performance.mark('chartgen:first-chart')``) and to the last of the 10
  charts drawn (target ≤ 1 s).
- A simulator trade → the canvas showing its price: wall time just before the trade is POSTed to
  the simulator vs the browser's paint record (``window.__paints``, written right after a frame
  that showed a new price; same machine clock); 200 trades, 25 ms apart, rotating over the
  symbols; p50/p99 (target p99 ≤ 100 ms).

Run: ``python -m bench.dashboard`` (needs chromium and chromedriver, as the browser tests do).
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from testkit.browser import Page, browser, sign_in
from testkit.daemon_proc import PRODUCTION_RENDER, start_daemon
from testkit.oauth import set_passphrase

SYMBOLS = ("BTCUSDT", "ETHUSDT", "SOLUSDT", "BNBUSDT", "XRPUSDT", "ADAUSDT", "DOGEUSDT", "LTCUSDT", "DOTUSDT",
           "LINKUSDT")  # fmt: skip
PAINT_JS = """
const nav = performance.getEntriesByType('navigation')[0];
const first = performance.getEntriesByName('chartgen:first-chart')[0];
const per = {};
for (const p of (window.__paints || [])) if (!(p.symbol in per)) per[p.symbol] = p.at_ms - performance.timeOrigin;
return [nav ? nav.startTime : 0, first ? first.startTime : null, per];
"""


async def run(trades: int = 200) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        await set_passphrase(data)
        daemon = await start_daemon(
            ["--serve", "--trade", "--sim", "--clock", "manual", "-s", ",".join(SYMBOLS), "-i", "1m"],
            data_dir=data,
            env=PRODUCTION_RENDER,
        )
        driver = await asyncio.to_thread(browser, data / "profile")
        page = Page(driver, daemon.base)
        try:
            await daemon.wait_ready(120)
            await sign_in(page)
            await page.until(lambda d: len(d.execute_script(PAINT_JS)[2]) == len(SYMBOLS), within=30)
            loads = []
            for _ in range(5):  # reloads: the page's navigation start → first chart / all 10 charts drawn
                await page.do(lambda d: d.refresh())
                nav, first, per = await page.until(
                    lambda d: (r := d.execute_script(PAINT_JS)) and len(r[2]) == len(SYMBOLS) and r, within=30
                )
                loads.append((first - nav, max(per.values()) - nav))
            sent: list[tuple[str, float, float]] = []
            async with aiohttp.ClientSession() as http:
                for i in range(trades):
                    symbol = SYMBOLS[i % len(SYMBOLS)]
                    price = round(1000 + i * 0.37 + SYMBOLS.index(symbol) * 100, 2)
                    at = time.time() * 1000
                    async with http.post(
                        f"{daemon.sim_url}/sim/v1/price", json={"symbol": symbol, "price": f"{price:.2f}"}
                    ) as r:
                        assert r.status == 200, await r.text()
                    sent.append((symbol, price, at))
                    await asyncio.sleep(0.025)  # pacing the trades, not synchronisation
            paints = await page.until(
                lambda d: (
                    (p := d.execute_script("return window.__paints"))
                    and any(abs(x["price"] - sent[-1][1]) < 1e-6 for x in p)
                    and p
                ),
                within=10,
            )
        finally:
            await asyncio.to_thread(driver.quit)
            await daemon.stop()
    latencies = []
    for symbol, price, at in sent:
        shown = [p["at_ms"] for p in paints if p["symbol"] == symbol and abs(p["price"] - price) < 1e-6]
        if shown:
            latencies.append(min(shown) - at)
    latencies.sort()
    return {
        "first_chart_ms": [round(a) for a, _ in loads],
        "all_10_charts_ms": [round(b) for _, b in loads],
        "trades": len(sent),
        "painted": len(latencies),
        "update_p50_ms": statistics.median(latencies),
        "update_p99_ms": latencies[max(0, int(len(latencies) * 0.99) - 1)],
    }


def print_table(r: dict[str, Any]) -> None:
    print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}, headless Chromium")
    print("| bench | target | measured |")
    print("|---|---|---|")
    print(f"| markets page, 10 symbols: navigation → first chart / all 10 drawn (5 loads) | ≤ 1 s | "
          f"{r['first_chart_ms']} / {r['all_10_charts_ms']} ms |")  # fmt: skip
    print(f"| simulator trade → price on the canvas, {r['painted']}/{r['trades']} trades, p50 / p99 | p99 ≤ 100 ms | "
          f"{r['update_p50_ms']:.1f} / {r['update_p99_ms']:.1f} ms |")  # fmt: skip


def main() -> None:
    print_table(asyncio.run(run()))


if __name__ == "__main__":
    main()
