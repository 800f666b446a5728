"""Caffe2's serialized operator tests (caffe2.python.serialized_test.serialized_test_util).

Caffe2 stored one example's inputs and outputs per test (op.pb + inout.npz zips) and
compared later runs with them. caffe2py ships no stored outputs: `serial.given` is
hypothesis's given and SerializedTestCase checks what HypothesisTestCase checks, so
Caffe2's serialized operator tests run unmodified as plain property tests:

    import caffe2.python.serialized_test.serialized_test_util as serial

    class TestOp(serial.SerializedTestCase):
        @serial.given(X=hu.tensor(), **hu.gcs)
        def test_op(self, X, gc, dc):
            self.assertReferenceChecks(gc, op, [X], reference)

    if __name__ == "__main__":
        serial.testWithArgs()
"""
import argparse
import os
import sys
import threading
import unittest

import hypothesis

from .. import hypothesis_test_util as hu

operator_test_type = "operator_test"
# Caffe2's operator_test/conftest.py reads DATA_DIR (the stored outputs' folder) and sets
# its flags on _output_context; nothing is ever written there.
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
_output_context = threading.local()


def given(*given_args, **given_kwargs):
    """hypothesis.given (Caffe2 also replayed one seeded example against its stored
    outputs; with none stored there is nothing to replay)."""
    return hypothesis.given(*given_args, **given_kwargs)


class SerializedTestCase(hu.HypothesisTestCase):
    """HypothesisTestCase whose reference checks would also compare with stored
    outputs; caffe2py stores none, so that comparison is skipped."""

    should_serialize = False

    def assertSerializedOperatorChecks(self, inputs, outputs, gradient_operator, op, device_option,
                                       atol=1e-7, rtol=1e-7):
        """Compare with the stored example: a no-op, no outputs are stored."""
        return None


def testWithArgs(argv=None):
    """Caffe2's test entry point: accepts its flags (-G generate, -O output dir,
    -D disable the serialized check, -C no coverage file), which change nothing
    here, and runs unittest.main on the remaining arguments."""
    parser = argparse.ArgumentParser()
    parser.add_argument("-G", "--generate-serialized", action="store_true", dest="generate",
                        help="Caffe2 wrote stored outputs; caffe2py stores none (ignored)")
    parser.add_argument("-O", "--output", default=None, help="ignored: no outputs are stored")
    parser.add_argument("-D", "--disable-serialized_check", action="store_true", dest="disable",
                        help="ignored: there is no serialized check to disable")
    parser.add_argument("-C", "--disable-gen-coverage", action="store_true", dest="disable_coverage",
                        help="ignored: no coverage file is written")
    parser.add_argument("unittest_args", nargs="*")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.generate:
        sys.stderr.write("serialized_test_util: caffe2py stores no serialized outputs; "
                         "running the tests without them\n")
    sys.argv[1:] = args.unittest_args
    unittest.main()
