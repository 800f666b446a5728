"""Caffe2's caffe2.python.parallel_workers: Python threads running a function in
a loop (the mechanism data_workers feeds models with).

    coordinator = parallel_workers.init_workers(worker_fun, num_worker_threads=2,
                                                worker_name="train", init_fun=None,
                                                shutdown_fun=None)
    coordinator.start()      # init_fun(worker_coordinator, global_coordinator), then the threads
    ...
    coordinator.stop()       # True when every thread ended within 5 s

Each thread calls worker_fun(worker_id) again and again until its coordinator
stops; an exception stops that coordinator (logged with the worker id).
init_workers returns the process-wide GlobalWorkerCoordinator, which starts and
stops every coordinator registered with it (and stops them at exit).
Worker ids are unique in the process. external_loggers get the worker metrics
(`log(metrics)`) after every call.
"""
import atexit
import collections
import logging
import threading
import time
import traceback
from abc import ABC, abstractmethod

log = logging.getLogger("parallel_workers")
log.setLevel(logging.INFO)
LOG_INT_SECS = 60

# Seconds stop() waits for each thread: a worker blocked in I/O may never return.
JOIN_TIMEOUT_SECS = 5.0


def init_workers(worker_fun, num_worker_threads=2, worker_name="train", init_fun=None, external_loggers=None,
                 shutdown_fun=None):
    metrics = Metrics(external_loggers)
    worker_ids = [global_coordinator.get_new_worker_id() for _ in range(num_worker_threads)]
    coordinator = WorkerCoordinator(worker_name, worker_ids, init_fun, shutdown_fun=shutdown_fun)
    coordinator._workers = [
        threading.Thread(target=run_worker, name="parallel_workers worker id {}".format(worker_id),
                         args=[coordinator, Worker(coordinator, worker_id, worker_fun, metrics)])
        for worker_id in worker_ids]
    global_coordinator.add(coordinator)
    return global_coordinator


class Metrics:
    """Sums (and counts) of values the workers report, handed to external loggers."""

    def __init__(self, external_loggers):
        self._metrics = collections.defaultdict(int)
        self._external_loggers = external_loggers

    def reset_metrics(self):
        self._metrics = collections.defaultdict(int)

    def log_metrics(self):
        for logger in self._external_loggers or ():
            try:
                logger.log(self._metrics)
            except Exception as exc:  # noqa: BLE001 - a logger must not stop the workers
                print("Failed to call ExternalLogger: {}".format(exc))

    def put_metric(self, key, value, count=True):
        self._metrics[key] += value
        if count:
            self._metrics["{}_count".format(key)] += 1


class State(ABC):
    """What a coordinator starts, stops and cleans up with its workers (data_workers' queues)."""

    @abstractmethod
    def start(self):
        pass

    @abstractmethod
    def stop(self):
        pass

    @abstractmethod
    def cleanup(self):
        pass


class WorkerCoordinator:
    def __init__(self, worker_name, worker_ids, init_fun, state=None, shutdown_fun=None):
        self._active = True
        self._started = False
        self._workers = []
        self._worker_name = worker_name
        self._worker_ids = worker_ids
        self._init_fun = init_fun
        self._state = state
        self._shutdown_fun = shutdown_fun

    def is_active(self):
        return self._active

    def init(self, global_coordinator):
        if self._init_fun and not self._started:
            self._init_fun(self, global_coordinator)

    def _start(self):
        if self._started:
            return
        self._active = True
        self._started = True
        if self._state:
            self._state.start()
        for worker in self._workers:
            worker.daemon = True
            worker.start()

    def _stop(self, reason=None):
        self._active = False
        if reason is not None:
            log.error("Data input failed due to an error: %s", reason)
        if self._shutdown_fun and self._started:
            self._shutdown_fun()
        if self._state:
            self._state.stop()
        self._started = False

    def _wait_finish(self, cleanup=None):
        print("Wait for workers to die: {}".format(self._worker_name))
        for worker in self._workers:
            if worker is not threading.current_thread() and worker.ident is not None:
                worker.join(JOIN_TIMEOUT_SECS)
        success = True
        for worker in self._workers:
            if worker.is_alive():
                print("Worker {} failed to close while waiting".format(worker))
                success = False
        if success and self._state:
            self._state.cleanup()
        print("All workers terminated: {}".format(success))
        return success

    def get_worker_ids(self):
        return self._worker_ids


class GlobalWorkerCoordinator:
    def __init__(self):
        self._coordinators = []
        self._fetcher_id_seq = 0
        self._worker_ids = []
        self.register_shutdown_handler()

    def add(self, coordinator):
        self._coordinators.append(coordinator)

    def get_new_worker_id(self):
        worker_id = self._fetcher_id_seq
        self._worker_ids.append(worker_id)
        self._fetcher_id_seq += 1
        return worker_id

    def get_worker_ids(self):
        return self._worker_ids

    def start(self):
        # every init runs before any thread starts
        for coordinator in self._coordinators:
            coordinator.init(self)
        for coordinator in self._coordinators:
            coordinator._start()

    def stop(self):
        """Stop every coordinator; True when all their threads ended."""
        for coordinator in self._coordinators:
            coordinator._stop()
        all_success = True
        for coordinator in self._coordinators:
            all_success = coordinator._wait_finish() and all_success
        self._coordinators = []
        return all_success

    def stop_coordinator(self, worker_name):
        """Stop the coordinators named worker_name only."""
        for coordinator in self._coordinators:
            if coordinator._worker_name == worker_name:
                coordinator._stop()
                coordinator._wait_finish()
        self._coordinators = [c for c in self._coordinators if c._worker_name != worker_name]

    def register_shutdown_handler(self):
        atexit.register(self.stop)


class Worker:
    def __init__(self, coordinator, worker_id, worker_fun=None, metrics=None):
        self._coordinator = coordinator
        self._worker_id = worker_id
        self._worker_fun = worker_fun
        self._metrics = metrics
        self._start_time = None

    def start(self):
        self._start_time = time.time()

    def run(self):
        self._worker_fun(self._worker_id)

    def handle_exception(self, exc):
        traceback.print_exc()
        log.exception("Exception in worker %s", self._worker_id)
        self._coordinator._stop("Exception in worker {}: {}".format(self._worker_id, exc))

    def finish(self):
        self._metrics.put_metric("worker_time", time.time() - self._start_time)
        self._metrics.log_metrics()


global_coordinator = GlobalWorkerCoordinator()


def run_worker(coordinator, worker):
    while coordinator.is_active():
        worker.start()
        try:
            worker.run()
        except Exception as exc:  # noqa: BLE001 - stops this coordinator, reported by handle_exception
            worker.handle_exception(exc)
        finally:
            worker.finish()
