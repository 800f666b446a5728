"""`python -m caffe2py.compat --legacy-hypothesis`: an op test written for hypothesis 3.x
(settings(timeout=...), average_size=, positional arrays(elements)) runs on today's
hypothesis for that run only; without the flag it fails with hypothesis's own error."""
import subprocess
import sys
import textwrap

LEGACY_TEST = textwrap.dedent("""
    import numpy as np
    import hypothesis.extra.numpy as hnp
    import hypothesis.strategies as st
    from hypothesis import given, settings
    from caffe2.python import core, workspace


    @settings(max_examples=5, timeout=100, max_shrinks=10, deadline=None)
    @given(values=hnp.arrays(np.int32, 4, st.integers(1, 9)),
           sizes=st.lists(st.integers(0, 3), min_size=1, max_size=4, average_size=2),
           word=st.text(alphabet=["a", "b"], average_size=3))
    def test_old_style(values, sizes, word):
        assert values.dtype == np.int32 and values.shape == (4,)
        assert ((values >= 1) & (values <= 9)).all()     # the positional elements were used
        assert 1 <= len(sizes) <= 4
        assert set(word) <= {"a", "b"}
        workspace.FeedBlob("v", values.astype(np.float32))
        workspace.RunOperatorOnce(core.CreateOperator("Scale", ["v"], ["w"], scale=2.0))
        np.testing.assert_array_equal(workspace.FetchBlob("w"), values * 2.0)
""")


def _pytest(tmp_path, *flags):
    (tmp_path / "old_style_test.py").write_text(LEGACY_TEST)
    return subprocess.run([sys.executable, "-m", "caffe2py.compat", *flags, "-m", "pytest", "-q",
                           "-p", "no:cacheprovider", "old_style_test.py"],
                          capture_output=True, text=True, cwd=tmp_path)


def test_old_hypothesis_keywords_accepted_with_the_flag(tmp_path):
    proc = _pytest(tmp_path, "--legacy-hypothesis")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    said = [line for line in proc.stderr.splitlines() if "--legacy-hypothesis" in line]
    assert len(said) == 1 and "timeout" in said[0]


def test_without_the_flag_hypothesis_says_why(tmp_path):
    proc = _pytest(tmp_path)
    assert proc.returncode != 0
    # hypothesis's own TypeError, not one of ours
    assert "unexpected keyword argument 'timeout'" in proc.stdout + proc.stderr
    assert "--legacy-hypothesis" not in proc.stderr


def test_installing_keeps_todays_keywords_and_refuses_doubles():
    code = textwrap.dedent("""
        import hypothesis, hypothesis.extra.numpy as hnp, hypothesis.strategies as st
        from caffe2py import legacy_hypothesis
        import io
        legacy_hypothesis.install(io.StringIO())
        assert legacy_hypothesis.install(io.StringIO()) == []     # twice patches nothing more
        s = hypothesis.settings(max_examples=7, timeout=3)
        assert s.max_examples == 7
        try:
            hnp.arrays("int32", 3, st.integers(0, 1), elements=st.integers(0, 1))
        except TypeError as exc:
            print("refused:", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "multiple values for argument 'elements'" in proc.stdout


def test_never_on_by_importing_caffe2py():
    code = ("import caffe2py, caffe2py.compat, hypothesis\n"
            "try:\n    hypothesis.settings(timeout=1)\nexcept TypeError:\n    print('refused')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "refused"


def test_text_with_alphabet_none_means_any_character():
    code = textwrap.dedent("""
        import io, hypothesis.strategies as st
        from hypothesis import given, settings
        from caffe2py import legacy_hypothesis
        legacy_hypothesis.install(io.StringIO())
        seen = []

        @settings(max_examples=20, deadline=None)
        @given(st.text(alphabet=None, average_size=3, max_size=5), st.text(None, max_size=2))
        def check(a, b):
            assert isinstance(a, str) and len(a) <= 5 and len(b) <= 2
            seen.append(a)
        check()
        print(len(seen))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 1
