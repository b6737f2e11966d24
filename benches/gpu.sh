#!/usr/bin/env bash
# The GPU checks and benches, in one run on a machine with an NVIDIA GPU
# (docs/gpu.md records what they printed). Sections, in the order given
# (default: all):
#   env       the GPU, driver and CUDA libraries found
#   tests     the NVRTC and CUDA tests, train_cli's CUDA test, profile_cli, and
#             the runtime library's GPU profiler test (runtime_lib)
#   small     a planted graph trained on the CPU and the GPU, losses side by side
#   profile   `fateplan profile` on the GPU (PROFILE_ARGS adds flags, --quick say)
#   products  a 3-layer GCN, 256 hidden, on an ogbn-products-sized R-MAT graph:
#             retain-all, then dp at 25% of the retain-all peak (of 4
#             partitions; then of 1 partition, in 8, and in the count
#             --partitions auto chooses with its sweeps), the dp runs with
#             --sweep $SWEEP (default auto), each with --compare-simulated
#             on the measured profile (or PROFILE); PyTorch Geometric's full-graph GCN on the same graph
#             and GPU (benches/pyg_gcn.py: its sparse CSR adjacency, and its
#             edge_index too when PYG_EDGE_INDEX=1); each run's note gives the
#             device pool's peak beside the plan's count of it
#   copies    pinned host-to-device and device-to-host copies: PyTorch's
#             non_blocking copies (cudaMemcpyAsync) against the profile's
#   diag      retain-all with CUDA_LAUNCH_BLOCKING=1: each operator's GPU time
#   ongraph   `fateplan profile --graph` on the products-sized graph, then
#             its retain-all and dp runs (3.58 GB, --partitions auto) planned
#             on that profile, each with --compare-simulated
#   aggs      the same, each operator's span in a trace, for what the sparse
#             model misses: the products GCN at 1 and 8 partitions, and
#             at 1 without dropout; the profile's own GCN (R-MAT scale 21,
#             128 wide, aggregating first, transposes built)
#   kernels   each kernel's GPU time (FATEPLAN_KERNEL_TIMES: timing events
#             around every launch) for the products GCN's retain-all plan
#             at 1 and 8 partitions, 3 epochs
#   counts    dp at a quarter of the products GCN's retain-all peak in each
#             partition count of COUNTS (default 2 3 4 5 6 8), planned
#             with --sweep $SWEEP and trained, beside retain-all: which
#             count the GPU runs fastest, against the one the simulator
#             picks (--partitions auto)
#   loads     dp at a quarter of the products GCN's retain-all peak (4 and 8
#             partitions, with --sweep $SWEEP), each epoch run with the
#             compute stream waiting for every load as soon as its copy is
#             issued (FATEPLAN_LOADS_WAIT=1, the builds before) and without
#             (this build), alternating, 3 rounds: what the wait costs
#   versus    an earlier build (OLD_BIN) and this one on the same GPU in one
#             run: the products GCN at 1 and 8 partitions with every launch
#             blocking (aggregation spans by layer), then epochs of
#             retain-all and of dp at a quarter of its peak (8 partitions,
#             and the count --partitions auto chooses), the two builds
#             alternating (VERSUS_BLOCKING=0: the epochs alone)
#
# BIN (default target/release/fateplan) is the binary; TESTS a folder of
# prebuilt test binaries named cuda, nvrtc, train_cli, profile_cli and
# runtime_lib (the runtime crate's unit tests; default: built
# with cargo). OUT (default a temporary folder) gets logs.tgz: summary.txt
# and every log, report and trace. TRANSPOSES (default stored) is the
# products GCN's --transposes: `mirrored` plans and trains it reading each
# block's transpose as the mirror block, as a symmetric graph allows.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/fateplan}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/fateplan-gpu.XXXXXX")}
SCALE=${SCALE:-21}
EPOCHS=${EPOCHS:-10}
SWEEP=${SWEEP:-auto}
TRANSPOSES=${TRANSPOSES:-stored}
# The products-sized GCN's model, with the transposes TRANSPOSES names
# (`mirrored`: the graph is symmetric, so a block's transpose is another
# block, none stored or loaded).
SHAPE=(--layers 3 --hidden 256 --transposes "$TRANSPOSES")
GRAPH="rmat:scale=$SCALE,edge_factor=30,symmetric=true,features=100,classes=47,seed=1"
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/fateplan-gpu-work.XXXXXX")}
SECTIONS=${*:-env tests small profile copies products loads diag ongraph aggs kernels counts versus}
LOGS=$WORK/logs
mkdir -p "$LOGS"
SUMMARY="$LOGS/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

# NVRTC and cuBLAS: a pip wheel's folder (nvidia/cu13/lib) or the toolkit's.
if [ -z "${FATEPLAN_NVRTC_DIR:-}" ]; then
    for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
        [ -e "$d/nvidia/cu13/lib/libnvrtc.so.13" ] && FATEPLAN_NVRTC_DIR=$d/nvidia/cu13/lib && break
    done
fi
[ -z "${FATEPLAN_NVRTC_DIR:-}" ] && [ -d /usr/local/cuda/lib64 ] && FATEPLAN_NVRTC_DIR=/usr/local/cuda/lib64
export FATEPLAN_NVRTC_DIR
export LD_LIBRARY_PATH=${FATEPLAN_NVRTC_DIR:-}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FATEPLAN_REQUIRE_GPU=1 FATEPLAN_REQUIRE_NVRTC=1

field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d$1)"; }

# A trace's last iteration's aggregation and linear spans, summed by
# operator and layer over blocks and partitions: agg[l1] is every
# agg[l1,...].
span_sums() {
    python3 - "$1" <<'PY'
import json, sys
sums = {}
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    if e.get("ph") == "X" and e.get("tid") == 1 and e["name"].startswith(("agg", "linear")):
        base, rest = e["name"].split("[", 1)
        key = f"{base}[{rest.split(',')[0].rstrip(']')}]"
        count, ms = sums.get(key, (0, 0.0))
        sums[key] = (count + 1, ms + e["dur"] / 1e3)
for key, (count, ms) in sums.items():
    print(f"  {key:20} {count:4} spans {ms:9.3f} ms")
PY
}

# A quarter of the products GCN's one-partition retain-all peak on
# profile $1, in bytes: the quarter budget's device budget. QUARTER_BYTES
# sets it instead (3580413504 was the quarter before the ReLU masks
# lowered the peak).
quarter_budget() {
    if [ -n "${QUARTER_BYTES:-}" ]; then echo "$QUARTER_BYTES"; return; fi
    timeout 170 "$BIN" plan --graph "$GRAPH" "${SHAPE[@]}" --profile "$1" --partitions 1 \
        --policy retain-all --json | field "['predicted']['peak_bytes']['hbm'] // 4"
}

# The profile the runs plan with: PROFILE, else the one the profile
# section measured, else the shipped measurement of an H100.
profile_arg() {
    if [ -n "${PROFILE:-}" ]; then echo "$PROFILE"
    elif [ -s "$LOGS/gpu-profile.json" ]; then echo "$LOGS/gpu-profile.json"
    else echo h100-measured; fi
}

for section in $SECTIONS; do
    log="$LOGS/$section.log"
    echo "== $section" | tee -a "$SUMMARY"
    case $section in
    env)
        {
            nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
            nvcc --version | tail -2
            echo "FATEPLAN_NVRTC_DIR=$FATEPLAN_NVRTC_DIR"
            ls "$FATEPLAN_NVRTC_DIR" | grep -E 'nvrtc|cublas' | head
            nproc; free -g | head -2
        } >"$log" 2>&1
        cat "$log" | tee -a "$SUMMARY" >/dev/null
        head -3 "$log"
        ;;
    tests)
        for t in nvrtc cuda train_cli profile_cli runtime_lib; do
            args=()
            [ "$t" = train_cli ] && args=(cuda)
            [ "$t" = runtime_lib ] && args=(the_gpu_is_measured)
            if [ -n "${TESTS:-}" ]; then
                [ -x "$TESTS/$t" ] || { note "test $t: not in $TESTS"; continue; }
                timeout 150 "$TESTS/$t" "${args[@]}" --nocapture --test-threads 1 >"$LOGS/test_$t.log" 2>&1
            else
                pkg=fateplan-runtime
                case $t in train_cli | profile_cli) pkg=fateplan ;; esac
                target=(--test $t)
                [ "$t" = runtime_lib ] && target=(--lib)
                timeout 300 cargo test --release -p $pkg "${target[@]}" -- "${args[@]}" --nocapture --test-threads 1 >"$LOGS/test_$t.log" 2>&1
            fi
            note "test $t: exit $? $(grep -E '^test result' "$LOGS/test_$t.log" | tail -1)"
        done
        ;;
    small)
        g="planted:nodes=20000,classes=8,features=64,degree=10,homophily=0.8,seed=3"
        for b in cpu cuda; do
            timeout 200 "$BIN" train --graph "$g" --epochs 30 --backend $b --partitions 2 --json >"$LOGS/small_$b.json" 2>"$LOGS/small_$b.err"
            note "small $b: exit $? $(field "['final_loss'], d['iteration_s'], d.get('test_accuracy')" <"$LOGS/small_$b.json" 2>&1 | tail -1)"
        done
        ;;
    profile)
        timeout 240 "$BIN" profile ${PROFILE_ARGS:-} --ssd-dir "$WORK" --name gpu-measured -o "$LOGS/gpu-profile.json" >"$log" 2>&1
        note "profile: exit $?"
        tail -30 "$log" | tee -a "$SUMMARY"
        ;;
    diag)
        # Kernel times: every launch synchronous, so each operator's span is its GPU time.
        CUDA_LAUNCH_BLOCKING=1 timeout 170 "$BIN" train --graph "$GRAPH" "${SHAPE[@]}" --epochs 3 \
            --backend cuda --profile "$(profile_arg)" --csr-cache "$WORK/rmat.csr" --compare-simulated --json \
            --partitions 1 --policy retain-all --trace "$LOGS/diag_retain.trace.json" \
            >"$LOGS/diag_retain.json" 2>"$LOGS/diag_retain.err"
        note "diag retain-all (launch blocking): exit $? $(field "['iteration_s']" <"$LOGS/diag_retain.json" 2>&1 | tail -1)"
        python3 - "$LOGS/diag_retain.json" <<'PY' | tee -a "$SUMMARY"
import json, sys
d = json.load(open(sys.argv[1]))["compare_simulated"]
for o in d["operators"]:
    print(f'{o["name"]:16} {o["count"]:4} measured {o["seconds"]["measured"]:.4f} s simulated {o["seconds"]["simulated"]:.4f} s')
PY
        ;;
    ongraph)
        # The compute rates timed on the graph trained, against the
        # profile's own R-MAT: does the prediction come closer?
        ongraph=$LOGS/gpu-profile-graph.json
        timeout 240 "$BIN" profile --graph "$GRAPH" --ssd-dir "$WORK" --name gpu-measured-on-graph \
            -o "$ongraph" >"$log" 2>&1
        note "profile on the graph: exit $?"
        grep -E '^(device|fitted)' "$log" | tee -a "$SUMMARY"
        common=(--graph "$GRAPH" "${SHAPE[@]}" --epochs "$EPOCHS" --backend cuda
            --profile "$ongraph" --csr-cache "$WORK/rmat.csr" --compare-simulated --json)
        timeout 170 "$BIN" train "${common[@]}" --partitions 1 --policy retain-all \
            >"$LOGS/ongraph_retain.json" 2>"$LOGS/ongraph_retain.err"
        note "on-graph profile, retain-all: exit $? $(field "['iteration_s'], 'simulated', d['compare_simulated']['iteration_s']" <"$LOGS/ongraph_retain.json" 2>&1 | tail -1)"
        budget=$(quarter_budget "$ongraph")
        timeout 170 "$BIN" plan --graph "$GRAPH" "${SHAPE[@]}" --profile "$ongraph" \
            --partitions auto --policy dp --hbm-budget "$budget" --sweep "$SWEEP" \
            -o "$LOGS/ongraph_auto.plan.json" >"$LOGS/ongraph_auto_plan.txt" 2>&1
        note "on-graph profile, dp, partitions auto, budget $budget: planned: exit $? $(grep -E '^(partitions|predicted)' "$LOGS/ongraph_auto_plan.txt" | cut -c1-120 | tr '\n' ' ')"
        timeout 170 "$BIN" train "${common[@]}" --plan "$LOGS/ongraph_auto.plan.json" \
            --spill-dir "$WORK/spill" >"$LOGS/ongraph_dpauto.json" 2>"$LOGS/ongraph_dpauto.err"
        note "on-graph profile, dp, partitions auto, budget $budget: exit $? $(field "['iteration_s'], 'simulated', d['compare_simulated']['iteration_s']" <"$LOGS/ongraph_dpauto.json" 2>&1 | tail -1)"
        ;;
    aggs)
        # Every launch blocking: each operator's span in the trace is its
        # GPU time. Each run's aggregations and linear layers, summed by
        # layer, go to the summary.
        blocking() {
            local name=$1
            shift
            CUDA_LAUNCH_BLOCKING=1 timeout 120 "$BIN" train --backend cuda --profile "$(profile_arg)" \
                --epochs 3 --policy retain-all --compare-simulated --json "$@" \
                --trace "$LOGS/aggs_$name.trace.json" >"$LOGS/aggs_$name.json" 2>"$LOGS/aggs_$name.err"
            note "aggs $name: exit $? $(field "['iteration_s'], 'simulated', d['compare_simulated']['iteration_s']['simulated']" <"$LOGS/aggs_$name.json" 2>&1 | tail -1)"
            span_sums "$LOGS/aggs_$name.trace.json" | tee -a "$SUMMARY"
        }
        products=(--graph "$GRAPH" "${SHAPE[@]}" --csr-cache "$WORK/rmat.csr")
        blocking products1 "${products[@]}" --partitions 1
        blocking products1_nodrop "${products[@]}" --partitions 1 --dropout 0
        blocking products8 "${products[@]}" --partitions 8
        blocking profile_gcn --graph rmat:scale=21,features=128,classes=16 --layers 3 --hidden 128 \
            --layer-order aggregate-first --transposes built --partitions 1
        ;;
    products)
        prof=$(profile_arg)
        common=(--graph "$GRAPH" "${SHAPE[@]}" --epochs "$EPOCHS" --backend cuda
            --profile "$prof" --csr-cache "$WORK/rmat.csr" --compare-simulated --json)
        timeout 170 "$BIN" train "${common[@]}" --partitions 1 --policy retain-all \
            --trace "$LOGS/products_retain.trace.json" >"$LOGS/products_retain.json" 2>"$LOGS/products_retain.err"
        note "products retain-all: exit $? $(field "['iteration_s'], d['final_loss'], 'simulated', d['compare_simulated']['iteration_s'], 'pool peak', d.get('device_peak_bytes'), 'counted', d['peak_bytes']['hbm']" <"$LOGS/products_retain.json" 2>&1 | tail -1)"
        timeout 170 "$BIN" train "${common[@]}" --partitions 4 --policy dp --hbm-budget 25% --sweep "$SWEEP" \
            --spill-dir "$WORK/spill" --trace "$LOGS/products_dp25.trace.json" >"$LOGS/products_dp25.json" 2>"$LOGS/products_dp25.err"
        note "products dp 25%: exit $? $(field "['iteration_s'], d['final_loss'], 'simulated', d['compare_simulated']['iteration_s'], 'pool peak', d.get('device_peak_bytes'), 'counted', d['peak_bytes']['hbm']" <"$LOGS/products_dp25.json" 2>&1 | tail -1)"
        # A quarter of the one-partition retain-all plan's peak (the
        # unconstrained run's), in 8 partitions.
        budget=$(quarter_budget "$prof")
        [ -n "$budget" ] || note "products dp, 8 partitions: planning the retain-all peak failed"
        timeout 170 "$BIN" train "${common[@]}" --partitions 8 --policy dp --hbm-budget "$budget" --sweep "$SWEEP" \
            --spill-dir "$WORK/spill" --trace "$LOGS/products_dp8.trace.json" >"$LOGS/products_dp8.json" 2>"$LOGS/products_dp8.err"
        note "products dp, 8 partitions, budget $budget: exit $? $(field "['iteration_s'], d['final_loss'], 'simulated', d['compare_simulated']['iteration_s'], 'pool peak', d.get('device_peak_bytes'), 'counted', d['peak_bytes']['hbm']" <"$LOGS/products_dp8.json" 2>&1 | tail -1)"
        # The same budget with the count chosen with its sweeps
        # (--partitions auto --sweep $SWEEP), planned first, then trained.
        timeout 170 "$BIN" plan --graph "$GRAPH" "${SHAPE[@]}" --profile "$prof" --partitions auto \
            --policy dp --hbm-budget "$budget" --sweep "$SWEEP" -o "$LOGS/products_auto.plan.json" \
            >"$LOGS/products_auto_plan.txt" 2>&1
        note "products dp, partitions auto, budget $budget: planned: exit $? $(grep -E '^(partitions|sweep|predicted)' "$LOGS/products_auto_plan.txt" | cut -c1-160 | tr '\n' ' ')"
        timeout 170 "$BIN" train "${common[@]}" --plan "$LOGS/products_auto.plan.json" --spill-dir "$WORK/spill" \
            --trace "$LOGS/products_dpauto.trace.json" >"$LOGS/products_dpauto.json" 2>"$LOGS/products_dpauto.err"
        note "products dp, partitions auto, budget $budget: exit $? $(field "['iteration_s'], d['final_loss'], 'simulated', d['compare_simulated']['iteration_s'], 'pool peak', d.get('device_peak_bytes'), 'counted', d['peak_bytes']['hbm']" <"$LOGS/products_dpauto.json" 2>&1 | tail -1)"
        "$BIN" generate --graph "$GRAPH" --out "$WORK/rmat" --force >/dev/null 2>>"$log"
        if [ "${PYG_EDGE_INDEX:-}" = 1 ]; then
            PYTHONUNBUFFERED=1 timeout 120 python3 benches/pyg_gcn.py --graph "$WORK/rmat" --layers 3 --hidden 256 \
                --epochs "$EPOCHS" --device cuda >"$LOGS/products_pyg.json" 2>"$LOGS/products_pyg.err"
            note "products pyg (edge_index): exit $? $(field "['epoch_s']" <"$LOGS/products_pyg.json" 2>&1 | tail -1)"
        fi
        PYTHONUNBUFFERED=1 timeout 120 python3 benches/pyg_gcn.py --graph "$WORK/rmat" --layers 3 --hidden 256 \
            --epochs "$EPOCHS" --device cuda --sparse >"$LOGS/products_pyg_sparse.json" 2>"$LOGS/products_pyg_sparse.err"
        note "products pyg (sparse CSR): exit $? $(field "['epoch_s'], d['peak_device_bytes'], d['adjacency_nnz'], d['edges']" <"$LOGS/products_pyg_sparse.json" 2>&1 | tail -1)"
        ;;
    kernels)
        for parts in 1 8; do
            FATEPLAN_KERNEL_TIMES=1 timeout 120 "$BIN" train --graph "$GRAPH" "${SHAPE[@]}" \
                --csr-cache "$WORK/rmat.csr" --backend cuda --profile "$(profile_arg)" --json --epochs 3 \
                --policy retain-all --partitions "$parts" >"$LOGS/kernels_$parts.json" 2>"$LOGS/kernels_$parts.err"
            note "kernels, $parts partitions: exit $? $(field "['iteration_s']" <"$LOGS/kernels_$parts.json" 2>&1 | tail -1)"
            sed -n '/^kernel times/,$p' "$LOGS/kernels_$parts.err" | head -16 | tee -a "$SUMMARY"
        done
        ;;
    counts)
        products=(--graph "$GRAPH" "${SHAPE[@]}" --csr-cache "$WORK/rmat.csr" --backend cuda
            --profile "$(profile_arg)" --json --epochs "$EPOCHS" --compare-simulated)
        budget=$(quarter_budget "$(profile_arg)")
        if [ -z "$budget" ]; then
            note "counts: planning the retain-all peak failed"
            continue
        fi
        timeout 170 "$BIN" train "${products[@]}" --partitions 1 --policy retain-all \
            >"$LOGS/counts_retain.json" 2>"$LOGS/counts_retain.err"
        note "counts: retain-all: exit $? $(field "['iteration_s'], 'simulated', d['compare_simulated']['iteration_s']['simulated']" <"$LOGS/counts_retain.json" 2>&1 | tail -1)"
        for parts in auto ${COUNTS:-2 3 4 5 6 8}; do
            timeout 170 "$BIN" plan --graph "$GRAPH" "${SHAPE[@]}" --profile "$(profile_arg)" \
                --partitions "$parts" --policy dp --hbm-budget "$budget" --sweep "$SWEEP" \
                -o "$LOGS/counts_$parts.plan.json" >"$LOGS/counts_${parts}_plan.txt" 2>&1 || {
                note "counts: $parts partitions: planning failed: $(tail -1 "$LOGS/counts_${parts}_plan.txt")"
                continue
            }
            timeout 170 "$BIN" train "${products[@]}" --plan "$LOGS/counts_$parts.plan.json" \
                --spill-dir "$WORK/spill" >"$LOGS/counts_$parts.json" 2>"$LOGS/counts_$parts.err"
            note "counts: dp, $parts partitions, budget $budget: exit $? $(field "['iteration_s'], 'simulated', d['compare_simulated']['iteration_s']['simulated'], 'pool peak', d.get('device_peak_bytes')" <"$LOGS/counts_$parts.json" 2>&1 | tail -1) $(grep -E '^partitions' "$LOGS/counts_${parts}_plan.txt" | cut -c1-60)"
        done
        ;;
    loads)
        products=(--graph "$GRAPH" "${SHAPE[@]}" --csr-cache "$WORK/rmat.csr" --backend cuda
            --profile "$(profile_arg)" --json --epochs "$EPOCHS" --compare-simulated)
        budget=$(quarter_budget "$(profile_arg)")
        if [ -z "$budget" ]; then
            note "loads: planning the retain-all peak failed"
            continue
        fi
        for parts in 4 8; do
            timeout 170 "$BIN" plan --graph "$GRAPH" "${SHAPE[@]}" --profile "$(profile_arg)" \
                --partitions "$parts" --policy dp --hbm-budget "$budget" --sweep "$SWEEP" \
                -o "$LOGS/loads_$parts.plan.json" >"$LOGS/loads_${parts}_plan.txt" 2>&1 || {
                note "loads: $parts partitions: planning failed: $(tail -1 "$LOGS/loads_${parts}_plan.txt")"
                continue
            }
            for round in 1 2 3; do
                for wait in 1 0; do
                    FATEPLAN_LOADS_WAIT=$wait timeout 170 "$BIN" train "${products[@]}" \
                        --plan "$LOGS/loads_$parts.plan.json" --spill-dir "$WORK/spill" \
                        >"$LOGS/loads_${parts}_${wait}_$round.json" 2>"$LOGS/loads_${parts}_${wait}_$round.err"
                    note "loads: dp, $parts partitions, FATEPLAN_LOADS_WAIT=$wait, round $round: exit $? $(field "['iteration_s'], d['final_loss'], 'simulated', d['compare_simulated']['iteration_s']['simulated']" <"$LOGS/loads_${parts}_${wait}_$round.json" 2>&1 | tail -1)"
                done
            done
        done
        ;;
    versus)
        if [ ! -x "${OLD_BIN:-}" ]; then
            note "versus: skipped (OLD_BIN is not an executable)"
            continue
        fi
        products=(--graph "$GRAPH" "${SHAPE[@]}" --csr-cache "$WORK/rmat.csr" --backend cuda
            --profile "$(profile_arg)" --json)
        # VERSUS_BLOCKING=0 leaves out the blocking runs.
        for parts in $([ "${VERSUS_BLOCKING:-1}" = 0 ] || echo 1 8); do
            for which in old new; do
                b=$BIN
                [ "$which" = old ] && b=$OLD_BIN
                t="$LOGS/versus_${which}_$parts.trace.json"
                CUDA_LAUNCH_BLOCKING=1 timeout 120 "$b" train "${products[@]}" --epochs 3 --policy retain-all \
                    --partitions "$parts" --trace "$t" >"$LOGS/versus_${which}_$parts.json" 2>"$LOGS/versus_${which}_$parts.err"
                note "versus $which, $parts partitions, every launch blocking: exit $? $(field "['iteration_s']" <"$LOGS/versus_${which}_$parts.json" 2>&1 | tail -1)"
                span_sums "$t" | tee -a "$SUMMARY"
            done
        done
        budget=$(quarter_budget "$(profile_arg)")
        if [ -z "$budget" ]; then
            note "versus: planning the retain-all peak failed; no dp runs"
            continue
        fi
        timeout 170 "$BIN" plan --graph "$GRAPH" "${SHAPE[@]}" --profile "$(profile_arg)" --partitions auto \
            --policy dp --hbm-budget "$budget" --sweep "$SWEEP" -o "$LOGS/versus_auto.plan.json" \
            >"$LOGS/versus_auto_plan.txt" 2>&1
        note "versus: dp, partitions auto, budget $budget: planned: exit $? $(grep -E '^(partitions|predicted)' "$LOGS/versus_auto_plan.txt" | cut -c1-120 | tr '\n' ' ')"
        timeout 170 "$BIN" plan --graph "$GRAPH" "${SHAPE[@]}" --profile "$(profile_arg)" --partitions 8 \
            --policy dp --hbm-budget "$budget" --sweep "$SWEEP" -o "$LOGS/versus_8.plan.json" \
            >"$LOGS/versus_8_plan.txt" 2>&1
        note "versus: dp, 8 partitions, budget $budget: planned: exit $?"
        for run in retain auto 8; do
            case $run in
            retain) how=(--partitions 1 --policy retain-all) ;;
            *) how=(--plan "$LOGS/versus_$run.plan.json" --spill-dir "$WORK/spill") ;;
            esac
            for which in old new; do
                b=$BIN
                [ "$which" = old ] && b=$OLD_BIN
                timeout 170 "$b" train "${products[@]}" --epochs "$EPOCHS" --compare-simulated "${how[@]}" \
                    >"$LOGS/versus_${run}_$which.json" 2>"$LOGS/versus_${run}_$which.err"
                note "versus $run, $which: exit $? $(field "['iteration_s'], d['final_loss'], 'simulated', d['compare_simulated']['iteration_s']['simulated'], 'pool peak', d.get('device_peak_bytes')" <"$LOGS/versus_${run}_$which.json" 2>&1 | tail -1)"
            done
        done
        ;;
    copies)
        PYTHONUNBUFFERED=1 timeout 120 python3 benches/pinned_copy.py >"$log" 2>&1
        note "copies: exit $?"
        tail -10 "$log" | tee -a "$SUMMARY"
        ;;
    *) note "unknown section $section" ;;
    esac
done
tar -czf "$OUT/logs.tgz" -C "$LOGS" .
echo "== summary"
cat "$SUMMARY"
