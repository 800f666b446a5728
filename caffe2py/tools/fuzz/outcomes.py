"""What a fuzz case can come to, and how an exception is classified.

Good outcomes: the case ran (`ran`), or caffe2py refused it with its own error
and a message a user can act on (`our_error`). Everything else is a finding:

  raw_text           our error type, but the message is only a NumPy/Python
                     exception's text (the executor's "Op failed: TypeError: ..."
                     wrapping of an exception the op did not anticipate)
  bare_exception     an exception that is not a Caffe2Error left the API
  hang               the case ran past the time limit
  crash              the worker process died (signal, abort, interpreter exit)
  wrong_result       it ran but the outputs differ from an independent reference
  silent_accept      it ran although the op's schema rules reject the case
  workspace_changed  a failing run left the workspace different from before
  input_modified     a run wrote into a blob that is not one of its outputs
  code_executed      a model file's pickled code ran under the model-trust policy
  file_escaped       a model file created or changed a file outside the folders it may write
"""
import re

GOOD = ("ran", "our_error")
FINDINGS = ("raw_text", "bare_exception", "hang", "crash", "wrong_result", "silent_accept",
            "workspace_changed", "input_modified", "code_executed", "file_escaped")
CLASSES = GOOD + FINDINGS

# An exception type name as the executor (or a loader) quotes it after a label:
# "Conv #0 'y' failed: ZeroDivisionError: ..." or "Conv #0 'y': KeyError: ...".
_RAW = re.compile(r"(?:failed: |: )((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*(?:Error|Exception|Warning|"
                  r"Interrupt|Exit|Iteration|Fault))(?:: |$)")
# NumPy's and Python's own phrasing: an op that passes such a text on as its message
# tells the user nothing about the op's inputs or arguments.
_LIBRARY_PHRASES = ("operands could not be broadcast", "cannot reshape array", "tuple index out of range",
                    "list index out of range", "zero-size array to reduction", "index out of bounds",
                    "is out of bounds for axis", "object of type", "unsupported operand type",
                    "invalid literal for", "cannot convert float nan", "division by zero",
                    "integer division or modulo by zero", "not enough values to unpack",
                    "too many values to unpack", "object is not subscriptable", "object is not iterable",
                    "has no attribute", "ufunc '", "Cannot cast ufunc", "axis out of bounds",
                    "must be real number", "takes from", "got an unexpected keyword argument",
                    "could not broadcast input array", "setting an array element with a sequence",
                    "negative dimensions are not allowed", "maximum supported dimension",
                    "array is too big", "Unable to allocate", "non-broadcastable output operand",
                    "repeats may not contain negative values", "bad operand type", "math domain error",
                    "Python int too large to convert", "OverflowError", "Maximum allowed size exceeded")
_OURS = {"Caffe2Error", "OperatorError", "ProtoError", "ModelLoadError", "SerializationError", "ModelTrustError"}


def raw_exception_name(message):
    """The foreign exception type a Caffe2Error message merely wraps, or None."""
    for match in _RAW.finditer(message):
        name = match.group(1).rsplit(".", 1)[-1]
        if name not in _OURS:
            return name
    return None


def library_phrase(message):
    """The NumPy/Python phrase a message carries (None when it has none)."""
    for phrase in _LIBRARY_PHRASES:
        if phrase in message:
            return phrase
    return None


def classify_exception(exc):
    """(class, message) for an exception that left caffe2py's API."""
    from caffe2py.errors import Caffe2Error
    message = "%s: %s" % (type(exc).__name__, exc)
    if not isinstance(exc, Caffe2Error):
        return "bare_exception", message
    if raw_exception_name(str(exc)) or library_phrase(str(exc)):
        return "raw_text", message
    return "our_error", message


def outcome(cls, message="", **detail):
    assert cls in CLASSES, cls
    out = {"class": cls, "message": message[:2000]}
    out.update(detail)
    return out
