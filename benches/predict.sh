#!/usr/bin/env bash
# Prediction against reality on the CPU backend: the 16 runs of
# docs/profile.md, each trained with --compare-simulated on one profile of
# this machine, printed as a table of the median measured iteration, its
# ratio to the simulated one and the machine's ratio (the probe timed around
# the run against the profile's: above 1, the machine ran slower than when it
# was profiled), then how many are within 10%, of the ratios as they are and
# of the ratios over the machine's.
#
# PROFILE names a profile to use (default: one measured first by
# `fateplan profile --threads 2`, written to PROFILE_OUT where that names a
# file, else to the work folder, removed at the end); SSD_DIR the folder
# whose drive that profile measures (default the work folder, under
# TMPDIR: the runs here use no SSD, but a profile kept for other plans
# should measure the drive they spill to); RUNS (default 3) is how many
# times each run trains; EPOCHS (default 6); BIN (default the release
# build, built first) the binary; CORA (default
# ${FATEPLAN_DATA:-../shared/data}/cora beside the checkout) the Cora
# folder, whose two runs are skipped, and said so, where it is absent.
set -euo pipefail
export LC_ALL=C
# Paths given are read from where the script was started (a PROFILE that
# names no file here, such as cpu-small, is a built-in profile's name).
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
for var in BIN PROFILE PROFILE_OUT SSD_DIR CORA FATEPLAN_DATA; do
    if [ -n "${!var:-}" ] && { [ "$var" != PROFILE ] || [ -e "${!var}" ]; }; then
        printf -v "$var" '%s' "$(absolute "${!var}")"
    fi
done
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
EPOCHS=${EPOCHS:-6}
CORA=${CORA:-${FATEPLAN_DATA:-$PWD/../shared/data}/cora}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fateplan-predict.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet
    BIN=$PWD/target/release/fateplan
fi
if [ -z "${PROFILE:-}" ]; then
    PROFILE=${PROFILE_OUT:-$WORK/profile.json}
    "$BIN" profile --ssd-dir "${SSD_DIR:-$WORK}" --threads 2 -o "$PROFILE" > /dev/null
    echo "profile measured by $("$BIN" --version) and written to $PROFILE"
fi
S15=rmat:scale=15,features=64,classes=8,seed=1
S16=rmat:scale=16,features=128,classes=16,seed=1
S18=rmat:scale=18,features=128,classes=16,seed=1
RUNS_LIST=(
    "--graph $S15 --hidden 16 --partitions 1"
    "--graph $S15 --hidden 16 --partitions 4"
    "--model sage --graph $S15 --hidden 16 --partitions 1"
    "--model sage --graph $S15 --hidden 16 --partitions 4"
    "--graph $S15 --hidden 128 --partitions 1"
    "--graph $S15 --hidden 128 --partitions 8"
    "--graph $S16 --hidden 128 --partitions 1"
    "--graph $S16 --hidden 128 --partitions 4"
    "--model sage --graph $S16 --hidden 64 --partitions 1"
    "--model sage --graph $S16 --hidden 64 --partitions 8"
    "--graph $S18 --hidden 128 --partitions 1"
    "--graph $S18 --hidden 128 --partitions 8"
    "--graph $S18 --hidden 128 --partitions 16"
    "--graph $S18 --hidden 128 --layers 3 --partitions 8"
    "--graph $CORA --hidden 16 --partitions 4"
    "--graph $CORA --hidden 16 --partitions 1"
)
printf '%-96s %12s %8s %8s\n' "ARGS" "measured" "ratio" "machine"
results="$WORK/results"
: > "$results"
for args in "${RUNS_LIST[@]}"; do
    if [[ "$args" == *"$CORA"* ]] && [ ! -f "$CORA/edge_index.npy" ]; then
        printf '%-96s skipped: Cora not found (set CORA or FATEPLAN_DATA)\n' "$args"
        continue
    fi
    : > "$WORK/times"
    for _ in $(seq "$RUNS"); do
        # shellcheck disable=SC2086
        if ! "$BIN" train $args --epochs "$EPOCHS" --threads 2 --policy retain-all \
            --profile "$PROFILE" --compare-simulated --json > "$WORK/run.json" 2> "$WORK/run.err"; then
            echo "failed: fateplan train $args" >&2
            cat "$WORK/run.err" >&2
            exit 1
        fi
        # The machine's ratio: the probe around the run against the
        # profile's ("-" where they do not compare).
        python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['compare_simulated']; m=c.get('machine'); print(c['iteration_s']['measured'], c['iteration_s']['ratio'], '%.3f' % m['ratio'] if m else '-')" \
            "$WORK/run.json" >> "$WORK/times"
    done
    # The median by measured time (the lower middle one of an even count).
    sort -g "$WORK/times" | awk -v args="$args" -v runs="$RUNS" '
        { m[NR] = $1; r[NR] = $2; p[NR] = $3 }
        END { k = int((runs + 1) / 2); printf "%-96s %9.2f ms %8.3f %8s\n", args, m[k] * 1000, r[k], p[k] }' |
        tee -a "$results"
done
awk '{ r = $(NF - 1); n++; d = r > 1 ? r - 1 : 1 - r; s += d; if (d <= 0.1 + 1e-9) w++
       if ($NF != "-") { q = r / $NF; e = q > 1 ? q - 1 : 1 - q; t += e; m++; if (e <= 0.1 + 1e-9) v++ } }
    END { if (n) printf "within 10%%: %d of %d (0.900 and 1.100 counted in); mean distance from 1: %.3f\n", w, n, s / n
          if (m) printf "the ratio over the machine'"'"'s: within 10%%: %d of %d; mean distance from 1: %.3f\n", v, m, t / m }' "$results"
