"""A Checkpoint's options, each declared once, here, and checked once:
what ``Checkpoint(directory, **options)`` and ``checkpointed(driver,
directory, **options)`` take, as one frozen value. The parts of a
checkpointed run only read it.

    options = CheckpointOptions(every="15min", keep=3, job=JobOptions(walltime=3600))
    options.every        # EveryDuration(seconds=900.0): a SavePolicy
    options.keep         # KeepLatest(n=3): a KeepPolicy
    options.job          # JobOptions(walltime=3600.0, requeue="auto", ...): job/control.py

Ten options; what used to be more (``budget``/``mtbf``, ``keep_every``,
``walltime``/``requeue``/``requeue_on_error``/``signals``,
``at``/``strict``/``rename``) are the small objects they configure
(``WithinBudget``, ``KeepMultiples``, :class:`JobOptions`,
:class:`InitFrom`). Those keywords still work: :meth:`CheckpointOptions.given`
turns them into their objects with a FutureWarning naming the new
spelling. Every string option is checked against one table
(option_checks.CHOICES); every error is a ValueError of one shape,
``"<option> must be <what it may be>, got <what was given>"``. No files,
no process-wide state; NetKet only for the default ``final_stops``.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._warnings import outside
from .job.control import JobOptions
from .keep_policy import KeepPolicy, parse_keep
from .option_checks import bad_option, one_of
from .run import FINAL_STOPS
from .save_policy import SavePolicy, parse_every


@dataclass(frozen=True)
class InitFrom:
    """Where a run with no checkpoint of its own takes its variational
    state from (a file or checkpoint directory of another run), and how
    (``at``, ``strict``, ``rename``, as :func:`nkserde.load` takes them).
    ``init_from="gs/ckpt"`` is ``InitFrom("gs/ckpt")``."""

    source: Path
    at: str | None = None
    strict: bool = True
    rename: Any = None

    def __post_init__(self):
        object.__setattr__(self, "source", Path(self.source))
        object.__setattr__(self, "strict", bool(self.strict))


@dataclass(frozen=True)
class CheckpointOptions:
    """Every option of a Checkpoint, checked; the defaults are a
    Checkpoint's, and so is what each means (its docstring shows them,
    from here: :func:`with_options_described`).

    Attributes:
      every: when to checkpoint (and always at the end): every ``every``
        completed steps (an int: :class:`~nkserde.EverySteps`); every so
        much wall-clock time (``"90s"``, ``"15min"``, ``"2h"``, a
        ``timedelta``: :class:`~nkserde.EveryDuration`); ``"auto"``, as
        often as keeps checkpointing within 1% of the run
        (:class:`~nkserde.WithinBudget`, which takes another budget and the
        machine's mean time between failures); or policies combined,
        ``EverySteps(100) | EveryDuration("15min")``: whichever comes first.
      keep: how many of the newest checkpoints to keep (an int:
        :class:`~nkserde.KeepLatest`), or a keep policy,
        ``KeepLatest(3) | KeepMultiples(1000)``. The newest is always kept.
      resume: ``"auto"`` (resume if there is a checkpoint of the same run,
        refuse if the script changed), ``"force"`` (resume even if the
        fingerprint changed, where shapes allow), ``"never"`` (start fresh;
        old checkpoints are moved to ``previous-<time>/``, never deleted),
        ``"must"`` (fail if there is nothing to resume).
      loggers: loggers whose history to checkpoint besides those of the run
        (loggers passed as ``out=`` are found automatically).
      async_save: take a snapshot and write it in a background thread at
        the lowest CPU priority while the run goes on (arrays in a GPU's or
        TPU's memory are held and copied to the host there); the next
        checkpoint, the run's end, a stop and a failure wait for it, and so
        does a step's end once it has been in flight for longer than 1 s
        and twice the write before it (with several processes: the end of
        the step it was taken in): a kill loses at most the checkpoint in
        flight.
      final_stops: callback types whose StopRun ends the run for good
        (convergence criteria); a StopRun of any other callback (e.g.
        ``nk.callbacks.Timeout``) is an interruption that the next run of
        the script resumes.
      on_write_error: ``"warn"`` (a checkpoint that cannot be written costs
        that checkpoint: one warning naming it and the newest on disk, and
        the run goes on) or ``"raise"`` (the run stops with the
        NkserdeError). The checkpoints already written stay either way. A
        value no file can hold (a logged array of strings) is no failure
        of a write: it stops the run, with the UnregisteredTypeError that
        names it.
      job: the job around the run (:class:`~nkserde.JobOptions`: the
        signals that stop it with a checkpoint, the walltime it stops
        before, whether it requeues its SLURM job; docs/guides/slurm.md).
      init_from: a file or checkpoint directory of *another* run whose
        variational state this run starts from while ``directory`` has no
        checkpoint of its own (a warm start, a quench from a ground state),
        or an :class:`~nkserde.InitFrom` saying which part and how; the run
        keeps its own fingerprint, optimizer state and step count.
      compile_cache: ``"auto"`` (the directory the script gave
        ``nkserde.compilation_cache()``, else the user's cache directory),
        a directory, or None (the Checkpoint sets no cache of its own):
        JAX's compiled code, numba's of NetKet's kernels and the
        fingerprint's probes outlive the process, so a resumed run does
        not compile again (:mod:`nkserde.caches`). ``import nkserde``
        already caches what compiles from NetKet's import on (the
        template's build included); the Checkpoint sets its setting when
        each run starts: making one changes nothing in the process.
        ``NKSERDE_COMPILATION_CACHE=off`` turns every cache off.

    The options of earlier releases (``budget``, ``mtbf``, ``keep_every``,
    ``walltime``, ``requeue``, ``requeue_on_error``, ``signals``, ``at``,
    ``strict``, ``rename``) still work, with a FutureWarning naming the
    object they now configure.
    """

    every: SavePolicy = 50  # an int, a duration, "auto" or a SavePolicy: a SavePolicy once checked
    keep: KeepPolicy = 3  # an int or a KeepPolicy: a KeepPolicy once checked
    resume: str = "auto"
    loggers: tuple = ()
    async_save: bool = True
    final_stops: tuple = FINAL_STOPS
    on_write_error: str = "warn"
    job: JobOptions = JobOptions()
    init_from: InitFrom | None = None  # a path or an InitFrom: an InitFrom once checked
    compile_cache: Any = "auto"

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("every", parse_every(self.every))
        put("keep", parse_keep(self.keep, None))
        one_of("resume", self.resume)
        put("loggers", tuple(self.loggers))
        put("async_save", bool(self.async_save))
        put("final_stops", tuple(self.final_stops))
        one_of("on_write_error", self.on_write_error)
        if not isinstance(self.job, JobOptions):
            raise bad_option("job", "a nkserde.JobOptions", self.job)
        if self.init_from is not None and not isinstance(self.init_from, InitFrom):
            put("init_from", InitFrom(self.init_from))

    @classmethod
    def given(cls, **options) -> CheckpointOptions:
        """The options as ``Checkpoint(directory, **options)`` was called,
        checked; keywords of earlier releases turned into the objects they
        configure, with a FutureWarning that writes the call's new spelling.
        TypeError for a keyword that is no option."""
        former = {name: options.pop(name) for name in FORMER if name in options}
        unknown = set(options) - set(cls.__dataclass_fields__)
        if unknown:
            raise TypeError(f"Checkpoint() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
        budget = {k: former[k] for k in ("budget", "mtbf") if k in former}
        if budget:
            options["every"] = parse_every(options.get("every", 50), **budget)
            _deprecated(budget, f"every=nkserde.WithinBudget({_arguments(budget)})")
        if "keep_every" in former:
            keep, multiples = options.get("keep", 3), former["keep_every"]
            options["keep"] = parse_keep(keep, multiples)
            policy = f"nkserde.KeepLatest({keep!r}) | nkserde.KeepMultiples({multiples!r})"
            _deprecated(former, f"keep={policy}", "keep_every")
        job = {k: former[k] for k in ("walltime", "requeue", "requeue_on_error", "signals") if k in former}
        if job:
            if "job" in options:
                raise bad_option(", ".join(job), "left out when job is given (give them to JobOptions)", job)
            options["job"] = JobOptions(**job)
            _deprecated(job, f"job=nkserde.JobOptions({_arguments(job)})")
        init = {k: former[k] for k in ("at", "strict", "rename") if k in former}
        if init:
            source = options.get("init_from")
            if isinstance(source, InitFrom):
                raise bad_option(", ".join(init), "left out when init_from is an InitFrom (give them to it)", init)
            if source is not None:
                options["init_from"] = InitFrom(source, **init)
            _deprecated(init, f"init_from=nkserde.InitFrom({str(source)!r}, {_arguments(init)})")
        return cls(**options)


# the keywords of earlier releases, now arguments of the objects they configure
FORMER = (
    *("budget", "mtbf", "keep_every"),
    *("walltime", "requeue", "requeue_on_error", "signals"),
    *("at", "strict", "rename"),
)


def _arguments(given: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in given.items())


def _deprecated(given: dict, spelling: str, *names: str) -> None:
    names = names or tuple(given)
    warnings.warn(
        f"nkserde: Checkpoint({', '.join(f'{n}=' for n in names)}...) is deprecated; write {spelling}",
        FutureWarning,
        stacklevel=outside(),
    )


def with_options_described(doc: str) -> str:
    """``doc`` (Checkpoint's docstring) with what each option means, from
    :class:`CheckpointOptions`, in place of its ``**options`` entry, as
    help(), IDEs and the API page show it: the options are described
    once, where they are declared. Both docstrings are dedented first:
    Python 3.13 stores them dedented, earlier versions as written."""
    doc = inspect.cleandoc(doc) + "\n"
    described = inspect.cleandoc(CheckpointOptions.__doc__).split("Attributes:\n", 1)[1].rstrip() + "\n"
    start = doc.index("  **options: ")
    return doc[:start] + described + doc[doc.index("\n\n", start) + 1 :]


def signature(*leading: str) -> inspect.Signature:
    """The signature of a call that takes ``leading`` positional
    parameters, then the options as keywords with their defaults (help()
    and IDEs show this for Checkpoint and checkpointed: NetKet's callbacks
    are Pytrees, whose metaclass would show ``(*args, **kwargs)``)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    options = [inspect.Parameter(f.name, keyword, default=f.default) for f in dataclasses.fields(CheckpointOptions)]
    positional = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in leading]
    return inspect.Signature(positional + options)
