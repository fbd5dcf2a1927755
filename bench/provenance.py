"""provenance.py: what every file a Python benchmark writes carries inside it: the date (UTC), the
git commit of this checkout (with "-dirty" when tracked files differ from it), the device and the
exact command line. One line of text, written as a leading comment ("# ...") in CSV, Markdown and
text files and as PNG text chunks (keys Date, Commit, Device, Command).

Where the checkout has no git metadata (a copy of the working tree on a GPU machine), the commit
comes from the environment variable FLASHATTN_BENCH_COMMIT, else it reads "unknown".
"""
import csv
import datetime
import os
import shlex
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMIT_ENV = "FLASHATTN_BENCH_COMMIT"


def git_commit(repo=REPO):
    """'<40 hex>' or '<40 hex>-dirty' from git; 'unknown' where git has no answer. A
    FLASHATTN_BENCH_COMMIT in the environment names the tree instead (a copy of a working tree, such
    as the one a remote GPU machine receives, may carry an older .git than the files it holds);
    what git reads there is kept beside it."""
    found = "unknown"
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode == 0 and head.stdout.strip():
            status = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10)
            dirty = status.returncode != 0 or bool(status.stdout.strip())
            found = head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    env = os.environ.get(COMMIT_ENV, "").strip()
    if env:
        return f"{env} (from {COMMIT_ENV}; git here: {found})"
    return found


def command_line(argv=None):
    """The command as typed, with the interpreter: `python3 bench/x.py --a b`."""
    argv = sys.argv if argv is None else argv
    return shlex.join([os.path.basename(sys.executable) or "python3"] + list(argv))


def fields(device, argv=None, now=None):
    """{'date', 'commit', 'device', 'command'}; now: a datetime for tests (default: now, UTC)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return {"date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": git_commit(),
            "device": device or "unknown", "command": command_line(argv)}


def line(f):
    """The one-line form: `date ... | commit ... | device ... | command ...` (no comment marker)."""
    return " | ".join(f"{k} {f[k]}" for k in ("date", "commit", "device", "command"))


def comment(device, argv=None):
    """The leading comment line of a text file: '# provenance: date ... | ...'."""
    return "# provenance: " + line(fields(device, argv))


def torch_device():
    """The CUDA device's name through torch, else 'CPU' (for scripts that may run on either)."""
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except ImportError:
        pass
    import platform
    return f"CPU ({platform.processor() or platform.machine()})"


def write_csv(path, header, rows, device, argv=None):
    """A CSV whose first line is the provenance comment; read it back with read_csv."""
    with open(path, "w", newline="") as f:
        f.write(comment(device, argv) + "\n")
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    print(f"wrote {path}", flush=True)


def read_csv(path):
    """csv.DictReader rows of a CSV, its leading '#' comment lines skipped (files without them read too)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(l for l in f if not l.startswith("#")))


def png_metadata(device, argv=None):
    """savefig(..., metadata=png_metadata(device)): PNG tEXt chunks Date, Commit, Device, Command."""
    f = fields(device, argv)
    return {"Date": f["date"], "Commit": f["commit"], "Device": f["device"], "Command": f["command"],
            "Software": "flashattn bench (bench/provenance.py)"}
