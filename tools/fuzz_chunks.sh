#!/bin/sh
# A long fuzz campaign in chunks, each saved as it finishes, so that a campaign cut
# short still has its counts (docs/reliability.md):
#   tools/fuzz_chunks.sh OUT_DIR SEED CHUNK_SIZE FIRST_CHUNK LAST_CHUNK [JOBS]
# Chunk k runs `--budget CHUNK_SIZE --start k*CHUNK_SIZE`: every family's case
# indices of chunk k lie in [k*CHUNK_SIZE, (k+1)*CHUNK_SIZE), so chunks never repeat
# a case. Results: OUT_DIR/chunk_K.json (tally), OUT_DIR/findings/ (reproducers),
# OUT_DIR/chunks.log (one line per chunk: start, end, seconds, exit status).
# FAMILY=trust (environment) runs that family only.
set -u
out=$1 seed=$2 size=$3 first=$4 last=$5 jobs=${6:-2}
python=${PYTHON:-python}
family=${FAMILY:+--family $FAMILY}
mkdir -p "$out"
k=$first
while [ "$k" -le "$last" ]; do
    begun=$(date -u +%H:%M:%S); t0=$(date +%s)
    nice -n 10 "$python" -m caffe2py.tools.fuzz --budget "$size" --seed "$seed" --start $((k * size)) \
        --jobs "$jobs" $family --out "$out/findings" --json "$out/chunk_$k.json" >"$out/chunk_$k.txt" 2>&1
    rc=$?
    echo "chunk $k seed $seed${FAMILY:+ family $FAMILY} start $((k * size)) size $size: $begun -> $(date -u +%H:%M:%S) UTC, $(( $(date +%s) - t0 )) s, exit $rc" >>"$out/chunks.log"
    k=$((k + 1))
done
