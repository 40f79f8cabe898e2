"""The web view acts, in a real headless Chromium (as tests/test_serve_ui.py drives it).

It opens the latest session without any typing, shows the compiled prompt beside the token bars,
lists a store's records on a click with filters, and edits, supersedes and deletes records and
rewrites core blocks through the API (audited under the key's actor); what the key may not do
is refused by the server and the page says why. One server and one page load for the module.
Set MEMOS_SCREENSHOTS=dir to save the panel screenshots docs/serving.md shows.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx2 as httpx
import pytest
from _browser import clean_tab, require_chromium
from _loopback import LoopbackServer

require_chromium()
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

SHOTS = os.environ.get("MEMOS_SCREENSHOTS")


class Page:
    """The server, its API as the key's holder sees it, and the browser showing /ui."""

    def __init__(self, server: LoopbackServer, token: str, driver) -> None:
        self.server, self.driver = server, driver
        self.headers = {"Authorization": f"Bearer {token}"}
        self.wait = WebDriverWait(driver, 30)

    def get(self, path: str, **params) -> httpx.Response:
        return httpx.get(self.server.url + path, params=params, headers=self.headers, timeout=30)

    def post(self, path: str, body: dict) -> dict:
        r = httpx.post(self.server.url + path, json=body, headers=self.headers, timeout=30)
        assert r.status_code in (200, 201), r.text
        return r.json()

    def js(self, script: str, *args):
        """Read or act in one script call: the view re-renders on every event, so no element is held."""
        return self.driver.execute_script(script, *args)

    def shot(self, element_id: str, name: str) -> None:
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            self.driver.find_element(By.ID, element_id).screenshot(str(Path(SHOTS) / name))


@pytest.fixture(scope="module")
def page(tmp_path_factory, chromium):
    store = tmp_path_factory.mktemp("db")
    with LoopbackServer(str(store)) as server:
        token = server.make_key("alice", name="web")
        driver = chromium
        driver.set_window_size(1280, 1200)
        try:
            page = Page(server, token, driver)
            page.post("/v1/messages", {"session_id": "old", "messages": [
                {"role": "user", "text": "an older chat about the weather", "timestamp": "2026-01-01T09:00:00Z"}]})
            page.post("/v1/messages", {"session_id": "trip", "messages": [
                {"role": "user", "text": "我们下周去波尔图旅行", "timestamp": "2026-01-02T09:00:00Z"},
                {"role": "assistant", "text": "Porto in spring is lovely", "timestamp": "2026-01-02T09:01:00Z"}]})
            for summary, tags in (("Alice prefers green tea", ["drink"]), ("Alice lives in Lisbon", ["place"]),
                                  ("爱丽丝喜欢绿茶", ["drink"])):
                page.post("/v1/stores/semantic", {"subject": "alice", "summary": summary, "tags": tags})
            page.post("/v1/stores/vault", {"caption": "bank PIN", "secret": "4711-0815", "sensitivity": "medium"})
            driver.get(f"{server.url}/ui#key={token}")
            page.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#stores .store") and d.find_element(By.ID, "live").text == "live")
            yield page
        finally:
            clean_tab(driver)


def test_the_view_opens_the_latest_session_and_shows_its_compiled_prompt_beside_the_bars(page):
    page.wait.until(lambda d: "波尔图" in d.find_element(By.ID, "timeline").text)  # nothing typed: the latest session
    assert page.js("return [...document.querySelectorAll('#sessions .session')].map(s => s.dataset.session)") == ["trip", "old"]
    assert page.js("return document.querySelector('#sessions .session.open').dataset.session") == "trip"
    assert "an older chat" not in page.driver.find_element(By.ID, "timeline").text
    prompt = page.get("/v1/context", session_id="trip").json()["system_prompt"]
    assert prompt.strip()
    page.wait.until(lambda d: page.js("return document.getElementById('prompt').textContent") == prompt)
    assert page.js("return document.querySelectorAll('#context .section').length") >= 3  # the bars stay, the prompt beside them
    page.shot("context-panel", "web-view-context.png")

    page.js("document.querySelector('#sessions .session[data-session=\"old\"]').click()")
    page.wait.until(lambda d: "an older chat" in d.find_element(By.ID, "timeline").text)
    assert page.js("return document.querySelector('#sessions .session.open').dataset.session") == "old"
    page.shot("sessions-panel", "web-view-sessions.png")


def records(page) -> dict[str, str]:
    """Record id -> its summary (or caption) as listed: the rendered text after the subject."""
    shown = page.js("return Object.fromEntries([...document.querySelectorAll('#records .record')].map("
                    "r => [r.dataset.id, r.querySelector('.text').textContent]))")
    return {i: text.split(": ", 1)[-1] for i, text in shown.items()}


def filter_by(page, **fields) -> None:
    for name in ("contains", "tag", "since", "until"):
        page.js("document.getElementById(arguments[0]).value = arguments[1]", f"f-{name}", fields.get(name, ""))
    page.js("document.getElementById('f-status').value = arguments[0]", fields.get("status", "active"))
    page.js("document.querySelector('#filters button').click()")


def test_a_click_lists_a_stores_records_and_the_filters_narrow_them(page):
    page.js("document.querySelector('#stores .store[data-store=\"semantic\"]').click()")
    page.wait.until(lambda d: len(records(page)) == 3)
    filter_by(page, contains="绿茶")
    page.wait.until(lambda d: list(records(page).values()) == ["爱丽丝喜欢绿茶"])
    filter_by(page, tag="drink")
    page.wait.until(lambda d: sorted(records(page).values()) == ["Alice prefers green tea", "爱丽丝喜欢绿茶"])
    filter_by(page, contains="LISBON")
    page.wait.until(lambda d: list(records(page).values()) == ["Alice lives in Lisbon"])
    filter_by(page, until="2000-01-01")
    page.wait.until(lambda d: page.js("return document.getElementById('records-count').textContent") == "0 shown")
    filter_by(page, since="2000-01-01")
    page.wait.until(lambda d: len(records(page)) == 3)


def _by_text(page, text: str) -> str:
    [record_id] = [i for i, t in records(page).items() if t == text]
    return record_id


def _edit(page, record_id: str, verb: str, change: str) -> None:
    """Open the record's editor, change its JSON with `change` (a JS expression over `f`), and send it."""
    page.js(f"document.querySelector('.record[data-id=\"{record_id}\"] button.{verb}').click()")
    page.js(f"const box = document.querySelector('.record[data-id=\"{record_id}\"] textarea');"
            f"const f = JSON.parse(box.value); {change}; box.value = JSON.stringify(f);"
            f"document.querySelector('.record[data-id=\"{record_id}\"] .editing button.save').click()")


def test_records_are_edited_superseded_and_deleted_through_the_api_and_audited(page):
    filter_by(page)
    page.wait.until(lambda d: len(records(page)) == 3)
    tea = _by_text(page, "Alice prefers green tea")
    _edit(page, tea, "edit", "f.summary = 'Alice prefers oolong tea'")
    page.wait.until(lambda d: "Alice prefers oolong tea" in records(page).values())
    assert page.get(f"/v1/stores/semantic/{tea}").json()["summary"] == "Alice prefers oolong tea"
    history = page.get(f"/v1/stores/semantic/{tea}/history").json()["history"]
    assert [(e["op"], e["actor"]) for e in history if e["op"] == "update"] == [("update", "api:web")]

    lisbon = _by_text(page, "Alice lives in Lisbon")
    _edit(page, lisbon, "supersede", "f.summary = 'Alice lives in Porto'")
    page.wait.until(lambda d: "Alice lives in Porto" in records(page).values() and lisbon not in records(page))
    assert page.get(f"/v1/stores/semantic/{lisbon}").json()["status"] == "superseded"

    _edit(page, tea, "edit", "f.importance = 7")  # the server refuses; the page shows its message
    page.wait.until(lambda d: page.js(f"return document.querySelector('.record[data-id=\"{tea}\"] .error').textContent"))
    assert "importance" in page.js(f"return document.querySelector('.record[data-id=\"{tea}\"] .error').textContent")
    assert page.get(f"/v1/stores/semantic/{tea}").json()["importance"] != 7
    page.shot("records-panel", "web-view-records.png")
    page.js(f"document.querySelector('.record[data-id=\"{tea}\"] .editing button:not(.save)').click()")  # cancel

    chinese = _by_text(page, "爱丽丝喜欢绿茶")
    page.js("window.asked = []; window.confirm = (m) => { asked.push(m); return false; }")
    page.js(f"document.querySelector('.record[data-id=\"{chinese}\"] button.delete').click()")
    assert page.js("return asked.length") == 1 and "爱丽丝喜欢绿茶" in page.js("return asked[0]")
    assert page.get(f"/v1/stores/semantic/{chinese}").status_code == 200  # declined: kept
    page.js("window.confirm = () => true")
    page.js(f"document.querySelector('.record[data-id=\"{chinese}\"] button.delete').click()")
    page.wait.until(lambda d: chinese not in records(page))
    assert page.get(f"/v1/stores/semantic/{chinese}").status_code == 404


def test_a_vault_item_the_key_may_not_change_is_refused_and_the_page_says_why(page):
    page.js("document.querySelector('#stores .store[data-store=\"vault\"]').click()")
    page.wait.until(lambda d: list(records(page).values()) and "bank PIN" in list(records(page).values())[0])
    [item] = records(page)
    assert "4711" not in page.driver.find_element(By.ID, "records").text
    _edit(page, item, "edit", "f.sensitivity = 'low'")
    page.wait.until(lambda d: page.js(f"return document.querySelector('.record[data-id=\"{item}\"] .error').textContent"))
    message = page.js(f"return document.querySelector('.record[data-id=\"{item}\"] .error').textContent")
    assert message.startswith("403") and "clearance" in message
    assert page.get(f"/v1/stores/vault/{item}").json()["sensitivity"] == "medium"
    page.js(f"document.querySelector('.record[data-id=\"{item}\"] .editing button:not(.save)').click()")


def test_a_core_block_is_rewritten_from_the_page(page):
    labels = [b["label"] for b in page.get("/v1/core").json()["blocks"]]
    label = "human" if "human" in labels else labels[0]
    page.js(f"document.querySelector('#core .block[data-block=\"{label}\"] button.edit').click()")
    page.js(f"const box = document.querySelector('#core .block[data-block=\"{label}\"] textarea');"
            "box.value = 'Alice: 住在波尔图, drinks oolong';"
            f"document.querySelector('#core .block[data-block=\"{label}\"] button.save').click()")
    page.wait.until(lambda d: "住在波尔图" in page.js(f"return document.querySelector('#core .block[data-block=\"{label}\"] pre')?.textContent || ''"))
    [block] = [b for b in page.get("/v1/core").json()["blocks"] if b["label"] == label]
    assert block["value"] == "Alice: 住在波尔图, drinks oolong"
    history = page.get("/v1/history", limit=5).json()["history"]
    assert any(e["store"] == "core" and e["actor"] == "api:web" for e in history)
    page.shot("core-panel", "web-view-core.png")
