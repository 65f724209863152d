"""The worker's measurements and their exporters (no Airflow): OpenTelemetry when configured (``metrics``), and a
Prometheus remote-write exporter of our own (``remote_write``). The names live in ``metric_names``."""
