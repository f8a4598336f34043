"""Coverage-guided fuzzing of nkserde's reader with atheris (libFuzzer).

    python fuzz/fuzz_reader.py [libFuzzer options] WORK_CORPUS fuzz/corpus

(``fuzz/run`` passes the options; see fuzz/README.md.) Each input is written
to a file and read every way a user reads one (fuzz/targets.py). Inputs are
mutated by libFuzzer's byte mutations and, half of the time, by
fuzz/mutators.py's structure-aware ones (fuzz/harness.py: what a crash is).
"""

from __future__ import annotations

import harness
import mutators
import targets

TEMPLATES = targets.templates()


if __name__ == "__main__":
    harness.fuzz(
        lambda path: targets.read_every_way(path, TEMPLATES, harness.WORK),
        mutators.mutate,
        harness.HERE / "corpus",
        ".nks",
    )
