"""Traces: one per job across every stage (docs/tracing.md).

`setup.py` builds the process's tracer from the settings (nothing at all when sampling is 0);
`store.py` is the local span store every process appends to; `propagate.py` carries a span's
context in Kafka headers (W3C `traceparent`) and Celery task headers; `tree.py` turns a job's
spans into the tree `stepwise trace` prints; `paths.py` builds the anomaly-path graph of
`stepwise paths`.
"""
