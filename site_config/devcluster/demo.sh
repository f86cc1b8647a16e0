#!/usr/bin/env bash
# The demo of slurm-arnold on the local cluster (run by `make demo` after `make cluster`).
set -euo pipefail
cd "$(dirname "$0")/../.."
arnold=.venv/bin/arnold
echo "== The live fat tree (scontrol show topology, sinfo) =="
"$arnold" topology show
