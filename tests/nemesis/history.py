"""The history of a nemesis run: one JSON object a line, written as things
happen, every time on time.monotonic() (CLOCK_MONOTONIC, the clock redlockd
counts with, one for every process on the machine).

Records (checker.py reads them; see its docstring for what each field means):
  {"type":"meta", ...}                         the run's settings and seed
  {"type":"invoke","id","client","op","t",...} a request about to be sent
  {"type":"complete","id","t","status",...}    its answer (status null: none)
  {"type":"event","id","t","event",...}        a stream's line, t when READ;
        "end" when the server ended it, "close" when the client closed it
  {"type":"fault","fid","phase","kind","t",...} a fault's begin and end

Shared by every client, stream reader and the fault thread: one lock
guards the id counter, the list and the file."""
import json
import threading
import time


def now():
    return time.monotonic()


class History:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.records = []
        self.next_id = 1
        self.f = open(path, "w", buffering=1) if path else None   # a line at a time: complete if killed

    def _put(self, rec):
        # under self.lock
        self.records.append(rec)
        if self.f:
            self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def meta(self, **kw):
        with self.lock:
            self._put(dict(type="meta", t=now(), **kw))

    def invoke(self, client, op, **kw):
        """Records an invocation; returns its id. The time is taken last,
        just before the caller sends."""
        with self.lock:
            i = self.next_id
            self.next_id += 1
            self._put(dict(type="invoke", id=i, client=client, op=op, t=now(), **kw))
        return i

    def complete(self, i, status, t=None, **kw):
        with self.lock:
            self._put(dict(type="complete", id=i, t=now() if t is None else t, status=status, **kw))

    def event(self, i, event, t=None, **kw):
        with self.lock:
            self._put(dict(type="event", id=i, t=now() if t is None else t, event=event, **kw))

    def fault(self, fid, phase, kind, **kw):
        with self.lock:
            self._put(dict(type="fault", fid=fid, phase=phase, kind=kind, t=now(), **kw))

    def close(self):
        with self.lock:
            if self.f:
                self.f.close()
                self.f = None

    def snapshot(self):
        with self.lock:
            return list(self.records)


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
