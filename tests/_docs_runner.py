"""Runs the documentation's snippets, page by page, in one process (so that
JAX compiles each function once for all pages): ``python _docs_runner.py
PAGES.json RESULTS.json WORKDIR``. PAGES.json lists ``{"page", "code",
"system"}``; each page runs in a directory of its own under WORKDIR, in a
namespace of its own (``docs_system.namespace()`` when ``system``, else an
empty one: the README's example runs on its own). RESULTS.json maps each
page to null or the traceback of its failure."""

import json
import os
import sys
import traceback
from pathlib import Path

pages, results, work = json.loads(Path(sys.argv[1]).read_text()), {}, Path(sys.argv[3])
for i, entry in enumerate(pages):
    directory = work / f"page-{i}"
    directory.mkdir()
    os.chdir(directory)
    try:
        if entry["system"]:
            import docs_system

            names = docs_system.namespace()
        else:
            names = {"__name__": "__main__"}
        exec(compile(entry["code"], entry["page"], "exec"), names)
        results[entry["page"]] = None
    except BaseException:
        results[entry["page"]] = traceback.format_exc()[-4000:]
Path(sys.argv[2]).write_text(json.dumps(results))
