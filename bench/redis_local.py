"""redis_local.py - one redis-server of a measurement's own: a free loopback
port, no persistence, started and waited for (bench/script_cost.py,
bench/group_cost.py)."""
import contextlib, socket, subprocess, time


@contextlib.contextmanager
def redis_server(binary='redis-server'):
    """Yields the port of a new redis-server that accepts connections; stops it after."""
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    srv = subprocess.Popen([binary, '--port', str(port), '--bind', '127.0.0.1', '--save', '',
                            '--appendonly', 'no'], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(('127.0.0.1', port), 0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        srv.terminate()
        srv.wait()
