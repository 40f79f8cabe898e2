"""Debian's headless Chromium + chromedriver for the web view's tests, set up in one place.

`require_chromium()` skips the calling test module when no browser is installed (and fails it in
CI, where .ci/run installs one); the session fixture `chromium` in conftest.py starts one browser
for every module that drives it (a Chromium start costs seconds on a busy machine).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

__all__ = ["CHROMIUM", "DRIVER", "clean_tab", "require_chromium", "start_chromium"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def require_chromium() -> None:
    """At a test module's top: skip it without a browser (outside CI; in CI a missing browser fails)."""
    if not (CHROMIUM and DRIVER):
        if os.environ.get("CI") == "true":
            raise RuntimeError("CI must run the browser test: install chromium and chromium-driver (apt) in .ci/run")
        pytest.skip("no chromium/chromedriver installed (apt-get install chromium chromium-driver)", allow_module_level=True)
    pytest.importorskip("selenium.webdriver")


@contextmanager
def start_chromium(width: int = 1280, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium with a throwaway profile, quit and removed on exit."""
    from selenium import webdriver

    profile = tempfile.mkdtemp(prefix="memos-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def clean_tab(driver: Any) -> None:
    """Forget what the page at hand kept (its storage and cookies) and leave it for a blank page,
    so the next test's page starts as in a fresh browser."""
    if driver.current_url.startswith("http"):
        driver.execute_script("sessionStorage.clear(); localStorage.clear();")
        driver.delete_all_cookies()
    driver.get("about:blank")
