"""The web view in a real headless Chromium (Debian's chromium + chromedriver, driven by selenium).

A message posted through the API must appear in the view's timeline (pushed by server-sent
events, no reload) and the compiled context must render a token bar per section. Outside CI
the test skips when no Chromium is installed; in CI (CI=true) a missing browser fails it.
Set MEMOS_SCREENSHOTS=dir to save the screenshots the README shows.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx2 as httpx
import pytest
from _browser import require_chromium
from _loopback import LoopbackServer

require_chromium()
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`memos serve`'s app under uvicorn in this process, one for the module: each test uses its own user, so neither sees the other's data."""
    with LoopbackServer(str(tmp_path_factory.mktemp("db"))) as running:
        yield running


def test_a_message_posted_through_the_api_appears_live_and_the_context_bars_render(server, browser):
    token = server.make_key("alice", name="web")
    headers = {"Authorization": f"Bearer {token}"}
    httpx.post(server.url + "/v1/messages", headers=headers, timeout=30, json={"messages": [
        {"role": "user", "text": "I adopted a cat called Miso"}, {"role": "assistant", "text": "Congratulations! How old is Miso?"}]})
    browser.get(f"{server.url}/ui#key={token}")
    wait = WebDriverWait(browser, 30)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#timeline .turn")) == 2)
    wait.until(lambda d: d.find_element(By.ID, "live").text == "live")
    assert "#key" not in browser.current_url  # the key leaves the address bar at once

    r = httpx.post(server.url + "/v1/messages", headers=headers, timeout=30,
                   json={"messages": [{"role": "user", "text": "Miso is two years old and loves the violin case"}]})
    turn_id = r.json()["turns"][0]["id"]
    httpx.post(server.url + "/v1/stores/semantic", headers=headers, timeout=30,
               json={"subject": "Miso", "summary": "Alice's cat Miso is two years old", "source_ids": [turn_id]})
    wait.until(lambda d: "loves the violin case" in d.find_element(By.ID, "timeline").text)  # pushed, not reloaded
    # the view re-renders on every event: read it in one script call, never through held elements
    assert browser.execute_script("return document.querySelector('#timeline .turn').dataset.id") == turn_id
    wait.until(lambda d: "semantic: Miso" in d.find_element(By.ID, "timeline").text)  # provenance chip

    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#context .section")) >= 5)
    bars = browser.execute_script("return Object.fromEntries([...document.querySelectorAll('#context .section')].map("
                                  "r => [r.dataset.label, r.querySelector('.fill').getBoundingClientRect().width]))")
    assert bars["turns"] > 0 and bars["core"] > 0 and bars["instructions"] > 0
    assert "3 turns in context" in browser.find_element(By.ID, "context-total").text.lower()
    counts = browser.execute_script("return Object.fromEntries([...document.querySelectorAll('#stores .store')].map("
                                    "li => [li.dataset.store, li.innerText.trim()]))")
    assert counts["episodic"].endswith("3") and counts["semantic"].endswith("1")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#core .block")) == 2

    browser.find_element(By.ID, "query").send_keys("how old is the cat")
    browser.find_element(By.CSS_SELECTOR, "#search-form button").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#results .hit"))
    assert "fused" in browser.find_element(By.CSS_SELECTOR, "#results .hit .parts").text

    shots = os.environ.get("MEMOS_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(shots) / "web-view.png"))


def test_the_api_reference_at_docs_renders_the_schema_and_sends_a_call_with_the_key(server, browser):
    token = server.make_key("bob")
    httpx.post(server.url + "/v1/messages", headers={"Authorization": f"Bearer {token}"}, timeout=30,
               json={"messages": [{"role": "user", "content": "My cat Miso is two years old"}]})
    browser.get(server.url + "/docs")
    wait = WebDriverWait(browser, 30)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "details.op")) >= 28)
    search = browser.find_element(By.CSS_SELECTOR, 'details.op[data-method="post"][data-path="/v1/search"]')
    assert "auth: bearer" in search.text and "Hybrid search" in search.text
    search.find_element(By.TAG_NAME, "summary").click()
    assert "SearchOut" in search.text and "tokens" in search.text  # the typed response, field by field
    body = search.find_element(By.TAG_NAME, "textarea")
    assert '"query"' in body.get_attribute("value")  # a body to start from, made from the request schema

    search.find_element(By.CSS_SELECTOR, "form.try button").click()  # no key yet: the server says so
    output = search.find_element(By.CSS_SELECTOR, "pre.response")
    wait.until(lambda d: output.get_attribute("data-status") == "401")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#auth button").click()
    body.clear()
    body.send_keys('{"query": "how old is the cat", "k": 3}')
    search.find_element(By.CSS_SELECTOR, "form.try button").click()
    wait.until(lambda d: output.get_attribute("data-status") == "200")
    assert "My cat Miso is two years old" in output.text
    origins = browser.execute_script("return performance.getEntriesByType('resource').map(e => new URL(e.name).origin)")
    assert set(origins) == {server.url}  # the page, its script and the schema: nothing from elsewhere
