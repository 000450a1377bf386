"""The recipes of the "Coming from elsewhere" page (``docs/howto/switching.md``).

Each module is one recipe, included by the page with ``literalinclude`` and
run by ``tests/test_docs_switching.py``; :mod:`.shop` stands in for the
site's own code the recipes call. A module that defines jobs registers them
when imported: the test imports it for one test and unregisters them after.
"""
