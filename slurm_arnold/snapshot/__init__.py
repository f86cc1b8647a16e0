"""The cluster at one moment, below both of its users (the wrapper and the admin loop):

- ``view``: the free nodes for placement (the one definition of *free*) and which of them a
  job may use (``narrow_free``);
- ``live``: that view read through the Slurm adapter, and Slurm's own choice of nodes;
- ``queue``: job states, queue order, the nodes the queue holds, our reservations' names;
- ``snapshot``: one reading of nodes, jobs and reservations for one decision, with drain times;
- ``wait_plan``: where a job that cannot start now should wait, on one snapshot.

Nothing here imports ``slurm_arnold.submit`` or ``reservations`` beyond its pure policy.
"""
