#!/usr/bin/env python3
"""check_needed.py: the libraries an ELF file names in DT_NEEDED, read from its dynamic section
(no readelf needed), must include none matching a forbidden prefix: libflashattn.so loads vendor
runtimes (libOpenCL, libamdhip64) at run time, never at load time.

usage: check_needed.py FILE [--forbid PREFIX]... [--require PREFIX]...
--require is the positive control: a name the file must need (libc for any dynamic library, or
libamdhip64 for the HIP module), so that a parser that finds nothing cannot pass."""
import struct
import sys


def needed(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise SystemExit(f"{path}: not an ELF file")
    is64 = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
    sections = []
    for i in range(shnum):
        base = shoff + i * shentsize
        if is64:
            name, stype, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
                end + "IIQQQQIIQQ", data, base)
        else:
            name, stype, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
                end + "IIIIIIIIII", data, base)
        sections.append((stype, offset, size, link, entsize))
    names = []
    for stype, offset, size, link, entsize in sections:
        if stype != 6:  # SHT_DYNAMIC
            continue
        str_off = sections[link][1]
        fmt = end + ("qQ" if is64 else "iI")
        step = entsize or struct.calcsize(fmt)
        for pos in range(offset, offset + size, step):
            tag, val = struct.unpack_from(fmt, data, pos)
            if tag == 0:  # DT_NULL
                break
            if tag == 1:  # DT_NEEDED
                stop = data.index(b"\0", str_off + val)
                names.append(data[str_off + val:stop].decode())
    return names


def main(argv):
    path, forbid, require = argv[1], [], []
    args = argv[2:]
    while args:
        opt, value, args = args[0], args[1], args[2:]
        (forbid if opt == "--forbid" else require).append(value)
    names = needed(path)
    print(f"{path}: NEEDED {', '.join(names) or '(none)'}")
    bad = [n for n in names if any(n.startswith(p) for p in forbid)]
    missing = [p for p in require if not any(n.startswith(p) for n in names)]
    if bad:
        print(f"FAIL: {path} needs {', '.join(bad)} at load time; it must load them at run time (dlopen)")
    if missing:
        print(f"FAIL: {path} does not need {', '.join(missing)} (the positive control: is the parser right?)")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
