"""Helpers of the tests and the benchmarks (``tests/``, ``bench/``): the Kafka test broker,
recorded streams and service runs, deployment and audit fixtures. They live beside the package,
not in it (the wheel does not ship them: ``tests/test_wheel.py``), so that tests and benchmarks
share them without importing one another's modules; the repository root is on ``sys.path``
under pytest (``tests/`` is a package) and the benchmarks put it there."""
