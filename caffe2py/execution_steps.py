"""How a plan's execution steps run (Caffe2's plan executor), against a workspace.

A step holds either nets or substeps and runs them:

- `num_iter` times; until its `should_stop_blob` is true (checked after every
  net and substep) when it has one and no num_iter; else once;
- substeps one after another, or all at once on threads with
  `concurrent_substeps`;
- substeps with `run_every_ms` are reporters: each runs on its own thread every
  run_every_ms while the step's other substeps run, and once more after they
  have finished (so a reporter always sees the final state); a `report_net`
  runs the same way every `report_interval` seconds;
- `create_workspace`: in a new child workspace (every blob of the parent is
  visible and writing one writes the parent's; new blobs stay in the child and
  are gone when the step ends);
- `num_concurrent_instances` > 1: that many copies of the step at once, each with
  a workspace of its own when create_workspace is set.

Concurrent substeps share the step's workspace, as in Caffe2, so a producer and a
consumer can talk through a blocking queue. The first error of a substep,
instance or reporter is raised once the others have finished; like Caffe2's, a
failing substep does not interrupt a sibling blocked on a queue (close the
queues, CloseBlobsQueue, on the paths that end a pipeline).
"""
import threading

import numpy as np

from .errors import Caffe2Error


def run_step(ws, step):
    instances = step.num_concurrent_instances if step.num_concurrent_instances > 1 else 1
    if instances == 1:
        _run_instance(ws, step)
    else:
        _on_threads([lambda: _run_instance(ws, step)] * instances, "%s instance" % step.name)


def _run_instance(ws, step):
    if len(step.substep) and len(step.network):
        raise Caffe2Error("execution step '%s' has both substeps and networks" % step.name)
    if step.create_workspace:
        ws = ws.child("%s/%s" % (ws.name, step.name))
    reporters = [s for s in step.substep if s.run_every_ms > 0]
    substeps = [s for s in step.substep if s.run_every_ms <= 0]
    periodic = [_Periodic(lambda sub=sub: run_step(ws, sub), sub.run_every_ms / 1000.0, sub.name)
                for sub in reporters]
    if step.report_net:
        interval = max(step.report_interval, 1) if step.HasField("report_interval") else 1
        periodic.append(_Periodic(lambda: ws.run_net(step.report_net), float(interval), step.report_net))
    for p in periodic:
        p.start()
    try:
        _iterate(ws, step, substeps)
    finally:
        errors = [p.finish() for p in periodic]
    for error in errors:
        if error is not None:
            raise error


def _should_stop(ws, step):
    if not step.should_stop_blob:
        return False
    if not ws.has_blob(step.should_stop_blob):
        return False
    value = ws.blobs.get(step.should_stop_blob)
    return value is not None and bool(np.asarray(value).reshape(-1)[0])


def _iterate(ws, step, substeps):
    if step.HasField("num_iter"):
        iterations = step.num_iter
    elif step.should_stop_blob and not step.only_once:
        iterations = None                       # until the stop blob says so
    else:
        iterations = 1
    done = 0
    while iterations is None or done < iterations:
        if step.concurrent_substeps and len(substeps) > 1:
            _on_threads([lambda sub=sub: run_step(ws, sub) for sub in substeps], "substep")
            if _should_stop(ws, step):
                return
        else:
            for sub in substeps:
                run_step(ws, sub)
                if _should_stop(ws, step):
                    return
        for net_name in step.network:
            ws.run_net(net_name)
            if _should_stop(ws, step):
                return
        done += 1


def _on_threads(bodies, label):
    """Run each body on a thread of its own; raise the first failure afterwards."""
    errors = []

    def guarded(body):
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(body,), name="%s %d" % (label, i), daemon=True)
               for i, body in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


class _Periodic:
    """Runs `body` every `interval` seconds on a thread, and once more at finish()."""

    def __init__(self, body, interval, label):
        self.body = body
        self.interval = interval
        self.done = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._loop, name="reporter %s" % label, daemon=True)

    def start(self):
        self.thread.start()

    def _loop(self):
        stopping = False
        while not stopping:
            stopping = self.done.wait(self.interval)
            try:
                self.body()
            except BaseException as exc:  # noqa: BLE001 - raised by finish()'s caller
                self.error = exc
                return

    def finish(self):
        self.done.set()
        self.thread.join()
        return self.error
