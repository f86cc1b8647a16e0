"""The trace-driven simulator (``arnold sim``): a discrete-event replay of a job log on a fat
tree, under two policies.

**slurm** approximates Slurm's ``sched/backfill`` with ``topology/tree``:

- Priority is submit order (FIFO; no fair share, QOS, partitions or preemption).
- A scheduling pass runs at every simulated instant where a job ends or is submitted (after
  all ends, then all submits, of that instant). It tests the first ``depth`` pending jobs in
  priority order (like ``bf_max_job_test``). A job starts at once if enough resources are free
  and it would not delay any planned start (below).
- The first ``plan_ahead`` jobs that cannot start get a planned start: the earliest time at
  which enough nodes are free if every running job runs to its **time limit** (what
  backfill knows), on the nodes tree-fit would pick then. A later job may start now only on
  nodes outside those plans, or if it ends (by its limit) before the planned start.
- Node choice is topology/tree's: the lowest switch level with room, best fit there, the
  fullest leaves first (``SimCluster.tree_fit``). Jobs of fewer than g GPUs share nodes (best
  fit by free GPUs); larger jobs take whole nodes (``--exclusive``).
- Jobs end at their run time, cut at their time limit (Slurm enforces limits; the logs' few
  overruns are cut). Not modelled: the main scheduler's separate cadence (``bf_interval``:
  passes here are instant), job arrays, dependencies, node failures, resizing, suspend.

**arnold** is the same backfill plus :mod:`reservations.policy` for large jobs (LPJs): an
LPJ that can start now is placed by the placement engine on the free nodes; one that cannot
gets a reservation (at most ``max_reservations`` at once, in priority order) on nodes chosen
by predicted drain time and spread; the reserved nodes take no new jobs except short ones the
predictor admits; the LPJ starts when all its nodes are free.

LPJ layout for its spread: TP = g, PP = 4 (2 or 1 when the nodes do not divide), DP = nodes/PP,
alpha = 0.5. Under slurm the rank order is Megatron's default over tree-fit's node order.
"""

#: The run-time predictors the simulator knows (``slurm_arnold.sim.predictors``); here so the
#: CLI can offer them without importing numpy.
PREDICTORS = ("requested", "last2", "model", "model_q", "oracle")

#: Result keys measured in wall time: they depend on the machine and its load, so two replays of
#: the same input agree on every key but these.
WALL_CLOCK_KEYS = frozenset({"seconds", "placement_slowest_s"})
