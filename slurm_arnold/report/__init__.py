"""The admins' view: one snapshot of the cluster and the site's state (``gather``), shown as a
self-contained HTML page (``page``) and as Prometheus metrics (``metrics``), both written by
``arnold report``. Everything shown is read from what the rest of slurm-arnold recorded
(placements, rank files, reservations, admissions, bindings, the serving model); nothing is
solved again."""
