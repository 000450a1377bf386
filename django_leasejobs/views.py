"""The metrics view a site routes itself (SPEC §16 O2).

``path("metrics/leasejobs", metrics)`` in the site's URLconf, and Prometheus
scrapes it with a bearer token (``LEASEJOBS["METRICS_TOKEN"]``); an operator
with ``leasejobs.view_run`` may open it in a browser too. Anyone else gets
403 and nothing of the figures. ``prometheus_client`` is imported only inside
the view, once the caller is admitted: a site without the ``[prometheus]``
extra can import this module, and its view answers 501.
"""

from __future__ import annotations

import hmac
import logging

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from .conf import SPECS, conf
from .errors import describe

__all__ = ["PERMISSION", "metrics"]

logger = logging.getLogger("django_leasejobs")

#: What a user needs to read the metrics (the same as to see the runs).
PERMISSION = "leasejobs.view_run"


@csrf_exempt
@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Answer the site's figures in the Prometheus text format (O2).

    Admitted: a request with ``Authorization: Bearer <token>`` equal to
    ``LEASEJOBS["METRICS_TOKEN"]`` (compared in constant time), or from an
    authenticated user with the ``leasejobs.view_run`` permission. Anyone
    else -- anonymous, staff without the permission, a wrong or empty token,
    another scheme, any token while ``METRICS_TOKEN`` is ``None`` -- gets 403
    and no data. Only ``GET`` (405 otherwise); exempt from CSRF, never cached.

    Parameters
    ----------
    request
        The scrape.

    Returns
    -------
    HttpResponse
        200 with the figures (content type
        ``prometheus_client.CONTENT_TYPE_LATEST``); 403 for anyone not
        admitted; 501 without ``prometheus-client`` installed; 503 when the
        database cannot be read. Each refusal is one line of text.
    """
    try:
        if not _admitted(request):
            return _line(403, "forbidden")
        try:
            import prometheus_client
        except ImportError:
            return _line(
                501, "metrics need prometheus-client: pip install 'django-leasejobs[prometheus]'"
            )
        from .metrics import exposition

        body = exposition()
    except DatabaseError as exc:
        logger.warning("Metrics not read: %s", describe(exc))
        return _line(503, "metrics unavailable: the database could not be read")
    return HttpResponse(body, content_type=prometheus_client.CONTENT_TYPE_LATEST)


def _admitted(request: HttpRequest) -> bool:
    """The token first (no database read), then the session's user and permission."""
    if _token_matches(request.headers.get("Authorization", "")):
        return True
    user = getattr(request, "user", None)  # None without the auth middleware
    return bool(user is not None and user.is_authenticated and user.has_perm(PERMISSION))


def _token_matches(header: str) -> bool:
    """Whether *header* is ``Bearer <METRICS_TOKEN>``; never with no token configured."""
    token = conf.METRICS_TOKEN
    if token is None or not SPECS["METRICS_TOKEN"].valid(token):
        return False  # a malformed setting admits nobody (manage.py check reports it)
    scheme, _, given = header.partition(" ")
    given = given.strip(" \t")  # RFC 6750: "Bearer" 1*SP token; a server trims the rest
    if scheme.lower() != "bearer" or not given:
        return False
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
    )


def _line(status: int, text: str) -> HttpResponse:
    return HttpResponse(f"{text}\n", status=status, content_type="text/plain; charset=utf-8")
