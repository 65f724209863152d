"""The work's vocabulary, shared by the Airflow side and the worker: ids, the storage layout, the records in it (work.json,
markers, claims, run leases), the plan of segments and spans, and the storage protocols of claims and leases.

Shared work is content-addressed (``work_id``): the identity, the segments and their markers, reusable by any run over
the same input. What belongs to one run (its output, merge and marker, its lease on the shared work) is never written
into a shared file. No Airflow, no media or engine here.
"""
