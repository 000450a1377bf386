"""The fault tests of SPEC §17 and their toolkit, for every F rule's tests to share.

* ``proxy.py`` -- :class:`~tests.faults.proxy.FaultProxy`, a TCP proxy to the
  database that delays, black-holes, resets, or cuts after a chosen statement's reply;
* ``fleet.py`` -- ``rundueJobs --loop`` workers (through the proxy or not, with more
  environment), SIGSTOP/SIGCONT, the database ending a worker's connections;
* ``audit.py`` -- the invariants checked after every fault;
* ``jobs.py`` -- the jobs they drive (registered by tests/jobs.py).

Every test here is marked ``faults`` (left out of the default run; ``pytest -m faults``).
"""
