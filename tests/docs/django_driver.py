"""Runs one ``needs django`` block, in a process of its own (started by tests.docs.runner).

Django is set up with :mod:`tests.docs.django_project` and its database migrated, as
``manage.py migrate`` would leave a reader's project; then the block runs: a file block is
imported as its module (``myapp/jobs.py`` is ``myapp.jobs``), any other runs its given
code and then its own as ``__main__``. ``python -m tests.docs.django_driver SPEC``, where
SPEC is a JSON file: ``{"id", "page", "source", "given", "module"}``.
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    import django
    from django.core.management import call_command

    django.setup()  # durabl_django imports every app's jobs.py here
    call_command("migrate", verbosity=0)
    if spec["module"] is not None:
        # A jobs.py that failed at setup is kept for the checks (durabl.E004), not raised:
        # importing it again raises its error here.
        importlib.import_module(spec["module"])
        return
    # A module of its own, importable as __main__ (as a reader's script would be): a task
    # defined in the block is found again by its dotted path.
    main = sys.modules["__main__"] = types.ModuleType("__main__")
    for given in spec["given"]:
        exec(compile(given, f"<given of {spec['id']}>", "exec"), vars(main))
    exec(compile(spec["source"], spec["page"], "exec"), vars(main))


if __name__ == "__main__":
    main(sys.argv[1])
