"""arnold-sbatch: placement-aware submission through the real sbatch."""
