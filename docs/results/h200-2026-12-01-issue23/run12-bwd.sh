# run 12 (issue 23, branch w23-bwd-tma checked out): run 10's checks again after the dQ writer
# went back to walking the steps itself (run 10's racecheck flagged the shared dq_job hand-over).
# Build the branch (/tmp/bt), then side by side: compute-sanitizer on the plain TMA backward
# (full grid longbwd cases: d 64/128/256, GQA, causal and not, several steps per key block) and
# on the short grid's d 128 cases (the modifier instance), the full grid's d 256 cases (run 10's
# limit cut them), and main's sm90 sources rebuilt into /tmp/b; then the A/B main -> branch and
# the branch beside FA2 and cuDNN. At most 8 files come back: logs are gathered into 6.
set -u
C8=${1:-unknown}
export FLASHATTN_BENCH_COMMIT=$C8
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=$OUT/logs12; mkdir -p $L; T=/tmp/l12; mkdir -p $T
R=$PWD
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
rm -rf /tmp/bt && cp -a /tmp/b /tmp/bt
export LD_LIBRARY_PATH=/tmp/bt:$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
C=/tmp/bt/tests/conformance/conformance
( FLASHATTN_CUDA_KERNELS=sm90 timeout 150 $C --backend cuda --grid full --filter d256 > $L/conf.log 2>&1; echo "conformance sm90 full d256 rc $?" >> $L/summary.txt ) &
for job in racecheck:full:longbwd synccheck:full:longbwd memcheck:full:longbwd racecheck:short:d128; do
  IFS=: read tool grid f <<< "$job"
  ( FLASHATTN_CUDA_KERNELS=sm90 timeout 230 compute-sanitizer --tool $tool --error-exitcode 9 $C --backend cuda --grid $grid --filter $f > $T/$tool-$grid-$f.log 2>&1; rc=$?
    { echo "=== $tool $grid $f rc $rc"; grep -v "^\[ *\(RUN\|OK\) " $T/$tool-$grid-$f.log | head -60; } >> $L/san.txt; echo "$tool $grid $f rc $rc" >> $L/summary.txt ) &
done
( t0=$(date +%s); cp -r .deps/overlay-main/backends . && ninja -C /tmp/b -j6 libflashattn.so.0.1.0 > $T/build-main.log 2>&1; echo "main build rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
wait
cuobjdump -sass /tmp/bt/libflashattn.so.0.1.0 2>/dev/null > /tmp/sass-branch.txt; cuobjdump -sass /tmp/b/libflashattn.so.0.1.0 2>/dev/null > /tmp/sass-base.txt
for w in UTMALDG UBLKRED LDGSTS HGMMA "STL\." "LDL\."; do echo "sass $w branch $(grep -c "$w" /tmp/sass-branch.txt) main $(grep -c "$w" /tmp/sass-base.txt)"; done >> $L/summary.txt
timeout 100 python3 bench/gpu_ab.py --lib /tmp/b/libflashattn.so.0.1.0 --lib /tmp/bt/libflashattn.so.0.1.0 --names main-179a2ad,$C8 --repeats 3 --dims 64,128,256 > $L/ab.md 2>&1; echo "ab rc $?" >> $L/summary.txt
timeout 100 python3 bench/gpu_bench.py --lib /tmp/bt/libflashattn.so.0.1.0 --no-math --dims 64,128,256 --seqlens 4096,16384 > $L/vs-cudnn.md 2>&1; echo "vs-cudnn rc $?" >> $L/summary.txt
cat $L/summary.txt; tail -2 $L/conf.log; grep -h "SUMMARY" $L/san.txt; cat $L/ab.md $L/vs-cudnn.md
