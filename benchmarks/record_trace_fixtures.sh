#!/usr/bin/env bash
# Records tests/data/trace's fixtures again from real traces, in the injection library's record
# format of today (issue 47): `xferscope trace` runs each program the fixture came from, and the
# raw records it reads (one trace-PID.jsonl per traced process) are copied out under the
# fixture's name. Run from the repository's root on a machine with a GPU, xferscope installed
# (editable: the injection library is this checkout's), nvcc, and PyTorch for the second
# fixture; nothing is fetched from the network.
#   benchmarks/record_trace_fixtures.sh OUT_DIR
# OUT_DIR/copies-small20.jsonl  tests/trace_programs/copies.cu --small 20 (42 copies, 20 kernels,
#                               a memset, 2 pinned allocations), for tests/unit/test_trace.py
# OUT_DIR/torch-loop.jsonl      benchmarks/torch_train_loop.py --steps 30 --warmup 2, for
#                               tests/unit/test_trace_python.py; skipped where PyTorch or its GPU
#                               is missing
# Both with every kernel recorded (--kernels all), as the tests count them. Each file is checked
# as it is written: only the kinds of record the library writes today, and the counts the tests
# expect. $PYTHON names the interpreter xferscope is installed in (python3).
#
# `xferscope trace` keeps the raw records only in a scratch directory of its own, removed when it
# ends; the program traced sees it as $XFERSCOPE_TRACE_DIR. So the program runs inside a bash
# that copies its record file out once the program has exited (the library writes the file's
# last lines and closes it at the program's exit). bash itself never initializes CUDA: no file
# of its own.
set -euo pipefail
if [[ $# -ne 1 || -z $1 ]]; then
  echo "usage: $0 OUT_DIR   (from the repository's root)" >&2
  exit 2
fi
if [[ ! -f tests/trace_programs/copies.cu || ! -f benchmarks/torch_train_loop.py ]]; then
  echo "$0: run it from the repository's root" >&2
  exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
root=$(pwd)
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# nvcc: $CUDACXX, PATH, $CUDA_HOME, /usr/local/cuda (as the build looks for it)
nvcc=${CUDACXX:-}
[[ -n $nvcc ]] || nvcc=$(command -v nvcc || true)
for dir in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  if [[ -z $nvcc && -n $dir && -x $dir/bin/nvcc ]]; then nvcc=$dir/bin/nvcc; fi
done
if [[ -z $nvcc ]]; then
  echo "$0: no nvcc (set CUDACXX, or put the CUDA toolkit's bin on PATH)" >&2
  exit 1
fi
stubs=()  # libcuda.so to link against where the toolkit has only its stub
for dir in "$(dirname "$nvcc")"/../lib64/stubs "$(dirname "$nvcc")"/../lib/stubs; do
  if [[ -d $dir ]]; then stubs+=("-L$dir"); fi
done

# keep NAME COMMAND...: COMMAND traced by `xferscope trace`, its one record file kept as
# OUT_DIR/NAME.jsonl
keep() {
  local name=$1
  shift
  local kept=$work/kept-$name
  mkdir -p "$kept" "$work/summary-$name"
  # shellcheck disable=SC2016  # expanded by the inner bash
  XFERSCOPE_KEEP_RECORDS=$kept "$python" -m xferscope trace --reference none --no-history \
    --kernels all -o "$work/summary-$name" -- \
    bash -c 'status=0; "$@" || status=$?
             cp "$XFERSCOPE_TRACE_DIR"/trace-*.jsonl "$XFERSCOPE_KEEP_RECORDS"/; exit "$status"' \
    bash "$@"
  local files=("$kept"/trace-*.jsonl)
  if [[ ${#files[@]} -ne 1 || ! -f ${files[0]} ]]; then
    echo "$0: $name: expected one record file, found: ${files[*]}" >&2
    exit 1
  fi
  cp "${files[0]}" "$out/$name.jsonl"
  echo "$0: wrote $out/$name.jsonl ($(wc -l <"$out/$name.jsonl") lines," \
    "$(wc -c <"$out/$name.jsonl") bytes)"
}

# check FIXTURE: only today's kinds of record, and the figures the tests rely on
check() {
  "$python" - "$out/$1.jsonl" "$1" <<'EOF'
import json
import sys
from collections import Counter
from pathlib import Path

from xferscope.trace.reading import read_trace
from xferscope.trace.records import user_frame

path, name = Path(sys.argv[1]), sys.argv[2]
# what engine/src/trace/ writes today
TODAY = {"start", "end", "kwin", "cost", "memcpy", "memset", "kernel", "api", "pin", "totals",
         "frame", "dropped", "warning", "pystack"}  # fmt: skip
records = [json.loads(line) for line in path.read_text().splitlines()]
kinds = Counter(r.get("t") for r in records)
print(f"{name}: {dict(kinds)}")
unknown = set(kinds) - TODAY
assert not unknown, f"{name}: kinds no longer written: {unknown}"
start = records[0]
assert start["t"] == "start" and start.get("kernels") == "all", start
assert kinds["end"] == 1 and kinds["cost"] == 1, "not closed at the program's exit"
trace = read_trace([path])
assert not trace.sampled and not trace.dropped and not trace.warnings
assert all(c.call is not None for c in trace.copies), "a copy without its call"
if name == "copies-small20":
    count = Counter(c.direction for c in trace.copies)
    assert count == {"h2d": 34, "d2h": 8}, count
    assert sum(c.bytes for c in trace.copies if c.direction == "h2d") == 939606016
    assert sum(c.bytes for c in trace.copies if c.direction == "d2h") == 536870912
    assert len(trace.kernels()) == 20 and len(trace.pins) == 2
    h2d = [c for c in trace.copies if c.direction == "h2d"]
    assert all(c.content is not None and c.src_ptr for c in h2d), "h2d without its hash"
    where = trace.where(h2d[0].frames)
    assert where and where.startswith("copies+0x"), where
else:
    places = Counter(
        (f.file, f.line, f.function, c.direction, c.host_memory)
        for c in trace.copies
        if (f := user_frame(c.python)) is not None
    )
    for place, calls in sorted(places.items(), key=lambda p: p[0][1]):
        print(f"  {calls:3d} copies at {place}")  # test_trace_python.py's LINES
    pin = trace.pins[0]
    print(f"  pinned {pin.bytes} bytes at {trace.where(pin.frames, pin.python)}")
EOF
}

nvcc_args=(-O2 -o "$work/copies" tests/trace_programs/copies.cu "${stubs[@]}" -lcuda)
"$nvcc" "${nvcc_args[@]}"
keep copies-small20 "$work/copies" --small 20
check copies-small20

if "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
then
  keep torch-loop "$python" "$root/benchmarks/torch_train_loop.py" --steps 30 --warmup 2
  check torch-loop
else
  echo "$0: no PyTorch with a GPU for $python: torch-loop.jsonl not recorded" >&2
fi
