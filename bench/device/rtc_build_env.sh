# Sourced by the device scripts that check and time this tree built the fast way
# (-Dcuda-kernels=rtc): logs under $OUT (the GPU in gpu.txt, the commit and time in
# provenance.txt), stamp (seconds since the start), pack_out (everything under $OUT into
# $OUT/all.tgz, since the device returns a few files only), status 0, and the build in $B
# (build-stages, kept between calls on a warm machine; exits with the packed logs where setup or
# build fails), its kernel cache exported.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
. "$(dirname "${BASH_SOURCE[0]}")/cmocka_env.sh"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
echo "commit ${FLASHATTN_BENCH_COMMIT:-unknown}, $(date -u '+%F %T UTC')" | tee "$OUT/provenance.txt"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s]"; }
pack_out() { tar -C "$OUT" -czf /tmp/device-out.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/device-out.tgz "$OUT/all.tgz"; }
status=0
B=$PWD/build-stages
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-kernels=rtc -Dhip=disabled -Dopencl=disabled -Dbench=false \
    -Dconformance_grid=short > "$OUT/setup.log" 2>&1 || { echo "setup failed"; tail -20 "$OUT/setup.log"; pack_out; exit 1; }
fi
ninja -C "$B" > "$OUT/build.log" 2>&1 || { echo "build failed"; grep -E "error|FAILED" "$OUT/build.log" | head; pack_out; exit 1; }
echo "$(stamp) built"
export FLASHATTN_CACHE_DIR=$B/kernel-cache FLASHATTN_COMPILE_LOG=0
