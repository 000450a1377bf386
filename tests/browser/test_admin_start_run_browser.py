"""Start a run from the admin (SPEC §8 A9) in a real browser, on Django 5.2 (``.venv``) and 6.1
(``.venv61``): the run list's "Start a run", the job chooser, the job's form, and the run's
page it lands on; the confirmation of a job not safe to repeat; the page at a phone's 390 px.
"""

from __future__ import annotations

import pytest
from django import forms
from selenium.webdriver.support.ui import Select

from django_leasejobs.models import Run

from .test_admin_a8_browser import PHONE, PHONE_TALL, assert_whole_in_view, window
from .test_admin_confirmations import assert_styled_breadcrumbs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

RUNS = "/admin/leasejobs/run/"
ADD = f"{RUNS}add/"


class ImportForm(forms.Form):
    source = forms.ChoiceField(choices=[("crm", "CRM"), ("shop", "Shop")])
    limit = forms.IntegerField(min_value=1, initial=100, help_text="At most this many contacts.")


def imports(p):
    """Import contacts from a source."""
    return p.done()


def test_a9_start_a_run_through_the_form_and_land_on_its_page(admin, define):
    define("t.browser.import", imports, form=ImportForm)
    admin.open(RUNS)
    admin.submit(admin.find("ul.object-tools a.addlink"))  # the list's "Start a run"
    assert admin.driver.current_url.endswith(ADD)
    assert_styled_breadcrumbs(admin, "Home", "Lease jobs", "Runs", "Start a run")

    Select(admin.find("#leasejobs-job-chooser select#id_job")).select_by_value("t.browser.import")
    admin.submit(admin.find('#leasejobs-job-chooser [type="submit"]'))
    assert admin.driver.current_url.endswith(f"{ADD}?job=t.browser.import")
    assert "Import contacts from a source." in admin.text(".leasejobs-explanation")

    instance = admin.find("#id_instance")
    assert instance.get_attribute("value") == "default"
    instance.clear()
    instance.send_keys("crm-eu")
    Select(admin.find("#id_source")).select_by_value("shop")
    limit = admin.find("#id_limit")
    limit.clear()
    limit.send_keys("25")
    admin.screenshot("start-run-form.png")  # docs/operators.md, "Start a run"
    admin.submit(admin.find('#leasejobs-start-form [name="_start"]'))

    run = Run.objects.get()
    assert admin.driver.current_url.endswith(f"{RUNS}{run.pk}/change/")
    [message] = admin.messages("success")
    assert run.pk in message
    assert admin.find(f'.messagelist a[href="{RUNS}{run.pk}/change/"]').text == run.pk
    assert (run.job, run.instance) == ("t.browser.import", "crm-eu")
    assert run.decoded_payload().value == {"source": "shop", "limit": 25}


def test_a9_a_job_not_safe_to_repeat_is_confirmed_before_it_starts(admin, define):
    define("t.browser.transfer", imports, safe_to_repeat=False)
    admin.open(f"{ADD}?job=t.browser.transfer")
    admin.find("#id_payload").send_keys('{"amount_cents": 1200, "to": "acct-9"}')
    admin.submit(admin.find('#leasejobs-start-form [name="_start"]'))

    assert "Start a run of t.browser.transfer?" in admin.text("#content")
    assert '"amount_cents": 1200' in admin.text("#leasejobs-start-payload")
    assert not Run.objects.exists()  # asking wrote nothing
    admin.screenshot("start-run-confirm.png")
    admin.submit(admin.find('[name="_back"]'))  # change the values: the form, filled
    assert '"to": "acct-9"' in admin.find("#id_payload").get_attribute("value")
    admin.submit(admin.find('#leasejobs-start-form [name="_start"]'))
    admin.submit(admin.find('[name="_confirm"]'))

    run = Run.objects.get()
    assert admin.driver.current_url.endswith(f"{RUNS}{run.pk}/change/")
    assert run.decoded_payload().value == {"amount_cents": 1200, "to": "acct-9"}


def test_a9_at_390_px_the_start_page_is_whole_and_its_errors_are_on_their_fields(admin, define):
    define("t.browser.import", imports, form=ImportForm)
    with window(admin, PHONE, PHONE_TALL) as driver:
        admin.open(f"{ADD}?job=t.browser.import")
        assert driver.execute_script("return window.innerWidth") == PHONE
        limit = admin.find("#id_limit")
        limit.clear()
        limit.send_keys("0")
        admin.submit(admin.find('#leasejobs-start-form [name="_start"]'))

        assert not Run.objects.exists()
        admin.screenshot("start-run-390.png", scroll_to=".errornote")
        error = admin.find(".form-row.field-limit.errors .errorlist")
        assert "greater than or equal to 1" in error.text
        assert driver.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth"
        ), "the page scrolls sideways"
        for selector in ("#id_instance", "#id_again", "#id_source", "#id_limit", "[name=_start]"):
            assert_whole_in_view(admin, admin.find(selector), selector)
        # Every field has its label, and its help text is what the field describes itself by.
        for name in ("instance", "source", "limit"):
            assert admin.find(f'label[for="id_{name}"]').text
        described = admin.find("#id_limit").get_attribute("aria-describedby") or ""
        assert "id_limit_helptext" in described.split()
        assert admin.text("#id_limit_helptext") == "At most this many contacts."

        define("t.browser.fragile", imports, safe_to_repeat=False)  # a JSON payload's box
        admin.open(f"{ADD}?job=t.browser.fragile")
        assert_whole_in_view(admin, admin.find("#id_payload"), "#id_payload")
        long = '{"note": "' + "a-long-word-with-no-space-" * 20 + '"}'
        admin.find("#id_payload").send_keys(long)
        admin.submit(admin.find('#leasejobs-start-form [name="_start"]'))
        payload = admin.find("#leasejobs-start-payload")  # the confirmation, at 390 px
        assert_whole_in_view(admin, payload, "the payload")
        assert_whole_in_view(admin, admin.find('[name="_confirm"]'), "Yes, start it")
        assert driver.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth"
        ), "the confirmation scrolls sideways"
