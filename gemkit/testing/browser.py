"""A real headless browser for tests: Debian's chromium and chromedriver, driven by selenium.

The viewer's page tests and the red-team tests that attack servers from a web page share it.
Imported on its own (not from `gemkit.testing`): it needs selenium, from the `dev` extra.

```python
from gemkit.testing.browser import chromium, skip_without_browser

skip_without_browser()  # at the top of a test module
with chromium() as driver:
    driver.get("http://127.0.0.1:8765/")
```
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
#: flags for a root, offline machine: no sandbox, no GPU, no calls home
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
)  # fmt: skip


def missing() -> str | None:
    """Why no browser can run here (what to install), or None when one can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if CHROMIUM is None or CHROMEDRIVER is None:
        return (
            "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
        )
    return None


def skip_without_browser() -> None:
    """In a test module: skip it when no browser can run here, or fail it when
    `$GEMKIT_REQUIRE_BROWSER` is set (CI sets it: a silent skip would hide a break)."""
    import pytest

    why = missing()
    if why is None:
        return
    if os.environ.get("GEMKIT_REQUIRE_BROWSER"):
        pytest.fail(f"GEMKIT_REQUIRE_BROWSER is set but {why}", pytrace=False)
    pytest.skip(why, allow_module_level=True)


@contextmanager
def chromium(flags: Sequence[str] = (), *, console_log: bool = False) -> Iterator[Any]:
    """A headless chromium (a selenium `webdriver.Chrome`) with a profile of its own, removed
    after; `flags` add to `FLAGS`, `console_log` keeps the page console for `get_log`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # the caller checked that both are here (`missing()` says what is not)
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, *flags):
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="gemkit-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(120)
    driver.set_script_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
