"""Helpers of the tests and the benchmarks (``tests/``, ``bench/``): the Kafka test broker,
recorded streams and service runs, deployment and audit fixtures. The service never imports
them; they live in the package so that tests and benchmarks share them without importing one
another's modules."""
