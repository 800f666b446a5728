"""A one-line progress bar on stderr with a rate and an ETA, for long runs
(`caffe2py score`, `bench`, converting a large ONNX model).

It draws only when its stream is a terminal and CAFFE2PY_QUIET is not set (the
command line's --quiet sets it), so logs, pipes and CI output stay clean. With
`delay` it stays silent until the run has lasted that long: short runs print
nothing. It redraws at most every `interval` seconds, so updating it per row or
per batch costs a clock read.

    with Progress(total=rows, unit="rows", label="scoring") as bar:
        for batch in batches:
            ...
            bar.update(len(batch))
"""
import os
import sys
import time


def quiet():
    """CAFFE2PY_QUIET set to anything but '' or '0' (the same rule as the kernel notices)."""
    return os.environ.get("CAFFE2PY_QUIET", "") not in ("", "0")


def format_duration(seconds):
    """'42s', '3:07', '1:02:03' (h:mm:ss from an hour on)."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return "%ds" % seconds
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return "%d:%02d" % (minutes, secs)
    hours, minutes = divmod(minutes, 60)
    return "%d:%02d:%02d" % (hours, minutes, secs)


def format_rate(per_second, unit):
    if per_second >= 1e6:
        return "%.2fM %s/s" % (per_second / 1e6, unit)
    if per_second >= 1e4:
        return "%.1fk %s/s" % (per_second / 1e3, unit)
    if per_second >= 10:
        return "%.0f %s/s" % (per_second, unit)
    return "%.2f %s/s" % (per_second, unit)


class Progress:
    """Counts units done out of `total` (None: unknown) and draws
    `label [#####.....] done/total unit  rate  ETA` on `stream` (default stderr)."""

    WIDTH = 24

    def __init__(self, total=None, label="", unit="rows", stream=None, delay=0.0, interval=0.2,
                 enabled=None, clock=time.monotonic):
        self.total = total
        self.label = label
        self.unit = unit
        self.stream = sys.stderr if stream is None else stream
        self.delay = delay
        self.interval = interval
        self.clock = clock
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty()) and not quiet()
        self.enabled = enabled
        self.done = 0
        self.started = clock()
        self._last_draw = None
        self._drawn = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, n=1):
        self.done += n
        if not self.enabled:
            return
        now = self.clock()
        if now - self.started < self.delay:
            return
        if self._last_draw is not None and now - self._last_draw < self.interval \
                and (self.total is None or self.done < self.total):
            return
        self._draw(now)

    def line(self, now=None):
        """The bar's text at `now` (the clock's reading), without drawing it."""
        now = self.clock() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        parts = [self.label] if self.label else []
        if self.total:
            filled = min(self.WIDTH, self.WIDTH * self.done // self.total)
            parts.append("[%s%s]" % ("#" * filled, "." * (self.WIDTH - filled)))
            parts.append("%d/%d %s" % (self.done, self.total, self.unit))
        else:
            parts.append("%d %s" % (self.done, self.unit))
        parts.append(format_rate(rate, self.unit))
        if self.total and rate > 0 and self.done < self.total:
            parts.append("ETA %s" % format_duration((self.total - self.done) / rate))
        else:
            parts.append("%s" % format_duration(elapsed))
        return "  ".join(parts)

    def _draw(self, now):
        text = self.line(now)
        # pad over the previous, possibly longer, line
        self.stream.write("\r" + text + " " * max(0, getattr(self, "_last_len", 0) - len(text)))
        self.stream.flush()
        self._last_len = len(text)
        self._last_draw = now
        self._drawn = True

    def close(self):
        """Draw the final state (when the bar was shown at all) and end the line."""
        if self.enabled and self._drawn:
            self._draw(self.clock())
            self.stream.write("\n")
            self.stream.flush()
        self.enabled = False
