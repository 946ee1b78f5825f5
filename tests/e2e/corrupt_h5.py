"""Corrupts an HDF5 file the way that crashes or hangs libhdf5 1.10 (for corrupt_files.sh).

    corrupt_h5.py IN OUT crash|hang

Both edit the file's first global heap collection ("GCOL"), where HDF5 keeps variable-length
strings (specrun's ids, categories, texts and string attributes):
  crash  the first heap object's size gets 0x10 in its top byte: reading the string copies
         ~1e18 bytes (SIGSEGV in H5HG_read; h5py dies the same way);
  hang   the 4th object's size becomes 0 and the 8th object's index 248: libhdf5 loops for
         ever when it loads the heap (found by tests/fuzz/fuzz_prompt_file on
         tests/fuzz/corpus/prompt_file/prompts.h5, the file this recipe is meant for).
"""
import struct
import sys


def heap_objects(data, gcol):
    """Offsets of the objects of the global heap collection at `gcol`."""
    end = gcol + struct.unpack_from("<Q", data, gcol + 8)[0]
    out, at = [], gcol + 16
    while at + 16 <= end:
        index = struct.unpack_from("<H", data, at)[0]
        size = struct.unpack_from("<Q", data, at + 8)[0]
        if index == 0:  # free space up to the end
            break
        out.append(at)
        at += 16 + (size + 7) // 8 * 8
    return out


def main():
    src, dst, kind = sys.argv[1:4]
    data = bytearray(open(src, "rb").read())
    gcol = data.find(b"GCOL")
    if gcol < 0:
        sys.exit(f"{src}: no global heap (no variable-length data)")
    objects = heap_objects(data, gcol)
    if kind == "crash":
        data[objects[0] + 15] = 0x10
    elif kind == "hang":
        if len(objects) < 8:
            sys.exit(f"{src}: {len(objects)} heap objects, the hang recipe needs 8")
        struct.pack_into("<Q", data, objects[3] + 8, 0)
        struct.pack_into("<H", data, objects[7], 248)
    else:
        sys.exit(f"unknown kind {kind!r}: crash or hang")
    open(dst, "wb").write(data)


if __name__ == "__main__":
    main()
