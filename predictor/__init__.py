"""The job-completion-time predictor (LightGBM) and its job-history importers."""
