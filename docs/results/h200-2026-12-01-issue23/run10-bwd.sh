# run 10 (issue 23, branch w23-bwd-tma checked out in the working tree): build it into /tmp/b,
# copy to /tmp/bt for the tests; rebuild /tmp/b with the backward of the branch's first step
# (.deps/overlay-bwdtma: Q/dO by TMA only; /tmp/lib-bwdtma.so), with the second step's
# (.deps/overlay-overlap: + P^T during dP^T; /tmp/lib-overlap.so), then with main's sm90 sources
# (.deps/overlay-main), for three A/Bs, one per step: main -> TMA -> overlap -> dQ writer (HEAD). Tests on the branch: full grid sm90 forced, masked_rows sm90, memcheck / racecheck /
# synccheck on short-grid cases of each backward head dim; SASS counts; A/B. Logs go to $OUT as
# they are written (a call cut by its limit keeps them).
set -u
C8=${1:-unknown}
export FLASHATTN_BENCH_COMMIT=$C8
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=$OUT/logs10; mkdir -p $L
R=$PWD
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
rm -rf /tmp/bt && cp -a /tmp/b /tmp/bt
export LD_LIBRARY_PATH=/tmp/bt:$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
C=/tmp/bt/tests/conformance/conformance
( t0=$(date +%s); FLASHATTN_CUDA_KERNELS=sm90 timeout 260 $C --backend cuda --grid full > $L/conf-sm90.log 2>&1; echo "conformance sm90 rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
( FLASHATTN_CUDA_KERNELS=sm90 timeout 120 /tmp/bt/tests/conformance/masked_rows --backend cuda > $L/masked-sm90.log 2>&1; echo "masked_rows sm90 rc $?" >> $L/summary.txt ) &
for pair in memcheck:d64 racecheck:d128 synccheck:d256 racecheck:d64; do
  tool=${pair%%:*}; f=${pair#*:}
  ( FLASHATTN_CUDA_KERNELS=sm90 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 $C --backend cuda --grid short --filter $f > $L/$tool-$f.log 2>&1; echo "$tool $f rc $?" >> $L/summary.txt ) &
done
( for v in overlap bwdtma; do
    t0=$(date +%s); cp -r .deps/overlay-$v/backends . && ninja -C /tmp/b -j6 libflashattn.so.0.1.0 > $L/build-$v.log 2>&1 && cp /tmp/b/libflashattn.so.0.1.0 /tmp/lib-$v.so; echo "$v build rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt
  done
  t0=$(date +%s); cp -r .deps/overlay-main/backends . && ninja -C /tmp/b -j6 libflashattn.so.0.1.0 > $L/build-main.log 2>&1; echo "main build rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
wait
cuobjdump -sass /tmp/bt/libflashattn.so.0.1.0 2>/dev/null > /tmp/sass-branch.txt; cuobjdump -sass /tmp/b/libflashattn.so.0.1.0 2>/dev/null > /tmp/sass-base.txt
for w in UTMALDG LDGSTS HGMMA "STL\." "LDL\."; do echo "$w branch $(grep -c "$w" /tmp/sass-branch.txt) base $(grep -c "$w" /tmp/sass-base.txt)"; done > $L/sass-counts.txt
timeout 60 python3 bench/gpu_ab.py --lib /tmp/b/libflashattn.so.0.1.0 --lib /tmp/lib-bwdtma.so --names main,bwd-tma --repeats 3 --dims 64,128,256 > $L/ab-main-tma.md 2>&1; echo "ab main-tma rc $?" >> $L/summary.txt
timeout 60 python3 bench/gpu_ab.py --lib /tmp/lib-bwdtma.so --lib /tmp/lib-overlap.so --names bwd-tma,overlap --repeats 3 --dims 64,128,256 > $L/ab-tma-overlap.md 2>&1; echo "ab tma-overlap rc $?" >> $L/summary.txt
timeout 60 python3 bench/gpu_ab.py --lib /tmp/lib-overlap.so --lib /tmp/bt/libflashattn.so.0.1.0 --names overlap,$C8 --repeats 3 --dims 64,128,256 > $L/ab-overlap-writer.md 2>&1; echo "ab overlap-writer rc $?" >> $L/summary.txt
cat $L/summary.txt $L/sass-counts.txt; grep -h "PASSED\|FAILED" $L/conf-*.log; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $L/*check*.log; cat $L/ab-*.md
