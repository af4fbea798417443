"""The viewer in a real headless browser (Debian's chromium and chromedriver, driven by
selenium) over the demo's output: the list loads, a filter narrows it, an episode page shows a
tool call, model-written markup does not run; screenshots for docs/viewer.md.

Set GEMKIT_VIEW_SCREENSHOTS=docs/img/viewer to refresh the committed screenshots.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gemkit.testing.browser import chromium, skip_without_browser

skip_without_browser()

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from gemkit.cli.view import check_task  # noqa: E402
from gemkit.view import ViewServer  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    with chromium(("--hide-scrollbars", "--window-size=1400,1000"), console_log=True) as driver:
        yield driver


def wait(driver, timeout: float = 60):
    return WebDriverWait(driver, timeout)


def count_text(driver) -> str:
    return driver.find_element(By.ID, "count").text


def rows(driver) -> list:
    return driver.find_elements(By.CSS_SELECTOR, "table.records tbody tr")


def severe(driver) -> list[dict]:
    """Console errors since the last call (a CSP violation by our own page would be one)."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_the_list_loads_and_a_filter_narrows_it(browser, viewer):
    browser.get(viewer.url + "list?c=episodes")
    assert "18 matching" in count_text(browser) and len(rows(browser)) == 18
    env = Select(browser.find_element(By.NAME, "f.env_id"))
    env.select_by_visible_text("game:Sudoku-v0-easy")  # the page's script submits at once
    wait(browser).until(lambda d: "3 matching" in count_text(d))
    assert len(rows(browser)) == 3
    assert "f.env_id=game%3ASudoku-v0-easy" in browser.current_url
    cells = {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows(browser)}
    assert cells == {"game:Sudoku-v0-easy"}
    assert severe(browser) == []


def test_the_search_box_finds_text_in_the_records(browser, viewer):
    browser.get(viewer.url + "list?c=episodes")
    box = browser.find_element(By.NAME, "q")
    box.send_keys("Wordle: I picked", Keys.ENTER)
    wait(browser).until(lambda d: "3 matching" in count_text(d))
    assert len(rows(browser)) == 3


def test_an_episode_page_shows_a_tool_call(browser, viewer, tool_episodes):
    browser.get(viewer.url + "list?c=eval-tools/episodes")
    rows(browser)[0].find_element(By.CSS_SELECTOR, "td.where a").click()
    wait(browser).until(ec.presence_of_element_located((By.CSS_SELECTOR, "section.turn")))
    first = browser.find_element(By.ID, "t1")
    call = first.find_element(By.CSS_SELECTOR, ".call")
    assert call.find_element(By.CSS_SELECTOR, ".call-name").text == "python"
    assert "print(400 / 18)" in call.text
    assert call.find_element(By.CSS_SELECTOR, "pre.result").text == "22.22222222222222"
    edit = browser.find_element(By.CSS_SELECTOR, ".ctx-edit")
    assert "context edit: discard_all" in edit.text
    edit.find_element(By.TAG_NAME, "summary").click()  # the removed messages unfold
    assert edit.find_element(By.CSS_SELECTOR, ".message.role-tool").is_displayed()
    browser.find_element(By.TAG_NAME, "body").send_keys("j")  # the next record, by key
    wait(browser).until(lambda d: "r=1" in d.current_url)
    assert severe(browser) == []


def test_qa_and_task_pages_render_their_evidence(browser, viewer):
    browser.get(viewer.url + "record?c=synth-qa/qa&r=0")
    assert browser.find_elements(By.CSS_SELECTOR, "li.step.inject del")
    assert browser.find_elements(By.CSS_SELECTOR, "li.step.inject ins")
    assert "uniqueness" in browser.find_element(By.TAG_NAME, "body").text
    browser.get(viewer.url + "record?c=synth-tasks/tasks&r=0")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "The verifier on the reference answer: passed" in body
    assert severe(browser) == []


def test_model_written_markup_does_not_run_in_the_browser(browser, hostile, xss):
    with ViewServer(hostile, task_check=check_task) as v:
        for path in ("", "list?c=episodes", "record?c=episodes&r=0", "record?c=qa/qa&r=0",
                     "record?c=tasks/tasks&r=0", "plots?c=episodes", "plots?c=tasks/tasks",
                     "list?c=qa/qa"):  # fmt: skip
            browser.get(v.url + path)
            assert browser.execute_script("return typeof window.__pwned") == "undefined", path
        browser.get(v.url + "record?c=episodes&r=0")
        assert xss in browser.find_element(By.TAG_NAME, "body").text, "shown as text"


SHOTS = {
    "overview": ("", 1300),
    "list": ("list?c=episodes&sort=turns&desc=1", 900),
    "episode": ("record?c=eval-tools/episodes&r=0", 1900),
    "qa": ("record?c=synth-qa/qa&r=0", 1500),
    "task": ("record?c=synth-tasks/tasks&r=0", 1500),
    "plots": ("plots?c=episodes", 1150),
}


def test_screenshots_of_each_page(browser, viewer, tool_episodes, tmp_path):
    out = tmp_path / "shots"
    out.mkdir()
    for name, (path, height) in SHOTS.items():
        browser.set_window_size(1400, height)
        browser.get(viewer.url + path)
        png = out / f"{name}.png"
        assert browser.save_screenshot(str(png))
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, name
    browser.set_window_size(1400, 1000)
    target = os.environ.get("GEMKIT_VIEW_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        for png in out.iterdir():
            shutil.copy(png, Path(target) / png.name)
