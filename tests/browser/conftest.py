"""A real browser (headless Chromium through Selenium) on the admin of a live server.

The live server serves the test database from a thread of this process, so the
tests use ``live_server`` (which makes every test transactional: what a test
writes is committed, and the server sees it) and log in through the real login
form with a superuser they create.

Chromium is required, not optional: CI installs it (``.ci/run``), and a missing
browser fails these tests with the command that installs it instead of skipping
them quietly.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # reported by the browser fixture, as a failure
    webdriver = None

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = "apt-get install -y chromium chromium-driver"
WAIT = 60  # seconds: the live server answers in milliseconds; this only bounds a hang

#: Where the operators' guide (docs/operators.md) takes its screenshots from.
#: They are rewritten only when asked (LEASEJOBS_SCREENSHOTS=1), so an ordinary
#: test run leaves the checkout clean; otherwise they go to a temporary folder.
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "_static" / "screenshots"

#: A probe painted with a CSS variable, as the browser computes its colour.
VARIABLE = """
const probe = document.createElement("div");
probe.style.background = "var(" + arguments[0] + ")";
document.body.appendChild(probe);
const colour = getComputedStyle(probe).backgroundColor;
probe.remove();
return colour;
"""

USERNAME = "operator"
PASSWORD = "a-browser-test-password"  # a throwaway user of the test database


def _missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing: the browser tests need it ({INSTALL})"
    if webdriver is None:
        return "selenium is not installed: pip install -e '.[test]'"
    return None


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the whole session; each test logs in afresh."""
    problem = _missing()
    if problem:
        pytest.fail(problem, pytrace=False)

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER)
    )
    driver.implicitly_wait(0)  # explicit waits only: an implicit one hides a missing element
    yield driver
    driver.quit()


class Admin:
    """The admin as an operator sees it, driven through the browser."""

    def __init__(self, driver, base_url: str, scratch: Path):
        self.driver = driver
        self.base_url = base_url
        self.scratch = scratch
        self._tokens = itertools.count()

    # -- navigation ------------------------------------------------------------------

    def open(self, path: str) -> None:
        self.driver.get(self.base_url + path)
        self._wait_loaded()

    def _wait_loaded(self) -> None:
        WebDriverWait(self.driver, WAIT).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )

    def _navigate(self, leave) -> None:
        """Run *leave* (a click, a back) and wait until the next page has loaded.

        The page being left is marked with a token of its own; the wait ends when
        the window holds a document without that token, loaded. Selenium's
        ``staleness_of`` asks the old ``<html>`` node instead, and Chromium can
        answer that question mid-teardown with an inspector error ("Node with
        given id does not belong to the document") rather than a stale reference,
        failing a login that was fine.
        """
        token = f"leasejobs-{next(self._tokens)}"
        self.driver.execute_script("window.__leasejobsPage = arguments[0];", token)
        leave()
        WebDriverWait(self.driver, WAIT, ignored_exceptions=(WebDriverException,)).until(
            lambda d: d.execute_script("return window.__leasejobsPage !== arguments[0];", token)
        )
        self._wait_loaded()

    def submit(self, element) -> None:
        """Click *element* and wait until the next page has loaded."""
        self._navigate(element.click)

    def back(self) -> None:
        self._navigate(self.driver.back)

    def log_in(self, username: str = USERNAME, password: str = PASSWORD) -> None:
        self.driver.delete_all_cookies()  # the last test's session went with its database
        self.open("/admin/login/?next=/admin/")
        self.driver.find_element(By.ID, "id_username").send_keys(username)
        self.driver.find_element(By.ID, "id_password").send_keys(password)
        self.submit(self.driver.find_element(By.CSS_SELECTOR, "#login-form [type=submit]"))
        assert f"welcome, {username}" in self.text("#user-tools").lower(), self.text("#content")
        # Fold the app list away, as an operator with a 1400 px window would: the run
        # list is wide. The admin keeps that choice in the browser's localStorage.
        self.driver.execute_script(
            "localStorage.setItem('django.admin.navSidebarIsOpen', 'false');"
        )

    # -- reading ---------------------------------------------------------------------

    def find(self, selector: str, within=None):
        return (within or self.driver).find_element(By.CSS_SELECTOR, selector)

    def find_all(self, selector: str, within=None) -> list:
        return (within or self.driver).find_elements(By.CSS_SELECTOR, selector)

    def text(self, selector: str, within=None) -> str:
        return str(self.find(selector, within).text)

    def variable_colour(self, name: str) -> str:
        """The colour the admin's CSS variable *name* computes to in the page's theme now."""
        return str(self.driver.execute_script(VARIABLE, name))

    def messages(self, level: str = "") -> list[str]:
        """The texts of the messages at the top of the page (``success``, ``warning``, ...)."""
        selector = f".messagelist li.{level}" if level else ".messagelist li"
        return [element.text for element in self.find_all(selector)]

    def column(self, field: str) -> list[str]:
        """The texts of one column of the change list, top to bottom."""
        return [cell.text for cell in self.find_all(f"#result_list .field-{field}")]

    def row(self, pk: str):
        """The change-list row of the object *pk* (found by its action checkbox)."""
        box = self.find(f'#result_list input[name="_selected_action"][value="{pk}"]')
        return box.find_element(By.XPATH, "./ancestor::tr")

    def field(self, name: str) -> str:
        """The text a change page shows for the read-only field *name*."""
        return self.text(f".field-{name} .readonly")

    def http_status(self) -> int:
        """The HTTP status of the page on screen, fetched again with the browser's session."""
        return int(
            self.driver.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "fetch(window.location.href, {credentials: 'same-origin'})"
                ".then(r => done(r.status), () => done(0));"
            )
        )

    # -- acting ----------------------------------------------------------------------

    def filter(self, title: str, choice: str) -> None:
        """Click *choice* in the sidebar filter titled *title* ("status", "needs a decision")."""
        group = self.find(f'#changelist-filter details[data-filter-title="{title}"]')
        self.submit(group.find_element(By.LINK_TEXT, choice))

    def act(self, action: str, *pks: str) -> None:
        """Tick the rows *pks* in the change list, choose *action* and press Go."""
        for pk in pks:
            box = self.find(f'#result_list input[name="_selected_action"][value="{pk}"]')
            if not box.is_selected():
                box.click()
        Select(self.find('#changelist-form select[name="action"]')).select_by_visible_text(action)
        self.submit(self.find('#changelist-form button[name="index"]'))

    def screenshot(self, name: str, scroll_to: str | None = None) -> Path:
        """Save the viewport as docs/_static/screenshots/*name* (for docs/operators.md)."""
        if scroll_to:
            self.driver.execute_script(
                "arguments[0].scrollIntoView({block: 'start'});", self.find(scroll_to)
            )
        else:
            self.driver.execute_script("window.scrollTo(0, 0);")
        folder = DOCS_SCREENSHOTS if os.environ.get("LEASEJOBS_SCREENSHOTS") else self.scratch
        path = folder / name  # *name* may hold a folder: "a8/held-run-390-dark-django61.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        assert self.driver.save_screenshot(str(path)), f"no screenshot written to {path}"
        return path


@pytest.fixture
def admin(django_db_setup, browser, live_server, django_user_model, tmp_path):
    """A logged-in superuser in the browser, on the live server's admin.

    ``django_db_setup`` comes first: were the session's live server started
    before the test database exists, it would take the settings' ``:memory:``
    SQLite for a shared in-memory database and hand this thread's connection
    to its request threads (which crashes the sqlite3 module).
    """
    assert not live_server.thread.connections_override, "live server started before the test DB"
    django_user_model.objects.create_superuser(USERNAME, "operator@example.com", PASSWORD)
    page = Admin(browser, live_server.url, tmp_path / "screenshots")
    page.log_in()
    return page
