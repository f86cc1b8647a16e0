"""The trace-driven simulator (``arnold sim``)."""

#: The run-time predictors the simulator knows (``slurm_arnold.sim.predictors``); here so the
#: CLI can offer them without importing numpy.
PREDICTORS = ("requested", "last2", "model", "model_q", "oracle")

#: Result keys measured in wall time: they depend on the machine and its load, so two replays of
#: the same input agree on every key but these.
WALL_CLOCK_KEYS = frozenset({"seconds", "placement_slowest_s"})
