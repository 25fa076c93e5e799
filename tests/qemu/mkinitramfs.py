#!/usr/bin/env python3
"""Packs a directory into a gzip-compressed cpio "newc" archive, the format Linux unpacks as
its initramfs. Written here so the harness needs no cpio package.

    mkinitramfs.py ROOT_DIR OUT.gz
"""
import gzip
import os
import stat
import sys


def entries(root):
    yield ".", os.lstat(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            full = os.path.join(dirpath, name)
            yield os.path.relpath(full, root), os.lstat(full)


def header(ino, st, name, size):
    fields = [ino, st.st_mode, 0, 0, st.st_nlink if stat.S_ISDIR(st.st_mode) else 1, int(st.st_mtime), size, 0, 0, 0, 0, len(name) + 1, 0]
    return b"070701" + b"".join(b"%08X" % f for f in fields)


def pad(n):
    return b"\0" * ((4 - n % 4) % 4)


def main(root, out):
    with gzip.open(out, "wb", compresslevel=1) as f:
        for ino, (name, st) in enumerate(entries(root), start=1):
            full = os.path.join(root, name)
            if stat.S_ISLNK(st.st_mode):
                data = os.readlink(full).encode()
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as src:
                    data = src.read()
            else:
                data = b""
            h = header(ino, st, name, len(data)) + name.encode() + b"\0"
            f.write(h + pad(len(h)) + data + pad(len(data)))
        trailer = header(0, os.stat_result((0, 0, 0, 1, 0, 0, 0, 0, 0, 0)), "TRAILER!!!", 0) + b"TRAILER!!!\0"
        f.write(trailer + pad(len(trailer)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
