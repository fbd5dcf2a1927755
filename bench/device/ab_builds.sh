# Sourced by the A/B device scripts (rtc_ab_gpu.sh, decode_ab_gpu.sh), from the repository root:
# the device's name and the time, a clock (stamp), status=0, root=$PWD, then two builds the fast way
# (-Dcuda-kernels=rtc: host code only): B of this tree and A of a copy of it with BASE_PATCH
# reversed, in $root/build-$AB_NAME-B and -A (meson options AB_MESON_ARGS beside the fixed ones;
# incremental across calls), logs under $OUT. Exits when the patch does not reverse or a build fails.
# The scripts end with pack_out (below): everything they wrote comes back as $OUT/all.tgz.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PATCH=${BASE_PATCH:?BASE_PATCH: the change as a patch, reversed to make A}
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
. "$(dirname "${BASH_SOURCE[0]}")/cmocka_env.sh"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
date -u "+%F %T UTC"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s]"; }
# The device sends back at most 8 files of $OUT: pack_out, at a script's end, puts them all in
# $OUT/all.tgz (unpack with tar -xzf).
pack_out() { tar -C "$OUT" -czf /tmp/ab-out.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/ab-out.tgz "$OUT/all.tgz"; }
status=0
root=$PWD
A=/tmp/$AB_NAME-tree-A
rm -rf "$A" && mkdir -p "$A" && tar --exclude='./build-*' --exclude=./.deps/cm -cf - . | tar -xf - -C "$A"
(cd "$A" && patch -R -p1 < "$root/$PATCH" > /dev/null) || { echo "the patch does not reverse cleanly"; exit 1; }
for side in A B; do
  src=$root; [ $side = A ] && src=$A
  dir=$root/build-$AB_NAME-$side
  if [ ! -f "$dir/build.ninja" ]; then
    (cd "$src" && meson setup "$dir" -Dcuda=enabled -Dcuda-kernels=rtc -Dhip=disabled -Dopencl=disabled -Dbench=false \
      ${AB_MESON_ARGS:-} > "$OUT/setup-$side.log" 2>&1) || { echo "setup $side failed"; tail -20 "$OUT/setup-$side.log"; pack_out; exit 1; }
  fi
  ninja -C "$dir" > "$OUT/build-$side.log" 2>&1 || { echo "build $side failed"; grep -E "error|FAILED" "$OUT/build-$side.log" | head; pack_out; exit 1; }
done
echo "$(stamp) built A and B"
