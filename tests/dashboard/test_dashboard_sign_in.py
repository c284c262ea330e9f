"""A sign-in a guesser cannot block (issue 36 §4), on a real single-node daemon: a browser that signed
in before (its device cookie) gets in while wrong guesses from other addresses keep the global budget
spent; ``chartgen passphrase set`` ends every session and device cookie; the sign-in form is accepted
from the daemon's own origin only (``base_url``'s or its loopback one with its port, not another
loopback port); ``chartgen dashboard link`` prints a one-time sign-in URL.  The cluster's fronts:
tests/cluster/test_front_dashboard.py; the rules on a fake clock: test_device_cookies.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import aiohttp
import pytest

from dashboard.auth import COOKIE
from dashboard.device_cookies import DEVICE_COOKIE
from testkit.daemon_proc import DaemonProc, start_daemon
from testkit.oauth import PASSPHRASE, set_passphrase
from tests.daemon.test_cli_state_options import chartgen
from tests.dashboard.test_dashboard_access import browser_session, sign_in

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]

NEW_PASSPHRASE = "a brand new passphrase, longer"
GUESSERS = 6
"""How many real, different source addresses guess (all of 127/8 is loopback on Linux): more than the
global budget."""


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    await set_passphrase(tmp_path)
    proc = await start_daemon(["--serve"], data_dir=tmp_path)
    try:
        yield await proc.wait_ready()
    finally:
        await proc.stop()


def from_address(address: str, jar: aiohttp.CookieJar | None = None) -> aiohttp.ClientSession:
    """A browser whose connections come from ``address``, with cookies of IP-address hosts kept."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(local_addr=(address, 0), force_close=True),
        cookie_jar=jar if jar is not None else aiohttp.CookieJar(unsafe=True),
    )


async def spend_the_global_budget(base: str, first: int = 20) -> None:
    """Wrong guesses, one from each of more addresses than the budget allows (127.0.0.``first`` on),
    until one is refused for everyone."""
    for address in (f"127.0.0.{n}" for n in range(first, first + GUESSERS)):
        async with from_address(address) as guesser:
            async with guesser.post(f"{base}/ui/login", data={"passphrase": f"guess from {address}"}) as r:
                text = await r.text()
                if r.status == 429:
                    assert "on this server" in text
                    return
                assert r.status == 401, text
    raise AssertionError("the global budget was never spent")


def device_cookie(jar: aiohttp.CookieJar) -> str | None:
    return next((c.value for c in jar if c.key == DEVICE_COOKIE), None)


async def test_a_signed_in_browser_gets_in_while_guessers_spend_the_global_budget(daemon: DaemonProc) -> None:
    jar = aiohttp.CookieJar(unsafe=True)
    async with browser_session() as first:
        right = await sign_in(first, daemon.base)
        assert right.status == 303
        issued = right.cookies[DEVICE_COOKIE]
        assert issued["httponly"] and issued["samesite"].lower() == "strict" and issued["path"] == "/"
        # Path=/: the OAuth consent page (/oauth/consent) receives it too
        assert int(issued["max-age"]) > 30 * 86400
        jar.update_cookies({DEVICE_COOKIE: issued.value}, response_url=right.url)
    await spend_the_global_budget(daemon.base)
    async with from_address("127.0.0.30") as stranger:  # no device cookie: an unknown client, refused
        refused = await sign_in(stranger, daemon.base)
        assert refused.status == 429
    async with from_address("127.0.0.30") as forger:
        forger.cookie_jar.update_cookies({DEVICE_COOKIE: f"{issued.value}x"}, response_url=right.url)
        assert (await sign_in(forger, daemon.base)).status == 429  # a forged device cookie: an unknown client
    async with from_address("127.0.0.1", jar) as operator:  # the browser that signed in before
        again = await sign_in(operator, daemon.base)
        assert again.status == 303, "the operator's device cookie is limited per device, not by the budget"
        async with operator.get(f"{daemon.base}/ui/api/access") as r:
            assert r.status == 200


async def test_changing_the_passphrase_ends_every_session_and_device_cookie(daemon: DaemonProc, tmp_path: Path) -> None:
    async with browser_session() as browser:
        assert (await sign_in(browser, daemon.base)).status == 303
        old_device = device_cookie(browser.cookie_jar)
        assert old_device is not None
        async with browser.get(f"{daemon.base}/ui/api/access") as r:
            assert r.status == 200
        await set_passphrase(tmp_path, NEW_PASSPHRASE)  # while the daemon runs
        async with browser.get(f"{daemon.base}/ui/api/access") as r:
            assert r.status == 401  # the session ended
        await spend_the_global_budget(daemon.base)
        refused = await sign_in(browser, daemon.base, NEW_PASSPHRASE)
        assert refused.status == 429, "the old device cookie must no longer be trusted"
        assert (await sign_in(browser, daemon.base, PASSPHRASE)).status == 429


async def test_the_sign_in_form_is_accepted_from_the_daemons_own_origin_only(tmp_path: Path) -> None:
    await set_passphrase(tmp_path)
    proc = await start_daemon(["--serve"], data_dir=tmp_path, env={"CHARTGEN_BASE_URL": "https://charts.example"})
    try:
        await proc.wait_ready()
        port = urlparse(proc.base).port
        refused = {
            f"http://127.0.0.1:{port + 1}": "another local program's page",
            f"http://localhost:{port - 1}": "another loopback port",
            "https://evil.example": "another site",
        }
        for origin, why in refused.items():
            async with browser_session() as http:
                async with http.post(
                    f"{proc.base}/ui/login", data={"passphrase": PASSPHRASE}, headers={"Origin": origin}
                ) as r:
                    assert r.status == 403, (origin, why)
                    assert COOKIE not in r.cookies
        async with browser_session() as http:
            headers = {"Origin": proc.base, "Sec-Fetch-Site": "cross-site"}
            async with http.post(f"{proc.base}/ui/login", data={"passphrase": PASSPHRASE}, headers=headers) as r:
                assert r.status == 403 and "Sec-Fetch-Site" in await r.text()
        for origin in (proc.base, f"http://localhost:{port}", "https://charts.example"):
            async with browser_session() as http:
                async with http.post(
                    f"{proc.base}/ui/login",
                    data={"passphrase": PASSPHRASE},
                    headers={"Origin": origin, "Sec-Fetch-Site": "same-origin"},
                    allow_redirects=False,
                ) as r:
                    assert r.status == 303, (origin, await r.text())
    finally:
        await proc.stop()


async def test_a_sign_in_link_from_the_command_line_signs_in_once(daemon: DaemonProc, tmp_path: Path) -> None:
    code, out, err = await chartgen("dashboard", "link", "--data-dir", str(tmp_path), "--url", daemon.base)
    assert code == 0, err
    url = out.strip()
    assert url.startswith(f"{daemon.base}/ui/link?token=") and "5 minutes" in err
    await spend_the_global_budget(daemon.base)  # the link does not depend on the passphrase budget
    async with browser_session() as browser:
        async with browser.get(url, allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/ui"
            assert COOKIE in r.cookies and DEVICE_COOKIE in r.cookies
        async with browser.get(f"{daemon.base}/ui/api/access") as r:
            assert r.status == 200
    async with browser_session() as other:
        async with other.get(url, allow_redirects=False) as r:
            assert r.status == 400 and "chartgen dashboard link" in await r.text()  # single use
    token = parse_qs(urlparse(url).query)["token"][0]
    async with browser_session() as other:
        async with other.get(f"{daemon.base}/ui/link?token={token[:-2]}", allow_redirects=False) as r:
            assert r.status == 400


async def test_the_link_names_base_url_or_the_loopback_port(tmp_path: Path) -> None:
    code, out, err = await chartgen("dashboard", "link", "--data-dir", str(tmp_path))
    assert code == 0, err
    assert out.startswith("http://127.0.0.1:9315/ui/link?token=")
    config = tmp_path / "chartgen.toml"
    config.write_text('base_url = "https://charts.example/"\n')
    code, out, err = await chartgen("dashboard", "link", "--data-dir", str(tmp_path), "--config", str(config))
    assert code == 0, err
    assert out.startswith("https://charts.example/ui/link?token=")
    config.write_text("port = 0\n")
    code, out, err = await chartgen("dashboard", "link", "--data-dir", str(tmp_path), "--config", str(config))
    assert code == 2 and "--url" in err and out == ""
