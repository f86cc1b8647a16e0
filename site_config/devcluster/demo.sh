#!/usr/bin/env bash
# The demo of slurm-arnold on the local cluster (run by `make demo` after `make cluster`):
# fragment the cluster with a few running jobs, then submit a TP8 x PP4 x DP4 job through
# arnold-sbatch whose tasks print their rank variables, and compare its layout with the one
# Slurm would have chosen (spreads and a picture).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"
out=$(mktemp -d /tmp/arnold-demo.XXXXXX)
jobs=()
cleanup() { [ ${#jobs[@]} -eq 0 ] || scancel "${jobs[@]}" 2>/dev/null || true; }
trap cleanup EXIT
count() { python -c 'import hostlist, sys; print(len(hostlist.expand_hostlist(sys.argv[1])))' "$1"; }
for nodes in 'n[001-010]' 'n[017-022]' 'n[033-039]' 'n[049-053]'; do
    jobs+=("$(sbatch --parsable --exclusive -t 5 -J demo-occupy -w "$nodes" -N "$(count "$nodes")" \
        -o /dev/null --wrap 'sleep 300')")
done
for _ in $(seq 100); do
    [ "$(squeue -h -t RUNNING -n demo-occupy | wc -l)" -eq ${#jobs[@]} ] && break
    sleep 0.2
done
echo "== 1. The fat tree, fragmented by a few running jobs (scontrol show topology + sinfo) =="
arnold topology show
echo
echo "== 2. A TP8 x PP4 x DP4 job (16 nodes of 8 GPUs) through arnold-sbatch =="
cat > "$out/train.sh" <<'JOB'
#!/bin/bash
#SBATCH -N 16 --ntasks-per-node=8 --gpus-per-node=8 --exclusive -t 5 -J demo-train
#ARNOLD --tp 8 --pp 4 --align auto
srun --arnold-rankfile=auto bash -c 'echo "$SLURMD_NODENAME RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE TP=$ARNOLD_TP_RANK PP=$ARNOLD_PP_RANK DP=$ARNOLD_DP_RANK MASTER=$MASTER_ADDR:$MASTER_PORT"'
JOB
echo "\$ arnold-sbatch --explain=$out/placement.svg -o $out/train-%j.out $out/train.sh"
job=$(arnold-sbatch --parsable --explain="$out/placement.svg" -o "$out/train-%j.out" "$out/train.sh")
jobs+=("$job")
echo "submitted job $job"
for _ in $(seq 300); do
    state=$(sacct -X -n -P -j "$job" -o State 2>/dev/null | head -1)
    case "$state" in COMPLETED|FAILED|CANCELLED*|TIMEOUT) break ;; esac
    sleep 0.2
done
echo
echo "== 3. What its 128 tasks printed (first of each stage, sorted by rank) =="
sort -t= -k2 -n "$out/train-$job.out" | awk -F'PP=' '{split($2, a, " "); if (!(a[1] in seen)) {seen[a[1]]=1; print}}'
echo "... ($(wc -l < "$out/train-$job.out") lines in $out/train-$job.out; state $state)"
echo
echo "== 4. The job as arnold recorded it (its layout beside Slurm's is in step 2) =="
arnold jobs --limit 1
echo
echo "== 5. Which layout such a model should use, and which pipeline schedule this placement wants =="
echo "\$ arnold plan --model gpt-18.4b --gpus 128 --global-batch 512 --gpu a100-80g --explain"
arnold plan --model gpt-18.4b --gpus 128 --global-batch 512 --gpu a100-80g --explain
echo "\$ arnold pipeline --from-job $job --model gpt-18.4b --global-batch 512 --gpu a100-80g"
arnold pipeline --from-job "$job" --model gpt-18.4b --global-batch 512 --gpu a100-80g
echo
echo "picture of both layouts: $out/placement.svg"
echo
echo "== 6. The admins' page and metrics (arnold report; run it beside arnold reserve sync) =="
echo "\$ arnold report --html $out/report --metrics $out/arnold.prom"
arnold report --html "$out/report" --metrics "$out/arnold.prom"
if command -v chromium >/dev/null; then
    chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,800 \
        --screenshot="$out/report.png" "file://$out/report/index.html" >/dev/null 2>&1
fi
echo "the page: file://$out/report/index.html (serve $out/report with any web server)"
echo "its screenshot: $out/report.png; the metrics: $out/arnold.prom"
