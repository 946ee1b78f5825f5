"""Output files of the Python scripts, written as specrun writes its own (src/common/atomic_output.h).

Each file is written to a new temporary file in the target's folder, `.<name>.<random>.tmp`,
created with O_CREAT | O_EXCL | O_NOFOLLOW (so no link is ever written through), fsynced and
renamed over the target (os.replace), and the folder fsynced; on an error the temporary file is
removed and the target left as it was. A target that is a symbolic link or not a regular file,
one of the script's inputs (same device and inode, under any name) or, without `overwrite`, an
existing file is refused. Failures exit with a message naming the path: 2 for a path the user
chose badly (a read-only folder, a name too long, an existing file), 1 otherwise (a full disk).
"""
import errno
import os
import secrets
import stat
import sys

_USER_ERRORS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG, errno.ENOENT,
                errno.ENOTDIR, errno.ELOOP, errno.EEXIST}


def _fail(message, code):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def _same_file(a, b):
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _check_target(path, overwrite, inputs):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        _fail(f"cannot write {path}: {e.strerror}", 2)
    if stat.S_ISLNK(st.st_mode):
        _fail(f"{path} is a symbolic link, and this script does not write through links (remove "
              "the link or choose another folder)", 2)
    if not stat.S_ISREG(st.st_mode):
        _fail(f"{path} exists and is not a regular file", 2)
    for src in inputs:
        if _same_file(path, src):
            _fail(f"{path} is the same file as {src}, one of this script's inputs: writing it "
                  "would destroy what is being read; choose another folder", 2)
    if not overwrite:
        _fail(f"{path} already exists; pass --overwrite to replace it", 2)


def check_output(path, overwrite=False, inputs=()):
    """Exits (2) naming `path` when writing it would be refused: call before the work."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        _fail(f"cannot write {path}: the folder {folder} does not exist", 2)
    if len(os.path.basename(path).encode()) > os.pathconf(folder, "PC_NAME_MAX"):
        _fail(f"cannot write {path}: the name is too long for the file system", 2)
    _check_target(path, overwrite, inputs)
    if not os.access(folder, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        _fail(f"cannot write {path}: the folder {folder} is not writable (read-only, or no "
              "permission)", 2)


def make_folder(path):
    """os.makedirs(path, exist_ok=True), exiting with a message naming it when it cannot."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        _fail(f"cannot create the output folder {path}: {e.strerror or e}",
              2 if e.errno in _USER_ERRORS or isinstance(e, FileExistsError) else 1)


def write_output(path, write, overwrite=False, inputs=()):
    """Writes `path` through a temporary file: write(f) gets the binary file object."""
    check_output(path, overwrite, inputs)
    folder = os.path.dirname(path) or "."
    name = os.path.basename(path)[:200]
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    tmp = None
    try:
        for _ in range(16):
            candidate = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
            try:
                fd = os.open(candidate, flags, 0o644)
            except FileExistsError:
                continue
            tmp = candidate
            break
        if tmp is None:
            raise OSError(errno.EEXIST, "no free temporary name")
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        _check_target(path, overwrite, inputs)  # again: something may have appeared meanwhile
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # refuses a file created meanwhile (EEXIST)
            os.unlink(tmp)
        tmp = None
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        code = 2 if e.errno in _USER_ERRORS else 1
        _fail(f"cannot write {path}: {e.strerror or e}" +
              ("" if code == 2 else f"; {path} was left as it was"), code)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
