#!/usr/bin/env python3
"""check_cli_safety.py: `flashattn fwd` / `bwd` with unsafe output paths and bad input files.

Every case runs the tool in a fresh directory and compares a snapshot of that directory (type,
permissions, inode and bytes of every entry, the target of every link) before and after: a
refused or failed command must leave every pre-existing entry untouched and create nothing (no
temporary left behind); a successful one may change only its outputs. No case may hang (a FIFO),
and each must exit with the status `flashattn --help` documents: 0 success, 2 a usage error (bad
option, bad input file, output path refused before computing), 3 the library or device failed, 4
an output could not be written.

The cases reproduce faults the tool once had: a failed write (file-size limit) must not delete or
truncate the old output; outputs are renamed into place only when all were written (an
unwritable --lse or --dv leaves --out, --dq, --dk alone); a device, FIFO, directory or socket as
an output is refused; duplicate outputs and an output naming an input (also through a symbolic or
hard link) are refused; a FIFO input is refused without blocking; varlen cu_seqlens must end at
the packed row count; --scale must be finite, non-zero in float and keep the scores within float32.

Usage: check_cli_safety.py FLASHATTN_EXECUTABLE [-k SUBSTRING]
"""

import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_cli import first_lines, sanitizer_report  # noqa: E402

INT64_MAX = (1 << 63) - 1
HANG_SECONDS = 20  # a FIFO open that blocks is a hang; a healthy case here takes well under 1 s

# ------------------------------------------------------------------ directory snapshots


def snapshot(root):
    """{relative path: (kind, permissions, inode, bytes or link target)} of every entry under root,
    links not followed."""
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    content = f.read()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            else:
                content = None
            entries[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_ino,
                                                    content)
    return entries


def snapshot_changes(before, after, outputs=()):
    """What changed beyond the named outputs: pre-existing entries altered or gone, new entries."""
    problems = []
    for path, entry in before.items():
        if path in outputs:
            continue
        if path not in after:
            problems.append("%s was removed" % path)
        elif after[path] != entry:
            problems.append("%s was changed" % path)
    for path in after:
        if path not in before and path not in outputs:
            problems.append("%s was created" % path)
    return problems


# ------------------------------------------------------------------ scenes


class Scene:
    """A fresh directory holding q, k, v (1, 8, 2, 16) float32 and the bwd inputs o, lse, do."""

    def __init__(self, parent, name, qshape=(1, 8, 2, 16)):
        self.dir = os.path.join(parent, name)
        os.mkdir(self.dir)
        rng = np.random.default_rng(21)
        kshape = qshape
        for n, shape in (("q", qshape), ("k", kshape), ("v", kshape), ("o", qshape), ("do", qshape)):
            np.save(self.path(n + ".npy"), rng.standard_normal(shape).astype(np.float32))
        if len(qshape) == 4:
            np.save(self.path("lse.npy"), np.zeros((qshape[0], qshape[2], qshape[1]), np.float32))

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, data=b"keep\n"):
        with open(self.path(name), "wb") as f:
            f.write(data)
        return self.path(name)

    def fwd(self, *extra):
        return ["fwd", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy"] + list(extra)

    def bwd(self, *extra):
        return ["bwd", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--o", "o.npy", "--lse", "lse.npy",
                "--do", "do.npy"] + list(extra)


def run_in(exe, scene, args, limit_file_size=False, as_user=None, timeout=HANG_SECONDS):
    """Runs the tool in the scene's directory (with a 1 KiB file-size limit and SIGXFSZ ignored, as
    `trap "" XFSZ; ulimit -f 1` does; as another user id); None when it hung (killed after timeout)."""
    def prepare():
        if limit_file_size:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
        if as_user is not None:
            os.setgid(as_user)
            os.setuid(as_user)

    try:
        return subprocess.run([exe] + [str(a) for a in args], cwd=scene.dir, capture_output=True, text=True,
                              errors="replace", timeout=timeout,
                              preexec_fn=prepare if limit_file_size or as_user is not None else None)
    except subprocess.TimeoutExpired:
        return None


def expect(exe, scene, args, want_rc, word, outputs=(), **run_options):
    """Runs args; checks the exit status, that stderr names `word` (when want_rc != 0), no
    sanitizer report, and that nothing but `outputs` changed. Returns a list of problems."""
    before = snapshot(scene.dir)
    proc = run_in(exe, scene, args, **run_options)
    if proc is None:
        return ["hung (killed after %d s)" % HANG_SECONDS]
    problems = []
    if proc.returncode != want_rc:
        problems.append("exit %d, expected %d" % (proc.returncode, want_rc))
    if want_rc != 0 and word.lower() not in proc.stderr.lower():
        problems.append("message does not mention %r" % word)
    if sanitizer_report(proc):
        problems.append("sanitizer report")
    problems += snapshot_changes(before, snapshot(scene.dir), outputs if want_rc == 0 else ())
    if problems:
        problems.append("stderr: " + first_lines(proc.stderr, 3))
    return problems


# ------------------------------------------------------------------ the cases
# Each takes (exe, tmp) and returns a list of problems (empty: pass) or the string "SKIP: why".


def failed_write_keeps_old_output(exe, tmp):
    """ulimit -f 1 with SIGXFSZ ignored: the write of a 64 KiB O fails; the old o.npy stays."""
    s = Scene(tmp, "xfsz", qshape=(2, 64, 4, 32))
    s.write("o.npy")
    s.write("l.npy")
    return expect(exe, s, s.fwd("--out", "o.npy", "--lse", "l.npy"), 4, "o.npy", limit_file_size=True)


def fwd_bad_lse_dir_keeps_out(exe, tmp):
    s = Scene(tmp, "lse-nodir")
    s.write("out.npy")
    return expect(exe, s, s.fwd("--out", "out.npy", "--lse", "nodir/l.npy"), 2, "nodir")


def bwd_bad_dv_keeps_dq_dk(exe, tmp):
    s = Scene(tmp, "dv-nodir")
    s.write("dq.npy")
    s.write("dk.npy")
    return expect(exe, s, s.bwd("--dq", "dq.npy", "--dk", "dk.npy", "--dv", "nodir/dv.npy"), 2, "nodir")


def character_device_output_refused(exe, tmp):
    """/dev/null as --out: refused, and still a character device (a failed write once deleted the
    device node; /dev/full would reproduce that, so it is not used here)."""
    s = Scene(tmp, "chardev")
    problems = expect(exe, s, s.fwd("--out", "/dev/null"), 2, "character device")
    if not stat.S_ISCHR(os.lstat("/dev/null").st_mode):
        problems.append("/dev/null is no longer a character device")
    return problems


def fifo_output_refused(exe, tmp):
    s = Scene(tmp, "fifo-out")
    os.mkfifo(s.path("out.npy"))
    return expect(exe, s, s.fwd("--out", "out.npy"), 2, "FIFO")


def directory_output_refused(exe, tmp):
    s = Scene(tmp, "dir-out")
    os.mkdir(s.path("out.npy"))
    return expect(exe, s, s.fwd("--out", "out.npy"), 2, "directory") + \
        expect(exe, s, s.fwd("--out", "out.npy/"), 2, "directory")


def socket_output_refused(exe, tmp):
    s = Scene(tmp, "socket-out")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(s.path("out.npy"))
        return expect(exe, s, s.fwd("--out", "out.npy"), 2, "socket")
    finally:
        sock.close()


def duplicate_outputs_refused(exe, tmp):
    s = Scene(tmp, "duplicates")
    s.write("g.npy")
    s.write("a.npy")
    os.link(s.path("a.npy"), s.path("a_hard.npy"))
    os.symlink("a.npy", s.path("a_link.npy"))
    os.mkdir(s.path("sub"))
    problems = []
    for args in (s.bwd("--dq", "g.npy", "--dk", "g.npy", "--dv", "g.npy"),
                 s.bwd("--dq", "new.npy", "--dk", "dk.npy", "--dv", "new.npy"),
                 s.fwd("--out", "x.npy", "--lse", "x.npy"),
                 s.fwd("--out", "x.npy", "--lse", "./x.npy"),
                 s.fwd("--out", "sub/../x.npy", "--lse", "x.npy"),
                 s.fwd("--out", "x.npy", "--lse", os.path.join(s.dir, "x.npy")),
                 s.fwd("--out", "a.npy", "--lse", "a_hard.npy"),
                 s.fwd("--out", "a_link.npy", "--lse", "a.npy")):
        problems += ["%s: %s" % (" ".join(args[7:]), p) for p in expect(exe, s, args, 2, "same file")]
    return problems


def output_naming_input_refused(exe, tmp):
    s = Scene(tmp, "out-is-input")
    os.link(s.path("q.npy"), s.path("q_hard.npy"))
    os.symlink("k.npy", s.path("k_link.npy"))
    problems = []
    for args in (s.fwd("--out", "q.npy"), s.fwd("--out", "./v.npy"), s.fwd("--out", "q_hard.npy"),
                 s.fwd("--out", "o.npy", "--lse", "k_link.npy"),
                 s.bwd("--dq", "do.npy", "--dk", "dk.npy", "--dv", "dv.npy"),
                 s.bwd("--dq", "dq.npy", "--dk", "dk.npy", "--dv", "lse.npy")):
        problems += ["%s: %s" % (" ".join(args[-2:]), p) for p in expect(exe, s, args, 2, "input")]
    return problems


def alibi_slopes_file_is_an_input(exe, tmp):
    """--alibi-slopes names an input: an output naming it (directly or through a link) is refused and
    the slopes file stays as it was; slopes that do not fit change nothing either; a FIFO is refused."""
    s = Scene(tmp, "alibi-slopes")
    np.save(s.path("slopes.npy"), np.array([0.5, 0.25], np.float32))
    np.save(s.path("slopes_bad.npy"), np.array([0.5, 0.25, 0.125], np.float32))
    os.symlink("slopes.npy", s.path("slopes_link.npy"))
    os.mkfifo(s.path("slopes_fifo.npy"))
    problems = []
    for args in (s.fwd("--alibi-slopes", "slopes.npy", "--out", "slopes.npy"),
                 s.fwd("--alibi-slopes", "slopes.npy", "--out", "o2.npy", "--lse", "slopes_link.npy"),
                 s.bwd("--alibi-slopes", "slopes.npy", "--dq", "dq.npy", "--dk", "slopes.npy", "--dv", "dv.npy")):
        problems += ["%s: %s" % (" ".join(args[-6:]), p) for p in expect(exe, s, args, 2, "input")]
    problems += ["bad shape: %s" % p for p in expect(exe, s, s.fwd("--alibi-slopes", "slopes_bad.npy", "--out",
                                                                    "o.npy"), 2, "slopes_bad.npy")]
    problems += ["FIFO: %s" % p for p in expect(exe, s, s.fwd("--alibi-slopes", "slopes_fifo.npy", "--out",
                                                               "out.npy"), 2, "FIFO")]
    return problems


def fifo_input_refused(exe, tmp):
    """mkfifo p.npy; fwd --q p.npy: refused at once (fopen would block for a writer forever)."""
    s = Scene(tmp, "fifo-in")
    os.mkfifo(s.path("p.npy"))
    os.mkdir(s.path("d.npy"))
    problems = []
    for args in (["fwd", "--q", "p.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"],
                 ["fwd", "--q", "q.npy", "--k", "k.npy", "--v", "p.npy", "--out", "out.npy"],
                 ["bwd", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--o", "o.npy", "--lse", "p.npy", "--do",
                  "do.npy", "--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy"]):
        problems += ["%s: %s" % (" ".join(args[:3]), p) for p in expect(exe, s, args, 2, "FIFO")]
    problems += expect(exe, s, ["fwd", "--q", "d.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"], 2,
                       "directory")
    return problems


def varlen_last_offset_must_match_rows(exe, tmp):
    """q (64, 1, 16), cu_seqlens [0, 1]: rows 1..63 would belong to no sequence (their LSE was
    written from uninitialised memory); refused, for q and for k."""
    s = Scene(tmp, "varlen-rows", qshape=(64, 1, 16))
    np.save(s.path("cu1.npy"), np.array([0, 1], np.int32))
    np.save(s.path("cu64.npy"), np.array([0, 64], np.int32))
    problems = []
    for cq, ck in (("cu1.npy", "cu1.npy"), ("cu1.npy", "cu64.npy"), ("cu64.npy", "cu1.npy")):
        args = s.fwd("--out", "out.npy", "--lse", "l.npy", "--cu-seqlens-q", cq, "--cu-seqlens-k", ck)
        problems += ["%s %s: %s" % (cq, ck, p) for p in expect(exe, s, args, 2, "last offset")]
    problems += expect(exe, s, s.fwd("--out", "out.npy", "--lse", "l.npy", "--cu-seqlens-q", "cu64.npy",
                                     "--cu-seqlens-k", "cu64.npy"), 0, "", outputs=("out.npy", "l.npy"))
    return problems


def symlink_output_written_through(exe, tmp):
    """An output that is a symbolic link: the link stays, the file it points to gets the result;
    a link to a missing file is refused."""
    s = Scene(tmp, "symlink-out")
    os.mkdir(s.path("real"))
    s.write("real/o.npy")
    os.symlink("real/o.npy", s.path("link.npy"))
    os.symlink("real/missing.npy", s.path("dangling.npy"))
    problems = expect(exe, s, s.fwd("--out", "link.npy"), 0, "", outputs=("real/o.npy",))
    if os.readlink(s.path("link.npy")) != "real/o.npy":
        problems.append("link.npy is no longer the same link")
    try:
        if np.load(s.path("real/o.npy")).shape != (1, 8, 2, 16):
            problems.append("real/o.npy does not hold O")
    except (OSError, ValueError) as exc:
        problems.append("real/o.npy: %s" % exc)
    problems += expect(exe, s, s.fwd("--out", "dangling.npy"), 2, "missing")
    return problems


def replaced_output_keeps_permissions(exe, tmp):
    s = Scene(tmp, "permissions")
    s.write("o.npy")
    os.chmod(s.path("o.npy"), 0o640)
    problems = expect(exe, s, s.fwd("--out", "o.npy", "--lse", "new.npy"), 0, "", outputs=("o.npy", "new.npy"))
    mode, new_mode = stat.S_IMODE(os.stat(s.path("o.npy")).st_mode), stat.S_IMODE(os.stat(s.path("new.npy")).st_mode)
    umask = os.umask(0o022)
    os.umask(umask)
    if mode != 0o640:
        problems.append("the replaced o.npy has mode %o, was 640" % mode)
    if new_mode != 0o666 & ~umask:
        problems.append("the new new.npy has mode %o, expected %o (0666 & ~umask)" % (new_mode, 0o666 & ~umask))
    return problems


def unwritable_directory_refused(exe, tmp):
    """An output in a directory the user may not write to: refused before computing. Root may
    write anywhere, so as root the tool runs as the user nobody (65534) for this case."""
    s = Scene(tmp, "unwritable")
    os.mkdir(s.path("ro"))
    s.write("ro/o.npy")
    s.write("ro_file.npy")
    os.chmod(s.path("ro"), 0o555)
    as_nobody = os.geteuid() == 0
    if as_nobody:  # nobody reads the inputs (0644) through 0755 directories and may write nothing here
        os.chmod(tmp, 0o755)
        os.chmod(s.dir, 0o755)
    try:
        problems = []
        for out, word in (("ro/new.npy", "ro"), ("ro/o.npy", "ro/o.npy")) + ((("ro_file.npy", "ro_file.npy"),)
                                                                             if as_nobody else ()):
            problems += ["--out %s: %s" % (out, p) for p in expect(exe, s, s.fwd("--out", out), 2, word,
                                                                   as_user=65534 if as_nobody else None)]
        return problems
    finally:
        os.chmod(s.path("ro"), 0o755)


def exit_status_as_documented(exe, tmp):
    """Each code `flashattn --help` documents, by a case of each kind it names."""
    s = Scene(tmp, "exit-status")
    np.save(s.path("k_d9.npy"), np.zeros((1, 8, 2, 9), np.float32))
    np.save(s.path("q_h3.npy"), np.zeros((1, 8, 3, 16), np.float32))
    s.write("not_npy.npy", b"not a numpy file\n" * 4)
    help_text = run_in(exe, s, ["--help"]).stdout
    problems = []
    for phrase in ("0 success", "1 run --check found an error", "2 a usage error", "input file missing",
                   "3 the library or the device failed", "4 an output could not be written"):
        if phrase not in " ".join(help_text.split()):
            problems.append("--help does not say %r" % phrase)
    cases = [
        (0, "", s.fwd("--out", "out.npy"), ("out.npy",)),
        (3, "no-such-backend", s.fwd("--out", "out.npy", "--backend", "no-such-backend"), ()),
        (2, "--frobnicate", s.fwd("--out", "out.npy", "--frobnicate"), ()),
        (2, "missing.npy", ["fwd", "--q", "missing.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"], ()),
        (2, "not_npy.npy", ["fwd", "--q", "not_npy.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"], ()),
        (2, "k_d9.npy", ["fwd", "--q", "q.npy", "--k", "k_d9.npy", "--v", "k_d9.npy", "--out", "out.npy"], ()),
        (2, "heads", ["fwd", "--q", "q_h3.npy", "--k", "k.npy", "--v", "v.npy", "--out", "out.npy"], ()),
        (2, "nodir", s.fwd("--out", "nodir/out.npy"), ()),
    ]
    for want, word, args, outputs in cases:
        problems += ["%s: %s" % (" ".join(args[-2:]), p) for p in expect(exe, s, args, want, word, outputs)]
    return problems


def scale_refused_unless_meaningful(exe, tmp):
    """--scale nan, inf, beyond float (3e39), rounding to 0 in float (1e-50: 0 would silently mean
    1/sqrt(d)), or large enough that scores overflow float32 (3e38 with these inputs gave NaN):
    refused. 1e30 keeps every score finite and is accepted, with finite results."""
    s = Scene(tmp, "scale")
    problems = []
    for value in ("nan", "inf", "-inf", "3e39", "-3e39", "1e-50", "3e38", "-3e38", "1e37"):
        problems += ["--scale %s: %s" % (value, p) for p in expect(exe, s, s.fwd("--out", "out.npy", "--scale", value),
                                                                  2, "scale")]
    problems += expect(exe, s, s.fwd("--out", "out.npy", "--lse", "l.npy", "--scale", "1e30"), 0, "",
                       outputs=("out.npy", "l.npy"))
    if not problems and not (np.all(np.isfinite(np.load(s.path("out.npy")))) and
                             np.all(np.isfinite(np.load(s.path("l.npy"))))):
        problems.append("--scale 1e30: non-finite O or LSE")
    problems += ["run --scale 3e38: %s" % p for p in expect(exe, s, ["run", "--seqlen-q", "64", "--heads", "1", "--dim",
                                                                    "16", "--repeat", "1", "--scale", "3e38"], 2,
                                                             "scale")]
    # d = 0: no scores to bound (the default scale 1/sqrt(0) is no reason to refuse); the library
    # rejects the shape itself
    for n in ("q0", "k0"):
        np.save(s.path(n + ".npy"), np.zeros((1, 8, 2, 0), np.float32))
    problems += ["d = 0: %s" % p for p in expect(exe, s, ["fwd", "--q", "q0.npy", "--k", "k0.npy", "--v", "k0.npy",
                                                          "--out", "out0.npy"], 2, "head dim")]
    return problems


def success_leaves_no_temporaries(exe, tmp):
    s = Scene(tmp, "success")
    s.write("dq.npy")
    return expect(exe, s, s.bwd("--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy"), 0, "",
                  outputs=("dq.npy", "dk.npy", "dv.npy"))


CASES = [
    ("failed write keeps the old output (ulimit -f)", failed_write_keeps_old_output),
    ("fwd --lse in a missing directory leaves --out alone", fwd_bad_lse_dir_keeps_out),
    ("bwd --dv in a missing directory leaves --dq, --dk alone", bwd_bad_dv_keeps_dq_dk),
    ("character device as output", character_device_output_refused),
    ("FIFO as output", fifo_output_refused),
    ("directory as output", directory_output_refused),
    ("socket as output", socket_output_refused),
    ("duplicate outputs", duplicate_outputs_refused),
    ("output naming an input", output_naming_input_refused),
    ("FIFO or directory as input", fifo_input_refused),
    ("--alibi-slopes file as output, bad or FIFO", alibi_slopes_file_is_an_input),
    ("varlen cu_seqlens[-1] != rows", varlen_last_offset_must_match_rows),
    ("symbolic link output", symlink_output_written_through),
    ("replaced output keeps its permissions", replaced_output_keeps_permissions),
    ("unwritable output directory", unwritable_directory_refused),
    ("exit status as documented", exit_status_as_documented),
    ("--scale", scale_refused_unless_meaningful),
    ("a successful bwd leaves no temporaries", success_leaves_no_temporaries),
]


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    exe = os.path.abspath(argv[1])
    name_filter = argv[3] if len(argv) > 3 and argv[2] == "-k" else None
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    tmp = tempfile.mkdtemp(prefix="flashattn-cli-safety-")
    try:
        for name, case in CASES:
            if name_filter and name_filter not in name:
                continue
            try:
                result = case(exe, tmp)
            except Exception as exc:  # a broken case fails, it does not stop the others
                result = ["the case raised %s: %s" % (type(exc).__name__, exc)]
            if isinstance(result, str):
                status, line = "SKIP", "%s: %s" % (name, result[len("SKIP: "):])
            elif result:
                status, line = "FAIL", "%s: %s" % (name, "; ".join(result))
            else:
                status, line = "PASS", name
            counts[status] += 1
            print("%s %s" % (status, line), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("cli-safety: %d passed, %d failed, %d skipped" % (counts["PASS"], counts["FAIL"], counts["SKIP"]))
    return 1 if counts["FAIL"] or not counts["PASS"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
