"""The errors hoodie-stream raises on purpose. Every message names the path, field, record or option at fault.

Every error is built from its fields (the constructor's arguments, named in `fields`), so it pickles and crosses
from a Spark task to the driver with its class and fields: an operator's task function is wrapped in `in_task`,
which turns a HoodieError into a `TaskFailure` whose message carries the error as one marked line of JSON; Spark
hands that text to the driver inside its own exception, and `rebuild_task_error` (or the `task_errors_rebuilt`
context manager around a Spark job) finds the line and re-creates the error. `str(error)` is the human message.
"""

import contextlib
import functools
import inspect
import json
import traceback

TASK_ERROR_MARK = "hoodie_stream task error: "


class HoodieError(Exception):
    """Base class of every error this package raises on purpose."""

    fields: tuple[str, ...] = ("message",)

    def __init__(self, message: str) -> None:
        self.message = str(message)
        super().__init__(self.message)

    def to_fields(self):
        """{field: value} of the constructor's arguments."""
        return {name: getattr(self, name) for name in self.fields}

    def to_json(self):
        """One line of JSON: the class name, the fields and the message."""
        return json.dumps({"class": type(self).__name__, "fields": self.to_fields(), "message": str(self)}, default=str)

    def __reduce__(self):
        return type(self), tuple(self.to_fields().values()), self.__dict__


class HoodiePathReasonError(HoodieError):
    """An error about one path: the path and the reason, shown as `<path>: <reason>`."""

    fields = ("path", "reason")

    def __init__(self, path: str, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class HoodieTableError(HoodiePathReasonError):
    """A table on disk cannot be opened or written: missing/corrupt hoodie.properties, wrong version, MDT."""


class HoodieTimelineError(HoodieError):
    """An illegal timeline operation (out-of-order instant, overwriting a completed instant, ...)."""


class HoodieFormatError(HoodieError):
    """Bytes on disk do not follow the Hudi v6 format (log block, plan, commit metadata, file name)."""


class HoodieKeyError(HoodieError):
    """A record key or partition path cannot be built (null key, missing field)."""


class HoodieConfigError(HoodieError):
    """An unknown or invalid option."""


class HoodieUsageError(HoodieError):
    """A call the API does not allow (an argument out of its range, an operation in the wrong state)."""


class HoodieCommitError(HoodieError):
    """A commit cannot complete because what its tasks reported does not add up (missing write stats)."""


class HoodiePathError(HoodieError):
    """A path that would leave its storage root (a table, a cache directory), or a value that cannot be a path
    segment (a partition value that is absolute, holds `..`, an empty segment or a control character)."""


class HoodieStorageError(HoodiePathReasonError):
    """A storage operation failed: the object is missing, or create-if-absent found it present."""


class HoodieObjectExistsError(HoodieStorageError):
    """create-if-absent lost: the object exists already (another writer, or a retried step, created it)."""


class HoodieObjectNotFoundError(HoodieStorageError):
    """The object to read does not exist."""


class HoodieObjectChangedError(HoodieStorageError):
    """A conditional replace lost: the object changed (or vanished) since its version was read."""


class HoodieLockError(HoodieError):
    """The table's writer lease is held by another writer (named in the message), or was lost."""


class HoodieUnplannedInputError(HoodieError):
    """A micro-batch holds input the plan it was written with did not foresee (a topic, or a schema, met for the
    first time): the driver plans it again."""


def _subclasses(cls):
    yield cls
    for sub in cls.__subclasses__():
        yield from _subclasses(sub)


# the classes an error carried from a task is rebuilt as, by name
CLASSES = {cls.__name__: cls for cls in _subclasses(HoodieError) if cls.__module__ == __name__}


class TaskFailure(Exception):
    """What a Spark task raises in place of a HoodieError (its `__cause__`): the error's traceback in the task, then
    the error as one line of JSON after TASK_ERROR_MARK, which the driver finds in the text Spark hands it."""

    def __init__(self, error):
        self.error = error
        where = "".join(traceback.format_exception(error)) if error.__traceback__ else f"{error!r}\n"
        super().__init__(f"{type(error).__name__} in a Spark task:\n{where}{TASK_ERROR_MARK}{error.to_json()}")

    def __reduce__(self):
        return type(self), (self.error,)


@contextlib.contextmanager
def carried_to_driver():
    """In a Spark task: a HoodieError raised inside leaves as a TaskFailure carrying it to the driver."""
    try:
        yield
    except HoodieError as error:
        raise TaskFailure(error) from error


def in_task(fn):
    """Decorator of an operator's task function (a mapInArrow generator, or a plain function): a HoodieError it
    raises leaves the task as a TaskFailure, so that the driver rebuilds it with its class and fields."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def run_generator(*args, **kwargs):
            with carried_to_driver():
                return (yield from fn(*args, **kwargs))

        return run_generator

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with carried_to_driver():
            return fn(*args, **kwargs)

    return run


def error_from_json(line):
    """The error one line of `HoodieError.to_json` describes: its class (one of CLASSES) built from its fields;
    a HoodieError with the message when the class is unknown or its fields do not fit."""
    try:
        data = json.loads(line)
        name, fields, message = data["class"], data["fields"], data["message"]
    except (ValueError, TypeError, KeyError):
        return HoodieError(line)
    cls = CLASSES.get(name)
    if cls is not None and isinstance(fields, dict):
        try:
            return cls(**fields)
        except TypeError:
            pass
    return HoodieError(message)


def rebuild_task_error(exc):
    """The HoodieError a Spark task raised (see `in_task`), re-created from the text of `exc`, the exception Spark
    raised on the driver; None when that text carries no task error. The last marked line wins; the error's
    traceback in the task, when the text holds it, becomes a note of the rebuilt error (`str()` stays the message)."""
    text = str(exc)
    at = text.rfind(TASK_ERROR_MARK)
    if at < 0:
        return None
    error = error_from_json(text[at + len(TASK_ERROR_MARK) :].split("\n", 1)[0].strip())
    start = text.rfind("Traceback (most recent call last):", 0, at)
    if start >= 0 and text.rfind(" in a Spark task:\n", 0, start) >= 0:
        error.__notes__ = ["raised in a Spark task:\n" + text[start:at].rstrip()]  # add_note, before 3.11 too
    return error


@contextlib.contextmanager
def task_errors_rebuilt():
    """On the driver, around code that runs the project's Spark tasks: an exception carrying a task's HoodieError
    is replaced by that error, rebuilt (Spark's wrapper, a Java stack trace, is dropped)."""
    try:
        yield
    except Exception as exc:
        error = rebuild_task_error(exc)
        if error is None:
            raise
        raise error from None
