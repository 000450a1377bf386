"""``-v`` for the commands: verbosity mapped onto the package logger."""

from __future__ import annotations

import logging
import sys

__all__ = ["configure_logging"]

_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


def configure_logging(verbosity: int) -> None:
    """Set the ``django_leasejobs`` logger's level; log to stderr if the site set up nothing."""
    logger = logging.getLogger("django_leasejobs")
    logger.setLevel(_LEVELS.get(verbosity, logging.DEBUG))
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
