"""Coverage-guided fuzzing of the readers of NetKet's own files (flax
``.mpack``, nqxpack ``.nk`` zips and their directory form) with atheris.

    python fuzz/fuzz_netket_files.py [libFuzzer options] WORK_CORPUS fuzz/corpus_netket

(``fuzz/run --target netket_files``.) Each input is loaded into an MCState,
a FullSumState and a parameters dict (fuzz/targets.py); half of the
mutations are fuzz/mutate_netket.py's zip- and msgpack-aware ones.
"""

from __future__ import annotations

import harness
import mutate_netket
import targets

TEMPLATES = targets.netket_templates()


if __name__ == "__main__":
    harness.fuzz(
        lambda path: targets.read_netket_file(path, TEMPLATES, harness.WORK),
        mutate_netket.mutate,
        harness.HERE / "corpus_netket",
        ".nk",
    )
