"""Headless Chromium (Debian's chromium + chromedriver, through selenium) driving the dashboard as the
operator does: a browser, a page driven from a worker thread so the caller's event loop keeps
running, and the sign-in (a wrong passphrase first, then the right one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from testkit.external import chromium
from testkit.oauth import PASSPHRASE

T = TypeVar("T")
IGNORED = (StaleElementReferenceException, NoSuchElementException)


def browser(profile: Path) -> webdriver.Chrome:
    binary, driver = chromium()
    options = Options()
    options.binary_location = str(binary)
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1920,1080", "--force-device-scale-factor=1", f"--user-data-dir={profile}",
    ):  # fmt: skip
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=str(driver)), options=options)


class Page:
    """The browser, driven from a worker thread so the test's event loop keeps running."""

    def __init__(self, driver: webdriver.Chrome, base: str) -> None:
        self.d = driver
        self.base = base

    async def do(self, fn: Callable[[webdriver.Chrome], T]) -> T:
        try:
            return await asyncio.to_thread(fn, self.d)
        except Exception as exc:
            body = await asyncio.to_thread(lambda: self.d.find_element(By.TAG_NAME, "body").text[:2000])
            raise AssertionError(f"browser at {self.d.current_url}:\n{body}") from exc

    async def until(self, cond: Callable[[webdriver.Chrome], Any], within: float = 15.0) -> Any:
        return await self.do(lambda d: WebDriverWait(d, within, 0.02, ignored_exceptions=IGNORED).until(cond))

    def text(self, d: webdriver.Chrome, css: str) -> str:
        return " ".join(e.text for e in d.find_elements(By.CSS_SELECTOR, css))

    async def go(self, page: str) -> None:
        await self.do(lambda d: d.execute_script(f"location.hash = '#{page}'"))
        await self.until(lambda d: d.find_element(By.ID, f"page-{page}").is_displayed())


async def sign_in(page: Page) -> str:
    """Wrong passphrase first (refused, said so), then the right one; returns what the page said."""
    await page.do(lambda d: d.get(f"{page.base}/ui"))
    await page.until(lambda d: d.find_element(By.ID, "passphrase"))

    def submit(d: webdriver.Chrome, passphrase: str) -> None:
        # clear the last answer first, so that an old "wait" is not taken for the answer to this one
        d.execute_script("const e = document.getElementById('login-error'); if (e) e.textContent = '';")
        d.find_element(By.ID, "passphrase").send_keys(passphrase)
        d.find_element(By.ID, "sign-in").click()

    def answered(d: webdriver.Chrome) -> str | None:
        """ "charts" once signed in, the page's error once it shows one; None while the form is
        still being answered (a page replaced mid-read counts as not answered yet)."""
        try:
            if d.find_elements(By.ID, "charts"):
                return "charts"
            text = d.execute_script("const e = document.getElementById('login-error'); return e ? e.textContent : '';")
            return str(text) if text else None
        except WebDriverException:
            return None

    await page.do(lambda d: submit(d, "not the operator passphrase"))
    said = await page.until(answered)
    # after a wrong passphrase this address waits about a second: try again while the page says so
    while True:
        await page.do(lambda d: submit(d, PASSPHRASE))
        if await page.until(answered) == "charts":
            return str(said)
