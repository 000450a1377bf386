"""Start a run from the admin (SPEC §8 A9, §3 ``@job(form=...)``, issue 28).

The run list's Add (``admin:leasejobs_run_add``), for ``leasejobs.add_run``:
a job chooser, then the job's ``form`` or a JSON payload, ``instance`` and
``again``; every value held to R2 before anything is written; a live run
joined and linked (R1); a confirmation for a job not safe to repeat; a
``LogEntry`` naming the actor; a 403 without the permission.
"""

from __future__ import annotations

import pytest
from django import forms
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.messages import INFO, SUCCESS
from django.urls import reverse

from django_leasejobs import job, registry, start
from django_leasejobs.exceptions import InvalidJob
from django_leasejobs.models import Run
from django_leasejobs.tasks.options import TASK_JOB
from tests.utils import user_with

db = pytest.mark.django_db

RUNS = "/admin/leasejobs/run/"


def add_url() -> str:
    return reverse("admin:leasejobs_run_add")


def change_url(run: Run) -> str:
    return reverse("admin:leasejobs_run_change", args=[run.pk])


def said(response, level=None) -> list[str]:
    return [str(m) for m in response.context["messages"] if level is None or m.level == level]


def handler(p):
    """Import contacts from a source."""
    return p.done()


class ImportForm(forms.Form):
    source = forms.ChoiceField(choices=[("crm", "CRM"), ("shop", "Shop")])
    limit = forms.IntegerField(min_value=1, initial=100)
    dry_run = forms.BooleanField(required=False)


class DatedForm(forms.Form):
    """A form that forgot to convert its date: ``cleaned_data["day"]`` is a ``date``."""

    note = forms.CharField()
    day = forms.DateField()


class PricedForm(forms.Form):
    amount = forms.DecimalField()


class UserForm(forms.Form):
    user = forms.ModelChoiceField(queryset=User.objects.all())


class ConvertedForm(forms.Form):
    """The same date, converted as the docs say: ISO text."""

    day = forms.DateField()

    def clean_day(self):
        return self.cleaned_data["day"].isoformat()


@pytest.fixture
def jobs(define):
    """The jobs these tests start: with a form, without one, not safe to repeat."""
    return {
        "form": define("t.a9.import", handler, form=ImportForm),
        "plain": define("t.a9.plain", handler),
        "fragile": define("t.a9.fragile", handler, safe_to_repeat=False),
        "fragile_form": define("t.a9.fragile_form", handler, safe_to_repeat=False, form=ImportForm),
        "dated": define("t.a9.dated", handler, form=DatedForm),
        "priced": define("t.a9.priced", handler, form=PricedForm),
        "user": define("t.a9.user", handler, form=UserForm),
        "converted": define("t.a9.converted", handler, form=ConvertedForm),
    }


def nothing_written() -> bool:
    return not Run.objects.exists() and not LogEntry.objects.exists()


# -- registration (§3) -------------------------------------------------------------------


class ModelishForm(forms.ModelForm):
    class Meta:
        model = User
        fields = ["username"]


@pytest.mark.parametrize(
    "form",
    [dict, ImportForm(), "tests.ImportForm", forms.Field, ModelishForm],
    ids=["a-class-not-a-form", "a-form-instance", "a-path", "a-field", "a-model-form"],
)
def test_a9_registration_refuses_a_form_that_is_not_a_form_subclass(form):
    with pytest.raises(InvalidJob, match=r"'t\.a9\.bad'.*form must be a django\.forms\.Form"):
        job("t.a9.bad", form=form)(handler)
    assert "t.a9.bad" not in registry


@pytest.mark.parametrize("name", ["job", "instance", "payload", "again", "_confirm"])
def test_a9_registration_refuses_a_form_field_named_as_the_pages_own(name):
    clashing = type("Clashing", (forms.Form,), {name: forms.CharField()})
    with pytest.raises(InvalidJob, match=rf"form field '{name}' takes a name the admin's start"):
        job("t.a9.clash", form=clashing)(handler)
    assert "t.a9.clash" not in registry


@db
def test_a9_start_from_code_does_not_use_the_form(jobs):
    result = start(jobs["form"], {"anything": ["the form", "does not check"]})
    assert Run.objects.get(pk=result.run.pk).decoded_payload().value == {
        "anything": ["the form", "does not check"]
    }


# -- permission ---------------------------------------------------------------------------


@db
def test_a9_without_add_run_a_403_and_no_add_button(client, jobs):
    client.force_login(user_with("view_run", "view_step"))
    assert client.get(add_url()).status_code == 403
    assert client.get(add_url(), {"job": "t.a9.plain"}).status_code == 403
    posted = client.post(add_url(), {"job": "t.a9.plain", "instance": "default", "payload": ""})
    assert posted.status_code == 403
    assert nothing_written()
    listing = client.get(RUNS)
    assert listing.status_code == 200
    assert add_url() not in listing.content.decode()
    assert "Start a run" not in listing.content.decode()


@db
def test_a9_with_add_run_the_list_offers_start_a_run(client, jobs):
    client.force_login(user_with("view_run", "view_step", "add_run"))
    content = client.get(RUNS).content.decode()
    assert f'href="{add_url()}" class="addlink"' in content
    assert "Start a run" in content
    assert client.get(add_url()).status_code == 200


@db
def test_a6_the_add_permission_edits_no_run(client, jobs):
    """``add_run`` starts runs; a run's page stays read-only, and a POST to it changes nothing."""
    client.force_login(user_with("view_run", "view_step", "add_run"))
    run = start(jobs["plain"], {"a": 1}).run
    page = client.get(change_url(run))
    assert page.status_code == 200
    assert 'name="payload"' not in page.content.decode()
    assert client.post(change_url(run), {"payload": '{"a": 2}'}).status_code == 403
    assert Run.objects.get(pk=run.pk).decoded_payload().value == {"a": 1}


# -- the chooser and ?job=NAME -----------------------------------------------------------------


@db
def test_a9_the_chooser_lists_registered_jobs_but_not_the_task_job(admin_client, jobs):
    assert TASK_JOB in registry  # tests/settings.py configures the tasks backend
    response = admin_client.get(add_url())
    assert response.status_code == 200
    choices = [value for value, _label in response.context["chooser"].fields["job"].choices]
    assert "t.a9.import" in choices
    assert "t.a9.plain" in choices
    assert TASK_JOB not in choices
    content = response.content.decode()
    assert '<select name="job"' in content
    assert 'method="get"' in content


@db
def test_a9_job_query_opens_that_jobs_form_directly(admin_client, jobs):
    content = admin_client.get(add_url(), {"job": "t.a9.import"}).content.decode()
    for name in ("source", "limit", "dry_run", "instance", "again"):
        assert f'name="{name}"' in content, name
    assert '<input type="hidden" name="job" value="t.a9.import"' in content
    assert 'name="payload"' not in content  # the form gives the payload
    assert 'value="default"' in content  # the instance's default
    assert "Import contacts from a source." in content  # what the job does

    plain = admin_client.get(add_url(), {"job": "t.a9.plain"}).content.decode()
    assert '<textarea name="payload"' in plain
    assert 'name="source"' not in plain


@pytest.mark.parametrize("name", ["t.a9.nowhere", TASK_JOB])
@db
def test_a9_job_query_for_a_job_not_offered_shows_the_chooser_with_an_error(
    admin_client, jobs, name
):
    response = admin_client.get(add_url(), {"job": name})
    assert response.status_code == 200
    assert "job" in response.context["chooser"].errors
    assert "Select a valid choice" in response.content.decode()


# -- starting -------------------------------------------------------------------------------


@db
def test_a9_a_job_with_a_form_starts_a_run_of_its_cleaned_data(admin_client, jobs):
    response = admin_client.post(
        f"{add_url()}?job=t.a9.import",
        {"job": "t.a9.import", "instance": "crm-eu", "source": "crm", "limit": "5"},
        follow=True,
    )
    run = Run.objects.get()
    assert response.redirect_chain == [(change_url(run), 302)]
    assert (run.job, run.instance) == ("t.a9.import", "crm-eu")
    assert run.decoded_payload().value == {"source": "crm", "limit": 5, "dry_run": False}
    assert run.origin == "api"  # it called start()
    [message] = said(response, SUCCESS)
    assert f'<a href="{change_url(run)}">{run.pk}</a>' in message
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id, entry.user.username) == (
        ADDITION,
        run.pk,
        "admin",
    )
    assert entry.get_change_message() == "Started from the admin"


@db
def test_a9_a_job_without_a_form_takes_a_json_payload(admin_client, jobs):
    response = admin_client.post(
        add_url(),
        {
            "job": "t.a9.plain",
            "instance": "default",
            "payload": '{"ids": [1, 2], "deep": {"x": null}}',
        },
    )
    run = Run.objects.get()
    assert response.status_code == 302
    assert response["Location"] == change_url(run)
    assert run.decoded_payload().value == {"ids": [1, 2], "deep": {"x": None}}
    assert run.instance == "default"
    assert LogEntry.objects.get().action_flag == ADDITION


@db
def test_a9_an_empty_payload_is_none(admin_client, jobs):
    admin_client.post(add_url(), {"job": "t.a9.plain", "instance": "i1", "payload": "  "})
    assert Run.objects.get().decoded_payload().value is None


@db
def test_a9_an_instance_left_empty_or_not_sent_is_default(admin_client, jobs):
    admin_client.post(add_url(), {"job": "t.a9.plain", "instance": "", "payload": "1"})
    admin_client.post(add_url(), {"job": "t.a9.import", "source": "crm", "limit": "1"})
    assert sorted(Run.objects.values_list("job", "instance")) == [
        ("t.a9.import", "default"),
        ("t.a9.plain", "default"),
    ]


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ("{nope", "This is not JSON"),
        ('{"x": NaN}', "NaN is not JSON"),
        ("[" * 150 + "]" * 150, "nested more than 100 levels deep"),
    ],
    ids=["not-json", "nan", "too-deep"],
)
@db
def test_a9_a_payload_that_is_not_queue_safe_json_rerenders_and_writes_nothing(
    admin_client, jobs, payload, error
):
    response = admin_client.post(
        add_url(), {"job": "t.a9.plain", "instance": "default", "payload": payload}
    )
    assert response.status_code == 200
    errors = response.context["page"].errors
    assert list(errors) == ["payload"]
    assert error in errors["payload"][0]
    assert "nothing was started" in response.content.decode()
    assert nothing_written()


@pytest.mark.parametrize(
    ("name", "data", "found"),
    [
        ("dated", {"note": "n", "day": "2026-12-04"}, "day is a datetime.date"),
        ("priced", {"amount": "12.50"}, "amount is a decimal.Decimal"),
        ("user", None, "user is a django.contrib.auth.models.User"),
    ],
    ids=["date", "decimal", "model-instance"],
)
@db
def test_a9_a_form_value_that_is_not_queue_safe_is_refused_on_its_field(
    admin_client, jobs, name, data, found
):
    spec = jobs[name]
    if data is None:
        data = {"user": User.objects.get(username="admin").pk}
    response = admin_client.post(add_url(), {"job": spec.name, "instance": "default", **data})
    assert response.status_code == 200
    errors = response.context["job_form"].errors
    field = found.split()[0]
    assert list(errors) == [field]
    assert found in errors[field][0]
    content = response.content.decode()
    assert f'class="form-row field-{field} errors"' in content  # shown on the field
    assert nothing_written()


@db
def test_a9_a_form_that_converts_its_values_starts_the_run(admin_client, jobs):
    admin_client.post(add_url(), {"job": "t.a9.converted", "instance": "x", "day": "2026-12-04"})
    assert Run.objects.get().decoded_payload().value == {"day": "2026-12-04"}


@db
def test_a9_the_forms_own_errors_and_a_bad_instance_rerender_and_write_nothing(admin_client, jobs):
    response = admin_client.post(
        add_url(), {"job": "t.a9.import", "instance": "a\x00b", "source": "nowhere", "limit": "0"}
    )
    assert response.status_code == 200
    assert set(response.context["job_form"].errors) == {"source", "limit"}
    assert set(response.context["page"].errors) == {"instance"}
    assert nothing_written()
    long = admin_client.post(add_url(), {"job": "t.a9.plain", "instance": "x" * 201, "payload": ""})
    assert "instance" in long.context["page"].errors
    assert nothing_written()


# -- R1: joining a live run --------------------------------------------------------------------


@db
def test_a9_a_live_run_is_joined_and_the_message_links_it(admin_client, jobs):
    live = start(jobs["plain"], {"first": True}, instance="eu").run
    response = admin_client.post(
        add_url(),
        {"job": "t.a9.plain", "instance": "eu", "payload": '{"second": true}'},
        follow=True,
    )
    assert response.redirect_chain == [(change_url(live), 302)]
    assert Run.objects.count() == 1
    joined = Run.objects.get()
    assert joined.decoded_payload().value == {"first": True}  # a join changes none of its columns
    assert not joined.rerun_requested
    [message] = said(response, INFO)
    assert "already live: joined it" in message
    assert f'<a href="{change_url(live)}">{live.pk}</a>' in message
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id, entry.user.username) == (CHANGE, live.pk, "admin")
    assert entry.get_change_message() == "Joined from the admin"


@db
def test_a9_again_on_a_join_asks_for_one_more_run(admin_client, jobs):
    live = start(jobs["form"], {"source": "crm"}, instance="eu").run
    response = admin_client.post(
        add_url(),
        {"job": "t.a9.import", "instance": "eu", "source": "shop", "limit": "7", "again": "on"},
        follow=True,
    )
    row = Run.objects.get(pk=live.pk)
    assert row.rerun_requested
    assert "One more run follows it" in said(response, INFO)[0]
    assert LogEntry.objects.get().get_change_message() == (
        "Joined from the admin, asking for one more run"
    )


# -- a job not safe to repeat: a confirmation first --------------------------------------------


@db
def test_a9_a_job_not_safe_to_repeat_asks_for_confirmation_first(admin_client, jobs):
    values = {"job": "t.a9.fragile_form", "instance": "once", "source": "shop", "limit": "3"}
    asked = admin_client.post(add_url(), values)
    assert asked.status_code == 200
    assert asked.templates[0].name == "admin/leasejobs/run/start_confirm.html"
    content = asked.content.decode()
    assert "Start a run of t.a9.fragile_form?" in content
    for name, value in values.items():
        assert f'<input type="hidden" name="{name}" value="{value}">' in content
    assert 'name="_confirm"' in content
    assert nothing_written()  # asking writes nothing

    back = admin_client.post(add_url(), {**values, "_back": "No"})
    assert back.templates[0].name == "admin/leasejobs/run/start.html"
    assert 'value="once"' in back.content.decode()  # the values, to change
    assert nothing_written()

    done = admin_client.post(add_url(), {**values, "_confirm": "Yes"})
    run = Run.objects.get()
    assert done["Location"] == change_url(run)
    assert run.decoded_payload().value == {"source": "shop", "limit": 3, "dry_run": False}
    assert LogEntry.objects.get().action_flag == ADDITION


@db
def test_a9_a_confirmation_is_checked_again_and_a_safe_job_needs_none(admin_client, jobs):
    """A confirmation whose values were changed meanwhile is refused like any form."""
    bad = admin_client.post(
        add_url(), {"job": "t.a9.fragile", "instance": "x", "payload": "{", "_confirm": "Yes"}
    )
    assert bad.status_code == 200
    assert "payload" in bad.context["page"].errors
    assert nothing_written()
    plain = admin_client.post(add_url(), {"job": "t.a9.plain", "instance": "x", "payload": "1"})
    assert plain.status_code == 302  # safe to repeat: no confirmation
