"""Concurrent substeps of a plan's execution step (ExecutionStep.concurrent_substeps):
each substep runs on its own thread against the same workspace, as in Caffe2, so a
producer substep and a consumer substep can talk through a blocking queue.

The step waits for every substep; the first error is raised afterwards. Like
Caffe2's, a failing substep does not interrupt a sibling blocked on a queue: close
the queues (CloseBlobsQueue) on the paths that end a pipeline.
"""
import threading


def run_substeps_concurrently(run_step, substeps):
    """run_step(substep) on one thread per substep; re-raise the first failure."""
    errors = []

    def body(sub):
        try:
            run_step(sub)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(sub,), name="substep %s" % (sub.name or i), daemon=True)
               for i, sub in enumerate(substeps)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
