#!/usr/bin/env bash
# First contact with a GPU host: what proves fleetval's GPU paths (issue 42), in order, each
# step under its own time limit, every figure and log under one folder, under 8 minutes.
#
#   bash bench/gpu_first_contact.sh [OUT_DIR]        # default: first-contact-<UTC time>
#
# Runs from the project root on a host where torch sees a CUDA GPU, with Ray and nvidia-ml-py
# (pynvml); on an offline host `bash ../shared/gpu/make-carry.sh nvidia-ml-py` ships them
# (../shared/gpu/README.md), then `export PYTHONPATH=/tmp/site:$PWD`.
#
#   1 gpu-tests      python -m pytest -m gpu tests/gpu (exact expectations per path)
#   2 gpu-benchmark  bench/bench_gpu_checks.py (the check's timing vs a plain script)
#   3 health-nvml    fleetval run health, hardware read from the live NVML
#   4 flight-recorder  a one-rank NCCL group; both of torch's dumps fed to its analyser
#   5 bandwidth-16g  world 1, all_reduce bf16 1 to 16 GiB, verified; peak GPU memory sampled
#
# Exit 0: every step passed. Exit 1: a step failed or ran out of time (the others still run;
# the summary names each failure and its log). Exit 2: this host cannot run it (nothing ran).
set -uo pipefail

OUT=${1:-first-contact-$(date -u +%Y%m%dT%H%M%SZ)}
PY=${PYTHON:-python3}
BUDGET_S=470 # the whole script stays under 8 minutes
START=$SECONDS
FAILED=()

mkdir -p "$OUT" || { echo "gpu_first_contact: cannot create $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
export OUT PY # read by the steps' functions, which run in a bash of their own
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }
refuse() {
    echo "gpu_first_contact: CANNOT RUN HERE: $*" | tee -a "$SUMMARY" >&2
    exit 2
}

# ---- pre-flight: refuse loudly before spending GPU minutes ----------------------------------
[ -f pyproject.toml ] && [ -d fleetval ] || refuse "run it from the project root (no ./fleetval here)"
command -v "$PY" >/dev/null || refuse "no $PY (set PYTHON=...)"
command -v timeout >/dev/null || refuse "no 'timeout' (coreutils)"
"$PY" - >"$OUT/environment.txt" 2>&1 <<'EOF' || refuse "$(tail -n 1 "$OUT/environment.txt")"
import sys
try:
    import torch
except ImportError as e:
    sys.exit(f"torch does not import: {e}")
print(f"torch {torch.__version__} CUDA {torch.version.cuda} HIP {getattr(torch.version, 'hip', None)}")
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no GPU (built for CUDA {torch.version.cuda})")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {p.name} {p.total_memory / 2**30:.1f} GiB")
print("nccl (header)", ".".join(map(str, torch.cuda.nccl.version())))
for name, hint in (("ray", "Ray"), ("pynvml", "nvidia-ml-py"), ("fleetval", "fleetval")):
    try:
        __import__(name)
    except ImportError as e:
        sys.exit(f"{hint} does not import ({e}): see the header of bench/gpu_first_contact.sh")
from fleetval.checks.environment import runtime_collective_version
print("nccl (loaded)", runtime_collective_version())
EOF
command -v nvidia-smi >/dev/null && nvidia-smi -q >"$OUT/nvidia-smi-q.txt" 2>&1
say "gpu_first_contact: $(head -n 2 "$OUT/environment.txt" | tr '\n' ' ')-> $OUT"

# ---- one step: its own limit, its log, loud on failure, never stopping the others -----------
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET_S - (SECONDS - START)))
    if ((left < limit)); then
        say "FAILED  $name: not run, ${left}s left of the ${BUDGET_S}s budget (needs ${limit}s)"
        FAILED+=("$name")
        return
    fi
    echo "== $name (limit ${limit}s) ..."
    local t0=$SECONDS rc=0
    if declare -F "$1" >/dev/null; then # a function of this script: timeout runs programs only
        set -- bash -c "$(declare -f "$1"); $1"
    fi
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
    if ((rc == 0)); then
        say "ok      $name in $((SECONDS - t0))s"
    else
        local why="exit $rc"
        ((rc == 124 || rc == 137)) && why="ran past its ${limit}s limit"
        say "FAILED  $name ($why) in $((SECONDS - t0))s: log $OUT/$name.log"
        tail -n 25 "$OUT/$name.log" | sed 's/^/    | /' >&2
        FAILED+=("$name")
    fi
}

# 1. The GPU tests: each path's exact expectation (tests/gpu/test_first_contact.py and the rest).
step gpu-tests 230 "$PY" -m pytest -m gpu tests/gpu -p no:cacheprovider -n 0 -q -rs -s \
    --junitxml="$OUT/gpu-tests.xml"

# 2. The GPU benchmark: the check's per-iteration timing against a plain torch loop.
step gpu-benchmark 45 "$PY" bench/bench_gpu_checks.py --iters 20

# 3. fleetval run health with the hardware read from the live NVML (no captured files).
health() {
    env -u FLEETVAL_HW_CAPTURES "$PY" -m fleetval.cli run health --data "$OUT/data" \
        --label first_contact=health --json >"$OUT/health-run.json" || return 1
    "$PY" -m fleetval.cli results latest --data "$OUT/data" --format json >"$OUT/health-rows.json"
    "$PY" - "$OUT/health-rows.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
node = [r for r in rows if r.get("metric") == "hw_node_action"]  # schema.NODE_HW_METRIC
if not node:
    sys.exit("no hardware node row: the health check did not read the GPUs")
details = node[0]["details"]
details = json.loads(details) if isinstance(details, str) else details
print("hardware source:", details.get("source"), "| node row:", node[0]["status"], node[0]["message"])
if details.get("source") != "nvml":
    sys.exit(f"the hardware was read from {details.get('source')}, not the live NVML: {details.get('unread')}")
EOF
}
step health-nvml 75 health

# 4. A one-rank NCCL group: the pickle and the JSON dump, each fed to torch's analyser.
step flight-recorder 25 env TORCH_FR_BUFFER_SIZE=2000 "$PY" - "$OUT/flight-recorder" <<'EOF'
import os, sys
from datetime import timedelta
import torch, torch.distributed as dist
from torch._C import _distributed_c10d as c10d
from fleetval.run import flightrec
from fleetval.testing.net import free_port

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.cuda.set_device(0)
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                        world_size=1, timeout=timedelta(seconds=60), device_id=torch.device("cuda:0"))
t = torch.ones(1 << 20, device="cuda:0")
for _ in range(3):
    dist.all_reduce(t)
torch.cuda.synchronize()
# NCCL records into torch's CUDA recorder; _dump_fr_trace* is the generic (gloo) one
dumps = {"pickle": c10d._dump_nccl_trace(), "json": c10d._dump_nccl_trace_json()}
dist.destroy_process_group()
bad = []
for kind, raw in dumps.items():
    raw = raw.encode() if isinstance(raw, str) else raw
    open(os.path.join(out, f"rank0.{kind}"), "wb").write(raw)
    dump = flightrec.load(raw)
    verdict = flightrec.torch_verdict({0: dump}, [0])
    print(f"{kind}: {len(dump['entries'])} entries; analyser: {verdict or 'ran, no mismatch'}")
    if len(dump["entries"]) != 3 or verdict:
        bad.append(kind)
sys.exit(f"analyser or entries wrong for: {', '.join(bad)}" if bad else 0)
EOF

# 5. World 1, all_reduce bf16 from 1 to 16 GiB, verified, GPU memory sampled every 200 ms.
cat >"$OUT/bandwidth-16g.yaml" <<'EOF'
name: first-contact-bandwidth
backend: nccl
placement: {world_sizes: [1], gpus_per_rank: 1}
timeouts: {step_s: 150}
steps:
  - check: bandwidth
    collectives: [all_reduce]
    dtypes: [bfloat16]
    sizes: {min: 1GiB, max: 16GiB, factor: 2}
    warmup: 2
    iters: 5
EOF
bandwidth() {
    local idle
    idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0) || return 1
    nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -i 0 -lms 200 \
        >"$OUT/bandwidth-16g-memory.csv" &
    local sampler=$! rc=0
    "$PY" -m fleetval.cli run "$OUT/bandwidth-16g.yaml" --data "$OUT/data" \
        --label first_contact=bandwidth || rc=$?
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    "$PY" -m fleetval.cli results latest --data "$OUT/data" --summary >"$OUT/bandwidth-16g-summary.txt"
    cat "$OUT/bandwidth-16g-summary.txt"
    local peak
    peak=$(awk -F', *' '$2 > m {m = $2} END {print m + 0}' "$OUT/bandwidth-16g-memory.csv")
    # 16 GiB buffer + its reset copy + verification chunks: 2.4 x 16 GiB, above the idle use,
    # and 1 GiB for the process's CUDA context and NCCL's own buffers
    local limit=$((idle + 2 * 16384 * 12 / 10 + 1024))
    echo "peak GPU memory ${peak} MiB (idle ${idle} MiB; limit ${limit} MiB = idle + 2.4 x 16 GiB + 1 GiB)"
    ((rc == 0)) || { echo "fleetval run exited $rc"; return 1; }
    ((peak <= limit)) || { echo "peak memory ${peak} MiB above ${limit} MiB"; return 1; }
}
step bandwidth-16g 90 bandwidth
grep -h "peak GPU memory" "$OUT/bandwidth-16g.log" >>"$SUMMARY" 2>/dev/null

# ---- verdict ------------------------------------------------------------------------------------
say "total $((SECONDS - START))s; figures and logs in $OUT"
if ((${#FAILED[@]})); then
    {
        echo "################################################################"
        echo "FIRST CONTACT FAILED: ${FAILED[*]}"
        echo "  summary: $SUMMARY"
        echo "################################################################"
    } >&2
    exit 1
fi
say "FIRST CONTACT PASSED"
