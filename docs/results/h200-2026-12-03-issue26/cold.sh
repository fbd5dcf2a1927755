set -x
export PATH=/opt/torch/.venv/bin:$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv
python3 -c "import torch; print(torch.__version__, torch.version.cuda)"
start=$(date +%s)
meson setup /tmp/bc -Dcuda-archs=90 -Dtests=false -Dbench=false -Dhip=disabled -Dopencl=disabled > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
grep "flashattn:" $OUT/setup.log
ninja -C /tmp/bc > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - start )) s"
ls -la /tmp/bc/libflashattn.so*
REPO=$PWD; export FLASHATTN_LIBRARY=/tmp/bc/libflashattn.so PYTHONPATH=$PWD/python FLASHATTN_BENCH_COMMIT=$(cat .deps/scripts/commit 2>/dev/null)
cd $OUT && python3 $REPO/bench/cold_start.py --repeat 3 --out $OUT/cold_start.md 2>&1 | tail -80
