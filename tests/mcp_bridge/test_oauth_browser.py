"""The OAuth consent flow end to end in real headless Chromium (Debian's chromium + chromedriver,
driven by selenium): register → /authorize → consent page → untick a scope → a wrong passphrase
refused → the right one → redirect to the client's callback with a code → token (with the
narrowed scopes) → tools/call with it.

The page is used as a person would use it: typing into the password field and clicking the
Approve button, with JavaScript switched off (the consent page must work without it).
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import aiohttp
import httpx2
import pytest
from aiohttp import web
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from testkit.daemon_proc import DaemonProc, start_daemon
from testkit.external import chromium
from testkit.oauth import PASSPHRASE, pkce, set_passphrase

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]


class Callback:
    """The OAuth client's redirect target on loopback: records the query it was sent."""

    def __init__(self) -> None:
        self.received: asyncio.Future[dict[str, list[str]]] = asyncio.get_running_loop().create_future()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/callback", self._handle)
        app.router.add_get("/start", self._start)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"http://localhost:{port}/callback"

    async def _handle(self, request: web.Request) -> web.Response:
        if not self.received.done():
            self.received.set_result(parse_qs(request.query_string))
        return web.Response(text="Authorized; you can close this window.", content_type="text/plain")

    start_target = ""
    """Where ``/start``'s one link goes (a client's page sending the browser to /authorize, cross-site)."""

    async def _start(self, request: web.Request) -> web.Response:
        link = f'<a id="go" href="{html.escape(self.start_target)}">Connect chartgen</a>'
        return web.Response(text=link, content_type="text/html")

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProc]:
    await set_passphrase(tmp_path)
    proc = await start_daemon(["--serve"], data_dir=tmp_path)
    try:
        yield proc
    finally:
        await proc.stop()


def browser(binary: Path, driver: Path, profile: Path) -> webdriver.Chrome:
    options = Options()
    options.binary_location = str(binary)
    for flag in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        # the machine's network is closed: no background calls home
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    return webdriver.Chrome(service=Service(executable_path=str(driver)), options=options)


def answer_consent(driver: webdriver.Chrome, authorize_url: str, callback_url: str) -> list[str]:
    """Drive the consent page; returns what the page said after the wrong passphrase and the final URL."""
    try:
        return _answer_consent(driver, authorize_url, callback_url)
    except Exception as exc:
        raise AssertionError(f"browser at {driver.current_url}:\n{driver.page_source[:3000]}") from exc


def _answer_consent(driver: webdriver.Chrome, authorize_url: str, callback_url: str) -> list[str]:
    seen: list[str] = []
    wait = WebDriverWait(driver, 30)
    driver.get(authorize_url)
    field = wait.until(expected_conditions.presence_of_element_located((By.ID, "passphrase")))
    seen.append(driver.find_element(By.TAG_NAME, "body").text)
    boxes = {b.get_attribute("value"): b.is_selected() for b in driver.find_elements(By.NAME, "scope")}
    seen.append(",".join(f"{name}={'on' if on else 'off'}" for name, on in boxes.items()))
    driver.find_element(By.ID, "scope-alerts").click()  # the operator narrows the grant to charts
    field.send_keys("not the operator passphrase")
    driver.find_element(By.CSS_SELECTOR, "button[value=approve]").click()
    wait.until(expected_conditions.text_to_be_present_in_element((By.TAG_NAME, "body"), "Wrong passphrase"))
    seen.append(driver.find_element(By.TAG_NAME, "body").text)
    # after a wrong passphrase this address waits about a second: try again while the page says so
    while True:
        driver.find_element(By.ID, "passphrase").send_keys(PASSPHRASE)
        driver.find_element(By.CSS_SELECTOR, "button[value=approve]").click()
        # the page may be navigating while we look: a stale or missing body just means "look again"
        settled = WebDriverWait(driver, 30, ignored_exceptions=(StaleElementReferenceException, NoSuchElementException))
        settled.until(
            lambda d: callback_url in d.current_url or "from your address" in d.find_element(By.TAG_NAME, "body").text
        )
        if callback_url in driver.current_url:
            break
    seen.append(driver.current_url)
    return seen


async def test_consent_flow_in_headless_chromium(daemon: DaemonProc, tmp_path: Path) -> None:
    binary, driver_path = chromium()
    callback = Callback()
    await callback.start()
    try:
        async with httpx2.AsyncClient() as http:
            base = daemon.base
            reg = await http.post(
                f"{base}/register",
                json={
                    "redirect_uris": [callback.url],
                    "client_name": "Browser Test Client",
                    "grant_types": ["authorization_code", "refresh_token"],
                    "token_endpoint_auth_method": "client_secret_post",
                },
            )
            assert reg.status_code == 201, reg.text
            client = reg.json()
            verifier, challenge = pkce()
            authorize_url = f"{base}/authorize?" + urlencode(
                {
                    "response_type": "code",
                    "client_id": client["client_id"],
                    "redirect_uri": callback.url,
                    "code_challenge": challenge,
                    "code_challenge_method": "S256",
                    "state": "browser-state",
                    "resource": daemon.mcp_url,
                }
            )

            driver = await asyncio.to_thread(browser, binary, driver_path, tmp_path / "chromium-profile")
            try:
                first_page, boxes, after_wrong, final_url = await asyncio.to_thread(
                    answer_consent, driver, authorize_url, callback.url
                )
            finally:
                await asyncio.to_thread(driver.quit)

            assert "Browser Test Client" in first_page
            assert boxes == "charts=on,alerts=on,trade=off"  # asked for nothing: trading is offered, not ticked
            assert urlparse(callback.url).netloc in first_page  # the page names where the code will go
            assert "Wrong passphrase" in after_wrong
            async with asyncio.timeout(10):
                query = await callback.received
            assert query["state"] == ["browser-state"]
            assert "code=" in urlparse(final_url).query
            code = query["code"][0]

            token = await http.post(
                f"{base}/token",
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": callback.url,
                    "code_verifier": verifier,
                    "client_id": client["client_id"],
                    "client_secret": client["client_secret"],
                },
            )
            assert token.status_code == 200, token.text
            assert token.json()["scope"] == "charts"
            access = token.json()["access_token"]
            call = await http.post(
                daemon.mcp_url,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "list_indicators", "arguments": {}},
                },
                headers={"authorization": f"Bearer {access}", "accept": "application/json, text/event-stream"},
            )
            assert call.status_code == 200, call.text
            assert "result" in call.text and "rsi" in call.text
    finally:
        await callback.close()


def approve(driver: webdriver.Chrome, callback_url: str) -> str:
    """On the consent page: type the passphrase, click Approve; the URL the browser ends at (the
    callback's, or the consent page with its refusal)."""
    wait = WebDriverWait(driver, 30, ignored_exceptions=(StaleElementReferenceException, NoSuchElementException))
    wait.until(expected_conditions.presence_of_element_located((By.ID, "passphrase"))).send_keys(PASSPHRASE)
    driver.find_element(By.CSS_SELECTOR, "button[value=approve]").click()
    wait.until(lambda d: callback_url in d.current_url or "Too many" in d.find_element(By.TAG_NAME, "body").text)
    return driver.current_url if callback_url in driver.current_url else driver.find_element(By.TAG_NAME, "body").text


def consent_twice(driver: webdriver.Chrome, base: str, first_url: str, start_url: str, callback_url: str,
                  spend: Any) -> list[Any]:  # fmt: skip
    """Approve once (the device cookie set), let ``spend`` spend the global budget, then reach the
    consent page from the client's page by a link (cross-site) and approve again."""
    seen: list[Any] = []
    driver.get(first_url)
    seen.append(approve(driver, callback_url))
    driver.get(f"{base}/.well-known/oauth-authorization-server")  # the daemon's origin: its cookies readable
    seen.append(driver.get_cookie("chartgen_device"))
    spend()
    driver.get(start_url)
    driver.find_element(By.ID, "go").click()
    seen.append(approve(driver, callback_url))
    return seen


async def test_a_device_cookie_is_sent_with_a_consent_reached_from_a_cross_site_link(
    daemon: DaemonProc, tmp_path: Path
) -> None:
    """SameSite=Strict holds for the consent form: the page is reached by a cross-site navigation
    from the client (its link to /authorize, then a redirect), but the form's POST is same-origin, so
    Chromium sends the device cookie the first approval set — and with the global budget spent by
    other addresses, that cookie is what gets the second approval checked."""
    binary, driver_path = chromium()
    callback = Callback()
    await callback.start()
    loop = asyncio.get_running_loop()
    try:
        async with httpx2.AsyncClient() as http:
            base = daemon.base
            reg = await http.post(
                f"{base}/register",
                json={"redirect_uris": [callback.url], "client_name": "Cross-site Client",
                      "token_endpoint_auth_method": "none"},
            )  # fmt: skip
            assert reg.status_code == 201, reg.text

            def authorize_url(state: str) -> str:
                _, challenge = pkce()
                return f"{base}/authorize?" + urlencode(
                    {"response_type": "code", "client_id": reg.json()["client_id"], "redirect_uri": callback.url,
                     "code_challenge": challenge, "code_challenge_method": "S256", "state": state}
                )  # fmt: skip

            guessed = (await http.get(authorize_url("guessed"))).headers["location"]
            callback.start_target = authorize_url("second")

        async def spend_the_global_budget() -> None:
            request_id = guessed.split("request=")[1]
            for n in range(1, 12):
                connector = aiohttp.TCPConnector(local_addr=(f"127.0.6.{n}", 0), force_close=True)
                async with aiohttp.ClientSession(connector=connector) as guesser:
                    form = {"request": request_id, "passphrase": "wrong", "decision": "approve", "scope": "charts"}
                    async with guesser.post(guessed.split("?")[0], data=form, allow_redirects=False) as r:
                        if r.status == 429:
                            assert "on this server" in await r.text()
                            return
                        assert r.status == 401
            raise AssertionError("the global budget was never spent")

        def spend() -> None:
            asyncio.run_coroutine_threadsafe(spend_the_global_budget(), loop).result(60)

        start_url = callback.url.replace("/callback", "/start")
        driver = await asyncio.to_thread(browser, binary, driver_path, tmp_path / "chromium-profile")
        try:
            first, cookie, second = await asyncio.to_thread(
                consent_twice, driver, base, authorize_url("first"), start_url, callback.url, spend
            )
        finally:
            await asyncio.to_thread(driver.quit)
        assert "code=" in first and "state=first" in first, first
        assert cookie is not None and cookie["path"] == "/" and cookie["httpOnly"], cookie
        assert cookie["sameSite"] == "Strict", cookie
        assert "code=" in second and "state=second" in second, second  # before: "Too many wrong passphrases"
    finally:
        await callback.close()
