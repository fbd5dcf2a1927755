# run 15 (issue 23, for the next session): the persistent TMA forward of branch w23-persist
# (checked out detached in the working tree; carry .deps/scripts .deps/cm .deps/ocl .deps/v15).
# Build it (/tmp/b, copied to /tmp/bt for the tests), then side by side: the branch's new
# conformance cases (manytiles: 144 tiles, several per persistent block; strides-padded16: TMA
# views with d 60 / 120), then the full grid, under FLASHATTN_CUDA_KERNELS=sm90; masked_rows;
# memcheck / racecheck / synccheck on the new cases and racecheck on the short grid's d 128
# cases; three sm90 objects compiled here swapped into /tmp/b and relinked: main's (179a2ad's
# sm90 sources) for the A/B main -> persist, and two broken on purpose (brokenstore: whole
# 16-byte chunks stored past d; brokensched: a block's later tiles take the next head), each of
# which one new case must catch. Logs to $OUT (at most 8 files) as they are written.
set -u
C8=${1:-unknown}
export FLASHATTN_BENCH_COMMIT=$C8
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=$OUT/logs15; mkdir -p $L; T=/tmp/l15; mkdir -p $T
R=$PWD
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
rm -rf /tmp/bt && cp -a /tmp/b /tmp/bt && cp /tmp/b/libflashattn.so.0.1.0 /tmp/lib-persist.so
DEPS=$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=/tmp/bt:$DEPS
C=/tmp/bt/tests/conformance/conformance
( for f in manytiles padded16; do FLASHATTN_CUDA_KERNELS=sm90 timeout 60 $C --backend cuda --grid full --filter $f >> $L/conf-new.log 2>&1; echo "conformance sm90 $f rc $?" >> $L/summary.txt; done
  FLASHATTN_CUDA_KERNELS=sm90 timeout 230 $C --backend cuda --grid full > $L/conf.log 2>&1; echo "conformance sm90 full rc $?" >> $L/summary.txt ) &
( FLASHATTN_CUDA_KERNELS=sm90 timeout 120 /tmp/bt/tests/conformance/masked_rows --backend cuda > $T/masked.log 2>&1; echo "masked_rows sm90 rc $? $(tail -1 $T/masked.log)" >> $L/summary.txt ) &
for job in memcheck:full:manytiles racecheck:full:manytiles-d128 synccheck:full:manytiles racecheck:full:padded16-d60 racecheck:short:d128; do
  IFS=: read tool grid f <<< "$job"
  ( FLASHATTN_CUDA_KERNELS=sm90 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $C --backend cuda --grid $grid --filter $f > $T/$tool-$grid-$f.log 2>&1; rc=$?
    { echo "=== $tool $grid $f rc $rc"; grep -v "^\[ *OK " $T/$tool-$grid-$f.log | head -60; } >> $L/san.txt; echo "$tool $grid $f rc $rc" >> $L/summary.txt ) &
done
( O=/tmp/b/backends/cuda/libflashattn_cuda_sm90.a.p/sm90_instances.cu.o
  for v in main brokenstore brokensched; do
    t0=$(date +%s); cp .deps/v15/$v.o $O && touch $O && ninja -C /tmp/b libflashattn.so.0.1.0 > $T/relink-$v.log 2>&1; rc=$?
    mkdir -p /tmp/lib-$v && cp /tmp/b/libflashattn.so.0.1.0 /tmp/lib-$v/libflashattn.so.0.1.0 && (cd /tmp/lib-$v && ln -sf libflashattn.so.0.1.0 libflashattn.so.0 && ln -sf libflashattn.so.0 libflashattn.so)
    echo "$v relink rc $rc in $(( $(date +%s) - t0 )) s, recompiled sm90: $(grep -c 'sm90_instances.cu.o$' $T/relink-$v.log)" >> $L/summary.txt
  done ) &
wait
for pair in brokenstore:padded16-d60 brokensched:manytiles; do  # each must FAIL
  v=${pair%%:*}; f=${pair#*:}
  LD_LIBRARY_PATH=/tmp/lib-$v:$DEPS FLASHATTN_CUDA_KERNELS=sm90 timeout 60 $C --backend cuda --grid full --filter $f > $T/broken-$v.log 2>&1
  echo "broken $v on $f rc $? (must be nonzero): $(grep -c FAILED $T/broken-$v.log) FAILED lines; $(grep -m2 -i 'fail\|mismatch\|gap' $T/broken-$v.log | tr '\n' ' ')" >> $L/summary.txt
done
export LD_LIBRARY_PATH=$DEPS
timeout 100 python3 bench/gpu_ab.py --lib /tmp/lib-main/libflashattn.so.0.1.0 --lib /tmp/lib-persist.so --names main-179a2ad,$C8 --repeats 3 --dims 64,128,256 > $L/ab.md 2>&1; echo "ab rc $?" >> $L/summary.txt
cat $L/summary.txt; tail -2 $L/conf-new.log $L/conf.log; grep -h "SUMMARY" $L/san.txt; cat $L/ab.md
