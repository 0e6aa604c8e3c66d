"""/metrics of the service (issue 21): process and platform collectors, the build info, the
model version under its own name, no ``_created`` series, and the spend of record."""

from prometheus_client import generate_latest

from streaming_dpbandit import __version__
from streaming_dpbandit.metrics import ServiceMetrics


def test_metrics_have_process_platform_and_build_info_and_no_created_series():
    m = ServiceMetrics()
    m.events.labels("b", "decided").inc()
    m.model_version.labels("b").set(3)
    text = generate_latest(m.registry).decode()
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"):
        assert f"\n{name}" in text, name
    assert f'dpbandit_build_info{{version="{__version__}"}} 1.0' in text
    assert 'dpbandit_model_version{bandit="b"} 3.0' in text
    assert "dpbandit_episode " not in text and "dpbandit_episode{" not in text
    assert "_created" not in text  # disabled, see docs/metrics.md
