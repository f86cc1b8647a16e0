#!/usr/bin/env bash
# The demo of slurm-arnold on the local cluster (run by `make demo` after `make cluster`):
# fragment the cluster with a few running jobs, then compare where Slurm and Arnold would put
# a TP8 x PP4 x DP4 job.
set -euo pipefail
cd "$(dirname "$0")/../.."
arnold=.venv/bin/arnold
jobs=()
cleanup() { [ ${#jobs[@]} -eq 0 ] || scancel "${jobs[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for nodes in 'n[001-010]' 'n[017-022]' 'n[033-039]' 'n[049-053]'; do
    jobs+=("$(sbatch --parsable --exclusive -t 5 -J demo-occupy -w "$nodes" -N "$(
        .venv/bin/python -c 'import hostlist, sys; print(len(hostlist.expand_hostlist(sys.argv[1])))' "$nodes"
    )" -o /dev/null --wrap 'sleep 300')")
done
for _ in $(seq 100); do
    [ "$(squeue -h -t RUNNING -n demo-occupy | wc -l)" -eq ${#jobs[@]} ] && break
    sleep 0.2
done
echo "== The live fat tree, with a few jobs running (scontrol show topology + sinfo) =="
"$arnold" topology show
echo
echo "== A TP8 x PP4 x DP4 job (16 nodes, alpha 0.25: pipelines matter most) =="
echo "-- where slurmctld would put it (sbatch --test-only), ranks in node-list order:"
"$arnold" place --tp 8 --pp 4 --nodes 16 --algo slurm --alpha 0.25
echo "-- where Arnold puts it:"
"$arnold" place --tp 8 --pp 4 --nodes 16 --algo mip --alpha 0.25
