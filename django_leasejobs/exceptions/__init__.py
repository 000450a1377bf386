"""Every exception django-leasejobs raises, in one hierarchy under :class:`LeaseJobsError`.

Each class's docstring is its default message. Where a Django or Python
exception means the same thing, the class derives from it too, so existing
handling keeps working: an invalid job is an ``ImproperlyConfigured``, an
unsafe payload a ``ValidationError``, a refused argument a ``ValueError``.

Two exceptions stand outside the hierarchy on purpose: :class:`LeaseLost` and
:class:`PassInterrupted` are ``BaseException`` s, like
``asyncio.CancelledError``, so a handler's ``except Exception`` cannot
swallow them. Some are re-exported where their users import them:
:class:`RedactedError` from ``django_leasejobs.tasks``,
:class:`DrivesExhausted` from ``django_leasejobs.testing``.

Written by who meets them: :mod:`.refusals` (refused before anything is
written), :mod:`.passes` (what a pass raises, meets, or ends with),
:mod:`.tasks` (the task backend's and the test helpers'), under the root in
:mod:`.base`. Each is imported from here, by this module's name.
"""

from __future__ import annotations

from . import passes, refusals, tasks
from .base import LeaseJobsError
from .passes import *  # noqa: F403
from .refusals import *  # noqa: F403
from .tasks import *  # noqa: F403

__all__ = ["LeaseJobsError"]
__all__ += passes.__all__
__all__ += refusals.__all__
__all__ += tasks.__all__

# Each class is known by this module's path, the one its users import: a Django
# task's error records it (``TaskError.exception_class_path``), and a path stored
# in a row must keep importing whichever file here the class is written in.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
