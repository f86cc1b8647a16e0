"""The trace-driven simulator (``arnold sim``)."""

#: The run-time predictors the simulator knows (``slurm_arnold.sim.predictors``); here so the
#: CLI can offer them without importing numpy.
PREDICTORS = ("requested", "last2", "model", "model_q", "oracle")
