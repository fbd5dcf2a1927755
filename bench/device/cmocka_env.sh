# Sourced by the device scripts: cmocka (the tests' harness) from the system, else from the Debian
# packages carried in .deps/ (run with carry: [".deps"]), unpacked into .deps/cm with a pkg-config
# file that points there; exports PKG_CONFIG_PATH and LD_LIBRARY_PATH for meson and the tests.
CM=$PWD/.deps/cm/usr
if ! pkg-config --exists cmocka && ls .deps/libcmocka*.deb > /dev/null 2>&1; then
  for f in .deps/libcmocka*.deb; do dpkg-deb -x "$f" .deps/cm; done
  mkdir -p .deps/cm/pkgconfig
  printf 'Name: cmocka\nDescription: cmocka\nVersion: 1.1.5\nLibs: -L%s/lib/x86_64-linux-gnu -lcmocka\nCflags: -I%s/include\n' \
    "$CM" "$CM" > .deps/cm/pkgconfig/cmocka.pc
  export PKG_CONFIG_PATH=$PWD/.deps/cm/pkgconfig:${PKG_CONFIG_PATH:-}
fi
export LD_LIBRARY_PATH=$CM/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
