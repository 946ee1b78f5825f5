#!/usr/bin/python3
"""Reading specrun dataset files (`decode.modes = ["dataset"]`; docs/file-formats.md, "Dataset
files") from Python with h5py and numpy, and as a PyTorch Dataset.

    from specrun_data import SpecrunData, TorchSequences
    data = SpecrunData("out/code.h5")          # the top-level file (or one part file)
    s = data[0]                                # one sequence, a dict of numpy arrays
    s["tokens"], s["hidden"], s["first_row"]   # hidden[j] = state after reading tokens[first_row + j]
    loader = torch.utils.data.DataLoader(TorchSequences("out/code.h5"), num_workers=2,
                                         collate_fn=pad_batch)

Files are opened lazily, once per process, so a Dataset handed to DataLoader workers (fork or
spawn) never shares an HDF5 handle between processes. A part file (written while the job runs)
is complete once it has its name; the top-level file lists every part of every shard, and
opening it checks that each is beside it and is the part it recorded (HDF5 would read a missing
part's rows as zeros).

Run as a script for a summary: /usr/bin/python3 scripts/specrun_data.py FILE
"""
import os
import sys

import h5py
import numpy as np

SCHEMA = "specrun.dataset"


def part_counts(f):
    """A part's sequences, and the tokens and rows they cover (as the top-level file records
    them in /parts)."""
    n = SpecrunData._committed(f)
    s = f["sequences"]
    if n == 0:
        return 0, 0, 0
    tokens = s["token_offset"][:n] + s["prompt_len"][:n] + s["generated"][:n]
    rows = s["row_offset"][:n] + s["n_rows"][:n]
    return n, int(tokens.max()), int(rows.max())


def check_parts(path, f):
    """Every part the top-level file names must be beside it, sealed, and the part it recorded:
    HDF5 reads the rows of a missing part as zeros. Raises FileNotFoundError or ValueError naming
    the part."""
    names = [x.decode() if isinstance(x, bytes) else x for x in f.attrs["parts"]]
    records = None
    if "parts" in f:  # top-level files written before the records have names only
        g = f["parts"]
        ids = [x.decode() if isinstance(x, bytes) else x for x in g["part_id"][:]]
        records = list(zip(ids, g["sequences"][:], g["tokens"][:], g["rows"][:]))
        if len(records) != len(names):
            raise ValueError(f"{path}: /parts records {len(records)} parts but the attribute "
                             f"parts names {len(names)}")
    folder = os.path.dirname(path)
    for i, name in enumerate(names):
        part = os.path.join(folder, name)
        if not os.path.isfile(part):
            raise FileNotFoundError(
                f"{path}: its part {part} is missing (HDF5 would read its rows as zeros); the "
                "top-level file refers to its parts by name, beside it: restore the part, or "
                "generate the dataset again")
        with h5py.File(part, "r") as p:
            if p.attrs.get("kind") != "shard" or not p.attrs.get("finished"):
                raise ValueError(f"{path}: its part {part} is not a sealed part file")
            if records is None:
                continue
            want_id, *want = records[i]
            have_id = p.attrs.get("part_id", "")
            have = part_counts(p)
            if have_id != want_id or tuple(int(x) for x in want) != have:
                raise ValueError(
                    f"{path}: its part {part} is not the part it indexed (recorded: part id "
                    f"{want_id}, {want[0]} sequences, {want[1]} tokens, {want[2]} rows; found: "
                    f"part id {have_id or 'none'}, {have[0]} sequences, {have[1]} tokens, "
                    f"{have[2]} rows): another job has written a part of that name since; finish "
                    "or resume that job (its top-level file presents the parts on disk), or "
                    "generate the dataset again")


class SpecrunData:
    """Random access to the sequences of a dataset file (no torch needed)."""

    def __init__(self, path):
        self.path = path
        self._file = None
        self._pid = None
        with h5py.File(path, "r") as f:
            if f.attrs.get("schema") != SCHEMA:
                raise ValueError(f"{path} is not a specrun dataset file")
            self.kind = f.attrs["kind"]
            if self.kind == "index":
                check_parts(path, f)
            self.layers = [int(x) for x in f["layout/layers"][:]]
            self.layout = {k: (v.decode() if isinstance(v, bytes) else v)
                           for k, v in f["layout"].attrs.items()}
            self.hidden_size = int(self.layout["hidden_size"])
            self.topk = int(self.layout["topk"])
            n = self._committed(f)
            seq = f["sequences"]
            self.index = {k: seq[k][:n] for k in
                          ("prompt_index", "prompt_len", "generated", "token_offset",
                           "row_offset", "first_row", "n_rows", "finish_reason")}
            self.prompt_id = [x.decode() if isinstance(x, bytes) else x
                              for x in seq["prompt_id"][:n]]

    @staticmethod
    def _committed(f):
        if "commits" not in f:  # the top-level file
            return len(f["sequences/prompt_index"])
        c = f["commits"]
        n = min(len(d) for d in c.values())
        rows = {"sequences": len(f["sequences/prompt_index"]), "tokens": len(f["tokens"])}
        for i in range(n - 1, -1, -1):
            if (c["sequences_end"][i] <= rows["sequences"]
                    and c["tokens_end"][i] <= rows["tokens"]):
                return int(c["sequences_end"][i])
        return 0

    def _h5(self):
        if self._file is None or self._pid != os.getpid():
            self._file = h5py.File(self.path, "r")
            self._pid = os.getpid()
        return self._file

    def __len__(self):
        return len(self.index["prompt_index"])

    def __getitem__(self, i):
        f = self._h5()
        ix = {k: int(v[i]) for k, v in self.index.items()}
        total = ix["prompt_len"] + ix["generated"]
        t0, r0, n = ix["token_offset"], ix["row_offset"], ix["n_rows"]
        out = dict(ix)
        out["prompt_id"] = self.prompt_id[i]
        out["tokens"] = f["tokens"][t0:t0 + total].astype(np.int64)
        if "hidden" in f:
            out["hidden"] = f["hidden"][r0:r0 + n]  # float32 [n_rows, layers, hidden]
        if self.topk:
            out["topk_ids"] = f["topk_ids"][r0:r0 + n]
            out["topk_probs"] = f["topk_probs"][r0:r0 + n].astype(np.float32)
        return out


try:
    import torch
    from torch.utils.data import Dataset

    class TorchSequences(Dataset):
        """One item per sequence: tokens (int64), hidden (float32 [n_rows, layers, hidden]),
        first_row, prompt_len; top-k when stored. Lazy and multi-worker safe."""

        def __init__(self, path):
            self.data = SpecrunData(path)

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            s = self.data[i]
            item = {"tokens": torch.from_numpy(s["tokens"]), "first_row": s["first_row"],
                    "prompt_len": s["prompt_len"], "prompt_index": s["prompt_index"]}
            if "hidden" in s:
                item["hidden"] = torch.from_numpy(np.ascontiguousarray(s["hidden"]))
            if "topk_ids" in s:
                item["topk_ids"] = torch.from_numpy(s["topk_ids"].astype(np.int64))
                item["topk_probs"] = torch.from_numpy(s["topk_probs"])
            return item

    def pad_batch(items):
        """Collates sequences of different lengths: pads tokens with 0 and hidden with zeros,
        with `mask` marking the real rows."""
        n = max(len(x["tokens"]) for x in items)
        out = {"tokens": torch.zeros(len(items), n, dtype=torch.int64),
               "length": torch.tensor([len(x["tokens"]) for x in items])}
        for b, x in enumerate(items):
            out["tokens"][b, :len(x["tokens"])] = x["tokens"]
        if "hidden" in items[0]:
            rows = max(x["hidden"].shape[0] for x in items)
            shape = items[0]["hidden"].shape[1:]
            out["hidden"] = torch.zeros(len(items), rows, *shape)
            out["mask"] = torch.zeros(len(items), rows, dtype=torch.bool)
            out["first_row"] = torch.tensor([x["first_row"] for x in items])
            for b, x in enumerate(items):
                out["hidden"][b, :x["hidden"].shape[0]] = x["hidden"]
                out["mask"][b, :x["hidden"].shape[0]] = True
        return out
except ImportError:  # torch is optional for reading
    pass


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    try:
        d = SpecrunData(sys.argv[1])
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    rows = int(d.index["n_rows"].sum())
    gen = int(d.index["generated"].sum())
    print(f"{sys.argv[1]} ({d.kind}): {len(d)} sequences, {gen} generated tokens, {rows} rows of "
          f"layers {d.layers} x {d.hidden_size} ({d.layout['dtype']}), top-k {d.topk}")
    if len(d):
        s = d[0]
        print(f"  first sequence: prompt {s['prompt_index']} ('{s['prompt_id']}'), "
              f"{len(s['tokens'])} tokens, hidden {None if 'hidden' not in s else s['hidden'].shape}")


if __name__ == "__main__":
    main()
