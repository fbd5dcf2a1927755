# Builds the working tree on the device into /tmp/b (CUDA sm_90 + OpenCL), using the carried
# cmocka and OpenCL ICD headers (.deps); prints the time it took.
set -u
R=$PWD
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
mkdir -p /tmp/pc
for pair in cm:cmocka.pc ocl:OpenCL.pc; do
  d=$R/.deps/${pair%%:*}/usr; pc=$d/lib/x86_64-linux-gnu/pkgconfig/${pair#*:}
  sed -e "s|^prefix=/usr|prefix=$d|; s|-L/usr/lib|-L$d/lib|; s|-I/usr/include|-I$d/include|" $pc > /tmp/pc/${pair#*:}
done
export PKG_CONFIG_PATH=/tmp/pc
export LD_LIBRARY_PATH=$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBRARY_PATH=$LD_LIBRARY_PATH
t0=$(date +%s)
meson setup /tmp/b -Dcuda=enabled -Dcuda-archs=90 -Dhip=disabled -Dopencl=enabled -Dnccl=disabled -Dwerror=true > /tmp/b-setup.log 2>&1 || { tail -30 /tmp/b-setup.log; exit 1; }
ninja -C /tmp/b -j16 > /tmp/b-build.log 2>&1 || { grep -B5 -A20 "FAILED\|error" /tmp/b-build.log | head -80; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
